"""Products of any shape (issue 14): several outputs, many records per work item, appends with
their counts, ``live`` outputs over a domain count, constant inputs and tables bound by name,
kernels writing a field mirror; each checked against numpy on the GPU and through its CPU
fallback, and revalidated per chunk (or whole) like the simple products."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.engine import Engine, ProductError
from engine_plugin.gpu import NoGpuBackend, ReadbackPolicy
from engine_plugin.world import World

from engine_support import Applied, frames_until, held_deliveries, run_until_idle

SHAPE = (8, 8)
BINS = 16


def _world(n: int = 12, seed: int = 1) -> World:
    world = World(SHAPE, {"height": np.float32, "kind": np.uint32}, max_chunks=n + 4)
    rng = np.random.default_rng(seed)
    for k in range(n):
        world.add(k, {"height": rng.standard_normal(SHAPE, dtype=np.float32) * 10, "kind": rng.integers(0, BINS, SHAPE, dtype=np.uint32)})
    return world


def _program(key: str, yaml: str, wgsl: str):
    return abi.program(key=key, schema=abi.parse(yaml, f"{key}/bindings.yaml"), wgsl=wgsl, wgsl_path=f"{key}/kernel.wgsl")


# A per-chunk histogram (16 records per work item) and a second output (one per item).
HIST_YAML = f"""\
bindings:
  - {{ name: chunks, kind: buffer, access: read, element: u32 }}
  - {{ name: kind, kind: buffer, access: read, element: u32 }}
  - {{ name: hist, kind: buffer, access: read_write, element: u32, count: "n * {BINS}" }}
  - {{ name: nonzero, kind: buffer, access: read_write, element: u32, count: "n" }}
params:
  - {{ name: tile_count, type: u32 }}
