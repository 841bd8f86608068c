"""A reload the engine refuses never reaches the product, however it re-registers; a reload
taken while a fallback serves the product is recomputed by the new kernel once it is back on
the GPU (review helper 57). On lavapipe, with the engine's summary asset."""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pytest
from engine_support import Applied, cpu_summary, frames_until, make_world, run_until_idle

from engine_plugin.assets import AssetLibrary
from engine_plugin.engine import Engine, fallbacks, kernel_folder

ASSET = "engine/summary.computeShader"


@pytest.fixture
def setup(tmp_path):
    root = tmp_path / "assets"
    shutil.copytree(kernel_folder("summary"), root / ASSET)
    lib = AssetLibrary(str(root), cache=str(tmp_path / "cache"))
    world = make_world(n=4)
    engine = Engine(world, library=lib)
    got = Applied(world)
    handle = engine.register_product(ASSET, spec={"T": "f32"}, fields={"src": "height"}, apply=got, cpu_fallback=fallbacks.summary)
    run_until_idle(engine)
    yield root / ASSET, lib, world, engine, got, handle
    engine.close()
    lib.close()


def _reload(lib, engine, folder, name, old, new):
    path = folder / name
    path.write_text(path.read_text().replace(old, new))
    ref = lib.load(ASSET)
    before = ref.generation
    lib.request_reload(ASSET)
    deadline = time.monotonic() + 30
    while ref.generation == before and time.monotonic() < deadline:
        engine.frame()
        time.sleep(0.01)
    assert ref.generation > before, "the reload never landed"
    for _ in range(3):
        engine.frame()


@pytest.mark.parametrize("again", ["recover_gpu", "set_params"])
def test_a_refused_reload_never_runs_when_the_product_registers_again(setup, again):
    folder, lib, world, engine, got, handle = setup
    # The reload declares the field input as i32: the engine refuses it (the field holds f32)
    # and keeps the previous kernel. The old Program object follows the refused one, so a
    # re-registration through it ran the refused kernel: f32 bits read as i32, applied as GPU results.
    _reload(lib, engine, folder, "bindings.yaml", "element: T }", "element: i32 }")
    assert "i32" in str(engine.product_error(handle))
    if again == "recover_gpu":
        assert engine.recover_gpu()
    else:
        engine.set_params(handle, {})  # the product's own (no) params: accepted, as before the reload
    for key, value in ((1, 2.0), (2, 3.0)):
        world.write(key, "height", value)
    run_until_idle(engine)
    for key in world.keys():
        np.testing.assert_array_equal(got.latest[key], cpu_summary(world, "height", key))
    assert got.results[-1].source == "gpu"


def test_a_save_that_does_not_compile_is_the_products_error_until_a_good_one(setup):
    # Review helper 196: the last good kernel ran on (right), and product_error said None: the
    # error was only on the reference's diagnostics.
    folder, lib, world, engine, got, handle = setup
    path = folder / "kernel.wgsl"
    good = path.read_text()
    path.write_text(good.replace("sum * params.inv_tile_count, sum)", "sum * params.inv_tile_count + undefined_name, sum)"))
    ref = lib.load(ASSET)
    lib.request_reload(ASSET)
    frames_until(engine, lambda st: ref.error is not None, "the failed reload", 30)
    error = engine.product_error(handle)
    assert error is not None and f"{path}:" in str(error) and "undefined_name" in str(error), error
    world.write(1, "height", 2.0)
    run_until_idle(engine)
    np.testing.assert_array_equal(got.latest[1], cpu_summary(world, "height", 1))  # the last good kernel's
    path.write_text(good.replace("sum * params.inv_tile_count, sum)", "sum * params.inv_tile_count + 0.0, sum)"))
    before = ref.generation
    lib.request_reload(ASSET)
    frames_until(engine, lambda st: ref.generation > before, "the good reload", 30)
    assert engine.product_error(handle) is None


