"""The readback ring of a backend: accepted requests, delivery to callbacks, staging release.

Every accepted request owns one MAP_READ staging buffer from acceptance until it is released,
on every path: delivered READY, delivered FAILED (map error, device error or loss, backend
closed). A buffer is released only once its copy is known to be over (its map settled) or its
device is lost: a request failed by a device error keeps its buffer until then, and one whose
copy still runs when the backend closes is released (last reference dropped) for wgpu-core to
free when the copy completes.

Staging buffers are persistent: a released buffer whose copy is over is unmapped and kept in
a pool (by power-of-two size class, bounded by the readback budgets) for the next request, so
a frame neither creates nor destroys a MAP_READ buffer per readback (``destroy()`` of a mapped
buffer costs milliseconds on lavapipe). Only an idle buffer enters the pool: nothing recorded
or in flight uses it. The pool is emptied (its buffers destroyed, safe: they are idle) when
the device faults or is lost, and when the backend closes.

Memory safety beats prompt release in one case: a callback that keeps a numpy array or
memoryview derived from its data past its return would be left pointing at unmapped memory,
so that buffer stays mapped ("quarantined", still counted as live) until the array dies.
Detection uses CPython reference counts of a private anchor array that every derived view
refers to.
"""

from __future__ import annotations

import logging
import queue
import sys
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from ..device.flags import COPY_DST as _COPY_DST
from ..device.flags import MAP_MODE_READ as _MAP_MODE_READ
from ..device.flags import MAP_READ as _MAP_READ
from ..device.guard import guard_for
from ..device.mapping import map_submitted, staging_bytes
from .backend import ReadbackResult, ReadbackStatus
from .readback import PromiseWaiter, ReadbackRequest, ReadbackTracker, settled, settled_now

__all__ = ["ReadbackRing", "map_submitted"]

log = logging.getLogger("engine_plugin.gpu")

# Polls that may find a request's map pending before the waiter thread watches it: the engine
# polls twice a frame (before dispatching, after), so 3 is "still pending a frame later".
_POLLS_BEFORE_WATCH = 3


