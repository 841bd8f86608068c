"""Many runs in few submissions (``abi.batch()``); the records and their encoding are
:mod:`engine_plugin.runtime.submission`'s.

Slices: a batch submits what it recorded so far once the oldest unsubmitted record is
``FIRST_SLICE_S`` old (the batch's first slice) or ``SLICE_S`` old (every later one), and the
rest at exit (repeats of the last run recorded look at the clock every ``LANE_DUE_EVERY``
records). The GPU then starts while Python still encodes, and a batch that encodes in less
than ``FIRST_SLICE_S`` stays one submission. Each extra submission costs one ``queue.submit``
(tens of microseconds on a discrete GPU), so the extra host time is bounded by that cost per
``SLICE_S`` of encoding, and the GPU waits at most ``FIRST_SLICE_S`` for its first work.

By default a batch slices only on a GPU, and only work worth a submission: a slice due by
time goes only once the buffers its runs touch hold ``SLICE_MIN_BYTES`` (a bound on the memory
traffic it gives the GPU), or once it is ``SLICE_MAX_S`` old whatever it holds (a kernel whose
cost is not in its buffers). A slice of small runs would give the GPU microseconds of work for
a submission costing the host tens: on the H200 host a hundred 4 KiB runs took 2.4x raw's host
time sliced, 1.6x as one submission. On a CPU adapter (lavapipe) a submit waits for the previous
submission, so a slice makes Python wait for the CPU's own "GPU" work mid-batch (measured
there: host time 2-3x, time until done no better); a batch there keeps one submission.
``abi.batch(slices=True)`` slices by time alone, on any device; ``slices=False`` keeps one
submission anywhere.

Order: slices go to the queue in order, and a run's params are written before the submission
carrying it, so runs execute in recording order whatever the slicing. A nested batch submits
what the batches around it recorded first (before its own slices and at its exit).

Buffer lifetime: outside a batch a run is submitted at once, so a buffer its outputs release
later is reused only by work queued after it (WebGPU's queue order). Inside a batch a recorded
run is not submitted yet, so every buffer it touches is *held* until its slice is submitted: a
pooled buffer released meanwhile stays parked in its pool (:func:`held_by_open_batches`) until
then. Buffers of runs already submitted in an earlier slice are free to reuse, as outside a
batch. Temporary buffers (uploads) go back to the pool after the submission carrying their
run. Reading anything back inside a batch submits what was recorded first, so a read never
answers what the GPU has not been asked to compute yet.
"""

from __future__ import annotations

import contextvars
import threading
import time
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from ..device.context import DeviceContext
from ..device.destroyed import EPOCH as DESTROY_EPOCH
from ..device.destroyed import register_holder_lookup
from ..device.writes import write_buffer
from ..errors import DeviceLostError
from .loss import LOST_HINT, lost_error
from .submission import PENDING, flush_pending, submit_records

__all__ = [
    "Batch",
    "Lane",
    "BATCH_STACK",
    "batch",
    "current_batch",
    "flush_current_batch",
    "flush_epoch",
    "open_batches",
    "made_by_other_open_batch",
    "register_open",
    "unregister_open",
    "bump_epoch",
    "held_by_none",
    "unsubmitted",
    "settle_outputs",
    "written_in_this_batch",
    "VOIDED",
    "held_by_open_batches",
]

# This context's open batches, innermost last: per thread, and per asyncio task (a task runs
# in its own context), so two tasks interleaving their batches on one thread never mix them.
_stack: contextvars.ContextVar[tuple[Batch, ...]] = contextvars.ContextVar("engine_plugin_batches", default=())
BATCH_STACK = _stack  # the same variable: current_batch()'s common case without a call, for hot paths
_open_lock = threading.Lock()
_open: list = []  # every open batch, all threads: a release may come from any thread (GC)
OPEN_BATCHES = _open  # the same list (never rebound): a truth test without a call, for hot paths
_epoch = [0]
FLUSH_EPOCH = _epoch  # the same list (never rebound): flush_epoch() without a call, for hot paths

