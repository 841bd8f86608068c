"""A selection that outgrows a product's buffers (min_selection_capacity) re-registers it with
bigger ones; multi-output records of every selected tile still line up, also when the new
selection arrives while the old one's readback is in flight."""

from __future__ import annotations

import numpy as np
from engine_support import Applied, held_deliveries, run_until_idle
from test_adv_multi_outputs import SHAPE, _check_tiles, _fallback, _program, _world

from engine_plugin.gpu import ReadbackPolicy


def test_a_selection_outgrowing_its_buffers_mid_flight(make_engine):
    world = _world(n=6)
    engine = make_engine(world)
    applied = Applied(world)
    h = engine.register_product(
        _program(), fields={"height": "height"}, policy=ReadbackPolicy.SELECTED_TILES, tiles=[(0, (0, 0)), (1, (1, 1))], apply=applied, cpu_fallback=_fallback
    )
    assert engine.product(h).gpu.capacity == 64
    rng = np.random.default_rng(5)
    big = [(int(k), (int(r), int(c))) for k, r, c in zip(rng.integers(0, 6, 150), rng.integers(0, SHAPE[0], 150), rng.integers(0, SHAPE[1], 150))]
    with held_deliveries(engine):
        engine.frame()
        engine.select_tiles(h, big)
    run_until_idle(engine)
    sel = engine.product(h).selection
    assert len(sel) > 64 and engine.product(h).gpu.capacity >= len(sel)
    assert not applied.not_current and all(r.source == "gpu" for r in applied.results)
    last = [r for r in applied.results if set(r.tiles) == set(sel)]
    assert last, [len(r.tiles) for r in applied.results]
    for r in applied.results:
        _check_tiles(r, world)
    assert set(applied.latest) >= set(sel)
