"""bindings.yaml text -> a frozen :class:`Schema`, with the YAML line of every error.

The YAML is composed to nodes (not loaded to plain dicts) so every key and value keeps its
position; each check raises :class:`SchemaError` at the node it is about.

Whatever the bytes, parsing ends quickly in a ``Schema`` or a :class:`SchemaError` with a line
and column (see :mod:`.yaml_nodes` for the composer's bounds: alias expansion, nesting depth,
characters YAML refuses); numbers past 64 bits are refused where they stand, and an
unexpected exception is still reported at the last node the parser looked at.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import threading
from collections import OrderedDict
from typing import Any

import yaml

from ..errors import ExpressionError, SchemaError, Span
from .conditions import ConditionSyntaxError, parse_condition
from .expressions import parse_expression
from .param_types import ParamTypeError, parse_param_type
from .schema import BINDING_KINDS, KIND_KEYS, Binding, Param, Schema, SpecParam, WorkgroupSize
from .structs import layout_struct
from .textures import ADDRESS_MODES, FILTERS, READ_WRITE_STORAGE_FORMATS, SAMPLE_TYPES, STORAGE_FORMATS, TEXTURE_DIMS
from .types import WGSL_KEYWORDS, WGSL_RESERVED, is_value_type, parse_value_type
from .yaml_nodes import EditorLines, compose_bounded, scalar_index

# Declarations of one binding name (each under its own 'when'): the overlap check compares
# every pair, so it is bounded (with conditions.MAX_ALTERNATIVES) to keep parsing fast.
MAX_SAME_NAME = 16

__all__ = ["parse", "MAX_PAGES", "MAX_WORKGROUP_INVOCATIONS"]

MAX_PAGES = 8
MAX_WORKGROUP_INVOCATIONS = 1024  # the most maxComputeInvocationsPerWorkgroup any adapter we know offers
TOP_KEYS = ("bindings", "params", "specialize", "determinism", "workgroup", "bake", "structs")
SPEC_KEYS = ("name", "kind", "options", "default")
_RESERVED_PREFIXES = ("zero_", "__", "col_base_", "col_len_")
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_MEMO_SIZE = 512
_memo: "OrderedDict[tuple[str, str | None], Schema]" = OrderedDict()
_memo_lock = threading.Lock()


def parse(text: str, path: str | None = None) -> Schema:
    """Parse bindings.yaml text into a frozen Schema; the same text answers the same object.

    Args:
        text: the YAML text.
        path: the file it came from, used in error messages.
    Raises:
        SchemaError: (or ExpressionError, a subclass) naming the YAML line and offending key.
    """
    if not isinstance(text, str):
        raise SchemaError(f"bindings.yaml must be text, not {type(text).__name__}", Span(path))
    key = (text, path)
    with _memo_lock:
        found = _memo.get(key)
        if found is not None:
            _memo.move_to_end(key)
            return found
    parser = _Parser(text, path)
    try:
        schema = parser.schema()
    except SchemaError:
        raise
    except Exception as exc:
        # Anything PyYAML or a value check lets through is most likely the user's file being
        # wrong: report it where the parser was looking, never as a bare Python error.
        detail = _cut(str(exc).splitlines()[0] if str(exc) else "", 120)
        raise SchemaError(
            f"invalid bindings.yaml ({type(exc).__name__}: {detail}); if this line looks right, it is an engine_plugin bug, please report",
            parser.span(parser.last),
        ) from None
    with _memo_lock:
        found = _memo.setdefault(key, schema)
        _memo.move_to_end(key)
        while len(_memo) > _MEMO_SIZE:
            _memo.popitem(last=False)
    return found


# Numbers in a schema are workgroup sizes and such; a 64-bit ceiling keeps a 5,000-digit
# literal from reaching int/str conversions (which raise ValueError past 4,300 digits).
_MAX_INT_BITS = 64


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _show(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters (values can be huge; never echo them whole)."""
    try:
        return _cut(repr(value), limit)
    except (ValueError, RecursionError):  # int -> str past 4,300 digits; self-nested lists
        return f"<a {type(value).__name__}>"


def _word_at(text: str, word: str) -> int:
    """The offset of ``word``'s first whole-word use in ``text`` (0 when it has none)."""
    found = re.search(rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])", text)
    return found.start() if found else 0


def _canonical(text: str) -> str:
    """The canonical WGSL spelling of a value type the caller already checked (vec3f -> vec3<f32>)."""
    vt = parse_value_type(text)
    assert vt is not None, f"{text!r} was checked to be a value type"
    return vt.wgsl


