"""``engine-plugin watch``: a live log of reloads and diagnostics, for people or (``--json``) editors.

``--json`` prints one JSON object a line on stdout, flushed as it happens::

    {"event": "watching", "root": ..., "assets": [...]}
    {"event": "reload", "asset": "k.computeShader", "generation": 1, "kind": "body"|"layout",
     "files": [...], "recompiled": ["T=f32"], "layout_changed": [...], "latency_ms": 41.0,
     "origins": {"remote": 1}}   # where the recompiled variants came from: cache, remote, lowered
    {"event": "failure", "asset": ..., "generation": 0, "kind": "CompileError", "path": ...,
     "line": 6, "col": 5, "message": "path:6:5: ...", "rendered": "... with the line and a caret"}
    {"event": "added", "asset": ..., "generation": 0}   # an asset made under the folder watched
    {"event": "removed", "asset": ...}                  # its folder removed or moved out

Exit status: 0, or 1 when an asset watched is failing as the command stops (Ctrl-C,
``--duration``, ``--max-events``).

Assets made (or moved in) under the watched folder while it runs are watched from then on
(the folder is scanned again every second); each is checked as those found at start are. An
asset whose folder goes away is reported removed, not failing. ``--max-events`` counts
reloads and failures (``added`` and ``removed`` are news, not events to stop on).

Each failure is reported once: by this command (the library's own warnings about the assets
it watches are not printed again).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import time
from typing import Any

from ..errors import PluginError
from ..files import json_text
from .contract import (
    EXIT_FAILED,
    EXIT_OK,
    ROOT_HELP,
    Reporter,
    UsageError,
    add_modules_option,
    check_under_root,
    folder_arg,
    module_folders,
    seconds_arg,
    sigterm_interrupts,
    whole_number_arg,
)

__all__ = ["add_parser", "cmd_watch"]

_RESCAN_S = 1.0  # how often the watched folder is scanned for new assets


def _failure_json(asset: str, generation: int, error: PluginError) -> dict[str, Any]:
    return {
        "event": "failure",
        "asset": asset,
        "generation": generation,
        "kind": type(error).__name__,
        "path": error.path,
        "line": error.line,
        "col": error.col,
        "message": error.headline(),
        "rendered": error.render(),
    }


class _Log:
    """Writes events as text (stdout; failures on stderr) or as JSON lines (stdout)."""

    def __init__(self, rep: Reporter, as_json: bool):
        self.rep = rep
        self.as_json = as_json
        self._shown: dict[str, str] = {}  # asset -> the failure shown last (until a reload or a clear)

    def emit(self, data: dict[str, Any]) -> None:
        print(json_text(data), file=self.rep.out, flush=True)

    def failure(self, asset: str, generation: int, error: PluginError, what: str) -> bool:
        """Report a failure unless it is the one shown last for ``asset`` (the same broken text
        saved again, or touched): each diagnostic once. Answers whether it was shown."""
        rendered = error.render()
        if self._shown.get(asset) == rendered:
            return False
        self._shown[asset] = rendered
        self._failure(asset, generation, error, what)
        return True

    def _failure(self, asset: str, generation: int, error: PluginError, what: str) -> None:
        if self.as_json:
            self.emit(_failure_json(asset, generation, error))
            return
        stamp = time.strftime("%H:%M:%S")
        detail = error.render()[len(error.headline()) :].lstrip("\n")
        self.rep.error(f"{stamp} {what}: {error.headline()}", detail or None)

    def added(self, asset: str, generation: int) -> None:
        """An asset made under the watched folder while the command runs, watched from now on."""
        if self.as_json:
            self.emit({"event": "added", "asset": asset, "generation": generation})
            return
        self.rep.say(f"{time.strftime('%H:%M:%S')} watching {asset} too (new under the folder)")

    def removed(self, asset: str) -> None:
        """An asset whose folder was removed or moved out from under the watched folder."""
        self._shown.pop(asset, None)
        if self.as_json:
            self.emit({"event": "removed", "asset": asset})
            return
        self.rep.say(f"{time.strftime('%H:%M:%S')} {asset} was removed; no longer watched")

    def cleared(self, asset: str, generation: int) -> None:
        """A failed edit was undone: the files hold the live program's content again."""
        self._shown.pop(asset, None)
        if self.as_json:
            self.emit({"event": "cleared", "asset": asset, "generation": generation})
            return
        self.rep.say(f"{time.strftime('%H:%M:%S')} {asset} is back to its live content (generation {generation}); diagnostics cleared")

    def reload(self, result: Any, origins: dict[str, int]) -> None:
        """A reload applied; ``origins``: how many of its recompiled variants came from where."""
        self._shown.pop(result.asset, None)
        if self.as_json:
            self.emit(
                {
                    "event": "reload",
                    "asset": result.asset,
                    "generation": result.generation,
                    "kind": "body" if result.body_only else "layout",
                    "files": list(result.files),
                    "recompiled": [s.label() for s in result.recompiled],
                    "layout_changed": [s.label() for s in result.layout_changed],
                    "latency_ms": round(result.latency * 1e3, 1),
                    "origins": origins,
                }
            )
            return
        self.rep.say(f"{time.strftime('%H:%M:%S')} {result.describe()}")
        if result.layout_changed:
            self.rep.say(f"         layout changed for: {', '.join(s.label() for s in result.layout_changed)}")
        if origins:
            self.rep.say(f"         variants from: {', '.join(f'{n} {where}' for where, n in sorted(origins.items()))}")


