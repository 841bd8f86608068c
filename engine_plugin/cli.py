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


def _size_arg(text: str) -> int:
    """Bytes from ``123``, ``64K``, ``512M``, ``2G`` (binary units)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    try:
        value = int(float(t[:-1] if scale > 1 else t) * scale)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a size is a number of bytes, optionally with K, M or G (e.g. 512M), not {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a size must be positive, not {text!r}")
    return value


def _fmt_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _remote_section(args: argparse.Namespace, doc: dict) -> int:
    """The remote tier's part of ``cache stats|gc|clear`` (text lines printed unless --json)."""
    from .cache.remote import DEFAULT_TIMEOUT, remote_from

    remote = remote_from(args.remote, timeout=args.remote_timeout or DEFAULT_TIMEOUT)
    if remote is None:
        return 0
    say = (lambda *a: None) if args.json else print
    if args.action == "stats":
        st = remote.server_stats()  # RemoteCacheError (exit 2) when it does not answer
        if args.verify:
            st["unusable"] = remote.gc(dry_run=True)["removed"]
        doc["remote"] = st
        cap = st["maxmemory"]
        say(f"remote tier {st['url']}")
        say(f"  namespace   {st['namespace']}")
        say(f"  entries     {st['entries']} ({st['other_builds_entries']} of other builds)")
        say(f"  size        {_fmt_bytes(st['bytes'])}; server memory {_fmt_bytes(st['used_memory'])} of {_fmt_bytes(cap) if cap else 'no'} maxmemory, policy {st['maxmemory_policy']}")
        if not cap or "lru" not in st["maxmemory_policy"] and "lfu" not in st["maxmemory_policy"]:
            say("  note        set maxmemory and maxmemory-policy allkeys-lru on the server, or it grows without bound")
        c = st["counters"]
        say(f"  studio-wide hits {c['hits']}, misses {c['misses']}, verified {c['verified']} ({c['relowered']} re-lowered, {c['signed']} signed), rejected {c['rejected']}")
        say(f"              errors {c['errors']}, timeouts {c['timeouts']}, skipped by the breaker {c['skipped']}; read {_fmt_bytes(c['bytes_read'])}, wrote {c['writes']} entries ({_fmt_bytes(c['bytes_written'])})")
        if args.verify:
            say(f"  unusable    {st['unusable']}")
            return 1 if st["unusable"] else 0
        return 0
    if args.action == "gc":
        res = remote.gc()
        doc["remote"] = res
        say(f"remote {remote.stats().url}: removed {res['removed']} unusable values, kept {res['kept']} (eviction is the server's maxmemory LRU)")
        return 0
    res = remote.clear()
    doc["remote"] = res
    say(f"removed {res} entries of this build from {remote.stats().url}")
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    import json

    doc: dict = {}
    status = _cache_local(args, doc)
    status = max(status, _remote_section(args, doc))
    if args.json:
        print(json.dumps(doc, indent=1, default=str))
    return status


