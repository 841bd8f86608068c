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
    floats = values.dtype.kind == "f"
    as_f32 = _flush(values) if floats else values.astype(np.float32)
    # Sequential f32 adds from +0.0, like the kernel's loop (a chunk of -0.0 sums to +0.0);
    # inf + -inf is NaN there too, without numpy's warning.
    start = np.zeros((len(work.keys), 1), dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        partials = np.cumsum(np.concatenate([start, as_f32], axis=1), axis=1, dtype=np.float32)
        total = partials[:, -1].copy()
        # The kernel makes every zero or subnormal running sum +0.0: rows where one occurred
        # (rare: a partial sum below 2**-126) are summed again, add by add, with that flush.
        words = partials.view(np.uint32)
        again = np.flatnonzero((((words & _EXPONENT) == 0) & (words != 0)).any(axis=1))
        if again.size:
            rows, sums = as_f32[again], np.zeros(again.size, np.float32)
            for t in range(rows.shape[1]):
                sums = _flush(sums + rows[:, t])
            total[again] = sums
        mean = _flush(total * np.float32(work.params["inv_tile_count"]))
    # The kernel's rule, which holds on every adapter: zeros and subnormals read as +0.0, NaN
    # tiles are skipped, a tie keeps the earlier tile, a chunk of NaN only keeps its first tile's bits.
    if floats:
        lo, hi = _first_extreme(as_f32, True), _first_extreme(as_f32, False)
    else:
        lo, hi = values.min(axis=1), values.max(axis=1)
    out[:, 0] = lo.astype(np.float32)
    out[:, 1] = hi.astype(np.float32)
    out[:, 2] = _quiet(mean)
    out[:, 3] = _quiet(total)
    return out


_EXPONENT = np.uint32(0x7F800000)


def _flush(values: np.ndarray) -> np.ndarray:
    """f32 ``values`` with every zero or subnormal as +0.0: the kernels' rule, by bits, for the
    tiles, operands and thresholds they read and the sums and means they write (WGSL lets an
    adapter flush subnormals: the H200 does, lavapipe and numpy do not)."""
    words = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    return np.where((words & _EXPONENT) == 0, np.uint32(0), words).view(np.float32)


def _first_extreme(values: np.ndarray, smallest: bool) -> np.ndarray:
    """Per row, the first non-NaN tile equal to the row's smallest (or largest) non-NaN value;
    a row of NaN only answers its first tile, bits and all. (NaNs are masked out by
    ``np.isnan`` rather than left to np.fmin, which let a signalling NaN through.)"""
    nan = np.isnan(values)
    with np.errstate(invalid="ignore"):
        if smallest:
            extreme = np.where(nan, np.inf, values).min(axis=1)
        else:
            extreme = np.where(nan, -np.inf, values).max(axis=1)
        first = ((values == extreme[:, None]) & ~nan).argmax(axis=1)  # 0 where none: NaN only
    return values[np.arange(len(values)), first]


_QUIET_NAN = np.array(0x7FC00000, dtype=np.uint32).view(np.float32)


def _quiet(values: np.ndarray) -> np.ndarray:
    """``values`` with every NaN replaced by the quiet NaN 0x7fc00000, as the kernels write it
    (a NaN's bits from arithmetic differ between adapters and CPUs)."""
    return np.where(np.isnan(values), _QUIET_NAN, values).astype(np.float32)


def count_above(world: Any, work: ProductWork) -> np.ndarray:
    """``count_above.computeShader``: tiles above ``threshold`` per chunk, u32."""
    if not work.keys:
        return np.zeros(0, dtype=np.uint32)
    values = _chunks(world, work.field("src"), work.keys)
    threshold = _flush(np.array([work.params["threshold"]], np.float32))[0]
    return (_flush(values) > threshold).sum(axis=1).astype(np.uint32)  # zeros and subnormals as +0.0, as the kernel


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
    a, b = _flush(a), _flush(b)  # zero and subnormal operands as +0.0, as the kernel
    with np.errstate(invalid="ignore", over="ignore"):  # inf + -inf is NaN, as on the GPU
        return _combine(op, a, b)


def _combine(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # The kernel's rule: a NaN operand of min/max yields the other, a tie keeps a (0.0 against
    # -0.0), a zero or subnormal sum is +0.0, and a NaN result is the quiet NaN 0x7fc00000.
    if op == "min":
        return _quiet(np.where((b < a) | np.isnan(a), b, a))
    if op == "max":
        return _quiet(np.where((b > a) | np.isnan(a), b, a))
    return _quiet(_flush(a + b))
