"""Kernel bandwidth cases: axpy (``y = a*x + 1``) through the plugin against the best raw
wgpu-py kernel known, in the same run, by GPU timestamps with wall clock beside them.

Raw kernels follow the recipe in ``../shared/WGPU_NOTES.md``: vec4 loads, 256-invocation
workgroups, a grid-stride loop (several group counts are tried) or a tight fold; the best of
them is the yardstick each plugin idiom is a ratio of. A raw vec4 *copy kernel* is the
bandwidth yardstick (``copy_buffer_to_buffer`` is not one: ~850 GB/s on the H200). The old
launch-bound shapes (f32, 64-invocation workgroups, a ``gx = 65535`` fold) stay as extra,
labelled rows.

Plugin idioms (both in the README):
- *simplest*: the README's first body, f32 elements, ``@workgroup_size(64)``, one element an
  invocation (``zero_index`` + ``if (i >= zero_n()) { return; }``);
- *fast*: the same body over ``vec4<f32>`` elements with ``workgroup: 256``.
Both get the generated grid-stride entry point and the host's launch cap.

Sizes: ``--sizes 256,1024`` (MiB of x; y is as big); default 256 and 1024 on a GPU, 8 on a
CPU adapter or with ``--quick``. Each figure is the median of ``runs`` (>= 3) runs of
``reps`` dispatches in one submission, with its min-max spread.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import numpy as np
import wgpu

from .. import abi
from ..device.context import get_context
from ..lowering import geometry
from ..lowering.geometry import fold_groups
from .gpu_timing import PassTimer
from .harness import Result, case

STORAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST

SIMPLE_YAML = """\
bindings:
  - { name: x, kind: buffer, access: read, element: f32 }
  - { name: y, kind: buffer, access: read_write, element: f32, count: "n" }
params:
  - { name: a, type: f32 }
"""
SIMPLE_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    y_set(i, params.a * x_get(i) + 1.0);
}
"""
FAST_YAML = """\
bindings:
  - { name: x, kind: buffer, access: read, element: vec4<f32> }
  - { name: y, kind: buffer, access: read_write, element: vec4<f32>, count: "n" }
params:
  - { name: a, type: f32 }
specialize:
  - { name: WG, kind: workgroup, options: [256, 64], default: 256 }
workgroup: WG
"""
FAST_WGSL = """\
@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    y_set(i, params.a * x_get(i) + vec4<f32>(1.0));
}
"""

# Raw kernels. p.n: elements (vec4s or f32s); p.stride: the x stride of a 2-D fold.
_RAW_HEAD = """\
struct P { n: u32, a: f32, stride: u32, pad: u32 }
@group(0) @binding(0) var<storage, read> x: array<ELEM>;
@group(0) @binding(1) var<storage, read_write> y: array<ELEM>;
@group(0) @binding(2) var<uniform> p: P;
"""
RAW_GRID_STRIDE = (
    _RAW_HEAD.replace("ELEM", "vec4<f32>")
    + """\
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let step = nwg.x * 256u;
    for (var i = gid.x; i < p.n; i += step) {
        y[i] = p.a * x[i] + vec4<f32>(1.0);
    }
}
"""
)
RAW_COPY = RAW_GRID_STRIDE.replace("y[i] = p.a * x[i] + vec4<f32>(1.0);", "y[i] = x[i];")
RAW_FOLD = (
    _RAW_HEAD.replace("ELEM", "vec4<f32>")
    + """\
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x + gid.y * p.stride;
    if (i >= p.n) { return; }
    y[i] = p.a * x[i] + vec4<f32>(1.0);
}
"""
)
RAW_OLD = (
    _RAW_HEAD.replace("ELEM", "f32")
    + """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x + gid.y * p.stride;
    if (i >= p.n) { return; }
    y[i] = p.a * x[i] + 1.0;
}
"""
)


class RawKernel:
    """A hand-written axpy-shaped kernel over x and y: own pipeline, one bind group, params once."""

    def __init__(self, ctx: Any, label: str, code: str, x: Any, y: Any, n: int, groups: tuple[int, int, int], stride: int = 0):
        dev = ctx.device
        self.ctx, self.label, self.groups = ctx, label, groups
        self.pipeline = dev.create_compute_pipeline(layout="auto", compute={"module": dev.create_shader_module(code=code), "entry_point": "main"})
        p = np.zeros(4, dtype=np.uint32)
        p[0], p[2] = n, stride
        p[1:2].view(np.float32)[0] = 2.0
        self.params = dev.create_buffer_with_data(data=p, usage=wgpu.BufferUsage.UNIFORM)
        self.bind_group = dev.create_bind_group(
            layout=self.pipeline.get_bind_group_layout(0),
            entries=[{"binding": 0, "resource": {"buffer": x}}, {"binding": 1, "resource": {"buffer": y}}, {"binding": 2, "resource": {"buffer": self.params}}],
        )

    def many(self, reps: int) -> None:
        enc = self.ctx.device.create_command_encoder()
        cp = enc.begin_compute_pass()
        cp.set_pipeline(self.pipeline)
        cp.set_bind_group(0, self.bind_group)
        for _ in range(reps):
            cp.dispatch_workgroups(*self.groups)
        cp.end()
        self.ctx.queue.submit([enc.finish()])


