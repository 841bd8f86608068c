"""The local cache key: a secret of this user's, kept outside every cache folder, that signs
the entries this user's engine_plugin writes.

A checksum only proves that bytes were not damaged: anyone who can put a file in the cache
folder (a copied or downloaded folder, a shared one) can recompute it, and the entry's WGSL is
what the GPU then runs, its source map what errors then point at. An entry carries an HMAC of
its checksum under this key instead, so an entry written anywhere else is a miss (lowered
again and replaced) whatever it holds. Lowering is pure, so a miss costs time, never a result.

The key is 32 random bytes in ``$ENGINE_PLUGIN_CACHE_KEY`` (a file path: a studio that trusts
its build machines shares one key file; it must exist, see below) or else
``$XDG_STATE_HOME/engine_plugin/cache.key`` (``~/.local/state/...``), created on first use,
readable by its owner only. Where the home
folder cannot hold it (a read-only home on a build box), ``<tmp>/engine_plugin-<uid>/`` does:
a folder and key this user owns, refused when anyone else made them. When no key can be read
or created, the process signs with a key of its own (its entries are misses for every later
process) and says so once; :func:`local_key_problem` then answers why, the variant cache
writes and replaces nothing (an entry it could write is one no later process accepts, and
replacing the entries it cannot verify would throw a whole baked cache away: review helper
137), and ``bake`` refuses to run. A key file ``$ENGINE_PLUGIN_CACHE_KEY`` names is never made:
a mistyped name would sign every entry under a new key, each one then baked again (review
helper 143); the message says how to make one.
"""

from __future__ import annotations

import logging
import os
import secrets
import stat
import tempfile
import threading

__all__ = ["local_cache_secret", "local_key_problem", "key_path"]

log = logging.getLogger("engine_plugin.cache")

KEY_BYTES = 32
_lock = threading.Lock()
_keys: dict[str, bytes] = {}
_problems: dict[str, str] = {}  # key path -> why this process signs with a key of its own
_O_READ = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def key_path() -> str:
    """Where the local cache key lives (see the module docstring)."""
    given = os.environ.get("ENGINE_PLUGIN_CACHE_KEY")
    if given:
        return os.path.abspath(os.path.expanduser(given))
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "engine_plugin", "cache.key")


def _fallback_path() -> str:
    return os.path.join(tempfile.gettempdir(), f"engine_plugin-{os.getuid()}", "cache.key")


def _read(path: str, own_only: bool = False) -> bytes | None:
    """The key in ``path``, or None when there is no file there. A file that is not a key
    (a link, a FIFO, too short; ``own_only``: one another user owns or can read) raises
    OSError."""
    # A path the user names (or their own state folder) may be a link (a mounted secret); the
    # shared temporary folder's may not.
    try:
        fd = os.open(path, _O_READ if own_only else _O_READ & ~getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path} is not a regular file")
        if own_only and (st.st_uid != os.getuid() or st.st_mode & 0o077):
            raise OSError(f"{path} is not this user's private file")
        if st.st_mode & 0o077:
            # Used (a studio may share one key file on purpose), but anyone who can read it can
            # sign entries this user's games will run.
            log.warning("variant cache: the cache key %s is readable by other users; anyone who can read it can forge cache entries (chmod 600 it)", path)
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    if len(data) < KEY_BYTES:
        raise OSError(f"{path} holds {len(data)} bytes, not a key")
    return data


def _create(path: str, own_only: bool = False) -> bytes:
    """A new key at ``path``: written to a private temporary file, then linked to its name (a
    second process creating it at the same moment reads the winner's). ``own_only``: the
    folder must be this user's and private (a shared temporary folder)."""
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    if own_only:
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise OSError(f"{folder} is not this user's private folder")
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    key = secrets.token_bytes(KEY_BYTES)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, key)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        found = _read(path, own_only)
        if found is None:
            raise
        return found
    finally:
        os.unlink(tmp)
    return key


def _read_or_create(path: str, own_only: bool = False, why: list[str] | None = None) -> bytes | None:
    try:
        found = _read(path, own_only)
        if found is not None:
            return found
        if os.environ.get("ENGINE_PLUGIN_CACHE_KEY") and not own_only:  # named on purpose: made by hand (see the docstring)
            raise OSError(f"no such file ($ENGINE_PLUGIN_CACHE_KEY names it; make one with: head -c 32 /dev/urandom > {path}; chmod 600 {path})")
        return _create(path, own_only)
    except OSError as exc:
        reason = f"the cache key {path} cannot be used ({exc.strerror or exc})"
        log.warning("variant cache: %s", reason)
        if why is not None:
            why.append(reason)
        return None


def local_cache_secret() -> bytes:
    """This user's cache key (read, or created on first use); a process-own key, with one
    warning, when neither works."""
    path = key_path()
    found = _keys.get(path)
    if found is not None:
        return found
    with _lock:
        found = _keys.get(path)
        if found is None:
            why: list[str] = []
            found = _read_or_create(path, why=why)
            if found is None and not os.environ.get("ENGINE_PLUGIN_CACHE_KEY"):
                found = _read_or_create(_fallback_path(), own_only=True, why=why)
                if found is not None:
                    # Said, with what it means: a process with the home key and one with this
                    # one take each other's entries for misses and replace them, back and forth
                    # (review helper 190).
                    log.warning(
                        "variant cache: signing with the cache key %s instead; entries signed with it are misses (lowered again and "
                        "replaced) for processes using %s, and theirs for it: give every process one key (ENGINE_PLUGIN_CACHE_KEY)",
                        _fallback_path(),
                        path,
                    )
            if found is None:
                log.warning(
                    "variant cache: no local cache key can be read or created at %s; this process signs its entries with a key of its own, so later processes lower them again",
                    path,
                )
                found = secrets.token_bytes(KEY_BYTES)
                _problems[path] = "; ".join(why) or f"no cache key at {path}"
            _keys[path] = found
    return found


def local_key_problem() -> str | None:
    """Why this process signs with a key of its own (no local cache key could be read or
    created: see the module docstring), or None when it has the user's key."""
    local_cache_secret()
    return _problems.get(key_path())
