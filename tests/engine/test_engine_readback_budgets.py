"""Products a readback budget can never serve and products that gave up on the GPU (review
helpers 170, 172): each is served right or says why, never stuck in silence."""

from __future__ import annotations

import time

import numpy as np
import pytest
from chain_kernels import HDR_C as HDR
from chain_kernels import OUT, SUM_W, SUM_Y
from chain_kernels import prog as program

from engine_plugin import abi
from engine_plugin.engine import Engine, EngineConfig, kernel_program
from engine_plugin.gpu import WgpuBackendConfig
from engine_plugin.world import World

pytestmark = pytest.mark.gpu

WRITER_YAML = (
    "bindings:\n"
    + HDR
    + "  - { name: a, kind: buffer, access: read, element: f32 }\n  - { name: m, kind: buffer, access: read_write, element: f32 }\n"
    + OUT
    + "params:\n  - { name: tile_count, type: u32 }\n"
)


def writer_wgsl(bias: float) -> str:
    return f"""\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {{
    let i = zero_index(gid);
    if (i >= zero_n()) {{ return; }}
    let base = chunks_get(i) * params.tile_count;
    var s = 0.0;
    for (var t = 0u; t < params.tile_count; t = t + 1u) {{ let v = 2.0 * a_get(base + t) + {bias:.1f}; m_set(base + t, v); s = s + v; }}
    out_set(i, s);
}}
"""


def drain(engine: Engine, seconds: float = 20) -> bool:
    """Frames until the engine is idle with nothing in flight (False: not within ``seconds``)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        engine.frame()
        if engine.idle and getattr(engine.backend, "inflight_readbacks", 0) == 0:
            for _ in range(3):
                engine.frame()
            return True
        time.sleep(0.002)
    return False


def two_chunks(fields: dict) -> World:
    world = World((4, 4), fields, max_chunks=4)
    for k in range(2):
        world.add(k, {"a" if "a" in fields else "h": np.full((4, 4), k + 1, np.float32)})
    return world


def test_a_readback_that_fits_one_chunk_at_a_time_is_served_on_the_gpu(make_engine):
    # readback_bytes(n) = [16, 16, 32, 48]: its floor was taken for a fixed overhead, the
    # average per chunk came out 27 bytes, and one chunk (16 bytes) "could never fit" 24.
    world = World((4, 4), {"h": np.float32}, max_chunks=4)
    for k in range(3):
        world.add(k, {"h": np.full((4, 4), k + 1, np.float32)})
    engine = make_engine(world, config=EngineConfig(backend=WgpuBackendConfig(max_inflight_readback_bytes=24)))
    got: list = []
    handle = engine.register_product(kernel_program("summary"), fields={"src": "h"}, apply=lambda r: got.append((r.source, r.keys)))
    assert drain(engine), engine.product_error(handle)
    assert sorted(k for _, keys in got for k in keys) == [0, 1, 2] and {s for s, _ in got} == {"gpu"}
    assert engine.product_error(handle) is None


def test_a_mirror_writer_whose_readback_never_fits_still_writes_the_mirror(make_engine):
    # Stuck for good: the writer was served by nothing (its fallback only serves chunks its
    # kernel wrote, and it dispatched none), its reader waited on it with no error. Now the
    # writer's kernel runs (no readback) and its fallback serves its results; a reader that
    # cannot read back either waits, said, rather than sum the world's bytes of the mirror.
    world = World((4, 4), {"a": np.float32, "m": np.float32}, max_chunks=2)
    for k in range(2):
        world.add(k, {"a": np.full((4, 4), k + 1, np.float32)})
    engine = make_engine(world, config=EngineConfig(backend=WgpuBackendConfig(max_inflight_readback_bytes=2)))
    engine.field_buffer("m", kernel_writes=True)
    got: dict = {"W": {}, "R": {}}
    writer = engine.register_product(
        program("t/budget/w", WRITER_YAML, writer_wgsl(1.0)),
        key="W",
        fields={"a": "a", "m": "m"},
        apply=lambda r: got["W"].update(zip(r.keys, r.values.tolist())),
        cpu_fallback=lambda w, work: np.array([(2 * w.read(k, "a") + 1).sum() for k in work.keys], np.float32),
    )
    reader = engine.register_product(
        program("t/budget/r", SUM_Y, SUM_W),
        key="R",
        fields={"src": "m"},
        params={"c": 1.0},
        apply=lambda r: got["R"].update(zip(r.keys, r.values.tolist())),
        cpu_fallback=lambda w, work: np.array([w.read(k, "m").sum() for k in work.keys], np.float32),
    )
    drain(engine, seconds=3)
    assert got["W"] == {0: 48.0, 1: 80.0}
    mirror = np.frombuffer(abi.read(engine.backend.field_buffer("m")), np.float32)[:32].reshape(2, 16)
    assert mirror[0].tolist() == [3.0] * 16 and mirror[1].tolist() == [5.0] * 16  # the kernel wrote it
    assert got["R"] == {}, "a fallback over the world's bytes of a kernel-written mirror is a wrong number"
    error = engine.product_error(reader)
    assert error is not None and "max_inflight_readback_bytes" in str(error) and "it waits" in str(error)
    assert "max_inflight_readback_bytes" in str(engine.product_error(writer))


def test_a_gpu_only_product_that_gave_up_after_failed_readbacks_says_so(make_engine):
    world = World((4, 4), {"h": np.float32}, max_chunks=2)
    world.add(0, {"h": np.ones((4, 4), np.float32)})
    engine = make_engine(world, config=EngineConfig(max_readback_failures=2))
    done = engine.backend._ring.waiter.done

    class FailingMaps:
        def put(self, item):
            done.put((item[0], RuntimeError("injected map failure")))

        def get_nowait(self):
            return done.get_nowait()

    engine.backend._ring.waiter.done = FailingMaps()
    handle = engine.register_product(kernel_program("summary"), fields={"src": "h"}, apply=lambda r: None)
    for i in range(40):
        engine.frame()
        time.sleep(0.005)
        if engine.product(handle).gave_up:
            break
    assert engine.product(handle).gave_up
    error = engine.product_error(handle)
    assert error is not None and "readbacks failed in a row" in str(error) and "no CPU fallback" in str(error)


CHAIN_YAML = (
    "bindings:\n"
    + HDR
    + "  - { name: src, kind: buffer, access: read, element: f32 }\n  - { name: dst, kind: buffer, access: read_write, element: f32 }\n"
    + '  - { name: out, kind: buffer, access: read_write, element: vec2<f32>, count: "n" }\n'
    + "params:\n  - { name: tile_count, type: u32 }\n"
)
CHAIN_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * params.tile_count;
    var s = 0.0;
    for (var t = 0u; t < params.tile_count; t = t + 1u) { let v = src_get(base + t) + 1.0; dst_set(base + t, v); s = s + v; }
    out_set(i, vec2<f32>(s, 0.0));
}
"""