"""
HIST_WGSL = f"""\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{
    let i = zero_index(gid);
    if (i >= zero_n()) {{ return; }}
    let base = chunks_get(i) * params.tile_count;
    for (var t = 0u; t < params.tile_count; t = t + 1u) {{
        let b = i * {BINS}u + kind_get(base + t);
        hist_set(b, hist_get(b) + 1u);
    }}
    var used = 0u;
    for (var b = 0u; b < {BINS}u; b = b + 1u) {{
        if (hist_get(i * {BINS}u + b) > 0u) {{ used = used + 1u; }}
    }}
    nonzero_set(i, used);
}}
"""


def _hist(world: World, key: int) -> np.ndarray:
    return np.bincount(world.read(key, "kind").reshape(-1), minlength=BINS).astype(np.uint32)


def _hist_fallback(world, job):
    hist = np.stack([_hist(world, k) for k in job.keys])
    return {"hist": hist, "nonzero": (hist > 0).sum(axis=1)}


# Culling: an append of the work items whose chunk has a tile above a threshold.
CULL_YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: height, kind: buffer, access: read, element: f32 }
  - { name: hot, kind: buffer, access: read_write, element: u32, capacity: "n", append: true }
params:
  - { name: tile_count, type: u32 }
  - { name: threshold, type: f32 }
determinism: float_order
"""
CULL_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * params.tile_count;
    var top = height_get(base);
    for (var t = 1u; t < params.tile_count; t = t + 1u) { top = max(top, height_get(base + t)); }
    if (top > params.threshold) { hot_append(i); }
}
"""

# A live output over the domain count, scaled by a constant input (a lookup buffer).
LIVE_YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: height, kind: buffer, access: read, element: f32 }
  - { name: scale, kind: buffer, access: read, element: f32 }
  - { name: live, kind: domain_count }
  - { name: first, kind: buffer, access: read_write, element: vec2<f32>, count: "n", live: true }
params:
  - { name: tile_count, type: u32 }
"""
LIVE_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * params.tile_count;
    first_set(i, vec2<f32>(height_get(base) * scale_get(0u), f32(zero_n())));
}
"""


@pytest.fixture(params=["gpu", "cpu"])
def engine_on(request, make_engine):
    """An engine on the real device, or on the CPU (the fallbacks serve every product)."""

    def make(world):
        if request.param == "gpu":
            return make_engine(world)
        engine = Engine(world, backend=NoGpuBackend())
        return engine

    make.on = request.param
    return make


def test_a_histogram_product_returns_many_records_per_chunk_and_a_second_output(engine_on):
    world = _world()
    engine = engine_on(world)
    applied = Applied(world)
    prog = _program("shape/hist", HIST_YAML, HIST_WGSL)
    h = engine.register_product(prog, fields={"kind": "kind"}, apply=applied, cpu_fallback=_hist_fallback)
    run_until_idle(engine)
    assert engine.product(h).gpu is not None or engine_on.on == "cpu"
    assert {r.source for r in applied.results} == {engine_on.on}
    seen = {}
    for r in applied.results:
        assert r.values.shape == (len(r.keys), BINS) and r.record_shape == (BINS,)
        for k, hist, used in zip(r.keys, r.outputs["hist"], r.outputs["nonzero"]):
            seen[k] = (hist, used)
    assert sorted(seen) == list(world.keys())
    for k, (hist, used) in seen.items():
        assert np.array_equal(hist, _hist(world, k)) and used == (_hist(world, k) > 0).sum()
    assert not applied.not_current


def test_per_item_outputs_apply_per_chunk_when_one_chunk_changes_in_flight(make_engine):
    world = _world()
    engine = make_engine(world)
    applied = Applied(world)
    engine.register_product(_program("shape/hist", HIST_YAML, HIST_WGSL), fields={"kind": "kind"}, apply=applied, cpu_fallback=_hist_fallback)
    with held_deliveries(engine):
        engine.frame()
        world.set_tile(3, "kind", (0, 0), 0)
    totals = run_until_idle(engine)
    assert totals.chunks_stale == 1 and not applied.not_current
    first, second = applied.results[0], applied.results[-1]
    assert 3 not in first.keys and len(first.keys) == len(world) - 1 and second.keys == (3,)
    assert np.array_equal(second.outputs["hist"][0], _hist(world, 3))


def _cull_fallback(threshold):
    def fallback(world, job):
        tops = [world.read(k, "height").max() for k in job.keys]
        return {"hot": np.array([i for i, t in enumerate(tops) if t > threshold], dtype=np.uint32)}

    return fallback


def test_an_append_product_returns_its_count_and_applies_whole(engine_on):
    world = _world()
    engine = engine_on(world)
    applied = Applied(world)
    threshold = 20.0
    engine.register_product(
        _program("shape/cull", CULL_YAML, CULL_WGSL), fields={"height": "height"}, params={"threshold": threshold}, apply=applied, cpu_fallback=_cull_fallback(threshold)
    )
    run_until_idle(engine)
    assert len(applied.results) == 1
    r = applied.results[0]
    hot = sorted(r.keys[i] for i in r.outputs["hot"])
    want = sorted(k for k in world.keys() if world.read(k, "height").max() > threshold)
    assert hot == want and 0 < len(want) < len(world)


def test_a_whole_output_is_discarded_whole_when_one_chunk_changes_and_recomputed(make_engine):
    world = _world()
    engine = make_engine(world)
    applied = Applied(world)
    threshold = 20.0
    engine.register_product(
        _program("shape/cull", CULL_YAML, CULL_WGSL), fields={"height": "height"}, params={"threshold": threshold}, apply=applied, cpu_fallback=_cull_fallback(threshold)
    )
    with held_deliveries(engine):
        engine.frame()
        world.set_tile(5, "height", (1, 1), 99.0)  # chunk 5 is hot now
    totals = run_until_idle(engine)
    assert totals.readbacks_stale == 1 and totals.chunks_stale == len(world)
    assert not applied.not_current
    # Every chunk is recomputed (not just the changed one) and applied exactly once, each
    # whole output with the chunks its dispatch covered.
    assert sorted(applied.keys_applied) == sorted(world.keys())
    hot = {r.keys[i] for r in applied.results for i in r.outputs["hot"]}
    assert hot == {k for k in world.keys() if world.read(k, "height").max() > threshold} and 5 in hot


def test_a_live_output_over_the_domain_count_with_a_constant_input(engine_on):
    world = _world()
    engine = engine_on(world)
    applied = Applied(world)
    scale = np.array([0.5], dtype=np.float32)

    def fallback(world, job):
        return {"first": np.array([(world.read(k, "height").reshape(-1)[0] * 0.5, len(job.keys)) for k in job.keys], dtype=np.float32)}

    engine.register_product(_program("shape/live", LIVE_YAML, LIVE_WGSL), fields={"height": "height"}, inputs={"scale": scale}, apply=applied, cpu_fallback=fallback)
    run_until_idle(engine)
    (r,) = applied.results
    assert r.values.shape == (len(world), 2)
    for k, (v, live) in zip(r.keys, r.values):
        assert v == np.float32(world.read(k, "height").reshape(-1)[0] * np.float32(0.5))
        assert live == len(world)


# A kernel writing a field's mirror (derived GPU state): read it back through field_buffer.
WRITE_YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: height, kind: buffer, access: read_write, element: f32 }
params:
  - { name: tile_count, type: u32 }
"""
WRITE_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * params.tile_count;
    for (var t = 0u; t < params.tile_count; t = t + 1u) { height_set(base + t, height_get(base + t) * 2.0); }
}
"""


def test_a_none_product_writes_the_field_mirror_it_is_bound_to(make_engine):
    world = _world()
    engine = make_engine(world)
    engine.register_product(_program("shape/write", WRITE_YAML, WRITE_WGSL), fields={"height": "height"}, policy=ReadbackPolicy.NONE, cpu_fallback=lambda w, j: None)
    run_until_idle(engine)
    mirror = engine.field_buffer("height")
    got = np.frombuffer(abi.read(mirror), dtype=np.float32).reshape(-1, *SHAPE)
    for k in world.keys():
        assert np.array_equal(got[world.slot(k)], world.read(k, "height") * 2)


def test_the_fallback_must_answer_every_output_read_back(make_engine):
    world = _world(n=2)
    engine = Engine(world, backend=NoGpuBackend())
    engine.register_product(_program("shape/hist", HIST_YAML, HIST_WGSL), fields={"kind": "kind"}, cpu_fallback=lambda w, job: {"hist": np.zeros((len(job.keys), BINS))})
    with pytest.raises(ProductError, match="answered no 'nonzero'"):
        engine.frame()


def test_frame_stats_carry_each_products_gpu_time_from_timestamps(make_engine):
    world = _world()
    engine = make_engine(world)
    engine.register_product(_program("shape/hist", HIST_YAML, HIST_WGSL), key="hist", fields={"kind": "kind"}, cpu_fallback=_hist_fallback)
    engine.register_product(_program("shape/write", WRITE_YAML, WRITE_WGSL), key="double", fields={"height": "height"}, policy=ReadbackPolicy.NONE)
    assert engine.backend.timestamps  # lavapipe has timestamp-query; the engine asks for it
    seen = {}

    def edit_every_chunk(_frame):
        for k in world.keys():
            world.set_tile(k, "kind", (0, 0), 1)
            world.set_tile(k, "height", (0, 0), 1.0)

    def both_timed(st):
        seen.update(st.product_gpu_ms)
        return {"hist", "double"} <= set(seen) and st.gpu_timing == "timestamps"

    st = frames_until(engine, both_timed, "a timestamp sample for both products", before=edit_every_chunk)
    assert st.gpu_timing == "timestamps" and {"hist", "double"} <= set(seen)
    assert all(ms > 0 for ms in seen.values())
    assert engine.totals.product_gpu_ms["hist"] >= seen["hist"]


# Pages, columns and a columns table bound by name through inputs=: per-tile weights from a
# substrate column, a per-chunk bias looked up in a table by chunk slot.
PAGES_YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: height, kind: buffer, access: read, element: f32 }
  - { name: W, kind: page, access: read }
  - { name: w, kind: column, page: W, element: f32 }
  - { name: tbl, kind: columns, access: read }
  - { name: score, kind: buffer, access: read_write, element: f32, count: "n" }
params:
  - { name: tile_count, type: u32 }
"""
PAGES_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let slot = chunks_get(i);
    let base = slot * params.tile_count;
    var s = 0.0;
    for (var t = 0u; t < params.tile_count; t = t + 1u) { s = s + height_get(base + t) * w_get(t % w_len()); }
    score_set(i, s + tbl_f32(0u, slot, 0u));
}
"""


def test_a_product_reads_a_substrate_column_and_a_columns_table_bound_through_inputs(engine_on, gpu):
    from engine_plugin.substrate import Substrate

    world = _world()
    engine = engine_on(world)
    applied = Applied(world)
    weights = np.array([0.5, -1.0, 2.0, 0.25], dtype=np.float32)
    bias = (np.arange(world.max_chunks, dtype=np.float32) * 3.0).astype(np.float32)
    arena = Substrate(gpu, page_bytes=4096, label="product weights")
    try:
        run = arena.upload("f32", weights, name="weights")
        table = abi.table({"bias": bias})

        def fallback(world, job):
            out = []
            for k in job.keys:
                h = world.read(k, "height").reshape(-1)
                w = np.resize(weights, h.size)
                s = np.float32(0.0)
                for a, b in zip(h, w):  # the kernel's order of f32 adds
                    s = np.float32(s + np.float32(a * b))
                out.append(np.float32(s + bias[world.slot(k)]))
            return np.array(out, dtype=np.float32)

        prog = _program("shape/pages", PAGES_YAML, PAGES_WGSL)
        engine.register_product(
            prog, columns={"tbl": ["bias"]}, fields={"height": "height"}, inputs={"w": run, "tbl": table}, apply=applied, cpu_fallback=fallback
        )
        run_until_idle(engine)
        got = {k: v for r in applied.results for k, v in r.by_chunk().items()}
        assert sorted(got) == list(world.keys()) and {r.source for r in applied.results} == {engine_on.on}
        for k, v in got.items():
            assert np.isclose(v, fallback(world, type("J", (), {"keys": (k,)})())[0], rtol=1e-5, atol=1e-3), k
    finally:
        engine.close()
        arena.close()


# Every hot tile, not every hot chunk: up to tile_count appends an item, against a capacity of n.
OVERFLOW_WGSL = CULL_WGSL.replace(
    "    var top = height_get(base);\n    for (var t = 1u; t < params.tile_count; t = t + 1u) { top = max(top, height_get(base + t)); }\n    if (top > params.threshold) { hot_append(i); }\n",
    "    for (var t = 0u; t < params.tile_count; t = t + 1u) {\n        if (height_get(base + t) > params.threshold) { hot_append(i); }\n    }\n",
)


def test_an_append_past_its_capacity_is_reported_in_the_result_and_the_frame_stats(make_engine, caplog):
    # The engine cut the append to its capacity and said nothing: no overflow, no count, no
    # log, while the CPU fallback answered every record (review helper 60).
    assert OVERFLOW_WGSL != CULL_WGSL
    world = _world()
    engine = make_engine(world)
    applied = Applied(world)
    engine.register_product(_program("shape/overflow", CULL_YAML, OVERFLOW_WGSL), fields={"height": "height"}, params={"threshold": -1e30}, apply=applied)
    totals = run_until_idle(engine)
    (r,) = applied.results
    tiles = int(np.prod(world.chunk_shape))
    assert len(r.outputs["hot"]) == len(world)  # capacity n: the first n records
    assert r.overflow == {"hot": len(world) * tiles}  # what the kernel tried to append
    assert totals.append_overflows == 1
    assert any("ran past its capacity" in m for m in caplog.messages)
    # within capacity: no overflow reported
    ok = Applied(world)
    engine.register_product(_program("shape/cull", CULL_YAML, CULL_WGSL), key="cull", fields={"height": "height"}, params={"threshold": 20.0}, apply=ok)
    run_until_idle(engine)
    assert ok.results and ok.results[-1].overflow == {}


def test_a_cpu_fallbacks_append_past_its_capacity_is_capped_and_reported_as_the_kernels_is():
    # A GPU result is cut to the append's capacity and reports the overflow; the CPU
    # fallback's answer was applied whole, more records than the kernel can hold, unreported.
    world = _world()
    tiles = int(np.prod(world.chunk_shape))

    def every_tile(world, work):
        return np.repeat(np.arange(len(work.keys), dtype=np.uint32), tiles)  # tile_count records an item

    engine = Engine(world, backend=NoGpuBackend())
    applied = Applied(world)
    engine.register_product(
        _program("shape/overflow_cpu", CULL_YAML, OVERFLOW_WGSL), fields={"height": "height"}, params={"threshold": -1e30}, apply=applied, cpu_fallback=every_tile
    )
    totals = run_until_idle(engine)
    (r,) = applied.results
    assert r.source == "cpu"
    assert len(r.outputs["hot"]) == len(world)  # capacity n: the first n records
    assert r.overflow == {"hot": len(world) * tiles}
    assert totals.append_overflows == 1


# A uint8 field read as raw words: a 5x5 chunk is 25 bytes in a 28-byte mirror slot.
BYTES_YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: m, kind: buffer, access: read, element: u32, bits: true }
  - { name: s, kind: buffer, access: read_write, element: u32, count: "n" }
params:
  - { name: tile_count, type: u32 }
  - { name: m_slot_words, type: u32 }
"""
BYTES_WGSL = """\
fn byte_at(b: u32) -> u32 { return (m_get(b / 4u) >> ((b % 4u) * 8u)) & 0xffu; }
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * params.m_slot_words * 4u;
    var c = 0u;
    for (var t = 0u; t < params.tile_count; t++) { c += byte_at(base + t); }
    s_set(i, c);
}
"""