def _origin_counts(lib: Any, event: Any) -> dict[str, int]:
    """How many of a reload's recompiled variants came from where (the local cache, the
    remote tier, lowered here): ``{"remote": 2, "lowered": 1}``."""
    from collections import Counter

    if not event.recompiled:
        return {}
    origins = lib.load(event.asset, strict=False).origins(event.recompiled, event.program)
    return dict(sorted(Counter(origins.values()).items()))


def cmd_watch(args: argparse.Namespace, rep: Reporter) -> int:
    from ..assets import AssetLibrary
    from ..assets.folder import ASSET_SUFFIX, find_assets
    from ..lowering import enumerate_variants, iter_variants

    target = os.path.normpath(args.assets)
    if not os.path.isdir(target):
        raise UsageError(f"{target} is not a folder")
    check_under_root(target, args.root)
    modules = module_folders(args)
    root = args.root or ((os.path.dirname(target) or ".") if target.endswith(ASSET_SUFFIX) else target)
    folders = find_assets(target)
    if not folders:
        raise UsageError(f"no .computeShader assets under {target}")
    # This command reports every diagnostic of the assets it watches itself: the library's
    # warnings about them would print each failure a second time.
    logging.getLogger("engine_plugin.assets").setLevel(logging.ERROR)
    log = _Log(rep, args.json)
    # This command checks every save by compiling it: without an adapter it cannot (a library
    # makes programs without a device then, which would report every save as reloaded).
    from ..device.context import get_context

    get_context()  # NoAdapterError: exit 2, before anything is watched
    lib = AssetLibrary(root, cache=None if args.no_cache else args.cache, quiet=args.quiet_ms / 1000.0, remote=args.remote or None, modules=modules)
    if lib.cache_error is not None:  # the library's own warning is silenced above: said here
        rep.error(f"variant cache disabled: {lib.cache_error.headline()}; every variant is lowered on first use")
    refs = [lib.load(os.path.relpath(f, root), strict=False) for f in folders]
    if args.all_variants and lib.remote is not None:
        wanted = {}
        for r in refs:
            if r.error is None:
                try:
                    wanted[r.path] = enumerate_variants(r.program().schema)
                except PluginError:
                    pass  # too many to enumerate: reported below, when they are compiled
        found = lib.prefetch(wanted)
        rep.say(f"prefetched: {found.local} local, {found.remote} remote, {found.missed} to lower ({found.rejected} refused)")
    live_failures: dict[str, PluginError] = {}  # assets whose live content does not compile (found when first loaded)

    def check(ref: Any) -> bool:
        """Report what a newly loaded asset's live content does (answers whether it failed)."""
        if ref.error is not None:
            return log.failure(ref.path, ref.generation, ref.error, f"{ref.path} is not loadable yet")
        try:
            if args.all_variants:
                for spec in enumerate_variants(ref.program().schema):
                    ref.program().variant(spec)
            else:  # the variant a reload validates (the first the bake would make): a broken body shows now, not at its next save
                first = next(iter_variants(ref.program().schema), None)
                if first is not None:
                    ref.program().variant(first)
        except PluginError as exc:
            live_failures[ref.path] = exc
            return log.failure(ref.path, ref.generation, exc, f"{ref.path} does not compile")
        return False

    # SIGTERM (how an editor plugin stops it) stops it as Ctrl-C does: the library closed and
    # the exit status said; it died of the signal instead (review helper 175), also when it
    # came right after "watching" (helper 178).
    signals = contextlib.ExitStack()
    signals.enter_context(sigterm_interrupts())  # left in the finally below, before the library is closed
    stopped = False
    try:
        # Said first: a reader of the stream (an editor plugin) is told what is watched before
        # it meets a failure of one of those assets (review helper 152).
        lib.watch()
        if args.json:
            log.emit({"event": "watching", "root": os.path.abspath(root), "assets": [r.path for r in refs]})
        else:
            rep.say(f"watching {len(refs)} asset(s) under {root} (quiet window {args.quiet_ms:g} ms); Ctrl-C stops")
        for ref in refs:
            check(ref)
    except KeyboardInterrupt:
        stopped = True
    deadline = time.monotonic() + args.duration if args.duration is not None else None
    seen = 0
    failing: set[str] = set()  # assets whose last word here was a failed reload
    by_path = {r.path: r for r in refs}
    known = {os.path.abspath(f) for f in folders}  # absolute: the library's refs are, a target may not be (helper 121)
    root_abs = os.path.abspath(root)

    def gone(asset: str) -> None:
        """An asset whose folder went away: said once, and no longer watched or counted."""
        if by_path.pop(asset, None) is None:
            return
        failing.discard(asset)
        live_failures.pop(asset, None)
        log.removed(asset)

    next_scan = time.monotonic() + _RESCAN_S
    try:
        while not stopped and (deadline is None or time.monotonic() < deadline):
            if time.monotonic() >= next_scan and not target.endswith(ASSET_SUFFIX):
                next_scan = time.monotonic() + _RESCAN_S
                found = {os.path.abspath(f) for f in find_assets(target)}
                for folder in sorted(known - found):  # removed, or moved out (helper 120)
                    known.discard(folder)
                    gone(os.path.relpath(folder, root_abs).replace(os.sep, "/"))
                for folder in sorted(found - known):  # assets made or moved in meanwhile (review helper 117)
                    known.add(folder)
                    again = any(os.path.abspath(r.folder) == folder for r in lib.refs())
                    ref = lib.load(os.path.relpath(folder, root_abs), strict=False)
                    by_path[ref.path] = ref
                    log.added(ref.path, ref.generation)
                    if again:  # an asset removed earlier, back: read it as saved (a reload or its failure follows)
                        lib.request_reload(ref.path)
                    elif check(ref):
                        seen += 1
            for result in lib.poll():
                ref = by_path.get(result.asset)
                if ref is None:  # removed earlier: back before the next scan, or still gone
                    ref = lib.load(result.asset, strict=False)
                    if not os.path.isdir(ref.folder):
                        continue  # still gone: said already
                    known.add(os.path.abspath(ref.folder))
                    by_path[ref.path] = ref
                    log.added(ref.path, ref.generation)
                if not result.ok and not os.path.isdir(ref.folder):
                    known.discard(os.path.abspath(ref.folder))
                    gone(result.asset)  # its folder went away: removed, not a failure of it
                    continue
                seen += 1
                if result.ok:
                    failing.discard(result.asset)
                    live_failures.pop(result.asset, None)
                    log.reload(result, _origin_counts(lib, result))
                else:
                    failing.add(result.asset)
                    if not log.failure(
                        result.asset, result.generation, result.error, f"reload of {result.asset} failed; generation {result.generation} stays live"
                    ):
                        seen -= 1  # the same diagnostic again (saved again, touched): shown once
            for asset in [a for a in failing if by_path[a].error is None]:  # the failed edit undone: no reload, but news
                failing.discard(asset)
                seen += 1
                if asset in live_failures:  # back to live content that never compiled: its failure again, not "cleared"
                    if not log.failure(asset, by_path[asset].generation, live_failures[asset], f"{asset} is back to its live content, which does not compile"):
                        seen -= 1
                else:
                    log.cleared(asset, by_path[asset].generation)
            if args.max_events and seen >= args.max_events:
                break
            time.sleep(1 / 60)
    except KeyboardInterrupt:
        pass
    finally:
        signals.close()
        lib.close()
    # By the exit contract: 1 when an asset watched is failing as the command stops (its last
    # save failed, or its live content never loaded or compiled), as bake exits for a broken one.
    broken = failing | set(live_failures) | {p for p, r in by_path.items() if r.error is not None}
    return EXIT_FAILED if broken else EXIT_OK


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("watch", parents=[common], help="watch assets and print reloads and diagnostics live")
    p.add_argument("assets", nargs="?", default="assets", help="a folder of assets, or one NAME.computeShader folder")
    p.add_argument("--cache", default="cache", type=folder_arg, metavar="DIR", help="the variant cache folder (default: cache)")
    p.add_argument("--no-cache", action="store_true", help="lower without the variant cache")
    p.add_argument("--remote", metavar="URL", default=None, help="the shared Redis tier reloads may fetch from (default: $ENGINE_PLUGIN_REMOTE_CACHE)")
    p.add_argument("--quiet-ms", type=seconds_arg(unit="ms"), default=30.0, help="debounce quiet window in ms (default 30)")
    p.add_argument("--all-variants", action="store_true", help="compile every variant up front, so each reload validates them all")
    # Above 0: --duration 0 was taken as no limit, a watch until Ctrl-C (review helper 228).
    p.add_argument("--duration", type=seconds_arg(positive=True), default=None, metavar="S", help="stop after S seconds (default: until Ctrl-C)")
    p.add_argument("--max-events", type=whole_number_arg(0), default=0, metavar="N", help="stop after N reloads or failures (default 0: no limit)")
    p.add_argument("--json", action="store_true", help="one JSON object a line on stdout (for editor plugins)")
    p.add_argument("--root", metavar="DIR", help=ROOT_HELP)
    add_modules_option(p)
    p.set_defaults(func=cmd_watch)
