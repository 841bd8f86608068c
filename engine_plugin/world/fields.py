"""Field declarations of a world: a name, a numpy dtype, and the GPU format it mirrors to."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..formats import GpuFieldFormat
from .errors import WorldError

__all__ = ["FieldSpec", "declare_fields", "check_chunk_shape"]


@dataclass(frozen=True)
class FieldSpec:
    """One declared field.

    Attributes:
        name: the field's name (the ``tag`` of GPU descriptors).
        index: its position in declaration order.
        dtype: what readers get (``bool`` stays ``bool``).
        format: the GPU storage format; ``format.value_bytes == dtype.itemsize`` always.
    """

    name: str
    index: int
    dtype: np.dtype
    format: GpuFieldFormat

    @property
    def value_bytes(self) -> int:
        return self.format.value_bytes


def declare_fields(fields: Mapping[str, Any]) -> dict[str, FieldSpec]:
    """Validate a ``{name: dtype}`` mapping once, in declaration order.

    Raises:
        UnsupportedFieldTypeError: (a ``TypeError``) a dtype no GPU mirror can store.
        WorldError: no fields, or a name that is not a non-empty string.
    """
    if not isinstance(fields, Mapping) or not fields:
        raise WorldError(f"fields must be a non-empty mapping of name to numpy dtype, not {fields!r}; e.g. {{'height': np.float32, 'solid': bool}}")
    specs: dict[str, FieldSpec] = {}
    for index, (name, dtype) in enumerate(fields.items()):
        if not isinstance(name, str) or not name:
            raise WorldError(f"field names must be non-empty strings, not {name!r}")
        fmt = GpuFieldFormat.from_dtype(dtype)
        dt = np.dtype(dtype)
        # Store natively: a bool field stays bool for readers, and its bytes are its U8 upload.
        dt = np.dtype(bool) if dt == np.dtype(bool) else fmt.dtype.newbyteorder("=")
        specs[name] = FieldSpec(name=name, index=index, dtype=dt, format=fmt)
    return specs


def check_chunk_shape(chunk_shape: Any) -> tuple[int, ...]:
    """A chunk shape as a tuple of 1 to 3 positive ints.

    Raises:
        WorldError: anything else, with an example of what is accepted.
    """
    shape = (chunk_shape,) if isinstance(chunk_shape, int) else chunk_shape
    try:
        dims = tuple(shape)
    except TypeError:
        dims = ()
    if not 1 <= len(dims) <= 3 or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d > 0 for d in dims):
        raise WorldError(f"chunk_shape must be 1 to 3 positive ints, not {chunk_shape!r}; e.g. (32, 32)")
    return tuple(int(d) for d in dims)
