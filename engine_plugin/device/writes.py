"""Queue writes through wgpu-native's C function, the one wgpu-py's ``queue.write_buffer`` calls.

wgpu-py's ``write_buffer`` spends about 2-3 µs of Python a call on the CI machine (a
memoryview, a cffi buffer and cast, its range checks, an error slot pushed and popped): the
engine frame's ~40 writes paid a tenth of the frame for it. Here the same write is one C call
inside the same error capture: an error the call reports raises the GPU error class wgpu-py
raises (a lost device's ``GPUValidationError``), and ranges are checked before the call, as
wgpu-py checks them, so no error is lost and no byte outside the data or the buffer is read or
written (``tests/gpu/test_native_writes.py``).

Both entry points call wgpu-py's own ``write_buffer`` for any other queue (a test's) and while
``GPUQueue.write_buffer`` is wrapped (a test counting writes, a profiler).

wgpu-py is pinned to 0.32.x (pyproject.toml): the handles' ``_internal``, ``lib`` and its
error handler's slots are this module's only contact with its internals.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import wgpu
from wgpu.backends.wgpu_native._api import GPUQueue, error_handler, ffi, lib
from wgpu.backends.wgpu_native._helpers import ERROR_TYPES, ErrorSlot

__all__ = ["row_writer", "write_buffer"]

_write = lib.wgpuQueueWriteBuffer
_from_buffer = ffi.from_buffer
_NAME = "wgpuQueueWriteBuffer"
_WRITE = GPUQueue.write_buffer  # wgpu-py's own


def _native(queue: Any) -> bool:
    return type(queue) is GPUQueue and GPUQueue.write_buffer is _WRITE


def _call(stack: Any, queue: Any, buffer: Any, offset: int, data: Any, size: int) -> None:
    """One C write inside an error slot of this thread's stack (wgpu-native reports a call's
    error synchronously, on the calling thread, to the slot on top), raised as wgpu-py would."""
    slot = ErrorSlot(_NAME)
    stack.append(slot)
    try:
        _write(queue, buffer, offset, data, size)
    finally:
        stack.pop()
    if slot.message is not None:
        raise ERROR_TYPES.get(slot.type, wgpu.GPUError)(slot.message)


def write_buffer(queue: Any, buffer: Any, offset: int, data: Any) -> None:
    """``queue.write_buffer(buffer, offset, data)`` (all of ``data``, any contiguous object with
    the buffer protocol), one C call for wgpu-py's own queue.

    Raises:
        ValueError: empty data, data wgpu-py refuses (not contiguous), or bytes outside the
            buffer (nothing written).
        wgpu.GPUError: what ``write_buffer`` raises (a lost device, a destroyed buffer).
    """
    if not _native(queue):
        queue.write_buffer(buffer, offset, data)
        return
    try:
        view = _from_buffer(data)
    except (TypeError, ValueError, BufferError):  # not C-contiguous, or no buffer: wgpu-py's answer
        queue.write_buffer(buffer, offset, data)
        return
    size, offset = len(view), int(offset)
    if not size or not 0 <= offset < buffer.size or size > buffer.size - offset:  # (wgpu-py refuses empty data too)
        raise ValueError(f"write_buffer: {size} bytes at {offset} outside the buffer ({buffer.size} B)")
    _call(error_handler._get_proxy_stack(), queue._internal, buffer._internal, offset, view, size)


class _NativeRows:
    """``queue.write_buffer(buffer, first * stride, rows[first : first + count])``, one C call
    (the error capture of :func:`_call` inlined: a frame writes tens of spans)."""

    __slots__ = ("_buffer", "_buffer_size", "_bytes", "_queue", "_rows", "_slot", "_stack", "_stride")

    def __init__(self, queue: Any, buffer: Any, rows: np.ndarray) -> None:
        self._queue, self._buffer, self._buffer_size = queue._internal, buffer._internal, int(buffer.size)
        self._rows = rows  # held: the C call reads its memory
        self._bytes = _from_buffer("uint8_t[]", rows)  # a span's bytes are ``self._bytes + offset``
        self._stride = int(rows.strides[0])
        self._stack = error_handler._get_proxy_stack()  # this thread's: made and used by one upload call
        self._slot = ErrorSlot(_NAME)  # pushed for each call, popped right after it

    def __call__(self, first: int, count: int) -> None:
        stride = self._stride
        offset, size = first * stride, count * stride
        if first < 0 or count <= 0 or first + count > len(self._rows) or offset + size > self._buffer_size:
            raise ValueError(f"rows {first}+{count} outside the array ({len(self._rows)} rows) or the buffer ({self._buffer_size} B)")
        slot, stack = self._slot, self._stack
        slot.message = None
        stack.append(slot)
        try:
            _write(self._queue, self._buffer, offset, self._bytes + offset, size)
        finally:
            stack.pop()
        if slot.message is not None:
            raise ERROR_TYPES.get(slot.type, wgpu.GPUError)(slot.message)


def row_writer(queue: Any, buffer: Any, rows: np.ndarray) -> Callable[[int, int], None]:
    """A function ``(first, count)`` writing rows ``first .. first + count`` of the C-contiguous
    ``rows`` to ``buffer`` at ``first * rows.strides[0]``: the array's address taken once, one
    C call a write for wgpu-py's own queue, its ``write_buffer`` otherwise.

    Raises:
        ValueError: rows outside the array or bytes outside the buffer (nothing written).
        wgpu.GPUError: what ``write_buffer`` raises (a lost device, a destroyed buffer).
    """
    # Rows packed back to back only: numpy calls a view with one row per step of a longer
    # axis C-contiguous too (relaxed strides), and the C call then read past its memory
    # (review helper 238).
    if _native(queue) and rows.flags.c_contiguous and rows.ndim and rows.strides[0] * len(rows) == rows.nbytes:
        return _NativeRows(queue, buffer, rows)
    write, stride, n = queue.write_buffer, rows.strides[0], len(rows)

    def write_rows(first: int, count: int) -> None:
        if first < 0 or count <= 0 or first + count > n:
            raise ValueError(f"rows {first}+{count} outside the array ({n} rows)")
        write(buffer, first * stride, rows[first : first + count])

    return write_rows
