#!/usr/bin/env python3
"""Where a bandwidth-bound ``abi.batch()`` loses wall-clock time against the GPU's own rate:

    python tools/probes/batch_slices.py [ROUNDS]

The ``batch_bandwidth`` bench case's plugin side (100 runs of the vec4 axpy over 256 MiB, one
given output), timed per round: host time to encode, when each slice was submitted, wall time
until the GPU is done, and GPU time from timestamps (every compute pass). Then the same with
other slice settings (``FIRST_SLICE_S``, ``SLICE_S``), and raw's one-submission loop beside
them. On the H200 (round 18) the default batch reached 0.89 of the GPU's rate by wall clock
(0.58-0.95 over rounds), raw 0.93: this says whether the GPU waits for the first slice, between
slices, or at the end.
"""

from __future__ import annotations

import importlib
import statistics
import sys
import time


def main(rounds: int) -> None:
    from engine_plugin import abi
    from engine_plugin.bench.gpu_timing import want_timestamps
    from engine_plugin.bench.host_cases import _sync, bandwidth_setup, timed_on_gpu
    from engine_plugin.device.context import get_context

    batch_mod = importlib.import_module("engine_plugin.runtime.batch")

    want_timestamps()
    ctx = get_context()
    print(f"adapter: {ctx.adapter_name}")
    software = "CPU" in ctx.adapter_name
    mib = 8 if software else 256
    reps = 10 if software else 100
    nbytes = mib << 20
    n4, x, y, fast, raw, timer = bandwidth_setup(ctx, nbytes)
    submits: list[float] = []
    plain_submit = batch_mod.submit_records

    def traced(*args, **kwargs):
        submits.append(time.perf_counter())
        return plain_submit(*args, **kwargs)

    batch_mod.submit_records = traced

    def plugin() -> None:
        with abi.batch():
            for _ in range(reps):
                fast.run(n4, inputs={"x": x}, params={"a": 2.0}, outputs={"y": y})

    def measure(fn, label: str) -> None:
        fn()
        _sync(ctx)
        rows = []
        for _ in range(rounds):
            submits.clear()
            wall, gpu, host, t0 = timed_on_gpu(ctx, timer, fn)
            rows.append((wall, gpu or float("nan"), host, [s - t0 for s in submits]))
        fractions = [g / w for w, g, _, _ in rows]
        print(f"## {label}: wall/GPU fraction median {statistics.median(fractions):.3f} ({min(fractions):.3f}-{max(fractions):.3f})")
        for wall, gpu, host, at in rows:
            slices = ", ".join(f"{a * 1e3:.2f}" for a in at)
            print(
                f"  wall {wall * 1e3:7.2f} ms  GPU {gpu * 1e3:7.2f} ms  host {host * 1e3:6.2f} ms  gap {(wall - gpu) * 1e3:6.2f} ms  submits at [{slices}] ms"
            )

    gc_was = __import__("gc").isenabled()
    __import__("gc").disable()
    try:
        measure(plugin, f"abi.batch() default (FIRST_SLICE_S {batch_mod.FIRST_SLICE_S}, SLICE_S {batch_mod.SLICE_S})")
        measure(lambda: raw.many(reps), "raw, one submission")
        first, later = batch_mod.FIRST_SLICE_S, batch_mod.SLICE_S
        for f, s in ((0.0, later), (0.00005, 0.0005), (first, 0.0005), (0.0, 0.002)):
            batch_mod.FIRST_SLICE_S, batch_mod.SLICE_S = f, s
            measure(plugin, f"abi.batch() FIRST_SLICE_S {f}, SLICE_S {s}")
        batch_mod.FIRST_SLICE_S, batch_mod.SLICE_S = first, later
        measure(plugin, "abi.batch() default again")
        measure(lambda: raw.many(reps), "raw again")
    finally:
        if gc_was:
            __import__("gc").enable()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8)
