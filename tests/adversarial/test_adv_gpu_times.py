"""FrameStats.product_gpu_ms and Engine.totals: a GPU time sample is measured once; idle
frames (no dispatch, no new timestamps) must not add it to the totals again."""

from __future__ import annotations

import time

from engine_support import frames_until, make_world, run_until_idle, summary_product


def _first_sample(engine, key):
    return frames_until(engine, lambda st: st.gpu_timing == "timestamps" and key in st.product_gpu_ms, f"a timestamp sample of {key!r}")


def test_a_frames_gpu_times_are_positive_and_keyed_by_product(make_engine):
    world = make_world(n=8)
    engine = make_engine(world)
    summary_product(engine, "height", key="a")
    summary_product(engine, "moisture", key="b")
    assert engine.backend.timestamps
    seen = {}

    def both_timed(st):
        if st.gpu_timing == "timestamps":
            seen.update(st.product_gpu_ms)
        return {"a", "b"} <= set(seen)

    frames_until(engine, both_timed, "a timestamp sample of both products")
    assert set(seen) == {"a", "b"} and all(0 < ms < 10_000 for ms in seen.values())


def test_idle_frames_do_not_add_an_old_gpu_time_sample_to_the_totals(make_engine):
    world = make_world(n=8)
    engine = make_engine(world)
    summary_product(engine, "height", key="a")
    _first_sample(engine, "a")
    run_until_idle(engine)
    for _ in range(10):  # any late window lands
        engine.frame()
        time.sleep(0.002)
    before = engine.totals.product_gpu_ms["a"]
    for _ in range(20):
        st = engine.frame()
        assert st.dispatches == 0
    assert engine.totals.product_gpu_ms["a"] == before


def test_every_product_that_dispatched_gets_a_gpu_time_in_a_busy_frame(make_engine):
    from engine_plugin.engine import EngineConfig, kernel_program
    from engine_plugin.gpu import ReadbackPolicy, WgpuBackendConfig

    world = make_world(n=32)
    cfg = EngineConfig(backend=WgpuBackendConfig(max_chunks_per_dispatch=1, gpu_timing_every=1), max_dispatches_per_product=32)
    engine = make_engine(world, config=cfg)
    for key, field in (("a", "height"), ("b", "height"), ("c", "moisture")):
        engine.register_product(kernel_program("summary"), key=key, spec={"T": "f32"}, fields={"src": field}, policy=ReadbackPolicy.NONE)
    run_until_idle(engine)
    # Every timestamp window of the frames before has landed: with all of them still in flight
    # (a loaded machine) the busy frame is not timed, by design, and nothing after it dispatches.
    frames_until(engine, lambda st: not engine.backend._timer._pending, "the earlier timestamps")
    for k in world.keys():
        world.set_tile(k, "height", (0, 0), 1.0)
    world.set_tile(0, "moisture", (0, 0), 1.0)
    st = engine.frame()
    assert st.dispatches == 65  # a: 32, b: 32, then c: 1 (the 65th timed dispatch of the submission)
    st = frames_until(engine, lambda st: st.gpu_timing == "timestamps" and "b" in st.product_gpu_ms, "the busy frame's timestamps")
    assert st.gpu_timing == "timestamps"
    assert set(st.product_gpu_ms) == {"a", "b", "c"}


def test_products_served_by_the_cpu_after_a_device_error_get_no_new_gpu_time(make_engine):
    world = make_world(n=8)
    engine = make_engine(world)
    summary_product(engine, "height", key="a")
    before = dict(_first_sample(engine, "a").product_gpu_ms)
    engine.backend.notify_device_error("adversarial")
    for i in range(3):
        world.write(1, "height", float(i))
        st = engine.frame()
        assert st.dispatches == 0 and st.cpu_fallbacks == 1
        assert st.gpu_timing != "wall" and st.product_gpu_ms.get("a") in (None, before["a"]), (st.gpu_timing, st.product_gpu_ms)


def test_a_product_is_timed_in_its_first_frame_then_once_every_gpu_timing_every_frames(make_engine):
    """Timed dispatches run in passes of their own (their products do not overlap on the GPU):
    a product is timed in the first frame it dispatches, then once in ``gpu_timing_every``
    frames, every dispatch of it in that frame; its untimed frames share one compute pass."""
    from engine_plugin.engine import EngineConfig
    from engine_plugin.gpu import WgpuBackendConfig

    world = make_world(n=8)
    engine = make_engine(world, config=EngineConfig(backend=WgpuBackendConfig(gpu_timing_every=4)))
    summary_product(engine, "height", key="a")
    assert engine.backend.timestamps  # lavapipe and the H200 have timestamp queries (as every test here assumes)
    batches = engine.backend._batches
    dispatched = []  # (batch serial, timed) of each frame that dispatched "a"
    deadline = time.monotonic() + 60  # dispatching frames, not host frames, are what it needs
    frame = 0
    while len(dispatched) < 12 and time.monotonic() < deadline:
        world.write(1 + frame % 3, "height", float(frame))
        frame += 1
        before = batches._timed_at.get("a")
        st = engine.frame()
        if st.dispatches:
            dispatched.append((batches._serial, batches._timed_at.get("a") != before))
        time.sleep(0.002)
    assert len(dispatched) >= 8 and dispatched[0][1]  # the first dispatch is timed
    last = dispatched[0][0]
    for serial, timed in dispatched[1:]:
        assert timed == (serial - last >= 4), (serial, last, dispatched)
        last = serial if timed else last
    assert sum(t for _, t in dispatched) >= 2
    run_until_idle(engine)
    assert engine.totals.product_gpu_ms["a"] > 0
