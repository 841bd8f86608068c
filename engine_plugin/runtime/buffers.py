"""Buffer pool and host-side array preparation (dtype, shape, cast by value).

Outputs come from a per-device pool keyed by (size class, usage): a game that runs the same
kernel every frame allocates nothing after the first frames. Size classes step by a quarter
power of two so a dispatch whose ``n`` wobbles still hits the pool, wasting at most 25%.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

import numpy as np
import wgpu

from ..gpu.device import DeviceContext
from ..lowering.types import ValueType

__all__ = ["BufferPool", "size_class", "STORAGE_USAGE", "prepare_array", "dtype_kind"]

STORAGE_USAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
_MIN_BYTES = 256


def size_class(nbytes: int) -> int:
    """The pooled size for ``nbytes``: at least 256, then steps of a quarter power of two."""
    if nbytes <= _MIN_BYTES:
        return _MIN_BYTES
    top = 1 << (nbytes - 1).bit_length()  # next power of two
    step = top // 8  # quarters of the lower half: top/2 + k*top/8
    return min(top, ((nbytes + step - 1) // step) * step)


class BufferPool:
    """Free lists of storage buffers per size class on one device; stats for tests and benches."""

    def __init__(self, ctx: DeviceContext):
        self.ctx = ctx
        self._free: dict[tuple[int, int], list[Any]] = defaultdict(list)
        self._lock = threading.Lock()
        self.created = 0
        self.reused = 0

    def take(self, nbytes: int, usage: int = STORAGE_USAGE, label: str = "engine_plugin") -> Any:
        size = size_class(nbytes)
        with self._lock:
            free = self._free.get((size, usage))
            if free:
                self.reused += 1
                return free.pop()
            self.created += 1
        return self.ctx.device.create_buffer(size=size, usage=usage, label=label)

    def give(self, buffer: Any, usage: int = STORAGE_USAGE) -> None:
        """Return a buffer; GPU work already submitted that uses it still runs in queue order."""
        if self.ctx.lost:
            return
        with self._lock:
            self._free[(buffer.size, usage)].append(buffer)

    @property
    def free_count(self) -> int:
        return sum(len(v) for v in self._free.values())


def pool_for(ctx: DeviceContext) -> BufferPool:
    cache = ctx.cache("runtime")
    pool = cache.get("pool")
    if pool is None:
        pool = cache["pool"] = BufferPool(ctx)
    return pool


def dtype_kind(dtype: np.dtype) -> str | None:
    """'f32', 'i32' or 'u32' for a numeric dtype (by value), None for anything else."""
    if dtype.kind == "f" and dtype.itemsize in (2, 4, 8):
        return "f32"
    if dtype.kind == "i":
        return "i32"
    if dtype.kind in "ub":
        return "u32"
    return None


def prepare_array(values: Any, vt: ValueType, bits: bool) -> tuple[np.ndarray | None, str]:
    """A contiguous little-endian array of ``vt``'s words for upload, and its element count.

    Cast by value when the kinds differ; with ``bits`` the words go up as they are (4-byte
    dtypes only). Answers (None, reason) when the array cannot serve this binding.
    """
    arr = np.asarray(values)
    if arr.dtype.kind not in "fiub":
        return None, f"dtype {arr.dtype} is not numeric"
    if vt.lanes > 1:
        if arr.ndim == 2 and arr.shape[1] != vt.lanes:
            return None, f"shape {arr.shape} has {arr.shape[1]} lanes, the element {vt.wgsl} has {vt.lanes}"
        if arr.ndim == 1 and arr.size % vt.lanes:
            return None, f"a flat array of {arr.size} values is not a whole number of {vt.wgsl} elements"
        if arr.ndim > 2:
            return None, f"shape {arr.shape}; expected (count, {vt.lanes}) or flat"
    elif arr.ndim > 1 and not (arr.ndim == 2 and arr.shape[1] == 1):
        return None, f"shape {arr.shape}; a {vt.wgsl} binding takes a 1-D array"
    if bits:
        if arr.dtype.itemsize != 4:
            return None, f"bits: true takes raw 4-byte words; dtype {arr.dtype} has {arr.dtype.itemsize}-byte items"
        out = np.ascontiguousarray(arr).view("<u4").reshape(-1)
    else:
        target = np.dtype(vt.numpy_dtype)
        out = np.ascontiguousarray(arr, dtype=target).reshape(-1) if arr.dtype != target else np.ascontiguousarray(arr).reshape(-1)
    return out, str(out.size // vt.lanes)
