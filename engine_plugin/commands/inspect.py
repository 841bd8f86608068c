"""``engine-plugin info`` and ``engine-plugin lower``: read assets, print what they declare."""

from __future__ import annotations

import argparse
import os
import posixpath
import sys
from typing import Any, Sequence

from ..errors import PluginError
from ..files import printable
from .contract import (
    EXIT_FAILED,
    EXIT_OK,
    ROOT_HELP,
    PlainConsole,
    Reporter,
    UsageError,
    add_modules_option,
    check_asset_path,
    check_under_root,
    module_folders,
    write_json,
)

__all__ = ["add_parsers", "cmd_info", "cmd_lower", "asset_info"]


def _pairs(items: Sequence[str] | None, flag: str, form: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for item in items or ():
        if "=" not in item:
            raise UsageError(f"{flag} takes {form}, not {item!r}")
        k, v = item.split("=", 1)
        k = k.strip()
        if not k:  # '=x' named no specialisation: a usage error, not the asset's (review helper 228)
            raise UsageError(f"{flag} takes {form} with a NAME before the '=', not {item!r}")
        first = next((value for name, value in out if name == k), None)
        if first is not None:  # the last one won, with nothing said (review helper 186)
            raise UsageError(f"{flag} {k} given twice ({first!r}, then {v!r}); give it once")
        out.append((k, v))
    return out


def _existing(path: str) -> str:
    """``path``, or the packaged asset of that name (``engine/summary.computeShader``, as
    ``AssetLibrary.load`` answers it from any root) when no such file or folder is here."""
    if os.path.exists(path):
        return path
    from ..assets.builtin import builtin_folder

    # As AssetLibrary names it (normalised: "./engine//summary.computeShader" is that asset).
    packaged = builtin_folder(posixpath.normpath(path.replace(os.sep, "/"))) if path and not os.path.isabs(path) else None
    if packaged is None:
        raise UsageError(f"{path}: no such file or folder")
    return packaged


def _one_asset(path: str, given: str) -> None:
    """``lower`` takes one asset: a folder that is none (no ``bindings.yaml``, not named
    ``*.computeShader``) is a usage error (exit 2), naming the assets it holds, not a broken
    asset (exit 1, "the asset has no bindings.yaml": review helper 152)."""
    from ..assets.folder import ASSET_SUFFIX, find_assets

    norm = os.path.normpath(path)
    if not os.path.isdir(norm) or norm.endswith(ASSET_SUFFIX) or os.path.exists(os.path.join(norm, "bindings.yaml")):
        return
    held = find_assets(norm)
    if not held:
        raise UsageError(f"no .computeShader asset at {given}")
    names = ", ".join(os.path.relpath(a, norm) for a in held[:5]) + (", ..." if len(held) > 5 else "")
    raise UsageError(f"{given} is not one asset but holds {len(held)} ({names}): name one of them")


def cmd_lower(args: argparse.Namespace, rep: Reporter) -> int:
    from ..assets.folder import read_asset_folder
    from ..lowering import lower, parse
    from ..lowering.portability import portability_issues

    asset = _existing(args.asset)
    check_asset_path(asset)
    check_under_root(asset, args.root)
    _one_asset(asset, args.asset)
    src = read_asset_folder(asset, root=args.root, modules=module_folders(args))
    schema = parse(src.yaml_text, src.yaml_path)
    spec = dict(_pairs(args.spec, "--spec", "NAME=VALUE"))
    columns = {k: [c.strip() for c in v.split(",") if c.strip()] for k, v in _pairs(args.columns, "--columns", "TABLE=col,col")}
    lowered = lower(schema, src.wgsl_text, spec, columns=columns, wgsl_path=src.wgsl_path, modules=src.module_texts)
    issues = portability_issues(lowered)
    for issue in issues:
        # One line each (the source line and caret with -v), by the command's contract; under
        # --strict they are why the variant is refused, errors, said under -q too (review
        # helper 195: "warning:" with a blank line, the source and a caret, under -q too).
        if args.strict or not rep.quiet:
            rep.error(issue.headline("" if args.strict else "warning"), issue.span.caret())
    if issues and args.strict:
        print(f"engine-plugin lower: refused (--strict): {len(issues)} portability issue(s) beyond WebGPU's default limits", file=sys.stderr)
        return EXIT_FAILED
    print(printable(lowered.numbered_source() if args.numbered else lowered.source), end="")  # WGSL has no control characters but in comments
    return EXIT_OK


def asset_info(folder: str, root: str | None = None, modules: Sequence[str] = ()) -> dict[str, Any]:
    """What ``info --json`` says about one asset found under ``root`` (the path given; raises
    the asset's PluginError); ``modules``: module folders, as ``AssetLibrary(modules=)``."""
    from ..assets.folder import read_asset_folder
    from ..lowering import is_extended, parse, variant_count

    src = read_asset_folder(folder, root=root, modules=modules)
    schema = parse(src.yaml_text, src.yaml_path)
    bindings = []
    for b in schema.bindings:
        bindings.append(
            {
                "name": b.name,
                "kind": b.kind,
                "access": b.access,
                "element": b.element,
                "count": b.count.text if b.count else None,
                "capacity": b.capacity.text if b.capacity else None,
                "flags": [f for f in ("live", "append", "bits", "atomic") if getattr(b, f)],
                "when": b.when.text if b.when is not None else None,
                "page": b.page or None,
                "texture": _texture_info(b),
            }
        )
    return {
        "asset": folder,
        "variants": variant_count(schema),
        "extended": is_extended(schema),
        "bindings": bindings,
        "specialize": [{"name": s.name, "kind": s.kind, "options": list(s.options or ()), "default": s.default} for s in schema.specialize],
        "params": [{"name": p.name, "type": p.type} for p in schema.params],
        "determinism": schema.determinism,
        "workgroup": list(schema.workgroup),
        "extra_files": list(src.extra_files),
    }


def _texture_info(b: Any) -> dict[str, Any] | None:
    """A texture, storage texture or sampler binding's own settings (what ``element`` and
    ``count`` say of a buffer: review helper 205, ``info`` showed nothing of them)."""
    if b.kind == "texture":
        return {"dim": b.dim, "sample": b.sample}
    if b.kind == "storage_texture":
        return {"dim": b.dim, "format": b.format, "size": [e.text for e in b.size] or None}
    if b.kind == "sampler":
        return {"filter": b.filter, "address": b.address}
    return None


def cmd_info(args: argparse.Namespace, rep: Reporter) -> int:
    from .. import __version__
    from ..assets.folder import find_assets

    path = _existing(args.path)
    check_asset_path(path)
    check_under_root(path, args.root)
    modules = module_folders(args)
    assets = find_assets(path, broken=True)  # a link to nothing is reported, not skipped
    if not assets:
        raise UsageError(f"no .computeShader assets under {args.path}")
    # The root named, else the path given (as bake takes it): modules are searched up to it.
    # A broken asset is reported (one line, its file, line and column) and the others are
    # still described: an editor listing a project's assets needs the good ones (helper 117).
    infos: list[dict[str, Any]] = []
    failed = 0
    for folder in assets:
        try:
            infos.append(asset_info(folder, args.root or (None if folder == path else path), modules))
        except PluginError as exc:
            failed += 1
            rep.exception(exc)
            infos.append(
                {"asset": folder, "error": {"kind": type(exc).__name__, "path": exc.path, "line": exc.line, "col": exc.col, "message": exc.headline()}}
            )
    status = EXIT_FAILED if failed else EXIT_OK
    if args.json:
        write_json({"engine_plugin": __version__, "assets": infos}, "-")
        return status
    from ..extras import installed, require

    plain = not installed("rich") and rep.quiet  # README: without [cli], -q prints plain lines instead of the tables
    if not plain:
        require("rich", "the tables (or use --json, or -q for plain lines)")
    console: Any = PlainConsole(sys.stdout) if plain else _rich_console()
    for info in infos:
        if "error" in info:
            continue  # said on stderr above
        # The title on a line of its own: a table's title wraps at the table's width.
        title = printable(f"{info['asset']}  ({info['variants']} variants, {'extended' if info['extended'] else 'plain'} ABI)")
        rows = [tuple(printable(str(v)) for v in _binding_row(b)) for b in info["bindings"]]
        if plain:
            console.print(title)
            for row in rows:
                console.print("  binding " + "  ".join(v for v in row if v))
        else:
            from rich.table import Table
            from rich.text import Text

            # Text, not markup (a folder named [red]... styled the title), control characters spelled out
            console.print(Text(title, style="italic"))
            table = Table()
            for col in ("binding", "kind", "access", "element", "size", "flags"):
                table.add_column(col)
            for row in rows:
                table.add_row(*(Text(v) for v in row))
            console.print(table)
        for sp in info["specialize"]:
            opts = ", ".join(sp["options"]) if sp["options"] else "(source text)"
            default = f" default {sp['default']!r}" if sp["default"] is not None else ""
            console.print(printable(f"  specialize {sp['name']} ({sp['kind']}): {opts}{default}"), markup=False, highlight=False)
        for p in info["params"]:
            console.print(printable(f"  param {p['name']}: {p['type']}"), markup=False, highlight=False)
        console.print(f"  determinism {info['determinism']}, workgroup {info['workgroup']}", markup=False, highlight=False)
        if info["extra_files"]:
            rep.note(f"{info['asset']}: files ignored in the asset: {', '.join(info['extra_files'])}")
    return status


def _rich_console() -> Any:
    from rich.console import Console

    # Not a terminal (a pipe, a file): wide enough that an asset's path is never broken across
    # lines (it could not be copied or grepped: review helper 171), as bake's table does.
    return Console(width=None if sys.stdout.isatty() else 240)


def _binding_row(b: dict[str, Any]) -> tuple[str, ...]:
    """(binding, kind, access, element, size, flags) of one binding of ``info --json``."""
    size = b["count"] or (f"capacity {b['capacity']}" if b["capacity"] else "")
    element = b["element"] or ""
    if b["texture"] is not None:  # a texture's settings in the element column, its size beside
        element = " ".join(str(v) for k, v in b["texture"].items() if k != "size")
        size = size or ("[" + ", ".join(b["texture"].get("size") or []) + "]" if b["texture"].get("size") else "")
    flags = " ".join(b["flags"])
    if b["when"] is not None:
        flags += f" when {b['when']}"
    if b["page"]:
        flags += f" page {b['page']}"
    return (b["name"], b["kind"], b["access"] or "", element, size, flags.strip())


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``lower`` and ``info``."""
    p = sub.add_parser("lower", parents=[common], help="print the lowered WGSL of one variant")
    p.add_argument("asset", help="a NAME.computeShader folder or its bindings.yaml")
    p.add_argument("--spec", action="append", metavar="NAME=VALUE", help="a specialisation value (repeatable)")
    p.add_argument("--columns", action="append", metavar="TABLE=a,b", help="table column names (repeatable)")
    p.add_argument("--numbered", action="store_true", help="prefix line numbers")
    p.add_argument("--root", metavar="DIR", help=ROOT_HELP)
    add_modules_option(p)
    p.add_argument("--strict", action="store_true", help="refuse (exit 1) a variant that exceeds WebGPU's default limits (warned about otherwise)")
    p.set_defaults(func=cmd_lower)

    p = sub.add_parser("info", parents=[common], help="print schemas, options and variant counts")
    p.add_argument("path", nargs="?", default="assets", help="an asset folder or a folder of assets (default: assets)")
    p.add_argument("--json", action="store_true", help="JSON on stdout instead of tables")
    p.add_argument("--root", metavar="DIR", help=ROOT_HELP)
    add_modules_option(p)
    p.set_defaults(func=cmd_info)
