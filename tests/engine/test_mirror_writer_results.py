"""A kernel that writes its own mirror changes GPU state each time it runs: the engine runs it
once per change, whatever happens to its result, and its readers end with what the mirror
holds (review helper 150)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from engine_support import SUM_WGSL, SUM_YAML, program_of

from engine_plugin import abi
from engine_plugin.engine import Engine
from engine_plugin.gpu import ReadbackPolicy
from engine_plugin.world import World

pytestmark = pytest.mark.gpu

INC_YAML = """bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: g, kind: buffer, access: read_write, element: f32 }
  - { name: out, kind: buffer, access: read_write, element: f32, count: "n" }
params:
  - { name: tile_count, type: u32 }
"""
INC_WGSL = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * params.tile_count;
    var s = 0.0;
    for (var t = 0u; t < params.tile_count; t = t + 1u) { let v = g_get(base + t) + 1.0; g_set(base + t, v); s = s + v; }
    out_set(i, s);
}
"""
W_YAML = """bindings:
  - { name: tiles, kind: buffer, access: read, element: u32 }
  - { name: f, kind: buffer, access: read_write, element: f32 }
"""
W_WGSL = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let t = tiles_get(i);
    f_set(t, f_get(t) + 1.0);
}
"""
def _drain(engine: Engine) -> None:
    deadline = time.monotonic() + 60
    while True:
        engine.frame()
        if engine.idle and engine.backend.inflight_readbacks == 0:
            engine.frame()
            return
        assert time.monotonic() < deadline, "never idle"
        time.sleep(0.002)


def _mirror(engine: Engine, name: str, chunks: int) -> np.ndarray:
    return np.frombuffer(abi.read(engine.backend.field_buffer(name)), np.float32).reshape(chunks, -1)[:, :16]


def _incrementer(fields: dict) -> tuple[World, Engine, list]:
    world = World((4, 4), fields, max_chunks=2)
    world.add(0)
    world.add(1)
    engine = Engine(world)
    engine.field_buffer("g", kernel_writes=True)
    applied: list = []
    engine.register_product(
        program_of("t150/inc", INC_YAML, INC_WGSL), key="W", fields={"g": "g"}, policy=ReadbackPolicy.SUMMARY,
        apply=lambda r: applied.append((r.keys, r.values.tolist(), r.source)),
        cpu_fallback=lambda w, work: np.array([w.read(k, "g").sum() for k in work.keys], np.float32),
    )
    _drain(engine)
    return world, engine, applied


def test_a_writers_result_discarded_for_another_fields_change_does_not_run_it_again():
    # Its readback in flight, the game wrote a field it does not read: under revalidate="chunk"
    # the result was discarded and the chunk owed again, and its kernel added 1 a second time.
    world, engine, applied = _incrementer({"g": np.float32, "h": np.float32})
    try:
        world.write(1, "g", np.full((4, 4), 3.0, np.float32))
        engine.frame()  # g of chunk 1 sent, the kernel runs over it, its readback requested
        world.write(1, "h", np.full((4, 4), 5.0, np.float32))
        _drain(engine)
        assert set(_mirror(engine, "g", 2)[world.slot(1)].tolist()) == {4.0}
        assert applied[-1][:2] == ((1,), [64.0])
        # A change to the field it reads still discards and recomputes from the new bytes.
        world.write(1, "g", np.full((4, 4), 7.0, np.float32))
        engine.frame()
        world.write(1, "g", np.full((4, 4), 9.0, np.float32))
        _drain(engine)
        assert set(_mirror(engine, "g", 2)[world.slot(1)].tolist()) == {10.0} and applied[-1][:2] == ((1,), [160.0])
    finally:
        engine.close()


def test_a_writers_failed_readback_map_is_served_by_its_fallback_not_by_running_it_again():
    world, engine, applied = _incrementer({"g": np.float32})
    try:
        world.write(1, "g", np.full((4, 4), 3.0, np.float32))
        waiter = engine.backend._ring.waiter  # lavapipe cannot fail a map on purpose: the hook the engine's tests use
        left = [1]

        class FailOne:
            def __init__(self, inner):
                self.inner = inner

            def put(self, item):
                if left[0]:
                    left[0] -= 1
                    item = (item[0], RuntimeError("injected map failure"))
                self.inner.put(item)

            def get_nowait(self):
                return self.inner.get_nowait()

        waiter.done = FailOne(waiter.done)
        _drain(engine)
        assert left == [0], "no map failed"
        assert set(_mirror(engine, "g", 2)[world.slot(1)].tolist()) == {4.0}  # the kernel ran once
        assert engine.totals.readbacks_failed == 1 and applied[-1][0] == (1,) and applied[-1][2] == "cpu"
    finally:
        engine.close()


@pytest.mark.parametrize("how", ["refused upload", "device error"])
def test_a_reader_served_from_the_world_while_its_writer_was_off_the_gpu_ends_with_the_mirror(how):
    world = World((4, 4), {"f": np.float32}, max_chunks=4)
    for k in range(4):
        world.add(k, {"f": np.full((4, 4), 10.0 * k, np.float32)})
    engine = Engine(world)
    try:
        engine.field_buffer("f", kernel_writes=True)
        engine.register_product(program_of("t150/w", W_YAML, W_WGSL), key="W", fields={"f": "f"}, policy=ReadbackPolicy.NONE, cpu_fallback=lambda w, work: None)
        applied: dict = {}
        engine.register_product(
            program_of("t150/r", SUM_YAML, SUM_WGSL), key="R", fields={"src": "f"}, policy=ReadbackPolicy.SUMMARY,
            apply=lambda r: applied.update(zip(r.keys, r.values.tolist())),
            cpu_fallback=lambda w, work: np.array([w.read(k, "f").sum() for k in work.keys], np.float32),
        )
        _drain(engine)
        world.write(2, "f", np.full((4, 4), 5.0, np.float32))
        if how == "device error":
            engine.backend.notify_device_error("simulated")
            engine.frame()
            assert engine.recover_gpu()
        else:
            real, refused = engine.backend.upload_spans, [0]

            def refuse_once(descs):
                if not refused[0]:
                    refused[0] = 1
                    return 0  # nothing written: the upload is refused
                return real(descs)

            engine.backend.upload_spans = refuse_once
        _drain(engine)
        mirror = _mirror(engine, "f", 4)
        assert applied == {k: float(mirror[world.slot(k)].sum()) for k in world.keys()}
        assert applied[2] == 96.0  # the world's 5.0, plus its writer's 1, over 16 tiles
    finally:
        engine.close()
