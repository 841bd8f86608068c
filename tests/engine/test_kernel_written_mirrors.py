"""A kernel-written mirror (GPU state the world does not hold) is overwritten only by what the
world changed, whichever engines come and go, and a product reading it is never served from
the world's stale bytes because a readback slot was taken (review helper 49)."""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.engine import Engine, EngineConfig, ProductError
from engine_plugin.errors import DispatchError
from engine_plugin.gpu import NoGpuBackend, ReadbackPolicy, WgpuBackendConfig
from engine_plugin.world import World

pytestmark = pytest.mark.gpu

SHAPE = (4, 4)
DECAY_YAML = """\
bindings:
  - { name: tiles, kind: buffer, access: read, element: u32 }
  - { name: heat,  kind: buffer, access: read_write, element: f32 }
params:
  - { name: k, type: f32 }
"""
DECAY_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let t = tiles_get(i);
    heat_set(t, heat_get(t) * params.k);
}
"""
SUM_YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: heat, kind: buffer, access: read, element: f32 }
  - { name: out, kind: buffer, access: read_write, element: f32, count: "n" }
params:
  - { name: tile_count, type: u32 }
"""
SUM_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * params.tile_count;
    var s = 0.0;
    for (var t = 0u; t < params.tile_count; t = t + 1u) { s = s + heat_get(base + t); }
    out_set(i, s);
}
"""


def _program(key, yaml, wgsl):
    return abi.program(key=key, schema=abi.parse(yaml, f"{key}/bindings.yaml"), wgsl=wgsl, wgsl_path=f"{key}/kernel.wgsl")


def _world(values):
    world = World(SHAPE, {"heat": np.float32}, max_chunks=len(values))
    for k, v in enumerate(values):
        world.add(k, {"heat": np.full(SHAPE, v, np.float32)})
    return world


def _decay(engine, k=0.5):
    handle = engine.register_product(
        _program("t15k/decay", DECAY_YAML, DECAY_WGSL), key="decay", fields={"heat": "heat"}, policy=ReadbackPolicy.NONE, params={"k": k}
    )
    engine.field_buffer("heat", kernel_writes=True)
    return handle


def _drain(engine):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        engine.frame()
        if engine.idle and getattr(engine.backend, "inflight_readbacks", 0) == 0:
            return
        time.sleep(0.002)
    raise AssertionError("the engine never went idle")


def _mirror(engine, world):
    words = np.frombuffer(abi.read(engine.backend.field_buffer("heat")), np.float32)
    return words.reshape(world.max_chunks, -1)[:, 0]


@pytest.mark.parametrize("how", ["close", "gc"])
def test_the_flag_holder_going_away_does_not_send_the_worlds_old_bytes_again(gpu, how):
    world = _world([1.0, 2.0])
    a = Engine(world, device=gpu)  # takes the world's own flags
    b = Engine(world, device=gpu)  # flags of its own
    try:
        h = _decay(b)
        for _ in range(3):
            b.invalidate(h)
            b.frame()
            _drain(b)
        before = _mirror(b, world).copy()
        assert before.tolist() == [0.125, 0.25]
        if how == "close":
            a.close()
        else:
            del a
            gc.collect()
        b.frame()
        _drain(b)
        np.testing.assert_array_equal(_mirror(b, world), before)  # nothing changed in the world
        world.write(1, "heat", np.full(SHAPE, 9.0, np.float32))
        _drain(b)
        assert _mirror(b, world).tolist() == [0.125, 4.5]  # the world's 9.0 sent (and owed: decayed once), nothing else
    finally:
        b.close()


def test_an_engine_used_after_close_sends_what_the_world_changed_meanwhile(gpu):
    from engine_plugin.gpu import WgpuBackend

    world = _world([1.0, 1.0, 1.0, 1.0])
    backend = WgpuBackend(gpu, WgpuBackendConfig())
    engine = Engine(world, backend=backend)
    h = _decay(engine)
    engine.invalidate(h)
    _drain(engine)
    engine.close()
    other = Engine(world, backend=NoGpuBackend())  # holds the world's flags meanwhile
    world.write(2, "heat", np.full(SHAPE, 9.0, np.float32))  # authoritative
    other.frame()
    engine.field_buffer("heat", kernel_writes=True)
    engine.frame()
    _drain(engine)
    assert _mirror(engine, world).tolist() == [0.5, 0.5, 9.0, 0.5]
    other.close()
    engine.close()


def test_a_taken_readback_slot_defers_a_product_instead_of_its_cpu_fallback(gpu):
    world = _world([1.0, 1.0])
    engine = Engine(world, device=gpu, config=EngineConfig(backend=WgpuBackendConfig(max_inflight_readbacks=1)))
    try:
        _decay(engine)
        got: dict[str, list] = {"a": [], "b": []}

        def from_world(w, work):  # the world's bytes: not what the GPU holds
            return np.array([w.read(k, "heat").sum(dtype=np.float32) for k in work.keys], np.float32)

        for key in ("a", "b"):
            engine.register_product(
                _program("t15k/sum", SUM_YAML, SUM_WGSL),
                key=key,
                fields={"heat": "heat"},
                apply=lambda r, key=key: got[key].append((r.source, r.records.tolist())),
                cpu_fallback=from_world,
            )
        for _ in range(3):
            engine.invalidate()
            engine.frame()
            _drain(engine)
        sums = (_mirror(engine, world) * SHAPE[0] * SHAPE[1]).tolist()
        for key in ("a", "b"):
            assert all(source == "gpu" for source, _ in got[key]), got[key]
            assert got[key][-1][1] == sums
    finally:
        engine.close()


def _acc_engine(chunks: int, max_chunks: int | None = None, **backend):
    """A world of ``chunks`` chunks whose ``f`` holds k + 1 in chunk k, and an engine over it
    with a kernel-written ``acc`` mirror (``backend``: WgpuBackendConfig options)."""
    world = World(SHAPE, {"f": np.float32, "acc": np.float32}, max_chunks=max_chunks or chunks)
    for k in range(chunks):
        world.add(k, {"f": np.full(SHAPE, k + 1.0, np.float32)})
    engine = Engine(world, config=EngineConfig(backend=WgpuBackendConfig(**backend))) if backend else Engine(world)
    engine.field_buffer("acc", kernel_writes=True)
    return world, engine


def _two_field_world(src: float = 0.0):
    world = World(SHAPE, {"heat": np.float32, "src": np.float32}, max_chunks=2)
    for k in (0, 1):
        world.add(k, {"heat": np.ones(SHAPE, np.float32), "src": np.full(SHAPE, src, np.float32)})
    return world


@pytest.mark.parametrize("change", ["another field", "mark_dirty"])
def test_a_reused_engine_sends_what_changed_in_that_field_and_what_was_marked(gpu, change):
    # Review helper 50: chunk versions said "changed" for a write to another field (the GPU's
    # heat was replaced by the world's old bytes), and a mark_dirty while closed was lost.
    from engine_plugin.gpu import WgpuBackend

    world = _two_field_world()
    engine = Engine(world, backend=WgpuBackend(gpu, WgpuBackendConfig()))
    h = _decay(engine)
    for _ in range(3):
        engine.invalidate(h)
        engine.frame()
        _drain(engine)
    engine.close()
    if change == "another field":
        world.write(0, "src", np.full(SHAPE, 7.0, np.float32))  # heat untouched
        want = [0.125, 0.125]
    else:
        world.mark_dirty(1, "heat")  # sent again on purpose
        want = [0.125, 1.0]
    engine.field_buffer("heat", kernel_writes=True)
    engine.frame()
    _drain(engine)
    assert _mirror(engine, world).tolist() == want


def test_another_engine_used_again_after_close_does_not_resend_this_engines_mirror(gpu):
    world = _world([1.0, 1.0])
    a = Engine(world, device=gpu)  # the holder; heat is not kernel-written for it
    b = Engine(world, device=gpu)
    try:
        h = _decay(b)
        for _ in range(3):
            b.invalidate(h)
            b.frame()
            _drain(b)
        a.close()
        a.frame()  # used again: it sends its own mirrors again, and only its own
        b.frame()
        _drain(b)
        assert _mirror(b, world).tolist() == [0.125, 0.125]
    finally:
        a.close()
        b.close()


def test_readers_of_gpu_state_waiting_for_readback_slots_each_get_their_turn(gpu):
    world = _world([1.0, 1.0])
    engine = Engine(world, device=gpu, config=EngineConfig(backend=WgpuBackendConfig(max_inflight_readbacks=1)))
    try:
        _decay(engine, k=1.0)
        got: dict[str, int] = {"a": 0, "b": 0, "c": 0}
        for key in got:
            engine.register_product(
                _program("t15k/sum", SUM_YAML, SUM_WGSL),
                key=key,
                fields={"heat": "heat"},
                apply=lambda r, key=key: got.__setitem__(key, got[key] + 1),
                cpu_fallback=lambda w, work: np.zeros(len(work.keys), np.float32),
            )
        deadline = time.monotonic() + 60
        while min(got.values()) < 3 and time.monotonic() < deadline:
            engine.invalidate()  # owed every frame, as the demo's GPU-state products are
            engine.frame()
            time.sleep(0.002)
        assert min(got.values()) >= 3, got
    finally:
        engine.close()


@pytest.mark.parametrize("change", ["write", "mark_dirty"])
def test_changes_not_yet_sent_when_the_engine_closes_are_sent_when_it_is_used_again(gpu, change):
    # Review helper 52: close() released the engine's flags and parked new, clear ones: a
    # change made after the last frame was lost for the kernel-written mirror.
    from engine_plugin.gpu import WgpuBackend

    world = _world([1.0, 1.0])
    engine = Engine(world, backend=WgpuBackend(gpu, WgpuBackendConfig()))
    h = _decay(engine)
    engine.invalidate(h)
    _drain(engine)
    if change == "write":
        world.write(1, "heat", np.full(SHAPE, 9.0, np.float32))
    else:
        world.mark_dirty(1, "heat")
    engine.close()
    engine.field_buffer("heat", kernel_writes=True)
    engine.frame()
    _drain(engine)
    assert _mirror(engine, world).tolist() == [0.5, 9.0 if change == "write" else 1.0]


def test_readers_waiting_for_slots_keep_registration_order_within_a_frame(gpu):
    # Review helper 52: waiting readers were moved ahead of the product writing what they read:
    # each of their results was one decay behind the frame it was dispatched in.
    world = _world([1.0, 1.0])
    engine = Engine(world, device=gpu, config=EngineConfig(backend=WgpuBackendConfig(max_inflight_readbacks=1)))
    try:
        _decay(engine)  # registered first: heat *= 0.5 a frame
        order: list[str] = []
        real = engine._dispatch_once

        def noting(product, st, index):
            done = real(product, st, index)
            if done:
                order.append(product.key)
            return done

        engine._dispatch_once = noting
        for key in ("a", "b"):
            engine.register_product(
                _program("t15k/sum", SUM_YAML, SUM_WGSL),
                key=key,
                fields={"heat": "heat"},
                apply=lambda r: None,
                cpu_fallback=lambda w, work: np.zeros(len(work.keys), np.float32),
            )
        for _ in range(8):
            order.append("|")
            engine.invalidate()
            engine.frame()
            time.sleep(0.003)
        frames = [f.split(",") for f in ",".join(order).split("|") if f.strip(",")]
        for keys in frames:
            keys = [k for k in keys if k]
            assert keys[0] == "decay" and len(keys) == len(set(keys)), frames  # the writer first, each once
        assert {k for keys in frames for k in keys} >= {"a", "b"}  # both readers served
    finally:
        engine.close()


def test_closed_engines_park_flags_only_for_kernel_written_mirrors_and_once_each():
    import weakref

    world = World(SHAPE, {"heat": np.float32}, max_chunks=64)
    for k in range(8):
        world.add(k)
    kept = []
    for _ in range(50):
        engine = Engine(world, backend=NoGpuBackend())
        engine.frame()
        engine.close()
        kept.append(engine)
    assert world._dirty_rows == {}  # no kernel-written mirror: nothing parked, every change costs as before
    engine = Engine(world, backend=NoGpuBackend())
    engine._gpu.note_kernel_writes(["heat"])
    before = len(weakref.finalize._registry)
    for _ in range(100):
        engine.frame()
        engine.close()
    assert len(world._dirty_rows) <= 1 and len(weakref.finalize._registry) - before <= 1


def test_a_field_its_kernels_write_only_after_a_reuse_gets_what_changed_while_closed(gpu):
    # Review helper 53: nothing was parked (no kernel-written field at close), and on reuse the
    # field, kernel-written by then, was left out of the re-send: the world's write was lost.
    from engine_plugin.gpu import WgpuBackend

    world = _world([1.0, 1.0])
    engine = Engine(world, backend=WgpuBackend(gpu, WgpuBackendConfig()))
    engine.field_buffer("heat")
    engine.frame()
    _drain(engine)
    engine.close()
    world.write(1, "heat", np.full(SHAPE, 9.0, np.float32))
    world.take_dirty()  # another consumer of the world's flags
    _decay(engine, k=1.0)  # kernel-written from now on
    engine.frame()
    _drain(engine)
    assert _mirror(engine, world).tolist() == [1.0, 9.0]
    engine.close()


def test_a_reader_of_gpu_state_is_served_behind_an_earlier_readback_product(gpu):
    # Review helper 53: a product reading a world-fed field, registered first, took the one
    # slot every frame; the GPU-state reader waited for good.
    world = _two_field_world(src=1.0)
    engine = Engine(world, device=gpu, config=EngineConfig(backend=WgpuBackendConfig(max_inflight_readbacks=1)))
    try:
        _decay(engine, k=1.0)
        got = {"x": 0, "r": 0}
        zero = lambda w, work: np.zeros(len(work.keys), np.float32)  # noqa: E731
        for key, field in (("x", "src"), ("r", "heat")):
            engine.register_product(
                _program("t15k/sum", SUM_YAML, SUM_WGSL),
                key=key,
                fields={"heat": field},
                apply=lambda r, key=key: got.__setitem__(key, got[key] + 1),
                cpu_fallback=zero,
            )
        deadline = time.monotonic() + 60
        while (got["r"] < 5 or got["x"] < 5) and time.monotonic() < deadline:
            engine.invalidate()
            engine.frame()
            time.sleep(0.002)
        assert got["r"] >= 5 and got["x"] >= 5, got
    finally:
        engine.close()


def test_engines_closed_and_used_again_leave_no_finalisers_or_rows_behind():
    import weakref

    world = _world([1.0, 1.0])
    holder = Engine(world, backend=NoGpuBackend())  # noqa: F841  # the others get flags of their own
    engine = Engine(world, backend=NoGpuBackend())
    engine._gpu.note_kernel_writes(["heat"])
    before = len(weakref.finalize._registry)
    for _ in range(100):
        engine.frame()
        engine.close()
    assert len(weakref.finalize._registry) - before <= 1
    for _ in range(50):
        e = Engine(world, backend=NoGpuBackend())
        e._gpu.note_kernel_writes(["heat"])
        e.frame()
        e.close()
        del e
    gc.collect()
    assert len(world._row_finalizers) <= 2 and len(world._dirty_rows) <= 2  # the two engines still alive


def test_a_waiting_reader_that_left_the_gpu_is_owed_no_slot(gpu):
    # Review helper 54: a reader that waited and then left the GPU (its dispatch could not be
    # prepared) stayed "owed" a slot: every other readback product ran on its CPU fallback.
    world = _two_field_world(src=1.0)
    engine = Engine(world, device=gpu, config=EngineConfig(backend=WgpuBackendConfig(max_inflight_readbacks=1)))
    try:
        _decay(engine, k=1.0)
        sources: dict[str, list] = {"x": [], "r": []}
        zero = lambda w, work: np.zeros(len(work.keys), np.float32)  # noqa: E731
        for key, field in (("x", "src"), ("r", "heat")):
            engine.register_product(
                _program("t15k/sum", SUM_YAML, SUM_WGSL),
                key=key,
                fields={"heat": field},
                apply=lambda r, key=key: sources[key].append(r.source),
                cpu_fallback=zero,
            )
        reader = next(p for p in engine._order if p.key == "r")
        deadline = time.monotonic() + 30
        while reader.slot_waits == 0 and time.monotonic() < deadline:
            engine.invalidate()
            engine.frame()
        assert reader.slot_waits > 0

        def cannot_prepare(*args):
            raise RuntimeError("this dispatch cannot be prepared")

        reader.gpu.dispatch_desc = cannot_prepare  # leaves the GPU at its next dispatch
        for _ in range(60):
            engine.invalidate()
            engine.frame()
            time.sleep(0.002)
        assert reader.gpu is None
        assert "gpu" in sources["x"][-10:], sources["x"][-10:]  # the free slot is x's again
    finally:
        engine.close()


WRITER_YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: f, kind: buffer, access: read, element: f32 }
  - { name: acc, kind: buffer, access: read_write, element: f32 }
  - { name: out, kind: buffer, access: read_write, element: f32, count: "n" }
params:
  - { name: tile_count, type: u32 }
"""
WRITER_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * params.tile_count;
    var s = 0.0;
    for (var t = 0u; t < params.tile_count; t = t + 1u) { s = s + f_get(base + t); acc_set(base + t, f_get(base + t) + 100.0); }
    out_set(i, s);
}
"""


def test_a_mirror_reader_never_runs_ahead_of_its_writer_waiting_for_a_readback_slot():
    # Review helper 88: with one readback slot, the writer of `acc` (registered first, owing a
    # changed chunk) was deferred and its reader, which had waited longer for a slot, ran over
    # the old mirror: the sum of the old acc applied for the chunk's new version.
    world, engine = _acc_engine(3, max_chunks=4, max_inflight_readbacks=1)
    wrong: list = []
    applied: list = []

    def on_sum(result):
        for k, v, value in zip(result.keys, result.versions, result.values):
            want = float((world.read(k, "f").astype(np.float64) + 100).sum())
            applied.append(k)
            if world.is_current(k, v) and float(value) != want:
                wrong.append((k, float(value), want))

    engine.register_product(_program("t88/writer", WRITER_YAML, WRITER_WGSL), key="writer", fields={"f": "f", "acc": "acc"}, apply=lambda r: None)
    reader = engine.register_product(_program("t88/reader", SUM_YAML, SUM_WGSL), key="reader", fields={"heat": "acc"}, apply=on_sum)

    _drain(engine)
    for step in range(6):
        engine.invalidate(reader)  # the game: the reader's input changes with f
        world.write(step % 3, "f", np.full(SHAPE, 10.0 + step, np.float32))
        engine.frame()
        time.sleep(0.005)
    _drain(engine)
    engine.close()
    assert applied and not wrong, wrong


def _sum_checker(world):
    """``(apply, wrong, applied)``: a reader's apply that counts each chunk's results and
    lists those applied as current whose sum of acc is not the world's f + 100."""
    wrong: list = []
    applied: dict = {}

    def on_sum(result):
        for k, v, value in zip(result.keys, result.versions, result.values):
            applied[k] = applied.get(k, 0) + 1
            want = float((world.read(k, "f").astype(np.float64) + 100).sum())
            if world.is_current(k, v) and float(value) != want:
                wrong.append((k, v, float(value), want))

    return on_sum, wrong, applied


