"""``engine-plugin bake``: arguments, runner choice, output, exit status (the CLI contract:
:mod:`engine_plugin.commands.contract`)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable

from ..cache.remote import MAX_TTL_S
from ..files import printable
from .contract import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    ROOT_HELP,
    PlainConsole,
    Reporter,
    UsageError,
    add_modules_option,
    check_asset_path,
    check_output_file,
    check_under_root,
    folder_arg,
    module_folders,
    require_cache_key,
    seconds_arg,
    whole_number_arg,
    write_json,
)

__all__ = ["add_bake_parser", "cmd_bake"]

DEFAULT_COMPILE_TIMEOUT_S = 120.0  # a compile taking longer is a stuck compiler (lavapipe: minutes on a huge var<private> array)
MAX_JOBS = 4096  # worker processes: more is a typo (a C int past 2**31 was a traceback)

# A variant that failed for one of these did not fail as an asset: the machine has no usable GPU.
ENVIRONMENT_FAILURES = ("NoAdapterError", "DeviceLostError", "GpuError")


def add_bake_parser(sub: Any, size_arg: Callable[[str], int], common: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Add the ``bake`` subcommand to ``sub`` (``size_arg`` parses ``--max-bytes``)."""
    from ..bake.runners import DEFAULT_CONNECT_TIMEOUT

    p = sub.add_parser(
        "bake",
        parents=[common] if common is not None else [],
        help="lower and validate every variant of the assets into the variant cache",
        description="Lower every variant of every asset, validate it by compiling it on a device, and write the "
        "variant cache. Variants the cache already holds are skipped. Exits 1 when any variant failed, 2 on usage "
        "or environment errors (no asset under a path, no adapter, an unreachable scheduler).",
    )
    p.add_argument("assets", nargs="*", metavar="ASSETS", help="asset folders, or folders searched for *.computeShader (default: assets)")
    p.add_argument("--root", metavar="DIR", help=ROOT_HELP)
    add_modules_option(p)
    p.add_argument("--builtin", action="store_true", help="also bake the kernels shipped in the package (the engine's products and the demo's)")
    p.add_argument("--cache", default="cache", type=folder_arg, metavar="DIR", help="the variant cache folder (default: cache)")
    p.add_argument(
        "--jobs",
        "-j",
        type=whole_number_arg(1, MAX_JOBS),
        metavar="N",
        help="local worker processes (default: the CPU count; 1 bakes in this process). Each compile keeps ~0.3 MiB in its "
        "process until it ends: pool processes are replaced after 2048 variants each (ENGINE_PLUGIN_BAKE_WORKER_VARIANTS); "
        "this process (1) and Dask workers are not, so they grow with a large bake",
    )
    p.add_argument("--variants-from", metavar="USAGE", help="bake only the variants a game recorded in this usage log (cache/usage.msgpack)")
    p.add_argument("--json", metavar="REPORT", help="write a machine-readable report to this file ('-': stdout)")
    p.add_argument("--format", choices=("text", "github"), default="text", help="github: also print each failure as a GitHub Actions annotation on stdout")
    dask = p.add_mutually_exclusive_group()
    dask.add_argument("--scheduler", metavar="ADDRESS", help="run on the Dask cluster at ADDRESS (e.g. tcp://farm:8786); needs engine_plugin[dask]")
    dask.add_argument("--dask-local", type=whole_number_arg(1, MAX_JOBS), metavar="N", help="run on a Dask LocalCluster of N worker processes on loopback")
    p.add_argument(
        "--connect-timeout",
        type=seconds_arg(positive=True),
        default=DEFAULT_CONNECT_TIMEOUT,
        metavar="S",
        help=f"--scheduler: give up after S seconds without a scheduler or a worker (default {DEFAULT_CONNECT_TIMEOUT:g})",
    )
    p.add_argument(
        "--compile-timeout",
        type=seconds_arg(positive=True),
        default=DEFAULT_COMPILE_TIMEOUT_S,
        metavar="S",
        help=f"fail a variant whose compile takes longer (a driver's compiler stuck on a shader; default {DEFAULT_COMPILE_TIMEOUT_S:g}); "
        "its compile is left running and the rest bake; not applied on a Dask cluster",
    )
    p.add_argument("--max-bytes", type=size_arg, metavar="SIZE", help="the cache's size cap, e.g. 2G (default 512 MiB)")
    p.add_argument("--force", action="store_true", help="rebake variants the cache already holds")
    p.add_argument(
        "--remote",
        metavar="URL",
        default=None,
        help="also write every entry to this shared Redis tier, e.g. redis://cache:6379/0 (default: $ENGINE_PLUGIN_REMOTE_CACHE); needs engine_plugin[remote]",
    )
    p.add_argument(
        "--remote-ttl",
        type=seconds_arg(positive=True, maximum=MAX_TTL_S),
        metavar="S",
        help="expire remote entries after S seconds (default: never; Redis's LRU evicts)",
    )
    p.add_argument(
        "--remote-verify",
        action="store_true",
        help="also read what the remote tier holds for these variants and replace what a client would refuse (a forgery, another secret's signature); reads every value",
    )
    p.add_argument("--remote-timeout", type=seconds_arg(positive=True), default=None, metavar="S", help="remote socket timeout in seconds (default 0.25)")
    p.add_argument("--progress", choices=("auto", "rich", "plain", "none"), default="auto", help="auto: a bar on a terminal, plain lines otherwise")
    p.set_defaults(func=cmd_bake)
    return p


