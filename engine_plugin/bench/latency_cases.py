"""Latency cases: (f) async readback frames from request to apply, (g) hot reload latency,
(h) warm start from the variant cache. (g) and (h) run the tools/bench scripts in a child
process (a clean interpreter is what they measure) and report their JSON."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np
import wgpu

from ..device.context import get_context
from ..engine import Engine, fallbacks
from ..world import World
from .harness import Result, case

__all__ = ["bench_readback_latency", "bench_reload_latency", "bench_warm_start"]

_FRAME_S = 0.001  # the rest of a game frame, simulated


@case("readback_latency")
def bench_readback_latency(opts) -> Result:
    """(f) Frames from a chunk edit to its applied SUMMARY result, against raw map_async polled
    by a waiter thread (what a raw wgpu-py 0.32 game must do without an event loop)."""
    from .engine_cases import kernel_program

    ctx = get_context()
    world = World((32, 32), {"height": np.float32}, max_chunks=64)
    for k in range(64):
        world.add(k)
    applied = []
    engine = Engine(world, device=ctx)
    engine.register_product(
        kernel_program("summary", ctx), fields={"src": "height"}, apply=lambda r: applied.append(len(r.keys)), cpu_fallback=fallbacks.summary
    )
    for _ in range(5):  # settle the first uploads
        engine.frame()
        time.sleep(_FRAME_S)
    frames, millis = [], []
    for i in range(10 if opts.get("quick") else 40):
        world.write(i % 64, "height", float(i))
        applied.clear()
        t0, n = time.perf_counter(), 0
        while not applied and n < 1000:
            engine.frame()
            n += 1
            time.sleep(_FRAME_S)
        frames.append(n)
        millis.append((time.perf_counter() - t0) * 1e3)
    engine.close()

    # Raw: copy a chunk's worth of results to a MAP_READ buffer, map_async, a thread waits.
    src = ctx.device.create_buffer(size=16 * 64, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    raw_frames = []
    for _ in range(len(frames)):
        staging = ctx.device.create_buffer(size=16 * 64, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        enc = ctx.device.create_command_encoder()
        enc.copy_buffer_to_buffer(src, 0, staging, 0, 16 * 64)
        ctx.queue.submit([enc.finish()])
        done = threading.Event()
        promise = staging.map_async(wgpu.MapMode.READ)

        def wait(promise: Any = promise, done: threading.Event = done) -> None:
            promise.sync_wait()
            done.set()

        threading.Thread(target=wait, daemon=True).start()
        n = 0
        while not done.is_set() and n < 1000:
            n += 1
            time.sleep(_FRAME_S)
        staging.read_mapped()
        staging.unmap()
        raw_frames.append(n + 1)
    return Result(
        "(f) first round's case: frames from edit to apply, 1 ms frames, raw blocking a thread on its map (this round's: the 'readback frames' rows)",
        float(statistics.median(frames)),
        float(statistics.median(raw_frames)),
        "frames",
        note=(
            f"engine {min(frames)}-{max(frames)}, raw {min(raw_frames)}-{max(raw_frames)} frames over {len(frames)} edits; "
            f"engine p50 {statistics.median(millis):.1f} ms incl. upload, dispatch, revalidation"
        ),
        extra={"engine_frames": frames, "raw_frames": raw_frames, "engine_ms": millis},
    )


def _script(name: str, args: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        done = subprocess.run([sys.executable, "-m", f"engine_plugin.bench.{name}", *args, "--json", out], capture_output=True, text=True, timeout=600)
        # Exit 1 means "ran, missed its target": the figures are still the result to report.
        if done.returncode not in (0, 1) or not os.path.exists(out):
            raise RuntimeError(f"engine_plugin.bench.{name} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
        with open(out) as f:
            return json.load(f)


@case("reload_latency")
def bench_reload_latency(opts) -> Result:
    """(g) File write to the new generation being dispatchable (debounce included)."""
    data = _script("reload_latency", ["--saves", "10" if opts.get("quick") else "50"])
    p50, p95 = _find(data, "p50"), _find(data, "p95")
    return Result("(g) hot reload latency p50 (write -> dispatchable)", p50, None, "s", target="p95 <= 150 ms", note=f"p95 {p95 * 1e3:.1f} ms", extra=data)


@case("warm_start")
def bench_warm_start(opts) -> Result:
    """(h) 100 cached variants against cold lowering, before the first dispatch (pipeline compile excluded)."""
    data = _script("warm_start", ["--repeat", "2" if opts.get("quick") else "5"])
    warm, cold = _find(data, "warm"), _find(data, "cold")
    return Result("(h) warm start, 100 variants (warm vs cold)", warm, cold, "s", target="<= 0.1x (>= 10x faster)", extra=data)


def _find(data: dict, word: str) -> float:
    """The first number in a script's JSON whose key mentions ``word`` (seconds)."""
    for key, value in _flatten(data):
        if word in key and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value) / (1e3 if key.endswith("_ms") else 1.0)
    raise KeyError(f"no {word!r} figure in {sorted(k for k, _ in _flatten(data))}")


def _flatten(data, prefix=""):
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _flatten(v, f"{prefix}{k}.")
    else:
        yield prefix.rstrip("."), data