def _mirror_pair(reader_first: bool = False, **backend):
    """A world, an engine with one readback slot, the writer of `acc` (acc = f + 100) and its
    reader (a sum of acc over the chunk), and the list of wrong values the reader applied as
    current (checked against the world when they are applied)."""
    world, engine = _acc_engine(3, max_chunks=4, max_inflight_readbacks=1, **backend)
    on_sum, wrong, applied = _sum_checker(world)

    def writer():
        return engine.register_product(_program("t89/writer", WRITER_YAML, WRITER_WGSL), key="writer", fields={"f": "f", "acc": "acc"}, apply=lambda r: None)

    def reader():
        return engine.register_product(_program("t89/reader", SUM_YAML, SUM_WGSL), key="reader", fields={"heat": "acc"}, apply=on_sum)

    handles = (reader(), writer()) if reader_first else (writer(), reader())
    return world, engine, handles, wrong, applied


def test_a_mirror_reader_registered_before_its_writer_sees_what_it_wrote_the_frame_before():
    # A reader registered first runs first in each frame's submission: it reads the mirror as
    # the writer left it (state fed back, as the demo's heat step and copy). Waiting for the
    # writer there made the two halves of a ping-pong wait for each other: no frame advanced.
    world, engine, (reader, writer), wrong, applied = _mirror_pair(reader_first=True)
    for _ in range(20):
        engine.frame()
        time.sleep(0.002)
    assert applied  # the reader is served
    _drain(engine)
    engine.invalidate(reader)  # the writer is done with every chunk: now the reader sees it all
    _drain(engine)
    engine.close()
    assert applied


