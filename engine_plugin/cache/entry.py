"""One cache entry on disk: a msgpack envelope around a msgpack-packed :class:`Lowered`.

Envelope (a msgpack map)::

    magic     "engine_plugin.variant"
    format    CACHE_FORMAT_VERSION      (entry layout)
    lowering  LOWERING_VERSION          (generated code)
    layout    hash of the field names of Lowered and the records in it
    key       the variant key, the file's own name (an entry copied under another name is foreign)
    asset     the asset's .wgsl path when baked; spec: [[name, value], ...]; columns: [[table, [col, ...]], ...]
              (readable without decoding the payload: ``cache stats``, the bake)
    sha256    hex digest of ``payload`` and the readable header (asset, spec, columns, validated)
    mac       HMAC-SHA256 of ``sha256`` under the local cache key (:mod:`.local_key`); absent
              from an entry bound for the remote tier, which proves its entries its own way
    validated whether a bake compiled the variant on a device (a bake skips only those)
    payload   bytes: the Lowered, packed

The payload packs each record (``Lowered``, ``LoweredBinding``, ``HostSlot``...) as a msgpack
extension holding its fields in declaration order, and every sequence as an array read back
as a tuple. Rebuilding is then one step per record, and records shared between variants
(most of them) are rebuilt once: decoding is about 4x faster than ``Lowered.from_dict`` over
named maps, and decoding is what a warm start spends its time on. The field
lists come from the dataclasses themselves and their hash is in the envelope, so a build whose
``Lowered`` changed reads older entries as misses rather than as wrong objects.

The payload is checksummed separately so that a flipped byte inside a string, which msgpack
would happily decode, is still caught. Everything that can go wrong while decoding becomes
:class:`BadEntry` with a one-line reason; the store turns it into a miss.

The checksum is no defence against someone who writes the folder (anyone can recompute it):
the ``mac`` is. An entry not signed under this user's cache key (copied from elsewhere, forged,
or older than signing) is a miss, lowered again and replaced, before its payload is decoded.
Decoding is still bounded whatever the bytes (a remote entry is decoded before it is proven): records nest at most :data:`MAX_RECORD_DEPTH`
deep (each level is a nested ``unpackb`` on the C stack: ~250 levels overflowed it and
killed every reader with SIGSEGV), and every length msgpack reads is capped
(:data:`MAX_ITEMS`, the entry's own size) before anything is allocated for it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import math
import threading
from typing import Any

import msgpack

from ..lowering import LOWERING_VERSION, Lowered
from ..lowering.fingerprint import CACHE_FORMAT_VERSION
from ..lowering.lowered import ColumnSlot, HostSlot, LoweredBinding, ParamField, ParamsLayout, SourceMap
from ..lowering.param_types import MAX_PARAMS_BYTES
from ..lowering.parse import MAX_WORKGROUP_INVOCATIONS
from ..lowering.types import SCALARS
from ..lowering.variants import VariantSpec
from .local_key import local_cache_secret

__all__ = ["MAGIC", "BadEntry", "Entry", "encode_entry", "decode_entry", "open_entry", "entry_header", "MAX_ENTRY_BYTES", "MAX_RECORD_DEPTH", "MAX_ITEMS"]

MAGIC = "engine_plugin.variant"
# A lowered variant is a few KiB to a few hundred KiB; anything far larger is not ours.
MAX_ENTRY_BYTES = 64 * 1024 * 1024
# Records nest Lowered > ParamsLayout > ParamField (3 deep) today; 8 leaves room for growth
# and keeps the C stack (one unpackb frame, ~40 KiB, a level) far from its end.
MAX_RECORD_DEPTH = 8
# Items in one array or map: a source map holds one entry a generated line; a million is
# far past any kernel, and far below what a forged length header could make us allocate.
MAX_ITEMS = 1_000_000
_ENVELOPE_KEYS = 32

# Extension codes of the records a Lowered is made of (never renumber: bump the format).
_RECORDS: tuple[type, ...] = (Lowered, LoweredBinding, ParamField, ParamsLayout, HostSlot, ColumnSlot, SourceMap, VariantSpec)
_CODE = {cls: i + 1 for i, cls in enumerate(_RECORDS)}
_BY_CODE = {i + 1: cls for i, cls in enumerate(_RECORDS)}
_FIELDS = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in _RECORDS}
# Records are rebuilt the way pickle rebuilds them (a new object, then its fields), which is
# about twice as fast as a frozen dataclass's __init__; only for records without a
# __post_init__ (whose checks must run) or __slots__ (which have no __dict__).
_DIRECT = {cls for cls in _RECORDS if not hasattr(cls, "__post_init__") and not hasattr(cls, "__slots__")}
LAYOUT = hashlib.sha256(repr([(cls.__name__, _FIELDS[cls]) for cls in _RECORDS]).encode()).hexdigest()[:16]


class BadEntry(Exception):
    """An entry that cannot be used; ``reason`` says why in a few words (for the log)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class UnreadableEntry(BadEntry):
    """An entry file that could not be read now (an I/O error: too many open files, a
    permission), as against one whose content is unusable; ``why`` is the OS's words."""

    def __init__(self, why: str):
        super().__init__(f"unreadable ({why})")
        self.why = why


