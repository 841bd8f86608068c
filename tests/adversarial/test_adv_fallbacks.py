"""CPU fallbacks and odd product shapes: the fallback's answer (array or dict) lands exactly
where the GPU's does; products with only whole-dispatch outputs, NONE products without
outputs, and read-back policies without any output."""

from __future__ import annotations

import numpy as np
import pytest
from engine_support import Applied, run_until_idle, same_bits
from test_adv_multi_outputs import SEL, _fallback, _program, _world

from engine_plugin import abi
from engine_plugin.engine import Engine, ProductError
from engine_plugin.gpu import NoGpuBackend, ReadbackPolicy
from engine_plugin.world import World

CULL_YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: height, kind: buffer, access: read, element: f32 }
  - { name: hot, kind: buffer, access: read_write, element: vec2<u32>, capacity: "n", append: true }
params:
  - { name: tile_count, type: u32 }
determinism: float_order
"""
CULL_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * params.tile_count;
    if (height_get(base) > 0.0) { hot_append(vec2<u32>(i, chunks_get(i))); }
}
"""

NOOUT_YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: height, kind: buffer, access: read, element: f32 }
params:
  - { name: tile_count, type: u32 }
"""
NOOUT_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let x = height_get(chunks_get(i) * params.tile_count);
    if (x != x) { return; }
}
"""


def _prog(key, yaml, wgsl):
    return abi.program(key=key, schema=abi.parse(yaml, f"{key}/bindings.yaml"), wgsl=wgsl, wgsl_path=f"{key}/kernel.wgsl")


def _cull_fallback(world, job):
    return {"hot": np.array([(i, world.slot(k)) for i, k in enumerate(job.keys) if world.read(k, "height").reshape(-1)[0] > 0], np.uint32).reshape(-1, 2)}


def test_gpu_and_fallback_agree_bit_for_bit_on_multi_output_tiles(make_engine):
    results = {}
    for where in ("gpu", "cpu"):
        world = _world()
        engine = make_engine(world) if where == "gpu" else Engine(world, backend=NoGpuBackend())
        applied = Applied(world)
        engine.register_product(_program(), fields={"height": "height"}, policy=ReadbackPolicy.SELECTED_TILES, tiles=SEL, apply=applied, cpu_fallback=_fallback)
        world.set_tile(3, "height", (3, 5), 2.5)
        run_until_idle(engine)
        assert {r.source for r in applied.results} == {where}
        results[where] = {t: {n: r.outputs[n][i] for n in ("a", "b", "c")} for r in applied.results for i, t in enumerate(r.tiles)}
    gpu, cpu = results["gpu"], results["cpu"]
    assert list(gpu) == list(cpu) and len(gpu) == len(SEL)
    for t in gpu:
        for n in ("a", "b", "c"):
            assert same_bits(np.asarray(gpu[t][n]), np.asarray(cpu[t][n]).astype(np.asarray(gpu[t][n]).dtype)), (t, n)


@pytest.mark.parametrize("on", ["gpu", "cpu"])
def test_an_append_only_product_result(make_engine, on):
    world = World((2, 2), {"height": np.float32}, max_chunks=6)
    for k in range(6):
        world.add(k, {"height": np.full((2, 2), (-1.0) ** k, np.float32)})
    engine = make_engine(world) if on == "gpu" else Engine(world, backend=NoGpuBackend())
    applied = Applied(world)
    engine.register_product(_prog("adv/cull2", CULL_YAML, CULL_WGSL), fields={"height": "height"}, apply=applied, cpu_fallback=_cull_fallback)
    run_until_idle(engine)
    (r,) = applied.results
    assert r.source == on
    hot = sorted(map(tuple, r.outputs["hot"].tolist()))
    assert hot == sorted((i, world.slot(k)) for i, k in enumerate(r.keys) if k % 2 == 0)
    assert r.values.shape[0] == len(r.keys) and set(r.by_chunk()) == set(world.keys())


def test_records_of_an_append_only_product(make_engine):
    world = World((2, 2), {"height": np.float32}, max_chunks=4)
    for k in range(4):
        world.add(k, {"height": np.ones((2, 2), np.float32)})
    engine = make_engine(world)
    applied = Applied(world)
    engine.register_product(_prog("adv/cull3", CULL_YAML, CULL_WGSL), fields={"height": "height"}, apply=applied, cpu_fallback=_cull_fallback)
    run_until_idle(engine)
    (r,) = applied.results
    assert r.records.shape[0] == len(r.keys)


def test_a_none_product_without_outputs_runs_and_a_summary_without_outputs_is_refused(make_engine):
    world = World((2, 2), {"height": np.float32}, max_chunks=4)
    for k in range(4):
        world.add(k, {"height": np.ones((2, 2), np.float32)})
    engine = make_engine(world)
    prog = _prog("adv/noout", NOOUT_YAML, NOOUT_WGSL)
    engine.register_product(prog, key="none", fields={"height": "height"}, policy=ReadbackPolicy.NONE)
    totals = run_until_idle(engine)
    assert totals.dispatches == 1 and totals.readbacks_requested == 0 and engine.idle
    with pytest.raises(ProductError, match="declares no output"):
        engine.register_product(prog, key="summary", fields={"height": "height"}, policy=ReadbackPolicy.SUMMARY)
    world.write(2, "height", 5.0)
    totals = run_until_idle(engine)
    assert totals.dispatches == 1 and engine.idle


def test_a_fallback_answering_the_wrong_count_of_a_per_item_output_is_an_error():
    world = _world()
    engine = Engine(world, backend=NoGpuBackend())

    def short(world, job):
        out = _fallback(world, job)
        out["b"] = out["b"][:-1]
        return out

    engine.register_product(_program("chunks"), fields={"height": "height"}, cpu_fallback=short)
    with pytest.raises(ProductError, match="answered .* values of 'b'"):
        engine.frame()


def test_a_cpu_only_product_answering_records_of_three_values():
    world = _world()
    engine = Engine(world, backend=NoGpuBackend())
    applied = Applied(world)
    engine.register_product(
        None, key="cpu", fields=["height"], apply=applied, cpu_fallback=lambda w, job: np.array([[w.slot(k), k, 7] for k in job.keys], np.float32)
    )
    engine.frame()
    (r,) = applied.results
    assert r.record_shape == (3,) and {k: v.tolist() for k, v in r.by_chunk().items()} == {k: [world.slot(k), k, 7] for k in world.keys()}


def test_a_cpu_only_product_answering_a_mapping():
    world = _world()
    engine = Engine(world, backend=NoGpuBackend())
    applied = Applied(world)
    engine.register_product(None, key="cpu", fields=["height"], apply=applied, cpu_fallback=lambda w, job: {"x": np.arange(len(job.keys), dtype=np.float32)})
    try:
        engine.frame()
    except ProductError:
        return  # refused with the product's name: fine
    (r,) = applied.results
    assert r.outputs["x"].tolist() == list(range(len(world)))
