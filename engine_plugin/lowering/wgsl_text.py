"""Just enough of a WGSL lexer for lowering: identifiers and punctuation outside comments.

Lowering never parses WGSL fully (wgpu's compiler does that); it needs to find identifiers
(for source splicing and name-clash checks), calls (``NAME_append(``), module-scope
declarations and the entry point, all while skipping ``//`` and nested ``/* */`` comments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

__all__ = ["Token", "tokens", "at_module_scope", "module_declarations", "find_calls", "entry_point", "workgroup_size_literal", "starts_in_block_comment"]

_IDENT_START = re.compile(r"[A-Za-z_]")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"(0[xX][0-9a-fA-F]+|[0-9]*\.?[0-9]+([eE][+-]?[0-9]+)?)[uifh]?")


@dataclass(frozen=True)
class Token:
    kind: str  # "ident", "number" or "punct"
    text: str
    line: int  # 1-based
    col: int  # 1-based
    offset: int  # 0-based offset in the text


_LINE_BREAK = re.compile("[\n\r\x0b\x0c\x85\u2028\u2029]")


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
        if c in " \t\r\x0b\x0c\x85\u2028\u2029":
            i += 1
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "/":
            # A line comment ends where WGSL (and naga) end it, at any line break, not only
            # at \n: text after a lone \r is code to the compiler, so to every check too.
            m = _LINE_BREAK.search(text, i)
            i = n if m is None else m.start()
            continue
        if c == "/" and i + 1 < n and text[i + 1] == "*":
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


def workgroup_size_literal(text: str) -> tuple[Token, tuple[int, int, int]] | None:
    """The ``@workgroup_size(...)`` attribute when all its arguments are integer literals."""
    toks = list(tokens(text))
    for i, t in enumerate(toks):
        if t.text == "workgroup_size" and i > 0 and toks[i - 1].text == "@" and i + 1 < len(toks) and toks[i + 1].text == "(":
            dims: list[int] = []
            j = i + 2
            while j < len(toks) and toks[j].text != ")":
                tok = toks[j]
                if tok.kind == "number":
                    try:
                        dims.append(int(tok.text.rstrip("ui"), 0))
                    except ValueError:
                        return None
                elif tok.text != ",":
                    return None
                j += 1
            if not 1 <= len(dims) <= 3:
                return None
            return t, tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]
    return None


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