def test_a_mirror_reader_still_gets_the_chunks_its_writer_is_done_with():
    # Review helper 89: the first version of the rule held the reader back whenever its writer
    # owed anything; a game editing chunk 0 every frame starved chunk 1 for good.
    world, engine, (_, reader), wrong, applied = _mirror_pair()
    _drain(engine)
    applied.clear()
    world.write(1, "f", np.full(SHAPE, 7.0, np.float32))
    engine.invalidate(reader)
    for step in range(60):
        world.write(0, "f", np.full(SHAPE, float(step), np.float32))
        engine.frame()
        time.sleep(0.003)
    engine.close()
    assert applied.get(1) and not wrong, (applied, wrong)


def test_a_mirror_reader_waits_while_its_writer_runs_on_its_cpu_fallback(caplog):
    # Review helper 89: a writer that gave up on the GPU (its readbacks kept failing) ran on
    # its CPU fallback, which writes no mirror; the reader applied sums of the frozen mirror.
    world, engine, (writer, reader), wrong, applied = _mirror_pair()
    _drain(engine)
    product = engine.product(writer)
    product.cpu_fallback = lambda world, work: np.zeros(len(work.keys), np.float32)
    product.gave_up = True  # as after max_readback_failures: its fallback serves it until recover_gpu()
    engine._gpu.release(product)
    applied.clear()
    world.write(1, "f", np.full(SHAPE, 9.0, np.float32))
    engine.invalidate(reader)
    for _ in range(30):
        engine.frame()
        time.sleep(0.003)
    assert not wrong, wrong
    assert 1 not in applied  # waits for the writer: nothing over the frozen mirror
    assert any("waits for" in m for m in caplog.messages)
    # Not only logged: the game can see why the reader's chunk is not served (it would wait
    # for good while the writer stays on its fallback).
    error = engine.product_error(reader)
    assert isinstance(error, ProductError) and "'writer'" in str(error) and "'acc'" in str(error), error
    assert engine.product_error(writer) is None
    assert engine.recover_gpu()  # the writer's kernel runs again: it writes the chunks, the reader follows
    for _ in range(60):
        engine.frame()
        time.sleep(0.003)
        if 1 in applied:
            break
    assert not wrong, wrong
    assert 1 in applied
    _drain(engine)
    assert engine.product_error(reader) is None
    engine.close()


