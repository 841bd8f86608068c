"""The usage log: which variants a running game asked for, per asset (``usage.msgpack``).

``engine-plugin bake --variants-from cache/usage.msgpack`` bakes exactly those instead of the
cross product. The file is a msgpack map::

    magic   "engine_plugin.usage"
    format  1
    assets  {asset path relative to the asset root: [[values, columns], ...]}

where ``values`` is ``[[name, value], ...]`` and ``columns`` ``[[table, [column, ...]], ...]``
(a :class:`VariantSpec` as lists). Flushing merges with what is on disk (under an advisory
lock where the platform has one) and writes atomically, so two games sharing a cache folder
add to each other's log rather than overwrite it.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from contextlib import contextmanager
from typing import Iterator

import msgpack

from ..files import write_atomic
from ..lowering import VariantSpec
from .entry import BadEntry, UnreadableEntry
from .store import MAX_ENTRY_BYTES, read_entry_file

__all__ = ["UsageLog", "UsageLogError", "read_usage", "USAGE_FILE"]

log = logging.getLogger("engine_plugin.cache")

USAGE_FILE = "usage.msgpack"
_MAGIC = "engine_plugin.usage"
_FORMAT = 1


def _spec_to_row(spec: VariantSpec) -> list:
    return [[list(v) for v in spec.values], [[k, list(cols)] for k, cols in spec.columns]]


# A usage log lists variants a game asked for: a planted one of 22 million empty rows (63 MiB)
# took 70 s and 4.6 GB to read, in a game's close() too (review helper 128), and rows of nested
# empty lists still took a GB for 16 MiB (review helper 132). The log is read structurally:
# every container's count is checked from its header before anything in it is decoded, and only
# text is decoded whole (one string at most ``_MAX_TEXT`` bytes). A flush never writes what
# these limits refuse (review helper 133: a long source value made the log unreadable, and the
# next flush replaced it).
MAX_USAGE_VARIANTS = 100_000  # rows, all assets together (a bake of as many takes hours)
_MAX_ROW_ITEMS = 256  # names in a row, its tables, a table's columns
_MAX_STRINGS = 2_000_000  # the texts of a whole log (a row of a few names holds ~8)
_MAX_TEXT = 1 << 20  # bytes of one name or value (a source specialisation's text); the file's size bounds them all
LOCK_WAIT_S = 2.0  # how long a flush waits for another process's hold of the log's lock


def _row_fits(spec: VariantSpec) -> bool:
    """Whether the reader takes ``spec``'s row: its lists and texts within the limits."""
    texts = [t for pair in spec.values for t in pair] + [t for table, cols in spec.columns for t in (table, *cols)]
    lists = [len(spec.values), len(spec.columns), *(len(cols) for _, cols in spec.columns)]
    return max(lists) <= _MAX_ROW_ITEMS and all(len(t.encode("utf-8", "surrogatepass")) <= _MAX_TEXT for t in texts)


def _row_strings(spec: VariantSpec) -> int:
    """The texts ``spec``'s row holds (what the reader counts against ``_MAX_STRINGS``)."""
    return 2 * len(spec.values) + sum(1 + len(cols) for _, cols in spec.columns)


class _Oversized(ValueError):
    """A usage log past MAX_USAGE_VARIANTS variants or _MAX_STRINGS names: read as none, never replaced."""


class _Reader:
    """A usage log's msgpack, container by container: an array or map is only ever read through
    its header (``max_array_len=0``: decoding one whole raises), text one string at a time."""

    def __init__(self, data: bytes):
        self.up = msgpack.Unpacker(
            raw=False, max_buffer_size=max(1, len(data)), max_str_len=_MAX_TEXT, max_bin_len=0, max_ext_len=0, max_array_len=0, max_map_len=0
        )
        self.up.feed(data)
        self.strings = 0

    def array(self, most: int, what: str) -> int:
        n = self.up.read_array_header()
        if n > most:
            raise ValueError(f"{what} of {n} items (at most {most})")
        return n

    def pair(self) -> None:
        if self.up.read_array_header() != 2:
            raise ValueError("a row, name or column entry that is not a pair")

    def text(self) -> str:
        value = self.up.unpack()
        if not isinstance(value, str):
            raise ValueError(f"{type(value).__name__} where text belongs")
        self.strings += 1
        if self.strings > _MAX_STRINGS:
            raise _Oversized(f"more than {_MAX_STRINGS} names")
        return value

    def row(self) -> VariantSpec:
        self.pair()
        values = []
        for _ in range(self.array(_MAX_ROW_ITEMS, "a row's names")):
            self.pair()
            values.append((self.text(), self.text()))
        columns = []
        for _ in range(self.array(_MAX_ROW_ITEMS, "a row's tables")):
            self.pair()
            table = self.text()
            columns.append((table, tuple(self.text() for _ in range(self.array(_MAX_ROW_ITEMS, "a table's columns")))))
        return VariantSpec(tuple(sorted(values)), tuple(sorted(columns)))


