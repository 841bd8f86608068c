"""The demo's heat step and colouring are engine products: the step advances the GPU's heat as
the numpy stencil does, the colouring stores the palette colour of each pixel's nearest tile,
a body edit of heat_step hot-reloads into the running product (a broken one keeps it), and
every demo product is timed in ``FrameStats.product_gpu_ms``."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import wgpu
from demo_support import advance, frames_until
from heat_reference import colorize, heat_step, world_picture

from engine_plugin import abi
from engine_plugin.assets import AssetLibrary
from engine_plugin.demo.game import CHUNK, GRID, PALETTE, HeatDemo, demo_assets, heaters
from engine_plugin.demo.products import PRODUCTS, STEP_PARAMS, register_colorize
from engine_plugin.engine import Engine
from engine_plugin.world import World

EDITED_COOLING = np.float32(10.0) * np.float32(STEP_PARAMS["cooling"])  # `10.0 * params.cooling`, in f32


def gpu_heat(demo: HeatDemo) -> np.ndarray:
    return world_picture(demo.world, "heat", demo.engine.field_buffer("heat", kernel_writes=True))


@pytest.fixture()
def demo(assets_copy, tmp_path):
    made = HeatDemo(assets_copy, str(tmp_path / "cache"))
    yield made
    made.close()


def test_the_heat_step_product_advances_the_gpu_heat_exactly_as_the_numpy_stencil(demo):
    want = np.zeros((GRID[1] * CHUNK[1], GRID[0] * CHUNK[0]), np.float32)
    for frame in range(6):
        advance(demo, 1)
        want = heat_step(want, heaters(frame))  # frame f steps with the heaters of frame f
        got = gpu_heat(demo)
        assert np.array_equal(got, want), f"frame {frame + 1}: max difference {np.abs(got - want).max()}"
    assert want.max() > 0.1  # the heaters really heated something
    # The picture is the colouring of that heat, in the same submission.
    assert np.abs(demo.read_pixels().astype(np.int16) - colorize(want, demo.out_w, demo.out_h)).max() <= 1


def test_a_reset_while_paused_is_stepped_once_and_counted_as_the_games_first_frame(demo):
    advance(demo, 4)
    demo.paused = True
    demo.reset()  # rewritten heat and heaters: the engine steps them once, paused or not
    frames_until(demo, lambda: demo.frame_index == 1, "the reset's step")
    frames_until(demo, lambda: demo.engine.idle, "the engine idle after the reset's step")
    for _ in range(20):  # paused and idle: nothing steps again
        demo.step()
    assert demo.frame_index == 1 and demo.paused
    assert np.array_equal(gpu_heat(demo), heat_step(np.zeros_like(heaters(0)), heaters(0)))


@pytest.mark.parametrize("order", ["rgba", "bgra"])
def test_the_colouring_product_stores_each_pixels_nearest_tile_colour_for_a_known_field(gpu, tmp_path, order):
    rows, cols = GRID[1] * CHUNK[1], GRID[0] * CHUNK[0]
    yy, xx = np.mgrid[0:rows, 0:cols].astype(np.float32)
    field = (xx / cols * 1.2 - 0.1 + (yy % 7) * np.float32(0.01)).astype(np.float32)  # below 0 to above 1: clamped
    world = World(CHUNK[::-1], {"heat": np.float32}, max_chunks=GRID[0] * GRID[1])
    for cy in range(GRID[1]):
        for cx in range(GRID[0]):
            world.add(cy * GRID[0] + cx, {"heat": field[cy * CHUNK[1] : (cy + 1) * CHUNK[1], cx * CHUNK[0] : (cx + 1) * CHUNK[0]]})
    library = AssetLibrary(demo_assets(), str(tmp_path / "cache"), device=gpu)
    out_w, out_h = 300, 200  # not a multiple of the field: tiles cover 1 or 2 pixels a side
    pixels = gpu.device.create_texture(size=(out_w, out_h, 1), format=f"{order}8unorm", usage=wgpu.TextureUsage.STORAGE_BINDING | wgpu.TextureUsage.COPY_SRC, label="test pixels")
    engine = Engine(world, library, device=gpu)
    try:
        palette = abi.table({"color": PALETTE}, device=gpu)
        register_colorize(engine, grid=GRID, chunk=CHUNK, palette=palette, pixels=pixels, pixel_order=order)
        deadline = time.monotonic() + 60
        while not engine.idle and time.monotonic() < deadline:
            engine.frame()
            time.sleep(0.001)
        assert engine.idle and engine.gpu_active
        got = abi.read(pixels)  # RGBA order, a bgra8 texture's too
        assert got.shape == (out_h, out_w, 4)
        assert np.abs(got.astype(np.int16) - colorize(field, out_w, out_h)).max() <= 1
    finally:
        engine.close()
        library.close()


def test_a_body_edit_of_heat_step_hot_reloads_into_the_product_and_a_broken_one_keeps_it(demo, assets_copy):
    handle = demo.products["heat_step"]
    advance(demo, 3)
    wgsl = os.path.join(assets_copy, "heat_step.computeShader", "heat_step.wgsl")
    good = open(wgsl).read()
    edited = good.replace("- params.cooling * h);", "- 10.0 * params.cooling * h);")  # ten times the cooling
    assert edited != good
    with open(wgsl, "w") as f:
        f.write(edited)
    gen0 = demo.step_ref.generation
    demo.library.request_reload("heat_step.computeShader")
    # The reload worker prepares it off-thread; a frame swaps it in.
    frames_until(demo, lambda: demo.step_ref.generation > gen0 and demo.engine.product(handle).program is demo.step_ref.program(),
                 "the edited heat_step reaching the product")
    (entry,) = [r for r in demo.figures.reloads if r.asset == "heat_step.computeShader"]
    assert entry.kind == "body"

    before = gpu_heat(demo)
    source = heaters(demo.frame_index)
    advance(demo, 1)
    after = gpu_heat(demo)
    assert np.array_equal(after, heat_step(before, source, cooling=EDITED_COOLING))
    assert not np.array_equal(after, heat_step(before, source))  # the edit changed the result

    # A broken save: the error panel names the file; the edited kernel keeps stepping.
    with open(wgsl, "w") as f:
        f.write(edited.replace("let avg = sum / count;", "let avg = sum / count"))
    demo.library.request_reload("heat_step.computeShader")
    frames_until(demo, lambda: bool(demo.figures.diagnostics), "the broken save's diagnostic")
    (diag,) = demo.figures.diagnostics
    assert diag.asset == "heat_step" and diag.location.startswith("heat_step.computeShader/heat_step.wgsl:")
    before = gpu_heat(demo)
    source = heaters(demo.frame_index)
    advance(demo, 1)
    assert np.array_equal(gpu_heat(demo), heat_step(before, source, cooling=EDITED_COOLING))


def test_frame_stats_time_every_demo_product_and_the_overlay_lists_them(demo):
    assert PRODUCTS == ("heat_step", "heat_copy", "colorize", "summary", "hotspots")
    frames_until(demo, lambda: set(demo.engine.totals.product_gpu_ms) >= set(PRODUCTS) and demo.figures.gpu_timing == "timestamps",
                 "a GPU time for every product")
    assert set(demo.engine.totals.product_gpu_ms) == set(PRODUCTS)
    assert all(ms > 0 for ms in demo.engine.totals.product_gpu_ms.values())
    assert demo.figures.product_names() == PRODUCTS
    assert all(v is not None for v in demo.figures.record()["gpu_ms"].values())


def test_a_bake_of_the_demo_kernels_covers_every_variant_the_demo_makes(tmp_path):
    # Review helper 200: after `make run`'s bake (`bake assets --builtin`) the demo still
    # lowered (and wrote) colorize with its palette column named: the cross product left the
    # columns out. Its bindings.yaml lists the demo's variants under `bake:` now.
    from engine_plugin.bake import bake
    from engine_plugin.demo.game import HeatDemo, demo_assets
    from engine_plugin.runtime import lowering_count

    cache = str(tmp_path / "cache")
    report = bake([demo_assets()], cache)
    assert report.ok, report.failures
    baked = set(os.listdir(cache))
    before = lowering_count()
    demo = HeatDemo(demo_assets(), cache)
    try:
        for _ in range(3):
            demo.step()
    finally:
        demo.close()
    assert lowering_count() == before, "the demo lowered a variant the bake did not cover"
    assert {f for f in os.listdir(cache) if f.endswith(".msgpack")} <= baked
