"""``engine-plugin bake``: arguments, runner choice, output, exit status."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

__all__ = ["add_bake_parser", "cmd_bake"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a positive whole number, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"a positive whole number, not {text!r}")
    return value


def add_bake_parser(sub: Any, size_arg: Any) -> argparse.ArgumentParser:
    """Add the ``bake`` subcommand to ``sub`` (``size_arg`` parses ``--max-bytes``)."""
    p = sub.add_parser(
        "bake",
        help="lower and validate every variant of the assets into the variant cache",
        description="Lower every variant of every asset, validate it by compiling it on a device, and write the "
        "variant cache. Variants the cache already holds are skipped. Exits 1 when any variant failed, 2 on usage errors.",
    )
    p.add_argument("assets", nargs="*", default=["assets"], metavar="ASSETS", help="asset folders, or folders searched for *.computeShader (default: assets)")
    p.add_argument("--cache", default="cache", metavar="DIR", help="the variant cache folder (default: cache)")
    p.add_argument("--jobs", "-j", type=_positive, metavar="N", help="local worker processes (default: the CPU count; 1 bakes in this process)")
    p.add_argument("--variants-from", metavar="USAGE", help="bake only the variants a game recorded in this usage log (cache/usage.msgpack)")
    p.add_argument("--json", metavar="REPORT", help="write a machine-readable report to this file")
    dask = p.add_mutually_exclusive_group()
    dask.add_argument("--scheduler", metavar="ADDRESS", help="run on the Dask cluster at ADDRESS (e.g. tcp://farm:8786); needs engine_plugin[dask]")
    dask.add_argument("--dask-local", type=_positive, metavar="N", help="run on a Dask LocalCluster of N worker processes on loopback")
    p.add_argument("--max-bytes", type=size_arg, metavar="SIZE", help="the cache's size cap, e.g. 2G (default 512 MiB)")
    p.add_argument("--force", action="store_true", help="rebake variants the cache already holds")
    p.add_argument("--remote", metavar="URL", default=None, help="also write every entry to this shared Redis tier, e.g. redis://cache:6379/0 (default: $ENGINE_PLUGIN_REMOTE_CACHE); needs engine_plugin[remote]")
    p.add_argument("--remote-ttl", type=float, metavar="S", help="expire remote entries after S seconds (default: never; Redis's LRU evicts)")
    p.add_argument("--remote-timeout", type=float, default=None, metavar="S", help="remote socket timeout in seconds (default 0.25)")
    p.add_argument("--progress", choices=("auto", "rich", "plain", "none"), default="auto", help="auto: a bar on a terminal, plain lines otherwise")
    p.set_defaults(func=cmd_bake)
    return p


def _runner(args: argparse.Namespace) -> Any:
    from .runners import DaskRunner, InlineRunner, ProcessPoolRunner

    if args.scheduler:
        return DaskRunner(scheduler=args.scheduler)
    if args.dask_local:
        return DaskRunner(local_workers=args.dask_local)
    jobs = args.jobs or os.cpu_count() or 1
    return InlineRunner() if jobs == 1 else ProcessPoolRunner(jobs)


def cmd_bake(args: argparse.Namespace) -> int:
    from rich.console import Console

    from ..cache import DEFAULT_MAX_BYTES, VariantCache, read_usage
    from .driver import bake
    from .progress import make_progress
    from .runners import DaskMissingError

    err = sys.stderr
    if (args.scheduler or args.dask_local) and args.jobs:
        print("engine-plugin bake: --jobs sizes the local process pool; a Dask bake runs on the cluster's workers (drop --jobs)", file=err)
        return EXIT_USAGE
    try:
        runner = _runner(args)
    except DaskMissingError as exc:
        print(f"engine-plugin bake: {exc.message}", file=err)
        return EXIT_USAGE
    usage = None
    if args.variants_from:
        if not os.path.isfile(args.variants_from):
            print(f"engine-plugin bake: no usage log at {args.variants_from} (a game writes one with AssetLibrary(record_usage=True))", file=err)
            return EXIT_USAGE
        usage = read_usage(args.variants_from)
        if not usage:
            print(f"engine-plugin bake: {args.variants_from} is not a usage log or records no variants", file=err)
            return EXIT_USAGE
    from ..cache.remote import DEFAULT_TIMEOUT, RemoteMissingError, remote_from

    try:
        remote = remote_from(args.remote, timeout=args.remote_timeout or DEFAULT_TIMEOUT, ttl=args.remote_ttl)
    except RemoteMissingError as exc:
        print(f"engine-plugin bake: {exc}", file=err)
        return EXIT_USAGE
    cache = VariantCache(args.cache, max_bytes=args.max_bytes or DEFAULT_MAX_BYTES)
    progress = make_progress(args.progress)
    report = bake(args.assets, cache, runner=runner, usage=usage, progress=progress, remote=remote)

    st = cache.stats()
    if st.evictions:
        report.notes.append(f"the cache cap evicted {st.evictions} entries during the bake; raise --max-bytes to keep them all")
    if report.corrupt_replaced:
        report.notes.append(f"{report.corrupt_replaced} unusable cache entries were baked again")
    out = Console(width=None if sys.stdout.isatty() else 120)
    out.print(report.summary_table())
    for note in report.notes:
        out.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)
    if report.remote_line():
        out.print(report.remote_line(), markup=False, highlight=False, soft_wrap=True)
    out.print(report.closing_line(), markup=False, highlight=False, soft_wrap=True)
    if report.failures:
        out.print(f"{len(report.failures)} failure(s); the messages are above", markup=False, highlight=False, soft_wrap=True)
    if args.json:
        report.write_json(args.json)
    return EXIT_OK if report.ok else EXIT_FAILED
