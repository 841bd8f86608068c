"""Params of one variant used from two threads (an engine product sizing its results area
while a game thread runs the same variant): each run dispatches with its own params."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi

pytestmark = pytest.mark.gpu

YAML = """\
bindings:
  - { name: x, kind: buffer, access: read, element: f32 }
  - { name: y, kind: buffer, access: read_write, element: f32, count: "len(x)" }
params:
  - { name: a, type: f32 }
"""
WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    y_set(i, params.a * x_get(i));
}
"""


def test_results_bytes_landing_inside_a_run_does_not_lend_it_other_params(monkeypatch):
    # Review helper 147: results_bytes() validated its params outside the variant's lock and
    # left them as the packer's "last checked"; a run whose check had passed then packed its
    # bytes under the other set's fingerprint: 154 of 2000 runs with a=1 computed a=5 (two
    # threads). Here the other thread's call lands, deterministically, between a run's params
    # check and its packing (the run computes its dispatch geometry in between).
    v = abi.program(key="t147/params_race", schema=abi.parse(YAML, "race/bindings.yaml"), wgsl=WGSL, wgsl_path="race/kernel.wgsl").variant()
    x = np.arange(100, dtype=np.float32)
    geometry = v._geometry

    def other_thread_lands_here(domain):
        v.results_bytes(100, {"a": 5.0}, {"x": 100})
        return geometry(domain)

    monkeypatch.setattr(v, "_geometry", other_thread_lands_here)
    for a in (1.0, 5.0, 1.0, 2.0, 1.0):
        y = abi.read(v.run(n=100, inputs={"x": x}, params={"a": a}).outputs["y"])
        np.testing.assert_array_equal(y, np.float32(a) * x)