FIRST_SLICE_S = 0.0002  # the first slice goes once its oldest record is this old (seconds)
# Every later slice: bounds the extra submits to one per half millisecond of encoding. On the
# H200 (tools/probes/batch_slices.py, 100 vec4 axpys over 256 MiB) 1 ms slices left the GPU
# idle between them when the host encoded slower than the GPU ran (0.84-0.88 of its rate by
# wall clock in some rounds); 0.5 ms: 0.91 (raw's one submission: 0.93).
SLICE_S = 0.0005
# A default batch's slice due by time goes once its runs touch this many bytes of buffers (at
# several TB/s, microseconds of GPU traffic: about what a submission costs the host), or once
# it is SLICE_MAX_S old (kernels whose cost is not in their buffers' size).
SLICE_MIN_BYTES = 32 << 20
SLICE_MAX_S = 0.004
# A batch's lane (repeats of its last run) looks at the clock every this many records.
LANE_DUE_EVERY = 8


class Lane:
    """The run a batch recorded last, while a repeat of it may append to the batch without
    :meth:`Batch.add`'s lookups: a batch of one kernel's runs spends its host time on each one.

    ``variant``, ``data`` (its params bytes), ``fixed`` (the buffers every repeat binds) and
    ``offset`` (its params slot) say what a repeat must share. ``record`` appends a record to
    the batch's list; ``made``, ``results`` and ``held`` add a repeat's output buffer to the
    batch's sets (see :meth:`Batch.add`); ``due`` is the batch's slice check, None when it does
    not slice. Valid while it is the batch's :attr:`Batch.lane`: a flush or a drop forgets it,
    with the list and the sets these methods fill.
    """

    __slots__ = ("variant", "data", "fixed", "offset", "record", "made", "results", "held", "due", "until_due", "held_bytes")

    def __init__(self, batch: "Batch", variant: Any, data: bytes, fixed: list, records: list, offset: int) -> None:
        self.variant, self.data, self.fixed, self.offset = variant, data, fixed, offset
        self.record = records.append
        self.made, self.results, self.held = batch._made.add, batch._results.add, batch._held.add
        self.due = batch._slice_due if batch.slices else None
        # Records appended before ``due`` is called again: a clock read every record cost a
        # 100-run batch a tenth of its host time over raw on the H200; every LANE_DUE_EVERY
        # records a slice is at most a few tens of microseconds late.
        self.until_due = LANE_DUE_EVERY
        # Bytes of the output buffers repeats added to ``held`` (each a pooled buffer the batch
        # did not hold: the pool hands out none it holds), so the slice's work check adds them
        # up without a pass over the whole set (Batch._held_bytes).
        self.held_bytes = 0


