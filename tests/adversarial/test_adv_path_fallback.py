"""SELECTED_PATH on the CPU fallback: a path is computed all or nothing, so when one of its
chunks changes the whole path must be computed again from the current world."""

from __future__ import annotations

import numpy as np
import pytest
from engine_support import Applied
from test_adv_multi_outputs import SHAPE, _fallback, _model, _program, _world

from engine_plugin.engine import Engine
from engine_plugin.gpu import NoGpuBackend, ReadbackPolicy

PATH = [(0, (0, 0)), (0, (0, 3)), (1, (2, 2)), (2, (7, 7))]


def test_a_path_on_the_cpu_is_recomputed_when_one_of_its_chunks_changes():
    world = _world()
    engine = Engine(world, backend=NoGpuBackend())
    applied = Applied(world)
    engine.register_product(_program(), fields={"height": "height"}, policy=ReadbackPolicy.SELECTED_PATH, path=PATH, apply=applied, cpu_fallback=_fallback)
    engine.frame()
    assert len(applied.results) == 1 and engine.idle
    world.set_tile(1, "height", (2, 2), 42.0)
    for _ in range(5):
        engine.frame()
    assert engine.idle, f"still owed: {engine.product(engine.products()[0]).pending}"
    assert len(applied.results) == 2
    assert applied.latest[(1, (2, 2))] == np.float32(42.0)
    r = applied.results[-1]
    for i, (k, t) in enumerate(r.tiles):
        assert r.outputs["a"][i] == _model(world, k, int(np.ravel_multi_index(t, SHAPE)))["a"]
