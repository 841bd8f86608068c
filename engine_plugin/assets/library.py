"""The asset library: references to ``.computeShader`` assets, their programs, hot reload.

    lib = AssetLibrary(root="assets", cache="cache")
    blur = lib.load("kernels/blur.computeShader")
    lib.watch()                      # watchdog observer + reload worker
    while running:                   # the engine thread
        lib.poll()                   # apply finished reloads between frames (pipelines compiled off-thread)
        blur.program().variant(specialize={"T": "f32"}).run(n, inputs=...)

Threads: the observer and the reload worker read files, parse and lower (pure Python,
through the variant cache); the reload worker then compiles the reload's variants on the
library's device (pipeline creation, the costly part, off the engine thread; it fills the
device's compile cache), and :meth:`AssetLibrary.poll` swaps them in on the engine thread.
Other wgpu calls happen in ``poll`` or on first use of a variant, on the engine thread. A
reload interrupted by a device loss is no error of the asset: it is retried on a later
``poll``, on the device that replaces the lost one. A reload that
fails keeps the last good program live and sets ``ref.diagnostics``; the next good save
clears them.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Callable, Iterator, Mapping, Sequence

from ..cache import DEFAULT_MAX_BYTES, USAGE_FILE, UsageLog, VariantCache
from ..cache.entry import Entry
from ..cache.remote import DEFAULT_TIMEOUT, RemoteCache, remote_from
from ..device.context import get_context
from ..errors import AssetError, CacheError, CompileError, DeviceLostError, NoAdapterError, PluginError, Span, bug
from ..lowering import Lowered, Schema, VariantSpec, parse
from ..runtime.compile import compile_lowered
from ..runtime.program import Program, adopt_program, program, registered_program
from .builtin import builtin_folder, builtin_root
from .folder import ASSET_SUFFIX, AssetSource, link_chain, module_search_path, path_under, read_asset_folder, real_path
from .prefetch import PrefetchReport, prefetch
from .reload import BODY, LAYOUT, Prepared, ReloadEvent, ReloadFailure, Superseded, Unsettled, carry_spec, plan_signature, prepare, same_content
from .watcher import ReloadService

__all__ = ["AssetLibrary", "ComputeShaderRef", "PrefetchReport", "allow_network"]

log = logging.getLogger("engine_plugin.assets")

_MEMORY_ENTRIES = 128  # lowered variants kept in memory per asset (recent gets and puts)

ReloadCallback = Callable[[ReloadEvent], None]
ErrorCallback = Callable[[ReloadFailure], None]


_NET = threading.local()  # .allowed: this thread may ask the remote tier (prefetch, reload worker)


class allow_network:
    """Within it, lookups on this thread may go to the remote tier (bounded by its timeout and
    breaker). The engine thread never enters one unless the library was made with
    ``remote_on_demand=True``: the frame loop does not touch the network."""

    def __enter__(self) -> None:
        self.before = getattr(_NET, "allowed", False)
        _NET.allowed = True

    def __exit__(self, *exc: Any) -> None:
        _NET.allowed = self.before


# Where a variant's lowering came from, as ``watch`` reports it.
LOCAL, REMOTE, LOWERED = "local", "remote", "lowered"


class _AssetStore:
    """The ``LoweredStore`` an asset's programs use: a small memory front over the shared
    variant cache (and the remote tier behind it), entries rebased onto this asset's own
    paths, and usage recording."""

    def __init__(
        self,
        rel: str,
        cache: VariantCache | None,
        usage: UsageLog | None,
        paths: tuple[str, ...],
        remote: RemoteCache | None = None,
        on_demand: bool = False,
    ):
        self.rel = rel
        self.cache = cache
        self.usage = usage
        self.paths = paths  # (bindings.yaml, .wgsl, imported modules...) as errors should name them
        self.remote = remote
        self.on_demand = on_demand
        self._memory: "OrderedDict[str, Lowered]" = OrderedDict()
        self._origins: "OrderedDict[str, str]" = OrderedDict()
        self._lock = threading.Lock()
        self._local = threading.local()
        # Shared with the views of with_paths(): one count for the asset.
        self._tally = {"memory_hits": 0, "foreign_entries": 0}

    @property
    def memory_hits(self) -> int:
        return self._tally["memory_hits"]

    @property
    def foreign_entries(self) -> int:
        """Local entries refused: not lowered from this asset's text."""
        return self._tally["foreign_entries"]

    def with_paths(self, paths: tuple[str, ...]) -> "_AssetStore":
        """This store (memory, counts, caches and usage log shared) for a program read from
        ``paths``: a reload's candidate program gets one, so the worker never repoints the
        store the live program reads on the engine thread (until the next poll(), the live
        program's cache hits and errors named the files of a read still pending, perhaps a
        refused one: review helper 224). poll() hands the paths over when it applies it."""
        view = object.__new__(_AssetStore)
        view.__dict__.update(self.__dict__)
        view.paths = paths
        return view

    def _rebase(self, lowered: Lowered) -> Lowered:
        # Entries are content-addressed, so one baked elsewhere names another checkout's files
        # (its modules too: they follow the asset's two files, in the order they were imported).
        wgsl_path = self.paths[1]
        files = lowered.source_map.files
        if files == self.paths and lowered.asset == wgsl_path:
            return lowered
        mine = self.paths if len(self.paths) == len(files) else self.paths[:2] + tuple(files[2:])
        sm = replace(lowered.source_map, files=mine)
        return replace(lowered, source_map=sm, asset=wgsl_path)

    def _remember(self, key: str, lowered: Lowered, origin: str | None = None) -> None:
        with self._lock:
            self._memory[key] = lowered
            self._memory.move_to_end(key)
            while len(self._memory) > _MEMORY_ENTRIES:
                self._memory.popitem(last=False)
            if origin is not None:
                self._origins[key] = origin
                self._origins.move_to_end(key)
                while len(self._origins) > 4 * _MEMORY_ENTRIES:
                    self._origins.popitem(last=False)

    def origin(self, key: str) -> str | None:
        """Where the variant under ``key`` came from: "local", "remote", "lowered" (None: unknown)."""
        with self._lock:
            return self._origins.get(key)

    def record_use(self, lowered: Lowered) -> None:
        """Log ``lowered``'s spec as a variant the game uses: called once its pipeline is made
        (the runtime's optional ``LoweredStore.record_use``), so a spec that fails to compile is
        never logged for ``bake --variants-from`` to fail on (review helper 149)."""
        if self.usage is not None and not getattr(self._local, "quiet", False):
            self.usage.record(self.rel, lowered.spec)

    def in_memory(self, key: str) -> bool:
        with self._lock:
            return key in self._memory

    def remembered(self, key: str, derived_from: tuple[str, str, VariantSpec, tuple[str, ...]]) -> Lowered | None:
        """Memory, then the local cache (no usage recorded, no network).

        ``derived_from`` is (schema text, WGSL text, spec, imported module texts): a cache entry
        that was not lowered from exactly those (one copied under another key, or a forged one with its checksum
        recomputed) is refused as a miss, counted and logged, and the variant is lowered again,
        which overwrites it. Cheap: no re-lowering. Only verified entries enter the memory
        tier (this, :meth:`put` of a local lowering, :meth:`adopt_remote` of a verified one).
        """
        with self._lock:
            found = self._memory.get(key)
            if found is not None:
                self._tally["memory_hits"] += 1
                # Keyed by content: the same content read from other files (a body renamed)
                # names the files read now (review helper 97: errors named a deleted file).
                return self._rebase(found)
        if self.cache is not None:
            found, foreign = self.cache.get_lowered_from(key, derived_from, self.rel)
            if foreign:
                with self._lock:
                    self._tally["foreign_entries"] += 1
                return None
            if found is not None:
                found = self._rebase(found)
                self._remember(key, found, LOCAL)
        return found

    def adopt_remote(self, key: str, entry: Entry, defer: Callable[..., Any] | None = None) -> Lowered:
        """A verified remote entry: kept in memory and written to the local cache as it came
        (through ``defer(fn, *args)`` when given: the write, an fsync, need not delay a start)."""
        lowered = entry.lowered
        if self.cache is not None:
            # The decoded entry re-encodes to the baker's bytes, its validated mark with it (a
            # signed one; a re-lowered one is this client's own, unmarked): the local copy
            # differs only by its local signature.
            if defer is not None:
                defer(self.cache.put, key, lowered, entry.validated)
            else:
                self.cache.put(key, lowered, entry.validated)
        found = self._rebase(lowered)
        self._remember(key, found, REMOTE)
        return found

    def get(self, key: str) -> Lowered | None:
        """The memory tier's entry (verified when it entered): a caller that cannot say what
        the key was derived from gets nothing from the disk cache (use :meth:`lookup`)."""
        with self._lock:
            found = self._memory.get(key)
        return found

    def lookup(
        self, key: str, schema: Schema, wgsl: str, spec: VariantSpec, wgsl_path: str | None, modules: Mapping[str, tuple[str, str]] | None = None
    ) -> Lowered | None:
        """:meth:`get`, then (on a thread allowed the network) the remote tier, verified."""
        found = self.remembered(key, (schema.text, wgsl, spec, tuple(text for _, text in (modules or {}).values())))
        if found is None and self.remote is not None and (self.on_demand or getattr(_NET, "allowed", False)):
            fetched = self.remote.fetch(key, schema=schema, wgsl=wgsl, spec=spec, wgsl_path=wgsl_path, modules=modules)
            if fetched is not None:
                found = self.adopt_remote(key, fetched)
        return found

    def put(self, key: str, lowered: Lowered) -> None:
        self._remember(key, lowered, LOWERED)
        if self.cache is not None:
            self.cache.put(key, lowered)

    def unrecorded(self) -> "_Unrecorded":
        """Within it, lowerings on this thread are not logged as used (validation lowerings)."""
        return _Unrecorded(self._local)


