"""The parsed, frozen form of a bindings.yaml: ``Schema`` and its parts.

Everything here is immutable and hashable, so a schema can key caches and be shared between
programs. Line numbers are 1-based lines of the YAML text, kept for every error that comes later.
"""

from __future__ import annotations

import numbers
import re
from dataclasses import dataclass, field

from ..errors import Span
from .conditions import Condition
from .expressions import Expr
from .structs import StructType

__all__ = ["Binding", "Param", "SpecParam", "Schema", "WorkgroupSize", "span_in", "BINDING_KINDS", "KIND_KEYS"]

BINDING_KINDS = ("buffer", "columns", "page", "column", "domain_count", "texture", "sampler", "storage_texture")
TEXTURE_KINDS = ("texture", "sampler", "storage_texture")

# Which keys apply to which kind; any other key on that kind is an error.
KIND_KEYS: dict[str, frozenset[str]] = {
    "buffer": frozenset({"name", "kind", "access", "element", "count", "capacity", "live", "append", "when", "bits", "atomic", "clear"}),
    "columns": frozenset({"name", "kind", "access", "when"}),
    "page": frozenset({"name", "kind", "access", "atomic", "when"}),
    "column": frozenset({"name", "kind", "page", "element", "access", "when"}),
    "domain_count": frozenset({"name", "kind", "when"}),
    "texture": frozenset({"name", "kind", "dim", "sample", "when"}),
    "sampler": frozenset({"name", "kind", "filter", "address", "when"}),
    "storage_texture": frozenset({"name", "kind", "format", "access", "dim", "size", "when"}),
}


@dataclass(frozen=True)
class Binding:
    """One entry of ``bindings:``. ``element`` is the text as written (may name a type param)."""

    name: str
    kind: str
    access: str = "read"
    element: str | None = None
    count: Expr | None = None
    capacity: Expr | None = None
    live: bool = False
    append: bool = False
    when: Condition | None = None
    bits: bool = False
    page: str | None = None
    atomic: bool = False
    clear: bool = True  # an allocated output reads as zeros before the kernel runs; false opts out
    dim: str = "2d"  # textures: 2d, 2d_array or 3d
    sample: str = "float"  # sampled textures: float, uint or sint
    format: str | None = None  # storage textures
    filter: str = "linear"  # samplers
    address: str = "clamp"
    size: tuple[Expr, ...] = ()  # an output storage texture's extent, 1 to 3 expressions
    line: int = 0
    col: int = 0
    key_lines: tuple[tuple[str, int, int], ...] = ()  # (key, line, col) of each value

    def key_pos(self, key: str) -> tuple[int, int]:
        for k, line, col in self.key_lines:
            if k == key:
                return line, col
        return self.line, self.col

    @property
    def is_output(self) -> bool:
        """The host allocates it (it has a count or a capacity)."""
        return self.count is not None or self.capacity is not None


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # canonical WGSL type text
    line: int = 0


@dataclass(frozen=True)
class SpecParam:
    """A specialisation parameter. ``kind``: ``type`` (alias), ``named`` (consts) or ``source`` (text)."""

    name: str
    kind: str
    options: tuple[str, ...] = ()
    default: str | None = None
    line: int = 0


def _code(line: str) -> str:
    """``line`` without its YAML comment (a ``#`` at its start or after a blank; one inside
    quotes is taken for a comment too: a column is then not found, never a wrong one)."""
    return re.split(r"(?:^|\s)#", line, maxsplit=1)[0]


_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # as editors (and yaml_nodes) count lines


def span_in(text: str, path: str | None, line: int, word: str | None = None) -> Span:
    """The span of the item at ``line`` of a schema's ``text``, at ``word`` where it is the
    item's ``name:`` (on that line, or a later line of a block-style item), else at its first
    whole-word use on that line outside a comment (no column when it is not there)."""
    lines = _LINE_BREAK.split(text)
    if not 0 < line <= len(lines):
        return Span(path, line or None)
    if word:
        named = re.compile(rf"(?<![A-Za-z0-9_])name\s*:\s*[\"']?({re.escape(word)})(?![A-Za-z0-9_])")
        for row in range(line, min(len(lines), line + 32) + 1):
            if row > line and lines[row - 1].lstrip().startswith("- "):
                break  # the next item
            found = named.search(_code(lines[row - 1]))
            if found:
                return Span(path, row, found.start(1) + 1, lines[row - 1])
        found = re.search(rf"(?<![A-Za-z0-9_]){re.escape(word)}(?![A-Za-z0-9_])", _code(lines[line - 1]))
        if found:
            return Span(path, line, found.start() + 1, lines[line - 1])
    return Span(path, line, None, lines[line - 1])


class WorkgroupSize(tuple):
    """A schema's workgroup (x, y, z): sizes, or names of ``kind: workgroup`` specialisations.
    Equal to the forms SPEC writes it in too (an int or a list of up to three): ``64`` is
    ``(64, 1, 1)``, ``[8, 8]`` is ``(8, 8, 1)``. It hashes as its (x, y, z) tuple: as a dict
    key or in a set it meets those three-tuples only (an int or a shorter list hash otherwise)."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, numbers.Integral) and not isinstance(other, bool):
            other = (int(other),)
        if isinstance(other, (list, tuple)) and 1 <= len(other) <= 3:
            return tuple(self) == tuple(other) + (1,) * (3 - len(other))
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = tuple.__hash__


@dataclass(frozen=True)
class Schema:
    bindings: tuple[Binding, ...]
    params: tuple[Param, ...]
    specialize: tuple[SpecParam, ...]
    determinism: str = "exact"
    workgroup: tuple = WorkgroupSize((64, 1, 1))  # sizes, or names of kind: workgroup specialisations
    # each entry: sorted (specialisation, value) pairs, and ("columns", ((table, names), ...))
    bake: tuple[tuple[tuple[str, object], ...], ...] | None = None
    text: str = field(default="", repr=False, compare=False)
    path: str | None = field(default=None, compare=False)
    structs: tuple[StructType, ...] = ()
    # (struct, member, line, col) of each member's key in structs:, for errors about a member
    member_keys: tuple[tuple[str, str, int, int], ...] = field(default=(), repr=False, compare=False)

    def span_at(self, line: int, word: str | None = None) -> Span:
        """The span of the item at ``line`` of this schema's text (see :func:`span_in`)."""
        return span_in(self.text, self.path, line, word)

    def member_span(self, struct: str | None, member: str) -> Span | None:
        """The span of ``member``'s key in struct ``struct`` of ``structs:``, if recorded."""
        for sname, mname, line, col in self.member_keys:
            if (sname, mname) == (struct, member):
                lines = _LINE_BREAK.split(self.text)
                return Span(self.path, line, col, lines[line - 1] if line <= len(lines) else None)
        return None

    def struct(self, name: str | None) -> StructType | None:
        for s in self.structs:
            if s.name == name:
                return s
        return None

    def spec_param(self, name: str) -> SpecParam | None:
        for sp in self.specialize:
            if sp.name == name:
                return sp
        return None

    def param(self, name: str) -> Param | None:
        for p in self.params:
            if p.name == name:
                return p
        return None

    def workgroup_for(self, values: "dict[str, str]") -> tuple[int, int, int]:
        """The workgroup size of the variant with these specialisation ``values``."""
        x, y, z = (int(values[d]) if isinstance(d, str) else d for d in self.workgroup)
        return (x, y, z)
