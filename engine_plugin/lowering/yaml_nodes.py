"""YAML text -> a node tree, with bounds that hold whatever the bytes.

PyYAML's composer shares the node of an anchor with every alias to it, so a few hundred bytes
of aliases of aliases ("billion laughs") describe billions of nodes; anything that walks the
tree (our parser does, for every value) expands them. The composer here counts, as it goes,
how many nodes the aliases stand for and stops past :data:`MAX_ALIAS_NODES`, at the alias that
crossed it. It also stops nesting past :data:`MAX_DEPTH` (the composer recurses once a level,
so a line of ``[`` would end in ``RecursionError``), and reports characters YAML refuses (NUL,
control characters) at their line and column. Every failure is a :class:`SchemaError` with
the user's file, line and column.

Lines are counted as editors count them (``\n``, ``\r\n``, ``\r``), not as YAML does: YAML
also breaks lines at U+0085, U+2028 and U+2029, which editors show inside a line, so positions
are taken from a mark's character index (:class:`EditorLines`), never from its line.
"""

from __future__ import annotations

import bisect
import re
from typing import Any

import yaml

from ..errors import SchemaError, Span

__all__ = ["compose_bounded", "EditorLines", "MAX_ALIAS_NODES", "MAX_DEPTH", "MAX_NODES", "MAX_SCHEMA_CHARS"]

# Nodes all aliases together may stand for. A real bindings.yaml that reuses a list of options
# through an anchor stands for tens; a bomb for millions.
MAX_ALIAS_NODES = 10_000
# Nesting of collections. A schema nests 4 deep (bindings > binding > key > list).
MAX_DEPTH = 64
# PyYAML's scanner is pure Python, about 1 s a MiB: a schema is a few KiB (a binding is about
# ten nodes and WebGPU binds at most 1,000 a group), so past these it is not a schema, and a
# hot reload must not spend seconds finding that out (review helper 108: 8 MiB took ~a minute).
MAX_SCHEMA_CHARS = 256 * 1024
MAX_NODES = 20_000


class _Refused(Exception):
    def __init__(self, message: str, mark: Any):
        super().__init__(message)
        self.message = message
        self.mark = mark


