"""Another thread changing the world while a frame runs (outside the single-threaded contract,
which the engine still must not turn into a wrong number or a chunk left wrong for good):
hooks in the world's own calls stand for that thread at a chosen moment. Each case is a review
finding; the check is the same: once edits stop, every chunk's latest applied result is the
one its current content gives, and no result was applied from bytes other than its version's."""

from __future__ import annotations

import numpy as np
import pytest
from engine_support import Applied, cpu_summary, held_deliveries, make_world, run_until_idle, same_bits, summary_product, wait_for_gpu

from engine_plugin.engine import Engine, EngineConfig, fallbacks, kernel_program
from engine_plugin.gpu import NoGpuBackend, ReadbackPolicy
from engine_plugin.world import World

MODES = ["chunk", "fields"]


class HookWorld(World):
    """A World whose takes, version reads and membership tests can run a hook first."""

    on_take = on_versions = on_contains = None
    race_in_take = None  # runs inside take_dirty_slots, between reading and clearing the flags

    def take_dirty_slots(self, name):
        if self.on_take is not None:
            self.on_take(name)
        if self.race_in_take is None:
            return super().take_dirty_slots(name)
        mask = self._dirty_mask[name]
        slots = mask.nonzero()[0]
        race, self.race_in_take = self.race_in_take, None
        race(name)
        mask.fill(False)
        return slots

    def slot_versions(self, slots):
        out = super().slot_versions(slots)
        if self.on_versions is not None:
            self.on_versions()
        return out

    def __contains__(self, key):
        if self.on_contains is not None:
            self.on_contains()
        return super().__contains__(key)


def hook_world(n: int = 16) -> HookWorld:
    return make_world(n=n, cls=HookWorld)  # type: ignore[return-value]


def assert_latest_match_world(world, applied: Applied, name: str) -> None:
    wrong = [k for k in world.keys() if not same_bits(applied.latest[k], cpu_summary(world, name, k))]
    assert wrong == [], f"chunks whose latest {name} result is not their content's: {wrong}"


class Checked(Applied):
    """Records, at apply time, results whose numbers are not the world's for ``name``."""

    def __init__(self, world, name):
        super().__init__(world)
        self.name, self.wrong = name, []

    def __call__(self, result):
        for key, version, value in zip(result.keys, result.versions, result.values):
            if self.world.is_current(key, version) and not same_bits(value, cpu_summary(self.world, self.name, key)):
                self.wrong.append((key, version))
        super().__call__(result)


@pytest.mark.parametrize("mode", MODES)
def test_a_change_landing_inside_a_take_still_reaches_the_mirror(gpu, mode):
    """Review: a write landing between a take's read and clear of the dirty flags lost its
    flag: the chunk never reached the mirror, was never owed again (the old result stayed, the
    engine idle), and after ``invalidate`` was computed from the old bytes and applied with its
    current version. Chunks changed during the takes are now marked dirty again."""
    world = hook_world()
    engine = Engine(world, device=gpu, config=EngineConfig(revalidate=mode, upload_gap_bytes=0))
    try:
        applied = Checked(world, "height")
        handle = summary_product(engine, "height", applied)
        run_until_idle(engine)
        world.write(0, "height", 1.0)
        world.race_in_take = lambda name: world.write(9, "height", 123.0)
        engine.frame()
        run_until_idle(engine)
        assert_latest_match_world(world, applied, "height")
        engine.invalidate(handle)
        run_until_idle(engine)
        assert_latest_match_world(world, applied, "height")
        assert applied.wrong == [] and not applied.not_current
    finally:
        engine.close()


