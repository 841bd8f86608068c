"""The msgpack variant store: round trips, atomic writes, bad entries as counted misses that
are replaced, LRU eviction under a cap, concurrent writers, layering."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import time

import msgpack
import pytest
from cache_support import REPO, reference_variants

from engine_plugin.cache import VariantCache, decode_entry, encode_entry, store
from engine_plugin.cache.entry import entry_header
from engine_plugin.lowering import LOWERING_VERSION


@pytest.fixture
def folder(tmp_path) -> str:
    return str(tmp_path / "cache")


def test_put_then_get_round_trips_a_lowered_variant(folder):
    cache = VariantCache(folder)
    key, lowered = reference_variants()[3]
    assert cache.get(key) is None
    assert cache.put(key, lowered)
    assert os.listdir(folder) == [key + ".msgpack"]  # one file per variant, no temp left over
    again = VariantCache(folder).get(key)
    assert again == lowered and again.fingerprint == lowered.fingerprint
    st = cache.stats(scan=True)
    assert (st.hits, st.misses, st.writes, st.entries) == (0, 1, 1, 1)


def test_an_entry_holds_everything_needed_to_compile_without_lowering(folder):
    cache = VariantCache(folder)
    key, lowered = reference_variants()[0]
    cache.put(key, lowered)
    with open(cache.path(key), "rb") as f:
        data = f.read()
    header = entry_header(data)
    assert header["magic"] == "engine_plugin.variant" and header["key"] == key and header["lowering"] == LOWERING_VERSION
    assert header["asset"].endswith("reference.computeShader/kernel.wgsl")
    assert dict(header["spec"]) == lowered.spec.as_dict()
    back = decode_entry(key, data)
    for field in ("source", "bindings", "params", "host_slots", "columns", "source_map", "workgroup", "determinism", "asset", "spec"):
        assert getattr(back, field) == getattr(lowered, field), field
    assert isinstance(back.bindings, tuple) and isinstance(back.source_map.entries[0], tuple)
    assert hash(back.spec) == hash(lowered.spec)  # usable as the variant key it is


def test_writes_go_through_a_temp_file_in_the_same_folder_then_os_replace(folder, monkeypatch):
    cache = VariantCache(folder)
    key, lowered = reference_variants()[1]
    seen = []
    real_replace, real_fsync = os.replace, os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (seen.append("fsync"), real_fsync(fd))[1])

    def replace(src, dst):
        seen.append((os.path.dirname(src), os.path.basename(src), dst))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    cache.put(key, lowered)
    assert seen[0] == "fsync"
    src_dir, src_name, dst = seen[1]
    assert src_dir == cache.folder and src_name.startswith(".tmp-") and dst == cache.path(key)


def _corrupt(kind: str, cache: VariantCache, key: str, lowered) -> None:
    path = cache.path(key)
    good = encode_entry(key, lowered)
    if kind == "garbage":
        data = os.urandom(len(good))
    elif kind == "truncated":
        data = good[: len(good) * 2 // 3]
    elif kind == "empty":
        data = b""
    elif kind == "other_format_version":
        data = encode_entry(key, lowered, format_version=999)
    elif kind == "other_lowering_version":
        env = msgpack.unpackb(good, raw=False)
        env["lowering"] = LOWERING_VERSION + "0"
        data = msgpack.packb(env, use_bin_type=True)
    elif kind == "other_layout":
        env = msgpack.unpackb(good, raw=False)
        env["layout"] = "0" * 16
        data = msgpack.packb(env, use_bin_type=True)
    elif kind == "flipped_byte":
        i = len(good) // 2
        data = good[:i] + bytes([good[i] ^ 0x20]) + good[i + 1 :]
    elif kind == "other_key":
        data = encode_entry("f" * 64, lowered)
    elif kind == "not_a_file":
        os.remove(path)
        os.makedirs(path)
        return
    else:
        raise AssertionError(kind)
    with open(path, "wb") as f:
        f.write(data)


BAD = ["garbage", "truncated", "empty", "other_format_version", "other_lowering_version", "other_layout", "flipped_byte", "other_key", "not_a_file"]


@pytest.mark.parametrize("kind", BAD)
def test_a_bad_entry_is_a_counted_logged_miss_and_is_rewritten(folder, kind, caplog):
    key, lowered = reference_variants()[2]
    VariantCache(folder).put(key, lowered)
    cache = VariantCache(folder)
    _corrupt(kind, cache, key, lowered)
    with caplog.at_level(logging.WARNING, logger="engine_plugin.cache"):
        assert cache.get(key) is None
    st = cache.stats()
    assert (st.misses, st.corrupt, st.hits) == (1, 1, 0)
    assert any("unusable" in r.getMessage() and key[:16] in r.getMessage() for r in caplog.records)
    assert cache.put(key, lowered)  # what a program does after a miss
    assert VariantCache(folder).get(key) == lowered
    assert VariantCache(folder).verify() == {}


@pytest.mark.parametrize(("call", "code"), [("open", errno.EMFILE), ("open", errno.EACCES), ("read", errno.EIO)])
@pytest.mark.parametrize("lookup", ["get", "get_lowered_from"])
def test_an_entry_that_cannot_be_read_now_is_a_miss_that_stays_for_the_next_read(folder, monkeypatch, caplog, call, code, lookup):
    # A transient I/O error (too many open files, a permission, a disk hiccup) said nothing
    # about what the file holds, yet get() counted the entry corrupt and deleted it (review
    # helper 224); get_lowered_from is the bake's skip check.
    key, lowered = reference_variants()[2]
    VariantCache(folder).put(key, lowered)
    cache = VariantCache(folder)
    path = cache.path(key)
    texts = lowered.source_map.texts
    derived = (texts[0], texts[1], lowered.spec, tuple(texts[2:]))

    def look() -> object:
        return cache.get(key) if lookup == "get" else cache.get_lowered_from(key, derived)[0]

    real = getattr(store.os, call)

    def failing(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(store.os, call, failing)
    with caplog.at_level(logging.WARNING, logger="engine_plugin.cache"):
        assert look() is None
    monkeypatch.setattr(store.os, call, real)
    assert os.path.isfile(path)
    st = cache.stats()
    assert (st.misses, st.corrupt) == (1, 0)
    assert "removed" not in caplog.text and f"cannot be read now ({os.strerror(code)})" in caplog.text
    assert look() == lowered
    assert cache.stats().hits == 1


def test_a_bad_entry_under_a_program_is_relowered_and_replaced(folder, gpu):
    # The same, end to end: a program over the store meets garbage, lowers, and rewrites it.
    from engine_plugin import abi
    from engine_plugin.runtime import lowering_count

    key, lowered = reference_variants()[5]
    with open(os.path.join(REPO, "assets/samples/reference.computeShader/kernel.wgsl")) as f:
        wgsl = f.read()
    with open(os.path.join(REPO, "assets/samples/reference.computeShader/bindings.yaml")) as f:
        schema = abi.parse(f.read(), "assets/samples/reference.computeShader/bindings.yaml")
    cache = VariantCache(folder)
    os.makedirs(folder, exist_ok=True)
    with open(cache.path(key), "wb") as f:
        f.write(b"\x93garbage")
    before = lowering_count()
    prog = abi.program(
        key=f"corrupt-test-{time.time_ns()}", schema=schema, wgsl=wgsl, wgsl_path="assets/samples/reference.computeShader/kernel.wgsl", store=cache, device=gpu
    )
    got = prog.lowered(lowered.spec)
    assert got.source == lowered.source
    assert lowering_count() == before + 1 and cache.stats().corrupt == 1
    assert VariantCache(folder).get(key) is not None


def test_lru_eviction_under_a_small_cap_keeps_what_was_used_recently(folder):
    variants = reference_variants()[:10]
    size = len(encode_entry(*variants[0]))
    cache = VariantCache(folder, max_bytes=int(size * 6.5))  # room for six entries
    for key, lowered in variants[:6]:
        cache.put(key, lowered)
    assert cache.get(variants[0][0]) is not None  # the oldest write, now the most recent use
    for key, lowered in variants[6:]:
        cache.put(key, lowered)
    st = cache.stats(scan=True)
    assert st.bytes <= cache.max_bytes and st.evictions >= 4
    present = {i.key for i in cache.entries()}
    assert variants[0][0] in present, "a recently used entry was evicted"
    assert variants[1][0] not in present and variants[2][0] not in present, "the least recently used survived"
    assert variants[9][0] in present and variants[8][0] in present
    assert st.entries == len(present) and st.evictions == 10 - len(present)


def _with_temp_files(folder: str, entries: int) -> tuple[VariantCache, str, str]:
    """A cache of ``entries`` entries beside a stale temporary file (an hour old: a writer that
    died) and a fresh one (a live writer's, about to be renamed into place)."""
    cache = VariantCache(folder, max_bytes=None)
    for key, lowered in reference_variants()[:entries]:
        cache.put(key, lowered)
    stale = os.path.join(folder, ".tmp-deadbeef-1-00000000")
    fresh = os.path.join(folder, ".tmp-deadbeef-2-00000000")
    for p in (stale, fresh):
        with open(p, "wb") as f:
            f.write(b"half an entry")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    return cache, stale, fresh


def test_gc_evicts_to_a_cap_and_removes_stale_temp_files(folder):
    cache, stale, fresh = _with_temp_files(folder, 8)
    size = cache.stats(scan=True).bytes
    evicted = cache.gc(max_bytes=size // 2)
    assert evicted >= 4 and cache.stats(scan=True).bytes <= size // 2
    assert not os.path.exists(stale) and os.path.exists(fresh)  # a live writer's temp is left alone


def test_clear_leaves_a_live_writers_temp_file_and_removes_stale_ones(folder):
    # `cache clear` during a bake removed the bake's in-flight temporaries, so their renames
    # failed and variants failed with "disk full or read-only?" (review helper 117).
    cache, _stale, fresh = _with_temp_files(folder, 3)
    assert cache.clear() == 3
    assert sorted(os.listdir(folder)) == [os.path.basename(fresh)]


def test_a_write_whose_temp_file_vanishes_names_the_reason(folder, monkeypatch):
    import engine_plugin.cache.store as store_module

    cache = VariantCache(folder, max_bytes=None)
    key, lowered = reference_variants()[0]
    real = store_module.write_atomic

    def cleared_meanwhile(path, data, **kwargs):  # another process removed the temp before the rename
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(store_module, "write_atomic", cleared_meanwhile)
    assert cache.put(key, lowered) is False
    assert cache.write_error(key) == "No such file or directory"
    assert cache.write_error(key) is None  # said once
    monkeypatch.setattr(store_module, "write_atomic", real)
    assert cache.put(key, lowered) is True


def test_a_failed_write_is_counted_and_logged_not_raised(folder, monkeypatch, caplog):
    cache = VariantCache(folder)
    key, lowered = reference_variants()[0]
    real_open = os.open

    def full_disk(path, *args, **kwargs):
        if os.path.basename(path).startswith(".tmp-"):
            raise OSError(28, "No space left on device")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", full_disk)
    with caplog.at_level(logging.WARNING, logger="engine_plugin.cache"):
        assert cache.put(key, lowered) is False
        # A full disk fails every later write too: counted each time, logged once (a game's log
        # got a line a write, a bake each failure twice: review helper 128).
        assert [cache.put(k, lw) for k, lw in reference_variants()[1:4]] == [False] * 3
    assert cache.stats().write_errors == 4 and "No space left" in caplog.text
    assert len([r for r in caplog.records if "cannot write" in r.getMessage()]) == 1
    assert os.listdir(folder) == []


def test_a_cache_path_that_is_a_file_is_a_cache_error(tmp_path):
    from engine_plugin.errors import CacheError

    p = tmp_path / "not-a-folder"
    p.write_text("x")
    with pytest.raises(CacheError, match="not a folder|cannot create"):
        VariantCache(str(p))


def test_keys_must_be_variant_keys(folder):
    with pytest.raises(ValueError, match="64 lowercase hex"):
        VariantCache(folder).get("../../etc/passwd")


def test_two_processes_baking_the_same_variants_concurrently_leave_every_entry_readable(folder):
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bake_worker.py")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, worker, folder, "20"], env=env) for _ in range(2)]
    variants = reference_variants()
    torn = []
    reads = 0
    # Read while they write: a reader must only ever see a whole entry (old or new).
    while any(p.poll() is None for p in procs):
        for key, _ in variants:
            try:
                with open(os.path.join(folder, key + ".msgpack"), "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue
            reads += 1
            try:
                decode_entry(key, data)
            except Exception as exc:  # noqa: BLE001 - any failure here is a torn entry
                torn.append((key, exc))
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert reads > 0
    assert torn == []
    cache = VariantCache(folder)
    for key, lowered in variants:
        assert cache.get(key) == lowered
    st = cache.stats(scan=True)
    assert (st.corrupt, st.entries, st.temp_files) == (0, len(variants), 0)


def test_the_cache_package_does_not_import_wgpu():
    code = "import sys, engine_plugin.cache, engine_plugin.assets.folder; print('wgpu' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "False"


def test_every_reference_variant_decodes_to_what_the_lowering_produced():
    from engine_plugin.lowering import Lowered

    for key, lowered in reference_variants():
        back = decode_entry(key, encode_entry(key, lowered))
        assert back == lowered == Lowered.from_dict(lowered.to_dict())
        assert back.fingerprint == lowered.fingerprint


def test_records_shared_by_variants_are_decoded_once_and_shared():
    (k1, l1), (k2, l2) = reference_variants()[0], reference_variants()[1]
    a, b = decode_entry(k1, encode_entry(k1, l1)), decode_entry(k2, encode_entry(k2, l2))
    assert l1.bindings[0] == l2.bindings[0]
    assert a.bindings[0] is b.bindings[0]  # immutable records: one object serves both
    assert a is not b and a.source != b.source


def test_puts_on_many_threads_over_the_cap_count_each_eviction_once(folder):
    # A bake's writer threads each crossing the cap ran gc together and each counted the
    # files the others removed: "evicted 76 entries" of 52 written, 9 left (review helper 117).
    import threading

    variants = reference_variants()
    size = len(encode_entry(*variants[0]))
    cache = VariantCache(folder, max_bytes=4 * size)
    start = threading.Barrier(8)

    def writer(part):
        start.wait()
        for key, lowered in part:
            cache.put(key, lowered)

    threads = [threading.Thread(target=writer, args=(variants[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    left = len(list(cache.entries()))
    assert cache.stats().evictions + left == len(variants), (cache.stats().evictions, left, len(variants))


def test_an_entry_written_by_a_build_with_other_lowering_code_is_never_served(folder, tmp_path):
    # Review helper 149: two lowering fixes did not bump the hand-kept LOWERING_VERSION, so
    # entries baked before them were served after the upgrade (old generated code, old wrong
    # numbers) and a bake called them up to date. The version carries the lowering code's hash:
    # any edit of it makes every older entry a counted miss, rebaked.
    import shutil

    cache = VariantCache(folder)
    key, lowered = reference_variants()[0]
    cache.put(key, lowered)
    other = tmp_path / "other_build"
    shutil.copytree(os.path.join(REPO, "engine_plugin"), other / "engine_plugin", ignore=shutil.ignore_patterns("__pycache__"))
    with open(other / "engine_plugin" / "lowering" / "emit.py", "a") as f:
        f.write("\n# a fix in the generated code\n")
    script = (
        "import sys\n"
        "from engine_plugin.cache import VariantCache\n"
        "from engine_plugin.lowering import LOWERING_VERSION\n"
        f"print(LOWERING_VERSION); print(VariantCache({folder!r}).get({key!r}) is None)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(other)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=120)
    assert done.returncode == 0, done.stderr
    version, missed = done.stdout.split()
    assert version != LOWERING_VERSION and version.split(".")[0] == LOWERING_VERSION.split(".")[0]
    assert missed == "True"  # the entry this build wrote is not served by the other (and is replaced)
