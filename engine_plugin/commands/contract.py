"""The contract every ``engine-plugin`` subcommand keeps: exit status, streams, -q/-v, JSON.

* exit 0: done; 1: an asset or variant failed; 2: a usage or environment error (a bad option,
  a path that names no asset, no GPU adapter, a missing optional extra, an unreachable Dask
  scheduler). An internal error (a bug of ours) exits 1 and says ``engine_plugin bug``.
* every error goes to stderr as ONE line prefixed with the subcommand
  (``engine-plugin bake: ...``); ``-v`` adds the details (source line and caret, notes, a
  traceback); ``-q`` silences progress and summaries, never errors nor the output asked for.
* ``--json -`` (and ``info``/``cache stats``/``watch`` ``--json``) writes JSON to stdout, and
  nothing else goes to stdout then.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import signal
import stat
import sys
import tempfile
import threading
import traceback
from typing import Any, Callable, Iterator, NoReturn, TextIO

from ..errors import CacheError, GpuError, PluginError
from ..files import printable

__all__ = [
    "CONTRACT",
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "OneLineParser",
    "Reporter",
    "UsageError",
    "add_modules_option",
    "check_asset_path",
    "check_output_file",
    "folder_arg",
    "exit_status",
    "module_folders",
    "one_line",
    "seconds_arg",
    "whole_number_arg",
    "write_json",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

CONTRACT = """\
exit status: 0 ok; 1 an asset or variant failed; 2 a usage or environment error (a bad option, a
path that names no asset, no GPU adapter, a missing optional extra, an unreachable Dask scheduler);
130 interrupted by Ctrl-C (143: by SIGTERM), a bake keeping the entries it wrote whole; watch, once
watching, stops on Ctrl-C as asked (0, or 1 when an asset watched is failing), as the demo's window
does (0).
Every error goes to stderr as one line prefixed with the subcommand ("engine-plugin bake: ...");
-v adds details (the source line and caret, notes, tracebacks); -q prints only errors and the
output asked for. "--json -" writes JSON to stdout; info, cache stats and watch take --json for
JSON on stdout (watch: one JSON object a line)."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, with a usage error as one line on stderr (prefixed with the command) and exit 2."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {one_line(message)} (see: {self.prog} --help)", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_USAGE)


class UsageError(Exception):
    """A bad argument or environment the command found itself: exit 2, one line on stderr."""


def one_line(text: str) -> str:
    """``text`` on one line: its lines joined by ``" "`` (indentation dropped), control
    characters spelled out (:func:`~engine_plugin.files.printable`)."""
    return printable(" ".join(part.strip() for part in str(text).splitlines() if part.strip()))


def exit_status(exc: BaseException) -> int:
    """The exit status an exception stands for (module docstring)."""
    from ..bake.runners import DaskMissingError, SchedulerUnreachable
    from ..cache.remote import RemoteMissingError
    from ..extras import MissingExtraError

    environment = (UsageError, MissingExtraError, RemoteMissingError, DaskMissingError, SchedulerUnreachable, GpuError, CacheError)
    return EXIT_USAGE if isinstance(exc, environment) else EXIT_FAILED


class Reporter:
    """Where a subcommand's words go: errors to stderr (one line, details with -v), progress
    and summaries to stdout unless -q."""

    def __init__(self, command: str, verbosity: int = 0, out: TextIO | None = None, err: TextIO | None = None):
        self.command = command
        self.verbosity = verbosity
        self.out = out or sys.stdout
        self.err = err or sys.stderr

    @property
    def prefix(self) -> str:
        return f"engine-plugin {self.command}" if self.command else "engine-plugin"

    @property
    def quiet(self) -> bool:
        return self.verbosity < 0

    @property
    def verbose(self) -> bool:
        return self.verbosity > 0

    def error(self, headline: str, detail: str | None = None) -> None:
        """One line on stderr; ``detail`` (indented) only with -v."""
        print(f"{self.prefix}: {one_line(headline)}", file=self.err, flush=True)
        if self.verbose and detail:
            print(printable(detail.rstrip("\n")), file=self.err, flush=True)

    def exception(self, exc: BaseException) -> int:
        """Report ``exc`` by the contract and answer its exit status."""
        if isinstance(exc, PluginError):
            rendered = exc.render()
            headline = exc.headline()
            detail = rendered[len(headline) :].lstrip("\n") if rendered.startswith(headline) else rendered
            self.error(headline, detail or None)
        elif isinstance(exc, UsageError):
            self.error(str(exc))
        else:
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            self.error(f"engine_plugin bug, please report: {type(exc).__name__}: {exc} (run with -v for the traceback)", tb)
        return exit_status(exc)

    def say(self, text: str = "") -> None:
        """A progress or summary line on stdout (silenced by -q)."""
        if not self.quiet:
            print(printable(text), file=self.out, flush=True)

    def note(self, text: str) -> None:
        """A remark on stderr (silenced by -q): a fallback taken, a default assumed."""
        if not self.quiet:
            print(f"{self.prefix}: {one_line(text)}", file=self.err, flush=True)


