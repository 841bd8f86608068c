"""recover_gpu re-registers every product on a new device. A product's ``inputs=`` given as
GPU resources of the old device (a constant GPUBuffer) cannot be bound there: the product must
leave the GPU for its fallback (with product.error), not break every later frame."""

from __future__ import annotations

import numpy as np
import pytest
import wgpu
from engine_support import Applied, run_until_idle

from engine_plugin import abi
from engine_plugin.world import World

YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: height, kind: buffer, access: read, element: f32 }
  - { name: scale, kind: buffer, access: read, element: f32 }
  - { name: out, kind: buffer, access: read_write, element: f32, count: "n" }
params:
  - { name: tile_count, type: u32 }
"""
WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    out_set(i, height_get(chunks_get(i) * params.tile_count) * scale_get(0u));
}
"""


def _fallback(world, job):
    return np.array([world.read(k, "height")[0, 0] * 3 for k in job.keys], np.float32)


def test_recover_gpu_with_an_old_device_buffer_input_does_not_break_frames(make_engine, gpu):
    world = World((2, 2), {"height": np.float32}, max_chunks=4)
    for k in range(4):
        world.add(k, {"height": np.full((2, 2), float(k), np.float32)})
    engine = make_engine(world)
    applied = Applied(world)
    scale = gpu.device.create_buffer_with_data(data=np.array([3.0], np.float32), usage=wgpu.BufferUsage.STORAGE)
    prog = abi.program(key="adv/scale", schema=abi.parse(YAML, "adv/scale/bindings.yaml"), wgsl=WGSL, wgsl_path="adv/scale/kernel.wgsl")
    engine.register_product(prog, fields={"height": "height"}, inputs={"scale": scale}, apply=applied, cpu_fallback=_fallback)
    run_until_idle(engine)
    assert applied.results[-1].source == "gpu" and applied.latest[2] == 6.0
    engine.backend.notify_device_error("adversarial")
    engine.frame()
    assert engine.recover_gpu()
    world.write(1, "height", 5.0)
    run_until_idle(engine)
    assert applied.latest[1] == 15.0