def read_usage(path: str, strict: bool = False) -> dict[str, list[VariantSpec]]:
    """The variants recorded in a usage log, by asset (relative path), in a stable order.

    A missing file answers {}; an unreadable, malformed or oversized one is logged and
    answers {} (the log only ever saves work), or, ``strict``, raises :class:`UsageLogError`
    saying why (a bake told to bake what the log lists says that, once).
    """
    return _load(path, strict)[0]


class UsageLogError(ValueError):
    """A usage log that cannot be read (``read_usage(strict=True)``): the message says why."""


def _load(path: str, strict: bool = False, merging: bool = False) -> tuple[dict[str, list[VariantSpec]], bool]:
    """(:func:`read_usage`'s answer, whether a flush may replace the file): an oversized log is
    kept (a game that ran long: it is not this process's to drop), anything else unusable is
    replaced by what the flushing game recorded. ``merging`` (a flush): a file that cannot be
    read now (too many open files, a permission) raises OSError: it is kept, and the records
    wait for the next flush (it was replaced by one game's records, review helper 167)."""

    def refuse(why: str, replaceable: bool) -> tuple[dict[str, list[VariantSpec]], bool]:
        if strict:
            raise UsageLogError(why)
        kept = "" if replaceable else ", and kept as it is (delete it to record afresh)"
        log.warning("usage log %s %s; ignored%s", path, why, kept)
        return {}, replaceable

    try:
        data = read_entry_file(path)  # a regular file of bounded size only: never blocks on a FIFO
    except FileNotFoundError:
        return {}, True
    except (OSError, UnreadableEntry) as exc:  # an I/O error, not what the file holds: read again later, never replaced
        why = exc.why if isinstance(exc, UnreadableEntry) else (exc.strerror or str(exc))
        if merging:
            raise OSError(f"cannot read it ({why})") from None
        return refuse(f"cannot be read ({why})", False)
    except BadEntry as exc:
        return refuse(f"is unusable ({exc.reason})", True)
    try:
        found = _decode(data)
    except _Oversized as exc:
        return refuse(f"is too large ({exc})", False)
    except Exception as exc:  # any malformed content
        return refuse(f"is malformed ({exc})", True)
    return {asset: sorted(specs, key=lambda s: (s.values, s.columns)) for asset, specs in found.items()}, True


def _decode(data: bytes) -> dict[str, set[VariantSpec]]:
    """The log's rows by asset (see :class:`_Reader`)."""
    r = _Reader(data)
    head: dict = {}
    assets: dict[str, set[VariantSpec]] | None = None
    fields = r.up.read_map_header()
    if fields > 8:
        raise ValueError("not a usage log of this format")
    for _ in range(fields):
        key = r.text()
        if key in head or (key == "assets" and assets is not None):
            raise ValueError(f"the key {key!r} twice")
        if key != "assets":
            head[key] = r.up.unpack()  # a scalar (a container raises)
            continue
        assets, total = {}, 0
        count = r.up.read_map_header()
        if count > MAX_USAGE_VARIANTS:
            raise _Oversized(f"{count} assets (at most {MAX_USAGE_VARIANTS} variants are read)")
        for _ in range(count):
            asset = r.text()
            rows = r.up.read_array_header()
            total += rows
            if total > MAX_USAGE_VARIANTS:
                raise _Oversized(f"more than {MAX_USAGE_VARIANTS} variants")
            specs = assets.setdefault(asset, set())
            for _ in range(rows):
                specs.add(r.row())
    if head.get("magic") != _MAGIC or head.get("format") != _FORMAT or assets is None:
        raise ValueError("not a usage log of this format")
    return assets


@contextmanager
def _locked(path: str) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: merge without a lock
        yield
        return
    # Not through a link (whoever can write the cache folder could point it anywhere), and
    # never waiting long: another process holding the lock (stopped in a debugger, a stuck
    # network file system) blocked this game's reload worker and close() for good (review
    # helper 167). Past LOCK_WAIT_S the flush gives up; its records wait for the next one.
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise OSError(f"another process holds {path}.lock (waited {LOCK_WAIT_S:g} s)") from None
                time.sleep(0.01)
        yield
    finally:
        os.close(fd)