def _cache_local(args: argparse.Namespace, doc: dict) -> int:
    from .cache import DEFAULT_MAX_BYTES, USAGE_FILE, VariantCache, read_usage

    say = (lambda *a: None) if args.json else print
    cap = args.max_bytes or DEFAULT_MAX_BYTES
    if not os.path.isdir(args.cache):
        # Looking at a cache must not create one: say so instead.
        say(f"no variant cache at {args.cache} (bake one with: engine-plugin bake ASSETS --cache {args.cache})")
        doc["local"] = None
        return 0 if args.action in ("stats", "clear") or args.remote else 1
    cache = VariantCache(args.cache, max_bytes=cap)
    if args.action == "stats":
        st = cache.stats(scan=True)
        infos = sorted(cache.entries(), key=lambda i: i.mtime_ns)
        doc["local"] = {"folder": cache.folder, "entries": st.entries, "bytes": st.bytes, "cap": cap, "temp_files": st.temp_files}
        say(f"variant cache {cache.folder}")
        say(f"  entries     {st.entries}")
        say(f"  size        {_fmt_bytes(st.bytes)} of {_fmt_bytes(cap)} cap ({100 * st.bytes / cap:.1f}%)")
        say(f"  temp files  {st.temp_files}")
        if infos:
            import datetime

            def when(ns: int) -> str:
                return datetime.datetime.fromtimestamp(ns / 1e9).strftime("%Y-%m-%d %H:%M:%S")

            say(f"  least recently used  {when(infos[0].mtime_ns)}")
            say(f"  most recently used   {when(infos[-1].mtime_ns)}")
        usage = read_usage(os.path.join(cache.folder, USAGE_FILE))
        if usage:
            doc["local"]["usage_variants"] = sum(len(v) for v in usage.values())
            say(f"  usage log   {sum(len(v) for v in usage.values())} variants of {len(usage)} assets")
        if args.verify:
            bad = cache.verify()
            doc["local"]["unusable"] = len(bad)
            say(f"  unusable    {len(bad)}")
            for key, reason in sorted(bad.items()):
                say(f"    {key[:16]}...  {reason}")
            return 1 if bad else 0
        return 0
    if args.action == "gc":
        bad = cache.verify()
        for key in bad:
            cache.remove(key)
        evicted = cache.gc(cap)
        st = cache.stats(scan=True)
        doc["local"] = {"removed": len(bad), "evicted": evicted, "entries": st.entries, "bytes": st.bytes}
        say(f"removed {len(bad)} unusable entries, evicted {evicted} least recently used; {st.entries} entries, {_fmt_bytes(st.bytes)} left")
        return 0
    removed = cache.clear()
    usage_note = ""
    if args.usage:
        try:
            os.unlink(os.path.join(cache.folder, USAGE_FILE))
            usage_note = " and the usage log"
        except FileNotFoundError:
            pass
    doc["local"] = {"removed": removed}
    say(f"removed {removed} entries{usage_note} from {cache.folder}")
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    import time

    from .assets import AssetLibrary
    from .assets.folder import ASSET_SUFFIX, find_assets
    from .lowering import enumerate_variants

    target = os.path.normpath(args.assets)
    if not os.path.isdir(target):
        print(f"engine-plugin watch: {target} is not a folder", file=sys.stderr)
        return 2
    root = (os.path.dirname(target) or ".") if target.endswith(ASSET_SUFFIX) else target
    folders = find_assets(target)
    if not folders:
        print(f"no .computeShader assets under {target}")
        return 1
    lib = AssetLibrary(root, cache=None if args.no_cache else args.cache, quiet=args.quiet_ms / 1000.0, remote=args.remote or None)
    refs = [lib.load(os.path.relpath(f, root), strict=False) for f in folders]
    if args.all_variants and lib.remote is not None:
        found = lib.prefetch({r.path: list(enumerate_variants(r.program().schema)) for r in refs if r.error is None})
        print(f"prefetched: {found.local} local, {found.remote} remote, {found.missed} to lower ({found.rejected} refused)", flush=True)
    for ref in refs:
        if ref.error is not None:
            print(f"{ref.path}: not loadable yet:\n{ref.diagnostics}", flush=True)
        elif args.all_variants:
            try:
                for spec in enumerate_variants(ref.program().schema):
                    ref.program().variant(spec)
            except PluginError as exc:
                print(f"{ref.path}: {exc}", flush=True)
    lib.watch()
    print(f"watching {len(refs)} asset(s) under {root} (quiet window {args.quiet_ms:g} ms); Ctrl-C stops", flush=True)
    deadline = time.monotonic() + args.duration if args.duration else None
    seen = 0
    try:
        while deadline is None or time.monotonic() < deadline:
            for result in lib.poll():
                seen += 1
                stamp = time.strftime("%H:%M:%S")
                print(f"{stamp} {result.describe()}", flush=True)
                if result.ok and result.layout_changed:
                    labels = ", ".join(s.label() for s in result.layout_changed)
                    print(f"         layout changed for: {labels}", flush=True)
                if result.ok and result.recompiled:
                    print(f"         variants from: {_origins_line(lib, result)}", flush=True)
            if args.max_events and seen >= args.max_events:
                break
            time.sleep(1 / 60)
    except KeyboardInterrupt:
        pass
    finally:
        lib.close()
    return 0


