"""The chunked world: the authoritative CPU data every GPU product is derived from.

Storage is dense and chunk-slot-major: each field is one array of shape
``(max_chunks, *chunk_shape)``, and a live chunk owns one slot of it for its whole life, so a
GPU mirror of the field is byte-for-byte the same layout and adjacent slots coalesce into one
upload. Slots freed by eviction are reused, lowest first.

Every mutation path (``write``, ``set_tile``, ``edit``, ``add``) gives the chunk a new content
version taken from one world-wide counter, so a ``(key, version)`` pair never repeats: not
after more edits, and not after the key is evicted and added again. Upload spans and readback
revalidation rely on exactly that.

The arrays behind the world are not writeable from outside: readers get read-only views (numpy
refuses to flip them back), and the only ways to change data are the mutation methods. Each
holds ``World.lock``, which ``Engine.frame()`` holds for the whole frame: a change made on
another thread lands between frames, whole.
"""

from __future__ import annotations

import copy
import heapq
import math
import threading
import weakref
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np

from ..formats import masked_refusal
from .edit import ChunkEdit
from .errors import ChunkBusyError, UnknownChunkError, WorldError, WorldFullError
from .fields import FieldSpec, check_chunk_shape, declare_fields

__all__ = ["World"]


class World:
    """Chunks of a fixed tile shape with declared typed fields, versions and dirty tracking.

    Args:
        chunk_shape: tiles per chunk, 1 to 3 dims, e.g. ``(32, 32)``.
        fields: ``{name: numpy dtype}``; validated once through ``GpuFieldFormat``.
        max_chunks: how many chunks can be live at once (the number of mirror slots).

    Raises:
        UnsupportedFieldTypeError: (a ``TypeError``) a field type no GPU mirror can store.
        WorldError: a bad shape, field name or ``max_chunks``.
    """

    def __init__(self, chunk_shape: Any, fields: Mapping[str, Any], max_chunks: int = 1024):
        self.chunk_shape: tuple[int, ...] = check_chunk_shape(chunk_shape)
        if not isinstance(max_chunks, (int, np.integer)) or isinstance(max_chunks, bool) or max_chunks < 1:
            raise WorldError(f"max_chunks must be a positive int, not {max_chunks!r}")
        self.max_chunks = int(max_chunks)
        self._fields = declare_fields(fields)
        self.tiles_per_chunk = math.prod(self.chunk_shape)  # exact: np.prod wraps past int64 (review helper 198)
        self._base: dict[str, np.ndarray] = {}
        self._rw: dict[str, np.ndarray] = {}
        for name, spec in self._fields.items():
            try:
                base = np.zeros((self.max_chunks, *self.chunk_shape), dtype=spec.dtype)
            except (MemoryError, ValueError) as exc:  # numpy's own errors named no field (review helper 194)
                nbytes = self.max_chunks * self.tiles_per_chunk * spec.value_bytes
                raise WorldError(
                    f"field {name!r} of {self.max_chunks} chunks of {'x'.join(map(str, self.chunk_shape))} tiles needs {nbytes:,} bytes, "
                    f"which cannot be allocated ({type(exc).__name__}: {exc}); use fewer chunks (max_chunks) or smaller chunks"
                ) from None
            # The one writeable alias stays private; the base (and every view of it) is read-only.
            self._rw[name] = base[...]
            base.flags.writeable = False
            self._base[name] = base
        self._slot_of: dict[int, int] = {}
        self._key_at: list[int | None] = [None] * self.max_chunks
        # The same keys as an i64 vector (free slots hold 0), read in bulk by the uploader: a
        # frame's changed keys are one fancy index, not a Python list of ints. A key outside
        # i64 is counted; while one is live, ``key_vector`` answers None (use ``keys_at``).
        self._key_vec = np.zeros(self.max_chunks, dtype=np.int64)
        self._wide_keys = 0
        self._chunk_nbytes = {name: self.tiles_per_chunk * spec.value_bytes for name, spec in self._fields.items()}
        self._free: list[int] = list(range(self.max_chunks))  # already a heap
        self._version: dict[int, int] = {}
        self._clock = 0
        # Dirty flags and content versions by slot, as numpy arrays: the uploader reads a frame's
        # dirty chunks and their versions with a few vector operations, not a Python loop.
        self._dirty_mask: dict[str, np.ndarray] = {name: np.zeros(self.max_chunks, dtype=bool) for name in self._fields}
        self._slot_version = np.zeros(self.max_chunks, dtype=np.int64)
        # Dirty flags are taken by the one engine uploading them. A second engine on the same
        # world keeps flags of its own (``claim_dirty``): a take by one never hides a change
        # from the other, whose mirrors would go stale.
        self._dirty_owner: Any = None  # weakref to the consumer of ``_dirty_mask``
        self._dirty_rows: dict[int, dict[str, np.ndarray]] = {}  # token -> another consumer's flags
        self._row_finalizers: dict[int, Any] = {}  # flags' token -> the finaliser dropping them with their owner
        self._next_dirty_token = 1
        self._editing: set[int] = set()
        # Held by every mutation, and by Engine.frame() for the whole frame: a change made on
        # another thread lands between frames, never halfway through one (an add or evict is
        # several steps; a frame that saw half of one could apply a wrong result). Reentrant:
        # the engine thread may change the world inside a frame (apply callbacks).
        self.lock = threading.RLock()

    # ---- declarations ----------------------------------------------------------------

    @property
    def fields(self) -> tuple[FieldSpec, ...]:
        """The declared fields, in declaration order."""
        return tuple(self._fields.values())

    def field(self, name: str) -> FieldSpec:
        """The declaration of ``name``. Raises WorldError naming the declared fields."""
        spec = self._fields.get(name)
        if spec is None:
            raise WorldError(f"unknown field {name!r}; this world declares {', '.join(map(repr, self._fields))}")
        return spec

    def chunk_nbytes(self, name: str) -> int:
        """Bytes one chunk of field ``name`` occupies (in the world and in its mirror)."""
        found = self._chunk_nbytes.get(name)
        return found if found is not None else self.tiles_per_chunk * self.field(name).value_bytes

    # ---- chunks ----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, key: object) -> bool:
        return _lookup(self._slot_of, key) is not None

    def keys(self) -> list[int]:
        """Live chunk keys, sorted."""
        return sorted(self._slot_of)

    def add(self, key: int, values: Mapping[str, Any] | None = None) -> int:
        """Add chunk ``key`` (zero-filled, or from ``values``) and answer its mirror slot.

        Every field of the new chunk is dirty.

        Raises:
            WorldError: ``key`` is live already, not an int, or ``values`` names an unknown field.
            WorldFullError: no slot is free.
        """
        with self.lock:
            key = _check_key(key)
            if key in self._slot_of:
                raise WorldError(f"chunk {key} is already in the world (slot {self._slot_of[key]}); evict it first")
            if not self._free:
                raise WorldFullError(f"all {self.max_chunks} chunk slots are taken; evict a chunk or raise max_chunks")
            converted = {name: self._convert(name, v) for name, v in (values or {}).items()}
            slot = heapq.heappop(self._free)
            for name, rw in self._rw.items():
                # A reused slot still holds the evicted chunk's data: always overwrite it.
                rw[slot] = converted.get(name, 0)
                self._set_dirty(name, slot)
            self._slot_of[key] = slot
            self._key_at[slot] = key
            if _I64_MIN <= key <= _I64_MAX:
                self._key_vec[slot] = key
            else:
                self._wide_keys += 1
            self._bump(key)
            return slot

    def evict(self, key: int) -> int:
        """Remove chunk ``key``; answer the slot it freed (reused by a later ``add``).

        Upload spans and versions of the chunk go stale; its dirty entries are dropped.
        """
        with self.lock:
            slot = self.slot(key)
            if key in self._editing:
                raise ChunkBusyError(f"chunk {key} cannot be evicted inside its own edit")
            stored = self._key_at[slot]  # the int added (``key`` may be a float equal to it)
            del self._slot_of[key]
            del self._version[key]
            self._key_at[slot] = None
            if _I64_MIN <= stored <= _I64_MAX:  # type: ignore[operator]
                self._key_vec[slot] = 0
            else:
                self._wide_keys -= 1
            heapq.heappush(self._free, slot)
            for masks in (self._dirty_mask, *tuple(self._dirty_rows.values())):
                for mask in masks.values():
                    mask[slot] = False
            self._slot_version[slot] = 0
            self._clock += 1  # eviction is a change of the world, if not of a live chunk
            return slot

    def slot(self, key: int) -> int:
        """The mirror slot of live chunk ``key``. Raises UnknownChunkError (also for a key
        that is no chunk key: unhashable, or a bool, which ``add`` refuses and a lookup read as
        chunk 1 or 0: ``write(True, ...)`` changed chunk 1)."""
        try:
            found = self._slot_of[key]
        except KeyError:
            raise UnknownChunkError(f"no live chunk {key!r} in the world ({len(self)} live)") from None
        except TypeError:
            raise UnknownChunkError(f"no live chunk {key!r}: chunk keys are ints") from None
        if type(key) in _BOOLS:
            raise UnknownChunkError(f"no live chunk {key!r}: chunk keys are ints, not bools")
        return found

    def key_at(self, slot: int) -> int | None:
        """The key of the chunk in ``slot``, or None when the slot is free."""
        return self._key_at[slot]

    # ---- versions --------------------------------------------------------------------

    def version(self, key: int) -> int:
        """The content version of live chunk ``key``; every mutation gives it a new, larger one."""
        self.slot(key)
        return self._version[key]

    def is_current(self, key: int, version: int) -> bool:
        """Whether chunk ``key`` is live and still has content ``version`` (the staleness test)."""
        return _lookup(self._version, key) == version

    @property
    def clock(self) -> int:
        """The world-wide mutation counter (the latest version handed out)."""
        return self._clock

    def _bump(self, key: int) -> int:
        self._clock += 1
        self._version[key] = self._clock
        self._slot_version[self._slot_of[key]] = self._clock
        return self._clock

    # ---- reading ---------------------------------------------------------------------

    def read(self, key: int, name: str) -> np.ndarray:
        """A read-only view of field ``name`` of chunk ``key`` (shape ``chunk_shape``).

        The view is live: it shows later mutations. Copy it to keep a snapshot.
        """
        self.field(name)
        return self._base[name][self.slot(key)]

    def mirror(self, name: str) -> np.ndarray:
        """The whole dense, slot-major array of field ``name``, read-only (free slots hold junk)."""
        self.field(name)
        return self._base[name][...]  # a view: the owning array itself could be made writeable

    def slab(self, name: str, first_slot: int, count: int = 1) -> np.ndarray:
        """Read-only contiguous view of ``count`` slots from ``first_slot`` (one coalesced upload)."""
        self.field(name)
        if first_slot < 0 or count < 1 or first_slot + count > self.max_chunks:
            raise WorldError(f"slots {first_slot}..{first_slot + count - 1} are outside 0..{self.max_chunks - 1}")
        return self._base[name][first_slot : first_slot + count]

    # ---- mutation --------------------------------------------------------------------

    def write(self, key: int, name: str, values: Any) -> int:
        """Replace field ``name`` of chunk ``key`` (values broadcast to the chunk shape).

        Answers the chunk's new version. Raises WorldError for a wrong shape or an unsafe cast
        (float into an int field, an int out of the field's range).
        """
        with self.lock:
            slot = self._mutable_slot(key)
            converted = self._convert(name, values)
            return self._store(key, slot, {name: converted})

    def set_tile(self, key: int, name: str, tile: tuple[int, ...], value: Any) -> int:
        """Set one tile (``(y, x)`` for a 2-D chunk) of field ``name``; answers the new version."""
        with self.lock:
            slot = self._mutable_slot(key)
            spec = self.field(name)
            idx = tuple(tile) if isinstance(tile, (tuple, list)) else (tile,)
            if len(idx) != len(self.chunk_shape) or not all(
                isinstance(i, (int, np.integer)) and not isinstance(i, bool) and 0 <= i < n for i, n in zip(idx, self.chunk_shape, strict=True)
            ):
                raise WorldError(f"tile {tile!r} is outside chunk shape {self.chunk_shape}")
            return self._store(key, slot, {name: _cast(_data(name, value), spec, name, ())}, idx)

    @contextmanager
    def edit(self, key: int) -> Iterator[ChunkEdit]:
        """Edit chunk ``key`` in place of several ``write`` calls::

            with world.edit(key) as f:
                f["height"][3, 4] = 1.0

        Each field taken from ``f`` is a private writeable copy; on normal exit the copies are
        committed together, those fields marked dirty and the chunk given one new version. An
        exception inside the block discards the edit. While it is open, other mutations of the
        chunk raise ChunkBusyError.
        """
        with self.lock:  # not held while the block runs: only its start and its commit
            slot = self._mutable_slot(key)
            self._editing.add(key)
        edit = ChunkEdit(self, key, slot)
        try:
            yield edit
            with self.lock:
                taken = edit._close()
                for name, arr in taken.items():
                    # All or nothing: an array reshaped in place (arr.shape = ...) failed the
                    # store half way, one field stored under a new version (review helper 221).
                    want = self._rw[name].shape[1:]
                    if arr.shape != want or arr.dtype != self._rw[name].dtype:
                        raise WorldError(
                            f"world.edit({key}): field {name!r} was handed back as shape {arr.shape} {arr.dtype}, not its {want} {self._rw[name].dtype} "
                            "(write into the array, arr[...] = values, rather than reshaping it); nothing of the edit was stored"
                        )
                if taken:
                    # A bool copy may hold bytes other than 0/1 (np.copyto of raw bytes):
                    # stored as 0/1, as write() stores them.
                    self._store(key, slot, {name: arr.view(np.uint8) != 0 if arr.dtype == np.bool_ else arr for name, arr in taken.items()})
        finally:
            # Whatever ends the edit (the block raised, or an interrupt while the commit waits
            # for the lock), the chunk is free again and the edit's arrays are closed.
            if edit._open:
                edit._close()
            self._editing.discard(key)

    def _store(self, key: int, slot: int, values: dict[str, np.ndarray], tile: tuple[int, ...] = ()) -> int:
        """Store checked ``values`` (field -> the chunk's array, or ``tile``'s value) into chunk
        ``key``; answers its new version. The chunk is marked dirty and versioned before its bytes change: an
        interrupt (Ctrl-C) anywhere in here leaves the old bytes (with at most a new version
        and flags: computed again, the same), or new bytes that are versioned and flagged;
        never new bytes under the version results were computed at (review helper 206: the
        engine kept the old results for good). Each field's store is one numpy copy."""
        for name in values:
            self._set_dirty(name, slot)
        version = self._bump(key)
        for name, arr in values.items():
            self._rw[name][(slot, *tile)] = arr
        return version

    def _mutable_slot(self, key: int) -> int:
        slot = self.slot(key)
        if key in self._editing:
            raise ChunkBusyError(f"chunk {key} has an open edit; change it through the edit's fields")
        return slot

    def _convert(self, name: str, values: Any) -> np.ndarray:
        spec = self.field(name)
        arr = _data(name, values)
        try:
            arr = np.broadcast_to(arr, self.chunk_shape)
        except ValueError:
            raise WorldError(f"field {name!r} takes shape {self.chunk_shape}, not {arr.shape}") from None
        return _cast(arr, spec, name, self.chunk_shape)

    # ---- dirty tracking --------------------------------------------------------------

    def _set_dirty(self, name: str, slot: int) -> None:
        self._dirty_mask[name][slot] = True
        if self._dirty_rows:
            # A snapshot: a released engine's finaliser may drop its row meanwhile (GC, any thread).
            for masks in tuple(self._dirty_rows.values()):
                masks[name][slot] = True

    def _masks(self, consumer: int | None) -> dict[str, np.ndarray]:
        if consumer is None:
            return self._dirty_mask
        masks = self._dirty_rows.get(consumer)
        if masks is None:
            raise WorldError(f"dirty-flag consumer {consumer!r} is not registered with this world (released, or another world's)")
        return masks

    def claim_dirty(self, owner: Any) -> int | None:
        """Register ``owner`` (an engine) as a consumer of dirty flags. The first live one takes
        the world's own flags (None: what ``dirty()`` answers); another gets a token for flags
        of its own, set for every live chunk (its mirrors start empty), which every change
        sets too and only its takes clear. Released with :meth:`release_dirty`, or when
        ``owner`` is garbage."""
        with self.lock:
            held = self._dirty_holder()
            if held is None or held is owner:
                self._dirty_owner = weakref.ref(owner)
                return None
            token = self._next_dirty_token
            self._next_dirty_token += 1
            live = np.zeros(self.max_chunks, dtype=bool)
            live[list(self._slot_of.values())] = True
            self._dirty_rows[token] = {name: live.copy() for name in self._fields}
            self._row_finalizers[token] = weakref.finalize(owner, self._drop_row, token)
            return token

    def reclaim_dirty(self, owner: Any, token: int) -> int | None:
        """``token`` (flags of ``owner``'s own) while another live consumer holds the world's
        flags; else None: the world's flags are ``owner``'s now, and they are its own (every
        change set them, and only its takes cleared them). The world's flags as they were are
        the gone holder's: merged in, they would send again chunks ``owner`` sent already,
        overwriting a kernel-written mirror's GPU state with the world's older bytes."""
        with self.lock:
            held = self._dirty_holder()
            if held is not None and held is not owner:
                return token
            rows = self._dirty_rows.pop(token, None)
            self._forget_row(token)
            if rows is not None:
                for name, mask in rows.items():
                    self._dirty_mask[name][:] = mask
            self._dirty_owner = weakref.ref(owner)
            return None

    def park_dirty(self, owner: Any, token: int | None) -> int:
        """Stop ``owner`` (an engine closing) consuming flags (``token`` as :meth:`claim_dirty`
        answered) and park them instead: the flags it had not taken yet, which every change
        keeps setting (``mark_dirty`` included), for :meth:`unpark_dirty` when it is used again.
        One lock: no change lands between the release and the parking. Answers the parked
        flags' token; they are dropped when ``owner`` is garbage."""
        with self.lock:
            if token is not None and token in self._dirty_rows:
                return token  # its own flags go on being set: parked as they are
            if self._dirty_holder() is owner:
                self._dirty_owner = None
            parked = self._next_dirty_token
            self._next_dirty_token += 1
            self._dirty_rows[parked] = {name: mask.copy() for name, mask in self._dirty_mask.items()}
            self._row_finalizers[parked] = weakref.finalize(owner, self._drop_row, parked)
            return parked

    def unpark_dirty(self, parked: int, names: list[str], consumer: int | None = None) -> None:
        """Make ``consumer``'s flags of fields ``names`` (the world's own for None) those parked
        under ``parked``, exactly what changed since, and drop the parked flags."""
        with self.lock:
            masks = self._masks(consumer) if parked != consumer else None  # first: a refusal keeps the parked flags (helper 221)
            rows = self._dirty_rows.pop(parked, None)
            self._forget_row(parked)  # one finaliser an engine, however often it is closed
            if rows is None or masks is None:
                return
            for name in names:
                masks[self.field(name).name][:] = rows[self.field(name).name]

    def set_dirty_flags(self, name: str, consumer: int | None = None) -> None:
        """Set ``consumer``'s dirty flag of field ``name`` (the world's own for None) for every
        live chunk, and no other consumer's (``mark_dirty`` sets everyone's: another engine
        would send again chunks it has, overwriting a mirror its kernels write)."""
        with self.lock:
            mask = self._masks(consumer)[self.field(name).name]
            mask[list(self._slot_of.values())] = True

    def release_dirty(self, owner: Any, token: int | None) -> None:
        """``owner`` takes no more dirty flags (``token`` as :meth:`claim_dirty` answered)."""
        with self.lock:
            if token is not None:
                self._dirty_rows.pop(token, None)
                self._forget_row(token)
            elif self._dirty_holder() is owner:
                self._dirty_owner = None

    def _drop_row(self, token: int) -> None:
        """Flags of a consumer that is garbage (a finaliser: plain dict pops, no lock)."""
        self._dirty_rows.pop(token, None)
        self._row_finalizers.pop(token, None)

    def _forget_row(self, token: int) -> None:
        """Flags given up by their owner: their finaliser goes too (no registry entry is left
        for an engine closed and used again many times)."""
        finalizer = self._row_finalizers.pop(token, None)
        if finalizer is not None:
            finalizer.detach()

    def _dirty_holder(self) -> Any:
        """The live consumer of the world's own dirty flags, or None."""
        return self._dirty_owner() if self._dirty_owner is not None else None

    def dirty(self, name: str | None = None, consumer: int | None = None) -> list[tuple[int, str]]:
        """The dirty (chunk key, field) pairs, sorted by field declaration order then slot
        (``consumer``: a second engine's own flags, see :meth:`claim_dirty`)."""
        names = [self.field(name).name] if name is not None else list(self._fields)
        key_at, masks = self._key_at, self._masks(consumer)
        return [(key_at[slot], n) for n in names for slot in np.flatnonzero(masks[n]).tolist()]  # type: ignore[misc]

    def is_dirty(self, key: int, name: str, consumer: int | None = None) -> bool:
        slot = _lookup(self._slot_of, key)
        return slot is not None and bool(self._masks(consumer)[self.field(name).name][slot])

    def take_dirty(self, name: str | None = None, consumer: int | None = None) -> list[tuple[int, str]]:
        """Answer ``dirty(name)`` and clear those entries (the uploader's call)."""
        with self.lock:
            found = self.dirty(name, consumer)
            masks = self._masks(consumer)
            for n in [name] if name is not None else list(self._fields):
                masks[n][:] = False
            return found

    def take_dirty_slots(self, name: str, consumer: int | None = None) -> np.ndarray:
        """Sorted slots of the chunks whose field ``name`` is dirty; clears them."""
        with self.lock:
            masks = self._dirty_mask if consumer is None else self._masks(consumer)
            mask = masks.get(name)
            if mask is None:
                mask = masks[self.field(name).name]  # WorldError naming the fields
            slots = mask.nonzero()[0]
            mask.fill(False)  # every set entry was just taken: one memset, not a scatter
            return slots

    def slot_versions(self, slots: Any) -> np.ndarray:
        """Content versions of the chunks in ``slots`` (0 for a free slot): a new vector for
        an index vector (a slice answers a view).

        Raises:
            WorldError: a negative slot (``slots_of``'s -1 for a key not in the world).
        """
        try:
            return self._slot_version[_slot_index(slots)]
        except IndexError as exc:  # past the last slot, or a mask of another length
            raise WorldError(f"slots {_shown(slots)} do not index this world's {len(self._slot_version)} slots ({exc})") from None

    def slots_of(self, keys: Any) -> np.ndarray:
        """The slots of chunks ``keys`` as i64 (-1 for a key not in the world, and for a bool:
        no chunk key, though a dict reads True as 1)."""
        slot_of = self._slot_of
        found = np.fromiter(map(slot_of.get, keys, repeat(-1)), dtype=np.int64, count=len(keys))  # (no Python frame a key)
        if type(keys) is np.ndarray and keys.dtype.kind in "iu":
            return found
        # A bool finds chunk 0's or 1's slot (review helper 236): only those answers are looked
        # at, not every key (a scan of every key's type cost more than the lookups, helper 243).
        for key in (0, 1):
            slot = slot_of.get(key)
            if slot is not None:
                for i in np.flatnonzero(found == slot).tolist():  # (one a key unless keys repeat)
                    if type(keys[i]) in _BOOLS:
                        found[i] = -1
        return found

    def keys_at(self, slots: Any) -> list[int]:
        """The chunk keys in ``slots`` (None for a free slot)."""
        at = slots if type(slots) is list else np.asarray(slots).tolist()
        if at and min(at) < 0:
            raise _no_slot(min(at))
        try:
            if len(at) < 2:
                return [self._key_at[s] for s in at]  # type: ignore[misc]
            return list(itemgetter(*at)(self._key_at))  # one C call: a whole world's slots at once
        except (IndexError, TypeError) as exc:  # past the last slot, or not a slot number
            raise WorldError(f"slots {_shown(at)} do not index this world's {len(self._key_at)} slots ({exc})") from None

    def key_vector(self, slots: Any) -> np.ndarray | None:
        """The keys of the live chunks in ``slots`` as a new i64 vector (a snapshot: later
        adds and evictions do not change it), or None while a live key does not fit in i64.
        A free slot reads 0: ask ``keys_at`` for slots that may be free."""
        if self._wide_keys:
            return None
        return self._key_vec.take(_slot_index(slots))

    def mark_dirty(self, key: int | None = None, name: str | None = None) -> None:
        """Mark fields dirty without changing data (e.g. to re-upload after a new device)."""
        with self.lock:
            keys = [key] if key is not None else list(self._slot_of)
            names = [name] if name is not None else list(self._fields)
            for k in keys:
                slot = self.slot(k)
                for n in names:
                    self._set_dirty(self.field(n).name, slot)

    def _edit_field(self, slot: int, name: str) -> np.ndarray:
        self.field(name)
        return self._rw[name][slot].copy()

    # ---- copies ----------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        """A snapshot for ``pickle`` and ``copy.deepcopy``, under the lock when it is free (the
        lock itself and the writeable aliases are rebuilt by ``__setstate__``)."""
        # Not waited for: the thread holding it may be waiting for this copy (a frame whose
        # cpu_fallback hands the world to a process pool, pickled on the pool's own thread).
        # A frame reads the world without changing it, so a copy made meanwhile is whole.
        held = self.lock.acquire(blocking=False)
        try:
            state = {k: v for k, v in self.__dict__.items() if k not in ("lock", "_rw")}
            state["_base"] = {name: np.array(base) for name, base in self._base.items()}
            for key in ("_slot_of", "_version", "_key_at", "_free"):
                state[key] = copy.copy(state[key])
            state["_dirty_mask"] = {name: mask.copy() for name, mask in self._dirty_mask.items()}
            state["_key_vec"], state["_slot_version"] = self._key_vec.copy(), self._slot_version.copy()
            state["_editing"] = set()  # an open edit belongs to this world, not to a copy
            state["_dirty_owner"], state["_dirty_rows"], state["_row_finalizers"] = None, {}, {}  # a copy has no engines yet
            return state
        finally:
            if held:
                self.lock.release()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        # The private writeable alias must be a view of the same memory the read-only base
        # shows (a copy of each would make writes invisible to reads).
        self._rw = {}
        for name, base in list(self._base.items()):
            # Unpickled and deep-copied arrays own their data already: copied only otherwise.
            owned = base if base.flags.owndata and base.flags.writeable else np.array(base)
            self._rw[name] = owned[...]
            owned.flags.writeable = False
            self._base[name] = owned
        self.lock = threading.RLock()

    def __repr__(self) -> str:
        fields = ", ".join(f"{s.name}:{s.format.name}" for s in self.fields)
        return f"<World {self.chunk_shape} [{fields}] {len(self)}/{self.max_chunks} chunks>"


_I64_MIN, _I64_MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)


def _check_key(key: Any) -> int:
    if not isinstance(key, (int, np.integer)) or isinstance(key, bool):
        raise WorldError(f"chunk keys are ints, not {key!r}")
    return int(key)


def _cast(arr: np.ndarray, spec: FieldSpec, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """Cast ``arr`` to the field's dtype, refusing what would silently change values:
    floats into integer or bool fields, integers outside the field's range, finite floats past a
    float field's range (they would become inf), non-numbers. (Integers into a float field, and
    floats into a narrower one, round to its precision, as a float store does.)"""
    if arr.shape != shape and arr.shape != ():
        raise WorldError(f"field {name!r} takes shape {shape}, not {arr.shape}")
    target, kind = spec.dtype, arr.dtype.kind
    if kind not in "biuf":
        raise WorldError(f"field {name!r} holds {target}; values of {arr.dtype} cannot be stored")
    if target.kind in "biu" and kind == "f":
        raise WorldError(f"field {name!r} holds {target}; round float values explicitly before writing them")
    if target.kind in "biu" and kind in "iu" and arr.size:
        info = np.iinfo(target) if target.kind != "b" else np.iinfo(np.uint8)
        lo, hi = int(arr.min()), int(arr.max())
        top = 1 if target.kind == "b" else info.max
        if lo < info.min or hi > top:
            raise WorldError(f"field {name!r} holds {target} ({info.min}..{top}); got values {lo}..{hi}")
    if target.kind == "f" and kind == "f" and arr.size and target.itemsize < arr.dtype.itemsize:
        # Finite values past the field's range would become inf (rounding to the field's
        # precision is a float store's nature; overflow is not).
        big = float(np.finfo(target).max)
        finite = arr[np.isfinite(arr)]
        if finite.size and (float(finite.max()) > big or float(finite.min()) < -big):
            raise WorldError(
                f"field {name!r} holds {target} (at most {big:.4g} in magnitude); got values up to {max(abs(float(finite.max())), abs(float(finite.min()))):.4g}"
            )
    if kind == "b":
        # A bool array may hold bytes other than 0 and 1 (np.frombuffer over saved bytes): numpy
        # keeps them through astype; the mirror and the kernels would see 2 or 255.
        arr = arr.view(np.uint8) != 0
    return arr.astype(target, copy=False)


def _slot_index(slots: Any) -> Any:
    """``slots`` as an index into the world's slot vectors, refused when one is negative: numpy
    reads -1 (``slots_of``'s answer for a key not in the world) as the last slot, and answered
    another chunk's version or key (review helper 221). Unsigned vectors (the engine's work
    lists) and slices go as they are."""
    if type(slots) is slice or (type(slots) is np.ndarray and slots.dtype.kind in "ub"):
        return slots
    index = slots if type(slots) is np.ndarray else np.asarray(slots)
    if index.dtype.kind == "i" and index.size:
        lowest = int(index.min())
        if lowest < 0:
            raise _no_slot(lowest)
    return slots  # (as given: numpy reads an empty list as an empty index, np.asarray makes it floats)


def _shown(slots: Any, most: int = 8) -> str:
    """A few of ``slots`` for an error message."""
    if isinstance(slots, slice):
        return repr(slots)
    listed = np.asarray(slots).reshape(-1).tolist()
    return repr(listed[:most])[:-1] + ", ...]" if len(listed) > most else repr(listed)


def _no_slot(slot: int) -> WorldError:
    return WorldError(f"slot {slot} is no slot (slots_of answers -1 for a key not in the world)")


_BOOLS = (bool, np.bool_)  # equal to 0 and 1 as dict keys, yet no chunk keys (``add`` refuses them)


def _lookup(table: dict, key: object) -> Any:
    """``table.get(key)`` for a chunk key; None for what is no chunk key (unhashable, a bool),
    which a dict would raise TypeError for, or read as chunk 0 or 1."""
    try:
        return table.get(key) if type(key) not in _BOOLS else None
    except TypeError:  # unhashable
        return None


def _data(name: str, values: Any) -> np.ndarray:
    """``values`` for field ``name`` as an array, a masked array refused (see masked_refusal)."""
    masked = masked_refusal(values)
    if masked is not None:
        raise WorldError(f"field {name!r}: {masked}")
    return np.asarray(values)
