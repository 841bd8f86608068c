"""The seed's own example (shared/seeds/000, "Purpose" and "Usage"), verbatim: its schema,
its usage lines in Python, every specialisation, and `engine-plugin bake` of the schema."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import numpy as np
import pytest

from engine_plugin import abi

pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ASSET = os.path.join(ROOT, "assets", "seed", "seed.computeShader")

# The seed's schema exactly as the seed writes it.
SEED_YAML = """\
bindings:
  - { name: cols, kind: columns, access: read }
  - { name: src,  kind: buffer, access: read, element: T }
  - { name: dst,  kind: buffer, access: read_write, element: T, count: "len(src)" }
  - { name: hits, kind: buffer, access: read_write, element: vec4<f32>, capacity: "n * 4", append: true }
specialize:
  - { name: T,    options: [f32, i32, vec2<f32>, vec3<f32>, vec4<f32>] }
  - { name: FOLD, options: [add, min, max, mean, set] }
  - { name: BODY, kind: source }
determinism: exact
"""
TYPES = {"f32": (np.float32, 1), "i32": (np.int32, 1), "vec2<f32>": (np.float32, 2), "vec3<f32>": (np.float32, 3), "vec4<f32>": (np.float32, 4)}
FOLDS = ["add", "min", "max", "mean", "set"]


def body() -> str:
    with open(os.path.join(ASSET, "kernel.wgsl"), encoding="utf-8") as f:
        return f.read()


def expected(src: np.ndarray, fold: str, weight: np.ndarray | None) -> np.ndarray:
    a = src * (weight.reshape(-1, *([1] * (src.ndim - 1))).astype(src.dtype) if weight is not None else 1)
    b = np.concatenate([src[1:], src[-1:]])
    if fold == "add":
        return a + b
    if fold == "min":
        return np.minimum(a, b)
    if fold == "max":
        return np.maximum(a, b)
    if fold == "mean":
        return (a + b) // 2 if src.dtype == np.int32 else (a + b) / np.float32(2)
    return a


def test_the_asset_holds_the_seeds_schema_verbatim():
    with open(os.path.join(ASSET, "bindings.yaml"), encoding="utf-8") as f:
        text = f.read()
    assert SEED_YAML in text


def test_the_seeds_usage_lines_work_as_written():
    schema = abi.parse(SEED_YAML)
    program = abi.program(key="my_kernel", schema=schema, wgsl=body())
    variant = program.variant(specialize={"T": "vec3<f32>"})  # FOLD unset: its first option; BODY unset
    src_buffer = np.arange(12, dtype=np.float32).reshape(4, 3)
    run = variant.run(n=4, inputs={"src": src_buffer})  # cols unbound: an empty table
    values = abi.read(run.outputs["dst"].buffer)
    np.testing.assert_array_equal(values, expected(src_buffer, "add", None))
    assert run.outputs["hits"].count == 4


@pytest.mark.parametrize("T,FOLD", list(itertools.product(TYPES, FOLDS)))
def test_every_specialisation_of_the_seed_matches_numpy(T, FOLD):
    dtype, lanes = TYPES[T]
    program = abi.program(key="my_kernel", schema=abi.parse(SEED_YAML), wgsl=body())
    variant = program.variant(specialize={"T": T, "FOLD": FOLD})
    rng = np.random.default_rng(len(T) * 7 + FOLDS.index(FOLD))
    shape = (6,) if lanes == 1 else (6, lanes)
    src = rng.integers(1, 50, shape).astype(dtype)
    weight = rng.integers(1, 4, 6).astype(np.float32)
    for table in (None, abi.table({"weight": weight})):
        run = variant.run(n=6, inputs={"src": src} if table is None else {"src": src, "cols": table})
        np.testing.assert_array_equal(abi.read(run.outputs["dst"]), expected(src, FOLD, None if table is None else weight))
        hits = abi.read(run.outputs["hits"])
        np.testing.assert_array_equal(hits[:, 0], np.arange(6, dtype=np.float32))
        assert np.all(hits[:, 1] == FOLDS.index(FOLD)) and run.outputs["hits"].overflow is None


def test_engine_plugin_bake_bakes_the_seeds_schema_as_written(tmp_path):
    cache = tmp_path / "cache"
    proc = subprocess.run(
        [sys.executable, "-m", "engine_plugin.cli", "bake", ASSET, "--cache", str(cache), "--jobs", "1"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    entries = [p for p in cache.rglob("*.msgpack") if "usage" not in p.name]
    assert len(entries) == 25  # every T x FOLD, BODY left as written
