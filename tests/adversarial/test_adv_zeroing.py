"""Outputs are zeroed before every dispatch: an accumulating kernel (``x_set(i, x_get(i) + 1)``)
must see zeros each time, also when one product's work is split into several dispatches of
one submission (the same results area reused) and when two products of the same variant run
in one frame. Whole-dispatch outputs (fixed count, a count reading ``len(field)``, an append)
come once per dispatch, with their own count."""

from __future__ import annotations

import numpy as np
from engine_support import Applied, run_until_idle

from engine_plugin import abi
from engine_plugin.engine import EngineConfig
from engine_plugin.gpu import WgpuBackendConfig
from engine_plugin.world import World

SHAPE = (4, 4)
BINS = 16

ACC_YAML = f"""\
bindings:
  - {{ name: chunks, kind: buffer, access: read, element: u32 }}
  - {{ name: height, kind: buffer, access: read, element: f32 }}
  - {{ name: acc, kind: buffer, access: read_write, element: vec2<u32>, count: "n" }}
  - {{ name: tot, kind: buffer, access: read_write, element: u32, count: "{BINS}" }}
  - {{ name: perslot, kind: buffer, access: read_write, element: u32, count: "len(height) / tile_count" }}
  - {{ name: odd, kind: buffer, access: read_write, element: u32, capacity: "n", append: true }}
params:
  - {{ name: tile_count, type: u32 }}
determinism: float_order
"""
ACC_WGSL = f"""\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{
    let i = zero_index(gid);
    if (i >= zero_n()) {{ return; }}
    let slot = chunks_get(i);
    acc_set(i, acc_get(i) + vec2<u32>(1u, slot));
    perslot_set(slot, perslot_get(slot) + 1u);
    if (i == 0u) {{
        for (var b = 0u; b < {BINS}u; b = b + 1u) {{ tot_set(b, tot_get(b) + b + 1u); }}
    }}
    if ((slot & 1u) == 1u) {{ odd_append(slot); }}
}}
"""


def _prog():
    return abi.program(key="adv/acc", schema=abi.parse(ACC_YAML, "adv/acc/bindings.yaml"), wgsl=ACC_WGSL, wgsl_path="adv/acc/kernel.wgsl")


def _world(n: int) -> World:
    world = World(SHAPE, {"height": np.float32}, max_chunks=n)
    for k in range(n):
        world.add(k, {"height": np.full(SHAPE, float(k), np.float32)})
    return world


def _check(results, world, n_slots):
    assert results and all(r.source == "gpu" for r in results)
    for r in results:
        slots = [world.slot(k) for k in r.keys]
        assert r.outputs["acc"].tolist() == [[1, s] for s in slots]
        assert r.outputs["tot"].tolist() == list(range(1, BINS + 1))
        want = np.zeros(n_slots, np.uint32)
        want[slots] = 1
        assert np.array_equal(r.outputs["perslot"], want)
        assert sorted(r.outputs["odd"].tolist()) == sorted(s for s in slots if s & 1)


def test_accumulating_outputs_see_zeros_in_every_split_dispatch(make_engine):
    n = 23
    world = _world(n)
    cfg = EngineConfig(backend=WgpuBackendConfig(max_chunks_per_dispatch=5), max_dispatches_per_product=4)
    engine = make_engine(world, config=cfg)
    applied = Applied(world)
    engine.register_product(_prog(), fields={"height": "height"}, apply=applied)
    st = engine.frame()
    assert st.dispatches == 4  # 4 dispatches of 5 chunks in one submission, the same results area
    run_until_idle(engine)
    assert sorted(applied.keys_applied) == list(range(n))
    assert max(len(r.keys) for r in applied.results) == 5
    _check(applied.results, world, n)


def test_two_products_of_one_variant_in_one_frame_each_see_zeros(make_engine):
    n = 9
    world = _world(n)
    engine = make_engine(world)
    a, b = Applied(world), Applied(world)
    prog = _prog()
    engine.register_product(prog, key="a", fields={"height": "height"}, apply=a)
    engine.register_product(prog, key="b", fields={"height": "height"}, apply=b)
    for frame in range(3):
        for k in range(n):
            world.set_tile(k, "height", (0, 0), float(frame))
        run_until_idle(engine)
    assert len(a.results) == 3 and len(b.results) == 3
    _check(a.results, world, n)
    _check(b.results, world, n)