@pytest.mark.parametrize("shape", [(4, 4), (5, 5), (3, 1)])
def test_a_byte_field_read_as_words_finds_each_chunk_through_its_padded_slot_words(engine_on, shape):
    # The mirror pads a sub-word field's slot to whole words: a kernel indexing slot * tile_count
    # summed the wrong bytes for every chunk but the first (helper 72). The engine fills
    # <binding>_slot_words; the fallback sees it too.
    world = World(shape, {"m": np.uint8}, max_chunks=8)
    rng = np.random.default_rng(1)
    for k in range(5):
        world.add(k, {"m": rng.integers(0, 200, shape).astype(np.uint8)})
    engine = engine_on(world)
    applied = Applied(world)
    seen_params = []

    def fallback(w, job):
        seen_params.append(job.params["m_slot_words"])
        return np.array([w.read(k, "m").astype(np.uint32).sum() for k in job.keys], np.uint32)

    h = engine.register_product(_program(f"shape/bytes{shape}", BYTES_YAML, BYTES_WGSL), fields={"m": "m"}, apply=applied, cpu_fallback=fallback)
    run_until_idle(engine)
    assert engine.product(h).gpu is not None or engine_on.on == "cpu"
    want = {k: int(world.read(k, "m").astype(np.int64).sum()) for k in world.keys()}
    assert {k: int(v) for k, v in applied.latest.items()} == want
    if engine_on.on == "cpu":
        assert set(seen_params) == {-(-shape[0] * shape[1] // 4)}


def test_a_byte_field_with_padded_slots_read_as_words_without_its_slot_words_is_warned_about(make_engine, caplog):
    world = World((5, 5), {"m": np.uint8}, max_chunks=4)
    world.add(0, {"m": np.zeros((5, 5), np.uint8)})
    engine = make_engine(world)
    yaml = BYTES_YAML.replace("  - { name: m_slot_words, type: u32 }\n", "")
    with caplog.at_level("WARNING", logger="engine_plugin.engine"):
        engine.register_product(_program("shape/bytes_nowords", yaml, BYTES_WGSL.replace("params.m_slot_words * 4u", "params.tile_count")), fields={"m": "m"}, apply=lambda r: None)
    assert any("mirror slots of 28 bytes" in r.getMessage() and "m_slot_words" in r.getMessage() and "bindings.yaml:3" in r.getMessage() for r in caplog.records)


def test_a_count_expression_reads_the_slot_words_param(make_engine):
    # The plan's count environment lacked <binding>_slot_words: "n * m_slot_words" evaluated
    # as 0 records an item and the output became a whole-dispatch one (helper 76).
    world = World((5, 5), {"m": np.uint8}, max_chunks=4)
    for k in range(2):
        world.add(k, {"m": np.full((5, 5), k + 1, np.uint8)})
    engine = make_engine(world)
    applied = Applied(world)
    yaml = BYTES_YAML.replace('count: "n"', 'count: "n * m_slot_words"')
    wgsl = BYTES_WGSL.replace("s_set(i, c);", "for (var w = 0u; w < params.m_slot_words; w++) { s_set(i * params.m_slot_words + w, c); }")
    engine.register_product(_program("shape/bytes_words_count", yaml, wgsl), fields={"m": "m"}, apply=applied)
    run_until_idle(engine)
    assert {k: v.tolist() for k, v in applied.latest.items()} == {0: [25] * 7, 1: [50] * 7}
