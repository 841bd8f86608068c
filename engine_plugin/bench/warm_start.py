#!/usr/bin/env python3
"""Warm start: 100 variants from the msgpack cache against lowering the same 100 cold.

The asset is the reference sample (25 variants) crossed with four ``BODY`` splices: 100
variants. Each phase runs in a fresh process (what a game start is), ``--repeat`` times:

  cold   AssetLibrary without a cache: load the asset, lower all 100 variants
  warm   AssetLibrary over a cache a bake filled: load the asset, fetch all 100 variants

The time counted is everything before the first dispatch except the driver's pipeline
compile: library creation, asset read + parse, and lowering or cache reads (imports and
device creation are the same in both and excluded). The pipeline compile of the 100
variants is measured separately, once, for context.

    python -m engine_plugin.bench.warm_start [--repeat 5] [--json out.json]
Target (issue 5): warm >= 10x less time than cold.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from ..files import json_text, write_atomic

BODIES = ["v", "v * T(2)", "v + v", "abs(v)"]


def _specs(schema):
    from engine_plugin.lowering import enumerate_variants

    return [dict(s.as_dict(), BODY=b) for s in enumerate_variants(schema) for b in BODIES]


def phase(root: str, cache: str | None, compile_too: bool) -> dict:
    """One timed start in this process (the child side)."""
    from engine_plugin.assets import AssetLibrary
    from engine_plugin.device.context import get_context
    from engine_plugin.runtime import compile_lowered, lowering_count

    ctx = get_context()  # device creation is not part of either figure
    lowered_before = lowering_count()
    t0 = time.perf_counter()
    lib = AssetLibrary(root, cache=cache, device=ctx)
    ref = lib.load("reference.computeShader")
    prog = ref.program()
    from engine_plugin.lowering import resolve_spec

    lows = [prog.lowered(resolve_spec(prog.schema, s)) for s in _specs(prog.schema)]
    t1 = time.perf_counter()
    out = {"seconds": t1 - t0, "variants": len(lows), "lowered": lowering_count() - lowered_before}
    if cache is not None:
        st = lib.cache.stats()
        out.update(hits=st.hits, misses=st.misses)
    if compile_too:
        t2 = time.perf_counter()
        for low in lows:
            compile_lowered(low, device=ctx)
        out["compile_seconds"] = time.perf_counter() - t2
    return out


def _child(args: list[str]) -> dict:
    res = subprocess.run([sys.executable, "-m", "engine_plugin.bench.warm_start", "--child", *args], capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--child", nargs=3, metavar=("ROOT", "CACHE", "COMPILE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ.setdefault("XDG_RUNTIME_DIR", os.path.join(tempfile.gettempdir(), f"engine-plugin-xdg-{os.getuid()}"))
    os.makedirs(os.environ["XDG_RUNTIME_DIR"], mode=0o700, exist_ok=True)
    if args.child:
        root, cache, compile_too = args.child
        print(json.dumps(phase(root, None if cache == "-" else cache, compile_too == "1")))
        return 0

    work = tempfile.mkdtemp(prefix="warm-start-")
    try:
        root = os.path.join(work, "assets")
        from .harness import bench_kernels

        shutil.copytree(bench_kernels(), root)
        cache = os.path.join(work, "cache")
        bake = _child([root, cache, "1"])  # fills the cache (and validates every variant)
        assert bake["variants"] == 100 and bake["lowered"] == 100, bake
        cold, warm = [], []
        for _ in range(args.repeat):
            c = _child([root, "-", "0"])
            w = _child([root, cache, "0"])
            assert c["lowered"] == 100 and w["lowered"] == 0 and w["hits"] == 100, (c, w)
            cold.append(c["seconds"])
            warm.append(w["seconds"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    c50, w50 = statistics.median(cold), statistics.median(warm)
    ratio = c50 / w50
    print(f"warm start of 100 variants (reference sample x {len(BODIES)} BODY splices), median of {args.repeat} fresh processes")
    print(f"  cold (lower all)         {c50 * 1e3:.1f} ms   (runs: {', '.join(f'{x * 1e3:.0f}' for x in cold)})")
    print(f"  warm (msgpack cache)     {w50 * 1e3:.1f} ms   (runs: {', '.join(f'{x * 1e3:.1f}' for x in warm)})")
    print(f"  speed-up                 {ratio:.1f}x   (target >= 10x: {'met' if ratio >= 10 else 'NOT met'})")
    print(f"  for context, not counted: the driver's pipeline compile of the 100 = {bake['compile_seconds'] * 1e3:.0f} ms")
    if args.json:
        figures = {
            "cold_ms": c50 * 1e3,
            "warm_ms": w50 * 1e3,
            "ratio": ratio,
            "cold_runs_ms": [x * 1e3 for x in cold],
            "warm_runs_ms": [x * 1e3 for x in warm],
            "compile_100_ms": bake["compile_seconds"] * 1e3,
        }
        write_atomic(args.json, (json_text(figures, indent=2) + "\n").encode("utf-8"))
    return 0 if ratio >= 10 else 1


if __name__ == "__main__":
    sys.exit(main())
