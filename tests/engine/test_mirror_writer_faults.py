"""A fault on a mirror writer's way (its readback map fails, its mirror's upload is refused)
never lets a reader of that mirror apply a value read from a mirror state the writer's kernel
did not produce for the chunk's version: the reader waits a frame instead (review helper 236).
Every value applied is compared with numpy's, and the mirror read back from the GPU too."""

from __future__ import annotations

import time

import numpy as np
import pytest
from engine_support import SUM_WGSL, SUM_YAML, program_of

from engine_plugin import abi
from engine_plugin.engine import Engine, EngineConfig
from engine_plugin.gpu import ReadbackPolicy, WgpuBackendConfig
from engine_plugin.gpu.readback import settled_now
from engine_plugin.world import World

pytestmark = pytest.mark.gpu

W_YAML = """bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: a, kind: buffer, access: read, element: f32 }
  - { name: m, kind: buffer, access: read_write, element: f32 }
  - { name: out, kind: buffer, access: read_write, element: f32, count: "n" }
params:
  - { name: tile_count, type: u32 }
"""
W_WGSL = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * params.tile_count;
    var s = 0.0;
    for (var t = 0u; t < params.tile_count; t = t + 1u) { let v = 2.0 * a_get(base + t) + 1.0; m_set(base + t, v); s = s + v; }
    out_set(i, s);
}
"""
def _m_sum(world: World, key: int) -> float:
    """What W's kernel writes into m (2a + 1), summed over the chunk: numpy's value of W and R."""
    return float((2 * world.read(key, "a").astype(np.float32) + 1).sum(dtype=np.float32))


def _settle(engine: Engine) -> None:
    """Wait, without a frame, until every readback's map in flight has settled."""
    deadline = time.monotonic() + 60
    for req in engine.backend._ring.tracker.requests():
        while req.promise is not None and not settled_now(req.promise):
            assert time.monotonic() < deadline, "a map did not settle"
            time.sleep(0.001)


def _drain(engine: Engine) -> None:
    deadline = time.monotonic() + 60
    while True:
        _settle(engine)
        engine.frame()
        if engine.idle and engine.backend.inflight_readbacks == 0:
            return
        assert time.monotonic() < deadline, "never idle"


def _writer_and_reader(world: World, config: EngineConfig | None = None) -> tuple[Engine, list]:
    """W: m = 2a + 1 (its kernel writes the mirror m), its result sum(m); R: sum(m) read from
    the mirror. ``applied``: R's (key, version, value, numpy's value at the time, source)."""
    engine = Engine(world, config=config)
    engine.field_buffer("m", kernel_writes=True)
    applied: list = []
    fallback = lambda w, work: np.array([_m_sum(w, k) for k in work.keys], np.float32)  # noqa: E731
    engine.register_product(program_of("t236/w", W_YAML, W_WGSL), key="W", fields={"a": "a", "m": "m"}, policy=ReadbackPolicy.SUMMARY, cpu_fallback=fallback)
    engine.register_product(
        program_of("t236/r", SUM_YAML, SUM_WGSL), key="R", fields={"src": "m"}, policy=ReadbackPolicy.SUMMARY,
        apply=lambda r: applied.extend((k, v, float(x), _m_sum(world, k), r.source) for k, v, x in zip(r.keys, r.versions, r.values)),
        cpu_fallback=fallback,
    )
    _drain(engine)
    return engine, applied


def _check(engine: Engine, world: World, applied: list) -> None:
    wrong = [x for x in applied if x[2] != x[3]]
    assert not wrong, f"R applied values another mirror state gave (key, version, value, numpy's, source): {wrong}"
    last = {k: (v, x) for k, v, x, _, _ in applied}
    assert {k: last[k][1] for k in world.keys()} == {k: _m_sum(world, k) for k in world.keys()}
    assert all(world.is_current(k, last[k][0]) for k in world.keys())
    mirror = np.frombuffer(abi.read(engine.backend.field_buffer("m")), np.float32).reshape(world.max_chunks, -1)
    for k in world.keys():
        assert np.array_equal(mirror[world.slot(k)], (2 * world.read(k, "a").astype(np.float32) + 1).reshape(-1)), k


