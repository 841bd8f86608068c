"""GPU time of labelled dispatches from timestamp queries, read back without waiting.

A :class:`GpuTimer` owns a few *windows*, each a query set with its resolve and staging
buffers. A submission with timed records takes a free window, writes two timestamps around
each timed dispatch, resolves them and copies them to the staging buffer in the same command
buffer; the staging map starts after the submit. :meth:`GpuTimer.poll` hands back the
windows whose maps have landed (milliseconds per label, summed over its dispatches) and
recycles them. No window free (the GPU is several submissions behind): that submission is
not timed, which costs nothing and loses nothing but a sample.

On an adapter without ``timestamp-query`` the timer is off (``available`` False) and callers
fall back to wall time.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..device.flags import COPY_DST, COPY_SRC, MAP_READ, QUERY_RESOLVE
from ..device.mapping import map_submitted, settled

__all__ = ["GpuTimer"]

log = logging.getLogger("engine_plugin.runtime")

_WINDOWS = 4
_KEYS_PER_WINDOW = 64  # the smallest window; a submission with more timed records gets a bigger one
_MAX_KEYS = 2048  # WebGPU allows 4,096 queries a set: two a timed dispatch


class _Window:
    """One submission's timestamps: a query set, its resolve buffer and its staging buffer."""

    def __init__(self, device: Any, capacity: int) -> None:
        self.capacity = capacity
        self.query_set = device.create_query_set(type="timestamp", count=2 * capacity)
        self.resolve_buffer = device.create_buffer(size=16 * capacity, usage=QUERY_RESOLVE | COPY_SRC, label="engine_plugin.timestamps")
        self.staging = device.create_buffer(size=16 * capacity, usage=MAP_READ | COPY_DST, label="engine_plugin.timestamps_staging")
        self.keys: list[str] = []
        self.promise: Any = None

    def slot(self, j: int) -> tuple[Any, int]:
        return self.query_set, 2 * j

    def resolve(self, encoder: Any) -> None:
        count = 2 * len(self.keys)
        encoder.resolve_query_set(self.query_set, 0, count, self.resolve_buffer, 0)
        encoder.copy_buffer_to_buffer(self.resolve_buffer, 0, self.staging, 0, 8 * count)

    def submitted(self) -> None:
        self.promise = map_submitted(self.staging, 8 * 2 * len(self.keys))


class GpuTimer:
    """Timestamps around labelled dispatches; see the module docstring."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.available = "timestamp-query" in getattr(device, "features", ())
        self._free: list[_Window] = []
        self._made = 0
        self._pending: list[_Window] = []

    def open(self, encoder: Any, keys: list[str]) -> _Timed | None:
        """A window for the timed records of one submission (their first ``capacity`` ones),
        or None when timing is off or every window is still in flight."""
        if not self.available or not keys:
            return None
        need = min(len(keys), _MAX_KEYS)
        fits = [w for w in self._free if w.capacity >= need]
        if fits:
            window = min(fits, key=lambda w: w.capacity)
            self._free.remove(window)
        elif self._made < _WINDOWS or self._free:
            if self._free:  # too small for this submission: replace the smallest
                self._free.remove(min(self._free, key=lambda w: w.capacity))
                self._made -= 1
            capacity = _KEYS_PER_WINDOW
            while capacity < need:
                capacity *= 2
            try:
                window = _Window(self.device, capacity)
            except Exception as exc:  # no query sets after all: time by wall clock
                log.info("timestamp queries unavailable (%s); GPU times fall back to wall time", exc)
                self.available = False
                return None
            self._made += 1
        else:
            return None
        window.keys = keys[: window.capacity]
        return _Timed(self, window)

    def poll(self) -> list[dict[str, float]]:
        """Milliseconds per label of every timed submission whose timestamps have landed."""
        done: list[dict[str, float]] = []
        still: list[_Window] = []
        for window in self._pending:
            promise = window.promise
            if promise is not None and not settled(promise, 0):
                still.append(window)
                continue
            try:
                if promise is not None:
                    promise.sync_wait()
                ticks = np.frombuffer(window.staging.read_mapped(0, 16 * len(window.keys)), dtype="<u8").copy()
                window.staging.unmap()
            except Exception as exc:  # a lost device: the sample is gone, the window too
                log.debug("reading timestamps failed: %s", exc)
                continue
            times: dict[str, float] = {}
            for j, key in enumerate(window.keys):
                ns = max(0, int(ticks[2 * j + 1]) - int(ticks[2 * j]))
                times[key] = times.get(key, 0.0) + ns / 1e6
            done.append(times)
            window.promise = None
            self._free.append(window)
        self._pending = still
        return done

    def _submitted(self, window: _Window) -> None:
        try:
            window.submitted()
        except Exception as exc:
            log.debug("mapping timestamps failed: %s", exc)
            return
        self._pending.append(window)


class _Timed:
    """The window handed to :meth:`Submission.submit`: slots, resolve, then the map."""

    def __init__(self, timer: GpuTimer, window: _Window) -> None:
        self.timer = timer
        self.window = window

    @property
    def count(self) -> int:
        """How many of the submission's timed records this window times (the first ones)."""
        return len(self.window.keys)

    def slot(self, j: int) -> tuple[Any, int]:
        return self.window.slot(j)

    def resolve(self, encoder: Any) -> None:
        self.window.resolve(encoder)

    def submitted(self) -> None:
        self.timer._submitted(self.window)
