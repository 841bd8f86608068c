"""Given outputs bind what they hold, a dispatch never reads a buffer it writes, and a
prepared run submitted inside ``abi.batch()`` comes after the runs recorded before it
(review helper 45's model-based fuzzer against numpy)."""

from __future__ import annotations

import numpy as np
import pytest
import wgpu
from runtime_kernels import AXPY_WGSL, AXPY_YAML, FILTER_WGSL, FILTER_YAML, make

from engine_plugin import abi
from engine_plugin.device.context import get_context
from engine_plugin.errors import DispatchError
from engine_plugin.runtime.submission import Submission

pytestmark = pytest.mark.gpu


def test_appending_into_a_given_output_uses_its_capacity_not_this_runs_expression():
    # The binding covered the Output's 300 elements, the kernel's capacity read the call's
    # expression (1): appends past it were dropped but counted (count 6, five zeros read back).
    filt = make("t15g/filter", FILTER_YAML, FILTER_WGSL)
    first = filt.run(n=1, inputs={"src": np.array([1.0], np.float32)}, params={"threshold": 0.0, "cap": 300}).outputs["hits"]
    more = filt.run(n=5, inputs={"src": np.array([2, 3, 4, 5, 6], np.float32)}, params={"threshold": 0.0, "cap": 1}, outputs={"hits": first}).outputs["hits"]
    assert more.count == 6 and more.capacity == 300
    np.testing.assert_array_equal(np.sort(abi.read(more)), np.arange(1, 7, dtype=np.float32))


def test_a_given_output_smaller_than_the_run_needs_is_refused():
    axpy = make("t15g/axpy_small", AXPY_YAML, AXPY_WGSL)
    small = axpy.run(10, inputs={"x": np.zeros(10, np.float32)}, params={"a": 1.0}).outputs["y"]
    with pytest.raises(DispatchError, match="holds 10 elements; 'y' needs 40"):
        axpy.run(40, inputs={"x": np.arange(40, dtype=np.float32)}, params={"a": 1.0}, outputs={"y": small})
    with pytest.raises(DispatchError, match="past the 10 f32 elements"):
        axpy.run(10, inputs={"x": np.arange(10, dtype=np.float32)}, params={"a": 1.0}, outputs={"y": {"buffer": small, "capacity": 50}})
    filt = make("t15g/filter_small", FILTER_YAML, FILTER_WGSL)
    one = filt.run(n=1, inputs={"src": np.array([1.0], np.float32)}, params={"threshold": 0.0, "cap": 1}).outputs["hits"]
    with pytest.raises(DispatchError, match="'hits' needs 300"):
        filt.run(n=5, inputs={"src": np.ones(5, np.float32)}, params={"threshold": 0.0, "cap": 300}, outputs={"hits": one})


def test_a_buffer_read_and_written_by_one_dispatch_is_a_dispatch_error_and_the_batch_survives():
    axpy = make("t15g/axpy_alias", AXPY_YAML, AXPY_WGSL)
    y = axpy.run(8, inputs={"x": np.arange(8, dtype=np.float32)}, params={"a": 1.0}).outputs["y"]
    with abi.batch():
        good = axpy.run(8, inputs={"x": np.full(8, 5, np.float32)}, params={"a": 1.0}).outputs["y"]
        with pytest.raises(DispatchError, match="same buffer"):
            axpy.run(8, inputs={"x": y}, params={"a": 2.0}, outputs={"y": y})
    np.testing.assert_array_equal(abi.read(good), np.full(8, 6.0, np.float32))
    np.testing.assert_array_equal(abi.read(y), np.arange(8, dtype=np.float32) + 1.0)


def test_a_prepared_run_submitted_inside_a_batch_reads_the_runs_recorded_before_it():
    ctx = get_context()
    axpy = make("t15g/axpy_prepared_batch", AXPY_YAML, AXPY_WGSL)
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    area = ctx.device.create_buffer(size=4096, usage=usage)
    x = np.arange(8, dtype=np.float32)
    with abi.batch():
        y = axpy.run(8, inputs={"x": x}, params={"a": 1.0}).outputs["y"]
        prepared = axpy.prepare(8, {"x": y}, {"a": 10.0}, results=area)
        sub = Submission()
        for record in prepared.records:
            sub.add(record)
        sub.submit(ctx.device, ctx.queue, ctx.guard, "test")
        prepared.submitted()
    placed = prepared.layout["y"]
    got = np.frombuffer(ctx.queue.read_buffer(area), np.float32)[placed.offset // 4 : placed.offset // 4 + 8]
    np.testing.assert_array_equal(got, 10.0 * (x + 1.0) + 1.0)


TEX_YAML = """\
bindings:
  - { name: img, kind: texture, sample: float }
  - { name: out, kind: storage_texture, format: r32float, access: read_write, size: [nx, ny] }
workgroup: [8, 8]
"""
TEX_WGSL = """\
@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (zero_index(gid) >= zero_n()) { return; }
    textureStore(out, gid.xy, textureLoad(img, gid.xy, 0) + vec4<f32>(1.0));
}
"""


def test_a_texture_sampled_and_written_by_one_dispatch_is_a_dispatch_error_and_the_batch_survives():
    # Review helper 46: the aliasing check skipped texture views; a raw validation error at
    # the batch's exit lost its other runs.
    v = make("t15g/tex_alias", TEX_YAML, TEX_WGSL)
    o = v.run(n=(8, 8), inputs={"img": np.zeros((8, 8), np.float32)}).outputs["out"]
    with abi.batch():
        good = v.run(n=(8, 8), inputs={"img": np.zeros((8, 8), np.float32)}).outputs["out"]
        with pytest.raises(DispatchError, match="same buffer or texture"):
            v.run(n=(8, 8), inputs={"img": o}, outputs={"out": o})
    np.testing.assert_array_equal(abi.read(good).reshape(-1), np.ones(64, np.float32))


def test_a_refused_run_leaves_the_outputs_it_was_given_as_they_were():
    # Review helper 46: the given Output was share()d before the aliasing check refused the
    # run: reading its buffer then answered the pooled slack too.
    axpy = make("t15g/axpy_n", AXPY_YAML.replace('count: "len(x)"', 'count: "n"'), AXPY_WGSL)
    y = axpy.run(8, inputs={"x": np.arange(8, dtype=np.float32)}, params={"a": 1.0}).outputs["y"]
    buf = y.buffer  # handed out: reads of it answer y's live elements
    assert abi.read(buf).size == 8
    with pytest.raises(DispatchError, match="same buffer"):
        axpy.run(4, inputs={"x": y}, params={"a": 1.0}, outputs={"y": {"buffer": y, "capacity": 4}})
    assert abi.read(buf).size == 8 and y.count == 8


COLUMNS_YAML = """\
bindings:
  - { name: a, kind: columns, access: read }
  - { name: b, kind: columns, access: read_write }
  - { name: y, kind: buffer, access: read_write, element: f32, count: "n" }
"""
COLUMNS_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    y_set(i, f32(i) + 1.0);
}
"""


def test_unbound_read_and_read_write_tables_run_as_empty_tables():
    # Review helper 46: both bound the one shared empty-table constant: refused as aliasing
    # (a raw validation error before), though the caller passed nothing.
    v = make("t15g/empty_tables", COLUMNS_YAML, COLUMNS_WGSL)
    np.testing.assert_array_equal(abi.read(v.run(4).outputs["y"]), np.arange(1, 5, dtype=np.float32))
