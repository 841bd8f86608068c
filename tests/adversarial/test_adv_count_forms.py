"""Output counts the contract classifies by evaluating them at n = 0..3 (contract.py
_plan_output): a capped count such as ``min(n, 4)`` equals n there but is a whole-dispatch
output of at most 4 records, which must come back as such, not as one record per item."""

from __future__ import annotations

import numpy as np
import pytest
from engine_support import Applied, run_until_idle

from engine_plugin import abi
from engine_plugin.world import World

SHAPE = (2, 2)

YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: height, kind: buffer, access: read, element: f32 }
  - { name: all, kind: buffer, access: read_write, element: u32, count: "n" }
  - { name: first, kind: buffer, access: read_write, element: u32, count: "min(n, 4)" }
params:
  - { name: tile_count, type: u32 }
"""
WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let slot = chunks_get(i);
    all_set(i, slot + 100u);
    if (i < 4u) { first_set(i, slot + 1000u); }
}
"""


def _fallback(world, job):
    slots = [world.slot(k) for k in job.keys]
    return {"all": np.array([s + 100 for s in slots], np.uint32), "first": np.array([s + 1000 for s in slots[:4]], np.uint32)}


def test_a_capped_count_is_a_whole_dispatch_output(make_engine):
    n = 9
    world = World(SHAPE, {"height": np.float32}, max_chunks=n)
    for k in range(n):
        world.add(k, {"height": np.zeros(SHAPE, np.float32)})
    engine = make_engine(world)
    applied = Applied(world)
    prog = abi.program(key="adv/cap", schema=abi.parse(YAML, "adv/cap/bindings.yaml"), wgsl=WGSL, wgsl_path="adv/cap/kernel.wgsl")
    engine.register_product(prog, fields={"height": "height"}, apply=applied, cpu_fallback=_fallback)
    run_until_idle(engine)
    (r,) = applied.results
    slots = [world.slot(k) for k in r.keys]
    assert r.outputs["all"].tolist() == [s + 100 for s in slots]
    assert r.outputs["first"].tolist() == [s + 1000 for s in slots[:4]]