class _Unrecorded:
    def __init__(self, local: threading.local):
        self.local = local

    def __enter__(self) -> None:
        self.local.quiet = True

    def __exit__(self, *exc: Any) -> None:
        self.local.quiet = False


class ComputeShaderRef:
    """A loaded asset. ``program()`` is the live :class:`Program` (the same object while the
    asset's content is unchanged); ``generation`` counts the reloads applied;
    ``diagnostics`` is the last failure (``path:line:col: message`` + caret) or None."""

    def __init__(self, library: "AssetLibrary", rel: str, folder: str):
        self.library = library
        self.path = rel  # the program key
        self.folder = folder
        self.root = library.root  # the root its files must stay inside (the package's, for packaged kernels)
        self.generation = 0
        self.error: PluginError | None = None
        self.error_read_at = math.inf  # when the read that failed (self.error) began
        self._program: Program | None = None
        self._source: AssetSource | None = None
        self._tried_files: tuple[str, ...] = ()  # the latest read's, when it failed after reading (a fix there reloads)
        self._rereading = False  # read once more for files its last read brought in (see AssetLibrary.poll)
        self._reload_listeners: list[ReloadCallback] = []
        self._error_listeners: list[ErrorCallback] = []
        self.reloads = 0
        self.failures = 0
        self._store = _AssetStore(
            rel,
            library.cache,
            library.usage,
            (os.path.join(folder, "bindings.yaml"), os.path.join(folder, "kernel.wgsl")),
            remote=library.remote,
            on_demand=library.remote_on_demand,
        )

    @property
    def diagnostics(self) -> str | None:
        """The last failure rendered ``path:line:col: message`` (with the line and a caret), or None."""
        return str(self.error) if self.error is not None else None

    @property
    def source(self) -> AssetSource | None:
        """The texts of the live program (the last good read)."""
        return self._source

    @property
    def in_use(self) -> tuple[VariantSpec, ...]:
        """The variants of the live program made so far (recompiled eagerly on reload)."""
        return tuple(self._program.variants) if self._program is not None else ()

    def program(self) -> Program:
        """The live program.

        Raises:
            PluginError: the asset has never loaded successfully (its last error).
        """
        if self._program is None:
            raise self.error or AssetError("the asset is not loaded", Span(self.folder))
        return self._program

    def variant(self, specialize: Mapping[str, str] | None = None, columns: Mapping[str, Any] | None = None) -> Any:
        """``self.program().variant(...)``: lower (or fetch from the cache) and compile one variant."""
        return self.program().variant(specialize, columns)

    def origins(self, specs: "tuple[VariantSpec, ...] | list[VariantSpec]", program: Program | None = None) -> dict[VariantSpec, str]:
        """Where each variant's lowering came from ("local", "remote", "lowered"; "memory"
        when this process already had it) for ``program`` (default: the live one)."""
        prog = program or self._program
        if prog is None:
            return {}
        out = {}
        for spec in specs:
            key = prog.variant_key(spec)
            out[spec] = self._store.origin(key) or "memory"
        return out

    def on_reload(self, callback: ReloadCallback) -> Callable[[], None]:
        """Call ``callback(event)`` on the polling thread after each applied reload; answers an
        unsubscribe function. ``event.kind`` says body-only or layout, ``event.invalidated``
        which variants went stale."""
        self._reload_listeners.append(callback)
        return lambda: self._reload_listeners.remove(callback) if callback in self._reload_listeners else None

    def on_error(self, callback: ErrorCallback) -> Callable[[], None]:
        """Call ``callback(failure)`` on the polling thread after each refused reload."""
        self._error_listeners.append(callback)
        return lambda: self._error_listeners.remove(callback) if callback in self._error_listeners else None

    def _notify(self, listeners: list, item: Any) -> None:
        for cb in list(listeners):
            try:
                cb(item)
            except Exception:  # one listener's bug must not stop the frame or the others
                log.exception("a reload listener of %s raised", self.path)

    def __repr__(self) -> str:
        state = "ok" if self.error is None else "error"
        return f"ComputeShaderRef({self.path!r}, generation={self.generation}, {state})"


