"""Storage formats of world fields mirrored to the GPU: the ground-floor vocabulary the world
and the backend layer share.

numpy only: :mod:`engine_plugin.world` validates its field declarations through this module,
and the world must not import wgpu.
"""

from __future__ import annotations

import enum
from itertools import chain, compress, repeat
from typing import Any

import numpy as np

from .errors import PluginError

__all__ = ["GpuFieldFormat", "UnsupportedFieldTypeError", "masked_refusal"]


class UnsupportedFieldTypeError(PluginError, TypeError):
    """A world field was declared with a value type no GPU mirror can store."""


class GpuFieldFormat(enum.Enum):
    """The storage format of one field's per-tile value.

    Unsigned and signed 8 to 64 bit integers and F32; ``bool`` maps to ``U8`` (its storage
    size). The value is the numpy type string of the storage, little-endian as on every GPU.
    """

    U8 = "<u1"
    U16 = "<u2"
    U32 = "<u4"
    U64 = "<u8"
    I8 = "<i1"
    I16 = "<i2"
    I32 = "<i4"
    I64 = "<i8"
    F32 = "<f4"

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype the world stores this format in (what is uploaded byte for byte)."""
        return np.dtype(self.value)

    @property
    def value_bytes(self) -> int:
        """Bytes one tile's value occupies."""
        return self.dtype.itemsize

    @classmethod
    def _missing_(cls, value: object) -> GpuFieldFormat:
        """``GpuFieldFormat(np.float32)``: a numpy dtype (or anything ``np.dtype`` accepts)
        is taken as :meth:`from_dtype` takes it (SPEC: "from a numpy dtype"); the enum's own
        lookup took only the type strings, and answered a raw ValueError (review helper 194)."""
        return cls.from_dtype(value)

    @classmethod
    def from_dtype(cls, dtype: Any) -> GpuFieldFormat:
        """The format of a numpy dtype (or anything ``np.dtype`` accepts).

        Raises:
            UnsupportedFieldTypeError: (a ``TypeError``) for f16, f64, complex, structured,
                object, string or big-endian types, naming the type and what is accepted.
        """
        try:
            dt = np.dtype(dtype)
        except TypeError as exc:
            raise UnsupportedFieldTypeError(f"{dtype!r} is not a numpy dtype ({exc}); {_ACCEPTED}") from exc
        if dt == np.dtype(bool):
            return cls.U8
        if not dt.isnative or not np.little_endian:
            # GPU buffers are little-endian; a byte-swapped world would upload garbage.
            raise UnsupportedFieldTypeError(f"big-endian {dt} cannot be mirrored to a GPU; {_ACCEPTED}")
        found = _BY_KIND.get((dt.kind, dt.itemsize))
        if found is None:
            raise UnsupportedFieldTypeError(f"field value type {dt} is not supported; {_ACCEPTED}")
        return found


_ACCEPTED = "use uint8/16/32/64, int8/16/32/64, float32 or bool"

_BY_KIND = {
    ("u", 1): GpuFieldFormat.U8,
    ("u", 2): GpuFieldFormat.U16,
    ("u", 4): GpuFieldFormat.U32,
    ("u", 8): GpuFieldFormat.U64,
    ("i", 1): GpuFieldFormat.I8,
    ("i", 2): GpuFieldFormat.I16,
    ("i", 4): GpuFieldFormat.I32,
    ("i", 8): GpuFieldFormat.I64,
    ("f", 4): GpuFieldFormat.F32,
}


def masked_refusal(values: Any) -> str | None:
    """Why ``values`` is refused as data: a numpy masked array (or ``numpy.ma.masked``), whose
    masked elements have no defined content (``np.asarray`` answers whatever its data holds
    there, the mask dropped: a wrong number nobody asked for), or None."""
    if isinstance(values, np.ma.MaskedArray) or values is np.ma.masked or _holds_masked(values):
        return "a masked array (numpy.ma): its masked elements hold no defined value; pass values.filled(fill) (or values.data, if you mean it)"
    return None


_SEQUENCES = (list, tuple)


def _holds_masked(values: Any) -> bool:
    """Whether a list or tuple holds a masked array or ``numpy.ma.masked`` at any depth:
    ``np.asarray`` of ``list(masked_2d)`` or ``[1.0, np.ma.masked]`` drops the masks too
    (review helper 238). Level by level, each in C passes (the set of its types, ``compress``, ``chain``):
    a flat list of numbers costs one pass, with no Python call an element or a row, and no
    recursion however deep (review helper 243)."""
    if type(values) is not list and type(values) is not tuple:
        return False
    level: Any = values
    while level:
        types = set(map(type, level))  # (a few types however long the level)
        if any(issubclass(t, np.ma.MaskedArray) for t in types):
            return True
        if not any(issubclass(t, _SEQUENCES) for t in types):
            return False
        level = list(chain.from_iterable(compress(level, map(isinstance, level, repeat(_SEQUENCES)))))
    return False
