"""Output counts reading ``len()`` of a binding: of a field input (the mirror's elements), and
of a constant buffer the caller supplies once (``inputs=``), as ``variant.run`` allows."""

from __future__ import annotations

import numpy as np
import pytest
from engine_support import Applied, run_until_idle

from engine_plugin import abi
from engine_plugin.world import World

YAML = """\
bindings:
  - {{ name: chunks, kind: buffer, access: read, element: u32 }}
  - {{ name: height, kind: buffer, access: read, element: f32 }}
  - {{ name: scale, kind: buffer, access: read, element: f32 }}
  - {{ name: out, kind: buffer, access: read_write, element: f32, count: "n" }}
  - {{ name: lut, kind: buffer, access: read_write, element: f32, count: "{count}" }}
params:
  - {{ name: tile_count, type: u32 }}
"""
WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    out_set(i, height_get(chunks_get(i) * params.tile_count) * scale_get(0u));
    if (i == 0u) { for (var j = 0u; j < 5u; j = j + 1u) { lut_set(j, scale_get(j) * 2.0); } }
}
"""


def _run(make_engine, count, name):
    world = World((2, 2), {"height": np.float32}, max_chunks=4)
    for k in range(4):
        world.add(k, {"height": np.full((2, 2), float(k), np.float32)})
    engine = make_engine(world)
    applied = Applied(world)
    key = f"adv/len_{name}"
    prog = abi.program(key=key, schema=abi.parse(YAML.format(count=count), f"{key}/bindings.yaml"), wgsl=WGSL, wgsl_path=f"{key}/kernel.wgsl")
    engine.register_product(prog, fields={"height": "height"}, inputs={"scale": np.arange(1, 6, dtype=np.float32)}, apply=applied)
    run_until_idle(engine)
    (r,) = applied.results
    assert r.source == "gpu"
    assert r.by_chunk() == {k: np.float32(k) for k in range(4)}
    return r


def test_a_count_reading_a_field_inputs_length(make_engine):
    r = _run(make_engine, "len(height) / 4 + 1", "field")  # 4 slots of 4 tiles: 5 records
    assert r.outputs["lut"].tolist() == [2.0, 4.0, 6.0, 8.0, 10.0]


def test_a_count_reading_a_constant_inputs_length(make_engine):
    r = _run(make_engine, "len(scale)", "const")
    assert r.outputs["lut"].tolist() == [2.0, 4.0, 6.0, 8.0, 10.0]