def test_a_reload_taken_while_the_gpu_is_lost_recomputes_every_chunk_once_it_is_back(setup):
    folder, lib, world, engine, got, handle = setup
    engine.backend.notify_device_error("a device error, for the test")
    engine.frame()
    assert not engine.gpu_active
    # A body-only edit (mean + 1000) taken while the CPU fallback serves the product: the
    # fallback does not follow the kernel, so nothing is computed again then.
    _reload(lib, engine, folder, "kernel.wgsl", "sum * params.inv_tile_count, sum)", "sum * params.inv_tile_count + 1000.0, sum)")
    assert engine.recover_gpu()
    world.write(1, "height", 2.0)
    run_until_idle(engine)
    for key in world.keys():  # every chunk from the new kernel, not only the edited one
        want = cpu_summary(world, "height", key)
        want[2] += 1000.0
        np.testing.assert_allclose(got.latest[key], want, rtol=1e-6)


def test_a_product_whose_asset_imports_a_module_comes_back_to_the_gpu_after_a_real_loss():
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(__file__), "import_loss_script.py")
    proc = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=180, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


def test_a_product_registered_with_a_program_takes_up_a_body_only_reload(tmp_path):
    # It has no asset reference: the engine never re-planned it, while the library swapped
    # the new pipeline into its variant in place, and every dispatch after was refused ("the
    # prepared run is not of the product's pipeline") and served by the CPU fallback.
    root = tmp_path / "assets"
    shutil.copytree(kernel_folder("summary"), root / ASSET)
    lib = AssetLibrary(str(root), cache=str(tmp_path / "cache"))
    world = make_world(n=4)
    engine = Engine(world, library=lib)
    got = Applied(world)
    engine.register_product(lib.load(ASSET).program(), spec={"T": "f32"}, fields={"src": "height"}, apply=got, cpu_fallback=fallbacks.summary)
    run_until_idle(engine)
    try:
        _reload(lib, engine, root / ASSET, "kernel.wgsl", "sum * params.inv_tile_count, sum)", "sum * params.inv_tile_count + 1000.0, sum)")
        before = len(got.results)
        world.write(1, "height", 2.0)
        st = run_until_idle(engine)
        assert st.refused == 0 and st.cpu_fallbacks == 0
        assert {r.source for r in got.results[before:]} == {"gpu"}
        for key in world.keys():  # the new body, everywhere (the reload re-registered it)
            want = cpu_summary(world, "height", key)
            want[2] += 1000.0
            np.testing.assert_allclose(got.latest[key], want, rtol=1e-6)
    finally:
        engine.close()
        lib.close()


def test_products_sharing_a_program_compile_it_once_per_recovery_and_free_lost_devices():
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(__file__), "shared_program_loss_script.py")
    proc = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=180, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]


LANES_YAML = """bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: out, kind: buffer, access: read_write, element: vec%d<f32>, count: "n" }
params:
  - { name: tile_count, type: u32 }
"""
LANES_WGSL = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    out_set(i, %s);
}
"""


def test_a_reload_changing_the_record_shape_recomputes_what_the_fallback_computed(tmp_path):
    # Served by its fallback before and after a vec2 -> vec4 reload, the chunks it had computed
    # were skipped as done: they kept 2-lane records, and the engine reported idle (helper 73).
    from engine_plugin.gpu import NoGpuBackend
    from engine_plugin.world import World

    folder = tmp_path / "assets" / "p.computeShader"
    folder.mkdir(parents=True)

    def write(lanes):
        (folder / "bindings.yaml").write_text(LANES_YAML % lanes)
        (folder / "kernel.wgsl").write_text(LANES_WGSL % ("vec2<f32>(0.0, 1.0)" if lanes == 2 else "vec4<f32>(0.0, 1.0, 2.0, 3.0)"))

    def fallback(world, work):
        lanes = work.record_shape[0]
        out = np.zeros((len(work.keys), lanes), np.float32)
        out[:, 0] = [world.read(k, "a").sum() for k in work.keys]
        out[:, 1:] = [1.0, 2.0, 3.0][: lanes - 1]
        return out

    write(2)
    lib = AssetLibrary(str(tmp_path / "assets"), cache=str(tmp_path / "cache"))
    world = World((4, 4), {"a": np.float32}, max_chunks=8)
    for k in range(4):
        world.add(k, {"a": np.full((4, 4), k, np.float32)})
    engine = Engine(world, lib, backend=NoGpuBackend())
    latest = {}
    handle = engine.register_product("p.computeShader", fields={"src": "a"}, apply=lambda r: latest.update(zip(r.keys, r.values.tolist())), cpu_fallback=fallback)
    run_until_idle(engine)
    assert all(len(v) == 2 for v in latest.values()) and len(latest) == 4
    write(4)
    lib.request_reload("p.computeShader")
    frames_until(engine, lambda st: engine.product_error(handle) is None and engine.product(handle).plan.record_shape == (4,), "the reload taken", 30)
    run_until_idle(engine)
    assert {k: len(v) for k, v in latest.items()} == {0: 4, 1: 4, 2: 4, 3: 4}
    engine.close()
    lib.close()


REORDER_YAML = """bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: src, kind: buffer, access: read, element: T }
  - { name: out, kind: buffer, access: read_write, element: f32, count: "n" }
