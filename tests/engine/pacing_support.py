"""A product whose GPU work outlasts a 60 fps frame on lavapipe, and a frame loop that times
``frame()``'s own host time under it (used by test_engine_pacing.py; runnable alone to print
the figures: ``python tests/engine/pacing_support.py``)."""

from __future__ import annotations

import time

import numpy as np

from engine_plugin import abi
from engine_plugin.engine import Engine, EngineConfig
from engine_plugin.world import World

HEAVY_YAML = """
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: out, kind: buffer, access: read_write, element: u32, count: "n" }
params:
  - { name: tile_count, type: u32 }
  - { name: reps, type: u32 }
"""

# One invocation a chunk hashes its tiles ``reps`` times: GPU time grows with reps, host time
# not. A serial integer hash, so no compiler can fold the loop away. llvmpipe (lavapipe) ends
# any invocation's loops after 65,535 iterations in all, silently: the tiles are hashed 16 to
# an iteration so that up to MAX_REPS reps stay under that limit and the work keeps growing.
HEAVY_WGSL = """
fn mix(h: u32, x: f32) -> u32 {
    let g = (h ^ bitcast<u32>(x)) * 16777619u;
    return g ^ (g >> 13u);
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * params.tile_count;
    var h = 2166136261u;
    for (var r = 0u; r < params.reps; r = r + 1u) {
        for (var t = 0u; t < params.tile_count; t = t + 16u) {
            let b = base + t;
            h = mix(h, src_get(b)); h = mix(h, src_get(b + 1u)); h = mix(h, src_get(b + 2u)); h = mix(h, src_get(b + 3u));
            h = mix(h, src_get(b + 4u)); h = mix(h, src_get(b + 5u)); h = mix(h, src_get(b + 6u)); h = mix(h, src_get(b + 7u));
            h = mix(h, src_get(b + 8u)); h = mix(h, src_get(b + 9u)); h = mix(h, src_get(b + 10u)); h = mix(h, src_get(b + 11u));
            h = mix(h, src_get(b + 12u)); h = mix(h, src_get(b + 13u)); h = mix(h, src_get(b + 14u)); h = mix(h, src_get(b + 15u));
        }
    }
    out_set(i, h);
}
"""

MAX_REPS = 960  # 960 reps x 65 iterations (32x32 chunks, 16 tiles an iteration): 62,400, under llvmpipe's 65,535 (1,008 reps is past it)

PERIOD = 1 / 60


def heavy_program():
    schema = abi.parse(HEAVY_YAML, "pacing/heavy/bindings.yaml")
    return abi.program(key="pacing/heavy", schema=schema, wgsl=HEAVY_WGSL, wgsl_path="pacing/heavy/kernel.wgsl")


def make(device=None, reps: int = 200, config: EngineConfig | None = None):
    world = World((32, 32), {"h": np.float32}, max_chunks=64)
    for k in range(64):
        world.add(k, {"h": float(k)})
    engine = Engine(world, device=device, config=config)
    applied = []
    engine.register_product(heavy_program(), fields={"src": "h"}, params={"reps": reps}, apply=applied.append)
    return world, engine, applied


def gpu_work_seconds(world, engine, applied, tries: int = 3) -> float:
    """Median seconds from a frame that dispatches the whole world to its result applied."""
    times = []
    for _ in range(tries):
        while not engine.idle:
            engine.frame()
            time.sleep(0.001)
        engine.invalidate()
        n = len(applied)
        t0 = time.perf_counter()
        while len(applied) == n:
            engine.frame()
            time.sleep(0.0005)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def frame_times(world, engine, frames: int = 60) -> list[float]:
    """``frame()``'s host time in a 60 fps loop whose every frame edits every chunk: each frame
    owes the whole world, so each frame's GPU work is the full ``gpu_work_seconds``."""
    out = []
    next_t = time.perf_counter()
    for f in range(frames):
        for k in range(64):
            world.set_tile(k, "h", (0, 0), float(f))
        t0 = time.perf_counter()
        engine.frame()
        out.append(time.perf_counter() - t0)
        next_t += PERIOD
        time.sleep(max(0.0, next_t - time.perf_counter()))
    return out


if __name__ == "__main__":
    import sys

    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 150
    world, engine, applied = make(reps=reps)
    engine.invalidate()
    work = gpu_work_seconds(world, engine, applied)
    times = frame_times(world, engine)
    st = engine.totals
    print(f"gpu work {work * 1e3:.1f} ms; frame() host p50 {np.percentile(times, 50) * 1e3:.2f} ms p99 {np.percentile(times, 99) * 1e3:.2f} ms "
          f"max {max(times) * 1e3:.2f} ms; deferred {st.deferred}, dispatches {st.dispatches}")
    engine.close()
