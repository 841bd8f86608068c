#!/usr/bin/env python3
"""Where ``variant.run``'s host time over raw goes (issue 15, point 3):

    python tools/probes/run_split.py [CALLS]

Four loops over the ``run_host`` bench case (1,024 f32 axpy, params unchanged), interleaved,
median per call over rounds:

- ``raw``: the bench's raw loop (its own pipeline, bind group and buffers);
- ``raw calls, plugin objects``: the same wgpu calls made by hand on the plugin's pipeline, bind
  group, params ring slot and a pooled output buffer (does anything about the objects cost?);
- ``submit only``: the runtime's own submit of a repeat (``Variant._submit_now``), without the
  checks, pool and Output around it;
- ``variant.run``: the whole call.

The differences say whether the time is in the objects, the submit path or the Python of
the call.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time


def main(calls: int) -> None:
    from engine_plugin.bench.host_cases import RawAxpy, _axpy, _sync
    from engine_plugin.device.context import get_context

    ctx = get_context()
    print(f"adapter: {ctx.adapter_name}")
    n = 1024
    variant = _axpy()
    raw = RawAxpy(ctx, n)
    inputs, params = {"x": raw.x}, {"a": 2.0}
    for _ in range(50):
        variant.run(n, inputs=inputs, params=params)
    rep = variant._repeat
    key, bind_group = variant._repeat_group
    out = variant.run(n, inputs=inputs, params=params).outputs["y"]  # holds a pooled buffer
    buf = out._buffer
    nbytes = rep.plan[0][2]
    offset = variant._ring.place(ctx.queue, rep.data)
    device, queue, pipeline = ctx.device, ctx.queue, variant.compiled.pipeline

    def raw_plugin_objects() -> None:
        enc = device.create_command_encoder()
        enc.clear_buffer(buf, 0, nbytes)
        cp = enc.begin_compute_pass()
        cp.set_pipeline(pipeline)
        cp.set_bind_group(0, bind_group, [offset])
        cp.dispatch_workgroups(*rep.groups)
        cp.end()
        queue.submit([enc.finish()])

    ops = [("clear", buf, 0, nbytes)]

    def submit_only() -> None:
        variant._submit_now(rep.data, bind_group, rep.groups, ops, [], clears_only=True)

    def run() -> None:
        variant.run(n, inputs=inputs, params=params)

    def same() -> None:
        raw.once(write_params=False)

    loops = {"raw": same, "raw calls, plugin objects": raw_plugin_objects, "submit only": submit_only, "variant.run": run}
    for fn in loops.values():
        for _ in range(100):
            fn()
    _sync(ctx)
    got: dict[str, list[float]] = {k: [] for k in loops}
    gc.disable()
    for _ in range(7):
        for name, fn in loops.items():
            samples = []
            for _ in range(calls):
                t0 = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - t0)
            got[name].append(statistics.median(samples))
            _sync(ctx)
    gc.enable()
    base = statistics.median(got["raw"])
    for name, values in got.items():
        m = statistics.median(values)
        print(f"  {name:28s} {m * 1e6:7.1f} µs  ({min(values) * 1e6:.1f}-{max(values) * 1e6:.1f})  {m / base:.2f}x raw")
    del out


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
