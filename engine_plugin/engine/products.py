"""A registered product's engine-side state, its work lists, and turning records into results.

A product keeps the chunks it still owes results for (``pending``). Each frame the engine
turns them into a *work list* (:class:`Work`): chunk slots or global tile indices for the
kernel, and the ``(key, version)`` pairs the results derive from. When results come back (GPU
readback or CPU fallback) :func:`split_current` keeps what is still true of the world.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..gpu.descriptors import ChunkKeys, ReadbackPolicy
from ..gpu.handles import GpuProductHandle
from ..world.world import World
from .contract import CHUNK_POLICIES, TILE_ITEMS, ProductError, ProductPlan, ProductResult
from .records import has_whole_outputs, select_items
from .selection import Tile, linear_index

__all__ = ["UNKNOWN_VERSION", "ChunkIndex", "InFlight", "Product", "Work", "chunk_tiles", "held_values", "split_current"]


UNKNOWN_VERSION = -1
"""The version a work list carries for a chunk whose mirrored bytes it cannot vouch for: no
chunk ever has it, so its result is dropped as stale when it lands and the chunk is owed again."""


class ChunkIndex:
    """``(slot, version)`` of live chunks, looked up once for every product of a frame.

    Made before the frame's uploads take the world's changes, and valid while the world does
    not change: the engine makes a new one after callbacks ran. A version tags the result a GPU
    computes from the mirrors, so it must be the one the mirrors hold. That holds for every
    version read while the world's mutation clock still reads as it did when the index was
    made. Once another thread changed the world meanwhile (the world is single-threaded by
    contract; this keeps a breach from applying a wrong number), a chunk first looked up after
    it answers :data:`UNKNOWN_VERSION`: its mirror may hold older bytes than its version says.
    """

    __slots__ = ("world", "clock", "_meta", "_learned", "_takes", "_sorted", "_columns", "_vectors")

    def __init__(self, world: Any, for_mirrors: bool = True) -> None:
        self.world = world
        # The world's clock when made (None: a world without one, or work computed from the
        # world itself, as a CPU fallback's: a version read before the bytes is never newer).
        self.clock: int | None = getattr(world, "clock", None) if for_mirrors else None
        self._meta: dict[int, tuple[int, int]] = {}
        self._learned: list[tuple[Sequence[int], Any, Any]] = []  # learn()'s vectors, made into _meta when get() first needs them
        self._takes: list[tuple[Sequence[int], Any, Any, list]] = []  # learn()'s vectors, kept: a work list owing one take is its columns
        self._sorted: dict[frozenset, list] = {}
        self._columns: dict[frozenset, tuple[tuple[int, ...], tuple[int, ...], np.ndarray, np.ndarray]] = {}
        # World's own slot and version vectors (a subclass answering other slots or versions
        # is asked chunk by chunk, through get).
        cls = type(world)
        self._vectors = cls is World or all(
            getattr(cls, name, None) is getattr(World, name) for name in ("slots_of", "slot_versions", "slot", "version", "__contains__")
        )

    def sorted_columns(self, keys: set[int] | frozenset[int]) -> tuple[tuple[int, ...], tuple[int, ...], np.ndarray, np.ndarray]:
        """``(keys, versions, u32 slots, i64 versions)`` of the live chunks among ``keys``, by
        slot: a work list's columns, made once a frame for every product owing the same chunks."""
        frozen = frozenset(keys)
        found = self._columns.get(frozen)
        if found is None:
            found = (self._taken_columns(frozen) or self._vector_columns(frozen)) if self._vectors else None
            if found is None:
                entries = self.sorted_entries(frozen)
                versions = tuple([e[2] for e in entries])
                found = (
                    tuple([e[1] for e in entries]),
                    versions,
                    np.array([e[0] for e in entries], dtype=np.uint32),
                    np.array(versions, dtype=np.int64),
                )
            self._columns[frozen] = found
        return found

    def _taken_columns(self, frozen: frozenset[int]) -> tuple[tuple[int, ...], tuple[int, ...], np.ndarray, np.ndarray] | None:
        """:meth:`sorted_columns` of exactly the chunks one upload take learned (the common
        frame: a product owes what changed in its field), read from the take's own vectors
        (live chunks by slot, their versions: what :meth:`_vector_columns` would read from
        the world, which has not moved since), or None."""
        if self.clock is None or self.moved:
            return None
        for keys, slots, versions, made in self._takes:
            if len(keys) != len(frozen):
                continue
            listed = keys.vector.tolist() if type(keys) is ChunkKeys else list(keys)
            if not frozen.issuperset(listed):  # (equal sizes: the same set)
                continue
            if not made:
                made.append((tuple(listed), tuple(versions.tolist()), slots.astype(np.uint32), np.asarray(versions, dtype=np.int64)))
            return made[0]  # type: ignore[no-any-return]
        return None

    def _vector_columns(self, frozen: frozenset[int]) -> tuple[tuple[int, ...], tuple[int, ...], np.ndarray, np.ndarray] | None:
        """:meth:`sorted_columns` read from the world's vectors (a frame owes ~100 chunks a
        product: one lookup each cost more than the dispatch), or None once the world moved.
        While it holds still every lookup of :meth:`get` answers the chunk's current slot and
        version (what the takes learned were current then, and nothing changed since), so the
        vectors answer the same columns."""
        if self.clock is None or self.moved:
            return None
        world = self.world
        listed = list(frozen)
        slots = world.slots_of(listed)
        order = np.argsort(slots, kind="stable")
        slots = slots[order]
        live = int(np.searchsorted(slots, 0))  # evicted keys (-1) sort first: dropped
        order, slots = order[live:], slots[live:]
        version_array = np.asarray(world.slot_versions(slots), dtype=np.int64)
        return (
            tuple([listed[i] for i in order.tolist()]),
            tuple(version_array.tolist()),
            slots.astype(np.uint32),
            version_array,
        )

    def sorted_entries(self, keys: set[int] | frozenset[int]) -> list[tuple[int, int, int]]:
        """``(slot, key, version)`` of the live chunks among ``keys``, by slot (shared by the
        products that owe the same chunks, as products over the same fields do)."""
        frozen = keys if isinstance(keys, frozenset) else frozenset(keys)
        found = self._sorted.get(frozen)
        if found is None:
            get = self.get
            metas = [(k, get(k)) for k in frozen]
            found = [(m[0], k, m[1]) for k, m in metas if m is not None]
            found.sort()
            self._sorted[frozen] = found
        return found

    @property
    def moved(self) -> bool:
        """Whether the world changed since the index was made (by another thread)."""
        return self.clock is not None and self.world.clock != self.clock

    def learn(self, keys: Sequence[int], slots: Any, versions: Any) -> None:
        """Record ``(slot, version)`` of live chunks the caller read in bulk (the uploads), unless
        the world moved since the index was made: versions taken then may be newer than another
        field's mirror holds (that chunk's lookup answers :data:`UNKNOWN_VERSION`)."""
        if not self.moved:  # kept as vectors: a frame whose work lists read the world's vectors never asks
            self._learned.append((keys, slots, versions))
            self._takes.append((keys, slots, versions, []))

    def get(self, key: int) -> tuple[int, int] | None:
        """``(slot, version)`` of live chunk ``key``, or None when it is not in the world."""
        if self._learned:
            learned, self._learned = self._learned, []
            for keys, slots, versions in learned:
                self._meta.update(zip(keys, zip(slots.tolist(), versions.tolist())))
        found = self._meta.get(key)
        if found is None:
            world = self.world
            if key not in world:
                return None
            found = (world.slot(key), world.version(key))
            if self.moved:  # read after the mirrors were filled: they may hold older bytes
                found = (found[0], UNKNOWN_VERSION)
            self._meta[key] = found
        return found


