"""Delivery rules of issue 14, each from a defect a model-based fuzzer found: results applied
at most once per (generation, chunk, version), nothing owed lost without a report, work past a
bound split rather than refused, mirrors padded, kernel-written mirror regions kept, upload
order independent of hashing, failing readbacks moved to the CPU after bounded tries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from engine_support import Applied, cpu_summary, frames_until, held_deliveries, make_world, run_until_idle, same_bits, summary_product, wait_for_gpu

from engine_plugin import abi
from engine_plugin.engine import Engine, EngineConfig, fallbacks, kernel_program
from engine_plugin.gpu import NoGpuBackend, ReadbackPolicy, WgpuBackendConfig
from engine_plugin.world import World

HERE = os.path.dirname(__file__)


def _duplicates(applied: Applied) -> list:
    seen, dup = set(), []
    for r in applied.results:
        for k, v in zip(r.keys, r.versions):
            key = (r.generation, r.source, k, v)
            if key in seen:
                dup.append(key)
            seen.add(key)
    return dup


def test_an_apply_that_edits_the_world_never_gets_the_same_result_twice():
    world = make_world(n=8)
    engine = Engine(world, backend=NoGpuBackend())
    first, second = Applied(world), Applied(world)

    def edit_then_record(result):
        first(result)
        if 3 in result.keys and world.read(3, "height")[0, 0] != 42.0:
            world.set_tile(3, "height", (0, 0), 42.0)  # a game reacting to a result

    summary_product(engine, "height", edit_then_record, key="a")
    summary_product(engine, "height", second, key="b")
    for _ in range(4):
        engine.frame()
    assert _duplicates(first) == [] and _duplicates(second) == []
    assert same_bits(second.latest[3], cpu_summary(world, "height", 3)) and engine.idle


_BOOL_YAML = """
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: m, kind: buffer, access: read, element: u32, bits: true }
  - { name: out, kind: buffer, access: read_write, element: u32, count: "n" }
params:
  - { name: tile_count, type: u32 }
