"""The one way work reaches the queue: ordered records encoded into one command buffer.

Every GPU path of the package goes through here: ``variant.run`` (one record, submitted at
once), ``abi.batch()`` (many records, one submission) and the engine backend's frame (product
dispatches, ordered clears, readback copies, with its maps armed after the submit).

A record is ``(pipeline, bind_group, offsets, groups, ops)`` or, when its dispatch's bound
buffers are known, ``(pipeline, bind_group, offsets, groups, ops, binds)``:

* ``pipeline`` None: no dispatch, only the ops (a readback copy, a clear);
* ``bind_group``: a GPUBindGroup set at index 0 with the dynamic ``offsets`` (a list, an int
  for the ABI runtime's one params offset, or None); or a tuple of ``(group, offsets)`` set at
  indices 0, 1, ... (None skips an index) for caller-made layouts;
* ``groups``: the workgroups; a zero X dispatches nothing (an empty domain);
* ``ops``: what the queue does before the dispatch, in order:
  ``("clear", buffer, offset, size)`` zeroes a buffer the pool just handed out: no earlier
  record of the submission can touch it, so every such clear is hoisted to the front and the
  compute pass is not broken run by run; ``("zero", buffer, offset, size)`` zeroes a buffer
  earlier records may use (an engine product's persistent outputs);
  ``("copy", src, src_offset, dst, dst_offset, size)`` copies (a readback);
* ``binds`` (optional): every buffer the dispatch binds; a record with no dispatch binds none.

Consecutive dispatches without in-place ops share one compute pass. Timed records (see
:class:`Submission`) get a pass of their own with timestamp writes around it.

In-place ops move only where nothing can tell: a ``zero`` goes to the front when no earlier
record touches its buffer (by an op or a binding), and a copy-only record goes to the end
when no later record touches its source or destination. A record whose bindings are unknown
(no ``binds``) may touch anything: nothing moves across it. So an engine frame (each product
zeroes its own results area, dispatches, and copies it back) encodes as the clears, one compute
pass of every dispatch (the GPU overlaps independent ones: no barrier between them), then the
copies, instead of a pass per product; a product dispatched twice in one submission keeps its
zero, dispatch and copy in order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..device.destroyed import unusable, unusable_binding
from ..device.loss import DeviceFault, classify
from ..device.ordering import register_settle
from ..errors import DeviceLostError
from .native import begin_pass, clear_buffer, copy_buffer

__all__ = [
    "PENDING",
    "Submission",
    "unusable_in",
    "encode_records",
    "flush_open_batches",
    "flush_pending",
    "op_buffers",
    "record_binds",
    "submit_records",
    "submit_encoder",
]

# The deferred run (runtime.deferred), as (context, batch), or None. Every submission the
# runtime makes sends it first, so queue order is as if it had been submitted at once.
PENDING: list = [None]


def flush_pending() -> None:
    """Submit the deferred run, if one waits (see :mod:`engine_plugin.runtime.deferred`)."""
    if PENDING[0] is not None:
        from .deferred import flush_deferred

        flush_deferred()


def _settle() -> None:
    """What a direct queue write or read outside the core must come after (device.ordering)."""
    if PENDING[0] is not None:
        flush_pending()
    flush_open_batches()


def flush_open_batches() -> None:
    """Submit what this thread's open ``abi.batch()`` blocks recorded so far, before a
    submission made outside them (records made later may read what those runs write). Not for
    a batch's own flush, which submits through :func:`submit_records`."""
    from .batch import flush_current_batch, open_batches

    if open_batches():
        flush_current_batch()


def _set_groups(cpass: Any, bind_group: Any, offsets: Any) -> None:
    if isinstance(bind_group, tuple):
        for index, (group, dyn) in enumerate(bind_group):
            if group is None:
                continue
            if dyn:
                cpass.set_bind_group(index, group, list(dyn))
            else:
                cpass.set_bind_group(index, group)
    elif offsets is None:
        cpass.set_bind_group(0, bind_group)
    elif isinstance(offsets, int):
        cpass.set_bind_group(0, bind_group, [offsets])
    else:
        cpass.set_bind_group(0, bind_group, list(offsets))


