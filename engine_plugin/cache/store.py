"""The msgpack variant store: one ``<key>.msgpack`` file per lowered variant under a folder.

Keys are :func:`engine_plugin.lowering.fingerprint.variant_key` hashes, so an entry is found
by content alone (format version, lowering version, schema text, WGSL text, specialisation,
columns). The store implements the runtime's ``LoweredStore`` protocol (``get``/``put``).

- **Atomic writes.** An entry is written to a private temporary file in the same folder,
  fsynced, then ``os.replace``d over its name: a reader (or a second process baking the
  same variant) sees the old entry or the new one, never a torn one.
- **Bad entries are misses.** Corrupt, truncated or foreign-version entries are logged,
  counted (``corrupt``), removed, and replaced by the next ``put``; never a crash. One that
  cannot be read now (an I/O error opening or reading it) is a miss that stays.
- **Only regular files are read.** An entry is opened without following links
  (``O_NOFOLLOW``) and without blocking (``O_NONBLOCK``), checked to be a regular file of at
  most ``MAX_ENTRY_BYTES`` *before* a byte is read; a symlink (to ``/dev/zero``, to a file
  outside the cache), a FIFO, a device, a folder or a sparse giant is a counted miss. Links
  are removed, never followed to their targets.
- **Only our own names.** ``gc`` and ``clear`` touch entries (``<64 hex>.msgpack``) and
  temporary files of the exact shape this module writes; any other file is the user's.
- **LRU size cap.** A hit stamps the entry's mtime (atime is unreliable: ``noatime``
  mounts), so the oldest mtime is the least recently used; past ``max_bytes`` the oldest
  entries are evicted down to ``LOW_WATER`` of the cap (so a full cache does not rescan on
  every write). Evictions are counted.
"""

from __future__ import annotations

import collections
import errno
import logging
import os
import re
import shutil
import stat
import threading
import time
from dataclasses import dataclass
from typing import Iterator

from ..files import write_atomic
from ..errors import CacheError, Span
from ..lowering import Lowered
from .entry import Entry
from .entry import MAX_ENTRY_BYTES, BadEntry, UnreadableEntry, decode_entry, encode_entry, open_entry
from .local_key import local_key_problem

__all__ = ["VariantCache", "CacheCheck", "CacheStats", "CacheEntryInfo", "DEFAULT_MAX_BYTES", "ENTRY_SUFFIX", "read_entry_file"]

log = logging.getLogger("engine_plugin.cache")

DEFAULT_MAX_BYTES = 512 * 1024 * 1024
ENTRY_SUFFIX = ".msgpack"
LOW_WATER = 0.9
_KEY_RE = re.compile(r"^[0-9a-f]{64}$")
_ENTRY_RE = re.compile(r"^([0-9a-f]{64})\.msgpack$")
_TEMP_PREFIX = ".tmp-"
# What _write_atomic names its temporary files: prefix, 16 hex of the key, pid, 8 hex.
_TEMP_RE = re.compile(r"^\.tmp-[0-9a-f]{8,16}-[0-9]{1,10}-[0-9a-f]{8}$")
_O_SAFE_READ = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
# A temporary file older than this is left over from a crashed writer; gc removes it.
_STALE_TEMP_S = 600.0
_UNUSABLE_KEYS = 65536  # unusable entries remembered by key (a bake reports those it replaced)


@dataclass(frozen=True)
class CacheStats:
    """Counters of one :class:`VariantCache` instance, plus the folder's size when scanned.

    ``misses`` includes ``corrupt`` (entries that existed but could not be used).
    ``entries``/``bytes`` are -1 unless the stats were taken with ``scan=True``.
    """

    hits: int
    misses: int
    corrupt: int
    writes: int
    write_errors: int
    evictions: int
    entries: int = -1
    bytes: int = -1
    temp_files: int = -1

    @property
    def lookups(self) -> int:
        return self.hits + self.misses


@dataclass(frozen=True)
class CacheCheck:
    """What :meth:`VariantCache.check` found: ``unusable`` entries (their content is wrong: gc
    removes them), {key: reason in a few words}, and, apart, ``unreadable`` ones, which could
    not be read now (an I/O error: too many open files, a permission, EIO), {key: the OS's
    words}; that says nothing of what they hold, so they are kept."""

    unusable: dict[str, str]
    unreadable: dict[str, str]


