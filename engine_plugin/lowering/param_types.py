"""Types a param may take: any host-shareable type WGSL allows in a uniform buffer.

Scalars (``u32 i32 f32``), vectors of them, ``f32`` matrices ``matCxR<f32>`` and fixed arrays
``array<T, N>`` of any of those (nested too), laid out by WGSL's uniform rules: a vec3 aligns
to 16, a matrix is C columns of vecR (each column 8 or 16 bytes apart), and an array's
element stride is rounded up to a multiple of 16 (WGSL requires it in uniform buffers, so an
``array<f32, 8>`` is refused with the fix: ``array<vec4<f32>, 2>``). Pure Python; packing
from numpy lives here too, so the host and the lowering share one layout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..formats import masked_refusal
from .casts import cast_refusal, exact_integer_bound
from .types import NUMPY_DTYPE, parse_value_type

__all__ = ["ParamType", "parse_param_type", "ParamTypeError", "split_array_type"]

_MAT_RE = re.compile(r"^mat([234])x([234])\s*<\s*f32\s*>$|^mat([234])x([234])f$")
_RANGE = {"i32": (-(2**31), 2**31 - 1), "u32": (0, 2**32 - 1)}


class ParamTypeError(ValueError):
    """A type WGSL cannot hold in a uniform buffer, with the reason and a fix."""


def _round(n: int, k: int) -> int:
    return -(-n // k) * k


@dataclass(frozen=True)
class ParamType:
    """``kind``: scalar, vector, matrix or array; ``element`` is an array's element type."""

    kind: str
    scalar: str
    lanes: int = 1  # vector lanes, or a matrix's rows
    cols: int = 1  # a matrix's columns
    count: int = 0  # an array's length
    element: "ParamType | None" = None

    @property
    def wgsl(self) -> str:
        if self.kind == "scalar":
            return self.scalar
        if self.kind == "vector":
            return f"vec{self.lanes}<{self.scalar}>"
        if self.kind == "matrix":
            return f"mat{self.cols}x{self.lanes}<f32>"
        return f"array<{self.element.wgsl}, {self.count}>"  # type: ignore[union-attr]

    @property
    def uniform_align(self) -> int:
        if self.kind in ("scalar", "vector"):
            return {1: 4, 2: 8, 3: 16, 4: 16}[self.lanes]
        if self.kind == "matrix":
            return 8 if self.lanes == 2 else 16
        return _round(self.element.uniform_align, 16)  # type: ignore[union-attr]

    @property
    def uniform_size(self) -> int:
        if self.kind in ("scalar", "vector"):
            return 4 * self.lanes
        if self.kind == "matrix":
            return self.cols * self._column_stride
        return self.count * self.stride

    @property
    def _column_stride(self) -> int:
        return 8 if self.lanes == 2 else 16

    @property
    def stride(self) -> int:
        """An array's element stride in a uniform buffer."""
        e = self.element
        return _round(_round(e.uniform_size, e.uniform_align), 16)  # type: ignore[union-attr]

    @property
    def shape(self) -> tuple[int, ...]:
        """The numpy shape of a value (a matrix is (columns, rows): WGSL's column order)."""
        if self.kind == "scalar":
            return ()
        if self.kind == "vector":
            return (self.lanes,)
        if self.kind == "matrix":
            return (self.cols, self.lanes)
        return (self.count, *self.element.shape)  # type: ignore[union-attr]

    @property
    def _holds_matrix(self) -> bool:
        return self.kind == "matrix" or (self.kind == "array" and self.element._holds_matrix)  # type: ignore[union-attr]

    @property
    def simple(self) -> bool:
        return self.kind in ("scalar", "vector")

    def pack_into(self, buf: bytearray, offset: int, value: Any) -> None:
        """Write ``value`` (numbers, nested lists or a numpy array of :attr:`shape`)."""
        arr = self._as_array(value)
        if arr.shape != self.shape and arr.ndim <= 1 and arr.size == int(np.prod(self.shape, dtype=np.int64)):
            arr = arr.reshape(self.shape)  # flat numbers, in WGSL's order (a matrix column by column)
        self._pack(buf, offset, arr)

    def _pack(self, buf: bytearray, offset: int, arr: np.ndarray) -> None:
        if self.kind in ("scalar", "vector"):
            words = np.asarray(arr, dtype=NUMPY_DTYPE[self.scalar]).reshape(-1)
            buf[offset : offset + words.nbytes] = words.tobytes()
        elif self.kind == "matrix":
            for c in range(self.cols):
                col = np.asarray(arr[c], dtype="<f4")
                at = offset + c * self._column_stride
                buf[at : at + col.nbytes] = col.tobytes()
        else:
            for i in range(self.count):
                self.element._pack(buf, offset + i * self.stride, arr[i])  # type: ignore[union-attr]

    def _as_array(self, value: Any) -> np.ndarray:
        """``value`` as an array. A list of an f32 type is made f32 element by element: as one
        array numpy takes a list mixing floats with np.float32 through float64, which quiets a
        signalling NaN a vector param keeps (review helper 215)."""
        if self.scalar == "f32" and isinstance(value, (list, tuple)) and not _holds_bool(value):
            try:
                with np.errstate(over="ignore", under="ignore", invalid="ignore"):  # check() says why first
                    return np.array(value, dtype=np.float32)
            except (TypeError, ValueError, OverflowError):
                pass  # ragged, not numbers, or an int past float range: np.asarray says what it is
        return np.asarray(value)

    def check(self, value: Any) -> str | None:
        """Why ``value`` cannot be packed as this type, or None."""
        masked = masked_refusal(value)
        if masked is not None:
            return f"takes numbers of shape {self.shape}, not {masked}"
        try:
            with np.errstate(invalid="ignore"):  # a list's signalling NaN, quieted in this copy only
                arr = np.asarray(value)
        except Exception:
            return f"takes numbers of shape {self.shape}"
        if self.scalar == "f32" and isinstance(value, (list, tuple)):
            # An integer an f32 rounds, among floats: numpy made the list float64 first, whose
            # check lets it through (review helper 215: [[16777217, 0.5], ...] ran as 16777216).
            inexact = _inexact_f32_integer(value)
            if inexact is not None:
                return f"is {self.wgsl}: {inexact}"
        if arr.dtype.kind not in "fiub" or arr.dtype.kind == "b" or _holds_bool(value):
            return f"takes numbers, not {value!r}"
        # Flat numbers are taken in WGSL's order; a value with axes has this type's shape. A
        # row-major (rows, columns) matrix of the right count was packed by count: silently
        # transposed numbers (review helper 109).
        if arr.shape != self.shape and (arr.ndim > 1 or arr.size != int(np.prod(self.shape, dtype=np.int64))):
            hint = ": a matrix is (columns, rows), pass M.T for a row-major one" if self._holds_matrix else ""
            return f"takes {int(np.prod(self.shape, dtype=np.int64))} numbers (shape {self.shape}), not shape {arr.shape}{hint}"
        if self.scalar in _RANGE and arr.size:
            if arr.dtype.kind == "f" and not np.all(np.mod(arr, 1) == 0):
                return f"is {self.wgsl}: pass integers"
            lo, hi = _RANGE[self.scalar]
            if arr.min().item() < lo or arr.max().item() > hi:  # as Python numbers (float32 would round hi)
                return f"is {self.wgsl}: a value is out of range [{lo}, {hi}]"
        if self.scalar == "f32" and arr.size and f32_overflow(arr):
            return f"is {self.wgsl}: a finite value is past f32's range (+-{F32_MAX:.7g}; it would be inf)"
        if self.scalar == "f32" and arr.size and arr.dtype != np.float32:
            # What a scalar or vector param and a host array refuse: a value below f32's range
            # (it would be 0) or an integer an f32 would round (review helper 182).
            reason = cast_refusal(arr, np.dtype(np.float32))
            if reason is not None:
                return f"is {self.wgsl}: {reason}"
        return None


