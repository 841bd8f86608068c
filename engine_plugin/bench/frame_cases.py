"""The engine frame and its uploads against raw wgpu-py doing exactly the same work (issue 15).

``frame``: 1,024 chunks x 2 f32 fields of 32x32, 10% of the chunks changed a frame (both
fields), 3 products (height and moisture SUMMARY, a height count above a threshold). The raw
loop (:class:`SameWorkRawLoop`) does what the engine does, written the best way known:

* the same writes: each field's dirty slots, taken as numpy vectors, joined by the engine's
  own rule (runs closer than ``EngineConfig.upload_gap_bytes`` are one write, the clean
  chunks between re-sent), one ``write_buffer`` a span; per product its work list and params;
* the same dispatches: one per product over the chunks that changed, one encoder, one
  submission a frame;
* the same readbacks: one per product, into persistent MAP_READ staging buffers (two a
  product, alternating), ``map_async`` after the submit, applied the next frame when the map
  has landed (checked without waiting; a raw loop that finds it still pending waits, counted);
* the same revalidation: a result is applied only for the chunks whose content version is
  still the one it was computed from (one vector compare), copied out of the mapped bytes.

Each figure is the median of ``runs`` (>= 3) runs of ``frames`` frames, engine and raw in
blocks within one run (on lavapipe a submit waits for the previous one, so alternating frames
would bill each side for the other's GPU work); the ratio is taken per run and reported with
its min-max spread. GPU time per frame comes from timestamps around every compute pass (both
sides, a separate short block), wall clock beside it. Extra, labelled rows: the engine with
its per-product GPU timestamps on (the overlay's default), the raw loop reading all three
results through one combined map, and the old shape of case (d) (a raw loop that writes every
run of adjacent dirty slots separately: 189 writes a frame against the engine's ~42).

``uploads``: ``engine.upload()`` of the whole world (both fields dirty) and of a scattered 10%
against a raw upload doing the same work (:class:`SameWorkRawUpload`: from the same world state,
marked dirty the same untimed way, it takes each field's dirty slots, joins them by the
engine's rule and makes one ``write_buffer`` a span, as the frame's raw loop does), host time
and time until the GPU has the bytes. Extra, labelled rows: raw writing the same spans
precomputed outside the timed call (a floor no uploader reaches: it reads no dirty flags), one
write of the whole bytes, and the exact dirty runs.

``readback frames``: frames from a chunk's edit to its applied result, engine and raw loop in
the same run, with a light frame (one chunk edited, 1 ms of game time a frame) and with the
frame case's load.
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
from ..device.writes import write_buffer
from ..engine import Engine, EngineConfig, fallbacks, kernel_program
from ..gpu.config import WgpuBackendConfig
from ..gpu.descriptors import slot_stride
from ..world import World
from .engine_cases import CHUNKS, SHAPE, THRESHOLD, TILES, RawFrameLoop, make_world, raw_mirrors_and_products
from .gpu_timing import PassTimer
from .harness import Result, case

__all__ = ["SameWorkRawLoop", "bench_frame", "bench_uploads"]

U = wgpu.BufferUsage


def _ready(promise: Any) -> bool:
    """A map that has landed, checked without waiting (what the engine's backend does)."""
    event = getattr(promise, "_thread_event", None)
    return event is None or event.is_set()


def joined_runs(slots: np.ndarray, gap: int) -> list[tuple[int, int]]:
    """``(first slot, slot count)`` of the writes the engine's joining rule makes: runs of
    sorted dirty ``slots`` closer than ``gap + 1`` slots are one write."""
    if not slots.size:
        return []
    breaks = (np.flatnonzero(np.diff(slots) > gap + 1) + 1).tolist()
    starts = [0, *breaks]
    ends = [*breaks, int(slots.size)]
    return [(int(slots[a]), int(slots[b - 1]) - int(slots[a]) + 1) for a, b in zip(starts, ends)]


class SameWorkRawLoop:
    """The engine frame by hand (see the module docstring). ``combined``: one staging buffer
    and one map a frame for all three results (a raw loop's best; the engine maps per product)."""

    def __init__(self, world: World, ctx: Any, gap_bytes: int, combined: bool = False, native_writes: bool = False) -> None:
        self.world, self.dev, self.queue = world, ctx.device, ctx.queue
        self.combined = combined
        # ``native_writes``: each write one call of wgpu-native's C function, as the engine
        # writes (engine_plugin.device.writes): an extra row, so the engine's own write path
        # hides no Python of the rest of its frame.
        self._write = (lambda buf, offset, data: write_buffer(self.queue, buf, offset, data)) if native_writes else self.queue.write_buffer
        self.gap = gap_bytes // world.chunk_nbytes("height")
        self.fields, products = raw_mirrors_and_products(world, self.dev, self.queue)
        # Two persistent staging buffers a product (one in flight, one being read).
        self.products: list[tuple] = [(*p, [self.dev.create_buffer(size=CHUNKS * p[7], usage=U.MAP_READ | U.COPY_DST) for _ in range(2)]) for p in products]
        total = sum(-(-CHUNKS * p[7] // 8) * 8 for p in self.products)
        self.shared = [self.dev.create_buffer(size=total, usage=U.MAP_READ | U.COPY_DST) for _ in range(2)]
        self.ring = 0
        self.frame_no = 0
        self.inflight: list[tuple] = []  # (staging, promise, [(offset, nbytes, dtype, slots, versions)])
        self.results: list = []
        self.applied_at: list[int] = []  # frames from request to apply, per applied result
        self.waited = 0  # readbacks the loop had to wait for (not landed by the next frame)
        self.writes = 0
        self.stale = 0

    def _apply(self) -> None:
        for staging, promise, parts, requested in self.inflight:
            if not _ready(promise):
                self.waited += 1
            promise.sync_wait()  # landed already (almost always): returns at once
            data = staging.read_mapped(copy=False)
            for offset, nbytes, dtype, slots, versions in parts:
                values = np.frombuffer(data, dtype, count=nbytes // np.dtype(dtype).itemsize, offset=offset).copy()
                current = self.world.slot_versions(slots) == versions
                if not current.all():
                    self.stale += int((~current).sum())
                    values = values.reshape(slots.size, -1)[current]
                self.results.append(values)
                self.applied_at.append(self.frame_no - requested)
            staging.unmap()
        self.inflight = []

    def frame(self) -> None:
        self._apply()  # last frame's readbacks
        world = self.world
        changed: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for name, buf in self.fields.items():
            slots = world.take_dirty_slots(name)
            for first, count in joined_runs(slots, self.gap):
                self._write(buf, first * TILES * 4, world.slab(name, first, count))
                self.writes += 1
            changed[name] = (slots.astype(np.uint32), world.slot_versions(slots))
        encoder = self.dev.create_command_encoder()
        cpass = encoder.begin_compute_pass()
        copies = []
        for field, pipeline, group, items, out, params, block, record, dtype, staging in self.products:
            slots, versions = changed[field]
            if not slots.size:
                continue
            block[0] = slots.size
            self._write(items, 0, slots)
            self._write(params, 0, block)
            cpass.set_pipeline(pipeline)
            cpass.set_bind_group(0, group)
            cpass.dispatch_workgroups(-(-int(slots.size) // 64))
            copies.append((out, staging[self.ring], int(slots.size) * record, dtype, slots, versions))
        cpass.end()
        if self.combined:
            shared, at, parts = self.shared[self.ring], 0, []
            for out, _, size, dtype, slots, versions in copies:
                encoder.copy_buffer_to_buffer(out, 0, shared, at, size)
                parts.append((at, size, dtype, slots, versions))
                at += -(-size // 8) * 8
        else:
            for out, staging, size, _, _, _ in copies:
                encoder.copy_buffer_to_buffer(out, 0, staging, 0, size)
        self.queue.submit([encoder.finish()])
        if copies and self.combined:
            self.inflight.append((shared, shared.map_async("READ_NOSYNC", 0, at), parts, self.frame_no))
        elif copies:
            for _, staging, size, dtype, slots, versions in copies:
                self.inflight.append((staging, staging.map_async("READ_NOSYNC", 0, size), [(0, size, dtype, slots, versions)], self.frame_no))
        self.ring ^= 1
        self.frame_no += 1
        if len(self.results) > 64:
            self.results.clear()
        time.sleep(0)  # release the GIL once a frame, as the engine's bench loop does below


def _mutate(world: World, rng: np.random.Generator, fraction: float = 0.10) -> None:
    """The game's part of a frame (not timed): both fields of 10% of the chunks change."""
    for k in rng.choice(CHUNKS, size=int(CHUNKS * fraction), replace=False):
        with world.edit(int(k)) as f:
            f["height"][...] += 1.0
            f["moisture"][0, 0] = rng.random()


def make_engine(world: World, ctx: Any, timing: bool = False) -> tuple[Engine, list, list]:
    """The engine of the frame case: its 3 products; ``timing``: per-product GPU timestamps
    (the backend's default; off for the same-work comparison: the raw loop times nothing)."""
    sink: list = []
    latency: list = []
    config = EngineConfig(backend=WgpuBackendConfig(gpu_timing=timing))
    engine = Engine(world, device=ctx, config=config)

    def keep(result: Any) -> None:
        sink.append(result.values)
        latency.append(engine._frame - 1 - result.frame)  # the frame applying it minus the frame requesting it
        if len(sink) > 64:
            sink.clear()

    summary, count = kernel_program("summary", ctx), kernel_program("count_above", ctx)
    engine.register_product(summary, key="height summary", fields={"src": "height"}, apply=keep, cpu_fallback=fallbacks.summary)
    engine.register_product(summary, key="moisture summary", fields={"src": "moisture"}, apply=keep, cpu_fallback=fallbacks.summary)
    engine.register_product(
        count, key="height above", fields={"src": "height"}, params={"threshold": THRESHOLD}, apply=keep, cpu_fallback=fallbacks.count_above
    )
    return engine, sink, latency


def _engine_frame(engine: Engine) -> Callable[[], object]:
    def frame() -> None:
        engine.frame()
        time.sleep(0)  # the same GIL release as the raw loop's

    return frame


def _block(world: World, frame: Callable[[], object], frames: int, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    times = []
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(frames):
            _mutate(world, rng)
            t0 = time.perf_counter()
            frame()
            times.append(time.perf_counter() - t0)
    finally:
        if gc_was:
            gc.enable()
    return times


def _gpu_per_frame(timer: PassTimer, world: World, frame: Callable[[], object], frames: int) -> float | None:
    """GPU seconds of a frame's compute passes (timestamps), over ``frames`` frames."""
    if not timer.available:
        return None
    with timer.capture():
        _block(world, frame, frames, seed=999)
    gpu = timer.seconds()
    return None if gpu is None else gpu / frames


def _spread(values: list[float]) -> str:
    return f"{min(values):.3g}-{max(values):.3g}"


@case("frame")
def bench_frame(opts: dict) -> list[Result]:
    """Engine frame vs a raw loop making the same writes, dispatches, readbacks and checks."""
    ctx = get_context()
    runs = max(3, int(opts.get("runs") or 5))
    frames = 30 if opts.get("quick") else 100
    gap = EngineConfig().upload_gap_bytes
    sides: dict[str, tuple[World, Callable[[], object], Any]] = {}
    w = make_world()
    engine, _, latency = make_engine(w, ctx)
    sides["engine"] = (w, _engine_frame(engine), engine)
    w = make_world()
    timed, _, _ = make_engine(w, ctx, timing=True)
    sides["engine_timed"] = (w, _engine_frame(timed), timed)
    for label, combined, native in (("raw", False, False), ("raw_combined", True, False), ("raw_native_writes", False, True)):
        w = make_world()
        loop = SameWorkRawLoop(w, ctx, gap, combined, native)
        sides[label] = (w, loop.frame, loop)
    w = make_world()
    old = RawFrameLoop(w, ctx)
    sides["raw_old"] = (w, old.frame, old)
    for world, frame, _ in sides.values():  # settle: first uploads, pipelines, lavapipe's JIT
        for _ in range(3):
            frame()
            time.sleep(0.01)
    medians: dict[str, list[float]] = {k: [] for k in sides}
    p90: dict[str, list[float]] = {k: [] for k in sides}
    for run in range(runs):
        for label, (world, frame, _) in sides.items():
            t = _block(world, frame, frames, seed=100 * run + len(label))
            medians[label].append(statistics.median(t))
            p90[label].append(float(np.percentile(t, 90)))
    timer = PassTimer(ctx.device, capacity=4 * 40)
    gpu = {label: _gpu_per_frame(timer, world, frame, 40) for label, (world, frame, _) in sides.items() if label in ("engine", "raw")}
    raw_loop: SameWorkRawLoop = sides["raw"][2]
    totals = engine.totals
    lat = [x for x in latency[-2000:]]
    engine_writes = totals.uploads / max(1, totals.frame + 1)
    note_common = f"{runs} runs x {frames} frames; engine {engine_writes:.1f} writes/frame, raw {raw_loop.writes / max(1, raw_loop.frame_no):.1f}"

    def row(name: str, a: str, b: str, target: str = "", note: str = "") -> Result:
        ratios = [x / y for x, y in zip(medians[a], medians[b])]
        extra: dict[str, Any] = {
            "ratio_median": statistics.median(ratios),
            "ratio_spread": _spread(ratios),
            "ratios": ratios,
            f"{a}_medians_s": medians[a],
            f"{b}_medians_s": medians[b],
            f"{a}_p90_s": statistics.median(p90[a]),
            f"{b}_p90_s": statistics.median(p90[b]),
        }
        if a in gpu and b in gpu:
            extra.update({f"{a}_gpu_s_per_frame": gpu[a], f"{b}_gpu_s_per_frame": gpu[b]})
        return Result(
            name,
            statistics.median(medians[a]),
            statistics.median(medians[b]),
            "s",
            target=target,
            note=f"per-run ratios {statistics.median(ratios):.2f}x, range {_spread(ratios)}; {note}",
            extra=extra,
        )

    out = [
        row(
            "frame: engine vs raw doing the same work (1,024 chunks x 2 fields, 10% dirty, 3 products)",
            "engine",
            "raw",
            "<= 1.2x",
            note_common
            + f"; GPU/frame engine {1e3 * (gpu['engine'] or 0):.3f} ms, raw {1e3 * (gpu['raw'] or 0):.3f} ms; raw waited for {raw_loop.waited} maps",
        ),
        row("frame extra: engine with per-product GPU timestamps (backend default) vs same-work raw", "engine_timed", "raw"),
        row("frame extra: engine vs raw reading the 3 results through one combined map", "engine", "raw_combined"),
        row("frame extra: engine vs raw writing through wgpu-native's C function, as the engine does", "engine", "raw_native_writes"),
        row("frame extra (old case d shape): engine vs raw writing every dirty run separately", "engine", "raw_old"),
        Result(
            "readback frames from request to apply under frame load (engine vs same-work raw)",
            float(statistics.median(lat)) if lat else float("nan"),
            float(statistics.median(raw_loop.applied_at)) if raw_loop.applied_at else float("nan"),
            "frames",
            target="equal",
            note=f"engine max {max(lat) if lat else '-'}, deferred frames {totals.deferred}; raw waited {raw_loop.waited} times (it blocks, the engine never does)",
            extra={
                "engine_hist": np.bincount(np.asarray(lat, dtype=np.int64)).tolist() if lat else [],
                "raw_hist": np.bincount(np.asarray(raw_loop.applied_at)).tolist(),
            },
        ),
    ]
    out.append(_light_latency(ctx, opts))
    for _, _, obj in sides.values():
        if isinstance(obj, Engine):
            obj.close()
    return out


def _light_latency(ctx: Any, opts: dict) -> Result:
    """Frames from an edit to its applied result with a light frame: one chunk edited, 1 ms
    of game time a frame; engine and the same-work raw loop (64 chunks, SUMMARY of height)."""
    edits = 10 if opts.get("quick") else 40

    def measure(frame: Callable[[], object], applied: Callable[[], int], world: World) -> list[int]:
        out = []
        for i in range(edits):
            world.write(i % 64, "height", float(i + 1))
            before, n = applied(), 0
            while applied() == before and n < 100:
                frame()
                n += 1
                time.sleep(0.001)
            out.append(n - 1)  # the frame that requested it is frame 0
        return out

    world = World(SHAPE, {"height": np.float32, "moisture": np.float32}, max_chunks=CHUNKS)
    for k in range(64):
        world.add(k)
    engine, sink, latency = make_engine(world, ctx)
    for _ in range(5):
        engine.frame()
        time.sleep(0.001)
    eng = measure(engine.frame, lambda: len(latency), world)
    engine.close()
    world = World(SHAPE, {"height": np.float32, "moisture": np.float32}, max_chunks=CHUNKS)
    for k in range(64):
        world.add(k)
    raw = SameWorkRawLoop(world, ctx, EngineConfig().upload_gap_bytes)
    for _ in range(5):
        raw.frame()
    before = len(raw.applied_at)
    got = measure(raw.frame, lambda: len(raw.applied_at), world)
    return Result(
        "readback frames from edit to apply, light frame (1 chunk edited, 1 ms frames)",
        float(statistics.median(eng)),
        float(statistics.median(got)),
        "frames",
        target="equal",
        note=f"engine max {max(eng)}, raw max {max(got)}; raw waited {raw.waited} times",
        extra={"engine": eng, "raw": got, "raw_applied_before": before},
    )


def _engine_upload_time(engine: Engine, world: World, chunks: list[int] | None, sync: Callable[[], object] | None) -> float:
    if chunks is None:
        world.mark_dirty()
    else:
        for k in chunks:
            world.mark_dirty(k)
    t0 = time.perf_counter()
    engine.upload()
    if sync is not None:
        sync()
    return time.perf_counter() - t0


def _raw_upload_time(queue: Any, writes: list[tuple[Any, int, np.ndarray]], sync: Callable[[], object] | None) -> float:
    t0 = time.perf_counter()
    for buf, offset, data in writes:
        queue.write_buffer(buf, offset, data)
    if sync is not None:
        sync()
    return time.perf_counter() - t0


class SameWorkRawUpload:
    """``engine.upload()`` by hand, the way :class:`SameWorkRawLoop` uploads: from a world of
    its own (the same chunks, marked dirty the same way, untimed), each field's dirty slots
    taken as a numpy vector, joined by the engine's rule, one ``write_buffer`` a span."""

    def __init__(self, world: World, queue: Any, bufs: dict[str, Any], gap: int) -> None:
        self.world, self.queue, self.bufs, self.gap = world, queue, bufs, gap
        self.stride = slot_stride(world.chunk_nbytes("height"))

    def time(self, chunks: list[int] | None, sync: Callable[[], object] | None) -> float:
        world = self.world
        if chunks is None:  # the same untimed marking as the engine's side
            world.mark_dirty()
        else:
            for k in chunks:
                world.mark_dirty(k)
        t0 = time.perf_counter()
        write, stride, gap = self.queue.write_buffer, self.stride, self.gap
        for name, buf in self.bufs.items():
            slots = world.take_dirty_slots(name)
            for first, count in joined_runs(slots, gap):
                write(buf, first * stride, world.slab(name, first, count))
        if sync is not None:
            sync()
        return time.perf_counter() - t0


def _then(value: float, fn: Callable[[], object]) -> float:
    fn()
    return value


@case("uploads")
def bench_uploads(opts: dict) -> list[Result]:
    """``engine.upload()`` vs raw ``write_buffer`` of the same spans (whole world; scattered 10%)."""
    ctx = get_context()
    runs = max(3, int(opts.get("runs") or 5))
    repeat = 8 if opts.get("quick") else 30
    world = make_world()
    engine, _, _ = make_engine(world, ctx)
    engine.frame()
    raw_bufs = {name: ctx.device.create_buffer(size=CHUNKS * TILES * 4, usage=U.STORAGE | U.COPY_DST) for name in ("height", "moisture")}
    probe = ctx.device.create_buffer(size=4, usage=U.COPY_SRC | U.COPY_DST)

    def sync() -> None:  # the GPU has the bytes once a read submitted after them completes
        ctx.queue.read_buffer(probe, 0, 4)

    gap = EngineConfig().upload_gap_bytes // world.chunk_nbytes("height")
    stride = slot_stride(world.chunk_nbytes("height"))
    rng = np.random.default_rng(5)
    scattered = sorted(int(k) for k in rng.choice(CHUNKS, size=CHUNKS // 10, replace=False))

    def spans(chunks: list[int] | None, join: int) -> list[tuple[Any, int, np.ndarray]]:
        slots = np.arange(CHUNKS) if chunks is None else np.array(sorted(world.slot(k) for k in chunks))
        return [(raw_bufs[n], first * stride, world.slab(n, first, count)) for n in ("height", "moisture") for first, count in joined_runs(slots, join)]

    whole_one = [
        (
            raw_bufs["height"],
            0,
            np.ascontiguousarray(np.concatenate([world.mirror("height").reshape(-1), world.mirror("moisture").reshape(-1)])[: CHUNKS * TILES]),
        )
    ]
    same_work = SameWorkRawUpload(make_world(), ctx.queue, raw_bufs, gap)
    # (name, dirty chunks (None: all), the spans written, target, raw's side: None for
    # SameWorkRawUpload, True for writing the spans precomputed outside the timed call)
    cases: list[tuple[str, list[int] | None, list, str, bool]] = [
        (
            "uploads: whole world (2 fields x 1,024 chunks, 8 MiB) vs raw taking the dirty slots and writing the same spans",
            None,
            spans(None, gap),
            ">= 0.9x",
            False,
        ),
        ("uploads: scattered 10% dirty vs raw taking the dirty slots and writing the same (joined) spans", scattered, spans(scattered, gap), ">= 0.8x", False),
        ("uploads extra: whole world vs raw writing the same spans precomputed (a floor: no dirty flags read)", None, spans(None, gap), "", True),
        ("uploads extra: scattered 10% dirty vs raw writing the same spans precomputed (a floor)", scattered, spans(scattered, gap), "", True),
        ("uploads extra: scattered 10% dirty vs raw writing only the dirty runs (no joining, precomputed)", scattered, spans(scattered, 0), "", True),
    ]
    out = []
    for name, chunks, writes, target, precomputed in cases:

        def raw_time(
            sync_after: Callable[[], object] | None, chunks: list[int] | None = chunks, writes: list = writes, precomputed: bool = precomputed
        ) -> float:
            if precomputed:
                return _raw_upload_time(ctx.queue, writes, sync_after)
            return same_work.time(chunks, sync_after)

        for _ in range(2):  # warm
            _engine_upload_time(engine, world, chunks, sync)
            raw_time(sync)
        per_run: dict[str, list[float]] = {"eng": [], "raw": [], "eng_host": [], "raw_host": []}
        for _ in range(runs):
            per_run["eng"].append(statistics.median(_engine_upload_time(engine, world, chunks, sync) for _ in range(repeat)))
            per_run["raw"].append(statistics.median(raw_time(sync) for _ in range(repeat)))
            # Host only: the call's own time; the GPU catches up after each, untimed (back to
            # back, unsubmitted writes pile up in wgpu's staging and slow both sides).
            per_run["eng_host"].append(statistics.median(_then(_engine_upload_time(engine, world, chunks, None), sync) for _ in range(repeat)))
            per_run["raw_host"].append(statistics.median(_then(raw_time(None), sync) for _ in range(repeat)))
        # Speed ratio: raw time / engine time (>= 1 means the engine is as fast).
        ratios = [r / e for e, r in zip(per_run["eng"], per_run["raw"])]
        host = [r / e for e, r in zip(per_run["eng_host"], per_run["raw_host"])]
        dirty = (CHUNKS if chunks is None else len(chunks)) * 2 * TILES * 4
        sent = sum(int(w[2].nbytes) for w in writes)
        eng_t, raw_t = statistics.median(per_run["eng"]), statistics.median(per_run["raw"])
        out.append(
            Result(
                name,
                dirty / eng_t,
                dirty / raw_t,
                "B/s",
                target=target,
                note=f"per-run speed ratios to GPU {statistics.median(ratios):.2f}x, range {_spread(ratios)}; host only {statistics.median(host):.2f}x, range {_spread(host)}; {len(writes)} writes, {sent} B sent for {dirty} dirty B",
                extra={
                    "speed_ratio_median": statistics.median(ratios),
                    "speed_ratios": ratios,
                    "host_speed_ratios": host,
                    **{k: v for k, v in per_run.items()},
                },
            )
        )
    times = [_raw_upload_time(ctx.queue, whole_one, sync) for _ in range(repeat)]
    out.append(Result("uploads extra: raw one write_buffer of 4 MiB (reference rate)", CHUNKS * TILES * 4 / statistics.median(times), None, "B/s"))
    engine.close()
    return out
