"""Work past the readback byte budget is split (engine.py _chunk_budget / _dispatch_once):
"nothing is refused for its size alone". With a fixed-size whole-dispatch output next to a
per-item one, the bytes a split needs are not proportional to its chunks."""

from __future__ import annotations


import numpy as np
import pytest
from engine_support import Applied, frames_until

from engine_plugin import abi
from engine_plugin.engine import EngineConfig
from engine_plugin.gpu import WgpuBackendConfig
from engine_plugin.world import World

SHAPE = (2, 2)

YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: height, kind: buffer, access: read, element: f32 }
  - { name: hist, kind: buffer, access: read_write, element: u32, count: "256" }
  - { name: rec, kind: buffer, access: read_write, element: vec4<f32>, count: "n" }
params:
  - { name: tile_count, type: u32 }
"""
WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let slot = chunks_get(i);
    if (i == 0u) { for (var b = 0u; b < 256u; b = b + 1u) { hist_set(b, b); } }
    rec_set(i, vec4<f32>(height_get(slot * params.tile_count), f32(slot), 1.0, 2.0));
}
"""


def test_a_fixed_whole_output_still_splits_within_the_readback_budget(make_engine):
    n = 64
    world = World(SHAPE, {"height": np.float32}, max_chunks=n)
    for k in range(n):
        world.add(k, {"height": np.full(SHAPE, float(k), np.float32)})
    cfg = EngineConfig(backend=WgpuBackendConfig(max_inflight_readback_bytes=1600))
    engine = make_engine(world, config=cfg)
    applied = Applied(world)
    prog = abi.program(key="adv/budget", schema=abi.parse(YAML, "adv/budget/bindings.yaml"), wgsl=WGSL, wgsl_path="adv/budget/kernel.wgsl")
    h = engine.register_product(prog, fields={"height": "height"}, apply=applied)  # no fallback: the GPU must serve it
    gpu = engine.product(h).gpu
    assert gpu.readback_bytes(36) <= 1600 < gpu.readback_bytes(50)
    frames_until(engine, lambda st: engine.idle, "every chunk served")
    assert sorted(applied.keys_applied) == list(range(n)), f"{len(applied.keys_applied)} of {n} chunks served, {engine.totals.refused} refused"
    for r in applied.results:
        assert r.outputs["hist"].tolist() == list(range(256))
        assert [row[1] for row in r.outputs["rec"].tolist()] == [world.slot(k) for k in r.keys]
