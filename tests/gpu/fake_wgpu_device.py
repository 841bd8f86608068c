"""A fake wgpu device, API-shaped like wgpu-py 0.32's, for what lavapipe cannot do on demand.

It raises the real ``wgpu.GPUValidationError`` where wgpu does, and turns every call that
would abort a real process (submitting on a lost device, submitting work that uses a
destroyed buffer, copying out of range, reading outside a mapped range) into
:class:`FakeAbort`, a BaseException the backend cannot swallow: a test that provokes one fails.

Injectable: device loss (with or without the wgpu logger's "DEVICE LOST!"), an error raised by
the next call of a given name, map failures, ``map_async`` returning None, and when the GPU
"finishes" (``complete_work()``), so asynchronous readback can be driven step by step.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import wgpu

U = wgpu.BufferUsage


class FakeAbort(BaseException):
    """What would have aborted the process on a real device."""


def lost_error(where: str) -> wgpu.GPUValidationError:
    return wgpu.GPUValidationError(f"Validation Error\n\nCaused by:\n  In {where}\n    Parent device is lost")


class FakePromise:
    """Shaped like wgpu's native GPUPromise: ``sync_wait()`` plus the ``_thread_event`` it waits on."""

    def __init__(self, on_fulfil: Callable[[], None]):
        self._thread_event = threading.Event()
        self._on_fulfil = on_fulfil
        self._error: Exception | None = None
        self._resolved = False

    def settle(self, error: Exception | None = None) -> None:
        self._error = error
        self._thread_event.set()

    def sync_wait(self) -> None:
        self._thread_event.wait()
        if not self._resolved:
            self._resolved = True
            if self._error is None:
                self._on_fulfil()
        if self._error is not None:
            raise self._error


class FakeBuffer:
    def __init__(self, device: FakeDevice, size: int, usage: int, label: str):
        self.device = device
        self.size = size
        self.usage = int(usage)
        self.label = label
        self.data = bytearray(size)
        self.map_state = "unmapped"
        self.destroyed = False
        self._views: list[memoryview] = []

    def map_async(self, mode: int, offset: int = 0, size: int | None = None) -> FakePromise | None:
        dev = self.device
        dev._maybe_fail("map_async")
        if dev.lost:
            # wgpu 0.32: the device's poll thread is gone after destroy().
            raise AttributeError("'NoneType' object has no attribute 'get_token'")
        if dev.map_returns_none:
            return None
        if self.map_state != "unmapped":
            raise FakeAbort(f"map_async on a {self.map_state} buffer")
        self.map_state = "pending"

        def fulfil() -> None:
            if not self.destroyed:
                self.map_state = "mapped"

        promise = FakePromise(fulfil)
        dev.pending_maps.append((self, promise))
        if dev.auto_complete:
            dev.complete_work()
        return promise

    def read_mapped(self, buffer_offset: int = 0, size: int | None = None, *, copy: bool = True) -> memoryview:
        if self.map_state != "mapped":
            raise RuntimeError("Can only read from a buffer if its mapped.")
        size = self.size - buffer_offset if size is None else size
        if buffer_offset < 0 or buffer_offset + size > self.size:
            raise FakeAbort(f"mapped-range read {buffer_offset}+{size} outside a {self.size} B buffer")
        view = memoryview(self.data)[buffer_offset:buffer_offset + size].toreadonly()
        if copy:
            return memoryview(bytes(view))
        self._views.append(view)
        return view

    def unmap(self) -> None:
        if self.map_state != "mapped":
            raise RuntimeError("Can only unmap a buffer if its currently mapped.")
        self._release_views()
        self.map_state = "unmapped"

    def _release_views(self) -> None:
        for v in self._views:
            try:
                v.release()
            except BufferError:
                pass  # like wgpu: a view with exports stays readable (over freed memory, for real)
        self._views = []

    def destroy(self) -> None:
        if self.map_state == "pending":
            for buf, promise in list(self.device.pending_maps):
                if buf is self:
                    self.device.pending_maps.remove((buf, promise))
                    promise.settle(RuntimeError("Could not map buffer (4 : Buffer map aborted)."))
        self._release_views()
        self.map_state = "unmapped"
        if not self.destroyed:
            self.destroyed = True
            self.device.destroyed_buffers += 1