def test_a_reader_behind_a_chain_writer_whose_readback_never_fits_says_why_it_waits(make_engine):
    # W -> m -> W2 -> m2 -> R: W2's 8-byte result never fits a 6-byte budget; it waits, said.
    # R waited behind it for good saying nothing (review helper 172).
    world = World((4, 4), {"a": np.float32, "m": np.float32, "m2": np.float32}, max_chunks=2)
    for k in range(2):
        world.add(k, {"a": np.full((4, 4), k + 1, np.float32)})
    engine = make_engine(world, config=EngineConfig(backend=WgpuBackendConfig(max_inflight_readback_bytes=6)))
    engine.field_buffer("m", kernel_writes=True)
    engine.field_buffer("m2", kernel_writes=True)
    engine.register_product(program("t/chainbudget/w", WRITER_YAML, writer_wgsl(1.0)), key="W", fields={"a": "a", "m": "m"}, apply=lambda r: None)
    engine.register_product(program("t/chainbudget/w2", CHAIN_YAML, CHAIN_WGSL), key="W2", fields={"src": "m", "dst": "m2"}, apply=lambda r: None)
    reader = engine.register_product(program("t/chainbudget/r", SUM_Y, SUM_W), key="R", fields={"src": "m2"}, params={"c": 1.0}, apply=lambda r: None)
    assert not drain(engine, seconds=2)
    error = engine.product_error(reader)
    assert error is not None and "waits for 'W2'" in str(error) and "max_inflight_readback_bytes" in str(error), error


def test_a_path_longer_than_one_dispatch_may_take_says_so_and_is_served_without_a_dispatch(make_engine):
    # Its dispatch was built and refused every frame while its fallback served it, with
    # product_error None: nothing said why it never ran on the GPU (review helper 180).
    from engine_plugin.engine import fallbacks
    from engine_plugin.engine.engine import ReadbackBudgetError
    from engine_plugin.gpu import ReadbackPolicy

    world = World((4, 4), {"h": np.float32, "g": np.float32}, max_chunks=8)
    for k in range(4):
        world.add(k, {"h": np.full((4, 4), k, np.float32), "g": np.ones((4, 4), np.float32)})
    engine = make_engine(world, config=EngineConfig(backend=WgpuBackendConfig(max_chunks_per_dispatch=1)))
    got = []
    path = [(0, (0, 0)), (0, (3, 3)), (2, (1, 1))]
    handle = engine.register_product(
        kernel_program("combine"),
        key="p",
        spec={"OP": "add"},
        fields={"a": "h", "b": "g"},
        policy=ReadbackPolicy.SELECTED_PATH,
        path=path,
        apply=lambda r: got.append((r.source, r.values.tolist())),
        cpu_fallback=fallbacks.combine,
    )
    world.set_tile(2, "h", (1, 1), 10.0)
    assert drain(engine)
    assert got[-1][0] == "cpu" and got[-1][1][-1] == 11.0 and set(got[-1][1][:-1]) == {1.0}  # h + g along the path
    error = engine.product_error(handle)
    assert isinstance(error, ReadbackBudgetError) and "max_chunks_per_dispatch (1)" in str(error) and "CPU fallback serves it" in str(error)
    assert engine.totals.refused == 0  # no dispatch built to be refused
