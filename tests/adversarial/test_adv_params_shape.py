"""Output shapes that depend on a product's params: ``set_params`` must re-plan the records
per work item (``count: "K * n"`` with K a param), else the decoded records and the
fallback's contract keep the registration's K."""

from __future__ import annotations

import numpy as np
import pytest
from engine_support import Applied, run_until_idle

from engine_plugin import abi
from engine_plugin.engine import Engine
from engine_plugin.gpu import NoGpuBackend
from engine_plugin.world import World

SHAPE = (4, 4)

K_YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: height, kind: buffer, access: read, element: f32 }
  - { name: rec, kind: buffer, access: read_write, element: f32, count: "K * n" }
params:
  - { name: tile_count, type: u32 }
  - { name: K, type: u32 }
"""
K_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * params.tile_count;
    for (var j = 0u; j < params.K; j = j + 1u) { rec_set(i * params.K + j, height_get(base + j)); }
}
"""


def _world(n: int = 5) -> World:
    world = World(SHAPE, {"height": np.float32}, max_chunks=n)
    rng = np.random.default_rng(3)
    for k in range(n):
        world.add(k, {"height": rng.standard_normal(SHAPE, dtype=np.float32)})
    return world


def _fallback(world, job):
    K = int(job.params["K"])
    return np.stack([world.read(k, "height").reshape(-1)[:K] for k in job.keys])


def _prog():
    return abi.program(key="adv/k", schema=abi.parse(K_YAML, "adv/k/bindings.yaml"), wgsl=K_WGSL, wgsl_path="adv/k/kernel.wgsl")


def _check(applied: Applied, world: World, K: int) -> None:
    last = applied.results[-1]
    assert last.record_shape == (K,)
    for k, v in last.by_chunk().items():
        assert np.array_equal(v, world.read(k, "height").reshape(-1)[:K]), k


def test_k_records_per_item_from_a_param_at_registration(make_engine):
    world = _world()
    engine = make_engine(world)
    applied = Applied(world)
    engine.register_product(_prog(), fields={"height": "height"}, params={"K": 3}, apply=applied, cpu_fallback=_fallback)
    run_until_idle(engine)
    assert applied.results[-1].source == "gpu"
    _check(applied, world, 3)


REASON = (
    "Engine.set_params never re-plans the product (engine.py set_params -> _reregister uses the old "
    "product.plan): OutputPlan.per_item/record_shape keep the registration's K, so records of the new K "
    "are decoded/checked against the old shape (records.py _shape reshape / fallback_outputs size check)"
)


def test_set_params_changing_records_per_item_on_the_gpu(make_engine):
    world = _world()
    engine = make_engine(world)
    applied = Applied(world)
    h = engine.register_product(_prog(), fields={"height": "height"}, params={"K": 2}, apply=applied, cpu_fallback=_fallback)
    run_until_idle(engine)
    engine.set_params(h, {"K": 5})
    run_until_idle(engine)
    assert applied.results[-1].source == "gpu"
    _check(applied, world, 5)


def test_set_params_changing_records_per_item_on_the_cpu():
    world = _world()
    engine = Engine(world, backend=NoGpuBackend())
    applied = Applied(world)
    h = engine.register_product(_prog(), fields={"height": "height"}, params={"K": 2}, apply=applied, cpu_fallback=_fallback)
    run_until_idle(engine)
    engine.set_params(h, {"K": 5})
    run_until_idle(engine)
    _check(applied, world, 5)
