"""The engine_plugin error tree, and source locations that render like a compiler's.

Every error the plugin raises derives from :class:`PluginError` and also from the built-in
exception it resembles, so ``except ValueError`` in engine code keeps working::

    PluginError (Exception)
     ├─ SchemaError (ValueError)            bindings.yaml: keys, kinds, when, specialize
     │   └─ ExpressionError                 a count / capacity expression
     ├─ LoweringError (ValueError)          the WGSL body against the schema
     ├─ SpecializationError (ValueError)    a variant's specialisation values
     ├─ CompileError (RuntimeError)         wgpu refused the lowered shader or pipeline
     ├─ DispatchError (ValueError)          a run's inputs, params, sizes
     ├─ PageBindingError (ValueError)       page/column placement that cannot bind
     ├─ AssetError (ValueError)             a .computeShader folder's layout
     ├─ CacheError (RuntimeError)           the variant cache folder itself
     ├─ GpuError (RuntimeError)
     │   ├─ NoAdapterError                  no wgpu adapter on this machine
     │   └─ DeviceLostError                 the device was lost or reported an error
     ├─ StaleHandleError (LookupError)      a (key, generation) handle outlived its object
     │   └─ substrate.StaleRunError         a freed arena run
     ├─ StaleSpanError (RuntimeError)       an upload span outlived its chunk's content
     └─ ReadbackDataError (ValueError)      a readback result's bytes outside its callback, or none

Defined beside the code they guard (same root): substrate.SubstrateError (ValueError),
gpu.GpuDescriptorError (ValueError), gpu.UnsupportedFieldTypeError (TypeError),
world.WorldError (ValueError) with UnknownChunkError (KeyError), WorldFullError, ChunkBusyError.

Errors about a user's file carry a :class:`Span` and format as
``path:line:col: message`` followed by the offending line and a caret.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

__all__ = [
    "AssetError",
    "CacheError",
    "CompileError",
    "DeviceLostError",
    "DispatchError",
    "ExpressionError",
    "GpuError",
    "LoweringError",
    "NoAdapterError",
    "PageBindingError",
    "PluginError",
    "ReadbackDataError",
    "SchemaError",
    "Span",
    "SpecializationError",
    "StaleHandleError",
    "StaleSpanError",
    "bug",
    "in_source",
]


# Unicode's Prepended_Concatenation_Mark characters: category Cf, yet drawn one column wide.
# (as the unicode-width version in wgpu-native 0.32's naga draws them: U+0605 and U+08E2 take none,
# the Tifinagh joiner, a mark, takes one).
_PREPENDED_MARKS = frozenset("\u0600\u0601\u0602\u0603\u0604\u06dd\U000110bd\U000110cd\u2d7f")
_SHOWN_CHARS = 160  # the most of a source line an error shows
TAB_STOP = 4  # where a tab stops when a line is shown (naga's renderer, codespan, uses 4 too)


def char_width(c: str) -> int:
    """Columns a terminal gives ``c`` (as the unicode-width crate naga's renderer uses counts
    them): wide and fullwidth 2; marks, format characters and medial jamo 0; else 1."""
    if c in _PREPENDED_MARKS:
        return 1  # format characters drawn as a glyph (Arabic number signs and the like)
    if unicodedata.category(c) in ("Mn", "Me", "Cf") or "\u1160" <= c <= "\u11ff" or "\ud7b0" <= c <= "\ud7ff" or c in "\u3164\uffa0":
        return 0  # marks, format characters, medial and final jamo, Hangul fillers
    return 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1


def display_width(text: str) -> int:
    """Columns ``text`` takes on a line, tabs stopping every :data:`TAB_STOP` columns."""
    at = 0
    for c in text:
        at = at + TAB_STOP - at % TAB_STOP if c == "\t" else at + char_width(c)
    return at


def expand_tabs(text: str) -> str:
    """``text`` with each tab drawn as the spaces to its next stop (by display width)."""
    out, at = [], 0
    for c in text:
        if c == "\t":
            n = TAB_STOP - at % TAB_STOP
            out.append(" " * n)
            at += n
        else:
            out.append(c)
            at += char_width(c)
    return "".join(out)


@dataclass(frozen=True)
class Span:
    """A place in a user's file: 1-based line and column; ``text`` is that line, for the caret."""

    path: str | None
    line: int | None = None
    col: int | None = None
    text: str | None = None

    def prefix(self) -> str:
        parts = [self.path or "<string>"]
        if self.line is not None:
            parts.append(str(self.line))
            if self.col is not None:
                parts.append(str(self.col))
        return ":".join(parts)

    def caret(self) -> str:
        """The source line and a caret under the column, or '' when the line is unknown."""
        source, caret = self.shown()
        return f"\n    {source}\n    {caret}" if caret else ""

    def shown(self) -> tuple[str, str]:
        """The source line as shown (tabs expanded; a window of a very long line around the
        column) and the line with a caret under the column; ``("", "")`` when it is unknown."""
        if self.text is None or self.line is None:
            return "", ""
        raw = self.text.rstrip("\n")
        col = max(1, self.col or 1)
        if len(raw) > _SHOWN_CHARS:
            # A window of a very long line around the column (a 40 KB line went into every
            # message, log line and the demo's overlay whole: review helpers 176, 178), marked
            # cut with an ellipsis.
            start = max(0, min(col - 1 - _SHOWN_CHARS // 2, len(raw) - _SHOWN_CHARS))
            end = start + _SHOWN_CHARS
            raw = ("…" if start else "") + raw[start:end] + ("…" if end < len(raw) else "")
            col = col - start + (1 if start else 0)
        # The caret goes under the column's character as a terminal shows the line (tabs
        # expanded): the display width of what comes before it, not its character count.
        return expand_tabs(raw), " " * display_width(raw[: col - 1]) + "^"


def in_source(path: str | None, text: str | None, line: int | None, col: int | None = None) -> Span:
    """A :class:`Span` at 1-based ``line`` of a user's file whose ``text`` is known, with that
    line for the caret; ``col`` defaults to where the line's entry starts (its first character
    after the indentation and a YAML list dash). Without a line (or the text) only the path."""
    # Lines as the schema counts them (by "\n"; splitlines() would also split at U+2028 and
    # the like, and name another line than the error's).
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n") if text and line else []
    if not line or not 0 < line <= len(lines):
        return Span(path, line or None, col)
    source = lines[line - 1]
    if col is None:
        body = source.lstrip()
        if body.startswith("- "):
            body = body[2:].lstrip()
        col = len(source) - len(body) + 1
    return Span(path, line, col, source)


class PluginError(Exception):
    """Root of every error engine_plugin raises.

    ``message`` is the bare text; ``span`` (optional) says where in the user's files;
    ``str(error)`` renders ``path:line:col: message`` plus the line and a caret.
    """

    def __init__(self, message: str, span: Span | None = None, *, notes: tuple[str, ...] = ()):
        self.message = message
        self.span = span
        self.notes = tuple(notes)
        super().__init__(self.render())

    @property
    def path(self) -> str | None:
        return self.span.path if self.span else None

    @property
    def line(self) -> int | None:
        return self.span.line if self.span else None

    @property
    def col(self) -> int | None:
        return self.span.col if self.span else None

    def headline(self) -> str:
        """One line: ``path:line:col: message`` (or just the message when there is no span)."""
        if self.span is None:
            return self.message
        return f"{self.span.prefix()}: {self.message}"

    def render(self) -> str:
        text = self.headline()
        if self.span is not None:
            text += self.span.caret()
        for note in self.notes:
            text += f"\n  note: {note}"
        return text

    def __str__(self) -> str:
        return self.render()


class SchemaError(PluginError, ValueError):
    """bindings.yaml is malformed or inconsistent."""


class ExpressionError(SchemaError):
    """A count/capacity expression does not parse or cannot be evaluated."""


class LoweringError(PluginError, ValueError):
    """The WGSL body does not fit its schema (unbalanced @when, a name clash, append in exact)."""


class SpecializationError(PluginError, ValueError):
    """Missing or unknown specialisation values for a variant."""


class CompileError(PluginError, RuntimeError):
    """wgpu refused a lowered variant; the span points at the user's own file."""


class DispatchError(PluginError, ValueError):
    """A run's inputs, params or sizes are wrong; raised before anything is submitted."""


class PageBindingError(PluginError, ValueError):
    """Columns of one page binding stand in different pages, or a handle is unknown."""


class AssetError(PluginError, ValueError):
    """A .computeShader folder is not laid out as expected."""


class CacheError(PluginError, RuntimeError):
    """The variant cache folder cannot be used at all (entries that fail are misses, not errors)."""


class GpuError(PluginError, RuntimeError):
    """The GPU cannot do what was asked."""


class NoAdapterError(GpuError):
    """No wgpu adapter is available on this machine."""


class DeviceLostError(GpuError):
    """The device was lost or reported an error; GPU work is disabled."""


class StaleHandleError(PluginError, LookupError):
    """A (key, generation) handle no longer names a live object."""


class StaleSpanError(PluginError, RuntimeError):
    """An upload span was used after its chunk was mutated or evicted.

    ``written``: how many spans of the same call were written before it (``upload_spans``)."""

    written = 0


class ReadbackDataError(PluginError, ValueError):
    """A :class:`~engine_plugin.gpu.ReadbackResult`'s bytes asked for where it has none: a
    readback that failed, or a result kept past its callback (the staging buffer behind its
    data is unmapped then)."""


def bug(message: str) -> PluginError:
    """An internal invariant broke: say so plainly, so users report it instead of debugging it."""
    return PluginError(f"engine_plugin bug, please report: {message}")