class AssetLibrary:
    """Compute shader assets under ``root``, their variant cache, and hot reload.

    Args:
        root: the asset folder; references are named relative to it.
        cache: the variant cache folder (or a :class:`VariantCache`, or None for none).
        device: a wgpu device or DeviceContext (None: the process's default device).
        quiet: the debounce quiet window, seconds.
        max_cache_bytes: the cache's size cap (when ``cache`` is a folder).
        record_usage: log requested variants to ``<cache>/usage.msgpack`` (or to this path),
            for ``engine-plugin bake --variants-from``.
        missing_grace: how long a deleted file may stay missing before a reload reports it.
        remote: the shared remote tier behind the local cache: a ``redis://host:port/db`` URL,
            a :class:`~engine_plugin.cache.remote.RemoteCache`, False for none, or None for
            ``$ENGINE_PLUGIN_REMOTE_CACHE`` when set. Read by :meth:`prefetch` and the reload
            worker, verified before use, copied into the local cache; never written by a game.
        remote_timeout: the remote tier's socket timeout, seconds (when ``remote`` is a URL).
        remote_on_demand: let a variant first asked for on any thread (the engine's too) ask
            the remote tier, within ``remote_timeout``; off by default, so the frame loop never
            touches the network.
        modules: more folders of shared WGSL modules for ``#import``, searched after the
            ``modules/`` folders above each asset (the nearest first, up to ``root/modules``).
            Hot reload follows module files under ``root``; these folders are read at each
            load and reload but not watched.
    Raises:
        RemoteMissingError: a remote tier was asked for without the ``redis`` client.
    """

    def __init__(
        self,
        root: str = "assets",
        cache: str | VariantCache | None = "cache",
        device: Any = None,
        *,
        quiet: float = 0.030,
        max_cache_bytes: int | None = DEFAULT_MAX_BYTES,
        record_usage: bool | str = False,
        missing_grace: float = 0.25,
        remote: RemoteCache | str | bool | None = None,
        remote_timeout: float = DEFAULT_TIMEOUT,
        remote_on_demand: bool = False,
        modules: Sequence[str] = (),
    ):
        self.root = os.path.abspath(os.fspath(root))  # a later chdir must not move the assets (review helper 97)
        self.module_paths = tuple(os.path.abspath(os.fspath(m)) for m in modules)  # as the root: a later chdir moves nothing
        self.remote = remote_from(remote, timeout=remote_timeout)
        self.remote_on_demand = bool(remote_on_demand)
        self._writer: ThreadPoolExecutor | None = None
        self._writes: list[Any] = []
        self._writes_lock = threading.Lock()
        self._root_abs = os.path.abspath(self.root)
        cache_disabled = False
        self.cache_error: CacheError | None = None  # why the cache asked for is off (logged once)
        if isinstance(cache, VariantCache) or cache is None:
            self.cache = cache
        else:
            try:
                self.cache = VariantCache(os.fspath(cache), max_bytes=max_cache_bytes)
            except CacheError as exc:
                # A game installed read-only (or a cache path that is a file) still runs: it
                # lowers what it uses, as a library without a cache does.
                log.warning("variant cache disabled: %s; every variant is lowered on first use", exc.headline())
                self.cache, cache_disabled, self.cache_error = None, True, exc
        usage_path = None
        if isinstance(record_usage, str):
            usage_path = record_usage
        elif record_usage and not cache_disabled:
            if self.cache is None:
                raise ValueError("record_usage=True needs a cache folder (or pass the usage log path)")
            usage_path = os.path.join(self.cache.folder, USAGE_FILE)
        self.usage = UsageLog(usage_path) if usage_path else None
        self.device = device
        self._ctx: Any = None
        self._refs: dict[str, ComputeShaderRef] = {}
        self._by_folder: dict[str, ComputeShaderRef] = {}
        self._watch_index = _WatchIndex(real_path(self._root_abs))
        self._ready: deque[Prepared] = deque()
        self._ready_lock = threading.Lock()
        self._retry: list[Prepared] = []  # reloads a device loss interrupted: back in _ready after poll
        self._applied_first: list[ReloadEvent | ReloadFailure] = []  # see _apply's fallback to an earlier save
        self.service = ReloadService(
            self._root_abs,
            self._job_for,
            self._deliver,
            quiet=quiet,
            missing_grace=missing_grace,
            on_idle=self.flush_usage,
            dependents=self._dependents,
        )

    # -- references ------------------------------------------------------------------------
    def _context(self) -> Any:
        # After a device loss the old context is dead: compile reloads on the new default one
        # (a caller-owned device stays the caller's to replace).
        if self._ctx is None or (self._ctx.lost and self.device is None):
            from ..device.context import get_context

            self._ctx = get_context(self.device)
        return self._ctx

    def _found_lost(self) -> bool:
        """Whether the library's device turns out lost when probed (then marked so: the next
        ``_context()`` takes the device that replaces it)."""
        ctx = self._ctx
        if ctx is None or ctx.lost:
            return ctx is not None
        if ctx.guard.probe_lost():
            ctx.guard.mark_lost("found lost while applying a reload (probed)")
            return True
        return False

    def _context_or_none(self) -> Any:
        """The device context, or None on a machine without a usable adapter: programs are
        then made without a device (they lower, so CPU fallbacks plan from them; asking one
        for a variant raises NoAdapterError until an adapter is there)."""
        try:
            return self._context()
        except NoAdapterError:
            return None

    def _rel(self, path: str) -> str:
        p = os.fspath(path)
        full = os.path.normpath(p if os.path.isabs(p) else os.path.join(self._root_abs, p))
        if os.path.basename(full) == "bindings.yaml":
            full = os.path.dirname(full)
        rel = os.path.relpath(full, self._root_abs)
        if rel == "." or rel.startswith(".." + os.sep) or rel == "..":
            raise AssetError(f"an asset path is relative to the asset root {self.root!r}; {p!r} is outside it", Span(p))
        if not rel.endswith(ASSET_SUFFIX):
            raise AssetError(f"an asset is a NAME{ASSET_SUFFIX} folder; {p!r} is not one", Span(p))
        return rel.replace(os.sep, "/")

    def load(self, path: str, *, strict: bool = True) -> ComputeShaderRef:
        """The reference to the asset at ``path`` (relative to the root); the same reference
        for the same asset. Reads and parses it; variants lower lazily.

        Args:
            strict: raise when the asset cannot be read or parsed; with False answer a
                reference whose ``program()`` raises and whose ``diagnostics`` say why, until a
                good save arrives (useful under ``watch()``).
        Raises:
            AssetError, SchemaError: (strict only) with the asset's own file and line.
        """
        rel = self._rel(path)
        found = self._refs.get(rel)
        if found is not None:
            return found
        folder = os.path.join(self.root, *rel.split("/"))
        root = self.root
        if not os.path.isdir(folder) and builtin_folder(rel) is not None:
            # The engine's own kernels ship in the package: found whatever the root, and read
            # under the package's root (the symlink rule keeps files inside their own root).
            folder, root = builtin_folder(rel), builtin_root()  # type: ignore[assignment]
        ref = ComputeShaderRef(self, rel, folder)
        ref.root = root
        ctx = self._context_or_none()
        try:
            src = read_asset_folder(folder, root=root, modules=self.module_paths)
            ref._tried_files = _real_files(src)  # followed too if what comes next refuses it
            schema = parse(src.yaml_text, src.yaml_path)
            ref._store.paths = _store_paths(src)
            if ctx is not None:
                ref._program = program(rel, schema, src.wgsl_text, wgsl_path=src.wgsl_path, device=ctx, store=ref._store, modules=src.module_texts)
            else:
                ref._program = Program(rel, schema, src.wgsl_text, wgsl_path=src.wgsl_path, ctx=None, store=ref._store, modules=src.module_texts)
            ref._source, ref._tried_files = src, ()  # live: its files are the source's
            if src.extra_files:
                log.warning("%s: files ignored in the asset (only bindings.yaml and one .wgsl count): %s", folder, ", ".join(src.extra_files))
        except PluginError as exc:
            if strict:
                raise
            ref.error = exc
            log.warning("%s", exc)
        self._refs[rel] = ref
        self._by_folder[os.path.abspath(folder)] = ref
        self._reindex(ref)
        return ref

    def refs(self) -> list[ComputeShaderRef]:
        """The loaded references, by path."""
        return [self._refs[k] for k in sorted(self._refs)]

    def __iter__(self) -> Iterator[ComputeShaderRef]:
        return iter(self.refs())

    def load_all(self, *, strict: bool = True) -> list[ComputeShaderRef]:
        """Load every ``*.computeShader`` under the root."""
        from .folder import find_assets

        return [self.load(os.path.relpath(f, self.root), strict=strict) for f in find_assets(self.root) if f != os.path.normpath(self.root)]

    # -- hot reload ------------------------------------------------------------------------
    def watch(self) -> "AssetLibrary":
        """Start a watchdog observer over the root and the reload worker (idempotent).

        Starting it reads every loaded asset again, as a save would (an unchanged one is no
        reload): a save made after :meth:`load` and before this, or while the library was
        closed, sent its events to nobody, and the old kernel ran on with no reload and no
        diagnostic until a later save (review helper 229)."""
        if not os.path.isdir(self._root_abs):
            raise AssetError("the asset root is not a folder", Span(self.root))
        if self.service.watch():
            for ref in list(self._refs.values()):
                # A failure read again unchanged is not reported twice (see _fail).
                ref._rereading = ref._rereading or ref.error is not None
                self.service.schedule(os.path.abspath(ref.folder))
        return self

    def request_reload(self, path: str | None = None) -> None:
        """Re-read an asset (every loaded one when None) as if it had been saved; works
        without ``watch()`` too. Apply with :meth:`poll`."""
        refs = list(self._refs.values())
        if path is not None:
            rel = self._rel(path)
            if rel not in self._refs:
                raise AssetError(f"{rel} is not loaded; load() it first", Span(path))
            refs = [self._refs[rel]]
        self.service.start_worker()
        for ref in refs:
            self.service.schedule(os.path.abspath(ref.folder))

    def _job_for(self, folder: str) -> Callable[[int, float], Prepared] | None:
        ref = self._by_folder.get(folder)
        if ref is None:
            return None

        def job(seq: int, first_event: float) -> Prepared:
            # The context load() made on the engine thread: the worker must never create a device
            # (after a loss, poll() on the engine thread picks up the new one).
            ctx = self._ctx if self._ctx is not None else self._context_or_none()
            prepared = prepare_on_worker(seq, first_event)
            return _precompile(prepared, ctx, ref.path, retry=lambda: self.service.schedule(folder), superseded=self.service.work_due)

        def prepare_on_worker(seq: int, first_event: float) -> Prepared:
            read_at = time.monotonic()  # before the files are read: a read begun later saw newer files
            prepared = _prepare_on_worker(seq, first_event)
            prepared.read_at = read_at
            return prepared

        def _prepare_on_worker(seq: int, first_event: float) -> Prepared:
            ctx = self._ctx if self._ctx is not None else self._context_or_none()

            def make_program(schema, src):
                store = ref._store.with_paths(_store_paths(src))  # the live program's store is left as it is
                return Program(ref.path, schema, src.wgsl_text, wgsl_path=src.wgsl_path, ctx=ctx, store=store, modules=src.module_texts)

            old = ref._program
            try:
                with allow_network():  # the worker may ask the remote tier (bounded); the engine thread never does
                    if old is not None and old.variants:
                        return prepare(
                            ref.path,
                            ref.folder,
                            seq,
                            first_event,
                            current=ref._source,
                            old_program=old,
                            make_program=make_program,
                            root=ref.root,
                            modules=self.module_paths,
                        )
                    # Validation lowerings of an asset nobody uses yet are not "requested variants".
                    with ref._store.unrecorded():
                        return prepare(
                            ref.path,
                            ref.folder,
                            seq,
                            first_event,
                            current=ref._source,
                            old_program=old,
                            make_program=make_program,
                            root=ref.root,
                            modules=self.module_paths,
                        )
            except Unsettled:
                raise
            except Exception as exc:  # a bug in lowering: report it as this reload's failure
                log.exception("preparing a reload of %s failed", ref.path)
                return Prepared(ref.path, seq, first_event, error=bug(f"preparing a reload raised {type(exc).__name__}: {exc}"))

        return job

    def _dependents(self, path: str) -> list[str]:
        """The folders of loaded assets a file event concerns beyond its own asset folder (see
        :class:`_WatchIndex`): a file their last read used (by its path or through a link), a
        folder holding such files, and a module file where their imports look for it first."""
        p = os.path.abspath(path)
        return sorted(self._watch_index.hits(p, real_path(p)))

    def _reindex(self, ref: ComputeShaderRef) -> bool:
        """Enter what ``ref`` depends on now into the watch index; answers whether it follows
        files it did not follow before."""
        src = ref._source
        if src is not None:
            bases: tuple[str, ...] = tuple(src.module_search)
            # A failed read may be missing a module of any name: every .wgsl arriving where it looks.
            names = frozenset(m.name for m in src.modules) if ref.error is None else None
        else:
            bases, names = tuple(module_search_path(ref.folder, self.root, self.module_paths)), None
        folder = os.path.abspath(ref.folder)
        followed = set(self._watch_index.files_of(folder))
        files = tuple(dict.fromkeys((_real_files(src) if src is not None else ()) + ref._tried_files))
        self._watch_index.enter(
            folder,
            files,
            tuple(dict.fromkeys([os.path.abspath(b) for b in bases] + [real_path(b) for b in bases])),
            names,
            real_path(folder),
        )
        return not followed.issuperset(files)

    def _deliver(self, prepared: Prepared) -> None:
        with self._ready_lock:
            # A newer read of the same asset supersedes one not yet applied, except that a
            # failure never drops a good save waiting for poll() (a slow frame): that one is
            # applied, then the failure reported on top of it (review helper 148: the game kept
            # the save before, and the good one was never applied nor mentioned).
            for old in [p for p in self._ready if p.rel == prepared.rel]:
                good = old.error is None and not old.unchanged
                if prepared.error is not None and good:
                    continue
                # Lowered without error is not yet compiled: the superseded change is kept to
                # be applied if this one's compile fails (see _apply).
                prepared.earlier = old if good else old.earlier
                self._ready.remove(old)
                prepared.first_event = min(prepared.first_event, old.first_event)
            self._ready.append(prepared)

    @property
    def idle(self) -> bool:
        """No reload waiting for quiet, being prepared, or waiting for :meth:`poll`."""
        return self.service.idle and not self._ready

    @property
    def pending(self) -> int:
        """Reloads prepared and waiting for :meth:`poll`."""
        return len(self._ready)

    def poll(self) -> list[ReloadEvent | ReloadFailure]:
        """Apply the reloads that finished since the last call (call once a frame, on the
        thread that owns the device). Answers what happened, in order; never raises for an
        asset's error (it becomes the reference's diagnostics)."""
        out: list[ReloadEvent | ReloadFailure] = []
        while True:
            with self._ready_lock:
                if not self._ready:
                    break
                prepared = self._ready.popleft()
            ref = self._refs.get(prepared.rel)
            if ref is None:
                continue
            try:
                result = self._apply(ref, prepared)
                if self._applied_first:  # an earlier save _apply fell back to, before this one's failure
                    out.extend(self._applied_first)
                    self._applied_first.clear()
            except Exception as exc:  # never let a reload take the game down
                if self._found_lost():
                    # A raw wgpu error from a device lost behind the guard's back (a reset nobody
                    # reported): not the asset's fault, nor a bug; retried on the device that replaces it.
                    log.info("reload of %s waits for a new device (%s); retried on the next poll", ref.path, exc)
                    self._retry.append(prepared)
                    continue
                log.exception("applying a reload of %s failed", ref.path)
                result = self._fail(ref, bug(f"applying a reload raised {type(exc).__name__}: {exc}"), prepared)
            if ref._source is not None:
                # What is live reads these: an unchanged read through other files (a link
                # retargeted to a copy) moved ref._source; a failed one left it as it was.
                ref._store.paths = _store_paths(ref._source)
            ref._tried_files = _real_files(prepared.source) if prepared.source is not None and ref._source is not prepared.source else ()
            grew = self._reindex(ref)  # what it reads now (a reload, a failure, a link retargeted)
            ref._rereading = False
            if grew:
                # Files this read brought in (a link's new target, a new #import) were not
                # followed while it was read and applied: an edit to one meanwhile matched no
                # asset (review helper 97). Read once more: judged unchanged unless one changed
                # (a failed read's failure, read again unchanged, is not reported twice).
                ref._rereading = True
                self.service.start_worker()
                self.service.schedule(os.path.abspath(ref.folder))
            if result is not None:
                out.append(result)
        retry, self._retry = self._retry, []
        with self._ready_lock:
            for prepared in reversed(retry):  # unless a newer read of the asset superseded it
                if not any(p.rel == prepared.rel for p in self._ready):
                    self._ready.appendleft(prepared)
        return out

    def _fail(self, ref: ComputeShaderRef, error: PluginError, prepared: Prepared) -> ReloadFailure | None:
        if ref._rereading and _same_failure(error, ref.error):
            return None  # the read once more (see poll) failed as the read before it: reported once (review helper 100)
        ref.error = error
        ref.error_read_at = prepared.read_at  # a program read after this one supersedes it (Engine.product_error)
        ref.failures += 1
        failure = ReloadFailure(ref.path, ref.generation, error, time.monotonic() - prepared.first_event)
        log.warning("reload of %s failed; generation %d stays live:\n%s", ref.path, ref.generation, error)
        ref._notify(ref._error_listeners, failure)
        return failure

    def _apply(self, ref: ComputeShaderRef, prepared: Prepared) -> ReloadEvent | ReloadFailure | None:
        if prepared.error is not None:
            return self._fail(ref, prepared.error, prepared)
        src, schema = prepared.source, prepared.schema
        live = ref._source
        if prepared.unchanged and src is not None and live is not None and not same_content(src, live):
            # Judged unchanged against the content that was live when it was read, but a newer
            # reload was applied meanwhile (an edit, then undone before this poll): the files
            # say this content, which is no longer live. Read again, against what is live now.
            self.service.start_worker()
            self.service.schedule(os.path.abspath(ref.folder))
            return None
        if prepared.unchanged or src is None or schema is None:
            if prepared.unchanged and src is not None:
                # The same content, perhaps through other files (a link retargeted to a copy):
                # later events must follow the files it reads now.
                ref._source = src
            if ref.error is not None:
                log.info("%s is back to its live content; diagnostics cleared", ref.path)
            ref.error = None
            return None
        ctx = self._context_or_none()  # None: no adapter here; the reload is validated by lowering only
        old = ref._program
        standing = old.current() if old is not None else None
        if standing is not None and standing is not old and standing.read_at >= prepared.read_at:
            # Another library over these files applied a read newer than this one since (it
            # moved the program on): applying this older read would swap its pipeline into
            # the newer program's variants (review helper 148: the game ran an older save for
            # good). The newer program is this asset's too.
            ref._program = standing
            ref.error = None
            return None
        try:
            # Validate by compiling before anything is registered or swapped: a refused
            # shader leaves the live program (and the program registry) as they were.
            if ctx is not None:
                for spec, lowered in prepared.lowered.items():
                    compile_lowered(lowered, label=f"{ref.path} {spec.label()}", device=ctx)
            standing = registered_program(ref.path, ctx) if ctx is not None else None
            fresh = not (standing is not None and standing.same_content(schema, src.wgsl_text, src.wgsl_path, src.module_texts))
            if not fresh:
                assert standing is not None  # same content as the one standing under the key
                new = standing
            else:  # built privately; it stands under the key only once every variant compiled
                new = Program(
                    ref.path,
                    schema,
                    src.wgsl_text,
                    wgsl_path=src.wgsl_path,
                    ctx=get_context(ctx) if ctx is not None else None,
                    store=ref._store.with_paths(_store_paths(src)),  # handed the live store below, once it compiled
                    modules=src.module_texts,
                )
            carried = dict(prepared.carried)
            if old is not None:
                for old_spec in old.variants:  # made after the worker read the asset
                    if old_spec not in carried:
                        carried[old_spec] = carry_spec(old.schema, schema, old_spec, old.explicit(old_spec))
            recompiled = []
            for new_spec in dict.fromkeys(carried.values()) if ctx is not None else ():
                new.variant(new_spec)  # type: ignore[arg-type]  # a VariantSpec passes through resolve_spec
                recompiled.append(new_spec)
            if old is not None:
                for old_spec, new_spec in carried.items():  # what the game asked for stays asked for
                    new.mark_explicit(new_spec, old.explicit(old_spec))
        except DeviceLostError as exc:
            # The device died under the compile (perhaps unnoticed till now): not the asset's
            # fault. compile_lowered marked the context lost, so the retry compiles on the
            # device that replaces it.
            log.info("reload of %s waits for a new device (%s); retried on the next poll", ref.path, exc)
            self._retry.append(prepared)
            return None
        except PluginError as exc:
            earlier, prepared.earlier = prepared.earlier, None
            if earlier is not None:
                # A good save superseded by this broken one before a poll(): it is applied, and
                # this failure reported on top of it (its generation is the one left live).
                done = self._apply(ref, earlier)
                if done is not None:
                    self._applied_first.append(done)
            return self._fail(ref, exc, prepared)
        # Applied: the asset's store names the files of this read from now on, and the new
        # program uses it (later reads repoint it: a link retargeted to a copy).
        ref._store.paths = _store_paths(src)
        if fresh:
            new.store = ref._store
        new.read_at = max(new.read_at, prepared.read_at)
        adopt_program(new)

        old_variants = old.variants if old is not None else {}
        new_variants = new.variants
        layout_changed = tuple(
            s for s, v in old_variants.items() if carried[s] != s or plan_signature(v.lowered) != plan_signature(new_variants[carried[s]].lowered)
        )
        if old_variants:
            kind = LAYOUT if layout_changed else BODY
        elif prepared.validation is not None and prepared.baseline is not None:
            same = plan_signature(prepared.baseline) == plan_signature(prepared.lowered[prepared.validation])
            kind = BODY if same else LAYOUT
        else:
            kind = LAYOUT
        if fresh and old is not None:
            # Body-only variants keep their Variant objects (pooled outputs, params ring, bind
            # groups): the new pipeline is swapped into them, and they stand in the new program.
            # A variant of a device lost meanwhile is not carried: the new program's own, on
            # the new device, stands (holders of the old one get DeviceLostError and ask again).
            for s, variant in old_variants.items():
                replacement = new_variants[carried[s]]
                if s not in layout_changed and variant.ctx is replacement.ctx:
                    variant.swap_compiled(new, replacement.lowered, replacement.compiled)
                    new.adopt(carried[s], variant)
                elif s in layout_changed:
                    # Whoever kept it and runs it gets told, not the old kernel's numbers.
                    variant.retire(
                        f"reloaded with another binding layout (generation {ref.generation + 1}): this Variant ({s.label()}) "
                        "was made before it and would run the old kernel; take the new one from ref.program().variant(...)"
                    )
            # Copies on other devices (Program.on_device) are never swapped: the new program
            # makes its own. The variants a copy made refuse run() (review helper 187: one kept
            # ran the old kernel), and the copy follows the new program's copy on its device, so
            # a variant it makes from now on is the new kernel's (helper 192: one made after
            # the reload from a copy held across it ran the old kernel).
            for copy in old.device_copies():
                for s, variant in copy.variants.items():
                    variant.retire(
                        f"reloaded (generation {ref.generation + 1}): this Variant ({s.label()}) on another device was made before it "
                        "and would run the old kernel; take the new one from ref.program().on_device(...).variant(...)"
                    )
                if copy.ctx is not None and not copy.ctx.lost:
                    copy.follow(new.on_device(copy.ctx))
        files = []
        prev = ref._source
        if prev is None or prev.yaml_text != src.yaml_text:
            files.append("bindings.yaml")
        if prev is None or prev.wgsl_text != src.wgsl_text or os.path.basename(prev.wgsl_path) != os.path.basename(src.wgsl_path):
            files.append(os.path.basename(src.wgsl_path))
        before = {m.name: m.text for m in prev.modules} if prev is not None else {}
        files += [os.path.relpath(m.path, self.root) for m in src.modules if before.get(m.name) != m.text]

        if old is not None and old is not new:
            old.follow(new)  # whoever holds the old Program sees the new one, never a mix
        ref._program = new
        ref._source = src
        ref.error = None
        ref.generation += 1
        ref.reloads += 1
        event = ReloadEvent(
            asset=ref.path,
            generation=ref.generation,
            kind=kind,
            files=tuple(files),
            invalidated=tuple(old_variants),
            layout_changed=layout_changed,
            recompiled=tuple(recompiled),
            program=new,
            previous=old,
            latency=time.monotonic() - prepared.first_event,
        )
        log.info("%s", event.describe())
        ref._notify(ref._reload_listeners, event)
        return event

    # -- housekeeping ----------------------------------------------------------------------
    def flush_usage(self) -> bool:
        """Write the variants requested so far to the usage log (also done every ~2 s while
        watching, and on close)."""
        return self.usage.flush() if self.usage is not None else False

    def stats(self) -> dict[str, Any]:
        """Reloads, failures, cache counters (``remote``: the remote tier's, or None)."""
        return {
            "assets": len(self._refs),
            "reloads": sum(r.reloads for r in self._refs.values()),
            "failures": sum(r.failures for r in self._refs.values()),
            "pending": self.pending,
            "cache": self.cache.stats() if self.cache is not None else None,
            "remote": self.remote.stats() if self.remote is not None else None,
        }

    # -- start-up --------------------------------------------------------------------------
    def prefetch(self, variants: Mapping[str, Any] | None = None, *, threads: int = 8) -> PrefetchReport:
        """Warm the variants a game will ask for: memory and the local cache first, then the
        remote tier for the rest, in parallel round trips (each bounded by the remote
        timeout; a dead server costs one timeout, then its breaker answers at once). Remote
        entries are verified, kept in memory and copied into the local cache (in the
        background), so the later ``variant()`` calls lower nothing. Call it at start-up,
        off the frame loop.

        Args:
            variants: {asset path: [spec, ...]} where a spec is a VariantSpec or a
                {name: value} mapping; default: the usage log's variants.
            threads: parallel remote round trips.
        Returns:
            A :class:`PrefetchReport` (counts per tier; nothing here raises for an asset).
        """
        return prefetch(self, variants, threads=threads)

    def _defer_write(self, fn: Callable[..., Any], *args: Any) -> None:
        with self._writes_lock:
            if self._writer is None:
                self._writer = ThreadPoolExecutor(2, thread_name_prefix="cache-write")
            self._writes.append(self._writer.submit(fn, *args))

    def flush_writes(self) -> int:
        """Wait for the local-cache copies of remote entries a prefetch is still writing;
        answers how many were waited for (also done by :meth:`close`)."""
        with self._writes_lock:
            writes, self._writes = self._writes, []
        for fut in writes:
            try:
                fut.result()
            except Exception:  # put() logs and answers False; anything else must not escape close()
                log.exception("copying a remote entry into the local cache failed")
        return len(writes)

    def close(self) -> None:
        """Stop watching, finish the local copies of remote entries and flush the usage log.
        References and programs stay usable."""
        self.service.stop()
        self.flush_writes()
        self.flush_usage()
        if self.remote is not None:
            self.remote.publish()  # the reload worker's lookups since the last prefetch

    def __enter__(self) -> "AssetLibrary":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"AssetLibrary({self.root!r}, {len(self._refs)} assets, watching={self.service.watching})"


