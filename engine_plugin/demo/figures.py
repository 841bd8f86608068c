"""What the overlay shows, as data: one :class:`Figures` per demo, updated once a frame.

The window's overlay draws these figures and the headless run writes them to a JSON-lines
log (:meth:`Figures.record`), so both show the same numbers. Nothing here imports imgui or
glfw: the figures are plain Python, testable without a window.

* frame time and FPS (a rolling history for the graph);
* per-product GPU milliseconds from ``FrameStats.product_gpu_ms`` (filled by the engine;
  latched, since timestamp queries arrive a frame or more late; empty means "n/a");
* uploads, readbacks in flight, stale results discarded per second;
* a reload log (asset, body or layout, variants recompiled, milliseconds);
* diagnostics: one per broken asset, ``file:line:col``, the source line and a caret, kept
  until the asset's file is fixed (they are read from the references every frame).
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from ..engine import FrameStats

__all__ = ["Diagnostic", "Figures", "ReloadEntry"]

HISTORY = 120  # frames in the rolling graph
RELOADS_KEPT = 8
# A product's GPU time shows while one landed within this many seconds (each product is timed
# one frame in 16 and its timestamps land frames later; on a loaded CPU adapter, seconds).
GPU_TIME_KEPT_S = 10.0


@dataclass(frozen=True)
class ReloadEntry:
    """One line of the reload log."""

    frame: int
    asset: str
    kind: str  # "body", "layout", "failed", "refused" (by the engine: the old kernel runs on) or "requested" (a forced reload of every asset)
    recompiled: int
    ms: float
    generation: int

    def text(self) -> str:
        if self.kind == "requested":
            return f"#{self.frame} forced reload of {self.recompiled} asset(s)"
        if self.kind == "failed":
            return f"#{self.frame} {self.asset}: failed, generation {self.generation} stays ({self.ms:.0f} ms)"
        if self.kind == "refused":
            return f"#{self.frame} {self.asset}: refused by the engine, its product keeps its previous kernel"
        return f"#{self.frame} {self.asset}: {self.kind}, {self.recompiled} variant(s) recompiled, gen {self.generation}, {self.ms:.0f} ms"


@dataclass(frozen=True)
class Diagnostic:
    """One error of one asset, split for display: ``location`` is ``file:line:col``."""

    asset: str
    location: str
    message: str
    source: str = ""  # the offending line ('' when unknown)
    caret: str = ""  # spaces and a '^' under the column

    @classmethod
    def from_error(cls, asset: str, error: Any, root: str | None = None) -> Diagnostic:
        """From a PluginError (its span) or, failing that, from its rendered text. Paths under
        ``root`` (the asset folder) are shown relative to it: short enough to read on screen."""
        span = getattr(error, "span", None)
        if span is not None and span.line is not None:
            source, caret = span.shown()  # as an error message shows it (a window of a long line)
            if not source.strip():
                source, caret = "", ""
            return cls(asset, _relative(span.prefix(), span.path, root), getattr(error, "message", str(error)), source, caret)
        if span is not None and span.path and hasattr(error, "message"):  # a file, no line: the file and the message
            return cls(asset, _relative(span.path, span.path, root), error.message, "", "")
        # Rendered text: "path:line[:col]: message", then "    source", then "    ^".
        lines = str(error).splitlines() or [""]
        location, _, message = lines[0].partition(": ")
        if not message or (_path_line(location)[0] is None and not _looks_like_path(location)):
            # No place in front (an engine product-contract error: "unknown param 'cooling';
            # product 'heat_step' takes: ..."): the asset; the text before a first ": " was
            # taken for a place (review helper 199).
            location, message = asset, lines[0]
        body = [ln[4:] if ln.startswith("    ") else ln for ln in lines[1:3]]
        source = body[0] if body else ""
        caret = body[1] if len(body) > 1 and body[1].strip() == "^" else ""
        path, line = _path_line(location)
        if path is not None and not source:
            # e.g. the engine's product-contract errors name a line but do not quote it
            source = _read_line(path, line)
            caret = " " * (len(source) - len(source.lstrip())) + "^" if source else ""
        return cls(asset, _relative(location, path, root), message, source, caret)

    def lines(self) -> list[str]:
        """The text the error panel draws, in order."""
        out = [f"{self.location}: {self.message}"]
        if self.source:
            out.append("    " + self.source)
            if self.caret:
                out.append("    " + self.caret)
        return out


def _relative(location: str, path: str | None, root: str | None) -> str:
    """``location`` with ``path`` shown relative to ``root`` when it lies under it."""
    if root and path and os.path.isabs(path) and location.startswith(path):
        rel = os.path.relpath(path, os.path.abspath(root))
        if not rel.startswith(".."):
            return rel + location[len(path) :]
    return location


def _looks_like_path(text: str) -> bool:
    """Whether ``text`` (before a message's first ": ") reads as a file's path: a folder in it,
    or an asset file's name (not whatever the working folder happens to hold: review helper 201)."""
    return "/" in text or "\\" in text or text.endswith((".wgsl", ".yaml", ".yml", ".computeShader"))


def _path_line(location: str) -> tuple[str | None, int]:
    """``("path", line)`` of ``"path:line[:col]"``, or ``(None, 0)``."""
    parts = location.split(":")
    for n in (3, 2):  # path:line:col, path:line
        if len(parts) >= n and all(p.isdigit() for p in parts[-(n - 1) :]):
            return ":".join(parts[: -(n - 1)]), int(parts[-(n - 1)])
    return None, 0


def _read_line(path: str, line: int) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for i, text in enumerate(f, 1):
                if i == line:
                    return text.rstrip("\n").expandtabs(4)
    except OSError:
        pass
    return ""


@dataclass
class Figures:
    """The overlay's figures, updated by :meth:`frame` once a frame."""

    frame: int = 0
    frame_ms: float = 0.0  # time between the last two frames (what the eye sees)
    step_ms: float = 0.0  # the demo's own work in the last frame (game logic, engine, kernels)
    fps: float = 0.0
    uploads: int = 0
    upload_bytes: int = 0
    readbacks_in_flight: int = 0
    stale_per_s: float = 0.0
    gpu_ms: dict[str, float] = field(default_factory=dict)
    gpu_timing: str = ""
    products: tuple[str, ...] = ()
    paused: bool = False
    heat: dict[str, Any] = field(default_factory=dict)
    history: deque = field(default_factory=lambda: deque(maxlen=HISTORY), repr=False)
    reloads: deque = field(default_factory=lambda: deque(maxlen=RELOADS_KEPT))
    reload_count: int = 0  # entries ever added to the reload log
    diagnostics: list[Diagnostic] = field(default_factory=list)
    _stamps: deque = field(default_factory=lambda: deque(maxlen=HISTORY), repr=False)
    _stale: deque = field(default_factory=deque, repr=False)
    _since: list = field(default_factory=lambda: [0.0, 0, 0], repr=False)  # step s, uploads, bytes since the last game frame
    _gpu_seen: dict = field(default_factory=dict, repr=False)  # product -> when its GPU time last landed

    def frame_done(self, stats: FrameStats, step_s: float, inflight: int, now: float | None = None, *, advanced: bool = True) -> None:
        """Take one frame's engine statistics (``step_s``: the demo's own time for it).

        ``advanced``: whether the game moved on a frame. A host frame whose dispatches the
        engine deferred (the GPU still busy with the previous one) did not: frame time, fps
        and the graph count game frames, and its time and uploads add to the next one's."""
        now = time.perf_counter() if now is None else now
        self.frame = stats.frame
        since = self._since
        since[0] += step_s
        since[1] += stats.uploads
        since[2] += stats.upload_bytes
        if advanced:
            self.step_ms = since[0] * 1e3
            self.uploads, self.upload_bytes = since[1], since[2]
            self._since = [0.0, 0, 0]
            if self._stamps:
                self.frame_ms = (now - self._stamps[-1]) * 1e3
                self.history.append(self.frame_ms)
            self._stamps.append(now)
            window = [t for t in self._stamps if now - t <= 1.0]
            if len(window) > 1:
                self.fps = (len(window) - 1) / max(window[-1] - window[0], 1e-9)
        self.readbacks_in_flight = inflight
        self._stale.append((now, stats.readbacks_stale))
        while self._stale and now - self._stale[0][0] > 1.0:
            self._stale.popleft()
        self.stale_per_s = float(sum(n for _, n in self._stale))
        if stats.product_gpu_ms:  # latched: measured frames are a frame or more behind
            # Per product: a frame's samples may time some products only (each is timed one
            # frame in 16, and a reloaded product's turn moves), and the others keep their
            # last time; replacing the whole dict showed n/a for most frames after a reload
            # (review helper 109).
            self.gpu_ms.update(stats.product_gpu_ms)
            self.gpu_timing = stats.gpu_timing
            for product in stats.product_gpu_ms:
                self._gpu_seen[product] = now
        # ...but only while it is measured: a product unregistered, or no longer dispatched,
        # goes back to n/a instead of showing its last time for good (review helper 110).
        for product in [p for p, seen in self._gpu_seen.items() if now - seen > GPU_TIME_KEPT_S]:
            del self._gpu_seen[product]
            self.gpu_ms.pop(product, None)

    def product_names(self) -> tuple[str, ...]:
        """The products to list: the demo's own, then any other the engine timed."""
        return self.products + tuple(sorted(k for k in self.gpu_ms if k not in self.products))

    def gpu_text(self, product: str) -> str:
        """``'0.123 ms'`` or ``'n/a'`` while the engine has no time for ``product``."""
        ms = self.gpu_ms.get(product)
        return "n/a" if ms is None else f"{ms:.3f} ms"

    def note_reload(self, event: Any) -> None:
        """A ReloadEvent or ReloadFailure from an asset reference."""
        if getattr(event, "ok", False):
            entry = ReloadEntry(self.frame, event.asset, event.kind, len(event.recompiled), event.latency * 1e3, event.generation)
        else:
            entry = ReloadEntry(self.frame, event.asset, "failed", 0, event.latency * 1e3, event.generation)
        self.reloads.append(entry)
        self.reload_count += 1

    def note_refused(self, asset: str, generation: int) -> None:
        """The engine refused ``asset``'s reloaded kernel (outside its product's contract): the
        product runs on its old one."""
        self.reloads.append(ReloadEntry(self.frame, asset, "refused", 0, 0.0, generation))
        self.reload_count += 1

    def note_forced_reload(self, assets: int) -> None:
        self.reloads.append(ReloadEntry(self.frame, "*", "requested", assets, 0.0, 0))
        self.reload_count += 1

    def record(self, reloads_since: int | None = None) -> dict[str, Any]:
        """One JSON-lines object: the figures of the last frame. ``reloads_since``: list only the
        reload-log entries added after ``reload_count`` was that (default: the whole recent log)."""
        new = len(self.reloads) if reloads_since is None else min(len(self.reloads), self.reload_count - reloads_since)
        reloads = list(self.reloads)[len(self.reloads) - new :] if new > 0 else []
        return {
            "frame": self.frame,
            "frame_ms": round(self.frame_ms, 3),
            "step_ms": round(self.step_ms, 3),
            "fps": round(self.fps, 2),
            "gpu_ms": {p: (round(self.gpu_ms[p], 4) if p in self.gpu_ms else None) for p in self.product_names()},
            "gpu_timing": self.gpu_timing or None,
            "uploads": self.uploads,
            "upload_bytes": self.upload_bytes,
            "readbacks_in_flight": self.readbacks_in_flight,
            "stale_per_s": self.stale_per_s,
            "paused": self.paused,
            "heat": self.heat,
            "reloads": [asdict(r) for r in reloads],
            "errors": [asdict(d) for d in self.diagnostics],
        }
