"""Buffer pool and host-side array preparation (dtype, shape, cast by value).

Outputs come from a per-device pool keyed by (size class, usage): a game that runs the same
kernel every frame allocates nothing after the first frames. Size classes step by a quarter
power of two so a dispatch whose ``n`` wobbles still hits the pool, wasting at most 25%.
"""

from __future__ import annotations

import threading
from collections import defaultdict, deque
from typing import Any

import wgpu

from ..arrays import dtype_kind, prepare_array  # re-exported: runtime modules take them from here
from ..device.context import DeviceContext
from .batch import FLUSH_EPOCH, OPEN_BATCHES, UNSUBMITTED, VOIDED, flush_epoch, held_by_none, held_by_open_batches, open_batches

__all__ = ["BufferPool", "size_class", "STORAGE_USAGE", "prepare_array", "dtype_kind", "pool_for"]

STORAGE_USAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
_MIN_BYTES = 256


def size_class(nbytes: int) -> int:
    """The pooled size for ``nbytes``: at least 256, then steps of a quarter power of two."""
    if nbytes <= _MIN_BYTES:
        return _MIN_BYTES
    top = 1 << (nbytes - 1).bit_length()  # next power of two
    step = top // 8  # quarters of the lower half: top/2 + k*top/8
    return min(top, ((nbytes + step - 1) // step) * step)


class BufferPool:
    """Free lists of storage buffers per size class on one device; stats for tests and benches."""

    def __init__(self, ctx: DeviceContext):
        self.ctx = ctx
        self._free: dict[tuple[int, int], list[Any]] = defaultdict(list)
        self._lock = threading.Lock()
        # Buffers come back from weakref callbacks, which the garbage collector may run inside
        # take() on this very thread: they land in a lock-free deque that take() drains.
        self._returned: deque = deque()
        self._parked: list = []  # returned, but still held by an open batch
        self._parked_epoch = -1
        self._drained_epoch = -1  # the flush epoch at the last drain
        self.created = 0
        self.reused = 0

    def take(self, nbytes: int, usage: int = STORAGE_USAGE, label: str = "engine_plugin") -> Any:
        return self.take_class(size_class(nbytes), usage, label)

    def take_class(self, size: int, usage: int = STORAGE_USAGE, label: str = "engine_plugin") -> Any:
        """A buffer of exactly ``size`` bytes, a :func:`size_class` (a run's repeat path
        computes the class once)."""
        if (not self._returned and not self._parked) or (self._drained_epoch == FLUSH_EPOCH[0] and OPEN_BATCHES):
            # Nothing to sort first (give() filed every return), or inside an open batch whose
            # returns were sorted since its last submission (what comes back now is mostly
            # held by it: see below): take the last buffer freed without the lock; a list pop
            # is atomic, and a list another thread emptied meanwhile falls through to the
            # locked path.
            buffer = _pop_live(self._free.get((size, usage)))
            if buffer is not None:
                self.reused += 1  # a statistic: a lost increment under threads is harmless
                return buffer
        with self._lock:
            if self._returned and not self._parked and not open_batches():
                self._free_returned()  # nothing can be held by a batch: the common case, run after run
            free = self._free.get((size, usage))
            # Inside an open batch what comes back is mostly held by it (it would be parked): a
            # free buffer at hand is taken without sorting the returned ones, which would cost
            # every run of a batch a held-check; they are sorted once per submitted slice. Outside
            # batches draining is cheap and hands back the buffer the last run released (so
            # the run's bind group is the last one).
            if (self._returned or self._parked) and (not (free and open_batches()) or flush_epoch() != self._drained_epoch):
                self._drain()
                free = self._free.get((size, usage))
            buffer = _pop_live(free)
            if buffer is not None:
                self.reused += 1
                return buffer
            self.created += 1
        return self.ctx.device.create_buffer(size=size, usage=usage, label=label)

    def give(self, buffer: Any, usage: int = STORAGE_USAGE) -> None:
        """Return a buffer. GPU work already submitted that uses it still runs first (queue
        order); work recorded in an open batch keeps it parked until that batch is submitted."""
        if self.ctx.guard.lost:
            return
        if buffer._internal is None:
            # Released by wgpu already: a refused run's Output and its buffer died in one
            # garbage cycle, the buffer's finaliser first (pooled, it would break a later run).
            return
        if not OPEN_BATCHES and not self._parked:
            # Nothing can hold it (no batch is open, none parked): straight to its free list,
            # without the lock (a list append is atomic; this may run inside take() on this
            # thread, from the garbage collector). Last in, first out: the next run of the
            # same kernel gets this very buffer, and with it its cached bind group.
            self._free[(buffer.size, usage)].append(buffer)
        else:
            self._returned.append((buffer, usage))

    def _drain(self) -> None:
        """Move returned buffers to the free lists, except those a run recorded in an open
        ``abi.batch()`` still touches: they stay parked until that batch is submitted."""
        # Parked buffers can only come free when a batch submits: re-check them only then.
        epoch = self._drained_epoch = flush_epoch()
        if epoch != self._parked_epoch:
            candidates, self._parked, self._parked_epoch = self._parked, [], epoch
        else:
            candidates = []
        returned = self._returned
        held = held_by_open_batches()  # once for all: a check per buffer cost a batch ~0.5 µs a run
        if not candidates and held is held_by_none:
            self._free_returned()  # no open batch holds anything (one just opened): all are free
            return
        while returned:
            candidates.append(returned.popleft())
        for buffer, usage in candidates:
            if held(buffer):
                self._parked.append((buffer, usage))
            else:
                self._free[(buffer.size, usage)].append(buffer)

    def _free_returned(self) -> None:
        """Move every returned buffer straight to the free lists (nothing can hold them: no
        batch is open and none is parked)."""
        returned, free = self._returned, self._free
        while returned:
            buffer, usage = returned.popleft()
            free[(buffer.size, usage)].append(buffer)

    @property
    def free_count(self) -> int:
        # list(): give() may add a free list from another thread (a C-level copy is atomic)
        return sum(len(v) for v in list(self._free.values())) + len(self._returned) + len(self._parked)


def _pop_live(free: list | None) -> Any:
    """The last buffer of ``free`` wgpu has not released, or None (a list pop is atomic: a
    list another thread emptied meanwhile ends it). A buffer pooled by its Output's finaliser
    and then released by its own in the same garbage cycle (the collector runs them in its
    own order) is dropped: a run binding it would abort the process."""
    while free:
        try:
            buffer = free.pop()
        except IndexError:
            return None
        if buffer._internal is not None:
            if VOIDED[0]:
                UNSUBMITTED.pop(buffer, None)  # a new run's output from now on (cleared first)
            return buffer
    return None


def pool_for(ctx: DeviceContext) -> BufferPool:
    cache = ctx.cache("runtime")
    pool = cache.get("pool")
    if pool is None:
        pool = cache["pool"] = BufferPool(ctx)
    return pool