@dataclass
class FakePipeline:
    """``fn(bind_groups, workgroups)`` runs at submit, standing in for the shader."""

    fn: Callable[[list, tuple], None] | None = None


@dataclass
class FakeBindGroup:
    buffers: list[FakeBuffer] = field(default_factory=list)


class FakeComputePass:
    def __init__(self, ops: list):
        self._ops = ops
        self._pipeline = None
        self._groups: dict[int, Any] = {}

    def set_pipeline(self, pipeline: Any) -> None:
        self._pipeline = pipeline

    def set_bind_group(self, index: int, group: Any, *args: Any) -> None:
        self._groups[index] = group

    def dispatch_workgroups(self, x: int, y: int = 1, z: int = 1) -> None:
        if self._pipeline is None:
            raise wgpu.GPUValidationError("dispatch without a pipeline")
        groups = [self._groups[i] for i in sorted(self._groups)]
        self._ops.append(("dispatch", self._pipeline, groups, (x, y, z)))

    def end(self) -> None:
        pass


class FakeCommandEncoder:
    def __init__(self, device: FakeDevice):
        self.device = device
        self.ops: list = []

    def begin_compute_pass(self, **kwargs: Any) -> FakeComputePass:
        return FakeComputePass(self.ops)

    def copy_buffer_to_buffer(self, src: FakeBuffer, src_offset: int, dst: FakeBuffer, dst_offset: int,
                              size: int) -> None:
        if not src.usage & U.COPY_SRC or not dst.usage & U.COPY_DST:
            raise FakeAbort("copy between buffers without COPY_SRC / COPY_DST usage")
        if src_offset < 0 or dst_offset < 0 or src_offset + size > src.size or dst_offset + size > dst.size:
            raise FakeAbort(f"copy range {src_offset}+{size} -> {dst_offset} outside {src.size} B / {dst.size} B")
        if size % 4 or src_offset % 4 or dst_offset % 4:
            raise wgpu.GPUValidationError("copy not 4-byte aligned")
        self.ops.append(("copy", src, src_offset, dst, dst_offset, size))

    def finish(self, **kwargs: Any) -> FakeCommandBuffer:
        self.device._maybe_fail("finish")
        if self.device.lost:
            raise lost_error("wgpuCommandEncoderFinish")
        return FakeCommandBuffer(list(self.ops))


@dataclass
class FakeCommandBuffer:
    ops: list


class FakeQueue:
    def __init__(self, device: FakeDevice):
        self.device = device

    def write_buffer(self, buffer: FakeBuffer, buffer_offset: int, data: Any, data_offset: int = 0,
                     size: int | None = None) -> None:
        dev = self.device
        dev._maybe_fail("write_buffer")
        if dev.lost:
            raise lost_error("wgpuQueueWriteBuffer")
        raw = memoryview(data).cast("B")
        if buffer_offset % 4 or raw.nbytes % 4:
            raise wgpu.GPUValidationError("Buffer offset / copy size does not respect COPY_BUFFER_ALIGNMENT")
        if buffer.destroyed or buffer_offset + raw.nbytes > buffer.size:
            raise wgpu.GPUValidationError("write_buffer out of range or into a destroyed buffer")
        buffer.data[buffer_offset:buffer_offset + raw.nbytes] = raw
        dev.writes.append((buffer.label, buffer_offset, raw.nbytes))

    def submit(self, command_buffers: list) -> None:
        dev = self.device
        if dev.lost:
            raise FakeAbort("queue.submit on a lost device aborts the process (wgpu-native panic)")
        dev._maybe_fail("submit")
        for cb in command_buffers:
            for op in cb.ops:
                used = [op[1], op[3]] if op[0] == "copy" else [b for g in op[2] for b in getattr(g, "buffers", [])]
                if any(b.destroyed for b in used):
                    raise FakeAbort("submitted work uses a destroyed buffer")
            for op in cb.ops:
                if op[0] == "copy":
                    _, src, so, dst, do, n = op
                    dst.data[do:do + n] = src.data[so:so + n]
                else:
                    _, pipeline, groups, wg = op
                    dev.dispatches.append((pipeline, groups, wg))
                    if getattr(pipeline, "fn", None) is not None:
                        pipeline.fn(groups, wg)
        dev.submits += 1


