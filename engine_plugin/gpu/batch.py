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

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..device.flags import COPY_DST, MAP_READ
from .backend import ReadbackStatus
from .ring import map_submitted

if TYPE_CHECKING:
    from .descriptors import DispatchDesc, ReadbackDesc
    from .wgpu_backend import _Product

__all__ = ["Batching", "SubmissionBatch"]

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


class Batching:
    """The batch half of :class:`~engine_plugin.gpu.wgpu_backend.WgpuBackend` (a mixin: it uses
    the backend's device, queue, readback ring and fail-closed helpers)."""

    _batch: SubmissionBatch | None
    device: Any
    queue: Any
    stats: dict
    _ring: Any
    _closed: bool
    _guard: Any
    # The backend's members this half calls (see WgpuBackend).
    healthy: Any
    fault: Any
    _refuse: Any
    _dispatch_records: Any
    _timer: Any
    _device_exception: Any
    _fault: Any

    def _batch_dispatch(self, desc: DispatchDesc, product: _Product, writes: list) -> bool:
        batch = self._batch
        buffers = [w[0] for w in writes]
        if batch.conflicts(buffers):  # type: ignore[union-attr]
            self._flush_batch()
            batch = self._batch
            if not self.healthy:
                return self._refuse(f"dispatch: the backend failed submitting its batch ({self.fault})")
        try:
            for buffer, offset, data in writes:
                self.queue.write_buffer(buffer, offset, data)
        except Exception as exc:
            return self._device_exception(f"dispatch({desc.product})", exc)
        records = self._dispatch_records(desc, product)
        submission = batch.submission  # type: ignore[union-attr]
        for record in records[:-1]:
            submission.add(record)
        submission.add(records[-1], timing_key=str(desc.product.key) if self._timer is not None else None)
        if desc.prepared is not None:
            batch.prepared.append(desc.prepared)  # type: ignore[union-attr]
        batch.note_writes(buffers)  # type: ignore[union-attr]
        self.stats["dispatches"] += 1
        return True

    # ---- batches ---------------------------------------------------------------------

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Record the dispatches and readbacks made inside into one command buffer, submitted
        once at exit; the readbacks' maps start after it. Nested batches join the outer one.

        Each call still answers acceptance at once (validated and encoded). A submission that
        fails fails closed like any other: its readbacks complete FAILED through their
        callbacks, and its dispatches never ran. See :mod:`engine_plugin.gpu.batch` for the
        ordering rules (writes or uploads that would overtake encoded work flush first).
        """
        if self._batch is not None:
            yield
            return
        self._batch = SubmissionBatch()
        try:
            yield
        finally:
            batch, self._batch = self._batch, None
            self._submit_batch(batch)

    def _flush_batch(self) -> None:
        """Submit what the open batch recorded and keep recording into a fresh one."""
        batch = self._batch
        self._batch = SubmissionBatch()
        self._submit_batch(batch)  # type: ignore[arg-type]

    def _submit_batch(self, batch: SubmissionBatch) -> None:
        reqs, batch.readbacks = batch.readbacks, []
        prepared, batch.prepared = batch.prepared, []
        try:
            if batch.recorded:
                if not self.healthy:
                    raise _Disabled(self.fault or "disabled")
                # finish() (which raises on a lost device) and the submit, under the submit lock.
                batch.submission.submit(self.device, self.queue, self._guard, "batch", self._timer)
        except Exception as exc:
            for req in reqs:
                req.settled = True  # none of their copies will run: their staging may go
            if isinstance(exc, _Disabled):
                self._ring.tracker.fail_all(f"the backend was disabled before its batch was submitted ({exc})")
            elif not self._closed:
                self._device_exception("submitting a batch", exc)
            return
        finally:
            for run in prepared:  # submitted, or never to run: their pooled buffers are free
                run.submitted()
        for i, req in enumerate(reqs):
            try:
                with self._guard.submitting("mapping a batched readback"):  # map_async may submit
                    promise = map_submitted(req.staging, req.nbytes)
            except Exception as exc:
                for later in reqs[i:]:
                    later.settled = True  # destroying after submission is safe (wgpu-core defers it)
                self._device_exception("mapping a batched readback", exc)
                return
            if promise is None:  # the reference's "null map future": fail it, release at once
                req.settled = True
                self._ring.tracker.decide(req, ReadbackStatus.FAILED, "map_async gave no promise")
                continue
            self._ring.arm(req, promise)

    def _batch_readback(self, desc: ReadbackDesc, product: _Product, source: Any, base: int, size: int) -> bool:
        staging = None
        try:
            staging = self._ring.create_staging(self.device, size, _STAGING_USAGE)
            self._batch.submission.add((None, None, None, (0, 0, 0), [("copy", source, base, staging, 0, size)]))  # type: ignore[union-attr]
        except Exception as exc:
            if staging is not None:  # never submitted: destroying is safe
                self._ring.destroy_staging(staging)
            return self._device_exception(f"readback({desc.product})", exc)
        req = self._ring.reserve(desc.product, desc, product.desc.callback, size, staging, lambda: self._fault)
        self._batch.readbacks.append(req)  # type: ignore[union-attr]
        self.stats["readbacks"] += 1
        return True
