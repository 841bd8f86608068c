"""Outputs of sizes 0, 1, odd and per item, of vec2/vec4 elements, packed one after another in
a product's results area, plus an append that overflows its capacity: each output holds
exactly its own sentinel pattern (no overlap, no write into a neighbour, nothing lost)."""

from __future__ import annotations

import numpy as np
from engine_support import Applied, run_until_idle

from engine_plugin import abi
from engine_plugin.world import World

SHAPE = (2, 2)

YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: height, kind: buffer, access: read, element: f32 }
  - { name: e0, kind: buffer, access: read_write, element: vec4<f32>, count: "0" }
  - { name: e1, kind: buffer, access: read_write, element: vec2<u32>, count: "1" }
  - { name: e2, kind: buffer, access: read_write, element: vec4<u32>, count: "n" }
  - { name: e3, kind: buffer, access: read_write, element: u32, count: "3" }
  - { name: e4, kind: buffer, access: read_write, element: vec2<i32>, capacity: "n", append: true }
  - { name: e5, kind: buffer, access: read_write, element: vec2<f32>, count: "2 * n" }
params:
  - { name: tile_count, type: u32 }
determinism: float_order
"""
WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let slot = chunks_get(i);
    if (i == 0u) {
        e1_set(0u, vec2<u32>(0x11111111u, 0x11112222u));
        for (var j = 0u; j < 3u; j = j + 1u) { e3_set(j, 0x33330000u + j); }
    }
    e2_set(i, vec4<u32>(0x22220000u + slot, 0x22221111u, 0x22222222u, 0x22223333u));
    for (var j = 0u; j < 3u; j = j + 1u) { e4_append(vec2<i32>(i32(slot), -7)); }
    e5_set(2u * i, vec2<f32>(f32(slot), 0.5));
    e5_set(2u * i + 1u, vec2<f32>(-f32(slot), 0.25));
}
"""


def test_packed_outputs_of_odd_sizes_and_an_overflowing_append_keep_to_their_own_bytes(make_engine):
    n = 7
    world = World(SHAPE, {"height": np.float32}, max_chunks=n)
    for k in range(n):
        world.add(k, {"height": np.zeros(SHAPE, np.float32)})
    engine = make_engine(world)
    applied = Applied(world)
    prog = abi.program(key="adv/place", schema=abi.parse(YAML, "adv/place/bindings.yaml"), wgsl=WGSL, wgsl_path="adv/place/kernel.wgsl")
    engine.register_product(prog, fields={"height": "height"}, apply=applied)
    run_until_idle(engine)
    (r,) = applied.results
    assert r.source == "gpu" and sorted(r.keys) == list(range(n))
    slots = [world.slot(k) for k in r.keys]
    o = r.outputs
    assert o["e0"].shape == (0, 4)
    assert o["e1"].tolist() == [[0x11111111, 0x11112222]]
    assert o["e3"].tolist() == [0x33330000, 0x33330001, 0x33330002]
    assert o["e2"].tolist() == [[0x22220000 + s, 0x22221111, 0x22222222, 0x22223333] for s in slots]
    assert np.array_equal(r.values, o["e2"])
    assert o["e4"].shape == (n, 2) and all(v[1] == -7 and 0 <= v[0] < n for v in o["e4"].tolist())
    assert o["e5"].shape == (n, 2, 2)
    for i, s in enumerate(slots):
        assert o["e5"][i].tolist() == [[s, 0.5], [-s, 0.25]]


VEC3_YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: height, kind: buffer, access: read, element: f32 }
  - { name: v3, kind: buffer, access: read_write, element: vec3<u32>, count: "3 * n" }
  - { name: one, kind: buffer, access: read_write, element: vec3<f32>, count: "1" }
  - { name: tail, kind: buffer, access: read_write, element: u32, count: "n" }
params:
  - { name: tile_count, type: u32 }
"""
VEC3_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let slot = chunks_get(i);
    for (var j = 0u; j < 3u; j = j + 1u) { v3_set(3u * i + j, vec3<u32>(slot, j, 0x33u)); }
    if (i == 0u) { one_set(0u, vec3<f32>(1.5, -2.5, 3.5)); }
    tail_set(i, 0x7A000000u + slot);
}
"""


def test_vec3_outputs_packed_between_neighbours(make_engine):
    n = 5
    world = World(SHAPE, {"height": np.float32}, max_chunks=n)
    for k in range(n):
        world.add(k, {"height": np.zeros(SHAPE, np.float32)})
    engine = make_engine(world)
    applied = Applied(world)
    prog = abi.program(key="adv/vec3", schema=abi.parse(VEC3_YAML, "adv/vec3/bindings.yaml"), wgsl=VEC3_WGSL, wgsl_path="adv/vec3/kernel.wgsl")
    engine.register_product(prog, fields={"height": "height"}, apply=applied)
    run_until_idle(engine)
    (r,) = applied.results
    slots = [world.slot(k) for k in r.keys]
    assert r.record_shape == (3, 3) and r.values.shape == (n, 3, 3)
    assert r.values.tolist() == [[[s, j, 0x33] for j in range(3)] for s in slots]
    assert r.outputs["one"].tolist() == [[1.5, -2.5, 3.5]]
    assert r.outputs["tail"].tolist() == [0x7A000000 + s for s in slots]
