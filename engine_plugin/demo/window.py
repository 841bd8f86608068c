"""The windowed demo: a glfw window (rendercanvas) showing the coloured field and the overlay.

The only module that imports glfw. Each frame is drawn into a window-sized texture of the
surface's format (the picture letterboxed by :class:`~.present.Presenter`, then the
:class:`~.overlay.Overlay`), which is copied to the surface; the screenshot key saves that
same texture, so a screenshot is exactly what the window showed. Keys: see :mod:`.keys`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from typing import Any

import numpy as np
import wgpu

from .present import BAR_COLOR

__all__ = ["DemoWindow", "display_problem", "run_window"]

log = logging.getLogger("engine_plugin.demo")


def display_problem() -> str | None:
    """Why no window can open here (one line), or None when one can.

    Probed before any window is made: with a display that cannot be opened glfw's own window
    calls abort the process (an assertion), so the demo must fall back before reaching them.
    """
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return "no display (DISPLAY is not set)"
    try:
        import glfw
        import imgui_bundle  # noqa: F401
        import rendercanvas.glfw  # noqa: F401
    except ImportError as exc:
        return f"the window needs the optional 'demo' extra ({exc}); install it with: pip install 'engine_plugin[demo]'"
    reporting = glfw.ERROR_REPORTING
    glfw.ERROR_REPORTING = "ignore"  # the failure is reported here, once, not as glfw warnings
    try:
        if not glfw.init():
            return f"cannot open the display {os.environ.get('DISPLAY') or os.environ.get('WAYLAND_DISPLAY')!r}"
    finally:
        glfw.ERROR_REPORTING = reporting
    return None


class DemoWindow:
    """A demo in a window: the frame, the keys, the screenshots.

    Args:
        canvas: a rendercanvas canvas whose wgpu context is not configured yet.
        demo_factory: ``fn(pixel_order=...) -> HeatDemo``.
        screenshots: the folder the screenshot key writes to.
    """

    def __init__(self, canvas: Any, demo_factory: Any, *, screenshots: str = "out") -> None:
        from .overlay import Overlay
        from .present import Presenter

        self.canvas = canvas
        self.context = canvas.get_context("wgpu")
        self.demo = demo_factory(pixel_order="bgra" if "bgra" in _format(self.context) else "rgba")
        device = self.demo.ctx.device
        # The non-sRGB twin of the preferred format: the picture's bytes are already display
        # colours (a headless snapshot writes them as they are), and imgui's colours are too.
        self.format = _format(self.context, self.demo.ctx.adapter).removesuffix("-srgb")
        self.context.configure(device=device, format=self.format, usage=wgpu.TextureUsage.RENDER_ATTACHMENT | wgpu.TextureUsage.COPY_DST)
        self.presenter = Presenter(device, self.format)
        self.overlay = Overlay(device, canvas, self.format)
        self.screenshots = screenshots
        self.last_screenshot: str | None = None
        self.viewport: tuple[int, int, int, int] = (0, 0, 0, 0)
        self._frame_target: Any = None
        self._want_screenshot = False
        self.shown = 0

    # -- keys ----------------------------------------------------------------------------------
    def on_key(self, event: dict) -> None:
        """rendercanvas ``key_down`` handler: performs the key's action (:mod:`.keys`)."""
        from .keys import action_for

        action = action_for(event)
        demo = self.demo
        if action == "toggle_overlay":
            self.overlay.visible = not self.overlay.visible
        elif action == "pause":
            demo.paused = not demo.paused
        elif action == "step":
            demo.paused = True
            demo.step_once()
        elif action == "reset":
            demo.reset()
        elif action == "reload":
            demo.reload_all()
        elif action == "screenshot":
            self._want_screenshot = True  # taken after the next frame is drawn
        elif action == "quit":
            self.canvas.close()

    # -- a frame -------------------------------------------------------------------------------
    def _target(self, size: tuple[int, int]) -> Any:
        t = self._frame_target
        if t is None or tuple(t.size[:2]) != size:
            # The old one is dropped, never destroyed: work already submitted may still use it.
            t = self._frame_target = self.demo.ctx.device.create_texture(
                size=(size[0], size[1], 1),
                format=self.format,
                usage=wgpu.TextureUsage.RENDER_ATTACHMENT | wgpu.TextureUsage.COPY_SRC,
                label="demo frame",
            )
        return t

    @property
    def frame_size(self) -> tuple[int, int]:
        """The size in pixels of the last frame drawn (the surface's), (0, 0) before the first."""
        t = self._frame_target
        return (int(t.size[0]), int(t.size[1])) if t is not None else (0, 0)

    def draw(self) -> Any:
        """One frame: the demo's step, the picture and the overlay, the copy to the surface."""
        demo = self.demo
        hud = demo.step()
        surface = self.context.get_current_texture()
        size = (int(surface.size[0]), int(surface.size[1]))
        target = self._target(size)
        device = demo.ctx.device
        encoder = device.create_command_encoder()
        render_pass = encoder.begin_render_pass(
            color_attachments=[{"view": target.create_view(), "clear_value": BAR_COLOR, "load_op": "clear", "store_op": "store"}]
        )
        self.viewport = self.presenter.draw(render_pass, demo.pixels, size)
        shot = self.last_screenshot
        notice = (f"screenshot: {shot}" if shot.startswith("not saved") else f"screenshot: {os.path.basename(shot)}") if shot else ""
        self.overlay.render(render_pass, demo.figures, size, notice)
        render_pass.end()
        encoder.copy_texture_to_texture({"texture": target}, {"texture": surface}, (size[0], size[1], 1))
        device.queue.submit([encoder.finish()])
        if self._want_screenshot:
            self._want_screenshot = False
            try:
                self.last_screenshot = self.save_screenshot(target)
            except OSError as exc:
                # A folder that cannot be made or written: said in the overlay's notice line
                # and once on the log, the demo goes on (review helper 199: a raw traceback).
                self.last_screenshot = f"not saved ({exc.strerror or exc})"
                log.warning("screenshot not saved in %s: %s", self.screenshots, exc.strerror or exc)
        self.shown += 1
        return hud

    def save_screenshot(self, texture: Any) -> str:
        """Write ``texture`` (the frame just drawn) as a PNG in the screenshots folder."""
        from PIL import Image

        from .. import abi

        os.makedirs(self.screenshots, exist_ok=True)
        img = abi.read(texture)  # RGBA order, a bgra8 texture's too
        path = os.path.join(self.screenshots, f"demo-{time.strftime('%Y%m%d-%H%M%S')}-{self.shown:06d}.png")
        Image.fromarray(np.ascontiguousarray(img), "RGBA").save(path)
        return path


