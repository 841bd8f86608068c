"""numpy references of the demo's heat kernels (f32, the kernels' operation order), and reading
the engine's slot-major field mirrors back as one (rows, columns) picture of the world."""

from __future__ import annotations

import numpy as np

from engine_plugin import abi
from engine_plugin.demo.game import CHUNK, GRID, PALETTE
from engine_plugin.demo.products import STEP_PARAMS


def heat_step(heat: np.ndarray, source: np.ndarray, rate: float = STEP_PARAMS["rate"], cooling: float = STEP_PARAMS["cooling"]) -> np.ndarray:
    """One step of ``heat_step.wgsl`` (cross stencil, insulated edges) over a whole-world picture."""
    h = heat.astype(np.float32)
    p = np.pad(h, 1, mode="edge")  # the kernel clamps neighbour coordinates to the world
    total = ((p[1:-1, :-2] + p[1:-1, 2:]) + p[:-2, 1:-1]) + p[2:, 1:-1]  # left, right, up, down
    avg = total / np.float32(4.0)
    return ((h + np.float32(rate) * (avg - h)) + source.astype(np.float32)) - np.float32(cooling) * h


def world_picture(world, name: str, mirror=None) -> np.ndarray:
    """Field ``name`` over the whole world, (rows, columns): from the GPU ``mirror`` when given
    (slot-major, what the kernels read and write), else from the world."""
    rows, cols = CHUNK[1], CHUNK[0]
    if mirror is not None:
        slots = np.frombuffer(abi.read(mirror), dtype=np.float32).reshape(-1, rows, cols)
    out = np.zeros((GRID[1] * rows, GRID[0] * cols), np.float32)
    for cy in range(GRID[1]):
        for cx in range(GRID[0]):
            key = cy * GRID[0] + cx
            block = slots[world.slot(key)] if mirror is not None else world.read(key, name)
            out[cy * rows : (cy + 1) * rows, cx * cols : (cx + 1) * cols] = block
    return out


def colorize(field: np.ndarray, out_w: int, out_h: int, lo: float = 0.0, hi: float = 1.0) -> np.ndarray:
    """``colorize.wgsl``: (out_h, out_w, 4) uint8 RGBA, each pixel the colour of its nearest tile."""
    fh, fw = field.shape
    py = np.arange(out_h) * fh // out_h
    px = np.arange(out_w) * fw // out_w
    v = field[py[:, None], px[None, :]].astype(np.float32)
    t = (v - np.float32(lo)) / np.float32(max(hi - lo, 1e-6))
    stops = len(PALETTE)
    x = np.clip(t, 0, 1) * np.float32(stops - 1)
    i = np.minimum(np.floor(x).astype(np.int64), stops - 2)
    f = (x - i)[..., None]
    colour = PALETTE[i] * (1 - f) + PALETTE[i + 1] * f
    return np.round(np.clip(colour, 0, 1) * 255).astype(np.uint8)
