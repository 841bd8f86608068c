"""Readback policies end to end: SELECTED_TILES, SELECTED_PATH, FULL_FIELD (only when the
backend config opts in; refused otherwise, and then served by the CPU fallback)."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin.engine import Engine, EngineConfig, ProductError, fallbacks, kernel_program, path_tiles
from engine_plugin.gpu import NoGpuBackend, ReadbackPolicy, WgpuBackendConfig

from engine_support import Applied, held_deliveries, make_world, run_until_idle, same_bits


def _combine(engine, policy, applied, op="max", **kwargs):
    return engine.register_product(kernel_program("combine"), key=f"combine:{policy.name}", spec={"OP": op},
                                   fields=["height", "moisture"], policy=policy, apply=applied,
                                   cpu_fallback=fallbacks.combine, **kwargs)


def _want(world, key, tile, op=np.maximum):
    return op(world.read(key, "height")[tile], world.read(key, "moisture")[tile])


def test_selected_tiles_read_back_only_the_selection_and_match_the_cpu(make_engine):
    world = make_world(n=16)
    engine = make_engine(world)
    applied = Applied(world)
    tiles = [(0, (0, 0)), (0, (0, 0)), (3, (4, 5)), (9, 1023), (15, (31, 0))]
    h = _combine(engine, ReadbackPolicy.SELECTED_TILES, applied, tiles=tiles)
    st = run_until_idle(engine)
    assert st.readbacks_applied == 1 and st.chunks_applied == 4
    assert sorted(applied.latest) == sorted({(0, (0, 0)), (3, (4, 5)), (9, (31, 31)), (15, (31, 0))})
    for (k, tile), v in applied.latest.items():
        assert v == _want(world, k, tile)
    world.write(7, "height", 1.0)  # not a selected chunk: nothing to do
    assert run_until_idle(engine).dispatches == 0
    engine.select_tiles(h, [(7, (1, 1))])
    run_until_idle(engine)
    assert applied.results[-1].tiles == ((7, (1, 1)),) and applied.latest[(7, (1, 1))] == _want(world, 7, (1, 1))


def test_a_selection_outgrowing_its_buffers_re_registers(make_engine):
    world = make_world(n=4)
    engine = make_engine(world, config=EngineConfig(min_selection_capacity=2))
    applied = Applied(world)
    h = _combine(engine, ReadbackPolicy.SELECTED_TILES, applied, op="min", tiles=[(0, (0, 0))])
    run_until_idle(engine)
    generation = engine.generation(h)
    many = [(k, (y, 3)) for k in range(4) for y in range(8)]
    engine.select_tiles(h, many)
    run_until_idle(engine)
    assert engine.generation(h) != generation
    assert all(applied.latest[(k, t)] == _want(world, k, t, np.minimum) for k, t in many)


def test_path_tiles_join_waypoints_inside_a_chunk_and_jump_between_chunks():
    path = path_tiles([(1, (0, 0)), (1, (3, 6)), (2, (0, 0)), (2, (0, 0)), (2, 5)], (8, 8))
    assert path[:7] == ((1, (0, 0)), (1, (1, 1)), (1, (1, 2)), (1, (2, 3)), (1, (2, 4)), (1, (3, 5)), (1, (3, 6)))
    assert path[7:] == ((2, (0, 0)), (2, (0, 1)), (2, (0, 2)), (2, (0, 3)), (2, (0, 4)), (2, (0, 5)))
    with pytest.raises(ProductError, match="outside the chunk shape"):
        path_tiles([(1, (8, 0))], (8, 8))


def test_selected_path_is_applied_whole_or_not_at_all(make_engine):
    world = make_world(n=8)
    engine = make_engine(world)
    applied = Applied(world)
    waypoints = [(2, (0, 0)), (2, (0, 31)), (3, (5, 5)), (3, (9, 9))]
    _combine(engine, ReadbackPolicy.SELECTED_PATH, applied, op="add", path=waypoints)
    with held_deliveries(engine):
        engine.frame()
        world.set_tile(3, "height", (0, 0), 2.0)  # one chunk of the path changes in flight
    totals = run_until_idle(engine)
    assert totals.readbacks_stale == 1 and totals.chunks_stale == 2  # the whole path was discarded
    assert len(applied.results) == 1  # ... and computed again over the new content
    result = applied.results[0]
    assert result.tiles == path_tiles(waypoints, world.chunk_shape) and len(result.tiles) == 32 + 5
    expect = np.array([_want(world, k, t, np.add) for k, t in result.tiles], dtype=np.float32)
    assert same_bits(result.values, expect)


@pytest.mark.parametrize("backend", ["gpu", "cpu"])
@pytest.mark.parametrize("order", ["edit then evict", "evict then edit"])
def test_a_path_through_an_evicted_chunk_owes_nothing_until_the_chunk_is_back(make_engine, backend, order):
    """Review: editing a live chunk of a path after another of its chunks was evicted left the
    edit owed for good (``engine.idle`` never true), while the other order went idle. Either
    way the path is not computed while a chunk is missing, and its add owes the path again:
    computed whole from both chunks' current content."""
    world = make_world(n=4)
    engine = make_engine(world) if backend == "gpu" else Engine(world, backend=NoGpuBackend())
    applied = Applied(world)
    waypoints = [(0, (0, 0)), (1, (1, 1))]
    _combine(engine, ReadbackPolicy.SELECTED_PATH, applied, op="add", path=waypoints)
    run_until_idle(engine)
    if order == "edit then evict":
        world.set_tile(0, "height", (0, 0), 5.0)
        world.evict(1)
    else:
        world.evict(1)
        world.set_tile(0, "height", (0, 0), 5.0)
    applied.results.clear()
    run_until_idle(engine, timeout=30)
    assert applied.results == []  # no path over a missing chunk
    world.add(1, {"height": 3.0, "moisture": 4.0})
    run_until_idle(engine, timeout=30)
    (result,) = applied.results
    assert result.tiles == path_tiles(waypoints, world.chunk_shape)
    expect = np.array([_want(world, k, t, np.add) for k, t in result.tiles], dtype=np.float32)
    assert same_bits(result.values, expect) and expect[0] == world.read(0, "height")[0, 0] + world.read(0, "moisture")[0, 0]