@dataclass(frozen=True)
class CacheEntryInfo:
    key: str
    path: str
    size: int
    mtime_ns: int
    regular: bool  # a regular file (not a link, FIFO, folder, device)
    disk: int  # bytes it takes on disk, at most its size (a sparse file's holes take none)

    @property
    def readable(self) -> bool:
        """Whether a read would even look inside: a regular file of 1 to MAX_ENTRY_BYTES bytes
        (what :func:`read_entry_file` checks before reading a byte)."""
        return self.regular and 0 < self.size <= MAX_ENTRY_BYTES


def _disk_bytes(st: os.stat_result) -> int:
    """What a file takes on disk, at most its size: the size cap counts this, so a sparse
    file planted under an entry's name cannot push good entries out."""
    blocks = getattr(st, "st_blocks", None)
    return st.st_size if blocks is None else min(st.st_size, blocks * 512)


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a plain file"


def read_entry_file(path: str, max_bytes: int = MAX_ENTRY_BYTES) -> bytes:
    """The bytes of the entry file at ``path``, read only if it is a regular file (not a link)
    of 1 to ``max_bytes`` bytes; the type and size are checked before anything is read.

    Raises:
        FileNotFoundError: no file there.
        OSError: the folder cannot be searched (its permissions).
        BadEntry: a link, FIFO, device, folder, empty or oversized file.
        UnreadableEntry: (a BadEntry) an I/O error opening or reading it, which says nothing
            of what it holds.
    """
    st = os.lstat(path)  # FileNotFoundError: a plain miss
    if not stat.S_ISREG(st.st_mode):
        # Checked before opening: opening a FIFO blocks, a device may act on open.
        raise BadEntry(f"{_kind(st.st_mode)}, not a regular file")
    try:
        fd = os.open(path, _O_SAFE_READ)
    except FileNotFoundError:
        raise
    except OSError as exc:  # ELOOP: replaced by a link after the lstat
        raise UnreadableEntry(exc.strerror or str(exc)) from None
    try:
        st = os.fstat(fd)  # of what was opened: the lstat above may be stale
        if not stat.S_ISREG(st.st_mode):
            raise BadEntry(f"{_kind(st.st_mode)}, not a regular file")
        if st.st_size == 0:
            raise BadEntry("empty file")
        if st.st_size > max_bytes:
            raise BadEntry(f"{st.st_size} bytes, more than an entry can be")
        chunks, left = [], st.st_size
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break  # truncated meanwhile: decoding reports it
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise UnreadableEntry(exc.strerror or str(exc)) from None
    finally:
        os.close(fd)


