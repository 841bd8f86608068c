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


def read_usage(path: str) -> dict[str, list[VariantSpec]]:
    """The variants recorded in a usage log, by asset (relative path), in a stable order.

    A missing file answers {}; an unreadable or malformed one is logged and answers {}.
    """
    try:
        data = read_entry_file(path)  # a regular file of bounded size only: never blocks on a FIFO
    except FileNotFoundError:
        return {}
    except BadEntry as exc:
        log.warning("usage log %s is unusable (%s); ignored", path, exc.reason)
        return {}
    try:
        doc = msgpack.unpackb(data, raw=False)
        if not isinstance(doc, dict) or doc.get("magic") != _MAGIC or doc.get("format") != _FORMAT:
            raise ValueError("not a usage log of this format")
        out: dict[str, list[VariantSpec]] = {}
        for asset, rows in doc["assets"].items():
            specs = {_row_to_spec(r) for r in rows}
            out[str(asset)] = sorted(specs, key=lambda s: (s.values, s.columns))
        return out
    except Exception as exc:  # any malformed content: the log only ever saves work
        log.warning("usage log %s is malformed (%s); ignored", path, exc)
        return {}


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
                merged = read_usage(self.path)
                for asset, spec in pending:
                    specs = merged.setdefault(asset, [])
                    if spec not in specs:
                        specs.append(spec)
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