def test_full_field_is_refused_unless_the_config_opts_in_and_the_cpu_serves_it(make_engine):
    world = make_world(n=8)
    engine = make_engine(world)
    refused = Applied(world)
    handle = _combine(engine, ReadbackPolicy.FULL_FIELD, refused)
    st = engine.frame()
    # Its readback would be refused every frame: its kernel is not run for nothing, and why
    # its fallback serves it is said (review helper 227: dispatched every frame, said nowhere).
    assert st.dispatches == 0 and st.readbacks_requested == 0 and st.cpu_fallbacks == 1
    error = engine.product_error(handle)
    assert isinstance(error, ProductError) and "FULL_FIELD" in str(error) and "allow_full_field=True" in str(error)
    assert refused.results[0].source == "cpu" and refused.results[0].values.shape == (8, 32, 32)

    world2 = make_world(n=8)
    opted = make_engine(world2, config=EngineConfig(backend=WgpuBackendConfig(allow_full_field=True)))
    full = Applied(world2)
    opted_handle = _combine(opted, ReadbackPolicy.FULL_FIELD, full)
    st = run_until_idle(opted)
    assert opted.product_error(opted_handle) is None
    assert st.readbacks_applied == 1 and st.cpu_fallbacks == 0 and full.results[0].source == "gpu"
    assert full.results[0].records.shape == (8 * 1024,) and full.results[0].values.shape == (8, 32, 32)
    for k in world2.keys():
        want = np.maximum(world2.read(k, "height"), world2.read(k, "moisture"))
        assert same_bits(full.latest[k], want)
        assert same_bits(refused.latest[k], full.latest[k])  # same content in both worlds
    world.write(3, "height", 7.0)  # a later change: its fallback again, still no dispatch
    st = engine.frame()
    assert st.dispatches == 0 and st.cpu_fallbacks == 1
    assert same_bits(refused.latest[3], np.maximum(world.read(3, "height"), world.read(3, "moisture")))


def test_tile_policies_on_the_cpu_give_the_same_values():
    world = make_world(n=8)
    engine = Engine(world, backend=NoGpuBackend())
    applied = Applied(world)
    _combine(engine, ReadbackPolicy.SELECTED_TILES, applied, tiles=[(1, (2, 3)), (5, (0, 0))])
    run_until_idle(engine)
    assert applied.latest[(1, (2, 3))] == _want(world, 1, (2, 3)) and applied.results[0].source == "cpu"


def test_the_same_selection_sent_every_frame_still_gets_its_result():
    # A game re-sending its cursor selection every frame: each call voided the result in
    # flight, so over 200 frames almost nothing was applied (review helper 60).
    world = make_world(n=8)
    engine = Engine(world)
    applied = Applied(world)
    tiles = [(1, (0, 0)), (2, (3, 3))]
    h = _combine(engine, ReadbackPolicy.SELECTED_TILES, applied, tiles=tiles)
    import time

    stale, deadline = 0, time.monotonic() + 20
    while not applied.results and time.monotonic() < deadline:
        engine.select_tiles(h, tiles)
        st = engine.frame()
        stale += st.readbacks_stale
        time.sleep(0.005)
    assert applied.results and stale == 0
    assert applied.results[-1].source == "gpu"
    engine.select_tiles(h, [(1, (0, 0))])  # another selection still voids what is in flight and recomputes
    run_until_idle(engine)
    assert applied.results[-1].keys == (1,)
    engine.close()