def _default(obj: Any) -> Any:
    code = _CODE.get(type(obj))
    if code is None:
        raise TypeError(f"engine_plugin bug, please report: a Lowered holds a {type(obj).__name__}, which the cache cannot store")
    values = [getattr(obj, name) for name in _FIELDS[type(obj)]]
    return msgpack.ExtType(code, msgpack.packb(values, default=_default, use_bin_type=True))


# Decoded records by their packed bytes. Variants of one asset share most of their records
# (bindings, params, host slots, often the source map), and records are deeply immutable, so
# one decoded object can stand in every Lowered that packs the same bytes: a warm start of
# many variants then decodes each distinct record once. Bounded by the bytes of the keys.
_MEMO: dict[tuple[int, bytes], Any] = {}
_MEMO_BYTES = [0]
_MEMO_LIMIT = 8 * 1024 * 1024
_TOP = _CODE[Lowered]  # unique per variant (it holds the source): never memoised


# Nesting depth of the records being decoded, per thread (decoding happens on reload workers,
# bake writer threads and the engine thread at once).
_DEPTH = threading.local()


def _limits(size: int, *, maps: int = MAX_ITEMS) -> dict[str, int]:
    # No length inside ``size`` bytes can honestly exceed ``size``; cap the counts too.
    items = min(MAX_ITEMS, size)
    return {
        "max_str_len": size,
        "max_bin_len": size,
        "max_ext_len": size,
        "max_array_len": items,
        "max_map_len": min(maps, items),
    }


def _ext_hook(code: int, data: bytes) -> Any:
    if code != _TOP:
        found = _MEMO.get((code, data))
        if found is not None:
            return found
    cls = _BY_CODE.get(code)
    if cls is None:
        raise BadEntry(f"unknown record code {code}")
    depth = getattr(_DEPTH, "n", 0)
    if depth >= MAX_RECORD_DEPTH:
        raise BadEntry(f"records nested more than {MAX_RECORD_DEPTH} deep (a lowered variant nests 3)")
    _DEPTH.n = depth + 1
    try:
        values = msgpack.unpackb(data, raw=False, use_list=False, ext_hook=_ext_hook, strict_map_key=True, **_limits(len(data), maps=0))
    finally:
        _DEPTH.n = depth
    names = _FIELDS[cls]
    if not isinstance(values, tuple) or len(values) != len(names):
        raise BadEntry(f"a {cls.__name__} record of the wrong shape")
    if cls in _DIRECT:
        obj: Any = object.__new__(cls)
        obj.__dict__.update(zip(names, values))
    else:
        obj = cls(*values)
    if code != _TOP:
        if _MEMO_BYTES[0] + len(data) > _MEMO_LIMIT:
            _MEMO.clear()
            _MEMO_BYTES[0] = 0
        _MEMO[(code, data)] = obj
        _MEMO_BYTES[0] += len(data)
    return obj