class Batch:
    """Runs recorded inside ``with abi.batch():`` go to the GPU in slices (see the module
    docstring), the last at exit.

    Params are staged in each variant's ring mirror and written once per contiguous range at
    flush; a variant about to wrap its ring inside one slice flushes first, so no slot is
    overwritten before the dispatch that reads it.
    """

    def __init__(self, slices: bool | None = None) -> None:
        self.slices = slices  # None: decided at the first run, by the device (see submits_block)
        self._by_work = slices is None  # the default: a slice due by time also needs the work
        self.submissions = 0  # how many submissions the batch made (slices included)
        self._slice_start = 0.0
        self._limit = FIRST_SLICE_S
        self.records: dict[int, tuple[DeviceContext, list]] = {}
        self.temps: list = []
        # id(variant) -> (variant, staged offsets, [the last run's params bytes, its offset])
        self._staged: dict[int, tuple[Any, list[int], list]] = {}
        self._held: set = set()  # every buffer a recorded run touches, until the flush
        self._made: set = set()  # the buffers recorded runs made (pooled outputs, uploads), until the flush
        self._results: set = set()  # every buffer holding a recorded run's results (given outputs too)
        self.outer: tuple[Batch, ...] = ()  # the batches this one is nested in (this thread's)
        self.on_drop: list = []  # called once its records are submitted (or dropped)
        # A context copied into a task or a thread (asyncio.create_task, to_thread) still lists
        # the batches open where it was copied: only this thread's, not yet ended, are current.
        self.thread = threading.get_ident()
        self.ended = False
        # The last add()'s run, which a repeat appends to without the lookups (add_again, and
        # Variant's batch lane). Forgotten when anything it names changes (a flush, a drop).
        self.lane: Lane | None = None
        # (lane, its held_bytes then, the exact sum then): _held_bytes's last full sum, while only
        # that lane added to _held since (add() forgets it).
        self._held_sum: tuple | None = None

    def add(
        self,
        variant: Any,
        data: bytes,
        bind_group: Any,
        groups: tuple,
        ops: list,
        temps: list,
        buffers: list,
        extra: list | None = None,
        made: Any = (),
        fixed: list | None = None,
        results: Any = (),
    ) -> None:
        """Record one run (and ``extra`` records, e.g. conversions, that must come before it).
        ``made``: the buffers the run made for its outputs (pooled, uploads), which hold nothing
        of it until it is submitted (another thread reading one is refused; a given output
        answers what it holds); ``results``: every buffer holding its results, given ones too
        (refused once the run was dropped unsubmitted); ``fixed``: the part of ``buffers`` every
        repeat of the run binds (see :meth:`add_again`)."""
        staged = self._staged.get(id(variant))
        last = staged[2] if staged is not None else None
        if last is not None and (last[0] is data or (last[0] is not None and type(data) is bytes and last[0] == data)):
            # The same params bytes as this variant's last run in this batch (a repeat passes
            # the very same object): its staged slot holds them already, and a uniform slot is
            # only read. Only bytes are remembered: a mutable buffer could change meanwhile.
            offset = last[1]
        else:
            ring = variant._ring
            if staged is not None and ring.unavailable() >= ring.slots - 1:
                self.flush()  # this batch's own slots (and others' held ones) fill the ring
                staged = None
            if PENDING[0] is not None:
                flush_pending()  # a deferred run (another thread's) holds its slot until submitted
            offset = ring.take()  # may refuse (every slot held): nothing is staged then
            if staged is None:
                staged = self._staged[id(variant)] = (variant, [], [None, 0])
            staged[1].append(offset)  # listed first: an interrupt after it leaves nothing staged for good
            ring.staged.add(offset)  # no other take() hands it out until this batch writes it
            ring.mirror[offset : offset + len(data)] = data
            staged[2][:] = (data if type(data) is bytes else None), offset
        # After any flush above (which forgets what it submitted): this run is recorded after
        # it, so its outputs are this batch's unsubmitted ones (review helper 166: a run recorded
        # after a ring-full flush was read by another thread with an earlier run's bytes).
        if made:
            self._made.update(made)
        if results:
            self._results.update(results)
        self._held.update(buffers)  # by identity (buffers hash so): the set keeps them alive
        self._held_sum = None
        found = self.records.get(id(variant.ctx))
        if found is None:
            found = self.records[id(variant.ctx)] = (variant.ctx, [])
        records = found[1]
        if extra:
            records.extend(extra)
        records.append((variant.compiled.pipeline, bind_group, offset, groups, ops))
        if temps:
            self.temps.extend((variant, t) for t in temps)
        if self.slices is None:
            self.slices = not submits_block(variant.ctx)
        self.lane = Lane(self, variant, data, fixed, records, offset) if fixed is not None and type(data) is bytes else None
        if self.slices:
            self._slice_due()

    def add_again(self, variant: Any, data: bytes, bind_group: Any, groups: tuple, ops: list, owned: list, fixed: list) -> None:
        """:meth:`add` for a repeat run (``ops``: its outputs' clears, ``owned``: their
        buffers, ``fixed``: what every repeat binds). When the last run recorded here was
        this variant's with the very same params bytes and ``fixed`` list, its params slot and
        held buffers serve this one too: only the record and the outputs are new (a batch of
        one kernel's runs spends its host time here)."""
        lane = self.lane
        if lane is None or lane.variant is not variant or lane.data is not data or lane.fixed is not fixed:
            self.add(variant, data, bind_group, groups, ops, [], fixed + owned, made=owned, fixed=fixed, results=owned)
            return
        for buffer in owned:  # its outputs: they hold nothing of it until it is submitted
            lane.made(buffer)
            lane.results(buffer)
            lane.held(buffer)
            lane.held_bytes += buffer.size
        lane.record((variant.compiled.pipeline, bind_group, lane.offset, groups, ops))
        if lane.due is not None:
            lane.until_due -= 1
            if not lane.until_due:
                lane.until_due = LANE_DUE_EVERY
                lane.due()

    def _slice_due(self) -> None:
        """Submit the runs recorded so far when the slice is due (see the module docstring)."""
        now = time.perf_counter()
        if not self._slice_start:
            self._slice_start = now
        elif now - self._slice_start >= self._limit:
            if not self._by_work or now - self._slice_start >= SLICE_MAX_S or self._held_bytes() >= SLICE_MIN_BYTES:
                self.flush()
            else:
                # Too little to be worth a submission yet: look again later (doubling, so
                # a long batch of small runs sums its held buffers a few times, not per run).
                self._limit = min(2 * self._limit, SLICE_MAX_S)

    def _held_bytes(self) -> int:
        """Bytes of the distinct buffers the unsubmitted runs touch (textures left out). Summed
        once; while only the lane adds to them, the lane's own count says what it added (a
        sum a check over a 100-run batch's buffers cost it ~5% of its host time on the H200)."""
        lane, last = self.lane, self._held_sum
        if last is not None and lane is not None and last[0] is lane:
            return last[2] + lane.held_bytes - last[1]
        total = 0
        for b in self._held:
            size = getattr(b, "size", 0)
            if type(size) is int:
                total += size
        self._held_sum = (lane, lane.held_bytes if lane is not None else 0, total)
        return total

    def holds(self, buffer: Any) -> bool:
        return buffer in self._held

    @property
    def pending(self) -> bool:
        return any(records for _, records in self.records.values())

    def flush(self) -> None:
        """Submit what was recorded so far (a slice, or the rest at exit), after what the
        batches it is nested in recorded before it opened: runs go to the queue in the order
        they were recorded, nested or not."""
        self._slice_start = 0.0
        self._limit = SLICE_S
        self.lane = None
        self._held_sum = None
        # Device by device: a lost device's runs are dropped (DeviceLostError once the others
        # are submitted), never a healthy device's: a batch mixing devices lost them all, and
        # their Outputs read zeros (review helper 161); so did a nested batch's, when its outer
        # batch met the lost device first (helper 162: and its params slots stayed taken).
        lost_first: DeviceLostError | None = None
        left: dict | None = None
        try:
            left = dict(self.records)  # device key -> its records, until they are submitted
            for outer in self.outer:
                if outer.pending:
                    try:
                        outer.flush()
                    except DeviceLostError as exc:
                        lost_first = lost_first or exc
            contexts = {id(variant.ctx): variant.ctx for variant, _, _ in self._staged.values()}
            contexts.update((key, ctx) for key, (ctx, _) in self.records.items())
            for key, ctx in contexts.items():
                try:
                    self._submit_device(ctx, self.records.get(key))
                    left.pop(key, None)
                except Exception as exc:
                    # The params writes meet a device destroyed after the runs were recorded: a
                    # raw "Parent device is lost" is a DeviceLostError (review helper 102).
                    lost = lost_error(ctx, exc)
                    if lost is None:
                        raise
                    lost_first = lost_first or lost
        finally:
            # Submitted, or failed (a lost device: nothing of it will run): either way the
            # recorded runs hold nothing any more. Detached first (drop): an interrupt later
            # in here must not submit them again at exit, nor give their buffers back twice
            # (review helper 169). Runs dropped on a healthy device (an interrupt, an error
            # while encoding) leave their outputs an earlier user's bytes: those refuse to be
            # read or bound (a lost device's refuse anyway).
            results, not_submitted = self._results, (self.records if left is None else left)
            self.drop()
            settle_outputs(results, [ctx.device for ctx, records in not_submitted.values() if records and not ctx.guard.lost], WHY_BATCH)
        if lost_first is not None:
            raise lost_first

    def _submit_device(self, ctx: DeviceContext, entry: tuple[DeviceContext, list] | None) -> None:
        """Write the params slots this batch staged on ``ctx`` and submit its records there."""
        if ctx.guard.lost:  # destroyed meanwhile (another thread, or inside the batch)
            raise DeviceLostError(LOST_HINT)
        for variant, offsets, _ in self._staged.values():
            if variant.ctx is not ctx:
                continue
            ring = variant._ring
            offsets.sort()
            start = prev = offsets[0]
            for off in offsets[1:] + [None]:
                if off is not None and off == prev + ring.stride:
                    prev = off
                    continue
                end = prev + ring.stride
                write_buffer(ctx.queue, ring.buffer, start, memoryview(ring.mirror)[start:end])
                if off is not None:
                    start = prev = off
        if entry is not None and entry[1]:
            self.submissions += 1
            submit_records(ctx.device, ctx.queue, ctx.guard, entry[1], "a batch")

    def drop(self) -> None:
        """Forget what was recorded (submitted, or never to be): temps go back to their
        pools, held buffers are free. Everything is detached before anything is called, so an
        interrupt in here never leaves a record to submit, or a buffer to return, twice."""
        self.lane = None
        self._held_sum = None
        temps, staged, calls = self.temps, self._staged, self.on_drop
        self.temps, self._staged, self.on_drop, self.records = [], {}, [], {}
        self._held = set()
        self._made = set()
        self._results = set()
        _epoch[0] += 1
        for variant, buf in temps:
            variant._pool.give(buf)
        for variant, offsets, _ in staged.values():
            variant._ring.staged.difference_update(offsets)  # written (or never to be): free
        for call in calls:
            call()


