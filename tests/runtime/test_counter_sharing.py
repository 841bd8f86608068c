"""Counters shared through ``outputs=`` and ``domain_count`` (review helper 216): a live
output's count is its run's snapshot, which no later run may change; an append continues only
an append's own counter, within its capacity; an Output written in place answers its live count
whether or not its source's count was read first."""

from __future__ import annotations

import numpy as np
import pytest
from runtime_kernels import FILTER_WGSL, FILTER_YAML, make

from engine_plugin import abi
from engine_plugin.errors import DispatchError

pytestmark = pytest.mark.gpu

TWO_YAML = """\
bindings:
  - { name: live, kind: domain_count }
  - { name: src,  kind: buffer, access: read, element: f32 }
  - { name: a,  kind: buffer, access: read_write, element: f32, count: "n", live: true }
  - { name: b,  kind: buffer, access: read_write, element: f32, count: "n", live: true }
"""
TWO_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    a_set(i, src_get(i) + 1.0);
    b_set(i, src_get(i) + 2.0);
}
"""
INOUT_YAML = """\
bindings:
  - { name: live, kind: domain_count }
  - { name: z, kind: buffer, access: read_write, element: f32 }
"""
INOUT_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    z_set(i, z_get(i) * 10.0);
}
"""
SRC = np.arange(100, dtype=np.float32)


def _variant(key: str, yaml: str, wgsl: str):
    return make(key, yaml, wgsl)


@pytest.fixture(scope="module")
def filt():
    return _variant("counters/filter", FILTER_YAML, FILTER_WGSL)


def _hits(filt, t: float, cap: int = 64):
    return filt.run(n=100, inputs={"src": SRC}, params={"threshold": t, "cap": cap}).outputs["hits"]  # its count on the GPU


@pytest.mark.parametrize("read_first", [False, True])
def test_a_live_output_given_to_an_append_leaves_its_runs_other_live_outputs_as_they_were(filt, read_first):
    two = _variant("counters/two", TWO_YAML, TWO_WGSL)
    h = _hits(filt, 89.5)  # 90..99
    if read_first:
        assert h.count == 10
    run = two.run(n=50, inputs={"src": h}, domain_count=h)
    a, b = run.outputs["a"], run.outputs["b"]
    more = np.arange(5, dtype=np.float32) + 1000
    x = filt.run(n=5, inputs={"src": more}, params={"threshold": 0.0, "cap": 50}, outputs={"hits": a}).outputs["hits"]
    # b's count is its run's snapshot: no later run changes it (it read 15, 5 of them zeros)
    assert b.count == 10
    np.testing.assert_array_equal(np.sort(abi.read(b)), SRC[90:] + 2.0)
    # the append wrote a's buffer from its first element, whether or not h's count was read
    assert x.count == 5
    np.testing.assert_array_equal(np.sort(abi.read(x)), more)


def test_an_append_continued_with_a_smaller_capacity_than_its_output_is_refused(filt):
    h = _hits(filt, 89.5)
    more = np.arange(5, dtype=np.float32) + 1000
    with pytest.raises(DispatchError, match=r"capacity 3 is below the 64 of output 'hits'") as info:
        filt.run(n=5, inputs={"src": more}, params={"threshold": 0.0, "cap": 3}, outputs={"hits": {"buffer": h, "capacity": 3}})
    assert "counters/filter/bindings.yaml" in str(info.value)
    assert h.count == 10 and h.overflow is None  # nothing ran: h is as it was
    np.testing.assert_array_equal(np.sort(abi.read(h)), SRC[90:])
    x = filt.run(n=5, inputs={"src": more}, params={"threshold": 0.0, "cap": 64}, outputs={"hits": h}).outputs["hits"]
    assert x.count == 15 and h.count == 15  # continued within its capacity: both count what it holds
    np.testing.assert_array_equal(np.sort(abi.read(h)), np.concatenate([SRC[90:], more]))


@pytest.mark.parametrize("read_first", [False, True])
def test_an_append_output_written_in_place_as_the_domain_answers_its_live_count(filt, read_first):
    inout = _variant("counters/inout", INOUT_YAML, INOUT_WGSL)
    h = _hits(filt, 94.5)  # 95..99, capacity 64
    if read_first:
        assert h.count == 5
    z = inout.run(inputs={"z": h}, domain_count=h).outputs["z"]
    assert z.count == 5  # was 64 (its capacity) while h's count was on the GPU
    np.testing.assert_array_equal(np.sort(abi.read(z)), SRC[95:] * 10.0)


def test_a_handed_out_append_counter_reads_its_count_and_zeros_never_an_earlier_runs_bytes(filt):
    # Review helper 223: the counter is a pooled buffer larger than its word; only 16 bytes were
    # cleared, so abi.read of the handed-out counter showed an earlier run's upload past them.
    import gc

    src = np.linspace(-1, 1, 50).astype(np.float32)  # a 200-byte upload: the counter's size class
    for _ in range(3):  # pooled buffers of earlier uploads come back as counters
        abi.read(filt.run(n=50, inputs={"src": src}, params={"threshold": 0.8, "cap": 64}).outputs["hits"])
        gc.collect()
    out = filt.run(n=50, inputs={"src": src}, params={"threshold": 0.8, "cap": 64}).outputs["hits"]
    words = abi.read(out.counter, as_u32=True)
    assert words[0] == out.count == int((src > np.float32(0.8)).sum())
    assert not words[1:].any(), words[:16]
