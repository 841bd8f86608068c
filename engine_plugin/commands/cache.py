"""``engine-plugin cache stats|gc|clear``: the msgpack variant cache."""

from __future__ import annotations

import argparse
import datetime
import os
import stat
from typing import Any, Callable

from ..files import printable
from .contract import EXIT_FAILED, EXIT_OK, EXIT_USAGE, Reporter, UsageError, folder_arg, require_cache_key, seconds_arg, write_json

__all__ = ["add_parser", "cmd_cache", "size_arg"]


def size_arg(text: str) -> int:
    """Bytes from ``123``, ``64K``, ``512M``, ``2G`` (binary units)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    try:
        value = int(float(t[:-1] if scale > 1 else t) * scale)
    except (ValueError, OverflowError):  # OverflowError: inf, 1e400 (a traceback: review helper 128)
        raise argparse.ArgumentTypeError(f"a size is a number of bytes, optionally with K, M or G (e.g. 512M), not {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a size must be positive, not {text!r}")
    return value


def fmt_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _when(ns: int) -> str:
    return datetime.datetime.fromtimestamp(ns / 1e9).strftime("%Y-%m-%d %H:%M:%S")


def _cache_folder(path: str) -> bool:
    """Whether a cache folder is at ``path`` (False: nothing there), for stats, gc and clear
    alike. Raises UsageError for a file there, or a path that cannot be looked at: a folder
    above it the user cannot enter read as "no cache" and clear reported success (helper 110)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.lexists(path):  # a dangling link: a bake could not make a cache there either
            raise UsageError(f"{path} is a link to nothing (a variant cache is a folder)") from None
        return False
    except OSError as exc:
        raise UsageError(f"cannot look at {path}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{path} is not a folder (a variant cache is one)")
    return True


def _stats(args: argparse.Namespace, rep: Reporter, cap: int) -> int:
    from ..cache import USAGE_FILE, VariantCache, read_usage

    if not _cache_folder(args.cache):
        # Looking at a cache must not create one: say so instead.
        if args.json:
            write_json({"cache": os.path.abspath(args.cache), "exists": False}, "-")
        else:
            rep.say(f"no variant cache at {args.cache} (bake one with: engine-plugin bake ASSETS --cache {args.cache})")
        return EXIT_OK
    if args.verify:  # before the cache is opened: its own warnings about the key come second (review helper 204)
        require_cache_key("--verify cannot tell this user's entries from forged ones")
    # Not "served but not written" (a game's words): stats writes nothing, gc and clear refuse.
    cache = VariantCache(args.cache, max_bytes=cap, warn_read_only=False)
    st = cache.stats(scan=True)
    infos = sorted(cache.entries(), key=lambda i: i.mtime_ns)
    usage = read_usage(os.path.join(cache.folder, USAGE_FILE))
    found = cache.check() if args.verify else None
    bad = found.unusable if found is not None else None
    unreadable = found.unreadable if found is not None else {}
    if args.json:
        data: dict[str, Any] = {
            "cache": cache.folder,
            "exists": True,
            "entries": st.entries,
            "bytes": st.bytes,
            "cap_bytes": cap,
            "temp_files": st.temp_files,
            "least_recently_used": _when(infos[0].mtime_ns) if infos else None,
            "most_recently_used": _when(infos[-1].mtime_ns) if infos else None,
            "usage": {"assets": len(usage), "variants": sum(len(v) for v in usage.values())} if usage else None,
        }
        if bad is not None:
            data["unusable"] = [{"key": k, "reason": r} for k, r in sorted(bad.items())]
            data["unreadable_now"] = [{"key": k, "reason": r} for k, r in sorted(unreadable.items())]
        write_json(data, "-")
    else:
        print(printable(f"variant cache {cache.folder}"))
        print(f"  entries     {st.entries}")
        print(f"  size        {fmt_bytes(st.bytes)} of {fmt_bytes(cap)} cap ({100 * st.bytes / cap:.1f}%)")
        print(f"  temp files  {st.temp_files}")
        if infos:
            print(f"  least recently used  {_when(infos[0].mtime_ns)}")
            print(f"  most recently used   {_when(infos[-1].mtime_ns)}")
        if usage:
            print(f"  usage log   {sum(len(v) for v in usage.values())} variants of {len(usage)} assets")
        if bad is not None:
            print(f"  unusable    {len(bad)}")
            for key, reason in sorted(bad.items()):
                print(printable(f"    {key[:16]}...  {reason}"))
            # Not corrupt, not removed by gc: an I/O error now (too many open files, a
            # permission) says nothing of what the entry holds (review helper 228).
            print(f"  unreadable now  {len(unreadable)}")
            for key, reason in sorted(unreadable.items()):
                print(printable(f"    {key[:16]}...  {reason}"))
    for key, reason in sorted((bad or {}).items()):
        rep.error(f"{os.path.join(cache.folder, key)}.msgpack: unusable: {reason}")
    for key, reason in sorted(unreadable.items()):
        rep.error(f"{os.path.join(cache.folder, key)}.msgpack: cannot be read now ({reason}); not verified")
    if bad:
        return EXIT_FAILED
    return EXIT_USAGE if unreadable else EXIT_OK