@dataclass
class Work:
    """One frame's work of a product: what the kernel computes, what it derives from."""

    keys: tuple[int, ...]  # the chunks covered, in work-list order (selections: first-seen order)
    versions: tuple[int, ...]
    items: np.ndarray  # u32: chunk slots, or global tile indices
    tiles: tuple[Tile, ...] = ()  # selections: (key, tile) per item
    serial: int = 0  # set when the work is sent (Product.done): tells a late failure from newer work
    slots: np.ndarray | None = None  # the chunks' slots, aligned with keys (revalidated as one vector)
    version_array: np.ndarray | None = None  # the versions as i64, when the work has slots

    def __bool__(self) -> bool:
        return bool(self.keys)


@dataclass
class InFlight:
    """A readback the engine waits for (``ReadbackDesc.user``)."""

    product: Product
    gpu_handle: GpuProductHandle
    work: Work
    frame: int
    plan: ProductPlan
    layout: Mapping[str, Any] = field(default_factory=dict)  # output -> runtime Placed
    epoch: int = 0  # the product's selection epoch at dispatch (select_tiles makes older results void)


class Product:
    """Everything the engine knows about one registered product."""

    def __init__(
        self,
        *,
        key: Any,
        policy: ReadbackPolicy,
        fields: Any,
        apply: Callable | None,
        cpu_fallback: Callable | None,
        params: Mapping[str, Any],
        ref: Any,
        program: Any,
        spec: Mapping[str, str] | None,
        columns: Any,
        inputs: Mapping[str, Any] | None = None,
        readback: Any = None,
    ) -> None:
        self.key = key
        self.handle: GpuProductHandle | None = None  # the engine handle (set on insertion)
        self.policy = policy
        self.fields_arg = fields
        self.apply = apply
        self.cpu_fallback = cpu_fallback
        self.params = held_values(params)
        self.ref = ref
        self.program = program
        self.spec = dict(spec) if spec else None
        self.columns = columns
        # Bindings the caller supplies once, used as given (arrays, tables, buffers alike): after
        # changing one in place the caller says so with invalidate() (review helper 243: copied,
        # an array could not be changed at all).
        self.inputs = dict(inputs or {})
        self.readback = tuple(readback) if readback is not None else None
        self.plan: ProductPlan | None = None
        self.spec_values: dict[str, str] = {}
        self.gpu: Any = None  # GpuProduct on the current backend, or None
        self.pending: set[int] = set()
        # chunk -> (content version, work serial) last computed or on its way: a content version
        # is computed once (rule: applied at most once per generation, chunk, version), and only
        # the failure of that very work owes it again.
        self.sent: dict[int, tuple[int, int]] = {}
        # The same, by chunk slot (version 0: none), while every work sent carried its slots
        # (``sent`` stays empty meanwhile): sending a work list and owing a frame's changed
        # chunks are then vector operations. Versions are unique world-wide, so a slot's entry
        # never matches a later chunk in that slot.
        self._sent_at: np.ndarray | None = None
        self._sent_serial: np.ndarray | None = None
        self._sent_key: np.ndarray | None = None  # the chunk each slot's last send was for (objects: any int)
        self._sent_world: Any = None
        self._serials = itertools.count(1)
        self.epoch = 0  # bumped by every new selection
        # Bumped when every chunk is owed anew (new params, kernel, registration, invalidate) and
        # at every call of its CPU fallback: an answer stands only if neither moved while the
        # fallback computed it (from inside it: review helper 177).
        self.renewals = 0
        self.fallback_calls = 0
        # chunk -> content version its CPU fallback last computed: the fallback does not depend
        # on the kernel, so a new GPU generation served by the CPU does not compute it again.
        self.cpu_done: dict[int, int] = {}
        self.cpu_plan: Any = None  # the fallback-visible plan cpu_done was computed for (see skip_computed)
        self.readback_failures = 0  # failed readbacks in a row (reset by a delivered one)
        self.gave_up = False  # moved to the CPU after repeated readback failures (until recover_gpu)
        self.detached = False  # released by a refused upload: re-registered on the GPU next frame
        # Refused again as it came back: tried after this many frames, doubling to REATTACH_MAX_WAIT
        # (each try re-creates and uploads the whole mirror: review helper 208).
        self.reattach_wait = 0
        self.reattach_backoff = 0
        self.force_cpu = False  # the backend refused this frame's work: run the fallback now
        self.selection: tuple[Tile, ...] = ()
        self.selection_keys: frozenset[int] = frozenset()
        self._linear: tuple[int, ...] = ()
        self.inflight = 0
        self.slot_waits = 0  # frames it waited for a readback slot (GPU-state readers: first in line)
        # A product whose kernel writes mirrors: chunks whose latest owed work its CPU fallback
        # served (the fallback writes no mirror): its readers wait until the GPU writes them.
        self.mirror_unwritten: set[int] = set()
        self.gpu_written: set[int] = set()  # chunks its kernel was dispatched over this frame (mirror written)
        self.dispatch_refused = False  # the backend refused its dispatch this frame, and the frames before (a limit)
        self.dispatch_refusals = 0  # refused dispatches in a row
        # Set (and logged once) while it waits for chunks a writer's CPU fallback served: its
        # ``product_error`` until that writer's kernel writes them on the GPU again.
        self.waiting: ProductError | None = None
        # Its readback can never fit the backend's byte budget (said by product_error while
        # no other error is; the engine's ReadbackBudgetError).
        self.budget_error: ProductError | None = None
        self.error: str | None = None  # the last error, rendered (see ``exception``)
        self.exception: BaseException | None = None  # ... and as raised: a PluginError carries its span
        self._off_gpu_error: BaseException | None = None  # the exception that took it off the GPU (see back_on_gpu)
        self.refused_program: Any = None  # a reloaded program that did not fit (not retried)
        # ``program`` pinned (Program.pinned): what the product compiles from. ``program`` itself
        # answers as its successor after any reload, one the engine refused too.
        self.kernel: Any = program.pinned() if hasattr(program, "pinned") else program
        # A reload was taken while a fallback served the product: what its kernel computed on
        # the GPU before is stale; everything is recomputed once it is on the GPU again.
        self.kernel_changed_off_gpu = False
        self.warned_no_fallback = False
        self.warned_overflow = False  # an append overflow was logged once (every result carries it)

    def fail(self, exc: BaseException | None, off_gpu: bool = False) -> None:
        """Record why the product left its kernel or the GPU (None: it is fine again).
        ``off_gpu``: why it left the GPU, over once it is registered there again."""
        self.exception = exc
        self.error = str(exc) if exc is not None else None
        self._off_gpu_error = exc if off_gpu else None

    def off_gpu(self, exc: BaseException) -> None:
        """Record ``exc`` as why it runs off the GPU, unless it reports another error (a
        refused reload's stays: it is not over when the product is back on the GPU)."""
        if self.exception is None or self.exception is self._off_gpu_error:
            self.fail(exc, off_gpu=True)

    def back_on_gpu(self) -> None:
        """Registered on the GPU again: the error that took it off (if that is what it
        reports) is over; one of a refused reload is not."""
        if self.exception is not None and self.exception is self._off_gpu_error:
            self.fail(None)

    @property
    def field_names(self) -> tuple[str, ...]:
        if self.plan is not None:
            return self.plan.field_names
        f = self.fields_arg
        if isinstance(f, str):
            return (f,)
        if isinstance(f, Mapping):
            return tuple(dict.fromkeys(f.values()))
        return tuple(dict.fromkeys(f or ()))

    @property
    def field_map(self) -> dict[str, str]:
        """binding -> world field."""
        if self.plan is not None:
            return {f.binding: f.field for f in self.plan.fields}
        f = self.fields_arg
        if isinstance(f, Mapping):
            return dict(f)
        return {name: name for name in self.field_names}

    @property
    def per_tile(self) -> bool:
        return self.policy not in CHUNK_POLICIES

    @property
    def tile_work(self) -> bool:
        """Whether the work list holds every tile of the owed chunks: ``FULL_FIELD``, and a
        ``NONE`` product whose kernel declares a ``tiles`` work list (a stencil, a colouring)."""
        if self.policy is ReadbackPolicy.FULL_FIELD:
            return True
        return self.policy is ReadbackPolicy.NONE and self.plan is not None and self.plan.items == TILE_ITEMS

    def set_selection(self, tiles: tuple[Tile, ...], shape: tuple[int, ...]) -> None:
        if tiles == self.selection and self.epoch:
            # The same selection again (a game re-sending its cursor every frame): nothing
            # changes. Voiding what is in flight for it would starve the product.
            return
        self.selection = tiles
        self.selection_keys = frozenset(k for k, _ in tiles)
        self._linear = tuple(linear_index(t, shape) for _, t in tiles)
        self.pending = set(self.selection_keys)
        self.epoch += 1  # results of the previous selection in flight are void
        self.cpu_done.clear()
        self.mirror_unwritten &= self.selection_keys  # it writes only what it selects

    def owe_unwritten(self, world: Any) -> None:
        """Owe its kernel the chunks its CPU fallback served without writing its mirror
        (``mirror_unwritten``; evicted ones are forgotten): on the GPU again, the kernel writes
        them for the readers waiting for them (review helper 95: a dispatch refused three
        frames, then accepted, left them unwritten for good)."""
        unwritten = {k for k in self.mirror_unwritten if k in world}
        self.mirror_unwritten = unwritten
        self.pending |= unwritten

    def rewrites(self, work: Work) -> list[int]:
        """The chunks of ``work`` owed to its kernel only for the mirror: unwritten, and with
        their results for these very versions applied by the CPU fallback already."""
        done, unwritten = self.cpu_done, self.mirror_unwritten
        return [k for k, v in zip(work.keys, work.versions) if k in unwritten and done.get(k) == v]

    def owe_everything(self, world: Any) -> None:
        """Owe results for every chunk this product covers (new registration, new program)."""
        self.renewals += 1
        if self.policy in (ReadbackPolicy.SELECTED_TILES, ReadbackPolicy.SELECTED_PATH):
            self.pending = set(self.selection_keys)
        else:
            self.pending = set(world.keys())
            slots = getattr(world, "max_chunks", None)
            if self._sent_at is None and not self.sent and isinstance(slots, int):
                self._sent_at = np.zeros(slots, dtype=np.int64)
                self._sent_serial = np.zeros(slots, dtype=np.int64)
                self._sent_key = np.full(slots, None, dtype=object)
                self._sent_world = world

    # -- work lists ------------------------------------------------------------------------
    def work(self, world: Any, keys: set[int] | None = None, index: ChunkIndex | None = None) -> Work:
        """The work list for the chunks owed (``keys``: those of them; default all owed).

        Evicted chunks are dropped from ``pending``; selections only keep their own chunks.
        ``index``: the frame's slot/version cache (products share it).
        """
        index = index if index is not None else ChunkIndex(world, for_mirrors=False)
        policy = self.policy
        selective = policy in (ReadbackPolicy.SELECTED_TILES, ReadbackPolicy.SELECTED_PATH)
        owed = self.pending if keys is None else keys
        if selective:
            meta = index.get
            entries = []
            for k in owed:
                m = meta(k)
                if m is not None and k in self.selection_keys:
                    entries.append((m[0], k, m[1]))
        else:
            keys_t, versions, slots, version_array = index.sorted_columns(owed)
            if keys is None and len(keys_t) != len(owed):
                self.pending = set(keys_t)  # evicted chunks are owed nothing
            if policy is ReadbackPolicy.FULL_FIELD:
                tiles = world.tiles_per_chunk
                items = (slots[:, None] * np.uint32(tiles) + np.arange(tiles, dtype=np.uint32)).reshape(-1)
                return Work(keys_t, versions, items, slots=slots, version_array=version_array)
            if self.tile_work:  # NONE over a `tiles` work list: one item a tile
                return Work(keys_t, versions, chunk_tiles(slots, world.tiles_per_chunk), slots=slots, version_array=version_array)
            return Work(keys_t, versions, slots, slots=slots, version_array=version_array)
        if keys is None and len(entries) != len(owed):
            self.pending = {e[1] for e in entries}  # evicted chunks, and chunks no selection covers, are owed nothing
        if policy is ReadbackPolicy.SELECTED_TILES:
            return self._tiles_work(world, {e[1] for e in entries}, index)
        if not entries or not all(k in world for k in self.selection_keys):
            # Nothing owed, or a path through an evicted chunk: it is not computed, and owes
            # nothing until that chunk is back (its add owes the path, computed whole then), as
            # when the evicted chunk was the one that changed.
            if keys is None:
                self.pending.clear()
            return Work((), (), np.zeros(0, np.uint32))
        return self._tiles_work(world, set(self.selection_keys), index)

    def _tiles_work(self, world: Any, due: set[int], index: ChunkIndex) -> Work:
        if not due:
            return Work((), (), np.zeros(0, np.uint32))
        tiles_per_chunk = world.tiles_per_chunk
        picked = [i for i, (k, _) in enumerate(self.selection) if k in due]
        tiles = tuple(self.selection[i] for i in picked)
        keys = tuple(dict.fromkeys(k for k, _ in tiles))
        meta = {k: index.get(k) for k in keys}
        items = np.fromiter(
            (meta[self.selection[i][0]][0] * tiles_per_chunk + self._linear[i] for i in picked),  # type: ignore[index]
            dtype=np.uint32,
            count=len(picked),
        )
        return Work(keys, tuple(meta[k][1] for k in keys), items, tiles)  # type: ignore[index]

    def done(self, work: Work) -> None:
        """The work's chunks are served (results applied, or on their way)."""
        self.pending.difference_update(work.keys)
        work.serial = serial = next(self._serials)
        at = self._sent_at
        if at is not None:
            slots = work.slots
            if slots is not None and len(slots) == len(work.keys):
                versions = work.version_array
                at[slots] = versions if versions is not None else np.asarray(work.versions, dtype=np.int64)
                self._sent_serial[slots] = serial  # type: ignore[index]
                self._sent_key[slots] = np.asarray(work.keys, dtype=object)  # type: ignore[index]
                return
            self._sent_to_dict()  # work without slots: the dict alone answers from now on
        self.sent.update(zip(work.keys, [(v, serial) for v in work.versions]))

    def longest_unsent(self, work: Work, count: int) -> list[int]:
        """``count`` of the work's chunks: those whose work was sent longest ago first (a chunk
        never sent, one in a slot whose last send was another chunk's too, first of all), then
        the oldest content changes (the smallest versions: they grow with the world's clock),
        then slot order. A split dispatch so serves every owed chunk in turn, however often one
        changes or is owed again (review helpers 207, 208, 211: in slot order a chunk changed
        every frame starved the others; by version alone, one owed again every frame by
        ``invalidate`` did)."""
        serials, sent_keys = self._sent_serial, self._sent_key  # (kept with _sent_at: by slot, or None)
        versions = work.version_array if work.version_array is not None else np.asarray(work.versions, dtype=np.int64)
        if serials is not None and sent_keys is not None and work.slots is not None and len(work.slots) == len(work.keys):
            last = serials[work.slots].copy()
            last[sent_keys[work.slots] != np.asarray(work.keys, dtype=object)] = 0  # the slot's send was another chunk's
        else:
            sent = self.sent
            last = np.fromiter(((sent.get(k) or (0, 0))[1] for k in work.keys), dtype=np.int64, count=len(work.keys))
        order = np.lexsort((versions, last))[:count]  # by last send, then version; stable
        keys = work.keys
        return [keys[i] for i in order.tolist()]

    def _sent_to_dict(self) -> None:
        """Move the by-slot record of what was sent into ``sent`` (keyed by the chunks now in
        those slots: an entry of an evicted chunk's slot holds a version no other chunk has)."""
        at, serials, world = self._sent_at, self._sent_serial, self._sent_world
        self._sent_at = self._sent_serial = self._sent_key = self._sent_world = None
        assert at is not None and serials is not None
        for k in world.keys():
            slot = world.slot(k)
            if at[slot]:
                self.sent[k] = (int(at[slot]), int(serials[slot]))

    def _sent_version(self, key: int, world: Any) -> tuple[int, int] | None:
        """``(content version, work serial)`` last sent for live chunk ``key``, or None."""
        at = self._sent_at
        if at is None:
            return self.sent.get(key)
        slot = world.slot(key)
        version = int(at[slot])
        return (version, int(self._sent_serial[slot])) if version else None  # type: ignore[index]

    def skip_computed(self, work: Work) -> list[int]:
        """Drop from the owed work the chunks whose current content the CPU fallback computed
        already (answers the chunks still to compute)."""
        if self.cpu_plan != fallback_view(self.plan):
            # A reload changed what the fallback answers (a record shape, an output): what it
            # computed before is the old plan's (helper 73: 2-lane records kept after vec4).
            self.cpu_done.clear()
        done = self.cpu_done
        skip = [k for k, v in zip(work.keys, work.versions) if done.get(k) == v]
        if skip:
            self.pending.difference_update(skip)
        return [k for k, v in zip(work.keys, work.versions) if done.get(k) != v]

    def owe_changed(self, keys: Any, meta: Callable[[int], tuple[int, int] | None], versions: Any = None, slots: Any = None) -> None:
        """Owe the changed chunks ``keys`` unless their current content was computed already
        (an ``apply`` that edits the world is followed, in the same frame, by fallbacks that
        compute the new content: owing it again would apply the same result twice).
        ``versions``: the chunks' current content versions, aligned with ``keys`` (else asked
        of ``meta``)."""
        sent = self.sent
        if self._sent_at is not None and (versions is None or slots is None):
            pairs = [meta(k) for k in keys]  # (slot, version) of live chunks; None: evicted
            at = self._sent_at
            self.pending.update([k for k, m in zip(keys, pairs) if m is None or at[m[0]] != m[1]])
            return
        if versions is not None and slots is not None and self._sent_at is not None:
            owed = self._sent_at[slots] != versions
            count = np.count_nonzero(owed)
            if count == len(owed):  # e.g. a whole world changed: no per-chunk selection
                self.pending.update(keys)
            elif count:
                self.pending.update(keys.vector[owed].tolist() if type(keys) is ChunkKeys else itertools.compress(keys, owed.tolist()))
            return
        if versions is not None:
            get = sent.get
            self.pending.update([k for k, v in zip(keys, np.asarray(versions).tolist()) if (done := get(k)) is None or done[0] != v])
            return
        for k in keys:
            done = sent.get(k)
            if done is None:
                self.pending.add(k)
                continue
            m = meta(k)
            if m is None or m[1] != done[0]:
                self.pending.add(k)

    def reowe(self, world: Any, keys: Any, failed: Work | None = None) -> None:
        """Owe ``keys`` again after their results were discarded (or ``failed``), unless
        work for their current content is already on its way. Evicted keys are forgotten."""
        slots_of = getattr(world, "slots_of", None)
        if self._sent_at is not None and failed is None and slots_of is not None:
            # By slot, as one vector: a key not in the world (-1) is owed nothing; a live chunk is
            # owed unless its current content version is the one last sent for its slot.
            keys = keys if type(keys) is list or type(keys) is tuple else list(keys)
            if not keys:
                return
            slots = slots_of(keys)
            live = slots >= 0
            at = np.where(live, slots, 0)
            owe = live & (self._sent_at[at] != world.slot_versions(at))
            if owe.any():
                self.pending.update(itertools.compress(keys, owe.tolist()))
            return
        failed_sent = {k: (v, failed.serial) for k, v in zip(failed.keys, failed.versions)} if failed is not None else {}
        for k in keys:
            if k not in world:
                self.sent.pop(k, None)  # (by slot: the slot's next chunk has other versions)
                continue
            sent = self._sent_version(k, world)
            if sent is None or sent[0] != world.version(k) or failed_sent.get(k) == sent:
                self.pending.add(k)


