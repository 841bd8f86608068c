"""SUMMARY products on lavapipe: exact GPU results equal to the CPU fallback's, uploads and
recomputation only of what changed, the frame loop's counts."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin.engine import Engine, fallbacks, kernel_program
from engine_plugin.gpu import NoGpuBackend
from engine_plugin.world import World

from engine_support import Applied, cpu_summary, make_world, run_until_idle, same_bits, summary_product


def test_gpu_summaries_equal_the_cpu_fallback_bit_for_bit(world, make_engine):
    """256 chunks of 32x32, two fields, the exact SUMMARY kernel: GPU == CPU fallback."""
    engine = make_engine(world)
    assert engine.gpu_active
    gpu = {f: Applied(world) for f in ("height", "moisture")}
    for field, applied in gpu.items():
        summary_product(engine, field, applied)
    totals = run_until_idle(engine)
    assert totals.cpu_fallbacks == 0 and totals.dispatches == 2 and totals.readbacks_applied == 2
    assert totals.chunks_applied == 2 * 256 and totals.chunks_stale == 0

    cpu_engine = Engine(world, backend=NoGpuBackend())
    cpu = {f: Applied(world) for f in ("height", "moisture")}
    for field, applied in cpu.items():
        summary_product(cpu_engine, field, applied)
    world.mark_dirty()
    cpu_totals = run_until_idle(cpu_engine)
    assert cpu_totals.cpu_fallbacks == 2 and cpu_totals.dispatches == 0
    for field in gpu:
        assert sorted(gpu[field].latest) == sorted(cpu[field].latest) == world.keys()
        for key in world.keys():
            g, c = gpu[field].latest[key], cpu[field].latest[key]
            assert same_bits(g, c), f"{field} chunk {key}: GPU {g} != CPU {c}"
            assert same_bits(g, cpu_summary(world, field, key))
        assert {r.source for r in gpu[field].results} == {"gpu"} and {r.source for r in cpu[field].results} == {"cpu"}


def test_integer_fields_summarise_exactly_too(gpu, make_engine):
    w = World((16, 16), {"i": np.int32, "u": np.uint32}, max_chunks=8)
    rng = np.random.default_rng(4)
    for k in range(8):
        w.add(k, {"i": rng.integers(-2**31, 2**31 - 1, (16, 16)), "u": rng.integers(0, 2**32 - 1, (16, 16))})
    engine = make_engine(w)
    got = {t: Applied(w) for t in ("i", "u")}
    for field, t in (("i", "i32"), ("u", "u32")):
        engine.register_product(kernel_program("summary"), key=field, spec={"T": t}, fields={"src": field},
                                apply=got[field], cpu_fallback=fallbacks.summary)
    run_until_idle(engine)
    cpu = Engine(w, backend=NoGpuBackend())
    want = {t: Applied(w) for t in ("i", "u")}
    for field, t in (("i", "i32"), ("u", "u32")):
        cpu.register_product(kernel_program("summary"), key=field, spec={"T": t}, fields={"src": field},
                             apply=want[field], cpu_fallback=fallbacks.summary)
    run_until_idle(cpu)
    for field in got:
        for k in w.keys():
            assert same_bits(got[field].latest[k], want[field].latest[k]), (field, k)


def test_only_chunks_whose_input_changed_are_uploaded_dispatched_and_applied(world, make_engine):
    engine = make_engine(world)
    applied = Applied(world)
    summary_product(engine, "height", applied)
    count = Applied(world)
    engine.register_product(kernel_program("count_above"), key="above", fields=["height"],
                            params={"threshold": 25.0}, apply=count, cpu_fallback=fallbacks.count_above)
    run_until_idle(engine)
    before = len(applied.keys_applied)
    for k in (10, 11, 12, 200):  # 10..12 adjacent: one coalesced write, plus one for 200
        world.write(k, "height", float(k))
    world.write(50, "moisture", 1.0)  # a field no product reads: no upload, no work
    st = engine.frame()
    assert st.uploads == 2 and st.upload_bytes == st.bytes == 4 * world.chunk_nbytes("height")
    assert st.dispatches == 2
    totals = run_until_idle(engine)
    totals.add(st)
    assert sorted(applied.keys_applied[before:]) == [10, 11, 12, 200]
    for k in (10, 11, 12, 200):
        assert same_bits(applied.latest[k], cpu_summary(world, "height", k))
        assert count.latest[k] == np.count_nonzero(world.read(k, "height") > 25.0)
    assert totals.chunks_stale == 0 and not applied.not_current


def test_a_frame_with_nothing_owed_does_no_gpu_work(world, make_engine):
    engine = make_engine(world)
    summary_product(engine, "height", Applied(world))
    run_until_idle(engine)
    st = engine.frame()
    assert (st.uploads, st.dispatches, st.readbacks_requested, st.cpu_fallbacks) == (0, 0, 0, 0)
    assert st.gpu_active and st.time > 0


def test_gap_coalescing_joins_nearby_dirty_runs_into_one_write(make_engine):
    world = make_world(n=64)
    engine = make_engine(world)
    summary_product(engine, "height", Applied(world))
    run_until_idle(engine)
    for k in (3, 5, 40):  # 3 and 5 are one clean slot apart; 40 is far
        world.write(k, "height", 1.0)
    st = engine.upload()
    chunk = world.chunk_nbytes("height")
    assert st.uploads == 2 and st.upload_bytes == 4 * chunk  # slots 3..5 in one write (4 is filler), then 40
    engine.config = type(engine.config)(upload_gap_bytes=0)
    for k in (3, 5, 40):
        world.write(k, "height", 2.0)
    st = engine.upload()
    assert st.uploads == 3 and st.upload_bytes == 3 * chunk


def test_frame_stats_totals_add_up(world, make_engine):
    engine = make_engine(world)
    summary_product(engine, "height", Applied(world))
    totals = run_until_idle(engine)
    assert engine.totals.dispatches == totals.dispatches and engine.totals.chunks_applied == 256
    assert "GPU" in engine.totals.summary() and engine.totals.frame >= 0


def test_field_buffer_mirrors_a_field_no_product_reads_and_keeps_it_in_sync(make_engine):
    world = make_world(n=8)
    engine = make_engine(world)
    buf = engine.field_buffer("moisture")
    assert buf is not None and buf.size == 8 * world.chunk_nbytes("moisture")
    world.write(3, "moisture", 0.25)
    st = engine.frame()
    assert st.uploads == 1 and st.dispatches == 0
    from engine_plugin import abi

    mirror = abi.read(buf).reshape(8, 32, 32)
    assert (mirror[world.slot(3)] == 0.25).all()
    assert same_bits(mirror[world.slot(5)], world.read(5, "moisture"))
    cpu = Engine(world, backend=NoGpuBackend())
    assert cpu.field_buffer("moisture") is None


def test_results_carry_records_as_the_kernel_wrote_them(world, make_engine):
    engine = make_engine(world)
    applied = Applied(world)
    summary_product(engine, "height", applied)
    run_until_idle(engine)
    r = applied.results[0]
    assert r.record_shape == (4,) and r.records.shape == (256, 4) and r.values.shape == (256, 4)


def test_frame_stats_add_sums_counts_keeps_the_latest_flags_and_merges_gpu_times():
    from dataclasses import fields

    from engine_plugin.engine import FrameStats

    first = FrameStats(frame=1, gpu_active=True, product_gpu_ms={"a": 1.0}, gpu_timing="wall", frames_in_flight=2)
    second = FrameStats(frame=2, gpu_lost=True, product_gpu_ms={"a": 2.0, "b": 0.5}, frames_in_flight=1)
    for i, f in enumerate(fields(FrameStats)):  # every count field: a distinct value on each side
        if f.type in ("int", "float") and f.name not in ("frame", "frames_in_flight"):
            setattr(first, f.name, i + 1)
            setattr(second, f.name, 100 * (i + 1))
    first.add(second)
    for i, f in enumerate(fields(FrameStats)):
        if f.type in ("int", "float") and f.name not in ("frame", "frames_in_flight"):
            assert getattr(first, f.name) == 101 * (i + 1), f.name
    assert (first.frame, first.gpu_active, first.gpu_lost, first.frames_in_flight, first.gpu_timing) == (2, False, True, 1, "")
    assert first.product_gpu_ms == {"a": 3.0, "b": 0.5}


def test_frame_stats_add_sums_a_subclasss_own_fields_too():
    from dataclasses import dataclass

    from engine_plugin.engine import FrameStats

    @dataclass
    class GameStats(FrameStats):
        culled: int = 0

    totals = GameStats()
    for frame in range(3):
        totals.add(GameStats(frame=frame, uploads=2, culled=5))
    assert (totals.frame, totals.uploads, totals.culled) == (2, 6, 15)


QUIET_NAN = 0x7FC00000


def _bits(*words: int) -> np.ndarray:
    return np.array(words, np.uint32).view(np.float32)


def _flush_in(v: np.float32) -> np.float32:
    """A zero or subnormal f32 tile reads as +0.0 (the rule: the H200 flushes subnormals, lavapipe not)."""
    return np.float32(0.0) if (int(np.float32(v).view(np.uint32)) & 0x7F800000) == 0 else np.float32(v)


def _flush_result(v: np.float32) -> np.float32:
    """A zero or subnormal sum or mean is +0.0."""
    return np.float32(0.0) if (int(np.float32(v).view(np.uint32)) & 0x7F800000) == 0 else np.float32(v)


def _rule_summary(values: np.ndarray) -> np.ndarray:
    """The summary record by the kernel's stated rule, tile by tile in plain Python (an
    independent model): zero and subnormal tiles read as +0.0, NaN tiles skipped by
    their bits, a tie keeps the earlier tile, a chunk of NaN only keeps its first tile's bits,
    a zero or subnormal running sum or mean is +0.0, a NaN mean or sum is 0x7fc00000."""
    values = np.array([_flush_in(v) for v in values], np.float32)
    words = values.view(np.uint32)
    lo = hi = values[0]
    seen = False
    total = np.float32(0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        for v, w in zip(values, words):
            total = _flush_result(np.float32(total + v))
            if (int(w) & 0x7FFFFFFF) > 0x7F800000:
                continue
            if not seen or v < lo:
                lo = v
            if not seen or v > hi:
                hi = v
            seen = True
        mean = _flush_result(np.float32(total * np.float32(1.0 / values.size)))
    record = np.array([lo, hi, mean, total], np.float32)
    out = record.view(np.uint32).copy()
    out[2:][np.isnan(record[2:])] = QUIET_NAN
    return out.view(np.float32)


def test_nan_tiles_and_signed_zeros_summarise_by_one_rule_on_the_gpu_and_the_cpu(make_engine):
    # The GPU's min/max skipped a NaN tile and numpy's min made the chunk's min NaN, so a
    # chunk's summary depended on who served it (review helper 67). Then the H200 answered
    # other bits than lavapipe and the CPU: WGSL leaves min/max of NaN, 0.0 against -0.0 and
    # an arithmetic NaN's bits to the adapter. The kernel now states every bit, and both sides
    # are checked against that rule, not only against each other.
    chunks = [
        [np.nan, 1, 2, 3], [1, np.nan, 3, 2], [0.0, -0.0, 1, 1], [-0.0, 0.0, -1, -1], [np.nan] * 4, [np.inf, -np.inf, 1, 2],
        [-0.0] * 4,  # sums to +0.0: the kernel's loop starts there (review helper 68)
        _bits(0xFFC00000, 0xFFC00000, 0xFFC00000, 0xFFC00000),  # NaN only: its first bits are kept
        _bits(0x7FC00001, 0x3F800000, 0x7F800001, 0x40000000),  # NaNs with payloads (quiet, signalling)
        _bits(0xFFC00000, 0x7FC12345, 0xFF800001, 0x7FFFFFFF),  # NaN only, four kinds: the first is kept
        [0.0, -0.0, 0.0, -0.0], [-0.0, np.nan, 0.0, np.nan], [np.inf, np.nan, np.inf, 5], [-np.inf, np.nan, -np.inf, -5],
        _bits(0x00000001, 0x80000001, 0x007FFFFF, 0x00000000),  # denormals: min, max, sum and mean of them
        _bits(0x00000003, 0x00000002, 0x80000005, 0x00000001),
        _bits(0x80000003, 0x00000002, 0x807FFFFF, 0x80000000),  # negative subnormals and -0.0: +0.0
        _bits(0x00800001, 0x80800000, 0x3F800000, 0xBF800000),  # a normal sum that is subnormal on the way: +0.0
        _bits(0x00800000, 0x00000000, 0x00800000, 0x807FFFFF),  # the smallest normals around subnormals
        [3e38, 3e38, -1, 1], [-3e38, -3e38, 1, -1],  # the sum overflows to inf
    ]
    world = World((2, 2), {"height": np.float32}, max_chunks=len(chunks))
    for key, values in enumerate(chunks):
        world.add(key, {"height": np.array(values, np.float32).reshape(2, 2)})
    gpu, cpu = Applied(world), Applied(world)
    gpu_engine = make_engine(world)
    summary_product(gpu_engine, "height", gpu)
    run_until_idle(gpu_engine)
    assert {r.source for r in gpu.results} == {"gpu"}
    cpu_engine = Engine(world, backend=NoGpuBackend())
    summary_product(cpu_engine, "height", cpu)
    world.mark_dirty()
    run_until_idle(cpu_engine)
    for key, values in enumerate(chunks):
        want = _rule_summary(np.array(values, np.float32))
        assert same_bits(gpu.latest[key], want), f"chunk {key}: GPU {gpu.latest[key].view(np.uint32)} != rule {want.view(np.uint32)}"
        assert same_bits(cpu.latest[key], want), f"chunk {key}: CPU {cpu.latest[key].view(np.uint32)} != rule {want.view(np.uint32)}"


@pytest.mark.parametrize("threshold_word", [0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x00800000])
def test_count_above_counts_subnormal_tiles_as_zeros_on_the_gpu_and_the_cpu(make_engine, threshold_word):
    # The H200 flushes subnormal f32 values to zero and lavapipe does not (WGSL allows either):
    # a tile of 1e-45 was above a threshold of 0.0 on one adapter and not on the other. The
    # kernel reads zero and subnormal tiles and thresholds as +0.0, by bits, everywhere.

    chunks = [
        _bits(0x00000001, 0x80000001, 0x007FFFFF, 0x00000000),
        _bits(0x00800000, 0x80800000, 0x00000002, 0x3F800000),
        _bits(0x807FFFFF, 0x80000000, 0x00000000, 0x00800001),
    ]
    threshold = float(np.uint32(threshold_word).view(np.float32))

    def model(values: np.ndarray) -> int:  # independent: plain Python over bits
        def flushed(w: int) -> float:
            w = 0 if (w & 0x7F800000) == 0 else w
            return float(np.uint32(w).view(np.float32))

        return sum(flushed(int(w)) > flushed(threshold_word) for w in values.view(np.uint32))

    world = World((2, 2), {"height": np.float32}, max_chunks=len(chunks))
    for key, values in enumerate(chunks):
        world.add(key, {"height": values.reshape(2, 2)})
    results = {}
    for side, engine in (("gpu", make_engine(world)), ("cpu", Engine(world, backend=NoGpuBackend()))):
        applied = Applied(world)
        engine.register_product(kernel_program("count_above"), fields=["height"], params={"threshold": threshold},
                                apply=applied, cpu_fallback=fallbacks.count_above)
        world.mark_dirty()
        run_until_idle(engine)
        assert {r.source for r in applied.results} == {side}
        results[side] = {k: int(np.asarray(applied.latest[k]).reshape(-1)[0]) for k in range(len(chunks))}
    want = {k: model(values) for k, values in enumerate(chunks)}
    assert results["gpu"] == want and results["cpu"] == want, f"threshold {threshold_word:#x}: {results} != rule {want}"
