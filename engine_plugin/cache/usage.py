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

import logging
import os
import threading
from contextlib import contextmanager
from typing import Iterator

import msgpack

from ..files import write_atomic
from ..lowering import VariantSpec
from .entry import BadEntry
from .store import read_entry_file

__all__ = ["UsageLog", "read_usage", "USAGE_FILE"]

log = logging.getLogger("engine_plugin.cache")

USAGE_FILE = "usage.msgpack"
_MAGIC = "engine_plugin.usage"
_FORMAT = 1


def _spec_to_row(spec: VariantSpec) -> list:
    return [[list(v) for v in spec.values], [[k, list(cols)] for k, cols in spec.columns]]


def _row_to_spec(row) -> VariantSpec:
    values, columns = row
    return VariantSpec(
        tuple(sorted((str(k), str(v)) for k, v in values)), tuple(sorted((str(k), tuple(str(c) for c in cols)) for k, cols in columns))
    )


# A usage log lists variants a game asked for: a planted one of 22 million empty rows (63 MiB)
# took 70 s and 4.6 GB to read, in a game's close() too (review helper 128). Past these it is
# ignored, decided from the container headers before any row is decoded.
MAX_USAGE_VARIANTS = 100_000  # rows, all assets together (a bake of as many takes hours)
MAX_USAGE_ROW_ITEMS = 4096  # names or columns in one row's lists


def read_usage(path: str) -> dict[str, list[VariantSpec]]:
    """The variants recorded in a usage log, by asset (relative path), in a stable order.

    A missing file answers {}; an unreadable, malformed or oversized one is logged and
    answers {} (the log only ever saves work).
    """
    try:
        data = read_entry_file(path)  # a regular file of bounded size only: never blocks on a FIFO
    except FileNotFoundError:
        return {}
    except BadEntry as exc:
        log.warning("usage log %s is unusable (%s); ignored", path, exc.reason)
        return {}
    try:
        found = _decode(data)
    except Exception as exc:  # any malformed content
        log.warning("usage log %s is malformed (%s); ignored", path, exc)
        return {}
    return {asset: sorted(specs, key=lambda s: (s.values, s.columns)) for asset, specs in found.items()}


def _decode(data: bytes) -> dict[str, set[VariantSpec]]:
    """The log's rows by asset, streamed: every count is checked from its header first."""
    up = msgpack.Unpacker(
        raw=False, max_buffer_size=max(1, len(data)), max_str_len=1 << 16, max_bin_len=0, max_ext_len=0, max_array_len=MAX_USAGE_ROW_ITEMS, max_map_len=8
    )
    up.feed(data)
    head: dict = {}
    assets: dict[str, set[VariantSpec]] | None = None
    fields = up.read_map_header()
    if fields > 8:
        raise ValueError("not a usage log of this format")
    for _ in range(fields):
        key = up.unpack()
        if key != "assets":
            head[key] = up.unpack()
            continue
        assets, total = {}, 0
        count = up.read_map_header()
        if count > MAX_USAGE_VARIANTS:
            raise ValueError(f"{count} assets (at most {MAX_USAGE_VARIANTS} variants are read)")
        for _ in range(count):
            asset = up.unpack()
            rows = up.read_array_header()
            total += rows
            if not isinstance(asset, str) or total > MAX_USAGE_VARIANTS:
                raise ValueError(f"more than {MAX_USAGE_VARIANTS} variants" if isinstance(asset, str) else "an asset path that is not text")
            specs = assets.setdefault(asset, set())
            for _ in range(rows):
                specs.add(_row_to_spec(up.unpack()))
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
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class UsageLog:
    """Variants requested in this process, flushed (merged) into ``path`` on :meth:`flush`."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self._lock = threading.Lock()
        self._seen: set[tuple[str, VariantSpec]] = set()
        self._dirty: set[tuple[str, VariantSpec]] = set()

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
            with _locked(self.path):
                merged = {asset: set(specs) for asset, specs in read_usage(self.path).items()}
                for asset, spec in pending:
                    merged.setdefault(asset, set()).add(spec)
                doc = {
                    "magic": _MAGIC,
                    "format": _FORMAT,
                    "assets": {a: [_spec_to_row(s) for s in sorted(specs, key=lambda x: (x.values, x.columns))] for a, specs in sorted(merged.items())},
                }
                write_atomic(self.path, msgpack.packb(doc, use_bin_type=True))
            return True
        except OSError as exc:
            with self._lock:
                self._dirty |= pending
            log.warning("usage log %s: cannot write (%s)", self.path, exc.strerror or exc)
            return False
