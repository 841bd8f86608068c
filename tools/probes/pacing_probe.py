#!/usr/bin/env python3
"""Where a slow ``frame()`` spends its time under GPU work that outlasts the frame period (the
pacing test's set-up, tests/engine/pacing_support.py), on whatever adapter this machine has:

    python tools/probes/pacing_probe.py [--reps 960] [--frames 60]

Prints the GPU work per frame, frame() host time p50/p99/max, and a cProfile of the slowest
frame (each frame is profiled on its own)."""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys

import numpy as np


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=960)
    parser.add_argument("--frames", type=int, default=60)
    args = parser.parse_args(argv)
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "engine"))
    import time

    import pacing_support as ps

    world, engine, applied = ps.make(reps=args.reps)
    engine.invalidate()
    work = ps.gpu_work_seconds(world, engine, applied)
    print(f"adapter {engine.stats().gpu_active if hasattr(engine, 'stats') else ''}; gpu work {work * 1e3:.1f} ms a frame")
    times, profiles = [], []
    next_t = time.perf_counter()
    for f in range(args.frames):
        for k in range(64):
            world.set_tile(k, "h", (0, 0), float(f))
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        engine.frame()
        prof.disable()
        times.append(time.perf_counter() - t0)
        profiles.append(prof)
        next_t += ps.PERIOD
        time.sleep(max(0.0, next_t - time.perf_counter()))
    t = np.array(times)
    st = engine.totals
    print(f"frame() host p50 {np.percentile(t, 50) * 1e3:.2f} ms, p99 {np.percentile(t, 99) * 1e3:.2f} ms, max {t.max() * 1e3:.2f} ms; "
          f"frames over 5 ms: {[(i, round(x * 1e3, 1)) for i, x in enumerate(times) if x > 0.005]}; deferred {st.deferred}, frames_in_flight {st.frames_in_flight}")
    worst = int(t.argmax())
    out = io.StringIO()
    pstats.Stats(profiles[worst], stream=out).sort_stats("cumulative").print_stats(35)
    print(f"-- cProfile of frame {worst} ({times[worst] * 1e3:.1f} ms)")
    print(out.getvalue())
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
