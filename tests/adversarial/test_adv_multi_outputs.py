"""Products with several per-item outputs of different element types and records per item
(f32 x1, vec4<u32> x3, vec2<i32> x16) under the tile policies, partly stale: every output's
rows must stay with their own tile/chunk (checked against a numpy model of the kernel)."""

from __future__ import annotations

import numpy as np
import pytest
from engine_support import Applied, held_deliveries, run_until_idle

from engine_plugin import abi
from engine_plugin.engine import EngineConfig
from engine_plugin.gpu import ReadbackPolicy, WgpuBackendConfig
from engine_plugin.world import World

SHAPE = (8, 8)
TC = SHAPE[0] * SHAPE[1]


def _yaml(items: str) -> str:
    return f"""\
bindings:
  - {{ name: {items}, kind: buffer, access: read, element: u32 }}
  - {{ name: height, kind: buffer, access: read, element: f32 }}
  - {{ name: a, kind: buffer, access: read_write, element: f32, count: "n" }}
  - {{ name: b, kind: buffer, access: read_write, element: vec4<u32>, count: "3 * n" }}
  - {{ name: c, kind: buffer, access: read_write, element: vec2<i32>, count: "16 * n" }}
params:
  - {{ name: tile_count, type: u32 }}
"""


def _wgsl(items: str, tile_of: str) -> str:
    return f"""\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{
    let i = zero_index(gid);
    if (i >= zero_n()) {{ return; }}
    let g = {tile_of};
    a_set(i, height_get(g));
    for (var j = 0u; j < 3u; j = j + 1u) {{
        b_set(i * 3u + j, vec4<u32>(g / params.tile_count, g % params.tile_count, j, 0xABCDu));
    }}
    for (var j = 0u; j < 16u; j = j + 1u) {{
        c_set(i * 16u + j, vec2<i32>(i32(g % params.tile_count) * i32(j), -i32(j) - 1));
    }}
}}
"""


TILE_PROG = None


def _program(items: str = "tiles"):
    tile_of = "tiles_get(i)" if items == "tiles" else "chunks_get(i) * params.tile_count"
    key = f"adv/multi_{items}"
    return abi.program(key=key, schema=abi.parse(_yaml(items), f"{key}/bindings.yaml"), wgsl=_wgsl(items, tile_of), wgsl_path=f"{key}/kernel.wgsl")


def _world(n: int = 6, seed: int = 11) -> World:
    world = World(SHAPE, {"height": np.float32}, max_chunks=n + 2)
    rng = np.random.default_rng(seed)
    for k in range(n):
        world.add(k, {"height": rng.standard_normal(SHAPE, dtype=np.float32)})
    return world


def _model(world: World, key: int, tile: int) -> dict[str, np.ndarray]:
    """What the kernel writes for tile ``tile`` (linear) of chunk ``key``."""
    slot = world.slot(key)
    j = np.arange(16, dtype=np.int32)
    return {
        "a": np.float32(world.read(key, "height").reshape(-1)[tile]),
        "b": np.array([[slot, tile, x, 0xABCD] for x in range(3)], dtype=np.uint32),
        "c": np.stack([tile * j, -j - 1], axis=1).astype(np.int32),
    }


def _fallback(world, job):
    out = {"a": [], "b": [], "c": []}
    if job.tiles:
        pairs = [(k, int(np.ravel_multi_index(t, SHAPE))) for k, t in job.tiles]
    elif job.policy is ReadbackPolicy.FULL_FIELD:
        pairs = [(k, t) for k in job.keys for t in range(TC)]
    else:
        pairs = [(k, 0) for k in job.keys]
    for k, t in pairs:
        m = _model(world, k, t)
        for name in out:
            out[name].append(m[name])
    return {name: np.array(v) for name, v in out.items()}


SEL = [(k, (r, c)) for k in (0, 2, 3, 5) for r, c in ((0, 0), (7, 7), (3, 5), (5, 3))]


