"""``device.writes``: the engine's span writes through wgpu-native's C function write
the bytes ``queue.write_buffer`` writes, raise what it raises, and never read outside the rows."""

from __future__ import annotations

import numpy as np
import pytest
import wgpu

from engine_plugin.device.context import get_context
from engine_plugin.device.writes import _NativeRows, row_writer, write_buffer

pytestmark = pytest.mark.gpu

U = wgpu.BufferUsage


def _new_device():
    return wgpu.gpu.request_adapter_sync(power_preference="high-performance").request_device_sync()


def _read(device, buffer):
    return np.frombuffer(device.queue.read_buffer(buffer), np.uint32)


def test_rows_written_through_the_c_function_are_the_rows_write_buffer_writes():
    ctx = get_context()
    rows = np.arange(64 * 16, dtype=np.uint32).reshape(64, 16)
    rows.flags.writeable = False  # a read-only view of the world's mirror is written as well
    native = ctx.device.create_buffer(size=rows.nbytes, usage=U.STORAGE | U.COPY_DST | U.COPY_SRC)
    plain = ctx.device.create_buffer(size=rows.nbytes, usage=U.STORAGE | U.COPY_DST | U.COPY_SRC)
    write = row_writer(ctx.queue, native, rows)
    assert isinstance(write, _NativeRows)  # the C path, not the fallback
    for first, count in ((0, 1), (3, 5), (20, 1), (63, 1), (40, 10)):
        write(first, count)
        ctx.queue.write_buffer(plain, first * 64, rows[first : first + count])
    got, want = _read(ctx.device, native), _read(ctx.device, plain)
    np.testing.assert_array_equal(got, want)
    assert got[3 * 16 : 8 * 16].tolist() == list(range(3 * 16, 8 * 16))
    assert not got[8 * 16 : 20 * 16].any()  # rows never written stay zero


@pytest.mark.parametrize("first,count", [(-1, 1), (0, 0), (63, 2), (64, 1)])
def test_rows_outside_the_array_are_refused_before_anything_is_read(first, count):
    ctx = get_context()
    rows = np.ones((64, 16), np.uint32)
    buffer = ctx.device.create_buffer(size=rows.nbytes * 2, usage=U.STORAGE | U.COPY_DST | U.COPY_SRC)
    with pytest.raises(ValueError, match="outside"):
        row_writer(ctx.queue, buffer, rows)(first, count)
    assert not _read(ctx.device, buffer).any()


def test_bytes_outside_the_buffer_are_refused():
    ctx = get_context()
    rows = np.ones((64, 16), np.uint32)
    buffer = ctx.device.create_buffer(size=32 * 64, usage=U.STORAGE | U.COPY_DST | U.COPY_SRC)
    with pytest.raises(ValueError, match="outside"):
        row_writer(ctx.queue, buffer, rows)(30, 4)
    assert not _read(ctx.device, buffer).any()


def test_a_write_on_a_lost_device_raises_what_write_buffer_raises():
    device = _new_device()
    rows = np.ones((8, 4), np.float32)
    buffer = device.create_buffer(size=rows.nbytes, usage=U.STORAGE | U.COPY_DST)
    write = row_writer(device.queue, buffer, rows)
    assert isinstance(write, _NativeRows)
    device.destroy()
    with pytest.raises(wgpu.GPUValidationError, match="lost") as native:
        write(0, 2)
    with pytest.raises(wgpu.GPUValidationError) as plain:
        device.queue.write_buffer(buffer, 0, rows[:2])
    assert type(native.value) is type(plain.value)
    # The error slot was taken off this thread's stack: the next wgpu-py call captures its own.
    with pytest.raises(wgpu.GPUValidationError):
        device.queue.write_buffer(buffer, 0, rows[:2])


