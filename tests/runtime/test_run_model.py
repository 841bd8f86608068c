"""A model-based fuzzer of runs: several kernels share one device and its buffer pool; runs
are chained, outputs dropped at random points, inside and outside ``abi.batch()``. Every read
must equal an independent numpy model in which each output starts from zeros."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from engine_plugin import abi

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("young_gc")]

N = 48  # elements per run (pooled buffers of one size class: maximal reuse)

KERNELS = {
    # writes only where src > t: the rest must read as zeros
    "where": ("""\
bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "len(src)" }
params:
  - { name: t, type: f32 }
""", """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    if (src_get(i) > params.t) { dst_set(i, src_get(i) * 2.0); }
}
"""),
    # accumulates into its output: pooled leftovers would add up
    "hist": ("""\
bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: dst, kind: buffer, access: read_write, element: u32, count: "len(src)", atomic: true }
""", """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let b = u32(clamp(src_get(i), 0.0, f32(arrayLength(&dst) - 1u)));
    dst_atomic_add(b, 1u);
}
"""),
    "add": ("""\
bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "len(src)" }
params:
  - { name: k, type: f32 }
""", """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, src_get(i) + params.k);
}
"""),
}


def variant(name: str):
    yaml, wgsl = KERNELS[name]
    return abi.program(key=f"t13/model/{name}", schema=abi.parse(yaml), wgsl=wgsl).variant()


def model(name: str, src: np.ndarray, value: float) -> np.ndarray:
    """What the kernel computes, from zeros."""
    src = src.astype(np.float32)
    if name == "where":
        return np.where(src > np.float32(value), src * np.float32(2.0), np.float32(0.0)).astype(np.float32)
    if name == "hist":
        bins = np.clip(src, 0, N - 1).astype(np.uint32)
        return np.bincount(bins, minlength=N).astype(np.uint32)
    return (src + np.float32(value)).astype(np.float32)


values = st.lists(st.integers(-8, 60).map(float), min_size=N, max_size=N).map(lambda v: np.array(v, np.float32))


class RunModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.live: list[tuple[object, np.ndarray, str]] = []  # (Output, expected, kernel)
        self.batch = None

    @rule(name=st.sampled_from(sorted(KERNELS)), src=values, value=st.integers(-5, 40).map(float))
    def run_on_host_data(self, name, src, value):
        params = {"t": value} if name == "where" else {"k": value} if name == "add" else None
        out = variant(name).run(n=N, inputs={"src": src}, params=params).outputs["dst"]
        self.live.append((out, model(name, src, value), name))

    @precondition(lambda self: any(k != "hist" for _, _, k in self.live))
    @rule(data=st.data(), name=st.sampled_from(["where", "add", "hist"]), value=st.integers(-5, 40).map(float))
    def run_chained(self, data, name, value):
        f32 = [x for x in self.live if x[2] != "hist"]
        source, expected, _ = data.draw(st.sampled_from(f32))
        params = {"t": value} if name == "where" else {"k": value} if name == "add" else None
        out = variant(name).run(n=N, inputs={"src": source}, params=params).outputs["dst"]
        self.live.append((out, model(name, expected, value), name))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def drop(self, data):
        self.live.pop(data.draw(st.integers(0, len(self.live) - 1)))
        gc.collect()

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def read(self, data):
        out, expected, _ = data.draw(st.sampled_from(self.live))
        np.testing.assert_array_equal(abi.read(out), expected)

    @precondition(lambda self: self.batch is None)
    @rule()
    def open_batch(self):
        self.batch = abi.batch()
        self.batch.__enter__()

    @precondition(lambda self: self.batch is not None)
    @rule()
    def close_batch(self):
        self.batch.__exit__(None, None, None)
        self.batch = None

    @invariant()
    def bounded(self):
        while len(self.live) > 12:
            self.live.pop(0)

    def teardown(self):
        if self.batch is not None:
            self.batch.__exit__(None, None, None)
        for out, expected, _ in self.live:
            np.testing.assert_array_equal(abi.read(out), expected)
        self.live.clear()
        gc.collect()


TestRunModel = RunModel.TestCase
TestRunModel.settings = settings(max_examples=30, stateful_step_count=30, deadline=None, suppress_health_check=list(HealthCheck))
