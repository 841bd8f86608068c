"""The ``engine-plugin`` command: bake, watch, lower, info, demo, cache, bench.

The subcommands live in :mod:`engine_plugin.commands`;
this module builds the parser and keeps the contract of :mod:`engine_plugin.commands.contract`
around every one of them.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Sequence

from .commands.contract import CONTRACT, EXIT_FAILED, EXIT_USAGE, OneLineParser, Reporter, configure_logging
from .files import printable

__all__ = ["build_parser", "main"]


def _common() -> argparse.ArgumentParser:
    # -q/-v after the subcommand too; SUPPRESS keeps a value given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help="details: source lines and carets, notes, tracebacks")
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="only errors and the output asked for")
    return common


def build_parser() -> argparse.ArgumentParser:
    """The ``engine-plugin`` argument parser (``bench`` takes its own options)."""
    from . import __version__
    from .commands import bake, cache, demo, inspect, watch

    parser = OneLineParser(
        prog="engine-plugin",
        description="Compute shader assets for game engines: bake, inspect, watch and run .computeShader assets.",
        epilog=CONTRACT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"engine-plugin {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="details: source lines and carets, notes, tracebacks")
    parser.add_argument("-q", "--quiet", action="store_true", default=False, help="only errors and the output asked for")
    common = _common()
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    bake.add_bake_parser(sub, cache.size_arg, common)
    watch.add_parser(sub, common)
    inspect.add_parsers(sub, common)
    demo.add_parser(sub, common)
    cache.add_parser(sub, common)
    sub.add_parser("bench", help="benchmarks against raw wgpu-py (engine-plugin bench --help)", add_help=False)
    return parser


def _split_globals(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the global options before the subcommand, the rest)."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 1
    return argv[:i], argv[i:]


def _verbosity(flags: Sequence[str]) -> int:
    level = 0
    for flag in flags:
        if flag in ("-q", "--quiet"):
            level = -1
        elif flag in ("--verbose",) or (flag.startswith("-v") and set(flag[1:]) == {"v"}):
            level += flag.count("v") if not flag.startswith("--") else 1
    return level


def _run_bench(globals_: list[str], rest: list[str]) -> int:
    rep = Reporter("bench", _verbosity(globals_))
    configure_logging(rep)
    try:
        from .extras import installed, require

        # The tables need rich; --json or -q take none (README: "pass --json or -q"), nor the help.
        # (argparse takes an unambiguous abbreviation too: --js PATH, review helper 198)
        wants_json = any(len(a.split("=", 1)[0]) >= 3 and "--json".startswith(a.split("=", 1)[0]) for a in rest)
        if not {"-h", "--help"} & set(rest) and not rep.quiet and not wants_json:
            require("rich", "the tables (or pass --json PATH or -q)")
        from .bench import main as bench_main

        return bench_main(rest, tables=not rep.quiet and installed("rich"))
    except KeyboardInterrupt:
        return 130
    except SystemExit:
        raise
    except Exception as exc:
        return rep.exception(exc)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``engine-plugin`` command; answers the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    globals_, rest = _split_globals(args_list)
    if rest[:1] == ["bench"] and not {"-h", "--help", "--version"} & set(globals_):
        # bench owns its options (--json, --quick, --help); argparse's REMAINDER would not pass them.
        return _run_bench(globals_, rest[1:])
    if rest[:1] != ["bake"]:
        # '--json -' (stdout) as bake takes it: the other commands' --json is stdout already.
        args_list = [a for i, a in enumerate(args_list) if not (a == "-" and i and args_list[i - 1] == "--json")]
    try:
        parser = build_parser()  # imports every subcommand: a quarter second a Ctrl-C may fall in
        args, extra = parser.parse_known_args(args_list)
    except KeyboardInterrupt:  # before the command runs: as it would, not a traceback (review helper 228)
        print("\nengine-plugin: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    if extra:
        print(printable(f"engine-plugin {args.command}: unrecognized arguments: {' '.join(extra)} (see: engine-plugin {args.command} --help)"), file=sys.stderr)
        return EXIT_USAGE
    verbosity = -1 if args.quiet else int(args.verbose or 0)
    rep = Reporter(args.command, verbosity)
    configure_logging(rep)
    try:
        return int(args.func(args, rep) or 0)
    except KeyboardInterrupt as exc:
        # Said (with -q too: it is why the command failed), on a line of its own (progress may be mid-line).
        kept = "; what it wrote so far stays (each entry is written whole)" if args.command == "bake" else ""
        term = getattr(exc, "signum", None) == getattr(signal, "SIGTERM", None)  # a bake stopped by SIGTERM
        print(f"\nengine-plugin {args.command}: interrupted ({'SIGTERM' if term else 'Ctrl-C'}){kept}", file=sys.stderr)
        return 143 if term else 130
    except BrokenPipeError:
        # The reader went away (`| head`): no bug. Nothing more can be written; stdout goes to
        # devnull so the interpreter's own flush at exit does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED
    except Exception as exc:
        return rep.exception(exc)


if __name__ == "__main__":
    sys.exit(main())