# Seconds a reload's compile may take before the reload fails: a compile cannot be
# interrupted (lavapipe compiled a huge var<private> array for minutes), and until then the
# reload worker waits, so every other asset's reload waited behind it for good.
RELOAD_COMPILE_TIMEOUT_S = 60.0
_SUPERSEDED_CHECK_S = 0.02  # how often a reload waiting for its compile looks for newer work


class _Compile(threading.Thread):
    """One compile of a reload, on a thread of its own that the worker can stop waiting for;
    ``then`` runs once it is done (a reload it failed is read again)."""

    def __init__(self, lowered: Lowered, label: str, ctx: Any):
        super().__init__(name="engine_plugin reload compile", daemon=True)
        self.lowered, self.label, self.ctx = lowered, label, ctx
        self.done = False  # under _compiles_lock: set once, when ``then`` is taken
        self.then: list[Callable[[], None]] = []
        self.started = time.monotonic()

    def run(self) -> None:
        error: PluginError | None = None
        try:
            compile_lowered(self.lowered, label=self.label, device=self.ctx)
        except PluginError as exc:
            error = exc
        except Exception:
            log.debug("a reload's compile raised", exc_info=True)  # poll() meets it again
        finally:
            with _compiles_lock:
                if _compiles.get(self.key) is self:
                    del _compiles[self.key]
                if error is not None and self.then and not isinstance(error, DeviceLostError):
                    # Kept for the reload read again below: its compile would take as long again
                    # (a compile error reached after the deadline was never reported, helper 142).
                    _failed[self.key] = error
                    while len(_failed) > 64:
                        del _failed[next(iter(_failed))]
                self.done = True
                then, self.then = self.then, []
        for call in then:
            try:
                call()
            except Exception:  # a library closed meanwhile: nothing to read again
                log.debug("reading an asset again after its compile finished failed", exc_info=True)

    @property
    def key(self) -> tuple[int, str]:
        return (id(self.ctx), self.lowered.fingerprint)


