"""Start-up warm-up: the variants a game will ask for, from memory, the local cache, then the
remote tier in parallel round trips, before the frame loop starts (which never asks the
network itself)."""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from ..cache import USAGE_FILE, read_usage
from ..errors import PluginError
from ..lowering import Schema, VariantSpec, resolve_recorded

if TYPE_CHECKING:
    from .library import AssetLibrary, ComputeShaderRef

__all__ = ["PrefetchReport", "prefetch"]

log = logging.getLogger("engine_plugin.assets")


@dataclass
class PrefetchReport:
    """What :meth:`AssetLibrary.prefetch` found, per tier. ``seconds`` is the wall time spent;
    ``network_s`` the part spent waiting on the remote tier (bounded by its timeout)."""

    variants: int = 0
    memory: int = 0
    local: int = 0
    remote: int = 0
    missed: int = 0  # left to lower (includes rejected)
    rejected: int = 0
    failed: int = 0  # assets that could not load, specs the schema refuses
    seconds: float = 0.0
    network_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _usage_variants(lib: "AssetLibrary") -> dict[str, list[VariantSpec]]:
    if lib.usage is not None:
        return read_usage(lib.usage.path)
    if lib.cache is not None:
        return read_usage(os.path.join(lib.cache.folder, USAGE_FILE))
    return {}


# (ref, key, schema, wgsl, spec, wgsl_path): a variant neither memory nor the local cache had
_Pending = tuple["ComputeShaderRef", str, Schema, str, VariantSpec, str, dict]


def prefetch(lib: "AssetLibrary", variants: Mapping[str, Any] | None = None, *, threads: int = 8) -> PrefetchReport:
    """The body of :meth:`AssetLibrary.prefetch` (see there)."""
    t0 = time.perf_counter()
    report = PrefetchReport()
    wanted = _usage_variants(lib) if variants is None else variants
    pending: list[_Pending] = []
    seen: set[str] = set()
    for rel, specs in wanted.items():
        try:
            ref = lib.load(rel, strict=False)
        except PluginError as exc:
            log.warning("prefetch: %s", exc)
            report.failed += len(specs)
            continue
        prog = ref._program
        if prog is None:
            report.failed += len(specs)
            continue
        for raw in specs:
            report.variants += 1
            try:
                spec = resolve_recorded(prog.schema, raw)  # the schema may have changed since the row
            except PluginError as exc:
                log.warning("prefetch: %s: %s", rel, exc)
                report.failed += 1
                continue
            key = prog.variant_key(spec)
            if key in seen or ref._store.in_memory(key):
                report.memory += 1
            elif ref._store.remembered(key, (prog.schema.text, prog.wgsl, spec, tuple(m.text for m in prog.imports()))) is not None:
                report.local += 1
            else:
                pending.append((ref, key, prog.schema, prog.wgsl, spec, prog.wgsl_path, prog.modules))
            seen.add(key)
    if pending and lib.remote is not None:
        _fetch_remote(lib, pending, report, threads)
    else:
        report.missed += len(pending)
    report.seconds = time.perf_counter() - t0
    return report


def _fetch_remote(lib: "AssetLibrary", pending: list[_Pending], report: PrefetchReport, threads: int) -> None:
    remote = lib.remote
    assert remote is not None
    keys = [p[1] for p in pending]
    size = max(1, -(-len(keys) // max(1, threads)))
    chunks = [keys[i : i + size] for i in range(0, len(keys), size)]
    t_net = time.perf_counter()
    values: dict[str, bytes] = {}
    # Parallel round trips: a slow server costs one timeout, not one per chunk; after the
    # first failure the breaker answers the others without a socket.
    with ThreadPoolExecutor(min(threads, len(chunks)), thread_name_prefix="remote-prefetch") as pool:
        for found in pool.map(remote.get_values, chunks):
            values.update(found)
    report.network_s = time.perf_counter() - t_net
    for ref, key, schema, wgsl, spec, wgsl_path, modules in pending:  # CPU (decode, maybe a lowering): threads would not help
        value = values.get(key)
        if value is None:
            report.missed += 1
            continue
        proven = remote.check(key, value, schema=schema, wgsl=wgsl, spec=spec, wgsl_path=wgsl_path, modules=modules)
        if proven is None:
            report.rejected += 1
            report.missed += 1
            continue
        ref._store.adopt_remote(key, proven, defer=lib._defer_write)
        report.remote += 1
    remote.publish()
