"""Shared WGSL modules: ``#import NAME`` lines, resolved transitively. Pure Python.

A body (or a module) imports a module with a line of its own::

    #import hash
    #import noise/simplex     // a module in a subfolder of a module folder

``NAME`` names ``NAME.wgsl`` in the module search path. Imports resolve transitively; each
module is included once, before everything that imports it (dependency order), and the
lowering places the modules' texts ahead of the kernel body. naga does not know ``#``, so
the directive line is blanked in place: line numbers never move, and every error inside a
module names the module's own file and line.

Finding a module is the caller's business (a mapping of texts here; the asset layer reads
``modules/`` folders): :func:`resolve_imports` only takes a ``find(name)`` callable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Mapping

from ..errors import LoweringError, Span
from .wgsl_text import lf_breaks, refuse_odd_characters, starts_in_block_comment

__all__ = ["MAX_MODULES", "IMPORT_RE", "Module", "ModuleTexts", "blank_imports", "import_lines", "resolve_imports", "from_mapping"]

# ``#import name`` (optionally followed by a // comment). A name is identifiers joined by '/'.
IMPORT_RE = re.compile(r"^(\s*)#import\b[ \t]*(\S*)[ \t]*(//.*)?$")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*$")

# More modules than any kernel imports: a bound on the work (and the recursion) of a hostile tree.
MAX_MODULES = 256

# {name: (path, text)}: what a caller hands the pure API.
ModuleTexts = Mapping[str, "tuple[str, str]"]


@dataclass(frozen=True)
class Module:
    """One imported module: its import name, the file errors name, and its text."""

    name: str
    path: str
    text: str


@dataclass(frozen=True)
class ImportLine:
    """An ``#import`` directive: the name and where it stands (1-based line and column of the name)."""

    name: str
    line: int
    col: int
    text: str


def import_lines(text: str, path: str | None) -> list[ImportLine]:
    """The ``#import`` directives of ``text``, in order.

    Raises:
        LoweringError: a directive without a name, or with a malformed one.
    """
    out = []
    lines = text.split("\n")
    commented = starts_in_block_comment(lines)
    for idx, line in enumerate(lines, start=1):
        stripped = line.lstrip()
        if not stripped.startswith("#") or commented[idx - 1]:  # inside /* */: comment text
            continue
        m = IMPORT_RE.match(line)
        if m is None:
            if stripped.startswith("#import"):
                raise LoweringError(
                    "malformed '#import'; write '#import NAME' alone on its line (NAME.wgsl in a modules/ folder)",
                    Span(path, idx, len(line) - len(stripped) + 1, line),
                )
            continue
        name = m.group(2)
        col = line.find(name, len(m.group(1)) + len("#import")) + 1 if name else len(m.group(1)) + 1
        if name.endswith(".wgsl") or (name.startswith('"') and name.endswith('"')):
            hint = name.strip('"')
            hint = hint[: -len(".wgsl")] if hint.endswith(".wgsl") else hint
            raise LoweringError(f"'#import {name}': name the module without quotes or '.wgsl', e.g. '#import {hint}'", Span(path, idx, col, line))
        if not _NAME_RE.match(name):
            raise LoweringError(
                f"'#import {name}': a module name is an identifier (or identifiers joined by '/'), e.g. '#import hash'", Span(path, idx, col, line)
            )
        out.append(ImportLine(name, idx, col, line))
    return out


def blank_imports(text: str) -> str:
    """``text`` with every ``#import`` line blanked (naga does not know ``#``); same line count."""
    lines = text.split("\n")
    commented = starts_in_block_comment(lines)
    return "\n".join("" if IMPORT_RE.match(line) and not commented[i] else line for i, line in enumerate(lines))


def resolve_imports(text: str, path: str | None, find: Callable[[str], "tuple[str, str] | None"], where: str = "") -> tuple[Module, ...]:
    """Every module ``text`` imports, transitively, each once, dependencies first.

    Args:
        text: the kernel body (its ``#import`` lines are read).
        path: the body's file, named in errors.
        find: module name -> (path, text), or None when no such module exists.
        where: the search path in words, for the unknown-module error.
    Raises:
        LoweringError: an unknown module (at its ``#import``, listing the search path), an
            import cycle (at the import that closes it, naming the other line), a malformed
            directive.
    """
    done: dict[str, Module] = {}
    order: list[Module] = []
    # The chain of imports being followed: (module name or None for the body, the import line)
    active: dict[str, tuple[str | None, ImportLine]] = {}
    paths: dict[str, str] = {}

    def visit(owner: str | None, owner_path: str | None, owner_text: str) -> None:
        for imp in import_lines(owner_text, owner_path):
            if imp.name in done:
                continue
            if imp.name in active:
                names = list(active)
                cycle = names[names.index(imp.name) :]
                notes: tuple[str, ...] = ()
                if len(cycle) > 1:  # the other end: where the first module of the cycle imports the next
                    _, first = active[cycle[1]]
                    notes = (f"{paths[cycle[0]]}:{first.line}: {imp.name} imports {cycle[1]} here",)
                raise LoweringError(
                    f"'#import {imp.name}' closes an import cycle ({' -> '.join(cycle + [imp.name])}); "
                    "a module cannot import itself, directly or through others",
                    Span(owner_path, imp.line, imp.col, imp.text),
                    notes=notes,
                )
            if len(done) + len(active) >= MAX_MODULES:
                raise LoweringError(
                    f"'#import {imp.name}': more than {MAX_MODULES} modules imported; is an import tree generated?",
                    Span(owner_path, imp.line, imp.col, imp.text),
                )
            found = find(imp.name)
            if found is None:
                searched = f" (searched: {where})" if where else ""
                raise LoweringError(f"'#import {imp.name}': no module {imp.name}.wgsl{searched}", Span(owner_path, imp.line, imp.col, imp.text))
            mpath, mtext = found
            mtext = lf_breaks(mtext)
            refuse_odd_characters(mtext, mpath)
            active[imp.name] = (owner, imp)
            paths[imp.name] = mpath
            visit(imp.name, mpath, mtext)
            del active[imp.name]
            module = Module(imp.name, mpath, mtext)
            done[imp.name] = module
            order.append(module)

    visit(None, path, text)
    return tuple(order)


def from_mapping(modules: ModuleTexts | None) -> Callable[[str], "tuple[str, str] | None"]:
    """A ``find`` over a ``{name: (path, text)}`` mapping."""
    table = dict(modules or {})

    def find(name: str) -> "tuple[str, str] | None":
        found = table.get(name)
        return (str(found[0]), str(found[1])) if found is not None else None

    return find
