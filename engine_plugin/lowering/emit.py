"""WGSL emitters: one small function per binding kind, each writing declarations and accessors.

Every emitted line carries the bindings.yaml line of the binding it serves (``origin``), so a
compiler message about generated code still points into the user's own files, and every
generated name is registered so a clash with the body's names is caught before wgpu sees it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .structs import StructType
from .types import ValueType

__all__ = ["BY_VALUE", "Emitter", "GeneratedNameClash", "by_value", "from_word", "natural_element", "to_word"]


class GeneratedNameClash(Exception):
    """Two schema entries generate the same WGSL name; ``first``/``second`` are (line, what)."""

    def __init__(self, name: str, first: tuple[int, str], second: tuple[int, str]):
        super().__init__(name)
        self.name, self.first, self.second = name, first, second


_LANE = ("x", "y", "z", "w")
_KINDS = ("f32", "i32", "u32")  # a table column's stored kinds, by their kind number
_ZERO = {"f32": "0.0", "i32": "0i", "u32": "0u"}


# A `from` value -> that value as a `to`: the one rule for every GPU-side cast by value (a
# chained Output's conversion dispatch, a table's accessors). WGSL float -> int conversion
# saturates; NaN (which WGSL leaves undefined: -2**31 on lavapipe and the H200) is 0, told by its
# bits (a compiler may fold `v != v`); i32 <-> u32 saturates the same way: never wraps.
_NAN = "(bitcast<u32>({v}) & 0x7fffffffu) > 0x7f800000u"
BY_VALUE = {
    ("f32", "i32"): "select(i32({v}), 0i, " + _NAN + ")",
    ("f32", "u32"): "select(u32({v}), 0u, " + _NAN + ")",
    ("i32", "f32"): "f32({v})",
    ("i32", "u32"): "u32(max({v}, 0))",
    ("u32", "f32"): "f32({v})",
    ("u32", "i32"): "i32(min({v}, 2147483647u))",
}


def by_value(value: str, source: str, target: str) -> str:
    """The ``source``-typed WGSL expression ``value`` cast by value to ``target`` (``BY_VALUE``)."""
    return value if source == target else BY_VALUE[(source, target)].format(v=value)


def from_word(expr: str, scalar: str) -> str:
    """A u32 word expression reinterpreted as ``scalar``."""
    return expr if scalar == "u32" else f"bitcast<{scalar}>({expr})"


def to_word(expr: str, scalar: str) -> str:
    """A ``scalar`` expression reinterpreted as a u32 word."""
    return expr if scalar == "u32" else f"bitcast<u32>({expr})"


def natural_element(vt: ValueType) -> str:
    """The WGSL element type a buffer of ``vt`` is declared with (not bits, not atomic).

    Scalars, ``vec2`` and ``vec4`` are declared as themselves (``array<vec4<f32>>``): their
    storage stride (4, 8, 16 bytes) equals the flat host layout, and a ``vec4`` is then one
    16-byte access instead of four scalar ones. A ``vec3`` would take a 16-byte stride in WGSL
    storage, so it stays flat words (12 bytes an element, the seed's layout).
    """
    return vt.scalar if vt.lanes == 3 else vt.wgsl


@dataclass
class Emitter:
    """Collects generated lines (with their origin line) and the names they declare.

    Locals and parameters of generated functions all start with ``zero_`` (reserved for the
    lowering), so a binding named ``b`` or ``i`` is never shadowed inside its own accessors.
    """

    lines: list[tuple[str, int]] = field(default_factory=list)
    names: dict[str, tuple[int, str]] = field(default_factory=dict)  # name -> (origin line, what)
    atomics: dict[str, tuple[str, str]] = field(default_factory=dict)  # helper name -> (op, scalar)

    def emit(self, text: str, origin: int) -> None:
        for row in text.split("\n"):
            self.lines.append((row, origin))

    def declare(self, name: str, origin: int, what: str) -> None:
        """Register a generated name; the same name generated for two things is a clash."""
        first = self.names.setdefault(name, (origin, what))
        if first != (origin, what):
            raise GeneratedNameClash(name, first, (origin, what))

    def fn(self, name: str, signature: str, body: str, origin: int, what: str) -> None:
        """Emit ``fn name(signature) { body }`` on one line when short, several otherwise."""
        self.declare(name, origin, what)
        if "\n" in body:
            inner = "\n".join("    " + b for b in body.split("\n"))
            self.emit(f"fn {name}{signature} {{\n{inner}\n}}", origin)
        else:
            self.emit(f"fn {name}{signature} {{ {body} }}", origin)

    # -- shared pieces --------------------------------------------------------------------------
    def vector_get(self, vt: ValueType, read_word) -> str:
        """``return <vector or scalar>`` built from words ``read_word(k)`` (k = lane)."""
        if vt.lanes == 1:
            return f"return {read_word(0)};"
        parts = ", ".join(read_word(k) for k in range(vt.lanes))
        return f"return {vt.wgsl}({parts});"

    def vector_set(self, vt: ValueType, write_lane) -> str:
        if vt.lanes == 1:
            return write_lane(0, "zero_v")
        return " ".join(write_lane(k, f"zero_v.{_LANE[k]}") for k in range(vt.lanes))

    def atomic_ops(self, prefix: str, array: str, index_code: str, scalar: str, origin: int, what: str) -> None:
        """``PREFIX_atomic_*`` on one-lane words of ``array`` at ``b`` (computed by index_code).

        u32 gets native atomics; i32 add/and/or/xor are native on the bits (two's complement),
        i32 min/max and every f32 op but exchange are compare-and-swap loops, because WGSL has
        no signed or float atomics on u32 words.
        """
        t = scalar
        ptr = f"&{array}[zero_b]"
        sig = f"(zero_i: u32, zero_v: {t}) -> {t}"
        vword = to_word("zero_v", t)
        exchange = from_word(f"atomicExchange({ptr}, {vword})", t)
        self.fn(f"{prefix}_atomic_exchange", sig, f"{index_code} return {exchange};", origin, what)
        self.atomics[f"{prefix}_atomic_exchange"] = ("exchange", t)
        native = {"u32": ("min", "max", "add", "and", "or", "xor"), "i32": ("add", "and", "or", "xor"), "f32": ()}[t]
        cas = {"u32": (), "i32": ("min", "max"), "f32": ("add", "min", "max")}[t]
        for op in native:
            call = f"atomic{op.capitalize()}({ptr}, {vword})"
            self.fn(f"{prefix}_atomic_{op}", sig, f"{index_code} return {from_word(call, t)};", origin, what)
            self.atomics[f"{prefix}_atomic_{op}"] = (op, t)
        for op in cas:
            old = from_word("zero_old", t)
            if t == "f32" and op in ("min", "max"):
                # IEEE 754 totalOrder on the words (-NaN < -inf < .. < -0 < +0 < .. < +inf < +NaN):
                # WGSL's min/max of -0 and +0 (or a NaN) may answer either, so the value stored
                # depended on which invocation came last, under determinism: exact (review
                # helper 145). An order on the bits makes the result the same whatever the order.
                def key(w: str) -> str:
                    return f"({w} ^ select(0x80000000u, 0xFFFFFFFFu, {w} >= 0x80000000u))"

                wins = "<" if op == "min" else ">"
                nxt = f"select(zero_old, {vword}, {key(vword)} {wins} {key('zero_old')})"
            else:
                combine = {"add": f"{old} + zero_v", "min": f"min({old}, zero_v)", "max": f"max({old}, zero_v)"}[op]
                nxt = to_word(f"({combine})", t)
            body = "\n".join(
                [
                    index_code,
                    f"var zero_old = atomicLoad({ptr});",
                    "loop {",
                    f"    let zero_next = {nxt};",
                    "    if (zero_next == zero_old) { break; }",
                    f"    let zero_r = atomicCompareExchangeWeak({ptr}, zero_old, zero_next);",
                    "    if (zero_r.exchanged) { break; }",
                    "    zero_old = zero_r.old_value;",
                    "}",
                    f"return {old};",
                ]
            )
            self.fn(f"{prefix}_atomic_{op}", sig, body, origin, what)
            self.atomics[f"{prefix}_atomic_{op}"] = (op, t)

    # -- binding kinds --------------------------------------------------------------------------
    def buffer(self, name: str, vt: ValueType, access: str, bits: bool, atomic: bool, origin: int) -> None:
        """A scalar/vector buffer: ``NAME_get``, ``NAME_len``, ``NAME_set``.

        Declared with its natural element (see :func:`natural_element`), an element is one
        access; ``vec3``, ``bits`` and ``atomic`` buffers are flat u32/scalar words, N a vector.
        """
        what = f"binding '{name}'"
        L = vt.lanes
        self.fn(f"{name}_len", "() -> u32", f"return params.zero_len_{name};", origin, what)
        if not (atomic or bits) and natural_element(vt) == vt.wgsl:
            self.fn(f"{name}_get", f"(zero_i: u32) -> {vt.wgsl}", f"return {name}[zero_i];", origin, what)
            if access == "read_write":
                self.fn(f"{name}_set", f"(zero_i: u32, zero_v: {vt.wgsl})", f"{name}[zero_i] = zero_v;", origin, what)
            return
        idx = "let zero_b = zero_i;" if L == 1 else f"let zero_b = zero_i * {L}u;"
        at = lambda k: "zero_b" if k == 0 else f"zero_b + {k}u"
        if atomic:
            read = lambda k: from_word(f"atomicLoad(&{name}[{at(k)}])", vt.scalar)
            write = lambda k, v: f"atomicStore(&{name}[{at(k)}], {to_word(v, vt.scalar)});"
        elif bits:
            read = lambda k: from_word(f"{name}[{at(k)}]", vt.scalar)
            write = lambda k, v: f"{name}[{at(k)}] = {to_word(v, vt.scalar)};"
        else:
            read = lambda k: f"{name}[{at(k)}]"
            write = lambda k, v: f"{name}[{at(k)}] = {v};"
        self.fn(f"{name}_get", f"(zero_i: u32) -> {vt.wgsl}", f"{idx} {self.vector_get(vt, read)}", origin, what)
        if access == "read_write":
            self.fn(f"{name}_set", f"(zero_i: u32, zero_v: {vt.wgsl})", f"{idx} {self.vector_set(vt, write)}", origin, what)
        if atomic:
            self.atomic_ops(name, name, "let zero_b = zero_i;", vt.scalar, origin, what)

    def struct_buffer(self, name: str, st: StructType, access: str, origin: int) -> None:
        """``array<Struct>``: whole elements and one accessor pair per member."""
        what = f"binding '{name}'"
        self.fn(f"{name}_len", "() -> u32", f"return params.zero_len_{name};", origin, what)
        self.fn(f"{name}_get", f"(zero_i: u32) -> {st.name}", f"return {name}[zero_i];", origin, what)
        if access == "read_write":
            self.fn(f"{name}_set", f"(zero_i: u32, zero_v: {st.name})", f"{name}[zero_i] = zero_v;", origin, what)
        for f in st.fields:
            t = f.value_type.wgsl
            # Each member's accessors are its own: a member `len` (or `get`, `set`, `set_x` next
            # to `x`) makes a name the binding makes too, a clash said as such (review helper 168:
            # naga's "redefinition of 'segs_len'" instead).
            member = f"member '{f.name}' of binding '{name}'"
            self.fn(f"{name}_{f.name}", f"(zero_i: u32) -> {t}", f"return {name}[zero_i].{f.name};", origin, member)
            if access == "read_write":
                self.fn(f"{name}_set_{f.name}", f"(zero_i: u32, zero_v: {t})", f"{name}[zero_i].{f.name} = zero_v;", origin, member)

    def append(self, name: str, vt: "ValueType | StructType", float_order: bool, origin: int) -> None:
        """Append helpers over the output ``name`` and its counter ``name_count``."""
        what = f"append binding '{name}'"
        counter = f"{name}_count"
        self.fn(f"{name}_capacity", "() -> u32", f"return params.zero_len_{name};", origin, what)
        self.fn(
            f"{name}_store", f"(zero_slot: u32, zero_v: {vt.wgsl})", f"if (zero_slot < {name}_capacity()) {{ {name}_set(zero_slot, zero_v); }}", origin, what
        )
        self.fn(f"{name}_set_count", "(zero_c: u32)", f"atomicStore(&{counter}[0], zero_c);", origin, what)
        self.fn(f"{name}_count_value", "() -> u32", f"return atomicLoad(&{counter}[0]);", origin, what)
        if float_order:
            # Unordered: the slot depends on which invocation gets there first.
            self.fn(
                f"{name}_append",
                f"(zero_v: {vt.wgsl}) -> u32",
                f"let zero_slot = atomicAdd(&{counter}[0], 1u); {name}_store(zero_slot, zero_v); return zero_slot;",
                origin,
                what,
            )

    def table(self, name: str, access: str, column_names: tuple[str, ...], origin: int) -> None:
        """A columns table: header (count; first, lanes, count, kind per column) then data words."""
        what = f"columns binding '{name}'"
        for i, col in enumerate(column_names):
            self.declare(f"{name}_col_{col}", origin, what)
            self.emit(f"const {name}_col_{col}: u32 = {i}u;", origin)
        h = "1u + zero_c * 4u"
        # A column past the table's count (an unbound, empty table above all) has no elements.
        self.fn(f"{name}_count", "(zero_c: u32) -> u32", f"if (zero_c >= {name}[0]) {{ return 0u; }} return {name}[{h} + 2u];", origin, what)
        self.fn(f"{name}_lanes", "(zero_c: u32) -> u32", f"if (zero_c >= {name}[0]) {{ return 0u; }} return {name}[{h} + 1u];", origin, what)
        self.fn(f"{name}_kind", "(zero_c: u32) -> u32", f"return {name}[{h} + 3u];", origin, what)
        # Called only for a column with elements: an index past its count reaches its last
        # element and a lane past its lanes its last lane, as a page column clamps; never the
        # next column's words.
        self.fn(
            f"{name}_addr",
            "(zero_c: u32, zero_i: u32, zero_lane: u32) -> u32",
            f"let zero_l = {name}[{h} + 1u]; return {name}[{h}] + min(zero_i, {name}[{h} + 2u] - 1u) * zero_l + min(zero_lane, max(zero_l, 1u) - 1u);",
            origin,
            what,
        )
        # By-value conversion from the stored kind (0 f32, 1 i32, 2 u32) to the asked type,
        # by the rule a chained Output's conversion follows (BY_VALUE: out-of-range saturates).
        for t in _KINDS:
            kf, ki, ku = (by_value(from_word("zero_w", k), k, t) for k in _KINDS)
            body = (
                f"if ({name}_count(zero_c) == 0u) {{ return {_ZERO[t]}; }}\n"  # a column without elements, or past the table's
                f"let zero_w = {name}[{name}_addr(zero_c, zero_i, zero_lane)]; let zero_k = {name}_kind(zero_c);\n"
                f"if (zero_k == 1u) {{ return {ki}; }}\nif (zero_k == 2u) {{ return {ku}; }}\nreturn {kf};"
            )
            self.fn(f"{name}_{t}", f"(zero_c: u32, zero_i: u32, zero_lane: u32) -> {t}", body, origin, what)
        for lanes in (2, 3, 4):
            parts = ", ".join(f"{name}_f32(zero_c, zero_i, {k}u)" for k in range(lanes))
            self.fn(f"{name}_vec{lanes}", f"(zero_c: u32, zero_i: u32) -> vec{lanes}<f32>", f"return vec{lanes}<f32>({parts});", origin, what)
        if access == "read_write":
            for t in _KINDS:
                kf, ki, ku = (to_word(by_value("zero_v", t, k), k) for k in _KINDS)
                body = (
                    f"if ({name}_count(zero_c) == 0u) {{ return; }}\n"
                    f"let zero_k = {name}_kind(zero_c); var zero_w = {kf};\n"
                    f"if (zero_k == 1u) {{ zero_w = {ki}; }}\nif (zero_k == 2u) {{ zero_w = {ku}; }}\n"
                    f"{name}[{name}_addr(zero_c, zero_i, zero_lane)] = zero_w;"
                )
                self.fn(f"{name}_set_{t}", f"(zero_c: u32, zero_i: u32, zero_lane: u32, zero_v: {t})", body, origin, what)
            for lanes in (2, 3, 4):
                sets = " ".join(f"{name}_set_f32(zero_c, zero_i, {k}u, zero_v.{_LANE[k]});" for k in range(lanes))
                self.fn(f"{name}_set_vec{lanes}", f"(zero_c: u32, zero_i: u32, zero_v: vec{lanes}<f32>)", sets, origin, what)

    def column(self, name: str, page: str, vt: ValueType, access: str, atomic_page: bool, origin: int) -> None:
        """A run of a page reached by offset: clamped to its last element, never past its run."""
        what = f"column '{name}'"
        L = vt.lanes
        base, ln = f"params.col_base_{name}", f"params.col_len_{name}"
        at = lambda k: "zero_b" if k == 0 else f"zero_b + {k}u"
        if atomic_page:
            load = lambda e: f"atomicLoad(&{page}[{e}])"
            store = lambda e, v: f"atomicStore(&{page}[{e}], {v});"
        else:
            load = lambda e: f"{page}[{e}]"
            store = lambda e, v: f"{page}[{e}] = {v};"
        # max(len, 1u): a zero-length run still clamps inside its own (aligned, reserved) block.
        idx = f"let zero_b = {base} + min(zero_i, max({ln}, 1u) - 1u)" + (f" * {L}u;" if L > 1 else ";")
        widx = f"{base} + min(zero_w, max({ln}" + (f" * {L}u" if L > 1 else "") + ", 1u) - 1u)"
        self.fn(f"{name}_len", "() -> u32", f"return {ln};", origin, what)
        self.fn(f"{name}_word", "(zero_w: u32) -> u32", f"return {load(widx)};", origin, what)
        read = lambda k: from_word(load(at(k)), vt.scalar)
        self.fn(f"{name}_get", f"(zero_i: u32) -> {vt.wgsl}", f"{idx} {self.vector_get(vt, read)}", origin, what)
        if access == "read_write":
            guard = f"if ({ln} == 0u) {{ return; }}"
            write = lambda k, v: store(at(k), to_word(v, vt.scalar))
            self.fn(f"{name}_set", f"(zero_i: u32, zero_v: {vt.wgsl})", f"{guard} {idx} {self.vector_set(vt, write)}", origin, what)
            self.fn(f"{name}_set_word", "(zero_w: u32, zero_v: u32)", f"{guard} {store(widx, 'zero_v')}", origin, what)
        if atomic_page and L == 1 and access == "read_write":
            self.atomic_ops(name, page, idx, vt.scalar, origin, what)
