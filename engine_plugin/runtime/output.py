"""Outputs of a run, and reading buffers back.

An :class:`Output` is a view of one output binding after a dispatch: its buffer, allocated
capacity, and — for append outputs and ``live`` outputs — a GPU counter holding the live
count. The live count is read back lazily (it lives on the GPU); ``abi.read`` answers only
the live elements, so a reader never sees stale slots past the count.
"""

from __future__ import annotations

import weakref
from functools import partial
from typing import Any, Callable

import numpy as np
import wgpu

from ..device.context import get_context
from ..device.destroyed import unusable
from ..device.mapping import map_submitted, settled, staging_bytes
from ..errors import DeviceLostError, DispatchError
from ..lowering.structs import StructType
from ..lowering.types import ValueType
from .batch import flush_current_batch, made_by_other_open_batch, unsubmitted
from .buffers import size_class
from .deferred import flush_deferred
from .loss import LOST_HINT, device_guard, lost_error
from .submission import PENDING, flush_pending, submit_encoder
from .table import Table, unpack_table
from .textures import TextureOutput, read_texture

__all__ = ["HANDOUTS", "Output", "give_back", "handed_out", "output_of", "read", "read_words", "own_pooled", "share"]


def read_words(buffer: Any, offset: int = 0, size: int | None = None, device: Any = None, dtype: Any = None, name: str | None = None) -> Any:
    """Copy ``size`` bytes of ``buffer`` back to the CPU, waiting for the GPU (not for frame paths).

    Answers a memoryview of the bytes; with ``dtype``, a numpy array of that dtype that owns
    them (copied once, straight from the mapped range). ``name``: what errors call the buffer
    (an output's name; a pooled buffer's label is its first user's). Staging buffers are pooled per device:
    ``queue.read_buffer`` makes (and destroys) a new one per call, which dominates small reads.
    """
    if not (buffer.usage & wgpu.BufferUsage.COPY_SRC):
        raise DispatchError(f"cannot read buffer {buffer.label!r}: it was created without COPY_SRC usage")
    why = unusable(buffer)  # copying from it would abort the process (device/destroyed.py)
    if why is not None:
        raise DispatchError(f"cannot read buffer {buffer.label!r}: it {why}")
    size = buffer.size - offset if size is None else size
    if size <= 0:
        return memoryview(b"") if dtype is None else np.empty(0, dtype)
    if size % 4 or offset % 4:  # a copy moves whole words (wgpu's raw ValueError before: review helper 189)
        raise DispatchError(f"cannot read buffer {buffer.label!r}: bytes {offset}+{size} are not whole 4-byte words (a read copies words)")
    ctx = get_context(device or buffer._device)
    # device_guard, inlined (this is every one-shot read's path)
    if ctx.guard.lost:
        raise DeviceLostError(LOST_HINT)
    try:
        flush_current_batch()  # a read inside abi.batch() sees every run recorded before it
        why = unsubmitted(buffer)
        if why is not None:
            raise DispatchError(f"cannot read {name or repr(buffer.label)}: the run writing it may never have been submitted ({why}); run it again")
        if made_by_other_open_batch(buffer):
            # The output of a run recorded in a batch still open on another thread: nothing of
            # it is on the GPU yet (the buffer holds an earlier user's data), and that batch is
            # not this thread's to submit. Waiting could wait forever (that thread may wait for
            # this one). A buffer such a run only appends to or reads answers what it holds now.
            raise DispatchError(
                f"cannot read {name or repr(buffer.label)} yet: it is the output of a run recorded in an abi.batch() still open on another thread or task; read it once that batch has ended"
            )
        return _read_words(buffer, offset, size, ctx, dtype)
    except Exception as exc:
        lost = lost_error(ctx, exc)
        if lost is None or lost is exc:
            raise
        raise lost from None


