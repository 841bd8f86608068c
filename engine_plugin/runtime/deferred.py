"""One-shot runs in one submission: a small run of host data waits for what comes next.

``abi.read(variant.run(n, inputs={"x": array}).outputs["y"])`` used to cost two submissions
(the run's, then the read's copy) and a map. A *deferrable* run is recorded instead of
submitted; the next thing that needs the queue submits it, and a read that comes next puts its
copy into that same submission: one submit carrying dispatch and copy, then one map.

Deferrable (decided per run, in :meth:`Variant._run`): outside ``abi.batch()``; every input
is host data (numpy arrays, lists, numbers: uploaded into pooled buffers no one else can
reach); no ``outputs=``; ``domain_count`` absent or an int; the variant binds no textures,
tables, pages or columns; and the run uploads and allocates at most ``DEFER_MAX_BYTES`` (a
bigger run's transfer dwarfs one submit, and its GPU time should start at once).

Why it is unobservable: the deferred run touches only buffers the runtime owns (its uploads,
its pooled outputs, the params ring, shared constants). The user reaches them only through
the returned :class:`Output` (``.buffer`` and ``.counter`` submit the deferred run before
handing the buffer out, so raw wgpu calls on it see the run done in queue order) or through
the runtime, which submits the deferred run first: every ``variant.run`` and ``prepare``,
``abi.batch()`` entry, every submission the runtime or the engine backend makes
(``submit_records``, ``Submission.submit``), texture reads and :func:`flush`. A read folds its
copy into it. Buffers it holds stay parked in their pools until it is submitted (it counts as
an open batch), so a dropped output is never handed to another run before the deferred run
is on the queue.

At most one run is deferred at a time, process-wide, under one lock (threads: whichever call
comes next submits it, a read from another thread folds into it). On a lost device the
deferred run is dropped (nothing of it could run); reading its outputs raises
:class:`DeviceLostError` as any read on that device does. What it costs: a deferred run's GPU
work starts at the next runtime call rather than at once; :func:`flush` submits it now.
"""

from __future__ import annotations

import threading
from typing import Any

from ..errors import DeviceLostError
from .batch import WHY_DEFERRED, bump_epoch, register_open, settle_outputs, unregister_open
from .submission import PENDING, encode_records, submit_encoder

__all__ = ["DEFER_MAX_BYTES", "defer", "flush", "flush_deferred", "deferred_pending"]

DEFER_MAX_BYTES = 1 << 20

_lock = threading.RLock()
_FLUSHING = ("flushing",)


def deferred_pending() -> bool:
    """Whether a run is deferred (not on the queue yet)."""
    return PENDING[0] is not None and PENDING[0] is not _FLUSHING


class _Deferred:
    """The deferred run: its records (conversions, then the dispatch; params already
    written), the uploads to give back once submitted, and what it touches (held: a pool
    parks these buffers while it waits, as an open batch's)."""

    __slots__ = ("ctx", "records", "temps", "pool", "held", "ring", "offset", "results")

    def __init__(self, ctx: Any, records: list, temps: list, pool: Any, held: set, ring: Any, offset: int, results: list):
        self.ctx, self.records, self.temps, self.pool, self.held = ctx, records, temps, pool, held
        self.ring, self.offset = ring, offset  # its params slot, reserved until it is submitted
        self.results = results  # its result buffers (see batch.settle_outputs)

    def holds(self, buffer: Any) -> bool:
        return buffer in self.held

    def submit(self) -> None:
        ctx = self.ctx
        encoder = ctx.device.create_command_encoder()  # no label: a label costs ~6-9 µs an encoder (H200 host)
        encode_records(encoder, self.records)
        submit_encoder(ctx.queue, ctx.guard, encoder)

    def drop(self) -> None:
        self.ring.reserved.discard(self.offset)
        for buf in self.temps:
            self.pool.give(buf)
        self.held = set()
        bump_epoch()


_NOTHING: frozenset = frozenset()


def defer(variant: Any, data: bytes, bind_group: Any, groups: tuple, ops: list, temps: list, touched: list, extra: list, results: list) -> None:
    """Record a checked run as the deferred one (submitting any earlier deferred run first).
    Its params are written now unless its ring slot holds them already (``place``)."""
    with _lock:
        if PENDING[0] is not None:
            flush_deferred()
        # The slot the variant's last run left these very bytes in (a repeat's params are one
        # bytes object), else a fresh slot written now: queue order puts any write before the
        # run's later submission. Reserved until then, as a prepared run's: no take() hands it
        # out meanwhile (a batch on another thread took it and wrote its own params over it,
        # review helper 139), and a place() answering it only reads it.
        ring = variant._ring
        offset = ring.place(variant.ctx.queue, data)
        ring.reserved.add(offset)
        record = (variant.compiled.pipeline, bind_group, offset, groups, ops)
        d = _Deferred(variant.ctx, extra + [record] if extra else [record], temps, variant._pool, set(touched), ring, offset, results)
        register_open(d)
        PENDING[0] = (variant.ctx, d)


def flush_deferred(ctx: Any = None, after: tuple | None = None) -> bool:
    """Submit the deferred run, if any. With ``after`` (a record, e.g. a read's copy): when
    the deferred run is on ``ctx``, ``after`` goes into the same submission; answers whether it
    did (the caller then maps without submitting).

    Raises:
        DeviceLostError: only when ``after`` was folded in and the device turned out lost; a
            deferred run on a lost device is otherwise dropped (nothing of it could run).
    """
    with _lock:
        found = PENDING[0]
        if found is None or found is _FLUSHING:  # none, or this thread is submitting it right now
            return False
        owner, d = found
        submitted = False
        try:
            # Not None until it is on the queue: a thread that sees None may rely on that (a
            # read in another thread would otherwise submit its copy ahead of the run); one
            # that sees _FLUSHING waits on the lock above. Set inside the try that undoes it:
            # an interrupt in between left it set for good (review helper 166).
            PENDING[0] = _FLUSHING
            if owner.lost:
                return False
            folded = after is not None and owner is ctx
            if folded:
                d.records.append(after)
            try:
                d.submit()
                submitted = True
            except DeviceLostError:
                if folded:
                    raise
                return False
            return folded
        finally:
            PENDING[0] = None
            d.held = _NOTHING  # no call before it: an interrupt below leaves nothing parked for good
            unregister_open(d)
            # Interrupted (or refused) on a healthy device: its outputs hold an earlier run's
            # bytes and refuse to be read or bound (see batch.UNSUBMITTED).
            settle_outputs(d.results, [] if submitted or owner.lost else [owner.device], WHY_DEFERRED)
            d.drop()  # submitted, or never to run: its uploads are free, nothing is held


def flush() -> None:
    """Submit the deferred run now (if any): its GPU work starts without waiting for the next
    runtime call. Never needed for correctness."""
    if PENDING[0] is not None:
        flush_deferred()