# Every usage log of the process, flushed when it exits: a game that never closes its library
# (the README's shared-cache example did not) left no log for `bake --variants-from` to read
# (review helper 204).
_LOGS: weakref.WeakSet[UsageLog] = weakref.WeakSet()


def _flush_at_exit() -> None:
    for usage in list(_LOGS):
        try:
            usage.flush()
        except Exception:  # pragma: no cover - interpreter shutdown: nothing left to tell
            pass


atexit.register(_flush_at_exit)


class UsageLog:
    """Variants requested in this process, flushed (merged) into ``path`` on :meth:`flush`
    (and when the process exits)."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self._lock = threading.Lock()
        self._seen: set[tuple[str, VariantSpec]] = set()
        self._dirty: set[tuple[str, VariantSpec]] = set()
        self._full = False  # said that the log on disk holds all it may (once)
        _LOGS.add(self)

    def record(self, asset: str, spec: VariantSpec) -> None:
        """Note that ``asset`` was asked for ``spec`` (cheap; nothing is written until flush)."""
        item = (asset, spec)
        if item in self._seen:
            return
        with self._lock:
            if item not in self._seen:
                self._seen.add(item)
                self._dirty.add(item)

    @property
    def dirty(self) -> bool:
        return bool(self._dirty)

    def recorded(self) -> dict[str, list[VariantSpec]]:
        """What this process recorded (not what is on disk)."""
        out: dict[str, list[VariantSpec]] = {}
        with self._lock:
            for asset, spec in self._seen:
                out.setdefault(asset, []).append(spec)
        return {a: sorted(s, key=lambda x: (x.values, x.columns)) for a, s in out.items()}

    def flush(self) -> bool:
        """Merge the new records into the file; answers whether it wrote. Failures are logged."""
        with self._lock:
            if not self._dirty:
                return False
            pending = set(self._dirty)
            self._dirty.clear()
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            unfit = {item for item in pending if not _row_fits(item[1])}
            if unfit:
                pending -= unfit
                log.warning(
                    "usage log %s: %d variant(s) not recorded: a name or value past %d bytes, or a list past %d items (%s)",
                    self.path,
                    len(unfit),
                    _MAX_TEXT,
                    _MAX_ROW_ITEMS,
                    min(asset for asset, _ in unfit),
                )
            with _locked(self.path):
                found, replaceable = _load(self.path, merging=True)
                merged = {asset: set(specs) for asset, specs in found.items()}
                for asset, spec in pending:
                    merged.setdefault(asset, set()).add(spec)
                # A log past the reader's caps is never replaced, nor written: a game that ran
                # long would lose every record, and a reader would refuse the file (review
                # helpers 132, 133: one record past a cap emptied it).
                rows = sum(len(v) for v in merged.values())
                texts = sum(_row_strings(spec) for specs in merged.values() for spec in specs) + len(merged) + 8  # + the header's
                if not replaceable or rows > MAX_USAGE_VARIANTS or texts > _MAX_STRINGS:
                    if not self._full:
                        self._full = True
                        log.warning(
                            "usage log %s holds what it may (at most %d variants, %d names); this game's new records are not added",
                            self.path,
                            MAX_USAGE_VARIANTS,
                            _MAX_STRINGS,
                        )
                    return False
                doc = {
                    "magic": _MAGIC,
                    "format": _FORMAT,
                    "assets": {a: [_spec_to_row(s) for s in sorted(specs, key=lambda x: (x.values, x.columns))] for a, specs in sorted(merged.items())},
                }
                packed = msgpack.packb(doc, use_bin_type=True)
                if len(packed) > MAX_ENTRY_BYTES:
                    # More than a reader takes: written, it read as empty and the next flush
                    # replaced it with one game's records (review helper 167). Kept as it is.
                    if not self._full:
                        self._full = True
                        log.warning("usage log %s would be %d bytes, more than a reader takes (%d); this game's new records are not added", self.path, len(packed), MAX_ENTRY_BYTES)
                    return False
                write_atomic(self.path, packed)
            return True
        except OSError as exc:
            with self._lock:
                self._dirty |= pending
            log.warning("usage log %s: cannot write (%s)", self.path, exc.strerror or exc)
            return False
