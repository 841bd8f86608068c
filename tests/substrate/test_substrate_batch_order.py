"""Page writes, reads and alloc's zeroing come after the runs recorded before them in an open
``abi.batch()`` (review helper 71): ``queue.write_buffer``/``read_buffer`` go to the queue at
once, ahead of the batch's unsubmitted runs. On lavapipe, values read back."""

from __future__ import annotations

import numpy as np

from engine_plugin import abi
from engine_plugin.substrate import Substrate

COPY_YAML = """bindings:
  - { name: P, kind: page, access: read }
  - { name: col, kind: column, page: P, element: u32 }
  - { name: out, kind: buffer, access: read_write, element: u32, count: "n" }
"""
COPY_WGSL = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    out_set(i, col_get(i));
}
"""
FILL_YAML = """bindings:
  - { name: P, kind: page, access: read_write }
  - { name: dst, kind: column, page: P, element: u32, access: read_write }
params:
  - { name: v, type: u32 }
"""
FILL_WGSL = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, params.v + i);
}
"""


def _kernels():
    copy = abi.program(key="t/batch_order/copy", schema=abi.parse(COPY_YAML, "t/bo_copy/bindings.yaml"), wgsl=COPY_WGSL).variant()
    fill = abi.program(key="t/batch_order/fill", schema=abi.parse(FILL_YAML, "t/bo_fill/bindings.yaml"), wgsl=FILL_WGSL).variant()
    return copy, fill


def test_a_run_recorded_before_a_page_write_reads_what_was_there():
    copy, fill = _kernels()
    s = Substrate(page_bytes=4096)
    h = s.alloc("u32", 4)
    s.write(h, np.array([1, 2, 3, 4], np.uint32))
    with abi.batch():
        before = copy.run(n=4, inputs={"col": h})
        s.write(h, np.array([9, 9, 9, 9], np.uint32))
    np.testing.assert_array_equal(abi.read(before.outputs["out"]), [1, 2, 3, 4])
    with abi.batch():  # a host write after a recorded kernel write is the last word
        fill.run(n=4, inputs={"dst": h}, params={"v": 100})
        s.write(h, np.zeros(4, np.uint32))
    np.testing.assert_array_equal(s.read(h), [0, 0, 0, 0])


def test_a_read_inside_a_batch_sees_the_runs_recorded_before_it():
    _, fill = _kernels()
    s = Substrate(page_bytes=4096)
    h = s.alloc("u32", 4)
    with abi.batch():
        fill.run(n=4, inputs={"dst": h}, params={"v": 7})
        np.testing.assert_array_equal(s.read(h), [7, 8, 9, 10])


def test_a_run_allocated_where_a_freed_one_was_written_in_the_batch_starts_as_zeros():
    _, fill = _kernels()
    s = Substrate(page_bytes=4096)
    a = s.alloc("u32", 4)
    with abi.batch():
        fill.run(n=4, inputs={"dst": a}, params={"v": 50})
        s.free(a)
        b = s.alloc("u32", 4)
    assert (a.page, a.base) == (b.page, b.base)
    np.testing.assert_array_equal(s.read(b), [0, 0, 0, 0])


def test_a_deferred_run_comes_before_a_page_write_made_after_it():
    copy, _ = _kernels()
    s = Substrate(page_bytes=4096)
    h = s.alloc("u32", 4)
    s.write(h, np.array([1, 2, 3, 4], np.uint32))
    run = copy.run(n=4, inputs={"col": h})  # may be held back for a one-shot read to join
    s.write(h, np.array([5, 5, 5, 5], np.uint32))
    np.testing.assert_array_equal(abi.read(run.outputs["out"]), [1, 2, 3, 4])


def test_a_page_given_besides_its_columns_must_be_the_page_they_live_in():
    # The explicit page won: the column's offset and length were applied to another page, and
    # the kernel read another run's data (review helper 71).
    import pytest

    from engine_plugin.errors import DispatchError

    copy, _ = _kernels()
    s = Substrate(page_bytes=4096)
    h = s.alloc("u32", 4)
    s.write(h, np.array([1, 2, 3, 4], np.uint32))
    s.alloc("u32", 2000)
    other = s.alloc("u32", 3000)
    s.write(other, np.full(3000, 77, np.uint32))
    assert h.page != other.page
    with pytest.raises(DispatchError, match="other than the page its columns"):
        copy.run(n=4, inputs={"col": h, "P": s.page_buffer(other.page)})
    same = copy.run(n=4, inputs={"col": h, "P": s.page_buffer(h.page)})  # its own page: fine
    np.testing.assert_array_equal(abi.read(same.outputs["out"]), [1, 2, 3, 4])


def test_an_empty_run_over_a_freed_one_reads_zeros():
    # Its reads clamp to its first element, which alloc's zeroing skipped: a freed run's data
    # came back (review helper 71).
    copy, _ = _kernels()
    s = Substrate(page_bytes=4096)
    old = s.alloc("u32", 16)
    s.write(old, np.arange(100, 116, dtype=np.uint32))
    s.free(old)
    empty = s.alloc("u32", 0)
    assert (empty.page, empty.base) == (old.page, old.base)
    np.testing.assert_array_equal(abi.read(copy.run(n=3, inputs={"col": empty}).outputs["out"]), [0, 0, 0])
    # An empty upload too: upload skipped alloc's zeroing, the values being written whole (helper 74)
    s.free(empty)
    again = s.alloc("u32", 16)
    s.write(again, np.arange(200, 216, dtype=np.uint32))
    s.free(again)
    uploaded = s.upload("u32", np.zeros(0, np.uint32))
    assert (uploaded.page, uploaded.base) == (old.page, old.base)
    np.testing.assert_array_equal(abi.read(copy.run(n=3, inputs={"col": uploaded}).outputs["out"]), [0, 0, 0])