def encode_records(encoder: Any, records: list, timings: dict[int, tuple[Any, int]] | None = None) -> None:
    """Encode ``records`` in order into ``encoder`` (see the module docstring).

    ``timings`` maps a record's index to ``(query_set, first_index)``: that dispatch runs in a
    compute pass of its own whose beginning and end write those two timestamps.
    """
    last_dispatch = -1  # index of the last record with a dispatch
    first_in_place = -1  # index of the first record with a zero or copy op
    for i, record in enumerate(records):
        if record[0] is not None:
            last_dispatch = i
        for op in record[4]:
            if op[0] == "clear":
                clear_buffer(encoder, op[1], op[2], op[3])
            elif first_in_place < 0:
                first_in_place = i
    if first_in_place < 0 and not timings:
        _encode_dispatches(encoder, records)  # every dispatch in one pass: a batch's path
        return
    if first_in_place > last_dispatch and not timings:
        # Every in-place op comes after every dispatch (a one-shot read's copy, a frame's
        # readbacks with nothing to zero): nothing can move; one pass, then the ops in order.
        _encode_dispatches(encoder, records)
        for record in records[first_in_place:]:
            for op in record[4]:
                if op[0] != "clear":
                    _encode_in_place(encoder, op)
        return
    # Something can move only when an in-place op comes before a dispatch (with timings, the
    # cases above come here too and move nothing).
    hoisted, sunk = _movable(records) if 0 <= first_in_place <= last_dispatch else ([], set())
    for i, j in hoisted:
        _encode_in_place(encoder, records[i][4][j])
    moved = set(hoisted)  # by position: the same op object may be recorded twice (and zero twice)
    run: list = []  # consecutive records whose dispatches share one compute pass
    for i, record in enumerate(records):
        if i in sunk:
            continue
        ops = record[4]
        in_place = [op for j, op in enumerate(ops) if op[0] != "clear" and (i, j) not in moved] if ops else ()
        timed = timings.get(i) if timings else None
        if not in_place and timed is None:
            run.append(record)
            continue
        _encode_dispatches(encoder, run)  # the pass ends before in-place ops and timed passes
        run = []
        for op in in_place:
            _encode_in_place(encoder, op)
        if timed is None:
            run.append(record)
        elif record[0] is not None and record[3][0] != 0:
            query_set, first = timed
            own = encoder.begin_compute_pass(
                timestamp_writes={"query_set": query_set, "beginning_of_pass_write_index": first, "end_of_pass_write_index": first + 1}
            )
            own.set_pipeline(record[0])
            _set_groups(own, record[1], record[2])
            own.dispatch_workgroups(*record[3])
            own.end()
    _encode_dispatches(encoder, run)
    for i in sorted(sunk):
        for op in records[i][4]:
            _encode_in_place(encoder, op)


def _encode_in_place(encoder: Any, op: tuple) -> None:
    """A ``zero`` or ``copy`` op (``clear`` ops are encoded up front)."""
    if op[0] == "copy":
        copy_buffer(encoder, op[1], op[2], op[3], op[4], op[5])
    else:  # "zero"
        clear_buffer(encoder, op[1], op[2], op[3])


def unusable_in(records: list) -> Any | None:
    """A buffer or texture ``records`` would use (their bind groups' and ops') that is
    destroyed or still mapped (:func:`~engine_plugin.device.destroyed.unusable`), or None:
    wgpu-native aborts the process on submitting one. For the GPU backend's caller-made
    products, whose bind groups the runtime never checked."""
    for record in records:
        groups = record[1]
        for group in (g for g, _ in groups if g is not None) if type(groups) is tuple else (groups,) if groups is not None else ():
            found = unusable_binding(group)
            if found is not None:
                return found
        for op in record[4]:
            for buffer in op_buffers(op):
                if unusable(buffer) is not None:
                    return buffer
    return None


def op_buffers(op: tuple) -> tuple:
    """The buffers a record's op touches (a copy's two)."""
    return (op[1], op[3]) if op[0] == "copy" else (op[1],)


def record_binds(record: tuple) -> Any:
    """The buffers a record's dispatch binds: () without a dispatch, None when unknown."""
    if record[0] is None:
        return ()
    return record[5] if len(record) > 5 else None


def _movable(records: list) -> tuple[list[tuple[int, int]], set[int]]:
    """(positions ``(record, op)`` of the ``zero`` ops that can go to the front, indices of
    the copy-only records that can go to the end): see the module docstring. Both look at every
    record where it was recorded, so a zero and a copy of one buffer never cross.

    ``touched`` holds what an op or binding staying in place touched: zeros moved to the front
    keep their order there, so a buffer only they touched so far (several outputs placed in
    one results area) takes its next zero to the front as well."""
    hoisted: list[tuple[int, int]] = []
    sunk: set[int] = set()
    touched: set = set()
    for i, record in enumerate(records):
        for j, op in enumerate(record[4]):
            if op[0] == "zero" and op[1] not in touched:
                hoisted.append((i, j))
            elif op[0] != "clear":  # clears went to the front already (fresh pool buffers)
                touched.update(op_buffers(op))
        binds = record_binds(record)
        if binds is None:
            break  # it may touch anything: no later zero moves before it
        touched.update(binds)
    later: set = set()
    for i in range(len(records) - 1, -1, -1):
        record = records[i]
        ops = record[4]
        if record[0] is None and ops and all(op[0] == "copy" and op[1] not in later and op[3] not in later for op in ops):
            sunk.add(i)
        binds = record_binds(record)
        if binds is None:
            break  # it may touch anything: no earlier copy moves after it
        later.update(binds)
        for op in ops:
            later.update(op_buffers(op))
    return hoisted, sunk


