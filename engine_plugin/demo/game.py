"""The live-edit demo: a heat field over 8×8 chunks of 32×32 tiles, driven by compute shader assets.

The world is authoritative for what the game decides: where the heaters are (``source``) and
the starting heat (``heat``, rewritten on reset). The engine mirrors the fields to the GPU
through upload descriptors each frame. The heat itself evolves on the GPU — derived, visual
state — and every kernel (package data in ``engine_plugin/demo/assets/``) is an engine product
dispatched in the engine's one submission a frame, timed in ``FrameStats.product_gpu_ms``
(``demo/products.py``):

* ``heat_step``  one diffusion step (exact; a ``STENCIL`` specialisation) into the
  ``heat_next`` mirror, and ``heat_copy`` back into ``heat`` (a ping-pong);
* ``colorize``   heat -> a storage texture (RGBA8, or BGRA8 like the window surface), through a
  palette *columns table*; the window copies it to its surface;
* ``summary``    per-chunk (max, mean) whose revalidated readbacks feed the HUD;
* ``hotspots``   per-chunk (tiles above a threshold, hottest tile).

A game frame advances when the engine dispatched its heat step: a frame the engine defers
(GPU work of the previous frame still running, ``FrameStats.deferred``) keeps the same heaters
and steps on the next, so the picture after N frames is the same whatever the GPU's speed.

Saving ``colorize.computeShader/colorize.wgsl`` (in a checkout:
``engine_plugin/demo/assets/``; ``engine-plugin demo --assets DIR`` runs a copy) changes the picture on the next
frame; a broken save keeps the last good program running and shows its diagnostics.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import wgpu

from .. import abi
from ..assets import AssetLibrary
from ..assets.builtin import resource_folder
from ..device.context import get_context
from ..engine import Engine, EngineConfig
from ..world import World
from .figures import Diagnostic, Figures
from .products import PRODUCTS, HeatFigures, register_products

__all__ = ["CHUNK", "GRID", "PALETTE", "HeatDemo", "Hud", "demo_assets", "heaters"]

GRID = (8, 8)  # chunks (x, y)
CHUNK = (32, 32)  # tiles (w, h)
PALETTE = np.array(  # colour stops, evenly spaced over [0, 1] (an inferno-like ramp)
    [
        [0.00, 0.00, 0.02, 1],
        [0.16, 0.04, 0.33, 1],
        [0.47, 0.11, 0.43, 1],
        [0.78, 0.22, 0.32, 1],
        [0.96, 0.47, 0.10, 1],
        [0.98, 0.80, 0.20, 1],
        [0.99, 1.00, 0.80, 1],
    ],
    dtype=np.float32,
)


def heaters(frame_index: int) -> np.ndarray:
    """The heat sources of a frame, (rows, columns) f32 over the whole world: three heaters
    orbiting the middle, a function of the frame index (deterministic)."""
    h, w = GRID[1] * CHUNK[1], GRID[0] * CHUNK[0]
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    field_ = np.zeros((h, w), np.float32)
    t = frame_index * 0.02
    for k in range(3):
        angle = t * (1.0 + 0.3 * k) + k * 2.0944
        cx = w / 2 + math.cos(angle) * w * (0.18 + 0.08 * k)
        cy = h / 2 + math.sin(angle) * h * (0.18 + 0.08 * k)
        field_ += np.float32(0.08) * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / np.float32(60.0)).astype(np.float32)
    return field_


def demo_assets() -> str:
    """The folder of the demo's own kernels (package data): heat_step, heat_copy, colorize, summary, hotspots."""
    return resource_folder("engine_plugin.demo", "assets")


@dataclass
class Hud:
    """What the HUD shows: frame timing, reload generation, diagnostics, applied summaries."""

    frame: int = 0
    fps: float = 0.0
    frame_ms: float = 0.0
    generation: int = 0
    diagnostics: str | None = None
    heat_max: float = 0.0
    heat_mean: float = 0.0
    summaries_applied: int = 0
    summaries_stale: int = 0
    hotspots: int = 0
    paused: bool = False
    cpu_fallbacks: int = 0
    _times: list = field(default_factory=list, repr=False)

    def title(self) -> str:
        text = (
            f"engine_plugin demo  {self.fps:5.1f} fps  {self.frame_ms:5.2f} ms  gen {self.generation}  "
            f"heat max {self.heat_max:.2f} mean {self.heat_mean:.3f}  hot {self.hotspots}"
        )
        if self.paused:
            text += "  [paused]"
        if self.diagnostics:
            text += "  | " + self.diagnostics.splitlines()[0]
        return text