def _remote(args: argparse.Namespace, rep: Reporter) -> tuple[int, dict | None]:
    """The remote tier's part of ``cache stats|gc|clear`` (exit status, JSON); a server that
    does not answer is a CacheError (exit 2)."""
    from ..cache.remote import DEFAULT_TIMEOUT, remote_from

    remote = remote_from(args.remote, timeout=args.remote_timeout or DEFAULT_TIMEOUT)
    if remote is None:
        return EXIT_OK, None
    say = (lambda *a: None) if args.json else print
    if args.action == "stats":
        st = remote.server_stats()
        if args.verify:
            st["unusable"] = remote.gc(dry_run=True)["removed"]
        cap = st["maxmemory"]
        say(f"remote tier {st['url']}")
        say(f"  namespace   {st['namespace']}")
        say(f"  entries     {st['entries']} ({st['other_builds_entries']} of other builds)")
        if st.get("wrong_type_keys"):
            say(
                f"  note        {st['wrong_type_keys']} keys of this namespace hold another Redis type (written by something else): `cache gc --remote` removes them"
            )
        say(
            f"  size        {fmt_bytes(st['bytes'])}; server memory {fmt_bytes(st['used_memory'])} of {fmt_bytes(cap) if cap else 'no'} maxmemory, policy {st['maxmemory_policy']}"
        )
        for line in _memory_notes(cap, st["maxmemory_policy"]):
            say(f"  note        {line}")
        if not st.get("counters_usable", True):
            say("  note        the studio counters key holds another Redis type (written by something else): counters not shown")
        c = st["counters"]
        say(
            f"  studio-wide hits {c['hits']}, misses {c['misses']}, verified {c['verified']} ({c['relowered']} re-lowered, {c['signed']} signed), rejected {c['rejected']}"
        )
        say(
            f"              errors {c['errors']}, timeouts {c['timeouts']}, skipped by the breaker {c['skipped']}; "
            f"read {fmt_bytes(c['bytes_read'])}, wrote {c['writes']} entries ({fmt_bytes(c['bytes_written'])})"
        )
        if args.verify:
            say(f"  unusable    {st['unusable']}")
            return (EXIT_FAILED if st["unusable"] else EXIT_OK), st
        return EXIT_OK, st
    if args.action == "gc":
        res = remote.gc()
        rep.say(f"remote {remote.stats().url}: removed {res['removed']} unusable values, kept {res['kept']} (eviction is the server's maxmemory LRU)")
        return EXIT_OK, res
    removed = remote.clear()
    rep.say(f"removed {removed} entries of this build from {remote.stats().url}")
    return EXIT_OK, {"removed": removed}


def cmd_cache(args: argparse.Namespace, rep: Reporter) -> int:
    """The local cache, then (with ``--remote`` or $ENGINE_PLUGIN_REMOTE_CACHE) the remote tier."""
    import contextlib
    import io
    import json

    if args.json and args.action != "stats":
        raise UsageError("--json goes with cache stats only")
    local_out = io.StringIO()
    with contextlib.redirect_stdout(local_out) if args.json else contextlib.nullcontext():
        status = _cmd_local(args, rep)
    status_remote, remote = _remote(args, rep)
    if args.json:
        data = json.loads(local_out.getvalue())
        if remote is not None:  # both tiers: the local one's figures also under "local"
            data["local"] = dict(data)
            data["remote"] = remote
        write_json(data, "-")
    return max(status, status_remote)


