"""Warm start: a library over a cache another library filled lowers nothing, and the entries
it reads name its own files; the usage log records what was requested."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from cache_support import REPO

from engine_plugin import abi
from engine_plugin.assets import AssetLibrary
from engine_plugin.cache import read_usage
from engine_plugin.errors import CompileError
from engine_plugin.lowering import enumerate_variants
from engine_plugin.runtime import lowering_count

pytestmark = pytest.mark.gpu


def _copy_samples(dest: str) -> str:
    shutil.copytree(os.path.join(REPO, "assets", "samples"), dest)
    return dest


def test_a_second_library_over_the_same_cache_lowers_nothing(tmp_path, gpu):
    cache = str(tmp_path / "cache")
    first = AssetLibrary(_copy_samples(str(tmp_path / "a")), cache=cache, device=gpu)
    ref = first.load("reference.computeShader")
    specs = enumerate_variants(ref.program().schema)
    assert len(specs) == 25
    before = lowering_count()
    for spec in specs:
        ref.program().variant(spec)
    assert lowering_count() - before == 25

    # Another checkout of the same assets (another program under the key), same cache.
    second = AssetLibrary(_copy_samples(str(tmp_path / "b")), cache=cache, device=gpu)
    ref2 = second.load("reference.computeShader")
    assert ref2.program() is not ref.program()
    before = lowering_count()
    for spec in specs:
        ref2.program().variant(spec)
    assert lowering_count() == before, "a warm start lowered"
    st = second.cache.stats()
    assert (st.hits, st.misses, st.corrupt) == (25, 0, 0)

    # The cached entries were rebased onto the second checkout's own files.
    variant = ref2.program().variant({"T": "f32", "FOLD": "add"})
    assert variant.lowered.source_map.files[1].startswith(str(tmp_path / "b"))
    src = np.arange(8, dtype=np.float32)
    run = variant.run(n=8, inputs={"src": src, "cols": abi.table({"w": np.full(8, 2.0, np.float32)})})
    assert abi.read(run.outputs["dst"]).tolist() == [1.0, 4.0, 7.0, 10.0, 13.0, 16.0, 19.0, 21.0]


def test_the_usage_log_records_the_variants_requested(tmp_path, gpu):
    cache = str(tmp_path / "cache")
    lib = AssetLibrary(_copy_samples(str(tmp_path / "a")), cache=cache, device=gpu, record_usage=True)
    ref = lib.load("reference.computeShader")
    a = ref.program().variant({"T": "f32", "FOLD": "add"}).spec
    b = ref.program().variant({"T": "vec3<f32>", "FOLD": "max"}).spec
    lib.close()
    usage = read_usage(os.path.join(cache, "usage.msgpack"))
    assert usage == {"reference.computeShader": sorted([a, b], key=lambda s: (s.values, s.columns))}

    # A second run adds to the log rather than replacing it (and cache hits count as requests).
    lib2 = AssetLibrary(_copy_samples(str(tmp_path / "b")), cache=cache, device=gpu, record_usage=True)
    c = lib2.load("reference.computeShader").program().variant({"T": "i32", "FOLD": "min"}).spec
    lib2.load("reference.computeShader").program().variant({"T": "f32", "FOLD": "add"})
    lib2.close()
    usage = read_usage(os.path.join(cache, "usage.msgpack"))
    assert set(usage["reference.computeShader"]) == {a, b, c}


def test_a_game_that_exits_without_closing_its_library_still_leaves_its_usage_log(tmp_path):
    # Review helper 204: the README's shared-cache example (record_usage=True, no close())
    # wrote no log at exit, and bake --variants-from then said "a game writes one with
    # AssetLibrary(record_usage=True)". The records are flushed when the process exits.
    import subprocess
    import sys

    root, cache = _copy_samples(str(tmp_path / "a")), str(tmp_path / "cache")
    game = (
        "from engine_plugin.assets import AssetLibrary\n"
        f"lib = AssetLibrary({root!r}, cache={cache!r}, record_usage=True)\n"
        "lib.load('reference.computeShader').program().variant({'T': 'f32', 'FOLD': 'max'})\n"
    )
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", game], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    usage = read_usage(os.path.join(cache, "usage.msgpack"))
    assert [s.as_dict() for s in usage["reference.computeShader"]] == [{"BODY": "v", "FOLD": "max", "T": "f32"}], usage


def test_a_malformed_usage_log_is_ignored_not_fatal(tmp_path):
    path = tmp_path / "usage.msgpack"
    path.write_bytes(b"\x00garbage")
    assert read_usage(str(path)) == {}


def test_a_variant_that_fails_to_compile_is_not_logged_as_used(tmp_path, gpu):
    """Review helper 149: a variant whose compile failed in a game was written to the usage
    log, so ``bake --variants-from`` failed on it until the log was cleared. The log lists
    variants the game ran: a spec is recorded once its pipeline exists."""
    folder = tmp_path / "a" / "k.computeShader"
    folder.mkdir(parents=True)
    (folder / "bindings.yaml").write_text(
        "bindings:\n"
        "  - { name: x, kind: buffer, access: read, element: T }\n"
        '  - { name: y, kind: buffer, access: read_write, element: T, count: "len(x)" }\n'
        "specialize:\n"
        "  - { name: T, options: [f32, i32] }\n"
    )
    (folder / "kernel.wgsl").write_text(
        "@compute @workgroup_size(64)\n"
        "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
        "    let i = gid.x;\n"
        "    if (i >= x_len()) { return; }\n"
        "    let h: f32 = 1.5;\n"
        "    y_set(i, x_get(i) * h);\n"  # i32 * f32: T = i32 lowers, then fails to compile
        "}\n"
    )
    cache = str(tmp_path / "cache")
    lib = AssetLibrary(str(tmp_path / "a"), cache=cache, device=gpu, record_usage=True)
    ref = lib.load("k.computeShader")
    good = ref.program().variant({"T": "f32"}).spec
    with pytest.raises(CompileError, match=r"kernel\.wgsl:6:"):
        ref.program().variant({"T": "i32"})
    with pytest.raises(CompileError):  # asked again: still refused, still not logged
        ref.program().variant({"T": "i32"})
    lib.close()
    assert read_usage(os.path.join(cache, "usage.msgpack")) == {"k.computeShader": [good]}
