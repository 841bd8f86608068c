"""A device poll thread that never holds the device while the GPU works, unless a thread waits.

wgpu-py 0.32 resolves map promises in a per-device thread (``PollThread``) which, while any map
is pending, loops on ``wgpuDevicePoll(wait=True)``: that call returns only once the GPU has
finished everything submitted, and holds the device meanwhile. On the H200 the engine's next
``map_async`` (and any submit) on the frame thread then waited inside wgpu-native for the whole
of the GPU's work: with 38 ms of work a frame, every ``frame()`` took 35 ms and pacing never
deferred, because each frame had waited for the last (``tools/probes/pacing_probe.py``).
lavapipe hides it: its submits wait for each other anyway.

:class:`FramePoller` polls without waiting, every :data:`POLL_INTERVAL_S`, while maps are
pending, and waits inside the driver only while some thread is blocked on a result (a read, a
drain, any ``promise.sync_wait()``): that is when waiting in the driver answers soonest. A
thread announces such a wait with :func:`urgent_wait`; wgpu-py's ``sync_wait`` is wrapped to
announce itself (:func:`install`), so a raw loop or wgpu's own ``queue.read_buffer`` wait as
fast as before. The engine's readback waiter thread does not announce its waits: it can wait
an interval longer, the frame thread cannot wait for the GPU.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any, Iterator

from wgpu.backends.wgpu_native import _api
from wgpu.backends.wgpu_native._poller import PollThread

__all__ = ["POLL_INTERVAL_S", "FramePoller", "install", "urgent_wait"]

POLL_INTERVAL_S = 0.0005  # a readback lands at most this much later than the GPU finished it

_waiters = [0]  # threads blocked on a result now (under _lock)
_lock = threading.Lock()
_pollers: "weakref.WeakSet[FramePoller]" = weakref.WeakSet()


class FramePoller(PollThread):
    """wgpu-py's PollThread with the run loop described in the module docstring."""

    def __init__(self, poll_func: Any) -> None:
        super().__init__(poll_func)
        self.name = "engine_plugin device poller"
        self.wake = threading.Event()  # set by an urgent waiter, and by stop()
        self.blocking_polls = 0  # waits inside the driver (tests read these)
        self.quick_polls = 0

    def stop(self) -> None:
        self.wake.set()
        super().stop()

    def run(self) -> None:
        event, tokens, wake = self._event, self._token_ids, self.wake
        while not self._shutdown:
            event.wait()
            event.clear()
            self._poll_func(False)
            self.quick_polls += 1
            while tokens and not self._shutdown:
                if _waiters[0]:
                    self.blocking_polls += 1
                    self._poll_func(True)
                else:
                    wake.wait(POLL_INTERVAL_S)
                    wake.clear()
                    self.quick_polls += 1
                    self._poll_func(False)


@contextlib.contextmanager
def urgent_wait() -> Iterator[None]:
    """Mark the calling thread as blocked on a GPU result for the ``with`` block: the device
    pollers wait inside the driver meanwhile, which answers soonest."""
    with _lock:
        _waiters[0] += 1
        first = _waiters[0] == 1
    try:
        if first:
            for poller in list(_pollers):
                poller.wake.set()
        yield
    finally:
        with _lock:
            _waiters[0] -= 1


def _wrap_sync_wait() -> None:
    promise_class = _api.GPUPromise
    if getattr(promise_class._sync_wait, "_engine_plugin", False):
        return
    plain = promise_class._sync_wait

    def _sync_wait(self: Any) -> None:
        event = getattr(self, "_thread_event", None)
        if event is not None and event.is_set():
            return  # settled already: nothing to hurry (and no driver wait to start)
        with urgent_wait():
            plain(self)

    _sync_wait._engine_plugin = True  # type: ignore[attr-defined]
    promise_class._sync_wait = _sync_wait


def install(device: Any) -> bool:
    """Give ``device`` a :class:`FramePoller` in place of wgpu-py's poll thread (once; a device
    with maps pending keeps its own, which would otherwise lose their wake-ups). Answers
    whether the device has one now."""
    _wrap_sync_wait()
    old = getattr(device, "_poller", None)
    if isinstance(old, FramePoller):
        return True
    if not isinstance(old, PollThread) or old._token_ids:
        return False
    poller = FramePoller(old._poll_func)
    poller.start()
    device._poller = poller
    _pollers.add(poller)
    old.stop()
    return True
