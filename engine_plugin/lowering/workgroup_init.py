"""Zero ``var<workgroup>`` memory at entry, so WGSL's guarantee holds on every adapter.

WGSL says workgroup memory starts zeroed; lavapipe with wgpu 0.32 does not do it (each
workgroup starts with what the previous one left), and a workgroup-atomic histogram then
counts garbage. The lowering owns the source, so it makes the guarantee hold everywhere: the
generated entry point (:mod:`.entry`) first calls ``zero_init_workgroup``, which clears
every workgroup variable, strided over the workgroup's invocations, then waits at a barrier.
Adapters that zero on their own pay one pass over memory already in the workgroup's cache.
"""

from __future__ import annotations

from .wgsl_text import Token, at_module_scope

__all__ = ["workgroup_init_function", "private_reset_function", "workgroup_declarations", "TypeDeclarations", "split_template", "INIT_FN", "PRIVATE_INIT_FN"]

INIT_FN = "zero_init_workgroup"
PRIVATE_INIT_FN = "zero_init_private"
_LII = "zero_lii"


def split_template(text: str) -> list[str]:
    """``a, b<c, d>, e`` -> [a, b<c, d>, e]: commas outside <...> and (...). Inside parentheses
    a ``<`` or ``>`` is a comparison or a shift (``array<u32, (1u << 6u)>``), not a bracket."""
    parts, angle, paren, cur = [], 0, 0, ""
    for c in text:
        if c == "(":
            paren += 1
        elif c == ")":
            paren -= 1
        elif c == "<" and not paren:
            angle += 1
        elif c == ">" and not paren:
            angle -= 1
        if c == "," and angle == 0 and paren == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += c
    if cur.strip():
        parts.append(cur.strip())
    return parts


class TypeDeclarations:
    """The body's ``alias`` and ``struct`` declarations, to see through a workgroup
    variable's type: one that holds atomics cannot be constructed (``T()``), so its atomics
    are stored member by member."""

    def __init__(self, toks: list[Token], text: str):
        self.aliases: dict[str, str] = {}
        self.structs: dict[str, list[tuple[str, str]]] = {}
        self.member_attrs: dict[str, list[dict[str, list[Token]]]] = {}  # each member's @align/@size arguments
        for i, t in at_module_scope(toks):
            if t.text == "alias" and i + 2 < len(toks) and toks[i + 1].kind == "ident" and toks[i + 2].text == "=":
                end = _statement_end(toks, i + 3, (";",))
                if end < len(toks) and end > i + 3:
                    self.aliases[toks[i + 1].text] = text[toks[i + 3].offset : toks[end].offset].strip()
            elif t.text == "struct" and i + 2 < len(toks) and toks[i + 1].kind == "ident" and toks[i + 2].text == "{":
                attrs: list[dict[str, list[Token]]] = []
                self.structs[toks[i + 1].text] = _members(toks, i + 3, text, attrs)
                self.member_attrs[toks[i + 1].text] = attrs

    def resolve(self, type_text: str) -> str:
        t = " ".join(type_text.split())
        for _ in range(64):  # an alias chain (a cycle is naga's to refuse)
            if t not in self.aliases:
                break
            t = " ".join(self.aliases[t].split())
        return t

    def holds_atomics(self, type_text: str, depth: int = 0) -> bool:
        t = self.resolve(type_text)
        if t.startswith("atomic<") or depth > 32:
            return t.startswith("atomic<")
        if t.startswith("array<") and t.endswith(">"):
            return self.holds_atomics(split_template(t[len("array<") : -1])[0], depth + 1)
        return any(self.holds_atomics(m, depth + 1) for _, m in self.structs.get(t, ()))


def _statement_end(toks: list[Token], j: int, stops: tuple[str, ...]) -> int:
    """The index of the first of ``stops`` from ``j`` outside (), [] and template brackets (or
    len(toks)). Inside parentheses ``<`` and ``>`` compare or shift; ``<<`` and ``>>`` shift
    anywhere."""
    paren = angle = 0
    while j < len(toks):
        t = toks[j].text
        if t in stops and paren == 0 and angle <= 0:
            break
        if t in "([":
            paren += 1
        elif t in ")]":
            paren -= 1
            if paren < 0:
                break
        elif t in "<>" and paren == 0:
            pair = j + 1 < len(toks) and toks[j + 1].text == t and toks[j + 1].offset == toks[j].offset + 1
            if pair:
                j += 1  # a shift
            else:
                angle += 1 if t == "<" else -1
        j += 1
    return j


def _members(toks: list[Token], j: int, text: str, attrs: list[dict[str, list[Token]]] | None = None) -> list[tuple[str, str]]:
    """(name, type text) of a struct's members, from the token after its ``{``; ``attrs``:
    each member's ``@align``/``@size`` argument tokens appended there (for its layout)."""
    out = []
    while j < len(toks) and toks[j].text != "}":
        found: dict[str, list[Token]] = {}
        while j < len(toks) and toks[j].text == "@":  # an attribute: @align(16), @size(8)
            name = toks[j + 1].text if j + 1 < len(toks) else ""
            j += 2
            if j < len(toks) and toks[j].text == "(":
                end = _statement_end(toks, j + 1, (")",))
                found[name] = toks[j + 1 : end]
                j = end + 1
        if j + 2 >= len(toks) or toks[j].kind != "ident" or toks[j + 1].text != ":":
            break
        end = _statement_end(toks, j + 2, (",", ";", "}"))
        if end >= len(toks):
            break
        out.append((toks[j].text, text[toks[j + 2].offset : toks[end].offset].strip()))
        if attrs is not None:
            attrs.append(found)
        j = end + 1 if toks[end].text != "}" else end
    return out