def _read_words(buffer: Any, offset: int, size: int, ctx: Any, dtype: Any = None) -> Any:
    dev = ctx.device
    padded = (size + 3) & ~3
    cls = staging_bytes(size_class(padded), padded, dev)
    # Pooled per device context, so a lost device drops its staging buffers with it.
    free = ctx.cache("read staging").setdefault(cls, [])
    staging = free.pop() if free else dev.create_buffer(size=cls, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST, label="read staging")
    nbytes = min(padded, buffer.size - offset)
    # A deferred run (runtime.deferred) on this device takes the copy into its own submission:
    # one submit for the run and the read. The copy is submitted before the map either way:
    # map without wgpu-py's extra submit (see device/mapping.py).
    copy = (None, None, None, (0, 0, 0), [("copy", buffer, offset, staging, 0, nbytes)])
    if PENDING[0] is not None and flush_deferred(ctx, copy):
        encoder = None
    else:
        encoder = dev.create_command_encoder()
        encoder.copy_buffer_to_buffer(buffer, offset, staging, 0, nbytes)
    mapped = submit_encoder(dev.queue, ctx.guard, encoder, "abi.read", partial(map_submitted, staging, cls))
    guard = ctx.guard
    # A destroyed device's promises never settle (device/mapping.py): wait in steps and look at
    # the loss flag between them, so a destroy on another thread ends the wait (review helper 102).
    while not settled(mapped, _READ_POLL_S, urgent=True):
        if guard.check():  # the flag, or a loss the wgpu logger reported (a reset nobody destroyed)
            raise DeviceLostError(LOST_HINT)
    # Under the device's submit lock, which a destroy() takes first: the staging buffer cannot
    # be freed between the check and reading its mapped range (wgpu-native aborts on that).
    with guard.lock:
        if guard.lost:
            raise DeviceLostError(LOST_HINT)
        mapped.sync_wait()
        try:
            if dtype is None:
                data = staging.read_mapped(0, padded, copy=True)
            else:  # one copy, into an array that owns it (the view is gone before the unmap)
                array = np.frombuffer(staging.read_mapped(0, padded, copy=False), dtype, size // np.dtype(dtype).itemsize).copy()
        finally:
            staging.unmap()
    if len(free) < 8:
        free.append(staging)
    return memoryview(data)[:size] if dtype is None else array


_READ_POLL_S = 0.05  # how often a read waiting for its map looks at the device's loss flag

_new_output = object.__new__


class Output:
    """One output binding after a run: ``buffer``, ``count``, ``capacity``, ``counter``, ``overflow``.

    ``count`` is the number of live elements: the allocated count for plain outputs, the
    counter's value (clamped to capacity) for append outputs, the dispatch's live count for
    ``live`` outputs. ``overflow`` is the attempted count when an append counter went past
    capacity (nothing was written out of bounds), else None.

    A pooled buffer goes back to the pool when its Output is garbage, unless it was handed out
    (``buffer``, ``counter``): whoever took it may still use it, so the pool never sees it again
    (wgpu frees it with its last reference). Read outputs with ``abi.read(output)`` and chain
    them as Outputs to keep them pooled.
    """

    __slots__ = (
        "_buffer",
        "capacity",
        "_counter",
        "element",
        "bits",
        "name",
        "_count",
        "_attempted",
        "_epoch",
        "_counter_kind",
        "_counter_limit",
        "_keep",
        "_pool",
        "_pooled",
        "__weakref__",
    )

    def __init__(
        self,
        buffer: Any,
        capacity: int,
        element: ValueType | StructType,
        *,
        name: str = "",
        count: int | None = None,
        counter: Any = None,
        counter_kind: str = "",
        counter_limit: int | None = None,
        bits: bool = False,
        keep: Any = None,
    ):
        self._pool: Any = None  # first: __del__ reads it (see own_pooled)
        self._pooled: tuple = ()
        self._buffer = buffer
        self._keep = keep  # what owns ``counter`` when it is shared (a live count's snapshot)
        self.capacity = capacity
        self.element = element
        self.bits = bits
        self.name = name
        self._counter = counter
        self._counter_kind = counter_kind  # "append" or "live"
        self._counter_limit = capacity if counter_limit is None else counter_limit
        self._count = count
        self._attempted: int | None = None
        self._epoch = 0  # the counter's rewrite epoch ``_count`` was read at (counter_rewritten)

    @classmethod
    def pooled(cls, buffer: Any, capacity: int, element: ValueType | StructType, name: str, bits: bool, pool: Any) -> "Output":
        """A plain output of all ``capacity`` elements in a pooled ``buffer``, given back to
        ``pool`` when it is garbage: ``__init__`` and :func:`own_pooled` for a run's common
        case, without the keyword call (half of its cost; this runs once per output per run).
        Sets every slot ``__init__`` sets."""
        out = _new_output(cls)
        out._pool = pool
        out._pooled = (buffer,)
        out._buffer = buffer
        out._keep = None
        out.capacity = capacity
        out.element = element
        out.bits = bits
        out.name = name
        out._counter = None
        out._counter_kind = ""
        out._counter_limit = capacity
        out._count = capacity
        out._attempted = None
        out._epoch = 0
        return out

    @property
    def buffer(self) -> Any:
        """The GPUBuffer holding the elements. Handing it out submits a deferred run first
        (see :mod:`engine_plugin.runtime.deferred`): raw wgpu calls on it then come after the
        run in queue order."""
        if PENDING[0] is not None:
            flush_pending()
        share(self)  # a pooled buffer is the caller's from now on
        return self._buffer

    @property
    def counter(self) -> Any:
        """The GPU counter of an append or ``live`` output (None for plain outputs); handed
        out as :attr:`buffer` is."""
        counter = self._counter
        if PENDING[0] is not None and counter is not None:
            flush_pending()
        self._hand_out_counter()
        return counter

    def _hand_out_counter(self) -> None:
        """A pooled counter (an append's, a live snapshot) is the caller's from now on."""
        counter = self._counter
        if counter is not None and (self._keep is not None or any(b is counter for b in self._pooled)):
            _escaped.add(id(counter))

    def __copy__(self) -> "Output":
        """A second Output over the same GPU buffers: they are handed out (as :attr:`buffer`
        does), so neither object gives them back to the pool; wgpu frees them with the last."""
        twin = _new_output(Output)
        for name in Output.__slots__:
            if name != "__weakref__":
                setattr(twin, name, getattr(self, name))
        twin._pool, twin._pooled = None, ()
        share(self)
        self._hand_out_counter()
        return twin

    def __deepcopy__(self, memo: dict) -> "Output":
        return self.__copy__()  # GPU buffers are not copied: a view of the same ones

    def __del__(self) -> None:
        # A pooled output gives its buffers back when it is garbage: a finaliser costs a
        # fraction of a weakref callback (a weakref, a partial and two registry entries a
        # run), and this runs once per output per run. GPU work already submitted that uses
        # the buffers runs first (queue order); an open batch parks them (BufferPool.give).
        # Handed-out buffers (``_escaped``: a set add, atomic when two threads hand out the
        # buffer and the counter at once) stay out.
        pool = getattr(self, "_pool", None)  # None too for an object __init__ never finished
        if pool is not None:
            self._pool = None
            try:
                for buf in self._pooled:
                    if _escaped and id(buf) in _escaped:  # give_back(), inline: once per output per run
                        _escaped.discard(id(buf))
                    else:
                        pool.give(buf)
            except Exception:  # interpreter shutdown: module state may be gone; nothing to return to
                pass

    def _stale(self) -> bool:
        """Whether the count read earlier predates a run that appended to the same counter
        (the Output given back through ``outputs=``): any Output over it reads it again."""
        return bool(_rewrites) and self._counter is not None and _rewrites.get(self._counter, 0) != self._epoch

    def _resolve(self) -> None:
        if self._count is not None and not self._stale():
            return
        counter = self._counter
        epoch = _rewrites.get(counter, 0) if _rewrites else 0  # before the read: a later rewrite reads again
        raw = int(np.frombuffer(read_words(counter, 0, 4, name=f"the count of output {self.name!r}"), dtype="<u4")[0])
        self._attempted = raw
        self._count = min(raw, self._counter_limit)
        self._epoch = epoch

    @property
    def count(self) -> int:
        self._resolve()
        return self._count  # type: ignore[return-value]

    @property
    def overflow(self) -> int | None:
        if self._counter_kind != "append":
            return None
        self._resolve()
        return self._attempted if self._attempted is not None and self._attempted > self.capacity else None

    @property
    def count_known(self) -> bool:
        """Whether ``count`` is known without a GPU read (plain outputs, or already read and
        not appended to since)."""
        return self._count is not None and not self._stale()

    def __repr__(self) -> str:
        count = self._count if self.count_known else "on GPU"
        return f"Output({self.name!r}, {self.element.wgsl}, count={count}, capacity={self.capacity})"


def read(x: Any, as_u32: bool = False) -> np.ndarray:
    """Read back, waiting for the GPU work it takes.

    Args:
        x: an :class:`Output` (a typed array of its live elements, (count,) or (count,
            lanes)); the buffer of a live host-allocated Output (the same: its live elements,
            as the seed's ``abi.read(run.outputs.dst.buffer)``); any other GPUBuffer (all its
            words, f32 or u32 with ``as_u32``); an ``abi.table`` (a dict of its columns by name,
            as read back from its buffer; its packed u32 words with ``as_u32``); or anything
            with a ``read_back()`` method (substrate handles).
        as_u32: read raw u32 words instead of the element type.
    """
    if isinstance(x, Output):
        count = x.count
        vt = x.element
        dtype = "<u4" if as_u32 else vt.numpy_dtype
        if count:
            arr = read_words(x._buffer, 0, count * vt.bytes, dtype=dtype, name=f"output {x.name!r}")
        elif get_context(x._buffer._device).guard.check():  # as every read on a lost device (review helpers 130, 132)
            raise DeviceLostError(LOST_HINT)
        else:
            arr = np.empty(0, dtype)
        if isinstance(vt, StructType) and not as_u32:
            return arr  # a structured array, WGSL's offsets
        return arr.reshape(count, vt.lanes) if vt.lanes > 1 else arr
    if isinstance(x, wgpu.GPUTexture):
        w, h, d = x.size
        dim = "3d" if str(x.dimension) == "3d" else "2d" if d == 1 else "2d_array"
        x = TextureOutput(x, str(x.format), (w, h, d), dim, x.label or "")
    if isinstance(x, TextureOutput):
        ctx = get_context(x.texture._device)
        with device_guard(ctx):
            flush_current_batch()
            return read_texture(ctx, x, read_words)
    if hasattr(x, "read_back"):
        return x.read_back(as_u32=as_u32)
    if isinstance(x, Table):  # its columns by name, as abi.table took them (as_u32: the packed words)
        words = read_words(x.buffer, 0, x.words.nbytes, dtype="<u4")
        return words if as_u32 else unpack_table(words, x)  # type: ignore[return-value]
    if isinstance(x, wgpu.GPUBuffer):
        owner = output_of(x)
        if owner is not None:
            return read(owner, as_u32)
        raw = read_words(x)
        return np.frombuffer(raw, dtype="<u4" if as_u32 else "<f4").copy()
    raise DispatchError(f"abi.read takes a GPUBuffer, an Output, a Table or a substrate handle, not {type(x).__name__}")


_release_refs: dict[int, Any] = {}
# What an Output that handed its host-allocated buffer out (``Output.buffer``) knows of it,
# riding on that buffer for as long as the buffer lives: abi.read(output.buffer) answers that
# output's live elements, also once the Output itself is gone (the seed's
# ``abi.read(run.outputs.dst.buffer)``, written as one expression, drops the Run first). The
# record is a copy without the buffer: the buffer holding its Output would be a reference cycle,
# freed only by a full garbage collection (GPU memory piles up meanwhile).
_OWNER = "_engine_plugin_output"


def _record_of(output: Output) -> Output:
    """``output`` without its buffer (its count, counter and element type), to ride on it."""
    record = _new_output(Output)
    for name in Output.__slots__:
        if name != "__weakref__":
            setattr(record, name, getattr(output, name))
    record._pool, record._pooled, record._buffer = None, (), None
    output._hand_out_counter()  # the record reads the counter: it must not go back to the pool
    return record


HANDOUTS = [0]  # bumped whenever a buffer is handed out: caches keyed by buffers prune then


def handed_out(buffer: Any) -> bool:
    """Whether an Output handed ``buffer`` out (it never goes back to the pool)."""
    return getattr(buffer, _OWNER, None) is not None


def output_of(buffer: Any) -> Output | None:
    """An Output over ``buffer`` as the Output that handed it out knew it, if one did."""
    record = getattr(buffer, _OWNER, None)
    if not isinstance(record, Output):
        return None
    view = _new_output(Output)
    for name in Output.__slots__:
        if name != "__weakref__":
            setattr(view, name, getattr(record, name))
    view._buffer = buffer
    return view


def live_bytes(buffer: Any) -> int | None:
    """The bytes of ``buffer`` that hold the live elements of the Output that handed it out
    (None if none did). The count is resolved on the record riding on the buffer, so it is
    read from the GPU once, and again only after a run appends to its counter."""
    record = getattr(buffer, _OWNER, None)
    if not isinstance(record, Output):
        return None
    if record._counter is not None:
        record._resolve()
    return int(record._count) * record.element.bytes  # type: ignore[arg-type]


def on_release(output: Any, callback: Callable[[], None]) -> None:
    """Call ``callback`` once ``output`` is garbage (its pooled buffer may then be reused).

    A bare weakref with a callback (kept in a dict until it fires) costs a fraction of
    ``weakref.finalize``.
    """

    def fire(ref: Any) -> None:
        _release_refs.pop(id(ref), None)
        callback()

    ref = weakref.ref(output, fire)
    _release_refs[id(ref)] = ref


# Counters a run was given to append to (an Output passed back through ``outputs=``), with how
# many times: an Output whose count was read at an older epoch reads it again. Keyed weakly by
# the counter buffer, so a freed counter leaves no entry (and no id reuse can alias one).
_rewrites: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()


def counter_rewritten(counter: Any) -> None:
    """A run appends to ``counter`` after earlier runs did: counts read before are stale."""
    _rewrites[counter] = _rewrites.get(counter, 0) + 1


def own_pooled(output: Output, pool: Any, buffers: tuple) -> None:
    """``buffers`` (the output's buffer, an append's counter) go back to ``pool`` when
    ``output`` is garbage, unless handed out first (:func:`share`, :attr:`Output.counter`)."""
    output._pooled = buffers
    output._pool = pool


# id() of pooled buffers handed out (``Output.buffer``, ``Output.counter``, a copy, an inout
# binding): their release gives them up instead of pooling them. (Only pooled buffers are
# entered, and their release removes them: the id is the buffer's all that time, as its
# Output or live count holder keeps it.)
_escaped: set[int] = set()


def share(output: Output) -> None:
    """``output``'s buffer is reachable elsewhere from now on (handed out by
    :attr:`Output.buffer`, or bound by another Output as a read_write binding the caller
    supplied it to). A host-allocated one leaves the pool when ``output`` goes, and is
    remembered as ``output``'s until then (:func:`output_of`). An Output over a host-allocated
    buffer another Output handed out (handed back through ``outputs=``) takes that over: the
    buffer's reads answer the newest one's live elements, also once the first is gone."""
    buffer = output._buffer
    if output._pool is None:
        if output_of(buffer) is None:
            return  # the caller's own buffer: all its words are the caller's
    elif any(b is buffer for b in output._pooled):
        _escaped.add(id(buffer))  # given up, not pooled, when ``output`` goes (give_back)
    try:
        setattr(buffer, _OWNER, _record_of(output))
    except AttributeError:  # a buffer class with slots: its reads answer whole words
        pass
    HANDOUTS[0] += 1


def give_back(pool: Any, buffer: Any) -> None:
    """Return a pooled ``buffer`` whose holder is garbage, unless it was handed out: whoever
    took it may still read or write it (wgpu frees it with its last reference)."""
    if _escaped and id(buffer) in _escaped:
        _escaped.discard(id(buffer))
        return
    pool.give(buffer)
