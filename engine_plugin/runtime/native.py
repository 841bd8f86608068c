"""Encoder commands through wgpu-native's C functions, the ones wgpu-py itself calls.

wgpu-py wraps every command in Python: an error-capture slot pushed and popped on a
thread-local stack, argument checks, a cffi array for each ``set_bind_group``'s offsets, a
Python object for each compute pass. On a batch of small runs that is about a third of the
host time (0.7 µs a command on the CI machine). The runtime's records are checked before they
are encoded (buffers alive, sizes and offsets in range, bind groups made for the pipeline), and
wgpu-native defers any command error to the encoder's ``finish()``, which still goes through
wgpu-py and raises its ``GPUValidationError`` with the whole message
(``tests/runtime/test_native_encode.py``): calling the C functions loses no error.

wgpu-py is pinned to 0.32.x (pyproject.toml): its ``_internal`` handles and ``lib`` are this
module's only contact with its internals.
"""

from __future__ import annotations

from typing import Any

from wgpu.backends.wgpu_native._api import GPUCommandEncoder, ffi, lib

__all__ = ["begin_pass", "clear_buffer", "copy_buffer"]

_begin = lib.wgpuCommandEncoderBeginComputePass
_end = lib.wgpuComputePassEncoderEnd
_release = lib.wgpuComputePassEncoderRelease
_set_pipeline = lib.wgpuComputePassEncoderSetPipeline
_set_bind_group = lib.wgpuComputePassEncoderSetBindGroup
_dispatch = lib.wgpuComputePassEncoderDispatchWorkgroups
_clear = lib.wgpuCommandEncoderClearBuffer
_copy = lib.wgpuCommandEncoderCopyBufferToBuffer
_WHOLE = lib.WGPU_WHOLE_SIZE
# An unlabelled pass without timestamps (zeroed: an empty label, no timestamp writes); kept
# for the process: wgpu-native reads it during the call only.
_PASS_DESC = ffi.new("WGPUComputePassDescriptor *")


class ComputePass:
    """A compute pass of ``encoder`` with the methods the runtime uses, each one C call.

    :meth:`run` is the runtime's common dispatch: a pipeline (set when it changes), one bind
    group at index 0 with at most one dynamic offset, the workgroups."""

    __slots__ = ("_handle", "_offset", "_pipeline")

    def __init__(self, encoder: Any) -> None:
        self._handle = _begin(encoder._internal, _PASS_DESC)
        self._offset = ffi.new("uint32_t[1]")  # wgpu-native copies offsets during the call
        self._pipeline: Any = None

    def set_pipeline(self, pipeline: Any) -> None:
        if pipeline is not self._pipeline:
            _set_pipeline(self._handle, pipeline._internal)
            self._pipeline = pipeline

    def set_bind_group(self, index: int, group: Any, offsets: Any = ()) -> None:
        count = len(offsets)
        _set_bind_group(self._handle, index, group._internal, count, ffi.new("uint32_t[]", list(offsets)) if count else ffi.NULL)

    def run(self, pipeline: Any, group: Any, offset: int | None, groups: tuple) -> None:
        handle = self._handle
        if pipeline is not self._pipeline:
            _set_pipeline(handle, pipeline._internal)
            self._pipeline = pipeline
        if offset is None:
            _set_bind_group(handle, 0, group._internal, 0, ffi.NULL)
        else:
            self._offset[0] = offset
            _set_bind_group(handle, 0, group._internal, 1, self._offset)
        _dispatch(handle, *groups)

    def dispatch_workgroups(self, x: int, y: int = 1, z: int = 1) -> None:
        _dispatch(self._handle, x, y, z)

    def end(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            _end(handle)
            _release(handle)

    def __del__(self) -> None:
        # Left open (an exception while encoding): released unended; its encoder is never
        # finished (the caller's error propagates), so nothing of it reaches the queue.
        handle, self._handle = getattr(self, "_handle", None), None
        if handle is not None:
            _release(handle)


class _ApiPass:
    """:class:`ComputePass`'s methods over another encoder's pass (a test's recording encoder)."""

    __slots__ = ("_pass", "_pipeline")

    def __init__(self, encoder: Any) -> None:
        self._pass = encoder.begin_compute_pass()
        self._pipeline: Any = None

    def set_pipeline(self, pipeline: Any) -> None:
        if pipeline is not self._pipeline:
            self._pass.set_pipeline(pipeline)
            self._pipeline = pipeline

    def set_bind_group(self, index: int, group: Any, offsets: Any = ()) -> None:
        self._pass.set_bind_group(index, group, list(offsets))

    def run(self, pipeline: Any, group: Any, offset: int | None, groups: tuple) -> None:
        self.set_pipeline(pipeline)
        self._pass.set_bind_group(0, group, [] if offset is None else [offset])
        self._pass.dispatch_workgroups(*groups)

    def dispatch_workgroups(self, x: int, y: int = 1, z: int = 1) -> None:
        self._pass.dispatch_workgroups(x, y, z)

    def end(self) -> None:
        self._pass.end()


_BEGIN = GPUCommandEncoder.begin_compute_pass  # wgpu-py's own (a profiler may wrap it)


def begin_pass(encoder: Any) -> ComputePass | _ApiPass:
    """A compute pass of ``encoder``: C calls for wgpu-py's own encoder, its methods otherwise,
    and while ``begin_compute_pass`` is wrapped (the bench's pass timer adds timestamp writes
    to every pass it begins: a pass begun around it would go untimed)."""
    if type(encoder) is GPUCommandEncoder and GPUCommandEncoder.begin_compute_pass is _BEGIN:
        return ComputePass(encoder)
    return _ApiPass(encoder)


def clear_buffer(encoder: Any, buffer: Any, offset: int, size: int | None) -> None:
    """``encoder.clear_buffer(buffer, offset, size)``, one C call for wgpu-py's own encoder."""
    if type(encoder) is GPUCommandEncoder:
        _clear(encoder._internal, buffer._internal, offset, _WHOLE if size is None else size)
    else:
        encoder.clear_buffer(buffer, offset, size)


def copy_buffer(encoder: Any, source: Any, source_offset: int, target: Any, target_offset: int, size: int) -> None:
    """``encoder.copy_buffer_to_buffer(...)``, one C call for wgpu-py's own encoder."""
    if type(encoder) is GPUCommandEncoder:
        _copy(encoder._internal, source._internal, source_offset, target._internal, target_offset, size)
    else:
        encoder.copy_buffer_to_buffer(source, source_offset, target, target_offset, size)
