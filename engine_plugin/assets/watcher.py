"""The reload service: a watchdog observer, a per-asset debounce, and one worker thread.

File events are mapped to the loaded asset whose folder holds them and *coalesced per asset*
(``bindings.yaml`` and the ``.wgsl`` are one unit). An asset is read only once it has been
quiet for ``quiet`` seconds, measured both from the last event and from the newest file
mtime (so a late-delivered event cannot make a half-written file look settled). Editors' save
patterns all reduce to "some events, then quiet":

- in-place truncate + write: modify/close events; read after the quiet window;
- atomic rename from a temporary file (vim, JetBrains, VS Code): the move's destination is
  the asset's file; the temporary names are ignored;
- delete then create: a missing file is given ``missing_grace`` more before it is reported;
- swap and backup files (``.swp``, ``~``, ``4913``, ``.tmp``, JetBrains' ``___jb_*___``) are
  ignored entirely.

A file outside every asset folder (a shared module, ``assets/modules/noise.wgsl``) is mapped
to the loaded assets that import it by the ``dependents`` callback; each of them is
scheduled as if its own files had been saved.

The worker prepares the reload (pure Python, :func:`reload.prepare`) and hands it to the
library; if new events for that asset arrived meanwhile the result is dropped, since the next
read supersedes it. Nothing here calls wgpu.

The root itself may go away and come back (``rm -rf assets && cp -r backup assets``, a
``git checkout``, an exporter rewriting the tree). An inotify watch belongs to the folder's
inode, so the observer of a deleted root stops for good. The worker checks the root every
:data:`ROOT_CHECK_S`: when the observer's watch died or the root is another folder than the
one watched, it watches the root again (as soon as it exists) and reads every loaded asset
under it, since their files changed while nobody watched.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from .folder import ASSET_SUFFIX, find_assets, is_editor_noise
from .reload import Prepared, Superseded, Unsettled, folder_stamp

__all__ = ["ReloadService", "is_ignored_name"]

log = logging.getLogger("engine_plugin.assets")

# Beyond folder.is_editor_noise: JetBrains' safe-write names.
_EXTRA_NOISE = ("___jb_tmp___", "___jb_old___", ".part")
_RELEVANT_EVENTS = ("created", "modified", "moved", "deleted", "closed")
_USAGE_FLUSH_S = 2.0
ROOT_CHECK_S = 0.25  # how often the worker checks that the watched root is still the root


def is_ignored_name(name: str) -> bool:
    """Whether a file name is an editor's swap, backup or temporary file (never an asset's)."""
    base = os.path.basename(name)
    return is_editor_noise(base) or base.endswith(_EXTRA_NOISE)


@dataclass
class _Pending:
    first: float  # monotonic time of the first event since the asset was last read
    last: float  # of the latest event
    seq: int
    not_before: float = 0.0  # rescheduled reads (unsettled mtime, missing-file grace)
    grace_used: bool = False


class ReloadService:
    """Debounces events per asset folder and prepares reloads on one worker thread.

    Args:
        root: the folder the observer watches (recursively).
        resolve: absolute folder -> a callable ``prepare(seq, first_event) -> Prepared`` for a
            loaded asset, or None when no loaded asset lives there.
        deliver: hands a finished :class:`Prepared` to the library (any thread).
        quiet: the quiet window in seconds.
        missing_grace: extra wait before a missing file is reported (delete-then-create saves).
        max_delay: a continuously written asset is read anyway after this long.
        on_idle: called on the worker about every two seconds (flushes the usage log).
        dependents: a path outside every asset folder -> the asset folders it concerns (the
            loaded assets importing that module file).
    """

    def __init__(
        self,
        root: str,
        resolve: Callable[[str], Callable[[int, float], Prepared] | None],
        deliver: Callable[[Prepared], None],
        *,
        quiet: float = 0.030,
        missing_grace: float = 0.25,
        max_delay: float = 1.0,
        on_idle: Callable[[], object] | None = None,
        dependents: Callable[[str], list[str]] | None = None,
    ):
        self.root = os.path.abspath(root)
        for what, value in (("quiet", quiet), ("missing_grace", missing_grace), ("max_delay", max_delay)):
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{what} is seconds, finite and not negative, not {value!r}")  # NaN: never due, nothing reloads
        self.quiet = float(quiet)
        self.missing_grace = float(missing_grace)
        self.max_delay = float(max_delay)
        self._resolve = resolve
        self._deliver = deliver
        self._on_idle = on_idle
        self._dependents = dependents
        self._cond = threading.Condition()
        self._pending: dict[str, _Pending] = {}
        self._seq = 0
        self._stopping = False
        self._worker: threading.Thread | None = None
        self._observer: Any = None
        self._observer_lock = threading.Lock()
        self._root_id: tuple[int, int] | None = None  # (device, inode) of the root being watched
        # The root was seen missing (a check, or a read while it was): its assets are read
        # again once it is back, even as the same folder (worker thread only).
        self._root_was_missing = False
        self._in_flight: str | None = None
        self.events_seen = 0  # relevant file events (for tests and the CLI)
        self.rewatches = 0  # times the root was watched again after it went away

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def watching(self) -> bool:
        return self._observer is not None

    @property
    def idle(self) -> bool:
        """Nothing waiting for its quiet window and nothing being read."""
        with self._cond:
            return not self._pending and self._in_flight is None

    def start_worker(self) -> None:
        with self._cond:
            if self._worker is not None:
                return
            self._stopping = False
            self._worker = threading.Thread(target=self._run, name="engine_plugin-reload", daemon=True)
            self._worker.start()

    def watch(self) -> bool:
        """Start the worker and a watchdog observer over the root (idempotent); answers whether
        this call started the observer (its caller then reads the loaded assets again: files
        saved while nobody watched sent no event that will ever come)."""
        self.start_worker()
        with self._observer_lock:
            if self._observer is not None:
                return False
            self._observer = self._start_observer()
            return True

    def _start_observer(self) -> Any:
        from watchdog.events import (
            DirCreatedEvent,
            DirDeletedEvent,
            DirMovedEvent,
            FileClosedEvent,
            FileCreatedEvent,
            FileDeletedEvent,
            FileModifiedEvent,
            FileMovedEvent,
        )
        from watchdog.observers import Observer

        # watchdog's inotify observer warns when a folder moved out of the tree and back is
        # watched again (it overwrites its own callback, which is what should happen): a
        # RuntimeWarning in the game's stderr with nothing wrong (review helper 195).
        warnings.filterwarnings("ignore", message=r"Callback with id .* already exists", category=RuntimeWarning, module=r"watchdog\.")
        handler = _Handler(self)
        observer = Observer()
        kinds = [FileCreatedEvent, FileModifiedEvent, FileMovedEvent, FileDeletedEvent, FileClosedEvent, DirCreatedEvent, DirDeletedEvent, DirMovedEvent]
        observer.schedule(handler, self.root, recursive=True, event_filter=kinds)  # type: ignore[arg-type]  # duck-typed handler
        observer.daemon = True
        self._root_id = _identity(self.root)  # before start: a change after it is seen as one
        observer.start()
        return observer

    def _check_root(self) -> None:
        """Watch the root again if its watch died or it is another folder now (worker thread)."""
        with self._observer_lock:
            observer = self._observer
            if observer is None:
                return
            now_id = _identity(self.root)
            if now_id is None:
                self._root_was_missing = True
                return  # gone: wait for it to come back
            back, self._root_was_missing = self._root_was_missing, False
            dead = not any(e.is_alive() for e in observer.emitters)
            if not dead and now_id == self._root_id:
                if back:
                    # Renamed away and back: the watch followed the folder, and reported a save
                    # made meanwhile under the path it had left, where the read found nothing
                    # (review helper 203: the old kernel ran on for good under a false "it
                    # does not exist"). What is there now is read again.
                    log.info("hot reload: %s is back; re-reading the loaded assets", self.root)
                    self._reread_all()
                return
            try:
                fresh = self._start_observer()
            except OSError as exc:  # replaced again while we looked: try on the next check
                log.warning("hot reload: cannot watch %s again yet: %s", self.root, exc.strerror or exc)
                return
            self._observer = fresh
            self.rewatches += 1
        log.info("hot reload: %s was replaced; watching it again and re-reading the loaded assets", self.root)
        _stop_observer(observer)
        self._reread_all()

    def _reread_all(self) -> None:
        """Read every loaded asset under the root again (and the assets importing them)."""
        for folder in find_assets(self.root):
            self.notify_path(os.path.abspath(folder))

    def stop(self) -> None:
        """Stop the observer and the worker; pending reloads are dropped."""
        with self._observer_lock:
            observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()
            observer.join(timeout=5)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            worker, self._worker = self._worker, None
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout=5)

    # -- events ----------------------------------------------------------------------------
    def asset_folder_of(self, path: str) -> str | None:
        """The ``*.computeShader`` folder under the root that holds ``path`` (or is it)."""
        p = os.path.abspath(path)
        while p == self.root or p.startswith(self.root + os.sep):
            if p.endswith(ASSET_SUFFIX):
                return p
            parent = os.path.dirname(p)
            if parent == p:
                break
            p = parent
        return None

    def notify_path(self, path: str) -> bool:
        """A file event at ``path``; answers whether it concerns a loaded asset."""
        if is_ignored_name(path):
            return False
        folder = self.asset_folder_of(path)
        # Its own asset, and every asset that imports it, may import it now, or reads it
        # through a link.
        hits = [f for f in self._dependents(os.path.abspath(path)) if self._resolve(f) is not None] if self._dependents is not None else []
        if folder is not None and self._resolve(folder) is not None and folder not in hits:
            hits.append(folder)
        for f in hits:
            self.schedule(f)
        return bool(hits)

    def schedule(self, folder: str, delay: float = 0.0) -> None:
        """Read ``folder`` again once it has been quiet (``delay``: not before now + delay)."""
        now = time.monotonic()
        with self._cond:
            self._seq += 1
            entry = self._pending.get(folder)
            if entry is None:
                entry = self._pending[folder] = _Pending(now, now, self._seq)
            entry.last = now
            entry.seq = self._seq
            entry.not_before = max(entry.not_before, now + delay)
            self.events_seen += 1
            self._cond.notify_all()

    def work_due(self) -> bool:
        """Whether a read is due now (a newer save of the asset being read, or of another):
        the worker then stops waiting for a stalled compile (see ``Superseded``)."""
        now = time.monotonic()
        with self._cond:
            return any(self._due(e) <= now for e in self._pending.values())

    def _due(self, entry: _Pending) -> float:
        return max(min(entry.last + self.quiet, entry.first + self.max_delay), entry.not_before)

    # -- the worker ------------------------------------------------------------------------
    def _run(self) -> None:
        last_idle = time.monotonic()
        last_root_check = 0.0
        while True:
            if self._observer is not None and time.monotonic() - last_root_check >= ROOT_CHECK_S:
                last_root_check = time.monotonic()
                self._safely(self._check_root)
            with self._cond:
                if self._stopping:
                    return
                now = time.monotonic()
                folder, entry = None, None
                wake = now + (ROOT_CHECK_S if self._observer is not None else _USAGE_FLUSH_S)
                for f, e in self._pending.items():
                    due = self._due(e)
                    if due <= now:
                        folder, entry = f, e
                        break
                    wake = min(wake, due)
                if entry is None:
                    self._cond.wait(timeout=max(0.0005, wake - now))
                    idle_now = time.monotonic() - last_idle > _USAGE_FLUSH_S
                else:
                    assert folder is not None  # found together with its entry
                    del self._pending[folder]
                    self._in_flight = folder
                    idle_now = False
            if entry is None:
                if idle_now and self._on_idle is not None:
                    last_idle = time.monotonic()
                    self._safely(self._on_idle)
                continue
            try:
                self._safely(lambda: self._read(folder, entry))  # type: ignore[arg-type]
            finally:
                with self._cond:
                    self._in_flight = None

    def _safely(self, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception:  # the worker must outlive any bug in one reload
            log.exception("engine_plugin bug, please report: the reload worker failed")

    def _requeue(self, folder: str, entry: _Pending, delay: float, *, grace: bool = False) -> None:
        now = time.monotonic()
        with self._cond:
            current = self._pending.get(folder)
            if current is None:
                entry.not_before = now + delay
                entry.grace_used = entry.grace_used or grace
                self._pending[folder] = entry
            else:  # new events came meanwhile: keep the earliest first-event time
                current.first = min(current.first, entry.first)
                current.not_before = max(current.not_before, now + delay)
                current.grace_used = current.grace_used or grace
            self._cond.notify_all()

    def _read(self, folder: str, entry: _Pending) -> None:
        job = self._resolve(folder)
        if job is None:
            return  # unloaded meanwhile
        forced = time.monotonic() - entry.first >= self.max_delay
        # Settled on disk too? The newest mtime must be a quiet window old.
        stamp = folder_stamp(folder)
        if stamp and not forced:
            newest = max(s[3] for s in stamp) / 1e9
            age = time.time() - newest
            if 0 <= age < self.quiet:
                self._requeue(folder, entry, self.quiet - age)
                return
        try:
            prepared = job(entry.seq, entry.first)
        except Unsettled:
            self._requeue(folder, entry, self.quiet)
            return
        except Superseded:
            # Its compile stalled and newer work is due: that goes first; this asset is read
            # again after it (merged into a newer save of its own, if one came).
            self._requeue(folder, entry, self.quiet)
            return
        if prepared.missing and not entry.grace_used and self.missing_grace > 0:
            self._requeue(folder, entry, self.missing_grace, grace=True)
            return
        if prepared.missing and not os.path.isdir(self.root):
            self._root_was_missing = True  # read again when it is back (even between two root checks)
        with self._cond:
            pending = self._pending.get(folder)
            if pending is not None and not forced:
                pending.first = min(pending.first, entry.first)  # the next read supersedes this one
                return
        self._deliver(prepared)


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _stop_observer(observer: Any) -> None:
    try:
        observer.stop()
        observer.join(timeout=5)
    except Exception:  # an observer whose watch already died may complain on stop
        log.debug("hot reload: stopping a dead observer failed", exc_info=True)


class _Handler:
    """A watchdog handler that only forwards paths (watchdog calls ``dispatch``)."""

    def __init__(self, service: ReloadService):
        self.service = service

    def dispatch(self, event: Any) -> None:
        if event.event_type not in _RELEVANT_EVENTS:
            return
        if event.is_directory and event.event_type == "modified":
            return
        paths = [event.src_path]
        dest = getattr(event, "dest_path", "")
        if dest:
            paths.append(dest)
        for p in paths:
            if isinstance(p, bytes):
                p = os.fsdecode(p)
            try:
                self.service.notify_path(p)
            except Exception:  # an error here would end watchdog's dispatcher, and every reload with it
                log.exception("hot reload: handling the file event for %s failed", p)