class _BoundedLoader(yaml.SafeLoader):
    """A SafeLoader whose composer keeps the expanded size of every node it made."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._sizes: dict[int, int] = {}  # id(node) -> nodes it stands for once expanded
        self._aliased = 0
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._nodes += 1
        if self._nodes > MAX_NODES:
            raise _Refused(f"more than {MAX_NODES} YAML values: a bindings.yaml holds hundreds; is it the right file?", self.peek_event().start_mark)
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = self.anchors.get(event.anchor)
            if node is not None:
                size = self._sizes.get(id(node))
                if size is None:  # the anchor's node is still being composed: it holds itself
                    raise _Refused(f"alias *{event.anchor} refers to a value that contains it (a recursive alias)", event.start_mark)
                self._aliased += size
                if self._aliased > MAX_ALIAS_NODES:
                    raise _Refused(
                        f"YAML aliases expand to more than {MAX_ALIAS_NODES} values (an alias bomb?); write the values out instead of aliasing aliases",
                        event.start_mark,
                    )
            return super().compose_node(parent, index)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"YAML nested more than {MAX_DEPTH} levels deep; a bindings.yaml nests 4", self.peek_event().start_mark)
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if isinstance(node, yaml.ScalarNode) and isinstance(node.value, str):
            try:
                node.value.encode("utf-8")
            except UnicodeEncodeError as exc:  # a "\ud800" escape: spliced or written out, no UTF-8 holds it
                char = node.value[exc.start]
                raise _Refused(f"the escape \\u{ord(char):04x} names a lone surrogate, which is no text; write the character itself", node.start_mark) from None
        self._sizes[id(node)] = _size(node, self._sizes)
        return node


def _size(node: Any, sizes: dict[int, int]) -> int:
    if isinstance(node, yaml.SequenceNode):
        return 1 + sum(sizes.get(id(c), 1) for c in node.value)
    if isinstance(node, yaml.MappingNode):
        return 1 + sum(sizes.get(id(k), 1) + sizes.get(id(v), 1) for k, v in node.value)
    return 1


_BREAK = re.compile(r"\r\n|\r|\n")


class EditorLines:
    """Line and column of a character index, and the lines, as an editor shows them."""

    def __init__(self, text: str):
        self.starts = [0] + [m.end() for m in _BREAK.finditer(text)]
        self.lines = _BREAK.split(text)
        if self.lines and self.lines[-1] == "" and len(self.lines) > 1:
            self.lines.pop()  # a final newline ends the last line; it does not start one

    def at(self, index: int) -> tuple[int, int]:
        """(line, column), both 1-based, of the character at ``index``."""
        i = bisect.bisect_right(self.starts, max(0, index)) - 1
        return i + 1, index - self.starts[i] + 1


def scalar_index(text: str, start: int, value: str, offset: int) -> int:
    """The index in ``text`` of character ``offset`` of the scalar ``value`` written at
    ``start`` (where its node starts: a tag or anchor, a quote, a ``|``/``>`` block
    indicator, or its first character). Folding, indentation and line breaks change only
    whitespace, so the non-blank characters of the value stand in the text in the same order:
    the one asked for is found by counting them (a linear offset put an error in a multi-line
    scalar past the end of its first line: review helper 186). An offset past the value's
    last non-blank character (an expression that ends too early) is just after that
    character, never in the text that follows (review helper 187). Escapes in a
    double-quoted scalar count as the characters they are written with."""
    at = start
    while text[at : at + 1] in ("!", "&"):  # node properties: a tag, an anchor, then blanks
        while at < len(text) and not text[at].isspace():
            at += 1
        while at < len(text) and text[at] in " \t":
            at += 1
    head = text[at : at + 1]
    if head in ("|", ">"):
        brk = _BREAK.search(text, at)
        at = brk.end() if brk else len(text)  # the content starts on the next line
    elif head in ("'", '"'):
        at += 1
    total = sum(1 for ch in value if not ch.isspace())
    if total == 0:
        return at
    k = sum(1 for ch in value[: max(0, offset)] if not ch.isspace())
    past_end = k >= total
    k = total - 1 if past_end else k
    for i in range(at, len(text)):
        if not text[i].isspace():
            if k == 0:
                return i + 1 if past_end else i
            k -= 1
    return start


def compose_bounded(text: str, path: str | None) -> Any:
    """The YAML node tree of ``text`` (None for an empty document).

    Raises:
        SchemaError: invalid YAML, a refused character, an alias bomb, a recursive alias or
            nesting past :data:`MAX_DEPTH`, at the line and column where it was found.
    """
    if len(text) > MAX_SCHEMA_CHARS:  # before anything walks the text (the line table too)
        line = text.count("\n", 0, MAX_SCHEMA_CHARS) + 1
        col = MAX_SCHEMA_CHARS - text.rfind("\n", 0, MAX_SCHEMA_CHARS)
        message = f"{len(text)} characters: a bindings.yaml is a few KiB (at most {MAX_SCHEMA_CHARS} here); is it the right file?"
        raise SchemaError(message, Span(path, line, col))
    editor = EditorLines(text)

    def span_at(index: int) -> Span:
        line, col = editor.at(index)
        return Span(path, line, col, editor.lines[line - 1] if 0 < line <= len(editor.lines) else None)

    loader = None
    try:
        loader = _BoundedLoader(text)
        return loader.get_single_node()
    except _Refused as exc:
        raise SchemaError(exc.message, span_at(exc.mark.index)) from None
    except yaml.reader.ReaderError as exc:
        # The reader checks every character up front and knows only the index of the bad one.
        what = f"character U+{exc.character:04X}" if isinstance(exc.character, int) else "a character"
        raise SchemaError(f"{what} is not allowed in YAML (NUL and control characters are not); remove it", span_at(exc.position)) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        if mark is None:
            raise SchemaError(f"invalid YAML: {exc.problem or exc.context}", span_at(0)) from None
        raise SchemaError(f"invalid YAML: {exc.problem or exc.context}", span_at(mark.index)) from None
    except yaml.YAMLError as exc:
        raise SchemaError(f"invalid YAML: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", span_at(0)) from None
    except RecursionError:  # pragma: no cover - MAX_DEPTH keeps the composer far from the limit
        raise SchemaError(f"YAML nested too deeply (at most {MAX_DEPTH} levels)", span_at(0)) from None
    finally:
        if loader is not None:
            loader.dispose()
