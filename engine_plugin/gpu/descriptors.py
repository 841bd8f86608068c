"""Descriptors of GPU work: field mirrors, upload spans, dispatches, readbacks, capabilities.

Dependency-free (numpy and the world only): a CPU-only engine builds and inspects them
without importing wgpu, and any :class:`~engine_plugin.gpu.backend.GpuBackend` consumes them.
"""

from __future__ import annotations

import enum
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from dataclasses import field as _field
from typing import Any, overload

import numpy as np

from ..errors import PluginError, StaleSpanError
from ..formats import GpuFieldFormat
from ..world import World
from .handles import GpuProductHandle

__all__ = [
    "ChunkKeys",
    "DirtyChanges",
    "DispatchDesc",
    "FieldMirrorDesc",
    "GpuCapabilities",
    "GpuDescriptorError",
    "ReadbackDesc",
    "ReadbackPolicy",
    "SpanList",
    "UploadDesc",
    "coalesce_uploads",
    "field_mirror_desc",
    "take_dirty_changes",
    "spans_nbytes",
    "take_dirty_uploads",
    "upload_desc",
]

# Byte counts travel to wgpu-native as u64 and through numpy as intp: refuse what neither holds.
MAX_BYTES = 2**63 - 1

# WebGPU writes and copies whole 4-byte words: every mirror slot starts on one.
SLOT_ALIGN = 4


