"""The windowed demo: a glfw window (rendercanvas) presenting the coloured field every frame.

The only module that imports glfw. Pixels reach the window by a buffer-to-texture copy into
the surface texture: no render pipeline, and the window shows exactly the bytes a headless
snapshot writes. Keys: space pauses, R resets the world, Esc quits.
"""

from __future__ import annotations

import time
from typing import Any

import wgpu

__all__ = ["display_problem", "run_window"]


def display_problem() -> str | None:
    """Why no window can open here (one line), or None when one can.

    Probed before any window is made: with a display that cannot be opened glfw's own window
    calls abort the process (an assertion), so the demo must fall back before reaching them.
    """
    import os

    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return "no display (DISPLAY is not set)"
    try:
        import glfw
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


def run_window(demo_factory: Any, frames: int | None = None, *, size: tuple[int, int] = (512, 512), on_frame: Any = None) -> int:
    """Open a window and run the demo until Esc (or ``frames`` frames); answers frames shown."""
    from rendercanvas.glfw import RenderCanvas, loop

    canvas = RenderCanvas(size=size, title="engine_plugin demo", update_mode="continuous", max_fps=240, vsync=False)
    context = canvas.get_context("wgpu")
    demo = demo_factory(pixel_order="bgra" if "bgra" in _format(context) else "rgba")
    fmt = _format(context, demo.ctx.adapter)
    context.configure(device=demo.ctx.device, format=fmt, usage=wgpu.TextureUsage.RENDER_ATTACHMENT | wgpu.TextureUsage.COPY_DST)
    shown = [0]
    last_title = [0.0]

    @canvas.add_event_handler("key_down")
    def on_key(event: dict) -> None:
        key = str(event.get("key", "")).lower()
        if key == " ":
            demo.paused = not demo.paused
        elif key == "r":
            demo.reset()
        elif key == "escape":
            canvas.close()

    def draw() -> None:
        hud = demo.step()
        texture = context.get_current_texture()
        w, h = min(texture.size[0], demo.out_w), min(texture.size[1], demo.out_h)
        encoder = demo.ctx.device.create_command_encoder()
        encoder.copy_texture_to_texture({"texture": demo.pixels}, {"texture": texture}, (w, h, 1))
        demo.ctx.queue.submit([encoder.finish()])
        shown[0] += 1
        now = time.perf_counter()
        if now - last_title[0] > 0.1 or hud.diagnostics:
            canvas.set_title(hud.title())
            last_title[0] = now
        if on_frame is not None:
            on_frame(demo, shown[0])
        if frames is not None and shown[0] >= frames:
            canvas.close()

    canvas.request_draw(draw)
    try:
        loop.run()
    finally:
        demo.close()
    return shown[0]


def _format(context: Any, adapter: Any = None) -> str:
    from ..gpu.device import get_context

    return context.get_preferred_format(adapter or get_context().adapter)