def submits_block(ctx: DeviceContext) -> bool:
    """Whether a submit on this device waits for the previous submission to finish: CPU
    adapters (lavapipe) do. Slices there would make Python wait for the CPU's "GPU" work in
    the middle of a batch, so a batch slices only on other adapters unless asked to."""
    cache = ctx.cache("runtime")
    found = cache.get("submits block")
    if found is None:
        info = dict(ctx.adapter.info) if ctx.adapter is not None else {}
        found = cache["submits block"] = str(info.get("adapter_type", "")) == "CPU"
    return bool(found)


def register_open(b: Any) -> None:
    """Count ``b`` as open (its held buffers stay parked) though no thread records into it:
    the deferred run's batch (:mod:`engine_plugin.runtime.deferred`)."""
    with _open_lock:
        _open.append(b)


def unregister_open(b: Any) -> None:
    with _open_lock:
        if b in _open:
            _open.remove(b)


def bump_epoch() -> None:
    """Something that held buffers let them go: pools re-check what they parked."""
    _epoch[0] += 1


def flush_epoch() -> int:
    """Bumped whenever a batch submits: only then can a held buffer stop being held."""
    return _epoch[0]


def open_batches() -> bool:
    """Whether any batch is open (any thread): only then can a returned buffer be held."""
    return bool(_open)