def _encode_dispatches(encoder: Any, records: list) -> None:
    """The dispatches of ``records`` (their clears encoded already, no in-place ops, nothing
    timed) in one compute pass, none when they dispatch nothing. A batch of small runs spends
    its host time here."""
    cpass: Any = None
    for record in records:  # indexed, not unpacked: ``*_`` would build a list a record
        pipeline, groups = record[0], record[3]
        if pipeline is None or groups[0] == 0:
            continue
        bind_group, offsets = record[1], record[2]
        if cpass is None:
            cpass = begin_pass(encoder)
        if (offsets is None or type(offsets) is int) and type(bind_group) is not tuple:
            cpass.run(pipeline, bind_group, offsets, groups)
        else:
            cpass.set_pipeline(pipeline)
            _set_groups(cpass, bind_group, offsets)
            cpass.dispatch_workgroups(*groups)
    if cpass is not None:
        cpass.end()


def submit_records(device: Any, queue: Any, guard: Any, records: list, label: str = "a run") -> None:
    """Encode ``records`` in order into one command buffer and submit it.

    ``finish()`` and the submit happen under the device's submit lock: a loss cannot land in
    between (submitting a command buffer finished before a loss aborts the process).
    """
    if PENDING[0] is not None:
        flush_pending()
    encoder = device.create_command_encoder()  # unlabelled: a label costs ~6-9 µs an encoder
    encode_records(encoder, records)
    submit_encoder(queue, guard, encoder, label)


def submit_encoder(queue: Any, guard: Any, encoder: Any, label: str = "a run", then: Callable[[], Any] | None = None) -> Any:
    """``queue.submit([encoder.finish()])`` with what :meth:`SubmissionGuard.submitting` does
    (refuse on a known loss, the submit lock held across finish and submit, a loss error turned
    into :class:`DeviceLostError`), inline: a generator context manager costs as much as a
    fifth of a small run's host time. ``encoder`` None submits nothing; ``then`` runs under the
    same lock after the submit (a readback's ``map_async``), and its answer is returned."""
    with guard.lock:
        if guard.lost or guard.check():
            raise DeviceLostError(f"{label}: the device is lost ({guard.reason}); nothing was submitted")
        try:
            if encoder is not None:
                queue.submit([encoder.finish()])
            return then() if then is not None else None
        except Exception as exc:
            if classify(exc) == DeviceFault.LOST:
                text = str(exc).strip()
                guard.mark_lost(f"{label}: {text.splitlines()[-1] if text else type(exc).__name__}")
                raise DeviceLostError(f"{label}: the device is lost ({guard.reason})") from exc
            raise


class Submission:
    """Records gathered for one command buffer, and what runs once it is submitted.

    ``after_submit`` callbacks run in order after a successful submit (a readback's
    ``map_async`` must come after the submit that carries its copy). ``time(key)`` marks the
    next record as timed under ``key``; :meth:`submit` then resolves the timestamps into
    ``timer`` (a :class:`~engine_plugin.runtime.timing.GpuTimer`).
    """

    __slots__ = ("records", "after", "timed")

    def __init__(self) -> None:
        self.records: list = []
        self.after: list[Callable[[], None]] = []
        self.timed: list[tuple[int, str]] = []  # (record index, key)

    def add(self, record: tuple, timing_key: str | None = None) -> None:
        if timing_key is not None:
            self.timed.append((len(self.records), timing_key))
        self.records.append(record)

    def after_submit(self, fn: Callable[[], None]) -> None:
        self.after.append(fn)

    @property
    def empty(self) -> bool:
        return not self.records

    def submit(self, device: Any, queue: Any, guard: Any, label: str, timer: Any = None) -> None:
        """Encode and submit the records (nothing when there are none), then run the
        ``after_submit`` callbacks. Raises what the device raises; the callbacks then never run.
        Runs this thread's open ``abi.batch()`` recorded before this call go to the queue
        first (a prepared run may read their outputs): queue order follows the calls that put
        work on the queue (``run()`` into a batch, and this submit), not when records were
        added to the submission."""
        if PENDING[0] is not None:
            flush_pending()
        flush_open_batches()
        records, self.records = self.records, []
        after, self.after = self.after, []
        timed, self.timed = self.timed, []
        if records:
            encoder = device.create_command_encoder()  # unlabelled (cost), see submit_records
            window = timer.open(encoder, [key for _, key in timed]) if timer is not None and timed else None
            timings = {index: window.slot(j) for j, (index, _) in enumerate(timed[: window.count])} if window is not None else None
            encode_records(encoder, records, timings)
            if window is not None:
                window.resolve(encoder)
            with guard.submitting(label):
                queue.submit([encoder.finish()])
            if window is not None:
                window.submitted()
        for fn in after:
            fn()


# Page writes and reads (the substrate, a layer below) come after the runs held back here.
register_settle(_settle)
