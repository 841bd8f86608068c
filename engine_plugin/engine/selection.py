"""Tile selections of ``SELECTED_TILES`` / ``SELECTED_PATH`` products: normalising, path tiles."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .contract import ProductError

__all__ = ["Tile", "normalize_tiles", "path_tiles", "linear_index"]

Tile = tuple[int, tuple[int, ...]]


def _tile(entry: Any, shape: tuple[int, ...]) -> Tile:
    """``(key, (y, x))``, ``(key, y, x)`` or ``(key, linear)`` -> ``(key, (y, x))``, checked."""
    try:
        key, *rest = entry
    except (TypeError, ValueError):
        raise ProductError(f"a selected tile is (chunk_key, (y, x)), not {entry!r}") from None
    if len(rest) == 1 and isinstance(rest[0], (tuple, list, np.ndarray)):
        rest = list(rest[0])
    if len(rest) == 1 and len(shape) > 1:
        lin = rest[0]
        if not isinstance(lin, (int, np.integer)) or not 0 <= lin < int(np.prod(shape)):
            raise ProductError(f"tile {entry!r}: a linear tile index is 0..{int(np.prod(shape)) - 1}")
        rest = list(np.unravel_index(int(lin), shape))
    if not isinstance(key, (int, np.integer)) or isinstance(key, bool):
        raise ProductError(f"tile {entry!r}: chunk keys are ints")
    if len(rest) != len(shape) or not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) and 0 <= i < n for i, n in zip(rest, shape)):
        raise ProductError(f"tile {entry!r} is outside the chunk shape {shape}")
    return int(key), tuple(int(i) for i in rest)


def normalize_tiles(tiles: Iterable[Any], shape: tuple[int, ...]) -> tuple[Tile, ...]:
    """A selection as ``(key, tile)`` pairs, duplicates dropped, first-seen order kept."""
    return tuple(dict.fromkeys(_tile(t, shape) for t in tiles))


def path_tiles(waypoints: Sequence[Any], shape: tuple[int, ...]) -> tuple[Tile, ...]:
    """The tiles along a path: consecutive waypoints in the same chunk are joined by a straight
    line of tiles (a DDA over the longest axis, both ends included); moving to another chunk
    jumps. Order is the path's; a tile repeated back to back appears once."""
    points = [_tile(w, shape) for w in waypoints]
    out: list[Tile] = []
    for i, (key, tile) in enumerate(points):
        if i and points[i - 1][0] == key:
            a = np.array(points[i - 1][1], dtype=np.int64)
            b = np.array(tile, dtype=np.int64)
            steps = int(np.abs(b - a).max())
            for s in range(1, steps + 1):
                # round-half-away from the start, in integers: no float drift between platforms
                num = (b - a) * s
                step = np.where(num >= 0, (2 * num + steps) // (2 * steps), -((-2 * num + steps) // (2 * steps)))
                t = (key, tuple(int(v) for v in a + step))
                if not out or out[-1] != t:
                    out.append(t)
        elif not out or out[-1] != (key, tile):
            out.append((key, tile))
    return tuple(out)


def linear_index(tile: tuple[int, ...], shape: tuple[int, ...]) -> int:
    """The C-order index of ``tile`` inside a chunk."""
    index = 0
    for i, n in zip(tile, shape):
        index = index * n + i
    return index
