"""The arena substrate: pages of u32 words holding column runs, placed by offset.

    from engine_plugin.substrate import Substrate
    arena = Substrate(page_bytes=1 << 20)
    with arena.with_page_group("particles"):
        pos = arena.alloc("vec3<f32>", 1000, name="pos")
        vel = arena.alloc("vec3<f32>", 1000, name="vel")
    arena.write(pos, positions)
    run = variant.run(n=1000, inputs={"pos": pos, "vel": vel})   # binds the one page once
    arena.free(pos); arena.free(vel)

Placement rules:

* every run starts at a multiple of the device's ``min-storage-buffer-offset-alignment`` and
  its reservation is rounded up to it, so any run can also be bound alone;
* atomic runs stand only in atomic pages, plain runs only in plain pages;
* a run larger than ``page_bytes`` gets a page of its own (dropped when freed, unless a page
  group owns it);
* outside a group, a run goes to the first shared page where it fits (best fit inside the
  page); freeing coalesces with free neighbours;
* inside ``with_page_group(key)``, a run goes to the group's own pages; the k-th run of a
  play takes the k-th placement of the previous play when it asks for the same shape and that
  space is free, so the same work binds the same pages and offsets every play.

Calls into one substrate are serialised by a lock; the active page group is per substrate
(the engine thread's), not per thread.
"""

from __future__ import annotations

import threading
import weakref
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import wgpu

from ..arrays import prepare_array
from ..device.context import DeviceContext, get_context
from ..device.destroyed import is_destroyed
from ..device.ordering import settle
from ..lowering.types import ValueType, parse_value_type
from .handles import Placement, RunHandle, StaleRunError, SubstrateError
from .pages import Page, PageGroup, ScriptEntry

__all__ = ["DEFAULT_PAGE_BYTES", "PAGE_USAGE", "Substrate", "find_run", "live_substrates"]

DEFAULT_PAGE_BYTES = 1 << 20
PAGE_USAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST

_registry: "weakref.WeakSet[Substrate]" = weakref.WeakSet()
_registry_lock = threading.Lock()


def _check_group_key(key: Any) -> None:
    """Refuse what cannot name a page group: an unhashable key, and None, which every run made
    outside a group carries (a group keyed None would be those runs, and freeing it theirs)."""
    if key is None:
        raise SubstrateError("a page group key cannot be None: None marks the runs made outside any group")
    if key != key:  # NaN: never equal to itself, so never found again (its runs would be orphaned)
        raise SubstrateError(f"a page group key must equal itself, not {key!r}")
    try:
        hash(key)
    except TypeError:
        raise SubstrateError(f"a page group key must be hashable, not {type(key).__name__}") from None


def live_substrates() -> list["Substrate"]:
    """The substrates that are open now (for name lookups)."""
    with _registry_lock:
        return [s for s in list(_registry) if not s.closed]


def find_run(name: str) -> list[RunHandle]:
    """Every live run named ``name``, across the live substrates (normally zero or one)."""
    return [h for s in live_substrates() if (h := s.find(name)) is not None]