STAGE_YAML = """\
bindings:
  - { name: tiles, kind: buffer, access: read, element: u32 }
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: dst, kind: buffer, access: read_write, element: f32 }
params:
  - { name: mul, type: f32 }
  - { name: add, type: f32 }
"""
STAGE_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let t = tiles_get(i);
    dst_set(t, src_get(t) * params.mul + params.add);
}
"""


def test_ping_pong_stages_each_writing_the_mirror_the_other_reads_both_run():
    # Review helper 91: each stage waited for the other's owed chunks: nothing dispatched again.
    world = World(SHAPE, {"a": np.float32, "b": np.float32}, max_chunks=4)
    for k in range(3):
        world.add(k, {"a": np.full(SHAPE, k + 1.0, np.float32)})
    engine = Engine(world)
    engine.field_buffer("a", kernel_writes=True)
    engine.field_buffer("b", kernel_writes=True)
    program = _program("t91/stage", STAGE_YAML, STAGE_WGSL)
    engine.register_product(program, key="P", fields={"src": "a", "dst": "b"}, policy=ReadbackPolicy.NONE, params={"mul": 2.0, "add": 0.0})
    engine.register_product(program, key="Q", fields={"src": "b", "dst": "a"}, policy=ReadbackPolicy.NONE, params={"mul": 1.0, "add": 1.0})
    dispatches = sum(engine.frame().dispatches for _ in range(20))
    assert dispatches >= 2 and engine.idle
    b = np.frombuffer(abi.read(engine.backend.field_buffer("b")), np.float32).reshape(4, -1)[:3, 0]
    a = np.frombuffer(abi.read(engine.backend.field_buffer("a")), np.float32).reshape(4, -1)[:3, 0]
    engine.close()
    np.testing.assert_array_equal(b, [2.0, 4.0, 6.0])  # P: b = 2 a, over the world's a
    np.testing.assert_array_equal(a, [3.0, 5.0, 7.0])  # Q after it: a = b + 1


def test_a_writer_whose_readback_was_refused_still_wrote_its_mirror_for_its_readers(monkeypatch):
    # Review helper 91: the refused readback's fallback marked chunks the GPU had written as
    # unwritten, and the reader waited for them for good.
    world, engine, (writer, reader), wrong, applied = _mirror_pair()
    _drain(engine)
    real = engine.backend.readback
    refused = [0]

    def refuse_once(desc):
        if refused[0] == 0 and desc.product == engine.product(writer).gpu.handle:
            refused[0] += 1
            return False
        return real(desc)

    monkeypatch.setattr(engine.backend, "readback", refuse_once)
    engine.product(writer).cpu_fallback = lambda world, work: np.zeros(len(work.keys), np.float32)  # serves the refused readback
    applied.clear()
    world.write(1, "f", np.full(SHAPE, 9.0, np.float32))
    engine.invalidate(reader)
    _drain(engine)
    engine.close()
    assert refused[0] == 1 and applied.get(1) and not wrong, (refused, applied, wrong)


def test_a_split_writers_refused_readback_leaves_its_other_chunks_to_its_kernel(monkeypatch):
    # Review helper 92: one chunk a dispatch, the first readback refused: the fallback served
    # all three owed chunks, two of them never run over by the kernel, and their reader waited
    # for good while the writer stayed on the GPU owing nothing.
    world, engine, (writer, reader), wrong, applied = _mirror_pair(max_chunks_per_dispatch=1)
    _drain(engine)
    real = engine.backend.readback
    refused = [0]

    def refuse_once(desc):
        if refused[0] == 0 and desc.product == engine.product(writer).gpu.handle:
            refused[0] += 1
            return False
        return real(desc)

    monkeypatch.setattr(engine.backend, "readback", refuse_once)
    engine.product(writer).cpu_fallback = lambda world, work: np.zeros(len(work.keys), np.float32)
    applied.clear()
    for k in range(3):
        world.write(k, "f", np.full(SHAPE, 20.0 + k, np.float32))
    engine.invalidate(reader)
    _drain(engine)
    engine.close()
    assert refused[0] == 1 and all(applied.get(k) for k in range(3)) and not wrong, (refused, applied, wrong)


def test_a_mirror_writer_whose_dispatch_is_always_refused_is_served_by_its_fallback():
    # Review helper 93: 130 chunks need 3 workgroups, the backend allows 2: every dispatch is
    # refused. The fallback served only what the kernel ran over (nothing): never served, never idle.
    n = 130
    world, engine = _acc_engine(n, max_workgroups_x=2)
    got: dict = {}
    engine.register_product(
        _program("t93/writer", WRITER_YAML, WRITER_WGSL),
        key="writer",
        fields={"f": "f", "acc": "acc"},
        apply=lambda r: got.update({k: (float(v), version) for k, v, version in zip(r.keys, r.values, r.versions)}),
        cpu_fallback=lambda world, work: np.array([world.read(k, "f").sum() for k in work.keys], np.float32),
    )
    _drain(engine)
    engine.close()
    current = [k for k, (v, version) in got.items() if world.is_current(k, version) and v == float(world.read(k, "f").sum())]
    assert len(current) == n


def test_a_mirror_writers_one_off_refused_dispatch_is_retried_by_its_kernel(monkeypatch):
    # Review helper 94: one refused dispatch had the fallback serve the writer whole; the
    # chunks its kernel never ran over were owed to nobody, and the reader waited for good.
    world, engine, (writer, reader), wrong, applied = _mirror_pair()
    real = engine.backend.dispatch
    refused = [0]

    def refuse_once(desc):
        if refused[0] == 0 and desc.product == engine.product(writer).gpu.handle:
            refused[0] += 1
            return False
        return real(desc)

    monkeypatch.setattr(engine.backend, "dispatch", refuse_once)
    engine.product(writer).cpu_fallback = lambda world, work: np.zeros(len(work.keys), np.float32)
    _drain(engine)
    engine.close()
    assert refused[0] == 1 and all(applied.get(k) for k in range(3)) and not wrong, (refused, applied, wrong)


def _refusing(engine, writer, refuse):
    """Wrap the engine's backend (again after each recover_gpu) so ``refuse["dispatch"]`` and
    ``refuse["readback"]`` frames refuse the writer's dispatch and readback."""

    def wrap():
        backend = engine.backend
        if getattr(backend, "_refusing", False):
            return
        dispatch, readback = backend.dispatch, backend.readback

        def mine(desc):
            p = engine.product(writer)
            return p.gpu is not None and desc.product == p.gpu.handle

        backend.dispatch = lambda d: False if refuse["dispatch"] > 0 and mine(d) else dispatch(d)
        backend.readback = lambda d: False if refuse["readback"] > 0 and mine(d) else readback(d)
        backend._refusing = True

    def frame():
        wrap()
        engine.frame()
        for name in refuse:
            refuse[name] = max(0, refuse[name] - 1)
        time.sleep(0.005)

    return frame