_compiles: dict[tuple[int, str], _Compile] = {}  # compiles in flight: a save of the same code joins its stuck one
_failed: dict[tuple[int, str], PluginError] = {}  # compiles that failed after their reload stopped waiting
_compiles_lock = threading.Lock()


def _compiled_within(
    lowered: Lowered, label: str, ctx: Any, limit: float, retry: Callable[[], None] | None, superseded: Callable[[], bool] | None = None
) -> bool:
    """Compile ``lowered`` on its own thread, waiting at most ``limit`` seconds; answers
    whether it is done (compiled, or failed: ``poll`` meets a compile error again). When it
    is not, ``retry`` runs once it is.

    Raises:
        Superseded: ``superseded()`` turned true while it waited (newer work is due): the
            compile goes on in the background, and the worker reads the asset again later
            (one waiting out a stalled compile held back the save fixing it, and every other
            asset's, for up to the deadline: review helper 229).
    """
    job = _Compile(lowered, label, ctx)
    with _compiles_lock:
        running = _compiles.get(job.key)
        if running is not None and not running.done:
            job = running
        else:
            _compiles[job.key] = job
            job.start()
    deadline = job.started + limit  # a save joining a stuck compile waits out its first deadline only
    while True:
        left = deadline - time.monotonic()
        job.join(max(0.0, min(left, _SUPERSEDED_CHECK_S) if superseded is not None else left))
        if not job.is_alive() or left <= _SUPERSEDED_CHECK_S:
            break
        if superseded is not None and superseded():
            with _compiles_lock:
                if job.done:
                    return True
            raise Superseded(label)
    with _compiles_lock:
        if job.done:  # its ``then`` was taken: a retry added now would never run (helper 142)
            return True
        if retry is not None:
            job.then.append(retry)
    return False