# Buffers whose run was dropped unsubmitted -> why (see Batch.flush): reading or binding one
# is refused until a run writing it is submitted, or the pool hands it to a new run.
UNSUBMITTED: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()
VOIDED = [0]  # how many runs were ever dropped so: hot paths look at UNSUBMITTED only after one


def unsubmitted(buffer: Any) -> str | None:
    """Why ``buffer`` holds no result of the run that was to write it, or None."""
    return UNSUBMITTED.get(buffer) if VOIDED[0] else None


WHY_BATCH = "an interrupt or an error while its abi.batch() submitted"
WHY_DEFERRED = "an interrupt or an error while it was submitted"


def settle_outputs(results: Any, lost_on: list, why: str) -> None:
    """After a submission attempt: the result buffers ``results`` of runs on the devices
    ``lost_on`` (not submitted, on a healthy device) hold an earlier run's bytes: marked, they
    refuse to be read or bound; the others were written by a submitted run: unmarked."""
    if lost_on:
        for buffer in results:
            if getattr(buffer, "_device", None) in lost_on:
                UNSUBMITTED[buffer] = why
                VOIDED[0] += 1
        DESTROY_EPOCH[0] += 1  # repeat paths re-check what they bind (Variant._Repeat.none_destroyed)
    if VOIDED[0]:
        for buffer in results:
            if getattr(buffer, "_device", None) not in lost_on:
                UNSUBMITTED.pop(buffer, None)