def test_fields_revalidation_takes_a_later_fields_change_at_its_own_take(gpu):
    """Review: with revalidate="fields", a field's change was recorded at the version an
    earlier field's take had learned for the chunk (older than the change): a result in flight,
    computed from the old bytes of the later field, passed revalidation and was applied."""
    world = hook_world()
    engine = Engine(world, device=gpu, config=EngineConfig(revalidate="fields"))
    try:
        applied = Checked(world, "moisture")
        # height (read by a CPU-only product: no mirror, no spans) is taken before moisture
        engine.register_product(None, key="cpu-height", fields=["height"], policy=ReadbackPolicy.SUMMARY,
                                cpu_fallback=lambda w, work: np.zeros((len(work.keys), 4), np.float32), apply=lambda r: None)
        handle = summary_product(engine, "moisture", applied)
        run_until_idle(engine)
        engine.invalidate(handle)
        with held_deliveries(engine):
            engine.frame()  # chunk 9 computed from the current moisture: in flight
        world.mark_dirty(9, "height")  # taken next frame at chunk 9's current version
        wait_for_gpu(engine)
        edits = []

        def between_the_takes(name):
            if name == "moisture" and not edits:
                edits.append(world.write(9, "moisture", 123.0))

        world.on_take = between_the_takes
        engine.frame()
        world.on_take = None
        assert edits
        run_until_idle(engine)
        assert applied.wrong == [] and not applied.not_current
        assert_latest_match_world(world, applied, "moisture")
    finally:
        engine.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_change_while_the_cpu_fallback_builds_its_work_leaves_no_chunk_wrong(mode):
    """Review: the fallback's work list tagged every chunk looked up after another thread's
    edit with a version no chunk has (the GPU frame's rule, wrong for work computed from the
    world itself): their results were dropped and, the fallback re-owing nothing, left wrong."""
    world = hook_world()
    engine = Engine(world, backend=NoGpuBackend(), config=EngineConfig(revalidate=mode))
    applied = Applied(world)
    summary_product(engine, "height", applied)
    run_until_idle(engine)
    for k in world.keys():
        world.write(k, "height", float(k) + 0.5)
    countdown = [3]

    def edit_chunk_0():
        countdown[0] -= 1
        if countdown[0] == 0:
            world.write(0, "height", 7.0)

    world.on_contains = edit_chunk_0
    engine.frame()
    world.on_contains = None
    assert countdown[0] <= 0
    run_until_idle(engine)
    assert engine.idle
    assert_latest_match_world(world, applied, "height")


@pytest.mark.parametrize("mode", MODES)
def test_a_chunk_changed_while_its_cpu_fallback_runs_is_computed_again(mode):
    """Review (also before): another thread edits a field the product does not read while its
    ``cpu_fallback`` runs: the result is dropped as stale, and the fallback now owes it again
    (counted in ``chunks_stale``)."""
    world = make_world(n=16)
    engine = Engine(world, backend=NoGpuBackend(), config=EngineConfig(revalidate=mode))
    applied = Applied(world)
    armed = []

    def fallback(w, work):
        if armed:
            armed.clear()
            world.write(3, "moisture", 0.25)
            world.write(5, "height", 9.0)
        return fallbacks.summary(w, work)

    engine.register_product(kernel_program("summary"), key="s", spec={"T": "f32"}, fields={"src": "height"},
                            policy=ReadbackPolicy.SUMMARY, apply=applied, cpu_fallback=fallback)
    run_until_idle(engine)
    for k in world.keys():
        world.write(k, "height", float(k) + 0.5)
    armed.append(1)
    st = engine.frame()
    assert not armed and st.chunks_stale >= 1
    run_until_idle(engine)
    assert engine.idle
    assert_latest_match_world(world, applied, "height")


def test_a_chunk_evicted_after_a_take_does_not_break_fields_revalidation():
    """Review: recording a take's change asked the world for the version of a chunk another
    thread had just evicted (UnknownChunkError out of frame(), that field's changes never
    owed)."""
    world = hook_world()
    engine = Engine(world, backend=NoGpuBackend(), config=EngineConfig(revalidate="fields"))
    by_field = {name: Applied(world) for name in ("height", "moisture")}
    for name, applied in by_field.items():
        summary_product(engine, name, applied)
    run_until_idle(engine)
    world.write(9, "height", 1.0)
    world.write(9, "moisture", 1.0)
    world.write(4, "moisture", 2.0)
    taken = []

    def on_take(name):
        taken.append(name)
        if len(taken) == 1:
            world.write(0, name, 5.0)  # the clock moves before the first take

    def on_versions():
        if len(taken) == 2 and 9 in world:
            world.evict(9)  # right after the second take read its slots

    world.on_take, world.on_versions = on_take, on_versions
    engine.frame()
    world.on_take = world.on_versions = None
    run_until_idle(engine)
    for name, applied in by_field.items():
        assert_latest_match_world(world, applied, name)