def _check_tiles(result, world):
    assert set(result.outputs) == {"a", "b", "c"}
    n = len(result.tiles)
    assert result.outputs["a"].shape == (n,) and result.outputs["b"].shape == (n, 3, 4) and result.outputs["c"].shape == (n, 16, 2)
    assert np.array_equal(result.values, result.outputs["a"])
    for i, (k, t) in enumerate(result.tiles):
        m = _model(world, k, int(np.ravel_multi_index(t, SHAPE)))
        assert result.outputs["a"][i] == m["a"] and result.by_tile()[(k, t)] == m["a"]
        assert np.array_equal(result.outputs["b"][i], m["b"]), (k, t)
        assert np.array_equal(result.outputs["c"][i], m["c"]), (k, t)


@pytest.mark.parametrize("policy", [ReadbackPolicy.SELECTED_TILES, ReadbackPolicy.SELECTED_PATH])
def test_selected_tiles_multi_outputs_line_up_after_partial_staleness(make_engine, policy):
    world = _world()
    engine = make_engine(world)
    applied = Applied(world)
    kwargs = {"tiles": SEL} if policy is ReadbackPolicy.SELECTED_TILES else {"path": [(0, (0, 0)), (0, (3, 5)), (2, (7, 7)), (5, (5, 3))]}
    engine.register_product(_program(), fields={"height": "height"}, policy=policy, apply=applied, cpu_fallback=_fallback, **kwargs)
    with held_deliveries(engine):
        engine.frame()
        world.set_tile(2, "height", (7, 7), 123.0)  # chunk 2 changes under the readback
    totals = run_until_idle(engine)
    assert totals.chunks_stale >= 1 and not applied.not_current
    assert all(r.source == "gpu" for r in applied.results)
    for r in applied.results:
        _check_tiles(r, world)
    if policy is ReadbackPolicy.SELECTED_TILES:
        first = applied.results[0]
        assert 2 not in first.keys and len(first.tiles) == 12
        assert applied.results[-1].keys == (2,)
        assert applied.latest[(2, (7, 7))] == np.float32(123.0)


def test_full_field_multi_outputs_by_chunk_after_partial_staleness(make_engine):
    world = _world()
    engine = make_engine(world, config=EngineConfig(backend=WgpuBackendConfig(allow_full_field=True)))
    applied = Applied(world)
    engine.register_product(_program(), fields={"height": "height"}, policy=ReadbackPolicy.FULL_FIELD, apply=applied, cpu_fallback=_fallback)
    with held_deliveries(engine):
        engine.frame()
        world.set_tile(3, "height", (1, 2), -55.0)
    totals = run_until_idle(engine)
    assert totals.chunks_stale == 1 and not applied.not_current
    assert [r.source for r in applied.results] == ["gpu", "gpu"]
    first, second = applied.results
    assert 3 not in first.keys and second.keys == (3,)
    for r in applied.results:
        nk = len(r.keys)
        assert r.values.shape == (nk, *SHAPE)
        assert r.outputs["b"].shape == (nk, *SHAPE, 3, 4) and r.outputs["c"].shape == (nk, *SHAPE, 16, 2)
        for i, k in enumerate(r.keys):
            assert np.array_equal(r.by_chunk()[k], world.read(k, "height"))
            for t in range(TC):
                m = _model(world, k, t)
                rc = np.unravel_index(t, SHAPE)
                assert np.array_equal(r.outputs["b"][i][rc], m["b"]), (k, t)
                assert np.array_equal(r.outputs["c"][i][rc], m["c"]), (k, t)


def test_summary_multi_outputs_with_a_readback_subset(make_engine):
    world = _world()
    engine = make_engine(world)
    applied = Applied(world)
    engine.register_product(_program("chunks"), fields={"height": "height"}, readback=["c", "a"], apply=applied, cpu_fallback=_fallback)
    with held_deliveries(engine):
        engine.frame()
        world.set_tile(4, "height", (0, 0), 9.0)
    run_until_idle(engine)
    assert not applied.not_current and {r.source for r in applied.results} == {"gpu"}
    for r in applied.results:
        assert set(r.outputs) == {"c", "a"} and r.record_shape == (16, 2)
        assert np.array_equal(r.values, r.outputs["c"])
        for i, k in enumerate(r.keys):
            m = _model(world, k, 0)
            assert r.outputs["a"][i] == m["a"] and np.array_equal(r.by_chunk()[k], m["c"])
    assert applied.latest[4][0][1] == -1 and sorted(applied.latest) == list(world.keys())
