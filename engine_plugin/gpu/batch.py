"""One command buffer for many dispatches and readback copies (``WgpuBackend.batch()``).

Why: each ``queue.submit`` costs driver time (measured 63 us a dispatch on an H200 against
6.6 us batched), and on lavapipe a submit waits for the previous submission to finish, so a
frame of separate submissions pays for every dispatch's GPU time on the engine thread.

Ordering rules the batch keeps, because ``queue.write_buffer`` lands before the *next*
submit, not at its place among encoded commands:

* a dispatch's writes into a buffer already written in this batch flush the batch first
  (else the second write would overwrite what the first dispatch should read);
* an upload into a field mirror while commands are encoded flushes the batch first (else
  the encoded dispatches would read the newer bytes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..device.flags import COPY_DST, MAP_READ
from .backend import ReadbackStatus
from .ring import map_submitted

log = logging.getLogger("engine_plugin.gpu")

if TYPE_CHECKING:
    from .backend import ReadbackCallback
    from .descriptors import DispatchDesc, ReadbackDesc

__all__ = ["BatchRecorder", "SubmissionBatch"]

# MAP_READ | COPY_DST: the usage of a staging buffer (numbers: no wgpu import here).
_STAGING_USAGE = MAP_READ | COPY_DST


class SubmissionBatch:
    """What an open batch recorded: a :class:`~engine_plugin.runtime.submission.Submission`
    (dispatches and readback copies in order), the buffers written for it, its readbacks (mapped
    after the submit) and the prepared runs whose pooled buffers go back after it."""

    def __init__(self) -> None:
        # Imported here: the runtime package loads wgpu, and importing engine_plugin.gpu must not.
        from ..runtime.submission import Submission

        self.submission = Submission()
        self.written: set[int] = set()
        self.readbacks: list[Any] = []  # ReadbackRequests reserved, mapped after the submit
        self.prepared: list[Any] = []  # PreparedRuns (engine products), released after the submit

    def conflicts(self, buffers: list[Any]) -> bool:
        """Whether writing ``buffers`` now would overwrite a write this batch still needs."""
        return any(id(b) in self.written for b in buffers)

    def note_writes(self, buffers: list[Any]) -> None:
        self.written.update(id(b) for b in buffers)

    @property
    def recorded(self) -> bool:
        """Whether anything was recorded (an empty batch submits nothing)."""
        return not self.submission.empty


class _Disabled(Exception):
    """A batch found its backend disabled before submitting (a notify from another thread)."""


class _Destroyed(Exception):
    """A batch uses a buffer or texture destroyed after it was recorded."""


class BatchRecorder:
    """The batches of one :class:`~engine_plugin.gpu.wgpu_backend.WgpuBackend`: the open
    :class:`SubmissionBatch`, recording into it, flushing and submitting it, and arming its
    readbacks' maps after the submit. The backend owns one and records through it while a
    ``with backend.batch():`` is open.

    Args:
        device, queue: the backend's wgpu device and queue.
        guard: the device's submit guard (submissions hold its lock and check its loss flag).
        ring: the backend's :class:`~engine_plugin.gpu.ring.ReadbackRing` (staging, budgets,
            arming maps).
        timer: the backend's ``GpuTimer`` when batched dispatches are timed, else None.
        timing_every: a product's dispatch is timed at most once in this many batches (its
            first, then one every N: ``WgpuBackendConfig.gpu_timing_every``).
        healthy: whether the backend accepts work now.
        fault: why the backend is disabled (``WgpuBackend.fault``), for messages.
        fault_state: the backend's fault message or None (a readback request reads it when
            it is decided).
        closed: whether the backend was closed.
        refuse: records a refusal and answers False (``WgpuBackend._refuse``).
        device_exception: fails the backend closed on a device error and answers False, or
            re-raises anything else (``WgpuBackend._device_exception``).
    """

    def __init__(
        self,
        device: Any,
        queue: Any,
        guard: Any,
        ring: Any,
        timer: Any,
        *,
        timing_every: int = 1,
        healthy: Callable[[], bool],
        fault: Callable[[], str | None],
        fault_state: Callable[[], str | None],
        closed: Callable[[], bool],
        refuse: Callable[[str], bool],
        device_exception: Callable[[str, Exception], bool],
    ) -> None:
        self._device = device
        self._queue = queue
        self._guard = guard
        self._ring = ring
        self._timer = timer
        self._timing_every = timing_every
        self._serial = 0  # batches opened so far
        # Product key -> the batch its last timed dispatch was in (unregistering forgets it).
        self._timed_at: dict[str, int] = {}
        self._healthy = healthy
        self._fault = fault
        self._fault_state = fault_state
        self._closed = closed
        self._refuse = refuse
        self._device_exception = device_exception
        self._open: SubmissionBatch | None = None

    @property
    def open(self) -> bool:
        """Whether a batch is open (dispatches and readbacks are recorded, not submitted)."""
        return self._open is not None

    @property
    def recorded(self) -> bool:
        """Whether the open batch recorded anything (an upload now must flush it first)."""
        return self._open is not None and self._open.recorded

    def dispatch(self, desc: DispatchDesc, writes: list, records: list) -> bool:
        """Record an accepted dispatch (its validated ``writes``, then its submission
        ``records``) into the open batch; answers whether it was recorded."""
        batch = self._open
        buffers = [w[0] for w in writes]
        if batch.conflicts(buffers):  # type: ignore[union-attr]
            self.flush()
            batch = self._open
            if not self._healthy():
                return self._refuse(f"dispatch: the backend failed submitting its batch ({self._fault()})")
        try:
            for buffer, offset, data in writes:
                self._queue.write_buffer(buffer, offset, data)
        except Exception as exc:
            return self._device_exception(f"dispatch({desc.product})", exc)
        submission = batch.submission  # type: ignore[union-attr]
        for record in records[:-1]:
            submission.add(record)
        submission.add(records[-1], timing_key=self._timing_key(str(desc.product.key)) if self._timer is not None else None)
        if desc.prepared is not None:
            batch.prepared.append(desc.prepared)  # type: ignore[union-attr]
        batch.note_writes(buffers)  # type: ignore[union-attr]
        return True

    def _timing_key(self, key: str) -> str | None:
        """``key`` when this dispatch of the product is to be timed: in its first batch, then
        in one batch of ``timing_every`` (all its dispatches there). An untimed dispatch shares
        the frame's one compute pass."""
        last = self._timed_at.get(key)
        if last == self._serial:
            return key  # every dispatch of a product in its timed batch: its frame's whole time
        if last is not None and self._serial - last < self._timing_every:
            return None
        self._timed_at[key] = self._serial
        return key

    def forget_timing(self, key: str) -> None:
        """Time the next dispatch of ``key`` (a product registered anew: a reload)."""
        self._timed_at.pop(key, None)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Open a batch for the ``with`` block, submitted at its exit (``WgpuBackend.batch``);
        a nested one joins the open batch."""
        if self._open is not None:
            yield
            return
        self._open = SubmissionBatch()
        self._serial += 1
        try:
            yield
        finally:
            batch, self._open = self._open, None
            self._submit(batch)

    def flush(self) -> None:
        """Submit what the open batch recorded and keep recording into a fresh one."""
        batch = self._open
        self._open = SubmissionBatch()
        self._submit(batch)  # type: ignore[arg-type]

    def _submit(self, batch: SubmissionBatch) -> None:
        reqs, batch.readbacks = batch.readbacks, []
        prepared, batch.prepared = batch.prepared, []
        try:
            if batch.recorded:
                if not self._healthy():
                    raise _Disabled(self._fault() or "disabled")
                from ..runtime.submission import unusable_in  # here: importing engine_plugin.gpu loads no wgpu

                gone = unusable_in(batch.submission.records)
                if gone is not None:
                    # Destroyed after its dispatch or readback was recorded: submitting would
                    # abort the process (review helper 159). None of it runs; its readbacks fail.
                    from ..device.destroyed import unusable

                    raise _Destroyed(f"since it was recorded, a buffer or texture it uses ({getattr(gone, 'label', '')!r}) {unusable(gone)}")
                # finish() (which raises on a lost device) and the submit, under the submit lock.
                batch.submission.submit(self._device, self._queue, self._guard, "batch", self._timer)
        except Exception as exc:
            for req in reqs:
                req.settled = True  # none of their copies will run: their staging may go
            if isinstance(exc, _Disabled):
                self._ring.tracker.fail_all(f"the backend was disabled before its batch was submitted ({exc})")
            elif isinstance(exc, _Destroyed):
                log.warning("a batch was not submitted: %s", exc)
                for req in reqs:
                    self._ring.tracker.decide(req, ReadbackStatus.FAILED, f"its batch was not submitted: {exc}")
            elif not self._closed():
                self._device_exception("submitting a batch", exc)
            return
        except BaseException:
            # An interrupt (Ctrl-C) before the submit went out: its readbacks would stay in flight
            # for good, never landing (review helper 206: every later frame deferred behind
            # them). They fail, and their chunks are owed again; the interrupt goes on.
            self._interrupted(reqs, "before its batch was submitted")
            raise
        finally:
            for run in prepared:  # submitted, or never to run: their pooled buffers are free
                run.submitted()
        try:
            self._map_all(reqs)
        except BaseException:
            # The same for those an interrupt left unmapped or unarmed (review helper 208: one
            # landing between a map and its arm left that request in flight for good).
            self._interrupted(reqs, "before its readback was mapped")
            raise

    def _map_all(self, reqs: list) -> None:
        """Start the map of each submitted readback and hand it to the ring."""
        promises: list[Any] = []
        failure: Exception | None = None
        try:
            # One hold of the submit lock for all of them (map_async may submit); each is
            # armed after it, outside the lock, as the ring's waiter takes its own.
            with self._guard.submitting("mapping a batched readback"):
                for req in reqs:
                    promises.append(map_submitted(req.staging, req.nbytes))
        except Exception as exc:
            failure = exc
            for later in reqs[len(promises) :]:
                later.settled = True  # destroying after submission is safe (wgpu-core defers it)
        try:
            for req, promise in zip(reqs, promises):
                if promise is None:  # the reference's "null map future": fail it, release at once
                    req.settled = True
                    self._ring.tracker.decide(req, ReadbackStatus.FAILED, "map_async gave no promise")
                    continue
                self._ring.arm(req, promise)
        finally:  # (an interrupt while arming still records the device's failure: review helper 243)
            if failure is not None:
                self._device_exception("mapping a batched readback", failure)

    def _interrupted(self, reqs: list, when: str) -> None:
        """Fail those of ``reqs`` an interrupt left unsubmitted, unmapped or unarmed (their
        staging may go: destroying after a submission is safe, wgpu-core defers it); one armed
        already lands as any other."""
        for req in reqs:
            if req.promise is not None or req.settled:
                continue
            req.settled = True
            self._ring.tracker.decide(req, ReadbackStatus.FAILED, f"interrupted {when}")

    def readback(self, desc: ReadbackDesc, callback: ReadbackCallback, source: Any, base: int, size: int) -> bool:
        """Record the copy of an accepted readback into the open batch and reserve its
        request (mapped after the submit); answers whether it was recorded."""
        staging = None
        try:
            staging = self._ring.create_staging(self._device, size, _STAGING_USAGE)
            self._open.submission.add((None, None, None, (0, 0, 0), [("copy", source, base, staging, 0, size)]))  # type: ignore[union-attr]
        except Exception as exc:
            if staging is not None:  # never submitted: destroying is safe
                self._ring.destroy_staging(staging)
            return self._device_exception(f"readback({desc.product})", exc)
        req = self._ring.reserve(desc.product, desc, callback, size, staging, self._fault_state)
        self._open.readbacks.append(req)  # type: ignore[union-attr]
        return True