class Substrate:
    """Arena pages on one device and the column runs standing in them.

    Args:
        device: a wgpu device, a :class:`DeviceContext`, or None for the default device.
        page_bytes: the size of a shared page (rounded up to the storage offset alignment);
            runs larger than this get a page of their own.
        label: names the substrate in messages and buffer labels.
    Raises:
        SubstrateError: ``page_bytes`` is not positive or exceeds what the device binds.
    """

    def __init__(self, device: Any = None, page_bytes: int = DEFAULT_PAGE_BYTES, label: str = "substrate"):
        self.ctx: DeviceContext = get_context(device)
        self.label = str(label)
        self.align_words = max(1, self.ctx.limit("min-storage-buffer-offset-alignment") // 4)
        max_bytes = min(self.ctx.limit("max-storage-buffer-binding-size"), self.ctx.limit("max-buffer-size"))
        self.max_run_words = (max_bytes // 4) // self.align_words * self.align_words
        if isinstance(page_bytes, bool) or not isinstance(page_bytes, (int, np.integer)) or page_bytes <= 0:
            raise SubstrateError(f"page_bytes must be a positive int, not {page_bytes!r}; e.g. page_bytes=1 << 20")
        words = self._reserve_words(-(-int(page_bytes) // 4))
        if words > self.max_run_words:
            raise SubstrateError(f"page_bytes={page_bytes} exceeds what this device binds ({self.max_run_words * 4} bytes); pick a smaller page")
        self.page_words = words
        self._pages: list[Page | None] = []
        self._generations: list[int] = []  # per handle slot
        self._free_slots: list[int] = []
        self._live: dict[int, RunHandle] = {}
        self._reserved: dict[int, int] = {}  # slot -> words reserved
        self._names: dict[str, RunHandle] = {}
        self._groups: dict[Any, PageGroup] = {}
        self._active: list[PageGroup] = []
        self._zeros = np.zeros(0, dtype="<u4")
        self._lock = threading.RLock()
        self.closed = False
        with _registry_lock:
            _registry.add(self)

    @property
    def device(self) -> Any:
        return self.ctx.device

    @property
    def page_bytes(self) -> int:
        return self.page_words * 4

    def __repr__(self) -> str:
        pages = sum(p is not None for p in self._pages)
        return f"Substrate({self.label!r}, {pages} pages of {self.page_bytes} bytes, {len(self._live)} live runs)"

    # -- runs -----------------------------------------------------------------------------------
    def alloc(self, element: str | ValueType, count: int, atomic: bool = False, name: str | None = None, zero: bool = True) -> RunHandle:
        """Make a run of ``count`` elements of ``element`` and answer its handle.

        Args:
            element: ``u32``, ``i32``, ``f32`` or a vec2/3/4 of them (stored flat: vec3 = 12 bytes).
            count: elements (0 is allowed: the run still has a valid base).
            atomic: stand in an atomic page (bound as ``array<atomic<u32>>``).
            name: a name ``page_binding`` accepts in place of the handle; unique among live runs.
            zero: clear the run's words (space reused from a freed run holds its old data).
        Raises:
            SubstrateError: a bad element, count or name, or a run too large to bind.
        """
        vt = _value_type(element)
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
            raise SubstrateError(f"count must be a non-negative int of elements, not {count!r}")
        count = int(count)
        words = count * vt.lanes
        reserve = self._reserve_words(words)
        if reserve > self.max_run_words:
            raise SubstrateError(
                f"a run of {count} x {vt.wgsl} is {words * 4} bytes; this device binds at most {self.max_run_words * 4} bytes in one page: split it"
            )
        if name is not None and (not isinstance(name, str) or not name):
            raise SubstrateError(f"a run's name must be a non-empty str, not {name!r}")
        with self._lock:
            self._check_open()
            if name is not None and name in self._names:
                raise SubstrateError(f"a live run is already named {name!r}: {self._names[name].describe()}; free it first or pick another name")
            group = self._active[-1] if self._active else None
            page, base = self._place_in_group(group, reserve, bool(atomic)) if group else self._place_shared(reserve, bool(atomic))
            slot = self._free_slots.pop() if self._free_slots else self._new_slot()
            handle = RunHandle(self, slot, self._generations[slot], page.index, base, count, vt.wgsl, bool(atomic), name, group.key if group else None)
            self._live[slot] = handle
            self._reserved[slot] = reserve
            if name is not None:
                self._names[name] = handle
            page.runs += 1
            # An empty run clears its first element too: a kernel's reads of it clamp there
            # (it would read a freed run's data).
            cleared = max(words, vt.lanes)
            if zero and base < page.touched:
                try:
                    self._write_zeros(page, base, min(cleared, reserve, page.touched - base))
                except BaseException:
                    self.free(handle)  # refused: the substrate as it was (its words, its name; review helper 150)
                    raise
            page.touched = max(page.touched, base + reserve)
            return handle

    def upload(self, element: str | ValueType, values: Any, atomic: bool = False, name: str | None = None) -> RunHandle:
        """``alloc`` a run the size of ``values`` and write them into it."""
        vt = _value_type(element)
        arr, info = prepare_array(values, vt, False)
        if arr is None:
            raise SubstrateError(f"cannot upload into a {vt.wgsl} run: {info}")
        # Written whole, so not cleared first; an empty run is (alloc clears its first element).
        handle = self.alloc(vt, int(info), atomic=atomic, name=name, zero=not arr.size)
        self.write(handle, arr)
        return handle

    def free(self, handle: RunHandle) -> None:
        """Give a run's words back to its page (coalescing with free neighbours).

        Raises:
            StaleRunError: the run was already freed (double free) or its substrate closed.
        """
        with self._lock:
            self._check_live(handle)
            slot = handle.slot
            del self._live[slot]
            reserve = self._reserved.pop(slot)
            self._generations[slot] += 1
            self._free_slots.append(slot)
            if handle.name is not None:
                self._names.pop(handle.name, None)
            page = self._pages[handle.page]
            assert page is not None
            page.free.free(handle.base, reserve)
            page.runs -= 1
            if page.dedicated and page.group is None and page.runs == 0:
                self._pages[page.index] = None  # dropped, not destroyed: in-flight work may still use it

    def is_live(self, handle: RunHandle) -> bool:
        found = self._live.get(handle.slot) if isinstance(handle, RunHandle) and handle.substrate is self else None
        return found is not None and found == handle

    def placement(self, handle: RunHandle) -> Placement:
        """``(page GPUBuffer, base_word, length)`` of a live run; raises StaleRunError once freed."""
        with self._lock:
            self._check_live(handle)
            page = self._pages[handle.page]
            assert page is not None
            return Placement(page.buffer, handle.base, handle.length)

    def find(self, name: str) -> RunHandle | None:
        """The live run named ``name``, or None."""
        return self._names.get(name)

    def runs(self) -> list[RunHandle]:
        """The live runs, in slot order."""
        with self._lock:
            return [self._live[s] for s in sorted(self._live)]

    def page_buffer(self, index: int) -> Any:
        """The GPUBuffer of page ``index`` (raises StaleRunError for a dropped page)."""
        page = self._page(index)
        return page.buffer

    def page_info(self, index: int) -> Page:
        """The bookkeeping of page ``index`` (free list, owner, kind); for tests and tools."""
        return self._page(index)

    # -- data -----------------------------------------------------------------------------------
    def write(self, handle: RunHandle, values: Any, start: int = 0) -> None:
        """Upload ``values`` into a run from element ``start``, in the element's layout.

        ``values``: (count,) for scalars, (count, lanes) or flat for vectors; other numeric
        dtypes are cast by value. Queued like ``queue.write_buffer``: it lands before the next
        submission.
        Raises:
            SubstrateError: the data does not fit the run or its element; StaleRunError.
        """
        with self._lock:
            self._check_live(handle)
            vt = handle.value_type
            arr, info = prepare_array(values, vt, False)
            if arr is None:
                raise SubstrateError(f"cannot write into {handle.describe()}: {info}")
            count = int(info)
            if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or start < 0:
                raise SubstrateError(f"start must be a non-negative element index, not {start!r}")
            if start + count > handle.length:
                raise SubstrateError(f"writing {count} elements at {start} overruns {handle.describe()}; it holds {handle.length}")
            if arr.nbytes:
                page = self._pages[handle.page]
                assert page is not None
                self._check_not_destroyed(page)
                settle()  # runs recorded before (a batch, a deferred run) go first
                self.ctx.queue.write_buffer(page.buffer, (handle.base + start * vt.lanes) * 4, arr)

    def read(self, handle: RunHandle, as_u32: bool = False) -> np.ndarray:
        """A run's elements as a typed array, (length,) or (length, lanes); waits for the GPU."""
        return self.read_many([handle], as_u32=as_u32)[0]

    def read_many(self, handles: Sequence[RunHandle], as_u32: bool = False) -> list[np.ndarray]:
        """Read many runs with one GPU read per page (the span their runs cover)."""
        with self._lock:
            by_page: dict[int, list[int]] = {}
            for i, h in enumerate(handles):
                self._check_live(h)
                by_page.setdefault(h.page, []).append(i)
            out: list[np.ndarray] = [None] * len(handles)  # type: ignore[list-item]
            for index, members in by_page.items():
                page = self._pages[index]
                assert page is not None
                lo = min(handles[i].base for i in members)
                hi = max(handles[i].base + handles[i].words for i in members)
                words = np.zeros(0, dtype="<u4")
                if hi > lo:
                    self._check_not_destroyed(page)  # copying from it would abort the process (device/destroyed.py)
                    settle()  # runs recorded before (a batch, a deferred run) go first
                    with self.ctx.guard.submitting("a substrate read"):  # read_buffer submits a copy
                        raw = self.ctx.queue.read_buffer(page.buffer, lo * 4, (hi - lo) * 4)
                    words = np.frombuffer(raw, dtype="<u4")
                for i in members:
                    h = handles[i]
                    vt = h.value_type
                    chunk = words[h.base - lo : h.base - lo + h.words].view("<u4" if as_u32 else vt.numpy_dtype).copy()
                    out[i] = chunk.reshape(h.length, vt.lanes) if vt.lanes > 1 else chunk
            return out

    # -- page groups ----------------------------------------------------------------------------
    @contextmanager
    def with_page_group(self, key: Any) -> Iterator[PageGroup]:
        """Runs made inside stand in pages the group ``key`` owns, placed in the order made.

        Each entry is a play: its k-th run takes the k-th placement of the previous play when
        the shape (words, atomic) is the same and that space is free (free the previous play's
        runs, e.g. with :meth:`free_group`, to get the same pages and offsets). A different
        shape at k rewrites the script from k on. Groups nest; a group cannot enter itself.
        """
        with self._lock:
            self._check_open()
            _check_group_key(key)
            group = self._groups.get(key)
            if group is None:
                group = self._groups[key] = PageGroup(key)
            if group in self._active:
                raise SubstrateError(f"page group {key!r} is already active; a group cannot enter itself")
            group.cursor = 0
            group.replayed = 0
            group.plays += 1
            self._active.append(group)
        try:
            yield group
        finally:
            with self._lock:
                self._active.remove(group)

    def group(self, key: Any) -> PageGroup | None:
        """The page group under ``key`` (its pages and script), or None."""
        return self._groups.get(key)

    def group_runs(self, key: Any) -> list[RunHandle]:
        """The live runs made inside group ``key``, in slot order."""
        _check_group_key(key)
        with self._lock:
            return [h for h in self.runs() if h.group == key]

    def free_group(self, key: Any) -> int:
        """Free every live run made inside group ``key``; answers how many."""
        with self._lock:
            runs = self.group_runs(key)
            for h in runs:
                self.free(h)
            return len(runs)

    def release_group(self, key: Any) -> int:
        """Free the group's runs and hand its pages to the shared pool; forgets its script."""
        _check_group_key(key)
        with self._lock:
            group = self._groups.get(key)
            if group is None:
                return 0
            if group in self._active:
                raise SubstrateError(f"page group {key!r} is active; release it after its 'with' block")
            freed = self.free_group(key)
            for index in group.pages:
                page = self._pages[index]
                if page is None:
                    continue
                page.group = None
                if page.dedicated:
                    self._pages[index] = None
            del self._groups[key]
            return freed

    # -- lifetime and stats ---------------------------------------------------------------------
    def trim(self) -> int:
        """Drop shared pages that hold no run (not destroyed: in-flight work may use them); answers how many."""
        with self._lock:
            dropped = 0
            for i, page in enumerate(self._pages):
                if page is not None and page.group is None and page.runs == 0:
                    self._pages[i] = None
                    dropped += 1
            return dropped

    def close(self) -> None:
        """Make every handle stale and drop the pages (not destroyed: in-flight work may use them)."""
        with self._lock:
            for slot in list(self._live):
                self._generations[slot] += 1
            self._live.clear()
            self._reserved.clear()
            self._names.clear()
            self._pages = [None] * len(self._pages)
            self._groups.clear()
            self.closed = True
        with _registry_lock:
            _registry.discard(self)

    def stats(self) -> dict[str, int]:
        """Pages, live runs and words: ``pages``, ``atomic_pages``, ``live_runs``, ``page_words``,
        ``free_words``, ``free_blocks``, ``largest_free``."""
        with self._lock:
            pages = [p for p in self._pages if p is not None]
            return {
                "pages": len(pages),
                "atomic_pages": sum(p.atomic for p in pages),
                "live_runs": len(self._live),
                "page_words": sum(p.words for p in pages),
                "free_words": sum(p.free.free_words for p in pages),
                "free_blocks": sum(len(p.free.blocks) for p in pages),
                "largest_free": max((p.free.largest for p in pages), default=0),
            }

    def check(self) -> None:
        """Raise if the bookkeeping is inconsistent: free lists, overlaps, counts (for tests)."""
        with self._lock:
            spans: dict[int, list[tuple[int, int]]] = {}
            for slot, h in self._live.items():
                spans.setdefault(h.page, []).append((h.base, self._reserved[slot]))
            for page in self._pages:
                if page is None:
                    continue
                page.free.check()
                used = sorted(spans.get(page.index, []))
                for (a, n), (b, _) in zip(used, used[1:]):
                    if a + n > b:
                        raise SubstrateError(f"runs overlap in page {page.index}: words {a}+{n} and {b}")
                if sum(n for _, n in used) + page.free.free_words != page.words or len(used) != page.runs:
                    raise SubstrateError(f"page {page.index}: live runs and free words do not add up")

    # -- internals ------------------------------------------------------------------------------
    def _reserve_words(self, words: int) -> int:
        a = self.align_words
        return max(a, -(-words // a) * a)

    def _new_slot(self) -> int:
        self._generations.append(0)
        return len(self._generations) - 1

    def _new_page(self, words: int, atomic: bool, group: PageGroup | None) -> Page:
        index = len(self._pages)
        kind = "atomic page" if atomic else "page"
        buffer = self.ctx.device.create_buffer(size=words * 4, usage=PAGE_USAGE, label=f"{self.label} {kind} {index}")
        page = Page(index, buffer, words, self.align_words, atomic, group.key if group else None, dedicated=words > self.page_words)
        self._pages.append(page)
        if group is not None:
            group.pages.append(index)
        return page

    def _first_fit(self, indices: Iterable[int], reserve: int, atomic: bool, group_key: Any) -> tuple[Page, int] | None:
        for index in indices:
            page = self._pages[index]
            if page is None or page.atomic != atomic or page.group != group_key or page.free.largest < reserve:
                continue
            if page.dedicated and group_key is None:
                continue  # a shared big page is its one run's
            base = page.free.alloc(reserve)
            if base is not None:
                return page, base
        return None

    def _place_shared(self, reserve: int, atomic: bool) -> tuple[Page, int]:
        if reserve <= self.page_words:
            found = self._first_fit(range(len(self._pages)), reserve, atomic, None)
            if found is not None:
                return found
        page = self._new_page(max(reserve, self.page_words), atomic, None)
        base = page.free.alloc(reserve)
        assert base == 0
        return page, base

    def _place_in_group(self, group: PageGroup, reserve: int, atomic: bool) -> tuple[Page, int]:
        k = group.cursor
        group.cursor += 1
        if k < len(group.script):
            entry = group.script[k]
            if entry.words == reserve and entry.atomic == atomic:
                page = self._pages[entry.page]
                if page is not None and page.group == group.key and page.free.take_at(entry.base, reserve):
                    group.replayed += 1
                    return page, entry.base
                # Same shape, but the previous play's run still stands there: place it
                # elsewhere without rewriting the script, so a later play can replay again.
                return self._fit_in_group(group, reserve, atomic)
            del group.script[k:]  # the work changed shape here: the script follows it
        page, base = self._fit_in_group(group, reserve, atomic)
        group.script.append(ScriptEntry(reserve, atomic, page.index, base))
        return page, base

    def _fit_in_group(self, group: PageGroup, reserve: int, atomic: bool) -> tuple[Page, int]:
        found = self._first_fit(group.pages, reserve, atomic, group.key)
        if found is not None:
            return found
        page = self._new_page(max(reserve, self.page_words), atomic, group)
        base = page.free.alloc(reserve)
        assert base == 0
        return page, base

    def _check_not_destroyed(self, page: Page) -> None:
        if is_destroyed(page.buffer):  # wgpu refuses the write with a raw validation error
            raise SubstrateError(f"page {page.index} of substrate {self.label!r} was destroyed (destroy() was called on its buffer)")

    def _write_zeros(self, page: Page, base: int, words: int) -> None:
        self._check_not_destroyed(page)
        settle()  # runs recorded before (a batch, a deferred run) go first
        if self._zeros.size < words:
            self._zeros = np.zeros(max(words, 2 * self._zeros.size), dtype="<u4")
        self.ctx.queue.write_buffer(page.buffer, base * 4, self._zeros[:words])

    def _page(self, index: int) -> Page:
        page = self._pages[index] if 0 <= index < len(self._pages) else None
        if page is None:
            raise StaleRunError(f"page {index} of substrate {self.label!r} was dropped (its runs were freed or the substrate closed)")
        return page

    def _check_open(self) -> None:
        if self.closed:
            raise StaleRunError(f"substrate {self.label!r} is closed")

    def _check_live(self, handle: Any) -> None:
        if not isinstance(handle, RunHandle):
            raise SubstrateError(f"expected a run handle from Substrate.alloc, not {type(handle).__name__}")
        if handle.substrate is not self:
            raise SubstrateError(f"{handle.describe()} belongs to another substrate than {self.label!r}")
        if not self.is_live(handle):
            why = "its substrate was closed" if self.closed else "it was freed (double free, or a handle kept past free)"
            raise StaleRunError(f"{handle.describe()} is stale: {why}")


def _value_type(element: Any) -> ValueType:
    vt = element if isinstance(element, ValueType) else parse_value_type(element)
    if vt is None:
        raise SubstrateError(f"element must be u32, i32, f32 or a vec2/3/4 of them (e.g. 'vec3<f32>'), not {element!r}")
    return vt
