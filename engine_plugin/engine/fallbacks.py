"""CPU fallbacks of the engine's own product kernels (``engine_plugin/kernels/engine``), bit for bit.

Each is ``fn(world, work) -> records`` (see :class:`~engine_plugin.engine.ProductWork`) and
reproduces its kernel exactly: the same f32 operations in the same order (a sequential
``cumsum`` is a sequential loop of f32 adds; the mean is one f32 multiply by the same rounded
``inv_tile_count``), so a GPU result and a CPU result of the same content are equal bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .contract import ProductWork
from .selection import linear_index

__all__ = ["combine", "count_above", "summary"]


def _chunks(world: Any, field: str, keys: tuple[int, ...]) -> np.ndarray:
    """(len(keys), tiles) values of ``field`` for ``keys``, in work-list order."""
    mirror = world.mirror(field)
    slots = np.fromiter((world.slot(k) for k in keys), dtype=np.intp, count=len(keys))
    return mirror.reshape(world.max_chunks, -1)[slots]


def summary(world: Any, work: ProductWork) -> np.ndarray:
    """``summary.computeShader``: (min, max, mean, sum) as f32 per chunk of ``work.keys``."""
    out = np.zeros((len(work.keys), 4), dtype=np.float32)
    if not work.keys:
        return out
    values = _chunks(world, work.field("src"), work.keys)
    as_f32 = values.astype(np.float32)
    # Sequential f32 adds from +0.0, like the kernel's loop (a chunk of -0.0 sums to +0.0);
    # inf + -inf is NaN there too, without numpy's warning.
    start = np.zeros((len(work.keys), 1), dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        total = np.cumsum(np.concatenate([start, as_f32], axis=1), axis=1, dtype=np.float32)[:, -1]
    # A NaN tile is skipped, as the GPU's min/max do (IEEE minNum on lavapipe and the H200;
    # numpy's min made the whole chunk's min NaN), and a chunk of NaN only is NaN. Otherwise
    # numpy's min and max, which pick between 0.0 and -0.0 as the kernel's loop does.
    nan = np.isnan(values) if values.dtype.kind == "f" else None
    if nan is not None and nan.any():
        lo = np.where(nan, np.inf, values).min(axis=1)
        hi = np.where(nan, -np.inf, values).max(axis=1)
        only_nan = nan.all(axis=1)
        lo[only_nan] = hi[only_nan] = values[only_nan, 0]  # the kernel keeps its first NaN's bits
    else:
        lo, hi = values.min(axis=1), values.max(axis=1)
    out[:, 0] = lo.astype(np.float32)
    out[:, 1] = hi.astype(np.float32)
    out[:, 2] = total * np.float32(work.params["inv_tile_count"])
    out[:, 3] = total
    return out


def count_above(world: Any, work: ProductWork) -> np.ndarray:
    """``count_above.computeShader``: tiles above ``threshold`` per chunk, u32."""
    if not work.keys:
        return np.zeros(0, dtype=np.uint32)
    values = _chunks(world, work.field("src"), work.keys)
    return (values > np.float32(work.params["threshold"])).sum(axis=1).astype(np.uint32)


def combine(world: Any, work: ProductWork) -> np.ndarray:
    """``combine.computeShader``: ``a OP b`` per tile of the work list (f32)."""
    op = work.spec.get("OP", "add")
    shape = world.chunk_shape
    if work.tiles:
        slots = np.array([world.slot(k) for k, _ in work.tiles], dtype=np.intp)
        lin = np.array([linear_index(t, shape) for _, t in work.tiles], dtype=np.intp)
        a = world.mirror(work.field("a")).reshape(world.max_chunks, -1)[slots, lin]
        b = world.mirror(work.field("b")).reshape(world.max_chunks, -1)[slots, lin]
    else:  # FULL_FIELD: every tile of each chunk
        a = _chunks(world, work.field("a"), work.keys).reshape(-1)
        b = _chunks(world, work.field("b"), work.keys).reshape(-1)
    a, b = a.astype(np.float32), b.astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):  # inf + -inf is NaN, as on the GPU
        return _combine(op, a, b)


def _combine(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if op == "min":
        return np.fmin(a, b)  # a NaN operand yields the other, as the GPU's min does
    if op == "max":
        return np.fmax(a, b)
    return a + b
