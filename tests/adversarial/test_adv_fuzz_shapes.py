"""A seeded model-based fuzz of multi-output products (per chunk, per selected tile, full
field, whole-dispatch outputs) under edits, evictions, re-adds, re-selections and held
deliveries: after the world settles every product's latest records equal the numpy model of
its kernel over the current world, and nothing applied was stale when applied."""

from __future__ import annotations

import numpy as np
import pytest
from engine_support import Applied, held_deliveries, run_until_idle
from test_adv_multi_outputs import SHAPE, TC, _fallback, _model, _program, _world
from test_adv_zeroing import _prog as _acc_prog

from engine_plugin.engine import EngineConfig
from engine_plugin.gpu import ReadbackPolicy, WgpuBackendConfig


class WholeChecked(Applied):
    """Checks the whole-dispatch outputs of the accumulating product when applied."""

    def __init__(self, world):
        super().__init__(world)
        self.bad = []

    def __call__(self, result):
        super().__call__(result)
        slots = [self.world.slot(k) for k in result.keys]
        want = np.zeros(self.world.max_chunks, np.uint32)
        want[slots] = 1
        o = result.outputs
        if not (
            np.array_equal(o["perslot"], want)
            and o["tot"].tolist() == list(range(1, 17))
            and sorted(o["odd"].tolist()) == sorted(s for s in slots if s & 1)
            and o["acc"].tolist() == [[1, s] for s in slots]
        ):
            self.bad.append(result)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fuzz_multi_output_products(make_engine, seed):
    rng = np.random.default_rng(seed)
    world = _world(n=8, seed=seed)
    cfg = EngineConfig(backend=WgpuBackendConfig(allow_full_field=True, max_chunks_per_dispatch=3), max_dispatches_per_product=2)
    engine = make_engine(world, config=cfg)
    per_chunk, tiles, full = Applied(world), Applied(world), Applied(world)
    whole = WholeChecked(world)
    engine.register_product(_program("chunks"), key="chunks", fields={"height": "height"}, apply=per_chunk, cpu_fallback=_fallback)
    sel = engine.register_product(
        _program(), key="tiles", fields={"height": "height"}, policy=ReadbackPolicy.SELECTED_TILES, tiles=[(0, (1, 1))], apply=tiles, cpu_fallback=_fallback
    )
    engine.register_product(_program(), key="full", fields={"height": "height"}, policy=ReadbackPolicy.FULL_FIELD, apply=full, cpu_fallback=_fallback)
    engine.register_product(_acc_prog(), key="whole", fields={"height": "height"}, apply=whole)
    next_key = 100
    selection = [(0, (1, 1))]
    for step in range(40):
        op = rng.integers(0, 7)
        keys = world.keys()
        if op == 0 and keys:
            k = int(rng.choice(keys))
            world.set_tile(k, "height", tuple(int(x) for x in rng.integers(0, SHAPE[0], 2)), float(rng.normal()))
        elif op == 1 and len(keys) > 2:
            world.evict(int(rng.choice(keys)))
        elif op == 2 and len(keys) < world.max_chunks:
            world.add(next_key, {"height": rng.standard_normal(SHAPE).astype(np.float32)})
            next_key += 1
        elif op == 3 and keys:
            picks = rng.choice(keys, size=min(3, len(keys)), replace=False)
            selection = [(int(k), (int(r), int(c))) for k in picks for r, c in rng.integers(0, SHAPE[0], (2, 2))]
            engine.select_tiles(sel, selection)
        elif op == 4:
            with held_deliveries(engine):
                engine.frame()
                if keys:
                    k = int(rng.choice(keys))
                    world.write(k, "height", float(rng.normal()))
        else:
            engine.frame()
    run_until_idle(engine)
    for a in (per_chunk, tiles, full, whole):
        assert not a.not_current
        seen = [(r.generation, r.source, k, v) for r in a.results for k, v in zip(r.keys, r.versions)]
        if a is not tiles:  # a selection's chunk comes back once per selection: tiles are checked above
            assert len(seen) == len(set(seen)), "a result applied twice"
    assert not whole.bad
    for k in world.keys():
        m = _model(world, k, 0)
        assert per_chunk.latest[k] == m["a"]
        got = [r for r in per_chunk.results if k in r.keys][-1]
        i = got.keys.index(k)
        assert np.array_equal(got.outputs["c"][i], m["c"]) and np.array_equal(got.outputs["b"][i], m["b"])
        assert np.array_equal(full.latest[k], world.read(k, "height")), k
        gotf = [r for r in full.results if k in r.keys][-1]
        j = gotf.keys.index(k)
        for t in (0, TC - 1):
            rc = np.unravel_index(t, SHAPE)
            assert np.array_equal(gotf.outputs["b"][j][rc], _model(world, k, t)["b"])
        assert k in {kk for r in whole.results for kk in r.keys}
    for k, t in dict.fromkeys((k, tuple(t)) for k, t in selection):
        if k in world:
            assert tiles.latest[(k, t)] == _model(world, k, int(np.ravel_multi_index(t, SHAPE)))["a"], (k, t)
