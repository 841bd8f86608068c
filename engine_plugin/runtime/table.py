"""Column tables: named columns packed into one storage buffer for a ``columns`` binding.

Layout (u32 words): word 0 is the column count, then four words a column — first data word,
lanes, element count, kind (0 f32, 1 i32, 2 u32) — then each column's data, flat.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..device.context import get_context
from ..errors import DispatchError
from ..formats import masked_refusal
from ..lowering.casts import cast_refusal
from ..lowering.types import KIND_CODE, NUMPY_DTYPE
from .buffers import STORAGE_USAGE, dtype_kind

__all__ = ["Table", "table", "pack_table", "unpack_table"]


@dataclass(frozen=True)
class Table:
    """A packed table on the GPU; ``names`` in column order, ``words`` the packed host copy.

    Frozen: a run binds the buffer it was handed, and a repeated call with the very same table
    binds what the first call checked; a table pointed at another buffer in place would have
    been bound stale (make a new one with ``abi.table``)."""

    buffer: Any
    names: tuple[str, ...]
    counts: tuple[int, ...]
    lanes: tuple[int, ...]
    kinds: tuple[str, ...]
    words: np.ndarray
    # Per column, whether it was given as (n, lanes): a (n, 1) column reads back as (n, 1).
    two_d: tuple[bool, ...] = ()

    def index(self, name: str) -> int:
        return self.names.index(name)


def pack_table(columns: Mapping[str, Any], order: Sequence[str] | None = None) -> tuple[np.ndarray, tuple, tuple, tuple, tuple, tuple]:
    """Pack columns to words; answers (words, names, counts, lanes, kinds, two_d)."""
    if columns is None or isinstance(columns, (str, bytes, np.ndarray)) or not (hasattr(columns, "__getitem__") and hasattr(columns, "__iter__")):
        raise DispatchError(f"table: columns is a mapping of column name to array, not {type(columns).__name__}")
    if order is not None and (isinstance(order, (str, bytes)) or not hasattr(order, "__iter__")):
        raise DispatchError(f"table: order is a list of column names, not {order!r}")
    names = tuple(order) if order is not None else tuple(columns)
    try:
        distinct = len(set(names)) == len(names)
    except TypeError:  # an unhashable name
        distinct = False
    if not distinct:
        raise DispatchError(f"table: column names are distinct names, not {list(names)!r}")
    missing = [n for n in names if n not in columns]
    if missing:
        raise DispatchError(f"table: order names columns not given: {', '.join(missing)}")
    extra = [n for n in columns if n not in names]
    if extra:
        raise DispatchError(f"table: columns not in order: {', '.join(extra)}")
    header = [len(names)]
    datas, counts, lanes_t, kinds, two_d = [], [], [], [], []
    first = 1 + 4 * len(names)
    for name in names:
        masked = masked_refusal(columns[name])
        if masked is not None:
            raise DispatchError(f"table column {name!r}: {masked}")
        try:
            arr = np.asarray(columns[name])
        except (ValueError, TypeError):  # a ragged list, say
            raise DispatchError(f"table column {name!r}: not a rectangular array of numbers") from None
        kind = dtype_kind(arr.dtype)
        if kind is None:
            raise DispatchError(f"table column {name!r}: dtype {arr.dtype} is not numeric (f32, i32 or u32 by value)")
        if arr.ndim == 1:
            lanes = 1
        elif arr.ndim == 2 and 1 <= arr.shape[1] <= 4:
            lanes = arr.shape[1]
        else:
            raise DispatchError(f"table column {name!r}: shape {arr.shape}; expected (n,) or (n, lanes) with 1-4 lanes")
        target = np.dtype(NUMPY_DTYPE[kind])
        reason = cast_refusal(arr, target) if arr.dtype != target else None
        if reason:  # by value: a value the column's kind cannot hold is refused, as a buffer's is
            raise DispatchError(f"table column {name!r}: {reason}")
        data = np.ascontiguousarray(arr, dtype=target).reshape(-1).view("<u4")
        header += [first, lanes, arr.shape[0], KIND_CODE[kind]]
        first += data.size
        datas.append(data)
        counts.append(arr.shape[0])
        lanes_t.append(lanes)
        kinds.append(kind)
        two_d.append(arr.ndim == 2)
    words = np.concatenate([np.asarray(header, dtype="<u4"), *datas]) if datas else np.asarray(header, dtype="<u4")
    return words, names, tuple(counts), tuple(lanes_t), tuple(kinds), tuple(two_d)


def unpack_table(words: np.ndarray, t: Table) -> dict[str, np.ndarray]:
    """The columns of ``t`` from its packed ``words`` (read back from its buffer, so a kernel's
    writes to a read_write columns binding show): name -> array of the shape it was given,
    (n,) or (n, lanes)."""
    out = {}
    for c, name in enumerate(t.names):
        first = int(t.words[1 + 4 * c])  # the layout the host packed (the header is not re-read)
        lanes, count, kind = t.lanes[c], t.counts[c], t.kinds[c]
        data = np.ascontiguousarray(words[first : first + count * lanes]).view(NUMPY_DTYPE[kind]).copy()
        out[name] = data.reshape(count, lanes) if lanes > 1 or (t.two_d and t.two_d[c]) else data
    return out


def table(columns: Mapping[str, Any], *, order: Sequence[str] | None = None, device: Any = None, label: str = "table") -> Table:
    """Pack named columns (name -> array of shape (n,) or (n, lanes)) into one GPU buffer.

    Args:
        columns: numeric arrays; floats become f32, signed ints i32, unsigned/bool u32 (by value).
        order: column order (default: the mapping's order); pass the variant's ``columns=`` list.
        device: the device to upload to (default: the process's device).
    """
    words, names, counts, lanes, kinds, two_d = pack_table(columns, order)
    ctx = get_context(device)
    try:
        buf = ctx.device.create_buffer(size=max(16, words.nbytes + (-words.nbytes % 16)), usage=STORAGE_USAGE, label=label)
        ctx.queue.write_buffer(buf, 0, words)
    except Exception as exc:  # a device destroyed meanwhile: a DeviceLostError, not wgpu's raw error (helper 161)
        from .loss import lost_error

        lost = lost_error(ctx, exc)
        if lost is None:
            raise
        raise lost from None
    return Table(buf, names, counts, lanes, kinds, words, two_d)