"""

# Mirror slots of a field are padded to whole 4-byte words: a slot is ceil(tile_count / 4) words.
_BOOL_WGSL = """
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * ((params.tile_count + 3u) / 4u) * 4u;
    var c = 0u;
    for (var t = 0u; t < params.tile_count; t = t + 1u) {
        let b = base + t;
        c = c + ((m_get(b / 4u) >> ((b % 4u) * 8u)) & 0xffu);
    }
    out_set(i, c);
}
"""


def _bool_program():
    schema = abi.parse(_BOOL_YAML, "delivery/count_true/bindings.yaml")
    return abi.program(key="delivery/count_true", schema=schema, wgsl=_BOOL_WGSL, wgsl_path="delivery/count_true/kernel.wgsl")


def _count_true(w, work):
    return np.array([int(w.read(k, "m").sum()) for k in work.keys], np.uint32)


def test_a_bool_field_of_3x3_chunks_uploads_any_dirty_set_and_loses_nothing_in_flight(make_engine):
    world = World((3, 3), {"m": bool}, max_chunks=4)
    rng = np.random.default_rng(1)
    for k in range(4):
        world.add(k, {"m": rng.random((3, 3)) < 0.5})
    engine = make_engine(world)
    seen = Applied(world)
    h = engine.register_product(_bool_program(), fields=["m"], apply=seen)  # no fallback: the GPU must serve
    run_until_idle(engine)
    with held_deliveries(engine):
        for k in range(4):
            world.set_tile(k, "m", (1, 1), True)
        engine.frame()  # four chunks in flight
        world.set_tile(1, "m", (0, 0), True)  # chunk 1 alone is dirty: slot 1 starts at byte 9 unpadded
        st = engine.frame()
        assert st.refused == 0
    run_until_idle(engine)
    assert engine.generation(h) != 0 and engine.totals.refused == 0
    for k in range(4):
        assert int(seen.latest[k]) == int(world.read(k, "m").sum()), k
        assert seen.results[-1].source == "gpu"
    assert not seen.not_current


def test_work_past_the_dispatch_and_readback_bounds_is_split_and_everything_served(make_engine):
    world = World((2, 2), {"h": np.float32}, max_chunks=2000)
    for k in range(2000):
        world.add(k, {"h": float(k % 7)})
    cfg = WgpuBackendConfig(max_chunks_per_dispatch=256, max_inflight_readback_bytes=100 * 16)
    engine = make_engine(world, config=EngineConfig(backend=cfg))
    seen = Applied(world)
    engine.register_product(kernel_program("summary"), fields={"src": "h"}, apply=seen)  # no fallback
    frames_until(engine, lambda st: engine.idle, "every chunk served")  # the readbacks' maps resolve on wgpu's thread
    assert sorted(seen.latest) == list(range(2000)), f"{len(seen.latest)} of 2000 chunks served"
    assert max(len(r.keys) for r in seen.results) <= 100 and {r.source for r in seen.results} == {"gpu"}
    assert engine.totals.refused == 0 and not seen.not_current


def test_recover_gpu_after_a_reported_device_error_never_reuses_that_device(make_engine):
    world = make_world(n=8)
    engine = make_engine(world)
    applied = Applied(world)
    summary_product(engine, "height", applied)
    run_until_idle(engine)
    dead = engine.backend.device
    engine.backend.notify_device_error("forced for the test")
    engine.frame()
    assert engine.recover_gpu()
    assert engine.backend.device is not dead
    world.write(2, "height", 3.0)
    run_until_idle(engine)
    assert applied.results[-1].source == "gpu" and applied.latest[2][0] == 3.0


def test_field_buffer_with_kernel_writes_is_never_overwritten_by_gap_coalescing(make_engine, gpu):
    world = make_world(n=4)
    engine = make_engine(world, config=EngineConfig(upload_gap_bytes=1 << 20))
    buf = engine.field_buffer("height", kernel_writes=True)
    run_until_idle(engine)
    chunk = world.chunk_nbytes("height")
    marker = np.full(32 * 32, 7.0, np.float32)
    gpu.queue.write_buffer(buf, world.slot(1) * chunk, marker)  # what a caller's kernel writes
    world.write(0, "height", 1.0)
    world.write(2, "height", 2.0)  # chunk 1, clean, lies between two dirty chunks
    st = engine.frame()
    assert st.uploads == 2
    mirror = np.frombuffer(gpu.queue.read_buffer(buf), np.float32).reshape(-1, 32 * 32)
    assert (mirror[world.slot(1)] == 7.0).all() and (mirror[world.slot(0)] == 1.0).all()


def test_a_second_engine_with_fields_revalidation_over_a_consumed_world_runs(make_engine):
    world = make_world(n=8)
    first = make_engine(world, config=EngineConfig(revalidate="fields"))
    summary_product(first, "height", Applied(world))
    run_until_idle(first)
    second = make_engine(world, config=EngineConfig(revalidate="fields"))
    applied = Applied(world)
    summary_product(second, "height", applied)
    run_until_idle(second)  # raised KeyError: 'height'
    for k in world.keys():
        assert same_bits(applied.latest[k], cpu_summary(world, "height", k))


def test_results_for_an_old_selection_are_never_applied_after_select_tiles(world, make_engine):
    engine = make_engine(world)
    applied = Applied(world)
    h = engine.register_product(kernel_program("combine"), spec={"OP": "max"}, fields=["height", "moisture"],
                                policy=ReadbackPolicy.SELECTED_TILES,
                                tiles=[(1, (0, 0)), (2, (3, 3))], apply=applied, cpu_fallback=fallbacks.combine)
    with held_deliveries(engine):
        engine.frame()
        engine.select_tiles(h, [(5, (1, 1))])
    run_until_idle(engine)
    tiles = {t for r in applied.results for t in r.tiles}
    assert tiles == {(5, (1, 1))}, tiles


_ORDER_SCRIPT = """
import json, sys
sys.path.insert(0, {here!r})
import numpy as np
import pytest
from engine_plugin.engine import Engine
from engine_plugin.world import World
names = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
w = World((4, 4), {{n: np.float32 for n in names}}, max_chunks=2)
w.add(0)
e = Engine(w)
for n in names:
    e.field_buffer(n)
order = []
real = e.backend.upload
def spy(desc):
    order.append(desc.tag)
    return real(desc)
e.backend.upload = spy
for n in names:
    w.write(0, n, 1.0)
