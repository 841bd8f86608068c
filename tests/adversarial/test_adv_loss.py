"""A device error reported between a product's prepare and the frame's submit (a notify from
another thread mid-frame), then recover_gpu: a multi-output product is served by its
fallback meanwhile and by the GPU after, every chunk's latest records correct, nothing
applied twice, nothing stale."""

from __future__ import annotations

import numpy as np
from engine_support import Applied, run_until_idle
from test_adv_multi_outputs import _fallback, _model, _program, _world


def _dupes(applied):
    seen, dup = set(), []
    for r in applied.results:
        for k, v in zip(r.keys, r.versions):
            key = (r.generation, r.source, k, v)
            dup += [key] if key in seen else []
            seen.add(key)
    return dup


def _check_latest(engine, applied, world):
    for k in world.keys():
        got = [(r, i) for r in applied.results for i, kk in enumerate(r.keys) if kk == k][-1]
        r, i = got
        m = _model(world, k, 0)
        assert r.outputs["a"][i] == m["a"] and np.array_equal(r.outputs["b"][i], m["b"]) and np.array_equal(r.outputs["c"][i], m["c"]), k


def test_a_device_error_between_prepare_and_submit_then_recover(make_engine):
    world = _world(n=8)
    engine = make_engine(world)
    applied, other = Applied(world), Applied(world)
    prog = _program("chunks")
    engine.register_product(prog, key="a", fields={"height": "height"}, apply=applied, cpu_fallback=_fallback)
    engine.register_product(prog, key="b", fields={"height": "height"}, apply=other, cpu_fallback=_fallback)
    run_until_idle(engine)
    backend = engine.backend
    real = backend.dispatch
    calls = []

    def dispatch_then_fault(desc):
        ok = real(desc)
        calls.append(ok)
        if len(calls) == 1:
            backend.notify_device_error("adversarial: mid-frame")  # recorded, not yet submitted
        return ok

    backend.dispatch = dispatch_then_fault
    for k in (1, 4, 6):
        world.set_tile(k, "height", (0, 0), float(10 * k))
    st = engine.frame()
    assert calls[0] is True
    totals = run_until_idle(engine)
    assert not engine.gpu_active and engine.totals.cpu_fallbacks >= 1 and totals is not None
    _check_latest(engine, applied, world)
    _check_latest(engine, other, world)
    assert engine.recover_gpu()
    world.set_tile(2, "height", (0, 0), -3.0)
    run_until_idle(engine)
    assert applied.results[-1].source == "gpu" and other.results[-1].source == "gpu"
    for a in (applied, other):
        _check_latest(engine, a, world)
        assert not a.not_current and _dupes(a) == []
    assert st is not None


def test_recover_gpu_with_multi_output_readbacks_in_flight(make_engine):
    from engine_support import held_deliveries

    world = _world(n=8)
    engine = make_engine(world)
    applied = Applied(world)
    engine.register_product(_program("chunks"), key="a", fields={"height": "height"}, apply=applied, cpu_fallback=_fallback)
    with held_deliveries(engine):
        engine.frame()
        assert engine.inflight == 1
        engine.backend.notify_device_error("adversarial: in flight")
        world.set_tile(3, "height", (1, 1), 7.0)
        assert engine.recover_gpu()
    run_until_idle(engine)
    assert sorted(set(applied.keys_applied)) == sorted(world.keys())
    assert {r.source for r in applied.results} == {"gpu"} and not applied.not_current and _dupes(applied) == []
    _check_latest(engine, applied, world)
