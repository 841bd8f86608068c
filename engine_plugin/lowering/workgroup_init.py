"""Zero ``var<workgroup>`` memory at entry, so WGSL's guarantee holds on every adapter.

WGSL says workgroup memory starts zeroed; lavapipe with wgpu 0.32 does not do it (each
workgroup starts with what the previous one left), and a workgroup-atomic histogram then
counts garbage. The lowering owns the source, so it makes the guarantee hold everywhere: the
generated entry point (:mod:`.entry`) first calls ``zero_init_workgroup``, which clears
every workgroup variable, strided over the workgroup's invocations, then waits at a barrier.
Adapters that zero on their own pay one pass over memory already in the workgroup's cache.
"""

from __future__ import annotations

from .wgsl_text import Token, at_module_scope, tokens

__all__ = ["workgroup_init_function", "private_reset_function", "INIT_FN", "PRIVATE_INIT_FN"]

INIT_FN = "zero_init_workgroup"
PRIVATE_INIT_FN = "zero_init_private"
_LII = "zero_lii"


def _split_top(text: str) -> list[str]:
    """``a, b<c, d>, e`` -> [a, b<c, d>, e] (commas outside <...> and (...))."""
    parts, depth, cur = [], 0, ""
    for c in text:
        if c in "<(":
            depth += 1
        elif c in ">)":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += c
    if cur.strip():
        parts.append(cur.strip())
    return parts


def _zero(ref: str, type_text: str, depth: int, invocations: int) -> str:
    """Statements zeroing ``ref`` of ``type_text``; depth 0 strides over the invocations."""
    t = " ".join(type_text.split())
    if t.startswith("atomic<"):
        zero = "0i" if "i32" in t else "0u"
        stmt = f"atomicStore(&{ref}, {zero});"
    elif t.startswith("array<") and t.endswith(">"):
        args = _split_top(t[len("array<") : -1])
        if len(args) == 2:
            k = f"zero_k{depth}"
            start, step = (_LII, f"{invocations}u") if depth == 0 else ("0u", "1u")
            inner = _zero(f"{ref}[{k}]", args[0], depth + 1, invocations)
            return f"for (var {k} = {start}; {k} < u32({args[1]}); {k} += {step}) {{ {inner} }}"
        stmt = f"{ref} = {t}();"
    else:
        stmt = f"{ref} = {t}();"
    return f"if ({_LII} == 0u) {{ {stmt} }}" if depth == 0 else stmt


def _module_vars(toks: list[Token], text: str, space: str) -> list[tuple[str, str, str]]:
    """(name, type text, initialiser text) of each module-scope ``var<space>`` (either text
    may be empty: ``var<private> x = 1.0;`` has no type, ``var<workgroup> a: T;`` no
    initialiser)."""
    out = []
    for i, t in at_module_scope(toks):
        if t.text != "var" or i + 4 >= len(toks):
            continue
        if [x.text for x in toks[i + 1 : i + 4]] != ["<", space, ">"] or toks[i + 4].kind != "ident":
            continue
        j = i + 5
        nest = 0
        colon = equals = None
        while j < len(toks) and not (toks[j].text == ";" and nest == 0):
            if nest == 0 and toks[j].text == ":" and colon is None and equals is None:
                colon = j
            elif nest == 0 and toks[j].text == "=" and equals is None:
                equals = j
            nest += {"<": 1, ">": -1, "(": 1, ")": -1, "[": 1, "]": -1}.get(toks[j].text, 0)
            j += 1
        if j >= len(toks) or (colon is None and equals is None):
            continue
        type_end = toks[equals].offset if equals is not None else toks[j].offset
        type_text = text[toks[colon + 1].offset : type_end].strip() if colon is not None and colon + 1 < j else ""
        init_text = text[toks[equals + 1].offset : toks[j].offset].strip() if equals is not None and equals + 1 < j else ""
        out.append((toks[i + 4].text, type_text, init_text))
    return out


def _workgroup_vars(toks: list[Token], text: str) -> list[tuple[str, str]]:
    return [(name, t) for name, t, _ in _module_vars(toks, text, "workgroup") if t]


def private_reset_function(lines: tuple[str, ...]) -> str | None:
    """The generated ``fn zero_init_private()`` setting every module-scope ``var<private>``
    back to its initialiser (or zero), or None when the body declares none.

    WGSL starts every invocation with fresh private variables. The generated entry point runs
    several logical workgroups in one physical invocation (a grid-stride loop, see
    :mod:`.entry`), so it calls this before each logical workgroup after the first: state a
    body keeps in a private variable never leaks from one logical invocation into the next.
    """
    text = "\n".join(lines)
    found = _module_vars(list(tokens(text)), text, "private")
    if not found:
        return None
    body = "\n".join(f"    {name} = {init or f'{t}()'};" for name, t, init in found if init or t)
    return f"fn {PRIVATE_INIT_FN}() {{\n{body}\n}}"


def workgroup_init_function(lines: tuple[str, ...], invocations: int) -> str | None:
    """The generated ``fn zero_init_workgroup(zero_lii: u32)`` clearing every workgroup
    variable the body declares, or None when it declares none. The generated entry point
    (see :mod:`.entry`) calls it first."""
    text = "\n".join(lines)
    wvars = _workgroup_vars(list(tokens(text)), text)
    if not wvars:
        return None
    body = "\n".join(_zero(name, t, 0, invocations) for name, t in wvars)
    return f"fn {INIT_FN}({_LII}: u32) {{\n{body}\nworkgroupBarrier();\n}}"
