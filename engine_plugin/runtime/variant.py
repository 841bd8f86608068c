"""A compiled variant and its runs: resolve inputs, size outputs, pack params, bind, dispatch.

Everything is validated before anything is submitted, so a bad call leaves the GPU untouched.
The per-run path reuses what it can: pooled outputs, a params ring bound at a dynamic
offset (one bind group serves every run over the same buffers), cached bind groups.

What a kernel can observe is defined:
- every output the host allocates is cleared to zeros in the run's own submission, before the
  dispatch (a binding with ``clear: false`` opts out);
- every storage binding covers exactly its live elements (bind group entry offset and size),
  so ``arrayLength`` answers the live length and pooled slack is out of reach;
- a live count is a snapshot of its domain count taken in the run's submission, owned by the
  outputs that report it, so no later run can change it;
- GPU-resident inputs of another scalar type are converted by value in the same submission.

When a run reaches the queue: at once, into the open ``abi.batch()`` (which submits in slices,
see :mod:`.batch`), or, for a small run of host data only, at the next runtime call (see
:mod:`.deferred`: a read that comes next folds its copy into the run's submission). Either way
queue order is the order of the calls, and nothing a caller can observe depends on which.
A repeat of the last fully checked call (same ``n``, params, buffers; numpy inputs of the same
dtype and shape) skips the checks whose outcome it cannot change.
"""

from __future__ import annotations

import math
import numbers
import operator
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import partial
from threading import get_ident
from typing import Any, Mapping

import numpy as np
import wgpu

from ..device.destroyed import EPOCH as DESTROY_EPOCH
from ..device.destroyed import is_destroyed, register_holder_lookup, unusable
from ..device.writes import write_buffer
from ..errors import DeviceLostError, DispatchError, ExpressionError, PluginError, Span, bug, in_source
from ..lowering.expressions import parse_expression
from ..lowering.geometry import Domain, as_domain, dispatch_fields, group_cap, wrapping_axis
from ..lowering.lowered import HostSlot, Lowered
from ..lowering.structs import StructType
from ..lowering.textures import format_sample
from .batch import (
    BATCH_STACK,
    LANE_DUE_EVERY,
    OPEN_BATCHES,
    VOIDED,
    Batch,
    Lane,
    current_batch,
    made_by_other_open_batch,
    open_batches,
    settle_outputs,
    unsubmitted,
    written_in_this_batch,
)
from .buffers import STORAGE_USAGE, pool_for, prepare_array, size_class
from .compile import CompiledVariant
from .convert import clamp_record, conversion_record
from .deferred import DEFER_MAX_BYTES
from .deferred import defer as defer_run
from .loss import LOST_HINT, lost_error
from .native import begin_pass, clear_buffer
from .output import HANDOUTS, Output, counter_rewritten, give_back, handed_out, live_bytes, on_release, output_of, own_pooled, share
from .params import ParamsPacker, exact_fingerprint
from .submission import PENDING, encode_records, flush_pending, op_buffers, record_binds, submit_encoder
from .table import Table
from .textures import TextureOutput, output_texture, sampler_for, upload_texture, view_of

__all__ = ["Variant", "Run", "PreparedRun", "Placed"]

_RING_SLOTS = 256
_BIND_GROUP_CACHE = 256
_NO_DOMAIN = np.array([0xFFFFFFFF, 0, 0, 0], dtype="<u4")
_EMPTY_TABLE = np.zeros(4, dtype="<u4")  # word 0: no columns


def _binding_size(nbytes: int) -> int:
    """WebGPU binds no empty range: an empty binding covers one word (its NAME_len() is 0)."""
    return max(nbytes, 4)


@dataclass
class Run:
    """What a dispatch produced: ``outputs[name]`` for every output/append/inout binding."""

    outputs: dict[str, Any]  # Output per buffer output; TextureOutput per output texture
    n: int | tuple  # the domain as given: a count, or a grid (w, h) / (w, h, d)
    groups: tuple[int, int, int]
    variant: "Variant" = field(repr=False)


@dataclass(slots=True)
class _Bound:
    """A resolved binding: the buffer, the element count it holds, the byte range bound."""

    buffer: Any  # a buffer, or the texture behind ``resource`` (kept alive with the bind group)
    count: int
    offset: int = 0
    size: int | None = None  # None: the whole buffer (pages, foreign tables)
    resource: Any = None  # a texture view or a sampler: bound as it is
    transient: bool = False  # a view made for this run: its bind group is not cached (it would keep the texture alive)


@dataclass(slots=True)
class _Work:
    """What one run needs on the queue besides its dispatch: ops before it (clears, counter
    snapshots), records before it (conversions), buffers to return after its submission, and
    the live count its ``live`` outputs report."""

    ops: list = field(default_factory=list)
    extra: list = field(default_factory=list)
    temps: list = field(default_factory=list)
    read: list = field(default_factory=list)  # buffers the extra records read (conversion sources)
    live_count: int | None = None  # known on the host (an int domain count, or none given)
    live_counter: Any = None  # else a snapshot counter on the GPU...
    live_holder: Any = None  # ... owned by this holder, which the live outputs keep alive
    inout_owned: dict = field(default_factory=dict)  # binding -> pooled upload a read_write Output owns
    chained: list = field(default_factory=list)  # (Output, the count bound, None for its capacity)
    shares: list = field(default_factory=list)  # Outputs whose buffers this run binds elsewhere: share()d once every check passed
    handouts: list = field(default_factory=list)  # (Output given in outputs=, its counter too): handed out once every check passed
    domain_output: Any = None  # the Output handed as domain_count: its count stays on the GPU
    via_owner: bool = False  # an input was an Output's handed-out buffer (bound as its owner knew it)


class _CounterHolder:
    """Owns a pooled snapshot counter shared by a run's live outputs; released with the last."""

    __slots__ = ("buffer", "__weakref__")

    def __init__(self, buffer: Any):
        self.buffer = buffer


