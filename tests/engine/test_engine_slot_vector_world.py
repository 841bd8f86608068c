"""The uploader's slot-vector path (World's ``take_dirty_slots`` / ``slot_versions`` /
``keys_at``) against its per-chunk path (a world without that API): the same uploads,
results and staleness."""

from __future__ import annotations

import numpy as np
import pytest
from engine_support import Applied, cpu_summary, held_deliveries, make_world, run_until_idle, same_bits, summary_product

from engine_plugin.engine import EngineConfig
from engine_plugin.errors import StaleSpanError
from engine_plugin.gpu import take_dirty_uploads
from engine_plugin.world import World


class PerChunkWorld(World):
    """A World seen without its slot-vector API, so the uploader takes the per-chunk path."""

    take_dirty_slots = None  # type: ignore[assignment]


class HookedQueue:
    """A backend's queue whose ``write_buffer`` calls ``hook(queue, *args)`` instead."""

    def __init__(self, queue, hook):
        self.queue, self.hook = queue, hook

    def write_buffer(self, *args):
        self.hook(self.queue, *args)

    def __getattr__(self, name):
        return getattr(self.queue, name)


def assert_mirrors_equal_world(engine, world: World, names=None) -> None:
    from engine_plugin.runtime.output import read_words

    for spec in world.fields:
        if names is not None and spec.name not in names:
            continue
        got = np.frombuffer(read_words(engine.field_buffer(spec.name)), spec.dtype).reshape(world.mirror(spec.name).shape)
        np.testing.assert_array_equal(got, world.mirror(spec.name))


def vector_world(n: int = 64) -> World:
    return make_world(n=n)


def per_chunk_world(n: int = 64) -> World:
    return make_world(n=n, cls=PerChunkWorld)


def test_the_vector_path_takes_the_same_spans_as_the_per_chunk_path():
    vec, plain = vector_world(16), per_chunk_world(16)
    for w in (vec, plain):
        w.take_dirty()
        for k in (3, 4, 9, 15):
            w.write(k, "height", 1.0)
        w.evict(6)
    got = take_dirty_uploads(vec, "height", max_gap=1)
    want = take_dirty_uploads(plain, "height", max_gap=1)
    assert got[0] == want[0] == [3, 4, 9, 15]
    assert [(s.first_slot, s.slot_count, s.chunk_keys, s.versions) for s in got[1]] == \
           [(s.first_slot, s.slot_count, s.chunk_keys, s.versions) for s in want[1]]
    assert take_dirty_uploads(vec, "height")[0] == []  # taken


def test_a_vector_span_still_refuses_stale_bytes():
    world = vector_world(8)
    world.take_dirty()
    world.write(2, "height", 1.0)
    (_, (span,)) = take_dirty_uploads(world, "height")
    world.write(2, "height", 2.0)
    with pytest.raises(StaleSpanError, match="chunk 2"):
        span.data()


def test_engine_results_and_staleness_are_the_same_over_a_slot_vector_world(make_engine):
    world = vector_world()
    engine = make_engine(world)
    applied = Applied(world)
    summary_product(engine, "height", applied)
    with held_deliveries(engine):
        engine.frame()
        world.write(5, "height", 4.0)
        world.evict(9)
    totals = run_until_idle(engine)
    assert totals.chunks_stale == 2 and 9 not in applied.latest and not applied.not_current
    for k in world.keys():
        assert same_bits(applied.latest[k], cpu_summary(world, "height", k))


def test_a_span_going_stale_mid_upload_raises_and_the_frame_counts_the_spans_sent(gpu):
    from engine_plugin.engine import Engine, EngineConfig, FrameStats

    world = World((32, 32), {"height": np.float32}, max_chunks=16)
    for k in range(16):
        world.add(k)
    engine = Engine(world, device=gpu, config=EngineConfig(upload_gap_bytes=0))
    try:
        engine.field_buffer("height")
        engine.frame()
        world.write(0, "height", 1.0)
        world.write(10, "height", 2.0)  # two spans: slots 0 and 10
        backend = engine.backend

        class MutatingQueue:  # another thread edits chunk 10 once the first span is written
            def __init__(self, queue):
                self.queue = queue

            def write_buffer(self, *args):
                self.queue.write_buffer(*args)
                world.write(10, "height", 3.0)

            def __getattr__(self, name):
                return getattr(self.queue, name)

        queue, backend.queue = backend.queue, MutatingQueue(backend.queue)
        before = backend.stats["uploads"]
        st = FrameStats()
        try:
            with pytest.raises(StaleSpanError, match="chunk 10"):
                engine.upload(st)
        finally:
            backend.queue = queue
        assert backend.stats["uploads"] - before == 1
        assert (st.uploads, st.upload_bytes) == (1, world.chunk_nbytes("height"))
    finally:
        engine.close()