e.frame()
print(json.dumps(order))
e.close()
"""


def test_upload_order_of_kept_fields_does_not_depend_on_the_hash_seed():
    orders = set()
    for seed in ("1", "2", "3", "4"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        proc = subprocess.run([sys.executable, "-c", _ORDER_SCRIPT.format(here=HERE)], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        orders.add(tuple(json.loads(proc.stdout.strip().splitlines()[-1])))
    assert len(orders) == 1, orders


def _failing_maps(engine):
    """Every readback's map fails (what lavapipe cannot be made to do on purpose)."""
    waiter = engine.backend._ring.waiter

    class Failing:
        def __init__(self, inner):
            self.inner = inner

        def put(self, item):
            self.inner.put((item[0], RuntimeError("injected map failure")))

        def get_nowait(self):
            return self.inner.get_nowait()

    waiter.done = Failing(waiter.done)


def test_a_readback_that_keeps_failing_moves_the_product_to_the_cpu_reported_once(make_engine, caplog):
    world = make_world(n=8)
    engine = make_engine(world)
    applied = Applied(world)
    summary_product(engine, "height", applied)
    _failing_maps(engine)
    frames = []
    frames_until(engine, lambda st: frames.append(st) or engine.idle, "the product served")
    assert engine.idle and sorted(applied.latest) == world.keys()
    assert applied.results[-1].source == "cpu"
    assert sum(f.readbacks_failed for f in frames) <= EngineConfig().max_readback_failures
    assert sum(f.readback_fallbacks for f in frames) == 1
    assert caplog.text.count("readbacks failed") == 1


def test_a_refused_upload_re_owes_what_was_in_flight_and_the_product_returns_to_the_gpu(make_engine):
    world = make_world(n=8)
    engine = make_engine(world)
    applied = Applied(world)
    h = summary_product(engine, "height", applied)
    run_until_idle(engine)
    first = engine.generation(h)
    backend = engine.backend
    with held_deliveries(engine):
        for k in range(8):
            world.set_tile(k, "height", (0, 0), float(k))
        engine.frame()  # eight chunks in flight
        backend.upload = lambda desc: False  # one refusal (lavapipe refuses nothing on purpose)
        world.set_tile(3, "height", (1, 1), 9.0)
        st = engine.frame()
        del backend.upload
        assert st.cpu_fallbacks == 1 and engine.generation(h) == 0
    run_until_idle(engine)
    assert engine.generation(h) not in (0, first)  # back on the GPU under a new generation
    for k in world.keys():
        assert same_bits(applied.latest[k], cpu_summary(world, "height", k)), k
    world.write(5, "height", 4.0)
    run_until_idle(engine)
    assert applied.results[-1].source == "gpu" and _duplicates(applied) == []


@pytest.mark.parametrize("frames", [2, 5])
def test_uploads_refused_frames_in_a_row_never_leave_a_product_off_the_gpu_for_good(make_engine, frames):
    # Review helper 207: a second refused upload (the re-registration's whole-mirror upload)
    # left the product on its CPU fallback for good, product_error None; a mirror reader behind
    # such a writer kept a stale result while the engine said idle. It is retried every frame
    # and, while it is off the GPU, product_error says why.
    world = make_world(n=8)
    engine = make_engine(world)
    applied = Applied(world)
    h = summary_product(engine, "height", applied)
    run_until_idle(engine)
    backend = engine.backend
    backend.upload = lambda desc: False
    world.write(0, "height", 5.0)
    for _ in range(frames):
        engine.frame()
    error = engine.product_error(h)
    assert engine.generation(h) == 0 and error is not None and "height" in str(error) and "upload" in str(error), error
    del backend.upload
    world.write(1, "height", 7.0)
    run_until_idle(engine)
    assert engine.generation(h) != 0 and engine.product_error(h) is None
    world.write(2, "height", 3.0)
    run_until_idle(engine)
    assert applied.results[-1].source == "gpu"
    for k in world.keys():
        assert same_bits(applied.latest[k], cpu_summary(world, "height", k)), k