def test_a_mirror_writers_dispatch_refused_three_frames_then_accepted_writes_what_its_fallback_served():
    # Review helper 95 (D1): refused 3 frames in a row (the limit), the writer was served whole
    # by its fallback and the chunks went `mirror_unwritten`; accepted again, nothing owed them
    # to its kernel: the reader waited for good, engine.idle stayed False.
    world, engine, (writer, reader), wrong, applied = _mirror_pair()
    engine.product(writer).cpu_fallback = lambda world, work: np.array([world.read(k, "f").sum() for k in work.keys], np.float32)
    _drain(engine)
    refuse = {"dispatch": 3, "readback": 0}
    frame = _refusing(engine, writer, refuse)
    world.write(1, "f", np.full(SHAPE, 7.0, np.float32))
    engine.invalidate(reader)
    for _ in range(5):
        frame()
    _drain(engine)
    assert not wrong, wrong
    assert applied.get(1) and not engine.product(writer).mirror_unwritten and not engine.product(reader).pending
    engine.close()


def test_a_mirror_writers_results_are_not_applied_twice_when_its_kernel_rewrites_what_its_fallback_served():
    # The kernel runs again over the chunks its fallback served (for the mirror): the results of
    # those chunks' versions were applied already, by the fallback; they are not applied again.
    world, engine, (writer, reader), wrong, applied = _mirror_pair()
    served: list = []

    def on_writer(result):
        served.extend(zip(result.keys, result.versions))

    product = engine.product(writer)
    product.apply = on_writer
    product.cpu_fallback = lambda world, work: np.array([world.read(k, "f").sum() for k in work.keys], np.float32)
    _drain(engine)
    served.clear()
    refuse = {"dispatch": 3, "readback": 0}
    frame = _refusing(engine, writer, refuse)
    world.write(1, "f", np.full(SHAPE, 7.0, np.float32))
    for _ in range(5):
        frame()
    _drain(engine)
    engine.close()
    assert served.count((1, world.version(1))) == 1, served


@pytest.mark.parametrize("policy", ["none", "summary"])
def test_a_mirror_writer_refused_after_recover_gpu_leaves_its_readers_waiting_not_reading_zeros(policy):
    # Review helper 95 (D2): after recover_gpu() the writer owed every chunk again; its dispatch
    # refused 3 frames, its fallback skipped the chunks it had computed before (cpu_done) and
    # never marked them unwritten: the reader summed the new mirror's zeros as current results.
    world, engine = _acc_engine(4, max_inflight_readbacks=8, max_chunks_per_dispatch=2)
    if policy == "none":
        writer = engine.register_product(
            _program("t95/none_writer", NONE_WRITER_YAML, NONE_WRITER_WGSL),
            key="writer",
            fields={"f": "f", "acc": "acc"},
            policy=ReadbackPolicy.NONE,
            cpu_fallback=lambda world, work: None,
        )
    else:
        writer = engine.register_product(
            _program("t95/writer", WRITER_YAML, WRITER_WGSL),
            key="writer",
            fields={"f": "f", "acc": "acc"},
            apply=lambda r: None,
            cpu_fallback=lambda world, work: np.array([world.read(k, "f").sum() for k in work.keys], np.float32),
        )
    on_sum, wrong, applied = _sum_checker(world)
    reader = engine.register_product(_program("t95/reader", SUM_YAML, SUM_WGSL), key="reader", fields={"heat": "acc"}, apply=on_sum)
    refuse = {"dispatch": 0, "readback": 0}
    frame = _refusing(engine, writer, refuse)
    if policy == "none":
        engine.backend.notify_device_error("the game saw a device error")
        frame()
        engine.recover_gpu()
        frame()
        refuse["dispatch"] = 6
        frame()
    else:
        refuse["readback"] = 1  # its fallback serves (and remembers) what its kernel ran over
        frame()
        refuse["dispatch"] = 2
        frame()
    engine.recover_gpu()  # a new mirror: the world's bytes (zeros) until the writer's kernel runs
    frame()
    refuse["dispatch"] = 3
    frame()
    world.write(3, "f", np.full(SHAPE, 9.0, np.float32))
    engine.invalidate(reader)
    for _ in range(4):
        frame()
    assert not wrong, wrong
    _drain(engine)  # accepted again: the writer's kernel writes the chunks, the reader follows
    engine.close()
    assert not wrong, wrong
    assert all(applied.get(k) for k in range(4)), applied


