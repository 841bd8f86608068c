"""Bounded asynchronous readback: budgets, the PENDING -> READY | FAILED state machine, and the
waiter thread that turns wgpu's map promises into completions the frame thread can poll.

Why a thread: wgpu-py 0.32 resolves ``map_async`` promises from its own per-device poll
thread, but offers no public non-blocking "is it done?" check, and ``promise.then()`` needs a
running event loop on the thread that created the promise. A game's frame loop has neither,
and must never block. So one small daemon thread per backend waits on the promises in
submission order and pushes ``(request, error)`` onto a queue; ``poll()`` on the frame thread
drains the queue and does everything else (``read_mapped``, the callback, ``unmap``,
``destroy``) itself, so every wgpu call but the wait stays on the owning thread.

Measured on lavapipe (2 cores, wgpu 0.32), poll once a frame with ``time.sleep(0)`` between:
4 KiB readback: ``readback()`` 0.2 ms median, delivered 0.1 ms median after it returns (p99
1.6 ms), ``poll()`` 7 us median (0.12 ms max). 64 MiB: ``readback()`` 7.5 ms (lavapipe copies
inside ``submit``), delivered 0.3 ms after; the delivering ``poll()`` costs up to ~5 ms, the
unmap and destroy of 64 MiB. A frame loop that never releases the GIL delays delivery by up
to the interpreter's switch interval (5 ms).

The terminal state of a request is decided exactly once, under a lock: ``poll()`` decides it
READY (or FAILED, for a map error) from the waiter's report, while ``notify_device_error`` or
a detected loss fails every PENDING request from any thread. Whichever takes the lock first
wins; a request that lost the race to a device error reports FAILED even if its bytes arrived.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from ..device.mapping import settled
from .backend import ReadbackStatus

__all__ = ["PromiseWaiter", "ReadbackRequest", "ReadbackTracker", "settled", "settled_now"]

_request_ids = itertools.count(1)


class ReadbackRequest:
    """One accepted readback: its staging buffer, promise, budget share and state."""

    __slots__ = (
        "id",
        "handle",
        "desc",
        "callback",
        "nbytes",
        "staging",
        "promise",
        "status",
        "message",
        "delivered",
        "released",
        "cancelled",
        "settled",
        "anchor",
        "baseline",
        "started",
        "claimed",
        "watched",
        "seen",
        "in_callback",
    )

    def __init__(self, handle: Any, desc: Any, callback: Callable, nbytes: int, staging: Any, promise: Any):
        self.id = next(_request_ids)
        self.handle = handle
        self.desc = desc
        self.callback = callback
        self.nbytes = nbytes
        self.staging = staging
        self.promise = promise
        self.status = ReadbackStatus.PENDING
        self.message = ""
        self.delivered = False
        self.released = False
        self.cancelled = False  # the waiter skips it: the owner released its staging already
        self.settled = False  # the waiter saw its map settle: the copy is over
        self.anchor: Any = None  # numpy array over the mapped bytes while delivering/quarantined
        self.baseline = 0
        self.started = time.perf_counter()
        self.claimed = False  # the waiter or the frame thread took its settled promise (once)
        self.watched = False  # handed to the waiter thread (only once polls found it still pending)
        self.seen = 0  # polls that found its map still pending
        self.in_callback = False  # its callback is running: its delivery releases it after

    def __repr__(self) -> str:
        return f"<ReadbackRequest {self.id} {self.status.value} {self.nbytes} B of {self.handle}>"


class ReadbackTracker:
    """In-flight requests, their count and byte budgets, and the once-only terminal decision."""

    def __init__(self, max_count: int, max_bytes: int):
        self.max_count = max_count
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._inflight: dict[int, ReadbackRequest] = {}
        self._bytes = 0

    @property
    def count(self) -> int:
        return len(self._inflight)

    @property
    def bytes(self) -> int:
        return self._bytes

    def requests(self) -> list[ReadbackRequest]:
        with self._lock:
            return list(self._inflight.values())

    def refusal(self, nbytes: int) -> str | None:
        """Why a request of ``nbytes`` would exceed a budget now, or None when it fits."""
        if len(self._inflight) + 1 > self.max_count:
            return f"{len(self._inflight)} readbacks in flight already (max_inflight_readbacks={self.max_count})"
        if self._bytes + nbytes > self.max_bytes:
            return f"{nbytes} B more would exceed max_inflight_readback_bytes={self.max_bytes} ({self._bytes} B in flight)"
        return None

    def add(self, req: ReadbackRequest) -> None:
        with self._lock:
            self._inflight[req.id] = req
            self._bytes += req.nbytes

    def decide(self, req: ReadbackRequest, status: ReadbackStatus, message: str = "") -> bool:
        """Move a PENDING request to ``status``; False when it was decided already."""
        with self._lock:
            if req.status is not ReadbackStatus.PENDING:
                return False
            req.status = status
            req.message = message
            return True

    def fail_all(self, message: str) -> int:
        """Decide every PENDING request FAILED (any thread); answers how many it decided."""
        with self._lock:
            pending = [r for r in self._inflight.values() if r.status is ReadbackStatus.PENDING]
            for r in pending:
                r.status = ReadbackStatus.FAILED
                r.message = message
            return len(pending)

    def finish(self, req: ReadbackRequest) -> None:
        """Return the request's budget share (its staging is gone)."""
        with self._lock:
            if self._inflight.pop(req.id, None) is not None:
                self._bytes -= req.nbytes

    def oldest_pending_age(self) -> float:
        now = time.perf_counter()
        with self._lock:
            ages = [now - r.started for r in self._inflight.values() if r.status is ReadbackStatus.PENDING]
        return max(ages, default=0.0)