def test_an_upload_refused_for_good_is_tried_less_and_less_often_and_said_once(make_engine, caplog):
    # Review helper 208: a field whose upload is refused for good re-created, uploaded and
    # unregistered its whole mirror every frame, logging two warnings a frame.
    import logging

    world = make_world(n=8)
    engine = make_engine(world)
    h = summary_product(engine, "height", Applied(world))
    run_until_idle(engine)
    backend = engine.backend
    tries = []

    def refuse(desc):
        tries.append(desc)
        return False

    backend.upload = refuse
    world.write(0, "height", 5.0)
    with caplog.at_level(logging.WARNING, logger="engine_plugin"):
        for _ in range(200):
            engine.frame()
        while engine.product(h).reattach_wait < 16:  # well inside a long wait (not just before a try)
            engine.frame()
    assert engine.product_error(h) is not None and engine.generation(h) == 0
    assert len(tries) < 20, len(tries)  # 200 frames: a try after 1, 2, 4, ... 64 frames
    assert sum("cannot be uploaded" in r.getMessage() for r in caplog.records) == 1
    del backend.upload
    # Back at once when its field is mirrored again (here by field_buffer), not after the
    # backoff's 64 frames (review helper 211).
    engine.field_buffer("height")
    world.write(1, "height", 2.0)
    for _ in range(3):
        engine.frame()
    assert engine.generation(h) != 0 and engine.product_error(h) is None


def test_a_recovered_gpu_starts_the_upload_backoff_afresh(make_engine, monkeypatch):
    # Review helper 211: recover_gpu kept the old backend's backoff: a refusal as the new
    # backend mirrored the field waited 64 frames.
    world = make_world(n=8)
    engine = make_engine(world)
    h = summary_product(engine, "height", Applied(world))
    run_until_idle(engine)
    cls = type(engine.backend)
    real = cls.upload
    refusals = [10**9]

    def upload(self, desc):
        if refusals[0] > 0:
            refusals[0] -= 1
            return False
        return real(self, desc)

    monkeypatch.setattr(cls, "upload", upload)
    world.write(0, "height", 5.0)
    for _ in range(200):
        engine.frame()
    assert engine.product(h).reattach_backoff == 64
    refusals[0] = 1  # the new backend's first upload (the mirror's, in recover_gpu) is refused
    engine.recover_gpu()
    world.write(1, "height", 2.0)
    for _ in range(6):
        engine.frame()
    assert engine.generation(h) != 0 and engine.product_error(h) is None


@pytest.mark.parametrize("hot", [0, 7])
def test_a_chunk_changed_every_frame_never_starves_the_others_under_tight_budgets(make_engine, hot):
    # Review helper 207: one chunk a dispatch and one readback in flight, chunk 0 edited every
    # frame: the split took the owed chunks in slot order, so chunk 0 went every frame (stale
    # by the time it landed) and chunk 5's change was never computed in 1,000 frames. The
    # chunks sent longest ago go first.
    world = World((4, 4), {"b": np.float32}, max_chunks=8)
    for k in range(8):
        world.add(k, {"b": np.ones((4, 4), np.float32)})
    config = EngineConfig(backend=WgpuBackendConfig(max_chunks_per_dispatch=1, max_inflight_readbacks=1, max_inflight_readback_bytes=16))
    engine = make_engine(world, config=config)
    seen = Applied(world)
    engine.register_product(kernel_program("summary"), key="S", fields={"src": "b"}, apply=seen)
    run_until_idle(engine, timeout=30)
    world.write(5, "b", 3.0)
    for f in range(60):
        world.set_tile(hot, "b", (f % 4, 0), float(f % 7))
        engine.frame()
        time.sleep(0.002)
        if same_bits(np.asarray(seen.latest[5]).reshape(-1), cpu_summary(world, "b", 5)):
            break
    assert same_bits(np.asarray(seen.latest[5]).reshape(-1), cpu_summary(world, "b", 5)), seen.latest[5]
    # A chunk streamed into a reused slot goes before the chunks changed after it (review
    # helper 208: it inherited the slot's last send and waited behind every chunk sent since).
    world.evict(6)
    world.add(99, {"b": np.full((4, 4), 2.0, np.float32)})
    for f in range(8):
        world.set_tile(hot, "b", (f % 4, 1), float(f % 5))
        if f % 2:
            world.set_tile(1 if hot != 1 else 2, "b", (0, 0), float(f))
        engine.frame()
        time.sleep(0.002)
    assert 99 in seen.latest and same_bits(np.asarray(seen.latest[99]).reshape(-1), cpu_summary(world, "b", 99))