def _inexact_f32_integer(value: Any) -> str | None:
    """Why an integer in the (nested) list ``value`` is not exactly an f32, or None."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, np.ndarray) and item.dtype.kind in "iu":
            stack.extend(item.reshape(-1).tolist())  # an integer array among floats: float64 as one array
        elif isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
            number = int(item)
            if abs(number) > _EXACT_F32_INT and abs(number) <= F32_MAX and int(np.float32(number)) != number:
                return f"the integer {number} is not exactly an f32 (it would be {int(np.float32(number))}); pass a float if rounding is what you want"
    return None


def _holds_bool(value: Any) -> bool:
    """Whether a list or tuple (nested) holds a bool: numpy makes ``[[True, 2]]`` integers,
    which a scalar or vector param refuses (review helper 136)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, (bool, np.bool_)):
            return True
    return False


F32_MAX = float(np.finfo(np.float32).max)
_EXACT_F32_INT = exact_integer_bound(np.dtype(np.float32))


def f32_overflow(values: Any) -> bool:
    """Whether a finite value of ``values`` becomes inf as f32 (what packing it would raise, or
    silently make inf)."""
    arr = np.asarray(values)
    if arr.dtype.kind in "iu":
        return bool(np.any(np.abs(arr.astype(np.float64)) > F32_MAX))
    if arr.dtype.kind != "f" or arr.dtype.itemsize <= 4:
        return False
    with np.errstate(over="ignore", invalid="ignore"):  # converted as given (a long double too)
        return bool(np.any(np.isfinite(arr) & np.isinf(arr.astype(np.float32))))


