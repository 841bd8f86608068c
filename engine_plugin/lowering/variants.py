"""Variant keys: a frozen, sorted specialisation (+ named table columns), and their enumeration."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from ..errors import Span, SpecializationError
from ..files import shown_path
from .schema import Schema
from .types import parse_value_type

__all__ = ["VariantSpec", "resolve_spec", "enumerate_variants", "variant_count"]

_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class VariantSpec:
    """A variant's identity: specialisation values and table column names, sorted by name."""

    values: tuple[tuple[str, str], ...] = ()
    columns: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def as_dict(self) -> dict[str, str]:
        return dict(self.values)

    def columns_dict(self) -> dict[str, tuple[str, ...]]:
        return dict(self.columns)

    def label(self) -> str:
        parts = [f"{k}={_short(v)}" for k, v in self.values]
        parts += [f"{k}=[{','.join(v)}]" for k, v in self.columns]
        return " ".join(parts) or "(default)"


def _short(v: str) -> str:
    v = " ".join(v.split())
    return v if len(v) <= 24 else v[:21] + "..."


def resolve_recorded(schema: Schema, spec: VariantSpec | Mapping[str, str]) -> VariantSpec:
    """A specialisation recorded earlier (a usage log's row) resolved against ``schema`` as it
    is now: a value the asset no longer offers is an error, a parameter added since takes its
    default, aliases are normalised. :func:`resolve_spec` trusts a VariantSpec as already
    resolved (prefetch warmed the keys of an older schema's rows: review helper 167).

    Raises:
        SpecializationError: as :func:`resolve_spec`.
    """
    if not isinstance(spec, VariantSpec):
        return resolve_spec(schema, spec)  # a mapping is resolved as given
    return resolve_spec(schema, spec.as_dict(), {k: list(v) for k, v in spec.columns} or None)


def resolve_spec(schema: Schema, specialize: Mapping[str, str] | VariantSpec | None = None, columns: Mapping[str, Sequence[str]] | None = None) -> VariantSpec:
    """Validate and complete a specialisation for ``schema``.

    Raises:
        SpecializationError: an unknown name or a value not among the options; the message
            lists what is allowed. A parameter left unset takes :func:`unset_value`.
    """
    path = schema.path
    if isinstance(specialize, VariantSpec):
        if columns is None:
            return specialize
        specialize = specialize.as_dict()
    given = _as_dict(specialize, "specialize= maps specialisation names to values ({'T': 'f32'})", path)
    columns = _as_dict(columns, "columns= maps a columns table to its column names ({'cols': ['w', 'h']})", path)
    values: dict[str, str] = {}
    for name, val in given.items():
        sp = schema.spec_param(name)
        if sp is None:
            known = ", ".join(s.name for s in schema.specialize) or "none"
            # At the first declared one (where the names it may be are listed), not only the
            # file (review helper 175).
            first = schema.specialize[0] if schema.specialize else None
            where = schema.span_at(first.line, first.name) if first is not None and first.line else Span(path)
            raise SpecializationError(f"unknown specialisation {name!r}; this schema has: {known}", where)
        if sp.kind == "workgroup" and isinstance(val, int) and not isinstance(val, bool):
            val = str(val)
        if not isinstance(val, str):
            raise SpecializationError(f"specialisation {name}={val!r} must be text", schema.span_at(sp.line, name))
        try:
            val.encode("utf-8")
        except UnicodeEncodeError:  # a byte no UTF-8 decodes (a command line's), or a lone surrogate
            message = f"specialisation {name}='{shown_path(val)}' is not text (a byte or escape no UTF-8 holds)"
            raise SpecializationError(message, schema.span_at(sp.line, name)) from None
        if sp.kind == "type":
            vt = parse_value_type(val)
            val = vt.wgsl if vt else val
        if sp.options and val not in sp.options and sp.kind != "source":
            raise SpecializationError(f"{name}={val!r} is not an option; {name} takes one of: {', '.join(sp.options)}", schema.span_at(sp.line, name))
        values[name] = val
    for sp in schema.specialize:
        if sp.name not in values:
            values[sp.name] = unset_value(sp)
    cols: dict[str, tuple[str, ...]] = {}
    for bname, names in (columns or {}).items():
        b = next((b for b in schema.bindings if b.name == bname and b.kind == "columns"), None)
        if b is None:
            tables = ", ".join(b.name for b in schema.bindings if b.kind == "columns") or "none"
            raise SpecializationError(f"columns= names {bname!r}, which is not a kind: columns binding (tables: {tables})", Span(path))
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, (list, tuple)):
            raise SpecializationError(f"columns[{bname!r}] lists column names, not {type(names).__name__}", schema.span_at(b.line, bname))
        seen = []
        for c in names:
            if not isinstance(c, str) or not _IDENT_RE.match(c):
                raise SpecializationError(f"column name {c!r} of table {bname!r} must be an identifier", schema.span_at(b.line, bname))
            if c in seen:
                raise SpecializationError(f"column {c!r} named twice for table {bname!r}", schema.span_at(b.line, bname))
            seen.append(c)
        cols[bname] = tuple(seen)
    return VariantSpec(tuple(sorted(values.items())), tuple(sorted(cols.items())))