def _precompile(prepared: Prepared, ctx: Any, path: str, retry: Callable[[], None] | None = None, superseded: Callable[[], bool] | None = None) -> Prepared:
    """Compile the reload's variants on the reload worker, off the engine thread: pipeline
    creation is the costly part of a swap (tens to hundreds of ms) and releases the GIL. The
    pipelines land in the device's compile cache, so :meth:`AssetLibrary.poll` swaps them in
    at once; until then the old kernel keeps running. A failure here is left for ``poll`` to
    meet again and report on the engine thread (its message is the same). A compile that
    outlives :data:`RELOAD_COMPILE_TIMEOUT_S` fails the reload (the last good program stays;
    ``poll`` never compiles it on the engine thread), the worker goes on to other reloads, and
    ``retry`` (the asset read again) runs if that compile finishes after all. Once
    ``superseded()`` (newer work is due) it stops waiting sooner: see :func:`_compiled_within`."""
    if prepared.error is not None or ctx is None or ctx.lost:
        return prepared
    for spec, lowered in prepared.lowered.items():
        with _compiles_lock:  # kept (not taken): every reload of that code gets it, a second library's too
            late = _failed.get((id(ctx), lowered.fingerprint))
        if late is not None:  # its compile failed after an earlier reload stopped waiting
            return replace(prepared, error=late)
        limit = RELOAD_COMPILE_TIMEOUT_S
        if _compiled_within(lowered, f"{path} {spec.label()}", ctx, limit, retry, superseded):
            continue
        where = prepared.source.wgsl_path if prepared.source is not None else path
        message = (
            f"compiling variant {spec.label()} did not finish within {limit:g} s: the driver's compiler may be stuck on this shader "
            "(a huge var<private> or workgroup array?); the last good program stays, and this reload is tried again if the compile finishes"
        )
        return replace(prepared, error=CompileError(message, Span(where)))
    return prepared


