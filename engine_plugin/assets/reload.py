"""What a reload is: events, the pure-Python preparation that runs off the engine thread, and
the body-only / layout classification.

A reload is prepared on the reload worker (read both files, parse, lower the variants in use
through the variant cache: no wgpu) and applied by :meth:`AssetLibrary.poll` on the engine
thread (compile, swap, tell the listeners). Preparation itself never touches the GPU; the
library's worker then compiles the prepared variants (``AssetLibrary``'s ``_precompile``) so
that the engine thread's compile in ``poll`` is a cache hit.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import PluginError, SpecializationError
from ..lowering import Lowered, Schema, VariantSpec, iter_variants, parse, resolve_spec
from .folder import AssetSource, is_editor_noise, read_asset_folder

if TYPE_CHECKING:
    from ..runtime.program import Program

__all__ = ["ReloadEvent", "ReloadFailure", "Prepared", "plan_signature", "carry_spec", "prepare", "same_content", "Unsettled", "Superseded", "folder_stamp"]

BODY = "body"
LAYOUT = "layout"


@dataclass(frozen=True)
class ReloadEvent:
    """A reload that was applied: the asset's new program is live as ``generation``.

    ``kind`` is ``"body"`` when every variant keeps its binding plan, params layout and host
    slots (the pipeline can be swapped under the same bind groups and buffers), else
    ``"layout"`` (listeners must rebind and reallocate). ``invalidated`` lists every variant of
    the previous program (its pipelines are stale), ``layout_changed`` those of them whose plan
    changed, ``recompiled`` the variants of the new program compiled eagerly (the ones in use);
    the rest compile lazily on first request.
    """

    asset: str
    generation: int
    kind: str
    files: tuple[str, ...]
    invalidated: tuple[VariantSpec, ...]
    layout_changed: tuple[VariantSpec, ...]
    recompiled: tuple[VariantSpec, ...]
    program: "Program" = field(repr=False)
    previous: "Program | None" = field(repr=False)
    latency: float = 0.0  # seconds from the first file event of this reload to the swap

    @property
    def ok(self) -> bool:
        return True

    @property
    def body_only(self) -> bool:
        return self.kind == BODY

    def describe(self) -> str:
        what = "body only" if self.body_only else "layout changed"
        changed = ", ".join(self.files) or "no text"
        return (
            f"reloaded {self.asset} -> generation {self.generation} ({what}; {changed}; "
            f"{len(self.recompiled)} variant(s) recompiled, {len(self.invalidated)} invalidated; {self.latency * 1e3:.0f} ms)"
        )


@dataclass(frozen=True)
class ReloadFailure:
    """A reload that was refused: the last good program (``generation``) stays live."""

    asset: str
    generation: int
    error: PluginError
    latency: float = 0.0

    @property
    def ok(self) -> bool:
        return False

    @property
    def diagnostics(self) -> str:
        return str(self.error)

    def describe(self) -> str:
        return f"reload of {self.asset} failed; generation {self.generation} stays live:\n{self.error}"


class Unsettled(Exception):
    """The asset's files changed while they were being read: read them again later."""


class Superseded(Exception):
    """Newer work waits while this reload's compile is still running: the worker stops waiting
    for it (it goes on in the background) and reads the asset again later (review helper 229)."""


@dataclass
class Prepared:
    """A reload prepared off the engine thread, waiting for ``poll()`` to apply it."""

    rel: str
    seq: int
    first_event: float
    source: AssetSource | None = None
    schema: Schema | None = None
    error: PluginError | None = None
    unchanged: bool = False
    carried: dict[VariantSpec, VariantSpec] = field(default_factory=dict)  # old spec -> new spec
    lowered: dict[VariantSpec, Lowered] = field(default_factory=dict)  # new spec -> lowered
    validation: VariantSpec | None = None  # lowered only to validate (nothing in use)
    baseline: Lowered | None = None  # the validation variant under the old content, for the kind
    missing: bool = False  # the error is a missing file or folder (may be mid-save)
    # The newest read this one superseded before poll() applied it, when that one was a change
    # lowered without error: applied instead if this one fails to compile (a good save followed
    # by a broken one within a frame is not lost: review helper 148).
    earlier: "Prepared | None" = None
    read_at: float = 0.0  # time.monotonic() when the worker began reading the files


def same_content(a: AssetSource, b: AssetSource) -> bool:
    """Whether two reads of an asset hold the same content (its texts, modules included, and
    its body's file name): a read of what is live is no reload."""
    return a.content_hash == b.content_hash and os.path.basename(a.wgsl_path) == os.path.basename(b.wgsl_path)


# -- classification --------------------------------------------------------------------
def plan_signature(lowered: Lowered) -> tuple:
    """Everything the host binds and allocates by, without source lines: equal signatures
    mean old bind groups, pooled outputs and params packing fit the new pipeline."""
    bindings = tuple((b.binding, b.group, b.name, b.role, b.storage_type, b.access, b.scalar, b.lanes) for b in lowered.bindings)
    params = (lowered.params.size, lowered.params.binding, tuple((f.name, f.type, f.offset, f.size, f.origin, f.target) for f in lowered.params.fields))
    slots = tuple(replace(s, line=0) for s in lowered.host_slots)
    columns = tuple(replace(c, line=0) for c in lowered.columns)
    return (bindings, params, slots, columns, lowered.domain_count, lowered.table_columns)


