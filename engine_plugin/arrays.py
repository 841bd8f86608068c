"""Host arrays in the ABI's storage layout: dtype kinds and cast-by-value preparation (numpy only)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .lowering.types import ValueType

__all__ = ["dtype_kind", "prepare_array"]


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
