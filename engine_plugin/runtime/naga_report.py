"""Read naga's error reports (as wgpu-native renders them) into a location and a message.

naga draws a codespan report: a header (``Shader validation error: Function [0] 'helper' is
invalid``), the primary location (``┌─ :2:1``: the whole function, for validation errors),
source rows with caret rows under them (``^^^^^ naga::ir::Expression [2]`` or a human label
such as ``invalid function call``), and ``= note`` lines whose last one says what is wrong.
The primary location of a validation error is the enclosing function's ``fn`` header, which
is useless to a user whose mistake is deep inside it: we take the innermost labelled span.
Arena handles (``[8]``) mean nothing outside naga: types are named, other handles removed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import TAB_STOP, char_width, expand_tabs

__all__ = ["NagaReport", "parse_naga_report", "clean_naga_text"]

_PRIMARY_RE = re.compile(r"┌─[^\n]*?:(\d+):(\d+)[ \t]*$", re.MULTILINE)  # "┌─ LABEL:19:1"; labels may hold ':'

_HEADER_RE = re.compile(r"(?:parsing|validation|Shader[^\n]*?) error:?\s*(.*)", re.IGNORECASE)
_SOURCE_ROW_RE = re.compile(r"^\s*(\d+)\s*│(.*)$")
_CARET_ROW_RE = re.compile(r"^\s*│(.*)$")

_KIND = {"Float": "f", "Sint": "i", "Uint": "u"}
_SIZE = {"Bi": 2, "Tri": 3, "Quad": 4}


@dataclass(frozen=True)
class NagaReport:
    """Where (lowered line, column) and what (one line, no handles) a naga report says."""

    line: int | None
    col: int | None
    message: str


def _scalar(kind: str, width: str) -> str:
    if kind == "Bool":
        return "bool"
    if kind.startswith("Abstract"):
        return "abstract " + kind[len("Abstract") :].lower()
    return f"{_KIND.get(kind, kind.lower())}{int(width) * 8}"


def _render_types(text: str) -> str:
    """naga's Debug form of types as WGSL type names."""
    text = re.sub(
        r"Vector \{ size: (\w+), scalar: Scalar \{ kind: (\w+), width: (\d+) \} \}",
        lambda m: f"vec{_SIZE.get(m.group(1), m.group(1))}<{_scalar(m.group(2), m.group(3))}>",
        text,
    )
    text = re.sub(r"Scalar\(Scalar \{ kind: (\w+), width: (\d+) \}\)", lambda m: _scalar(m.group(1), m.group(2)), text)
    text = re.sub(r"Scalar \{ kind: (\w+), width: (\d+) \}", lambda m: _scalar(m.group(1), m.group(2)), text)
    return text


def clean_naga_text(text: str) -> str:
    """A naga note without arena handles: ``[0] (of type X)`` becomes the type name, other
    ``[N]`` handles and ``naga::ir::`` paths go."""
    text = _render_types(text)
    text = re.sub(r"\[\d+\] \(of type ([^()]*(?:\([^()]*\))?[^()]*)\)", r"`\1`", text)
    text = re.sub(r"naga::ir::\w+ ?", "", text)
    # A type handle naga prints as an Option ("return type Some([0])") names nothing here.
    text = re.sub(r"\s*Some\(\[\d+\]\)", "", text)
    # A handle that names nothing else: say what it is, not a blank ("Loading of  can't be done").
    text = re.sub(
        r"Loading of \[\d+\] can't be done",
        "this is not a value that can be loaded (a binding is a storage array: read an element with NAME_get(i))",
        text,
    )
    # naga's Rust debug text for a function that returns nothing where it declared a type
    # (a missing return, or a bare `return;`): review helper 203.
    text = text.replace(
        "The `return` expression None does not match the declared return type",
        "the function declares a return type but returns no value here (a bare `return;`, or its end reached without a `return value;`)",
    )
    text = re.sub(r"stored in \[\d+\]", "stored in its destination", text)
    text = re.sub(r"\b(of|to|from|for) \[\d+\]", r"\1 this value", text)
    text = re.sub(r"\s*\[\d+\]", "", text)
    return re.sub(r"\s{2,}", " ", text).strip()


_MULTI_LINE = 1 << 30  # the width given a span over several lines: wider than any one-line span
_CARETS_RE = re.compile(r"\^+")


def _char_column(text: str, display: int) -> int:
    """The 1-based character column of ``text`` at 0-based display column ``display`` (as
    naga's renderer draws it: tabs to the next stop of four, wide characters two columns)."""
    at = 0
    for i, c in enumerate(text):
        if at >= display:
            return i + 1
        at = at + TAB_STOP - at % TAB_STOP if c == "\t" else at + char_width(c)
    return len(text) + 1


