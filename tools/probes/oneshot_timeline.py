#!/usr/bin/env python3
"""Where a one-shot run+read's wall time goes, the plugin against raw wgpu-py doing the same:

    python tools/probes/oneshot_timeline.py [CALLS]

Every native wgpu call is timed (wrapping wgpu-py's ``libf``). For each side it prints, per
native call, the median offset from the one-shot's start at which it begins and how long it
takes, so the gaps between calls (Python: ours, or raw's) compare step by step. On the H200
(2026-12-02) the plugin's extra time was in those gaps (the run's checks before its upload,
the deferred run's record, the read's bookkeeping); the native calls, the GPU wait and the
map took the same on both sides.
"""

from __future__ import annotations

import collections
import gc
import statistics
import sys
import time

import wgpu.backends.wgpu_native._api as native

LOG: list[tuple[float, float, str]] = []


def _timed(fn, name):
    def call(*args):
        t0 = time.perf_counter()
        result = fn(*args)
        LOG.append((t0, time.perf_counter(), name))
        return result

    return call


for _name in [n for n in dir(native.libf) if n.startswith("wgpu")]:
    setattr(native.libf, _name, _timed(getattr(native.libf, _name), _name))

import numpy as np  # noqa: E402

from engine_plugin import abi  # noqa: E402
from engine_plugin.bench.host_cases import RawAxpy, _axpy  # noqa: E402
from engine_plugin.device.context import get_context  # noqa: E402


def main(calls: int) -> None:
    ctx = get_context()
    size = 1024
    variant = _axpy()
    raw = RawAxpy(ctx, size)
    xs = np.arange(size, dtype=np.float32)
    params = {"a": 2.0}

    def plugin() -> object:
        return abi.read(variant.run(size, inputs={"x": xs}, params=params).outputs["y"])

    def reference() -> object:
        return raw.oneshot(xs)

    gc.disable()
    for fn in (plugin, reference):
        for _ in range(50):
            fn()
    for label, fn in (("plugin", plugin), ("raw", reference), ("plugin", plugin), ("raw", reference)):
        steps: dict[tuple[str, int], list[tuple[float, float]]] = collections.defaultdict(list)
        totals = []
        for _ in range(calls):
            LOG.clear()
            t0 = time.perf_counter()
            fn()
            totals.append(time.perf_counter() - t0)
            seen: collections.Counter = collections.Counter()
            for start, end, name in LOG:
                seen[name] += 1
                steps[(name, seen[name])].append((start - t0, end - start))
        print(f"## {label}: median {statistics.median(totals) * 1e6:.1f} µs a one-shot")
        for (name, k), values in sorted(steps.items(), key=lambda kv: statistics.median(v[0] for v in kv[1])):
            if len(values) < calls // 2:
                continue  # extra polls of some calls only
            at = statistics.median(v[0] for v in values) * 1e6
            took = statistics.median(v[1] for v in values) * 1e6
            print(f"  {name + '#' + str(k):44s} at {at:8.1f} µs, takes {took:6.1f} µs")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 500)