def run_window(demo_factory: Any, frames: int | None = None, *, size: tuple[int, int] = (512, 512), on_frame: Any = None, screenshots: str = "out") -> int:
    """Open a window and run the demo until Esc (or ``frames`` frames); answers frames shown.

    ``on_frame(window, shown)`` runs after each frame (tests drive the window through it)."""
    from rendercanvas.glfw import RenderCanvas, loop

    canvas = RenderCanvas(size=size, title="engine_plugin demo", update_mode="continuous", max_fps=240, vsync=False)
    window = DemoWindow(canvas, demo_factory, screenshots=screenshots)
    canvas.add_event_handler(window.on_key, "key_down")
    last_title = [0.0]
    interrupted: list[int] = []

    def note_interrupt(signum: int, frame: Any) -> None:
        interrupted.append(signum)  # the window closes after the frame being drawn (below)

    def draw() -> None:
        if not interrupted and signal.getsignal(signal.SIGINT) not in (note_interrupt, signal.SIG_IGN):
            # rendercanvas's loop stops itself from inside the signal handler, wherever Python
            # stands: in the middle of a frame, whose textures and readbacks it tore down (a
            # wgpu-native panic, exit 134, or tracebacks: review helper 244). Its handler, set as
            # run() starts, is replaced here by one that notes the Ctrl-C; the loop puts the
            # previous one back when it stops.
            with contextlib.suppress(ValueError):  # (not the main thread: nothing to replace)
                signal.signal(signal.SIGINT, note_interrupt)
        hud = window.draw()
        now = time.perf_counter()
        if now - last_title[0] > 0.1 or hud.diagnostics:
            canvas.set_title(hud.title())
            last_title[0] = now
        if on_frame is not None:
            on_frame(window, window.shown)
        if (frames is not None and window.shown >= frames) or interrupted:
            canvas.close()  # between frames, as Esc closes it

    canvas.request_draw(draw)
    try:
        loop.run()
    finally:
        window.demo.close()
    return window.shown


def _format(context: Any, adapter: Any = None) -> str:
    from ..device.context import get_context

    return context.get_preferred_format(adapter or get_context().adapter)