def _zero(ref: str, type_text: str, depth: int, invocations: int, types: TypeDeclarations) -> str:
    """Statements zeroing ``ref`` of ``type_text``; depth 0 strides over the invocations."""
    t = types.resolve(type_text)
    if t.startswith("atomic<"):
        # An abstract 0 takes the atomic's own type: atomic<T> of a specialised T = i32 (or an
        # alias the body does not declare) refused a 0u (review helper 140).
        stmt = f"atomicStore(&{ref}, 0);"
    elif t.startswith("array<") and t.endswith(">"):
        args = split_template(t[len("array<") : -1])
        if len(args) == 2:
            k = f"zero_k{depth}"
            start, step = (_LII, f"{invocations}u") if depth == 0 else ("0u", "1u")
            inner = _zero(f"{ref}[{k}]", args[0], depth + 1, invocations, types)
            return f"for (var {k} = {start}; {k} < u32({args[1]}); {k} += {step}) {{ {inner} }}"
        stmt = f"{ref} = {t}();"
    elif t in types.structs and types.holds_atomics(t):
        # not constructible: each member on its own (at depth 0, each strided or guarded)
        return " ".join(_zero(f"{ref}.{name}", m, depth, invocations, types) for name, m in types.structs[t])
    else:
        stmt = f"{ref} = {t}();"
    return f"if ({_LII} == 0u) {{ {stmt} }}" if depth == 0 else stmt


def _module_vars(toks: list[Token], text: str, space: str) -> list[tuple[str, str, str, Token]]:
    """(name, type text, initialiser text, its ``var`` token) of each module-scope ``var<space>`` (either text
    may be empty: ``var<private> x = 1.0;`` has no type, ``var<workgroup> a: T;`` no
    initialiser). A module-scope declaration holds no block, so it ends at its first ``;``; a
    type holds no ``=``, so the first one starts the initialiser (which may compare and shift)."""
    out = []
    for i, t in at_module_scope(toks):
        if t.text != "var" or i + 4 >= len(toks):
            continue
        if [x.text for x in toks[i + 1 : i + 4]] != ["<", space, ">"] or toks[i + 4].kind != "ident":
            continue
        j = i + 5
        colon = equals = None
        while j < len(toks) and toks[j].text != ";":
            if toks[j].text == ":" and colon is None and equals is None:
                colon = j
            elif toks[j].text == "=" and equals is None:
                equals = j
            j += 1
        if j >= len(toks) or (colon is None and equals is None):
            continue
        type_end = toks[equals].offset if equals is not None else toks[j].offset
        type_text = text[toks[colon + 1].offset : type_end].strip() if colon is not None and colon + 1 < j else ""
        init_text = text[toks[equals + 1].offset : toks[j].offset].strip() if equals is not None and equals + 1 < j else ""
        out.append((toks[i + 4].text, type_text, init_text, t))
    return out


def _workgroup_vars(toks: list[Token], text: str) -> list[tuple[str, str]]:
    return [(name, t) for name, t, _, _ in _module_vars(toks, text, "workgroup") if t]


def workgroup_declarations(text: str, toks: list[Token]) -> list[tuple[Token, str]]:
    """(``var`` token, type text) of each module-scope ``var<workgroup>`` of ``text``."""
    return [(tok, t) for _, t, _, tok in _module_vars(toks, text, "workgroup") if t]


def private_reset_function(text: str, toks: list[Token]) -> str | None:
    """The generated ``fn zero_init_private()`` setting every module-scope ``var<private>``
    back to its initialiser (or zero), or None when the body declares none.

    WGSL starts every invocation with fresh private variables. The generated entry point runs
    several logical workgroups in one physical invocation (a grid-stride loop, see
    :mod:`.entry`), so it calls this before each logical workgroup after the first: state a
    body keeps in a private variable never leaks from one logical invocation into the next.
    """
    found = _module_vars(toks, text, "private")
    if not found:
        return None
    body = "\n".join(f"    {name} = {init or f'{t}()'};" for name, t, init, _ in found if init or t)
    return f"fn {PRIVATE_INIT_FN}() {{\n{body}\n}}"


def workgroup_init_function(text: str, toks: list[Token], invocations: int) -> str | None:
    """The generated ``fn zero_init_workgroup(zero_lii: u32)`` clearing every workgroup
    variable the body declares (``text``, the modules and the body, and its ``tokens``), or
    None when it declares none. The generated entry point (see :mod:`.entry`) calls it first."""
    wvars = _workgroup_vars(toks, text)
    if not wvars:
        return None
    types = TypeDeclarations(toks, text)
    body = "\n".join(_zero(name, t, 0, invocations, types) for name, t in wvars)
    return f"fn {INIT_FN}({_LII}: u32) {{\n{body}\nworkgroupBarrier();\n}}"