def _cmd_local(args: argparse.Namespace, rep: Reporter) -> int:
    from ..cache import DEFAULT_MAX_BYTES, USAGE_FILE, VariantCache

    cap = args.max_bytes or DEFAULT_MAX_BYTES
    if args.action == "stats":
        return _stats(args, rep, cap)
    if not _cache_folder(args.cache):  # nothing to look at, collect or clear: as stats says, exit 0
        rep.say(f"no variant cache at {args.cache}; nothing to {'collect' if args.action == 'gc' else 'clear'}")
        return EXIT_OK
    if args.action == "gc":  # it removes what does not verify; said before the cache warns of the key itself (helper 204)
        require_cache_key("gc cannot tell this user's entries from forged ones")
    # Not "served but not written" (a game's words): stats writes nothing, gc and clear refuse.
    cache = VariantCache(args.cache, max_bytes=cap, warn_read_only=False)
    if cache.read_only:  # removal would fail file by file while saying it succeeded (helper 112)
        raise UsageError(f"{args.cache} is read-only to you: nothing in it can be removed")
    if args.action == "gc":
        found = cache.check()
        bad = found.unusable
        removed = sum(1 for key in bad if cache.remove(key))
        evicted = cache.gc(cap)
        st = cache.stats(scan=True)
        rep.say(f"removed {removed} unusable entries, evicted {evicted} least recently used; {st.entries} entries, {fmt_bytes(st.bytes)} left")
        for key, reason in sorted(found.unreadable.items()):  # kept: an I/O error is no verdict (helper 228)
            rep.note(f"{os.path.join(cache.folder, key)}.msgpack: cannot be read now ({reason}); kept")
        if removed < len(bad):
            rep.error(f"{len(bad) - removed} unusable entries could not be removed")
            return EXIT_FAILED
        return EXIT_OK
    removed = cache.clear()
    usage_note, kept = "", None
    if args.usage:
        usage_path = os.path.join(cache.folder, USAGE_FILE)
        try:
            os.unlink(usage_path)
            usage_note = " and the usage log"
        except FileNotFoundError:
            pass
        except OSError as exc:  # a folder (or something else) where the usage log goes: left alone
            kept = f"{usage_path}: the usage log was not removed ({exc.strerror or exc})"
    rep.say(f"removed {removed} entries{usage_note} from {cache.folder}")
    after = cache.stats(scan=True)  # one scan: what is left, and the temporary files kept
    if after.temp_files:  # a live writer's (a bake running), or one a killed writer left: said, not silent (helper 120)
        rep.say(
            f"kept {after.temp_files} temporary file(s) written in the last 10 minutes (a writer may still rename them into place; gc removes them once older)"
        )
    if after.entries:
        rep.error(f"{after.entries} entries could not be removed")
        return EXIT_FAILED
    if kept is not None:
        rep.error(kept)
        return EXIT_FAILED
    return EXIT_OK


def add_parser(sub: Any, common: argparse.ArgumentParser) -> Callable[..., int]:
    p = sub.add_parser("cache", parents=[common], help="inspect or trim the msgpack variant cache")
    p.add_argument(
        "action",
        choices=("stats", "gc", "clear"),
        help="stats: size and counts; gc: drop unusable entries and evict to the cap (an entry that cannot be read now is kept, and said); clear: remove every entry",
    )
    p.add_argument("--cache", default="cache", type=folder_arg, metavar="DIR", help="the cache folder (default: cache)")
    p.add_argument("--max-bytes", type=size_arg, metavar="SIZE", help="size cap, e.g. 512M (default 512 MiB)")
    p.add_argument(
        "--verify",
        action="store_true",
        help="stats: decode every entry and list the unusable ones (exit 1 when any) and, apart, those that cannot be read now "
        "(an I/O error: too many open files, a permission; not corrupt, and gc keeps them: exit 2 when any and none is unusable)",
    )
    p.add_argument("--usage", action="store_true", help="clear: remove the usage log too")
    p.add_argument("--json", action="store_true", help="stats: JSON on stdout")
    p.add_argument("--remote", metavar="URL", default=None, help="also the shared Redis tier at URL (default: $ENGINE_PLUGIN_REMOTE_CACHE)")
    p.add_argument("--remote-timeout", type=seconds_arg(positive=True), default=None, metavar="S", help="remote socket timeout in seconds (default 0.25)")
    p.set_defaults(func=cmd_cache)
    return cmd_cache


def _memory_notes(cap: int, policy: str) -> list[str]:
    """What the server's memory settings mean for the tier (review helper 197: a full
    ``noeviction`` server was said to grow without bound, and ``volatile-*``, which evicts
    only keys with a TTL, was taken as evicting entries written without one)."""
    if not cap:
        return ["no maxmemory: the server grows without bound; set maxmemory and maxmemory-policy allkeys-lru"]
    if policy == "noeviction":
        return ["maxmemory-policy noeviction: once full the server refuses every write; set maxmemory-policy allkeys-lru"]
    if policy.startswith("volatile-"):
        return [f"maxmemory-policy {policy} evicts only keys with a TTL: bake with --remote-ttl, or set allkeys-lru"]
    if "lru" not in policy and "lfu" not in policy:
        return [f"maxmemory-policy {policy}: set allkeys-lru so the least used entries go first"]
    return []