def _positive_ints(value: Any, count: int) -> bool:
    return isinstance(value, tuple) and len(value) == count and all(type(v) is int and v > 0 for v in value)


def _check(lowered: Any) -> Lowered:
    # Cheap structural checks: the checksum already rules out corruption, these rule out a
    # well-formed entry of something else (and values a run would divide by or allocate).
    if not isinstance(lowered, Lowered):
        raise BadEntry(f"payload is a {type(lowered).__name__}, not a lowered variant")
    if not isinstance(lowered.source, str) or not isinstance(lowered.params, ParamsLayout) or not isinstance(lowered.source_map, SourceMap):
        raise BadEntry("payload does not describe a lowered variant")
    if not all(isinstance(b, LoweredBinding) for b in lowered.bindings) or not all(isinstance(h, HostSlot) for h in lowered.host_slots):
        raise BadEntry("payload does not describe a lowered variant")
    # Within what the lowering makes: a signed entry with values past it (a faulty or hostile
    # signer) raised a raw MemoryError or a compile error blaming bindings.yaml on every load,
    # and was never replaced (review helper 176); as a bad entry it is lowered again.
    params = lowered.params
    if (
        not _positive_ints(lowered.workgroup, 3)
        or math.prod(lowered.workgroup) > MAX_WORKGROUP_INVOCATIONS
        or type(params.size) is not int
        or not 0 <= params.size <= MAX_PARAMS_BYTES
        or params.size % 16
    ):
        raise BadEntry("payload holds a workgroup or params size no lowering makes")
    for f in params.fields:
        if not isinstance(f, ParamField) or type(f.offset) is not int or type(f.size) is not int or f.offset < 0 or f.size < 0 or f.offset + f.size > params.size:
            raise BadEntry("payload holds a workgroup or params layout no lowering makes")
    files = lowered.source_map.files
    if not isinstance(files, tuple) or not all(isinstance(f, str) for f in files) or not (lowered.asset is None or isinstance(lowered.asset, str)):
        raise BadEntry("payload names its files with something other than paths")
    _check_plan(lowered)
    _check_source_map(lowered.source_map)
    return lowered


_MAX_BINDING = 1000  # WebGPU's maxBindingsPerBindGroup: no binding number at or past it


def _lanes_and_scalar(item: Any) -> bool:
    if item.scalar == "struct":  # a struct element: its words a record
        return type(item.lanes) is int and 1 <= item.lanes <= MAX_PARAMS_BYTES
    return type(item.lanes) is int and 1 <= item.lanes <= 4 and item.scalar in SCALARS


def _check_plan(lowered: Lowered) -> None:
    """Bindings and host slots within what the lowering makes (review helper 206: a slot of 0
    lanes read its output back empty, a binding number no binding has raised KeyError, on
    every load of an entry served as a hit)."""
    numbers = [b.binding for b in lowered.bindings]
    if not all(type(n) is int and 0 <= n < _MAX_BINDING for n in numbers) or len(set(numbers)) != len(numbers):
        raise BadEntry("payload holds binding numbers no lowering makes")
    if not all(_lanes_and_scalar(b) for b in lowered.bindings):
        raise BadEntry("payload holds a binding type no lowering makes")
    known = set(numbers)
    for slot in lowered.host_slots:
        if slot.binding not in known or not (slot.counter_binding == -1 or slot.counter_binding in known) or not _lanes_and_scalar(slot):
            raise BadEntry(f"payload holds a host slot ({slot.name!r}) no lowering makes")