class _OneLineFormatter(logging.Formatter):
    def __init__(self, prefix: str, verbose: bool):
        super().__init__()
        self.prefix = prefix
        self.verbose = verbose

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if not self.verbose and isinstance(record.args, tuple) and any(isinstance(a, PluginError) for a in record.args):
            # An error logged whole (a failed reload: its source line and caret) is its one
            # headline here; one_line() flattened the caret into the line (review helper 195).
            try:
                text = str(record.msg) % tuple(a.headline() if isinstance(a, PluginError) else a for a in record.args)
            except (TypeError, ValueError):
                pass
        if record.exc_info and self.verbose:
            text += "\n" + self.formatException(record.exc_info)
        if self.verbose:
            return f"{self.prefix}: {printable(text)}"
        return f"{self.prefix}: {one_line(text)}"


def configure_logging(reporter: Reporter) -> logging.Handler:
    """The library's log records go to stderr through one handler, one line each (details with
    -v); never also through logging's last-resort handler."""
    logger = logging.getLogger("engine_plugin")
    for old in [h for h in logger.handlers if getattr(h, "_engine_plugin_cli", False)]:
        logger.removeHandler(old)
    handler = logging.StreamHandler(reporter.err)
    handler._engine_plugin_cli = True  # type: ignore[attr-defined]
    handler.setFormatter(_OneLineFormatter(reporter.prefix, reporter.verbose))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if reporter.verbose else logging.ERROR if reporter.quiet else logging.WARNING)
    logger.propagate = False
    return handler