def test_a_writers_failed_map_over_a_chunk_changed_since_leaves_that_chunk_to_its_kernel():
    # Review helper 236 (A): W ran over chunk 0 at a = 1 and its map failed; a became 2 before
    # the failure was collected (one chunk a dispatch, so W's next dispatch went to chunk 1).
    # Its fallback served chunk 0's new version as if its kernel had written it: the mirror
    # kept a = 1's 3.0 and R applied 48 as current (80 is right), never corrected.
    world = World((4, 4), {"a": np.float32, "m": np.float32}, max_chunks=4)
    world.add(1)
    world.add(0)
    config = EngineConfig(backend=WgpuBackendConfig(max_chunks_per_dispatch=1), max_dispatches_per_product=1)
    engine, applied = _writer_and_reader(world, config)
    try:
        waiter = engine.backend._ring.waiter  # lavapipe cannot fail a map on purpose: the tests' hook
        failed: list = []

        class FailWritersMap:  # the next map of W's readbacks fails
            def __init__(self, inner):
                self.inner = inner

            def put(self, item):
                inflight = getattr(item[0].desc, "user", None)
                if not failed and getattr(getattr(inflight, "product", None), "key", None) == "W":
                    failed.append(tuple(inflight.work.keys))
                    item = (item[0], RuntimeError("injected map failure"))
                self.inner.put(item)

            def get_nowait(self):
                return self.inner.get_nowait()

        waiter.done = FailWritersMap(waiter.done)
        world.write(0, "a", 1.0)
        engine.backend.poll = lambda: 0  # nothing delivered this frame (a slow GPU)
        engine.frame()  # W runs over chunk 0 at a = 1, its readback in flight
        del engine.backend.poll
        world.write(0, "a", 2.0)  # before that readback is collected
        world.write(1, "a", 3.0)  # W's one dispatch next frame goes to chunk 1
        _settle(engine)
        engine.frame()  # W's map of chunk 0 fails here
        assert failed == [(0,)]
        _drain(engine)
        assert engine.totals.readbacks_failed == 1
        _check(engine, world, applied)
    finally:
        engine.close()


def test_a_kernel_written_mirror_rebuilt_from_the_world_holds_its_readers_until_its_writer_rewrites_it():
    # Review helper 236 (B): uploads refused two frames while a was edited and a chunk added:
    # m was taken off the GPU and re-uploaded from the world's bytes when R came back, while W
    # waited out its reattach delay. R applied 0.0 (the world's m) for chunk 3, which never
    # changed, corrected a frame later. Every value applied must be right.
    world = World((4, 4), {"a": np.float32, "m": np.float32}, max_chunks=4)
    world.add(0, {"a": np.full((4, 4), 1.0, np.float32)})
    world.add(3, {"a": np.full((4, 4), 3.0, np.float32)})
    engine, applied = _writer_and_reader(world)
    try:
        backend = engine.backend
        real_spans, real_upload = backend.upload_spans, backend.upload

        def refuse(desc):
            backend.last_refusal = "injected refusal"
            return False

        backend.upload_spans, backend.upload = (lambda descs: 0), refuse  # every upload refused
        world.write(0, "a", 4.0)  # a's upload refused: W leaves the GPU
        _settle(engine)
        engine.frame()
        world.add(1, {"a": np.full((4, 4), 2.0, np.float32)})  # m's refused too: R leaves; W's return refused (a delay)
        _settle(engine)
        engine.frame()
        assert engine.product(engine.products()[0]).gpu is None and engine.product(engine.products()[1]).gpu is None
        backend.upload_spans, backend.upload = real_spans, real_upload
        _drain(engine)  # R comes back first, m rebuilt from the world's bytes; W a frame later
        assert {k for k, _, _, _, source in applied if source == "gpu"} >= set(world.keys())
        _check(engine, world, applied)
    finally:
        engine.close()