class VariantCache:
    """A folder of msgpack entries, one per lowered variant; safe across threads and processes.

    Args:
        folder: created when missing.
        max_bytes: size cap for the entries (None: no cap).
        warn_read_only: log that a folder this process cannot write is served without writes
            (False: a maintenance command, which says so its own way or writes nothing).
        warn_writes: log a failed write (once per kind of failure); False: the caller says
            each failed write itself, from :meth:`write_error` (a bake: once, not twice).
    Raises:
        CacheError: the folder cannot be created or is not a folder.
    """

    def __init__(self, folder: str, max_bytes: int | None = DEFAULT_MAX_BYTES, *, warn_read_only: bool = True, warn_writes: bool = True):
        self.folder = os.path.abspath(folder)
        self.warn_writes = warn_writes
        if max_bytes is not None and max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive or None, not {max_bytes!r}")
        self.max_bytes = max_bytes
        if os.path.lexists(self.folder) and not os.path.isdir(self.folder):
            raise CacheError("the variant cache path exists and is not a folder", Span(folder))
        try:
            os.makedirs(self.folder, exist_ok=True)
        except OSError as exc:
            raise CacheError(f"cannot create the variant cache folder: {exc.strerror or exc}", Span(folder)) from None
        if not os.path.isdir(self.folder):
            raise CacheError("the variant cache path exists and is not a folder", Span(folder))
        if not os.access(self.folder, os.R_OK | os.X_OK):
            # Another user's private folder, or mode 000: no entry could be read (each read
            # raised PermissionError, review helper 107); callers treat this as no cache.
            raise CacheError("cannot read the variant cache folder (permission denied)", Span(folder))
        self._lock = threading.Lock()
        self._unreadable_warned = False
        self._unreadable_reasons: set[str] = set()  # entry read errors logged (once each)
        self._counts = {"hits": 0, "misses": 0, "corrupt": 0, "writes": 0, "write_errors": 0, "evictions": 0}
        self._write_errors: dict[str, str] = {}  # path -> why its last write failed (until taken)
        self._unusable: collections.deque[str] = collections.deque(maxlen=_UNUSABLE_KEYS)  # keys of entries found unusable, in order
        self._unusable_total = 0  # how many were ever found (the deque keeps the latest)
        self._warned_errnos: set[int | None] = set()  # write failures logged, by errno (once each)
        self._gc_lock = threading.Lock()  # one collection at a time in this process
        self._approx_bytes: int | None = None  # entry bytes as this instance believes; None: not scanned yet
        self._last_stamp = 0
        # A folder we may read but not write (a read-only game install) serves what it holds;
        # writes are skipped after one warning instead of failing (and logging) once per put.
        self.read_only = not os.access(self.folder, os.W_OK)
        if self.read_only and warn_read_only:
            log.warning("variant cache %s is read-only: entries are served but not written", self.folder)
        self._keyless: str | None | bool = False  # not asked yet (see keyless)

    @property
    def keyless(self) -> str | None:
        """Why this process has no local cache key (None: it has one). Without it, entries
        signed now would be misses for every later process, and the entries it cannot verify
        are not its to replace (a typo in ENGINE_PLUGIN_CACHE_KEY threw a whole baked cache
        away: review helper 137): it writes and replaces nothing. Asked at the first write or
        replacement: gc, clear and stats need no key (and make none)."""
        if self._keyless is False:
            self._keyless = local_key_problem()
            if self._keyless is not None:
                log.warning("variant cache %s is served without writes: no local cache key (%s)", self.folder, self._keyless)
        return self._keyless  # type: ignore[return-value]

    # -- paths -----------------------------------------------------------------------------
    def path(self, key: str) -> str:
        """The entry file of ``key`` (which must be a 64-hex-digit variant key)."""
        if not isinstance(key, str) or not _KEY_RE.match(key):
            raise ValueError(f"a variant cache key is 64 lowercase hex digits (variant_key()), not {key!r}")
        return os.path.join(self.folder, key + ENTRY_SUFFIX)

    def _count(self, name: str, by: int = 1) -> None:
        with self._lock:
            self._counts[name] += by

    def _stamp_ns(self) -> int:
        # Strictly increasing within the process: two entries touched in one clock tick still
        # order by recency (file mtimes come from a coarse clock).
        with self._lock:
            self._last_stamp = max(time.time_ns(), self._last_stamp + 1)
            return self._last_stamp

    # -- the LoweredStore protocol ---------------------------------------------------------
    def get(self, key: str) -> Lowered | None:
        """The lowered variant under ``key``, or None (a miss; a bad entry is removed and
        counted, one that cannot be read now is kept)."""
        found = self._read(key)
        if found is None:
            return None
        self._count("hits")
        return found.lowered

    def get_lowered_from(self, key: str, derived_from: tuple, what: str = "", validated: bool = False) -> tuple[Lowered | None, bool]:
        """:meth:`get` of an entry that must say it was lowered from ``derived_from`` (schema
        text, WGSL text, spec, imported module texts; see ``Lowered.lowered_from``); answers
        (the entry or None, whether one was refused). A refused entry (filed under another
        variant's key, lowered before a module changed, or forged with its checksum
        recomputed) is a logged miss (``what``: the asset or program, for the log): the caller
        lowers again, which overwrites it. ``validated``: only an entry a bake compiled on a
        device counts (a bake's check; any other is a plain miss)."""
        entry = self._read(key)
        if entry is None:
            return None, False
        if validated and not entry.validated:
            self._count("misses")
            return None, False
        found = entry.lowered
        if not found.lowered_from(*derived_from):
            self._count("misses")
            log.warning("%sthe cache entry %s... was not lowered from these texts and spec; refused, lowering again", f"{what}: " if what else "", key[:16])
            return None, True
        self._count("hits")
        return found, False

    def _read(self, key: str) -> Entry | None:
        """The decoded entry under ``key`` (its use stamped), or None, a miss or a bad entry
        counted; a hit is the caller's to count."""
        path = self.path(key)
        try:
            data = read_entry_file(path)
        except FileNotFoundError:
            self._count("misses")
            return None
        except OSError as exc:  # the folder's permissions changed under us: a miss, said once
            self._count("misses")
            if not self._unreadable_warned:
                self._unreadable_warned = True
                log.warning("variant cache %s cannot be read (%s): entries are misses", self.folder, exc.strerror or exc)
            return None
        except UnreadableEntry as exc:
            # An I/O error now (too many open files, a permission, EIO) says nothing of what
            # the file holds: a miss that leaves the entry to be read again later, never
            # counted corrupt or removed (a good entry was deleted so: review helper 224).
            self._unreadable(path, exc.why)
            return None
        except BadEntry as exc:
            self._bad(key, path, exc.reason)
            return None
        try:
            entry = open_entry(key, data)
        except BadEntry as exc:
            self._bad(key, path, exc.reason)
            return None
        try:
            stamp = self._stamp_ns()
            os.utime(path, ns=(stamp, stamp))  # LRU: a hit is a use
        except OSError:
            pass  # evicted or replaced meanwhile: the data read is still good
        return entry

    def put(self, key: str, lowered: Lowered, validated: bool = False) -> bool:
        """Store ``lowered`` under ``key`` atomically, signed under the local cache key;
        answers whether it was written. ``validated``: a bake compiled it on a device.

        A write that fails (disk full, read-only folder) is logged and counted, not raised:
        the cache only ever saves work.
        """
        path = self.path(key)
        if self.read_only or self.keyless is not None:
            return False
        data = encode_entry(key, lowered, validated=validated)
        try:  # what the replaced file took on disk, as gc counts it (a sparse one: ~0, helper 110)
            old_size = _disk_bytes(os.lstat(path))
        except OSError:
            old_size = 0
        if not self._write_atomic(path, data):
            return False
        self._count("writes")
        with self._lock:
            if self._approx_bytes is not None:
                self._approx_bytes += len(data) - old_size
            over = self.max_bytes is not None and (self._approx_bytes is None or self._approx_bytes > self.max_bytes)
        # A collection running on another thread brings the folder under the cap: not twice.
        if over and self._gc_lock.acquire(blocking=False):
            try:
                self._collect(None, LOW_WATER)
            except CacheError as exc:  # the folder cannot be listed now: the cap waits for the next write
                log.warning("variant cache: %s", exc.message)
            finally:
                self._gc_lock.release()
        return True

    def write_error(self, key: str) -> str | None:
        """Why the last failed write of ``key``'s entry failed (the OS's words), once."""
        with self._lock:
            return self._write_errors.pop(self.path(key), None)

    def unreadable_why(self, key: str) -> str | None:
        """Why the entry file under ``key`` cannot be read now (the OS's words), or None: no
        file there, or one that reads (whatever it holds). Counts nothing."""
        try:
            read_entry_file(self.path(key))
        except FileNotFoundError:
            return None
        except UnreadableEntry as exc:
            return exc.why
        except BadEntry:
            return None
        except OSError as exc:  # the folder cannot be searched now
            return exc.strerror or str(exc)
        return None

    def remove(self, key: str) -> bool:
        """Remove the entry under ``key``; answers whether there was one."""
        path = self.path(key)
        return os.path.lexists(path) and self._discard(path)

    def contains(self, key: str) -> bool:
        """Whether an entry file exists under ``key`` (not whether it is valid; counts nothing)."""
        try:
            return stat.S_ISREG(os.lstat(self.path(key)).st_mode)
        except OSError:
            return False

    # -- internals -------------------------------------------------------------------------
    def _write_atomic(self, path: str, data: bytes) -> bool:
        try:
            try:
                write_atomic(path, data, temp_prefix=_TEMP_PREFIX, stamp_ns=self._stamp_ns())
            except IsADirectoryError:
                shutil.rmtree(path, ignore_errors=True)  # something put a folder where an entry goes
                write_atomic(path, data, temp_prefix=_TEMP_PREFIX, stamp_ns=self._stamp_ns())
            # The folder is not fsynced: losing a fresh entry in a power cut is only a miss.
            return True
        except OSError as exc:
            self._count("write_errors")
            with self._lock:
                self._write_errors[path] = exc.strerror or str(exc)
            # The folder itself refusing writes makes the cache read-only; one entry that
            # cannot be replaced (immutable, another user's in a sticky folder) fails alone.
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM) and (exc.errno == errno.EROFS or not os.access(self.folder, os.W_OK)):
                self.read_only = True
                log.warning("variant cache %s is read-only (%s): entries are served but no longer written", self.folder, exc.strerror or exc)
            elif self.warn_writes and exc.errno not in self._warned_errnos:
                # Once a kind (a full disk fails every write after it): a bake reports each
                # failed variant itself, and a game's log got a line a write (review helper 128).
                self._warned_errnos.add(exc.errno)
                log.warning("variant cache: cannot write %s: %s (further writes failing so are counted, not logged)", path, exc.strerror or exc)
            return False

    def _unreadable(self, path: str, reason: str) -> None:
        with self._lock:
            self._counts["misses"] += 1
            first = reason not in self._unreadable_reasons
            self._unreadable_reasons.add(reason)
        if first:  # once a reason: a descriptor shortage fails every read while it lasts
            log.warning("variant cache: entry %s cannot be read now (%s); treated as a miss and kept", os.path.basename(path), reason)

    def _bad(self, key: str, path: str, reason: str) -> None:
        with self._lock:
            self._counts["misses"] += 1
            self._counts["corrupt"] += 1
            self._unusable.append(key)
            self._unusable_total += 1
        if self.read_only or self.keyless is not None:  # not this process's to remove (see __init__)
            log.warning("variant cache: entry %s is unusable (%s); treated as a miss", os.path.basename(path), reason)
            return
        # Said once it is gone: one that cannot be removed was reported replaced (helper 176).
        if self._discard(path):
            log.warning("variant cache: entry %s is unusable (%s); treated as a miss and removed", os.path.basename(path), reason)
        else:
            log.warning("variant cache: entry %s is unusable (%s); treated as a miss, and it stays (see above)", os.path.basename(path), reason)

    def unusable_mark(self) -> int:
        """A mark for :meth:`unusable_since`: how many unusable entries were found so far."""
        with self._lock:
            return self._unusable_total

    def unusable_since(self, mark: int) -> frozenset[str]:
        """Keys of the entries found unusable since ``mark`` (of :meth:`unusable_mark`; the
        latest tens of thousands), each time one was found: a key found again counts again."""
        with self._lock:
            found = self._unusable_total - mark
            return frozenset(list(self._unusable)[-found:]) if found > 0 else frozenset()

    def _discard(self, path: str) -> bool:
        """Remove an entry (file or stray folder); answers whether nothing is left there
        (removed now, or by another process first)."""
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            return True  # another process evicted it first
        except OSError as exc:
            log.warning("variant cache: cannot remove %s: %s", path, exc.strerror or exc)
            return False
        return True

    # -- maintenance -----------------------------------------------------------------------
    def entries(self) -> Iterator[CacheEntryInfo]:
        """The entry files in the folder (unvalidated), in no particular order."""
        try:
            it = os.scandir(self.folder)
        except OSError as exc:
            raise CacheError(f"cannot list the variant cache: {exc.strerror or exc}", Span(self.folder)) from None
        with it:
            for de in it:
                m = _ENTRY_RE.match(de.name)
                if not m:
                    continue
                try:
                    st = de.stat(follow_symlinks=False)
                except OSError:
                    continue
                yield CacheEntryInfo(m.group(1), de.path, st.st_size, st.st_mtime_ns, stat.S_ISREG(st.st_mode), _disk_bytes(st))

    def _temp_files(self) -> list[tuple[str, float]]:
        out = []
        try:
            with os.scandir(self.folder) as it:
                for de in it:
                    if _TEMP_RE.match(de.name):
                        try:
                            out.append((de.path, de.stat(follow_symlinks=False).st_mtime))
                        except OSError:
                            pass
        except OSError:
            pass
        return out

    def _remove_stale_temps(self) -> None:
        """Remove temporary files older than a write takes: a fresh one is a writer's (this
        process's or another's), which renames it into place next; removing it failed that
        write (review helper 117: `cache clear` during a bake failed variants)."""
        now = time.time()
        for tmp, mtime in self._temp_files():
            if now - mtime > _STALE_TEMP_S:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

    def gc(self, max_bytes: int | None = None, *, low_water: float = LOW_WATER) -> int:
        """Evict least recently used entries until the folder is at most ``low_water`` of the
        cap (``max_bytes`` or the store's own); remove stale temporary files. Answers the
        number of entries evicted."""
        # One at a time: a bake's writer threads each crossing the cap ran gc together, and
        # each counted the files the others removed (76 evictions of 52 entries written,
        # review helper 117).
        with self._gc_lock:
            return self._collect(max_bytes, low_water)

    def _collect(self, max_bytes: int | None, low_water: float) -> int:
        cap = max_bytes if max_bytes is not None else self.max_bytes
        self._remove_stale_temps()
        infos = list(self.entries())
        # A file named like an entry that no read would take (a link, a FIFO, a folder, an empty
        # or oversized file: a sparse giant counts its apparent size) is a miss whenever it is
        # asked for: removed first, so it never pushes good entries out (review helper 108: one
        # planted 1 GiB sparse file evicted a whole baked cache).
        if cap is not None:
            for info in [i for i in infos if not i.readable]:
                log.warning(
                    "variant cache: %s is no usable entry (%s); removed",
                    os.path.basename(info.path),
                    "not a regular file" if not info.regular else f"{info.size} bytes",
                )
                self._discard(info.path)
            infos = [i for i in infos if i.readable]
        total = sum(i.disk for i in infos)
        evicted = 0
        if cap is not None and total > cap:
            target = int(cap * low_water)
            # A use stamps "now": an entry stamped more than a day ahead was not (a planted file)
            # and goes first, or it would outlive every entry in use (helper 112); a stamp a
            # little ahead is another machine's clock on a shared folder, kept in order (113).
            future = time.time_ns() + 86400 * 10**9
            for info in sorted(infos, key=lambda i: (i.mtime_ns if i.mtime_ns <= future else -1, i.key)):
                if total <= target:
                    break
                if self._discard(info.path):
                    total -= info.disk
                    evicted += 1
            if evicted:
                log.info("variant cache: evicted %d least recently used entries (cap %d bytes)", evicted, cap)
        with self._lock:
            self._counts["evictions"] += evicted
            self._approx_bytes = total
        return evicted

    def clear(self) -> int:
        """Remove every entry and every stale temporary file (a fresh one is a live writer's);
        answers the number of entries removed."""
        removed = 0
        for info in list(self.entries()):
            if self._discard(info.path):  # an empty file counts too (helper 113)
                removed += 1
        self._remove_stale_temps()
        with self._lock:
            self._approx_bytes = 0
        return removed

    def verify(self) -> dict[str, str]:
        """Decode every entry without counting; answers {key: reason} for the unusable ones
        (an entry that cannot be read now is not one: see :meth:`check`)."""
        return self.check().unusable

    def check(self) -> CacheCheck:
        """Decode every entry without counting; answers the unusable ones and, apart, those
        that could not be read now. An I/O error says nothing of what the file holds: gc
        removed good baked entries as unusable on EMFILE or EACCES (review helper 228)."""
        bad, unreadable = {}, {}
        for info in list(self.entries()):
            try:
                decode_entry(info.key, read_entry_file(info.path))
            except FileNotFoundError:
                pass  # evicted by another process meanwhile
            except UnreadableEntry as exc:
                unreadable[info.key] = exc.why
            except BadEntry as exc:
                bad[info.key] = exc.reason
            except OSError as exc:  # the folder cannot be searched now (its permissions changed)
                unreadable[info.key] = exc.strerror or str(exc)
        return CacheCheck(bad, unreadable)

    def stats(self, scan: bool = False) -> CacheStats:
        """The counters; with ``scan=True`` also the entries, bytes and temporary files on disk."""
        with self._lock:
            counts = dict(self._counts)
        if not scan:
            return CacheStats(**counts)
        infos = list(self.entries())
        # Entries are regular files: a FIFO, link or folder under an entry's name is junk gc
        # removes (it was counted as an entry: review helper 128); its bytes are the folder's.
        return CacheStats(**counts, entries=sum(i.regular for i in infos), bytes=sum(i.disk for i in infos), temp_files=len(self._temp_files()))

    def __repr__(self) -> str:
        c = self._counts
        return f"VariantCache({self.folder!r}, hits={c['hits']}, misses={c['misses']}, corrupt={c['corrupt']}, evictions={c['evictions']})"