def test_a_wrapped_write_buffer_is_called_not_bypassed(monkeypatch):
    ctx = get_context()
    rows = np.arange(32, dtype=np.float32).reshape(8, 4)
    buffer = ctx.device.create_buffer(size=rows.nbytes, usage=U.STORAGE | U.COPY_DST | U.COPY_SRC)
    calls = []
    real = type(ctx.queue).write_buffer

    def counting(self, *args, **kwargs):
        calls.append(args[1])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(ctx.queue), "write_buffer", counting)
    write = row_writer(ctx.queue, buffer, rows)
    write(2, 3)
    assert calls == [2 * 16]
    with pytest.raises(ValueError, match="outside"):
        write(7, 2)
    monkeypatch.undo()
    assert np.frombuffer(ctx.queue.read_buffer(buffer), np.float32)[8:20].tolist() == list(range(8, 20))


@pytest.mark.parametrize("kind", ["bytes", "array", "readonly", "memoryview"])
def test_write_buffer_writes_what_wgpu_py_writes(kind):
    ctx = get_context()
    base = np.arange(24, dtype=np.uint32).reshape(4, 6)
    data = {
        "bytes": base.tobytes(),
        "array": base,
        "readonly": np.frombuffer(base.tobytes(), np.uint32),
        "memoryview": memoryview(base.tobytes())[8:40],
    }[kind]
    native = ctx.device.create_buffer(size=256, usage=U.STORAGE | U.COPY_DST | U.COPY_SRC)
    plain = ctx.device.create_buffer(size=256, usage=U.STORAGE | U.COPY_DST | U.COPY_SRC)
    write_buffer(ctx.queue, native, 16, data)
    ctx.queue.write_buffer(plain, 16, data)
    np.testing.assert_array_equal(_read(ctx.device, native), _read(ctx.device, plain))
    assert _read(ctx.device, native)[4:].any()


@pytest.mark.parametrize("offset,size", [(-4, 8), (256, 4), (252, 8), (0, 0)])
def test_write_buffer_refuses_what_wgpu_py_refuses(offset, size):
    ctx = get_context()
    buffer = ctx.device.create_buffer(size=256, usage=U.STORAGE | U.COPY_DST | U.COPY_SRC)
    with pytest.raises(ValueError):
        ctx.queue.write_buffer(buffer, offset, np.ones(size // 4, np.uint32))
    with pytest.raises(ValueError):
        write_buffer(ctx.queue, buffer, offset, np.ones(size // 4, np.uint32))
    assert not _read(ctx.device, buffer).any()


def test_write_buffer_on_a_lost_device_raises_what_wgpu_py_raises():
    device = _new_device()
    buffer = device.create_buffer(size=64, usage=U.STORAGE | U.COPY_DST)
    device.destroy()
    with pytest.raises(wgpu.GPUValidationError, match="lost"):
        write_buffer(device.queue, buffer, 0, np.ones(4, np.float32))


def test_write_buffer_of_data_that_is_not_c_contiguous_goes_to_wgpu_py():
    ctx = get_context()
    buffer = ctx.device.create_buffer(size=256, usage=U.STORAGE | U.COPY_DST | U.COPY_SRC)
    data = np.asfortranarray(np.arange(24, dtype=np.uint32).reshape(4, 6))
    with pytest.raises(Exception) as plain:
        ctx.queue.write_buffer(buffer, 0, data)
    with pytest.raises(type(plain.value)):
        write_buffer(ctx.queue, buffer, 0, data)
    assert not _read(ctx.device, buffer).any()


def test_rows_of_a_view_numpy_calls_contiguous_are_not_read_past_its_memory():
    # Review helper 238: one row of every third of a longer array is C-contiguous to numpy
    # (relaxed strides: strides (96, 4), 16 bytes of data); the C call wrote 96 bytes from its
    # address, heap memory past the array's, into the buffer.
    ctx = get_context()
    rows = np.arange(40, dtype=np.uint32).reshape(5, 8)[::3][1:, :4]
    assert rows.flags.c_contiguous and rows.strides[0] == 96 and rows.nbytes == 16
    buffer = ctx.device.create_buffer(size=128, usage=U.STORAGE | U.COPY_DST | U.COPY_SRC)
    row_writer(ctx.queue, buffer, rows)(0, 1)
    got = _read(ctx.device, buffer)
    assert got[:4].tolist() == [24, 25, 26, 27] and not got[4:].any()