MAX_PARAMS_BYTES = 65536  # WebGPU's default maxUniformBufferBindingSize, which every adapter offers


def split_array_type(inner: str) -> tuple[str, str] | None:
    """``vec4<f32>, 6`` (the inside of ``array<...>``) -> (element, length); None without a length."""
    depth = 0
    for i in range(len(inner) - 1, -1, -1):
        c = inner[i]
        if c in ">)":
            depth += 1
        elif c in "<(":
            depth -= 1
        elif c == "," and depth == 0:
            return inner[:i].strip(), inner[i + 1 :].strip()
    return None


def parse_param_type(text: str) -> ParamType:
    """A param type from its WGSL text.

    Raises:
        ParamTypeError: not a type a uniform buffer can hold; the message says why and how.
    """
    t = " ".join(str(text).split())
    vt = parse_value_type(t)
    if vt is not None:
        return ParamType("scalar" if vt.lanes == 1 else "vector", vt.scalar, vt.lanes)
    m = _MAT_RE.match(t)
    if m:
        cols, rows = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        return ParamType("matrix", "f32", int(rows), int(cols))
    if t.startswith("array") and t[5:].lstrip().startswith("<") and t.endswith(">"):
        inner = t[t.index("<") + 1 : -1]
        parts = split_array_type(inner)
        if parts is None:
            raise ParamTypeError(f"{t!r} has no length; a param array is fixed: array<vec4<f32>, 6>")
        element = parse_param_type(parts[0])
        try:
            count = int(parts[1].rstrip("u"))
        except ValueError:
            raise ParamTypeError(f"the length of {t!r} must be a number, not {parts[1]!r}") from None
        if count < 1:
            raise ParamTypeError(f"the length of {t!r} must be at least 1")
        arr = ParamType("array", element.scalar, count=count, element=element)
        if _round(element.uniform_size, element.uniform_align) % 16:
            lanes = 16 // _round(element.uniform_size, element.uniform_align)
            hint = f"array<vec4<{element.scalar}>, {-(-count // lanes)}>" if element.kind == "scalar" else "an element of 16 bytes (a vec4 or a padded struct)"
            raise ParamTypeError(
                f"{t!r} cannot live in the params uniform: WGSL needs a 16-byte array stride there and {element.wgsl} takes {element.uniform_size}; use {hint}"
            )
        if arr.uniform_size > MAX_PARAMS_BYTES:
            raise ParamTypeError(
                f"{t!r} takes {arr.uniform_size} bytes; the params uniform binds at most {MAX_PARAMS_BYTES} (WebGPU's maxUniformBufferBindingSize): "
                "pass that much data in a read buffer binding"
            )
        return arr
    raise ParamTypeError(f"param type must be u32, i32, f32, a vec2/3/4 of them, a matCxR<f32> or a fixed array<T, N> of those, not {t!r}")