class _Placement:
    """Outputs placed one after another in a caller's buffer (an engine product's results
    area), each at the device's storage offset alignment, so one copy reads them all back.
    ``buffer`` None only measures."""

    __slots__ = ("buffer", "align", "end", "layout")

    def __init__(self, buffer: Any, align: int):
        self.buffer = buffer
        self.align = align
        self.end = 0
        self.layout: dict[str, Placed] = {}

    def take(self, nbytes: int) -> int:
        offset = -(-self.end // self.align) * self.align
        self.end = offset + nbytes
        if self.buffer is not None and self.end > self.buffer.size:
            raise DispatchError(f"the outputs need {self.end} bytes of results area; it holds {self.buffer.size}")
        return offset


@dataclass(frozen=True)
class Placed:
    """Where a placed output's elements are: ``offset`` (bytes) in the results area,
    ``capacity`` elements bound, ``count`` live elements known on the host (appends: read the
    u32 counter at ``counter_offset``)."""

    offset: int
    capacity: int
    count: int
    counter_offset: int | None = None


@dataclass
class PreparedRun:
    """A checked run that is not on the queue yet, for a caller that owns the submission (the
    engine backend): its records (conversions first, then the dispatch), the placed outputs,
    and the pooled buffers to give back once the submission carrying it is submitted.

    Its params are written already; call :meth:`submitted` after the submit (or when the
    records are dropped: nothing of them ran then, so the buffers are free as well). Dropping
    it unsubmitted does the same: its records are not to be submitted once it is gone.
    """

    variant: "Variant"
    records: list
    run: Run
    temps: list
    layout: dict[str, Placed]
    end: int
    params_offset: int = 0
    holds: tuple = ()  # Outputs it reads (chained inputs): kept from the pool until submitted
    _done: bool = False
    # Run once it is submitted (or dropped): a destroy() of a buffer it binds waits for that
    # (see device/destroyed.py), as for a run recorded in an open abi.batch().
    on_drop: list = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        with _UNSUBMITTED_LOCK:
            _UNSUBMITTED[id(self)] = self

    def touches(self, obj: Any) -> bool:
        """Whether its records bind or copy ``obj`` (a buffer or texture)."""
        for record in self.records:
            if obj in (record_binds(record) or ()) or any(any(b is obj for b in op_buffers(op)) for op in record[4]):
                return True
        return False

    def submitted(self) -> None:
        if self._done:
            return
        self._done = True
        with _UNSUBMITTED_LOCK:
            _UNSUBMITTED.pop(id(self), None)
        self.holds = ()  # on the queue now: queue order protects their buffers
        self.variant._ring.reserved.discard(self.params_offset)
        self.variant._pool_back(self.temps)
        self._run_on_drop()

    def _run_on_drop(self) -> None:
        callbacks, self.on_drop = self.on_drop, []
        for fn in callbacks:
            fn()

    def __del__(self) -> None:
        # Dropped without submitted(): nothing of it runs (its records go with it), so a
        # destroy() that waited for it goes ahead, and its params slot and uploads go back: they
        # stayed taken for good, and after 255 drops every prepare of the variant was refused
        # (review helper 219).
        if not self._done:
            self._done = True
            try:
                self.variant._ring.reserved.discard(self.params_offset)
                self.variant._pool_back(self.temps)
                self._run_on_drop()
            except Exception:  # interpreter shutdown: nothing left to give back to
                pass


# Prepared runs not submitted yet (weakly: one dropped unsubmitted never runs). A destroy() of
# a buffer one of them binds waits until it is submitted: submitting a destroyed buffer aborts
# the process in wgpu-native (review helper 147: variant.prepare, then destroy() of its input
# or results area, then the submission).
_UNSUBMITTED: "weakref.WeakValueDictionary[int, PreparedRun]" = weakref.WeakValueDictionary()
_UNSUBMITTED_LOCK = threading.Lock()  # a destroy() on one thread lists them while another prepares


def _prepared_waiting_for(obj: Any) -> list[list]:
    with _UNSUBMITTED_LOCK:
        live = list(_UNSUBMITTED.values())
    return [p.on_drop for p in live if not p._done and p.touches(obj)]


register_holder_lookup(_prepared_waiting_for)


class _ParamsRing:
    """Params of successive runs at successive aligned offsets of one uniform buffer.

    ``mirror`` is a host copy a batch stages params into, so a batch of runs writes its params
    with one ``write_buffer`` per contiguous range instead of one per run.
    """

    slots = _RING_SLOTS

    def __init__(self, device: Any, struct_size: int, alignment: int):
        self.stride = -(-struct_size // alignment) * alignment
        self.mirror = bytearray(self.stride * _RING_SLOTS)
        self.struct_size = struct_size
        self.buffer = device.create_buffer(size=self.stride * _RING_SLOTS, usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST, label="params ring")
        self.next = 0
        self.reserved: set[int] = set()  # offsets of prepared runs' params, until submitted
        # Offsets an open abi.batch() staged params into (its mirror), written when it flushes:
        # no other take() may hand them out before (another thread's runs would write them).
        self.staged: set[int] = set()
        # (offset, bytes) a run submitted at once wrote and left there (see place()): a run
        # with the very same bytes binds that slot again without writing it. take() voids it.
        self.held: tuple[int, bytes] | None = None

    def take(self) -> int:
        """The next free slot's byte offset. Slots of prepared runs not yet submitted
        (``reserved``) and slots open batches staged params into (``staged``) are skipped: no
        later run may overwrite the params they will read."""
        self.held = None
        reserved, staged = self.reserved, self.staged
        if not reserved and not staged:  # the common case: no slot is held
            slot = self.next
            self.next = (slot + 1) % _RING_SLOTS
            return slot * self.stride
        for _ in range(_RING_SLOTS):
            slot = self.next
            self.next = (slot + 1) % _RING_SLOTS
            offset = slot * self.stride
            if offset not in reserved and offset not in staged:
                return offset
        raise DispatchError(f"all {_RING_SLOTS} params slots of this variant are held by prepared runs or open batches not submitted yet")

    def place(self, queue: Any, data: bytes) -> int:
        """The offset of a slot holding ``data`` for a run submitted at once: the slot the
        last such run left these very bytes in (``held``; queue order makes rewriting them a
        no-op), else a fresh slot written now."""
        held = self.held
        if held is not None and held[1] is data:
            return held[0]
        offset = self.take()
        write_buffer(queue, self.buffer, offset, data)
        self.held = (offset, data)
        return offset

    def unavailable(self) -> int:
        """How many slots prepared runs and open batches hold."""
        return len(self.reserved) + len(self.staged)


class _Repeat:
    """What the last fully checked run derived, for the repeat path (see ``_remember``).

    ``chained``: (Output, the count it was bound at, None when it was not known) for each
    Output input; ``fixed``: the buffers every repeat binds (inputs, tables, given outputs),
    which a batch holds; ``bind_groups``: groups by the run's own output buffers (keys hold them, so no
    ``id`` is ever reused while cached).
    """

    __slots__ = (
        "n",
        "inputs",
        "outputs",
        "chained",
        "param_items",
        "fingerprint",
        "bound",
        "plan",
        "data",
        "groups",
        "fixed",
        "bind_groups",
        "simple",
        "host",
        "defer",
        "epoch",
        "pruned_at",
    )

    def __init__(
        self, n: Any, inputs: tuple, outputs: tuple, chained: tuple, param_items: tuple, fingerprint: Any, bound: dict, plan: list, data: bytes, groups: tuple
    ):
        self.n, self.inputs, self.outputs, self.chained = n, inputs, outputs, chained
        self.param_items, self.fingerprint = param_items, fingerprint
        self.bound, self.plan, self.data, self.groups = bound, plan, data, groups
        self.fixed = [b.buffer for b in bound.values() if b.buffer is not None]
        self.bind_groups: dict[tuple, Any] = {}
        self.simple = False  # pooled plain outputs only, no inout bindings (set by _remember)
        self.host: dict = {}  # input name -> (slot, dtype, shape, direct): numpy inputs, uploaded each run
        self.defer = False  # a deferrable run (runtime.deferred)
        self.epoch = DESTROY_EPOCH[0]  # no buffer bound here was destroyed while this is current
        self.pruned_at = HANDOUTS[0]  # handouts seen when bind_groups was last pruned (see keep_group)

    def keep_group(self, key: tuple, group: Any) -> Any:
        """Cache ``group`` under its run's buffers ``key`` (answers it). Once a buffer was
        handed out anywhere since the last look, entries holding handed-out buffers go: such a
        buffer never comes back from the pool, so they are never hit again, and they kept its
        GPU memory alive."""
        if self.pruned_at != HANDOUTS[0]:
            self.pruned_at = HANDOUTS[0]
            for k in [k for k in self.bind_groups if any(handed_out(b) for b in k)]:
                del self.bind_groups[k]
        if len(self.bind_groups) >= _BIND_GROUP_CACHE:
            self.bind_groups.clear()
        self.bind_groups[key] = group
        return group

    def none_destroyed(self) -> bool:
        """Whether no buffer this repeat binds was destroyed since its checks (a submission
        using one aborts the process: device/destroyed.py). One compare, unless something
        somewhere was destroyed since (``queue.read_buffer`` destroys its staging buffer)."""
        epoch = DESTROY_EPOCH[0]
        if self.epoch != epoch:
            if any(is_destroyed(b) or unsubmitted(b) is not None for b in self.fixed):
                return False
            self.epoch = epoch
        return True


def _same_inputs(given: Any, rep: _Repeat) -> bool:
    """:func:`_same_objects`, except that a numpy input the repeat uploads may be another
    array of the same dtype and shape."""
    items = rep.inputs
    if not given or len(given) != len(items):
        return False
    host = rep.host
    for (k, v), (rk, rv) in zip(given.items(), items):
        if k != rk:
            return False
        sig = host.get(k)
        if sig is None:
            if v is not rv:
                return False
        elif type(v) is not np.ndarray or v.shape != sig[2] or v.dtype != sig[1]:
            return False
    return True


def _run_lane_missing() -> None:
    """A key's stand-in in :meth:`Variant._run_lane`'s lookups: never a caller's value."""


def _same_domain(n: Any, rn: Any) -> bool:
    """Whether ``n`` is the remembered domain ``rn`` (an int, or a tuple of plain ints): only
    plain ints compare, so a grid of 0-d arrays (mutable, or several values) takes the full
    path, which reads and checks it."""
    if type(n) is tuple:
        return type(rn) is tuple and len(n) == len(rn) and all(type(v) is int and v == r for v, r in zip(n, rn))
    return type(n) is int and type(rn) is int and n == rn


def _same_objects(given: Any, items: tuple) -> bool:
    """Whether the mapping ``given`` holds the very same objects, in the same order, as ``items``."""
    if not given:
        return not items
    if len(given) != len(items):
        return False
    if len(items) == 1:  # the common case (one input), without the pairwise loop
        rk, rv = items[0]
        return given.get(rk, _same_objects) is rv
    for (k, v), (rk, rv) in zip(given.items(), items):
        if v is not rv or k != rk:
            return False
    return True


_SAME_IF_IDENTICAL = (float, int, bool, str)


def _same_counts(chained: tuple) -> bool:
    """Whether every chained Output's count is known and the one the remembered run bound (a
    count read, or appended to, since then binds another length)."""
    for out, count in chained:
        if count is None or not out.count_known or out.count != count:
            return False
    return True


def _same_params(params: Any, rep: _Repeat) -> bool:
    """Whether ``params`` are exactly the remembered ones (types, and bit for bit). The very
    same immutable objects (a literal passed run after run) need no fingerprint; anything else
    (numpy values can change in place) is fingerprinted as the full path does."""
    items = rep.param_items
    if not params:
        return not items and rep.fingerprint == ()
    if len(params) == len(items):
        for k, rv in items:
            v = params.get(k, _same_params)
            if v is not rv or type(v) not in _SAME_IF_IDENTICAL:
                break
        else:
            return True
    fingerprint = exact_fingerprint(params)
    return fingerprint is not None and fingerprint == rep.fingerprint


class _PlacedRepeat:
    """What checked prepared runs derived, for the prepare repeat path (an engine product
    dispatching its work list every frame; see ``Variant._prepare_again``).

    Valid while a prepare hands the very same results buffer, the same non-array inputs (by
    identity) and exactly the same params: then a run's params bytes, workgroups, placed
    layout, zeroing and bindings depend only on ``n`` and the numpy inputs' dtypes and
    shapes, which key ``entries``. Numpy inputs are uploaded afresh every prepare.
    """

    __slots__ = ("results", "inputs", "arrays", "param_items", "fingerprint", "entries", "epoch")

    def __init__(self, results: Any, inputs: tuple, arrays: dict, param_items: tuple, fingerprint: Any):
        self.results, self.inputs, self.arrays = results, inputs, arrays
        self.param_items, self.fingerprint = param_items, fingerprint
        self.epoch = DESTROY_EPOCH[0]  # no buffer bound here was destroyed while this is current
        # (n, ((name, dtype, shape), ...)) -> (data, groups, layout, end, ops, fixed bound)
        self.entries: "OrderedDict[tuple, tuple]" = OrderedDict()

    def same(self, results: Any, inputs: Any, params: Any) -> bool:
        """Whether a prepare with these arguments may use an entry (see the class)."""
        if results is not self.results or not inputs or len(inputs) != len(self.inputs):
            return False
        if self.epoch != DESTROY_EPOCH[0]:  # something was destroyed or voided since: not what this binds?
            epoch = DESTROY_EPOCH[0]
            # A buffer whose writing run was dropped unsubmitted too, as the run repeat checks
            # (_Repeat.none_destroyed): the prepare repeat bound one and read its stale bytes
            # (review helper 219). The full path refuses it, naming the binding.
            if is_destroyed(results) or any(is_destroyed(v) or _voided(v) for _, v in self.inputs if v is not None):
                return False
            self.epoch = epoch
        arrays = self.arrays
        for (k, v), (rk, rv) in zip(inputs.items(), self.inputs):
            if k != rk:
                return False
            if k in arrays:
                if type(v) is not np.ndarray or not v.flags.c_contiguous or v.dtype != arrays[k][1]:
                    return False
            elif v is not rv:
                return False
        return _same_params(params, self)  # type: ignore[arg-type]  # the same two fields as _Repeat's


def _voided(value: Any) -> bool:
    """Whether an input (a buffer, or an Output's) holds no result: the run writing it was
    dropped unsubmitted (:func:`~engine_plugin.runtime.batch.unsubmitted`)."""
    buffer = value._buffer if isinstance(value, Output) else value if isinstance(value, wgpu.GPUBuffer) else None
    return buffer is not None and unsubmitted(buffer) is not None


def _placed_key(n: int, inputs: Mapping[str, Any], arrays: Mapping[str, Any]) -> tuple:
    """A prepare repeat's entry key: ``n`` and the shapes of the numpy inputs."""
    return (n, tuple((k, inputs[k].shape) for k in arrays))


_PLACED_ENTRIES = 64  # (n, array shapes) a prepare repeat keeps: a product's work lists vary in length
_PLACED_AREAS = 8  # results areas a variant keeps repeats for (products of one kernel; released ones are forgotten)


class Variant:
    """One specialisation of a program, compiled on one device."""

    def __init__(self, program: Any, lowered: Lowered, compiled: CompiledVariant):
        self.program = program
        self.lowered = lowered
        self.compiled = compiled
        self.ctx = compiled.ctx
        self.spec = lowered.spec
        self.yaml_path = program.yaml_path
        self._pool = pool_for(self.ctx)
        self._packer = ParamsPacker(lowered, self.yaml_path, {p.name: p.line for p in program.schema.params})
        self._slots = {s.name: s for s in lowered.host_slots}
        self._output_slots = _output_order([s for s in lowered.host_slots if s.role in ("output", "append")])
        self._len_fields = [(s.name, f"zero_len_{s.name}") for s in lowered.host_slots if s.role in ("input", "inout", "output", "append")]
        # The params page_binding answers for the columns: a run sets them from the columns'
        # handles, never from params= (see _prepare).
        self._col_params = {name: c for c in lowered.columns for name in (f"col_base_{c.name}", f"col_len_{c.name}")}
        self._inout_slots = [s for s in lowered.host_slots if s.role == "inout"]
        self._texture_outputs = [s for s in lowered.host_slots if s.role == "texture_output"]
        self._output_names = {s.name for s in lowered.host_slots if s.role in ("output", "append", "inout", "texture_output", "storage_texture")}
        self._input_names = {s.name for s in lowered.host_slots if s.role not in ("output", "append")} | {c.name for c in lowered.columns}
        self._domain_name = lowered.domain_count  # its binding may be handed through inputs= too
        self._ring = _ParamsRing(self.ctx.device, lowered.params.size, self.ctx.limit("min-uniform-buffer-offset-alignment"))
        self._bind_groups: "OrderedDict[tuple, Any]" = OrderedDict()
        self._pruned_at = HANDOUTS[0]  # handouts seen when _bind_groups was last pruned (see _bind_group)
        # Bytes each storage binding covers even when empty: one element (WebGPU binds no less
        # than the shader's element: a struct's stride, a vec2/vec4), else one word.
        self._min_binding = {i: b.min_binding_size for i, b in enumerate(lowered.bindings)}
        for slot in lowered.host_slots:
            if isinstance(slot.value_type, StructType):
                self._min_binding[slot.binding] = max(self._min_binding.get(slot.binding, 4), slot.value_type.bytes)
        self._last_pages: Any = None
        self._sizes: dict[tuple, int] = {}
        self._repeat: _Repeat | None = None
        self._repeat_group: tuple | None = None
        self._lane: tuple | None = None  # (repeat state, batch, the batch's Lane): see _run_lane
        self._retired: str | None = None  # why it runs no more (see retire)
        # Prepare repeats by results area (its id: each holds its area, so no id is reused while kept).
        self._placed: "OrderedDict[int, _PlacedRepeat]" = OrderedDict()
        # Prepared runs can repeat when every binding is a plain input (a buffer, or numpy data
        # uploaded as it is) or a plain output, and the domain count, if any, is not given.
        self._placed_repeatable = (
            not lowered.columns
            and all(s.role in ("input", "output", "domain_count") for s in lowered.host_slots)
            and all(s.role != "output" or not s.live for s in lowered.host_slots)
        )
        # Kernels whose every binding is an input, output, table or append can take the repeat path.
        # Runs of host data that bind nothing a caller could reach otherwise may be deferred.
        self._deferrable = not lowered.columns and all(s.role in ("input", "output", "append", "domain_count") for s in lowered.host_slots)
        self._repeatable = not lowered.columns and all(s.role in ("input", "output", "append", "table", "inout") for s in lowered.host_slots)
        self._max_binding = self.ctx.limit("max-storage-buffer-binding-size")
        self._max_groups = self.ctx.limit("max-compute-workgroups-per-dimension")
        self._storage_align = self.ctx.limit("min-storage-buffer-offset-alignment")
        self._lock = threading.RLock()
        self.runs = 0

    @property
    def key(self) -> str:
        """The dispatch key: the compiled pipeline's identity."""
        return self.compiled.key

    def swap_compiled(self, program: Any, lowered: Lowered, compiled: CompiledVariant) -> None:
        """A body-only reload: the same binding plan, a new pipeline.

        Pooled outputs, the params ring and the cached bind groups stay: WebGPU treats bind
        group layouts made from equal entries as the same, so the old groups fit the new
        pipeline. Only what reads the source lines (params error lines) is rebuilt.
        """
        if compiled.ctx is not self.ctx:
            raise bug(f"a pipeline of another device swapped into {self!r}: its buffers and bind groups are this device's")
        packer = ParamsPacker(lowered, program.yaml_path, {p.name: p.line for p in program.schema.params})
        with self._lock:  # between runs: a run on another thread sees the old variant or the new, whole
            self.program = program
            self.lowered = lowered
            self.compiled = compiled
            self.spec = lowered.spec
            self.yaml_path = program.yaml_path
            self._packer = packer
            self._repeat = None
            self._repeat_group = None
            self._placed.clear()

    def retire(self, reason: str) -> None:
        """A reload replaced this variant's kernel and could not swap the new one into it (a
        layout change; a copy on another device): from now on :meth:`run` raises a
        DispatchError saying ``reason``, not the old kernel's numbers. :meth:`prepare` goes
        on: the engine prepares what a product accepted, and keeps it when it refuses a
        reload (its products re-register on the new program when they take it)."""
        with self._lock:
            self._retired = reason
            self._repeat = None  # every run takes the full path, which refuses it
            self._repeat_group = None
            self._lane = None

    def __repr__(self) -> str:
        return f"Variant({self.program.key!r}, {self.spec.label()})"

    # -- errors ----------------------------------------------------------------------------
    def _slot_error(self, slot: HostSlot | None, message: str) -> DispatchError:
        line = slot.line if slot is not None else None
        return DispatchError(message, self._source_span(line))

    def _source_span(self, line: int | None) -> Span:
        """Where ``line`` of this variant's bindings.yaml is, with its column and text."""
        texts = self.lowered.source_map.texts
        return in_source(self.yaml_path, texts[0] if texts else None, line)

    # -- inputs ----------------------------------------------------------------------------
    def length_of(self, name: str, value: Any) -> int | None:
        """The element count binding ``name`` sees for ``value`` (what ``len(name)`` reads in a
        count expression), or None when it cannot be told without a run (a chained output's
        GPU count, a non-buffer binding)."""
        slot = self._slots.get(name)
        if slot is None or slot.role not in ("input", "inout", "table"):
            return None
        if isinstance(value, Table):
            return len(value.names)
        if isinstance(value, wgpu.GPUBuffer):
            return int(value.size) // (4 if slot.role == "table" else slot.value_type.bytes)
        if isinstance(value, Output):
            return value.count if value.count_known else None
        if slot.role == "table":
            return None
        arr, info = prepare_array(value, slot.value_type, slot.bits or slot.atomic)
        return int(info) if arr is not None else None

    def _upload(self, slot: HostSlot, value: Any, temps: list) -> _Bound:
        vt = slot.value_type
        arr, info = prepare_array(value, vt, slot.bits or slot.atomic)
        if arr is None:
            raise self._slot_error(slot, f"input {slot.name!r} ({vt.wgsl}{', bits' if slot.bits else ''}): {info}")
        nbytes = max(arr.nbytes, 4)
        if nbytes > self._max_binding:
            raise self._slot_error(slot, f"input {slot.name!r} is {nbytes} bytes; this device binds at most {self._max_binding}")
        buf = self._pool.take(nbytes, label=slot.name)
        if arr.nbytes:
            write_buffer(self.ctx.queue, buf, 0, arr)
        else:  # an empty input still binds a range (WebGPU binds none empty): zeros, not a pooled buffer's last data
            write_buffer(self.ctx.queue, buf, 0, bytes(min(buf.size, self._bound_bytes(slot, 0))))
        temps.append(buf)
        return _Bound(buf, int(info), 0, _binding_size(arr.nbytes))

    def _bound_bytes(self, slot: HostSlot, nbytes: int) -> int:
        """The bytes a binding of ``nbytes`` of data covers: never empty, never under the
        binding's minimum (one vec4 or struct element): what a pooled buffer must have cleared."""
        return max(_binding_size(nbytes), self._min_binding[slot.binding])

    def _direct_upload(self, slot: HostSlot, value: np.ndarray) -> tuple | None:
        """For the repeat path: (size class, count, binding size) when arrays of ``value``'s
        dtype and shape go up as they are (the binding's own dtype, no bits, not empty: what
        :func:`prepare_array` would answer unchanged), else None."""
        vt = slot.value_type
        if isinstance(vt, StructType) or slot.bits or slot.atomic or not value.nbytes or value.dtype != np.dtype(vt.numpy_dtype):
            return None
        return size_class(value.nbytes), value.size // vt.lanes, _binding_size(value.nbytes)

    def _upload_again(self, slot: HostSlot, value: np.ndarray, temps: list, direct: tuple | None) -> _Bound:
        """:meth:`_upload` of a repeat's numpy input (its dtype and shape checked equal to the
        remembered run's): written as it is when ``direct`` (see :meth:`_direct_upload`)."""
        if direct is None or not value.flags.c_contiguous:
            return self._upload(slot, value, temps)
        cls, count, size = direct
        buf = self._pool.take_class(cls, STORAGE_USAGE, slot.name)
        write_buffer(self.ctx.queue, buf, 0, value)
        temps.append(buf)
        return _Bound(buf, count, 0, size)

    def _other_device(self, buffer: Any) -> bool:
        """Whether ``buffer`` lives on another device than this variant's (wgpu-py 0.32 keeps a
        buffer's device as ``_device``): binding it is a wgpu validation error naming no file
        of the user's."""
        return getattr(buffer, "_device", self.ctx.device) is not self.ctx.device

    def _on_default_device(self) -> bool:
        from ..device.context import get_context

        try:
            return get_context().device is self.ctx.device
        except PluginError:
            return False

    def _foreign(self, slot: HostSlot, buffer: Any, target: bool = False) -> None:
        """Refuse a buffer or texture of another device (one made before a loss and recovery,
        say), or one destroyed (a submission using it aborts the process: device/destroyed.py)."""
        gone = unusable(buffer)  # a submission using it would abort the process
        if gone is not None:
            raise self._slot_error(slot, f"{slot.name!r}: the buffer or texture {buffer.label!r} handed to it {gone}")
        why = None if target else unsubmitted(buffer)  # a write target may hold anything
        if why is not None and written_in_this_batch(buffer):
            why = None  # a run recorded before this one in this thread's batch writes it first
        if why is not None:
            raise self._slot_error(
                slot, f"{slot.name!r}: what is handed to it holds no result: the run writing it may never have been submitted ({why}); run that again"
            )
        if made_by_other_open_batch(buffer):
            # Recorded, not submitted: this run would read an earlier user's data (review helper 102).
            raise self._slot_error(
                slot,
                f"{slot.name!r}: what is handed to it is the output of a run recorded in an abi.batch() still open on another thread or task; "
                "hand it over once that batch has ended",
            )
        if self._other_device(buffer):
            raise self._slot_error(
                slot,
                f"{slot.name!r}: the buffer {buffer.label!r} handed to it lives on another device than this variant's "
                "(made before the device was lost and the variant compiled anew, or on wgpu.utils.get_default_device()?); "
                + (
                    "hand it data of this device: engine_plugin.abi.device() is the plugin's default one"
                    if self._on_default_device()
                    else "hand it data of the device this variant's program was made on (abi.program(..., device=...))"
                ),
            )

    def _resolve_input(self, slot: HostSlot, value: Any, work: _Work) -> _Bound:
        vt = slot.value_type
        if isinstance(value, Output):
            self._foreign(slot, value._buffer)
            return self._chained(slot, value, work)
        if isinstance(value, wgpu.GPUBuffer):
            self._foreign(slot, value)
            if not (value.usage & wgpu.BufferUsage.STORAGE):
                raise self._slot_error(slot, f"input {slot.name!r}: buffer {value.label!r} lacks STORAGE usage")
            live = live_bytes(value)
            if live is not None:
                # An Output's buffer it handed out: raw words as any buffer's, but only the
                # Output's live ones (the pool's slack behind them is an earlier run's data).
                # Its owner can change (handed back through outputs=): never a repeat.
                work.via_owner = True
                if live % vt.bytes:
                    owner = output_of(value)
                    raise self._slot_error(
                        slot,
                        f"input {slot.name!r} ({vt.wgsl}) cannot take the {live} bytes of {owner.name if owner else '?'!r}'s buffer: not a whole number of elements",
                    )
                return _Bound(value, live // vt.bytes, 0, _binding_size(live))
            count = value.size // vt.bytes
            return _Bound(value, count, 0, _binding_size(count * vt.bytes))
        if isinstance(value, Table):
            raise self._slot_error(slot, f"input {slot.name!r} is a {vt.wgsl} buffer; a Table binds to a kind: columns binding")
        if isinstance(value, (TextureOutput, wgpu.GPUTexture, wgpu.GPUTextureView)):
            # (it was "dtype object is not numeric": review helper 214)
            raise self._slot_error(slot, f"input {slot.name!r} is a {vt.wgsl} buffer; a texture binds to a kind: texture or storage_texture binding")
        if value is None:
            raise self._slot_error(slot, f"missing input {slot.name!r} ({vt.wgsl})")
        if isinstance(value, Run):  # (it was "dtype object is not numeric": review helper 235)
            raise self._slot_error(slot, f"input {slot.name!r} takes one of a run's outputs (run.outputs[name]), not the Run")
        return self._upload(slot, value, work.temps)

    def _chained(self, slot: HostSlot, value: Output, work: _Work) -> _Bound:
        """An earlier run's output as this run's input: its live words, converted by value
        (in this run's submission) when it holds another scalar type, unless the binding takes
        raw words (``bits``/``atomic``)."""
        vt = slot.value_type
        known = value.count_known  # read once: another thread may learn the count meanwhile
        if not known and (value is not work.domain_output or slot.role == "inout"):
            # Its count is on the GPU: read it now (a wait), so the binding covers exactly the
            # live elements (SPEC: arrayLength == NAME_len()) and len() in count expressions is
            # the count. Handed as the run's domain_count too, it stays on the GPU: the kernel
            # runs over zero_n(), the live count, and the binding covers the capacity; but not
            # for a read_write binding, whose Output (written in place) answers the bound count:
            # it said the capacity (review helper 216).
            count, known = value.count, True
        else:
            count = value.count if known else value.capacity
        work.chained.append((value, count if known else None))  # what a repeat must find again
        if isinstance(vt, StructType) or isinstance(value.element, StructType):
            if value.element != vt:

                def layout(t: Any) -> str:
                    return t.declaration if isinstance(t, StructType) else t.wgsl

                raise self._slot_error(
                    slot, f"input {slot.name!r} is {layout(vt)} but the chained output {value.name!r} holds {layout(value.element)}: the layouts differ"
                )
            return _Bound(value._buffer, count, 0, _binding_size(count * vt.bytes))
        words = count * value.element.lanes
        if words % vt.lanes:
            raise self._slot_error(
                slot, f"input {slot.name!r} ({vt.wgsl}) cannot take {count} {value.element.wgsl} elements of {value.name!r}: not a whole number of elements"
            )
        if _same_scalar(value.element, vt) or slot.bits or slot.atomic:
            return _Bound(value._buffer, words // vt.lanes, 0, _binding_size(words * 4))
        if slot.role == "inout":  # the kernel would write a converted copy, not the caller's output
            raise self._slot_error(
                slot,
                f"read_write input {slot.name!r} ({vt.wgsl}) cannot take {value.element.wgsl} output {value.name!r}: "
                "it is written in place, so it must hold the binding's own type",
            )
        converted = self._pool.take(_binding_size(words * 4), label=f"{slot.name} (cast)")
        work.temps.append(converted)
        if words:
            work.extra.append(conversion_record(self.ctx, value._buffer, converted, words, value.element.scalar, vt.scalar))
            work.read.append(value._buffer)  # held by an open batch until the conversion ran
        else:  # nothing to convert, but WebGPU still binds an element: zeros, not its last user's data
            work.ops.append(("clear", converted, 0, min(converted.size, self._bound_bytes(slot, 0))))
        return _Bound(converted, words // vt.lanes, 0, _binding_size(words * 4))

    def _resolve_table(self, slot: HostSlot, value: Any, work: _Work) -> _Bound:
        if isinstance(value, (Table, wgpu.GPUBuffer)):
            self._foreign(slot, value.buffer if isinstance(value, Table) else value)
        if isinstance(value, Table):
            want = dict(self.lowered.table_columns).get(slot.name)
            if want is not None and tuple(want) != value.names[: len(want)]:
                raise self._slot_error(
                    slot,
                    f"table {slot.name!r}: the variant names columns {list(want)} but the table holds {list(value.names)}; "
                    f"pack it with abi.table(columns, order={list(want)})",
                )
            return _Bound(value.buffer, len(value.names), 0, _binding_size(value.words.nbytes))
        if isinstance(value, wgpu.GPUBuffer):
            want = dict(self.lowered.table_columns).get(slot.name)
            if want:
                # Its header cannot be checked against the names this variant's NAME_col_*
                # constants stand for: a table packed y, x read x's constant as y's column
                # (review helper 222), where the Table itself is refused.
                raise self._slot_error(
                    slot,
                    f"table {slot.name!r}: the variant names columns {list(want)}, which a raw GPUBuffer's header cannot be checked against; "
                    "pass the abi.table(...) it was packed as",
                )
            return _Bound(value, value.size // 4)
        if value is None:  # the seed: an unbound columns binding is an empty table
            want = dict(self.lowered.table_columns).get(slot.name)
            if want:
                raise self._slot_error(slot, f"missing table {slot.name!r}: the variant names columns {list(want)}; pass abi.table({{...}})")
            if self.lowered.bindings[slot.binding].access == "read_write":
                # Zeros of its own, this run's: a kernel's table setters write there, and a
                # shared constant carried one run's writes into every later "empty" table.
                # (A temporary more than its numpy inputs: never a repeat.)
                empty = self._pool.take(_EMPTY_TABLE.nbytes, label=f"{slot.name} (empty table)")
                work.temps.append(empty)
                work.ops.append(("clear", empty, 0, _EMPTY_TABLE.nbytes))
                return _Bound(empty, 0, 0, 4)
            return _Bound(self._constant("empty table", _EMPTY_TABLE), 0, 0, 4)
        raise self._slot_error(slot, f"table {slot.name!r} takes an abi.table(...) or a GPUBuffer, not {type(value).__name__}")

    # -- textures ----------------------------------------------------------------------------
    def _texture_of(self, slot: HostSlot, value: Any, storage_format: str | None = None, storage: bool = False) -> tuple[Any, str]:
        """(texture, format) of an input: a numpy array (uploaded; in ``storage_format`` for a
        storage binding), a GPUTexture, or an earlier run's TextureOutput (``storage``: for a
        storage binding: the texture is checked for what it must allow)."""
        if isinstance(value, TextureOutput):
            self._check_texture(slot, value.texture, value.format, storage or storage_format is not None)
            return value.texture, value.format
        if isinstance(value, wgpu.GPUTexture):
            self._check_texture(slot, value, str(value.format), storage or storage_format is not None)
            return value, str(value.format)
        if value is None or isinstance(value, (wgpu.GPUBuffer, Output, Mapping, wgpu.GPUTextureView)):
            what = "missing" if value is None else f"a {type(value).__name__} is no"
            # A view (a mip chain's level, review helper 205) was read as a numpy array.
            levels = "; the binding views the whole texture (a sampled one every level): pass the GPUTexture" if isinstance(value, wgpu.GPUTextureView) else ""
            raise self._slot_error(slot, f"{what} texture {slot.name!r}: pass a numpy array, a GPUTexture or an earlier run's texture output{levels}")
        try:
            texture, fmt, _ = upload_texture(self.ctx, value, slot.texture[0], slot.name, storage_format)
        except DispatchError as exc:
            if exc.span is not None and exc.span.path is not None:
                raise
            raise self._slot_error(slot, exc.message) from None  # at the binding's line
        return texture, fmt

    def _check_texture(self, slot: HostSlot, texture: Any, fmt: str, storage: bool) -> None:
        """Refuse a texture the binding cannot take, before wgpu does with a raw validation
        error: a format this ABI does not bind, a usage it lacks, another dimension, or
        several samples a texel."""
        self._foreign(slot, texture)
        try:
            format_sample(fmt)
        except KeyError:
            raise self._slot_error(slot, f"texture {slot.name!r}: a {fmt} texture is not one a binding takes here") from None
        need, what = (wgpu.TextureUsage.STORAGE_BINDING, "STORAGE_BINDING") if storage else (wgpu.TextureUsage.TEXTURE_BINDING, "TEXTURE_BINDING")
        if not (int(getattr(texture, "usage", need)) & need):
            raise self._slot_error(slot, f"texture {slot.name!r}: the texture {texture.label!r} lacks {what} usage")
        dim = slot.texture[0]
        have = str(getattr(texture, "dimension", "2d"))
        if (have == "3d") != (dim == "3d"):
            raise self._slot_error(slot, f"texture {slot.name!r} is {dim}; the texture {texture.label!r} is {have}")
        layers = int(texture.size[2]) if hasattr(texture, "size") else 1
        if dim == "2d" and layers > 1:  # a 2d view would read its first layer only
            raise self._slot_error(slot, f"texture {slot.name!r} is 2d; the texture {texture.label!r} has {layers} layers (dim: 2d_array binds them all)")
        if int(getattr(texture, "sample_count", 1)) != 1:
            raise self._slot_error(slot, f"texture {slot.name!r}: a multisampled texture cannot be bound here")
        mips = int(getattr(texture, "mip_level_count", 1))
        if storage and mips != 1:  # WebGPU binds one level for storage: wgpu's raw error at the bind group before (helper 157)
            raise self._slot_error(
                slot,
                f"storage texture {slot.name!r} binds one mip level; the texture {texture.label!r} has {mips}: write each level of a chain "
                "into a texture of its own (mip_level_count=1) and copy_texture_to_texture it",
            )

    def _resolve_texture(self, slot: HostSlot, value: Any) -> _Bound:
        dim, sample, filterable = slot.texture
        texture, fmt = self._texture_of(slot, value)
        have = format_sample(fmt)
        if have != sample:
            raise self._slot_error(slot, f"texture {slot.name!r} samples {sample} texels, but a {fmt} texture holds {have} ones")
        if filterable and fmt.endswith("32float") and "float32-filterable" not in self.ctx.device.features:
            raise self._slot_error(
                slot, f"texture {slot.name!r}: this device cannot filter {fmt} linearly; upload float16 or uint8 data, or use a nearest sampler"
            )
        return _Bound(texture, 0, resource=view_of(texture, dim), transient=True)

    def _resolve_storage_texture(self, slot: HostSlot, value: Any) -> _Bound:
        dim, fmt, _ = slot.texture
        if value is None:
            raise self._slot_error(slot, f"missing storage texture {slot.name!r} ({fmt}): pass a GPUTexture or an earlier run's texture output")
        texture, have = self._texture_of(slot, value, fmt, storage=True)
        if have != fmt:
            raise self._slot_error(slot, f"storage texture {slot.name!r} is {fmt}, not {have}")
        return _Bound(texture, 0, resource=view_of(texture, dim), transient=True)

    def _texture_output(self, slot: HostSlot, env: dict, lengths: dict, bound: dict, given: Any) -> TextureOutput:
        """An output storage texture: a new one per run (zero-filled by WebGPU), of ``size``."""
        dim, fmt, _ = slot.texture
        if given is not None:
            if not isinstance(given, (TextureOutput, wgpu.GPUTexture)):
                one = (
                    "; a storage texture binds a texture of one level: write each level of a chain into its own and copy_texture_to_texture it"
                    if isinstance(given, wgpu.GPUTextureView)
                    else ""
                )
                raise self._slot_error(slot, f"outputs[{slot.name!r}] is a GPUTexture or an earlier run's texture output, not {type(given).__name__}{one}")
            texture, have = self._texture_of(slot, given, storage=True)
            if have != fmt:
                raise self._slot_error(slot, f"outputs[{slot.name!r}] is a {have} texture; {slot.name!r} is {fmt}")
            size = (texture.size[0], texture.size[1], texture.size[2])
            # As a given buffer holding fewer elements than the run needs is refused: writes
            # past a smaller texture were dropped without a word (review helper 157).
            need = ([self._size(slot, "size", text, env, lengths) for text in slot.size] + [1, 1])[:3]
            if any(have_k < need_k for have_k, need_k in zip(size, need)):
                raise self._slot_error(
                    slot, f"outputs[{slot.name!r}] is {size[0]}x{size[1]}x{size[2]} texels; this run's size for {slot.name!r} is {need[0]}x{need[1]}x{need[2]}"
                )
        else:
            dims = [self._size(slot, "size", text, env, lengths) for text in slot.size]
            size = (dims + [1, 1])[:3]  # type: ignore[assignment]
            try:
                texture = output_texture(self.ctx, fmt, (size[0], size[1], size[2]), dim, slot.name)
            except DispatchError as exc:
                if exc.span is not None and exc.span.path is not None:
                    raise
                raise self._slot_error(slot, exc.message) from None  # at the binding's line
        bound[slot.binding] = _Bound(texture, 0, resource=view_of(texture, dim), transient=True)
        return TextureOutput(texture, fmt, (size[0], size[1], size[2]), dim, slot.name)

    def _constant(self, name: str, words: np.ndarray) -> Any:
        """A read-only constant buffer shared by every variant on this device."""
        cache = self.ctx.cache("runtime")
        buf = cache.get(name)
        if buf is None:
            buf = cache[name] = self.ctx.device.create_buffer_with_data(data=words, usage=STORAGE_USAGE)
        return buf

    def _resolve_domain(self, slot: HostSlot, value: Any, work: _Work) -> tuple[_Bound, int | None]:
        """Bind the domain count and record the live count it gives; answers (bound, the
        capacity of its source or None).

        A GPU count (an Output's counter, a GPUBuffer's word 0) is copied into a counter of
        this run's own in its submission: the live count is what the dispatch saw, whatever
        happens to the source afterwards.
        """
        if value is None:
            return _Bound(self._constant("no domain", _NO_DOMAIN), 1, 0, 4), None
        if isinstance(value, Output):  # its counter read, not handed out (it stays pooled)
            if value._counter is None or value.count_known:  # its count, on the host already
                bound, _ = self._resolve_domain(slot, value.count, work)
                return bound, value.capacity
            self._foreign(slot, value._counter)
            # Its count, not the raw counter: an append past its capacity, or a live count
            # before its run's clamp, holds more than the Output has.
            return self._snapshot(value._counter, work, value._counter_limit), value.capacity
        if isinstance(value, wgpu.GPUBuffer):
            self._foreign(slot, value)
            if not (value.usage & wgpu.BufferUsage.COPY_SRC) or value.size < 4:
                raise self._slot_error(slot, f"domain_count {slot.name!r}: buffer {value.label!r} needs COPY_SRC usage and one u32 word")
            return self._snapshot(value, work), None
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and 0 <= value <= 0xFFFFFFFF:
            buf = self._pool.take(16, label="domain count")
            self.ctx.queue.write_buffer(buf, 0, np.array([value, 0, 0, 0], dtype="<u4"))
            work.temps.append(buf)
            work.live_count = int(value)
            return _Bound(buf, 1, 0, 4), int(value)
        raise self._slot_error(slot, f"domain_count {slot.name!r} takes an Output, a GPUBuffer or a count (0 to 2**32-1), not {value!r}")

    def _snapshot(self, source: Any, work: _Work, limit: int | None = None) -> _Bound:
        counter = self._pool.take(16, label="live count")
        if limit is None:
            work.ops.append(("copy", source, 0, counter, 0, 4))
        else:  # clamped on the GPU, in this run's submission
            self.ctx.queue.write_buffer(counter, 4, np.array([limit], dtype="<u4"))
            work.extra.append(clamp_record(self.ctx, source, counter))
            work.read.append(source)  # held by an open batch until the clamp ran
        work.live_counter = counter
        return _Bound(counter, 1, 0, 4)

    # -- sizes -----------------------------------------------------------------------------
    def _size(self, slot: HostSlot, key: str, text: str, env: dict, lengths: dict) -> int:
        memo_key = (slot.name, key, text, tuple(env.items()), tuple(lengths.items()))
        found = self._sizes.get(memo_key)
        if found is not None:
            return found
        size = self._evaluate_size(slot, key, text, env, lengths)
        if len(self._sizes) > 256:
            self._sizes.clear()
        self._sizes[memo_key] = size
        return size

    def _evaluate_size(self, slot: HostSlot, key: str, text: str, env: dict, lengths: dict) -> int:
        try:
            value = parse_expression(text).evaluate(env, lengths)
        except ExpressionError as exc:
            raise self._slot_error(slot, f"{key} of {slot.name!r} ({text!r}): {exc.message}") from None
        size = math.ceil(value)
        if size < 0:
            raise self._slot_error(slot, f"{key} of {slot.name!r} ({text!r}) is negative: {value}")
        nbytes = size * (slot.value_type.bytes if key != "size" else 1)
        if nbytes > self._max_binding:
            raise self._slot_error(
                slot, f"{key} of {slot.name!r} ({text!r}) is {size} elements = {nbytes} bytes; this device binds at most {self._max_binding} bytes"
            )
        return size

    def _geometry(self, domain: Domain) -> tuple[dict[str, int], tuple[int, int, int]]:
        """The entry point's geometry params and the physical workgroups for ``domain``."""
        # At most a bounded multiple of what fills this adapter; the entry point grid-strides the rest.
        caps = self.ctx.cache("group_cap")
        cap = caps.get(self.lowered.workgroup)
        if cap is None:
            cap = caps[self.lowered.workgroup] = group_cap(self.lowered.workgroup, self.ctx.adapter_name)
        found = dispatch_fields(domain, self.lowered.workgroup, self._max_groups, cap)
        if found is None:
            raise DispatchError(f"a domain of {domain.extent} needs more workgroups than this device can dispatch", Span(self.yaml_path))
        return found

    # -- the run ---------------------------------------------------------------------------
    def run(
        self,
        n: int | tuple | None = None,
        inputs: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
        outputs: Mapping[str, Any] | None = None,
        domain_count: Any = None,
    ) -> Run:
        """Allocate outputs, bind, dispatch ``n`` invocations; never waits for the GPU.

        Args:
            n: the dispatch domain: a count, or a grid ``(w, h)`` / ``(w, h, d)`` whose
                coordinates ``global_invocation_id`` then holds (default: the capacity of
                ``domain_count``'s source). Count expressions see ``n`` = w * h * d.
            inputs: binding name -> numpy array, GPUBuffer, Output, or abi.table(...).
            params: the schema's params by name.
            outputs: binding name -> a GPUBuffer or {buffer, count, capacity, counter} used in
                place of an allocation (an append output given a counter keeps its count).
            domain_count: the live count for a ``domain_count`` binding: an Output (its
                counter), a GPUBuffer (word 0) or an int.
        Raises:
            DispatchError: before anything is submitted, naming the binding and its line.
            DeviceLostError: the device is gone; ``program.variant(...)`` compiles anew.
        """
        # device_guard, inlined: a generator context manager is a measurable share of a run.
        ctx = self.ctx
        if ctx.guard.lost:
            raise DeviceLostError(LOST_HINT)
        try:
            if PENDING[0] is not None:
                flush_pending()  # a deferred run goes first, in queue order
            if self._domain_name is not None and inputs and self._domain_name in inputs:
                inputs, domain_count = self._domain_input(inputs, domain_count)
            # One run of a variant at a time: its params memo, ring and repeat state are shared.
            with self._lock:
                rep = self._repeat
                if rep is not None and domain_count is None:
                    lane = self._lane
                    if lane is not None and lane[0] is rep and outputs is None:
                        done = self._run_lane(lane, rep, n, inputs, params)
                        if done is not None:
                            return done
                    if _plain_args(inputs, params, outputs):
                        done = self._run_repeat(rep, n, inputs, params, outputs)
                        if done is not None:
                            return done
                return self._run(n, inputs, params, outputs, domain_count)
        except Exception as exc:
            lost = lost_error(ctx, exc)
            if lost is None or lost is exc:
                raise
            raise lost from None

    def _run_lane(self, lane: tuple, rep: "_Repeat", n: Any, inputs: Any, params: Any) -> Run | None:
        """A repeat recorded into the batch lane the last repeat opened (see :meth:`_open_lane`):
        :meth:`_run_repeat`'s simple batch branch with only the checks that can fail run to
        run. None: not a repeat of it (the caller takes the general paths).

        A batch of one kernel's small runs spends its host time here, so the common case is
        written out: no call per check, per output or per set a buffer joins (on lavapipe a
        100-run batch recorded in 0.3 ms instead of 0.4; raw wgpu-py takes 0.7 ms for the
        whole batch)."""
        batch: Batch = lane[1]
        recorded: Lane = lane[2]
        stack = BATCH_STACK.get()
        # current_batch() is batch, its common case inline (a batch nested in it, or another
        # thread's or task's batch on top, takes the general paths: they look deeper).
        if batch.lane is not recorded or not stack or stack[-1] is not batch or batch.thread != get_ident():
            self._lane = None  # flushed, another run recorded, or the batch closed
            return None
        rn = rep.n
        if n is not rn and not (type(n) is int and type(rn) is int and n == rn) and not _same_domain(n, rn):
            return None
        if rep.epoch != DESTROY_EPOCH[0] or type(inputs) is not dict or (params is not None and type(params) is not dict):
            return None
        items = rep.inputs
        if len(items) == 1 and len(inputs) == 1:  # one input, the very same object (_same_objects)
            if inputs.get(items[0][0], _run_lane_missing) is not items[0][1]:
                return None
        elif not _same_objects(inputs, items):
            return None
        items = rep.param_items
        if params and len(params) == len(items):  # the very same immutable objects (_same_params)
            for k, rv in items:
                v = params.get(k, _run_lane_missing)
                if v is not rv or type(v) not in _SAME_IF_IDENTICAL:
                    if not _same_params(params, rep):
                        return None
                    break
        elif not _same_params(params, rep):
            return None
        plan = rep.plan
        if len(plan) == 1:  # one pooled output (_pooled_outputs and _repeat_bind_group, inline)
            slot, size, nbytes, cls, _, vt = plan[0]
            pool = self._pool
            buf = pool.take_class(cls, STORAGE_USAGE, slot.name)
            ops = [("clear", buf, 0, nbytes)] if slot.clear else []
            result = {slot.name: Output.pooled(buf, size, vt, slot.name, slot.bits, pool)}
            key: tuple = (buf,)
            bind_group = rep.bind_groups.get(key)
            if bind_group is None:
                bind_group = self._repeat_bind_group(rep, key, key)
            recorded.made(buf)  # its output: holds nothing of it until it is submitted
            recorded.results(buf)
            recorded.held(buf)
            recorded.held_bytes += cls  # (the buffer's size: its size class)
        else:
            ops, result, owned = self._pooled_outputs(rep)
            bind_group = self._repeat_bind_group(rep, tuple(owned), owned)
            for buf in owned:
                recorded.made(buf)
                recorded.results(buf)
                recorded.held(buf)
                recorded.held_bytes += buf.size
        recorded.record((self.compiled.pipeline, bind_group, recorded.offset, rep.groups, ops))
        if recorded.due is not None:
            recorded.until_due -= 1
            if not recorded.until_due:
                recorded.until_due = LANE_DUE_EVERY
                recorded.due()
        self.runs += 1
        return Run(result, rn, rep.groups, self)

    def _pooled_outputs(self, rep: "_Repeat") -> tuple[list, dict[str, Output], list]:
        """A simple repeat's outputs: a pooled buffer each, its clear, its Output; answers
        (clear ops, Outputs by name, buffers)."""
        pool = self._pool
        ops: list = []
        result: dict[str, Output] = {}
        owned: list = []
        for slot, size, nbytes, cls, _, vt in rep.plan:
            buf = pool.take_class(cls, STORAGE_USAGE, slot.name)
            if slot.clear:
                ops.append(("clear", buf, 0, nbytes))
            result[slot.name] = Output.pooled(buf, size, vt, slot.name, slot.bits, pool)
            owned.append(buf)
        return ops, result, owned

    def _repeat_bind_group(self, rep: "_Repeat", key: tuple, outs: list | tuple, ups: Any = ()) -> Any:
        """The bind group of a simple repeat whose own buffers are ``key`` (its uploads' ``ups``,
        then its outputs ``outs``): kept with the repeat state, made on a miss."""
        bind_group = rep.bind_groups.get(key)
        if bind_group is None:
            bound = dict(rep.bound)
            bound.update(ups)
            for (slot, size, nbytes, *_), buf in zip(rep.plan, outs):
                bound[slot.binding] = _Bound(buf, size, 0, nbytes)
            bind_group = rep.keep_group(key, self._bind_group(bound))
        return bind_group

    def _open_lane(self, rep: "_Repeat", batch: Any) -> None:
        """After a simple repeat recorded into ``batch``: when the batch's lane is this
        repeat's (its params bytes and fixed buffers), the next repeat may take
        :meth:`_run_lane`. Valid while this is the repeat state and the batch's lane is the one
        seen now (a flush, a drop or another run's record replaces it)."""
        recorded = batch.lane
        if (
            recorded is not None
            and recorded.variant is self
            and recorded.data is rep.data
            and recorded.fixed is rep.fixed
            and rep.simple
            and not rep.host
            and not rep.chained
            and not rep.outputs
        ):
            self._lane = (rep, batch, recorded)
        else:
            self._lane = None

    def _domain_input(self, inputs: Mapping[str, Any], domain_count: Any) -> tuple[dict[str, Any], Any]:
        """``inputs`` without the domain_count binding's entry, and that entry as the run's
        ``domain_count`` (the keyword and the binding's name are one way to hand it)."""
        name = self._domain_name or ""
        given = inputs[name]
        same = given is domain_count or (isinstance(given, numbers.Integral) and isinstance(domain_count, numbers.Integral) and int(given) == int(domain_count))
        if domain_count is not None and not same:
            raise self._slot_error(self._slots.get(name), f"domain_count {name!r} handed twice (inputs[{name!r}] and domain_count=): hand it once")
        return {k: v for k, v in inputs.items() if k != name}, given

    def _run(self, n: Any, inputs: Any, params: Any, outputs: Any, domain_count: Any) -> Run:
        if self._retired is not None:  # (retire() left no repeat state: every run comes here)
            raise DispatchError(self._retired, Span(self.yaml_path))
        result, shape, data, bind_group, groups, work, bound = self._prepare(n, inputs, params, outputs, domain_count, None)
        defer = self._deferrable and not outputs and _host_only(inputs, domain_count) and _run_bytes(work, result) <= DEFER_MAX_BYTES
        # Uploads of numpy arrays repeat too (same dtype and shape: the same checks hold; the
        # data is uploaded afresh every run); any other temporary (a conversion) does not, nor
        # host data uploaded for a read_write binding: its buffer is the answered Output's, and
        # a repeat would bind it again instead of uploading (a list, say, is never re-read).
        arrays = [k for k, v in (inputs or {}).items() if type(v) is np.ndarray]
        if (
            self._repeatable
            and domain_count is None
            and _plain_args(inputs, params, outputs)
            and not work.inout_owned
            and not work.via_owner
            and len(work.temps) == len(arrays)
            # a {"buffer": ...} input can be pointed at another buffer in place
            and not any(isinstance(v, Mapping) for v in (inputs or {}).values())
            and all(isinstance(v, (Output, wgpu.GPUBuffer)) for v in (outputs or {}).values())
        ):
            self._remember(shape, inputs or {}, params, outputs or {}, bound, result, data, groups, work.chained, arrays, defer)
        return self._submit(result, shape, data, bind_group, groups, work, bound, None, defer)

    def prepare(
        self, n: Any, inputs: Mapping[str, Any] | None = None, params: Mapping[str, Any] | None = None, domain_count: Any = None, *, results: Any
    ) -> PreparedRun:
        """Check and bind a run whose outputs are placed in ``results`` (one buffer with
        STORAGE | COPY_SRC | COPY_DST usage, see :class:`Placed`), for a caller that submits
        it itself (the engine backend). The same checks, bindings, params and clears as
        :meth:`run`; placed outputs are zeroed in place, in the submission's order.

        Raises:
            DispatchError: as :meth:`run`, and when the outputs do not fit ``results``.
        """
        # device_guard, inlined as in run(): a generator context manager costs µs a product a frame.
        ctx = self.ctx
        if ctx.guard.lost:
            raise DeviceLostError(LOST_HINT)
        try:
            if self._domain_name is not None and inputs and self._domain_name in inputs:
                inputs, domain_count = self._domain_input(inputs, domain_count)
            with self._lock:
                flush_pending()  # a deferred run goes first, in queue order
                if len(self._ring.reserved) >= self._ring.slots - 1:  # one slot each, until submitted
                    raise DispatchError(f"{self._ring.slots - 1} prepared runs of this variant are not submitted yet", Span(self.yaml_path))
                # Repeats take mappings only (what the signature says; a list of pairs goes the full path).
                plain = domain_count is None and type(n) is int and _mapping(inputs) and (params is None or _mapping(params))
                placed = self._placed.get(id(results)) if plain else None
                if placed is not None and placed.same(results, inputs, params):
                    again = self._prepare_again(placed, n, inputs)  # type: ignore[arg-type]  # same() saw inputs
                    if again is not None:
                        return again
                # Checked on the full path only: a repeat's area passed these checks, and what can
                # make it unusable since (destroy()) bumps the epoch its same() looks at.
                self._check_area(results)
                area = _Placement(results, self._storage_align)
                result, shape, data, bind_group, groups, work, bound = self._prepare(n, inputs, params, None, domain_count, area)
                try:
                    if self._placed_repeatable and plain and inputs and not work.extra and not work.chained:
                        self._remember_placed(n, inputs, params, results, data, groups, area, work, bound)  # type: ignore[arg-type]
                    holds = tuple(v for v in (*(inputs or {}).values(), domain_count) if isinstance(_unwrap(v), Output))
                    if work.live_holder is not None:  # its snapshot counter: not reused before the records run
                        holds += (work.live_holder,)
                    return self._prepared(result, shape, data, bind_group, groups, work.ops, work.temps, bound, area.layout, area.end, work.extra, holds)
                except BaseException:
                    self._pool_back(work.temps)  # never submitted: the uploads go back to the pool
                    raise
        except Exception as exc:
            lost = lost_error(ctx, exc)
            if lost is None or lost is exc:
                raise
            raise lost from None

    def _check_area(self, results: Any) -> None:
        """Refuse a results area a submission could not use: one destroyed or still mapped
        (wgpu-native aborts the process on submitting it), of another device, or without the
        usage the docstring of :meth:`prepare` asks (wgpu's bare validation error said none of
        this: review helper 219)."""
        if not isinstance(results, wgpu.GPUBuffer):
            raise DispatchError(f"results= is the GPUBuffer the outputs are placed in, not {type(results).__name__}", Span(self.yaml_path))
        gone = unusable(results)
        if gone is not None:
            raise DispatchError(f"results area {results.label!r} {gone}", Span(self.yaml_path))
        need = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        if results.usage & need != need:
            raise DispatchError(f"results area {results.label!r} needs STORAGE | COPY_SRC | COPY_DST usage", Span(self.yaml_path))
        if self._other_device(results):
            raise DispatchError(f"results area {results.label!r} lives on another device than this variant's", Span(self.yaml_path))

    def _prepared(
        self,
        result: dict,
        shape: Any,
        data: bytes,
        bind_group: Any,
        groups: tuple,
        ops: list,
        temps: list,
        bound: dict,
        layout: dict,
        end: int,
        extra: list,
        holds: tuple,
    ) -> PreparedRun:
        """A checked run's PreparedRun, its params written into a reserved ring slot."""
        offset = self._ring.take()
        write_buffer(self.ctx.queue, self._ring.buffer, offset, data)
        self._ring.reserved.add(offset)
        self.runs += 1
        # The buffers it binds (the params ring too): the submission may then move the
        # zeroing of its outputs ahead of other records (see runtime.submission).
        binds = frozenset([self._ring.buffer, *(b.buffer for b in bound.values() if b.buffer is not None)])
        record = (self.compiled.pipeline, bind_group, offset, groups, ops, binds)
        return PreparedRun(self, extra + [record], Run(result, shape, groups, self), temps, layout, end, offset, holds)

    def _remember_placed(
        self, n: int, inputs: Mapping[str, Any], params: Any, results: Any, data: bytes, groups: tuple, area: _Placement, work: _Work, bound: dict
    ) -> None:
        """Keep what a fully checked prepare derived (see :class:`_PlacedRepeat`), when every
        input is a buffer or numpy data uploaded as it is."""
        arrays: dict[str, tuple] = {}
        for name, value in inputs.items():
            slot = self._slots.get(name)
            if slot is None or slot.role != "input":
                return
            if type(value) is np.ndarray:
                direct = self._direct_upload(slot, value) if value.flags.c_contiguous else None
                if direct is None:
                    return  # converted on upload: the full path's checks every time
                arrays[name] = (slot, value.dtype)
            elif not isinstance(value, wgpu.GPUBuffer) or output_of(value) is not None:
                return  # (a handed-out buffer binds as its owner knows it: the owner can change)
        placed = self._placed.get(id(results))
        if placed is None or not placed.same(results, inputs, params):
            # Arrays are compared by dtype and shape, never by identity: not kept (a work list
            # of a first frame is not held for the area's life).
            kept = tuple((k, None if k in arrays else v) for k, v in inputs.items())
            placed = self._placed[id(results)] = _PlacedRepeat(results, kept, arrays, tuple(params.items()) if params else (), exact_fingerprint(params))
            while len(self._placed) > _PLACED_AREAS:
                self._placed.popitem(last=False)
        self._placed.move_to_end(id(results))
        uploaded = {slot.binding for slot, _ in arrays.values()}
        fixed = {i: b for i, b in bound.items() if i not in uploaded}
        if len(work.temps) != len(arrays) or any(b.transient for b in fixed.values()):
            return  # a temporary besides the uploads (none today): not derived from the key
        key = _placed_key(n, inputs, arrays)
        directs = tuple((slot, self._direct_upload(slot, inputs[k])) for k, (slot, _) in arrays.items())
        placed.entries[key] = (data, groups, dict(area.layout), area.end, tuple(work.ops), fixed, directs)
        while len(placed.entries) > _PLACED_ENTRIES:
            placed.entries.popitem(last=False)

    def forget_placed(self, results: Any) -> None:
        """Drop the prepare repeats of results area ``results`` (its product is released:
        the repeats would keep the area's buffer alive)."""
        with self._lock:
            placed = self._placed.get(id(results))
            if placed is not None and placed.results is results:
                del self._placed[id(results)]

    def _prepare_again(self, placed: _PlacedRepeat, n: int, inputs: Mapping[str, Any]) -> PreparedRun | None:
        """A prepare that repeats a remembered one (same results area, inputs and params; this
        ``n`` and these array shapes seen before): the numpy inputs are uploaded afresh and
        bound, everything else is what the full checks derived then. None: not seen."""
        arrays = placed.arrays
        key = _placed_key(n, inputs, arrays)
        entry = placed.entries.get(key)
        if entry is None:
            return None
        data, groups, layout, end, ops, fixed, directs = entry
        placed.entries.move_to_end(key)
        self._last_pages = None
        bound = dict(fixed)
        temps: list = []
        try:
            for (slot, direct), value in zip(directs, [inputs[k] for k in arrays]):
                bound[slot.binding] = self._upload_again(slot, value, temps, direct)  # dtype, shape and layout as remembered
            bind_group = self._bind_group(bound)
            return self._prepared(dict(layout), n, data, bind_group, groups, list(ops), temps, bound, dict(layout), end, [], ())
        except BaseException:
            self._pool_back(temps)  # never submitted: the uploads go back to the pool
            raise

    def _pool_back(self, temps: list) -> None:
        """Give a run's temporaries back to the pool (submitted, or never to be)."""
        for buf in temps:
            self._pool.give(buf)

    def results_bytes(self, n: int, params: Mapping[str, Any] | None = None, lengths: Mapping[str, int] | None = None) -> int:
        """Bytes a results area needs for a run over ``n`` items (``lengths``: element counts
        of the inputs the count expressions read)."""
        user, _ = self._packer.check(params)
        env = {"n": n, **self._packer.scalars(user)} if self._packer.user else {"n": n}
        env.update(nx=n, ny=1, nz=1)  # a count over n items: one axis
        sizes = dict(lengths or {})
        area = _Placement(None, self._storage_align)
        for slot, key, text in self._output_slots:
            size = self._size(slot, key, text, env, sizes)
            sizes[slot.name] = size
            area.take(self._bound_bytes(slot, size * slot.value_type.bytes))
            if slot.role == "append":
                area.take(4)
        return max(area.end, 4)

    def _prepare(self, n: Any, inputs: Any, params: Any, outputs: Any, domain_count: Any, area: _Placement | None) -> tuple:
        """Validate and bind one run: (outputs, domain as given, params bytes, bind group,
        workgroups, work, bound). Nothing is submitted."""
        inputs = self._arg_mapping("inputs", inputs)
        outputs = self._arg_mapping("outputs", outputs)
        self._last_pages = None  # page placement is resolved afresh each run
        for name in inputs:
            if name not in self._input_names and name not in self._slots:
                known = ", ".join(sorted(self._input_names)) or "none"
                raise DispatchError(f"unknown input {name!r}; this variant takes: {known}", Span(self.yaml_path))
            if name in self._slots and self._slots[name].role in ("output", "append", "texture_output") and name not in outputs:
                raise self._slot_error(self._slots[name], f"{name!r} is an output (the host allocates it); pass it in outputs= to supply a buffer")
        for name in outputs:
            if name not in self._output_names:
                outs = ", ".join(s.name for s in self.lowered.host_slots if s.role in ("output", "append", "inout")) or "none"
                raise DispatchError(f"unknown output {name!r}; this variant's outputs: {outs}", Span(self.yaml_path))
        if self._col_params and isinstance(params, Mapping) and not self._col_params.keys().isdisjoint(params):
            # page_binding's params name places in a page, not runs: kept across a free and a
            # new allocation they reach another run's data (review helper 178). The columns'
            # handles are checked live every run.
            key = next(k for k in params if k in self._col_params)
            column = self._col_params[key]
            raise DispatchError(
                f"param {key!r} is set from column {column.name!r}'s handle: pass the columns' substrate handles (or run names, or buffers) "
                f"in inputs=, e.g. inputs={{{column.name!r}: handle}}; abi.page_binding's params are for binding the page yourself",
                self._source_span(column.line),
            )
        user_params, fingerprint = self._packer.check(params)

        work = _Work()
        given_domain = _unwrap(domain_count)
        if isinstance(given_domain, Output):
            work.domain_output = given_domain
        bound: dict[int, _Bound] = {}
        lengths: dict[str, int] = {}
        bound_len: dict[str, int] = {}  # given outputs bound over more than this run's size
        written_textures: list[tuple[HostSlot, Any]] = []  # storage textures the kernel may write
        domain_capacity = None
        for slot in self.lowered.host_slots:
            if slot.role in ("input", "inout"):
                given = outputs.get(slot.name, inputs.get(slot.name))
                if isinstance(given, Mapping) and slot.name not in outputs and set(given) - {"buffer"}:
                    extra = ", ".join(sorted(map(str, set(given) - {"buffer"})))
                    raise self._slot_error(slot, f"inputs[{slot.name!r}] as a mapping takes only 'buffer', not {extra}: an input binds its whole buffer")
                value = _unwrap(given)
                if value is None and slot.role == "inout":
                    raise self._slot_error(slot, f"missing input {slot.name!r} (read_write, no count: the caller supplies it)")
                if slot.role == "inout" and isinstance(value, Output):
                    work.shares.append(value)  # this run's Output binds its buffer too: it leaves the pool
                b = self._resolve_input(slot, value, work)
                if slot.role == "inout" and work.temps and work.temps[-1] is b.buffer:
                    # Host data uploaded for a read_write binding: the kernel's result lives
                    # there, so the answered Output owns it (a temporary would go back to the
                    # pool after the submission, and the next run would overwrite it).
                    work.inout_owned[slot.binding] = work.temps.pop()
                bound[slot.binding] = b
                lengths[slot.name] = b.count
            elif slot.role == "table":
                b = self._resolve_table(slot, inputs.get(slot.name), work)
                bound[slot.binding] = b
                lengths[slot.name] = b.count
            elif slot.role == "page":
                value = inputs.get(slot.name)
                if value is None:
                    pages = self._page_binding(inputs)
                    value = pages.pages.get(slot.name)
                elif any(c.page == slot.name and c.name in inputs for c in self.lowered.columns):
                    # Given too: it must be the page the columns' runs live in (their offsets
                    # and lengths would be applied to another buffer: another run's data).
                    theirs = self._page_binding(inputs).pages.get(slot.name)
                    if theirs is not None and theirs is not value:
                        raise self._slot_error(
                            slot, f"page {slot.name!r} is given a buffer other than the page its columns' runs live in; leave it out (the columns name it)"
                        )
                if not isinstance(value, wgpu.GPUBuffer):
                    raise self._slot_error(slot, f"page {slot.name!r} takes a GPUBuffer, or substrate handles for its columns")
                self._foreign(slot, value)
                bound[slot.binding] = _Bound(value, value.size // 4)
            elif slot.role == "domain_count":
                b, domain_capacity = self._resolve_domain(slot, domain_count, work)
                bound[slot.binding] = b
            elif slot.role == "texture":
                bound[slot.binding] = self._resolve_texture(slot, inputs.get(slot.name))
            elif slot.role == "sampler":
                if inputs.get(slot.name) is not None:  # taken and ignored before (review helper 181)
                    raise self._slot_error(slot, f"sampler {slot.name!r} takes nothing: the host makes it from its filter and address in bindings.yaml")
                bound[slot.binding] = _Bound(None, 0, resource=sampler_for(self.ctx, *slot.texture))
            elif slot.role == "storage_texture":
                given = outputs.get(slot.name, inputs.get(slot.name))
                bound[slot.binding] = b = self._resolve_storage_texture(slot, given)
                if slot.texture[2] != "read":
                    # The kernel writes this texture (host data uploaded into one this run made,
                    # or the caller's own): the run answers it, as it answers a read_write
                    # buffer whatever it was given, so a loop can chain run.outputs[name].
                    written_textures.append((slot, b.buffer))
        if domain_count is not None and self.lowered.domain_count is None:
            raise DispatchError("domain_count= given, but this variant has no kind: domain_count binding", Span(self.yaml_path))
        if n is None:
            if domain_capacity is None:
                raise DispatchError("n (the dispatch size) is required", Span(self.yaml_path))
            n = domain_capacity
        domain = as_domain(n)
        if domain is None:
            raise DispatchError(f"n must be a non-negative int or a tuple of 1 to 3 of them (a grid), not {n!r}", Span(self.yaml_path))
        if domain.count > 0xFFFFFFFF:
            raise DispatchError(
                f"n={n} is {domain.count} invocations; that does not fit the u32 the kernel sees (at most 2**32-1 = 4294967295)", Span(self.yaml_path)
            )
        axis = wrapping_axis(domain, self.lowered.workgroup)
        if axis is not None:
            w = self.lowered.workgroup[axis]
            raise DispatchError(
                f"n={n}: {domain.extent[axis]} invocations along {'xyz'[axis]} round up to {-(-domain.extent[axis] // w) * w} in workgroups of {w}, "
                f"past 2**32: global_invocation_id would wrap to 0 and compute the first elements again (at most {(1 << 32) // w * w} along {'xyz'[axis]})",
                Span(self.yaml_path),
            )
        # A grid as plain ints: the caller's tuple may hold 0-d arrays that change in place (a
        # repeat compares against this, and Run.n reports it).
        shape = tuple(domain.extent[: len(n)]) if isinstance(n, (tuple, list)) else None
        n = domain.count
        if work.live_counter is not None:
            work.live_holder = _CounterHolder(work.live_counter)
            pool, counter = self._pool, work.live_counter
            on_release(work.live_holder, lambda: give_back(pool, counter))

        env = {"n": n, **self._packer.scalars(user_params)} if self._packer.user else {"n": n}
        shape3 = domain.extent if shape is not None else (n, 1, 1)
        env.update(nx=shape3[0], ny=shape3[1], nz=shape3[2])  # the grid's axes, as counts may name them
        result: dict[str, Any] = {}  # Output, or TextureOutput for output textures
        for slot, texture in written_textures:
            dim, fmt, _ = slot.texture
            result[slot.name] = TextureOutput(texture, fmt, (texture.size[0], texture.size[1], texture.size[2]), dim, slot.name)
        for slot, key, text in self._output_slots:
            size = self._size(slot, key, text, env, lengths)
            if area is not None:
                result[slot.name] = self._place(slot, size, area, n, work, bound)
            else:
                result[slot.name] = self._allocate(slot, size, outputs.get(slot.name) if outputs else None, n, work, bound)
            # A given output is bound over its own capacity (_allocate checked it holds size):
            # its NAME_len() (an append's capacity) reads that, and so does a later count
            # expression's len(NAME), or an output sized from it would not fit what the kernel
            # is told it may index.
            lengths[slot.name] = result[slot.name].capacity
            if result[slot.name].capacity != size:
                bound_len[slot.name] = result[slot.name].capacity
        self._inout_outputs(bound, result, work.inout_owned)
        if self._texture_outputs:
            for slot in self._texture_outputs:
                result[slot.name] = self._texture_output(slot, env, lengths, bound, outputs.get(slot.name) if outputs else None)

        fixed = {"n": n}
        if self.lowered.columns:
            fixed.update(self._page_binding(inputs).params)
        geometry, groups = self._geometry(domain)
        fixed.update(geometry)
        for name, field_name in self._len_fields:
            fixed[field_name] = bound_len.get(name, lengths[name])
        self._check_aliasing(bound)
        data = self._packer.pack(user_params, fixed, fingerprint)
        bind_group = self._bind_group(bound)
        _settle_shares(work)  # every check passed: a refused run leaves no Output changed
        return result, shape or n, data, bind_group, groups, work, bound

    def _arg_mapping(self, what: str, given: Any) -> Mapping[str, Any]:
        """``inputs=`` or ``outputs=`` as a mapping: None or an empty list/tuple is none."""
        if given is None or (type(given) in (list, tuple) and not given):
            return {}
        if not _mapping(given):
            raise DispatchError(f"{what}= maps binding names to values (a dict), not {type(given).__name__}", Span(self.yaml_path))
        return given

    def _check_aliasing(self, bound: dict[int, _Bound]) -> None:
        """Refuse one buffer bound both read-only and read_write in this dispatch: WebGPU
        refuses those usages together, at the submission's ``finish()`` (a raw validation
        error then, and an open batch's other runs lost). Several read_write bindings of one
        buffer are allowed only over ranges that do not overlap (an engine product's outputs
        placed in one results area): two over the same words race, whichever writes last."""
        plans = self.lowered.bindings
        writers: dict[int, int] = {}
        readers: dict[int, int] = {}
        ranges: dict[int, list[tuple[int, int, int]]] = {}
        for i, b in bound.items():
            if b.buffer is None:  # a sampler
                continue
            # A texture view's ``buffer`` is its texture: one written as a storage texture and
            # sampled or read through another binding aliases as a buffer does.
            writes = plans[i].access in ("read_write", "write")
            (writers if writes else readers).setdefault(id(b.buffer), i)
            if writes:
                # a texture's range: the whole of it
                start, end = (0, 1) if b.resource is not None else (b.offset, b.offset + (b.size if b.size is not None else b.buffer.size - b.offset))
                for j, lo, hi in ranges.setdefault(id(b.buffer), []):
                    if start < hi and lo < end:
                        raise self._slot_error(
                            self._slot_of_binding(i) or self._slot_of_binding(j),
                            f"{plans[j].name!r} and {plans[i].name!r} are the same buffer or texture, both written; their writes would race: hand each its own",
                        )
                ranges[id(b.buffer)].append((i, start, end))
        for key, w in writers.items():
            r = readers.get(key)
            if r is not None:
                raise self._slot_error(
                    self._slot_of_binding(r) or self._slot_of_binding(w),
                    f"{plans[r].name!r} (read) and {plans[w].name!r} (written) are the same buffer or texture; "
                    "a dispatch cannot read what it also writes through another binding: hand a copy, or bind it once as read_write",
                )

    def _slot_of_binding(self, binding: int) -> HostSlot | None:
        for slot in self.lowered.host_slots:
            if slot.binding == binding or slot.counter_binding == binding:
                return slot
        return None

    def _submit(
        self, result: dict, n: Any, data: bytes, bind_group: Any, groups: tuple, work: _Work, bound: dict, touched: list | None = None, defer: bool = False
    ) -> Run:
        """Send one checked run: into the open ``abi.batch()``, deferred (``defer``: see
        :mod:`engine_plugin.runtime.deferred`), or now in its own submission. ``touched``:
        every buffer the run uses, when the caller knows it (the repeat path)."""
        batch = current_batch()
        if batch is not None or defer:
            if touched is None:
                touched = [b.buffer for b in bound.values() if b.buffer is not None] + [op[1] for op in work.ops] + work.temps + work.read
            results = _result_buffers(result)
            if batch is not None:
                made = [op[3] if op[0] == "copy" else op[1] for op in work.ops] + _pooled_buffers(result)  # what the run made: see Batch.add
                batch.add(self, data, bind_group, groups, work.ops, work.temps, touched, work.extra, made=made, results=results)
            else:
                defer_run(self, data, bind_group, groups, work.ops, work.temps, touched, work.extra, results)
        else:
            self._submit_now(data, bind_group, groups, work.ops, work.temps, work.extra)
            if VOIDED[0]:
                settle_outputs(_result_buffers(result), [], "")  # written now (a given output an interrupted batch left)
        self.runs += 1
        return Run(result, n, groups, self)

    def _submit_now(self, data: bytes, bind_group: Any, groups: tuple, ops: list, temps: list, extra: list | None = None, clears_only: bool = False) -> None:
        """Send one run (params bytes ``data``) in its own submission, then give its
        temporaries back to the pool. Clears and one dispatch are encoded inline (this is every
        immediate run's path); anything else goes through ``encode_records``."""
        ctx = self.ctx
        offset = self._ring.place(ctx.queue, data)
        encoder = ctx.device.create_command_encoder()  # unlabelled: a label costs ~6-9 µs an encoder (H200 host)
        if extra or not (clears_only or all(op[0] == "clear" for op in ops)):
            encode_records(encoder, (extra or []) + [(self.compiled.pipeline, bind_group, offset, groups, ops)])
        else:
            for op in ops:
                clear_buffer(encoder, op[1], op[2], op[3])
            if groups[0]:
                cpass = begin_pass(encoder)
                cpass.run(self.compiled.pipeline, bind_group, offset, groups)
                cpass.end()
        submit_encoder(ctx.queue, ctx.guard, encoder)
        for buf in temps:
            self._pool.give(buf)

    def _inout_outputs(self, bound: dict, result: dict, owned: dict | None = None) -> None:
        """Read_write inputs the caller supplied are outputs too: written in place (``owned``:
        the bindings whose buffer the run uploaded, which their Output gives back to the pool)."""
        for slot in self._inout_slots:
            b = bound[slot.binding]
            out = result[slot.name] = Output(b.buffer, b.count, slot.value_type, name=slot.name, count=b.count, bits=slot.bits)
            if owned and slot.binding in owned:
                own_pooled(out, self._pool, (b.buffer,))

    # -- the repeat path ---------------------------------------------------------------------
    # A game calls the same kernel every frame with the same buffers and params. When a call
    # matches the last fully checked one (same n, the very same input objects, equal params),
    # everything that was validated and derived then still holds: only outputs are allocated
    # (and cleared) afresh, and the params bytes, sizes and bound inputs are reused.

    def _remember(
        self,
        n: Any,
        inputs: Mapping[str, Any],
        params: Any,
        outputs: Mapping[str, Any],
        bound: dict,
        result: dict,
        data: bytes,
        groups: tuple,
        chained: list,
        arrays: list | None = None,
        defer: bool = False,
    ) -> None:
        outs = {s.binding for s in self.lowered.host_slots if s.role in ("output", "append")}
        host = {
            name: (self._slots[name], inputs[name].dtype, inputs[name].shape, self._direct_upload(self._slots[name], inputs[name])) for name in arrays or ()
        }
        outs |= {slot.binding for slot, _, _, _ in host.values()}  # uploaded afresh each run
        outs |= {s.counter_binding for s in self.lowered.host_slots if s.role == "append"}
        plan = []
        for slot, _, _ in self._output_slots:
            size = result[slot.name].capacity
            nbytes = self._bound_bytes(slot, size * slot.value_type.bytes)  # as _allocate takes and clears it
            kind = "given" if slot.name in outputs else "plain" if slot.role == "output" else "pooled"
            plan.append((slot, size, nbytes, size_class(nbytes), kind, slot.value_type))
        self._repeat_group = None
        items = tuple(inputs.items())
        self._repeat = rep = _Repeat(
            n,
            items,
            tuple(outputs.items()),
            tuple(chained),
            tuple(params.items()) if params else (),
            exact_fingerprint(params),
            {i: b for i, b in bound.items() if i not in outs},
            plan,
            data,
            groups,
        )
        rep.simple = not self._inout_slots and all(kind == "plain" for _, _, _, _, kind, _ in plan)
        rep.host, rep.defer = host, defer
        if host and not rep.simple:
            self._repeat = None  # uploads repeat on the simple path only

    def _run_repeat(self, rep: "_Repeat", n: Any, inputs: Any, params: Any, outputs: Any) -> Run | None:
        rn = rep.n
        if n is not rn and not _same_domain(n, rn):
            return None
        if rep.epoch != DESTROY_EPOCH[0] and not rep.none_destroyed():  # the compare inline: every repeat
            return None  # the full path refuses it
        if not _same_params(params, rep):
            return None
        if not (_same_inputs(inputs, rep) if rep.host else _same_objects(inputs, rep.inputs)):
            return None
        if (outputs or rep.outputs) and not _same_objects(outputs, rep.outputs):
            return None
        if rep.chained and not _same_counts(rep.chained):
            return None  # a chained count on the GPU, or another than was bound: the full path
        pool = self._pool
        if rep.simple:  # pooled plain outputs only (the common case): no bound dict unless a group is made
            temps: list = []
            ups = [(slot.binding, self._upload_again(slot, inputs[name], temps, direct)) for name, (slot, _, _, direct) in rep.host.items()] if rep.host else ()
            ops, result, outs = self._pooled_outputs(rep)
            owned = temps + outs if temps else outs
            key = tuple(owned)
            last = self._repeat_group
            if last is not None and last[0] == key:
                bind_group = last[1]
            else:
                bind_group = self._repeat_bind_group(rep, key, outs, ups)
                self._repeat_group = (key, bind_group)
            batch = current_batch() if OPEN_BATCHES else None
            if batch is not None:  # recorded into this thread's batch: _submit's batch branch, inline
                if temps:
                    batch.add(self, rep.data, bind_group, rep.groups, ops, temps, rep.fixed + owned, made=outs, results=outs)
                else:
                    batch.add_again(self, rep.data, bind_group, rep.groups, ops, owned, rep.fixed)
                    self._open_lane(rep, batch)
                self.runs += 1
                return Run(result, rn, rep.groups, self)
            if not rep.defer:
                # Submitted at once (no batch open on this thread, nothing to defer): this is
                # what a game calling a kernel every frame pays, so no generic _submit. The
                # repeat's params are the same bytes object run after run: place() reuses them.
                self._submit_now(rep.data, bind_group, rep.groups, ops, temps, clears_only=True)  # ops: the outputs' clears
                self.runs += 1
                return Run(result, rn, rep.groups, self)
            return self._submit(result, rn, rep.data, bind_group, rep.groups, _Work(ops, temps=temps), rep.bound, rep.fixed + owned, rep.defer)
        bound = dict(rep.bound)
        result = {}
        work = _Work()
        ops = work.ops
        owned = []
        count = rn if type(rn) is int else as_domain(rn).count  # type: ignore[union-attr]
        for slot, size, nbytes, cls, kind, vt in rep.plan:
            if kind == "plain":  # a pooled plain output: the common case, without _allocate's generality
                buf = pool.take_class(cls, STORAGE_USAGE, slot.name)
                if slot.clear:
                    ops.append(("clear", buf, 0, nbytes))
                bound[slot.binding] = _Bound(buf, size, 0, nbytes)
                result[slot.name] = out = Output.pooled(buf, size, vt, slot.name, slot.bits, pool)
            else:
                result[slot.name] = out = self._allocate(slot, size, outputs[slot.name] if kind == "given" else None, count, work, bound)
            owned.append(out._buffer)
            if out._counter is not None:
                owned.append(out._counter)
        if self._inout_slots:
            self._inout_outputs(bound, result)
        _settle_shares(work)
        # The pool hands back the buffers the last (dropped) run released: same buffers, same
        # group. Inside a batch the buffers differ run to run (each is held until the batch is
        # submitted): the groups made for them are kept with the repeat state.
        key = tuple(owned)
        last = self._repeat_group
        if last is not None and last[0] == key:
            bind_group = last[1]
        else:
            bind_group = rep.bind_groups.get(key)
            if bind_group is None:
                bind_group = rep.keep_group(key, self._bind_group(bound))
            self._repeat_group = (key, bind_group)
        return self._submit(result, rn, rep.data, bind_group, rep.groups, work, bound, rep.fixed + owned)

    def _page_binding(self, inputs: Mapping[str, Any]) -> Any:
        """Pages and col_base_*/col_len_* params from the column handles in ``inputs`` (once per run)."""
        cols = {c.name: inputs[c.name] for c in self.lowered.columns if c.name in inputs}
        # A buffer an Output handed out is a page of its live elements only: the pool's slack
        # behind them is an earlier run's data. Its owner can change: part of the key.
        live = {}
        for k, v in cols.items():
            found = live_bytes(v) if isinstance(v, wgpu.GPUBuffer) else None
            if found is not None:
                live[k] = found
        cache_key = (DESTROY_EPOCH[0], *((k, id(v)) for k, v in cols.items()), *live.items())
        if self._last_pages is not None and self._last_pages[0] == cache_key:
            return self._last_pages[1]
        missing = [c for c in self.lowered.columns if c.name not in cols]
        if missing:
            c = missing[0]
            raise DispatchError(
                f"missing column {c.name!r} (a run of page {c.page!r}): pass a substrate handle, a run name or a GPUBuffer",
                self._source_span(c.line),
            )
        from ..substrate.binding import page_binding

        result = page_binding(self.lowered, cols, live)
        for page, buffer in result.pages.items():
            gone = unusable(buffer)
            if gone is not None:
                line = next((c.line for c in self.lowered.columns if c.page == page), None)
                raise DispatchError(f"page {page!r}: its buffer {buffer.label!r} {gone}", self._source_span(line))
            if self._other_device(buffer):
                line = next((c.line for c in self.lowered.columns if c.page == page), None)
                raise DispatchError(
                    f"page {page!r}: its buffer {buffer.label!r} lives on another device than this variant's; "
                    "make the Substrate on the variant's device (Substrate(device=None) is the plugin's default) "
                    "or make the program on the substrate's device (abi.program(..., device=...))",
                    self._source_span(line),
                )
        self._last_pages = (cache_key, result, cols)  # cols kept alive so the ids stay theirs
        return result

    def _place(self, slot: HostSlot, size: int, area: _Placement, n: int, work: _Work, bound: dict) -> Placed:
        """An output placed in the caller's results area, zeroed in place (``clear: false``
        keeps what the area held), an append's counter reset."""
        # At least one element: an empty vec4 binding still covers 16 bytes, which must be its own.
        nbytes = self._bound_bytes(slot, size * slot.value_type.bytes)
        offset = area.take(nbytes)
        if slot.clear:
            work.ops.append(("zero", area.buffer, offset, nbytes))
        bound[slot.binding] = _Bound(area.buffer, size, offset, nbytes)
        counter_offset = None
        if slot.role == "append":
            counter_offset = area.take(4)
            work.ops.append(("zero", area.buffer, counter_offset, 4))
            bound[slot.counter_binding] = _Bound(area.buffer, 1, counter_offset, 4)
        count = min(work.live_count, n) if slot.live and work.live_count is not None else size
        placed = Placed(offset, size, count, counter_offset)
        area.layout[slot.name] = placed
        return placed

    def _allocate(self, slot: HostSlot, size: int, given: Any, n: int, work: _Work, bound: dict) -> Output:
        """An output's buffer (pooled, or the caller's), bound over exactly its elements; a
        pooled one is cleared in the run's submission unless the binding opts out."""
        vt = slot.value_type
        buf = counter = None
        keep_count = False
        if given is not None:
            try:
                buf, counter, cap, owned, source = _given_output(given)
            except DispatchError as exc:
                raise self._slot_error(slot, f"outputs[{slot.name!r}]: {exc.message}") from None
            self._foreign(slot, buf, target=counter is None or slot.role != "append")  # an append's kept count is read
            if counter is not None:
                self._foreign(slot, counter)
            for what, b in (("buffer", buf), ("counter", counter)):
                if b is not None and not (b.usage & wgpu.BufferUsage.STORAGE):
                    raise self._slot_error(slot, f"outputs[{slot.name!r}]: its {what} {b.label!r} lacks STORAGE usage")
            holder = output_of(buf) if owned is None else None
            typed = source or holder  # the Output whose elements the buffer holds (given, or handed out by it)
            if typed is not None and not (slot.bits or slot.atomic) and not _same_scalar(typed.element, vt):
                # Written in place as this binding's type: the Output would read the kernel's
                # bits as its own type (an f32 kernel's 2.0 read back as 1073741824: review
                # helpers 130, 132), as a read_write input of another type is refused.
                raise self._slot_error(
                    slot,
                    f"outputs[{slot.name!r}] ({vt.wgsl}) cannot take {typed.element.wgsl} output {typed.name!r}: "
                    "it is written in place, so it must hold the binding's own type",
                )
            if source is not None:  # the given Output's buffers are handed out once every check passed
                work.handouts.append((source, counter is not None and counter is source._counter))
            if holder is not None:  # an Output's handed-out buffer: its bytes are the Output's, the pool's slack is not
                limit = holder.capacity * holder.element.bytes
                if size * vt.bytes > limit or (cap is not None and cap * vt.bytes > limit):
                    raise self._slot_error(
                        slot,
                        f"outputs[{slot.name!r}] holds {limit // vt.bytes} elements (the Output that handed it out); {slot.name!r} needs {max(size, cap or 0)}",
                    )
            if owned is not None:  # an Output's own bytes (the pool's slack behind them is not its own)
                if cap is None:
                    cap = owned // vt.bytes  # its elements, counted in this binding's element type
                elif cap * vt.bytes > owned:
                    raise self._slot_error(slot, f"outputs[{slot.name!r}]: capacity {cap} is past the {owned // vt.bytes} {vt.wgsl} elements its Output holds")
            if cap is not None and cap < size:  # what it holds, in this binding's elements (first: its buffer may be a larger size class)
                raise self._slot_error(slot, f"outputs[{slot.name!r}] holds {cap} elements; {slot.name!r} needs {size}")
            if buf.size < size * vt.bytes:
                raise self._slot_error(slot, f"outputs[{slot.name!r}] holds {buf.size // vt.bytes} elements; {slot.name!r} needs {size}")
            size = cap if cap is not None else size
            if size * vt.bytes > buf.size:
                raise self._slot_error(slot, f"outputs[{slot.name!r}] holds {buf.size // vt.bytes} elements; its capacity says {size}")
            keep_count = counter is not None
            owner = source or holder
            if slot.role == "append" and keep_count and owner is not None and owner._counter is counter and size < owner.capacity:
                # Its appends past ``size`` would be dropped but counted on the shared counter:
                # the owner, with its larger capacity, read them as live zeros (helper 216).
                raise self._slot_error(
                    slot,
                    f"outputs[{slot.name!r}]: capacity {size} is below the {owner.capacity} of output {owner.name!r}, whose count it continues: "
                    f"records past {size} would be lost while {owner.name!r} counts them; give its capacity (or none)",
                )
        nbytes = _binding_size(size * vt.bytes)
        if buf is None:
            nbytes = self._bound_bytes(slot, size * vt.bytes)  # the range it binds, cleared whole
            buf = self._pool.take(nbytes, label=slot.name)
            if slot.clear:
                work.ops.append(("clear", buf, 0, nbytes))
        if slot.role == "append" and counter is None:
            counter = self._pool.take(16, label=f"{slot.name}_count")
        if slot.role == "append" and not keep_count:
            # The whole pooled buffer, not the word it counts in: handed out (Output.counter),
            # abi.read answers all its words, and its tail was an earlier run's upload (review
            # helper 223).
            work.ops.append(("clear", counter, 0, counter.size))  # type: ignore[union-attr]  # taken just above
        elif slot.role == "append":
            counter_rewritten(counter)  # appends continue: counts read from it so far are stale
            batch = current_batch() if open_batches() else None
            if batch is not None:  # a count read meanwhile (another thread) is stale once it runs
                batch.on_drop.append(partial(counter_rewritten, counter))
        bound[slot.binding] = _Bound(buf, size, 0, nbytes)
        if slot.role == "append":
            bound[slot.counter_binding] = _Bound(counter, 1, 0, 4)
            out = Output(buf, size, vt, name=slot.name, counter=counter, counter_kind="append", bits=slot.bits)
        elif slot.live and work.live_counter is not None:
            out = Output(buf, size, vt, name=slot.name, counter=work.live_counter, counter_kind="live", counter_limit=n, bits=slot.bits, keep=work.live_holder)
        elif slot.live and work.live_count is not None:
            out = Output(buf, size, vt, name=slot.name, count=min(work.live_count, n), bits=slot.bits)
        elif given is None:
            return Output.pooled(buf, size, vt, slot.name, slot.bits, self._pool)
        else:
            out = Output(buf, size, vt, name=slot.name, count=size, bits=slot.bits)
        if given is None:
            own_pooled(out, self._pool, (buf, counter) if slot.role == "append" else (buf,))
        else:
            work.shares.append(out)  # a host-allocated buffer handed back: its reads answer this Output now
        return out

    def _bind_group(self, bound: dict[int, _Bound]) -> Any:
        key = tuple((i, id(b.resource if b.resource is not None else b.buffer), b.offset, b.size) for i, b in sorted(bound.items())) + (id(self._ring.buffer),)
        found = self._bind_groups.get(key)
        if found is not None:
            self._bind_groups.move_to_end(key)
            return found[0]
        entries = []
        for i, b in sorted(bound.items()):
            if b.resource is not None:
                entries.append({"binding": i, "resource": b.resource})
                continue
            res: dict[str, Any] = {"buffer": b.buffer, "offset": b.offset}
            size = b.size if b.size is not None else b.buffer.size - b.offset
            # An empty vec2/vec4 binding still covers one element (WebGPU binds no less); NAME_len() stays 0.
            res["size"] = max(size, min(self._min_binding[i], b.buffer.size - b.offset))
            entries.append({"binding": i, "resource": res})
        entries.append({"binding": self.lowered.params.binding, "resource": {"buffer": self._ring.buffer, "offset": 0, "size": self._ring.struct_size}})
        group = self.ctx.device.create_bind_group(layout=self.compiled.bind_group_layout, entries=entries)
        if any(b.transient for b in bound.values()):
            return group
        # Once a buffer was handed out anywhere since the last look, groups holding handed-out
        # buffers go: those never come back from the pool, so such an entry is never hit
        # again and only keeps their GPU memory alive (the seed's abi.read(run.outputs.dst.buffer)
        # hands one out every run).
        if self._pruned_at != HANDOUTS[0]:
            self._pruned_at = HANDOUTS[0]
            for k in [k for k, (_, held) in self._bind_groups.items() if any(handed_out(buf) for buf, _ in held if buf is not None)]:
                del self._bind_groups[k]
        # Keep the buffers alive with the cached group, so an id() in the key can never be reused.
        self._bind_groups[key] = (group, [(b.buffer, b.resource) for b in bound.values()])
        while len(self._bind_groups) > _BIND_GROUP_CACHE:
            self._bind_groups.popitem(last=False)
        return group


def _output_order(slots: list[HostSlot]) -> list[tuple[HostSlot, str, str]]:
    """(slot, 'count'|'capacity', expression) with outputs sized before outputs whose size reads them."""
    todo = {s.name: s for s in slots}
    order: list[tuple[HostSlot, str, str]] = []
    while todo:
        progressed = False
        for name, slot in list(todo.items()):
            text = slot.capacity if slot.role == "append" else slot.count
            if not any(ref in todo and ref != name for ref in parse_expression(text).lengths):  # type: ignore[arg-type]
                order.append((slot, "capacity" if slot.role == "append" else "count", text))  # type: ignore[arg-type]
                del todo[name]
                progressed = True
        if not progressed:  # a cycle of len() references: size them in declaration order, the error names it
            order += [(s, "capacity" if s.role == "append" else "count", s.capacity if s.role == "append" else s.count) for s in todo.values()]  # type: ignore[misc]
            break
    return order


_HOST_DATA = (np.ndarray, np.generic, list, tuple, int, float)


def _host_only(inputs: Any, domain_count: Any) -> bool:
    """Whether every input is host data (uploaded into buffers only the runtime holds)."""
    if domain_count is not None and not isinstance(domain_count, (int, np.integer)):
        return False
    return not inputs or all(isinstance(v, _HOST_DATA) for v in inputs.values())


def _run_bytes(work: _Work, result: dict) -> int:
    """Bytes a run uploads and allocates (what a deferral holds back)."""
    return sum(b.size for b in work.temps) + sum(out._buffer.size for out in result.values())


def _settle_shares(work: _Work) -> None:
    """What a checked run changes on the Outputs it binds: given Outputs' buffers handed out
    (``outputs=``: the caller's from now on, as ``output.buffer`` hands it), and Outputs whose
    buffers it binds elsewhere shared (their reads answer the newest)."""
    for source, counter_too in work.handouts:
        source.buffer  # noqa: B018  # the property hands the buffer out (see Output.buffer)
        if counter_too:
            source.counter  # noqa: B018
    for out in work.shares:
        share(out)


def _mapping(value: Any) -> bool:
    """Whether ``value`` is a mapping (a dict at the cost of a type check)."""
    return type(value) is dict or isinstance(value, Mapping)


def _plain_args(inputs: Any, params: Any, outputs: Any) -> bool:
    """Whether a run's arguments are mappings (or None), as the repeat path compares them;
    anything else takes the full path, which refuses it or (params as pairs) reads it."""
    return (
        (inputs is None or type(inputs) is dict or _mapping(inputs))
        and (params is None or type(params) is dict or _mapping(params))
        and (outputs is None or type(outputs) is dict or _mapping(outputs))
    )


def _pooled_buffers(result: Mapping[str, Any]) -> list:
    """The pooled buffers a run's Outputs got (outputs, uploads bound read_write, counters)."""
    return [b for o in result.values() if isinstance(o, Output) and o._pool is not None for b in o._pooled]


def _result_buffers(result: Mapping[str, Any]) -> list:
    """The buffers holding a run's results: its Outputs' buffers and counters (its outputs,
    appends, read_write bindings; given ones too)."""
    out = []
    for o in result.values():
        if not isinstance(o, Output):
            continue
        counter = o._counter
        if counter is not None and not (o._pool is not None and any(b is counter for b in o._pooled)):
            # A given append continued: its buffer and counter are its earlier Output's too,
            # right for it whatever becomes of this run; they answer what they hold (as to
            # another thread while this run is recorded), and continuing it again is taken.
            continue
        out.append(o._buffer)
        if counter is not None:
            out.append(counter)
    return out


def _unwrap(value: Any) -> Any:
    """A ``{buffer, ...}`` mapping's buffer; any other value as it is."""
    if type(value) is np.ndarray or value is None or isinstance(value, wgpu.GPUBuffer):
        return value  # the common cases, without the Mapping ABC's isinstance (a few µs)
    if isinstance(value, Mapping) and "buffer" in value:
        return value["buffer"]
    return value


def _same_scalar(element: Any, vt: Any) -> bool:
    """Whether an Output of ``element`` holds words of binding type ``vt``'s kind: the same
    scalar (any lanes: an f32 Output is a vec4<f32> binding's words), or the same struct."""
    if isinstance(element, StructType) or isinstance(vt, StructType):
        return bool(element == vt)
    return bool(element.scalar == vt.scalar)


_OUTPUT_KEYS = frozenset({"buffer", "count", "capacity", "counter"})  # an outputs= mapping's (SPEC section 2)


def _given_output(given: Any) -> tuple[Any, Any, int | None, int | None, Output | None]:
    """``(buffer, counter, capacity given, bytes an Output owns, that Output)`` of an
    ``outputs=`` entry: a GPUBuffer, an Output, or ``{buffer, count, capacity, counter}`` (its
    buffer either). Nothing is handed out here: the caller does, once its checks passed.

    Raises:
        DispatchError: an entry of another shape (the caller names the binding).
    """
    if isinstance(given, Output):
        # An append continues an append's own counter only: a live output's is the snapshot its
        # run's live outputs share, which appends raised under the others (review helper 216),
        # and only while its count was still on the GPU. Given so, it is written from its start.
        counter = given._counter if given._counter_kind == "append" else None
        return given._buffer, counter, None, given.capacity * given.element.bytes, given
    if isinstance(given, wgpu.GPUBuffer):
        return given, None, None, None, None
    if isinstance(given, Mapping) and "buffer" in given:
        unknown = set(given) - _OUTPUT_KEYS
        if unknown:
            # A misspelt key was ignored: {"buffer": b, "countr": c} dropped the counter, and
            # the appends overwrote the caller's first records (review helper 194).
            names = ", ".join(sorted(map(repr, unknown)))
            raise DispatchError(f"unknown key {names} in an outputs= mapping; it takes {', '.join(map(repr, sorted(_OUTPUT_KEYS)))}")
        inner = given["buffer"]
        if isinstance(inner, Output):
            buf, counter, _, owned, source = _given_output(inner)
        elif isinstance(inner, wgpu.GPUBuffer):
            buf, counter, owned, source = inner, None, None, None
        else:
            raise DispatchError(f"'buffer' is a GPUBuffer or an Output, not {type(inner).__name__}")
        counter = given.get("counter", counter)
        if counter is not None and not isinstance(counter, wgpu.GPUBuffer):
            raise DispatchError(f"'counter' is a GPUBuffer, not {type(counter).__name__}")
        cap = given.get("capacity", given.get("count"))
        if cap is not None:
            try:
                if isinstance(cap, (bool, np.bool_)) or isinstance(cap, float):
                    raise TypeError
                cap = operator.index(cap)
            except TypeError:
                raise DispatchError(f"'capacity' (or 'count') is a whole number of elements, not {cap!r}") from None
            if cap < 0:
                raise DispatchError(f"'capacity' (or 'count') is a whole number of elements, not {cap!r}")
        return buf, counter, cap, owned, source
    raise DispatchError(f"an outputs= entry is a GPUBuffer, an Output or {{buffer, count, capacity, counter}}, not {type(given).__name__}")