def test_marking_changed_chunks_dirty_again_leaves_a_field_a_kernel_writes_alone(gpu):
    """Review of the re-marking: it marked every field of a chunk changed during the takes
    dirty, also a field whose mirror a kernel writes (``kernel_writes=True``, as the demo's
    heat): the next upload overwrote the GPU's state with the world's old bytes."""
    from engine_plugin.runtime.output import read_words

    world = HookWorld((8, 8), {"heat": np.float32, "source": np.float32}, max_chunks=4)
    for k in range(4):
        world.add(k)
    engine = Engine(world, device=gpu)
    try:
        heat = engine.field_buffer("heat", kernel_writes=True)
        engine.field_buffer("source")
        engine.frame()
        engine.backend.queue.write_buffer(heat, 0, np.full(4 * 64, 7.0, np.float32).tobytes())  # "the kernel's" heat
        edits = []

        def other_thread(name):
            if not edits:
                edits.append(world.write(0, "source", 1.0))

        world.on_take = other_thread
        engine.frame()
        world.on_take = None
        engine.frame()
        assert edits and not world.is_dirty(0, "source")
        got = np.frombuffer(read_words(heat), np.float32).reshape(4, 64)
        assert (got == 7.0).all(), got[:, 0]
        source = np.frombuffer(read_words(engine.field_buffer("source")), np.float32).reshape(4, 64)
        np.testing.assert_array_equal(source, world.mirror("source").reshape(4, 64))
    finally:
        engine.close()


class PausingWorld(World):
    """A World whose next take runs ``pause`` first (inside the frame, holding its lock)."""

    pause = None

    def take_dirty_slots(self, name):
        pause, self.pause = self.pause, None
        if pause is not None:
            pause()
        return super().take_dirty_slots(name)


@pytest.mark.parametrize("change", ["add", "evict", "write", "edit"])
@pytest.mark.parametrize("gpu_side", [False, True], ids=["cpu", "gpu"])
def test_a_change_on_another_thread_lands_between_frames_never_inside_one(change, gpu_side):
    # World.add and evict are several steps: a frame that saw half of one could apply a wrong
    # result. The world's lock, held by every mutation and by frame(), keeps the other
    # thread's change out until the frame ends; without it the change lands during the pause.
    import threading

    world = make_world(n=8, max_chunks=16, cls=PausingWorld)
    engine = Engine(world, config=EngineConfig()) if gpu_side else Engine(world, backend=NoGpuBackend())
    applied = Applied(world)
    summary_product(engine, "height", applied)
    run_until_idle(engine)
    inside, finished = threading.Event(), threading.Event()

    def other_thread() -> None:
        inside.wait(10)
        if change == "add":
            world.add(100, {"height": np.full(world.chunk_shape, 5.0, np.float32)})
        elif change == "evict":
            world.evict(3)
        elif change == "write":
            world.write(3, "height", 7.0)
        else:
            with world.edit(3) as f:
                f["height"][...] = 9.0
        finished.set()

    landed_inside: list[bool] = []

    def pause() -> None:
        inside.set()
        landed_inside.append(finished.wait(0.3))

    world.pause = pause
    thread = threading.Thread(target=other_thread)
    thread.start()
    engine.frame()
    thread.join(10)
    assert landed_inside == [False]  # the frame ran whole without the other thread's change...
    assert finished.is_set()  # ...which landed once it ended
    run_until_idle(engine)
    assert not applied.not_current
    for k in world.keys():
        assert same_bits(applied.latest[k], cpu_summary(world, "height", k)), k
    engine.close()


@pytest.mark.parametrize("on", ["cpu", "gpu"])
def test_a_duck_typed_world_with_its_own_plain_lock_is_not_locked_by_the_engine(on):
    # Only World's own lock is the engine's to hold: a wrapper whose methods take their own
    # (non-reentrant) ``lock`` would wait for the frame holding it, for ever.
    import threading

    class SafeWorld:
        def __init__(self, inner: World) -> None:
            self._inner, self.lock = inner, threading.Lock()

        def __getattr__(self, name):
            return getattr(self._inner, name)

        def __contains__(self, key) -> bool:
            return key in self._inner

        def __len__(self) -> int:
            return len(self._inner)

        def take_dirty_slots(self, name):
            with self.lock:
                return self._inner.take_dirty_slots(name)

        def keys(self):
            with self.lock:
                return self._inner.keys()

    world = SafeWorld(make_world(n=4))
    # On the GPU too: a field's first upload (at registration) took any world's ``lock`` and
    # then called its keys(), which waits for that very lock (review helper 61).
    engine = Engine(world, backend=NoGpuBackend()) if on == "cpu" else Engine(world)
    applied = Applied(world)

    def register_and_run() -> None:
        summary_product(engine, "height", applied)
        run_until_idle(engine)

    worker = threading.Thread(target=register_and_run, daemon=True)
    worker.start()
    worker.join(30)
    assert not worker.is_alive()
    assert sorted(applied.keys_applied) == sorted(world.keys())
    engine.close()