def _check_source_map(smap: SourceMap) -> None:
    """Every mapped line inside its file (review helper 206: a file index past the files raised
    a raw IndexError, a line past the file named a line that does not exist)."""
    # An upper bound of each file's lines, whatever ends them (a CR-only schema's too).
    lines = [len(text.splitlines()) + 1 if isinstance(text, str) else -1 for text in smap.texts]
    if not isinstance(smap.texts, tuple) or -1 in lines or len(lines) > len(smap.files) or not isinstance(smap.entries, tuple):
        raise BadEntry("payload holds a source map no lowering makes")
    for entry in smap.entries:
        if not (isinstance(entry, tuple) and len(entry) == 2 and type(entry[0]) is int and type(entry[1]) is int):
            raise BadEntry("payload holds a source map no lowering makes")
        fidx, line = entry
        if fidx >= len(smap.files) or fidx < -1 or line < 0 or (0 <= fidx < len(lines) and line > lines[fidx]):
            raise BadEntry("payload holds a source map no lowering makes")
    for splice in smap.splices:
        if not (isinstance(splice, tuple) and len(splice) == 5 and all(type(v) is int and v >= 0 for v in splice)):
            raise BadEntry("payload holds a source map no lowering makes")


def _digest(payload: bytes, asset: Any, spec: Any, columns: Any, validated: Any = False, header: Any = ()) -> str:
    # The readable header is covered too: a tool listing entries must not read a flipped spec.
    # ``header``: the entry's key, format, lowering version and layout, under the MAC with the
    # rest: an older build's signed entry relabelled to this build's key and versions (no key
    # needed: plain msgpack) passed every check, and its old kernel ran (review helper 197).
    h = hashlib.sha256(payload)
    h.update(msgpack.packb([asset, spec, columns] + ([True] if validated is True else []) + ([list(header)] if header else []), use_bin_type=True))
    return h.hexdigest()


def _mac(digest: str) -> str:
    return hmac.new(local_cache_secret(), digest.encode(), hashlib.sha256).hexdigest()


def encode_entry(key: str, lowered: Lowered, *, signed: bool = True, validated: bool = False, format_version: int = CACHE_FORMAT_VERSION) -> bytes:
    """The bytes of the entry for ``lowered`` under ``key``.

    Args:
        signed: sign it under the local cache key (every local entry; False for the remote
            tier, whose readers cannot know this key).
        validated: a bake compiled this variant on a device.
        format_version: only for tests.
    """
    payload = msgpack.packb(lowered, default=_default, use_bin_type=True)
    spec = [list(v) for v in lowered.spec.values]
    columns = [[k, list(v)] for k, v in lowered.spec.columns]
    digest = _digest(payload, lowered.asset, spec, columns, validated, (key, format_version, LOWERING_VERSION, LAYOUT))
    envelope = {
        "magic": MAGIC,
        "format": format_version,
        "lowering": LOWERING_VERSION,
        "layout": LAYOUT,
        "key": key,
        "asset": lowered.asset,
        "spec": spec,
        "columns": columns,
        "sha256": digest,
        "payload": payload,
    }
    if validated:
        envelope["validated"] = True
    if signed:
        envelope["mac"] = _mac(digest)
    return msgpack.packb(envelope, use_bin_type=True)


def _unpack(data: bytes, what: str, *, maps: int = MAX_ITEMS, **kwargs: Any) -> Any:
    try:
        _DEPTH.n = 0  # a previous decode on this thread cannot leave it raised, but be sure
        return msgpack.unpackb(data, raw=False, strict_map_key=True, **_limits(len(data), maps=maps), **kwargs)
    except BadEntry:
        raise
    except msgpack.ExtraData:
        raise BadEntry(f"{what} is not one msgpack object (garbage, or bytes after its end)") from None
    except (ValueError, msgpack.UnpackException) as exc:
        text = str(exc)
        if "incomplete" in text or isinstance(exc, msgpack.OutOfData):
            raise BadEntry(f"truncated {what}") from None
        raise BadEntry(f"{what} is not msgpack ({text or type(exc).__name__ + ': nested too deep or malformed'})") from None
    except Exception as exc:  # msgpack raises TypeError/OverflowError/UnicodeDecodeError on garbage
        raise BadEntry(f"{what} is not msgpack ({type(exc).__name__}: {exc})") from None