def test_a_product_invalidated_every_frame_serves_every_chunk_in_turn_under_tight_budgets(make_engine):
    # Review helper 211: ranked by content version alone, the chunk of the smallest version won
    # every split dispatch when nothing changed but invalidate() owed everything again each
    # frame: only chunk 0 was ever applied in 80 frames.
    world = World((4, 4), {"b": np.float32}, max_chunks=8)
    for k in range(8):
        world.add(k, {"b": np.full((4, 4), k, np.float32)})
    config = EngineConfig(backend=WgpuBackendConfig(max_chunks_per_dispatch=1, max_inflight_readbacks=1, max_inflight_readback_bytes=16))
    engine = make_engine(world, config=config)
    seen = Applied(world)
    h = engine.register_product(kernel_program("summary"), key="S", fields={"src": "b"}, apply=seen)
    run_until_idle(engine, timeout=30)
    seen.results.clear()
    for _ in range(80):
        engine.invalidate(h)
        engine.frame()
        time.sleep(0.002)
    counts = {k: seen.keys_applied.count(k) for k in range(8)}
    assert min(counts.values()) >= 3, counts


def test_a_readback_is_applied_by_the_frame_after_its_request_once_the_gpu_is_done(make_engine):
    """Issue 15: from an edit to its applied result takes the raw loop's one frame when the GPU
    finished meanwhile (the frame never waits for it: a pending map is left for later)."""
    world = make_world(n=8)
    engine = make_engine(world)
    applied = Applied(world)
    summary_product(engine, "height", applied)
    run_until_idle(engine)
    for edit in range(5):
        version = world.set_tile(3, "height", (0, 0), float(edit + 1))
        applied.results.clear()
        requested = engine.frame()
        if not applied.results:  # not landed within its own frame: the GPU gets time to finish
            assert requested.readbacks_requested == 1
            wait_for_gpu(engine)  # the GPU is done (waited for, not guessed)
            engine.frame()
        assert [(r.keys, r.versions) for r in applied.results] == [((3,), (version,))]
        assert not applied.not_current


def test_a_mark_dirty_from_an_apply_never_drops_another_products_result_with_fields_revalidation():
    # revalidate="fields" took a field's dirty flag as a change: world.mark_dirty() (a re-upload,
    # no new content) from one product's apply discarded the other's current result for that
    # chunk, and since its version had not moved, nothing owed it again: lost for good.
    world = World((4, 4), {"h": np.float32}, max_chunks=4)
    for k in range(3):
        world.add(k, {"h": np.full((4, 4), k + 1, np.float32)})
    engine = Engine(world, config=EngineConfig(revalidate="fields"))
    try:
        got: dict[str, dict[int, float]] = {"A": {}, "B": {}}

        def apply_a(r):
            got["A"].update({k: float(r.values[i][3]) for i, k in enumerate(r.keys)})
            world.mark_dirty(0, "h")

        def apply_b(r):
            got["B"].update({k: float(r.values[i][3]) for i, k in enumerate(r.keys)})

        for name, fn in (("A", apply_a), ("B", apply_b)):
            engine.register_product(kernel_program("summary"), key=name, spec={"T": "f32"}, fields={"src": "h"}, apply=fn, cpu_fallback=fallbacks.summary)
        with held_deliveries(engine):  # both readbacks land in the same frame
            engine.frame()
        run_until_idle(engine)
        want = {k: float(world.read(k, "h").sum()) for k in world.keys()}
        assert got["A"] == want and got["B"] == want
    finally:
        engine.close()