class _Parser:
    def __init__(self, text: str, path: str | None):
        self.text = text
        self.path = path
        self.positions = EditorLines(text)
        self.lines = self.positions.lines
        self._scalar_loader = yaml.SafeLoader("")
        self.last: Any = None  # the node looked at last: where an unexpected error is reported

    # -- positions and errors -------------------------------------------------------------
    def span(self, node_or_mark: Any, col_offset: int = 0) -> Span:
        mark = getattr(node_or_mark, "start_mark", node_or_mark)
        if mark is None:
            return Span(self.path, 1, 1, self.lines[0] if self.lines else None)
        line, col = self.positions.at(mark.index)
        text = self.lines[line - 1] if 0 < line <= len(self.lines) else None
        return Span(self.path, line, col + col_offset, text)

    def line_of(self, node: Any) -> int:
        """The 1-based line of ``node`` as an editor counts lines."""
        return self.positions.at(node.start_mark.index)[0]

    def col_of(self, node: Any) -> int:
        return self.positions.at(node.start_mark.index)[1]

    def error(self, node: Any, message: str, col_offset: int = 0, cls=SchemaError) -> SchemaError:
        return cls(message, self.span(node, col_offset))

    def index_span(self, index: int) -> Span:
        """The span of the character at ``index`` of the schema's text."""
        line, col = self.positions.at(index)
        return Span(self.path, line, col, self.lines[line - 1] if 0 < line <= len(self.lines) else None)

    def value_span(self, vnode: Any, offset: int) -> Span:
        """The span of character ``offset`` of scalar ``vnode``'s value (any style, one line or several)."""
        return self.index_span(scalar_index(self.text, vnode.start_mark.index, str(vnode.value), offset))

    def value(self, node: Any, _depth: int = 0) -> Any:
        self.last = node
        if _depth > 50:
            raise self.error(node, "YAML nested too deeply (a recursive alias?)")
        try:
            return self._value(node, _depth)
        except SchemaError:
            raise
        except Exception as exc:  # PyYAML's constructors raise anything on odd scalars (IndexError for `!!int ''`)
            detail = _cut(str(exc).splitlines()[0] if str(exc) else "", 120)
            raise self.error(node, f"invalid YAML value: {type(exc).__name__}: {detail}") from None

    def _value(self, node: Any, depth: int) -> Any:
        if isinstance(node, yaml.ScalarNode):
            if node.tag == "tag:yaml.org,2002:int" and len(node.value) > 40:  # before int() sees 5,000 digits
                raise self.error(node, f"number {_show(node.value, 24)} is too large (at most {_MAX_INT_BITS} bits)")
            v = self._scalar_loader.construct_object(node)
            if isinstance(v, int) and v.bit_length() > _MAX_INT_BITS:
                raise self.error(node, f"number {_show(node.value, 24)} is too large (at most {_MAX_INT_BITS} bits)")
            return v
        if isinstance(node, yaml.SequenceNode):
            return [self.value(n, depth + 1) for n in node.value]
        if isinstance(node, yaml.MappingNode):
            return {self.value(k, depth + 1): self.value(v, depth + 1) for k, v in node.value}
        return None

    def mapping(self, node: Any, what: str) -> list[tuple[str, Any, Any]]:
        """(key, key_node, value_node) of a mapping node, refusing duplicate and non-text keys."""
        self.last = node
        if not isinstance(node, yaml.MappingNode):
            raise self.error(node, f"{what} must be a mapping, found {self._describe(node)}")
        out: list = []
        seen: dict[str, int] = {}
        for k, v in node.value:
            key = self.value(k)
            if not isinstance(key, str):
                raise self.error(k, f"{what}: keys must be names, found {_show(key)}")
            if key in seen:
                raise self.error(k, f"{what}: key {key!r} given twice (first on line {seen[key]})")
            seen[key] = self.line_of(k)
            out.append((key, k, v))
        return out

    def sequence(self, node: Any, what: str) -> list[Any]:
        self.last = node
        if isinstance(node, yaml.ScalarNode) and self.value(node) is None:
            return []
        if not isinstance(node, yaml.SequenceNode):
            raise self.error(node, f"{what} must be a list, found {self._describe(node)}")
        return list(node.value)

    def _describe(self, node: Any) -> str:
        if isinstance(node, yaml.ScalarNode):
            v = self.value(node)
            return "nothing" if v is None else f"{type(v).__name__} {_show(v)}"
        return {yaml.SequenceNode: "a list", yaml.MappingNode: "a mapping"}.get(type(node), "?")

    def unknown_key(self, key: str, knode: Any, allowed, what: str) -> SchemaError:
        close = difflib.get_close_matches(key, list(allowed), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return self.error(knode, f"unknown key {key!r} in {what}{hint} (allowed: {', '.join(sorted(allowed))})")

    def string(self, node: Any, what: str) -> str:
        v = self.value(node)
        if isinstance(v, bool) or not isinstance(v, (str, int, float)) or v is None:
            raise self.error(node, f"{what} must be text, found {self._describe(node)}")
        return str(v)

    def boolean(self, node: Any, what: str) -> bool:
        v = self.value(node)
        if not isinstance(v, bool):
            raise self.error(node, f"{what} must be true or false, found {self._describe(node)}")
        return v

    def ident(self, node: Any, what: str, *, wgsl_name: bool = True) -> str:
        """An identifier; ``wgsl_name``: the generated WGSL uses it as a name of its own (a
        column name only ever ends a longer one: WGSL's reserved words are fine there)."""
        v = self.value(node)
        if isinstance(v, bool):
            raise self.error(node, f"{what} must be an identifier, but YAML reads {node.value!r} as {v}; quote it: '{node.value}'")
        if not isinstance(v, str) or not _IDENT_RE.match(v):
            raise self.error(node, f"{what} must be an identifier (letters, digits, _), found {self._describe(node)}")
        if v == "_":  # WGSL's phony-assignment token, never a name: it failed only at compile (helper 184)
            raise self.error(node, f"{what} '_' is not a WGSL identifier (it is the phony-assignment token); pick a name")
        if wgsl_name and v in WGSL_RESERVED:
            raise self.error(node, f"{what} {v!r} is a reserved word in WGSL (the compiler refuses it as a name); pick another")
        # Only the prefixes generated names take: col_base_/col_len_ are page columns' params
        # (a CSR kernel's col_idx is the user's own).
        if v in WGSL_KEYWORDS or v.startswith(_RESERVED_PREFIXES):
            raise self.error(node, f"{what} {v!r} is reserved (WGSL keywords, 'params', 'main', and names starting zero_, col_base_, col_len_ or __)")
        return v

    # -- the document ---------------------------------------------------------------------
    def schema(self) -> Schema:
        root = compose_bounded(self.text, self.path)
        if root is None:
            raise SchemaError("empty bindings.yaml; expected at least 'bindings:'", Span(self.path, 1, 1))
        top = self.mapping(root, "bindings.yaml")
        nodes = {}
        for key, knode, vnode in top:
            if key not in TOP_KEYS:
                raise self.unknown_key(key, knode, TOP_KEYS, "bindings.yaml")
            nodes[key] = (knode, vnode)
        if "bindings" not in nodes:
            raise SchemaError("bindings.yaml has no 'bindings:' list", Span(self.path, 1, 1))

        specialize = self.specialize(nodes["specialize"][1]) if "specialize" in nodes else ()
        self.spec_by_name = {sp.name: sp for sp in specialize}
        params = self.params(nodes["params"][1]) if "params" in nodes else ()
        self.param_names = {p.name for p in params}
        determinism = "exact"
        if "determinism" in nodes:
            vnode = nodes["determinism"][1]
            determinism = self.string(vnode, "determinism")
            if determinism not in ("exact", "float_order"):
                raise self.error(vnode, f"determinism must be 'exact' or 'float_order', not {determinism!r}")
        workgroup = self.workgroup(nodes["workgroup"][1]) if "workgroup" in nodes else WorkgroupSize((64, 1, 1))
        self.member_keys: list[tuple[str, str, int, int]] = []
        self.structs = self.parse_structs(nodes["structs"][1]) if "structs" in nodes else ()
        bindings = self.bindings(nodes["bindings"][1])
        bake = self.bake(nodes["bake"][1], specialize, bindings) if "bake" in nodes else None
        return Schema(
            bindings=bindings,
            params=params,
            specialize=specialize,
            determinism=determinism,
            workgroup=workgroup,
            bake=bake,
            text=self.text,
            path=self.path,
            structs=self.structs,
            member_keys=tuple(self.member_keys),
        )

    def workgroup(self, node: Any) -> tuple:
        """1 to 3 sizes; each a positive int or the name of a ``kind: workgroup`` specialisation."""
        v = self.value(node)
        dims = v if isinstance(v, list) else [v]

        def ok(d: Any) -> bool:
            if isinstance(d, str):
                sp = self.spec_by_name.get(d)
                return sp is not None and sp.kind == "workgroup"
            return isinstance(d, int) and not isinstance(d, bool) and d > 0

        if not 1 <= len(dims) <= 3 or not all(ok(d) for d in dims):
            raise self.error(
                node,
                f"workgroup must be 1 to 3 positive ints (or kind: workgroup specialisations), not {_show(v)}; e.g. workgroup: 64 or workgroup: [8, 8]",
            )
        dims = list(dims) + [1] * (3 - len(dims))
        sizes = [max(int(o) for o in self.spec_by_name[d].options) if isinstance(d, str) else d for d in dims]
        if sizes[0] * sizes[1] * sizes[2] > MAX_WORKGROUP_INVOCATIONS:
            raise self.error(
                node, f"workgroup {_show(v)} can be {sizes[0] * sizes[1] * sizes[2]} invocations; at most {MAX_WORKGROUP_INVOCATIONS} run in one workgroup"
            )
        return WorkgroupSize((dims[0], dims[1], dims[2]))

    def params(self, node: Any) -> tuple[Param, ...]:
        out: list = []
        seen: dict[str, int] = {}
        for item in self.sequence(node, "params"):
            cut = self._stitch_cut_type(item)
            entry = dict((k, (kn, vn)) for k, kn, vn in self.mapping(item, "a param"))
            for k, (kn, _) in entry.items():
                if k not in ("name", "type"):
                    raise self.unknown_key(k, kn, ("name", "type"), "a param")
            if "name" not in entry or "type" not in entry:
                raise self.error(item, "a param needs 'name' and 'type', e.g. { name: radius, type: f32 }")
            name = self.ident(entry["name"][1], "param name")
            if name == "n":
                raise self.error(entry["name"][1], "param 'n' is built in (the dispatch size); choose another name")
            if name in ("nx", "ny", "nz"):
                # count expressions read them as the grid's axes: a param of that name was shadowed
                raise self.error(entry["name"][1], f"param {name!r} is built in (the dispatch grid's {name[1]} axis in count expressions); choose another name")
            if name in seen:
                raise self.error(entry["name"][1], f"param {name!r} declared twice (first on line {seen[name]})")
            tnode = entry["type"][1]
            try:
                ptype = parse_param_type(cut if cut is not None else self.string(tnode, "param type"))
            except ParamTypeError as exc:
                raise self.error(tnode, str(exc)) from None
            seen[name] = self.line_of(item)
            out.append(Param(name, ptype.wgsl, self.line_of(item)))
        return tuple(out)

    def _stitch_cut_type(self, item: Any) -> str | None:
        """``{ name: p, type: array<vec4<f32>, 6> }`` unquoted: a YAML flow mapping splits at
        each comma, leaving type ``array<vec4<f32>`` and a key ``6>`` (one more key a nesting
        level: ``array<array<vec4<f32>, 2>, 3>`` leaves ``2>`` and ``3>``). Put the type back
        together from those scalars, and drop the stray keys from ``item``;
        answers the whole type text, or None."""
        if not isinstance(item, yaml.MappingNode):
            return None
        pairs = list(item.value)
        at = next((i for i, (k, _) in enumerate(pairs) if isinstance(k, yaml.ScalarNode) and k.value == "type"), None)
        if at is None or not isinstance(pairs[at][1], yaml.ScalarNode) or pairs[at][1].style is not None:
            return None  # no type, or a quoted one (whole as written)
        tnode = pairs[at][1]
        text, depth, end = tnode.value, tnode.value.count("<") - tnode.value.count(">"), at
        while depth > 0 and end + 1 < len(pairs):
            k, v = pairs[end + 1]
            if not (
                isinstance(k, yaml.ScalarNode)
                and k.style is None
                and isinstance(v, yaml.ScalarNode)
                and v.value == ""
                and k.value.count(">") > k.value.count("<")
            ):
                break
            end += 1
            depth -= k.value.count(">") - k.value.count("<")
        if end == at or depth != 0:
            return None
        # From the scalars YAML read (never the raw text: a comment or a tag between them is not type)
        text = ", ".join([tnode.value] + [k.value for k, _ in pairs[at + 1 : end + 1]])
        item.value = pairs[: at + 1] + pairs[end + 1 :]
        return text

    def specialize(self, node: Any) -> tuple[SpecParam, ...]:
        out: list = []
        seen: dict[str, int] = {}
        for item in self.sequence(node, "specialize"):
            entry = {k: (kn, vn) for k, kn, vn in self.mapping(item, "a specialize entry")}
            for k, (kn, _) in entry.items():
                if k not in SPEC_KEYS:
                    raise self.unknown_key(k, kn, SPEC_KEYS, "a specialize entry")
            if "name" not in entry:
                raise self.error(item, "a specialize entry needs 'name'")
            name = self.ident(entry["name"][1], "specialisation name")
            if name in seen:
                raise self.error(entry["name"][1], f"specialisation {name!r} declared twice (first on line {seen[name]})")
            kind = self.string(entry["kind"][1], "kind") if "kind" in entry else None
            if kind is not None and kind not in ("type", "named", "source", "workgroup"):
                raise self.error(entry["kind"][1], f"specialize kind must be 'type', 'named', 'source' or 'workgroup', not {kind!r}")
            options: tuple[str, ...] = ()
            if "options" in entry:
                onodes = self.sequence(entry["options"][1], "options")
                opts: dict[str, None] = {}  # ordered, with a constant-time "listed twice" (a list was quadratic: helper 110)
                for on in onodes:
                    o = self.string(on, "an option")
                    if o in opts:
                        raise self.error(on, f"option {o!r} listed twice")
                    opts[o] = None
                options = tuple(opts)
            if kind is None:
                if not options:
                    raise self.error(item, f"specialisation {name!r} needs 'options' (or kind: source)")
                kind = "type" if all(is_value_type(o) for o in options) else "named"
            if kind in ("type", "named", "workgroup") and not options:
                raise self.error(item, f"specialisation {name!r} of kind {kind} needs a non-empty 'options' list")
            if kind == "type":
                for on, o in zip(self.sequence(entry["options"][1], "options"), options):
                    if not is_value_type(o):
                        raise self.error(on, f"type option {o!r} of {name!r} is not u32, i32, f32 or a vec2/3/4 of them")
                options = tuple(_canonical(o) for o in options)
            elif kind == "workgroup":
                for on, o in zip(self.sequence(entry["options"][1], "options"), options):
                    if not o.isdigit() or not 1 <= int(o) <= MAX_WORKGROUP_INVOCATIONS:
                        raise self.error(
                            on, f"workgroup option {o!r} of {name!r} must be a size from 1 to {MAX_WORKGROUP_INVOCATIONS} (it becomes const {name}: u32)"
                        )
            elif kind == "named":
                for on, o in zip(self.sequence(entry["options"][1], "options"), options):
                    if not _IDENT_RE.match(o):
                        raise self.error(on, f"option {o!r} of {name!r} must be an identifier (it becomes const {name}_{o})")
            default = None
            if "default" in entry:
                dnode = entry["default"][1]
                default = self.string(dnode, "default")
                if kind == "type" and is_value_type(default):
                    default = _canonical(default)
                if options and default not in options:
                    raise self.error(dnode, f"default {default!r} of {name!r} is not one of its options: {', '.join(options)}")
            seen[name] = self.line_of(item)
            out.append(SpecParam(name, kind, options, default, self.line_of(item)))
        return tuple(out)

    def bake(self, node: Any, specialize, bindings) -> tuple:
        by_name = {sp.name: sp for sp in specialize}
        tables = {b.name for b in bindings if b.kind == "columns"}
        out = []
        for item in self.sequence(node, "bake"):
            combo: list = []
            for key, knode, vnode in self.mapping(item, "a bake entry"):
                if key == "columns" and "columns" not in by_name:
                    combo.append(("columns", self.bake_columns(vnode, tables)))
                    continue
                sp = by_name.get(key)
                if sp is None:
                    raise self.unknown_key(key, knode, by_name, "a bake entry (specialisation names)")
                val = self.string(vnode, f"bake value of {key}")
                if sp.kind == "type" and is_value_type(val):
                    val = _canonical(val)
                if sp.options and val not in sp.options:
                    raise self.error(vnode, f"{key}={val!r} is not one of its options: {', '.join(sp.options)}")
                combo.append((key, val))
            out.append(tuple(sorted(combo)))
        return tuple(out)

    def bake_columns(self, vnode: Any, tables: set[str]) -> tuple:
        """``columns: { cols: [weight, bias] }`` in a bake entry: the table columns a variant
        names (its ``NAME_col_*`` constants), so such a variant bakes without a usage log."""
        out = []
        for table, tnode, cnode in self.mapping(vnode, "bake columns (table: [column, ...])"):
            if table not in tables:
                raise self.error(tnode, f"bake columns name {table!r}, which is not a kind: columns binding (tables: {', '.join(sorted(tables)) or 'none'})")
            names = tuple(self.ident(c, f"a column of {table!r}", wgsl_name=False) for c in self.sequence(cnode, f"columns of {table!r}"))
            out.append((table, names))
        return tuple(sorted(out))

    # -- bindings -------------------------------------------------------------------------
    def bindings(self, node: Any) -> tuple[Binding, ...]:
        items = self.sequence(node, "bindings")
        out: list[Binding] = []
        for item in items:
            out.append(self.binding(item))
        self.check_names(out)
        self.check_pages(out)
        self.check_expressions(out)
        return tuple(out)

    def binding(self, item: Any) -> Binding:
        entries = self.mapping(item, "a binding")
        by_key = {k: (kn, vn) for k, kn, vn in entries}
        if "name" not in by_key:
            raise self.error(item, "a binding needs 'name', e.g. { name: src, kind: buffer, element: f32 }")
        name = self.ident(by_key["name"][1], "binding name")
        kind = "buffer"
        if "kind" in by_key:
            kind = self.string(by_key["kind"][1], "kind")
            if kind not in BINDING_KINDS:
                close = difflib.get_close_matches(kind, BINDING_KINDS, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise self.error(by_key["kind"][1], f"binding {name!r}: unknown kind {kind!r}{hint} (kinds: {', '.join(BINDING_KINDS)})")
        allowed = KIND_KEYS[kind]
        all_keys = set().union(*KIND_KEYS.values())
        for k, kn, _ in entries:
            if k not in allowed:
                if k in all_keys:
                    raise self.error(kn, f"binding {name!r}: key {k!r} does not apply to kind {kind} (it takes: {', '.join(sorted(allowed))})")
                raise self.unknown_key(k, kn, allowed, f"binding {name!r}")
        f: dict[str, Any] = {"name": name, "kind": kind, "line": self.line_of(item), "col": self.col_of(item)}
        # Where each key's value starts (inside its opening quote when quoted).
        f["key_lines"] = tuple((k, self.line_of(vn), self.col_of(vn) + (getattr(vn, "style", None) in ("'", '"'))) for k, _, vn in entries)

        def node(k):
            return by_key[k][1]

        accesses = ("write", "read", "read_write") if kind == "storage_texture" else ("read", "read_write")
        if kind == "storage_texture":
            f["access"] = "write"
        if "access" in by_key:
            access = self.string(node("access"), "access")
            if access not in accesses:
                raise self.error(node("access"), f"binding {name!r}: access must be {' or '.join(repr(a) for a in accesses)}, not {access!r}")
            f["access"] = access
        for key, choices in (
            ("dim", TEXTURE_DIMS),
            ("sample", tuple(SAMPLE_TYPES)),
            ("format", tuple(STORAGE_FORMATS)),
            ("filter", FILTERS),
            ("address", ADDRESS_MODES),
        ):
            if key in by_key:
                value = self.string(node(key), key)
                if value not in choices:
                    raise self.error(node(key), f"binding {name!r}: {key} must be one of {', '.join(choices)}, not {value!r}")
                f[key] = value
        if "size" in by_key:
            snode = node("size")
            items = self.sequence(snode, "size") if isinstance(snode, yaml.SequenceNode) else [snode]
            if not 1 <= len(items) <= 3:
                raise self.error(snode, f"binding {name!r}: size takes 1 to 3 count expressions (width, height, depth), e.g. size: [nx, ny]")
            f["size"] = tuple(self.expression(i, name, "size") for i in items)
        for flag in ("live", "append", "bits", "atomic", "clear"):
            if flag in by_key:
                f[flag] = self.boolean(node(flag), f"binding {name!r}: {flag}")
        if "element" in by_key:
            f["element"] = self.element(node("element"), name)
        if "page" in by_key:
            f["page"] = self.ident(node("page"), f"binding {name!r}: page")
        if "when" in by_key:
            f["when"] = self.condition(node("when"), name)
        for ek in ("count", "capacity"):
            if ek in by_key:
                f[ek] = self.expression(node(ek), name, ek)
        b = Binding(**f)
        self.check_binding(b, item, by_key)
        return b

    def parse_structs(self, node: Any) -> tuple:
        """``structs: { Particle: { pos: vec3<f32>, mass: f32 } }``: members in order."""
        out = []
        for sname, snode, fnode in self.mapping(node, "structs (Name: { member: type, ... })"):
            ident = self.ident(snode, "struct name")
            if ident in self.spec_by_name or ident in self.param_names:
                raise self.error(snode, f"struct {ident!r} has the name of a specialisation or param")
            members = []
            for mname, mnode, tnode in self.mapping(fnode, f"struct {ident!r} (member: type, ...)"):
                member = self.ident(mnode, f"a member of struct {ident!r}")
                vt = parse_value_type(self.string(tnode, f"{ident}.{member}'s type"))
                if vt is None:
                    raise self.error(tnode, f"{ident}.{member} must be u32, i32, f32 or a vec2/3/4 of them, not {self.value(tnode)!r}")
                members.append((member, vt))
                self.member_keys.append((ident, member, self.line_of(mnode), self.col_of(mnode)))
            if not members:
                raise self.error(snode, f"struct {ident!r} has no members")
            out.append(layout_struct(ident, members))
        return tuple(out)

    def element(self, vnode: Any, name: str) -> str:
        text = self.string(vnode, f"binding {name!r}: element")
        vt = parse_value_type(text)
        if vt is not None:
            return vt.wgsl
        if any(s.name == text for s in getattr(self, "structs", ())):
            return text
        sp = self.spec_by_name.get(text)
        if sp is not None:
            if sp.kind != "type":
                raise self.error(vnode, f"binding {name!r}: element {text!r} names a {sp.kind} specialisation; only type specialisations can be elements")
            return text
        raise self.error(
            vnode, f"binding {name!r}: element must be u32, i32, f32, a vec2/3/4 of them, a type specialisation or a struct of structs:, not {text!r}"
        )

    def condition(self, vnode: Any, name: str):
        text = self.string(vnode, f"binding {name!r}: when")
        try:
            cond = parse_condition(text)
        except ConditionSyntaxError as exc:
            raise SchemaError(f"binding {name!r}: when: {exc}", self.value_span(vnode, exc.offset)) from None
        for conj in cond.alternatives:
            for pname, opts in conj:
                sp = self.spec_by_name.get(pname)
                at = self.value_span(vnode, max(0, text.find(pname)))
                if sp is None:
                    raise SchemaError(
                        f"binding {name!r}: when names {pname!r}, which is not a specialisation (known: {', '.join(self.spec_by_name) or 'none'})", at
                    )
                if not sp.options:
                    raise SchemaError(f"binding {name!r}: when names {pname!r}, a source specialisation with no options", at)
                allowed = set(sp.options)
                bad = sorted(o for o in opts if o not in allowed)
                if bad:
                    raise SchemaError(f"binding {name!r}: when: {pname}={bad[0]!r} is not an option of {pname} ({', '.join(sp.options)})", at)
        return cond

    def expression(self, vnode: Any, name: str, key: str):
        text = self.string(vnode, f"binding {name!r}: {key}")
        try:
            return parse_expression(text)
        except ExpressionError as exc:
            col = (exc.col or 1) - 1
            raise ExpressionError(f"binding {name!r}: {key}: {exc.message}", self.value_span(vnode, col)) from None

    def check_binding(self, b: Binding, item: Any, by_key: dict) -> None:
        def at(k):
            return by_key[k][1] if k in by_key else item

        name = b.name
        if b.kind == "buffer":
            if b.element is None:
                raise self.error(item, f"buffer binding {name!r} needs 'element' (u32, i32, f32, vecN<...> or a type specialisation)")
            if any(s.name == b.element for s in self.structs) and (b.bits or b.atomic):
                raise self.error(
                    at("bits" if b.bits else "atomic"),
                    f"binding {name!r}: a struct element has no raw words or atomics; declare an atomic<u32> buffer beside it",
                )
            if b.is_output and b.access != "read_write":
                key = "count" if b.count is not None else "capacity"
                raise self.error(
                    at(key), f"binding {name!r} has a {key}, so the host allocates it as an output, but its access is 'read'; use access: read_write"
                )
            if b.append:
                if b.capacity is None:
                    raise self.error(at("append"), f"append binding {name!r} needs 'capacity' (the most elements it can hold)")
                if b.count is not None:
                    raise self.error(at("count"), f"append binding {name!r} takes 'capacity', not 'count' (its count is the live counter)")
            elif b.capacity is not None:
                raise self.error(at("capacity"), f"binding {name!r}: 'capacity' goes with append: true; a plain output takes 'count'")
            if "clear" in by_key and not b.is_output:
                raise self.error(
                    at("clear"), f"binding {name!r}: clear applies to outputs the host allocates (count or capacity); the caller's buffers are never cleared"
                )
            if b.live:
                if b.count is None or b.count.text.strip() != "n":
                    raise self.error(at("live"), f'binding {name!r}: live: true needs count: "n" (the output spans the dispatch)')
            if b.atomic:
                if b.access != "read_write":
                    raise self.error(at("atomic"), f"binding {name!r}: atomic words need access: read_write")
                vt = parse_value_type(b.element)
                if vt is not None and vt.lanes != 1:
                    raise self.error(at("element"), f"binding {name!r}: an atomic buffer holds one-lane elements (u32, i32, f32), not {b.element}")
                if b.append:
                    raise self.error(at("atomic"), f"binding {name!r}: append and atomic do not combine")
        elif b.kind == "page":
            if b.atomic and b.access != "read_write":
                raise self.error(at("atomic"), f"page {name!r}: atomic words need access: read_write")
        elif b.kind == "column":
            if b.page is None:
                raise self.error(item, f"column {name!r} needs 'page' (the name of a kind: page binding)")
            if b.element is None:
                raise self.error(item, f"column {name!r} needs 'element'")
            if any(s.name == b.element for s in self.structs):
                raise self.error(
                    at("element"), f"column {name!r}: a page column holds u32, i32, f32 or vectors of them; bind struct elements as a kind: buffer"
                )
        elif b.kind == "storage_texture":
            if b.format is None:
                raise self.error(item, f"storage texture {name!r} needs 'format' (one of {', '.join(STORAGE_FORMATS)})")
            if b.size and b.access == "read":
                raise self.error(at("size"), f"storage texture {name!r} has a size, so the host allocates it as an output; its access cannot be 'read'")
            if b.access == "read_write" and b.format not in READ_WRITE_STORAGE_FORMATS:
                raise self.error(
                    at("format"),
                    f"storage texture {name!r}: access read_write takes {', '.join(READ_WRITE_STORAGE_FORMATS)} (WebGPU's read-write storage formats), "
                    f"not {b.format}; write it with access: write, or read it through a kind: texture binding",
                )
            if b.access == "read" and b.format == "bgra8unorm":
                raise self.error(at("format"), f"storage texture {name!r}: bgra8unorm is a write-only storage format; read it through a kind: texture binding")
            if b.dim == "2d" and len(b.size) > 2:
                raise self.error(at("size"), f"storage texture {name!r} is 2d: its size is [width, height]")
        elif b.kind == "domain_count":
            pass

    def check_names(self, bindings: list[Binding]) -> None:
        first: dict[str, list[Binding]] = {}
        for b in bindings:
            if len(first.get(b.name, ())) >= MAX_SAME_NAME:
                raise SchemaError(
                    f"binding {b.name!r} is declared {MAX_SAME_NAME + 1} times; at most {MAX_SAME_NAME} declarations may share a name "
                    "(one per set of 'when' conditions)",
                    self._bspan(b),
                )
            for other in first.get(b.name, []):
                if b.when is None or other.when is None or b.when.may_hold_with(other.when):
                    raise SchemaError(
                        f"binding {b.name!r} is declared again (first on line {other.line}) and both can exist in one variant; "
                        "give one a different name or 'when' conditions that never hold together",
                        self._bspan(b),
                    )
            first.setdefault(b.name, []).append(b)
            if b.name in self.param_names:
                raise SchemaError(f"binding {b.name!r} has the name of a param", self._bspan(b))
            if b.name in self.spec_by_name:
                raise SchemaError(f"binding {b.name!r} has the name of a specialisation", self._bspan(b))
        # names a binding generates (append counters) must not be taken by another binding
        names = {b.name for b in bindings}
        for b in bindings:
            if b.append and f"{b.name}_count" in names:
                raise SchemaError(f"append binding {b.name!r} needs the name '{b.name}_count' for its counter, but a binding has it", self._bspan(b))
        domain = [b for b in bindings if b.kind == "domain_count"]
        for i, b in enumerate(domain):
            for other in domain[:i]:
                if b.when is None or other.when is None or b.when.may_hold_with(other.when):
                    raise SchemaError(
                        f"a second domain_count binding {b.name!r} (first: {other.name!r} on line {other.line}); a dispatch has one live count", self._bspan(b)
                    )

    def _bspan(self, b: Binding, key: str | None = None) -> Span:
        line, col = b.key_pos(key) if key else (b.line, b.col)
        return Span(self.path, line, col, self.lines[line - 1] if 0 < line <= len(self.lines) else None)

    def check_pages(self, bindings: list[Binding]) -> None:
        page_names: list[str] = []
        for b in bindings:
            if b.kind == "page" and b.name not in page_names:
                page_names.append(b.name)
                if len(page_names) > MAX_PAGES:
                    raise SchemaError(
                        f"page {b.name!r} is a ninth page binding; at most {MAX_PAGES} pages bind in one kernel "
                        "(the storage-buffer cap): put more columns in each page",
                        self._bspan(b),
                    )
        for i, b in enumerate(bindings):
            if b.kind != "column":
                continue
            # The pages of that name that can stand in a variant with this column.
            pages = [p for p in bindings if p.kind == "page" and p.name == b.page and (p.when is None or b.when is None or p.when.may_hold_with(b.when))]
            if not pages:
                raise SchemaError(f"column {b.name!r} stands in page {b.page!r}, which is not a kind: page binding", self._bspan(b, "page"))
            explicit = any(k == "access" for k, _, _ in b.key_lines)
            if not explicit and len({p.access for p in pages}) == 1:
                # Shown in the schema as its page's; the lowering decides per variant either way.
                bindings[i] = dataclasses.replace(b, access=pages[0].access)
            if explicit and b.access == "read_write":
                for page in pages:
                    if page.access != "read_write":
                        raise SchemaError(
                            f"column {b.name!r} is read_write but its page {b.page!r} (line {page.line}) is read-only",
                            self._bspan(b, "access"),
                        )

    def check_expressions(self, bindings: list[Binding]) -> None:
        names = {b.name for b in bindings}
        constants = {name for name, sp in self.spec_by_name.items() if sp.kind == "workgroup"}  # fixed per variant
        known = {"n", "nx", "ny", "nz"} | self.param_names | constants
        for b in bindings:
            checks = [(key, getattr(b, key)) for key in ("count", "capacity")] + [("size", e) for e in b.size]
            for key, expr in checks:
                if expr is None:
                    continue
                line, col = b.key_pos(key)
                start = self.positions.starts[line - 1] + col - 1 if 0 < line <= len(self.positions.starts) else 0
                for var in sorted(expr.names):
                    if var not in known or (var in constants and var in self.param_names):
                        why = (
                            f"{var!r} is both a param and a kind: workgroup specialisation; rename one"
                            if var in known
                            else f"unknown name {var!r}; expressions use n (nx, ny, nz per axis), params ({', '.join(sorted(self.param_names)) or 'none'}), "
                            f"kind: workgroup specialisations ({', '.join(sorted(constants)) or 'none'}) and len(binding)"
                        )
                        raise ExpressionError(
                            f"binding {b.name!r}: {key}: {why}", self.index_span(scalar_index(self.text, start, expr.text, _word_at(expr.text, var)))
                        )
                for ref in sorted(expr.lengths):
                    if ref not in names:
                        raise ExpressionError(
                            f"binding {b.name!r}: {key}: len({ref}) names no binding",
                            self.index_span(scalar_index(self.text, start, expr.text, _word_at(expr.text, ref))),
                        )
                    if ref == b.name:
                        raise ExpressionError(f"binding {b.name!r}: {key} refers to its own length", Span(self.path, line, col))
