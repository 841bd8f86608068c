"""The headless demo: N game frames, frame statistics (a live line on a terminal), a PNG
snapshot, and a JSON-lines log of the overlay's figures (:meth:`~.figures.Figures.record`:
frame time, fps, per-product GPU ms, uploads, readbacks in flight, stale/s, reloads, errors).

A *game frame* is one the heat step went out in (``demo.frame_index`` advanced). The engine
never waits for the GPU: while the previous frame's work still runs it defers the next
(``FrameStats.deferred``), and such a host frame advances nothing. Counting game frames keeps
the snapshot after N frames the same whatever the GPU's speed.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import sys
import time
from typing import Any, Iterator

from ..files import json_text

__all__ = ["run_headless"]

# Host frames a game frame may take before the run gives up on the GPU (it is stuck or gone).
MAX_HOST_FRAMES_PER_FRAME = 10_000


def nearest_rank(ascending: list[float], q: float) -> float:
    """The ``q`` quantile of sorted values by nearest rank (0.0 for none): a value of the
    list, never below the median for q >= 0.5 (the earlier floor index read the minimum as the
    p95 of two frames)."""
    return ascending[max(0, math.ceil(q * len(ascending)) - 1)] if ascending else 0.0


class OutputFileError(Exception):
    """The figures log or the snapshot could not be written (a full disk, a folder the system
    will not make): the environment's, not the demo's."""


@contextlib.contextmanager
def _writing(path: str) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise OutputFileError(f"cannot write {exc.filename or path}: {exc.strerror or exc}") from None


def run_headless(demo: Any, frames: int, snapshot: str | None = None, *, out: Any = None, log: str | None = None, log_every: int = 1) -> dict:
    """Run ``frames`` game frames of ``demo``; answers a summary dict (and writes the snapshot,
    of the last frame done when a KeyboardInterrupt stops the frames, which it raises on).

    Args:
        log: a JSON-lines file (its folder is created) that gets one object of the overlay's
            figures every ``log_every`` frames, and after the last frame.
    Raises:
        RuntimeError: a game frame did not go out within ``MAX_HOST_FRAMES_PER_FRAME`` host
            frames (the engine keeps deferring: no GPU progress).
    """
    from rich.console import Console

    console = Console(file=out or sys.stdout)
    times = []
    live = console.is_terminal
    log_file = None
    if log:
        with _writing(log):
            os.makedirs(os.path.dirname(os.path.abspath(log)), exist_ok=True)
            log_file = open(log, "w")
    reloads_logged = 0
    t_start = time.perf_counter()
    host_frames = 0
    try:
        for i in range(frames):
            t0 = time.perf_counter()
            hud, taken = _game_frame(demo)
            host_frames += taken
            times.append(time.perf_counter() - t0)
            if log_file is not None and ((i + 1) % max(1, log_every) == 0 or i + 1 == frames):
                with _writing(log or ""):
                    log_file.write(json_text(demo.figures.record(reloads_since=reloads_logged)) + "\n")
                reloads_logged = demo.figures.reload_count
            _progress(console, live, hud, i, frames)
    except KeyboardInterrupt:
        # Ctrl-C (or SIGTERM, raised as it): the figures log is written whole, and the snapshot
        # is of the last frame done (review helper 228: none was written); the exit stays 130.
        if snapshot and times:
            with _writing(snapshot):
                demo.snapshot(snapshot)
            console.print(f"\ninterrupted after {len(times)} frames; snapshot {snapshot}", highlight=False, soft_wrap=True, markup=False)
        raise
    finally:
        if log_file is not None:
            with _writing(log or ""):
                log_file.close()
    if live:
        console.print()
    wall = time.perf_counter() - t_start
    ms = sorted(t * 1e3 for t in times)
    summary = {
        "frames": frames,
        "host_frames": host_frames,
        "wall_s": wall,
        "fps": frames / wall if wall else 0.0,
        "frame_ms_p50": statistics.median(ms) if ms else 0.0,
        "frame_ms_p95": nearest_rank(ms, 0.95),
        "summaries_applied": demo.hud.summaries_applied,
        "summaries_stale": demo.hud.summaries_stale,
        "cpu_fallbacks": demo.hud.cpu_fallbacks,
        "heat": (demo.hud.heat_max, demo.hud.heat_mean),
        "hotspots": demo.hud.hotspots,
    }
    if log:
        summary["log"] = log
    if snapshot:
        with _writing(snapshot):
            demo.snapshot(snapshot)
        summary["snapshot"] = snapshot
    console.print(
        f"{frames} frames in {wall:.2f} s ({summary['fps']:.0f} fps); frame p50 {summary['frame_ms_p50']:.2f} ms, "
        f"p95 {summary['frame_ms_p95']:.2f} ms; summaries applied {summary['summaries_applied']}, "
        f"stale {summary['summaries_stale']}; CPU fallbacks {summary['cpu_fallbacks']}",
        highlight=False,
        soft_wrap=True,
    )
    return summary


def _game_frame(demo: Any) -> tuple[Any, int]:
    """Host frames until the game advances one frame (a paused demo: one); answers the last
    HUD and the host frames taken."""
    before = demo.frame_index
    for n in range(1, MAX_HOST_FRAMES_PER_FRAME + 1):
        hud = demo.step()
        if demo.frame_index != before or demo.paused:
            time.sleep(0)  # let wgpu's poll thread deliver readbacks (WGPU_NOTES: GIL)
            return hud, n
        # Deferred: the previous frame's GPU work still runs (on lavapipe, on these very CPU
        # cores); a short sleep gives it the time a busy loop would take from it.
        time.sleep(0.0005)
    raise RuntimeError(f"the demo did not advance a frame in {MAX_HOST_FRAMES_PER_FRAME} host frames: the engine keeps deferring (no GPU progress)")


def _progress(console: Any, live: bool, hud: Any, i: int, frames: int) -> None:
    """A live line on a terminal; one line every 100 frames elsewhere."""
    # markup=False: the title says "[paused]" (rich swallowed it as a tag) and quotes the
    # user's shader diagnostics, whose brackets ("[/]") raised MarkupError (review helper 224).
    if live:
        console.print(f"\r{hud.title()}", end="", soft_wrap=True, highlight=False, markup=False)
    elif (i + 1) % 100 == 0 or i + 1 == frames:
        console.print(f"frame {i + 1}/{frames}: {hud.title()}", highlight=False, soft_wrap=True, markup=False)