def _origins_line(lib, event) -> str:
    """``2 remote, 1 lowered`` for a reload's variants (local cache, remote tier, lowered here)."""
    from collections import Counter

    origins = lib.load(event.asset, strict=False).origins(event.recompiled, event.program)
    counts = Counter(origins.values())
    return ", ".join(f"{n} {where}" for where, n in sorted(counts.items()))


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo.game import HeatDemo

    windowed = bool(os.environ.get("DISPLAY")) and not args.headless
    make = lambda **kw: HeatDemo(args.assets, args.cache, watch=True, **kw)  # noqa: E731
    if windowed:
        from .demo.window import run_window

        shown = run_window(make, frames=args.frames)
        print(f"demo: window closed after {shown} frames")
        return 0
    from .demo.headless import run_headless

    demo = make()
    try:
        run_headless(demo, args.frames or 300, args.snapshot)
    finally:
        demo.close()
    print(f"demo: snapshot {os.path.abspath(args.snapshot)}; variant cache {os.path.abspath(args.cache)}")
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

    p = sub.add_parser("demo", help="run the live-edit demo (a window when DISPLAY is set, else headless)")
    p.add_argument("--frames", type=int, default=None, help="frames to run (default: until Esc; 300 headless)")
    p.add_argument("--headless", action="store_true", help="no window, even with a display")
    p.add_argument("--snapshot", default="out/demo.png", help="PNG written at the end of a headless run")
    p.add_argument("--assets", default="assets")
    p.add_argument("--cache", default="cache")
    p.set_defaults(func=cmd_demo)

    sub.add_parser("bench", help="benchmarks against raw wgpu-py (engine-plugin bench --help)", add_help=False)

    p = sub.add_parser("info", help="print schemas, options and variant counts")
    p.add_argument("path", nargs="?", default="assets", help="an asset folder or a folder of assets")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("cache", help="inspect or trim the msgpack variant cache")
    p.add_argument("action", choices=("stats", "gc", "clear"), help="stats: size and counts; gc: drop unusable entries and evict to the cap; clear: remove every entry")
    p.add_argument("--cache", default="cache", metavar="DIR", help="the cache folder (default: cache)")
    p.add_argument("--max-bytes", type=_size_arg, metavar="SIZE", help="size cap, e.g. 512M (default 512 MiB)")
    p.add_argument("--verify", action="store_true", help="stats: decode every entry and list the unusable ones")
    p.add_argument("--usage", action="store_true", help="clear: remove the usage log too")
    p.add_argument("--remote", metavar="URL", default=None, help="also the shared Redis tier at URL (default: $ENGINE_PLUGIN_REMOTE_CACHE)")
    p.add_argument("--remote-timeout", type=float, default=None, metavar="S", help="remote socket timeout in seconds (default 0.25)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    p.set_defaults(func=cmd_cache)

    p = sub.add_parser("watch", help="watch assets and print reloads and diagnostics live")
    p.add_argument("assets", nargs="?", default="assets", help="a folder of assets, or one NAME.computeShader folder")
    p.add_argument("--cache", default="cache", metavar="DIR", help="the variant cache folder (default: cache)")
    p.add_argument("--no-cache", action="store_true", help="lower without the variant cache")
    p.add_argument("--remote", metavar="URL", default=None, help="the shared Redis tier reloads may fetch from (default: $ENGINE_PLUGIN_REMOTE_CACHE)")
    p.add_argument("--quiet-ms", type=float, default=30.0, help="debounce quiet window in ms (default 30)")
    p.add_argument("--all-variants", action="store_true", help="compile every variant up front, so each reload validates them all")
    p.add_argument("--duration", type=float, default=0.0, metavar="S", help="stop after S seconds (default: until Ctrl-C)")
    p.add_argument("--max-events", type=int, default=0, metavar="N", help="stop after N reloads or failures")
    p.set_defaults(func=cmd_watch)

    from .bake.command import add_bake_parser

    add_bake_parser(sub, _size_arg)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``engine-plugin`` command; answers the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        # bench owns its options (--json, --quick, --help); argparse's REMAINDER would not pass them.
        from .bench import main as bench_main

        return bench_main(argv[1:])
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