def test_a_cpu_fallback_may_copy_the_world_on_another_thread_while_the_frame_holds_its_lock():
    # A fallback handing the world to a process pool has it pickled on the pool's own
    # thread while the frame (holding World.lock) waits for the answer: the copy must not
    # wait for the lock.
    import pickle
    import threading

    world = make_world(n=4)
    engine = Engine(world, backend=NoGpuBackend())

    def fallback(w, work):
        copied: list = []
        t = threading.Thread(target=lambda: copied.append(pickle.loads(pickle.dumps(w))), daemon=True)
        t.start()
        t.join(20)
        assert copied, "copying the world waited for the frame's lock"
        return fallbacks.summary(copied[0], work)

    applied = Applied(world)
    engine.register_product(
        kernel_program("summary"), key="summary:copied", spec={"T": "f32"}, fields={"src": "height"},
        policy=ReadbackPolicy.SUMMARY, apply=applied, cpu_fallback=fallback,
    )
    engine.frame()
    for k in world.keys():
        assert same_bits(applied.latest[k], cpu_summary(world, "height", k)), k


class EvictingWorld(World):
    """A World that evicts ``victim`` inside its n-th membership test after arming."""

    arm = None  # (membership tests to let pass first, key to evict)

    def __contains__(self, key):
        if self.arm is not None:
            skip, victim = self.arm
            self.arm = (skip - 1, victim) if skip else None
            if not skip:
                self.evict(victim)
        return super().__contains__(key)


@pytest.mark.parametrize("skip", range(10))
def test_a_chunk_evicted_while_the_fallback_work_is_listed_is_never_handed_to_the_fallback(skip):
    # The CPU fallback is asked about live chunks only (fallbacks.summary reads each chunk's
    # slot: an evicted one raised UnknownChunkError out of the frame). Found by the fuzzer.
    world = make_world(n=8, cls=EvictingWorld)
    engine = Engine(world, backend=NoGpuBackend())
    applied = Applied(world)
    summary_product(engine, "height", applied)
    run_until_idle(engine)
    for k in world.keys():
        world.write(k, "height", float(k + 1))
    world.arm = (skip, 5)
    run_until_idle(engine)
    for k in world.keys():
        assert same_bits(applied.latest[k], cpu_summary(world, "height", k)), k


def test_registering_a_product_while_another_thread_streams_chunks_never_raises():
    # The field's first upload listed the clean chunks and uploaded their spans without the
    # world's lock: a chunk added, evicted or written meanwhile made register_product raise
    # StaleSpanError and left the product unregistered (26 of 40 tries; review helper 60).
    import random
    import threading

    from engine_plugin.engine import Engine, fallbacks, kernel_program
    from engine_plugin.gpu import ReadbackPolicy
    from engine_plugin.world import World

    world = World((32, 32), {"height": np.float32}, max_chunks=256)
    for k in range(256):
        world.add(k)
    stop = threading.Event()

    def churn() -> None:
        rng = random.Random(1)
        while not stop.is_set():
            k = rng.randrange(256)
            with world.lock:
                if k not in world:
                    world.add(k)
                elif rng.random() < 0.5:
                    world.evict(k)
                else:
                    world.write(k, "height", rng.random())

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    try:
        for _ in range(12):
            engine = Engine(world)
            try:
                engine.register_product(
                    kernel_program("summary"), spec={"T": "f32"}, fields={"src": "height"}, policy=ReadbackPolicy.SUMMARY, cpu_fallback=fallbacks.summary
                )
                engine.frame()
            finally:
                engine.close()
    finally:
        stop.set()
        thread.join()
