"""The demo's engine products: every kernel of ``demo/assets`` runs as one, in one submission.

In dispatch order (registration order is dispatch order):

* ``heat_step``  one diffusion step: ``ReadbackPolicy.NONE`` over a ``tiles`` work list (one
  invocation a tile), reading the ``heat`` and ``source`` mirrors and writing the ``heat_next``
  mirror (a ``read_write`` binding bound to a field). The game invalidates it every frame.
* ``heat_copy``  the ping-pong's second half: ``heat_next`` back into ``heat`` (a stencil
  cannot write the buffer its neighbours read), so every later kernel reads the new heat.
* ``colorize``   heat -> the storage texture the window presents (``NONE``, one invocation a
  tile, each storing its block of pixels); the palette table and the texture come in ``inputs=``.
* ``summary``, ``hotspots``  ``ReadbackPolicy.SUMMARY`` over ``heat``: one record per chunk,
  read back and revalidated, for the overlay.

They are ordinary assets, so editing one live re-registers its product under a new
generation (a broken save keeps the last good kernel). The CPU fallbacks of ``summary`` and
``hotspots`` reproduce the kernels bit for bit (same f32 operations, same order); the three
``NONE`` products write GPU state only and have none (the heat lives on the GPU).

:class:`HeatFigures` keeps the latest record of every chunk and reduces them to the numbers
the overlay shows. It reads records by lane and tolerates any record width, so a layout edit
that widens a record (README: "a layout edit") keeps working and shows the new lanes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..engine import ProductWork
from ..gpu.descriptors import ReadbackPolicy

__all__ = [
    "HEAT_PRODUCTS",
    "HOT_THRESHOLD",
    "PRODUCTS",
    "STEP_PARAMS",
    "HeatFigures",
    "hotspots_fallback",
    "register_colorize",
    "register_products",
    "summary_fallback",
]

HOT_THRESHOLD = 0.6  # heat above which a tile counts as a hotspot
STEP_PARAMS = {"rate": 0.6, "cooling": 0.004}  # the diffusion step's own params
HEAT_PRODUCTS = ("heat_step", "heat_copy", "colorize")  # the GPU-state products, dispatch order
PRODUCTS = (*HEAT_PRODUCTS, "summary", "hotspots")  # every demo product, dispatch order


def _chunks(world: Any, field_name: str, keys: tuple[int, ...]) -> np.ndarray:
    """(len(keys), tiles) f32 values of ``field_name`` for ``keys``, in work-list order."""
    slots = np.fromiter((world.slot(k) for k in keys), dtype=np.intp, count=len(keys))
    return world.mirror(field_name).reshape(world.max_chunks, -1)[slots].astype(np.float32)


def summary_fallback(world: Any, work: ProductWork) -> np.ndarray:
    """``summary.computeShader`` on the CPU: (max, mean) f32 per chunk."""
    out = np.zeros((len(work.keys), 2), np.float32)
    if work.keys:
        values = _chunks(world, work.field("heat"), work.keys)
        total = np.cumsum(values, axis=1, dtype=np.float32)[:, -1]  # sequential f32 adds, like the loop
        out[:, 0] = values.max(axis=1)
        out[:, 1] = total * np.float32(work.params["inv_tile_count"])
    return out


def hotspots_fallback(world: Any, work: ProductWork) -> np.ndarray:
    """``hotspots.computeShader`` on the CPU: (tiles above threshold, hottest tile) u32 per chunk."""
    out = np.zeros((len(work.keys), 2), np.uint32)
    if work.keys:
        values = _chunks(world, work.field("heat"), work.keys)
        out[:, 0] = (values > np.float32(work.params["threshold"])).sum(axis=1)
        out[:, 1] = values.argmax(axis=1)  # first maximum, as the kernel's strict '>' keeps it
    return out


@dataclass
class HeatFigures:
    """The latest per-chunk records of both products, and what the overlay shows of them."""

    summary: dict[int, np.ndarray] = field(default_factory=dict)
    hotspots: dict[int, np.ndarray] = field(default_factory=dict)
    applied: int = 0

    def apply_summary(self, result: Any) -> None:
        for key, record in zip(result.keys, np.asarray(result.records)):
            self.summary[key] = np.atleast_1d(np.array(record, dtype=np.float32))
        self.applied += 1

    def apply_hotspots(self, result: Any) -> None:
        for key, record in zip(result.keys, np.asarray(result.records)):
            self.hotspots[key] = np.atleast_1d(np.array(record))
        self.applied += 1

    def _lanes(self, records: dict[int, np.ndarray]) -> np.ndarray:
        """(chunks, lanes) of the records (a layout edit may change the width mid-run: the
        narrowest common width is used until every chunk has the new one)."""
        if not records:
            return np.zeros((0, 0))
        width = min(r.size for r in records.values())
        return np.stack([r[:width] for r in records.values()])

    @property
    def heat_max(self) -> float:
        s = self._lanes(self.summary)
        return float(s[:, 0].max()) if s.size else 0.0

    @property
    def heat_mean(self) -> float:
        s = self._lanes(self.summary)
        return float(s[:, 1].mean()) if s.shape[1:] and s.shape[1] > 1 else 0.0

    @property
    def hot_tiles(self) -> int:
        h = self._lanes(self.hotspots)
        return int(h[:, 0].sum()) if h.size else 0

    @property
    def hottest_chunk(self) -> int | None:
        """The chunk with the hottest tile (from ``summary``), or None before any record."""
        if not self.summary:
            return None
        return max(self.summary, key=lambda k: float(self.summary[k][0]))

    def figures(self) -> dict[str, Any]:
        """What the overlay and the JSON-lines log show."""
        s = self._lanes(self.summary)
        out: dict[str, Any] = {"heat_max": self.heat_max, "heat_mean": self.heat_mean, "hot_tiles": self.hot_tiles, "hottest_chunk": self.hottest_chunk}
        if s.ndim == 2 and s.shape[1] > 2:  # lanes a layout edit added, shown as they are
            out["summary_extra"] = [float(x) for x in s[:, 2:].max(axis=0)]
        return out


def register_products(
    engine: Any,
    figures: HeatFigures,
    *,
    grid: tuple[int, int],
    chunk: tuple[int, int],
    palette: Any,
    pixels: Any,
    pixel_order: str = "rgba",
    stencil: str = "cross",
) -> dict[str, Any]:
    """Register the demo's products in dispatch order (:data:`PRODUCTS`); answers key -> handle.

    Args:
        grid: chunks per row and column (chunk slot s is chunk ``(s % grid_w, s // grid_w)``).
        chunk: tiles per chunk row and column.
        palette: the colour table (``abi.table``, column ``color``) ``colorize`` reads.
        pixels: the storage texture ``colorize`` writes (its size is the picture's).
        pixel_order: ``rgba`` or ``bgra``, the texture's channel order (``colorize``'s ``ORDER``).
        stencil: ``heat_step``'s ``STENCIL`` (``cross`` or ``box``).
    """
    grid_params = {"grid_w": grid[0], "chunk_w": chunk[0], "chunk_h": chunk[1]}
    none = ReadbackPolicy.NONE
    handles = {
        "heat_step": engine.register_product(
            "heat_step.computeShader",
            key="heat_step",
            spec={"STENCIL": stencil},
            fields={"heat": "heat", "source": "source", "next": "heat_next"},
            policy=none,
            params={**grid_params, "grid_h": grid[1], **STEP_PARAMS},
        ),
        "heat_copy": engine.register_product("heat_copy.computeShader", key="heat_copy", fields={"next": "heat_next", "heat": "heat"}, policy=none),
        "colorize": register_colorize(engine, grid=grid, chunk=chunk, palette=palette, pixels=pixels, pixel_order=pixel_order),
    }
    handles["summary"] = engine.register_product(
        "summary.computeShader",
        key="summary",
        fields={"heat": "heat"},
        policy=ReadbackPolicy.SUMMARY,
        apply=figures.apply_summary,
        cpu_fallback=summary_fallback,
    )
    handles["hotspots"] = engine.register_product(
        "hotspots.computeShader",
        key="hotspots",
        fields={"heat": "heat"},
        policy=ReadbackPolicy.SUMMARY,
        apply=figures.apply_hotspots,
        cpu_fallback=hotspots_fallback,
        params={"threshold": HOT_THRESHOLD},
    )
    # The kernels write these mirrors: uploads send only chunks the world changed (a reset),
    # never clean ones between them (gap coalescing would overwrite the GPU's heat).
    for name in ("heat", "heat_next"):
        engine.field_buffer(name, kernel_writes=True)
    return handles


def register_colorize(
    engine: Any, *, grid: tuple[int, int], chunk: tuple[int, int], palette: Any, pixels: Any, pixel_order: str = "rgba", field: str = "heat"
) -> Any:
    """Register ``colorize`` over world field ``field``: a ``NONE`` product that stores the
    field's colours into the storage texture ``pixels`` (arguments as :func:`register_products`)."""
    return engine.register_product(
        "colorize.computeShader",
        key="colorize",
        spec={"ORDER": pixel_order},
        columns={"palette": ["color"]},
        fields={"field": field},
        policy=ReadbackPolicy.NONE,
        params={"grid_w": grid[0], "chunk_w": chunk[0], "chunk_h": chunk[1], "out_w": int(pixels.size[0]), "out_h": int(pixels.size[1]), "lo": 0.0, "hi": 1.0},
        inputs={"palette": palette, "pixels": pixels},
    )
