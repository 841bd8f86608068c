"""Struct elements: a binding of ``array<Particle>`` where the schema declares ``Particle``.

    structs:
      Particle: { pos: vec3<f32>, vel: vec3<f32>, mass: f32 }

Laid out by WGSL's storage rules (each member at a multiple of its alignment, a vec3
aligning to 16; the struct aligns to its widest member and its size rounds up to that), and
packed on the host from numpy structured arrays with the same offsets, so a
``np.zeros(n, [("pos", "<f4", 3), ("vel", "<f4", 3), ("mass", "<f4")])`` goes up as is.
Pure Python (numpy for the dtype).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .casts import cast_refusal
from .types import NUMPY_DTYPE, ValueType

__all__ = ["StructType", "StructField", "layout_struct"]


@dataclass(frozen=True)
class StructField:
    name: str
    scalar: str
    lanes: int
    offset: int

    @property
    def value_type(self) -> ValueType:
        return ValueType(self.scalar, self.lanes)


@dataclass(frozen=True)
class StructType:
    """A struct element; answers what a ValueType answers where the runtime asks it."""

    name: str
    fields: tuple[StructField, ...]
    size: int  # the storage stride of one element, bytes
    align: int

    scalar = "struct"

    @property
    def wgsl(self) -> str:
        return self.name

    @property
    def bytes(self) -> int:
        return self.size

    @property
    def lanes(self) -> int:
        return self.size // 4  # words an element occupies

    @property
    def declaration(self) -> str:
        members = ", ".join(f"{f.name}: {f.value_type.wgsl}" for f in self.fields)
        return f"struct {self.name} {{ {members} }}"

    @property
    def numpy_dtype(self) -> np.dtype:
        """The structured dtype with WGSL's offsets and stride (padding included)."""
        return np.dtype(
            {
                "names": [f.name for f in self.fields],
                "formats": [(NUMPY_DTYPE[f.scalar], (f.lanes,)) if f.lanes > 1 else NUMPY_DTYPE[f.scalar] for f in self.fields],
                "offsets": [f.offset for f in self.fields],
                "itemsize": self.size,
            }
        )

    def pack(self, values: object) -> tuple[np.ndarray | None, str]:
        """u32 words of ``values`` (a structured array with these field names), or (None, why)."""
        try:
            arr = np.asarray(values)
        except (ValueError, TypeError):
            return None, f"a {self.name} binding takes a numpy structured array with fields {[f.name for f in self.fields]}"
        names = arr.dtype.names
        if names is None:
            return None, f"a {self.name} binding takes a numpy structured array with fields {[f.name for f in self.fields]}"
        missing = [f.name for f in self.fields if f.name not in names]
        if missing:
            return None, f"the structured array lacks field(s) {missing} of {self.name}"
        out = np.zeros(arr.reshape(-1).shape, dtype=self.numpy_dtype)
        for f in self.fields:
            column = arr.reshape(-1)[f.name]
            want = (out.shape[0], f.lanes) if f.lanes > 1 else (out.shape[0],)
            if column.shape != want:
                return None, f"field {f.name!r} has shape {column.shape[1:]}, {self.name}.{f.name} is {f.value_type.wgsl}"
            reason = cast_refusal(column, np.dtype(NUMPY_DTYPE[f.scalar])) if column.dtype != np.dtype(NUMPY_DTYPE[f.scalar]) else None
            if reason:  # cast by value, as a plain binding's array is
                return None, f"field {f.name!r}: {reason}"
            out[f.name] = column
        return np.frombuffer(out.tobytes(), dtype="<u4"), str(out.shape[0])


def layout_struct(name: str, members: list[tuple[str, ValueType]]) -> StructType:
    """WGSL storage layout of a struct of scalar and vector members."""
    offset, align = 0, 4
    fields = []
    for member, vt in members:
        a = vt.uniform_align  # storage alignment equals uniform alignment for scalars and vectors
        offset = -(-offset // a) * a
        fields.append(StructField(member, vt.scalar, vt.lanes, offset))
        offset += vt.bytes
        align = max(align, a)
    return StructType(name, tuple(fields), -(-offset // align) * align, align)
