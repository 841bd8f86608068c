"""Programs: a schema + WGSL body under a key, with the variants it has lowered and compiled.

A program over the same schema and source as the one standing under its key *is* that
program, with its variants; different content makes a new program under the key (the old
object keeps working for whoever holds it, which is how hot reload keeps the last good one).
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Iterable, Mapping, Protocol

from ..device.context import DeviceContext, get_context, is_default
from ..errors import DeviceLostError
from ..lowering import Lowered, Schema, VariantSpec, lower, resolve_spec
from ..lowering.fingerprint import variant_key
from ..lowering.modules import Module, ModuleTexts, from_mapping, resolve_imports
from ..lowering.wgsl_text import lf_breaks
from .compile import compile_lowered
from .variant import Variant

log = logging.getLogger(__name__)

__all__ = ["Program", "program", "adopt_program", "LoweredStore", "lowering_count", "registered_program"]

_lock = threading.RLock()
_stats = {"lowered": 0}


def lowering_count() -> int:
    """How many variants this process has lowered (a fully cached program adds none)."""
    return _stats["lowered"]


class LoweredStore(Protocol):
    """Where lowered variants are fetched from and kept (the msgpack variant cache).

    A store may also offer ``lookup(key, schema, wgsl, spec, wgsl_path)``: it is then called
    instead of ``get`` with what the key was derived from, so the store can verify an entry
    from a source it does not trust (the asset library's remote tier does); and
    ``record_use(lowered)``: called once a variant's pipeline is made (a usage log).
    """

    def get(self, key: str) -> Lowered | None: ...

    def put(self, key: str, lowered: Lowered) -> None: ...


class Program:
    """A kernel under a key: ``variant(specialize=, columns=)`` lowers and compiles once per spec.

    After a hot reload replaced it, a Program answers as its successor (:meth:`follow`):
    whoever holds the old object sees one consistent program, the new one, never a mix of
    variants swapped in place and variants still lowered from the old source.
    """

    def __init__(
        self,
        key: str,
        schema: Schema,
        wgsl: str,
        *,
        wgsl_path: str | None = None,
        ctx: DeviceContext | None,
        store: LoweredStore | None = None,
        modules: ModuleTexts | None = None,
    ):
        self.key = key
        self.ctx = ctx
        # Made on the default device (or where there was none): it moves to a new default one
        # after a loss. One made on a caller's device stays there: its variants raise
        # DeviceLostError once that device is lost (it moved to the default device quietly).
        self._follows_default = ctx is None or is_default(ctx)
        self._schema = schema
        self._wgsl = wgsl
        self._wgsl_path = wgsl_path or f"{key}.wgsl"
        self._store = store
        self._modules = _module_table(modules)
        self._imports: tuple[Module, ...] | None = None
        self._variants: dict[VariantSpec, Variant] = {}
        # The specialisation names a caller gave for each variant (the rest took defaults): a
        # reload carries those values and lets the rest follow the new defaults (carry_spec).
        self._explicit: dict[VariantSpec, frozenset[str]] = {}
        self._lock = threading.RLock()
        self._successor: Program | None = None
        # When the files it was made from were read (time.monotonic(); 0: at load, or not by a
        # reload): a library holding an older read never applies it over this one.
        self.read_at = 0.0
        self._pinned = False  # a pinned() view: it follows no reload
        self._elsewhere: dict[int, tuple[DeviceContext, Program]] = {}  # on_device() copies, by context

    def _live(self) -> "Program":
        """This program, or the one a reload replaced it with (following the whole chain)."""
        live = self
        while live._successor is not None:
            live = live._successor
        if live is not self and self._successor is not live:
            self._successor = live  # shorten the chain for the next call
        return live

    def follow(self, successor: "Program") -> None:
        """A reload replaced this program: from now on it answers as ``successor``."""
        if successor._live() is not self and not self._pinned:
            self._successor = successor

    def current(self) -> "Program":
        """The program a reload replaced this one with (following the whole chain); itself
        when none did."""
        return self._live()

    def on_device(self, ctx: DeviceContext) -> "Program":
        """This program's content (schema, body, modules, store) compiled on ``ctx``: itself
        when it lives there, else a private program made once per device and never stood
        under its key (the key's standing program stays whatever the library made). A pinned
        program's copy is pinned too."""
        live = self._live()
        if live.ctx is ctx:
            return live
        elsewhere = live._elsewhere
        found = elsewhere.get(id(ctx))
        if found is not None and found[0] is ctx:
            return found[1]
        for key in [k for k, (other, _) in elsewhere.items() if other.lost]:
            del elsewhere[key]  # a lost device's copy (and the device with it) goes
        made = Program(live.key, live._schema, live._wgsl, wgsl_path=live._wgsl_path, ctx=ctx, store=live._store, modules=live._modules)
        made._pinned = live._pinned
        elsewhere[id(ctx)] = (ctx, made)
        return made

    def device_copies(self) -> list["Program"]:
        """The copies :meth:`on_device` made of this program's content on other devices."""
        return [program for _, program in list(self._elsewhere.values())]

    def pinned(self) -> "Program":
        """This program as it stands now, never following a later reload: what an engine
        product accepted keeps running on it when the engine refuses a reload (a
        re-registration compiles this one, not the refused successor). Shares the variants
        compiled so far; a pinned program answers itself."""
        live = self._live()
        if live._pinned:
            return live
        view = object.__new__(Program)
        view.__dict__.update(live.__dict__)
        # Views share the variants and the other-device copies of what they view (the same
        # content): products sharing a program compile it once, here and elsewhere.
        view._successor, view._pinned = None, True
        return view

    @property
    def schema(self) -> Schema:
        return self._live()._schema

    @property
    def wgsl(self) -> str:
        return self._live()._wgsl

    @property
    def wgsl_path(self) -> str:
        return self._live()._wgsl_path

    @property
    def yaml_path(self) -> str:
        return self.schema.path or "bindings.yaml"

    @property
    def store(self) -> LoweredStore | None:
        return self._live()._store

    @store.setter
    def store(self, value: LoweredStore | None) -> None:
        self._live()._store = value

    @property
    def modules(self) -> dict[str, tuple[str, str]]:
        """The module texts ``#import`` lines may name: ``{name: (path, text)}``."""
        return dict(self._live()._modules)

    def imports(self) -> tuple[Module, ...]:
        """The modules the body imports, transitively, dependencies first.

        Raises:
            LoweringError: an unknown module, an import cycle (at the ``#import`` line).
        """
        live = self._live()
        if live._imports is None:
            given = ", ".join(sorted(live._modules))
            live._imports = resolve_imports(
                lf_breaks(live._wgsl),  # as lower() reads the body (an #import line ends at \n)
                live._wgsl_path,
                from_mapping(live._modules),
                f"the modules given: {given}" if given else "no modules were given",
            )
        return live._imports

    def same_content(self, schema: Schema, wgsl: str, wgsl_path: str | None, modules: ModuleTexts | None = None) -> bool:
        live = self._live()
        return (
            live._schema.text == schema.text
            and live._schema.path == schema.path
            and live._wgsl == wgsl
            and (wgsl_path is None or wgsl_path == live._wgsl_path)
            and live._modules == _module_table(modules)
        )

    @property
    def variants(self) -> dict[VariantSpec, Variant]:
        """The variants made so far, by spec."""
        return dict(self._live()._variants)

    def variant_key(self, spec: VariantSpec) -> str:
        """The variant cache key of ``spec`` of this program: schema, body and every module the
        body imports (use this, not ``variant_key(schema.text, wgsl, spec)``, wherever a key
        of a program's variant is needed)."""
        live = self._live()
        return variant_key(live._schema.text, live._wgsl, spec, live.imports())

    def lowered(self, spec: VariantSpec) -> Lowered:
        """Lower ``spec`` (or fetch it from the store) without compiling."""
        live = self._live()
        imports = live.imports()
        key = live.variant_key(spec)
        if live._store is not None:
            # A store that can verify what it fetches (the asset library's, with a remote tier)
            # is handed what the key was derived from.
            lookup = getattr(live._store, "lookup", None)
            if lookup is not None:
                found = lookup(key, live._schema, live._wgsl, spec, live._wgsl_path, modules={m.name: (m.path, m.text) for m in imports})
            else:
                # A plain store cannot verify on its own: an entry filed under this key that was
                # lowered from other texts or another spec is refused and lowered again.
                derived = (live._schema.text, live._wgsl, spec, tuple(m.text for m in imports))
                checked = getattr(live._store, "get_lowered_from", None)  # a VariantCache's
                if checked is not None:
                    found = checked(key, derived, self.key)[0]
                else:
                    found = live._store.get(key)
                    if found is not None and not found.lowered_from(*derived):
                        log.warning("%s: the stored entry %s... was not lowered from this program's texts and spec; lowering it again", self.key, key[:16])
                        found = None
            if found is not None:
                return found
        result = lower(live._schema, live._wgsl, spec, wgsl_path=live._wgsl_path, modules={m.name: (m.path, m.text) for m in imports})
        _stats["lowered"] += 1
        if live._store is not None:
            live._store.put(key, result)
        return result

    def variant(self, specialize: Mapping[str, str] | None = None, columns: Mapping[str, Any] | None = None) -> Variant:
        """Lower (or fetch from the variant cache) and compile one variant.

        Unset specialisations take the seed's defaults (see ``resolve_spec``).

        Raises:
            SpecializationError: an unknown name or value (the message lists the options).
            LoweringError, CompileError: with the user's file and line.
        """
        live = self._live()
        if live is not self:
            return live.variant(specialize, columns)
        if self.ctx is None or self.ctx.lost:
            self._rehome()
        spec = resolve_spec(self._schema, specialize, columns)
        if specialize and not isinstance(specialize, VariantSpec):
            self.mark_explicit(spec, specialize)
        found = self._variants.get(spec)
        if found is not None and (not self._pinned or self._holds(found, spec)):
            return found
        with self._lock:
            found = self._variants.get(spec)
            if found is not None and (not self._pinned or self._holds(found, spec)):
                return found
            lowered = self.lowered(spec)
            compiled = compile_lowered(lowered, label=f"{self.key} {spec.label()}", device=self.ctx)
            made = self._variants[spec] = Variant(self, lowered, compiled)
            record_use = getattr(self._store, "record_use", None)
            if record_use is not None:
                record_use(lowered)
            return made

    def _holds(self, variant: Variant, spec: VariantSpec) -> bool:
        """Whether ``variant`` (shared with the program this pinned view was taken of) still
        runs this view's content: a body-only reload swaps the new pipeline into the shared
        Variant objects, and a product the engine kept on this view (it refused the reload)
        then ran the refused body, or had every dispatch refused (review helper 154). The view
        makes its own variant instead, from its own texts."""
        return variant.lowered.lowered_from(self._schema.text, self._wgsl, spec, tuple(m.text for m in self.imports()))

    def _rehome(self) -> None:
        """The device this program compiled on was lost: compile on the default device from
        now on (a new one is acquired). Variants made on the lost device stay dead; whoever
        holds one gets DeviceLostError and asks the program again. A program made on a
        caller's device raises DeviceLostError instead (see ``_follows_default``)."""
        with self._lock:
            if self.ctx is not None and self.ctx.lost and not self._follows_default:
                raise DeviceLostError(
                    f"program {self.key!r}: the device it was made on (device=...) is lost; make it again on a live device "
                    "(abi.program(..., device=...)); a program made without device= moves to the new default device"
                )
            if self.ctx is None or self.ctx.lost:  # None: made where no adapter was (NoAdapterError if none still is)
                self.ctx = get_context()
                self._variants = {}

    def explicit(self, spec: VariantSpec) -> frozenset[str]:
        """The specialisation names of ``spec`` a caller asked for by name (not defaulted)."""
        return self._live()._explicit.get(spec, frozenset())

    def mark_explicit(self, spec: VariantSpec, names: Iterable[str]) -> None:
        """Note ``names`` of ``spec`` as asked for by name (a reload carries them over)."""
        live = self._live()
        given = frozenset(n for n in names if n in spec.as_dict())
        if given and not given <= live._explicit.get(spec, frozenset()):
            with live._lock:
                live._explicit[spec] = live._explicit.get(spec, frozenset()) | given

    def adopt(self, spec: VariantSpec, variant: Variant) -> Variant:
        """Stand ``variant`` (carried over from this asset's previous program by a body-only
        reload, its pipeline already swapped) under ``spec``."""
        live = self._live()
        with live._lock:
            live._variants[spec] = variant
        return variant

    def __repr__(self) -> str:
        return f"Program({self.key!r}, {len(self._live()._variants)} variants)"


def program(
    key: str,
    schema: Schema,
    wgsl: str,
    *,
    wgsl_path: str | None = None,
    device: Any = None,
    store: LoweredStore | None = None,
    modules: ModuleTexts | None = None,
) -> Program:
    """The program under ``key``: the standing one when its content is the same, else a new one.

    ``modules``: ``{name: (path, text)}`` of the modules the body's ``#import`` lines may name.
    """
    ctx = get_context(device)
    with _lock:
        programs = _registry(ctx)
        found = programs.get(key)
        if found is not None and found.same_content(schema, wgsl, wgsl_path, modules):
            if store is not None and found.store is not store:
                found.store = store  # the newest library's cache serves it (an older one may be closed)
            return found
        made = programs[key] = Program(key, schema, wgsl, wgsl_path=wgsl_path, ctx=ctx, store=store, modules=modules)
        return made


def _registry(ctx: DeviceContext) -> dict[str, Program]:
    """The programs standing on ``ctx``, by key: owned by the device context, so a lost
    device's programs go with its other caches in one step."""
    return ctx.cache("programs")


def adopt_program(made: Program) -> Program:
    """Stand ``made`` (built privately, e.g. by a reload that compiled every variant first)
    under its key, replacing whatever stood there (a program made without a device stands
    nowhere)."""
    if made.ctx is not None:
        with _lock:
            _registry(made.ctx)[made.key] = made
    return made


def registered_program(key: str, device: Any = None) -> Program | None:
    return _registry(get_context(device)).get(key)


def _module_table(modules: ModuleTexts | None) -> dict[str, tuple[str, str]]:
    return {str(name): (str(found[0]), str(found[1])) for name, found in (modules or {}).items()}