@dataclasses.dataclass(frozen=True)
class Entry:
    """A decoded entry: the lowered variant, and whether a bake validated it."""

    lowered: Lowered
    validated: bool


def decode_entry(key: str, data: bytes, *, signed: bool = True) -> Lowered:
    """The lowered variant held in ``data``, which must be the entry for ``key`` (see
    :func:`open_entry`)."""
    return open_entry(key, data, signed=signed).lowered


def open_entry(key: str, data: bytes, *, signed: bool = True) -> Entry:
    """The entry for ``key`` held in ``data``.

    Args:
        signed: it must be signed under the local cache key (every local entry; False for a
            remote one, which its reader proves by lowering again or by the studio's secret).
    Raises:
        BadEntry: empty, truncated, not msgpack, another format or lowering version, another
            key, a checksum mismatch, not signed under the local key, or a payload that does
            not rebuild a ``Lowered``.
    """
    if not data:
        raise BadEntry("empty file")
    if len(data) > MAX_ENTRY_BYTES:
        raise BadEntry(f"{len(data)} bytes, more than an entry can be")
    env = _unpack(data, "entry", maps=_ENVELOPE_KEYS)
    if not isinstance(env, dict) or env.get("magic") != MAGIC:
        raise BadEntry("not a variant cache entry (no engine_plugin.variant header)")
    if env.get("format") != CACHE_FORMAT_VERSION:
        raise BadEntry(f"cache format version {env.get('format')!r}, this build reads {CACHE_FORMAT_VERSION}")
    if env.get("lowering") != LOWERING_VERSION:
        raise BadEntry(f"lowering version {env.get('lowering')!r}, this build lowers {LOWERING_VERSION}")
    if env.get("layout") != LAYOUT:
        raise BadEntry("written by a build whose Lowered has other fields")
    if env.get("key") != key:
        raise BadEntry(f"entry of another variant ({str(env.get('key'))[:16]}...)")
    payload = env.get("payload")
    if not isinstance(payload, bytes):
        raise BadEntry("no payload")
    validated = env.get("validated", False)
    try:
        digest = _digest(payload, env.get("asset"), env.get("spec"), env.get("columns"), validated, (key, env.get("format"), env.get("lowering"), env.get("layout")))
    except (TypeError, ValueError):
        digest = None
    if digest is None or digest != env.get("sha256"):
        raise BadEntry("checksum mismatch")
    if signed:
        mac = env.get("mac")
        if not isinstance(mac, str) or not hmac.compare_digest(mac, _mac(digest)):
            raise BadEntry("not signed under this user's cache key (written elsewhere, forged, or older than signing)")
    try:
        lowered = _unpack(payload, "payload", maps=0, use_list=False, ext_hook=_ext_hook)
    except (TypeError, ValueError) as exc:  # a record constructor refusing its values
        raise BadEntry(f"payload does not describe a lowered variant ({type(exc).__name__}: {exc})") from None
    return Entry(_check(lowered), validated is True)


def entry_header(data: bytes) -> dict[str, Any]:
    """The readable part of an entry (asset, spec, columns, versions) without the payload.

    Raises:
        BadEntry: not an entry.
    """
    if len(data) > MAX_ENTRY_BYTES:
        raise BadEntry(f"{len(data)} bytes, more than an entry can be")
    env = _unpack(data, "entry", maps=_ENVELOPE_KEYS)
    if not isinstance(env, dict) or env.get("magic") != MAGIC:
        raise BadEntry("not a variant cache entry (no engine_plugin.variant header)")
    return {k: v for k, v in env.items() if k != "payload"}
