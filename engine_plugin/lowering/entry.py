"""The generated entry point: the body's ``main`` becomes a plain function the lowering calls.

The host folds the dispatch to fit the device (see :mod:`.geometry`). So that a kernel sees
its domain's coordinates whatever the fold, the lowering turns the user's

    @compute @workgroup_size(8, 8)
    fn main(@builtin(global_invocation_id) gid: vec3<u32>) { ... }

into ``fn zero_user_main(gid: vec3<u32>) { ... }`` (attributes blanked with spaces, so every
line and column of the body stays where the user wrote it; the renamed identifier is
recorded as a splice) and appends a ``main`` that unfolds the physical workgroup id into the
logical one, skips padding workgroups (whole workgroups: barriers stay uniform), zeroes
workgroup memory, and calls the user's function with the builtins it declared.

The entry point is a *grid-stride loop over logical workgroups*: physical workgroup ``p`` of
``P`` launched runs logical workgroups ``p, p + P, p + 2P, ...`` until the domain's are done.
When the host launches every logical workgroup (``P >= total``) that is one call, as before;
when it launches fewer (``geometry.group_cap``: a bounded multiple of what fills the device),
each workgroup serves several, so even a one-element-per-invocation body is not bound by the
chip's workgroup launch rate. Each logical workgroup still starts with zeroed workgroup
memory (a barrier, then the initialiser, per iteration), and the loop's bounds are uniform
(workgroup id, workgroup count, params), so the body's barriers stay in uniform control flow.

| builtin                  | what the body receives                                      |
|--------------------------|-------------------------------------------------------------|
| global_invocation_id     | the invocation's coordinate in the domain (grid) space      |
| workgroup_id             | the logical workgroup's coordinate                          |
| num_workgroups           | logical workgroups per axis                                  |
| local_invocation_id/index| unchanged                                                    |
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from .wgsl_text import IDENT, Token, at_module_scope, tokens

__all__ = ["EntryWrap", "wrap_entry", "USER_MAIN", "EntryError"]

USER_MAIN = "zero_user_main"

_ARGUMENT = {
    "global_invocation_id": "zero_g",
    "workgroup_id": "zero_w",
    "num_workgroups": "zero_gc",
    "local_invocation_id": "zero_lid",
    "local_invocation_index": "zero_lii",
}


# The generated entry point's own variables (see the wrapper below): a struct it builds must
# not be named like one.
_WRAPPER_LOCALS = frozenset(("zero_wid", "zero_nwg", "zero_lid", "zero_lii", "zero_gc", "zero_total", "zero_step", "zero_l", "zero_w", "zero_g"))

# The WGSL type of each builtin main may take (its spellings).
_BUILTIN_TYPES = {
    "global_invocation_id": ("vec3<u32>", "vec3u"),
    "workgroup_id": ("vec3<u32>", "vec3u"),
    "num_workgroups": ("vec3<u32>", "vec3u"),
    "local_invocation_id": ("vec3<u32>", "vec3u"),
    "local_invocation_index": ("u32",),
}


# The words a type spelled out in WGSL is made of (a struct's name is not one: it resolves to
# nothing, and a struct is no builtin's type, so it is refused with the rest).
_WGSL_WORDS = frozenset(
    "f32 f16 i32 u32 bool vec2 vec3 vec4 vec2f vec3f vec4f vec2h vec3h vec4h vec2i vec3i vec4i vec2u vec3u vec4u "
    "mat2x2 mat2x3 mat2x4 mat3x2 mat3x3 mat3x4 mat4x2 mat4x3 mat4x4 array atomic ptr function private workgroup uniform storage read write read_write".split()
)


class EntryError(Exception):
    """The entry point cannot be wrapped; ``token`` is where, ``message`` why."""

    def __init__(self, token: Token, message: str):
        super().__init__(message)
        self.token, self.message = token, message


@dataclass(frozen=True)
class EntryWrap:
    lines: tuple[str, ...]
    splices: tuple[tuple[int, int, int, int, int], ...]
    wrapper: str


def _blank(chars: list[str], start: int, end: int) -> None:
    for k in range(start, end):
        if chars[k] != "\n":
            chars[k] = " "


_CLOSING = {"(": ")", "{": "}", "[": "]"}


def _matching(toks: list[Token], i: int) -> int:
    """Index of the token closing the bracket at ``toks[i]`` (``(``, ``{`` or ``[``)."""
    opening = toks[i].text
    step = {opening: 1, _CLOSING[opening]: -1}
    depth = 0
    for j in range(i, len(toks)):
        depth += step.get(toks[j].text, 0)
        if depth == 0:
            return j
    return len(toks) - 1


def _type_names(toks: list[Token]) -> tuple[dict[str, str], set[str]]:
    """Module-scope ``alias NAME = TYPE;`` declarations (NAME -> TYPE's text, no spaces) and
    ``struct NAME`` names."""
    aliases: dict[str, str] = {}
    structs: set[str] = set()
    for i, t in at_module_scope(toks):
        if t.text == "struct" and i + 1 < len(toks):
            structs.add(toks[i + 1].text)
        elif t.text == "alias" and i + 3 < len(toks) and toks[i + 2].text == "=":
            j = i + 3
            while j < len(toks) and toks[j].text != ";":
                j += 1
            aliases[toks[i + 1].text] = "".join(x.text for x in toks[i + 3 : j])
    return aliases, structs


_IDENT = re.compile(rf"(?<!\w){IDENT}")  # not a literal's suffix (the u of 4u: helper 132)
_MAX_TYPE_TEXT = 1 << 16  # a recursive or exploding alias: naga reports it


class _Aliases:
    """Type names through the body's aliases and the type specialisations, each alias expanded
    once (an alias chain re-expanded per parameter, one regex per alias a pass, took 97 s for a
    170 KB body: review helper 129)."""

    def __init__(self, aliases: Mapping[str, str], structs: set[str]):
        self.aliases, self.structs = aliases, structs
        self._expanded: dict[str, str | None] = {}

    def _substitute(self, text: str) -> str | None:
        parts = _IDENT.split(text)
        names = _IDENT.findall(text)
        out = [parts[0]]
        for name, rest in zip(names, parts[1:]):
            if name in self.aliases:
                found = self._expand(name)
                if found is None:
                    return None
                name = found
            out.append(name)
            out.append(rest)
        joined = "".join(out)
        return joined if len(joined) <= _MAX_TYPE_TEXT else None

    def _expand(self, root: str) -> str | None:
        """``root``'s type with every alias in it replaced; None in a cycle or past the cap.
        Depth first without recursion (a chain of thousands of aliases)."""
        memo = self._expanded
        if root in memo:
            return memo[root]
        stack, open_ = [(root, False)], set()
        while stack:
            name, finish = stack.pop()
            if finish:  # every alias it names is expanded by now (None in a cycle): one pass
                open_.discard(name)
                memo[name] = self._substitute(self.aliases[name])
                continue
            if name in memo:
                continue
            open_.add(name)
            stack.append((name, True))
            for dep in set(_IDENT.findall(self.aliases[name])) & self.aliases.keys():
                if dep in open_:
                    memo[dep] = None  # a cycle: everything through it resolves to nothing
                elif dep not in memo:
                    stack.append((dep, False))
        return memo[root]

    def resolve(self, declared: str) -> str | None:
        """``declared`` with every alias replaced (chains followed); None when a name in it is
        neither a WGSL word, a known alias nor a struct of the body (a module's: naga's to
        judge), or an alias in it recurs."""
        text = self._substitute(declared)
        if text is None:
            return None
        words = set(_IDENT.findall(text))
        return text.replace(",>", ">") if words <= _WGSL_WORDS | self.structs else None


def _builtin_arg(param: Token, builtin: str | None, declared: str, types: _Aliases, struct: str | None = None) -> str:
    """The generated main's expression for ``param`` (a parameter of main, or a member of the
    struct ``struct`` main takes), which takes ``@builtin(builtin)`` and is typed ``declared``."""
    where = f"member '{param.text}' of struct {struct}" if struct else f"parameter '{param.text}' of main"
    if builtin is None:
        raise EntryError(param, f"{where} has no @builtin(...); a compute entry point takes builtins only")
    if builtin in ("subgroup_invocation_id", "subgroup_size"):
        # A compute builtin of WGSL's subgroups extension, which this toolchain (naga in wgpu
        # 0.32) does not take: said so, not "not a compute builtin" (review helper 193).
        raise EntryError(
            param, f"@builtin({builtin}) needs WGSL's subgroups extension, which wgpu 0.32 (naga) does not support; use workgroup memory and barriers"
        )
    if builtin not in _ARGUMENT:
        raise EntryError(
            param,
            f"@builtin({builtin}) is not a compute builtin (use global_invocation_id, workgroup_id, num_workgroups, local_invocation_id or local_invocation_index)",
        )
    # The generated main hands each builtin over as WGSL types it: another type here would be
    # a type error in generated code, which names no line of the user's.
    resolved = types.resolve(declared)
    if resolved is not None and resolved not in _BUILTIN_TYPES[builtin]:
        shown = declared if resolved == declared.replace(",>", ">") else f"{declared} ({resolved})"
        raise EntryError(param, f"@builtin({builtin}) is {_BUILTIN_TYPES[builtin][0]}, not {shown or 'untyped'}")
    return _ARGUMENT[builtin]


def _struct_at(toks: list[Token], name: str) -> int | None:
    """The index of the ``struct`` token declaring ``name { ... }`` at module scope, or None."""
    return next(
        (i for i, t in at_module_scope(toks) if t.text == "struct" and i + 2 < len(toks) and toks[i + 1].text == name and toks[i + 2].text == "{"), None
    )


def _struct_members(toks: list[Token], at: int | None) -> list[tuple[Token, str | None, str]]:
    """(name token, its @builtin or None, its type's text) for each member of the struct
    declared at ``toks[at]`` (:func:`_struct_at`; None: none), read up to its closing brace.

    Raises:
        EntryError: an attribute or member without a name (a raw IndexError past the body's
            end, or the next declaration read as a member: review helper 132).
    """
    if at is None:
        return []
    close = _matching(toks, at + 2)
    j = at + 3
    members: list[tuple[Token, str | None, str]] = []
    while j < close:
        builtin, j = _attributes(toks, j, close)
        if j >= close or toks[j].kind != "ident":
            raise EntryError(toks[min(j, len(toks) - 1)], f"a member of struct {toks[at + 1].text} without a name")
        member = toks[j]
        declared, j = _declared_type(toks, j, close)
        members.append((member, builtin, declared))
        j += 1  # past the comma (or onto the brace)
    return members


def _declared_type(toks: list[Token], j: int, close: int) -> tuple[str, int]:
    """For the name at ``toks[j]`` (a parameter or member): its type's text ("" when it has
    none), and the index of the comma ending it (or ``close``)."""
    depth, start = 0, j
    while j < close and not (toks[j].text == "," and depth == 0):
        depth += {"<": 1, ">": -1, "(": 1, ")": -1}.get(toks[j].text, 0)
        j += 1
    return ("".join(t.text for t in toks[start + 2 : j]) if start + 1 < j and toks[start + 1].text == ":" else ""), j


def _attributes(toks: list[Token], j: int, close: int) -> tuple[str | None, int]:
    """Skip the attributes starting at ``toks[j]`` (before ``close``): (the @builtin's name or
    None, the index after them).

    Raises:
        EntryError: an ``@`` naming no attribute.
    """
    builtin = None
    while j < close and toks[j].text == "@":
        if j + 1 >= close or toks[j + 1].kind != "ident":
            raise EntryError(toks[j], "'@' names no attribute")
        end = j + 1
        if j + 2 < close and toks[j + 2].text == "(":
            end = min(_matching(toks, j + 2), close - 1)
            if toks[j + 1].text == "builtin" and j + 3 < end:
                builtin = toks[j + 3].text
        j = end + 1
    return builtin, j


def wrap_entry(
    lines: tuple[str, ...],
    splices: tuple,
    workgroup: tuple[int, int, int],
    init_call: str | None,
    type_values: Mapping[str, str] | None = None,
    reset_call: str | None = None,
) -> EntryWrap:
    """``type_values``: the variant's type specialisations (the aliases the lowering declares)."""
    text = "\n".join(lines)
    toks = list(tokens(text))
    body_aliases, structs = _type_names(toks)
    types = _Aliases({**dict(type_values or {}), **body_aliases}, structs)
    mains = [i for i, t in at_module_scope(toks) if t.text == "fn" and i + 2 < len(toks) and toks[i + 1].text == "main" and toks[i + 2].text == "("]
    if not mains:  # check_body already refused a body without one
        raise EntryError(toks[0] if toks else Token("punct", "", 1, 1, 0), "no fn main")
    at = mains[0]
    if len(mains) > 1:
        raise EntryError(toks[mains[1] + 1], f"a second fn main (the first is at line {toks[at + 1].line}); a kernel has one entry point")
    # A call of main reaches the generated entry point, which calls zero_user_main: naga
    # named that generated function, with no line ("declaration of `zero_user_main` is
    # cyclic", review helper 237). Refused at the user's call, under the user's name.
    for i, t in enumerate(toks[:-1]):
        if t.text == "main" and i != at + 1 and toks[i + 1].text == "(" and (i == 0 or toks[i - 1].text not in (".", "fn")):
            raise EntryError(t, "a call of 'main', the entry point: only the host calls it (WGSL has no recursion, and no call of an entry point)")
    chars = list(text)
    # Attributes before `fn main`: walk back over `@name` and `@name(...)`.
    k = at - 1
    while k >= 1:
        if toks[k].text == ")":
            depth = 0
            j = k
            while j >= 0:
                depth += {")": 1, "(": -1}.get(toks[j].text, 0)
                if depth == 0:
                    break
                j -= 1
            if j >= 2 and toks[j - 2].text == "@":
                _blank(chars, toks[j - 2].offset, toks[k].offset + 1)
                k = j - 3
                continue
            break
        if toks[k].kind == "ident" and toks[k - 1].text == "@":
            _blank(chars, toks[k - 1].offset, toks[k].offset + len(toks[k].text))
            k -= 2
            continue
        break
    # Parameters: blank their @builtin(...) and remember which builtin each takes.
    open_i = at + 2
    close_i = _matching(toks, open_i)
    args: list[str] = []
    j = open_i + 1
    while j < close_i:
        first = j
        builtin, j = _attributes(toks, j, close_i)
        if j > first:  # blanked: the generated main passes each builtin
            _blank(chars, toks[first].offset, toks[j - 1].offset + len(toks[j - 1].text))
        if j >= close_i or toks[j].kind != "ident":
            raise EntryError(toks[min(j, close_i)], "a parameter of main without a name")
        param = toks[j]
        declared, j = _declared_type(toks, j, close_i)
        # Judged through the body's aliases and the type specialisations: a wrong type would
        # be a type error at the generated main's call, which names no line of the user's. A
        # type naming what this body does not declare (a module's alias) is naga's to judge.
        resolved = types.resolve(declared) if builtin is None else None  # _builtin_arg judges a builtin's type
        if builtin is None:
            if resolved not in structs:
                raise EntryError(
                    param,
                    f"parameter '{param.text}' of main has no @builtin(...); a compute entry point takes builtins only "
                    "(each as a parameter, or as the members of a struct this body declares)",
                )
            # WGSL's other spelling: the builtins as members of a struct (review helper 126).
            # The generated main builds it, member by member, in declaration order.
            decl = _struct_at(toks, resolved)
            if resolved in _WRAPPER_LOCALS and decl is not None:  # a local of that name would hide the type there (helper 129)
                raise EntryError(
                    toks[decl + 1], f"struct '{resolved}' is named like a variable of the generated entry point, which builds it; rename the struct"
                )
            members = [_builtin_arg(member, b, member_type, types, resolved) for member, b, member_type in _struct_members(toks, decl)]
            args.append(f"{resolved}({', '.join(members)})")
        else:
            args.append(_builtin_arg(param, builtin, declared, types))
        j += 1
    blanked = "".join(chars).split("\n")
    # Rename main -> zero_user_main in place; a splice keeps later columns mapping back.
    main_tok = toks[at + 1]
    row = main_tok.line - 1
    line = blanked[row]
    col = main_tok.col
    blanked[row] = line[: col - 1] + USER_MAIN + line[col - 1 + len("main") :]
    grow = len(USER_MAIN) - len("main")
    user_col = col
    for s in splices:
        if s[0] == row and s[1] + s[2] <= col:
            user_col -= s[2] - s[4]
    spl = [(r, c + grow, ln, uc, ul) if r == row and c > col else (r, c, ln, uc, ul) for r, c, ln, uc, ul in splices]
    spl.append((row, col, len(USER_MAIN), user_col, len("main")))
    spl.sort(key=lambda s: (s[0], s[1]))
    wx, wy, wz = workgroup
    init = [f"        if (zero_l >= zero_step) {{ workgroupBarrier(); }} {init_call}"] if init_call else []
    if reset_call:  # a later logical workgroup starts with fresh private variables, as WGSL's invocations do
        init.insert(0, f"        if (zero_l >= zero_step) {{ {reset_call} }}")
    wrapper = "\n".join(
        [
            f"@compute @workgroup_size({wx}, {wy}, {wz})",
            "fn main(@builtin(workgroup_id) zero_wid: vec3<u32>, @builtin(num_workgroups) zero_nwg: vec3<u32>, "
            "@builtin(local_invocation_id) zero_lid: vec3<u32>, @builtin(local_invocation_index) zero_lii: u32) {",
            "    let zero_gc = vec3<u32>(params.zero_gx, params.zero_gy, params.zero_gz);",
            "    let zero_total = zero_gc.x * zero_gc.y * zero_gc.z;",
            "    let zero_step = zero_nwg.x * zero_nwg.y * zero_nwg.z;",
            "    var zero_l = zero_wid.x + zero_nwg.x * (zero_wid.y + zero_nwg.y * zero_wid.z);",
            "    loop {",
            "        if (zero_l >= zero_total) { break; }",
            *init,
            "        var zero_w = vec3<u32>(zero_l, 0u, 0u);",
            "        if (zero_gc.y * zero_gc.z != 1u) {",
            "            zero_w = vec3<u32>(zero_l % zero_gc.x, (zero_l / zero_gc.x) % zero_gc.y, zero_l / (zero_gc.x * zero_gc.y));",
            "        }",
            f"        let zero_g = zero_w * vec3<u32>({wx}u, {wy}u, {wz}u) + zero_lid;",
            f"        {USER_MAIN}({', '.join(args)});",
            "        if (zero_total - zero_l <= zero_step) { break; }",
            "        zero_l += zero_step;",
            "    }",
            "}",
        ]
    )
    return EntryWrap(tuple(blanked), tuple(spl), wrapper)