def _grid_stride(ctx, label, code, x, y, n, groups):
    return RawKernel(ctx, label, code, x, y, n, (min(groups, -(-n // 256)) or 1, 1, 1))


def _folded(ctx, label, code, x, y, n, wg, max_groups, old_fold=False):
    total = -(-n // wg)
    if old_fold:  # the fold every host wrote before the tight one: gx = 65535
        gx = min(total, max_groups)
        groups = (gx, -(-total // gx), 1)
    else:
        groups = fold_groups(total, max_groups) or (1, 1, 1)
    return RawKernel(ctx, label, code, x, y, n, groups, stride=groups[0] * wg)


def _sync(ctx) -> None:
    from ..runtime.output import read_words

    buf = ctx.cache("bench").get("sync")
    if buf is None:
        buf = ctx.cache("bench")["sync"] = ctx.device.create_buffer(size=16, usage=STORAGE)
    read_words(buf, 0, 4)


class Measure:
    """GB/s of ``many(reps)`` by GPU timestamps and by wall clock, over ``runs`` runs."""

    def __init__(self, ctx: Any, moved: int, reps: int, runs: int):
        self.ctx, self.moved, self.reps, self.runs = ctx, moved, reps, runs
        self.timer = PassTimer(ctx.device)

    def __call__(self, many: Callable[[int], None]) -> dict:
        many(self.reps)  # warm: pipelines, pooled buffers, first-touch of memory
        _sync(self.ctx)
        gpu, wall = [], []
        for _ in range(self.runs):
            t0 = time.perf_counter()
            with self.timer.capture():
                many(self.reps)
            _sync(self.ctx)
            wall.append(self.moved * self.reps / (time.perf_counter() - t0) / 1e9)
            seconds = self.timer.seconds()
            if seconds:
                gpu.append(self.moved * self.reps / seconds / 1e9)
        return {"gpu": _summary(gpu), "wall": _summary(wall)}


def _summary(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": len(values)}


def _fig(m: dict, key: str) -> str:
    s = m[key]
    return "-" if s is None else f"{s['median']:,.4g} ({s['min']:,.4g}-{s['max']:,.4g})"


def _plugin_many(variant: Any, n: int, x: Any, y: Any) -> Callable[[int], None]:
    def many(reps: int) -> None:
        with abi.batch():
            for _ in range(reps):
                variant.run(n, inputs={"x": x}, params={"a": 2.0}, outputs={"y": y})

    return many


def _check_small(ctx: Any, simple: Any, fast: Any, fast64: Any) -> None:
    """The idioms compute axpy (a correctness check before timing anything)."""
    xs = np.arange(4 * 1001, dtype=np.float32)
    want = 2.0 * xs + 1.0
    for v, x in ((simple, xs), (fast, xs.reshape(-1, 4)), (fast64, xs.reshape(-1, 4))):
        got = abi.read(v.run(len(x), inputs={"x": x}, params={"a": 2.0}).outputs["y"])
        assert np.array_equal(np.asarray(got).ravel(), want), "plugin axpy is wrong"


def _with_budget(ctx: Any, budget: int | None, many: Callable[[int], None]) -> Callable[[int], None]:
    """``many`` run with the launch cap's GPU/CPU budget set to ``budget`` invocations."""

    def run(reps: int) -> None:
        if budget is None:
            return many(reps)
        saved = dict(geometry.INVOCATION_BUDGET)
        geometry.INVOCATION_BUDGET.update(gpu=budget, cpu=budget)
        ctx.cache("group_cap").clear()
        try:
            many(reps)
        finally:
            geometry.INVOCATION_BUDGET.update(saved)
            ctx.cache("group_cap").clear()

    return run


def _sizes(opts: dict, software: bool) -> list[int]:
    if opts.get("sizes"):
        return [int(s) for s in opts["sizes"]]
    return [8] if (software or opts.get("quick")) else [256, 1024]


@case("kernels")
def bench_kernels_bandwidth(opts) -> list[Result]:
    """axpy in the fast and the simplest idiom against the best raw kernel (GB/s, GPU timestamps)."""
    ctx = get_context()
    software = "CPU" in ctx.adapter_name
    reps = int(opts.get("reps") or (3 if software else 20))
    runs = max(3, int(opts.get("runs") or 5))
    max_groups = ctx.limit("max-compute-workgroups-per-dimension")
    program = abi.program(key="bench/axpy_simple", schema=abi.parse(SIMPLE_YAML, "bench/axpy_simple/bindings.yaml"), wgsl=SIMPLE_WGSL)
    simple = program.variant()
    fast_program = abi.program(key="bench/axpy_fast", schema=abi.parse(FAST_YAML, "bench/axpy_fast/bindings.yaml"), wgsl=FAST_WGSL)
    fast, fast64 = fast_program.variant(), fast_program.variant(specialize={"WG": "64"})
    _check_small(ctx, simple, fast, fast64)
    results: list[Result] = []
    for mib in _sizes(opts, software):
        nbytes = mib << 20
        n4, n1 = nbytes // 16, nbytes // 4
        x = ctx.device.create_buffer_with_data(data=np.ones(n1, dtype=np.float32), usage=STORAGE)
        y = ctx.device.create_buffer(size=nbytes, usage=STORAGE)
        measure = Measure(ctx, 2 * nbytes, reps, runs)  # bytes read once and written once
        raws = {f"raw vec4 grid-stride wg256 x{g} groups": _grid_stride(ctx, "gs", RAW_GRID_STRIDE, x, y, n4, g) for g in (2048, 8192, 32768)}
        raws["raw vec4 tight fold wg256, 1 element/invocation"] = _folded(ctx, "fold", RAW_FOLD, x, y, n4, 256, max_groups)
        timed = {name: measure(k.many) for name, k in raws.items()}
        copy = measure(_grid_stride(ctx, "copy", RAW_COPY, x, y, n4, 8192).many)
        old = measure(_folded(ctx, "old", RAW_OLD, x, y, n1, 64, max_groups, old_fold=True).many)
        plugin = {
            "fast": measure(_plugin_many(fast, n4, x, y)),
            "simplest": measure(_plugin_many(simple, n1, x, y)),
            "vec4 wg64": measure(_plugin_many(fast64, n4, x, y)),
        }
        default = geometry.INVOCATION_BUDGET["cpu" if software else "gpu"]
        budgets = {b: measure(_with_budget(ctx, b, _plugin_many(fast, n4, x, y))) for b in (1 << 21, 1 << 22, 1 << 23, 1 << 24) if b != default}
        key = "gpu" if all(m["gpu"] for m in timed.values()) else "wall"
        best_name = max(timed, key=lambda k: timed[k][key]["median"])
        best = timed[best_name]
        clock = "GPU timestamps" if key == "gpu" else "wall clock (no timestamp-query)"

        def row(label: str, m: dict, ref: dict, ref_name: str, target: str = "") -> Result:
            return Result(
                f"axpy {mib} MiB: {label} (GB/s, {clock})",
                m[key]["median"],
                ref[key]["median"],
                "GB/s",
                target=target,
                note=f"vs {ref_name}; gpu {_fig(m, 'gpu')} vs {_fig(ref, 'gpu')}; wall {_fig(m, 'wall')} vs {_fig(ref, 'wall')}",
                extra={"bytes": nbytes, "reps": reps, "clock": key, "plugin_gbs": m, "raw_gbs": ref, "raw_kernel": ref_name},
            )

        results.append(row("fast idiom (vec4, workgroup 256, generated grid-stride)", plugin["fast"], best, best_name, ">= 0.9x"))
        results.append(row("simplest idiom (README body: f32, workgroup 64)", plugin["simplest"], best, best_name, ">= 0.5x"))
        results.append(row("extra: vec4, workgroup 64, same simple body", plugin["vec4 wg64"], best, best_name))
        results.append(row("yardstick: best raw kernel vs raw vec4 copy kernel", best, copy, "raw vec4 copy kernel, wg256 x8192"))
        for b, m in budgets.items():
            results.append(
                row(f"extra: fast idiom with the launch cap at 2^{b.bit_length() - 1} invocations (default 2^{default.bit_length() - 1})", m, best, best_name)
            )
        for name, m in timed.items():
            if name != best_name:
                results.append(row(f"raw: {name} vs best raw", m, best, best_name))
        results.append(row("launch-bound (old case i): raw f32 wg64 gx=65535 fold vs best raw", old, best, best_name))
        results.append(row("launch-bound (old case i): plugin simplest vs that old raw shape", plugin["simplest"], old, "raw f32 wg64 gx=65535 fold"))
        del x, y  # cached bind groups keep them alive; never destroy what a cached group names
    return results
