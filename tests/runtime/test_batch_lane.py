"""Repeats recorded into a batch's lane (``Variant._run_lane``): a run that repeats the last
one recorded in this thread's batch appends its record without the general checks. Every way
the lane can go stale between two runs (other params or inputs, another kernel recorded in
between, a read that submits the batch so far, a nested batch, a destroyed buffer, a batch of
another thread) must leave each run's output exactly what an independent numpy model says."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
import wgpu
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from engine_plugin import abi
from engine_plugin.device.context import get_context

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("young_gc")]

N = 40
YAML = """\
bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "len(src)" }
params:
  - { name: k, type: f32 }
"""
BODIES = {
    "add": "dst_set(i, src_get(i) + params.k);",
    "mul": "dst_set(i, src_get(i) * params.k);",
}


def _variant(name: str):
    wgsl = f"""\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{
    let i = zero_index(gid);
    if (i >= zero_n()) {{ return; }}
    {BODIES[name]}
}}
"""
    return abi.program(key=f"lane/{name}", schema=abi.parse(YAML), wgsl=wgsl).variant()


def _model(name: str, src: np.ndarray, k: float) -> np.ndarray:
    return (src + np.float32(k)) if name == "add" else (src * np.float32(k))


def _buffer(data: np.ndarray):
    device = get_context().device
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST | wgpu.BufferUsage.COPY_SRC
    buf = device.create_buffer(size=data.nbytes, usage=usage)
    device.queue.write_buffer(buf, 0, data)
    return buf


SOURCES = [np.arange(N, dtype=np.float32) - 7, np.linspace(-3, 5, N, dtype=np.float32)]
K_VALUES = [2.0, 3.0, -1.5]  # the very same float objects run after run (the lane's common case)


class LaneModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.variants = {name: _variant(name) for name in BODIES}
        self.buffers = [_buffer(s) for s in SOURCES]
        self.live: list[tuple[object, np.ndarray]] = []
        self.batches: list = []

    @rule(name=st.sampled_from(sorted(BODIES)), which=st.integers(0, 1), k=st.sampled_from(K_VALUES), times=st.integers(1, 6), fresh_params=st.booleans())
    def run(self, name, which, k, times, fresh_params):
        variant = self.variants[name]
        for _ in range(times):
            # an equal value in another object (fingerprinted) or the very same one
            params = {"k": float(str(k))} if fresh_params else {"k": k}
            out = variant.run(N, inputs={"src": self.buffers[which]}, params=params).outputs["dst"]
            self.live.append((out, _model(name, SOURCES[which], k)))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def read(self, data):
        out, expected = data.draw(st.sampled_from(self.live))
        np.testing.assert_array_equal(abi.read(out), expected)  # submits the open batches first

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def drop(self, data):
        self.live.pop(data.draw(st.integers(0, len(self.live) - 1)))
        gc.collect()

    @rule()
    def destroy_a_scratch_buffer(self):
        scratch = get_context().device.create_buffer(size=64, usage=wgpu.BufferUsage.STORAGE)
        scratch.destroy()

    @precondition(lambda self: len(self.batches) < 3)
    @rule(slices=st.sampled_from([None, True, False]))
    def open_batch(self, slices):
        b = abi.batch(slices=slices)
        b.__enter__()
        self.batches.append(b)

    @precondition(lambda self: self.batches)
    @rule()
    def close_batch(self):
        self.batches.pop().__exit__(None, None, None)

    def teardown(self):
        while self.batches:
            self.batches.pop().__exit__(None, None, None)
        for out, expected in self.live:
            np.testing.assert_array_equal(abi.read(out), expected)
        self.live.clear()
        for buf in self.buffers:
            buf.destroy()
        gc.collect()


TestLaneModel = LaneModel.TestCase
TestLaneModel.settings = settings(max_examples=25, stateful_step_count=25, deadline=None, suppress_health_check=list(HealthCheck))


def test_a_hundred_repeats_in_a_batch_each_hold_their_own_run():
    variant = _variant("add")
    src = _buffer(SOURCES[0])
    k = 2.0
    with abi.batch():
        runs = [variant.run(N, inputs={"src": src}, params={"k": k}).outputs["dst"] for _ in range(100)]
        mid = variant.run(N, inputs={"src": src}, params={"k": 5.0}).outputs["dst"]  # leaves the lane
        runs += [variant.run(N, inputs={"src": src}, params={"k": k}).outputs["dst"] for _ in range(20)]
    assert len({id(o._buffer) for o in runs}) == len(runs)  # each run its own output buffer
    for out in runs:
        np.testing.assert_array_equal(abi.read(out), SOURCES[0] + np.float32(2.0))
    np.testing.assert_array_equal(abi.read(mid), SOURCES[0] + np.float32(5.0))


def test_repeats_of_two_threads_batches_stay_in_their_own_batches():
    variant = _variant("mul")
    srcs = [_buffer(s) for s in SOURCES]
    results: dict[int, list] = {0: [], 1: []}
    start = threading.Barrier(2)

    def work(which: int) -> None:
        start.wait()
        k = K_VALUES[which]
        with abi.batch():
            for _ in range(200):
                results[which].append(variant.run(N, inputs={"src": srcs[which]}, params={"k": k}).outputs["dst"])

    threads = [threading.Thread(target=work, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for which in (0, 1):
        assert len(results[which]) == 200
        for out in results[which]:
            np.testing.assert_array_equal(abi.read(out), SOURCES[which] * np.float32(K_VALUES[which]))


def test_a_repeat_on_another_thread_goes_to_that_threads_batch():
    # The lane belongs to the variant, the batch to a thread: thread B repeating exactly thread
    # A's run (same inputs, the very same params) must record into B's own batch, so that B's
    # outputs are submitted when B's batch closes, while A's batch is still open.
    variant = _variant("add")
    src = _buffer(SOURCES[1])
    k = 3.0
    a_recorded, b_done = threading.Event(), threading.Event()
    got: dict = {}

    def thread_a() -> None:
        with abi.batch():
            got["a"] = [variant.run(N, inputs={"src": src}, params={"k": k}).outputs["dst"] for _ in range(4)]
            a_recorded.set()
            b_done.wait(30)

    def thread_b() -> None:
        a_recorded.wait(30)
        try:
            with abi.batch():
                outs = [variant.run(N, inputs={"src": src}, params={"k": k}).outputs["dst"] for _ in range(4)]
            got["b"] = [abi.read(o) for o in outs]
        except Exception as exc:  # reported below, not lost in the thread
            got["b_error"] = exc
        finally:
            b_done.set()

    threads = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert "b_error" not in got, got.get("b_error")
    for values in got["b"]:
        np.testing.assert_array_equal(values, SOURCES[1] + np.float32(3.0))
    for out in got["a"]:
        np.testing.assert_array_equal(abi.read(out), SOURCES[1] + np.float32(3.0))


PAIR_YAML = """\
bindings:
  - { name: a, kind: buffer, access: read, element: f32 }
  - { name: b, kind: buffer, access: read, element: f32 }
  - { name: total, kind: buffer, access: read_write, element: f32, count: "len(a)" }
  - { name: scaled, kind: buffer, access: read_write, element: f32, count: "len(a)" }