def carry_spec(old_schema: Schema | None, new_schema: Schema, spec: VariantSpec, explicit: frozenset[str] = frozenset()) -> VariantSpec:
    """The variant of ``new_schema`` that stands for ``spec`` of the old one.

    ``explicit``: the names whose values the game asked for (``Program.explicit``): those are
    carried as they are. Values the old spec only had by default follow the new default (a
    value asked for that equals the old default was taken for a default, so a save that only
    changed the default retired the variant the game held and compiled one nobody asked for:
    review helper 229); values of parameters the new schema dropped are dropped.

    Raises:
        SpecializationError: a value the new schema no longer offers (the reload fails).
    """
    old_defaults = {sp.name: sp.default for sp in old_schema.specialize} if old_schema is not None else {}
    values = {}
    for name, value in spec.values:
        if new_schema.spec_param(name) is None:
            continue
        if name not in explicit and old_defaults.get(name) is not None and value == old_defaults[name]:
            continue
        values[name] = value
    try:
        return resolve_spec(new_schema, values, spec.columns_dict() or None)
    except SpecializationError as exc:
        # Said why a value the edit removed matters: a variant in use needs it (the message
        # read as if the edit had asked for it: review helper 186).
        raise SpecializationError(
            f"{exc.message}; the running program uses the variant {spec.label()}, which this edit leaves without a successor: "
            "keep that option while it runs (a restart drops the variant)",
            exc.span,
            notes=exc.notes,
        ) from None


# -- preparation (reload worker thread; pure Python) ----------------------------------------
def folder_stamp(folder: str) -> tuple:
    """(name, inode, size, mtime_ns) of every file of the asset that is not editor noise;
    two equal stamps around a read mean nothing was written meanwhile."""
    out = []
    try:
        with os.scandir(folder) as it:
            for de in it:
                if is_editor_noise(de.name):
                    continue
                try:
                    st = de.stat()
                except OSError:
                    continue
                out.append((de.name, st.st_ino, st.st_size, st.st_mtime_ns))
    except OSError:
        return ()
    return tuple(sorted(out))


def _is_missing(exc: PluginError) -> bool:
    # "no module NAME.wgsl": a module file deleted and written again by its editor's save.
    text = exc.message
    return "does not exist" in text or "has no " in text or "cannot read" in text or ": no module " in text


def prepare(
    rel: str,
    folder: str,
    seq: int,
    first_event: float,
    *,
    current: AssetSource | None,
    old_program: "Program | None",
    make_program: Any,
    root: str | None = None,
    modules: Sequence[str] = (),
) -> Prepared:
    """Read, parse and lower what a reload of ``folder`` needs, without touching the GPU.

    ``make_program(schema, source)`` builds an unregistered candidate program whose
    ``lowered(spec)`` goes through the variant cache (so warm reloads lower nothing).
    ``root``: the asset root the files must resolve inside (see :func:`read_asset_folder`);
    ``modules``: more module folders for ``#import`` (the body's imported modules are read too,
    so an edited module is new content).

    Raises:
        Unsettled: a file changed while it was read.
    """
    out = Prepared(rel, seq, first_event)
    stamp = folder_stamp(folder)
    try:
        src = read_asset_folder(folder, root=root, modules=modules)
    except PluginError as exc:  # AssetError, or a LoweringError of an #import
        out.error = exc
        out.missing = _is_missing(exc)
        return out
    out.source = src
    if current is not None and same_content(src, current):
        out.unchanged = True
        return out
    try:
        schema = out.schema = parse(src.yaml_text, src.yaml_path)
        candidate = make_program(schema, src)
        old_variants = list(old_program.variants) if old_program is not None else []
        for old_spec in old_variants:
            new_spec = carry_spec(old_program.schema, schema, old_spec, old_program.explicit(old_spec))  # type: ignore[union-attr]
            out.carried[old_spec] = new_spec
            if new_spec not in out.lowered:
                out.lowered[new_spec] = candidate.lowered(new_spec)
        if not old_variants:
            # Nothing in use: validate one variant (the first the bake would make), if any can be named.
            try:
                first = next(iter_variants(schema), None)  # not the whole cross product: it may be huge
            except PluginError:
                first = None
            specs = [first] if first is not None else []
            if specs:
                out.validation = specs[0]
                out.lowered[specs[0]] = candidate.lowered(specs[0])
                if old_program is not None:
                    try:
                        out.baseline = old_program.lowered(carry_spec(schema, old_program.schema, specs[0]))
                    except PluginError:
                        out.baseline = None  # the old content cannot make it: a layout change
    except PluginError as exc:
        out.error = exc
    if folder_stamp(folder) != stamp:
        raise Unsettled(folder)
    return out
