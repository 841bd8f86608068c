"""Zero ``var<workgroup>`` memory at entry, so WGSL's guarantee holds on every adapter.

WGSL says workgroup memory starts zeroed; lavapipe with wgpu 0.32 does not do it (each
workgroup starts with what the previous one left), and a workgroup-atomic histogram then
counts garbage. The lowering owns the source, so it makes the guarantee hold everywhere: the
entry point gets ``@builtin(local_invocation_index)`` (the user's own, when declared) and
first calls a generated ``zero_init_workgroup`` that clears every workgroup variable,
strided over the workgroup's invocations, then waits at a barrier. Adapters that zero on
their own pay one pass over memory that is already in the workgroup's cache.

Text is inserted, never moved: line numbers stay, and each insertion is recorded as a
zero-length splice so columns after it still map back to the user's text.
"""

from __future__ import annotations

from dataclasses import dataclass

from .wgsl_text import Token, tokens

__all__ = ["WorkgroupInit", "plan_workgroup_init"]

_INIT_FN = "zero_init_workgroup"
_LII = "zero_lii"


@dataclass(frozen=True)
class WorkgroupInit:
    """The body's lines with the entry point rewired, the splices adjusted, and the function."""

    lines: tuple[str, ...]
    splices: tuple[tuple[int, int, int, int, int], ...]
    function: str  # the generated ``fn zero_init_workgroup(...)`` source


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
        args = _split_top(t[len("array<"):-1])
        if len(args) == 2:
            k = f"zero_k{depth}"
            start, step = (_LII, f"{invocations}u") if depth == 0 else ("0u", "1u")
            inner = _zero(f"{ref}[{k}]", args[0], depth + 1, invocations)
            return f"for (var {k} = {start}; {k} < u32({args[1]}); {k} += {step}) {{ {inner} }}"
        stmt = f"{ref} = {t}();"
    else:
        stmt = f"{ref} = {t}();"
    return f"if ({_LII} == 0u) {{ {stmt} }}" if depth == 0 else stmt


def _workgroup_vars(toks: list[Token], text: str) -> list[tuple[str, str]]:
    out = []
    depth = 0
    for i, t in enumerate(toks):
        if t.text in "{(":
            depth += 1
        elif t.text in "})":
            depth -= 1
        if depth or t.text != "var" or i + 5 >= len(toks):
            continue
        if [x.text for x in toks[i + 1:i + 4]] != ["<", "workgroup", ">"] or toks[i + 4].kind != "ident" or toks[i + 5].text != ":":
            continue
        j = i + 6
        nest = 0
        while j < len(toks) and not (toks[j].text == ";" and nest == 0):
            nest += {"<": 1, ">": -1, "(": 1, ")": -1}.get(toks[j].text, 0)
            j += 1
        if j < len(toks) and i + 6 < j:
            out.append((toks[i + 4].text, text[toks[i + 6].offset:toks[j].offset].strip()))
    return out


def _entry(toks: list[Token]) -> tuple[Token, Token, Token, str | None] | None:
    """(the param list's '(' and ')', the body's '{', the local_invocation_index param name)."""
    for i in range(len(toks) - 2):
        if toks[i].text == "fn" and toks[i + 1].text == "main" and toks[i + 2].text == "(":
            depth, j = 0, i + 2
            while j < len(toks):
                depth += {"(": 1, ")": -1}.get(toks[j].text, 0)
                if depth == 0:
                    break
                j += 1
            k = j
            while k < len(toks) and toks[k].text != "{":
                k += 1
            if k >= len(toks):
                return None
            lii = None
            for p in range(i + 3, j):
                if toks[p].text == "local_invocation_index" and p + 2 < j and toks[p + 1].text == ")" and toks[p + 2].kind == "ident":
                    lii = toks[p + 2].text
            return toks[i + 2], toks[j], toks[k], lii
    return None


def plan_workgroup_init(lines: tuple[str, ...], splices: tuple, invocations: int) -> WorkgroupInit | None:
    """The body rewired to zero its workgroup memory at entry, or None when it declares none."""
    text = "\n".join(lines)
    toks = list(tokens(text))
    wvars = _workgroup_vars(toks, text)
    entry = _entry(toks)
    if not wvars or entry is None:
        return None
    open_paren, close_paren, brace, lii = entry
    inserts: list[tuple[Token, str]] = []
    if lii is None:
        empty = close_paren.offset == open_paren.offset + 1 or not text[open_paren.offset + 1:close_paren.offset].strip()
        inserts.append((open_paren, f"@builtin(local_invocation_index) {_LII}: u32" + ("" if empty else ", ")))
        lii = _LII
    inserts.append((brace, f" {_INIT_FN}({lii});"))
    out = list(lines)
    spl = list(splices)
    for tok, added in sorted(inserts, key=lambda x: -x[0].offset):
        row = tok.line - 1
        col = tok.col + 1  # insert right after the token
        line = out[row]
        out[row] = line[: col - 1] + added + line[col - 1:]
        user_col = col
        for s in spl:  # the user column at this point: undo earlier splices left of it
            if s[0] == row and s[1] + s[2] <= col:
                user_col -= s[2] - s[4]
        spl = [(r, c + len(added), ln, uc, ul) if r == row and c >= col else (r, c, ln, uc, ul) for r, c, ln, uc, ul in spl]
        spl.append((row, col, len(added), user_col, 0))
    spl.sort(key=lambda s: (s[0], s[1]))
    body = "\n".join(_zero(name, t, 0, invocations) for name, t in wvars)
    function = f"fn {_INIT_FN}({_LII}: u32) {{\n{body}\nworkgroupBarrier();\n}}"
    return WorkgroupInit(tuple(out), tuple(spl), function)
