"""Submissions that cannot meet a lost device: one lock and one loss flag per device.

wgpu-native (wgpu-py 0.32) *panics* — the process aborts with exit 134, nothing to catch —
when ``queue.submit`` (or a ``map_async`` that submits internally) finds its device lost:
``Error in wgpuQueueSubmit: Validation Error, Caused by: Parent device is lost``. A loss on
another thread between any check and the submit is enough. So every submission on a device
goes through :meth:`SubmissionGuard.submitting`, which holds the device's submit lock, and:

- refuses with :class:`DeviceLostError` once the device is known lost (the flag), and first
  probes the device when the ``wgpu`` logger reported a loss since the guard last looked
  (one 4-byte ``write_buffer``, which raises on a lost device and panics on nothing);
- turns wgpu-py's ``RuntimeError('Cannot use PollThread because it has stopped.')`` (what
  ``map_async`` raises once the device's poll thread is gone with it) into a loss.

``device.destroy()`` — how an application (or a test) drops a device on purpose, from any
thread — is wrapped to take the same lock and set the flag before the device goes: a destroy
can then never land between the check and the submit. What the guard cannot pre-empt is a
loss that wgpu-native itself discovers *inside* a submit (a real GPU reset on a driver that
reports it only there): that still aborts in wgpu-native; it needs wgpu-native to report
submit errors instead of panicking.
"""

from __future__ import annotations

import logging
import threading
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from ..errors import DeviceLostError
from .loss import DeviceFault, classify, is_poll_thread_stopped, loss_reports

__all__ = ["SubmissionGuard", "guard_for", "is_poll_thread_stopped"]

log = logging.getLogger("engine_plugin.gpu")

_COPY_DST = 0x0008  # wgpu.BufferUsage.COPY_DST, without importing wgpu here


class SubmissionGuard:
    """The submit lock and loss flag of one device (see the module docstring)."""

    def __init__(self, device: Any):
        self.device = device
        self.lock = threading.RLock()
        self.lost = False
        self.reason: str | None = None
        self._seen_reports = loss_reports.acquire_user()  # attached for the process's life
        self._probe: Any = None
        self._listeners: list[Callable[[str], None]] = []
        self._wrap_destroy()

    # -- loss ------------------------------------------------------------------------------
    def mark_lost(self, reason: str) -> None:
        """Record the loss (any thread); listeners hear of the first one."""
        with self.lock:
            first = not self.lost
            self.lost = True
            self.reason = self.reason or reason
            listeners = list(self._listeners) if first else []
        for fn in listeners:
            try:
                fn(reason)
            except Exception:  # a listener must not turn a loss into a crash
                log.exception("engine_plugin bug, please report: a device-loss listener failed")

    def on_lost(self, fn: Callable[[str], None]) -> None:
        """Call ``fn(reason)`` once, when this device is first marked lost."""
        with self.lock:
            self._listeners.append(fn)
            lost, reason = self.lost, self.reason
        if lost:
            fn(reason or "device lost")

    def check(self) -> bool:
        """Whether the device is lost, probing it if the ``wgpu`` logger reported a loss since
        the last look (the report does not say which device)."""
        if self.lost:
            return True
        seen = loss_reports.count
        if seen != self._seen_reports:
            self._seen_reports = seen
            if self._probe_lost():
                self.mark_lost("device lost (reported on the wgpu logger, confirmed by a probe)")
        return self.lost

    def probe_lost(self) -> bool:
        """Whether the device is lost, by one 4-byte write (which raises only when it is)."""
        return self._probe_lost()

    def _probe_lost(self) -> bool:
        with self.lock:
            try:
                if self._probe is None:
                    self._probe = self.device.create_buffer(size=4, usage=_COPY_DST, label="engine_plugin.loss_probe")
                self.device.queue.write_buffer(self._probe, 0, b"\0\0\0\0")
            except Exception as exc:
                return classify(exc) == DeviceFault.LOST
            return False

    # -- submissions -----------------------------------------------------------------------
    @contextmanager
    def submitting(self, what: str = "a submission") -> Iterator[None]:
        """Hold the submit lock around a ``queue.submit`` or ``map_async``; refuse when lost.

        Raises:
            DeviceLostError: the device is lost (nothing was submitted), or the call inside
                failed because it was (the poll thread's RuntimeError included).
        """
        with self.lock:
            if self.check():
                raise DeviceLostError(f"{what}: the device is lost ({self.reason}); nothing was submitted")
            try:
                yield
            except Exception as exc:
                if classify(exc) == DeviceFault.LOST:
                    self.mark_lost(f"{what}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__}")
                    raise DeviceLostError(f"{what}: the device is lost ({self.reason})") from exc
                raise

    # -- destroy ---------------------------------------------------------------------------
    def _wrap_destroy(self) -> None:
        real = getattr(self.device, "destroy", None)
        if real is None or getattr(real, "_engine_plugin_guarded", False):
            return
        guard = self

        def destroy() -> None:
            # Never between a submission's check and its submit: that submit would panic.
            with guard.lock:
                guard.mark_lost("device.destroy() was called")
                real()

        destroy._engine_plugin_guarded = True  # type: ignore[attr-defined]
        try:
            self.device.destroy = destroy
        except (AttributeError, TypeError):  # a device class with slots: unguarded destroys
            log.debug("cannot guard destroy() of %r", self.device)


# Weak: a guard lives as long as the contexts and backends that use it (it holds the device).
_guards: "weakref.WeakValueDictionary[int, SubmissionGuard]" = weakref.WeakValueDictionary()
_guards_lock = threading.Lock()


def guard_for(device: Any) -> SubmissionGuard:
    """The one guard of ``device`` (made on first use)."""
    with _guards_lock:
        found = _guards.get(id(device))
        if found is None or found.device is not device:
            found = _guards[id(device)] = SubmissionGuard(device)
        return found