def _labels(lines: list[str], source_lines: list[str]) -> list[tuple[int, int, int, str]]:
    """(line, character column, width, label) of every label in the report: caret labels on
    one line (several groups on a row: the row's label is the last group's), pointer labels
    (``│`` rows, when several labels share a line) and spans over several lines (``╭`` at their
    start, ``╰`` with the label at their end; the start is taken, as wide as no one-line span)."""
    out = []
    row_line: int | None = None
    row_start = 0
    text = ""
    opened: tuple[int, int] | None = None  # (line, column) where a span over several lines starts
    for row in lines:
        m = _SOURCE_ROW_RE.match(row)
        if m:
            row_line = int(m.group(1))
            text = source_lines[row_line - 1].rstrip() if 0 < row_line <= len(source_lines) else ""
            body = row.rstrip()
            drawn = expand_tabs(text)
            row_start = len(body) - len(drawn) if text and body.endswith(drawn) else -1
            continue
        if row_line is None or row_start < 0 or not _CARET_ROW_RE.match(row):
            continue
        if "^" not in row:
            # A pointer label: "│ │      naga::ir::Expression [0]" (its text starts at its span)
            stripped = row.rstrip()
            after = stripped.rfind("│") + 1
            tail = stripped[after:]
            label = tail.strip()
            at = after + len(tail) - len(tail.lstrip())
            if label and at - row_start >= 0:
                out.append((row_line, _char_column(text, at - row_start), 1, label))
            continue
        groups = list(_CARETS_RE.finditer(row))
        first = groups[0].start()
        before = row[:first]
        if "╭" in before:
            opened = (row_line, _char_column(text, first - row_start))
            continue
        last = groups[-1]
        label = row[last.end() :].strip()
        if "╰" in before or "─" in before:  # the end of a span over several lines
            if opened is not None:
                out.append((opened[0], opened[1], _MULTI_LINE, label))
                opened = None
            continue
        # Several caret groups: the label after the row is the last group's (the others'
        # come on pointer rows below, at their own columns).
        col = _char_column(text, last.start() - row_start)
        width = _char_column(text, last.end() - row_start) - col
        out.append((row_line, col, max(1, width), label))
    return out


def parse_naga_report(message: str, source: str) -> NagaReport:
    """The innermost labelled span of a naga report about ``source`` and its message."""
    # Rows end at "\n" only: a source row may hold U+2028, a form feed or a lone CR, which
    # splitlines() would cut it at (and lose the row's labels).
    rows = [r.rstrip("\r") for r in message.split("\n")]
    header = ""
    for row in rows:
        m = _HEADER_RE.search(row)
        if m and m.group(1).strip():
            header = m.group(1).strip()
            break
    primary = _PRIMARY_RE.search(message)
    if primary is None:
        plain = [r.strip() for r in rows if r.strip() and not r.strip().startswith(("Caused by", "In wgpu", "Validation Error"))]
        return NagaReport(None, None, clean_naga_text(header or (plain[0] if plain else message.strip())))
    start = next(i for i, r in enumerate(rows) if "┌─" in r)
    report_rows = []
    notes = []
    for row in rows[start + 1 :]:
        text = row.strip()
        if text.startswith("="):
            notes.append(text.lstrip("= ").strip())
            continue
        if not text:
            if notes:
                break  # the plain-text repeat of the notes follows; the report is over
            continue
        report_rows.append(row)
    labels = _labels(report_rows, source.split("\n"))
    human = [lb for lb in labels if lb[3] and not lb[3].startswith("naga::")]
    # Prefer a span naga labelled in words, the last in the text (labels on one row come in
    # drawing order, not text order); else the narrowest span (the innermost expression).
    chosen = max(human, key=lambda lb: (lb[0], lb[1])) if human else (min(labels, key=lambda lb: lb[2]) if labels else None)
    detail = clean_naga_text(notes[-1]) if notes else ""
    if chosen is None:
        line, col = int(primary.group(1)), int(primary.group(2))
        label = ""
    else:
        line, col, _, label = chosen
        label = clean_naga_text(label) if not label.startswith("naga::") else ""
    head = clean_naga_text(header)
    if detail.startswith("note:") and head:
        # A hint ("note: perhaps you meant ..."), not what is wrong: the headline says that
        # (it was dropped: "function does not return any value" read as the hint alone, review
        # helper 184).
        text = f"{head}{f' ({label})' if label and label not in head else ''}; {detail}"
    elif detail and label and label not in detail:
        text = f"{label}: {detail}"
    elif detail:
        text = detail
    elif label and label not in head:
        text = f"{head} ({label})" if head and not head.endswith("is invalid") else label
    else:
        text = head or label
    return NagaReport(line, col, text)