class ReadbackRing:
    """Budgets (count, bytes), the waiter thread, delivery and release of staging buffers."""

    def __init__(self, max_count: int, max_bytes: int, slice_s: float, reuse: bool = True):
        self.tracker = ReadbackTracker(max_count, max_bytes)
        self.reuse = reuse  # keep idle staging buffers for the next request (off once faulted)
        self._pool: dict[int, list[Any]] = {}  # size class -> idle, unmapped staging buffers
        self._pool_bytes = 0
        self._pool_count = 0  # buffers in _pool (kept with it: every release asks)
        self.reused = 0
        self.waiter = PromiseWaiter(slice_s)
        self.quarantine: list[ReadbackRequest] = []
        self.closed = False  # close() ran: nothing polls the quarantine again
        self.created = 0
        self.destroyed = 0
        self.abandoned = 0  # released without destroy at close: their copy was still running
        self.delivered = 0
        self.device_lost = False

    @property
    def live_staging(self) -> int:
        """Staging buffers owned by requests (created, neither pooled, destroyed nor released)."""
        return self.created - self.destroyed - self.abandoned - self.pooled

    @property
    def pooled(self) -> int:
        """Idle staging buffers kept for reuse."""
        return self._pool_count

    @staticmethod
    def _size_class(size: int) -> int:
        return max(256, 1 << (max(1, size) - 1).bit_length())

    def create_staging(self, device: Any, size: int, usage: int) -> Any:
        """A staging buffer of at least ``size`` bytes: an idle pooled one, else a new one."""
        if self.reuse and not self.device_lost:
            cls = staging_bytes(self._size_class(size), size, device)
            idle = self._pool.get(cls)
            if idle:
                self._pool_bytes -= cls
                self._pool_count -= 1
                self.reused += 1
                return idle.pop()
            size = cls
        staging = device.create_buffer(size=size, usage=usage, label="engine_plugin.readback_staging")
        self.created += 1
        return staging

    def destroy_staging(self, staging: Any) -> None:
        """Release a staging buffer whose copy is over (or whose device is lost): into the
        pool while it has room and the device is healthy, else destroyed."""
        if self.reuse and not self.device_lost and self._pool_staging(staging):
            return
        self._destroy(staging)

    def _pool_staging(self, staging: Any) -> bool:
        size = int(getattr(staging, "size", 0))
        if size != self._size_class(size) or self.pooled >= self.tracker.max_count or self._pool_bytes + size > self.tracker.max_bytes:
            return False
        try:
            if getattr(staging, "map_state", "unmapped") != "unmapped":
                staging.unmap()
        except Exception as exc:  # an unmap that fails (a lost device): destroy it instead
            log.debug("unmapping a staging buffer failed: %s", exc)
            return False
        self._pool.setdefault(size, []).append(staging)
        self._pool_bytes += size
        self._pool_count += 1
        return True

    def drop_pool(self) -> None:
        """Stop reusing staging buffers and destroy the idle ones (a fault, or closing)."""
        self.reuse = False
        pool, self._pool, self._pool_bytes, self._pool_count = self._pool, {}, 0, 0
        for idle in pool.values():
            for staging in idle:
                self._destroy(staging)

    def _destroy(self, staging: Any) -> None:
        try:
            # destroy() unmaps a mapped buffer. Callers only get here once the buffer's copy
            # is over or its device is lost, so no in-flight work uses it.
            staging.destroy()
        except Exception as exc:  # a lost device may complain; the reference is dropped anyway
            log.debug("destroying a staging buffer failed: %s", exc)
        self.destroyed += 1

    def warm_up(self, device: Any, source: Any) -> None:
        """One 4-byte readback of ``source``, waited for now rather than on the frame path.

        The first map/read in a process makes wgpu-py's cffi parse declarations: measured
        50-75 ms on lavapipe, which would otherwise land in the first frame's readback/poll.
        """
        staging = self.create_staging(device, 4, _MAP_READ | _COPY_DST)
        try:
            encoder = device.create_command_encoder(label="engine_plugin.warm_up")
            encoder.copy_buffer_to_buffer(source, 0, staging, 0, 4)
            with guard_for(device).submitting("warming up the readback path"):
                device.queue.submit([encoder.finish()])
                promise = staging.map_async(_MAP_MODE_READ, 0, 4)
            if settled(promise, 2.0, urgent=True):  # bounded: a destroyed device's map never settles
                promise.sync_wait()
                memoryview(staging.read_mapped(0, 4, copy=False)).release()
        finally:
            self.destroy_staging(staging)

    def start(self, handle: Any, desc: Any, callback: Callable, nbytes: int, staging: Any, promise: Any, fault: Callable[[], str | None]) -> ReadbackRequest:
        """Track an accepted request and hand its promise to the waiter."""
        req = self.reserve(handle, desc, callback, nbytes, staging, fault)
        self.arm(req, promise)
        return req

    def reserve(self, handle: Any, desc: Any, callback: Callable, nbytes: int, staging: Any, fault: Callable[[], str | None]) -> ReadbackRequest:
        """Track an accepted request whose copy is encoded but not submitted yet (a batch):
        it counts against the budgets from now on; :meth:`arm` hands its promise over."""
        req = ReadbackRequest(handle, desc, callback, nbytes, staging, None)
        self.tracker.add(req)
        # Checked after add(): a notify_device_error on another thread either sees this
        # request in fail_all() or has set the fault we read here. Either way it FAILS.
        message = fault()
        if message is not None:
            self.tracker.decide(req, ReadbackStatus.FAILED, message)
        return req

    def arm(self, req: ReadbackRequest, promise: Any) -> None:
        """The request's copy is submitted and its map started. The frame thread's next
        :meth:`collect` takes it if its map has landed by then (the usual case on a real GPU);
        only one still pending then is handed to the waiter thread: waking a thread per
        request costs the frame a GIL hand-over each time."""
        req.promise = promise
        self.waiter.start()

    def collect(self, errors: list[BaseException]) -> int:
        """Decide and deliver what the waiter finished, then what a device error failed;
        release every staging buffer whose copy is known to be over."""
        count = 0
        # Maps that settled since the waiter last ran are taken here, not a GIL switch later
        # (the waiter thread needs the interpreter, which a busy frame loop holds for up to
        # 5 ms): a result is delivered by the first poll after the GPU is done. They go
        # through the waiter's queue like the waiter's own reports, in request order.
        requests = self.tracker.requests()
        for req in requests:
            promise = req.promise
            if promise is None or req.claimed or req.released or not settled_now(promise) or not self.waiter.claim(req):
                continue
            try:
                promise.sync_wait()  # settled: returns at once (flips the buffer's map state)
                error: BaseException | None = None
            except Exception as exc:
                error = exc
            self.waiter.done.put((req, error))
        for req in requests:
            if req.promise is not None and not (req.claimed or req.watched or req.released or req.cancelled):
                req.seen += 1
                if req.seen >= _POLLS_BEFORE_WATCH:
                    self.waiter.watch(req)  # still pending a frame later: the waiter reports it
        while True:
            try:
                req, error = self.waiter.done.get_nowait()
            except queue.Empty:
                break
            count += self._settle(req, error, errors)
        for req in self.tracker.requests():
            if req.status is ReadbackStatus.FAILED and not req.delivered:
                count += self.deliver(req, errors)
            elif self.device_lost and self._deferred(req):
                self.release(req)  # a lost device runs nothing more, and its maps never settle
        self.retry_quarantine()
        return count

    def _settle(self, req: ReadbackRequest, error: BaseException | None, errors: list[BaseException]) -> int:
        """A request whose map settled (``error``: why it failed): decide, deliver, release."""
        req.settled = True  # its copy is over: the staging buffer may be destroyed now
        if req.released:
            return 0
        if req.delivered:  # failed earlier by a device error; its release waited for this
            self.release(req)
            return 0
        if error is None:
            self.tracker.decide(req, ReadbackStatus.READY)
        else:
            lines = str(error).strip().splitlines()
            self.tracker.decide(req, ReadbackStatus.FAILED, f"map failed: {lines[-1] if lines else error!r}")
        return self.deliver(req, errors)

    def deliver(self, req: ReadbackRequest, errors: list[BaseException]) -> int:
        """Run the callback once (collecting its exception), then release, defer or quarantine."""
        if req.delivered:
            return 0
        req.delivered = True
        view = None
        if req.status is ReadbackStatus.READY:
            try:
                # A private numpy anchor over the mapped bytes: every view the callback can
                # derive from ``data`` (slices, casts, np.frombuffer) holds a reference to it,
                # so its refcount tells whether something outlived the callback.
                req.anchor = np.frombuffer(req.staging.read_mapped(0, req.nbytes, copy=False), np.uint8)
                req.baseline = sys.getrefcount(req.anchor)
                view = memoryview(req.anchor)
            except Exception as exc:  # READY was decided: the frame thread owns the request now
                req.status, req.message = ReadbackStatus.FAILED, f"read_mapped failed: {exc}"
        req.in_callback = True  # a close() from inside the callback leaves it to this delivery
        try:
            req.callback(ReadbackResult(req.handle, req.desc, req.status, view, req.id, req.message))
        except Exception as exc:
            errors.append(exc)
        except BaseException:
            # An interrupt out of the callback: the request is released (or quarantined) as after
            # any callback, then the interrupt goes on; it kept its budget share until close()
            # before (review helper 183).
            self._after_callback(req, view)
            raise
        return self._after_callback(req, view)

    def _after_callback(self, req: ReadbackRequest, view: memoryview | None) -> int:
        """The rest of :meth:`deliver` once the callback returned (or raised)."""
        req.in_callback = False
        self.delivered += 1
        if view is not None:
            try:
                view.release()  # ``result.data`` kept by the callback is now unusable, not dangling
            except BufferError:
                pass  # a live export of ``view`` itself: the refcount check below catches it
            del view
            if self._retained(req):
                if self.closed:  # its callback closed the backend: no poll looks again
                    self._release_when_unreferenced(req)
                    return 1
                self.quarantine.append(req)
                log.warning(
                    "readback %d: the callback kept an array over its data; copy what you keep. Its staging buffer stays mapped until that array dies.", req.id
                )
                return 1
        if req.settled or self.device_lost:
            self.release(req)
        # else: failed by a device error while its copy may still run on the GPU. Destroying
        # it now is legal WebGPU, but we keep to "never destroy what in-flight work uses":
        # the waiter's report of its map settling releases it (see collect).
        return 1

    def _deferred(self, req: ReadbackRequest) -> bool:
        return req.delivered and not req.released and req not in self.quarantine

    @staticmethod
    def _retained(req: ReadbackRequest) -> bool:
        return req.anchor is not None and sys.getrefcount(req.anchor) > req.baseline

    def retry_quarantine(self) -> None:
        for req in list(self.quarantine):
            if self._retained(req):
                continue
            self.quarantine.remove(req)
            self.release(req)

    def release(self, req: ReadbackRequest) -> None:
        """Destroy the request's staging buffer and return its budget share (once)."""
        if req.released:
            return  # released already (a close() re-entered from its callback: review helper 183)
        staging = req.staging
        self._forget(req)
        self.destroy_staging(staging)

    def _forget(self, req: ReadbackRequest) -> None:
        req.released = True
        req.cancelled = True  # the waiter forgets it, whatever its promise does later
        req.anchor = None
        req.staging = None
        req.promise = None
        self.tracker.finish(req)

    def close(self, message: str, errors: list[BaseException], wait_s: float) -> None:
        """Fail and deliver everything pending, stop the waiter, release every staging buffer.

        A buffer whose copy may still be running is given up to ``wait_s`` (all together) to
        finish, then destroyed; one still running after that is released without destroy (its
        last reference dropped: wgpu-core frees it when the copy completes).
        """
        self.tracker.fail_all(message)
        self.collect(errors)
        self.waiter.stop()
        self.drop_pool()
        deadline = time.perf_counter() + wait_s
        for req in self.tracker.requests():
            if not self._deferred(req) or req.in_callback:
                continue  # (one whose callback called close(): released by its delivery, after it)
            if self.device_lost or settled(req.promise, max(0.0, deadline - time.perf_counter()), urgent=True):
                self.release(req)
            else:
                self._forget(req)
                self.abandoned += 1
        self.retry_quarantine()
        self.drop_pool()  # buffers released just above may have been pooled
        self.closed = True
        for req in self.quarantine:
            log.warning(
                "backend closed while readback %d's data is still referenced by a callback's array; its staging buffer stays mapped until that array dies",
                req.id,
            )
            self._release_when_unreferenced(req)
        self.quarantine.clear()

    def _release_when_unreferenced(self, req: ReadbackRequest) -> None:
        """A request whose data a callback kept, once the ring is closed (no poll looks at it
        again): its budget share goes back now, and its staging buffer is destroyed when the
        last array over its bytes dies. It stayed mapped and counted for good (helper 183)."""
        anchor, staging = req.anchor, req.staging
        self._forget(req)
        if anchor is not None and staging is not None:
            weakref.finalize(anchor, self._destroy, staging)  # (counted: live_staging_buffers)
