"""The remote tier: a Redis server shared by a studio's bake farm and every game start.

    remote = RemoteCache("redis://cache.studio:6379/0", timeout=0.25, ttl=30 * 86400)
    lib = AssetLibrary("assets", "cache", remote=remote)   # or remote="redis://..."
    lib.prefetch()                                         # the usage log's variants, in parallel

Guarantees:

- **Nothing unverified is served.** A value read from the server is only bytes until
  :func:`engine_plugin.cache.verify.verify_entry` proved it is the variant the client asked
  for (key re-derived from the client's own text, checksum and versions, then its lowering
  re-done and compared, or a studio HMAC checked). A value that fails is counted
  (``rejected``), warned about once per key, and never used.
- **A bounded wait.** Every command runs with socket connect/read timeouts (0.25 s by
  default); a timeout or a refused connection is a miss (``timeouts``/``errors``) and opens a
  circuit breaker: for ``cooldown`` seconds no command is sent (``skipped``), so a dead server
  costs the budget once per cooldown, not once per variant. No retries.
- **Namespaced keys.** ``engine_plugin:v{CACHE_FORMAT_VERSION}.{LOWERING_VERSION}:{key}``:
  two builds never read each other's entries.
- **Size and eviction are Redis's own** (``maxmemory`` + ``allkeys-lru``); ``ttl`` sets an
  expiry on every write when given.
- Values are the local entry bytes (byte-identical to ``<key>.msgpack``), or, when a
  ``secret`` is configured, those bytes signed (:func:`engine_plugin.cache.verify.sign`).

The client comes from the ``redis`` package, the ``[remote]`` extra.
"""

from __future__ import annotations

import logging
import math
import numbers
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping
from urllib.parse import urlsplit

from ..errors import CacheError, PluginError, Span
from ..lowering import LOWERING_VERSION, Lowered, Schema, VariantSpec
from ..lowering.fingerprint import CACHE_FORMAT_VERSION
from .entry import BadEntry, Entry, decode_entry, encode_entry, open_entry
from .verify import BadSignature, sign, split_signed, verify_entry

__all__ = [
    "DEFAULT_COOLDOWN",
    "DEFAULT_TIMEOUT",
    "ENV_REMOTE",
    "ENV_SECRET",
    "NAMESPACE",
    "RemoteCache",
    "RemoteCacheError",
    "RemoteMissingError",
    "RemoteStats",
    "remote_from",
]

log = logging.getLogger("engine_plugin.cache")

ENV_REMOTE = "ENGINE_PLUGIN_REMOTE_CACHE"
ENV_SECRET = "ENGINE_PLUGIN_REMOTE_SECRET"
DEFAULT_TIMEOUT = 0.25
DEADLINE_TIMEOUTS = 4  # a command's whole time, however slowly its answer trickles: this many timeouts
DEFAULT_COOLDOWN = 30.0
NAMESPACE = f"engine_plugin:v{CACHE_FORMAT_VERSION}.{LOWERING_VERSION}:"
# Studio-wide counters (a hash each client adds its own to), outside the entries' namespace.
STATS_KEY = f"engine_plugin-stats:v{CACHE_FORMAT_VERSION}.{LOWERING_VERSION}"
_PUBLISHED = ("hits", "misses", "verified", "relowered", "signed", "rejected", "errors", "timeouts", "skipped", "writes", "bytes_read", "bytes_written")
_MGET_CHUNK = 64
_ENTRY_BYTES_GUESS = 10 * 1024  # a variant entry is about 8 KiB
_TYPE_CHUNK = 512  # keys an existence pipeline asks at once (answers of a few bytes each)
_SYNC_BYTES = 128 * 1024  # what one bulk command moves at most: it must fit its deadline on a modest link
MAX_VALUE_BYTES = 8 * 1024 * 1024  # a remote value larger than this is not read (an entry is about 8 KiB)


class RemoteCacheError(CacheError):
    """The remote tier's URL or options are unusable (not: the server is down, which is a miss)."""


class RemoteMissingError(PluginError):
    """The ``redis`` client is not installed."""

    def __init__(self) -> None:
        super().__init__("the remote variant cache needs the redis client: pip install 'engine_plugin[remote]' (or: pip install 'redis>=5')")


@dataclass(frozen=True)
class RemoteStats:
    """Counters of one :class:`RemoteCache` (this process only).

    ``misses`` includes ``rejected``, ``errors``, ``timeouts`` and ``skipped`` (lookups the
    open circuit breaker answered without asking). ``verified`` = ``signed`` + ``relowered``.
    """

    url: str
    hits: int = 0
    misses: int = 0
    verified: int = 0
    relowered: int = 0
    signed: int = 0
    rejected: int = 0
    errors: int = 0
    timeouts: int = 0
    skipped: int = 0
    writes: int = 0
    bytes_read: int = 0
    bytes_written: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _redact(url: str) -> str:
    """``url`` with its password masked. Textual, so a URL that does not parse (a bad port, a
    broken IPv6 host) is masked too: parsing it here raised inside the error report that
    names it (review helper 123)."""
    return _QUERY_PASSWORD.sub(r"\1***", _PASSWORD.sub(r"\1***@", str(url)))


