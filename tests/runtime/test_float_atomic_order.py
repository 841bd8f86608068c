"""f32 NAME_atomic_min/max under ``determinism: exact``: the stored bytes depend only on the
set of values, never on the order the invocations arrive in (IEEE 754 totalOrder)."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi

pytestmark = pytest.mark.gpu

YAML = """\
bindings:
  - { name: pts, kind: buffer, access: read, element: f32 }
  - { name: bounds, kind: buffer, access: read_write, element: f32, atomic: true }
"""
WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    bounds_atomic_min(0u, pts_get(i));
    bounds_atomic_max(1u, pts_get(i));
}
"""


def _total_order_key(words: np.ndarray) -> np.ndarray:
    """IEEE 754 totalOrder of f32 bit patterns as unsigned keys (an independent model)."""
    words = words.astype(np.uint64)
    return np.where(words >= 0x80000000, 0xFFFFFFFF - words, words + 0x80000000)


@pytest.mark.parametrize(
    "values",
    [
        [-0.0, 0.0],
        [0.0, -0.0, 0.0, -0.0, 1.0, -1.0],
        [3.5, -2.0, np.inf, -np.inf, 0.0, -0.0],
        [float("nan"), 1.0, -0.0, 2.0],
    ],
)
def test_float_atomic_min_max_bytes_do_not_depend_on_arrival_order(values):
    # Review helper 145: the compare-and-swap loop stored WGSL's min/max, which may answer
    # either of -0 and +0 (or a NaN): [-0, 0] gave min = max = the zero that came last.
    v = abi.program(key="t145/f32minmax", schema=abi.parse(YAML, "mm/bindings.yaml"), wgsl=WGSL, wgsl_path="mm/kernel.wgsl").variant()
    start = np.array([np.inf, -np.inf], np.float32)
    pts = np.array(values, np.float32)
    low = np.append(pts, start[0]).view(np.uint32)  # the min slot starts at +inf, the max slot at -inf
    high = np.append(pts, start[1]).view(np.uint32)
    want = [int(low[np.argmin(_total_order_key(low))]), int(high[np.argmax(_total_order_key(high))])]
    rng = np.random.default_rng(0)
    for _ in range(6):
        order = rng.permutation(len(pts))
        got = abi.read(v.run(n=len(pts), inputs={"pts": pts[order], "bounds": start}).outputs["bounds"]).view(np.uint32)
        assert [hex(w) for w in got] == [hex(w) for w in want], (pts[order], order)
