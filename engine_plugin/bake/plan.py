"""What to bake: the assets under the given paths, their variants, and their cache keys.

Runs on the client, in pure Python (no device): reads each asset once, parses its schema,
enumerates its variants (the schema's ``bake:`` list, else the cross product of options, or
the variants a usage log recorded), and computes each variant's content key. Whatever the
cache already holds is then skipped before any worker starts.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from ..assets.folder import AssetSource, find_assets, read_asset_folder, under_root
from ..errors import AssetError, PluginError, Span, SpecializationError, bug
from ..lowering import Schema, VariantSpec, enumerate_variants, parse, resolve_recorded
from ..lowering.fingerprint import variant_key
from .worker import BakeItem, ChunkJob, Failure, failure_from

__all__ = ["AssetPlan", "plan_assets", "match_usage", "chunk_jobs", "chunk_size"]

# Chunks amortise a job's pickling and the per-chunk parse; more chunks than workers keep
# the workers busy to the end (a slow asset does not leave the others idle).
CHUNKS_PER_WORKER = 4
MAX_CHUNK = 16


@dataclass
class AssetPlan:
    """One asset's part of a bake.

    ``items`` are the variants to bake (keys computed, not yet checked against the cache);
    ``error`` is set when the asset cannot be read or parsed at all.
    """

    folder: str
    source: AssetSource | None = None
    schema: Schema | None = None
    items: list[BakeItem] = field(default_factory=list)
    error: Failure | None = None
    root: str | None = None  # the asset root its modules were found under
    modules: tuple[str, ...] = ()  # module folders searched after the modules/ folders up to the root

    def changed_since_read(self) -> bool:
        """Whether the asset's files (modules included) now hold other content than was read
        for the plan (an edit while it was baked)."""
        if self.source is None:
            return False
        try:
            now = read_asset_folder(self.folder, root=self.root, modules=self.modules)
        except PluginError:
            return True  # removed, or broken, meanwhile: not what was baked either
        return now.content_hash != self.source.content_hash

    @property
    def name(self) -> str:
        return self.folder


def _shown(folder: str) -> str:
    """``folder`` as the user named it, near enough: relative to the current folder when under it."""
    rel = os.path.relpath(folder)
    return folder if rel.startswith("..") else rel


def _norm(path: str) -> str:
    return os.path.normpath(path).replace(os.sep, "/")


def match_usage(
    folders: Sequence[str], roots: Sequence[str], usage: Mapping[str, list[VariantSpec]], shared: dict[str, list[str]] | None = None
) -> tuple[dict[str, list[VariantSpec]], list[str]]:
    """Assign the usage log's assets (named relative to the game's asset root) to folders.

    A usage name matches a folder when it is the folder's path relative to one of ``roots``,
    or a whole-component suffix of the folder's path (the game's root may be a parent or a
    child of the one given to ``bake``). A name several folders match goes to each of them
    (which one the game meant cannot be told, and baking more loses nothing; it went to one,
    review helpers 137 and 139), listed in ``shared`` (name -> folders) when given.

    Returns:
        ({folder: specs}, [usage names that match no folder]).
    """
    by_folder: dict[str, dict[VariantSpec, None]] = {}  # ordered sets: a log holds up to 100,000 rows (review helper 155)
    unmatched = []
    normed = {f: _norm(f) for f in folders}
    rels: dict[str, list[str]] = {}
    for f in folders:
        for root in roots:
            rel = _norm(os.path.relpath(f, root))
            if rel != "." and not rel.startswith("..") and f not in rels.setdefault(rel, []):
                rels[rel].append(f)
    for name, specs in usage.items():
        want = _norm(name).strip("/")
        hits = list(rels.get(want, ()))
        hits += [f for f, n in normed.items() if (n == want or n.endswith("/" + want)) and f not in hits]
        if not hits:
            unmatched.append(name)
            continue
        if len(hits) > 1 and shared is not None:
            shared[name] = hits
        for folder in hits:
            by_folder.setdefault(folder, {}).update(dict.fromkeys(specs))
    return {folder: list(specs) for folder, specs in by_folder.items()}, sorted(unmatched)


_NOTE_ROWS = 3  # refused usage rows noted one by one for an asset; the rest in one note


_NAMED_UNMATCHED = 10  # usage-log names matching no asset to bake, said one by one


def plan_assets(
    paths: Iterable[str], usage: Mapping[str, list[VariantSpec]] | None = None, root: str | None = None, modules: Sequence[str] = ()
) -> tuple[list[AssetPlan], list[str]]:
    """Read and enumerate every asset under ``paths``.

    Args:
        paths: asset folders, or folders searched for ``*.computeShader`` assets.
        usage: from :func:`engine_plugin.cache.read_usage`; when given, only the variants it
            records are baked, and assets it does not name are left out.
        root: the asset root of every path (see :func:`engine_plugin.bake.driver.bake`).
        modules: module folders searched after the ``modules/`` folders up to the root.
    Returns:
        (plans in path order, notes for the user: usage entries that matched nothing).
    Raises:
        AssetError: a path that does not exist or holds no asset.
    """
    paths = list(paths)
    folders: list[str] = []
    roots: dict[str, str | None] = {}  # asset folder -> its root (None: read on its own): its files stay inside
    for p in paths:
        found = find_assets(p, broken=True)  # a link to nothing fails by name, not skipped
        if not found:
            raise AssetError("no .computeShader assets here (a path to bake is an asset folder or a folder of them)", Span(p))
        for f in found:
            if f not in folders:
                folders.append(f)
                roots[f] = root if root is not None and under_root(f, root) else (None if f == p else p)
    notes: list[str] = []
    wanted: dict[str, list[VariantSpec]] | None = None
    if usage is not None:
        shared: dict[str, list[str]] = {}
        wanted, unmatched = match_usage(folders, paths, usage, shared)
        # A few by name, the rest counted (review helper 200: 100,000 unmatched names printed
        # 100,000 lines), as refused rows of an asset are.
        for name in list(unmatched)[:_NAMED_UNMATCHED]:
            notes.append(f"the usage log names {name}, which is not among the assets to bake; its variants are left out")
        if len(unmatched) > _NAMED_UNMATCHED:
            notes.append(
                f"the usage log names {len(unmatched) - _NAMED_UNMATCHED} more assets that are not among the assets to bake; their variants are left out"
            )
        for name, hits in shared.items():
            notes.append(
                f"the usage log names {name}, which {len(hits)} assets to bake end with ({', '.join(_shown(f) for f in hits)}); its variants are baked for each"
            )
        folders = [f for f in folders if f in wanted]
    plans = []
    for folder in folders:
        plan = AssetPlan(folder, root=roots.get(folder), modules=tuple(modules))
        plans.append(plan)
        try:
            src = read_asset_folder(folder, root=roots.get(folder), modules=plan.modules)
            schema = parse(src.yaml_text, src.yaml_path)
        except PluginError as exc:
            plan.error = failure_from(exc)
            continue
        plan.source, plan.schema = src, schema
        try:
            specs = enumerate_variants(schema) if wanted is None else []
        except SpecializationError as exc:  # a bake: entry the schema does not accept
            plan.error = failure_from(exc)
            continue
        if wanted is not None:
            refused: list[str] = []
            for recorded in wanted[folder]:
                try:
                    spec = resolve_recorded(schema, recorded)
                except PluginError as exc:
                    # A variant the game asked for that the asset no longer offers (an option
                    # removed since), or a forged row: the log's, not the asset's, and it would
                    # fail every bake until the log is deleted (review helper 128). Said, left out.
                    asked = ", ".join(f"{k}={v!r}" for k, v in recorded.values) or "its defaults"
                    refused.append(f"the usage log records {asked} of {_shown(folder)}, which it no longer accepts ({exc.headline()}); left out")
                    continue
                specs.append(spec)  # repeats are dropped by key below
            if len(refused) > _NOTE_ROWS:
                # One note for the rest: a log of 16,000 stale rows printed 16,000 lines (helper 155).
                refused[_NOTE_ROWS:] = [f"the usage log records {len(refused) - _NOTE_ROWS} more variant(s) of {_shown(folder)} it no longer accepts; left out"]
            notes += refused
        seen = set()
        for spec in specs:
            key = variant_key(schema.text, src.wgsl_text, spec, src.modules)  # a module edit is a new key
            if key not in seen:  # a bake: list may name one variant twice
                seen.add(key)
                plan.items.append(BakeItem(key, spec))
    return plans, notes


def chunk_size(total: int, workers: int) -> int:
    """Variants per chunk: about ``CHUNKS_PER_WORKER`` chunks a worker, 1 to ``MAX_CHUNK``."""
    if total <= 0:
        return 1
    return max(1, min(MAX_CHUNK, math.ceil(total / (max(1, workers) * CHUNKS_PER_WORKER))))


def chunk_jobs(todo: Sequence[tuple[AssetPlan, list[BakeItem]]], workers: int, validate: bool = True, compile_timeout: float | None = None) -> list[ChunkJob]:
    """Split the variants to bake into per-asset chunks sized for ``workers`` (each variant's
    compile given ``compile_timeout`` seconds, see :mod:`engine_plugin.bake.worker`)."""
    size = chunk_size(sum(len(items) for _, items in todo), workers)
    jobs: list[ChunkJob] = []
    for plan, items in todo:
        src = plan.source
        if src is None:
            raise bug(f"chunk_jobs got {plan.folder}, which was never read")
        for start in range(0, len(items), size):
            jobs.append(
                ChunkJob(
                    plan.folder,
                    src.yaml_path,
                    src.yaml_text,
                    src.wgsl_path,
                    src.wgsl_text,
                    tuple(items[start : start + size]),
                    validate,
                    len(jobs),
                    tuple((m.name, m.path, m.text) for m in src.modules),
                    compile_timeout,
                )
            )
    return jobs
