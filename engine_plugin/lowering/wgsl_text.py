"""Just enough of a WGSL lexer for lowering: identifiers and punctuation outside comments.

Lowering never parses WGSL fully (wgpu's compiler does that); it needs to find identifiers
(for source splicing and name-clash checks), calls (``NAME_append(``), module-scope
declarations and the entry point, all while skipping ``//`` and nested ``/* */`` comments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterator

from ..errors import LoweringError, Span

__all__ = [
    "Token",
    "tokens",
    "at_module_scope",
    "module_declarations",
    "find_calls",
    "entry_point",
    "workgroup_size_attribute",
    "module_constants",
    "evaluate_int",
    "starts_in_block_comment",
    "lf_breaks",
    "odd_character",
    "refuse_odd_characters",
    "IDENT",
]

# WGSL identifiers are Unicode (XID_Start | _, then XID_Continue): Python's \w letters and
# digits stand for those. ASCII only cut 'wé' to 'w' in generated code (review helper 184).
IDENT = r"[^\W\d]\w*"  # one WGSL identifier (the pattern every check that finds names uses)
_IDENT_START = re.compile(r"[^\W\d]")
_IDENT = re.compile(IDENT)
_NUMBER = re.compile(r"(0[xX][0-9a-fA-F]+|[0-9]*\.?[0-9]+([eE][+-]?[0-9]+)?)[uifh]?")


@dataclass(frozen=True)
class Token:
    kind: str  # "ident", "number" or "punct"
    text: str
    line: int  # 1-based
    col: int  # 1-based
    offset: int  # 0-based offset in the text


_LINE_BREAK = re.compile("[\n\r\x0b\x0c\x85\u2028\u2029]")
_EDITOR_BREAK = re.compile("\r\n|\r")
_COMMENT_BREAK = re.compile("[\0\n\r\x0b\x0c\x85\u2028\u2029]")
# What WGSL (naga) reads as a line break and editors do not show as one, and the NUL a C string
# ends at: refused where they stand (see odd_character).
_ODD = re.compile("[\0\x0b\x0c\x85\u2028\u2029]")
_ODD_NAMES = {
    "\0": "a NUL character (U+0000): WGSL text cannot hold one (a binary file, or a bad save?)",
    "\x0b": "a vertical tab (U+000B)",
    "\x0c": "a form feed (U+000C)",
    "\x85": "a next-line character (U+0085)",
    "\u2028": "a line separator (U+2028)",
    "\u2029": "a paragraph separator (U+2029)",
}


def lf_breaks(text: str) -> str:
    """``text`` with its CRLF and CR line breaks written as ``\n``, how lowering reads a body
    or a module: the lines every directive (``// @when``, ``#import``), check and error counts
    are the lines an editor shows (a whole-file CR kernel kept its @when blocks in every
    variant: review helper 176). The line breaks editors do not show are refused instead
    (:func:`odd_character`)."""
    return _EDITOR_BREAK.sub("\n", text) if "\r" in text else text


def comment_safe(text: str) -> str:
    """``text`` (a file's path) fit for a ``//`` comment of the lowered source: every
    character WGSL takes as a line break, and NUL, written as a space (an asset folder named
    with a newline ended the header comment early, and the rest of its name compiled as
    WGSL: review helper 186)."""
    return _COMMENT_BREAK.sub(" ", text)


def odd_character(text: str) -> tuple[int, int, str, str] | None:
    """The first character of ``text`` (lines at ``\n``) WGSL reads otherwise than an editor
    shows it, as ``(line, column, that line, what it is)``, or None: VT, FF, NEL, U+2028 and
    U+2029 end a line and a ``//`` comment for naga, not for an editor (a form feed before
    ``// @when`` kept the block in every variant, and errors were a line off per break:
    review helpers 176, 178); a NUL ends the text wgpu-native reads."""
    m = _ODD.search(text)
    if m is None:
        return None
    at = m.start()
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    line_text = text[start : end if end >= 0 else len(text)]
    what = _ODD_NAMES[m.group()]
    if m.group() != "\0":
        what += ": WGSL reads it as a line break, an editor does not; use a newline (or a space)"
    return text.count("\n", 0, at) + 1, at - start + 1, _ODD.sub(" ", line_text), what


def refuse_odd_characters(text: str, path: str | None) -> None:
    """Raise a LoweringError at the first :func:`odd_character` of a body or module at ``path``."""
    odd = odd_character(text)
    if odd is not None:
        line, col, shown, what = odd
        raise LoweringError(what, Span(path, line, col, shown))


# WGSL's blankspace but \n (counted as lines above): the left-to-right and right-to-left marks
# too, or they became tokens that split '&pts' and 'atomicExchange (' for every check, while
# naga read the text as without them (review helper 112).
_BLANK = " \t\r\x0b\x0c\x85\u200e\u200f\u2028\u2029"


def tokens(text: str) -> Iterator[Token]:
    """Identifiers, numbers and single punctuation characters, skipping comments and space."""
    i, n = 0, len(text)
    line, line_start = 1, 0
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            line_start = i + 1
            i += 1
            continue
        if c in _BLANK:
            i += 1
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            # A line comment ends where WGSL (and naga) end it, at any line break, not only
            # at \n: text after a lone \r is code to the compiler, so to every check too.
            m = _LINE_BREAK.search(text, i)
            i = n if m is None else m.start()
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "*":
            opened = Token("punct", "/*", line, i - line_start + 1, i)
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n":
                        line += 1
                        line_start = i + 1
                    i += 1
            if depth:
                # Never closed: it would swallow whatever follows this text (the generated
                # entry point, after a body), so the checks see where it opened.
                yield opened
            continue
        if _IDENT_START.match(c):
            m = _IDENT.match(text, i)
            assert m is not None  # _IDENT_START matched this character
            yield Token("ident", m.group(0), line, i - line_start + 1, i)
            i = m.end()
            continue
        if c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            m = _NUMBER.match(text, i)
            end = m.end() if m and m.end() > i else i + 1
            yield Token("number", text[i:end], line, i - line_start + 1, i)
            i = end
            continue
        yield Token("punct", c, line, i - line_start + 1, i)
        i += 1


_DECL_KEYWORDS = {"fn", "struct", "alias", "const", "override", "var"}


def at_module_scope(toks: list[Token]) -> Iterator[tuple[int, Token]]:
    """(index, token) of the tokens outside every ``{}`` and ``()``: module-scope text."""
    depth = 0
    for i, t in enumerate(toks):
        if t.text in "{(":
            depth += 1
        elif t.text in "})":
            depth -= 1
        elif depth == 0:
            yield i, t


def module_declarations(text: str) -> list[Token]:
    """Identifiers declared at module scope (fn, struct, alias, const, override, var)."""
    toks = list(tokens(text))
    out: list[Token] = []
    depth = 0
    i = 0
    while i < len(toks):
        t = toks[i]
        if t.kind == "punct":
            if t.text in "{(":
                depth += 1
            elif t.text in "})":
                depth -= 1
        elif depth == 0 and t.kind == "ident" and t.text in _DECL_KEYWORDS:
            j = i + 1
            if t.text == "var" and j < len(toks) and toks[j].text == "<":
                while j < len(toks) and toks[j].text != ">":
                    j += 1
                j += 1
            if j < len(toks) and toks[j].kind == "ident":
                out.append(toks[j])
                i = j
        i += 1
    return out


def find_calls(text: str, names: set[str]) -> list[Token]:
    """Identifier tokens in ``names`` that are followed by ``(``."""
    toks = list(tokens(text))
    return [t for t, nxt in zip(toks, toks[1:]) if t.kind == "ident" and t.text in names and nxt.text == "("]


def entry_point(text: str) -> Token | None:
    """The ``main`` identifier of a module-scope ``fn main``, if any."""
    for t in module_declarations(text):
        if t.text == "main":
            return t
    return None


def workgroup_size_attribute(toks: list[Token], entry: str = "main") -> tuple[Token, list[list[Token]]] | None:
    """The ``@workgroup_size(...)`` attribute of the module-scope ``fn`` named ``entry``: its
    name token and each argument's tokens (split at the commas outside nested parentheses)."""
    for i, t in at_module_scope(toks):
        if not (t.text == "fn" and i + 1 < len(toks) and toks[i + 1].text == entry):
            continue
        j = i - 1  # back over the attributes in front of the fn
        while j >= 1:
            if toks[j].text == ")":
                depth, k = 0, j
                while k >= 0:
                    depth += (toks[k].text == ")") - (toks[k].text == "(")
                    if depth == 0:
                        break
                    k -= 1
                j = k - 1  # the attribute's name, before its "("
            if j >= 1 and toks[j].kind == "ident" and toks[j - 1].text == "@":
                if toks[j].text == "workgroup_size" and j + 1 < len(toks) and toks[j + 1].text == "(":
                    return toks[j], _arguments(toks, j + 2)
                j -= 2
                continue
            break
        return None
    return None


def _arguments(toks: list[Token], start: int) -> list[list[Token]]:
    """The comma-separated arguments from ``toks[start]`` to the closing parenthesis."""
    args: list[list[Token]] = [[]]
    depth = 0
    for tok in toks[start:]:
        if tok.text == ")" and depth == 0:
            break
        if tok.text == "(":
            depth += 1
        elif tok.text == ")":
            depth -= 1
        if tok.text == "," and depth == 0:
            args.append([])
        else:
            args[-1].append(tok)
    if args and not args[-1]:
        args.pop()  # a trailing comma
    return args


def module_constants(toks: list[Token]) -> dict[str, list[Token]]:
    """Module-scope ``const`` and ``override`` declarations with an initialiser: name ->
    the initialiser's tokens (an override's default: the lowering sets no override)."""
    out: dict[str, list[Token]] = {}
    scope = list(at_module_scope(toks))
    # Where each declaration's text may run to at most: the next module-scope declaration
    # keyword (a missing ";" cannot make one declaration read the rest of the file). Each
    # token is then looked at by one declaration only: linear in the body, where copying the
    # rest of the tokens per declaration took 97 s for 65,000 consts (review helper 224).
    limits = [len(toks)] * len(scope)
    bound = len(toks)
    for k in range(len(scope) - 1, -1, -1):
        limits[k] = bound
        i, t = scope[k]
        if t.kind == "ident" and t.text in _DECL_KEYWORDS:
            bound = i
    for k, (i, t) in enumerate(scope):
        if t.text not in ("const", "override") or k + 1 >= len(scope) or scope[k + 1][1].kind != "ident":
            continue
        name = scope[k + 1][1].text
        end = limits[k + 1]
        j = scope[k + 1][0] + 1
        while j < end and toks[j].text not in ("=", ";"):
            j += 1
        if j >= end or toks[j].text != "=":
            continue
        init: list[Token] = []
        depth = 0
        for n in range(j + 1, end):
            tok = toks[n]
            if tok.text == ";" and depth == 0:
                break
            if tok.kind == "punct" and tok.text in "({[":
                depth += 1
            elif tok.kind == "punct" and tok.text in ")}]":
                depth -= 1
            init.append(tok)
        out[name] = init
    return out


def evaluate_int(expr: list[Token], names: Callable[[str], int | None]) -> int | None:
    """An integer constant expression as WGSL evaluates it (division truncates): literals,
    ``names`` (None: unknown), ``+ - * / %``, ``<< >> & | ^``, parentheses, ``u32()``/``i32()``
    and ``min``/``max``/``abs``; None when it is anything else (or nests past Python's stack)."""
    pos = 0

    def peek(k: int = 0) -> str:
        return expr[pos + k].text if pos + k < len(expr) else ""

    def call(fn: str) -> int | None:
        nonlocal pos
        pos += 1  # the "("
        args = []
        while True:
            v = bitwise()
            if v is None:
                return None
            args.append(v)
            if peek() == ",":
                pos += 1
                continue
            if peek() != ")":
                return None
            pos += 1
            break
        if fn in ("u32", "i32", "abs") and len(args) == 1:
            return abs(args[0]) if fn == "abs" else args[0]
        if fn in ("min", "max") and len(args) == 2:
            return min(args) if fn == "min" else max(args)
        return None

    def factor() -> int | None:
        nonlocal pos
        if pos >= len(expr):
            return None
        tok = expr[pos]
        pos += 1
        if tok.text == "-":
            v = factor()
            return None if v is None else -v
        if tok.text == "(":
            v = bitwise()
            if peek() != ")":
                return None
            pos += 1
            return v
        if tok.kind == "number":
            try:
                return int(tok.text.rstrip("ui"), 0)
            except ValueError:
                return None
        if tok.kind == "ident":
            if peek() == "(":
                return call(tok.text)
            if peek() == "." and pos + 1 < len(expr) and expr[pos + 1].kind == "ident":
                pos += 2  # a vector const's member: names() answers "V.x"
                return names(f"{tok.text}.{expr[pos - 1].text}")
            return names(tok.text)
        return None

    def binary(operand: Callable[[], int | None], ops: dict[str, Callable[[int, int], int | None]]) -> Callable[[], int | None]:
        """A left-associative level of operators ``ops`` over ``operand``."""

        def level() -> int | None:
            nonlocal pos
            v = operand()
            while v is not None and peek() in ops:
                op = ops[peek()]
                pos += 1
                w = operand()
                v = None if w is None else op(v, w)
            return v

        return level

    def shift() -> int | None:
        nonlocal pos
        v = total()
        if v is not None and peek() in ("<", ">") and peek(1) == peek():  # "<<" / ">>" come as two tokens
            op = peek()
            pos += 2
            w = total()
            if w is None or not 0 <= w < 32:
                return None
            v = v << w if op == "<" else v >> w
        return v

    # Division truncates toward zero, as WGSL's does; by zero, nothing is known.
    term = binary(factor, {"*": lambda a, b: a * b, "/": lambda a, b: int(a / b) if b else None, "%": lambda a, b: a - b * int(a / b) if b else None})
    total = binary(term, {"+": lambda a, b: a + b, "-": lambda a, b: a - b})
    bitwise = binary(shift, {"&": lambda a, b: a & b, "|": lambda a, b: a | b, "^": lambda a, b: a ^ b})

    try:
        value = bitwise()
    except RecursionError:
        return None
    return value if pos == len(expr) else None


_LANES = {"x": 0, "y": 1, "z": 2, "w": 3, "r": 0, "g": 1, "b": 2, "a": 3}


def vector_member(init: list[Token], member: str, names: Callable[[str], int | None]) -> int | None:
    """Lane ``member`` (x/y/z/w or r/g/b/a) of a vector constructor ``init``
    (``vec3<u32>(32u, 1u, 1u)``, ``vec2u(8u)``), evaluated; None for anything else."""
    lane = _LANES.get(member)
    if lane is None or not init or init[0].kind != "ident" or not init[0].text.startswith("vec"):
        return None
    i = 1
    if i < len(init) and init[i].text == "<":  # vec3<u32>
        while i < len(init) and init[i].text != ">":
            i += 1
        i += 1
    if i >= len(init) or init[i].text != "(":
        return None
    args = _arguments(init, i + 1)
    if len(args) == 1:
        return evaluate_int(args[0], names)  # a splat
    return evaluate_int(args[lane], names) if lane < len(args) else None


_DIRECTIVES = ("enable", "requires", "diagnostic")


def hoist_directives(lines: list[str] | tuple[str, ...]) -> tuple[list[str], list[tuple[int, str]]]:
    """WGSL's global directives (``enable``, ``requires``, ``diagnostic``) that open a text,
    which WGSL wants before every declaration (the lowering declares its own above the body).

    Answers the lines with each directive blanked (spaces: rows and columns stay put) and the
    directives as ``(row, text)`` (0-based row of each line a directive covers, its text
    indented to its column), in order."""
    out = list(lines)
    text = "\n".join(out)
    toks = list(tokens(text))
    starts = [0]
    for line in out:
        starts.append(starts[-1] + len(line) + 1)
    hoisted: list[tuple[int, str]] = []
    i = 0
    while i < len(toks) and toks[i].kind == "ident" and toks[i].text in _DIRECTIVES:
        j, depth = i + 1, 0
        while j < len(toks) and not (toks[j].text == ";" and depth == 0):
            depth += (toks[j].text == "(") - (toks[j].text == ")")
            j += 1
        if j >= len(toks):
            break  # unterminated: the compiler says so, at the user's line
        first, last = toks[i], toks[j]
        for row in range(first.line - 1, last.line):
            lo = max(starts[row], first.offset)
            hi = min(starts[row] + len(out[row]), last.offset + 1)
            piece = text[lo:hi]
            hoisted.append((row, " " * (lo - starts[row]) + piece))
            out[row] = out[row][: lo - starts[row]] + " " * len(piece) + out[row][hi - starts[row] :]
        i = j + 1
    return out, hoisted


def starts_in_block_comment(lines: list[str] | tuple[str, ...]) -> list[bool]:
    """Per line, whether it starts inside a ``/* */`` comment (WGSL's nest): a directive
    (``// @when``, ``#import``) there is commented out, as naga reads the text."""
    out = []
    depth = 0
    for line in lines:
        out.append(depth > 0)
        i, n = 0, len(line)
        while i < n:
            pair = line[i : i + 2]
            if depth == 0 and pair == "//":
                break  # a line comment: the rest of the line
            if pair == "/*":
                depth += 1
                i += 2
            elif depth and pair == "*/":
                depth -= 1
                i += 2
            else:
                i += 1
    return out