def settled_now(promise: Any) -> bool:
    """Whether ``promise`` has received its result, without waiting (False for a promise of
    unknown make: the waiter thread then decides it)."""
    event = getattr(promise, "_thread_event", None)
    return isinstance(event, threading.Event) and event.is_set()


class PromiseWaiter:
    """One daemon thread per backend: waits on map promises, queues ``(request, error)``."""

    def __init__(self, slice_s: float = 0.05):
        self.slice_s = slice_s
        self.done: queue.SimpleQueue[tuple[ReadbackRequest, BaseException | None]] = queue.SimpleQueue()
        self._inbox: queue.SimpleQueue[ReadbackRequest | None] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._claims = threading.Lock()

    def claim(self, req: ReadbackRequest) -> bool:
        """Take ``req``'s settled promise for resolving: True for exactly one caller, the
        waiter thread or the frame thread (:meth:`ReadbackRing.collect` checks settled
        promises itself, so a result is delivered the frame it lands, not a GIL switch later)."""
        with self._claims:
            if req.claimed:
                return False
            req.claimed = True
            return True

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread (once); it waits for requests handed to :meth:`watch`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="engine_plugin-readback-waiter", daemon=True)
            self._thread.start()

    def watch(self, req: ReadbackRequest) -> None:
        self.start()
        req.watched = True
        self._inbox.put(req)

    def stop(self) -> None:
        """Stop the thread (it returns within one slice); pending waits are abandoned."""
        self._stop.set()
        self._inbox.put(None)
        if self._thread is not None:
            self._thread.join(timeout=max(1.0, 4 * self.slice_s))

    def _run(self) -> None:
        while not self._stop.is_set():
            req = self._inbox.get()
            if req is None:
                return
            promise = req.promise  # the owner may drop its reference once it cancels
            while not req.cancelled and not self._stop.is_set():
                if settled(promise, self.slice_s):
                    break
            if self._stop.is_set():
                return
            if req.cancelled or not self.claim(req):
                continue  # released meanwhile, or the frame thread took it
            try:
                # Settled already: this returns at once. Its handler only flips the buffer's
                # Python-side map state; the frame thread touches the buffer after our put().
                promise.sync_wait()
                error: BaseException | None = None
            except Exception as exc:  # a rejected map: the request fails, the thread lives on
                error = exc
            self.done.put((req, error))
