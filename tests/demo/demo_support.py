"""Pumping the demo's frames in tests until something happens, bounded by time, not frames.

The engine defers a frame's dispatches while earlier frames' GPU work is outstanding, and a hot
reload compiles on the reload worker thread: on a loaded machine (two CI cores running lavapipe)
any fixed number of fast host frames can run out before the GPU or the worker is done."""

from __future__ import annotations

import time
from collections.abc import Callable

from engine_plugin.demo.game import HeatDemo

SECONDS = 60.0


def frames_until(demo: HeatDemo, done: Callable[[], bool], what: str, seconds: float = SECONDS) -> int:
    """Step frames until ``done()``; answers the host frames it took. Each frame yields a
    millisecond to wgpu's and the reload worker's threads, as a game's paced frame loop does."""
    deadline = time.monotonic() + seconds
    frames = 0
    while time.monotonic() < deadline:
        demo.step()
        frames += 1
        if done():
            return frames
        time.sleep(0.001)
    raise AssertionError(f"{what} did not happen within {seconds:.0f} s ({frames} frames)")


def advance(demo: HeatDemo, frames: int, seconds: float = SECONDS) -> None:
    """Run ``frames`` game frames (host frames the engine defers advance nothing)."""
    target = demo.frame_index + frames
    deadline = time.monotonic() + seconds
    while demo.frame_index < target:
        if time.monotonic() > deadline:
            raise AssertionError(f"the demo reached frame {demo.frame_index}, not {target}, in {seconds:.0f} s")
        before = demo.frame_index
        demo.step()
        if demo.frame_index == before:
            time.sleep(0.001)  # deferred: the GPU still works on earlier frames
