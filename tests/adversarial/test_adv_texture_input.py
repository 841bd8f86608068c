"""A product with a sampled texture and a constant buffer supplied once (``inputs=``): each
dispatch (several in one frame when split) reads them by name, next to a field."""

from __future__ import annotations

import numpy as np
from engine_support import Applied, run_until_idle

from engine_plugin import abi
from engine_plugin.engine import EngineConfig
from engine_plugin.gpu import WgpuBackendConfig
from engine_plugin.world import World

YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: height, kind: buffer, access: read, element: f32 }
  - { name: img, kind: texture }
  - { name: bias, kind: buffer, access: read, element: vec4<f32> }
  - { name: out, kind: buffer, access: read_write, element: vec4<f32>, count: "n" }
params:
  - { name: tile_count, type: u32 }
"""
WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let slot = chunks_get(i);
    let t = textureLoad(img, vec2<i32>(i32(slot), 0), 0);
    out_set(i, t + bias_get(slot % 2u) + vec4<f32>(height_get(slot * params.tile_count)));
}
"""


def test_texture_and_constant_inputs_in_split_dispatches(make_engine):
    n = 10
    world = World((2, 2), {"height": np.float32}, max_chunks=n)
    for k in range(n):
        world.add(k, {"height": np.full((2, 2), 100.0 * k, np.float32)})
    img = np.arange(n * 4, dtype=np.float32).reshape(1, n, 4)
    bias = np.array([[0.5, 0.5, 0.5, 0.5], [-1.0, -2.0, -3.0, -4.0]], np.float32)
    cfg = EngineConfig(backend=WgpuBackendConfig(max_chunks_per_dispatch=3), max_dispatches_per_product=4)
    engine = make_engine(world, config=cfg)
    applied = Applied(world)
    prog = abi.program(key="adv/tex", schema=abi.parse(YAML, "adv/tex/bindings.yaml"), wgsl=WGSL, wgsl_path="adv/tex/kernel.wgsl")
    engine.register_product(prog, fields={"height": "height"}, inputs={"img": img, "bias": bias}, apply=applied)
    st = engine.frame()
    assert st.dispatches == 4
    run_until_idle(engine)
    assert sorted(applied.latest) == list(range(n)) and {r.source for r in applied.results} == {"gpu"}
    for k, v in applied.latest.items():
        s = world.slot(k)
        assert v.tolist() == (img[0, s] + bias[s % 2] + 100.0 * k).tolist(), k