NONE_WRITER_YAML = """\
bindings:
  - { name: tiles, kind: buffer, access: read, element: u32 }
  - { name: f, kind: buffer, access: read, element: f32 }
  - { name: acc, kind: buffer, access: read_write, element: f32 }
"""
NONE_WRITER_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let t = tiles_get(i);
    acc_set(t, f_get(t) + 100.0);
}
"""


def test_dispatch_refusals_before_recover_gpu_do_not_count_toward_the_fallbacks_limit():
    # Review helper 95: refusals of the old registration and of the new one added up to the
    # limit (1, recover, 2, 3): a one-off refusal had the fallback serve the writer whole.
    world, engine, (writer, reader), wrong, applied = _mirror_pair()
    calls: list = []

    def fallback(world, work):
        calls.append(list(work.keys))
        return np.array([world.read(k, "f").sum() for k in work.keys], np.float32)

    engine.product(writer).cpu_fallback = fallback
    _drain(engine)
    refuse = {"dispatch": 2, "readback": 0}
    frame = _refusing(engine, writer, refuse)
    world.write(1, "f", np.full(SHAPE, 7.0, np.float32))
    frame()
    frame()
    assert engine.product(writer).dispatch_refusals == 2
    assert engine.recover_gpu()
    refuse["dispatch"] = 1
    frame()
    _drain(engine)
    engine.close()
    assert not calls and not wrong, (calls, wrong)


def _writer_fallback(world, work):
    return np.array([world.read(k, "f").sum() for k in work.keys], np.float32)


def test_two_writers_of_one_mirror_never_wait_for_each_other():
    # Review helper 98 (D1): W1 waited for the chunk W2's fallback served, W2 for W1's owed
    # work: neither dispatched again, and the reader waited behind both for good.
    world, engine = _acc_engine(2, max_chunks=4)
    handles = {}
    for name in ("W1", "W2"):
        handles[name] = engine.register_product(
            _program(f"t98/{name}", WRITER_YAML, WRITER_WGSL), key=name, fields={"f": "f", "acc": "acc"}, cpu_fallback=_writer_fallback, apply=lambda r: None
        )
    got: dict = {}
    reader = engine.register_product(
        _program("t98/reader", SUM_YAML, SUM_WGSL),
        key="R",
        fields={"heat": "acc"},
        apply=lambda r: got.update({k: (v, float(x)) for k, v, x in zip(r.keys, r.versions, r.values)}),
    )
    _drain(engine)
    refuse = {"dispatch": 5, "readback": 0}
    frame = _refusing(engine, handles["W2"], refuse)
    world.write(1, "f", np.full(SHAPE, 7.0, np.float32))
    engine.invalidate(reader)
    for i in range(5):
        if i == 3:
            world.write(1, "f", np.full(SHAPE, 9.0, np.float32))
            engine.invalidate(reader)
        frame()
    _drain(engine)
    assert got[1] == (world.version(1), float(16 * 109)), got
    assert all(engine.product_error(h) is None for h in (*handles.values(), reader))
    engine.close()


@pytest.mark.parametrize("how", ["evict", "lose"])
def test_a_readers_waiting_error_clears_once_it_waits_for_nothing(how):
    # Review helper 98 (D2): the chunk the reader waited for was evicted (or the reader's
    # fallback served it while the device was lost): idle, nothing owed, but product_error
    # kept naming the writer for good.
    world, engine, (writer, reader), wrong, applied = _mirror_pair()
    engine.product(writer).cpu_fallback = _writer_fallback
    engine.product(reader).cpu_fallback = lambda world, work: np.array([(world.read(k, "f") + 100).sum() for k in work.keys], np.float32)
    _drain(engine)
    refuse = {"dispatch": 6, "readback": 0}
    frame = _refusing(engine, writer, refuse)
    world.write(1, "f", np.full(SHAPE, 7.0, np.float32))
    engine.invalidate(reader)
    for _ in range(5):
        frame()
    assert isinstance(engine.product_error(reader), ProductError)
    if how == "evict":
        world.evict(1)
    else:
        engine.backend.notify_device_error("the game saw a device error")
        frame()
        frame()
        assert engine.recover_gpu()
    refuse["dispatch"] = 0
    _drain(engine)
    assert engine.product_error(reader) is None
    engine.close()


RMW_YAML = WRITER_YAML
RMW_WGSL = WRITER_WGSL.replace(  # reads acc, then rewrites it
    "s = s + f_get(base + t); acc_set(base + t, f_get(base + t) + 100.0);",
    "s = s + acc_get(base + t); acc_set(base + t, acc_get(base + t) * 0.0 + f_get(base + t) + 100.0);",
)
COPY2_YAML = WRITER_YAML.replace(  # reads acc, writes acc2
    "  - { name: acc, kind: buffer, access: read_write, element: f32 }", "  - { name: acc2, kind: buffer, access: read_write, element: f32 }"
).replace("  - { name: f, kind: buffer, access: read, element: f32 }", "  - { name: acc, kind: buffer, access: read, element: f32 }")
COPY2_WGSL = WRITER_WGSL.replace(  # sums acc, copies it into acc2
    "s = s + f_get(base + t); acc_set(base + t, f_get(base + t) + 100.0);", "s = s + acc_get(base + t); acc2_set(base + t, acc_get(base + t));"
)


def _cannot_prepare(engine, handle):
    def boom(*args, **kwargs):
        raise DispatchError("injected: the run does not check")

    engine.product(handle).gpu.dispatch_desc = boom


def test_a_writer_reading_the_mirror_waits_for_an_earlier_writers_fallback_served_chunks():
    # Review helper 101 (D1): W2 reads acc and rewrites it; W1, registered first, left the GPU
    # and its fallback served chunk 0: W2 summed the mirror without W1's write as the chunk's
    # new version (1616 where 1680 was due), and reported nothing.
    world, engine = _acc_engine(2)
    w1 = engine.register_product(
        _program("t101/w1", WRITER_YAML, WRITER_WGSL), key="W1", fields={"f": "f", "acc": "acc"}, cpu_fallback=_writer_fallback, apply=lambda r: None
    )
    on_sum, wrong, applied = _sum_checker(world)
    w2 = engine.register_product(_program("t101/w2", RMW_YAML, RMW_WGSL), key="W2", fields={"f": "f", "acc": "acc"}, apply=on_sum)
    _drain(engine)
    _cannot_prepare(engine, w1)
    world.write(0, "f", np.full(SHAPE, 5.0, np.float32))
    for _ in range(8):
        engine.frame()
        time.sleep(0.005)
    assert not wrong, wrong
    assert "'W1'" in str(engine.product_error(w2))  # it waits, and says for whom
    engine.close()


def test_a_product_back_on_the_gpu_reports_no_error_of_the_time_it_left():
    # Review helper 101 (D2): a dispatch that could not be prepared took the product off the
    # GPU with its error; set_params() or recover_gpu() put it back, but product_error kept
    # answering the old error for good.
    world, engine, (writer, reader), wrong, applied = _mirror_pair()
    _drain(engine)
    for back in (lambda: engine.set_params(reader, {}), engine.recover_gpu):
        _cannot_prepare(engine, reader)
        engine.invalidate(reader)
        engine.frame()
        assert isinstance(engine.product_error(reader), DispatchError)
        back()
        _drain(engine)
        assert engine.product(reader).gpu is not None and engine.product_error(reader) is None
    engine.close()


def test_a_reader_behind_a_waiting_writer_says_what_it_waits_for():
    # Review helper 101 (D3): W1 -> acc -> C -> acc2 -> R. W1 off the GPU: C waited for W1 and
    # said so; R waited for C's owed chunk for good with product_error None.
    world = World(SHAPE, {"f": np.float32, "acc": np.float32, "acc2": np.float32}, max_chunks=2)
    for k in range(2):
        world.add(k, {"f": np.full(SHAPE, float(k + 1), np.float32)})
    engine = Engine(world)
    engine.field_buffer("acc", kernel_writes=True)
    engine.field_buffer("acc2", kernel_writes=True)
    w1 = engine.register_product(
        _program("t101c/w1", WRITER_YAML, WRITER_WGSL), key="W1", fields={"f": "f", "acc": "acc"}, cpu_fallback=_writer_fallback, apply=lambda r: None
    )
    c = engine.register_product(_program("t101c/c", COPY2_YAML, COPY2_WGSL), key="C", fields={"acc": "acc", "acc2": "acc2"}, apply=lambda r: None)
    r = engine.register_product(_program("t101c/r", SUM_YAML, SUM_WGSL), key="R", fields={"heat": "acc2"}, apply=lambda r: None)
    _drain(engine)
    _cannot_prepare(engine, w1)
    world.write(0, "f", np.full(SHAPE, 5.0, np.float32))
    engine.invalidate(c)
    engine.invalidate(r)
    for _ in range(10):
        engine.frame()
        time.sleep(0.005)
    assert "'W1'" in str(engine.product_error(c))
    error = engine.product_error(r)
    assert isinstance(error, ProductError) and "'C'" in str(error) and "'W1'" in str(error), error
    engine.close()


PING_YAML = WRITER_YAML.replace(  # also reads acc2 (another product writes it)
    "  - { name: acc, kind: buffer, access: read_write, element: f32 }\n",
    "  - { name: acc2, kind: buffer, access: read, element: f32 }\n  - { name: acc, kind: buffer, access: read_write, element: f32 }\n",
)
PING_WGSL = WRITER_WGSL.replace("s = s + f_get(base + t);", "s = s + acc2_get(base + t);")  # sums acc2, writes acc
assert len({WRITER_WGSL, RMW_WGSL, PING_WGSL, COPY2_WGSL}) == 4 and len({WRITER_YAML, PING_YAML, COPY2_YAML}) == 3  # the replacements took


def test_two_products_each_reading_the_mirror_the_other_writes_do_not_wait_for_each_other():
    # Review helper 103: P1 (reads acc2, writes acc) waited for the chunk P2's fallback served,
    # P2 (reads acc, writes acc2) for P1's owed work: both for good, recover_gpu() or not.
    world = World(SHAPE, {"f": np.float32, "acc": np.float32, "acc2": np.float32}, max_chunks=4)
    world.add(0, {"f": np.full(SHAPE, 1.0, np.float32)})
    engine = Engine(world)
    engine.field_buffer("acc", kernel_writes=True)
    engine.field_buffer("acc2", kernel_writes=True)
    sums = lambda world, work: np.zeros(len(work.keys), np.float32)  # noqa: E731
    p1 = engine.register_product(
        _program("t103/p1", PING_YAML, PING_WGSL), key="P1", fields={"f": "f", "acc": "acc", "acc2": "acc2"}, cpu_fallback=sums, apply=lambda r: None
    )
    got: dict = {}
    p2 = engine.register_product(
        _program("t103/p2", COPY2_YAML, COPY2_WGSL),
        key="P2",
        fields={"acc": "acc", "acc2": "acc2"},
        cpu_fallback=sums,
        apply=lambda r: got.update({k: (v, float(x)) for k, v, x in zip(r.keys, r.versions, r.values)}),
    )
    _drain(engine)
    refuse = {"dispatch": 8, "readback": 0}
    frame = _refusing(engine, p2, refuse)
    world.write(0, "f", np.full(SHAPE, 2.0, np.float32))
    engine.invalidate()
    for _ in range(8):
        frame()
    world.write(0, "f", np.full(SHAPE, 3.0, np.float32))
    engine.invalidate()
    _drain(engine)
    assert got[0] == (world.version(0), float(16 * 103)), got  # P2's sum of acc = f + 100, current
    assert engine.product_error(p1) is None and engine.product_error(p2) is None
    engine.close()


DOUBLE_YAML = """\
bindings:
  - { name: tiles, kind: buffer, access: read, element: u32 }
  - { name: a, kind: buffer, access: read, element: f32 }
  - { name: m, kind: buffer, access: read_write, element: f32 }
