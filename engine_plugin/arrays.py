"""Host arrays in the ABI's storage layout: dtype kinds and cast-by-value preparation (numpy only)."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .formats import masked_refusal
from .lowering.casts import cast_refusal
from .lowering.structs import StructType
from .lowering.types import ValueType

__all__ = ["dtype_kind", "object_refusal", "prepare_array"]


def dtype_kind(dtype: np.dtype) -> str | None:
    """'f32', 'i32' or 'u32' for a numeric dtype (by value), None for anything else."""
    if dtype.kind == "f" and dtype.itemsize in (2, 4, 8):
        return "f32"
    if dtype.kind == "i":
        return "i32"
    if dtype.kind in "ub":
        return "u32"
    return None


def object_refusal(values: Any, arr: np.ndarray) -> str | None:
    """Why ``values`` (read by numpy as ``arr``) is no data: one object numpy cannot read (a
    Run, a set, a sampler, a handle) became a 0-d object array (review helpers 235, 244:
    "dtype object is not numeric", "not ()"); None for anything else."""
    if arr.dtype.kind == "O" and arr.ndim == 0:
        return f"takes an array of numbers, not a {type(values).__name__} object"
    return None


def prepare_array(values: Any, vt: ValueType | StructType, bits: bool) -> tuple[np.ndarray | None, str]:
    """A contiguous little-endian array of ``vt``'s words for upload, and its element count.

    Cast by value when the kinds differ; with ``bits`` the words go up as they are (4-byte
    dtypes only). Answers (None, reason) when the array cannot serve this binding.
    """
    masked = masked_refusal(values)
    if masked is not None:
        return None, masked
    if isinstance(vt, StructType):
        return vt.pack(values)
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError):  # a ragged list, say
        return None, "not a rectangular array of numbers"
    if arr.dtype.kind not in "fiub":
        return None, object_refusal(values, arr) or f"dtype {arr.dtype} is not numeric"
    # Any shape whose elements are whole (an image (h, w, 4) for a vec4 binding, a grid (h, w)
    # for a scalar one): the elements go up in C order, row-major like zero_index.
    if vt.lanes > 1:
        if arr.ndim == 0:
            return None, f"one value is not a {vt.wgsl} element ({vt.lanes} values)"
        if arr.ndim >= 2 and arr.shape[-1] != vt.lanes:
            return None, f"shape {arr.shape} has {arr.shape[-1]} lanes in its last axis, the element {vt.wgsl} has {vt.lanes}"
        if arr.ndim == 1 and arr.size % vt.lanes:
            return None, f"a flat array of {arr.size} values is not a whole number of {vt.wgsl} elements"
    if bits:
        if arr.dtype.itemsize != 4:
            return None, f"bits: true takes raw 4-byte words; dtype {arr.dtype} has {arr.dtype.itemsize}-byte items"
        if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and sys.byteorder == "big"):
            arr = arr.astype(arr.dtype.newbyteorder("<"))  # the same values as little-endian words
        out = np.ascontiguousarray(arr).view("<u4").reshape(-1)
    else:
        target = np.dtype(vt.numpy_dtype)
        if arr.dtype != target:
            reason = cast_refusal(arr, target)
            if reason:
                return None, reason
        out = np.ascontiguousarray(arr, dtype=target).reshape(-1) if arr.dtype != target else np.ascontiguousarray(arr).reshape(-1)
    return out, str(out.size // vt.lanes)
