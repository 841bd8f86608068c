"""Detecting device loss on wgpu-py 0.32, which has no ``device.lost`` and no error scopes.

Two signals, both cheap:

* **Raised errors.** After loss, ``write_buffer``, ``create_*`` and ``encoder.finish()`` raise
  ``GPUValidationError ... Parent device is lost``; ``map_async`` raises AttributeError (its
  poll thread is gone). :func:`classify` sorts an exception from a wgpu call into loss,
  another device error, or not-a-device-error (a bug, re-raised).
* **The "wgpu" logger.** wgpu-native's device-lost callback only *logs* ``DEVICE LOST!``,
  on whatever thread noticed, without saying which device. :class:`LossReports` counts such
  records; each backend, on its own thread, sees the count move and probes *its* device with
  one 4-byte ``write_buffer`` (which raises on a lost device and is harmless otherwise).

Never submit on a lost device: ``queue.submit`` of a command buffer finished before the loss
(or of an empty list) aborts the process. Backends therefore finish their encoder right
before submitting, so ``finish()`` raises first.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

__all__ = ["DeviceFault", "FaultState", "LossReports", "classify", "is_poll_thread_stopped", "loss_reports"]

_LOSS_MARKERS = ("device is lost", "device lost", "device was lost", "devicelost")


class DeviceFault:
    """How :func:`classify` sorted an exception."""

    LOST = "lost"
    ERROR = "error"
    NONE = "none"


def is_poll_thread_stopped(exc: BaseException) -> bool:
    """Whether ``exc`` is wgpu-py's ``RuntimeError('Cannot use PollThread because it has
    stopped.')``: ``map_async`` on a device whose poll thread ended with the device."""
    return isinstance(exc, RuntimeError) and "PollThread" in str(exc)


def classify(exc: BaseException) -> str:
    """``LOST`` for a lost-device error, ``ERROR`` for another wgpu error, else ``NONE``."""
    from ..errors import DeviceLostError

    if isinstance(exc, DeviceLostError) or is_poll_thread_stopped(exc):
        return DeviceFault.LOST
    try:
        import wgpu
    except ImportError:  # pragma: no cover - wgpu is a dependency
        return DeviceFault.NONE
    text = (getattr(exc, "message", None) or str(exc)).lower()
    if isinstance(exc, wgpu.GPUError):
        return DeviceFault.LOST if any(m in text for m in _LOSS_MARKERS) else DeviceFault.ERROR
    return DeviceFault.NONE


class LossReports(logging.Handler):
    """Counts "device lost" records of the ``wgpu`` logger (any thread, any device).

    Attached to the logger while at least one backend holds it; backends compare
    :attr:`count` with the value they last saw.
    """

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self._count = 0
        self._users = 0
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        return self._count

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage().lower()
        except Exception:  # a malformed record must not break wgpu's own logging
            return
        if any(m in text for m in _LOSS_MARKERS):
            with self._lock:
                self._count += 1

    def acquire_user(self) -> int:
        """Attach (first user) and answer the current count."""
        with self._lock:
            if self._users == 0:
                logging.getLogger("wgpu").addHandler(self)
            self._users += 1
            return self._count

    def release_user(self) -> None:
        with self._lock:
            self._users = max(0, self._users - 1)
            if self._users == 0:
                logging.getLogger("wgpu").removeHandler(self)


loss_reports = LossReports()


class FaultState:
    """A backend's fail-closed switch: the first fault wins, loss is sticky; any thread may set it.

    Holds the 4-byte probe buffer used to confirm that *this* device is the lost one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.message: str | None = None
        self.lost = False
        self.queue: Any = None
        self.probe: Any = None
        self.last_probe = 0.0
        self.seen_reports = loss_reports.count

    def set(self, message: str, *, lost: bool) -> bool:
        """Record a fault; answers whether it was the first (the one the backend reports)."""
        with self._lock:
            first = self.message is None
            if first:
                self.message = message
            self.lost = self.lost or lost
            return first

    def probe_lost(self) -> bool:
        """Whether the probed device is lost: one 4-byte write, which raises only when it is."""
        if self.probe is None:
            return False
        self.last_probe = time.perf_counter()
        try:
            self.queue.write_buffer(self.probe, 0, b"\0\0\0\0")
        except Exception as exc:
            return classify(exc) == DeviceFault.LOST
        return False

    def new_loss_report(self) -> bool:
        """Whether the wgpu logger reported a loss since the last look, confirmed by a probe."""
        seen = loss_reports.count
        if seen == self.seen_reports or self.message is not None:
            return False
        self.seen_reports = seen
        return self.probe_lost()

    def describe(self, what: str, exc: BaseException) -> tuple[str, bool] | None:
        """``(message, lost)`` for a device error raised by ``what``; None when ``exc`` is not one."""
        kind = classify(exc)
        if kind == DeviceFault.NONE and self.probe_lost():
            kind = DeviceFault.LOST  # e.g. map_async's AttributeError once the device is gone
        if kind == DeviceFault.NONE:
            return None
        lines = (getattr(exc, "message", None) or str(exc)).strip().splitlines()
        detail = " ".join(line.strip() for line in lines[-2:])
        lost = kind == DeviceFault.LOST
        return f"{what}: {'device lost' if lost else 'device error'}: {detail}", lost
