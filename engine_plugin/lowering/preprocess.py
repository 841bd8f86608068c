"""The user's WGSL before emitters see it: ``// @when`` blocks and ``kind: source`` splicing.

``// @when NAME opt opt`` ... ``// @end`` keeps the lines between in the variants where NAME
takes one of the options and blanks them in the others. Line numbers never move, so every
later error still points at the user's own line.

Source splicing replaces whole identifiers (never inside comments, never part of a longer
identifier, never a member name: after ``.`` or declared in a struct). A replacement with newlines adds lines; every added line maps back to the line
of the identifier it came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from ..errors import LoweringError, Span
from .schema import SpecParam
from .wgsl_text import starts_in_block_comment, tokens

__all__ = ["apply_when_blocks", "splice_sources", "SplicedBody", "SpliceTooLarge", "WHEN_RE", "END_RE"]

WHEN_RE = re.compile(r"^(\s*)//\s*@when\b(.*)$")
END_RE = re.compile(r"^(\s*)//\s*@end\b\s*(.*)$")


def apply_when_blocks(lines: list[str], values: Mapping[str, str], spec: Mapping[str, SpecParam], path: str | None) -> list[str]:
    """Blank the lines of ``@when`` blocks whose condition fails; the line count is unchanged.

    Raises:
        LoweringError: an unknown name or option, a block without ``@end``, a stray ``@end``.
    """
    out: list[str] = []
    stack: list[tuple[int, bool]] = []  # (line of the @when, whether it holds)
    commented = starts_in_block_comment(lines)
    for idx, line in enumerate(lines, start=1):
        m = None if commented[idx - 1] else WHEN_RE.match(line)  # inside /* */ it is comment text
        if m:
            words = m.group(2).split()
            col = len(m.group(1)) + 1
            if not words:
                raise LoweringError("'// @when' needs a specialisation name and options, e.g. // @when FOLD add max", Span(path, idx, col, line))
            name, options = words[0], words[1:]
            sp = spec.get(name)
            if sp is None:
                raise LoweringError(
                    f"'// @when {name}': {name!r} is not a specialisation (known: {', '.join(spec) or 'none'})",
                    Span(path, idx, col + line[col - 1 :].find(name), line),
                )
            if not sp.options:
                raise LoweringError(f"'// @when {name}': {name} is a source specialisation with no options", Span(path, idx, col, line))
            if not options:
                raise LoweringError(f"'// @when {name}' lists no options; expected e.g. // @when {name} {sp.options[0]}", Span(path, idx, col, line))
            for opt in options:
                if opt not in sp.options:
                    raise LoweringError(
                        f"'// @when {name}': {opt!r} is not an option of {name} ({', '.join(sp.options)})",
                        Span(path, idx, col + line[col - 1 :].find(opt, len(name)), line),
                    )
            holds = values.get(name) in options
            stack.append((idx, holds))
            out.append(line)  # directives are comments: kept, so the line keeps its text
            continue
        m = None if commented[idx - 1] else END_RE.match(line)
        if m:
            if not stack:
                raise LoweringError("'// @end' without an open '// @when'", Span(path, idx, len(m.group(1)) + 1, line))
            stack.pop()
            out.append(line)
            continue
        live = all(h for _, h in stack)
        out.append(line if live else "")
    if stack:
        first_line = stack[-1][0]
        raise LoweringError("'// @when' block is never closed; add '// @end'", Span(path, first_line, 1, lines[first_line - 1]))
    return out


@dataclass(frozen=True)
class SplicedBody:
    """The body after splicing: its lines, the user line of each, and column shifts.

    ``splices``: (out_line_index, out_col, out_len, user_col, user_len), 1-based columns, for
    mapping compiler columns on spliced lines back to the user's text.
    """

    lines: tuple[str, ...]
    user_lines: tuple[int, ...]
    splices: tuple[tuple[int, int, int, int, int], ...]


def _free_identifiers(text: str, names: Mapping[str, str]) -> list:
    """The tokens of ``text`` naming one of ``names`` as an identifier of its own: not a member
    after ``.`` (``v.w``, ``params.gain``, ``s.gain``) and not a member declared in a struct
    body (``gain: f32``). Splicing those changed which member a kernel reads: ``v.w`` with a
    source ``w = "x"`` read ``v.x`` (review helper 168)."""
    found = []
    toks = list(tokens(text))
    struct = 0  # 1: after `struct`, 2: after its name, 3: inside its body
    for j, tok in enumerate(toks):
        if tok.kind == "ident":
            if tok.text == "struct" and struct == 0:
                struct = 1
                continue
            if struct == 1:
                struct = 2
            if tok.text not in names:
                continue
            if j and toks[j - 1].text == ".":
                continue
            if struct == 3 and j + 1 < len(toks) and toks[j + 1].text == ":":
                continue
            found.append(tok)
        elif tok.text == "{" and struct == 2:
            struct = 3
        elif tok.text == "}" and struct == 3:
            struct = 0
    return found


class SpliceTooLarge(Exception):
    """The spliced body would pass ``limit`` characters: ``name`` grows it most, spliced at
    ``uses`` places (the first on user line ``first_line``) into ``size`` characters."""

    def __init__(self, name: str, uses: int, size: int, first_line: int):
        super().__init__(name)
        self.name, self.uses, self.size, self.first_line = name, uses, size, first_line


def splice_sources(text: str, replacements: Mapping[str, str], limit: int | None = None) -> SplicedBody:
    """Replace whole identifiers named in ``replacements`` outside comments.

    Raises:
        SpliceTooLarge: the result would be longer than ``limit`` characters, found before
            any of it is built.
    """
    user_lines = text.split("\n")
    hits: dict[int, list] = {}
    uses: dict[str, list] = {}
    if replacements:
        for tok in _free_identifiers(text, replacements):
            hits.setdefault(tok.line, []).append(tok)
            uses.setdefault(tok.text, []).append(tok)
    if limit is not None:
        # Each use is a copy of the value: a 100 KiB default used 128 times made 12.5 MiB of
        # WGSL (17 s of lowering on the game thread) from files within their own limits
        # (review helper 237). Summed before building, so the refusal costs nothing.
        growth = {name: len(found) * (len(replacements[name]) - len(name)) for name, found in uses.items()}
        size = len(text) + sum(growth.values())
        if size > limit:
            name = max(growth, key=lambda n: growth[n])
            raise SpliceTooLarge(name, len(uses[name]), size, uses[name][0].line)
    out_lines: list[str] = []
    out_user: list[int] = []
    splices: list[tuple[int, int, int, int, int]] = []
    for lineno, line in enumerate(user_lines, start=1):
        toks = hits.get(lineno)
        if not toks:
            out_lines.append(line)
            out_user.append(lineno)
            continue
        pieces, pos = [], 0
        row, out_col = len(out_lines), 1  # where the next piece starts in the output
        for tok in toks:
            start = tok.col - 1
            repl = replacements[tok.text]
            pieces.append(line[pos:start])
            pieces.append(repl)
            out_col += start - pos
            rows = repl.split("\n")
            splices.append((row, out_col, len(rows[0]), tok.col, len(tok.text)))
            # A value's later rows start new output rows: each stands, from column 1, for the
            # user's text up to the identifier's end, so an error inside points at the
            # identifier and one after it on the row at its own column (review helper 237:
            # they took the generated row's columns, 6:5 for 6:25).
            for later in rows[1:]:
                row, out_col = row + 1, 1
                splices.append((row, 1, len(later), tok.col, tok.col - 1 + len(tok.text)))
            out_col += len(rows[-1])
            pos = start + len(tok.text)
        pieces.append(line[pos:])
        for text_row in "".join(pieces).split("\n"):
            out_lines.append(text_row)
            out_user.append(lineno)
    return SplicedBody(tuple(out_lines), tuple(out_user), tuple(splices))