class PlainConsole:
    """What a command prints where rich is missing (``--json`` or ``-q`` without the [cli]
    extra): its lines as they are, no table (a ``rich.console.Console`` stand-in)."""

    def __init__(self, file: TextIO) -> None:
        self.file = file

    def print(self, text: object = "", **_: Any) -> None:
        if isinstance(text, str):  # a rich table has no plain form here: left out
            print(text, file=self.file, flush=True)


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt (its ``signum`` SIGTERM: the command exits 143 and
    says so) where nothing else handles it, on the main thread: what a command's finally
    blocks write (the demo's figures log) is written then, not cut (review helper 199)."""
    term = getattr(signal, "SIGTERM", None)
    if term is None or threading.current_thread() is not threading.main_thread() or signal.getsignal(term) is not signal.SIG_DFL:
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        exc = KeyboardInterrupt()
        exc.signum = signum  # type: ignore[attr-defined]  # read by the CLI: exit 143
        raise exc

    previous = signal.signal(term, interrupt)
    try:
        yield
    finally:
        signal.signal(term, previous)


def whole_number_arg(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``minimum`` (and at most ``maximum``: a
    count the OS or a library takes as a C int, review helper 137)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"a whole number, not {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"a whole number of at least {minimum}, not {text!r}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"a whole number of at most {maximum}, not {text!r}")
        return value

    return parse


# The largest duration option value unless it says otherwise, in the option's own unit (seconds,
# or ms for --quiet-ms): longer ones overflow the timeouts they end up in (a socket's,
# threading's: review helper 137), and ~115 days is past any wait a command is asked for.
MAX_SECONDS = 1e7


def seconds_arg(positive: bool = False, unit: str = "seconds", maximum: float = MAX_SECONDS) -> Callable[[str], float]:
    """An argparse type: a finite number of ``unit``, not negative (``positive``: above 0), at
    most ``maximum``; NaN and infinity are refused (a NaN quiet window never comes due)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"a number of {unit}, not {text!r}") from None
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise argparse.ArgumentTypeError(f"a finite {'positive' if positive else 'non-negative'} number of {unit}, not {text!r}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"at most {maximum:g} {unit}, not {text!r}")
        return value

    return parse


ROOT_HELP = (
    "the asset root: #import looks in the modules/ folder of each folder from the asset's up to it, "
    "and asset files stay inside it (default: the path given; for one asset, the folder holding it)"
)


MODULES_HELP = (
    "a folder of shared WGSL modules for #import, searched after the modules/ folders up to the root, "
    "as AssetLibrary(modules=[...]) searches it (repeat for more; may lie outside the root)"
)


def add_modules_option(parser: argparse.ArgumentParser) -> None:
    """``--modules DIR`` (repeatable): the module folders a game's ``AssetLibrary(modules=)``
    names, so a command reads its assets as the game does (bake had no way to name them: an
    asset importing one could not be baked, round 25's notes)."""
    parser.add_argument("--modules", action="append", default=[], type=folder_arg, metavar="DIR", help=MODULES_HELP)


def module_folders(args: argparse.Namespace) -> tuple[str, ...]:
    """The ``--modules`` folders given, each checked to be a folder (UsageError, exit 2)."""
    folders = tuple(getattr(args, "modules", None) or ())
    for folder in folders:
        if not os.path.isdir(folder):
            raise UsageError(f"--modules {folder}: not a folder")
    return folders


def check_asset_path(path: str) -> None:
    """Refuse (UsageError, exit 2) a path that exists and is a file other than an asset's
    ``bindings.yaml``: it names no asset (review helper 117: a ``x.computeShader`` file, or
    an asset's ``kernel.wgsl``, failed as a broken asset, exit 1)."""
    if os.path.exists(path) and not os.path.isdir(path) and os.path.basename(os.path.normpath(path)) != "bindings.yaml":
        raise UsageError(f"{path}: a file, not a .computeShader folder or a folder holding some")


def check_under_root(path: str, root: str | None) -> None:
    """Refuse (UsageError) an asset path outside ``--root``, as written or resolved (None:
    nothing to check), and a root that is the asset itself (a root holds assets)."""
    if root is None:
        return
    from ..assets.folder import ASSET_SUFFIX, under_root

    if not os.path.isdir(root):
        raise UsageError(f"--root {root}: not a folder")
    # An asset however spelled (through a link named otherwise: helper 115), or named like one.
    if os.path.isfile(os.path.join(root, "bindings.yaml")) or os.path.normpath(root).endswith(ASSET_SUFFIX):
        raise UsageError(f"--root {root} is an asset; the root is a folder holding assets (its modules/ and theirs)")
    if not under_root(path, root):
        raise UsageError(f"{path} is not under --root {root}")


def folder_arg(text: str) -> str:
    """An argparse type: a folder path that names something (``--cache ''`` wrote the cache's
    entries into the current folder: review helper 128)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path names no folder (the current one is '.')")
    return text


class _Held(logging.Handler):
    """Log records kept, to be said later or not at all."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def require_cache_key(consequence: str) -> None:
    """Refuse (UsageError, exit 2) a command that needs this user's cache key when there is
    none (see :mod:`engine_plugin.cache.local_key`), saying ``consequence`` and the fix: a bake
    would sign entries no later process accepts; gc and --verify would read every entry as
    forged (gc removed a whole baked cache, review helpers 137, 144)."""
    from ..cache.local_key import local_key_problem

    # The key's own warnings (said as it is first read) are held back: a refusal is one line,
    # not three that also claim the process goes on with a key of its own (review helper 204).
    # Without a refusal they are said as they were.
    logger = logging.getLogger("engine_plugin.cache")
    held = _Held()
    propagate, logger.propagate = logger.propagate, False
    logger.addHandler(held)
    try:
        problem = local_key_problem()
    finally:
        logger.removeHandler(held)
        logger.propagate = propagate
    if problem is None:
        for record in held.records:
            logger.handle(record)
        return
    fix = (
        "fix ENGINE_PLUGIN_CACHE_KEY (or unset it to use ~/.local/state)"
        if os.environ.get("ENGINE_PLUGIN_CACHE_KEY")
        else "make that folder writable, or name a key file in ENGINE_PLUGIN_CACHE_KEY"
    )
    raise UsageError(f"{problem}: {consequence}; {fix}")


def check_output_file(target: str, what: str) -> None:
    """Refuse, before any work, a file path a command could not write at its end: a folder,
    or a path through a file or a folder it may not write (missing folders are made).

    Raises:
        UsageError: naming ``what`` and the path.
    """
    if target == "-":
        return
    path = os.path.abspath(target)
    if os.path.isdir(path) or target.endswith((os.sep, "/")):
        raise UsageError(f"{what} {target!r} is a folder; name a file")
    parent = os.path.dirname(path)
    while not os.path.exists(parent):
        if os.path.islink(parent):
            raise UsageError(f"{what} {target!r}: {parent!r} is a link to nothing")
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise UsageError(f"{what} {target!r}: {parent!r} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{what} {target!r}: cannot write in {parent!r}")
    # os.access answers yes to root for any folder, /proc and read-only mounts included: a
    # file is made there and removed (review helper 228: bench --json /proc/x ran every case).
    try:
        fd, probe = tempfile.mkstemp(prefix=".engine-plugin-probe-", dir=parent)
    except OSError as exc:
        raise UsageError(f"{what} {target!r}: cannot write in {parent!r} ({exc.strerror or exc})") from None
    os.close(fd)
    os.unlink(probe)


def write_json(data: Any, target: str, *, out: TextIO | None = None) -> None:
    """Write ``data`` as JSON to the file ``target``, or to stdout when ``target`` is ``-``."""
    from ..files import json_text, write_atomic

    text = json_text(data, indent=1) + "\n"
    if target == "-":
        stream = out or sys.stdout
        stream.write(text)
        stream.flush()
        return
    # A link is written through (it stays a link to the report); a FIFO, a terminal or
    # /dev/stdout is written to as a shell redirection does: replacing it replaced the device
    # node, and the FIFO's reader got nothing (review helper 167).
    path = os.path.realpath(target)
    try:
        if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):
            with open(path, "w", encoding="utf-8") as stream:
                stream.write(text)
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, text.encode("utf-8"))
    except OSError as exc:
        raise UsageError(f"{target}: cannot write the JSON report ({exc.strerror or exc})") from None