def test_the_combine_fallback_adds_inf_and_minus_inf_without_a_warning():
    import warnings

    from engine_plugin.world import World

    world = World((2, 2), {"height": np.float32, "moisture": np.float32}, max_chunks=1)
    world.add(0, {"height": np.full((2, 2), np.inf, np.float32), "moisture": np.full((2, 2), -np.inf, np.float32)})
    engine = Engine(world, backend=NoGpuBackend())
    applied = Applied(world)
    _combine(engine, ReadbackPolicy.SELECTED_TILES, applied, op="add", tiles=[(0, (0, 0))])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's RuntimeWarning reached the game (review helper 69)
        run_until_idle(engine)
    assert np.isnan(applied.results[-1].values).all()


def _rule_combine(op: str, a: np.float32, b: np.float32) -> int:
    """The combine kernel's stated rule on one tile, in plain Python over bits (an independent
    model): a zero or subnormal operand reads as +0.0, min/max skip a NaN operand and keep a
    on a tie, a zero or subnormal sum is +0.0, a NaN result is 0x7fc00000."""
    def nan(v):
        return (int(np.float32(v).view(np.uint32)) & 0x7FFFFFFF) > 0x7F800000

    def bits(v):
        return int(np.float32(v).view(np.uint32))

    def flushed(v):
        return np.float32(0.0) if (bits(v) & 0x7F800000) == 0 else v

    a, b = flushed(a), flushed(b)

    with np.errstate(invalid="ignore", over="ignore"):
        if op == "min":
            v = b if (b < a or nan(a)) else a
        elif op == "max":
            v = b if (b > a or nan(a)) else a
        else:
            v = np.float32(a + b)
            v = np.float32(0.0) if (bits(v) & 0x7F800000) == 0 else v
    return 0x7FC00000 if nan(v) else int(np.float32(v).view(np.uint32))


@pytest.mark.parametrize("op", ["add", "min", "max"])
def test_combine_answers_one_rule_for_nans_and_signed_zeros_on_the_gpu_and_the_cpu(make_engine, op):
    # WGSL leaves min/max of a NaN, 0.0 against -0.0 and an arithmetic NaN's bits to the
    # adapter (the H200 answered other bits than lavapipe and numpy for the summary kernel):
    # the kernel states every bit, and both sides are checked against that rule.
    from engine_plugin.world import World

    words = [0x7FC00000, 0x7FC00001, 0xFFC00000, 0x7F800001, 0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000,
             0x00000001, 0x807FFFFF, 0x00800000, 0x80800001]  # subnormals (the H200 flushes them) and the smallest normals
    values = np.array(words, np.uint32).view(np.float32)
    pairs = [(a, b) for a in values for b in values]  # every ordered pair, NaN kinds and zeros included
    chunks = len(pairs) // 4
    world = World((2, 2), {"height": np.float32, "moisture": np.float32}, max_chunks=chunks)
    for key in range(chunks):
        part = pairs[4 * key: 4 * key + 4]
        world.add(key, {"height": np.array([a for a, _ in part], np.float32).reshape(2, 2),
                        "moisture": np.array([b for _, b in part], np.float32).reshape(2, 2)})
    tiles = [(k, (y, x)) for k in range(chunks) for y in range(2) for x in range(2)]
    gpu, cpu = Applied(world), Applied(world)
    gpu_engine = make_engine(world)
    _combine(gpu_engine, ReadbackPolicy.SELECTED_TILES, gpu, op=op, tiles=tiles)
    run_until_idle(gpu_engine)
    cpu_engine = Engine(world, backend=NoGpuBackend())
    _combine(cpu_engine, ReadbackPolicy.SELECTED_TILES, cpu, op=op, tiles=tiles)
    run_until_idle(cpu_engine)
    assert {r.source for r in gpu.results} == {"gpu"} and {r.source for r in cpu.results} == {"cpu"}
    for tile, (a, b) in zip(tiles, pairs):
        want = _rule_combine(op, a, b)
        for side, applied in (("GPU", gpu), ("CPU", cpu)):
            got = int(np.float32(applied.latest[tile]).view(np.uint32))
            assert got == want, f"{side} {op}({a.view(np.uint32):#x}, {b.view(np.uint32):#x}) = {got:#x}, the rule says {want:#x}"
