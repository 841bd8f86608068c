"""``engine-plugin`` subcommands: bake, watch, lower, info, demo, cache, bench."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from .errors import PluginError

__all__ = ["main"]


def _spec_args(items: Sequence[str] | None) -> dict[str, str]:
    out = {}
    for item in items or ():
        if "=" not in item:
            raise SystemExit(f"engine-plugin: --spec takes NAME=VALUE, not {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v
    return out


def _columns_args(items: Sequence[str] | None) -> dict[str, list[str]]:
    out = {}
    for item in items or ():
        if "=" not in item:
            raise SystemExit(f"engine-plugin: --columns takes TABLE=col,col, not {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = [c.strip() for c in v.split(",") if c.strip()]
    return out


def cmd_lower(args: argparse.Namespace) -> int:
    from .assets.folder import read_asset_folder
    from .lowering import lower, parse

    src = read_asset_folder(args.asset)
    schema = parse(src.yaml_text, src.yaml_path)
    lowered = lower(schema, src.wgsl_text, _spec_args(args.spec), columns=_columns_args(args.columns), wgsl_path=src.wgsl_path)
    print(lowered.numbered_source() if args.numbered else lowered.source, end="")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from .assets.folder import find_assets, read_asset_folder
    from .lowering import is_extended, parse, variant_count

    console = Console()
    assets = find_assets(args.path)
    if not assets:
        console.print(f"no .computeShader assets under {args.path}")
        return 1
    for folder in assets:
        src = read_asset_folder(folder)
        schema = parse(src.yaml_text, src.yaml_path)
        table = Table(title=f"{folder}  ({variant_count(schema)} variants, {'extended' if is_extended(schema) else 'plain'} ABI)")
        for col in ("binding", "kind", "access", "element", "size", "flags"):
            table.add_column(col)
        for b in schema.bindings:
            size = (b.count.text if b.count else "") or (f"capacity {b.capacity.text}" if b.capacity else "")
            flags = " ".join(f for f in ("live", "append", "bits", "atomic") if getattr(b, f))
            if b.when is not None:
                flags += f" when {b.when.text}"
            if b.page:
                flags += f" page {b.page}"
            table.add_row(b.name, b.kind, b.access, b.element or "", size, flags.strip())
        console.print(table)
        for sp in schema.specialize:
            opts = ", ".join(sp.options) if sp.options else "(source text)"
            default = f" default {sp.default!r}" if sp.default is not None else ""
            console.print(f"  specialize {sp.name} ({sp.kind}): {opts}{default}")
        for p in schema.params:
            console.print(f"  param {p.name}: {p.type}")
        console.print(f"  determinism {schema.determinism}, workgroup {list(schema.workgroup)}")
        if src.extra_files:
            console.print(f"  [yellow]note[/]: files ignored in the asset: {', '.join(src.extra_files)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="engine-plugin", description="Compute shader assets for game engines.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("lower", help="print the lowered WGSL of one variant")
    p.add_argument("asset", help="a NAME.computeShader folder or its bindings.yaml")
    p.add_argument("--spec", action="append", metavar="NAME=VALUE", help="a specialisation value (repeatable)")
    p.add_argument("--columns", action="append", metavar="TABLE=a,b", help="table column names (repeatable)")
    p.add_argument("--numbered", action="store_true", help="prefix line numbers")
    p.set_defaults(func=cmd_lower)

    p = sub.add_parser("info", help="print schemas, options and variant counts")
    p.add_argument("path", nargs="?", default="assets", help="an asset folder or a folder of assets")
    p.set_defaults(func=cmd_info)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``engine-plugin`` command; answers the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except PluginError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