def test_two_engines_on_one_world_each_upload_every_change_to_their_own_mirrors():
    # The world's dirty flags were taken by whichever engine uploaded first: the other never
    # sent those chunks and applied results computed from an all-zero mirror as current.
    world = World((4, 4), {"h": np.float32}, max_chunks=4)
    world.add(0, {"h": np.ones((4, 4), np.float32)})
    got: dict[str, dict[int, float]] = {"A": {}, "B": {}}
    engines = {}
    try:
        for name in ("A", "B"):
            engine = Engine(world)
            engine.register_product(
                kernel_program("summary"), key="s", spec={"T": "f32"}, fields={"src": "h"}, cpu_fallback=fallbacks.summary,
                apply=lambda r, n=name: got[n].update({k: float(r.values[i][3]) for i, k in enumerate(r.keys)}),
            )
            engines[name] = engine

        def settle() -> None:
            deadline = time.monotonic() + 30.0
            while time.monotonic() < deadline:
                for e in engines.values():
                    e.frame()
                if all(e.idle and e.backend.inflight_readbacks == 0 for e in engines.values()):
                    return
                time.sleep(0.001)
            raise AssertionError("the engines did not settle")

        settle()
        assert got == {"A": {0: 16.0}, "B": {0: 16.0}}
        for value, key in ((2.0, 0), (3.0, 1)):  # later changes, and a chunk added after both registered
            if key in world:
                world.write(key, "h", value)
            else:
                world.add(key, {"h": np.full((4, 4), value, np.float32)})
            settle()
            want = {k: float(world.read(k, "h").sum()) for k in world.keys()}
            assert got["A"] == want and got["B"] == want
        assert world.dirty() == []  # the first engine took the world's own flags, as before
    finally:
        for e in engines.values():
            e.close()
    assert world._dirty_rows == {}  # the second engine's flags went with it (no kernel-written mirror: nothing parked)


def test_two_engines_on_a_world_subclass_whose_take_has_no_consumer_share_its_flags_as_before():
    # A subclass overriding take_dirty_slots(name) (as the suite's hook worlds do) cannot hand a
    # second engine flags of its own: both engines then share the world's, as before, and run.
    class HookedWorld(World):
        def take_dirty_slots(self, name):
            return super().take_dirty_slots(name)

    world = HookedWorld((4, 4), {"h": np.float32}, max_chunks=4)
    world.add(0, {"h": np.ones((4, 4), np.float32)})
    engines = [Engine(world), Engine(world)]
    try:
        for e in engines:
            e.register_product(kernel_program("summary"), key="s", spec={"T": "f32"}, fields={"src": "h"}, cpu_fallback=fallbacks.summary, apply=lambda r: None)
        for _ in range(3):
            for e in engines:
                e.frame()
        assert world._dirty_rows == {}
    finally:
        for e in engines:
            e.close()


def test_releasing_an_engines_dirty_flags_while_another_thread_writes_never_breaks_the_write():
    import threading

    world = World((4, 4), {"a": np.float32}, max_chunks=8)
    world.add(0)

    class Owner:
        pass

    first = Owner()
    assert world.claim_dirty(first) is None
    errors: list[str] = []
    stop = threading.Event()

    def writer() -> None:
        try:
            while not stop.is_set():
                world.set_tile(0, "a", (0, 0), 1.0)
        except Exception as exc:  # noqa: BLE001 - what the writer must never see
            errors.append(repr(exc))

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    t = threading.Thread(target=writer)
    t.start()
    try:
        owner = Owner()
        for _ in range(50000):
            world.claim_dirty(owner)
            owner = Owner()  # the last one is garbage: its finaliser drops its row
            if errors:
                break
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(switch)
    assert errors == []


def _summary_engine(world, got=None):
    engine = Engine(world, backend=NoGpuBackend())
    engine.register_product(kernel_program("summary"), key="s", spec={"T": "f32"}, fields={"src": "h"}, cpu_fallback=fallbacks.summary,
                            apply=lambda r: got.update({k: float(r.values[i][3]) for i, k in enumerate(r.keys)}) if got is not None else None)
    return engine


def test_the_last_engine_left_takes_the_worlds_own_flags_back():
    # Review helper 35: an engine on flags of its own kept them after the engine holding the
    # world's flags went (dropped, or closed): world.dirty() was never cleared again.
    import gc

    for how in ("dropped", "closed"):
        world = World((4, 4), {"h": np.float32}, max_chunks=4)
        world.add(0)
        first = _summary_engine(world)
        first.frame()
        second = _summary_engine(world)
        assert second._dirty_token is not None
        if how == "dropped":
            del first
            gc.collect()
        else:
            first.close()
        world.write(0, "h", 2.0)
        second.frame()
        assert second._dirty_token is None and world.dirty() == [] and world._dirty_rows == {}
        second.close()


