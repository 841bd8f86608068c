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

import numpy as np


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--out", help="write the report here (default: stdout)")
    args = parser.parse_args(argv)
    from engine_plugin.bench import engine_cases, frame_cases
    from engine_plugin.bench.gpu_timing import want_timestamps
    from engine_plugin.engine import EngineConfig
    from engine_plugin.device.context import get_context

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
    rng = np.random.default_rng(1)
    plain, profiled, raw_t = [], [], []
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
            t = time.perf_counter()
            engine.frame()
            plain.append(time.perf_counter() - t)
        time.sleep(0)
        frame_cases._mutate(raw_world, rng)
        t = time.perf_counter()
        raw.frame()
        raw_t.append(time.perf_counter() - t)
    out = io.StringIO()
    out.write(f"adapter: {ctx.adapter_name}\n")
    out.write(f"engine frame median {statistics.median(plain) * 1e3:.3f} ms (unprofiled frames), raw same-work {statistics.median(raw_t) * 1e3:.3f} ms\n")
    out.write(f"profiled frames median {statistics.median(profiled) * 1e3:.3f} ms; engine totals {engine.totals}\n\n")
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


if __name__ == "__main__":
    sys.exit(main())