params:
  - { name: tile_count, type: u32 }
specialize:
  - { name: T, options: [%s] }
"""
REORDER_WGSL = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * params.tile_count;
    var s = 0.0;
    for (var t = 0u; t < params.tile_count; t = t + 1u) { s = s + f32(src_get(base + t)); }
    out_set(i, s * %s);
}
"""


@pytest.mark.parametrize("with_fallback", [False, True])
def test_a_refused_reload_that_was_body_only_for_its_variant_keeps_the_old_kernel_on_the_gpu(tmp_path, with_fallback):
    # Review helper 154: a save reordering T's options (spec=None now resolves to i32, which
    # the engine refuses for an f32 field) and changing the body was body-only for the T=f32
    # variant the product ran: the library swapped the new pipeline into it, and the pinned
    # kernel the product kept shared it. Every dispatch after was refused: without a fallback
    # the edit below was never computed and the engine never idle; with one, the CPU served
    # the product for good. It keeps the previous kernel (s * 1), on the GPU.
    from engine_plugin.world import World

    folder = tmp_path / "assets" / "p.computeShader"
    folder.mkdir(parents=True)

    def save(options, factor):
        (folder / "bindings.yaml").write_text(REORDER_YAML % options)
        (folder / "kernel.wgsl").write_text(REORDER_WGSL % factor)

    save("f32, i32", "1.0")
    lib = AssetLibrary(str(tmp_path / "assets"), cache=str(tmp_path / "cache"))
    world = World((4, 4), {"a": np.float32}, max_chunks=4)
    for k in range(2):
        world.add(k, {"a": np.full((4, 4), k + 1, np.float32)})
    engine = Engine(world, lib)
    got = Applied(world)
    fallback = (lambda w, work: np.array([w.read(k, "a").sum() for k in work.keys], np.float32)) if with_fallback else None
    handle = engine.register_product("p.computeShader", fields={"src": "a"}, apply=got, cpu_fallback=fallback)
    try:
        run_until_idle(engine)
        assert {k: float(v) for k, v in got.latest.items()} == {0: 16.0, 1: 32.0}
        ref = lib.load("p.computeShader")
        events = []
        ref.on_reload(events.append)
        save("i32, f32", "100.0")
        lib.request_reload("p.computeShader")
        frames_until(engine, lambda st: bool(events), "the reload landed", 30)
        assert events[0].kind == "body" and "i32" in str(engine.product_error(handle))
        before = len(got.results)
        world.write(0, "a", np.full((4, 4), 5, np.float32))
        st = run_until_idle(engine)
        assert {k: float(v) for k, v in got.latest.items()} == {0: 80.0, 1: 32.0}
        assert {r.source for r in got.results[before:]} == {"gpu"} and st.refused == 0
        # The library's program runs the new body, as body-only reloads do for other holders.
        run = ref.program().variant({"T": "f32"}).run(n=1, inputs={"chunks": np.zeros(1, np.uint32), "src": np.ones(16, np.float32)}, params={"tile_count": 16})
        from engine_plugin import abi

        assert abi.read(run.outputs["out"]).tolist() == [1600.0]
    finally:
        engine.close()
        lib.close()