def _store_paths(src: AssetSource) -> tuple[str, ...]:
    """The files an asset's source maps name: bindings.yaml, the body, then its modules."""
    return (src.yaml_path, src.wgsl_path) + tuple(m.path for m in src.modules)


class _WatchIndex:
    """What each loaded asset's reads depend on, for file events: links resolved, so an event
    names either the file or its link's target, and looked up by path, so an event costs a few
    dictionary lookups however many assets are loaded.

    ``files``: each file an asset read (its bindings.yaml, body and modules; also those of a
    read that failed after reading) -> its folders. ``folders``: each asset folder with links
    resolved -> the asset (a file made in a linked asset folder). ``bases``: each folder its
    ``#import`` lines look in, as written and resolved -> {its folder: the module names it
    imports, or None for any (a failed read may lack a module of any name)}: a module created
    or removed there shadows or unshadows one it imports, and a link made or retargeted there
    replaces them all. The watcher's thread reads it while the engine's thread changes it:
    a lock keeps them apart.
    """

    def __init__(self, root: str) -> None:
        self.root = root
        self.files: dict[str, set[str]] = {}
        self.folders: dict[str, set[str]] = {}
        self.bases: dict[str, dict[str, frozenset[str] | None]] = {}
        self._of: dict[str, tuple[tuple[str, ...], tuple[str, ...], str]] = {}
        self._lock = threading.Lock()

    def enter(self, folder: str, files: tuple[str, ...], bases: tuple[str, ...], names: frozenset[str] | None, real_folder: str) -> None:
        with self._lock:
            self._drop(folder)
            for f in files:
                self.files.setdefault(f, set()).add(folder)
            for b in bases:
                self.bases.setdefault(b, {})[folder] = names
            self.folders.setdefault(real_folder, set()).add(folder)
            self._of[folder] = (files, bases, real_folder)

    def _drop(self, folder: str) -> None:
        files, bases, real_folder = self._of.pop(folder, ((), (), ""))
        for table, keys in ((self.files, files), (self.folders, (real_folder,) if real_folder else ())):
            for key in keys:
                held = table.get(key)
                if held is not None:
                    held.discard(folder)
                    if not held:
                        del table[key]
        for b in bases:
            entries = self.bases.get(b)
            if entries is not None:
                entries.pop(folder, None)
                if not entries:
                    del self.bases[b]

    def files_of(self, folder: str) -> tuple[str, ...]:
        """The files the asset at ``folder`` is followed by (empty when not entered)."""
        with self._lock:
            return self._of.get(folder, ((), (), ""))[0]

    def hits(self, path: str, real: str) -> set[str]:
        with self._lock:
            return self._hits(path, real)

    def _hits(self, path: str, real: str) -> set[str]:
        out = set(self.files.get(real, ())) | set(self.files.get(path, ()))
        gone_or_folder = os.path.isdir(real) or not os.path.exists(real)
        if not out and gone_or_folder:
            # a folder (moved, deleted, made) or a file gone: the files that lay under it
            for f, folders in self.files.items():
                if path_under(f, real) or path_under(f, path):
                    out |= folders
        for where in {path, real}:
            # inside an asset folder reached through a link (a body made there)
            base = os.path.dirname(where)
            while path_under(base, os.path.dirname(self.root)):
                out |= self.folders.get(base, set())
                parent = os.path.dirname(base)
                if parent == base:
                    break
                base = parent
            if gone_or_folder:
                # a module folder (or one above it) made, removed or retargeted as a whole (a link)
                for b, under in self.bases.items():
                    if path_under(b, where):
                        out |= set(under)
            if where.endswith(".wgsl"):
                base = os.path.dirname(where)
                while True:
                    found = self.bases.get(base)
                    if found:
                        name = os.path.relpath(where, base)[: -len(".wgsl")].replace(os.sep, "/")
                        out |= {folder for folder, names in found.items() if names is None or name in names}
                    parent = os.path.dirname(base)
                    if parent == base or not path_under(parent, os.path.dirname(self.root)):
                        break
                    base = parent
        return out


def _real_files(src: AssetSource) -> tuple[str, ...]:
    """An asset read's files, each as every path that names it through its chain of links
    (kept once a read is live, so that a file event matches them without touching the disk):
    a link in the middle of a chain retargeted names a path only the chain passes through
    (review helper 97)."""
    files = [src.yaml_path, src.wgsl_path] + [m.path for m in src.modules]
    return tuple(dict.fromkeys(p for f in files for p in link_chain(f)[0]))


def _same_failure(error: PluginError | None, before: PluginError | None) -> bool:
    """Whether ``error`` says what ``before`` said (the same message at the same place)."""
    return error is not None and before is not None and type(error) is type(before) and error.render() == before.render()
