"""``abi.batch()`` around a game frame: runs recorded in the batch come before the engine's
frame in program order, so a product must see what they write (a kernel-written field mirror,
field_buffer(kernel_writes=True)); and runs of a product's own variant in the same frame must
not disturb the product's results."""

from __future__ import annotations

import numpy as np
import pytest
from engine_support import Applied, run_until_idle

from engine_plugin import abi
from engine_plugin.world import World

SHAPE = (4, 4)
TC = 16

WRITER_YAML = """\
bindings:
  - { name: dst, kind: buffer, access: read_write, element: f32 }
params:
  - { name: v, type: f32 }
"""
WRITER_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, params.v);
}
"""

READ_YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: height, kind: buffer, access: read, element: f32 }
  - { name: state, kind: buffer, access: read, element: f32 }
  - { name: out, kind: buffer, access: read_write, element: vec2<f32>, count: "n" }
params:
  - { name: tile_count, type: u32 }
"""
READ_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * params.tile_count;
    out_set(i, vec2<f32>(height_get(base), state_get(base)));
}
"""


def _prog(key, yaml, wgsl):
    return abi.program(key=key, schema=abi.parse(yaml, f"{key}/bindings.yaml"), wgsl=wgsl, wgsl_path=f"{key}/kernel.wgsl")


def _world(n=4):
    world = World(SHAPE, {"height": np.float32, "state": np.float32}, max_chunks=n)
    for k in range(n):
        world.add(k, {"height": np.full(SHAPE, float(k), np.float32), "state": np.zeros(SHAPE, np.float32)})
    return world


def test_a_frame_inside_abi_batch_sees_the_runs_recorded_before_it(make_engine):
    world = _world()
    engine = make_engine(world)
    applied = Applied(world)
    state = engine.field_buffer("state", kernel_writes=True)
    engine.register_product(_prog("adv/read2", READ_YAML, READ_WGSL), fields={"height": "height", "state": "state"}, apply=applied)
    run_until_idle(engine)
    writer = _prog("adv/writer", WRITER_YAML, WRITER_WGSL).variant()
    with abi.batch():
        writer.run(state.size // 4, inputs={"dst": state}, params={"v": 5.0})
        for k in world.keys():
            world.set_tile(k, "height", (0, 0), 10.0 + k)
        engine.frame()
    run_until_idle(engine)
    for k in world.keys():
        assert applied.latest[k].tolist() == [10.0 + k, 5.0], k


def test_variant_run_of_a_products_variant_in_the_same_frame(make_engine):
    world = _world()
    engine = make_engine(world)
    applied = Applied(world)
    h = engine.register_product(_prog("adv/read3", READ_YAML, READ_WGSL), fields={"height": "height", "state": "state"}, apply=applied)
    variant = engine.product(h).gpu.variant
    side = []

    def apply_and_run(result):
        applied(result)
        # the game runs the same kernel itself, over its own chunk list, inside the frame
        items = np.array([world.slot(k) for k in result.keys][::-1], np.uint32)
        run = variant.run(
            items.size, inputs={"chunks": items, "height": engine.field_buffer("height"), "state": engine.field_buffer("state")}, params={"tile_count": TC}
        )
        side.append((result.keys[::-1], run))

    engine.product(h).apply = apply_and_run
    for frame in range(3):
        for k in world.keys():
            world.set_tile(k, "height", (0, 0), 100.0 * frame + k)
        run_until_idle(engine)
    assert len(applied.results) == 3
    for k in world.keys():
        assert applied.latest[k].tolist() == [200.0 + k, 0.0]
    keys, run = side[-1]
    got = abi.read(run.outputs["out"]).reshape(-1, 2)
    assert got.tolist() == [[200.0 + k, 0.0] for k in keys]
