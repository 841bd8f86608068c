"""Host-path cases (issue 15, point 3): ``variant.run``, 100 runs in ``abi.batch()`` and the
one-shot run-then-read, each against raw wgpu-py doing the same work written the best way
known, in the same run.

Method: a figure is measured in ``rounds`` (>= 3) rounds; in each round the plugin and its raw
reference are timed back to back (median of ``repeat`` calls each), so the ratio of a round
compares like with like. Reported: the median over rounds with its min-max, and the ratio's
median with its min-max. Where the GPU's own time matters (bandwidth-bound batches), GPU time
comes from timestamps on every compute pass (:class:`PassTimer`), wall clock beside it.

Raw references:
- ``run_host``: one encoder with the output's clear (the runtime zeroes every output it
  allocates) and one pass with one dispatch, one submit; the bind group made once. The params
  are unchanged run to run: the runtime's repeat binds the slot it wrote last time without
  writing it again, and so does the raw reference; an extra row writes them every call.
- ``batch100``: the same 100 runs in one encoder: 100 output clears, one pass, the pipeline set
  once, 100 ``set_bind_group`` (bind groups made once, one per output) and dispatches, params
  staged in one array and written with one ``write_buffer``, one submit.
- extra rows of ``run_host`` and ``batch100``: the same raw calls with the clears and the pass
  encoded through wgpu-native's C functions, as the runtime encodes its own since round 21
  (``runtime/native.py``): raw written with the runtime's shortcut, so what is left of the
  ratio is the runtime's own Python.
- ``batch_bandwidth``: 100 bandwidth-bound dispatches of the best raw kernel shape (vec4, 256
  invocations a group, a tight fold) in one submission, against the plugin's fast idiom.
- ``oneshot``: one upload of x, one params write, one encoder with clear + dispatch + copy to
  a persistent MAP_READ staging buffer, one submit, one map (wgpu-py's ``READ_NOSYNC`` mode,
  which skips the empty submit ``map_async`` adds), waited for by polling the device in the
  calling thread (no poll-thread handoffs: the best raw way known), ``read_mapped``.
"""

from __future__ import annotations

import gc
import statistics
import time
from typing import Any, Callable

import numpy as np
import wgpu

from .. import abi
from ..device.context import get_context
from ..device.mapping import map_submitted
from ..lowering.geometry import fold_groups
from ..runtime.batch import submits_block
from ..runtime.native import begin_pass, clear_buffer
from .axpy import AXPY_WGSL, AXPY_YAML, RAW_WGSL, STORAGE
from .gpu_timing import PassTimer
from .harness import Result, case
from .kernel_cases import FAST_WGSL, FAST_YAML, RAW_FOLD, RawKernel


def _axpy() -> Any:
    return abi.program(key="bench/host_axpy", schema=abi.parse(AXPY_YAML, "bench/host_axpy/bindings.yaml"), wgsl=AXPY_WGSL).variant()