"""
DOUBLE_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let t = tiles_get(i);
    m_set(t, a_get(t) * 2.0 + 1.0);
}
"""


def test_a_reader_registered_after_a_writer_follows_what_the_writer_computes_from_another_field(gpu):
    # Review helper 154: the writer computes m = 2a + 1 from field a; a change to a owed the
    # writer alone, so the reader of m kept its first result for good. A reader registered
    # after the writer runs over the chunks the writer writes, in the same frame, after it.
    world = World(SHAPE, {"a": np.float32, "m": np.float32}, max_chunks=3)
    for k in range(3):
        world.add(k, {"a": np.full(SHAPE, k + 1, np.float32)})
    engine = Engine(world, device=gpu)
    latest: dict = {}
    try:
        engine.register_product(_program("t15k/double", DOUBLE_YAML, DOUBLE_WGSL), key="double", fields={"a": "a", "m": "m"}, policy=ReadbackPolicy.NONE)
        engine.field_buffer("m", kernel_writes=True)
        engine.register_product(
            _program("t15k/sum_m", SUM_YAML.replace("heat", "m"), SUM_WGSL.replace("heat", "m")),
            key="sum",
            fields={"m": "m"},
            policy=ReadbackPolicy.SUMMARY,
            params={},
            apply=lambda r: latest.update(zip(r.keys, r.values.tolist())),
        )

        def model():
            return {k: float((world.read(k, "a") * 2 + 1).sum()) for k in world.keys()}

        _drain(engine)
        assert latest == model()
        world.write(0, "a", np.full(SHAPE, 10, np.float32))
        _drain(engine)
        assert latest == model()
        world.set_tile(2, "a", (0, 0), np.float32(7))
        engine.frame()
        world.write(1, "a", np.full(SHAPE, -3, np.float32))
        _drain(engine)
        assert latest == model()
    finally:
        engine.close()


def _drain_chain(engine):
    _drain(engine)
    for _ in range(3):
        engine.frame()
        time.sleep(0.003)


def _slot_sum(engine, world, name):
    words = np.frombuffer(abi.read(engine.backend.field_buffer(name)), np.float32).reshape(world.max_chunks, -1)
    return float(words[world.slot(0), :16].sum())