def mapping_of(given: Any) -> dict | None:
    """``given`` as a dict: None is empty; a mapping, or what ``dict()`` takes ((name, value)
    pairs, ``d.items()``, a zip); None for anything else (a string, a list of values), which
    the caller refuses with its own error naming what the argument takes (``dict()``'s raw
    ValueError reached users before, review helpers 151, 156)."""
    if given is None:
        return {}
    if isinstance(given, Mapping):
        return dict(given)
    if isinstance(given, (str, bytes)):
        return None
    try:
        return dict(given)
    except (TypeError, ValueError):
        return None


def _as_dict(given: Any, takes: str, path: str | None) -> dict:
    """:func:`mapping_of` ``given``, or a SpecializationError saying what it ``takes``."""
    found = mapping_of(given)
    if found is None:
        raise SpecializationError(f"{takes}, not {type(given).__name__}", Span(path))
    return found


def unset_value(sp) -> str:
    """The seed's value of a parameter left unset: its ``default``; else a type or named
    parameter takes its first option, and a source parameter leaves its identifier as written
    (splicing its own name is the identity)."""
    if sp.default is not None:
        return sp.default
    if sp.kind == "source":
        return sp.name
    return sp.options[0]


# The most variants a cross product may enumerate (a bake, a validation): 40 two-option
# parameters are 2**40 variants, a list no machine holds. Past it, name them in ``bake:``.
MAX_ENUMERATED_VARIANTS = 65536


def iter_variants(schema: Schema) -> Iterator[VariantSpec]:
    """:func:`enumerate_variants` one at a time, without the count check (the first few of
    any schema, e.g. the one a reload validates)."""
    if schema.bake is not None:
        for combo in schema.bake:
            values: dict = dict(combo)
            columns = values.pop("columns", None)
            yield resolve_spec(schema, values, {t: list(c) for t, c in columns} if columns else None)
        return
    axes: list[list[str]] = []
    for sp in schema.specialize:
        if sp.kind == "source" and not sp.options:
            axes.append([unset_value(sp)])
        else:
            axes.append(list(sp.options))
    for choice in itertools.product(*axes):
        values = dict(zip((sp.name for sp in schema.specialize), choice))
        yield resolve_spec(schema, values)


def enumerate_variants(schema: Schema) -> list[VariantSpec]:
    """The variants to bake: the schema's ``bake:`` list, else the cross product of all options
    (source parameters take their ``default``, or each of their options when they list some).

    Raises:
        SpecializationError: the cross product is past :data:`MAX_ENUMERATED_VARIANTS`.
    """
    count = variant_count(schema)
    if schema.bake is None and count > MAX_ENUMERATED_VARIANTS:
        first = schema.specialize[0] if schema.specialize else None
        raise SpecializationError(
            f"the specialize options make {count} variants, past the {MAX_ENUMERATED_VARIANTS} a bake enumerates; "
            "list the ones to bake under 'bake:' (or bake from a usage log)",
            # At the first specialisation's name (it had no column: review helper 237).
            schema.span_at(first.line, first.name) if first is not None else Span(schema.path, None),
        )
    return list(iter_variants(schema))


def variant_count(schema: Schema) -> int:
    if schema.bake is not None:
        return len(schema.bake)
    total = 1
    for sp in schema.specialize:
        total *= max(1, len(sp.options)) if not (sp.kind == "source" and not sp.options) else 1
    return total
