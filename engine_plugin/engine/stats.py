"""What one ``engine.frame()`` did."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

__all__ = ["FrameStats"]


@dataclass
class FrameStats:
    """Counts and time of one frame (``engine.totals`` sums them over every frame).

    Readbacks are counted as wholes: *applied* when at least one chunk's results were applied,
    *stale* when everything in them was discarded (a dead generation, or every chunk changed or
    evicted since its upload), *failed* when the device never delivered them. ``chunks_applied``
    and ``chunks_stale`` count the chunks inside, so a partly stale readback shows in both;
    ``chunks_stale`` also counts the chunks of CPU fallback results discarded because the chunk
    changed while the fallback computed (they are computed again).
    """

    frame: int = 0
    uploads: int = 0
    upload_bytes: int = 0
    dispatches: int = 0
    readbacks_requested: int = 0
    readbacks_applied: int = 0
    readbacks_stale: int = 0
    readbacks_failed: int = 0
    chunks_applied: int = 0
    chunks_stale: int = 0
    cpu_fallbacks: int = 0
    refused: int = 0
    reregistered: int = 0
    gpu_active: bool = False
    gpu_lost: bool = False
    time: float = 0.0
    # Back-pressure (SPEC section 4, "never waits for the GPU"): dispatches put off to a later
    # frame because too many frames of GPU work were still in flight.
    deferred: int = 0
    frames_in_flight: int = 0
    # Products moved to their CPU fallback after repeated readback failures (reported once).
    readback_fallbacks: int = 0
    append_overflows: int = 0  # append outputs of applied results that ran past their capacity (ProductResult.overflow)
    # Product key -> GPU milliseconds of its dispatches in the frame the times were measured
    # (timestamp queries arrive a frame or more late; ``gpu_timing`` says how they were taken:
    # "timestamps", "wall" where the adapter has no timestamp-query, "" before any arrived).
    # Timestamps are sampled (a product's first frame, then one in
    # ``WgpuBackendConfig.gpu_timing_every``): a frame's figure is that product's GPU time in
    # the sampled frame, and totals add up the samples, not every frame's GPU time.
    product_gpu_ms: dict[str, float] = field(default_factory=dict)
    gpu_timing: str = ""

    @property
    def bytes(self) -> int:
        """Bytes uploaded (SPEC section 4 calls it ``bytes``; ``upload_bytes`` says what of)."""
        return self.upload_bytes

    def add(self, other: FrameStats) -> None:
        """Accumulate ``other`` into these totals (flags: the latest frame's; ``gpu_lost``: ever)."""
        mine, theirs = self.__dict__, other.__dict__
        summed = _SUMMED if type(self) is FrameStats else _summed(type(self))
        for name in summed:
            mine[name] += theirs[name]
        for name in _LATEST:
            mine[name] = theirs[name]
        self.gpu_lost = self.gpu_lost or other.gpu_lost
        if other.product_gpu_ms:
            for key, ms in other.product_gpu_ms.items():
                self.product_gpu_ms[key] = self.product_gpu_ms.get(key, 0.0) + ms

    def empty_like(self) -> FrameStats:
        """Stats counting nothing, with these stats' latest-frame flags (``frame``,
        ``gpu_active``, ...): what :meth:`add` takes to count more without changing them."""
        out = FrameStats()
        for name in _LATEST:
            out.__dict__[name] = self.__dict__[name]
        out.gpu_lost = self.gpu_lost
        return out

    def summary(self) -> str:
        """One line for a log or a HUD."""
        return (
            f"frame {self.frame}: {self.uploads} uploads ({self.upload_bytes / 1024:.0f} KiB), "
            f"{self.dispatches} dispatches, readbacks {self.readbacks_applied} applied / "
            f"{self.readbacks_stale} stale / {self.readbacks_failed} failed, {self.cpu_fallbacks} CPU fallbacks, "
            f"{'GPU' if self.gpu_active else 'CPU'}, {self.time * 1e3:.2f} ms"
        )


# How ``add`` treats each field (made once: ``fields()`` and a name test per field cost tens of
# µs a frame): the latest frame's value, ever lost, GPU times by product, or summed.
_LATEST = ("frame", "gpu_active", "frames_in_flight", "gpu_timing")


def _summed(cls: type) -> tuple[str, ...]:
    """The summed fields of ``cls`` (a subclass's own fields too)."""
    return tuple(f.name for f in fields(cls) if f.name not in (*_LATEST, "gpu_lost", "product_gpu_ms"))


_SUMMED = _summed(FrameStats)
