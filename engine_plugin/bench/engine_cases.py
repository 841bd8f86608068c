"""Benchmark cases of the engine loop (issue 7), each against hand-written raw wgpu-py in the
same run.

* ``engine_frame``: a frame of 1,024 chunks x 2 fields with 10% of the chunks changed per
  frame and 3 products (two SUMMARY products and a count), against a raw loop doing the same
  uploads (the same coalesced runs), dispatches and readbacks with its own pipelines,
  pre-built bind groups, one submission a frame and persistent staging buffers. Target <= 1.5x.
* ``engine_upload``: bytes/s of the engine's coalesced uploads of the whole world (2 fields
  x 1,024 chunks, 8 MiB) against one raw ``queue.write_buffer`` of the same bytes, both
  timed to the GPU having the bytes. Target >= 0.8x. Scattered and block-of-10% dirty sets
  are reported in ``extra``.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import wgpu

from ..device.context import get_context
from ..engine import Engine, fallbacks, kernel_program
from ..world import World
from .harness import Result, case

__all__ = ["RawFrameLoop", "bench_engine_frame", "bench_engine_upload", "make_world"]

U = wgpu.BufferUsage
CHUNKS = 1024
SHAPE = (32, 32)
TILES = SHAPE[0] * SHAPE[1]
THRESHOLD = 50.0

RAW_SUMMARY = """
struct P { n: u32, tiles: u32, inv: f32, pad: u32 }
@group(0) @binding(0) var<storage, read> chunks: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(3) var<uniform> p: P;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i >= p.n) { return; }
    let base = chunks[i] * p.tiles;
    var lo = src[base];
    var hi = lo;
    var s = 0.0;
    for (var t = 0u; t < p.tiles; t = t + 1u) {
        let v = src[base + t];
        lo = min(lo, v);
        hi = max(hi, v);
        s = s + v;
    }
    out[i] = vec4<f32>(lo, hi, s * p.inv, s);
}
"""
RAW_COUNT = """
struct P { n: u32, tiles: u32, threshold: f32, pad: u32 }
@group(0) @binding(0) var<storage, read> chunks: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;
@group(0) @binding(3) var<uniform> p: P;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if (i >= p.n) { return; }
    let base = chunks[i] * p.tiles;
    var c = 0u;
    for (var t = 0u; t < p.tiles; t = t + 1u) {
        if (src[base + t] > p.threshold) { c = c + 1u; }
    }
    out[i] = c;
}
"""


def make_world(seed: int = 3, kind: type[World] = World) -> World:
    """1,024 chunks of 32x32 with two f32 fields."""
    world = kind(SHAPE, {"height": np.float32, "moisture": np.float32}, max_chunks=CHUNKS)
    rng = np.random.default_rng(seed)
    for k in range(CHUNKS):
        world.add(k, {"height": rng.standard_normal(SHAPE, dtype=np.float32) * 100, "moisture": rng.random(SHAPE, dtype=np.float32)})
    return world


def _mutate(world: World, rng: np.random.Generator, fraction: float = 0.10) -> None:
    """What the game does between frames: change both fields of 10% of the chunks."""
    keys = rng.choice(CHUNKS, size=int(CHUNKS * fraction), replace=False)
    for k in keys:
        with world.edit(int(k)) as f:
            f["height"][...] += 1.0
            f["moisture"][0, 0] = rng.random()


def _runs(slots: np.ndarray) -> list[tuple[int, int]]:
    """(first slot, count) of each run of adjacent slots (sorted input)."""
    if not slots.size:
        return []
    breaks = np.flatnonzero(np.diff(slots) != 1) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [slots.size]))
    return [(int(slots[a]), int(b - a)) for a, b in zip(starts, ends)]


def raw_mirrors_and_products(world: World, dev: Any, queue: Any) -> tuple[dict[str, Any], list[tuple]]:
    """What the raw frame loops build once: the two field mirrors (uploaded whole, the world's
    dirty flags taken) and the three products, each ``(field, pipeline, group, items, out,
    params, block, record bytes, record dtype)``."""
    nbytes = CHUNKS * TILES * 4
    fields: dict[str, Any] = {}
    for name in ("height", "moisture"):
        buf = dev.create_buffer(size=nbytes, usage=U.STORAGE | U.COPY_DST)
        queue.write_buffer(buf, 0, world.mirror(name))
        fields[name] = buf
    world.take_dirty()
    inv = float(np.float32(1.0 / TILES))
    specs = [("height", RAW_SUMMARY, 16, np.float32, inv), ("moisture", RAW_SUMMARY, 16, np.float32, inv), ("height", RAW_COUNT, 4, np.uint32, THRESHOLD)]
    products: list[tuple] = []
    for field, code, record, dtype, extra in specs:
        module = dev.create_shader_module(code=code)
        pipeline = dev.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
        items = dev.create_buffer(size=CHUNKS * 4, usage=U.STORAGE | U.COPY_DST)
        out = dev.create_buffer(size=CHUNKS * record, usage=U.STORAGE | U.COPY_SRC)
        params = dev.create_buffer(size=16, usage=U.UNIFORM | U.COPY_DST)
        group = dev.create_bind_group(
            layout=pipeline.get_bind_group_layout(0),
            entries=[
                {"binding": 0, "resource": {"buffer": items}},
                {"binding": 1, "resource": {"buffer": fields[field]}},
                {"binding": 2, "resource": {"buffer": out}},
                {"binding": 3, "resource": {"buffer": params}},
            ],
        )
        block = np.zeros(4, np.uint32)
        block[1] = TILES
        block[2:3].view(np.float32)[0] = extra
        products.append((field, pipeline, group, items, out, params, block, record, dtype))
    return fields, products


class RawFrameLoop:
    """The same frame by hand: own buffers and pipelines, pre-built bind groups, the same
    coalesced writes, one encoder and one submission a frame, one persistent staging buffer
    a frame for all three results (one map), read at the start of the next frame
    (``sync_wait``: a raw loop has no non-blocking check). It maps with the mode wgpu-py's
    own ``read_buffer`` uses after a submitted copy, as the engine's backend does, so neither
    side pays wgpu-py's extra sync submit."""

    def __init__(self, world: World, ctx) -> None:
        self.world, self.dev, self.queue = world, ctx.device, ctx.queue
        self.fields, self.products = raw_mirrors_and_products(world, self.dev, self.queue)
        stage_bytes = sum(CHUNKS * p[7] for p in self.products)
        self.staging = [self.dev.create_buffer(size=stage_bytes, usage=U.MAP_READ | U.COPY_DST) for _ in range(2)]
        self.ring = 0
        self.inflight: tuple | None = None
        self.results: list = []

    def frame(self) -> None:
        # Last frame's readback (done by now, almost always): split it into the three results.
        if self.inflight is not None:
            stage, promise, parts, size = self.inflight
            promise.sync_wait()
            data = stage.read_mapped(0, size, copy=False)
            for offset, nbytes, dtype in parts:
                self.results.append(np.frombuffer(data[offset : offset + nbytes], dtype).copy())
            stage.unmap()
            self.inflight = None
        # Uploads: the changed chunks of each field, adjacent slots in one write.
        changed = {}
        for name, buf in self.fields.items():
            keys = [k for k, _ in self.world.take_dirty(name)]
            slots = np.array(sorted(self.world.slot(k) for k in keys), dtype=np.uint32)
            for first, count in _runs(slots):
                self.queue.write_buffer(buf, first * TILES * 4, self.world.slab(name, first, count))
            changed[name] = slots
        # Dispatches and readback copies, one submission.
        encoder = self.dev.create_command_encoder()
        cpass = encoder.begin_compute_pass()
        copies, offset = [], 0
        for field, pipeline, group, items, out, params, block, record, dtype in self.products:
            slots = changed[field]
            if not slots.size:
                continue
            block[0] = slots.size
            self.queue.write_buffer(items, 0, slots)
            self.queue.write_buffer(params, 0, block)
            cpass.set_pipeline(pipeline)
            cpass.set_bind_group(0, group)
            cpass.dispatch_workgroups(-(-int(slots.size) // 64))
            copies.append((out, offset, int(slots.size) * record, dtype))
            offset += -(-int(slots.size) * record // 8) * 8
        cpass.end()
        stage = self.staging[self.ring]
        for out, at, size, dtype in copies:
            encoder.copy_buffer_to_buffer(out, 0, stage, at, size)
        self.queue.submit([encoder.finish()])
        if copies:
            promise = stage.map_async("READ_NOSYNC", 0, offset)
            self.inflight = (stage, promise, [(at, size, dtype) for _, at, size, dtype in copies], offset)
            self.ring ^= 1
        if len(self.results) > 64:
            self.results.clear()


def _engine_for(world: World, ctx) -> tuple[Engine, list]:
    sink: list = []

    def keep(result) -> None:
        sink.append(result.values)
        if len(sink) > 64:
            sink.clear()

    engine = Engine(world, device=ctx)
    summary, count = kernel_program("summary", ctx), kernel_program("count_above", ctx)
    engine.register_product(summary, key="height summary", fields={"src": "height"}, apply=keep, cpu_fallback=fallbacks.summary)
    engine.register_product(summary, key="moisture summary", fields={"src": "moisture"}, apply=keep, cpu_fallback=fallbacks.summary)
    engine.register_product(
        count, key="height above", fields={"src": "height"}, params={"threshold": THRESHOLD}, apply=keep, cpu_fallback=fallbacks.count_above
    )
    return engine, sink


def _frame_times(world: World, frame: Callable[[], object], frames: int, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    times = []
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(frames):
            _mutate(world, rng)  # the game's part of the frame: not timed
            t0 = time.perf_counter()
            frame()
            times.append(time.perf_counter() - t0)
    finally:
        if gc_was:
            gc.enable()
    return times


@case("engine_frame")
def bench_engine_frame(opts) -> Result:
    """Frame cost: 1,024 chunks x 2 fields, 10% dirty a frame, 3 products; engine vs raw loop."""
    ctx = get_context()
    frames = 40 if opts.get("quick") else 200
    engine_world, raw_world = make_world(), make_world()
    engine, sink = _engine_for(engine_world, ctx)
    raw = RawFrameLoop(raw_world, ctx)
    for _ in range(3):  # settle: full first uploads, pipelines, lavapipe's JIT
        engine.frame()
        raw.frame()
        time.sleep(0.01)
    engine_times: list[float] = []
    raw_times: list[float] = []
    # Blocks, not alternate frames: on lavapipe a submit waits for the previous one, so
    # alternating would bill each side for the other's GPU work.
    block_ratios = []
    for block in range(4):
        mine = _frame_times(engine_world, engine.frame, frames // 4, seed=block)
        theirs = _frame_times(raw_world, raw.frame, frames // 4, seed=100 + block)
        engine_times += mine
        raw_times += theirs
        block_ratios.append(statistics.median(mine) / statistics.median(theirs))
    totals = engine.totals
    plugin, rawt = statistics.median(engine_times), statistics.median(raw_times)
    engine.close()
    note = (
        f"per-block ratios {statistics.median(block_ratios):.2f}x, range {min(block_ratios):.2f}-{max(block_ratios):.2f} over 4 blocks; "
        f"{totals.readbacks_applied} readbacks applied, {totals.readbacks_stale} stale, {totals.cpu_fallbacks} CPU fallbacks over {totals.frame + 1} frames"
    )
    return Result(
        "engine frame, first round's case (this round's is the 'frame' row): 1,024 chunks x 2 fields, 10% dirty, 3 products",
        plugin,
        rawt,
        "s",
        target="<= 1.5x (first round)",
        note=note,
        extra={
            "engine_p90": float(np.percentile(engine_times, 90)),
            "raw_p90": float(np.percentile(raw_times, 90)),
            "frames": len(engine_times),
            "uploads_per_frame": totals.uploads / max(1, totals.frame + 1),
        },
    )


def _upload_rate(engine: Engine, world: World, chunks: list[int] | None, sync: Callable[[], object], repeat: int) -> tuple[float, int]:
    """Dirty bytes per second of ``engine.upload()`` (filler the engine adds to join runs is
    not counted as work done), timed until the GPU has them."""
    nbytes = (CHUNKS if chunks is None else len(chunks)) * 2 * TILES * 4
    times = []
    for _ in range(repeat):
        if chunks is None:
            world.mark_dirty()
        else:
            for k in chunks:
                world.mark_dirty(k)
        t0 = time.perf_counter()
        engine.upload()
        sync()
        times.append(time.perf_counter() - t0)
    return nbytes / statistics.median(times), nbytes


def _raw_rate(queue, buf, data: np.ndarray, sync: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        queue.write_buffer(buf, 0, data)
        sync()
        times.append(time.perf_counter() - t0)
    return data.nbytes / statistics.median(times)


@case("engine_upload")
def bench_engine_upload(opts) -> Result:
    """Upload path: the engine's coalesced uploads vs one raw write_buffer of the same bytes."""
    ctx = get_context()
    repeat = 8 if opts.get("quick") else 40
    world = make_world()
    engine, _ = _engine_for(world, ctx)
    engine.frame()
    probe = ctx.device.create_buffer(size=4, usage=U.COPY_SRC | U.COPY_DST)

    def sync() -> None:  # the GPU has the bytes once a read submitted after them completes
        ctx.queue.read_buffer(probe, 0, 4)

    rng = np.random.default_rng(5)
    keys = world.keys()
    scattered = [int(k) for k in rng.choice(CHUNKS, size=CHUNKS // 10, replace=False)]
    block = keys[100 : 100 + CHUNKS // 10]

    plugin, nbytes = _upload_rate(engine, world, None, sync, repeat)
    raw_buf = ctx.device.create_buffer(size=nbytes, usage=U.STORAGE | U.COPY_DST)
    whole = np.concatenate([world.mirror("height").reshape(-1), world.mirror("moisture").reshape(-1)])
    rawr = _raw_rate(ctx.queue, raw_buf, whole, sync, repeat)
    extra: dict[str, float] = {"bytes": nbytes}
    for name, chunks in (("scattered_10pct", scattered), ("block_10pct", block)):
        rate, size = _upload_rate(engine, world, chunks, sync, repeat)
        same = np.ascontiguousarray(whole[: size // 4])
        extra[f"{name}_engine_Bps"] = rate
        extra[f"{name}_raw_Bps"] = _raw_rate(ctx.queue, raw_buf, same, sync, repeat)
        extra[f"{name}_ratio"] = rate / extra[f"{name}_raw_Bps"]
    engine.close()
    return Result(
        "engine upload: whole world (2 fields x 1,024 chunks, 8 MiB)",
        plugin,
        rawr,
        "B/s",
        target=">= 0.8x",
        note="higher is better; 10% dirty (block / scattered) in extra",
        extra=extra,
    )


from . import frame_cases  # noqa: E402,F401  (registers the same-work frame and upload cases)