def test_a_stale_span_loses_nothing_the_other_fields_and_later_spans_still_reach_the_gpu(gpu):
    """A span goes stale mid-upload (another thread edits its chunk): the frame raises, but
    the field's unsent chunks are dirty again and the other field's changes are written; the
    next upload makes both mirrors equal to the world (review: the changes after a stale span
    were taken and never sent)."""
    from engine_plugin.engine import Engine, EngineConfig

    world = World((4, 4), {"height": np.float32, "moisture": np.float32}, max_chunks=16)
    for k in range(16):
        world.add(k)
    engine = Engine(world, device=gpu, config=EngineConfig(upload_gap_bytes=0))
    try:
        for name in ("height", "moisture"):
            engine.field_buffer(name)
        engine.frame()
        for k in (0, 5, 10):  # three height spans: slots 0, 5 and 10
            world.write(k, "height", float(k + 1))
        world.write(7, "moisture", 7.5)
        backend = engine.backend
        edits = []

        def write_then_edit(queue, *args):  # another thread edits chunk 5 once the first span is written
            queue.write_buffer(*args)
            if not edits:
                edits.append(world.write(5, "height", 50.0))

        queue, backend.queue = backend.queue, HookedQueue(backend.queue, write_then_edit)
        try:
            with pytest.raises(StaleSpanError, match="chunk 5"):
                engine.upload()
        finally:
            backend.queue = queue
        assert world.is_dirty(5, "height") and world.is_dirty(10, "height")  # unsent: owed to the GPU again
        assert not world.is_dirty(0, "height") and not world.is_dirty(7, "moisture")  # sent
        engine.upload()
        assert_mirrors_equal_world(engine, world)
    finally:
        engine.close()


def test_an_error_in_the_write_step_loses_no_field_s_changes(gpu):
    """Any error raised between a field's take and its write (here the first write raises
    MemoryError) leaves every taken and unsent change dirty: the next upload makes every mirror
    equal to the world (review: the other fields' changes were taken and never sent)."""
    from engine_plugin.engine import Engine

    world = World((4, 4), {"height": np.float32, "moisture": np.float32}, max_chunks=8)
    for k in range(8):
        world.add(k)
    engine = Engine(world, device=gpu)
    try:
        for name in ("height", "moisture"):
            engine.field_buffer(name)
        engine.frame()
        world.write(3, "height", 1.0)
        world.write(3, "moisture", 2.0)
        backend = engine.backend

        def fail(queue, *args):
            raise MemoryError("no staging memory")

        queue, backend.queue = backend.queue, HookedQueue(backend.queue, fail)
        try:
            with pytest.raises(MemoryError):
                engine.upload()
        finally:
            backend.queue = queue
        assert world.is_dirty(3, "height") and world.is_dirty(3, "moisture")
        engine.upload()
        assert_mirrors_equal_world(engine, world)
    finally:
        engine.close()



class TakeHookWorld(World):
    """A World that runs ``hook(names taken so far)`` at the start of each field's take (as
    another thread editing the world between two fields' takes would)."""

    hook = None

    def take_dirty_slots(self, name):
        self.taken = [*getattr(self, "taken", []), name]
        if self.hook is not None:
            self.hook(self.taken)
        return super().take_dirty_slots(name)


def _summaries_match_the_world(engine, world, applied_by_field):
    run_until_idle(engine)
    assert_mirrors_equal_world(engine, world, applied_by_field)
    for name, applied in applied_by_field.items():
        for k in world.keys():
            assert same_bits(applied.latest[k], cpu_summary(world, name, k)), (name, k)


@pytest.mark.parametrize("revalidate", ["chunk", "fields"])
def test_a_chunk_edited_by_another_thread_mid_upload_is_never_applied_from_its_old_bytes(make_engine, revalidate):
    """Review finding: a chunk owed but in no upload span (all are owed after ``invalidate``)
    that another thread edits while the upload writes: the frame's work read its new version,
    the GPU computed it from the mirror's old bytes, and the result was applied as current,
    never to be recomputed (the version sent was the current one). It is now tagged with a
    version no chunk has: dropped as stale when it lands, and recomputed."""
    world = make_world(n=16)
    engine = make_engine(world, config=EngineConfig(upload_gap_bytes=0, revalidate=revalidate))
    applied = Applied(world)
    handle = summary_product(engine, "height", applied)
    run_until_idle(engine)
    engine.invalidate(handle)
    world.write(0, "height", 1.0)  # the frame's one span (slot 0)
    edits = []

    def write_then_edit(queue, *args):
        queue.write_buffer(*args)
        if not edits:
            edits.append(world.write(9, "height", 123.0))

    backend = engine.backend
    queue, backend.queue = backend.queue, HookedQueue(backend.queue, write_then_edit)
    try:
        st = engine.frame()
    finally:
        backend.queue = queue
    assert edits and st.dispatches == 1
    _summaries_match_the_world(engine, world, {"height": applied})
    assert not applied.not_current


@pytest.mark.parametrize("revalidate", ["chunk", "fields"])
def test_a_chunk_edited_between_two_fields_takes_is_never_applied_from_its_old_bytes(make_engine, revalidate):
    """The same between two fields' takes: the second field's take answers the chunk's new
    version, which the first field's mirror does not hold (its change is taken next frame)."""
    world = make_world(n=16, cls=TakeHookWorld)
    engine = make_engine(world, config=EngineConfig(revalidate=revalidate))
    by_field = {name: Applied(world) for name in ("height", "moisture")}
    handles = [summary_product(engine, name, applied, key=name) for name, applied in by_field.items()]
    run_until_idle(engine)
    for h in handles:
        engine.invalidate(h)
    edits = []

    def edit_both_fields(taken):  # the first field's take is over, the second's to come
        if len(taken) == 2 and not edits:
            edits.append(world.write(9, taken[0], 123.0))  # its mirror keeps the old bytes this frame
            edits.append(world.set_tile(9, taken[1], (0, 0), 0.5))  # taken (and sent) now

    world.taken, world.hook = [], edit_both_fields
    try:
        engine.frame()
    finally:
        world.hook = None
    assert edits
    _summaries_match_the_world(engine, world, by_field)
    assert not any(applied.not_current for applied in by_field.values())
