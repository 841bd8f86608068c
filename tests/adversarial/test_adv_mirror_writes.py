"""A product whose ``read_write`` binding is bound to a field writes that field's mirror
(derived GPU state, contract.py). Gap-coalesced uploads re-send clean chunks between dirty
ones from the world: only ``field_buffer(kernel_writes=True)`` turns that off, so a product's
own writes into a clean chunk's slot are silently overwritten."""

from __future__ import annotations

import numpy as np
import pytest
from engine_support import run_until_idle

from engine_plugin import abi
from engine_plugin.engine import EngineConfig
from engine_plugin.gpu import ReadbackPolicy
from engine_plugin.world import World

SHAPE = (8, 8)

WRITE_YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: height, kind: buffer, access: read_write, element: f32 }
params:
  - { name: tile_count, type: u32 }
"""
WRITE_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * params.tile_count;
    for (var t = 0u; t < params.tile_count; t = t + 1u) { height_set(base + t, height_get(base + t) * 2.0); }
}
"""


def _world(n: int = 6) -> World:
    world = World(SHAPE, {"height": np.float32}, max_chunks=n)
    rng = np.random.default_rng(7)
    for k in range(n):
        world.add(k, {"height": rng.standard_normal(SHAPE, dtype=np.float32)})
    return world


def test_a_products_mirror_writes_survive_uploads_of_neighbouring_chunks(make_engine):
    world = _world()
    engine = make_engine(world, config=EngineConfig(upload_gap_bytes=1 << 20))
    prog = abi.program(key="adv/write", schema=abi.parse(WRITE_YAML, "adv/write/bindings.yaml"), wgsl=WRITE_WGSL, wgsl_path="adv/write/kernel.wgsl")
    engine.register_product(prog, fields={"height": "height"}, policy=ReadbackPolicy.NONE, cpu_fallback=lambda w, j: None)
    run_until_idle(engine)
    mirror = engine.field_buffer("height")
    got = np.frombuffer(abi.read(mirror), dtype=np.float32).reshape(-1, *SHAPE)
    assert np.array_equal(got[world.slot(2)], world.read(2, "height") * 2)  # the product ran
    world.write(1, "height", 3.0)
    world.write(3, "height", 5.0)  # chunk 2 is clean, between two dirty chunks
    run_until_idle(engine)
    got = np.frombuffer(abi.read(mirror), dtype=np.float32).reshape(-1, *SHAPE)
    for k in world.keys():
        assert np.array_equal(got[world.slot(k)], world.read(k, "height") * 2), f"chunk {k}"


def test_an_engine_used_after_close_keeps_its_kernel_written_mirror(gpu):
    # Review helper 37: claiming flags again after close() (another engine holds the world's)
    # set every field's flags, a kernel-written one too: the world's bytes would overwrite the
    # GPU state its mirror holds.
    from engine_plugin.device.context import get_context
    from engine_plugin.engine import Engine
    from engine_plugin.gpu import NoGpuBackend, WgpuBackend, WgpuBackendConfig

    world = _world()
    backend = WgpuBackend(get_context(), WgpuBackendConfig())  # the caller's: close() leaves it running
    engine = Engine(world, backend=backend)
    try:
        prog = abi.program(key="adv/write", schema=abi.parse(WRITE_YAML, "adv/write/bindings.yaml"), wgsl=WRITE_WGSL, wgsl_path="adv/write/kernel.wgsl")
        mirror = engine.field_buffer("height", kernel_writes=True)
        engine.register_product(prog, fields={"height": "height"}, policy=ReadbackPolicy.NONE, cpu_fallback=lambda w, j: None)
        run_until_idle(engine)
        engine.close()
        other = Engine(world, backend=NoGpuBackend())  # takes the world's own flags meanwhile
        engine.frame()  # used after close(): flags of its own
        got = np.frombuffer(abi.read(mirror), dtype=np.float32).reshape(-1, *SHAPE)
        for k in world.keys():
            assert np.array_equal(got[world.slot(k)], world.read(k, "height") * 2), f"chunk {k}"
        other.close()
    finally:
        engine.close()
        backend.close()
