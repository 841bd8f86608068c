"""A ``NONE`` product whose kernel declares a ``tiles`` work list gets one work item a tile of
every chunk it owes (as ``FULL_FIELD`` does), not one a chunk: a stencil or a colouring that
writes a field mirror runs one invocation per tile."""

from __future__ import annotations

import numpy as np

from engine_plugin import abi
from engine_plugin.gpu import ReadbackPolicy
from engine_plugin.world import World

from engine_support import run_until_idle

SHAPE = (8, 8)

TILE_YAML = """\
bindings:
  - { name: tiles,  kind: buffer, access: read, element: u32 }
  - { name: height, kind: buffer, access: read, element: f32 }
  - { name: out,    kind: buffer, access: read_write, element: f32 }
"""
TILE_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let t = tiles_get(i);
    out_set(t, height_get(t) + 1.0);
}
"""


def _world() -> World:
    world = World(SHAPE, {"height": np.float32, "out": np.float32}, max_chunks=8)
    rng = np.random.default_rng(14)
    for k in (3, 1, 4, 5, 9):
        world.add(k, {"height": rng.standard_normal(SHAPE, dtype=np.float32)})
    return world


def test_a_none_product_over_a_tiles_work_list_writes_every_tile_of_every_chunk(make_engine):
    world = _world()
    engine = make_engine(world)
    program = abi.program(key="tiles/plus_one", schema=abi.parse(TILE_YAML, "tiles/bindings.yaml"), wgsl=TILE_WGSL, wgsl_path="tiles/kernel.wgsl")
    handle = engine.register_product(program, key="plus_one", fields={"height": "height", "out": "out"}, policy=ReadbackPolicy.NONE)
    mirror = engine.field_buffer("out", kernel_writes=True)
    run_until_idle(engine)
    got = np.frombuffer(abi.read(mirror), dtype=np.float32).reshape(world.max_chunks, *SHAPE)
    for k in world.keys():
        assert np.array_equal(got[world.slot(k)], world.read(k, "height") + np.float32(1)), f"chunk {k}"

    # One chunk edited: the owed work is that chunk's tiles, as global tile indices.
    world.write(4, "height", np.full(SHAPE, 7.0, np.float32))
    engine.upload()
    slot, tiles = world.slot(4), world.tiles_per_chunk
    assert np.array_equal(engine.product(handle).work(world).items, np.arange(slot * tiles, (slot + 1) * tiles, dtype=np.uint32))
    run_until_idle(engine)
    got = np.frombuffer(abi.read(mirror), dtype=np.float32).reshape(world.max_chunks, *SHAPE)
    assert np.all(got[slot] == 8.0)
