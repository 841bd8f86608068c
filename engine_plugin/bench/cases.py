"""The benchmark cases. Each pairs the plugin path with raw wgpu-py doing the same work.

The host-path cases (``run_host``, ``batch100``, ``batch_bandwidth``, ``oneshot``) are in
:mod:`.host_cases`, the kernel bandwidth cases in :mod:`.kernel_cases`."""

from __future__ import annotations

import os

import numpy as np
import wgpu

from .. import abi
from ..device.context import get_context
from .axpy import AXPY_WGSL, AXPY_YAML, RAW_WGSL, STORAGE
from .harness import Result, bench_kernels, case, median_time


def _axpy_variant():
    schema = abi.parse(AXPY_YAML, "bench/axpy/bindings.yaml")
    return abi.program(key="bench/axpy", schema=schema, wgsl=AXPY_WGSL, wgsl_path="bench/axpy/kernel.wgsl").variant()


class _RawAxpy:
    """Hand-written wgpu-py: own pipeline, pre-built bind group, params written per dispatch."""

    def __init__(self, n: int, slots: int = 1):
        ctx = get_context()
        self.dev, self.queue = ctx.device, ctx.queue
        self.n = n
        module = self.dev.create_shader_module(code=RAW_WGSL)
        bgl = self.dev.create_bind_group_layout(
            entries=[
                {"binding": 0, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": wgpu.BufferBindingType.read_only_storage}},
                {"binding": 1, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": wgpu.BufferBindingType.storage}},
                {"binding": 2, "visibility": wgpu.ShaderStage.COMPUTE, "buffer": {"type": wgpu.BufferBindingType.uniform, "has_dynamic_offset": True}},
            ]
        )
        self.pipeline = self.dev.create_compute_pipeline(
            layout=self.dev.create_pipeline_layout(bind_group_layouts=[bgl]), compute={"module": module, "entry_point": "main"}
        )
        self.x = self.dev.create_buffer_with_data(data=np.arange(n, dtype=np.float32), usage=STORAGE)
        self.y = self.dev.create_buffer(size=4 * n, usage=STORAGE)
        align = ctx.limit("min-uniform-buffer-offset-alignment")
        self.stride = max(16, align)
        self.params = self.dev.create_buffer(size=self.stride * slots, usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
        self.bg = self.dev.create_bind_group(
            layout=bgl,
            entries=[
                {"binding": 0, "resource": {"buffer": self.x}},
                {"binding": 1, "resource": {"buffer": self.y}},
                {"binding": 2, "resource": {"buffer": self.params, "offset": 0, "size": 16}},
            ],
        )
        self.p = np.zeros(4, dtype=np.uint32)
        self.p[1:2].view(np.float32)[0] = 2.0
        self.set_n(n)

    def set_n(self, n: int) -> None:
        """Fold the dispatch into y past 65,535 groups, as any real host must."""
        self.n = n
        groups = -(-n // 64)
        gx = min(groups, 65535)
        self.groups = (gx, -(-groups // gx), 1)
        self.p[0] = n
        self.p[2] = gx * 64

    def once(self) -> None:
        self.queue.write_buffer(self.params, 0, self.p)
        enc = self.dev.create_command_encoder()
        cp = enc.begin_compute_pass()
        cp.set_pipeline(self.pipeline)
        cp.set_bind_group(0, self.bg, [0])
        cp.dispatch_workgroups(*self.groups)
        cp.end()
        self.queue.submit([enc.finish()])

    def many(self, count: int) -> None:
        enc = self.dev.create_command_encoder()
        cp = enc.begin_compute_pass()
        cp.set_pipeline(self.pipeline)
        for k in range(count):
            self.queue.write_buffer(self.params, k * self.stride, self.p)
            cp.set_bind_group(0, self.bg, [k * self.stride])
            cp.dispatch_workgroups(*self.groups)
        cp.end()
        self.queue.submit([enc.finish()])


def _repeat(opts, full: int) -> int:
    return max(5, full // 10) if opts.get("quick") else full


@case("lowering")
def bench_lowering(opts) -> Result:
    """Lowering time per variant of the reference example (pure Python, no raw equivalent)."""
    root = os.path.join(bench_kernels(), "reference.computeShader")
    yaml_text = open(os.path.join(root, "bindings.yaml")).read()
    wgsl = open(os.path.join(root, "kernel.wgsl")).read()
    schema = abi.parse(yaml_text, "reference/bindings.yaml")
    spec = abi.resolve_spec(schema, {"T": "vec3<f32>", "FOLD": "mean"})
    repeat = _repeat(opts, 1000)
    t = median_time(lambda: abi.lower(schema, wgsl, spec), repeat=repeat, warmup=10)
    return Result("lowering (reference, 1 variant)", t, None, "s", note=f"median over {repeat:,} lowerings")


def _sync(ctx) -> None:
    """Wait for all submitted work: a 4-byte read-back orders after it on the queue."""
    from ..runtime.output import read_words

    buf = ctx.cache("bench").get("sync")
    if buf is None:
        buf = ctx.cache("bench")["sync"] = ctx.device.create_buffer(size=16, usage=STORAGE)
    read_words(buf, 0, 4)


@case("bandwidth")
def bench_bandwidth(opts) -> Result:
    """The old case (i), kept as a labelled extra row: the launch-bound shape (f32, 64-invocation
    workgroups, one element an invocation) against a raw kernel of that shape with the old
    ``gx = 65535`` fold, by wall clock. The honest figures are the ``kernels`` case's."""
    import time

    ctx = get_context()
    software = "CPU" in ctx.adapter_name
    nbytes = (16 << 20) if (software or opts.get("quick")) else (256 << 20)
    n = nbytes // 4
    variant = _axpy_variant()
    x = ctx.device.create_buffer_with_data(data=np.ones(n, dtype=np.float32), usage=STORAGE)
    y = ctx.device.create_buffer(size=nbytes, usage=STORAGE)
    raw = _RawAxpy(1, slots=100)  # build the pipeline, then rebind to the big buffers
    raw.x, raw.y = x, y
    raw.set_n(n)
    raw.bg = ctx.device.create_bind_group(
        layout=raw.pipeline.get_bind_group_layout(0),
        entries=[
            {"binding": 0, "resource": {"buffer": x}},
            {"binding": 1, "resource": {"buffer": y}},
            {"binding": 2, "resource": {"buffer": raw.params, "offset": 0, "size": 16}},
        ],
    )
    copy_dst = ctx.device.create_buffer(size=nbytes, usage=STORAGE)
    reps = 3 if software else 50

    def timed(many) -> float:
        """Seconds per operation, ``reps`` operations in one submission (GPU-bound, not host-bound)."""
        many()
        _sync(ctx)
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            many()
            _sync(ctx)
            best = min(best, (time.perf_counter() - t0) / reps)
        return best

    def plugin_many():
        with abi.batch():
            for _ in range(reps):
                variant.run(n, inputs={"x": x}, params={"a": 2.0}, outputs={"y": y})

    def raw_many():
        raw.many(reps)

    def copy_many():
        enc = ctx.device.create_command_encoder()
        for _ in range(reps):
            enc.copy_buffer_to_buffer(x, 0, copy_dst, 0, nbytes)
        ctx.queue.submit([enc.finish()])

    moved = 2 * nbytes  # read x, write y
    gbs = lambda t: moved / t / 1e9
    plugin, rawt, copy = gbs(timed(plugin_many)), gbs(timed(raw_many)), gbs(timed(copy_many))
    return Result(
        f"launch-bound (old case i): axpy f32 wg64 over {nbytes >> 20} MiB, raw with a gx=65535 fold (GB/s, wall)",
        plugin,
        rawt,
        "GB/s",
        target="(see the kernels case)",
        note=f"copy_buffer_to_buffer {copy:.1f} GB/s: not a bandwidth yardstick (the kernels case has a copy kernel)",
        extra={"copy_gbs": copy, "bytes": nbytes},
    )


from . import engine_cases, host_cases, kernel_cases, latency_cases  # noqa: E402,F401  (register the engine, host, kernel and latency cases)
