#!/usr/bin/env python3
"""cProfile of ``Engine.frame()`` on the frame bench case (1,024 chunks x 2 fields, 10% dirty,
3 products), with the same-work raw loop's frame time beside it:

    python tools/bench/profile_engine_frame.py [--frames 200] [--out PATH]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from typing import Any

import numpy as np


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--out", help="write the report here (default: stdout)")
    args = parser.parse_args(argv)
    from engine_plugin.bench import engine_cases, frame_cases
    from engine_plugin.bench.gpu_timing import want_timestamps
    from engine_plugin.device.context import get_context
    from engine_plugin.engine import EngineConfig

    want_timestamps()
    ctx = get_context()
    world = engine_cases.make_world()
    engine, _, _ = frame_cases.make_engine(world, ctx)
    raw_world = engine_cases.make_world()
    raw = frame_cases.SameWorkRawLoop(raw_world, ctx, EngineConfig().upload_gap_bytes)
    for _ in range(5):
        engine.frame()
        raw.frame()
        time.sleep(0.01)
    phases = _time_phases(engine)
    rng = np.random.default_rng(1)
    plain, profiled, raw_t = [], [], []
    plain_phases: dict[str, float] = {}
    prof = cProfile.Profile()
    for i in range(args.frames):
        frame_cases._mutate(world, rng)
        if i % 2:
            prof.enable()
            t = time.perf_counter()
            engine.frame()
            profiled.append(time.perf_counter() - t)
            prof.disable()
        else:
            before = dict(phases)
            t = time.perf_counter()
            engine.frame()
            plain.append(time.perf_counter() - t)
            for name, total in phases.items():
                plain_phases[name] = plain_phases.get(name, 0.0) + total - before[name]
        time.sleep(0)
        frame_cases._mutate(raw_world, rng)
        t = time.perf_counter()
        raw.frame()
        raw_t.append(time.perf_counter() - t)
    out = io.StringIO()
    out.write(f"adapter: {ctx.adapter_name}\n")
    out.write(f"engine frame median {statistics.median(plain) * 1e3:.3f} ms (unprofiled frames), raw same-work {statistics.median(raw_t) * 1e3:.3f} ms\n")
    out.write(f"profiled frames median {statistics.median(profiled) * 1e3:.3f} ms; engine totals {engine.totals}\n")
    out.write("host time by step, mean ms a frame over the unprofiled frames (nested steps overlap):\n")
    for name, total in plain_phases.items():
        out.write(f"  {name:40s} {total / max(1, len(plain)) * 1e3:8.3f}\n")
    out.write("\n")
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("cumulative").print_stats(40)
    stats.sort_stats("tottime").print_stats(40)
    engine.close()
    text = out.getvalue()
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def _time_phases(engine: Any) -> dict[str, float]:
    """Wrap the frame's steps on this engine (instance attributes) with wall-clock totals."""
    totals: dict[str, float] = {}

    def wrap(owner: Any, attr: str, label: str) -> None:
        fn = getattr(owner, attr)
        totals[label] = 0.0

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                totals[label] += time.perf_counter() - t0

        setattr(owner, attr, timed)

    wrap(engine, "upload", "2 upload (engine.upload)")
    wrap(engine, "_dispatch", "3-4 dispatch (per product, recorded)")
    wrap(engine, "_submission", "3-4 open the frame's submission")
    wrap(engine, "_paced", "pacing (poll)")
    wrap(engine._delivery, "collect", "5 collect + apply")
    wrap(engine._gpu, "check", "gpu check (twice)")
    wrap(engine, "_apply_reloads", "1 reloads")
    wrap(engine.backend, "dispatch", "  backend.dispatch")
    wrap(engine.backend, "upload_spans", "  backend.upload_spans")  # (wrapping upload would send the engine span by span)
    batches = getattr(engine.backend, "_batches", None)
    if batches is not None and hasattr(batches, "_submit"):
        wrap(batches, "_submit", "  submit the frame's batch")
    return totals


if __name__ == "__main__":
    sys.exit(main())
