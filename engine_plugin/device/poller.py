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
drain, any ``promise.sync_wait()``) on that device: that is when waiting in the driver answers
soonest. A thread announces such a wait with :func:`urgent_wait`; a map's promise carries its
device's poller (``map_async`` is wrapped to say which) and wgpu-py's ``sync_wait`` is wrapped
to announce itself, so a raw loop or wgpu's own ``queue.read_buffer`` wait as fast as before.
The engine's readback waiter thread does not announce its waits: it can wait an interval
longer, the frame thread cannot wait for the GPU. A wait on one device never makes another
device's poller wait in its driver.

Before it announces itself, a waiting thread polls the device itself, without waiting in the
driver, for :data:`SPIN_S` (:func:`spin_until`): a short wait (a one-shot ``abi.read``) then ends
in the waiting thread, without waking the poll thread and being woken back (about 100 µs of a
one-shot's 450 µs on lavapipe's host).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal.signal/getsignal wrap these in enums (µs a spin)
import contextlib
import logging
import signal
import threading
import time
from typing import Any, Iterator

from wgpu.backends.wgpu_native import _api
from wgpu.backends.wgpu_native._poller import PollThread

__all__ = ["POLL_INTERVAL_S", "SPIN_S", "FramePoller", "install", "spin_until", "urgent_wait"]

log = logging.getLogger("engine_plugin.gpu")

POLL_INTERVAL_S = 0.0005  # a readback lands at most this much later than the GPU finished it
# A thread about to block on a result first polls the device itself, without waiting in the
# driver, for this long: a short wait (a one-shot read) then ends in the thread that waits,
# without the two thread handoffs (wake the poller; the poller wakes the waiter) that cost
# 40-60 µs each on lavapipe's host. Longer waits go to the poll thread as before.
SPIN_S = 0.0003
# Signals whose Python handler a spin on the main thread holds back (see FramePoller.spin_until).
_HELD_SIGNALS = tuple(int(getattr(signal, name)) for name in ("SIGINT", "SIGTERM", "SIGALRM") if hasattr(signal, name))
_ERROR_BACKOFF_S = 0.01  # after a poll raised: no tight loop of failures
_install_lock = threading.Lock()  # two contexts made for one device at once install one poller


class FramePoller(PollThread):
    """wgpu-py's PollThread with the run loop described in the module docstring."""

    def __init__(self, poll_func: Any) -> None:
        super().__init__(poll_func)
        self.name = "engine_plugin device poller"
        self.wake = threading.Event()  # set by an urgent waiter, and by stop()
        self.waiters = 0  # threads blocked on a result of this device now (under _lock)
        self._lock = threading.Lock()
        self._last_error = ""

    def enter_wait(self) -> None:
        with self._lock:
            self.waiters += 1
        self.wake.set()

    def leave_wait(self) -> None:
        with self._lock:
            self.waiters -= 1

    def stop(self) -> None:
        self.wake.set()
        super().stop()

    def _poll(self, block: bool, backoff: bool = True) -> bool:
        """One poll; answers whether it returned. A poll that raises (a lost device, a wgpu
        error) is logged once and the thread lives on: a dead poller leaves every waiter of this
        device waiting for good."""
        try:
            self._poll_func(block)
            return True
        except Exception as exc:
            said = f"{type(exc).__name__}: {exc}"
            if said != self._last_error:  # each new failure once, not one per poll
                self._last_error = said
                log.warning("engine_plugin device poller: a device poll failed (%s); polling on", said)
            if backoff:
                time.sleep(_ERROR_BACKOFF_S)
            return False

    def spin_until(self, event: threading.Event, limit: float) -> bool:
        """Poll the device from the calling thread, never waiting in the driver, until
        ``event`` is set or ``limit`` seconds have passed; answers whether it is set. A map's
        callback runs in the thread whose poll finds the map done: here, the waiting one.

        On the main thread a Python signal handler (Ctrl-C's KeyboardInterrupt) runs wherever
        that thread is, inside a map callback too: cffi swallows the exception there and, when
        it lands before the promise is given its result, the map never settles and the read
        waits for good (review helper 122). So the main thread's spin holds those handlers back
        and runs them, in order, once it is over."""
        held: dict[int, Any] = {}
        noted: list[tuple[int, Any]] = []
        if threading.current_thread() is threading.main_thread():
            note = noted.append
            for number in _HELD_SIGNALS:
                handler = _signal.getsignal(number)
                if callable(handler):
                    held[number] = handler
                    _signal.signal(number, lambda signum, frame: note((signum, frame)))
        try:
            clock = time.perf_counter
            end = clock() + limit
            while not self._shutdown and self._poll(False, backoff=False):
                if event.is_set() or clock() >= end:
                    break
            return event.is_set()
        finally:
            for number, handler in held.items():
                _signal.signal(number, handler)
            for signum, frame in noted:
                held[signum](signum, frame)

    def run(self) -> None:
        event, tokens, wake = self._event, self._token_ids, self.wake
        while not self._shutdown:
            event.wait()
            event.clear()
            self._poll(False)
            while tokens and not self._shutdown:
                if self.waiters:
                    self._poll(True)
                else:
                    wake.wait(POLL_INTERVAL_S)
                    wake.clear()
                    self._poll(False)


