"""GPU time of compute passes from timestamp queries, for the kernel benchmarks.

:class:`PassTimer` times *every* compute pass begun while :meth:`PassTimer.capture` is open,
the plugin's as well as a raw kernel's, by the same means: it adds ``timestamp_writes`` to
``begin_compute_pass`` (the plugin encodes its own passes, so the bench lends them the
timestamps rather than asking the runtime for hooks). A figure is the sum of the passes'
(end - begin) in nanoseconds (wgpu-native normalises timestamps to ns). Needs the device's
``timestamp-query`` feature (lavapipe and the H200's Vulkan driver have it); without it
:attr:`PassTimer.available` is False and callers report wall clock only.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import numpy as np
import wgpu

__all__ = ["PassTimer", "want_timestamps"]


def want_timestamps() -> None:
    """Ask for ``timestamp-query`` when the default device is created (before the first
    ``get_context()``); harmless when the device module already asks for it."""
    from ..device import context as device

    if "timestamp-query" not in device._WANTED_FEATURES:
        setattr(device, "_WANTED_FEATURES", (*device._WANTED_FEATURES, "timestamp-query"))


class PassTimer:
    """Timestamps around every compute pass begun inside :meth:`capture`."""

    def __init__(self, device: Any, capacity: int = 512):
        self.device = device
        self.available = "timestamp-query" in device.features
        self.capacity = capacity
        self._used = 0
        if self.available:
            self.query_set = device.create_query_set(type="timestamp", count=2 * capacity)
            self.resolve = device.create_buffer(size=16 * capacity, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)

    @contextlib.contextmanager
    def capture(self) -> Iterator[None]:
        """Time the compute passes begun inside (up to ``capacity``; more are left untimed)."""
        self._used = 0
        if not self.available:
            yield
            return
        from wgpu.backends.wgpu_native import GPUCommandEncoder as encoder_cls

        original = encoder_cls.begin_compute_pass
        timer = self

        def begin_compute_pass(encoder, *args, **kwargs):
            if kwargs.get("timestamp_writes") is None and timer._used < timer.capacity:
                k = timer._used
                timer._used += 1
                kwargs["timestamp_writes"] = {"query_set": timer.query_set, "beginning_of_pass_write_index": 2 * k, "end_of_pass_write_index": 2 * k + 1}
            return original(encoder, *args, **kwargs)

        encoder_cls.begin_compute_pass = begin_compute_pass
        try:
            yield
            # A small run of host data is encoded when it is submitted (runtime.deferred):
            # submit it while its pass can still be timed.
            from ..runtime.deferred import flush

            flush()
        finally:
            encoder_cls.begin_compute_pass = original

    def seconds(self) -> float | None:
        """GPU seconds of the passes the last capture timed (waits for them); None when the
        adapter has no timestamps or nothing was timed."""
        if not self.available or self._used == 0:
            return None
        count = 2 * self._used
        encoder = self.device.create_command_encoder()
        encoder.resolve_query_set(self.query_set, 0, count, self.resolve, 0)
        self.device.queue.submit([encoder.finish()])
        ticks = np.frombuffer(self.device.queue.read_buffer(self.resolve, 0, 8 * count), dtype=np.uint64).reshape(-1, 2)
        spans = ticks[:, 1].astype(np.int64) - ticks[:, 0].astype(np.int64)
        return float(np.clip(spans, 0, None).sum()) * 1e-9