def held_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """A product's own copy of the caller's ``params=``: arrays (numpy's, ``array.array``,
    buffers, anything numpy reads through ``__array__``; in lists, tuples and dicts too) copied
    read-only, everything else as given.

    The engine reads these every dispatch and every CPU fallback, and owes a chunk results
    only when its content changes: an array the caller changed in place afterwards reached the
    chunks computed next but not the others, a silent mix of old and new values (review
    helper 235). New values go through ``set_params``. A masked array stays one (refused
    downstream)."""
    return {k: _held(v) for k, v in values.items()}


def _held(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        held = np.array(value, copy=True, subok=True)
    elif isinstance(value, (str, bytes, int, float, complex, np.generic)) or value is None:
        return value  # immutable
    elif isinstance(value, (list, tuple)):
        items = [_held(v) for v in value]
        return items if isinstance(value, list) else tuple(items)
    elif isinstance(value, Mapping):
        return {k: _held(v) for k, v in value.items()}
    elif (
        isinstance(value, (bytearray, memoryview)) or hasattr(value, "__array__") or hasattr(value, "__array_interface__") or type(value).__module__ == "array"
    ):
        try:
            held = np.array(value, copy=True)
        except Exception:  # numpy cannot read it: the params check refuses it as given
            return value
    else:
        return value
    held.flags.writeable = False
    return held


def chunk_tiles(slots: np.ndarray, tiles_per_chunk: int) -> np.ndarray:
    """Every tile of the chunks at ``slots`` as global tile indices (``slot * tile_count +
    tile``, u32), chunk by chunk in the order of ``slots``, each chunk's tiles in C order."""
    tiles = np.arange(tiles_per_chunk, dtype=np.uint32)
    return (np.asarray(slots, dtype=np.uint32)[:, None] * np.uint32(tiles_per_chunk) + tiles).reshape(-1)


def fallback_view(plan: Any) -> Any:
    """What of a product's plan a CPU fallback's answer depends on (None: no plan)."""
    if plan is None:
        return None
    return (plan.record_shape, plan.record_dtype, tuple((o.name, o.dtype, o.lanes, o.per_item) for o in plan.outputs), plan.readback)


def split_current(
    product: Product, world: Any, work: Work, records: Any, handle: GpuProductHandle, generation: int, source: str, frame: int, is_current: Any = None
) -> tuple[ProductResult | None, list[int], list[int]]:
    """Keep the records whose chunks still have the versions they were computed at
    (``is_current(key, version)``; default the world's: the chunk's content version).

    ``records``: output name -> array (:mod:`.records`), or one array (a CPU-only product).
    Answers ``(result or None, applied keys, stale keys)``. ``SELECTED_PATH``, and a product
    reading back a whole-dispatch output, is all or nothing: one changed chunk makes every
    chunk of the work stale.
    """
    slot_versions = getattr(world, "slot_versions", None)
    if is_current is None and work.slots is not None and slot_versions is not None:
        # One vector compare: versions are unique world-wide, so a slot holding the version a
        # result was computed at holds that very chunk and content (evicted slots hold 0).
        computed_at = work.version_array if work.version_array is not None else np.asarray(work.versions, dtype=np.int64)
        ok = np.asarray(slot_versions(work.slots)) == computed_at
        everything = bool(ok.all())
        current: list[bool] = [] if everything else ok.tolist()  # per chunk, read only when some are stale
        mask: np.ndarray | None = ok
    else:
        is_current = is_current or world.is_current
        current = [is_current(k, v) for k, v in zip(work.keys, work.versions)]
        everything = all(current)
        mask = None
    policy = product.policy
    plan = product.plan
    if not everything and (policy is ReadbackPolicy.SELECTED_PATH or (plan is not None and has_whole_outputs(plan))):
        return None, [], list(work.keys)
    applied = list(work.keys) if everything else list(itertools.compress(work.keys, current))
    if everything:
        stale = []
    elif mask is not None:  # one C pass, not a Python loop over every chunk
        stale = list(itertools.compress(work.keys, (~mask).tolist()))
    else:
        stale = [k for k, ok in zip(work.keys, current) if not ok]
    if not applied:
        return None, [], stale
    if plan is None:  # a CPU-only product: one array of records, one a chunk or tile
        if isinstance(records, Mapping):
            raise ProductError(f"the CPU fallback of the CPU-only product {product.key!r} answered a mapping; it answers one array of records, one a work item")
        arr = np.asarray(records)
        n_items = len(work.tiles) if work.tiles else len(work.keys)
        shape: tuple[int, ...] = tuple(arr.shape[1:]) if arr.ndim > 1 and arr.shape[0] == n_items else ()
        outputs = {"": arr.reshape(n_items, *shape) if arr.size else arr}
        primary = ""
        plan_for = None
    else:
        outputs = dict(records)
        primary = plan.output
        shape = plan.record_shape
        plan_for = plan
    tiles: tuple = ()
    keep = None
    by_chunk = None
    if work.tiles:
        if everything:
            tiles = work.tiles
        else:
            kept = set(applied)
            keep = np.fromiter((k in kept for k, _ in work.tiles), dtype=bool, count=len(work.tiles))
            tiles = tuple(t for t, m in zip(work.tiles, keep) if m)
    else:
        if policy is ReadbackPolicy.FULL_FIELD:
            by_chunk = (len(work.keys), *world.chunk_shape)
        keep = None if everything else (mask if mask is not None else np.array(current, dtype=bool))
    if plan_for is not None:
        outputs = select_items(plan_for, outputs, keep, by_chunk)
    else:
        values = outputs[""]
        if by_chunk is not None:
            values = values.reshape(*by_chunk, *shape)
        outputs = {"": values if keep is None else values[keep]}
    if plan_for is None or any(o.name == primary and o.per_item for o in plan_for.outputs):
        values = outputs[primary]
    else:  # only whole-dispatch outputs: no per-item records (they are in ``outputs``)
        values = np.zeros((len(applied), 0), dtype=plan_for.record_dtype)
    versions = work.versions if everything else tuple(itertools.compress(work.versions, current))
    result = ProductResult(
        handle=handle,
        generation=generation,
        policy=policy,
        source=source,
        keys=tuple(applied),
        versions=versions,
        values=values,
        tiles=tiles,
        frame=frame,
        record_shape=tuple(shape),
        outputs={k: v for k, v in outputs.items() if k},
    )
    return result, applied, stale
