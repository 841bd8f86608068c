#!/usr/bin/env python3
"""Where ``variant.run``'s host time goes, against its raw equivalent (issue 15, point 3):

    python tools/bench/profile_host.py [--calls 2000] [--out PATH]

For the plugin's run and the raw run (``bench.host_cases.RawAxpy.once``) it prints the median
wall time of a call, then the time spent inside each wgpu-py method per call (timing wrappers
around the backend's classes, so the two sides' wgpu calls are compared one by one), then a
cProfile of the plugin's run. The same for the one-shot run+read and for recording 100 runs in
``abi.batch()``; last, the run and the batch again with the driver stubbed out (pure Python). On the H200 the run carried ~52 µs over raw that a lavapipe profile did not
show: this says whether that time is in wgpu calls or in Python.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import gc
import io
import pstats
import statistics
import sys
import time
from typing import Any, Callable


def _median(fn: Callable[[], object], calls: int) -> float:
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _best_block(fn: Callable[[], object], calls: int, blocks: int = 5) -> float:
    """Seconds a call over the fastest of ``blocks`` runs of ``calls`` back-to-back calls (no
    timer around each call: what is measured is small enough for that to matter)."""
    best = float("inf")
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def _wrap_wgpu(spent: collections.Counter, counts: collections.Counter) -> None:
    """Time every public method of wgpu-py's native backend classes into ``spent``."""
    import wgpu.backends.wgpu_native as native

    def timed(fn: Any, label: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label] += time.perf_counter() - t0
                counts[label] += 1

        return call

    for name in dir(native):
        cls = getattr(native, name)
        if not (isinstance(cls, type) and name.startswith("GPU")):
            continue
        for attr in list(vars(cls)):
            fn = vars(cls)[attr]
            if attr.startswith("_") or not callable(fn) or isinstance(fn, (type, staticmethod, classmethod)):
                continue
            setattr(cls, attr, timed(fn, f"{name}.{attr}"))


def _stub_wgpu() -> None:
    """Replace wgpu-py's encoders, submit and write_buffer with no-ops (irreversibly, so last):
    what is left of a call is the Python around the driver, ours and raw's, measured without
    the driver's work evicting it from the CPU's caches between calls."""
    import wgpu.backends.wgpu_native as native

    class Pass:
        def set_pipeline(self, *a: Any) -> None: ...
        def set_bind_group(self, *a: Any) -> None: ...
        def dispatch_workgroups(self, *a: Any) -> None: ...
        def end(self) -> None: ...

    class Encoder:
        def clear_buffer(self, *a: Any) -> None: ...
        def copy_buffer_to_buffer(self, *a: Any) -> None: ...
        def begin_compute_pass(self, **k: Any) -> Pass:
            return Pass()

        def finish(self, **k: Any) -> None: ...

    native.GPUDevice.create_command_encoder = lambda self, **k: Encoder()  # type: ignore[method-assign,assignment]
    native.GPUQueue.submit = lambda self, buffers: None  # type: ignore[method-assign,assignment]
    native.GPUQueue.write_buffer = lambda self, *a, **k: None  # type: ignore[method-assign,assignment]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--out", help="write the report here (default: stdout)")
    args = parser.parse_args(argv)
    import numpy as np

    from engine_plugin import abi
    from engine_plugin.bench.host_cases import RawAxpy, _axpy, _sync
    from engine_plugin.device.context import get_context

    ctx = get_context()
    n = 1024
    variant = _axpy()
    raw = RawAxpy(ctx, n)
    x = raw.x
    xs = np.arange(n, dtype=np.float32)
    inputs, params = {"x": x}, {"a": 2.0}
    sides: dict[str, tuple[Callable[[], object], Callable[[], object], int]] = {
        "variant.run": (lambda: variant.run(n, inputs=inputs, params=params), raw.once, args.calls),
        "one-shot run+read": (lambda: abi.read(variant.run(n, inputs={"x": xs}, params=params).outputs["y"]), lambda: raw.oneshot(xs), args.calls // 4),
    }

    def batch100() -> None:
        with abi.batch():
            for _ in range(100):
                variant.run(n, inputs=inputs, params=params)

    raw100 = RawAxpy(ctx, n, outputs=100, slots=100)
    sides["100 runs in abi.batch()"] = (batch100, lambda: raw100.many(100), max(20, args.calls // 50))
    out = io.StringIO()
    print(f"adapter: {ctx.adapter_name}; python {sys.version.split()[0]}", file=out)
    gc.disable()
    for fn_a, fn_b, _ in sides.values():
        for _ in range(50):
            fn_a()
            fn_b()
    _sync(ctx)
    for label, (plugin, rawfn, calls) in sides.items():
        times = [(_median(plugin, calls), _median(rawfn, calls)) for _ in range(3)]
        print(f"\n## {label}: plugin / raw median per call, 3 rounds", file=out)
        for p, r in times:
            print(f"  {p * 1e6:9.1f} µs / {r * 1e6:9.1f} µs = {p / r:.2f}x", file=out)
    spent: collections.Counter = collections.Counter()
    counts: collections.Counter = collections.Counter()
    _wrap_wgpu(spent, counts)
    for label, (plugin, rawfn, calls) in sides.items():
        rows = {}
        for side, fn in (("plugin", plugin), ("raw", rawfn)):
            spent.clear()
            counts.clear()
            _sync(ctx)
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            total = (time.perf_counter() - t0) / calls
            rows[side] = (total, dict(spent), dict(counts))
        print(f"\n## {label}: time inside wgpu-py methods per call (wrapped; µs)", file=out)
        names = sorted(set(rows["plugin"][1]) | set(rows["raw"][1]))
        for name in names:
            p = rows["plugin"][1].get(name, 0.0) / calls * 1e6
            r = rows["raw"][1].get(name, 0.0) / calls * 1e6
            pc = rows["plugin"][2].get(name, 0) / calls
            rc = rows["raw"][2].get(name, 0) / calls
            print(f"  {name:48s} plugin {p:8.1f} ({pc:5.1f} calls)   raw {r:8.1f} ({rc:5.1f} calls)", file=out)
        for side in ("plugin", "raw"):
            total, sp, _ = rows[side]
            inside = sum(sp.values()) / calls
            print(f"  {side}: {total * 1e6:.1f} µs a call, {inside * 1e6:.1f} µs inside wgpu-py, {(total - inside) * 1e6:.1f} µs outside", file=out)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            plugin()
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
        print(f"\n## {label}: cProfile of the plugin side ({calls} calls), by own time", file=out)
        print(text.getvalue(), file=out)
    # Last: the driver stubbed out for good (the one-shot reads back, so it is left out).
    _stub_wgpu()
    print("\n## pure Python: the same calls with wgpu's encoder, submit and writes stubbed", file=out)
    for label, (plugin, rawfn, calls) in sides.items():
        if label.startswith("one-shot"):
            continue
        times = [(_best_block(plugin, calls), _best_block(rawfn, calls)) for _ in range(3)]
        for p, r in times:
            print(f"  {label:28s} plugin {p * 1e6:9.1f} µs, raw {r * 1e6:9.1f} µs: {(p - r) * 1e6:8.1f} µs more (fastest of 5 blocks)", file=out)
    report = out.getvalue()
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