def test_an_engine_used_after_close_claims_flags_again_and_sees_every_change():
    # Review helper 35: after close() the engine still ran, on the world's flags another engine
    # had claimed meanwhile: that one never saw the next write.
    world = World((4, 4), {"h": np.float32}, max_chunks=4)
    world.add(0, {"h": np.ones((4, 4), np.float32)})
    got_a: dict = {}
    got_c: dict = {}
    a = _summary_engine(world, got_a)
    a.close()
    a.register_product(kernel_program("summary"), key="s2", spec={"T": "f32"}, fields={"src": "h"}, cpu_fallback=fallbacks.summary,
                       apply=lambda r: got_a.update({k: float(r.values[i][3]) for i, k in enumerate(r.keys)}))
    c = _summary_engine(world, got_c)
    for _ in range(2):
        a.frame()
        c.frame()
    world.write(0, "h", 5.0)
    for _ in range(3):
        a.frame()
        c.frame()
    assert got_a == {0: 80.0} and got_c == {0: 80.0}
    a.close()
    c.close()


def test_an_interrupt_in_apply_drops_none_of_the_frames_other_results(make_engine):
    # Review helper 146: a KeyboardInterrupt (any BaseException) from an apply callback left
    # step 5 part-way: the results delivered after it were never applied nor owed again, their
    # products' in-flight counts never drained (engine.idle stayed False for good), and the
    # aborted frame's stats were never added to the totals.
    world = World((4, 4), {"h": np.float32}, max_chunks=8)
    for k in range(4):
        world.add(k, {"h": np.full((4, 4), k, np.float32)})
    engine = make_engine(world, config=EngineConfig(backend=WgpuBackendConfig(max_chunks_per_dispatch=1)))  # 4 readbacks, one frame
    applied: dict[int, int] = {}
    interrupted = []

    def apply(result):
        for k in result.keys:
            applied[k] = applied.get(k, 0) + 1
        if not interrupted:
            interrupted.append(result.keys)
            raise KeyboardInterrupt

    engine.register_product(kernel_program("summary"), key="s", fields={"src": "h"}, apply=apply, cpu_fallback=fallbacks.summary)
    deadline = time.monotonic() + 60
    while not (interrupted and engine.idle):
        assert time.monotonic() < deadline, f"never idle: applied {applied}, inflight {engine.inflight}"
        try:
            engine.frame()
        except KeyboardInterrupt:
            pass
        time.sleep(0.002)
    assert applied == {0: 1, 1: 1, 2: 1, 3: 1}
    t = engine.totals
    assert (t.readbacks_requested, t.readbacks_applied, t.readbacks_stale, t.readbacks_failed) == (4, 4, 0, 0)


def test_a_readback_budget_too_small_for_one_chunk_is_said_and_dispatches_nothing(make_engine):
    # One chunk's result (16 bytes) is more than the whole readback budget (8): the engine
    # dispatched and had the readback refused every frame, for good, with no product_error
    # (review helper 165). It says why, wastes no GPU work, and a fallback serves the chunks.
    world = World((4, 4), {"h": np.float32}, max_chunks=4)
    for k in range(2):
        world.add(k, {"h": np.full((4, 4), k + 1, np.float32)})
    engine = make_engine(world, config=EngineConfig(backend=WgpuBackendConfig(max_inflight_readback_bytes=8)))
    bare = engine.register_product(kernel_program("summary"), fields={"src": "h"}, apply=lambda r: None)
    seen = Applied(world)
    served = engine.register_product(kernel_program("summary"), key="served", fields={"src": "h"}, apply=seen, cpu_fallback=fallbacks.summary)
    dispatched = 0
    for _ in range(20):
        dispatched += engine.frame().dispatches
    error = engine.product_error(bare)
    assert error is not None and "max_inflight_readback_bytes" in str(error) and "8" in str(error), error
    assert dispatched == 0 and engine.totals.refused == 0
    assert sorted(seen.latest) == [0, 1] and {r.source for r in seen.results} == {"cpu"}
    assert engine.product_error(served) is not None and not engine.idle