# user:password@ up to the URL's last @ (a password may hold /, @, ? or #: masking too much is
# the safe side), and a ?password= query option (redis-py takes one).
_PASSWORD = re.compile(r"(//[^:/@]*:).*@")
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def _counter(value: Any) -> int:
    """A studio counter as an int; one something else wrote as text counts 0."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _key_refusal(exc: Exception) -> bool:
    """Whether a refused command was refused for its key or value (another Redis type, a
    counter that is no integer) or a full server, not the server refusing every command."""
    text = str(exc)
    return any(word in text for word in ("WRONGTYPE", "OOM", "maxmemory", "not an integer", "would overflow"))


def _refusal(exc: Exception) -> str:
    """What a refused command's error means for the user, when it is a known kind."""
    text = str(exc)
    if "OOM" in text or "maxmemory" in text:  # a pipeline wraps the server's words
        return "the server is full and its maxmemory-policy is noeviction: set `maxmemory-policy allkeys-lru` (or raise maxmemory)"
    if "WRONGTYPE" in text:
        return "a key of this namespace holds another Redis type than a variant entry (written by something else)"
    return ""


def _raised_in_client(exc: BaseException) -> bool:
    """Whether ``exc`` was raised inside the redis client (reading a reply it did not expect),
    not in this module's own code."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and _CLIENT_PACKAGE in os.path.normcase(tb.tb_frame.f_code.co_filename)


_CLIENT_PACKAGE = os.path.normcase(os.sep + "redis" + os.sep)


def _expect(answers: Any, kinds: tuple[type, ...], count: int, command: str) -> list[Any]:
    """``answers`` of a pipeline of ``count`` commands, each of ``kinds`` or a refusal (an
    exception); anything else is a reply Redis does not send, raised as a remote error."""
    from redis.exceptions import InvalidResponse, ResponseError

    if not isinstance(answers, list) or len(answers) != count:
        raise InvalidResponse(f"{count} {command} replies expected, not {type(answers).__name__}")
    for a in answers:
        if isinstance(a, bool) or not isinstance(a, (*kinds, ResponseError)):
            raise InvalidResponse(f"{command} answered {type(a).__name__}, not {' or '.join(k.__name__ for k in kinds)}")
    return answers


_MAX_SECONDS = 1e7  # the command line's bound on a duration (commands.contract.MAX_SECONDS)
MAX_TTL_S = 10 * 365 * 86400  # Redis refuses expiries past its clock's range (1e30 s failed every write)


def _seconds_ok(value: object, *, positive: bool, most: float = _MAX_SECONDS) -> bool:
    """Whether ``value`` is a finite number of seconds of at most ``most`` (above 0, or at least 0)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    v = float(value)
    return math.isfinite(v) and (v > 0 if positive else v >= 0) and v <= most