def written_in_this_batch(buffer: Any) -> bool:
    """Whether a run recorded in one of this thread's open batches writes ``buffer`` (it goes
    to the queue before any run recorded after it)."""
    return any(buffer in b._results for b in _mine(_stack.get()))


def held_by_open_batches() -> Callable[[Any], bool]:
    """A test of whether a run recorded in an open (not yet submitted) batch touches a
    buffer: the pool must not hand such a buffer to anyone before that batch is submitted. What
    the open batches hold is looked up once (a pool sorts a batch's worth of returns at once)."""
    holders = tuple(_open)
    sets = [b._held for b in holders if isinstance(b, Batch)]
    others = [b for b in holders if not isinstance(b, Batch)]
    sets = [h for h in sets if h]
    if not sets and not others:
        return held_by_none
    if not others and len(sets) == 1:
        return sets[0].__contains__
    return lambda buffer: any(buffer in h for h in sets) or any(b.holds(buffer) for b in others)


def held_by_none(buffer: Any) -> bool:
    """What :func:`held_by_open_batches` answers when no open batch holds anything."""
    return False


def made_by_other_open_batch(buffer: Any) -> bool:
    """Whether ``buffer`` is a pooled output buffer of a run recorded in an ``abi.batch()`` open
    on another thread (or another task's): nothing of that run is on the GPU yet (the buffer
    holds an earlier user's data), and that batch is not this one's to submit. This thread's
    own batches keep their runs in order, so their outputs chain as usual (and a read flushes
    them first)."""
    makers = [b for b in tuple(_open) if isinstance(b, Batch) and buffer in b._made]
    if not makers:  # the common case: no batch open, or only the deferred run (not a Batch)
        return False
    mine = {id(b) for b in _mine(_stack.get())}
    return any(id(b) not in mine for b in makers)


def _waiting_for(obj: Any) -> list[list]:
    """The callback lists of every open batch holding ``obj``, each run once that batch's
    records are submitted (see :func:`~engine_plugin.device.destroyed.register_holder_lookup`)."""
    return [b.on_drop for b in tuple(_open) if isinstance(b, Batch) and b.holds(obj)]


register_holder_lookup(_waiting_for)


def _mine(stack: tuple) -> tuple:
    """The batches of ``stack`` current here: open, and opened on this thread."""
    me = threading.get_ident()
    return tuple(b for b in stack if not b.ended and b.thread == me)


def current_batch() -> Batch | None:
    stack = _stack.get()
    if not stack:
        return None
    top = stack[-1]
    if not top.ended and top.thread == threading.get_ident():
        return top  # the common case, without building a tuple
    mine = _mine(stack)
    return mine[-1] if mine else None


def flush_current_batch() -> None:
    """Submit what this thread's open batches recorded so far (a read is about to wait on it)."""
    stack = _stack.get()
    if not stack:
        return
    for b in _mine(stack):
        if b.pending:
            b.flush()


@contextmanager
def batch(slices: bool | None = None) -> Iterator[Batch]:
    """Record every ``variant.run`` inside into few submissions (per device): slices of about
    half a millisecond of encoding while it runs (the GPU starts early), the rest at exit.

    Args:
        slices: False keeps everything recorded for one submission at exit; True slices on
            any device; None (the default) slices unless the device is a CPU adapter, where
            a submit waits for the previous one (see the module docstring).

    Reading an output or a count inside the batch submits what was recorded so far first.
    """
    if PENDING[0] is not None:
        flush_pending()  # a deferred run goes first, in queue order
    b = Batch(slices)
    b.outer = _mine(_stack.get())
    _stack.set(b.outer + (b,))
    with _open_lock:
        _open.append(b)
    try:
        yield b
    finally:
        # This batch, whatever is on top: blocks of coroutines sharing a context (generators)
        # may end in another order than they began.
        _stack.set(tuple(x for x in _stack.get() if x is not b))
        b.ended = True
        try:
            b.flush()
        finally:
            with _open_lock:
                _open.remove(b)