def test_a_chain_writer_whose_fallback_read_a_mirror_is_recomputed_with_it_after_recovery(gpu):
    # Review helper 158: W2 (m2 = m1 + b, m1 written by W1's kernel) was served by its CPU
    # fallback from the world's m1 bytes during a device error; after recover_gpu its kernel ran
    # over the chunk "for the mirror alone", and its result stayed the fallback's for good.
    from chain_kernels import EVEN, programs

    world = World(SHAPE, {f: np.float32 for f in ("a", "b", "m1", "m2")}, max_chunks=2)
    world.add(0, {"a": np.full(SHAPE, 1.0, np.float32), "b": np.full(SHAPE, 2.0, np.float32)})
    engine = Engine(world, device=gpu)
    try:
        engine.field_buffer("m1", kernel_writes=True)
        engine.field_buffer("m2", kernel_writes=True)
        progs, got = programs(), {}
        engine.register_product(progs["W1"], key="W1", fields={"a": "a", "m": "m1"}, policy=ReadbackPolicy.NONE, params={"k": 2.0})
        engine.register_product(
            progs["W2"],
            key="W2",
            fields={"src": "m1", "b": "b", "m": "m2"},
            policy=ReadbackPolicy.SUMMARY,
            apply=lambda r: got.update({k: float(v) for k, v in zip(r.keys, r.values)}),
            cpu_fallback=lambda w, work: np.array([(w.read(k, "m1") + w.read(k, "b")).sum() for k in work.keys], np.float32),
        )
        _drain_chain(engine)
        world.write(0, "a", np.full(SHAPE, 4.0, np.float32))
        engine.frame()  # W2's readback in flight
        engine.backend.notify_device_error("a device error, for the test")
        engine.frame()
        assert engine.recover_gpu()
        _drain_chain(engine)
        want = float((np.where(EVEN, 2 * 4.0 + 1, 0.0) + 2.0).sum())
        assert _slot_sum(engine, world, "m2") == want
        assert got[0] == want
    finally:
        engine.close()


def test_a_reader_of_a_mirror_without_a_writer_follows_it_from_the_worlds_bytes_after_recovery(gpu):
    # Review helper 158: after recover_gpu a kernel-written mirror starts again from the world's
    # bytes, but a reader of it was owed nothing when no writer was registered: it kept the
    # value computed over the lost device's mirror, idle, for good.
    from chain_kernels import programs

    world = World(SHAPE, {f: np.float32 for f in ("b", "m1", "m2")}, max_chunks=2)
    world.add(0, {"b": np.full(SHAPE, 2.0, np.float32), "m1": np.full(SHAPE, 1.0, np.float32), "m2": np.full(SHAPE, 7.0, np.float32)})
    engine = Engine(world, device=gpu)
    try:
        engine.field_buffer("m2", kernel_writes=True)
        progs, got = programs(), {}
        writer = engine.register_product(progs["W2"], key="W2", fields={"src": "m1", "b": "b", "m": "m2"}, policy=ReadbackPolicy.NONE)
        engine.register_product(
            progs["SUM"], key="R2", fields={"src": "m2"}, policy=ReadbackPolicy.SUMMARY, params={"c": 1.0}, apply=lambda r: got.update(zip(r.keys, r.values.tolist()))
        )
        _drain_chain(engine)
        assert got[0] == _slot_sum(engine, world, "m2") == 48.0  # (1 + 2) * 16, the writer's
        engine.unregister_product(writer)
        _drain_chain(engine)
        engine.backend.notify_device_error("a device error, for the test")
        engine.frame()
        assert engine.recover_gpu()
        _drain_chain(engine)
        assert _slot_sum(engine, world, "m2") == float(world.read(0, "m2").sum()) == 112.0
        assert got[0] == 112.0
    finally:
        engine.close()


@pytest.mark.parametrize("case", ["writer_set_params"])
def test_a_result_over_a_mirror_is_never_applied_after_what_made_the_mirror_changed(gpu, case):
    # Review helper 158: results over W1's mirror in flight when set_params(W1) changed k landed
    # (R1 24 where the world said 32). Every applied value equals the model of the world it
    # lands in. (A change to a field only W1 reads, with a result of W2 or of a reader under
    # revalidate="fields" in flight, may still land once, corrected the frame after: counting
    # the fields behind a mirror starves readers of a simulation fed every frame, the demo's.)
    from chain_kernels import EVEN, programs

    from engine_plugin.engine import EngineConfig

    world = World(SHAPE, {f: np.float32 for f in ("a", "b", "m1", "m2")}, max_chunks=2)
    world.add(0, {"a": np.full(SHAPE, 1.0, np.float32), "b": np.full(SHAPE, 2.0, np.float32)})
    engine = Engine(world, device=gpu, config=EngineConfig(revalidate="fields" if case == "reader_fields_rule" else "chunk"))
    progs, k, log = programs(), {"k": 2.0}, []
    try:
        engine.field_buffer("m1", kernel_writes=True)
        engine.field_buffer("m2", kernel_writes=True)
        w1 = engine.register_product(progs["W1"], key="W1", fields={"a": "a", "m": "m1"}, policy=ReadbackPolicy.NONE, params=dict(k))
        engine.register_product(
            progs["W2"], key="W2", fields={"src": "m1", "b": "b", "m": "m2"}, policy=ReadbackPolicy.SUMMARY, apply=lambda r: log.append(("W2", float(r.values[0])))
        )
        reader = engine.register_product(
            progs["SUM"], key="R1", fields={"src": "m1"}, policy=ReadbackPolicy.SUMMARY, params={"c": 1.0}, apply=lambda r: log.append(("R1", float(r.values[0])))
        )

        def model():
            a, b = world.read(0, "a").reshape(-1), world.read(0, "b").reshape(-1)
            m1 = np.where(EVEN, k["k"] * a + 1, world.read(0, "m1").reshape(-1))
            return {"W2": float((m1 + b).sum()), "R1": float(m1.sum())}

        def frames(count):
            for _ in range(count):
                seen = len(log)
                engine.frame()
                time.sleep(0.01)
                for name, value in log[seen:]:
                    assert value == model()[name], (case, name, value, model())

        frames(15)
        if case == "writer_upstream_field":
            world.write(0, "b", np.full(SHAPE, 3.0, np.float32))
            engine.frame()  # W2 alone dispatched, its readback in flight
            world.write(0, "a", np.full(SHAPE, 5.0, np.float32))  # what m1 is made of changes
        elif case == "reader_fields_rule":
            engine.invalidate(reader)
            engine.frame()  # R1's readback in flight
            world.write(0, "a", np.full(SHAPE, 5.0, np.float32))
        else:
            world.write(0, "m1", np.full(SHAPE, 0.0, np.float32))
            engine.frame()  # everything dispatched, readbacks in flight
            k["k"] = 3.0
            engine.set_params(w1, dict(k))
        frames(15)
        assert log[-2:] and {name: value for name, value in log} == model()  # and it ends current
    finally:
        engine.close()