def _runner(args: argparse.Namespace) -> Any:
    from ..bake.runners import DaskRunner, InlineRunner, ProcessPoolRunner

    if args.scheduler:
        return DaskRunner(scheduler=args.scheduler, connect_timeout=args.connect_timeout)
    if args.dask_local:
        return DaskRunner(local_workers=args.dask_local, connect_timeout=max(args.connect_timeout, 30.0))
    jobs = args.jobs or os.cpu_count() or 1
    return InlineRunner() if jobs == 1 else ProcessPoolRunner(jobs)


def _given_paths(args: argparse.Namespace) -> list[str]:
    """The user's asset paths: those given, else ``assets``. With --builtin ("also bake the
    packaged kernels": the project's own were left out, review helper 155) ``assets`` only
    when it holds assets and lies under --root: a game's art folder named so, or one outside
    the root, must not fail the bake of the packaged kernels (review helper 156)."""
    if args.assets or not args.builtin:
        return list(args.assets) or ["assets"]
    from ..assets.folder import find_assets, under_root

    own = os.path.isdir("assets") and bool(find_assets("assets")) and (args.root is None or under_root("assets", args.root))
    return ["assets"] if own else []


def _paths(args: argparse.Namespace) -> list[str]:
    """The asset paths to bake: the user's (:func:`_given_paths`), plus the packaged kernels
    with --builtin; each must exist."""
    paths = _given_paths(args)
    for path in paths:
        if not os.path.exists(path):
            raise UsageError(f"{path}: no such file or folder")
    if args.builtin:
        from ..assets.builtin import builtin_root
        from ..demo.game import demo_assets

        for folder in (builtin_root(), demo_assets()):
            rel = os.path.relpath(folder)
            paths.append(rel if not rel.startswith("..") else folder)
    return paths


