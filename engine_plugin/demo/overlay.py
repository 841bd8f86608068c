"""The in-window overlay: Dear ImGui (``imgui-bundle``) through wgpu-py's imgui renderer.

Two panels, drawn into the same render pass as the picture, after it:

* the **stats panel** (top left, toggled with O): frame time and FPS with a rolling graph,
  per-product GPU time (``n/a`` until the engine measures it), uploads, readbacks in flight,
  stale results per second, the heat figures, the reload log and the keys;
* the **error panel** (bottom, full width, red): every diagnostic as ``file:line:col:
  message``, the source line and a caret. It is drawn whenever an asset is broken, even with
  the stats panel hidden, and disappears once the file is fixed.

Every string drawn is also appended to :attr:`Overlay.lines` (the last frame's text log), so
a test, or a bug report, can read what the window shows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .figures import Figures
from .keys import help_lines

__all__ = ["ERROR_PANEL_HEIGHT", "Overlay"]

ERROR_PANEL_HEIGHT = 0.3  # of the window's height, at most
_ERROR_BG = (0.45, 0.02, 0.02, 0.92)
_ERROR_TEXT = (1.0, 0.85, 0.55, 1.0)
_DIM = (0.7, 0.7, 0.7, 1.0)


class Overlay:
    """Draws :class:`~engine_plugin.demo.figures.Figures` with Dear ImGui.

    Args:
        device: the wgpu device.
        canvas: the rendercanvas canvas (the imgui renderer takes its mouse and key events).
        target_format: the format of the textures the overlay draws into.
    """

    def __init__(self, device: Any, canvas: Any, target_format: str) -> None:
        from imgui_bundle import imgui
        from wgpu.utils.imgui import ImguiRenderer

        self._imgui = imgui
        self.canvas = canvas
        self.renderer = ImguiRenderer(device, canvas, target_format)
        imgui.get_io().set_ini_filename("")  # no imgui.ini in the user's working folder
        self.visible = True
        self.lines: list[str] = []
        self.error_rect: tuple[int, int, int, int] | None = None  # (x, y, w, h) of the error panel, when drawn

    # -- text, recorded ------------------------------------------------------------------------
    def _text(self, text: str, color: tuple[float, float, float, float] | None = None, wrap: bool = False) -> None:
        """One line (``wrap``: folded at the window's edge instead of cut off there)."""
        imgui = self._imgui
        self.lines.append(text)
        if wrap:  # what text_wrapped does, without a printf format (a message may hold '%')
            imgui.push_text_wrap_pos(0.0)
        if color is None:
            imgui.text_unformatted(text)
        else:
            imgui.push_style_color(imgui.Col_.text, imgui.ImVec4(*color))
            imgui.text_unformatted(text)
            imgui.pop_style_color()
        if wrap:
            imgui.pop_text_wrap_pos()

    # -- a frame ---------------------------------------------------------------------------------
    def render(self, render_pass: Any, figures: Figures, size: tuple[int, int], notice: str = "") -> None:
        """Draw the overlay for ``figures`` into ``render_pass`` (a target of ``size`` pixels).
        ``notice``: one extra line for the stats panel (e.g. where the last screenshot went)."""
        imgui = self._imgui
        backend = self.renderer.backend
        imgui.set_current_context(self.renderer.imgui_context)
        ratio = float(self.canvas.get_pixel_ratio()) or 1.0
        logical = (size[0] / ratio, size[1] / ratio)
        backend.io.display_size = logical
        backend.io.display_framebuffer_scale = (ratio, ratio)
        self.lines = []
        self.error_rect = None
        imgui.new_frame()
        try:
            if self.visible:
                self._stats_panel(figures, notice)
            if figures.diagnostics:
                self._error_panel(figures, logical, ratio)
        finally:
            imgui.render()
        backend.render(imgui.get_draw_data(), render_pass)

    def _flags(self) -> int:
        f = self._imgui.WindowFlags_
        return int(f.no_saved_settings | f.no_focus_on_appearing | f.no_nav | f.no_collapse)

    def _stats_panel(self, fig: Figures, notice: str) -> None:
        imgui = self._imgui
        imgui.set_next_window_pos(imgui.ImVec2(8, 8), imgui.Cond_.always)
        imgui.set_next_window_bg_alpha(0.78)
        flags = self._flags() | int(imgui.WindowFlags_.no_title_bar | imgui.WindowFlags_.always_auto_resize | imgui.WindowFlags_.no_move)
        imgui.begin("engine_plugin##stats", None, flags)
        try:
            self._text(f"engine_plugin demo  frame {fig.frame}" + ("  [paused]" if fig.paused else ""))
            self._text(f"frame {fig.frame_ms:6.2f} ms  {fig.fps:6.1f} fps  (demo work {fig.step_ms:.2f} ms)")
            if fig.history:
                values = np.asarray(fig.history, dtype=np.float32)
                top = float(max(values.max(), 1.0))
                imgui.plot_lines("##frame_ms", values, scale_min=0.0, scale_max=top * 1.1, graph_size=imgui.ImVec2(300, 48), overlay_text=f"max {top:.1f} ms")
            imgui.separator()
            timing = fig.gpu_timing or "n/a"
            self._text(f"GPU time per product ({timing})")
            for product in fig.product_names():
                self._text(f"  {product:<10} {fig.gpu_text(product)}")
            self._text(f"uploads {fig.uploads} ({fig.upload_bytes / 1024:.0f} KiB)  readbacks in flight {fig.readbacks_in_flight}")
            self._text(f"stale results discarded {fig.stale_per_s:.0f}/s")
            heat = fig.heat
            if heat:
                self._text(f"heat max {heat.get('heat_max', 0.0):.3f}  mean {heat.get('heat_mean', 0.0):.4f}  hot tiles {heat.get('hot_tiles', 0)}")
                if "summary_extra" in heat:
                    self._text("summary extra lanes (max): " + ", ".join(f"{x:.3f}" for x in heat["summary_extra"]))
            imgui.separator()
            self._text("reloads" if fig.reloads else "reloads: none yet (save a kernel in the assets folder)")
            for entry in fig.reloads:
                self._text("  " + entry.text(), None if entry.kind != "failed" else _ERROR_TEXT)
            imgui.separator()
            for line in help_lines():
                self._text(line, _DIM)
            if notice:
                self._text(notice)
        finally:
            imgui.end()

    def _error_panel(self, fig: Figures, logical: tuple[float, float], ratio: float) -> None:
        imgui = self._imgui
        w, h = logical
        panel_h = max(60.0, h * ERROR_PANEL_HEIGHT)
        imgui.set_next_window_pos(imgui.ImVec2(0, h - panel_h), imgui.Cond_.always)
        imgui.set_next_window_size(imgui.ImVec2(w, panel_h), imgui.Cond_.always)
        imgui.push_style_color(imgui.Col_.window_bg, imgui.ImVec4(*_ERROR_BG))
        flags = self._flags() | int(imgui.WindowFlags_.no_move | imgui.WindowFlags_.no_resize)
        n = len(fig.diagnostics)
        imgui.begin(f"{n} error{'s' if n != 1 else ''}: the last good kernels keep running##errors", None, flags)
        try:
            for diag in fig.diagnostics:
                first, *rest = diag.lines()
                # The message folds at the panel's edge (a long one was cut off mid-word in the
                # default window, review helper 109); the source line and caret never fold.
                self._text(f"[{diag.asset}] {first}", _ERROR_TEXT, wrap=True)
                for line in rest:
                    self._text(line)
        finally:
            imgui.end()
            imgui.pop_style_color()
        top = round((h - panel_h) * ratio)
        self.error_rect = (0, top, round(w * ratio), round(h * ratio) - top)