class RawAxpy:
    """Raw wgpu-py axpy over ``n`` f32: a pipeline with a dynamic-offset params binding,
    ``outputs`` output buffers with one bind group each, params slots for ``slots`` runs."""

    def __init__(self, ctx: Any, n: int, outputs: int = 1, slots: int = 1):
        dev = self.dev = ctx.device
        self.queue = ctx.queue
        self.n = n
        bgl = dev.create_bind_group_layout(
            entries=[
                {"binding": 0, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": wgpu.BufferBindingType.read_only_storage}},
                {"binding": 1, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": wgpu.BufferBindingType.storage}},
                {"binding": 2, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": wgpu.BufferBindingType.uniform, "has_dynamic_offset": True}},
            ]
        )
        module = dev.create_shader_module(code=RAW_WGSL)
        self.pipeline = dev.create_compute_pipeline(
            layout=dev.create_pipeline_layout(bind_group_layouts=[bgl]), compute={"module": module, "entry_point": "main"}
        )
        self.x = dev.create_buffer_with_data(data=np.arange(n, dtype=np.float32), usage=STORAGE)
        self.nbytes = 4 * n
        self.ys = [dev.create_buffer(size=self.nbytes, usage=STORAGE) for _ in range(outputs)]
        self.stride = max(16, ctx.limit("min-uniform-buffer-offset-alignment"))
        self.params = dev.create_buffer(size=self.stride * slots, usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
        self.groups = fold_groups(-(-n // 64), ctx.limit("max-compute-workgroups-per-dimension")) or (1, 1, 1)
        self.bind_groups = [
            dev.create_bind_group(
                layout=bgl,
                entries=[
                    {"binding": 0, "resource": {"buffer": self.x}},
                    {"binding": 1, "resource": {"buffer": y}},
                    {"binding": 2, "resource": {"buffer": self.params, "offset": 0, "size": 16}},
                ],
            )
            for y in self.ys
        ]
        one = np.zeros(4, dtype=np.uint32)
        one[0], one[2] = n, self.groups[0] * 64
        one[1:2].view(np.float32)[0] = 2.0
        self.p = one
        self.staged = np.zeros((slots, self.stride // 4), dtype=np.uint32)
        self.staged[:, :4] = one
        self.staging = dev.create_buffer(size=self.nbytes, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)

    def once(self, write_params: bool = True) -> None:
        """variant.run's raw equivalent: params, clear, dispatch, one submit (without the
        params write: what a repeat of unchanged params costs, raw or through the runtime)."""
        if write_params:
            self.queue.write_buffer(self.params, 0, self.p)
        enc = self.dev.create_command_encoder()
        enc.clear_buffer(self.ys[0], 0, self.nbytes)
        cp = enc.begin_compute_pass()
        cp.set_pipeline(self.pipeline)
        cp.set_bind_group(0, self.bind_groups[0], [0])
        cp.dispatch_workgroups(*self.groups)
        cp.end()
        self.queue.submit([enc.finish()])

    def once_native(self) -> None:
        """:meth:`once` with the clear and the pass encoded through wgpu-native's C functions,
        as the runtime encodes them (``runtime/native.py``): the reference that shares that
        shortcut, so a figure against it shows what the runtime's own Python costs."""
        enc = self.dev.create_command_encoder()
        clear_buffer(enc, self.ys[0], 0, self.nbytes)
        cp = begin_pass(enc)
        cp.run(self.pipeline, self.bind_groups[0], 0, self.groups)
        cp.end()
        self.queue.submit([enc.finish()])

    def many_native(self, count: int) -> None:
        """:meth:`many` encoded through wgpu-native's C functions (see :meth:`once_native`)."""
        self.queue.write_buffer(self.params, 0, self.staged[:count])
        enc = self.dev.create_command_encoder()
        for y in self.ys[:count]:
            clear_buffer(enc, y, 0, self.nbytes)
        cp = begin_pass(enc)
        stride, pipeline, groups = self.stride, self.pipeline, self.groups
        for k in range(count):
            cp.run(pipeline, self.bind_groups[k], k * stride, groups)
        cp.end()
        self.queue.submit([enc.finish()])

    def many(self, count: int) -> None:
        """``count`` runs into ``count`` outputs in one submission (params written once)."""
        self.queue.write_buffer(self.params, 0, self.staged[:count])
        enc = self.dev.create_command_encoder()
        for y in self.ys[:count]:
            enc.clear_buffer(y, 0, self.nbytes)
        cp = enc.begin_compute_pass()
        cp.set_pipeline(self.pipeline)
        stride = self.stride
        for k in range(count):
            cp.set_bind_group(0, self.bind_groups[k], [k * stride])
            cp.dispatch_workgroups(*self.groups)
        cp.end()
        self.queue.submit([enc.finish()])

    def oneshot(self, xs: np.ndarray) -> np.ndarray:
        """Upload, run and read back in one submit and one map."""
        self.queue.write_buffer(self.x, 0, xs)
        self.queue.write_buffer(self.params, 0, self.p)
        enc = self.dev.create_command_encoder()
        enc.clear_buffer(self.ys[0], 0, self.nbytes)
        cp = enc.begin_compute_pass()
        cp.set_pipeline(self.pipeline)
        cp.set_bind_group(0, self.bind_groups[0], [0])
        cp.dispatch_workgroups(*self.groups)
        cp.end()
        enc.copy_buffer_to_buffer(self.ys[0], 0, self.staging, 0, self.nbytes)
        self.queue.submit([enc.finish()])
        # The map is waited for in this thread, polling the device without waiting in the
        # driver: no poll thread to wake and no wake back (the best way known; the plugin's
        # urgent waits do the same first, device/poller.py).
        promise = map_submitted(self.staging, self.nbytes)
        done, poll = promise._thread_event, self.dev._poll
        while not done.is_set():
            poll(False)
        promise.sync_wait()
        data = self.staging.read_mapped(0, self.nbytes, copy=True)
        self.staging.unmap()
        return np.frombuffer(data, dtype=np.float32)


def _sync(ctx: Any) -> None:
    from ..runtime.output import read_words

    buf = ctx.cache("bench").get("sync")
    if buf is None:
        buf = ctx.cache("bench")["sync"] = ctx.device.create_buffer(size=16, usage=STORAGE)
    read_words(buf, 0, 4)


def _median_call(fn: Callable[[], object], repeat: int, before: Callable[[], object] | None = None) -> float:
    """Median seconds of ``fn`` over ``repeat`` calls (``before`` runs untimed before each)."""
    samples = []
    for _ in range(repeat):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": len(values)}


def _rounds(fns: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list[Any]]:
    """Each round calls every measurement once, back to back; answers the values per name."""
    out: dict[str, list[Any]] = {k: [] for k in fns}
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            for name, fn in fns.items():
                out[name].append(fn())
    finally:
        if gc_was:
            gc.enable()
    return out


def _us(s: dict) -> str:
    return f"{s['median'] * 1e6:,.1f} µs ({s['min'] * 1e6:,.1f}-{s['max'] * 1e6:,.1f})"


def _ratio_row(name: str, plugin: list[float], raw: list[float], target: str, note: str, unit: str = "s", extra: dict | None = None) -> Result:
    ratios = [p / r for p, r in zip(plugin, raw)]
    rs = _spread(ratios)
    ps, qs = _spread(plugin), _spread(raw)
    return Result(
        name,
        ps["median"],
        qs["median"],
        unit,
        target=target,
        note=f"per-round ratios {rs['median']:.2f}x, range {rs['min']:.2f}-{rs['max']:.2f} over {rs['runs']} rounds; plugin {_us(ps)}, raw {_us(qs)}; {note}",
        extra={"plugin_s": ps, "raw_s": qs, "ratio": rs, **(extra or {})},
    )


def _opts(opts: dict, quick: int, full: int) -> tuple[int, int]:
    rounds = max(3, int(opts.get("runs") or 5))
    return rounds, (quick if opts.get("quick") else full)


@case("run_host")
def bench_run_host(opts) -> list[Result]:
    """variant.run host cost against the raw calls it makes (params write, clear, dispatch, submit)."""
    ctx = get_context()
    n = 1024
    variant = _axpy()
    raw = RawAxpy(ctx, n)
    x = raw.x
    inputs, params = {"x": x}, {"a": 2.0}
    rounds, repeat = _opts(opts, 200, 2000)
    run = lambda: variant.run(n, inputs=inputs, params=params)  # noqa: E731
    same = lambda: raw.once(write_params=False)  # noqa: E731
    for _ in range(50):
        run()
        raw.once()
        same()
        raw.once_native()
    _sync(ctx)
    got = _rounds(
        {
            "plugin": lambda: _median_call(run, repeat),
            "raw": lambda: _median_call(same, repeat),
            "raw_params": lambda: _median_call(raw.once, repeat),
            "raw_native": lambda: _median_call(raw.once_native, repeat),
        },
        rounds,
    )
    return [
        _ratio_row(
            "variant.run host cost (1,024 f32, pooled output cleared, params unchanged)",
            got["plugin"],
            got["raw"],
            "<= 1.15x",
            "raw makes the calls the run makes: clear + dispatch + submit (unchanged params are not written again, by either)",
        ),
        _ratio_row(
            "extra: variant.run vs raw writing its params every call (the earlier reference)",
            got["plugin"],
            got["raw_params"],
            "",
            "raw: params write + clear + dispatch + submit",
        ),
        _ratio_row(
            "extra: variant.run vs raw encoding through wgpu-native's C functions, as the runtime does",
            got["plugin"],
            got["raw_native"],
            "",
            "raw: the same calls, its clear and pass through runtime/native.py: what the runtime's own Python costs",
        ),
    ]


@case("batch100")
def bench_batch(opts) -> list[Result]:
    """100 small runs in abi.batch() against the same 100 runs encoded by hand (host time from
    an idle GPU, and time until the GPU is done)."""
    ctx = get_context()
    n = 1024
    variant = _axpy()
    raw = RawAxpy(ctx, n, outputs=100, slots=100)
    x = raw.x
    rounds, repeat = _opts(opts, 10, 40)

    def plugin(slices: bool | None) -> Callable[[], None]:
        def go() -> None:
            with abi.batch(slices=slices):
                for _ in range(100):
                    variant.run(n, inputs={"x": x}, params={"a": 2.0})

        return go

    def host(fn: Callable[[], None]) -> Callable[[], float]:
        return lambda: _median_call(fn, repeat, before=lambda: _sync(ctx))

    def done(fn: Callable[[], None]) -> Callable[[], float]:
        def one() -> None:
            fn()
            _sync(ctx)

        return lambda: _median_call(one, repeat, before=lambda: _sync(ctx))

    default, sliced, whole = plugin(None), plugin(True), plugin(False)
    many = lambda: raw.many(100)  # noqa: E731
    many_native = lambda: raw.many_native(100)  # noqa: E731
    for fn in (default, sliced, whole, many, many_native):
        fn()
    _sync(ctx)
    got = _rounds(
        {
            "host": host(default),
            "host_raw": host(many),
            "done": done(default),
            "done_sliced": done(sliced),
            "done_whole": done(whole),
            "done_raw": done(many),
            "host_sliced": host(sliced),
            "host_whole": host(whole),
            "host_raw_native": host(many_native),
        },
        rounds,
    )
    note = "raw: 100 clears, one pass, params written once, one submit"
    mode = "one submission: CPU adapter" if submits_block(ctx) else "sliced"
    return [
        _ratio_row(f"100 runs in abi.batch() ({mode}): host time", got["host"], got["host_raw"], "<= 1.15x", note),
        _ratio_row(f"100 runs in abi.batch() ({mode}): until GPU done", got["done"], got["done_raw"], "", note),
        _ratio_row("extra: abi.batch(slices=True): host time", got["host_sliced"], got["host_raw"], "", note),
        _ratio_row("extra: abi.batch(slices=False): host time", got["host_whole"], got["host_raw"], "", note),
        _ratio_row("slices=True vs slices=False, until GPU done", got["done_sliced"], got["done_whole"], "", "plugin sliced / plugin one submission"),
        _ratio_row(
            f"extra: 100 runs in abi.batch() ({mode}) vs raw encoding through wgpu-native's C functions, as the runtime does",
            got["host"],
            got["host_raw_native"],
            "",
            "raw: the same 100 runs, clears and pass through runtime/native.py: what the runtime's own Python costs",
        ),
    ]


@case("batch_bandwidth")
def bench_batch_bandwidth(opts) -> list[Result]:
    """100 bandwidth-bound runs in abi.batch(): wall-clock rate against the GPU's own rate
    (timestamps) of the same runs, and the raw kernel's in one submission."""
    ctx = get_context()
    software = "CPU" in ctx.adapter_name
    mib = int((opts.get("sizes") or [8 if (software or opts.get("quick")) else 256])[0])
    nbytes = mib << 20
    reps = int(opts.get("reps") or (10 if software else 100))
    rounds = max(3, int(opts.get("runs") or 5))
    n4, x, y, fast, raw, timer = bandwidth_setup(ctx, nbytes)
    moved = 2 * nbytes * reps

    def plugin(slices: bool | None) -> Callable[[], None]:
        def go() -> None:
            with abi.batch(slices=slices):
                for _ in range(reps):
                    fast.run(n4, inputs={"x": x}, params={"a": 2.0}, outputs={"y": y})

        return go

    def measure(fn: Callable[[], None]) -> Callable[[], tuple[float, float | None, float]]:
        return lambda: timed_on_gpu(ctx, timer, fn)[:3]

    sliced, whole = plugin(None), plugin(False)
    for fn in (sliced, whole, lambda: raw.many(reps)):
        fn()
    _sync(ctx)
    got = _rounds({"sliced": measure(sliced), "whole": measure(whole), "raw": measure(lambda: raw.many(reps))}, rounds)
    results = []
    clock = "GPU timestamps" if timer.available else "no timestamp-query: wall only"
    for key, label in (("sliced", "abi.batch()"), ("whole", "abi.batch(slices=False)"), ("raw", "raw, one submission")):
        walls = [moved / w / 1e9 for w, _, _ in got[key]]
        gpus = [moved / g / 1e9 for _, g, _ in got[key] if g]
        fractions = [(moved / w) / (moved / g) for w, g, _ in got[key] if g]
        ws, gs = _spread(walls), _spread(gpus) if gpus else None
        fs = _spread(fractions) if fractions else None
        results.append(
            Result(
                f"{reps} bandwidth-bound runs ({mib} MiB vec4 axpy) in {label}: wall rate / GPU rate",
                fs["median"] if fs else ws["median"],
                None,
                "x",
                target=">= 0.9" if key == "sliced" else "",
                note=(
                    f"wall {ws['median']:,.4g} GB/s ({ws['min']:,.4g}-{ws['max']:,.4g}); "
                    + (f"GPU {gs['median']:,.4g} GB/s ({gs['min']:,.4g}-{gs['max']:,.4g}); " if gs else "")
                    + (f"fraction {fs['min']:.2f}-{fs['max']:.2f} over {fs['runs']} rounds; {clock}" if fs else clock)
                ),
                extra={"wall_gbs": ws, "gpu_gbs": gs, "fraction": fs, "bytes": nbytes, "reps": reps},
            )
        )
    hosts = {k: [h for _, _, h in got[k]] for k in got}
    results.append(
        _ratio_row(
            f"{reps} bandwidth-bound runs in abi.batch(): host time to encode and submit", hosts["sliced"], hosts["raw"], "", "raw: one pass, one submit"
        )
    )
    return results


def bandwidth_setup(ctx: Any, nbytes: int) -> tuple[int, Any, Any, Any, RawKernel, PassTimer]:
    """The bandwidth-bound batch case's pieces over ``nbytes`` of vec4s: (vec4 count, x, y, the
    fast-idiom axpy variant, the raw fold kernel over the same buffers, a pass timer)."""
    n4 = nbytes // 16
    x = ctx.device.create_buffer_with_data(data=np.ones(nbytes // 4, dtype=np.float32), usage=STORAGE)
    y = ctx.device.create_buffer(size=nbytes, usage=STORAGE)
    fast = abi.program(key="bench/host_fast", schema=abi.parse(FAST_YAML, "bench/host_fast/bindings.yaml"), wgsl=FAST_WGSL).variant()
    groups = fold_groups(-(-n4 // 256), ctx.limit("max-compute-workgroups-per-dimension")) or (1, 1, 1)
    raw = RawKernel(ctx, "fold", RAW_FOLD, x, y, n4, groups, stride=groups[0] * 256)
    return n4, x, y, fast, raw, PassTimer(ctx.device)


def timed_on_gpu(ctx: Any, timer: PassTimer, fn: Callable[[], None]) -> tuple[float, float | None, float, float]:
    """(wall seconds until the GPU is done, GPU seconds of its passes, host seconds to encode
    and submit, the start's perf_counter) of one call of ``fn`` from an idle GPU."""
    _sync(ctx)
    t0 = time.perf_counter()
    with timer.capture():
        fn()
        host = time.perf_counter() - t0
    _sync(ctx)
    wall = time.perf_counter() - t0
    return wall, timer.seconds(), host, t0


@case("oneshot")
def bench_oneshot(opts) -> list[Result]:
    """abi.read(variant.run(...).outputs["y"]) with a numpy input, against the raw floor: one
    submit carrying the dispatch and the copy, one map."""
    from wgpu.utils.compute import compute_with_buffers

    from ..runtime.deferred import flush

    ctx = get_context()
    n = 1024
    variant = _axpy()
    raw = RawAxpy(ctx, n)
    xs = np.arange(n, dtype=np.float32)
    want = 2.0 * xs + 1.0
    rounds, repeat = _opts(opts, 30, 200)

    def plugin() -> np.ndarray:
        return abi.read(variant.run(n, inputs={"x": xs}, params={"a": 2.0}).outputs["y"])

    def two_submits() -> np.ndarray:
        run = variant.run(n, inputs={"x": xs}, params={"a": 2.0})
        flush()  # the run on the queue at once, as before deferral: then the read's own submit
        return abi.read(run.outputs["y"])

    def cwb() -> Any:
        return compute_with_buffers({0: xs}, {1: (n, "f")}, RAW_CWB_WGSL, n=n)

    for fn in (plugin, two_submits, lambda: raw.oneshot(xs)):
        assert np.array_equal(fn(), want), "plugin and raw disagree"
    assert np.array_equal(np.frombuffer(cwb()[1], dtype=np.float32), want)
    got = _rounds(
        {
            "plugin": lambda: _median_call(plugin, repeat),
            "two": lambda: _median_call(two_submits, repeat),
            "raw": lambda: _median_call(lambda: raw.oneshot(xs), repeat),
            "cwb": lambda: _median_call(cwb, max(5, repeat // 4)),
        },
        rounds,
    )
    note = "raw: upload, params, clear + dispatch + copy in one submit, one map"
    return [
        _ratio_row("one-shot run+read (1,024 f32, numpy in)", got["plugin"], got["raw"], "<= 1.3x", note),
        _ratio_row("extra: one-shot with the run submitted on its own first (two submits)", got["two"], got["raw"], "", note),
        _ratio_row("extra: one-shot vs wgpu.utils compute_with_buffers", got["plugin"], got["cwb"], "", "compute_with_buffers rebuilds everything per call"),
    ]


RAW_CWB_WGSL = """\
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i >= arrayLength(&y)) { return; }
    y[i] = 2.0 * x[i] + 1.0;
}
"""
