"""Lower one variant: schema + WGSL body + specialisation -> :class:`Lowered`. Pure Python.

Layout of the lowered source: a generated prelude (aliases, consts, the params struct,
bindings, accessors, ``zero_n``/``zero_index``), then each imported module (``#import``,
dependencies first), then the user's body, whose lines keep their order; the source map
sends every lowered line back to the user's file (a module's line to the module's file).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import LoweringError, Span, SpecializationError
from .emit import Emitter, GeneratedNameClash, natural_element
from .entry import USER_MAIN, EntryError, wrap_entry
from .expressions import with_constants
from .geometry import GEOMETRY_FIELDS
from .lowered import ColumnSlot, HostSlot, Lowered, LoweredBinding, ParamField, ParamsLayout, SourceMap, splice_col
from .modules import Module, ModuleTexts, blank_imports, from_mapping, resolve_imports
from .param_types import MAX_PARAMS_BYTES, parse_param_type
from .preprocess import SplicedBody, SpliceTooLarge, apply_when_blocks, splice_sources
from .schema import TEXTURE_KINDS, Binding, Schema
from .structs import StructType
from .textures import storage_texture_wgsl, texture_wgsl
from .types import ValueType, parse_value_type
from .variants import VariantSpec, resolve_spec
from .wgsl_text import (
    IDENT,
    Token,
    comment_safe,
    evaluate_int,
    find_calls,
    hoist_directives,
    lf_breaks,
    module_constants,
    module_declarations,
    odd_character,
    refuse_odd_characters,
    tokens,
    vector_member,
    workgroup_size_attribute,
)
from .workgroup_init import INIT_FN, PRIVATE_INIT_FN, private_reset_function, workgroup_init_function

__all__ = ["lower", "LOWERING_VERSION"]


# A body with its #import modules, in characters (see _Lowerer._run).
MAX_KERNEL_CHARS = 1024 * 1024


def _lowering_source_hash() -> str:
    """sha256 (12 hex digits) of this package's lowering modules, as installed.

    What the lowering generates, and what it refuses, changes with this code: an entry another
    build wrote (a kernel baked before a fix, served after an upgrade that kept ``cache/``)
    must never be served (review helper 149: entries baked before two lowering fixes kept
    serving the old code, and a bake called them up to date). A hand-kept number was bumped
    by people, and forgotten."""
    digest = hashlib.sha256()
    here = Path(__file__).resolve().parent
    try:
        for path in sorted(here.glob("*.py")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes().replace(b"\r\n", b"\n") + b"\0")
    except OSError:  # no sources (a frozen build): the hand-kept number alone
        return "nosource"
    return digest.hexdigest()[:12]


# Part of every cache key and entry: the hand-kept number (bump it for a change elsewhere that
# changes what is generated) and the lowering code's own hash.
LOWERING_VERSION = f"10.{_lowering_source_hash()}"
_YAML = 0  # source-map file index of bindings.yaml
_BODY = 1  # and of the WGSL body; imported modules follow, in inclusion order
# a name called as a function or a constructor, templated or not (bitcast<f32>(...))
_CALLED = re.compile(rf"(?<![\w.])({IDENT})\s*(?:<[\w\s,<>]*>)?\s*\(")
# what the workgroup initialiser and the generated entry point call, emitted after the checks
_CALLED_LATER = frozenset({"atomicStore", "workgroupBarrier"})
_SHADOWS = "'{name}' hides the WGSL builtin {name}(), which the code generated for this schema calls (it would call yours); rename it"
# WGSL's predeclared types and type aliases: the generated code names them (f32 buffers,
# vec3 accessors, u32 indices), so a declaration of one (an alias, struct, const or fn) changed
# what every accessor means: `alias f32 = u32;` gave an f32 buffer u32 words, silently, and
# `struct vec3` failed inside generated code with no line (review helper 184).
PREDECLARED_TYPES = frozenset(
    ["bool", "i32", "u32", "f32", "f16", "array", "atomic", "ptr", "sampler", "sampler_comparison"]
    + [f"vec{n}" for n in (2, 3, 4)]
    + [f"vec{n}{s}" for n in (2, 3, 4) for s in "iufh"]
    + [f"mat{c}x{r}" for c in (2, 3, 4) for r in (2, 3, 4)]
    + [f"mat{c}x{r}{s}" for c in (2, 3, 4) for r in (2, 3, 4) for s in "fh"]
    + [f"texture_{k}" for k in ("1d", "2d", "2d_array", "3d", "cube", "cube_array", "multisampled_2d", "external")]
    + [f"texture_storage_{k}" for k in ("1d", "2d", "2d_array", "3d")]
    + [f"texture_depth_{k}" for k in ("2d", "2d_array", "cube", "cube_array", "multisampled_2d")]
)
_SHADOWS_TYPE = "'{name}' is a predeclared WGSL type the generated code uses; declaring it (an alias, struct, const or fn) changes what every generated accessor means: rename it"

# WGSL's builtin functions (the spec's list): a module-scope name among them hides the builtin.
WGSL_BUILTIN_FUNCTIONS = frozenset(
    """abs acos acosh all any arrayLength asin asinh atan atanh atan2 atomicAdd atomicAnd
    atomicCompareExchangeWeak atomicExchange atomicLoad atomicMax atomicMin atomicOr atomicStore
    atomicSub atomicXor bitcast ceil clamp cos cosh countLeadingZeros countOneBits
    countTrailingZeros cross degrees determinant distance dot dot4I8Packed dot4U8Packed dpdx
    dpdxCoarse dpdxFine dpdy dpdyCoarse dpdyFine exp exp2 extractBits faceForward firstLeadingBit
    firstTrailingBit floor fma fract frexp fwidth fwidthCoarse fwidthFine insertBits inverseSqrt
    ldexp length log log2 max min mix modf normalize pack2x16float pack2x16snorm pack2x16unorm
    pack4x8snorm pack4x8unorm pack4xI8 pack4xI8Clamp pack4xU8 pack4xU8Clamp pow quantizeToF16
    radians reflect refract reverseBits round saturate select sign sin sinh smoothstep sqrt step
    storageBarrier tan tanh textureBarrier textureDimensions textureGather textureGatherCompare
    textureLoad textureNumLayers textureNumLevels textureNumSamples textureSample
    textureSampleBaseClampToEdge textureSampleBias textureSampleCompare textureSampleCompareLevel
    textureSampleGrad textureSampleLevel textureStore transpose trunc unpack2x16float
    unpack2x16snorm unpack2x16unorm unpack4x8snorm unpack4x8unorm unpack4xI8 unpack4xU8
    workgroupBarrier workgroupUniformLoad""".split()
)


def lower(
    schema: Schema,
    wgsl: str,
    spec: Mapping[str, str] | VariantSpec | None = None,
    *,
    columns: Mapping[str, list] | None = None,
    wgsl_path: str | None = None,
    modules: ModuleTexts | None = None,
) -> Lowered:
    """Lower one variant of ``schema`` over the WGSL ``wgsl``.

    Args:
        schema: from :func:`engine_plugin.abi.parse`.
        wgsl: the kernel body (declares ``@compute ... fn main(...)`` itself).
        spec: specialisation values (or a resolved :class:`VariantSpec`).
        columns: table column names per ``columns`` binding, e.g. ``{"cols": ["pos", "vel"]}``.
        wgsl_path: the body's file, named in errors.
        modules: ``{name: (path, text)}`` of the modules ``#import`` lines may name (others
            are ignored); see :mod:`engine_plugin.lowering.modules`.
    Raises:
        SpecializationError, LoweringError: with the user's file and line.
    """
    vspec = resolve_spec(schema, spec, columns)
    return _Lowerer(schema, wgsl, vspec, wgsl_path, modules).run()


class _Lowerer:
    def __init__(self, schema: Schema, wgsl: str, vspec: VariantSpec, wgsl_path: str | None, modules: ModuleTexts | None = None):
        self.schema = schema
        self.wgsl = lf_breaks(wgsl)
        self.vspec = vspec
        self.values = vspec.as_dict()
        self._module_toks: list[list[Token]] = []  # the #import modules' tokens (set by lower)
        self.workgroup = schema.workgroup_for(self.values)
        # kind: workgroup specialisations count expressions may name (ceil(n / WG)): fixed per variant
        self.count_constants = {sp.name: int(self.values[sp.name]) for sp in schema.specialize if sp.kind == "workgroup"}
        self.yaml_path = schema.path or "bindings.yaml"
        self.wgsl_path = wgsl_path or "kernel.wgsl"
        self.user_lines = self.wgsl.split("\n")
        self.em = Emitter()
        self.module_texts = modules
        self._reached: set[str] | None = None  # module functions the body reaches (set by lower)
        self._generated_builtins: set[str] = set()  # WGSL builtins the generated code calls (set by lower)
        self._words: dict[str, tuple[int, str]] = {}  # buffers stored as several words an element (set by lower)
        self._unindexable: dict[str, str] = {}  # buffers whose NAME[i] is refused, with why (set by lower)
        self._atomic_scalars: dict[str, str] = {}  # of those, one-lane atomic i32/f32 buffers (set by lower)

    def error(self, message: str, line: int, col: int | None = None, notes=()) -> LoweringError:
        text = self.user_lines[line - 1] if 1 <= line <= len(self.user_lines) else None
        return LoweringError(message, Span(self.wgsl_path, line, col, text), notes=notes)

    def element(self, b: Binding) -> ValueType | StructType:
        struct = self.schema.struct(b.element)
        if struct is not None:
            return struct
        vt = parse_value_type(b.element or "u32")
        if vt is None:  # a type specialisation
            vt = parse_value_type(self.values[b.element])  # type: ignore[index]
        assert vt is not None
        return vt

    def run(self) -> Lowered:
        try:
            return self._run()
        except GeneratedNameClash as clash:
            (line1, what1), (line2, what2) = clash.first, clash.second
            span, first = self._clash_span(line2, what2, clash.name), self._clash_span(line1, what1, clash.name).line if line1 else 0
            raise LoweringError(
                f"the name '{clash.name}' is generated for {what2} and also for {what1}" + (f" (line {first})" if first else "") + "; rename one of them",
                Span(self.yaml_path, span.line, span.col, span.text),
                notes=(f"{self.yaml_path}:{first}: first generated here",) if first else (),
            ) from None

    def _clash_span(self, line: int, what: str, name: str) -> Span:
        """Where a generated name's owner stands in bindings.yaml: a struct member at its key
        in structs: (it was the binding's line, with no column: review helper 237), anything
        else at its own name on its line (a binding's, a struct's...)."""
        member = re.fullmatch(r"member '([^']+)' of binding '([^']+)'", what)
        if member is not None:
            for b in self.schema.bindings:
                at = self.schema.member_span(b.element, member[1]) if b.name == member[2] else None
                if at is not None:
                    return Span(self.yaml_path, at.line, at.col, at.text)
        quoted = re.findall(r"'([^']+)'", what)
        return self.schema.span_at(line, quoted[0] if quoted else name)

    def _run(self) -> Lowered:
        schema = self.schema
        spec_params = {sp.name: sp for sp in schema.specialize}
        where = ", ".join(sorted(self.module_texts)) if self.module_texts else ""
        refuse_odd_characters(self.wgsl, self.wgsl_path)  # (a module's are refused as it is read)
        modules = resolve_imports(
            self.wgsl, self.wgsl_path, from_mapping(self.module_texts), f"the modules given: {where}" if where else "no modules were given"
        )
        total = len(self.wgsl) + sum(len(m.text) for m in modules)
        if total > MAX_KERNEL_CHARS:
            # The checks walk the text several times in Python (about 6 s a MiB): past this
            # it is not a kernel, and a bake or hot reload must not spend minutes finding out
            # (review helper 107: 2.8 MiB took 25 s and 1 GB to lower, 8 MiB were allowed).
            where = f" ({len(self.wgsl)} in the body, {total - len(self.wgsl)} in {len(modules)} modules)" if modules else ""
            raise self.error(
                f"the kernel is {total} characters{where}: at most {MAX_KERNEL_CHARS} here (a kernel is KiB, not MiB); is it the right file?", 1, 1
            )
        kept = apply_when_blocks(blank_imports(self.wgsl).split("\n"), self.values, spec_params, self.wgsl_path)
        module_lines = [apply_when_blocks(blank_imports(m.text).split("\n"), self.values, spec_params, m.path) for m in modules]
        sources = {sp.name: lf_breaks(self.values[sp.name]) for sp in schema.specialize if sp.kind == "source"}
        for sp in schema.specialize:
            odd = odd_character(sources[sp.name]) if sp.name in sources else None
            if odd is not None:
                raise SpecializationError(f"source specialisation {sp.name}'s value holds {odd[3]}", schema.span_at(sp.line, sp.name))
        outside = total - len(self.wgsl)  # the modules' characters: the spliced body shares the limit
        try:
            body = splice_sources("\n".join(kept), sources, MAX_KERNEL_CHARS - outside)
        except SpliceTooLarge as over:
            uses = f"at its {over.uses} uses" if over.uses > 1 else "at its use"
            raise SpecializationError(
                f"source specialisation {over.name}'s value ({len(sources[over.name])} characters) spliced {uses} makes a kernel of "
                f"{over.size + outside} characters: at most {MAX_KERNEL_CHARS} here (a kernel is KiB, not MiB)",
                schema.span_at(spec_params[over.name].line, over.name),
                notes=(f"{self.wgsl_path}:{over.first_line}: first used here",),
            ) from None
        body_text = "\n".join(body.lines)
        present = [b for b in schema.bindings if b.when is None or b.when.holds(self.values)]
        self.check_table_columns(present)

        em = self.em
        em.emit(f"// engine_plugin: lowered from {comment_safe(self.yaml_path)} + {comment_safe(self.wgsl_path)}; variant {self.vspec.label()}", 0)
        self.emit_specialisation()
        self.emit_structs()
        plan, slots, cols, domain = self.plan(present)
        params = self.params_layout(present, cols, binding=len(plan))
        em.emit("struct ZeroParams {", 0)
        for f in params.fields:
            # A uniform array is 16-aligned (the host packs it so: param_types.uniform_align);
            # naga takes its element's alignment otherwise (8 for mat2x2) and refuses the
            # offset the host chose.
            align = "@align(16) " if f.type.startswith("array<") else ""
            em.emit(f"    {align}{f.name}: {f.type},", self._origin_of(f, present))
        em.emit("}", 0)
        em.declare("ZeroParams", 0, "the params struct")
        for lb in plan:
            em.declare(lb.name, lb.line, f"binding '{lb.name}'")
            if lb.role in TEXTURE_KINDS:  # handles: no address space
                em.emit(f"@group(0) @binding({lb.binding}) var {lb.name}: {lb.storage_type};", lb.line)
                continue
            space = "storage, read_write" if lb.access == "read_write" else "storage, read"
            em.emit(f"@group(0) @binding({lb.binding}) var<{space}> {lb.name}: {lb.storage_type};", lb.line)
        em.emit(f"@group(0) @binding({params.binding}) var<uniform> params: ZeroParams;", 0)
        em.declare("params", 0, "the params uniform")
        self.emit_builtins(domain)
        self.emit_accessors(present)

        module_texts = ["\n".join(mlines) for mlines in module_lines]
        module_toks = self._module_toks = [list(tokens(text)) for text in module_texts]  # each text tokenized once
        body_toks = list(tokens(body_text))
        # The module functions the body can reach: exact's atomics check skips the rest (a
        # shared module may hold helpers meant for float_order assets).
        self._reached = _reached_functions(body_toks, module_toks)
        self._generated_builtins = (set(_CALLED.findall("\n".join(t for t, _ in em.lines))) | _CALLED_LATER) & WGSL_BUILTIN_FUNCTIONS
        self._words = self.word_bindings(present)
        self._unindexable = self.unindexable_bindings(present)
        # One-lane atomic i32/f32 buffers: a pointer to the whole buffer reaches its u32 words
        # as indexing does (``let p = &acc; atomicLoad(&(*p)[i])``, review helper 156).
        self._atomic_scalars = {name: why for name, why in self._unindexable.items() if name not in self._words and "(atomic " in why}
        for m, text, toks in zip(modules, module_texts, module_toks):
            self.check_module(m, text, toks)
        self.check_body(body_text, body_toks, body, present)
        wx, wy, wz = self.workgroup
        all_text = "\n".join(tuple(ln for ml in module_lines for ln in ml) + tuple(body.lines))
        all_toks = list(tokens(all_text))  # the modules and the body, once for both generated resets
        init = workgroup_init_function(all_text, all_toks, wx * wy * wz)
        if init is not None:
            em.declare(INIT_FN, 0, "the workgroup memory initialiser")
            em.emit(init, 0)
        reset = private_reset_function(all_text, all_toks)
        if reset is not None:
            em.declare(PRIVATE_INIT_FN, 0, "the private variables' reset")
            em.emit(reset, 0)
        em.declare(USER_MAIN, 0, "the renamed entry point")
        try:
            type_values = {sp.name: self.values[sp.name] for sp in self.schema.specialize if sp.kind == "type"}
            wrapped = wrap_entry(
                body.lines, body.splices, self.workgroup, f"{INIT_FN}(zero_lii);" if init else None, type_values, f"{PRIVATE_INIT_FN}();" if reset else None
            )
        except EntryError as exc:
            raise self.error(exc.message, *_user_position(body, exc.token)) from None
        self.check_builtin_shadows((init or "") + "\n" + (reset or ""))
        # WGSL's directives open the module: those opening the body and each module go above
        # every generated declaration, each line mapped to the user's line (rows stay put).
        body_lines, directives = hoist_directives(wrapped.lines)
        body = SplicedBody(tuple(body_lines), body.user_lines, wrapped.splices)
        # After the header comment, which stays the first line (the cache's verification reads it).
        header, generated = em.lines[0], em.lines[1:]
        lines = [header[0]] + [text for _, text in directives]
        entries = [(-1, 0)] + [(_BODY, body.user_lines[row]) for row, _ in directives]
        hoisted_modules = []
        for index, mlines in enumerate(module_lines, start=_BODY + 1):
            kept, found = hoist_directives(mlines)
            hoisted_modules.append(kept)
            lines += [text for _, text in found]
            entries += [(index, row + 1) for row, _ in found]
        lines += [t for t, _ in generated]
        entries += [((_YAML, o) if o > 0 else (-1, 0)) for _, o in generated]
        for index, (m, mlines) in enumerate(zip(modules, hoisted_modules), start=_BODY + 1):
            lines.append(f"// ---- module {m.name} ----")
            entries.append((-1, 0))
            lines += mlines
            entries += [(index, row) for row in range(1, len(mlines) + 1)]
        lines.append("// ---- kernel body ----")
        entries.append((-1, 0))
        offset = len(lines)
        lines += list(body.lines) + ["// ---- generated entry point ----"] + wrapped.wrapper.split("\n")
        entries += [(_BODY, u) for u in body.user_lines]
        entries += [(-1, 0)] * (1 + wrapped.wrapper.count("\n") + 1)
        splices = tuple((offset + 1 + row, c, ln, uc, ul) for row, c, ln, uc, ul in body.splices)
        files = (self.yaml_path, self.wgsl_path) + tuple(m.path for m in modules)
        smap = SourceMap(files, tuple(entries), splices, (schema.text, self.wgsl) + tuple(m.text for m in modules))
        return Lowered(
            source="\n".join(lines) + "\n",
            bindings=tuple(plan) + (LoweredBinding(params.binding, "params", "params", "ZeroParams", "uniform"),),
            params=params,
            host_slots=tuple(slots),
            columns=tuple(cols),
            source_map=smap,
            spec=self.vspec,
            workgroup=self.workgroup,
            determinism=schema.determinism,
            domain_count=domain,
            table_columns=self.vspec.columns,
            asset=self.wgsl_path,
        )

    def check_builtin_shadows(self, resets: str) -> None:
        """Refuse a schema name that shadows a WGSL builtin the generated code calls.

        A binding, struct or specialisation is declared at module scope, where a name like
        ``min`` or ``select`` hides the builtin for every generated accessor that calls it: naga
        then fails inside generated code. Only the builtins this variant's generated code
        calls are refused, so a binding named ``all`` (which no accessor calls) still works:
        those the checks found (``_generated_builtins``), and those the workgroup and private
        resets, emitted after them, call (``resets``: they carry the body's own lengths and
        initialisers).
        """
        called = self._generated_builtins | (set(_CALLED.findall(resets)) & WGSL_BUILTIN_FUNCTIONS)
        for name, (line, what) in self.em.names.items():
            if name in called and what.startswith(("binding '", "struct '", "specialisation '")):
                span = self.schema.span_at(line, name)
                raise LoweringError(
                    f"{what} is named like the WGSL builtin {name}(), which the code generated for this schema calls; rename it",
                    Span(self.yaml_path, span.line, span.col, span.text),
                )

    # -- plan ----------------------------------------------------------------------------------
    def plan(self, present: list[Binding]):
        plan: list[LoweredBinding] = []
        slots: list[HostSlot] = []
        cols: list[ColumnSlot] = []
        domain = None
        pages = {b.name: b for b in present if b.kind == "page"}
        for b in present:
            n = len(plan)
            if b.kind == "buffer":
                vt = self.element(b)
                raw = b.bits or b.atomic
                if isinstance(vt, StructType):
                    storage = f"array<{vt.name}>"
                else:
                    storage = "array<atomic<u32>>" if b.atomic else f"array<{'u32' if raw else natural_element(vt)}>"
                plan.append(LoweredBinding(n, b.name, "buffer", storage, b.access, "u32" if raw else vt.scalar, vt.lanes, b.line))
                role = "append" if b.append else "output" if b.count is not None else ("inout" if b.access == "read_write" else "input")
                counter = -1
                if b.append:
                    counter = n + 1
                    plan.append(LoweredBinding(counter, f"{b.name}_count", "counter", "array<atomic<u32>>", "read_write", "u32", 1, b.line))
                slots.append(
                    HostSlot(
                        b.name,
                        role,
                        n,
                        vt.wgsl,
                        vt.scalar,
                        vt.lanes,
                        b.access,
                        with_constants(b.count.text, self.count_constants) if b.count else None,
                        with_constants(b.capacity.text, self.count_constants) if b.capacity else None,
                        b.live,
                        b.bits,
                        b.atomic,
                        counter,
                        b.line,
                        b.clear,
                        tuple((f.name, f.scalar, f.lanes, f.offset) for f in vt.fields) if isinstance(vt, StructType) else (),
                        vt.size if isinstance(vt, StructType) else 0,
                    )
                )
            elif b.kind == "columns":
                plan.append(LoweredBinding(n, b.name, "columns", "array<u32>", b.access, "u32", 1, b.line))
                slots.append(HostSlot(b.name, "table", n, "u32", "u32", 1, b.access, line=b.line))
            elif b.kind == "page":
                storage = "array<atomic<u32>>" if b.atomic else "array<u32>"
                plan.append(LoweredBinding(n, b.name, "page", storage, b.access, "u32", 1, b.line))
                slots.append(HostSlot(b.name, "page", n, "u32", "u32", 1, b.access, atomic=b.atomic, line=b.line))
            elif b.kind == "column":
                if b.page not in pages:
                    raise LoweringError(
                        f"column {b.name!r} stands in page {b.page!r}, which this variant leaves out (its 'when' does not hold)",
                        Span(self.yaml_path, b.line, b.col),
                    )
                vt = self.element(b)
                access = self.column_access(b, pages[b.page])  # type: ignore[index]
                cols.append(ColumnSlot(b.name, b.page, vt.wgsl, vt.scalar, vt.lanes, access, b.line))  # type: ignore[arg-type]
            elif b.kind in TEXTURE_KINDS:
                if b.kind == "texture":
                    # A linear sampler beside it needs a filterable texture; else any float format binds.
                    linear = any(x.kind == "sampler" and x.filter == "linear" for x in present)
                    info: tuple = (b.dim, b.sample, "filterable" if linear and b.sample == "float" else "")
                    wgsl = texture_wgsl(b.dim, b.sample)
                elif b.kind == "sampler":
                    info, wgsl = (b.filter, b.address), "sampler"
                else:
                    info, wgsl = (b.dim, b.format, b.access), storage_texture_wgsl(b.dim, b.format, b.access)  # type: ignore[arg-type]
                plan.append(LoweredBinding(n, b.name, b.kind, wgsl, b.access, "u32", 1, b.line, texture=info))
                role = "texture_output" if b.kind == "storage_texture" and b.size else b.kind
                slots.append(
                    HostSlot(
                        b.name,
                        role,
                        n,
                        wgsl,
                        "u32",
                        1,
                        b.access,
                        line=b.line,
                        texture=info,
                        size=tuple(with_constants(e.text, self.count_constants) for e in b.size),
                    )
                )
            elif b.kind == "domain_count":
                plan.append(LoweredBinding(n, b.name, "domain_count", "array<u32>", "read", "u32", 1, b.line))
                slots.append(HostSlot(b.name, "domain_count", n, "u32", "u32", 1, "read", line=b.line))
                domain = b.name
        return plan, slots, cols, domain

    def params_layout(self, present: list[Binding], cols: list[ColumnSlot], binding: int) -> ParamsLayout:
        wanted: list[tuple[str, str, str, str]] = [("n", "u32", "n", "")] + [(f, "u32", "zero", "") for f in GEOMETRY_FIELDS]
        wanted += [(p.name, p.type, "user", "") for p in self.schema.params]
        wanted += [(f"zero_len_{b.name}", "u32", "len", b.name) for b in present if b.kind == "buffer"]
        for c in cols:
            wanted += [(f"col_base_{c.name}", "u32", "col_base", c.name), (f"col_len_{c.name}", "u32", "col_len", c.name)]
        fields, offset = [], 0
        for name, type_, origin, target in wanted:
            vt = parse_param_type(type_)
            offset = -(-offset // vt.uniform_align) * vt.uniform_align
            fields.append(ParamField(name, vt.wgsl, offset, vt.uniform_size, origin, target))
            offset += vt.uniform_size
        size = -(-offset // 16) * 16
        if size > MAX_PARAMS_BYTES:
            user = [f for f in fields if f.origin == "user"]
            line = self._origin_of(max(user, key=lambda f: f.size), present) if user else 0
            text = self.schema.text.split("\n")
            raise LoweringError(
                f"the params take {size} bytes with the lowering's own fields; the params uniform binds at most {MAX_PARAMS_BYTES} "
                "(WebGPU's maxUniformBufferBindingSize): pass large data in a read buffer binding",
                Span(self.yaml_path, line or None, None, text[line - 1] if 0 < line <= len(text) else None),
            )
        return ParamsLayout(tuple(fields), size, binding)

    def _origin_of(self, f: ParamField, present: list[Binding]) -> int:
        if f.origin == "user":
            p = self.schema.param(f.name)
            return p.line if p else 0
        for b in self.schema.bindings:
            if b.name == f.target:
                return b.line
        return 0

    # -- emitters ------------------------------------------------------------------------------
    def emit_structs(self) -> None:
        for s in self.schema.structs:
            line = next((ln for ln, t in enumerate(self.schema.text.split("\n"), start=1) if t.strip().startswith(f"{s.name}:")), 0)
            self.em.declare(s.name, line, f"struct '{s.name}'")
            self.em.emit(s.declaration + ";", line)

    def emit_specialisation(self) -> None:
        em = self.em
        for sp in self.schema.specialize:
            if sp.kind == "type":
                em.declare(sp.name, sp.line, f"specialisation '{sp.name}'")
                em.emit(f"alias {sp.name} = {self.values[sp.name]};", sp.line)
            elif sp.kind == "workgroup":  # its value, for @workgroup_size(NAME) and the body's use
                em.declare(sp.name, sp.line, f"specialisation '{sp.name}'")
                em.emit(f"const {sp.name}: u32 = {int(self.values[sp.name])}u;", sp.line)
            elif sp.kind == "named":
                em.declare(sp.name, sp.line, f"specialisation '{sp.name}'")
                em.emit(f"const {sp.name}: u32 = {sp.options.index(self.values[sp.name])}u;", sp.line)
                for i, opt in enumerate(sp.options):
                    em.declare(f"{sp.name}_{opt}", sp.line, f"specialisation '{sp.name}'")
                    em.emit(f"const {sp.name}_{opt}: u32 = {i}u;", sp.line)

    def emit_builtins(self, domain: str | None) -> None:
        em = self.em
        n_expr = f"min({domain}[0], params.n)" if domain else "params.n"
        em.fn("zero_n", "() -> u32", f"return {n_expr};", 0, "the built-in zero_n")
        em.fn("zero_grid", "() -> vec3<u32>", "return vec3<u32>(params.zero_nx, params.zero_ny, params.zero_nz);", 0, "the built-in zero_grid")
        # Linear (row-major) over the domain; an invocation outside it (a partial workgroup)
        # answers 0xFFFFFFFF, so `if (i >= zero_n()) { return; }` guards every dimension.
        em.fn(
            "zero_index",
            "(zero_gid: vec3<u32>) -> u32",
            "if (any(zero_gid >= zero_grid())) { return 0xFFFFFFFFu; } return zero_gid.x + params.zero_nx * (zero_gid.y + params.zero_ny * zero_gid.z);",
            0,
            "the built-in zero_index",
        )

    def emit_accessors(self, present: list[Binding]) -> None:
        em = self.em
        pages = {b.name: b for b in present if b.kind == "page"}
        table_cols = self.vspec.columns_dict()
        for b in present:
            if b.kind == "buffer":
                vt = self.element(b)
                if isinstance(vt, StructType):
                    em.struct_buffer(b.name, vt, b.access, b.line)
                else:
                    em.buffer(b.name, vt, b.access, b.bits, b.atomic, b.line)
                if b.append:
                    em.append(b.name, vt, self.schema.determinism == "float_order", b.line)
            elif b.kind == "columns":
                em.table(b.name, b.access, table_cols.get(b.name, ()), b.line)
            elif b.kind == "column":
                page = pages[b.page]  # type: ignore[index]
                vt = self.element(b)
                assert isinstance(vt, ValueType), "a column's element is parsed as a value type"
                em.column(b.name, page.name, vt, self.column_access(b, page), page.atomic, b.line)

    def column_access(self, column: Binding, page: Binding) -> str:
        """A column's access: as written, else its page's in this variant (atomic pages are read_write)."""
        if any(k == "access" for k, _, _ in column.key_lines):
            if column.access == "read_write" and page.access != "read_write":
                raise LoweringError(
                    f"column {column.name!r} is read_write but its page {page.name!r} is read-only in this variant",
                    Span(self.yaml_path, column.line, column.col),
                )
            return column.access
        return page.access

    # -- checks --------------------------------------------------------------------------------
    def check_table_columns(self, present: list[Binding]) -> None:
        tables = {b.name for b in present if b.kind == "columns"}
        for name, _ in self.vspec.columns:
            if name not in tables:
                raise LoweringError(f"columns= names table {name!r}, which this variant does not have", Span(self.yaml_path))

    def check_brackets(self, toks: list, where) -> None:
        """A half-typed body (the commonest live-editing mistake) is named at the user's bracket:
        naga would report it past the end of the body, in generated code or at a later line.
        So is a statement too deep for naga (:func:`_chain_error`)."""
        found = _bracket_error(toks) or _chain_error(toks)
        if found is not None:
            tok, message = found
            raise self.error(message, *where(tok))  # type: ignore[attr-defined]

    def check_module(self, module: Module, text: str, toks: list) -> None:
        """A module is shared WGSL: brackets balanced, no generated name redeclared, no
        binding or entry point of its own (those belong to each asset)."""
        src_lines = module.text.split("\n")

        def fail(message: str, line: int, col: int | None, notes=()) -> LoweringError:
            shown = src_lines[line - 1] if 1 <= line <= len(src_lines) else None
            return LoweringError(message, Span(module.path, line, col, shown), notes=notes)

        found = (
            _bracket_error(toks)
            or _chain_error(toks)
            or _word_pointer_error(toks, self._words, self._atomic_scalars)
            or _flat_index_error(toks, self._unindexable)
            or _derivative_error(toks)
        )
        if found is None and self.schema.determinism == "exact":
            found = _exact_atomic_error(_function_tokens(toks, self._reached), self.em.atomics)
        if found is not None:
            tok, message = found
            raise fail(message, tok.line, tok.col)  # type: ignore[attr-defined]
        for tok in module_declarations(text):
            hit = self.em.names.get(tok.text)
            if hit is not None:
                origin, what = hit
                gen = f"{self.yaml_path}:{origin}" if origin else "the lowering"
                raise fail(
                    f"'{tok.text}' is declared in module {module.name} and also generated for {what} ({gen}) in {self.wgsl_path}'s lowering; rename it",
                    tok.line,
                    tok.col,
                    notes=(f"generated name declared by {gen}",),
                )
            if tok.text in self._generated_builtins:
                raise fail(_SHADOWS.format(name=tok.text), tok.line, tok.col)
            if tok.text in PREDECLARED_TYPES:
                raise fail(_SHADOWS_TYPE.format(name=tok.text), tok.line, tok.col)
            if tok.text == "main":
                raise fail(f"module {module.name} declares 'main'; the entry point belongs to the asset's own .wgsl, a module holds helpers", tok.line, tok.col)
        for i, t in enumerate(toks):
            if t.text == "binding" and i > 0 and toks[i - 1].text == "@":
                raise fail(f"module {module.name} declares a @binding; bindings belong to each asset's bindings.yaml", t.line, t.col - 1)

    def check_body(self, body_text: str, toks: list, body: SplicedBody, present: list[Binding]) -> None:
        def where(tok: Token) -> tuple[int, int]:
            return _user_position(body, tok)

        self.check_brackets(toks, where)
        decls = module_declarations(body_text)
        for tok in decls:
            hit = self.em.names.get(tok.text)
            if hit is not None:
                origin, what = hit
                gen = f"{self.yaml_path}:{origin}" if origin else "the lowering"
                # A struct the schema declares (structs:) is the same type the body wrote itself.
                fix = "delete yours (the body uses the schema's)" if what.startswith("struct '") else "rename yours"
                raise self.error(
                    f"'{tok.text}' is declared here and also generated for {what} ({gen}); {fix}",
                    *where(tok),
                    notes=(f"generated name declared by {gen}",),
                )
            if tok.text in self._generated_builtins:
                raise self.error(_SHADOWS.format(name=tok.text), *where(tok))
            if tok.text in PREDECLARED_TYPES:
                raise self.error(_SHADOWS_TYPE.format(name=tok.text), *where(tok))
        if not any(t.text == "main" for t in decls):
            for i, t in enumerate(toks):
                if t.text == "compute" and i > 0 and toks[i - 1].text == "@":
                    fn = next((k for k in range(i + 1, len(toks) - 1) if toks[k].text == "fn"), None)
                    if fn is not None and toks[fn + 1].kind == "ident":
                        named = toks[fn + 1]
                        raise self.error(f"the entry point is named '{named.text}'; the lowering calls 'main': rename it 'fn main(...)'", *where(named))
            raise self.error(
                "the body declares no entry point; expected '@compute @workgroup_size(...) fn main(@builtin(global_invocation_id) gid: vec3<u32>)'",
                1,
                1,
            )
        for i, t in enumerate(toks):
            if t.text == "binding" and i > 0 and toks[i - 1].text == "@":
                raise self.error(
                    "the body declares its own @binding; declare bindings in bindings.yaml, the lowering numbers them",
                    *where(toks[i - 1]),
                )
        self.check_workgroup_size(toks, where)
        found = _word_pointer_error(toks, self._words, self._atomic_scalars) or _flat_index_error(toks, self._unindexable) or _derivative_error(toks)
        if found is not None:
            tok, message = found
            raise self.error(message, *where(tok))
        if self.schema.determinism == "exact":
            appends = {f"{b.name}_append" for b in present if b.kind == "buffer" and b.append}
            for call in find_calls(body_text, appends):
                raise self.error(
                    f"{call.text}() is unordered (atomic slot order), and this shader is determinism: exact; "
                    f"use {call.text[:-7]}_store(slot, v) with a slot you compute, or declare determinism: float_order",
                    *where(call),
                )
            self.check_exact_atomics(toks, where)

    def unindexable_bindings(self, present: list[Binding]) -> dict[str, str]:
        """Buffers the body may not index itself, name -> why and what to use instead:

        - a plain ``vec3`` buffer is stored as flat words (a vec3 array would take a 16-byte
          stride in WGSL storage), so ``pos[i]`` is word i, not element i (review helper 145);
        - a one-lane ``atomic`` i32 or f32 buffer is declared ``array<atomic<u32>>``, so WGSL's
          own atomics on ``acc[i]`` act on u32 bits: ``atomicLoad`` answered an i32's or an
          f32's bits as a u32 and a ported k-means computed centroids of 87,380 for -1
          (review helper 153).

        ``bits``/``atomic`` vector buffers are words by the schema's own choice and keep their
        word indexing, as do u32 atomics (their words are their values)."""
        refused = {}
        for b in present:
            if b.kind != "buffer" or self.schema.struct(b.element) is not None:
                continue
            vt = self.element(b)
            if vt.lanes == 3 and not (b.bits or b.atomic):  # type: ignore[union-attr]
                refused[b.name] = (
                    f"'{b.name}' ({vt.wgsl}) is stored as flat words, 3 per element (a vec3 array would take a 16-byte stride in "  # type: ignore[union-attr]
                    f"WGSL storage): {b.name}[i] is word i, not element i; use {b.name}_get(i) and {b.name}_set(i, v)"
                )
            elif b.atomic and vt.lanes == 1 and vt.scalar != "u32":  # type: ignore[union-attr]
                ops = "exchange/min/max/add" if vt.scalar == "f32" else "add/min/max/and/or/xor/exchange"  # type: ignore[union-attr]
                refused[b.name] = (
                    f"'{b.name}' (atomic {vt.scalar}) is stored as atomic<u32> words: WGSL's own atomics on {b.name}[i] act on "  # type: ignore[union-attr]
                    f"u32 bits (atomicLoad answers the {vt.scalar}'s bits as a u32); use {b.name}_get(i), {b.name}_set(i, v) and "  # type: ignore[union-attr]
                    f"{b.name}_atomic_{{{ops}}}(i, v), or declare element: u32"
                )
        return refused

    def word_bindings(self, present: list[Binding]) -> dict[str, tuple[int, str]]:
        """Buffers stored as flat words with several per element (a ``vec3``, a ``bits``
        vector): name -> (words an element, the element's WGSL type)."""
        words = {}
        for b in present:
            if b.kind != "buffer" or self.schema.struct(b.element) is not None:
                continue
            vt = self.element(b)
            if vt.lanes > 1 and (b.bits or b.atomic or vt.lanes == 3):  # type: ignore[union-attr]
                words[b.name] = (vt.lanes, vt.wgsl)  # type: ignore[union-attr]
        return words

    def check_workgroup_size(self, toks: list, where: Any) -> None:
        """The body's ``@workgroup_size`` must be the schema's workgroup: the generated entry
        point runs with the schema's size, so a kernel written for another one (its shared
        memory, its strides) would compute silently wrong numbers. Literals, consts and
        overrides of them (an override keeps its default) and this schema's ``kind:
        workgroup`` specialisations are evaluated; anything else is refused."""
        found = workgroup_size_attribute(toks)
        if found is None:
            return
        tok, args = found
        want = self.workgroup
        known = {sp.name: int(self.values[sp.name]) for sp in self.schema.specialize if sp.kind == "workgroup"}
        consts = {}
        for mtoks in self._module_toks:
            consts.update(module_constants(mtoks))
        consts.update(module_constants(toks))
        resolving: set[str] = set()
        values: dict[str, int | None] = {}  # each const evaluated once (a chain of them is not exponential)

        def name(text: str) -> int | None:
            if text in known:
                return known[text]
            if text in values:
                return values[text]
            if "." in text:  # a vector const's lane
                base, member = text.split(".", 1)
                vector = consts.get(base)
                if vector is None or base in resolving:
                    return None
                resolving.add(base)
                try:
                    values[text] = vector_member(vector, member, name)
                except RecursionError:
                    values[text] = None
                finally:
                    resolving.discard(base)
                return values[text]
            init = consts.get(text)
            if init is None or text in resolving:
                return None
            resolving.add(text)
            try:
                values[text] = evaluate_int(init, name)
            except RecursionError:  # a chain of consts past Python's stack
                values[text] = None
            finally:
                resolving.discard(text)
            return values[text]

        dims = [evaluate_int(arg, name) for arg in args]
        if not 1 <= len(dims) <= 3 or any(d is None for d in dims):
            # Valid WGSL this check cannot follow (select(), a conversion, a builtin it does not
            # know). It was only logged, and the host dispatched by the schema's size: a body
            # written for 32 ran at 64 and summed half its groups (review helper 218).
            shown = ", ".join(" ".join(t.text for t in arg) for arg in args)
            raise self.error(
                f"@workgroup_size({shown}) cannot be checked against bindings.yaml's workgroup {_dims(want)}, and the host dispatches by "
                "the schema's size: write it as integer literals, consts or overrides of them (+ - * / % << >> & | ^, min, max, abs, u32(), i32()), or a kind: workgroup specialisation",
                *where(tok),
            )
        size = tuple(dims + [1] * (3 - len(dims)))
        if size != want:
            raise self.error(
                f"@workgroup_size{_dims(size)} does not match bindings.yaml's workgroup {_dims(want)}; the host dispatches by the schema's size",
                *where(tok),
            )

    def check_exact_atomics(self, toks: list, where: Any) -> None:
        """determinism: exact refuses the atomics whose words depend on invocation order
        (see :func:`_exact_atomic_error`), at the user's line and column."""
        found = _exact_atomic_error(toks, self.em.atomics)
        if found is not None:
            tok, message = found
            raise self.error(message, *where(tok))  # type: ignore[attr-defined]


def _user_position(body: SplicedBody, tok: Token) -> tuple[int, int]:
    """The user's (line, column) of a token of the spliced ``body``: a source specialisation
    spliced earlier on its line moves its column (review helpers 129, 132)."""
    row = tok.line - 1
    return (body.user_lines[row] if row < len(body.user_lines) else tok.line), splice_col(body.splices, row, tok.col)


# WGSL's own atomics, by op (the generated NAME_atomic_* helpers are in Emitter.atomics).
# atomicCompareExchangeWeak is not judged: a compare-exchange loop may build an order-free op
# (a max) as well as an order-dependent one, and the text does not say which.
_BUILTIN_ATOMICS = {
    "atomicAdd": "add",
    "atomicSub": "sub",
    "atomicMax": "max",
    "atomicMin": "min",
    "atomicAnd": "and",
    "atomicOr": "or",
    "atomicXor": "xor",
    "atomicExchange": "exchange",
}


def _function_spans(toks: list) -> dict[str, tuple[int, int]]:
    """Module-scope ``fn NAME(...) ... { ... }``: name -> (first token, one past its ``}``)."""
    spans: dict[str, tuple[int, int]] = {}
    depth = 0
    i = 0
    while i < len(toks):
        text = toks[i].text
        if text == "{":
            depth += 1
        elif text == "}":
            depth -= 1
        elif depth == 0 and text == "fn" and i + 1 < len(toks) and toks[i + 1].kind == "ident":
            j = i + 2
            while j < len(toks) and toks[j].text != "{":
                j += 1
            level = 0
            k = j
            while k < len(toks):
                if toks[k].text == "{":
                    level += 1
                elif toks[k].text == "}":
                    level -= 1
                    if level == 0:
                        break
                k += 1
            spans[toks[i + 1].text] = (i, k + 1)
            i = k + 1
            continue
        i += 1
    return spans


def _called(toks: list) -> set[str]:
    return {t.text for t, nxt in zip(toks, toks[1:]) if t.kind == "ident" and nxt.text == "("}


def _word_pointer_error(toks: list, words: dict[str, tuple[int, str]], atomics: dict[str, str] | None = None) -> tuple[Token, str] | None:
    """A pointer to a whole buffer stored as flat words (``&NAME``, ``&(NAME)``, ``&*&NAME``,
    not ``&NAME[i]``), with why: ``arrayLength`` of it counts words, not elements, and a loop
    ported from a kernel that declared ``array<vec3<f32>>`` ran three times past the data,
    silently. A pointer kept (``let p = &NAME``) or passed to a function reaches the same
    ``arrayLength``, so every such pointer is refused (review helpers 106, 110). Not refused:
    a binary ``&`` or ``&&``, and a name a function declares itself (a parameter or a local
    spelled like the binding: helper 112).

    ``atomics``: one-lane atomic i32/f32 buffers (name -> why their words are refused): one
    word an element, so ``arrayLength`` of a pointer to one is right, but any other pointer to
    the whole buffer reaches its u32 words (helper 156)."""
    atomics = atomics or {}
    if not words and not atomics:
        return None
    names = set(words) | set(atomics)
    shadowed = _local_names(toks, names)
    for i, t in enumerate(toks):
        before = toks[i - 1] if i > 0 else None
        if t.text != "&" or (before is not None and ((before.kind in ("ident", "number") and before.text != "return") or before.text in (")", "]", "&"))):
            continue  # a binary '&' (or the second '&' of '&&'): no address is taken
        j, opened = i + 1, 0
        while j < len(toks) and toks[j].text in ("(", "*", "&"):
            opened += toks[j].text == "("
            j += 1
        if j >= len(toks) or toks[j].text not in names or any(a <= i < b for a, b in shadowed.get(toks[j].text, ())):
            continue
        p = i - 1  # grouping parentheses opened just before it ('(&pts)[1]', not a call's 'f(&pts)')
        while p >= 0 and toks[p].text in ("*", "&"):
            p -= 1
        while p >= 0 and _grouping_paren(toks, p):
            opened, p = opened + 1, p - 1
        k = _after_closing(toks, j + 1, opened)  # only the parentheses around the pointer
        if k < len(toks) and toks[k].text in ("[", "."):
            continue  # a pointer to one word (&pts[i], &(pts)[i])
        name = toks[j].text
        length_of = i >= 2 and toks[i - 1].text == "(" and toks[i - 2].text == "arrayLength"
        if name in atomics:
            if length_of:
                continue  # one word an element: arrayLength(&acc) is its element count
            return t, f"a pointer to the whole of '{name}' reaches its words, as {name}[i] would: {atomics[name]}"
        lanes, wgsl = words[name]
        if length_of:
            count = f"arrayLength(&{name}) counts words: '{name}' ({wgsl}) is stored as flat words, {lanes} per element"
            return toks[i - 2], f"{count}; use {name}_len() for its element count"
        return t, (
            f"a pointer to '{name}' ({wgsl}, stored as flat words, {lanes} per element) reaches words, not elements "
            f"(arrayLength of it counts words); use {name}_len(), {name}_get(i) and {name}_set(i, v)"
        )
    return None


# Built-ins that take screen-space derivatives, which a compute shader has none of: naga said
# only "Entry point main at Compute is invalid", naming no line (review helper 181).
_DERIVATIVE_BUILTINS = {
    "textureSample": "textureSampleLevel(t, s, coords, 0.0)",
    "textureSampleBias": "textureSampleLevel(t, s, coords, level)",
    "textureSampleCompare": "textureSampleCompareLevel(t, s, coords, depth_ref)",
    **{
        name: "differences of neighbours you compute yourself"
        for name in ("dpdx", "dpdy", "fwidth", "dpdxCoarse", "dpdyCoarse", "fwidthCoarse", "dpdxFine", "dpdyFine", "fwidthFine")
    },
}


def _derivative_error(toks: list) -> tuple[Token, str] | None:
    """The first call of a built-in that needs screen-space derivatives, and why not."""
    for t, nxt in zip(toks, toks[1:]):
        if t.kind == "ident" and nxt.text == "(" and t.text in _DERIVATIVE_BUILTINS:
            return t, f"{t.text}() takes screen-space derivatives, which a compute shader does not have; use {_DERIVATIVE_BUILTINS[t.text]}"
    return None


def _flat_index_error(toks: list, refused: dict[str, str]) -> tuple[Token, str] | None:
    """An index into a buffer the body may not index itself (``pos[i]``, ``&pos[i]``,
    ``(pos)[i]``, ``(&pos)[i]``), with why (``refused``: name -> message, see
    ``unindexable_bindings``). A name a function declares itself is its own (helper 112)."""
    if not refused:
        return None
    shadowed = _local_names(toks, set(refused))
    for i, t in enumerate(toks[:-1]):
        if t.text not in refused or (i > 0 and toks[i - 1].text == ".") or any(a <= i < b for a, b in shadowed.get(t.text, ())):
            continue
        p, opened = i - 1, 0  # grouping parentheses, '&' and '*' around it: (pts)[i], (&pts)[i], (*&pts)[i]
        while p >= 0 and (toks[p].text in ("*", "&") or _grouping_paren(toks, p)):
            opened += toks[p].text == "("
            p -= 1
        k = _after_closing(toks, i + 1, opened)
        if k >= len(toks) or toks[k].text != "[":
            continue
        return t, refused[t.text]
    return None


def _grouping_paren(toks: list, p: int) -> bool:
    """Whether ``toks[p]`` opens grouping parentheses, not a call's or a constructor's."""
    return toks[p].text == "(" and not (p > 0 and (toks[p - 1].kind == "ident" or toks[p - 1].text in (">", ")", "]")))


def _after_closing(toks: list, k: int, opened: int) -> int:
    """The index after the ``opened`` closing parentheses starting at ``k`` (fewer when fewer follow)."""
    while k < len(toks) and toks[k].text == ")" and opened:
        k, opened = k + 1, opened - 1
    return k


def _local_names(toks: list, names: set[str]) -> dict[str, list[tuple[int, int]]]:
    """Where each of ``names`` is a function's own, as token spans: a parameter in the whole
    function; a ``let``/``var``/``const`` from the end of its declaration (its initializer
    still sees the binding) to the end of its block, or of its ``for`` statement when the
    ``for`` header declares it (helper 113). There the name is not the module-scope binding."""
    out: dict[str, list[tuple[int, int]]] = {}
    for a, b in _function_spans(toks).values():
        for k in range(a + 2, b - 1):
            t, nxt = toks[k], toks[k + 1]
            if t.text in names and nxt.text == ":" and toks[k - 1].text in ("(", ","):
                out.setdefault(t.text, []).append((a, b))  # a parameter
                continue
            if t.text not in ("let", "var", "const"):
                continue
            m = k + 1
            if m < b and toks[m].text == "<":  # var<function>
                while m < b and toks[m].text != ">":
                    m += 1
                m += 1
            if m >= b or toks[m].text not in names:
                continue
            first = _statement_end(toks, m, b)  # the declaration's ';': the name is the local after it
            if toks[k - 1].text == "(" and k >= 2 and toks[k - 2].text == "for":
                last = _for_end(toks, k - 1, b)
            else:
                depth, last = 0, m
                while last < b and depth >= 0:  # to the '}' that closes the declaring block
                    depth += {"{": 1, "}": -1}.get(toks[last].text, 0)
                    last += 1
            out.setdefault(toks[m].text, []).append((first, last))
    return out


def _statement_end(toks: list, i: int, end: int) -> int:
    """The index of the ``;`` that ends the statement holding token ``i`` (or where the
    enclosing bracket closes first)."""
    depth = 0
    while i < end:
        text = toks[i].text
        if text in ("(", "[", "{"):
            depth += 1
        elif text in (")", "]", "}"):
            if depth == 0:
                return i
            depth -= 1
        elif text == ";" and depth == 0:
            return i
        i += 1
    return end


def _for_end(toks: list, paren: int, end: int) -> int:
    """One past the ``}`` that ends the ``for`` statement whose header opens at ``paren``."""
    depth, i = 0, paren
    while i < end:  # the header's ')'
        depth += {"(": 1, ")": -1}.get(toks[i].text, 0)
        i += 1
        if depth == 0:
            break
    depth = 0
    while i < end:  # its body
        text = toks[i].text
        if text == "{":
            depth += 1
        elif text == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return end


def _reached_functions(body_toks: list, module_toks: Sequence[list]) -> set[str]:
    """Names of the module functions the body calls, directly or through other modules'."""
    bodies: dict[str, list] = {}
    for toks in module_toks:
        for name, (a, b) in _function_spans(toks).items():
            bodies[name] = toks[a:b]
    reached: set[str] = set()
    todo = [n for n in _called(body_toks) if n in bodies]
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        todo.extend(n for n in _called(bodies[name]) if n in bodies and n not in reached)
    return reached


def _function_tokens(toks: list, reached: set[str] | None) -> list:
    """The tokens ``toks`` of a module's functions in ``reached`` (all of them when None)."""
    if reached is None:
        return toks
    out: list = []
    for name, (a, b) in _function_spans(toks).items():
        if name in reached:
            out.extend(toks[a:b])
    return out


def _exact_atomic_error(tokens_iter: Any, helpers: dict[str, tuple[str, str]]) -> tuple[Any, str] | None:
    """The first atomic call ``determinism: exact`` refuses, as (token, message), or None.

    Allowed: the atomics whose final words do not depend on the order invocations reach them,
    integer add/sub/min/max/and/or/xor (and f32 min/max) as statements of their own (a
    histogram), also in a ``for`` header. Refused: exchange and compare-exchange (the last
    writer wins), f32 add (float summation order), and any atomic whose returned old value is
    used (a hand-made append), the generated ``NAME_atomic_*`` helpers and WGSL's own alike.
    (Reading a word other invocations still change, with ``atomicLoad`` or ``NAME_get``, is
    order-dependent too and is not detected.)"""
    toks = list(tokens_iter)
    for i, tok in enumerate(toks):
        if tok.kind != "ident" or i + 1 >= len(toks) or toks[i + 1].text != "(":
            continue
        found = helpers.get(tok.text)
        if found is None:
            op = _BUILTIN_ATOMICS.get(tok.text)
            if op is None:
                continue
            found = (op, "")
        op, scalar = found
        if op == "exchange":
            why = "the last invocation to reach it wins"
        elif op == "add" and scalar == "f32":
            why = "a float sum depends on the order invocations add in"
        elif not _discarded_call(toks, i):
            why = "the old value it returns depends on the order invocations reach it"
        else:
            continue
        return tok, (
            f"{tok.text}() is unordered ({why}), and this shader is determinism: exact (repeated runs give identical bytes); "
            "declare determinism: float_order, or call it as a statement of its own where that is enough"
        )
    return None


def _discarded_call(toks: list, i: int) -> bool:
    """Whether the call whose name is ``toks[i]`` is a statement of its own (``f(...);``,
    ``_ = f(...);``, or the init or update of a ``for`` header): its value is not used."""
    before = toks[i - 1].text if i else ";"
    if before == "=" and i >= 2 and toks[i - 2].text == "_":
        before = toks[i - 3].text if i >= 3 else ";"
    header = _in_for_header(toks, i)
    if before not in (";", "{", "}") and not (header and before == "("):
        return False
    depth = 0
    for j in range(i + 1, len(toks)):
        text = toks[j].text
        if text in ("(", "[", "{"):
            depth += 1
        elif text in (")", "]", "}"):
            depth -= 1
            if depth == 0:
                after = toks[j + 1].text if j + 1 < len(toks) else ""
                return after == ";" or (header and after == ")")
    return False


def _in_for_header(toks: list, i: int) -> bool:
    """Whether ``toks[i]`` stands directly inside a ``for (...)`` header's parentheses."""
    depth = 0
    for j in range(i - 1, -1, -1):
        text = toks[j].text
        if text in (")", "]", "}"):
            depth += 1
        elif text in ("(", "[", "{"):
            if depth == 0:
                return text == "(" and j > 0 and toks[j - 1].text == "for"
            depth -= 1
    return False


_CLOSING = {"(": ")", "[": "]", "{": "}"}

# Bounds on one statement, so naga (inside wgpu, in this process) never overflows its stack
# and kills the game: it recurses once per operator and per member or index step along an
# expression's path (it crashed at ~14,500 deep on an 8 MiB stack, ~16,700 for swizzles), and
# a nesting level costs about six of those (~2,450 nested calls, ~4,000 nested template types).
# The cost below bounds that depth from above whatever the parse (counts over the whole
# statement, nesting as its deepest point, every '<' as a possible template level), so it is
# sound without parsing WGSL's templates or precedence; long flat expressions stay well inside.
MAX_STATEMENT_COST = 8192
MAX_NESTING = 255
MAX_ELSE_IF = 1024  # naga crashed past ~6,150 arms
_NESTING_COST = 6
_OPERATORS = frozenset("+-*/%&|^>=!~")


def depth_error(text: str) -> tuple[Any, str] | None:
    """:func:`_chain_error` of WGSL ``text`` (a lowered source too: what a cache served was
    lowered elsewhere, perhaps by an older version without the bound)."""
    return _chain_error(tokens(text))


def _chain_error(tokens_iter) -> tuple[object, str] | None:
    """The token where a statement passes :data:`MAX_STATEMENT_COST` (operators, member and
    index steps, every ``<`` as a template level, plus the deepest bracket nesting times
    :data:`_NESTING_COST`) or brackets nest past :data:`MAX_NESTING`, as (token, message), or
    None. A sign on a number literal right after ``,``/``(``/``[`` is part of the literal (a
    table of negative constants costs nothing for its signs)."""
    cost = depth = deepest = 0
    prev = None
    braces = 0
    chains: dict[int, int] = {}  # brace depth -> 'else if' links of the chain open there
    for tok in tokens_iter:
        text = tok.text
        if text == "if" and tok.kind == "ident":
            # naga nests each 'else if' arm inside the one before and recurses through them; the
            # braces of the source never nest, so the brace reset below would hide the chain.
            links = chains.get(braces, 0) + 1 if prev is not None and prev.text == "else" else 0
            chains[braces] = links
            if links > MAX_ELSE_IF:
                return tok, f"an if chain of more than {MAX_ELSE_IF} 'else if' arms; the shader compiler would overflow its stack (use a switch)"
        if text == "{":
            braces += 1
        elif text == "}":
            chains.pop(braces, None)
            braces = max(0, braces - 1)
        if text in ("(", "["):
            depth += 1
            if depth > deepest:
                deepest = depth
                if depth > MAX_NESTING:
                    return tok, f"brackets nest more than {MAX_NESTING} deep here; the shader compiler would overflow its stack (use a loop or temporaries)"
            if text == "[":
                cost += 1
        elif text in (")", "]"):
            depth = max(0, depth - 1)
        elif text in (";", "{", "}"):
            cost = depth = deepest = 0
        elif text == "<":
            cost += _NESTING_COST
        elif text == ".":
            cost += 1
        elif text in _OPERATORS:
            sign = text == "-" and prev is not None and prev.text in (",", "(", "[")
            if not sign:
                cost += 1
        else:
            prev = tok
            continue
        if cost + _NESTING_COST * deepest > MAX_STATEMENT_COST:
            return tok, (
                f"this statement is too deep for the shader compiler (over {MAX_STATEMENT_COST} operators, member and index "
                "steps and nesting): it would overflow its stack; split it over several statements, or loop"
            )
        prev = tok
    return None


def _bracket_error(tokens_iter) -> tuple[object, str] | None:
    """The first unbalanced bracket, as (token, message), or None."""
    stack: list = []
    for tok in tokens_iter:
        if tok.text == "/*":  # the tokenizer's mark of a block comment never closed
            return tok, "'/*' is never closed; a '*/' is missing (the comment runs to the end of the file)"
        if tok.text in _CLOSING:
            stack.append(tok)
        elif tok.text in (")", "]", "}"):
            if not stack:
                return tok, f"'{tok.text}' closes nothing"
            opened = stack.pop()
            if _CLOSING[opened.text] != tok.text:
                if any(_CLOSING[o.text] == tok.text for o in stack):  # the opener lacks its closer
                    return opened, f"'{opened.text}' is never closed; a '{_CLOSING[opened.text]}' is missing before the '{tok.text}' on line {tok.line}"
                return tok, f"'{tok.text}' closes nothing (the innermost open bracket is the '{opened.text}' on line {opened.line})"
    if stack:
        return stack[-1], f"'{stack[-1].text}' is never closed; a '{_CLOSING[stack[-1].text]}' is missing"
    return None


def _dims(d) -> str:
    d = list(d)
    while len(d) > 1 and d[-1] == 1:
        d.pop()
    return "(" + ", ".join(map(str, d)) + ")"