def _settled_summary(make_engine):
    """(world, engine, applied): four 4x4 chunks and a summary product, every result applied."""
    world = World((4, 4), {"h": np.float32}, max_chunks=8)
    for k in range(4):
        world.add(k, {"h": np.full((4, 4), k, np.float32)})
    engine = make_engine(world)
    seen = Applied(world)
    engine.register_product(kernel_program("summary"), key="s", fields={"src": "h"}, apply=seen, cpu_fallback=fallbacks.summary)
    run_until_idle(engine)
    return world, engine, seen


@pytest.mark.parametrize("at", ["before the submit", "while mapping", "while arming"])
def test_an_interrupt_while_the_frame_is_submitted_leaves_no_readback_in_flight_for_good(make_engine, monkeypatch, at):
    # Review helper 206: a Ctrl-C landing in the batch's submit (before queue.submit, or between
    # it and the readbacks' maps) left their requests in flight for good: never submitted or
    # never mapped, they never landed; with one frame in flight every later frame deferred, and
    # no product computed again (chunk results stale for good, nothing said). Their readbacks
    # fail instead, and their chunks are owed again.
    import engine_plugin.gpu.batch as gpu_batch
    import engine_plugin.gpu.ring as ring
    import engine_plugin.runtime.submission as submission

    world, engine, seen = _settled_summary(make_engine)
    world.write(2, "h", np.float32(42.0))
    name, module = {"before the submit": ("unusable_in", submission), "while mapping": ("map_submitted", gpu_batch), "while arming": ("arm", ring.ReadbackRing)}[at]
    real = getattr(module, name)
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, interrupted)
    with pytest.raises(KeyboardInterrupt):
        engine.frame()
    assert calls
    run_until_idle(engine, timeout=20)
    assert same_bits(np.asarray(seen.latest[2]).reshape(-1), cpu_summary(world, "h", 2)) and not seen.not_current


@pytest.mark.parametrize("at", ["_set_dirty", "_bump"])
@pytest.mark.parametrize("how", ["write", "set_tile", "edit"])
def test_an_interrupt_inside_a_world_change_never_leaves_new_values_unversioned(make_engine, monkeypatch, at, how):
    # Review helper 206: a Ctrl-C landing in World.write after the values were stored and before
    # the chunk was marked dirty and given a new version left the new values in the world with
    # the old version: the engine, idle, kept the old summary for good (a wrong number). The
    # bookkeeping goes first now: an interrupt leaves the old values, or new ones to compute.
    world, engine, seen = _settled_summary(make_engine)
    real = getattr(World, at)
    calls = []

    def interrupted(self, *args):
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(self, *args)

    monkeypatch.setattr(World, at, interrupted)
    with pytest.raises(KeyboardInterrupt):
        if how == "write":
            world.write(2, "h", np.float32(42.0))
        elif how == "set_tile":
            world.set_tile(2, "h", (1, 1), 42.0)
        else:
            with world.edit(2) as f:
                f["h"][...] = 42.0
    monkeypatch.setattr(World, at, real)
    run_until_idle(engine, timeout=20)
    for k in range(4):
        assert same_bits(np.asarray(seen.latest[k]).reshape(-1), cpu_summary(world, "h", k)), (k, world.read(2, "h"))


def test_closing_an_engine_with_a_readback_in_flight_counts_it_and_leaves_the_engine_idle(gpu):
    # Review helper 217: the readback close() failed was counted nowhere (requested 1, applied,
    # stale and failed 0), and the engine said it was not idle until a frame after close().
    world = make_world(n=8)
    engine = Engine(world, device=gpu)
    applied: list = []
    summary_product(engine, apply=applied.append)
    with held_deliveries(engine):
        engine.frame()
        wait_for_gpu(engine)
    assert engine.totals.readbacks_requested == 1 and engine.inflight == 1
    before = engine.totals
    flags = (before.frame, before.gpu_active, before.gpu_timing)
    engine.close()
    t = engine.totals
    assert (t.frame, t.gpu_active, t.gpu_timing) == flags  # the last frame's flags stand
    assert t.readbacks_requested == t.readbacks_applied + t.readbacks_stale + t.readbacks_failed == 1
    assert t.readbacks_applied == 0 and not applied  # its product was unregistered: never applied
    assert engine.idle and engine.inflight == 0