class HeatDemo:
    """The demo game: world, engine, kernels and one ``step()`` a frame."""

    def __init__(
        self,
        assets: str | None = None,
        cache: str | None = "cache",
        *,
        device: Any = None,
        out_size: tuple[int, int] = (512, 512),
        pixel_order: str = "rgba",
        watch: bool = False,
        stencil: str = "cross",
    ):
        self.ctx = get_context(device)
        self.out_w, self.out_h = out_size
        self.pixel_order = pixel_order
        self.stencil = stencil
        # The demo's kernels come from `assets` (default: the packaged ones); the engine's summary
        # kernel is found by the library whatever its root.
        self.library = AssetLibrary(assets or demo_assets(), cache, device=self.ctx)
        # `heat_next`: the other half of the heat ping-pong (written by heat_step on the GPU only).
        fields = {"heat": np.float32, "source": np.float32, "heat_next": np.float32}
        self.world = World(CHUNK[::-1], fields, max_chunks=GRID[0] * GRID[1])
        for key in range(GRID[0] * GRID[1]):
            self.world.add(key)
        # Per-field revalidation: heaters move every frame, and a heat summary stays true when
        # only `source` changed under it.
        self.engine = Engine(self.world, self.library, config=EngineConfig(revalidate="fields"))
        self.hud = Hud()
        self.figures = Figures(products=PRODUCTS)
        self.heat_figures = HeatFigures()
        self.palette = abi.table({"color": PALETTE}, device=self.ctx)
        # The colourised frame: a storage texture colorize writes and the window copies to its surface.
        self.pixels_format = "bgra8unorm" if self.pixel_order == "bgra" else "rgba8unorm"
        self.pixels = self.ctx.device.create_texture(
            size=(self.out_w, self.out_h, 1),
            format=self.pixels_format,
            usage=wgpu.TextureUsage.STORAGE_BINDING | wgpu.TextureUsage.COPY_SRC | wgpu.TextureUsage.TEXTURE_BINDING,
            label="pixels",
        )
        self.products = register_products(
            self.engine, self.heat_figures, grid=GRID, chunk=CHUNK, palette=self.palette, pixels=self.pixels, pixel_order=pixel_order, stencil=stencil
        )
        # Every editable kernel, by product name (the engine's references: one per asset): the
        # overlay's reload log and error panel follow them.
        self.refs = {name: self.library.load(f"{name}.computeShader") for name in PRODUCTS}
        self.step_ref, self.color_ref = self.refs["heat_step"], self.refs["colorize"]
        for ref in self.refs.values():
            ref.on_reload(self.figures.note_reload)
            ref.on_error(self.figures.note_reload)
        self.frame_index = 0
        self._heaters_at = -1  # the frame index `source` holds the heaters of
        self.paused = False
        self._step_once = False
        self._diagnostic_cache: dict[tuple[str, Any], Diagnostic] = {}
        self._refused_at: dict[str, int] = {}  # product -> the reload generation the engine was last seen refusing
        if watch:
            self.library.watch()
        self.reset()

    # -- game logic (authoritative, CPU) ------------------------------------------------------
    def reset(self) -> None:
        """Cold world: heat zero everywhere; heaters back at their starting places."""
        zeros = np.zeros(CHUNK[::-1], np.float32)
        for key in range(GRID[0] * GRID[1]):
            self.world.write(key, "heat", zeros)
        self.frame_index = 0
        self._place_heaters()
        self._heaters_at = 0
        # The engine steps the heat when its inputs change, paused or not: the rewritten heat and
        # heaters are stepped on the next frame, which is then the game's frame 1 (paused too).
        self._step_once = True

    def _place_heaters(self) -> None:
        """The heaters of this frame index into the world's ``source`` field, chunk by chunk."""
        field_ = heaters(self.frame_index)
        for cy_ in range(GRID[1]):
            for cx_ in range(GRID[0]):
                block = field_[cy_ * CHUNK[1] : (cy_ + 1) * CHUNK[1], cx_ * CHUNK[0] : (cx_ + 1) * CHUNK[0]]
                self.world.write(cy_ * GRID[0] + cx_, "source", block)

    def step_once(self) -> None:
        """While paused: advance the simulation by exactly one frame (on the next ``step()``)."""
        self._step_once = True

    def reload_all(self) -> None:
        """Re-read every loaded asset as if saved (applied by the engine's next frame)."""
        self.library.request_reload()
        self.figures.note_forced_reload(len(self.library.refs()))

    def _diagnostics(self) -> list[Diagnostic]:
        """Every broken asset's error, and every product kept on its old kernel, right now."""
        errors: list[tuple[str, Any]] = [(name, ref.error) for name, ref in self.refs.items() if ref.error is not None]
        for name, handle in self.products.items():
            product = self.engine.product(handle)
            error = product.error  # a reloaded kernel outside the product contract
            if error and self.refs[name].error is None:
                errors.append((name, error))
                generation = self.refs[name].generation
                # (A refused reload only: a device loss or a refused upload is no reload.)
                if product.refused_program is not None and self._refused_at.get(name) != generation:
                    # The asset's reload was logged as one (it compiled); the engine kept the old
                    # kernel: the log says so too, once a reload (review helpers 204, 208: a
                    # refused layout, and a second refused save with the same error, read as
                    # reloads that went through).
                    self._refused_at[name] = generation
                    self.figures.note_refused(self.refs[name].path, generation)
        # Built once per error (a product error quotes its line from disk), not every frame.
        cache = {(name, error): self._diagnostic_cache.get((name, error)) or Diagnostic.from_error(name, error, self.library.root) for name, error in errors}
        self._diagnostic_cache = cache
        return list(cache.values())

    # -- one frame ----------------------------------------------------------------------------
    def step(self) -> Hud:
        """Game logic, then ``engine.frame()``: it dispatches the heat step, the colouring and
        the summaries in one submission (a frame it defers steps on the next)."""
        t0 = time.perf_counter()
        running = not self.paused or self._step_once
        if running:
            if self._heaters_at != self.frame_index:
                self._place_heaters()
                self._heaters_at = self.frame_index
            for handle in self.products.values():
                self.engine.invalidate(handle)  # heat changes on the GPU every frame: recompute all
        stats = self.engine.frame()
        advanced = not running  # paused: every frame shows the state as it is
        if running and not self.engine.product(self.products["heat_step"]).pending:
            self.frame_index += 1  # the step went out (not deferred): the game moves on
            self._step_once = False
            advanced = True
        hud = self.hud
        hud.frame = self.frame_index
        hud.paused = self.paused
        hud.summaries_applied += stats.readbacks_applied
        hud.summaries_stale += stats.readbacks_stale
        hud.cpu_fallbacks += stats.cpu_fallbacks
        hud.generation = self.color_ref.generation
        heat_figures = self.heat_figures.figures()
        hud.heat_max, hud.heat_mean, hud.hotspots = heat_figures["heat_max"], heat_figures["heat_mean"], heat_figures["hot_tiles"]
        diagnostics = self._diagnostics()
        hud.diagnostics = "\n".join(diagnostics[0].lines()) if diagnostics else None
        dt = time.perf_counter() - t0
        fig = self.figures
        fig.frame_done(stats, dt, self.engine.inflight, advanced=advanced)
        fig.frame, fig.paused, fig.heat, fig.diagnostics = self.frame_index, self.paused, heat_figures, diagnostics
        if advanced:  # game frames, as the overlay counts them
            hud._times.append(time.perf_counter())
            hud._times[:] = hud._times[-30:]
            if len(hud._times) > 1:
                hud.fps = (len(hud._times) - 1) / max(hud._times[-1] - hud._times[0], 1e-9)
            hud.frame_ms = dt * 1e3
        return hud

    # -- output -------------------------------------------------------------------------------
    def read_pixels(self) -> np.ndarray:
        """The last coloured frame as an (h, w, 4) uint8 array, RGBA order (``abi.read`` answers
        a bgra8 texture's texels in RGBA order too)."""
        return abi.read(self.pixels)

    def snapshot(self, path: str) -> str:
        from PIL import Image

        Image.fromarray(self.read_pixels(), "RGBA").save(path)
        return path

    def close(self) -> None:
        self.engine.close()
        self.library.close()
