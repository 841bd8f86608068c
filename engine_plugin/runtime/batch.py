"""Submitting runs: one command buffer per run by default, or many runs in one (``abi.batch()``).

A record is (pipeline, bind group, params offset or None, workgroups, ops before it). The ops
are what the run needs done on the queue before its dispatch: ``("clear", buffer, offset,
size)`` zeroes an output (defined contents), ``("copy", src, src_offset, dst, dst_offset,
size)`` snapshots a counter. Consecutive records without ops share one compute pass; a record
with ops closes the pass first, because copies and clears cannot sit inside one.

Buffer lifetime: outside a batch a run is submitted at once, so a buffer its outputs release
later is reused only by work queued after it (WebGPU's queue order). Inside a batch nothing is
submitted yet, so every buffer a recorded run touches is *held* by the batch: a pooled buffer
released meanwhile stays parked in its pool (:func:`held_by_open_batch`) until the batch is
submitted. Reading anything back inside a batch flushes it first, so a read never answers
what the GPU has not been asked to compute yet.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

from ..gpu.device import DeviceContext

__all__ = ["Batch", "batch", "current_batch", "submit_records", "encode_records", "flush_current_batch", "held_by_open_batch", "flush_epoch"]

_local = threading.local()
_open_lock = threading.Lock()
_open: list["Batch"] = []  # every open batch, all threads: a release may come from any thread (GC)
_epoch = [0]


def encode_records(encoder: Any, records: list) -> None:
    """Encode ``records`` in order into ``encoder``.

    Clears all go first, before any dispatch: a cleared buffer is one the pool just handed
    out, which no earlier record of this submission can touch (the batch holds those), so
    they need not break the compute pass run by run. Copies stay in order.
    """
    for record in records:
        for op in record[4]:
            if op[0] == "clear":
                encoder.clear_buffer(op[1], op[2], op[3])
    cpass = None
    for pipeline, bind_group, offset, groups, ops in records:
        copies = [op for op in ops if op[0] == "copy"] if ops else ()
        if copies:
            if cpass is not None:
                cpass.end()
                cpass = None
            for op in copies:
                encoder.copy_buffer_to_buffer(op[1], op[2], op[3], op[4], op[5])
        if groups[0] == 0:
            continue
        if cpass is None:
            cpass = encoder.begin_compute_pass()
        cpass.set_pipeline(pipeline)
        if offset is None:
            cpass.set_bind_group(0, bind_group)
        else:
            cpass.set_bind_group(0, bind_group, [offset])
        cpass.dispatch_workgroups(*groups)
    if cpass is not None:
        cpass.end()


def submit_records(ctx: DeviceContext, records: list) -> None:
    """Encode ``records`` in order into one command buffer and submit it."""
    encoder = ctx.device.create_command_encoder()
    encode_records(encoder, records)
    # finish() and submit under the device's submit lock: a loss can't land in between (it aborts there).
    with ctx.guard.submitting("a run"):
        ctx.queue.submit([encoder.finish()])


class Batch:
    """Runs recorded inside ``with abi.batch():`` go to the GPU in one submission at exit.

    Params are staged in each variant's ring mirror and written once per contiguous range at
    flush; a variant about to wrap its ring inside one batch flushes first, so no slot is
    overwritten before the dispatch that reads it.
    """

    def __init__(self) -> None:
        self.records: dict[int, tuple[DeviceContext, list]] = {}
        self.temps: list = []
        self._staged: dict[int, tuple[Any, list[int]]] = {}  # id(variant) -> (variant, offsets)
        self._held: set[int] = set()  # id() of every buffer a recorded run touches
        self._held_refs: list = []  # ... kept alive, so an id() stays theirs until the flush

    def add(self, variant: Any, data: bytes, bind_group: Any, groups: tuple, ops: list, temps: list, buffers: list, extra: list | None = None) -> None:
        """Record one run (and ``extra`` records, e.g. conversions, that must come before it)."""
        ring = variant._ring
        staged = self._staged.get(id(variant))
        if staged is not None and len(staged[1]) >= ring.slots - 1:
            self.flush()
            staged = None
        if staged is None:
            staged = self._staged[id(variant)] = (variant, [])
        offset = ring.take()
        ring.mirror[offset : offset + len(data)] = data
        staged[1].append(offset)
        for buf in buffers:
            self._held.add(id(buf))
        self._held_refs.extend(buffers)
        records = self.records.setdefault(id(variant.ctx), (variant.ctx, []))[1]
        records.extend(extra or ())
        records.append((variant.compiled.pipeline, bind_group, offset, groups, ops))
        if temps:
            self.temps.extend((variant, t) for t in temps)

    def holds(self, buffer: Any) -> bool:
        return id(buffer) in self._held

    @property
    def pending(self) -> bool:
        return any(records for _, records in self.records.values())

    def flush(self) -> None:
        for variant, offsets in self._staged.values():
            ring = variant._ring
            offsets.sort()
            start = prev = offsets[0]
            for off in offsets[1:] + [None]:
                if off is not None and off == prev + ring.stride:
                    prev = off
                    continue
                end = prev + ring.stride
                variant.ctx.queue.write_buffer(ring.buffer, start, memoryview(ring.mirror)[start:end])
                if off is not None:
                    start = prev = off
        for ctx, records in self.records.values():
            if records:
                submit_records(ctx, records)
        for variant, buf in self.temps:
            variant._pool.give(buf)
        self._held = set()
        self._held_refs = []
        _epoch[0] += 1
        self.records.clear()
        self.temps.clear()
        self._staged.clear()


def flush_epoch() -> int:
    """Bumped whenever a batch submits: only then can a held buffer stop being held."""
    return _epoch[0]


def held_by_open_batch(buffer: Any) -> bool:
    """Whether a run recorded in an open (not yet submitted) batch touches ``buffer``: the
    pool must not hand it to anyone before that batch is submitted."""
    return any(b.holds(buffer) for b in tuple(_open))


def current_batch() -> Batch | None:
    stack = getattr(_local, "stack", None)
    return stack[-1] if stack else None


def flush_current_batch() -> None:
    """Submit what this thread's open batches recorded so far (a read is about to wait on it)."""
    for b in getattr(_local, "stack", None) or ():
        if b.pending:
            b.flush()


@contextmanager
def batch() -> Iterator[Batch]:
    """Record every ``variant.run`` inside into one submission (per device), sent at exit.

    Reading an output or a count inside the batch submits what was recorded so far first.
    """
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    b = Batch()
    stack.append(b)
    with _open_lock:
        _open.append(b)
    try:
        yield b
    finally:
        stack.pop()
        try:
            b.flush()
        finally:
            with _open_lock:
                _open.remove(b)
