"""Shared pieces of the engine tests: worlds, recording apply callbacks, frame pumping, and
holding readback deliveries back (a slow GPU, made deterministic)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import numpy as np

from engine_plugin import abi
from engine_plugin.engine import Engine, FrameStats, ProductResult, fallbacks, kernel_program
from engine_plugin.gpu import ReadbackPolicy
from engine_plugin.gpu.readback import settled_now
from engine_plugin.world import World

SHAPE = (32, 32)


def make_world(n: int = 256, seed: int = 0, max_chunks: int | None = None, cls: type[World] = World) -> World:
    """``n`` chunks of 32x32 with two f32 fields of non-trivial values (sums are not exact);
    ``cls``: a World subclass to make (the same values)."""
    world = cls(SHAPE, {"height": np.float32, "moisture": np.float32}, max_chunks=max_chunks or n)
    rng = np.random.default_rng(seed)
    for k in range(n):
        world.add(k, {"height": rng.standard_normal(SHAPE, dtype=np.float32) * 100,
                      "moisture": rng.random(SHAPE, dtype=np.float32)})
    return world


class Applied:
    """An ``apply`` callback that records every result and checks, when it is called, that
    each chunk it covers still has the version the result derives from."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.results: list[ProductResult] = []
        self.latest: dict = {}  # chunk key (or (key, tile)) -> latest value
        self.not_current: list = []

    def __call__(self, result: ProductResult) -> None:
        for key, version in zip(result.keys, result.versions):
            if not self.world.is_current(key, version):
                self.not_current.append((key, version))
        self.results.append(result)
        if result.tiles:
            self.latest.update({t: np.copy(v) for t, v in result.by_tile().items()})
        else:
            self.latest.update({k: np.copy(v) for k, v in result.by_chunk().items()})

    @property
    def keys_applied(self) -> list:
        return [k for r in self.results for k in r.keys]

    def generations(self) -> set[int]:
        return {r.generation for r in self.results}


def run_until_idle(engine: Engine, timeout: float = 10.0) -> FrameStats:
    """Frames until nothing is owed or in flight (the backend's too); answers their totals."""
    totals = FrameStats()

    def idle(st: FrameStats) -> bool:
        totals.add(st)
        return engine.idle and getattr(engine.backend, "inflight_readbacks", 0) == 0

    frames_until(engine, idle, "the engine going idle", timeout)
    return totals


def frames_until(engine: Engine, done: Callable[[FrameStats], bool], what: str, seconds: float = 60.0,
                 before: Callable[[int], None] | None = None) -> FrameStats:
    """Frames until ``done(stats)`` holds for one; answers that frame's stats. ``before(n)``
    runs before the n-th frame (edits a test makes each frame). Bounded by time, not frames:
    readbacks resolve on wgpu's thread and hot reloads compile on the reload worker, and on a
    loaded machine any fixed count of fast frames can run out first; each frame yields a
    millisecond to those threads, as a game's paced frame loop does."""
    deadline = time.monotonic() + seconds
    frames = 0
    while True:
        if before is not None:
            before(frames)
        st = engine.frame()
        frames += 1
        if done(st):
            return st
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {seconds:.0f} s ({frames} frames): {engine!r}")
        time.sleep(0.001)


def wait_for_gpu(engine: Engine, seconds: float = 60.0) -> None:
    """Wait, without a frame, until the map of every readback in flight has settled: the GPU
    finished their work (a fixed sleep would guess; a loaded machine can take longer)."""
    deadline = time.monotonic() + seconds
    for req in engine.backend._ring.tracker.requests():
        while req.promise is not None and not settled_now(req.promise):
            if time.monotonic() > deadline:
                raise AssertionError(f"a readback's map did not settle within {seconds:.0f} s: {engine!r}")
            time.sleep(0.001)


@contextlib.contextmanager
def held_deliveries(engine: Engine) -> Iterator[None]:
    """Nothing the GPU finishes is delivered while inside (as with a slow GPU): readbacks
    requested inside are surely in flight when the block ends."""
    backend = engine.backend
    backend.poll = lambda: 0  # an instance attribute shadows the method
    try:
        yield
    finally:
        del backend.poll


def summary_product(engine: Engine, field: str = "height", apply=None, key: str | None = None,
                    program=None, **kwargs):
    """Register the engine's SUMMARY kernel over ``field`` with its exact CPU fallback."""
    return engine.register_product(program or kernel_program("summary"), key=key or f"summary:{field}",
                                   spec={"T": "f32"}, fields={"src": field}, policy=ReadbackPolicy.SUMMARY,
                                   apply=apply, cpu_fallback=fallbacks.summary, **kwargs)


def cpu_summary(world: World, field: str, key: int) -> np.ndarray:
    """The summary record of one chunk, straight from numpy (sequential f32 sum)."""
    values = world.read(key, field).reshape(-1).astype(np.float32)
    total = np.cumsum(values, dtype=np.float32)[-1]
    inv = np.float32(1.0 / values.size)
    return np.array([values.min(), values.max(), total * inv, total], dtype=np.float32)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and a.tobytes() == b.tobytes()


# A per-chunk sum of a field (a mirror reader in the mirror-writer tests).
SUM_YAML = """bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: out, kind: buffer, access: read_write, element: f32, count: "n" }
params:
  - { name: tile_count, type: u32 }
"""
SUM_WGSL = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * params.tile_count;
    var s = 0.0;
    for (var t = 0u; t < params.tile_count; t = t + 1u) { s = s + src_get(base + t); }
    out_set(i, s);
}
"""


def program_of(key: str, yaml: str, wgsl: str):
    return abi.program(key=key, schema=abi.parse(yaml, f"{key}/bindings.yaml"), wgsl=wgsl, wgsl_path=f"{key}/kernel.wgsl")
