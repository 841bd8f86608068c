"""A CPU fallback's answer stands only for the product as it was when the fallback was asked
(review helper 177): changed from inside the fallback (set_params, invalidate, unregister, a
nested frame()), its answer is not applied and its chunks stay owed; a malformed answer leaves
its chunks owed, as a fallback that raises does. Checked against numpy, on NoGpuBackend (the
fallback path is the same behind a lost GPU)."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from engine_plugin.engine import Engine, ProductError
from engine_plugin.errors import PluginError
from engine_plugin.gpu import NoGpuBackend, ReadbackPolicy
from engine_plugin.world import World

from chain_kernels import SUM_W, SUM_Y, prog

SUM = prog("f177/sum", SUM_Y, SUM_W)


def _world(n: int = 6) -> World:
    world = World((4, 4), {"height": np.float32}, max_chunks=16)
    rng = np.random.default_rng(1)
    for k in range(n):
        world.add(k, {"height": rng.standard_normal((4, 4), dtype=np.float32) * 10})
    return world


def _sum(world: World, key: int, c: float) -> np.float32:
    return np.float32(c) * np.cumsum(world.read(key, "height").reshape(-1).astype(np.float32), dtype=np.float32)[-1]


def _fallback(world, work):
    return np.array([_sum(world, k, work.params["c"]) for k in work.keys], np.float32)


class Applied:
    def __init__(self):
        self.latest: dict[int, float] = {}
        self.times = collections.Counter()

    def __call__(self, result):
        for k, v, value in zip(result.keys, result.versions, result.values):
            self.latest[k] = float(np.asarray(value).reshape(-1)[0])
            self.times[(k, v, result.generation, result.source)] += 1


def _settle(engine: Engine, frames: int = 20) -> list[BaseException]:
    errors = []
    for _ in range(frames):
        try:
            engine.frame()
        except PluginError as exc:
            errors.append(exc)
        if engine.idle:
            break
    assert engine.idle, engine.pending
    return errors


def _register(engine, applied, fallback, cpu_only=False):
    if cpu_only:
        return engine.register_product(None, key="sum", fields=["height"], params={"c": 2.0}, apply=applied, cpu_fallback=fallback)
    return engine.register_product(SUM, key="sum", fields={"src": "height"}, params={"c": 2.0}, policy=ReadbackPolicy.SUMMARY, apply=applied, cpu_fallback=fallback)


def test_set_params_from_inside_the_fallback_is_not_undone_by_its_old_answer():
    # Its answer (c=2) was applied after set_params (c=5) and its chunks marked computed:
    # idle with every chunk at the old params' value.
    world, applied = _world(), Applied()
    engine = Engine(world, backend=NoGpuBackend())
    armed = [True]

    def fallback(w, work):
        out = _fallback(w, work)
        if armed[0]:
            armed[0] = False
            engine.set_params(handle, {"c": 5.0})
        return out

    handle = _register(engine, applied, fallback)
    _settle(engine)
    assert {k: applied.latest.get(k) for k in world.keys()} == {k: float(_sum(world, k, 5.0)) for k in world.keys()}


def test_invalidate_from_inside_the_fallback_computes_again():
    world, applied = _world(), Applied()
    engine = Engine(world, backend=NoGpuBackend())
    calls = []

    def fallback(w, work):
        calls.append(tuple(work.keys))
        if len(calls) == 1:
            engine.invalidate(handle)
        return _fallback(w, work)

    handle = _register(engine, applied, fallback)
    _settle(engine)
    assert len(calls) == 2 and calls[1] == calls[0]  # asked again: its first answer was not taken
    assert applied.latest == {k: float(_sum(world, k, 2.0)) for k in world.keys()}
    assert max(applied.times.values()) == 1


def test_a_product_unregistered_from_inside_its_fallback_gets_no_result():
    world, applied = _world(), Applied()
    engine = Engine(world, backend=NoGpuBackend())

    def fallback(w, work):
        engine.unregister_product(handle)
        return _fallback(w, work)

    handle = _register(engine, applied, fallback)
    engine.frame()
    assert applied.latest == {}


def test_a_nested_frame_inside_the_fallback_applies_each_result_once():
    world, applied = _world(), Applied()
    engine = Engine(world, backend=NoGpuBackend())
    nested = [1]

    def fallback(w, work):
        if nested[0]:
            nested[0] -= 1
            engine.frame()
        return _fallback(w, work)

    _register(engine, applied, fallback)
    _settle(engine)
    assert applied.latest == {k: float(_sum(world, k, 2.0)) for k in world.keys()}
    assert max(applied.times.values()) == 1, applied.times


@pytest.mark.parametrize("cpu_only", [False, True])
@pytest.mark.parametrize("answer", ["short", "none"])
def test_a_malformed_answer_leaves_its_chunks_owed_and_says_so(cpu_only, answer):
    # They were marked computed before the answer was checked: never computed again, the
    # engine idle with no result for them; a CPU-only product raised a bare ValueError.
    world, applied = _world(), Applied()
    engine = Engine(world, backend=NoGpuBackend())
    once = [True]

    def fallback(w, work):
        out = _fallback(w, work)
        if once[0]:
            once[0] = False
            return out[:-1] if answer == "short" else None
        return out

    _register(engine, applied, fallback, cpu_only)
    with pytest.raises(ProductError, match="fallback of 'sum'"):
        engine.frame()
    assert not engine.idle  # still owed
    _settle(engine)
    assert applied.latest == {k: float(_sum(world, k, 2.0)) for k in world.keys()}