def slot_stride(chunk_nbytes: int) -> int:
    """Bytes one chunk slot takes in a mirror: its bytes rounded up to whole 4-byte words, so
    any run of slots is an aligned write (a bool field of 3x3 chunks: 9 bytes -> 12)."""
    return -(-chunk_nbytes // SLOT_ALIGN) * SLOT_ALIGN


class GpuDescriptorError(PluginError, ValueError):
    """A descriptor or backend configuration that can never be valid (e.g. an overflowing mirror)."""


@dataclass(frozen=True)
class FieldMirrorDesc:
    """One world field mirrored densely to one GPU buffer, chunk-slot-major.

    Slot ``s`` of the world lives at byte ``s * slot_stride`` of the mirror, where
    ``slot_stride`` is ``bytes_per_chunk`` rounded up to a multiple of 4 (the padding bytes
    are zero): narrow fields (bool, 8/16-bit) of odd chunk sizes stay uploadable slot by slot.

    Raises:
        GpuDescriptorError: inconsistent sizes, or a total that overflows 63 bits.
    """

    tag: str
    field_index: int
    format: GpuFieldFormat
    value_bytes: int
    tiles_per_chunk: int
    bytes_per_chunk: int
    chunk_count: int

    def __post_init__(self) -> None:
        for name in ("value_bytes", "tiles_per_chunk", "bytes_per_chunk", "chunk_count"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise GpuDescriptorError(f"FieldMirrorDesc.{name} must be a positive int, not {v!r}")
        if self.value_bytes != self.format.value_bytes:
            raise GpuDescriptorError(f"{self.format.name} values take {self.format.value_bytes} bytes, not {self.value_bytes}")
        if self.bytes_per_chunk != self.value_bytes * self.tiles_per_chunk:
            raise GpuDescriptorError(f"bytes_per_chunk {self.bytes_per_chunk} != {self.value_bytes} x {self.tiles_per_chunk} tiles")
        if self.slot_stride * self.chunk_count > MAX_BYTES:
            raise GpuDescriptorError(
                f"mirror of field {self.tag!r} would take {self.bytes_per_chunk} x {self.chunk_count} bytes, "
                "more than any buffer can address; use fewer or smaller chunks"
            )

    @property
    def slot_stride(self) -> int:
        """Bytes from one slot to the next in the mirror (``bytes_per_chunk``, padded to 4)."""
        return slot_stride(self.bytes_per_chunk)

    def total_bytes(self) -> int:
        """Size of the whole mirror buffer in bytes."""
        return self.slot_stride * self.chunk_count

    def chunk_offset(self, slot: int) -> int:
        """Byte offset of world slot ``slot`` in the mirror."""
        return slot * self.slot_stride


def field_mirror_desc(world: World, tag: str) -> FieldMirrorDesc:
    """The dense mirror description of field ``tag`` (one slot per possible chunk)."""
    spec = world.field(tag)
    return FieldMirrorDesc(
        tag=tag,
        field_index=spec.index,
        format=spec.format,
        value_bytes=spec.value_bytes,
        tiles_per_chunk=world.tiles_per_chunk,
        bytes_per_chunk=world.chunk_nbytes(tag),
        chunk_count=world.max_chunks,
    )


@dataclass(frozen=True)
class UploadDesc:
    """A live span of one field over one or more adjacent chunk slots, and its mirror destination.

    The span is valid only while every chunk it covers is live and unmutated: :meth:`data`
    raises :class:`StaleSpanError` afterwards, so a stale upload can never happen silently.

    ``span_slots`` (0: ``len(chunk_keys)``) is the number of slots the bytes cover. A span
    from ``coalesce_uploads(..., max_gap=...)`` may cover *filler* slots between its chunks:
    clean chunks (their mirror already holds those bytes) or free slots (nothing reads them),
    written as the world holds them so that one write replaces several.
    """

    tag: str
    chunk_keys: tuple[int, ...]
    versions: tuple[int, ...]
    first_slot: int
    dst_offset: int
    nbytes: int
    world: World = _field(repr=False, compare=False)
    span_slots: int = 0
    key_slots: Any = _field(default=None, repr=False, compare=False)  # slots of chunk_keys (vector check)
    padded: bool = False  # mirror slots are wider than the world's (see slot_stride): data() pads
    # The world's mutation clock when the span was taken (None: unknown). Every mutation and
    # eviction moves it, so an unchanged clock proves every covered chunk current in O(1).
    clock: int | None = _field(default=None, repr=False, compare=False)

    @property
    def chunk_key(self) -> int:
        """The chunk of a single-chunk span (``upload_desc``'s answer)."""
        if len(self.chunk_keys) != 1:
            raise GpuDescriptorError(f"this span covers {len(self.chunk_keys)} chunks; use chunk_keys")
        return self.chunk_keys[0]

    @property
    def slot_count(self) -> int:
        """Slots the span's bytes cover (filler included)."""
        return self.span_slots or len(self.chunk_keys)

    def is_current(self) -> bool:
        """Whether every covered chunk is live with the version the span was taken at."""
        return all(self.world.is_current(k, v) for k, v in zip(self.chunk_keys, self.versions, strict=True))

    def data(self) -> np.ndarray:
        """The span's bytes as a contiguous read-only array (what ``write_buffer`` sends).

        Raises:
            StaleSpanError: a covered chunk was mutated or evicted after the span was taken.
        """
        if self.clock is not None and getattr(self.world, "clock", None) == self.clock:
            return self._bytes()  # nothing in the world changed since the span was taken
        if self.key_slots is not None and np.array_equal(self.world.slot_versions(self.key_slots), self.versions):
            return self._bytes()  # every chunk current, checked at once
        is_current = self.world.is_current
        for key, version in zip(self.chunk_keys, self.versions, strict=True):
            if not is_current(key, version):
                now = f"is now at version {self.world.version(key)}" if key in self.world else "was evicted"
                raise StaleSpanError(
                    f"upload span of field {self.tag!r} over chunk {key} was taken at version {version}; "
                    f"the chunk {now}. Take a new upload_desc after mutating the world"
                )
        return self._bytes()

    def _bytes(self) -> np.ndarray:
        slab = self.world.slab(self.tag, self.first_slot, self.slot_count)
        if not self.padded:
            return slab
        count = self.slot_count
        raw = np.ascontiguousarray(slab).reshape(count, -1).view(np.uint8)
        out = np.zeros((count, self.nbytes // count), np.uint8)  # zero padding after each slot
        out[:, : raw.shape[1]] = raw
        return out


def upload_desc(world: World, tag: str, chunk_key: int) -> UploadDesc:
    """The upload span of field ``tag`` of one live chunk (valid until that chunk changes)."""
    slot = world.slot(chunk_key)
    nbytes = world.chunk_nbytes(tag)
    stride = slot_stride(nbytes)
    return UploadDesc(tag, (chunk_key,), (world.version(chunk_key),), slot, slot * stride, stride, world, padded=stride != nbytes)


def coalesce_uploads(
    world: World, tag: str, chunk_keys: Iterable[int], max_gap: int = 0, meta: Callable[[int], tuple[int, int] | None] | None = None
) -> list[UploadDesc]:
    """Upload spans for ``chunk_keys``, one per run of adjacent mirror slots, in slot order.

    Args:
        max_gap: also join runs separated by at most this many slots not in ``chunk_keys``
            (written as filler, see :class:`UploadDesc`): one larger write costs less than
            several small ones while a write's fixed cost exceeds the gap's bytes.
        meta: ``key -> (slot, version)`` of live chunks, when the caller has them at hand
            (default: asked of the world).
    """
    keys = list(dict.fromkeys(chunk_keys))
    if not keys:
        return []
    if meta is None:
        slot_of, version = world.slot, world.version
        pairs = [(slot_of(k), version(k)) for k in keys]
    else:
        pairs = [meta(k) for k in keys]  # type: ignore[misc]  # None entries are refused just below
        for k, p in zip(keys, pairs):
            if p is None:
                world.slot(k)  # not live: raises UnknownChunkError naming it
    order = sorted(range(len(keys)), key=lambda i: pairs[i][0])  # type: ignore[index]
    slots = np.fromiter((pairs[i][0] for i in order), dtype=np.int64, count=len(order))  # type: ignore[index]
    keys = [keys[i] for i in order]
    versions = [pairs[i][1] for i in order]  # type: ignore[index]
    # A run ends where the next slot is more than max_gap + 1 away.
    ends = (np.flatnonzero(np.diff(slots) > max_gap + 1) + 1).tolist()
    nbytes = world.chunk_nbytes(tag)
    stride = slot_stride(nbytes)
    out: list[UploadDesc] = []
    start = 0
    for end in [*ends, len(keys)]:
        first, last = int(slots[start]), int(slots[end - 1])
        span = last - first + 1
        out.append(
            UploadDesc(
                tag,
                tuple(keys[start:end]),
                tuple(versions[start:end]),
                first,
                first * stride,
                stride * span,
                world,
                span if span != end - start else 0,
                padded=stride != nbytes,
            )
        )
        start = end
    return out


def take_dirty_uploads(
    world: World, tag: str, max_gap: int = 0, *, spans: bool = True, meta: Callable[[int], tuple[int, int] | None] | None = None
) -> tuple[list[int], Sequence[UploadDesc]]:
    """Take the dirty chunks of field ``tag`` (clearing them) and answer ``(their keys, the
    coalesced spans that upload them)`` (no spans with ``spans=False``).

    A world with the slot-vector API (``take_dirty_slots(tag)`` -> sorted slots,
    ``slot_versions(slots)``, ``keys_at(slots)``) is read with numpy, so the host work grows
    with the runs, not the chunks. Any other world goes through ``take_dirty`` and
    :func:`coalesce_uploads`.
    """
    found = take_dirty_changes(world, tag, max_gap, spans=spans, meta=meta)
    return list(found.keys), found.spans


def _frozen(array: np.ndarray) -> np.ndarray:
    """A read-only view of ``array`` (which nothing else may hold), whose base is read-only
    too: numpy refuses to make such a view writeable again."""
    array.flags.writeable = False
    return array.view()


class ChunkKeys(Sequence[int]):
    """Chunk keys held as a read-only i64 vector: a sequence of ints whose Python list is made
    once, when something reads the keys one by one (iteration, indexing, ``tolist``).

    A whole world changed is 1,024 keys a field: its list of ints costs more host time than
    the numpy work that finds them, and an upload step that owes nothing (content unchanged,
    as after ``mark_dirty``) never reads them. The vector is a snapshot taken with the slots
    (``World.key_vector``): later adds and evictions do not change it.
    """

    __slots__ = ("vector", "_list")

    def __init__(self, vector: Any) -> None:
        """``vector``: the keys (anything numpy reads as i64); copied, so the caller's array
        stays the caller's."""
        self.vector = _frozen(np.array(vector, dtype=np.int64))
        self._list: list[int] | None = None

    @classmethod
    def _adopt(cls, vector: np.ndarray) -> ChunkKeys:
        """Keys over a new i64 vector nothing else holds (``World.key_vector``'s answer),
        without copying it."""
        keys = cls.__new__(cls)
        keys.vector = _frozen(vector)
        keys._list = None
        return keys

    def __reduce__(self) -> tuple:
        return (ChunkKeys, (self.vector,))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.vector if dtype is None else self.vector.astype(dtype)

    def _keys(self) -> list[int]:
        found = self._list
        if found is None:
            found = self._list = self.vector.tolist()
        return found

    def tolist(self) -> list[int]:
        """The keys as a new list of ints."""
        return list(self._keys())

    def __len__(self) -> int:
        return len(self.vector)

    def __bool__(self) -> bool:
        return len(self.vector) > 0

    def __iter__(self) -> Iterator[int]:
        return iter(self._keys())

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> list[int]: ...
    def __getitem__(self, index: int | slice) -> int | list[int]:
        return self._keys()[index]

    def __contains__(self, key: object) -> bool:
        return key in self._keys()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ChunkKeys):
            return bool(np.array_equal(self.vector, other.vector))
        if isinstance(other, list):  # as the list it stands for
            return self._keys() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # compared by value, as the list it stands for

    def __repr__(self) -> str:
        return f"ChunkKeys({self._keys()!r})"


@dataclass(frozen=True)
class DirtyChanges:
    """What :func:`take_dirty_changes` took: the changed chunks of one field and their spans.

    ``versions`` (content versions, aligned with ``keys``) and ``slots`` are numpy vectors
    when the world has the slot-vector API, else None (ask the world per key); ``keys`` is then
    a :class:`ChunkKeys` (a list where the world has keys past i64) and ``spans`` a
    :class:`SpanList`. ``versions`` is read-only: the span list shares it."""

    keys: Sequence[int]
    spans: Sequence[UploadDesc]
    slots: Any = None
    versions: Any = None


def take_dirty_changes(
    world: World,
    tag: str,
    max_gap: int = 0,
    *,
    spans: bool = True,
    meta: Callable[[int], tuple[int, int] | None] | None = None,
    consumer: int | None = None,
) -> DirtyChanges:
    """:func:`take_dirty_uploads`, answering the changed chunks' slots and versions too (the
    engine owes and revalidates with them, without asking the world chunk by chunk).
    ``consumer``: the flags of a second engine on the world (``World.claim_dirty``)."""
    take = getattr(world, "take_dirty_slots", None)
    if take is None:
        listed = [k for k, _ in (world.take_dirty(tag) if consumer is None else world.take_dirty(tag, consumer=consumer))]
        return DirtyChanges(listed, coalesce_uploads(world, tag, listed, max_gap, meta) if spans and listed else [])
    slots = np.asarray(take(tag) if consumer is None else take(tag, consumer=consumer), dtype=np.int64)
    # World's own vector answers (new arrays, keys as keys_at answers them); a subclass that
    # answers other keys from keys_at, or another world type, is asked through keys_at and
    # its versions copied.
    cls = type(world)
    own_vectors = cls is World or (
        getattr(cls, "keys_at", None) is World.keys_at
        and getattr(cls, "key_vector", None) is World.key_vector
        and getattr(cls, "slot_versions", None) is World.slot_versions
    )
    found = world.key_vector(slots) if own_vectors else None
    keys: Sequence[int] = ChunkKeys._adopt(found) if found is not None else world.keys_at(slots.tolist())
    versions = np.asarray(world.slot_versions(slots), dtype=np.int64)
    # Its own read-only vector: World answers a new one; another world's answer is copied.
    versions = _frozen(versions if own_vectors else versions.copy())
    count = len(slots)
    if not spans or not count:
        return DirtyChanges(keys, [], slots, versions)
    nbytes = world.chunk_nbytes(tag)
    stride = slot_stride(nbytes)
    first, last = int(slots[0]), int(slots[-1])
    if last - first + 1 == count:  # one run of adjacent slots (e.g. the whole world)
        ends, firsts, counts = [count], [first], [count]
    else:
        # (np.diff and flatnonzero cost twice this, a frame's worth of µs on the H200's host)
        cuts = ((slots[1:] - slots[:-1]) > max_gap + 1).nonzero()[0]
        starts = np.concatenate(([0], cuts + 1))
        ends = [*(cuts + 1).tolist(), count]
        first_slots = slots[starts]
        firsts = first_slots.tolist()
        counts = (slots[np.asarray(ends) - 1] - first_slots + 1).tolist()
    out = SpanList(tag, world, keys, slots, versions, ends, firsts, counts, stride, stride != nbytes, getattr(world, "clock", None))
    return DirtyChanges(keys, out, slots, versions)


_new_object = object.__new__
_set_attribute = object.__setattr__


def _new_upload_desc(
    tag: str,
    chunk_keys: tuple,
    versions: tuple,
    first_slot: int,
    dst_offset: int,
    nbytes: int,
    world: Any,
    span_slots: int,
    key_slots: Any,
    padded: bool,
    clock: int | None,
) -> UploadDesc:
    """``UploadDesc(...)`` of the frame's spans, made without the frozen dataclass's
    ``__init__`` (which sets the fields one ``object.__setattr__`` at a time: 2.1 µs against
    0.8 here, and a frame makes tens of spans). The same object: frozen, compared, hashed and
    ``dataclasses.replace``-able by its fields (tests hold this field list to the class's)."""
    desc = _new_object(UploadDesc)
    _set_attribute(
        desc,
        "__dict__",
        {
            "tag": tag,
            "chunk_keys": chunk_keys,
            "versions": versions,
            "first_slot": first_slot,
            "dst_offset": dst_offset,
            "nbytes": nbytes,
            "world": world,
            "span_slots": span_slots,
            "key_slots": key_slots,
            "padded": padded,
            "clock": clock,
        },
    )
    return desc


class SpanList(Sequence[UploadDesc]):
    """The upload spans of one field's changed chunks, held as vectors: a sequence of
    :class:`UploadDesc` that makes each descriptor only when it is read (indexing, iteration,
    slicing to a list, comparison with a list; not a list itself: ``list(spans)`` is one).

    A frame uploads tens of spans a field and a whole world is 1,024 chunks: building a
    frozen descriptor, its key and version tuples and its check for every span cost more host
    time than the writes. The wgpu backend writes a span list straight from these vectors
    (:meth:`stale_at` checks every chunk at once); any other consumer sees the descriptors.

    ``firsts``/``slot_counts``: each span's first slot and the slots its bytes cover (filler
    included); ``bounds``: where each span's chunks end in ``keys``/``key_slots``/``versions``.
    """

    __slots__ = ("tag", "world", "_keys", "_key_tuple", "key_slots", "versions", "bounds", "firsts", "slot_counts", "stride", "padded", "clock", "_descs")

    def __init__(
        self,
        tag: str,
        world: Any,
        keys: Sequence[int],
        key_slots: np.ndarray,
        versions: np.ndarray,
        ends: list[int],
        firsts: list[int],
        slot_counts: list[int],
        stride: int,
        padded: bool,
        clock: int | None,
    ) -> None:
        # Its own keys and versions: a caller's list or writeable vector may change later.
        if versions.flags.writeable or versions.base is None or versions.base.flags.writeable:
            versions = _frozen(np.array(versions, dtype=np.int64))  # a vector only it holds
        self.tag, self.world, self.key_slots, self.versions = tag, world, key_slots, versions
        self._keys: Sequence[int] = keys if type(keys) is ChunkKeys else tuple(keys)
        self._key_tuple: tuple[int, ...] | None = None
        self.bounds = ends
        self.firsts, self.slot_counts = firsts, slot_counts
        self.stride, self.padded, self.clock = stride, padded, clock
        self._descs: list[UploadDesc | None] = [None] * len(ends)

    @property
    def keys(self) -> tuple[int, ...]:
        """Every chunk's key, in span order (made when first read)."""
        found = self._key_tuple
        if found is None:
            found = self._key_tuple = tuple(self._keys)
        return found

    def __len__(self) -> int:
        return len(self.bounds)

    @overload
    def __getitem__(self, index: int) -> UploadDesc: ...
    @overload
    def __getitem__(self, index: slice) -> list[UploadDesc]: ...
    def __getitem__(self, index: int | slice) -> UploadDesc | list[UploadDesc]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        desc = self._descs[index]
        if desc is None:
            i = range(len(self))[index]  # IndexError past the end, as a list's
            start, end = (self.bounds[i - 1] if i else 0), self.bounds[i]
            first, count = self.firsts[i], self.slot_counts[i]
            desc = self._descs[i] = _new_upload_desc(
                self.tag,
                tuple(self._keys[start:end]),
                tuple(self.versions[start:end].tolist()),
                first,
                first * self.stride,
                count * self.stride,
                self.world,
                count if count != end - start else 0,
                self.key_slots[start:end],
                self.padded,
                self.clock,
            )
        return desc

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (SpanList, list)):  # as the list it stands for (a list is never equal to a tuple)
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # compared by value, as the list it stands for

    def __repr__(self) -> str:
        return f"SpanList({list(self)!r})"

    def nbytes_of(self, count: int) -> int:
        """Bytes of the first ``count`` spans."""
        return sum(self.slot_counts[:count]) * self.stride

    def stale_at(self, start: int = 0) -> int | None:
        """The index of the first span from ``start`` on a chunk of which changed or left
        since the spans were taken (its :meth:`UploadDesc.data` raises), or None when every
        one is current."""
        if self.clock is not None and getattr(self.world, "clock", None) == self.clock:
            return None  # nothing in the world changed since
        skip = self.bounds[start - 1] if start else 0
        changed = (np.asarray(self.world.slot_versions(self.key_slots[skip:])) != self.versions[skip:]).nonzero()[0]
        return bisect_right(self.bounds, skip + int(changed[0])) if len(changed) else None


def spans_nbytes(spans: Sequence[UploadDesc], count: int) -> int:
    """Bytes of the first ``count`` of ``spans``."""
    if type(spans) is SpanList:
        return spans.nbytes_of(count)
    return sum(desc.nbytes for desc in spans[:count])


@dataclass(frozen=True)
class DispatchDesc:
    """One dispatch of a registered product over ``chunk_count`` chunks of input field ``field``.

    ``workgroups`` is an int (X) or up to three ints; the backend refuses totals past its limits.

    ``writes`` are ``(buffer, byte_offset, data)`` triples the backend writes (queue order:
    before the dispatch) into buffers the product declared writable: per-dispatch inputs such
    as a work list or a params block. They are validated with the dispatch and written only
    when it is accepted, so a refused dispatch leaves every buffer as it was.
    """

    product: GpuProductHandle
    field: str
    chunk_count: int
    workgroups: tuple[int, int, int] | int = (1, 1, 1)
    writes: tuple[tuple[Any, int, Any], ...] = _field(default=(), compare=False, repr=False)
    # A run of the product's variant checked and bound by the ABI runtime (the engine's
    # products): its records are dispatched in place of the registered bind groups.
    prepared: Any = _field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        wg = self.workgroups
        dims = (wg,) if isinstance(wg, int) else tuple(wg)
        if not 1 <= len(dims) <= 3 or not all(isinstance(d, int) and not isinstance(d, bool) for d in dims):
            raise GpuDescriptorError(f"workgroups must be 1 to 3 ints, not {wg!r}; e.g. (64, 1, 1)")
        object.__setattr__(self, "workgroups", (*dims, 1, 1)[:3])
        for w in self.writes:
            if not isinstance(w, tuple) or len(w) != 3:
                raise GpuDescriptorError(f"each DispatchDesc write is (buffer, offset, data), not {w!r}")


class ReadbackPolicy(enum.Enum):
    """What a product's readback transfers. ``FULL_FIELD`` is debug-only, off unless configured."""

    NONE = "none"
    SUMMARY = "summary"
    SELECTED_TILES = "selected_tiles"
    SELECTED_PATH = "selected_path"
    FULL_FIELD = "full_field"


@dataclass(frozen=True)
class ReadbackDesc:
    """One readback request of a product's registered readback source.

    Args:
        product: whose source range (and callback) this reads.
        policy: what the bytes mean; ``SELECTED_TILES`` needs ``tiles``, ``SELECTED_PATH`` ``path``.
        offset, size: the byte range inside the product's source range (``size=None``: to its
            end); both 4-byte aligned.
        field: ``FULL_FIELD`` only: read this field's mirror instead of the product's source.
        chunk_keys, versions: the chunks (and content versions) the result derives from, for
            the consumer's revalidation before applying it.
        tiles, path: the selection, for the consumer.
        user: anything the consumer wants back in its callback.
    """

    product: GpuProductHandle
    policy: ReadbackPolicy
    offset: int = 0
    size: int | None = None
    field: str | None = None
    chunk_keys: tuple[int, ...] = ()
    versions: tuple[int, ...] = ()
    tiles: tuple[tuple[int, ...], ...] = ()
    path: tuple[tuple[int, ...], ...] = ()
    user: Any = _field(default=None, compare=False)


@dataclass(frozen=True)
class GpuCapabilities:
    """What a backend can do now. All-false/zero (the default) means: never choose the GPU."""

    compute: bool = False
    async_dispatch: bool = False
    async_readback: bool = False
    max_buffer_bytes: int = 0
    max_workgroups_x: int = 0
    max_workgroups_per_dimension: int = 0
    upload_alignment: int = 0
    readback_alignment: int = 0

    @property
    def usable(self) -> bool:
        """Whether a caller should consider the GPU at all."""
        return self.compute and self.max_buffer_bytes > 0 and self.max_workgroups_x > 0