class RemoteCache:
    """A Redis server holding variant entries under this build's namespace.

    Args:
        url: ``redis://host:port/db`` (``rediss://`` for TLS, ``unix:///path`` for a socket).
        timeout: socket connect and read timeout of every command, seconds.
        ttl: expiry set on every write, seconds (None: none; eviction is then Redis's LRU).
        cooldown: seconds the breaker stays open after a timeout or connection error.
        secret: studio HMAC secret; writes are signed and signed values verify without
            re-lowering (default: ``$ENGINE_PLUGIN_REMOTE_SECRET``, else none; an empty
            one is none).
    Raises:
        RemoteMissingError: the ``redis`` package is missing.
        RemoteCacheError: the URL or an option is unusable.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        ttl: float | None = None,
        cooldown: float = DEFAULT_COOLDOWN,
        secret: bytes | str | None = None,
    ):
        try:
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry
        except ImportError:
            raise RemoteMissingError() from None
        self._redis = redis
        self.url = url
        try:
            scheme = urlsplit(url).scheme if isinstance(url, str) else ""
        except ValueError as exc:  # e.g. a broken IPv6 host
            said = "" if "@" in str(url) else f": {exc}"
            raise RemoteCacheError(f"unusable remote cache URL {_redact(url)!r}{said}", Span(_redact(url))) from None
        if scheme not in ("redis", "rediss", "unix"):
            raise RemoteCacheError(f"a remote cache is a redis://host:port/db URL, not {_redact(url)!r}", Span(_redact(url)))
        # Finite and bounded, as the command line takes them (review helper 197: ttl=inf raised
        # a raw OverflowError, ttl=1e300 had every write refused, cooldown=nan kept the breaker
        # open for good).
        if not _seconds_ok(timeout, positive=True):
            raise RemoteCacheError(f"the remote timeout must be positive seconds (at most {_MAX_SECONDS:g}), not {timeout!r}", Span(_redact(url)))
        if ttl is not None and not _seconds_ok(ttl, positive=True, most=MAX_TTL_S):
            raise RemoteCacheError(f"the remote ttl must be positive seconds (at most {MAX_TTL_S}) or None, not {ttl!r}", Span(_redact(url)))
        if not _seconds_ok(cooldown, positive=False):
            raise RemoteCacheError(f"the remote cooldown must be seconds of at least 0 (at most {_MAX_SECONDS:g}), not {cooldown!r}", Span(_redact(url)))
        self.timeout = float(timeout)
        # Redis expires in whole seconds and refuses EX 0: a fraction rounds up (0.5 made every
        # write refused, review helper 123).
        self.ttl = math.ceil(ttl) if ttl is not None else None
        self.cooldown = float(cooldown)
        if secret is None:
            secret = os.environ.get(ENV_SECRET)
        # An empty secret is no secret, here once for every use: ``secret=""`` signed nothing
        # (``wrap``) yet verified an HMAC under the empty key, which anyone can compute, so a
        # forged kernel was served as signed (review helper 232).
        self.secret: bytes | None = (secret.encode() if isinstance(secret, str) else secret) or None
        try:
            self._client = redis.Redis.from_url(
                url,
                socket_timeout=self.timeout,
                socket_connect_timeout=self.timeout,
                retry=Retry(NoBackoff(), 0),
                retry_on_timeout=False,
                health_check_interval=0,
            )
        except ValueError as exc:
            # redis-py's words may quote a piece of the password ("...integer value as 'hun'").
            said = "" if "@" in url else f": {exc}"
            raise RemoteCacheError(f"unusable remote cache URL {_redact(url)!r}{said}", Span(_redact(url))) from None
        self._lock = threading.Lock()
        self._counts = {k: 0 for k in RemoteStats.__dataclass_fields__ if k != "url"}
        self._open_until = 0.0
        self._warned: set[str] = set()
        self._published = {k: 0 for k in _PUBLISHED}
        # A command's whole time is bounded too: the socket timeout bounds each read, and a
        # slow but live link (every read gets a few bytes) never tripped it: a game start took
        # 9.4 s over a 5 KB/s link (review helper 123). A watchdog closes the connections of a
        # command past its deadline; the command then fails as a timeout.
        self.deadline = max(DEADLINE_TIMEOUTS * self.timeout, self.timeout + 0.1)
        self._deadlines: dict[int, float] = {}
        self._late: set[int] = set()
        self._serial = 0
        self._cuts = 0  # connections cut by the watchdog so far
        self._watcher: threading.Thread | None = None
        self._connected = False  # a first connection was made (its name looked up)

    # -- bookkeeping -----------------------------------------------------------------------
    def _count(self, name: str, by: int = 1) -> None:
        with self._lock:
            self._counts[name] += by

    def stats(self) -> RemoteStats:
        """This process's counters."""
        with self._lock:
            return RemoteStats(_redact(self.url), **self._counts)

    @property
    def available(self) -> bool:
        """False while the circuit breaker is open (a recent timeout or connection error)."""
        return time.monotonic() >= self._open_until

    def _failed(self, exc: Exception, what: str) -> None:
        timeout = isinstance(exc, self._redis.exceptions.TimeoutError)
        self._count("timeouts" if timeout else "errors")
        with self._lock:
            was_open = time.monotonic() < self._open_until
            self._open_until = time.monotonic() + self.cooldown
        if not was_open:
            kind = "timed out" if timeout else "failed"
            log.warning(
                "remote variant cache %s: %s %s (%s); local cache only for the next %g s",
                _redact(self.url), what, kind, str(exc) or type(exc).__name__, self.cooldown,
            )

    def _call(self, what: str, fn: Any, default: Any, *, misses: int = 0) -> Any:
        """Run one command under the breaker; a failure answers ``default`` (counted)."""
        if not self.available:
            self._count("skipped", misses)
            self._count("misses", misses)
            return default
        token = self._watch()
        cuts = self._cuts
        try:
            self._first_connect()
            return fn()
        except (self._redis.exceptions.ConnectionError, self._redis.exceptions.TimeoutError, OSError) as exc:
            if token in self._late or self._cuts != cuts:  # its own deadline, or cut with a late one's
                exc = self._redis.exceptions.TimeoutError(f"no whole answer within {self.deadline:g} s (a slow link)")
            self._failed(exc, what)
            self._count("misses", misses)
            return default
        except (ValueError, AttributeError, TypeError, KeyError, IndexError) as exc:
            if token not in self._late and self._cuts == cuts:
                if not _raised_in_client(exc):
                    raise
                # The client choked on a reply Redis never sends (a handshake answered +OK): a
                # hostile or broken server, an outage like any other (review helper 232).
                self._failed(self._redis.exceptions.InvalidResponse(f"a reply Redis does not send ({type(exc).__name__}: {exc})"), what)
                self._count("misses", misses)
                return default
            # A read on a socket the watchdog closed ("I/O operation on closed file"): this
            # command's own deadline, or another's: the watchdog cuts every connection of
            # the pool, so commands of other threads end here too (review helper 124).
            self._failed(self._redis.exceptions.TimeoutError(f"no whole answer within {self.deadline:g} s (a slow link)"), what)
            self._count("misses", misses)
            return default
        except self._redis.exceptions.RedisError as exc:  # e.g. a server refusing the command
            if token in self._late:
                self._failed(self._redis.exceptions.TimeoutError(f"no whole answer within {self.deadline:g} s (a slow link)"), what)
                self._count("misses", misses)
                return default
            if not _key_refusal(exc):
                # Not about a key or a full server: a server refusing every command (a database
                # it lacks, no auth, not Redis at all) is an outage, said once and skipped by
                # the breaker; it was asked again on every lookup (review helper 197).
                self._failed(exc, what)
                self._count("misses", misses)
                return default
            self._count("errors")
            self._count("misses", misses)
            hint = _refusal(exc)
            kind = f"refused:{what}:{str(exc).split(' ', 1)[0]}"
            with self._lock:  # each kind of refusal once: a full server refused every write, one line each
                if kind in self._warned:
                    return default
                self._warned.add(kind)
            log.warning(
                "remote variant cache %s: %s refused: %s%s (said once; the errors count in stats)",
                _redact(self.url), what, exc, f"; {hint}" if hint else "",
            )
            return default
        finally:
            self._unwatch(token)

    def _first_connect(self) -> None:
        """Make the first connection (its name lookup, its handshake) on a daemon thread
        waited for at most ``deadline``; past it, a timeout. The watchdog cannot cut a thread
        blocked in getaddrinfo: a dead nameserver held a game start for the resolver's whole
        time, past the deadline (review helper 232). The thread ends on its own; a connection
        it makes late joins the pool."""
        if self._connected:
            return
        done = threading.Event()
        failed: list[BaseException] = []

        def connect() -> None:
            pool = self._client.connection_pool
            try:
                conn = pool.get_connection()  # connects: looks the name up, then the handshake
                pool.release(conn)
            except BaseException as exc:  # the caller's to judge, as if raised in its thread
                failed.append(exc)
            finally:
                done.set()

        threading.Thread(target=connect, name="engine_plugin remote connect", daemon=True).start()
        if not done.wait(self.deadline):
            raise self._redis.exceptions.TimeoutError(f"no connection within {self.deadline:g} s (a slow name lookup or connect)")
        if failed:
            raise failed[0]
        self._connected = True

    def _watch(self) -> int:
        """Register a command's deadline (see ``deadline``); starts the watchdog when idle."""
        with self._lock:
            self._serial += 1
            token = self._serial
            self._deadlines[token] = time.monotonic() + self.deadline
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch_loop, name="engine_plugin remote deadline", daemon=True)
                self._watcher.start()
        return token

    def _unwatch(self, token: int) -> None:
        with self._lock:
            self._deadlines.pop(token, None)
            self._late.discard(token)

    def _watch_loop(self) -> None:
        """Close every connection while a command is past its deadline (its blocked read then
        ends with an error); ends when no command is in flight."""
        step = min(0.05, self.timeout / 4)
        while True:
            time.sleep(step)
            with self._lock:
                if not self._deadlines:
                    self._watcher = None
                    return
                now = time.monotonic()
                late = {t for t, d in self._deadlines.items() if d <= now} - self._late
                self._late |= late
                if late:
                    self._cuts += 1
            if late:
                try:
                    self._client.connection_pool.disconnect()
                except Exception:  # a pool closed meanwhile: nothing left to cut
                    pass
                with self._lock:  # again after: a command started while cutting sees a change too
                    self._cuts += 1

    def _warn_once(self, key: str, reason: str) -> None:
        with self._lock:
            if key in self._warned:
                return
            self._warned.add(key)
        log.warning("remote variant cache: entry %s... refused (%s); never served, the variant is looked up locally", key[:16], reason)

    @staticmethod
    def name(key: str) -> str:
        """The server key of a variant key (namespaced by format and lowering version)."""
        return NAMESPACE + key

    # -- reads -----------------------------------------------------------------------------
    def get_values(self, keys: Iterable[str]) -> dict[str, bytes]:
        """The raw (unverified) server values of ``keys`` that exist; one round trip per 64
        keys. Missing keys count as misses; a dead or slow server answers {} (counted)."""
        keys = list(dict.fromkeys(keys))
        out: dict[str, bytes] = {}
        for i in range(0, len(keys), _MGET_CHUNK):
            chunk = keys[i : i + _MGET_CHUNK]
            values = self._call("read", lambda: self._read_sized(chunk), None, misses=len(chunk))
            if values is None:
                continue
            for k, v in zip(chunk, values):
                if isinstance(v, bytes) and 0 < len(v) <= MAX_VALUE_BYTES:
                    out[k] = v
                    self._count("bytes_read", len(v))
                else:
                    # Its size asked first (an int), or a value longer than that size said: a
                    # server that lies, or another writer between the two commands (review
                    # helper 232); either way over the size an entry may have, and dropped.
                    if isinstance(v, bytes) and v:
                        self._count("rejected")
                        self._warn_once(k, f"a value past the {MAX_VALUE_BYTES} bytes a variant entry may have (its size grew after it was asked): not used")
                    elif isinstance(v, int) and v > MAX_VALUE_BYTES:
                        self._count("rejected")
                        self._warn_once(k, f"{v} bytes, over the {MAX_VALUE_BYTES} a variant entry may have: not read")
                    self._count("misses")
        return out

    def _read_sized(self, chunk: list[str]) -> list[Any]:
        """The values of the variant keys ``chunk`` as :meth:`_read_names` reads them, a key
        refused (another Redis type) as missing."""
        return [None if isinstance(v, Exception) else v for v in self._read_names([self.name(k) for k in chunk])]

    def _read_names(self, names: list[str]) -> list[Any]:
        """The values of the server keys ``names`` (None where missing or empty, the server's
        refusal where it refused, e.g. WRONGTYPE), each read only when its size, asked first,
        is at most :data:`MAX_VALUE_BYTES` (else its size): forged 200 MB values were read
        whole before the size check, 1.2 GB for three (review helper 123). The read is bounded
        too (``GETRANGE name 0 MAX_VALUE_BYTES``: one byte past the limit at most), as a value
        may grow between the two commands (review helper 232); a value past the limit is the
        caller's to drop. Replies of another type than Redis sends raise ``InvalidResponse``.
        The one read of values: ``get_values``, ``differing`` and ``gc`` (which asked STRLEN
        then MGET, read a lying server's value whole and raised a raw TypeError on an MGET
        answered with an integer, review helper 232)."""
        pipe = self._client.pipeline(transaction=False)
        for n in names:
            pipe.strlen(n)
        sizes = _expect(pipe.execute(raise_on_error=False), (int,), len(names), "STRLEN")
        wanted = [i for i, n in enumerate(sizes) if isinstance(n, int) and 0 < n <= MAX_VALUE_BYTES]
        out: list[Any] = [n if isinstance(n, Exception) or n > MAX_VALUE_BYTES else None for n in sizes]
        if wanted:
            pipe = self._client.pipeline(transaction=False)
            for i in wanted:
                pipe.getrange(names[i], 0, MAX_VALUE_BYTES)
            # A key emptied, removed or made another type meanwhile answers b"" or an error: a miss.
            for i, v in zip(wanted, _expect(pipe.execute(raise_on_error=False), (bytes,), len(wanted), "GETRANGE")):
                out[i] = v if isinstance(v, bytes) and v else None
        return out

    def check(
        self, key: str, value: bytes, *, schema: Schema, wgsl: str, spec: VariantSpec, wgsl_path: str | None = None, modules: Mapping[str, tuple[str, str]] | None = None
    ) -> Entry | None:
        """Verify a value :meth:`get_values` answered; the Entry when it holds (marked
        validated only when signed by a baker that compiled it), else None (counted as
        rejected and a miss, warned about once per key)."""
        try:
            proven, how = verify_entry(key, value, schema=schema, wgsl=wgsl, spec=spec, wgsl_path=wgsl_path, secret=self.secret, modules=modules)
        except BadSignature as exc:
            # After a secret rotation every value fails so: one line a process with the cause
            # and the fix, each key at debug level (a warning per variant flooded every game
            # start, review helper 232).
            self._count("rejected")
            self._count("misses")
            log.debug("remote variant cache: entry %s... refused (%s)", key[:16], exc.reason)
            self._say_other_secret()
            return None
        except BadEntry as exc:
            self._count("rejected")
            self._count("misses")
            self._warn_once(key, exc.reason)
            return None
        with self._lock:
            self._counts["hits"] += 1
            self._counts["verified"] += 1
            self._counts[how] += 1
        return proven

    def _say_other_secret(self) -> None:
        """The one line a process says when it meets values signed under another secret."""
        with self._lock:
            said = "signature" in self._warned
            self._warned.add("signature")
        if not said:
            log.warning(
                "remote variant cache %s: values signed under another secret than this studio's (a rotated %s, "
                "or forged) are refused and never served; the variants are looked up locally. Re-sign them with "
                "`engine-plugin bake --remote-verify ASSETS` under the current secret, or remove them with "
                "`engine-plugin cache gc --remote` (said once; `rejected` counts them)",
                _redact(self.url), ENV_SECRET,
            )

    def look_for_other_secret(self, keys: Iterable[str]) -> bool | None:
        """Whether some of the first values of ``keys`` (one bounded read, about
        :data:`_SYNC_BYTES`) are signed under another secret than this one; says so in the
        one line :meth:`check` says (a routine bake replaces nothing, so the rotation or the
        stale machine is named there). None when it cannot be asked or there is no secret;
        counts nothing."""
        if not self.secret:
            return None
        chunk = list(dict.fromkeys(keys))[: max(1, _SYNC_BYTES // _ENTRY_BYTES_GUESS)]
        values = self._call("compare", lambda: self._read_sized(chunk), None) if chunk else []
        if values is None:
            return None
        for v in values:
            if isinstance(v, bytes) and len(v) <= MAX_VALUE_BYTES:
                mac, entry = split_signed(v)
                if mac is not None and v != sign(self.secret, entry):
                    self._say_other_secret()
                    return True
        return False

    def fetch(
        self, key: str, *, schema: Schema, wgsl: str, spec: VariantSpec, wgsl_path: str | None = None, modules: Mapping[str, tuple[str, str]] | None = None
    ) -> Entry | None:
        """One variant from the server, verified; None on a miss, a refusal or a dead server."""
        value = self.get_values([key]).get(key)
        if value is None:
            return None
        return self.check(key, value, schema=schema, wgsl=wgsl, spec=spec, wgsl_path=wgsl_path, modules=modules)

    def existing(self, keys: Iterable[str]) -> set[str] | None:
        """Which of ``keys`` the server holds as values (None when it cannot be asked);
        counts nothing."""
        keys = list(dict.fromkeys(keys))

        def ask_chunk(chunk: list[str]) -> set[str]:
            pipe = self._client.pipeline(transaction=False)
            for k in chunk:
                pipe.strlen(self.name(k))
            # An empty value or a key of another Redis type (WRONGTYPE) holds no entry, and a
            # SET replaces either: not there (review helpers 124, 125).
            return {k for k, n in zip(chunk, pipe.execute(raise_on_error=False)) if isinstance(n, int) and n > 0}

        out: set[str] = set()
        for i in range(0, len(keys), _TYPE_CHUNK):  # one deadline a chunk: a large bake on a modest link
            found = self._call("exists", lambda: ask_chunk(keys[i : i + _TYPE_CHUNK]), None)
            if found is None:
                return None
            out |= found
        return out

    def differing(self, entries: Mapping[str, Lowered]) -> set[str] | None:
        """Which keys of ``entries`` (key -> the variant this machine holds) the server holds a
        value for that a client would refuse: another variant (a forgery that decodes),
        bytes that do not decode, a value over :data:`MAX_VALUE_BYTES`, or, with a studio
        secret, a value not signed under it. The same relation clients check (the baker's
        file paths aside). Reads every value: ``bake --remote-verify`` only. None when it
        cannot be asked; counts nothing."""
        from .verify import _same_lowering

        keys = list(entries)
        out: set[str] = set()
        step = max(1, min(_MGET_CHUNK, _SYNC_BYTES // _ENTRY_BYTES_GUESS))
        for i in range(0, len(keys), step):
            chunk = keys[i : i + step]
            values = self._call("compare", lambda: self._read_sized(chunk), None)
            if values is None:
                return None
            for k, v in zip(chunk, values):
                if v is None:  # emptied or expired since it was found: a SET puts it back
                    out.add(k)
                    continue
                if not isinstance(v, bytes) or len(v) > MAX_VALUE_BYTES:
                    out.add(k)  # over the size a value may have
                    continue
                try:
                    mac, entry = split_signed(v)
                    if self.secret and (mac is None or v != sign(self.secret, entry)):
                        raise BadEntry("not signed under this studio's secret")
                    if not _same_lowering(open_entry(k, entry, signed=False).lowered, entries[k]):
                        raise BadEntry("another variant")
                except BadEntry:
                    out.add(k)
        return out

    # -- writes ----------------------------------------------------------------------------
    def wrap(self, entry: bytes) -> bytes:
        return sign(self.secret, entry) if self.secret else entry

    def put_entries(self, items: Iterable[tuple[str, bytes]], *, replace: bool = False) -> int:
        """SET each (key, entry bytes) (with the TTL), in pipelines of at most
        :data:`_SYNC_BYTES` or 64 entries, each a command with its own deadline (one pipeline
        of 64 entries did not fit the deadline on a 600 KB/s link and was cut every bake,
        review helper 125); answers how many were written (0 when the server is down). A SET
        replaces a value whole: concurrent writers of one key leave one of their values,
        never a mix.

        Only keys the server lacks are written (SET NX) unless ``replace``: a machine baking
        under a stale secret (or none) replaced the farm's good values, and nothing repaired
        them (review helper 232). Replacing is for values a client refuses (``bake
        --remote-verify``) or holds no entry (empty, another Redis type)."""
        written = 0
        batch: list[tuple[str, bytes]] = []
        size = 0
        for k, e in items:
            v = self.wrap(e)
            batch.append((k, v))
            size += len(v)
            if size >= _SYNC_BYTES or len(batch) >= _MGET_CHUNK:
                written += self._put_batch(batch, replace)
                batch, size = [], 0
        return written + self._put_batch(batch, replace)

    def _put_batch(self, items: list[tuple[str, bytes]], replace: bool) -> int:
        if not items:
            return 0

        def write() -> list[Any]:
            pipe = self._client.pipeline(transaction=False)
            for k, v in items:
                pipe.set(self.name(k), v, ex=self.ttl, nx=not replace)
            return list(pipe.execute())

        answers = self._call("write", write, [])
        done = [v for (_, v), ok in zip(items, answers) if ok]  # NX answers nil for a key there
        if done:
            self._count("writes", len(done))
            self._count("bytes_written", sum(len(v) for v in done))
        return len(done)

    def put(self, key: str, lowered: Lowered, validated: bool = False) -> bool:
        """Write one entry the server lacks (the ``LoweredStore`` protocol; ``validated``: the
        baker compiled it on a device); False when the server is down or holds the key."""
        return self.put_entries([(key, encode_entry(key, lowered, signed=False, validated=validated))]) == 1

    def publish(self) -> bool:
        """Add this process's counters since the last call to the server's studio-wide ones
        (``cache stats --remote`` shows them); one round trip, skipped while the breaker is
        open. Called after a prefetch, a bake, and on ``AssetLibrary.close()``."""
        with self._lock:
            delta = {k: self._counts[k] - self._published[k] for k in _PUBLISHED}
        delta = {k: v for k, v in delta.items() if v}
        if not delta or not self.available:
            return False

        def send() -> bool:
            pipe = self._client.pipeline(transaction=False)
            for k, v in delta.items():
                pipe.hincrby(STATS_KEY, k, v)
            # Each field's answer on its own: a field something else made non-integer refuses
            # its increment while the others land, so raising here re-sent those others on the
            # next publish (counted twice, review helper 123). The refused ones are dropped.
            answers = list(zip(delta, pipe.execute(raise_on_error=False)))
            refused = [k for k, r in answers if isinstance(r, Exception)]
            if refused:
                # Why, from the server's words: a full server, or the counters key of another
                # Redis type, was said to be counters that are not integers (review helper 197).
                error = next(r for _, r in answers if isinstance(r, Exception))
                if "WRONGTYPE" in str(error):
                    why = f"the studio counters key {STATS_KEY} holds another Redis type (written by something else); not added to"
                elif _refusal(error):
                    why = f"the studio counters were not added to: {_refusal(error)}"
                else:
                    why = f"the studio counters {', '.join(refused)} of {STATS_KEY} are not integers; not added to"
                self._warn_once("stats:" + why, why)
            return True

        if self._call("publish", send, False):
            with self._lock:
                for k, v in delta.items():
                    self._published[k] += v
            return True
        return False

    # -- maintenance -----------------------------------------------------------------------
    def ping(self) -> bool:
        """Whether the server answers now (bypasses the breaker; counts failures)."""
        try:
            self._first_connect()
            return bool(self._client.ping())
        except (self._redis.exceptions.RedisError, OSError) as exc:
            self._failed(exc, "ping")
            return False
        except (ValueError, AttributeError, TypeError, KeyError, IndexError) as exc:
            if not _raised_in_client(exc):
                raise
            self._failed(self._redis.exceptions.InvalidResponse(f"a reply Redis does not send ({type(exc).__name__}: {exc})"), "ping")
            return False

    def _scan(self) -> Iterator[str]:
        for name in self._client.scan_iter(match=NAMESPACE + "*", count=1000):
            yield name.decode() if isinstance(name, bytes) else name

    def server_stats(self) -> dict[str, Any]:
        """Entries and bytes of this build's namespace, and the server's memory policy.

        Raises:
            RemoteCacheError: the server cannot be reached.
        """
        try:
            names = list(self._scan())
            pipe = self._client.pipeline(transaction=False)
            for n in names:
                pipe.strlen(n)
            # A key of another Redis type in the namespace answers WRONGTYPE: counted, not fatal
            # (it made `cache stats` say the server does not answer, review helper 123).
            sizes = pipe.execute(raise_on_error=False) if names else []
            info = self._client.info("memory")
            try:
                studio = {(k.decode() if isinstance(k, bytes) else k): _counter(v) for k, v in self._client.hgetall(STATS_KEY).items()}
                counters_usable = True
            except self._redis.exceptions.ResponseError:  # the counters key of another type: the entries still answer (review helper 197)
                studio, counters_usable = {}, False
            other = sum(1 for _ in self._client.scan_iter(match="engine_plugin:*", count=1000)) - len(names)
        except (self._redis.exceptions.RedisError, OSError) as exc:
            raise RemoteCacheError(f"the remote variant cache does not answer: {exc}", Span(_redact(self.url))) from None
        return {
            "url": _redact(self.url),
            "namespace": NAMESPACE,
            "entries": sum(1 for n in sizes if isinstance(n, int)),
            "wrong_type_keys": sum(1 for n in sizes if not isinstance(n, int)),
            "bytes": int(sum(n for n in sizes if isinstance(n, int))),
            "other_builds_entries": max(0, other),
            "used_memory": int(info.get("used_memory", 0)),
            "maxmemory": int(info.get("maxmemory", 0)),
            "maxmemory_policy": str(info.get("maxmemory_policy", "")),
            "counters": {k: studio.get(k, 0) for k in _PUBLISHED},
            "counters_usable": counters_usable,
        }

    def gc(self, *, dry_run: bool = False) -> dict[str, int]:
        """Remove this namespace's values that do not decode as entries (garbage, wrong key,
        bad checksum, a bad signature when a secret is set); ``dry_run`` only counts them.
        Forgeries that decode need the assets to be caught: clients refuse them.

        Raises:
            RemoteCacheError: the server cannot be reached.
        """
        removed = kept = 0

        def remove(name: str, why: str) -> None:
            nonlocal removed
            if not dry_run:
                self._client.delete(name)
            removed += 1
            log.info("remote variant cache: removed %s... (%s)", name[len(NAMESPACE) :][:16], why)

        try:
            names = list(self._scan())
            for start in range(0, len(names), 256):
                chunk = names[start : start + 256]
                # The read get_values makes (_read_names): a value over MAX_VALUE_BYTES is
                # removed unread (planted 200 MB values were read whole, 869 MB for three, or
                # timed out: review helper 167), and no reply read past it.
                for name, value in zip(chunk, self._read_names(chunk)):
                    if isinstance(value, Exception):
                        if "WRONGTYPE" not in str(value):
                            raise value
                        remove(name, "another Redis type under this namespace")
                    elif isinstance(value, int):
                        remove(name, f"{value} bytes, over the {MAX_VALUE_BYTES} a variant entry may have")
                    elif value is None:
                        if self._client.exists(name):
                            remove(name, "an empty value")
                    elif len(value) > MAX_VALUE_BYTES:
                        remove(name, f"over the {MAX_VALUE_BYTES} bytes a variant entry may have")
                    else:
                        key = name[len(NAMESPACE) :]
                        try:
                            mac, entry = split_signed(value)
                            decode_entry(key, entry, signed=False)
                            if self.secret and mac is not None and value != sign(self.secret, entry):
                                raise BadEntry("the signature does not hold under this studio's secret")
                            kept += 1
                        except BadEntry as exc:
                            remove(name, exc.reason)
        except (self._redis.exceptions.RedisError, OSError) as exc:
            raise RemoteCacheError(f"the remote variant cache does not answer: {exc}", Span(_redact(self.url))) from None
        return {"removed": removed, "kept": kept}

    def clear(self) -> int:
        """Delete every value of this build's namespace; answers how many.

        Raises:
            RemoteCacheError: the server cannot be reached.
        """
        try:
            names = list(self._scan())
            self._client.delete(STATS_KEY)
            for i in range(0, len(names), 512):
                self._client.delete(*names[i : i + 512])
        except (self._redis.exceptions.RedisError, OSError) as exc:
            raise RemoteCacheError(f"the remote variant cache does not answer: {exc}", Span(_redact(self.url))) from None
        return len(names)

    def close(self) -> None:
        try:
            self._client.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return f"RemoteCache({_redact(self.url)!r}, timeout={self.timeout}, available={self.available})"


def remote_from(remote: "RemoteCache | str | bool | None", **options: Any) -> "RemoteCache | None":
    """A :class:`RemoteCache` from an argument: an instance as is, a URL, False for none, or
    None for ``$ENGINE_PLUGIN_REMOTE_CACHE`` when set."""
    if remote is False or remote == "":
        return None
    if isinstance(remote, RemoteCache):
        return remote
    if remote is None or remote is True:
        remote = os.environ.get(ENV_REMOTE) or None
        if remote is None:
            return None
    return RemoteCache(remote, **options)
