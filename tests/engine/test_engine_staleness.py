"""Revalidated asynchronous readback: results of changed or evicted chunks, of unregistered
products and of replaced generations are discarded, counted, and never applied."""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pytest

from engine_plugin.engine import fallbacks, kernel_folder
from engine_plugin.gpu import ReadbackPolicy

from engine_support import Applied, cpu_summary, held_deliveries, run_until_idle, same_bits, summary_product


def test_chunk_mutated_before_its_readback_lands_is_discarded_and_the_others_applied(world, make_engine):
    engine = make_engine(world)
    applied = Applied(world)
    summary_product(engine, "height", applied)
    with held_deliveries(engine):
        st = engine.frame()
        assert st.readbacks_requested == 1 and engine.inflight == 1
        world.write(7, "height", 3.0)  # after its upload, before its readback is delivered
    totals = run_until_idle(engine)
    assert totals.readbacks_applied == 2  # the first (255 chunks), then chunk 7 again
    assert totals.chunks_stale == 1 and totals.chunks_applied == 255 + 1
    assert totals.readbacks_stale == 0  # partly stale readbacks count as applied
    first = applied.results[0]
    assert 7 not in first.keys and len(first.keys) == 255
    assert applied.results[1].keys == (7,)
    assert same_bits(applied.latest[7], cpu_summary(world, "height", 7))
    assert applied.latest[7][0] == 3.0 and not applied.not_current


def test_every_chunk_changed_in_flight_discards_the_whole_readback(make_engine):
    from engine_support import make_world

    world = make_world(n=4)
    engine = make_engine(world)
    applied = Applied(world)
    summary_product(engine, "height", applied)
    with held_deliveries(engine):
        engine.frame()
        for k in world.keys():
            world.set_tile(k, "height", (0, 0), 1.5)
    totals = run_until_idle(engine)
    assert totals.readbacks_stale == 1 and totals.chunks_stale == 4
    assert totals.readbacks_applied == 1 and totals.chunks_applied == 4
    assert len(applied.results) == 1 and not applied.not_current


def test_unregister_with_readbacks_in_flight_discards_all_its_late_results(world, make_engine):
    engine = make_engine(world)
    gone, kept = Applied(world), Applied(world)
    h = summary_product(engine, "height", gone)
    summary_product(engine, "moisture", kept)
    with held_deliveries(engine):
        engine.frame()
        engine.frame()  # nothing owed: no more requests
        assert engine.inflight == 2
        assert engine.unregister_product(h)
        assert not engine.unregister_product(h)
    totals = run_until_idle(engine)
    assert gone.results == []
    assert totals.readbacks_stale == 1 and totals.chunks_stale == 256
    assert totals.readbacks_applied == 1 and len(kept.latest) == 256
    assert engine.backend.inflight_readbacks == 0 and engine.backend.live_staging_buffers == 0


def test_eviction_with_a_pending_readback_applies_nothing_to_the_evicted_chunk(world, make_engine):
    engine = make_engine(world)
    applied = Applied(world)
    summary_product(engine, "height", applied)
    with held_deliveries(engine):
        engine.frame()
        slot = world.evict(5)
        assert world.add(999, {"height": 2.0}) == slot  # the freed slot, reused at once
    totals = run_until_idle(engine)
    assert 5 not in applied.keys_applied and 5 not in applied.latest
    assert totals.chunks_stale == 1 and totals.chunks_applied == 255 + 1
    assert same_bits(applied.latest[999], cpu_summary(world, "height", 999))
    # The key comes back with new content: a new version, computed afresh.
    world.evict(999)
    world.add(5, {"height": 4.0})
    run_until_idle(engine)
    assert applied.latest[5][0] == 4.0 and not applied.not_current


def _asset_copy(tmp_path) -> str:
    root = tmp_path / "assets"
    shutil.copytree(kernel_folder("summary"), root / "engine" / "summary.computeShader")
    return str(root)