class FakeDevice:
    """A device that records what it is asked and fails exactly when told to."""

    def __init__(self, *, max_buffer_size: int = 1 << 30, auto_complete: bool = False):
        self.limits = {"max-buffer-size": max_buffer_size, "max-compute-workgroups-per-dimension": 65_535}
        self.queue = FakeQueue(self)
        self.lost = False
        self.auto_complete = auto_complete
        self.map_returns_none = False
        self.fail_maps = False
        # Weak, like wgpu-core's refcounting: a buffer whose last reference is dropped is freed
        # (a pending map holds one until the "GPU" finishes).
        self._buffers: list[weakref.ref[FakeBuffer]] = []
        self.created = 0
        self.destroyed_buffers = 0
        self.pending_maps: list[tuple[FakeBuffer, FakePromise]] = []
        self.dispatches: list = []
        self.writes: list = []
        self.submits = 0
        self._fail_next: dict[str, Exception] = {}

    # -- injection --
    def fail_next(self, call: str, exc: Exception) -> None:
        """The next call named ``call`` (create_buffer, finish, submit, write_buffer, map_async) raises ``exc``."""
        self._fail_next[call] = exc

    def _maybe_fail(self, call: str) -> None:
        exc = self._fail_next.pop(call, None)
        if exc is not None:
            raise exc

    def lose(self, *, log: bool = True) -> None:
        """Lose the device like ``device.destroy()``: pending maps never settle."""
        self.lost = True
        if log:
            logging.getLogger("wgpu").error("DEVICE LOST!")

    def destroy(self) -> None:
        self.lose(log=False)

    def complete_work(self) -> int:
        """The GPU finishes: settle every pending map (failed when ``fail_maps``)."""
        if self.lost:
            return 0
        done = list(self.pending_maps)
        self.pending_maps.clear()
        for _, promise in done:
            promise.settle(RuntimeError("Could not map buffer (3 : injected map failure).") if self.fail_maps else None)
        return len(done)

    # -- wgpu API --
    def create_buffer(self, *, size: int, usage: int, label: str = "", mapped_at_creation: bool = False) -> FakeBuffer:
        self._maybe_fail("create_buffer")
        if self.lost:
            raise lost_error("wgpuDeviceCreateBuffer")
        if size > self.limits["max-buffer-size"]:
            raise wgpu.GPUValidationError(f"buffer size {size} exceeds max-buffer-size")
        buf = FakeBuffer(self, size, usage, label)
        self._buffers.append(weakref.ref(buf))
        self.created += 1
        return buf

    def create_command_encoder(self, **kwargs: Any) -> FakeCommandEncoder:
        return FakeCommandEncoder(self)

    def live_buffers(self, usage: int = 0) -> list[FakeBuffer]:
        """Buffers neither destroyed nor freed, optionally those with all bits of ``usage``."""
        alive = (ref() for ref in self._buffers)
        return [b for b in alive if b is not None and not b.destroyed and (b.usage & usage) == usage]

    def live_staging(self) -> int:
        """Live MAP_READ buffers: what a leaked readback would leave behind."""
        return len(self.live_buffers(U.MAP_READ))