def cmd_bake(args: argparse.Namespace, rep: Reporter | None = None) -> int:
    from ..assets.folder import find_assets
    from ..bake.driver import bake
    from ..bake.progress import NoProgress, make_progress
    from ..bake.report import BakeInterrupted
    from ..bake.runners import SchedulerUnreachable
    from ..cache import DEFAULT_MAX_BYTES, VariantCache, read_usage
    from ..extras import installed, require

    rep = rep or Reporter("bake")
    if args.scheduler is not None and not args.scheduler.strip():  # baked locally without a word before (helper 156)
        raise UsageError("--scheduler takes a Dask scheduler address (e.g. tcp://farm:8786), not an empty one")
    if (args.scheduler or args.dask_local) and args.jobs:
        raise UsageError("--jobs sizes the local process pool; a Dask bake runs on the cluster's workers (drop --jobs)")
    if args.json == "-" and args.format == "github":
        raise UsageError("--json - and --format github both want stdout; write the report to a file")
    if args.json:
        check_output_file(args.json, "--json")  # not after a long bake
    paths = _paths(args)
    modules = module_folders(args)
    usage = None
    if args.variants_from:
        if not os.path.exists(args.variants_from):
            raise UsageError(f"no usage log at {args.variants_from} (a game writes one with AssetLibrary(record_usage=True))")
        if not os.path.isfile(args.variants_from):
            kind = "a folder" if os.path.isdir(args.variants_from) else "not a regular file"
            raise UsageError(f"{args.variants_from} is {kind}, not a usage log (a game writes one with AssetLibrary(record_usage=True))")
        from ..cache.usage import UsageLogError

        try:
            usage = read_usage(args.variants_from, strict=True)
        except UsageLogError as exc:  # said once, why (an oversized log was also called "not a usage log": helper 155)
            raise UsageError(f"usage log {args.variants_from} {exc}") from None
        if not usage:
            raise UsageError(f"{args.variants_from} records no variants")
    for path in paths:
        check_asset_path(path)
        if not find_assets(path):
            raise UsageError(f"no .computeShader assets under {path}")
    if args.json and args.json != "-":
        _check_report_target(args.json, args.variants_from, paths, modules)
    require_cache_key("a bake would sign entries no later process accepts")
    for path in _given_paths(args):  # --builtin's packaged kernels keep their own root
        check_under_root(path, args.root)
    table_out = sys.stderr if args.json == "-" else sys.stdout
    # The summary table needs rich; --json or -q take none (README: "pass --json or -q"):
    # without it the summary's plain lines are printed instead of the table.
    tables = not rep.quiet and installed("rich")
    if not rep.quiet and not args.json:
        require("rich", "the bake summary table (or pass --json PATH or -q)")
    if not rep.quiet and args.progress == "rich":
        require("rich", "--progress rich")  # one line naming the extra, not a raw ImportError
    runner = _runner(args)
    from ..cache.remote import DEFAULT_TIMEOUT, remote_from

    remote = remote_from(args.remote, timeout=args.remote_timeout or DEFAULT_TIMEOUT, ttl=args.remote_ttl)
    # Each failed write is said per variant: the cache's own warning said the first twice (review helper 228).
    cache = VariantCache(args.cache, max_bytes=args.max_bytes or DEFAULT_MAX_BYTES, warn_writes=False)
    progress = NoProgress() if rep.quiet else make_progress(args.progress if tables or args.progress != "auto" else "plain", verbose=rep.verbose)
    progress.verbose = rep.verbose
    progress.prefix = f"{rep.prefix}: "
    try:
        report = bake(
            paths,
            cache,
            runner=runner,
            usage=usage,
            progress=progress,
            force=args.force,
            remote=remote,
            root=args.root,
            modules=modules,
            remote_verify=args.remote_verify,
            compile_timeout=args.compile_timeout,
        )
    except (BakeInterrupted, SchedulerUnreachable) as stopped:
        if args.json and stopped.report is not None:  # a CI job reads what was done, marked interrupted (not ok)
            stopped.report.evicted = cache.stats().evictions  # as after a whole bake (review helper 201)
            write_json(stopped.report.as_json(), args.json)
        raise

    st = cache.stats()
    report.evicted = st.evictions  # the JSON's totals then match the files (review helper 200)
    if st.evictions:
        report.notes.append(f"the cache cap evicted {st.evictions} entries during the bake; raise --max-bytes to keep them all")
        if rep.quiet:  # the variants baked may not all be in the cache: said under -q too
            print(printable(f"engine-plugin bake: {report.notes[-1]}"), file=sys.stderr, flush=True)
    if report.corrupt_replaced:
        report.notes.append(f"{report.corrupt_replaced} unusable cache entries were baked again")
    if rep.quiet:  # its current text is not baked: said under -q too, exit 0 still (review helper 241)
        for note in report.loud_notes:
            print(printable(f"engine-plugin bake: {note}"), file=sys.stderr, flush=True)
    if not rep.quiet:
        out: Any
        if tables:
            from rich.console import Console

            out = Console(file=table_out, width=None if table_out.isatty() else 120)
            out.print(report.summary_table())
        else:
            out = PlainConsole(table_out)
        for note in report.notes:
            out.print(printable(f"note: {note}"), markup=False, highlight=False, soft_wrap=True)
        if report.remote_line():
            out.print(report.remote_line(), markup=False, highlight=False, soft_wrap=True)
        out.print(report.closing_line(), markup=False, highlight=False, soft_wrap=True)
        if report.failures:
            out.print(f"{len(report.failures)} failure(s); the messages are above", markup=False, highlight=False, soft_wrap=True)
    elif report.remote is not None and not report.remote.get("reachable"):
        # Quiet says nothing of a good bake, but a farm job meant to fill the tier must hear
        # that it did not (it printed nothing and exited 0, review helper 123).
        print(printable(f"engine-plugin bake: {report.remote_line()}"), file=sys.stderr, flush=True)
    if args.format == "github":
        for line in report.github_annotations():
            print(line, flush=True)
    if args.json:
        write_json(report.as_json(), args.json)  # atomically (a build system never reads half a report)
    if any(f.failure.kind in ENVIRONMENT_FAILURES for f in report.failures):
        return EXIT_USAGE
    return EXIT_OK if report.ok else EXIT_FAILED


def _check_report_target(target: str, usage_log: str | None, paths: list[str], modules: tuple[str, ...] = ()) -> None:
    """The report must not replace what the bake reads: the usage log, or a file of an asset
    it bakes (review helper 200: ``--json cache/usage.msgpack`` replaced the game's log with
    the report, ``--json A.computeShader/kernel.wgsl`` the shader, and the bake exited 0)."""
    from ..assets.folder import find_assets

    where = os.path.realpath(target)
    if usage_log and os.path.realpath(usage_log) == where:
        raise UsageError(f"--json {target}: that is the usage log this bake reads (--variants-from); name another file")
    for path in paths:
        for folder in find_assets(path, broken=True):
            real = os.path.realpath(folder if os.path.basename(folder) != "bindings.yaml" else os.path.dirname(folder))
            if where == real or where.startswith(real.rstrip(os.sep) + os.sep):
                raise UsageError(f"--json {target}: that is inside the asset {folder}, which this bake reads; name a file outside it")
    for path in paths:
        # A module (``#import``) the assets read: any .wgsl under the bake's paths, or anything
        # in a modules folder there (review helper 201: --json assets/modules/factor.wgsl).
        base = os.path.realpath(path if os.path.isdir(path) else os.path.dirname(path) or ".")
        inside = where.startswith(base.rstrip(os.sep) + os.sep)
        if inside and (where.endswith(".wgsl") or "modules" in os.path.relpath(where, base).split(os.sep)[:-1]):
            raise UsageError(f"--json {target}: that is a shader or module file under {path}, which this bake may read; name a file outside it")
    for folder in modules:
        if where.startswith(os.path.realpath(folder).rstrip(os.sep) + os.sep):
            raise UsageError(f"--json {target}: that is inside the modules folder {folder}, which this bake reads; name a file outside it")