def _wait_prepared(lib, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while lib.pending == 0:
        if time.monotonic() > deadline:
            raise AssertionError("the reload was never prepared")
        time.sleep(0.005)


def test_hot_reload_with_readbacks_in_flight_discards_the_old_generation(tmp_path, gpu, make_engine):
    from engine_plugin.assets import AssetLibrary

    from engine_support import make_world

    world = make_world(n=32)
    root = _asset_copy(tmp_path)
    lib = AssetLibrary(root, cache=str(tmp_path / "cache"), device=gpu)
    try:
        ref = lib.load("engine/summary.computeShader")
        engine = make_engine(world, library=lib)
        applied = Applied(world)
        h = engine.register_product("engine/summary.computeShader", spec={"T": "f32"}, fields={"src": "height"},
                                    apply=applied, cpu_fallback=fallbacks.summary)
        first_generation = engine.generation(h)
        with held_deliveries(engine):
            engine.frame()
            assert engine.inflight == 1
            kernel = os.path.join(root, "engine", "summary.computeShader", "kernel.wgsl")
            text = open(kernel).read()
            edited = text.replace("sum * params.inv_tile_count, sum)", "sum * params.inv_tile_count + 1.0, sum)")
            assert edited != text
            with open(kernel, "w") as f:
                f.write(edited)
            lib.request_reload("engine/summary.computeShader")
            _wait_prepared(lib)
            st = engine.frame()  # applies the reload, re-registers, then the old results land
        assert st.reregistered == 1 and ref.generation == 1
        assert engine.generation(h) not in (0, first_generation)
        totals = run_until_idle(engine)
        totals.add(st)
        assert totals.readbacks_stale == 1 and totals.chunks_stale == 32
        assert applied.generations() == {engine.generation(h)}
        for k in world.keys():
            want = cpu_summary(world, "height", k)
            want[2] += np.float32(1.0)
            assert same_bits(applied.latest[k], want), k
    finally:
        lib.close()


def test_a_reload_that_breaks_the_product_contract_keeps_the_previous_kernel(tmp_path, gpu, make_engine, caplog):
    from engine_plugin.assets import AssetLibrary

    from engine_support import make_world

    world = make_world(n=8)
    root = _asset_copy(tmp_path)
    lib = AssetLibrary(root, cache=str(tmp_path / "cache"), device=gpu)
    try:
        engine = make_engine(world, library=lib)
        applied = Applied(world)
        h = engine.register_product("engine/summary.computeShader", fields={"src": "height"}, apply=applied,
                                    cpu_fallback=fallbacks.summary)
        run_until_idle(engine)
        generation = engine.generation(h)
        yaml_path = os.path.join(root, "engine", "summary.computeShader", "bindings.yaml")
        text = open(yaml_path).read()
        with open(yaml_path, "w") as f:  # the work list renamed: no longer a product kernel
            f.write(text.replace("name: chunks,", "name: slots,"))
        kernel = os.path.join(root, "engine", "summary.computeShader", "kernel.wgsl")
        body = open(kernel).read()
        with open(kernel, "w") as f:
            f.write(body.replace("chunks_get", "slots_get"))
        lib.request_reload("engine/summary.computeShader")
        _wait_prepared(lib)
        st = engine.frame()
        assert st.reregistered == 0 and engine.generation(h) == generation
        assert "keeps its previous kernel" in caplog.text and "work list" in caplog.text
        from engine_plugin.engine import ProductError

        err = engine.product_error(h)  # as raised: the span names the user's bindings.yaml
        assert isinstance(err, ProductError) and err.path == yaml_path and "work list" in str(err)
        world.write(3, "height", 8.0)
        run_until_idle(engine)
        assert applied.latest[3][0] == 8.0
    finally:
        lib.close()


@pytest.mark.parametrize("policy", [ReadbackPolicy.SELECTED_TILES])
def test_selected_tiles_are_revalidated_per_chunk(world, make_engine, policy):
    from engine_plugin.engine import kernel_program

    engine = make_engine(world)
    applied = Applied(world)
    tiles = [(1, (0, 0)), (1, (31, 31)), (2, (5, 6)), (3, 100)]
    engine.register_product(kernel_program("combine"), spec={"OP": "max"}, fields=["height", "moisture"],
                            policy=policy, tiles=tiles, apply=applied, cpu_fallback=fallbacks.combine)
    with held_deliveries(engine):
        engine.frame()
        world.set_tile(2, "moisture", (0, 0), 7.0)  # chunk 2 changes; its selected tile did not, but its version did
    totals = run_until_idle(engine)
    assert totals.chunks_stale == 1
    first = applied.results[0]
    assert {k for k, _ in first.tiles} == {1, 3} and applied.results[1].tiles == ((2, (5, 6)),)
    for (k, tile), value in applied.latest.items():
        assert value == max(world.read(k, "height")[tile], world.read(k, "moisture")[tile])


@pytest.mark.parametrize("revalidate", ["chunk", "fields"])
def test_a_change_to_a_field_the_product_does_not_read_is_stale_only_per_chunk(make_engine, revalidate):
    from engine_plugin.engine import EngineConfig

    from engine_support import make_world

    world = make_world(n=8)
    engine = make_engine(world, config=EngineConfig(revalidate=revalidate))
    applied = Applied(world)
    summary_product(engine, "height", applied)
    with held_deliveries(engine):
        engine.frame()
        world.write(1, "moisture", 0.5)   # not read by the product
        world.write(2, "height", 9.0)     # read by it
        slot = world.evict(3)
        world.add(3, {"height": 1.0})     # back, new content, same slot
        assert world.slot(3) == slot
    totals = run_until_idle(engine)
    stale_first = {"chunk": {1, 2, 3}, "fields": {2, 3}}[revalidate]
    assert set(applied.results[0].keys) == set(range(8)) - stale_first
    assert totals.chunks_stale == len(stale_first)
    for k in world.keys():
        assert same_bits(applied.latest[k], cpu_summary(world, "height", k)), k


def test_revalidate_takes_chunk_or_fields_only():
    from engine_plugin.engine import EngineConfig, ProductError

    with pytest.raises(ProductError, match="'chunk' or 'fields'"):
        EngineConfig(revalidate="never")


def test_invalidate_applies_the_results_in_flight_then_the_recomputation(world, make_engine):
    # Review helper 43 asked for results in flight at invalidate() to be void; that starved a
    # product invalidated every frame (the demo's heat: it changes on the GPU), which then
    # applied nothing at all. Results in flight land first, the recomputation after them.
    engine = make_engine(world)
    applied = Applied(world)
    handle = summary_product(engine, "height", applied)
    run_until_idle(engine)
    with held_deliveries(engine):
        world.write(3, "height", 7.0)
        engine.frame()  # chunk 3's result in flight
    engine.invalidate(handle)
    before = len(applied.results)
    run_until_idle(engine)
    after = [k for r in applied.results[before:] for k in r.keys]
    assert after.count(3) == 2 and sorted(set(after)) == sorted(world.keys())
    assert same_bits(applied.latest[3], cpu_summary(world, "height", 3)) and not applied.not_current


def test_a_product_invalidated_every_frame_still_applies_results(world, make_engine):
    import time

    engine = make_engine(world)
    applied = Applied(world)
    handle = summary_product(engine, "height", applied)
    deadline = time.monotonic() + 60
    while not applied.results and time.monotonic() < deadline:
        engine.invalidate(handle)
        engine.frame()
        time.sleep(0.001)
    assert applied.results, "nothing applied in 60 s of frames that each invalidate the product"


def test_a_reload_that_adds_a_param_is_adopted_by_setting_it(tmp_path, gpu, make_engine):
    # Review helper 44: the reload was refused ("needs param 'bias'") and set_params refused
    # the new param against the old kernel's plan: only unregistering reached the new kernel.
    from engine_plugin.assets import AssetLibrary
    from engine_plugin.engine import ProductError

    from engine_support import make_world

    world = make_world(n=8)
    root = tmp_path / "assets"
    shutil.copytree(kernel_folder("count_above"), root / "engine" / "count_above.computeShader")
    lib = AssetLibrary(str(root), cache=str(tmp_path / "cache"), device=gpu)
    try:
        engine = make_engine(world, library=lib)
        got = {}
        h = engine.register_product("engine/count_above.computeShader", fields={"src": "height"}, params={"threshold": 0.0},
                                    apply=lambda r: got.update(zip(r.keys, np.asarray(r.values).reshape(-1).tolist())),
                                    cpu_fallback=fallbacks.count_above)
        run_until_idle(engine)
        folder = root / "engine" / "count_above.computeShader"
        yaml_path = folder / "bindings.yaml"
        yaml_path.write_text(yaml_path.read_text().replace("  - { name: threshold, type: f32 }", "  - { name: threshold, type: f32 }\n  - { name: bias, type: f32 }"))
        kernel = folder / "kernel.wgsl"
        kernel.write_text(kernel.read_text().replace("flush_in(params.threshold)", "flush_in(params.threshold + params.bias)"))
        lib.request_reload("engine/count_above.computeShader")
        _wait_prepared(lib)
        generation = engine.generation(h)
        engine.frame()
        assert engine.generation(h) == generation and "bias" in str(engine.product_error(h))  # refused: the old kernel runs
        with pytest.raises(ProductError, match="unknown param 'nope'"):
            engine.set_params(h, {"threshold": 0.0, "nope": 1.0})  # fits neither: nothing changes
        engine.set_params(h, {"threshold": 0.0, "bias": 1e9})
        assert engine.product_error(h) is None and engine.generation(h) != generation
        run_until_idle(engine)
        assert all(got[k] == 0 for k in world.keys())  # nothing is above 0 + 1e9: the new kernel ran
    finally:
        lib.close()


def test_a_reload_that_removes_a_param_the_product_passes_names_the_bindings_yaml_line(tmp_path, gpu, make_engine):
    # Review helper 229: the refusal said "unknown param 'threshold'; ... takes: tile_count" and
    # named no file, where a save adding a param names its bindings.yaml line.
    from engine_plugin.assets import AssetLibrary
    from engine_plugin.engine import ProductError

    from engine_support import make_world

    world = make_world(n=8)
    root = tmp_path / "assets"
    shutil.copytree(kernel_folder("count_above"), root / "engine" / "count_above.computeShader")
    lib = AssetLibrary(str(root), cache=str(tmp_path / "cache"), device=gpu)
    try:
        engine = make_engine(world, library=lib)
        h = engine.register_product("engine/count_above.computeShader", fields={"src": "height"}, params={"threshold": 0.0},
                                    apply=lambda r: None, cpu_fallback=fallbacks.count_above)
        run_until_idle(engine)
        folder = root / "engine" / "count_above.computeShader"
        yaml_path = folder / "bindings.yaml"
        yaml_path.write_text(yaml_path.read_text().replace("  - { name: threshold, type: f32 }\n", ""))
        kernel = folder / "kernel.wgsl"
        kernel.write_text(kernel.read_text().replace("flush_in(params.threshold)", "0.0"))
        lib.request_reload("engine/count_above.computeShader")
        _wait_prepared(lib)
        generation = engine.generation(h)
        engine.frame()
        error = engine.product_error(h)
        assert engine.generation(h) == generation and isinstance(error, ProductError), error
        assert "unknown param 'threshold'" in error.message, error
        assert (error.path, error.line, error.col) == (str(yaml_path), 6, 1), str(error)  # its params: line
        assert str(error).startswith(f"{yaml_path}:6:1: unknown param") and "params:" in str(error), str(error)
    finally:
        lib.close()