params:
  - { name: k, type: f32 }
  - { name: bias, type: f32 }
"""
PAIR_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    total_set(i, a_get(i) + b_get(i));
    scaled_set(i, a_get(i) * params.k + params.bias);
}
"""


def test_repeats_of_a_kernel_with_two_inputs_and_two_outputs_each_hold_their_own_results():
    # The lane's one-output shortcut must not be the only correct case: two outputs take the
    # general lane path, two inputs and two params the general checks; a domain handed as an
    # equal int of another object, and a swapped input, must be seen.
    variant = abi.program(key="lane/pair", schema=abi.parse(PAIR_YAML), wgsl=PAIR_WGSL).variant()
    a, b = _buffer(SOURCES[0]), _buffer(SOURCES[1])
    k, bias = 2.0, 0.5
    big = int("300")  # a fresh int object each time int() builds it (not a cached small int)
    expected_total = SOURCES[0] + SOURCES[1]
    expected_scaled = SOURCES[0] * np.float32(k) + np.float32(bias)
    with abi.batch():
        runs = [variant.run(N, inputs={"a": a, "b": b}, params={"k": k, "bias": bias}).outputs for _ in range(30)]
        swapped = variant.run(N, inputs={"a": b, "b": a}, params={"k": k, "bias": bias}).outputs
        runs += [variant.run(N, inputs={"a": a, "b": b}, params={"k": k, "bias": bias}).outputs for _ in range(10)]
        other = variant.run(N, inputs={"a": a, "b": b}, params={"k": k, "bias": -1.0}).outputs
        wide = [variant.run(int(str(big)), inputs={"a": _buffer(np.ones(300, np.float32)), "b": a}, params={"k": k, "bias": bias}).outputs]
    buffers = {id(o[name]._buffer) for o in runs for name in ("total", "scaled")}
    assert len(buffers) == 2 * len(runs)  # every output its own buffer
    for out in runs:
        np.testing.assert_array_equal(abi.read(out["total"]), expected_total)
        np.testing.assert_array_equal(abi.read(out["scaled"]), expected_scaled)
    np.testing.assert_array_equal(abi.read(swapped["scaled"]), SOURCES[1] * np.float32(k) + np.float32(bias))
    np.testing.assert_array_equal(abi.read(other["scaled"]), SOURCES[0] * np.float32(k) - np.float32(1.0))
    assert abi.read(wide[0]["total"]).shape == (300,)


def test_a_domain_of_an_equal_int_repeats_and_another_count_does_not():
    variant = _variant("add")
    src = _buffer(np.arange(300, dtype=np.float32))
    k = 2.0
    with abi.batch():
        outs = [variant.run(int("300"), inputs={"src": src}, params={"k": k}).outputs["dst"] for _ in range(5)]
        short = variant.run(int("200"), inputs={"src": src}, params={"k": k}).outputs["dst"]
        outs += [variant.run(int("300"), inputs={"src": src}, params={"k": k}).outputs["dst"] for _ in range(5)]
    expected = np.arange(300, dtype=np.float32) + np.float32(2.0)
    for out in outs:
        np.testing.assert_array_equal(abi.read(out), expected)
    got = abi.read(short)
    np.testing.assert_array_equal(got[:200], expected[:200])
    np.testing.assert_array_equal(got[200:], 0)  # outputs start as zeros: the run covered 200
