"""``page_binding``: which page each page binding takes, and the col_base_*/col_len_* params.

A column's value is a :class:`RunHandle`, a run's name (looked up among the live
substrates), or a plain GPUBuffer (a page of one column: base 0, length = its size in
elements). Every column of one page binding must stand in the same page; a kernel binds
each page once and reaches its runs by offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

import wgpu

from ..errors import PageBindingError, Span
from ..lowering.lowered import ColumnSlot, Lowered
from ..lowering.schema import span_in
from ..lowering.types import parse_value_type
from .handles import Placement, RunHandle, StaleColumnError, StaleRunError
from .substrate import find_run

__all__ = ["PageBinding", "page_binding"]


@dataclass(frozen=True)
class PageBinding:
    """The answer of :func:`page_binding` (read-only mappings).

    ``pages``: page binding name -> GPUBuffer; ``params``: ``col_base_<col>`` (u32 words into
    the page) and ``col_len_<col>`` (elements) -> int; ``placements``: column -> Placement.
    """

    pages: Mapping[str, Any]
    params: Mapping[str, int]
    placements: Mapping[str, Placement]


@dataclass(frozen=True)
class _Resolved:
    placement: Placement
    element: str
    atomic: bool | None  # None: a plain GPUBuffer, whose kind the host cannot know
    what: str  # "run 'pos' (...)" or "buffer 'label'"
    page_what: str  # names the page for messages


def page_binding(lowered: Lowered, columns: Mapping[str, Any], live_bytes: Mapping[str, int] | None = None) -> PageBinding:
    """The page buffer each page binding takes and its columns' params, from their placements.

    Args:
        lowered: a lowered variant with page/column bindings.
        columns: column name -> RunHandle, run name, or GPUBuffer.
        live_bytes: column name -> the bytes of a GPUBuffer that hold data (a pooled buffer an
            output handed out: the rest is an earlier run's); default: the whole buffer.
    Raises:
        PageBindingError: a missing or unknown column, a stale handle or unknown name, an
            element or atomic-kind mismatch, or columns of one page binding in different pages.
    """
    if not isinstance(columns, Mapping):
        raise PageBindingError(f"page_binding takes a mapping of column name -> handle, run name or GPUBuffer, not {type(columns).__name__}")
    path = _yaml_path(lowered)
    known = {c.name: c for c in lowered.columns}
    for name in columns:
        if name not in known:
            names = ", ".join(sorted(known)) or "none"
            raise PageBindingError(f"{name!r} is not a column of this variant; its columns: {names}", Span(path))
    page_slots = {s.name: s for s in lowered.host_slots if s.role == "page"}
    pages: dict[str, Any] = {}
    first: dict[str, tuple[str, _Resolved]] = {}
    params: dict[str, int] = {}
    placements: dict[str, Placement] = {}
    for col in lowered.columns:
        span = _column_span(lowered, path, col.line, col.name)
        if col.name not in columns:
            raise PageBindingError(f"missing column {col.name!r} (a run of page {col.page!r}): pass a substrate handle, a run name or a GPUBuffer", span)
        r = _resolve(col, columns[col.name], span, live_bytes.get(col.name) if live_bytes else None)
        slot = page_slots.get(col.page)
        if slot is None:
            raise PageBindingError(f"column {col.name!r} stands in page {col.page!r}, which this variant does not bind", span)
        if r.element != col.element:
            raise PageBindingError(
                f"column {col.name!r} is {col.element} but {r.what} holds {r.element}; allocate the run as {col.element}",
                span,
            )
        if r.atomic is not None and r.atomic != slot.atomic:
            want = "an atomic page (alloc(..., atomic=True))" if slot.atomic else "a plain page (alloc(..., atomic=False))"
            have = "an atomic page" if r.atomic else "a plain page"
            raise PageBindingError(
                f"column {col.name!r} of page binding {col.page!r} needs {want}, but {r.what} stands in {have}",
                span,
            )
        seen = first.get(col.page)
        if seen is None:
            first[col.page] = (col.name, r)
            pages[col.page] = r.placement.page
        elif r.placement.page is not seen[1].placement.page:
            other, o = seen
            raise PageBindingError(
                f"page binding {col.page!r}: column {col.name!r} stands in {r.page_what}, but column {other!r} "
                f"stands in {o.page_what}; the columns of one page binding must share one page "
                "(allocate them together, e.g. inside one substrate.with_page_group(key))",
                span,
            )
        placements[col.name] = r.placement
        params[f"col_base_{col.name}"] = r.placement.base_word
        params[f"col_len_{col.name}"] = r.placement.length
    return PageBinding(MappingProxyType(pages), MappingProxyType(params), MappingProxyType(placements))


def _resolve(col: ColumnSlot, value: Any, span: Span, live_bytes: int | None = None) -> _Resolved:
    if isinstance(value, str):
        found = find_run(value)
        if not found:
            raise PageBindingError(f"column {col.name!r}: no live run is named {value!r} in any open substrate", span)
        if len(found) > 1:
            where = "; ".join(h.describe() for h in found)
            raise PageBindingError(f"column {col.name!r}: the run name {value!r} is ambiguous, live in several substrates: {where}; pass the handle", span)
        value = found[0]
    if isinstance(value, RunHandle):
        try:
            placement = value.substrate.placement(value)
        except StaleRunError as exc:
            raise StaleColumnError(f"column {col.name!r}: {exc.message}", span) from exc
        page_what = value.substrate.page_info(value.page).describe(value.substrate.label)
        return _Resolved(placement, value.element, value.atomic, value.describe(), page_what)
    if isinstance(value, wgpu.GPUBuffer):
        if not (value.usage & wgpu.BufferUsage.STORAGE):
            raise PageBindingError(f"column {col.name!r}: buffer {value.label!r} lacks STORAGE usage and cannot be a page", span)
        vt = parse_value_type(col.element)
        assert vt is not None
        length = (value.size if live_bytes is None else live_bytes) // vt.bytes
        what = f"buffer {value.label!r}"
        return _Resolved(Placement(value, 0, length), col.element, None, what, f"{what} ({value.size} bytes, a page of one column)")
    raise PageBindingError(
        f"column {col.name!r} takes a substrate run handle, a run name or a GPUBuffer, not {type(value).__name__}",
        span,
    )


def _column_span(lowered: Lowered, path: str | None, line: int | None, name: str) -> Span:
    """The column binding's place: at its ``name:`` on its line of the schema (file:line:col,
    as every other error; it named the line only: review helper 175)."""
    texts = lowered.source_map.texts
    return span_in(texts[0], path, line, name) if texts and line else Span(path, line or None)


def _yaml_path(lowered: Lowered) -> str | None:
    files = lowered.source_map.files
    return files[0] if files else None
