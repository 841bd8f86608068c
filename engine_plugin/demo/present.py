"""Drawing the demo's picture into a window-sized target, scaled with its aspect kept.

A ``copy_texture_to_texture`` cannot scale, so the picture is drawn by a small render
pipeline: a textured quad inside an aspect-preserving viewport (letterbox or pillarbox
bars, cleared to :data:`BAR_COLOR`, fill the rest). Nearest sampling: at 1:1 the window shows
exactly the bytes a headless snapshot writes, and scaled up the tiles stay crisp.
"""

from __future__ import annotations

from typing import Any

import wgpu

__all__ = ["BAR_COLOR", "Presenter", "fit_viewport"]

BAR_COLOR = (0.0, 0.0, 0.0, 1.0)

_SHADER = """
struct VOut {
    @builtin(position) pos: vec4<f32>,
    @location(0) uv: vec2<f32>,
};

// Two triangles covering clip space; the viewport places them.
@vertex
fn vs_main(@builtin(vertex_index) i: u32) -> VOut {
    var corners = array<vec2<f32>, 6>(
        vec2<f32>(-1.0, -1.0), vec2<f32>(1.0, -1.0), vec2<f32>(-1.0, 1.0),
        vec2<f32>(-1.0, 1.0), vec2<f32>(1.0, -1.0), vec2<f32>(1.0, 1.0),
    );
    let p = corners[i];
    var out: VOut;
    out.pos = vec4<f32>(p, 0.0, 1.0);
    out.uv = vec2<f32>((p.x + 1.0) * 0.5, (1.0 - p.y) * 0.5);
    return out;
}

@group(0) @binding(0) var picture: texture_2d<f32>;
@group(0) @binding(1) var picture_sampler: sampler;

@fragment
fn fs_main(in: VOut) -> @location(0) vec4<f32> {
    return vec4<f32>(textureSample(picture, picture_sampler, in.uv).rgb, 1.0);
}
"""


def fit_viewport(source: tuple[int, int], target: tuple[int, int]) -> tuple[int, int, int, int]:
    """``(x, y, w, h)``: the largest rectangle of ``source``'s aspect centred in ``target``."""
    sw, sh = source
    tw, th = target
    if sw <= 0 or sh <= 0 or tw <= 0 or th <= 0:
        return 0, 0, max(tw, 0), max(th, 0)
    scale = min(tw / sw, th / sh)
    w, h = max(1, round(sw * scale)), max(1, round(sh * scale))
    return (tw - w) // 2, (th - h) // 2, w, h


class Presenter:
    """Draws one texture (the demo's picture) into a render pass, letterboxed.

    Args:
        device: the wgpu device.
        target_format: the format of the textures drawn into (the window surface's).
    """

    def __init__(self, device: Any, target_format: str) -> None:
        self.device = device
        module = device.create_shader_module(code=_SHADER, label="present quad")
        self.pipeline = device.create_render_pipeline(
            layout="auto",
            vertex={"module": module, "entry_point": "vs_main"},
            fragment={"module": module, "entry_point": "fs_main", "targets": [{"format": target_format}]},
            primitive={"topology": wgpu.PrimitiveTopology.triangle_list},
            label="present quad",
        )
        self.sampler = device.create_sampler(mag_filter="nearest", min_filter="nearest")
        self._bound: tuple[Any, Any] | None = None  # (texture, bind group): the picture rarely changes

    def _bind_group(self, texture: Any) -> Any:
        if self._bound is None or self._bound[0] is not texture:
            group = self.device.create_bind_group(
                layout=self.pipeline.get_bind_group_layout(0),
                entries=[{"binding": 0, "resource": texture.create_view()}, {"binding": 1, "resource": self.sampler}],
            )
            self._bound = (texture, group)
        return self._bound[1]

    def draw(self, render_pass: Any, texture: Any, target_size: tuple[int, int]) -> tuple[int, int, int, int]:
        """Draw ``texture`` into ``render_pass`` (cleared to the bar colour by its caller),
        fitted into ``target_size``; answers the viewport used."""
        x, y, w, h = fit_viewport((texture.size[0], texture.size[1]), target_size)
        render_pass.set_pipeline(self.pipeline)
        render_pass.set_bind_group(0, self._bind_group(texture))
        render_pass.set_viewport(x, y, w, h, 0.0, 1.0)
        render_pass.draw(6)
        # The overlay draws next in the same pass: give it the whole target back.
        render_pass.set_viewport(0, 0, target_size[0], target_size[1], 0.0, 1.0)
        return x, y, w, h
