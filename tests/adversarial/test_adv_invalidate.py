"""Engine.invalidate: "recompute every chunk of one product (all products when None) from the
next frame", whichever side serves the product."""

from __future__ import annotations

import pytest
from engine_support import Applied, make_world, run_until_idle, summary_product

from engine_plugin.engine import Engine
from engine_plugin.gpu import NoGpuBackend


def test_invalidate_recomputes_a_gpu_product(make_engine):
    world = make_world(n=6)
    engine = make_engine(world)
    applied = Applied(world)
    h = summary_product(engine, "height", applied)
    run_until_idle(engine)
    n = len(applied.keys_applied)
    engine.invalidate(h)
    run_until_idle(engine)
    assert len(applied.keys_applied) == n + 6 and applied.results[-1].source == "gpu"


def test_invalidate_recomputes_a_cpu_served_product():
    world = make_world(n=6)
    engine = Engine(world, backend=NoGpuBackend())
    applied = Applied(world)
    h = summary_product(engine, "height", applied)
    run_until_idle(engine)
    assert len(applied.keys_applied) == 6
    engine.invalidate(h)
    run_until_idle(engine)
    assert len(applied.keys_applied) == 12
