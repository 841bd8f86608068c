"""WGSL's zeroed workgroup memory holds on every adapter (lavapipe does not zero it itself)."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.errors import CompileError

pytestmark = pytest.mark.gpu

YAML = """\
bindings:
  - { name: px, kind: buffer, access: read, element: u32 }
  - { name: bins, kind: buffer, access: read_write, element: u32, count: "16", atomic: true }
"""
# webgpufundamentals' workgroup histogram: per-workgroup atomics, then one global add per bin.
# It never clears local_bins: WGSL promises they start at zero.
HIST = """\
var<workgroup> local_bins: array<atomic<u32>, 16>;
var<workgroup> grid: array<array<f32, 4>, 8>;
var<workgroup> seen: u32;

@compute @workgroup_size(64)
fn main(PARAMS) {
    let i = zero_index(gid);
    if (i < zero_n()) {
        atomicAdd(&local_bins[px_get(i) % 16u], 1u);
    }
    if (LII == 0u) { seen = seen + u32(grid[7][3] == 0.0); }
    workgroupBarrier();
    if (LII < 16u) {
        bins_atomic_add(LII, atomicLoad(&local_bins[LII]) * seen);
    }
}
"""


@pytest.mark.parametrize("params,lii", [
    ("@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>", "lid.x"),
    ("@builtin(local_invocation_index) me: u32, @builtin(global_invocation_id) gid: vec3<u32>", "me"),
], ids=["lowering-adds-the-index", "users-own-index"])
def test_a_workgroup_histogram_that_never_clears_its_bins_counts_right(params, lii):
    body = HIST.replace("PARAMS", params).replace("LII", lii)
    v = abi.program(key=f"t13/wg/{lii}", schema=abi.parse(YAML), wgsl=body).variant()
    px = np.random.default_rng(3).integers(0, 16, 50_000).astype(np.uint32)
    want = np.bincount(px, minlength=16)
    for _ in range(2):
        np.testing.assert_array_equal(abi.read(v.run(n=px.size, inputs={"px": px}).outputs["bins"]), want)


def test_a_compile_error_after_the_rewired_entry_point_keeps_the_users_column():
    body = HIST.replace("PARAMS", "@builtin(global_invocation_id) gid: vec3<u32>").replace("LII", "0u")
    body = body.replace("fn main(@builtin(global_invocation_id) gid: vec3<u32>) {", "fn main(@builtin(global_invocation_id) gid: vec3<u32>) { let bad: i32 = 1.5;")
    program = abi.program(key="t13/wg/err", schema=abi.parse(YAML), wgsl=body, wgsl_path="wg.wgsl")
    with pytest.raises(CompileError) as info:
        program.variant()
    line = body.split("\n").index(next(r for r in body.split("\n") if "let bad" in r)) + 1
    row = body.split("\n")[line - 1]
    assert (info.value.line, info.value.col) == (line, row.index("bad") + 1)


WG_SUM_YAML = """\
bindings:
  - { name: src, kind: buffer, access: read, element: T }
  - { name: out, kind: buffer, access: read_write, element: T, count: "1" }
specialize:
  - { name: T, options: [u32, i32] }
"""
WG_SUM_DECLS = {
    "scalar": "var<workgroup> s: atomic<T>;",
    "array": "var<workgroup> s: array<atomic<T>, 3>;",
    "struct": "struct Acc { a: atomic<T>, b: T }\nvar<workgroup> s: Acc;",
}
WG_SUM_REFS = {"scalar": "s", "array": "s[1]", "struct": "s.a"}


@pytest.mark.parametrize("shape", list(WG_SUM_DECLS))
@pytest.mark.parametrize("t, dtype", [("u32", np.uint32), ("i32", np.int32)])
def test_a_workgroup_atomic_of_a_specialised_type_starts_at_zero_for_every_type(shape, t, dtype):
    """The zeroing stored 0u whatever T was: an atomic<T> of T = i32 did not compile, and the
    error named generated code (review helper 140)."""
    ref = WG_SUM_REFS[shape]
    wgsl = f"""{WG_SUM_DECLS[shape]}
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_index) l: u32) {{
    let i = zero_index(gid);
    if (i < zero_n()) {{ atomicAdd(&{ref}, src_get(i)); }}
    workgroupBarrier();
    if (l == 0u) {{ out_set(0u, atomicLoad(&{ref})); }}
}}
"""
    variant = abi.program(key=f"t/wg_atomic_{shape}", schema=abi.parse(WG_SUM_YAML, "wg.computeShader/bindings.yaml"), wgsl=wgsl).variant({"T": t})
    src = np.arange(-20, 30, dtype=np.int64).astype(dtype) if t == "i32" else np.arange(50, dtype=dtype)
    got = abi.read(variant.run(n=len(src), inputs={"src": src}).outputs["out"])
    assert got.tolist() == [int(src.astype(np.int64).sum())]


COPY_YAML = """\
bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "len(src)" }
"""
BIG_TILE = """\
// a tile cache sized for a desktop GPU
var<workgroup> tile: array<f32, WORDS>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    tile[i % 64u] = src_get(i);
    dst_set(i, src_get(i) + tile[0] * 0.0);
}
"""


def test_workgroup_memory_past_the_devices_own_limit_is_a_compile_error_at_the_users_line():
    # Review helper 203: 400,000 bytes of var<workgroup> compiled and ran on lavapipe (its
    # limit is 32,768): only a portability warning against WebGPU's 16 KiB. Past the device's
    # own limit the kernel is undefined on a driver that does not check: refused, at the line.
    limit = abi.device().limits["max-compute-workgroup-storage-size"]
    program = abi.program(key="t/big_tile", schema=abi.parse(COPY_YAML, "big/bindings.yaml"), wgsl=BIG_TILE.replace("WORDS", str(limit // 4 + 1)), wgsl_path="big/kernel.wgsl")
    with pytest.raises(CompileError, match=f"{limit + 16} bytes of workgroup memory; this device allows {limit}") as refused:
        program.variant()
    assert (refused.value.path, refused.value.line, refused.value.col) == ("big/kernel.wgsl", 2, 1)
    fits = abi.program(key="t/fit_tile", schema=abi.parse(COPY_YAML, "fit/bindings.yaml"), wgsl=BIG_TILE.replace("WORDS", str(limit // 4)), wgsl_path="fit/kernel.wgsl")
    src = np.arange(100, dtype=np.float32)
    np.testing.assert_array_equal(abi.read(fits.variant().run(n=100, inputs={"src": src}).outputs["dst"]), src)