def spin_until(event: threading.Event, poller: Any, limit: float | None = None) -> bool:
    """Wait up to ``limit`` seconds (default :data:`SPIN_S`) for ``event`` by polling
    ``poller``'s device in this thread (:meth:`FramePoller.spin_until`); answers whether it is
    set. Anything but a :class:`FramePoller` has nothing to poll here: answers at once."""
    if event.is_set():
        return True
    limit = SPIN_S if limit is None else limit
    if not isinstance(poller, FramePoller) or limit <= 0:
        return False
    return poller.spin_until(event, limit)


@contextlib.contextmanager
def urgent_wait(poller: Any) -> Iterator[None]:
    """Mark the calling thread as blocked on a result of ``poller``'s device for the ``with``
    block (anything but a :class:`FramePoller`: nothing to mark): that poller waits inside the
    driver meanwhile, which answers soonest."""
    if not isinstance(poller, FramePoller):
        yield
        return
    poller.enter_wait()
    try:
        yield
    finally:
        poller.leave_wait()


def promise_poller(promise: Any) -> Any:
    """The poller of the device a map's promise belongs to (None: not a map of ours to hurry)."""
    return getattr(promise, "_engine_plugin_poller", None)


def _wrap_wgpu() -> None:
    """Once per process: a map's promise names its device's poller, and ``sync_wait`` on such a
    promise marks an urgent wait on that device."""
    buffer_class, promise_class = _api.GPUBuffer, _api.GPUPromise
    if getattr(promise_class._sync_wait, "_engine_plugin", False):
        return
    plain_map, plain_wait = buffer_class.map_async, promise_class._sync_wait

    def map_async(self: Any, *args: Any, **kwargs: Any) -> Any:
        promise = plain_map(self, *args, **kwargs)
        poller = getattr(self._device, "_poller", None)
        if isinstance(poller, FramePoller):
            promise._engine_plugin_poller = poller
        return promise

    def _sync_wait(self: Any) -> None:
        event = getattr(self, "_thread_event", None)
        if event is not None and event.is_set():
            return  # settled already: nothing to hurry (and no driver wait to start)
        poller = promise_poller(self)
        if event is not None and spin_until(event, poller):
            return
        with urgent_wait(poller):
            plain_wait(self)

    map_async.__doc__ = plain_map.__doc__
    _sync_wait._engine_plugin = True  # type: ignore[attr-defined]
    buffer_class.map_async = map_async
    promise_class._sync_wait = _sync_wait


def install(device: Any, fresh: bool = False) -> bool:
    """Give ``device`` a :class:`FramePoller` in place of wgpu-py's poll thread; answers whether
    it has one now.

    ``fresh``: the device was just made here, so no map can be pending: wgpu's thread is
    stopped. A device handed in by its owner may have maps in flight on other threads, whose
    tokens are wgpu's thread's (a stop drops them, and their maps would never settle, review
    helper 119): that thread stays for them, made never to wait in the driver, and ends once
    they are done; new maps take the new poller's tokens.
    """
    with _install_lock:
        return _install(device, fresh)


def _install(device: Any, fresh: bool) -> bool:
    _wrap_wgpu()
    old = getattr(device, "_poller", None)
    if isinstance(old, FramePoller):
        return True
    if not isinstance(old, PollThread):
        return False
    real = old._poll_func
    poller = FramePoller(real)
    if not fresh:
        # A map_async that fetched the old thread just before the swap takes a new token.
        old.get_token = poller.get_token

        def without_driver_waits(_block: bool) -> None:
            real(False)
            if old._token_ids:
                time.sleep(POLL_INTERVAL_S)
            else:
                old._shutdown = True  # its maps in flight are done: the thread ends (helper 121)

        old._poll_func = without_driver_waits
    poller.start()
    device._poller = poller
    if fresh:
        old.stop()
    else:
        old._event.set()  # one more turn: it ends at once when nothing of its is in flight
    return True
