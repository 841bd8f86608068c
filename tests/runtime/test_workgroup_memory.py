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
