"""The msgpack variant cache: one ``<key>.msgpack`` entry per lowered variant, and the usage log.

    from engine_plugin.cache import VariantCache
    cache = VariantCache("cache", max_bytes=256 << 20)
    program = abi.program(key="blur", schema=schema, wgsl=body, store=cache)  # lowers once, ever

Depends on ``lowering`` only (never on wgpu): a bake worker or a tool can read and write it
without a device. ``remote`` is the shared Redis tier behind it (the ``[remote]`` extra,
imported on use), ``verify`` proves an untrusted entry against the asset text, ``local_key``
signs the entries this user writes (an entry written anywhere else is a miss).
"""

from ..lowering.fingerprint import CACHE_FORMAT_VERSION, variant_key
from .entry import BadEntry, Entry, decode_entry, encode_entry, entry_header, open_entry
from .local_key import key_path, local_cache_secret
from .store import DEFAULT_MAX_BYTES, CacheCheck, CacheEntryInfo, CacheStats, VariantCache
from .usage import USAGE_FILE, UsageLog, read_usage

__all__ = [
    "BadEntry",
    "CACHE_FORMAT_VERSION",
    "CacheCheck",
    "CacheEntryInfo",
    "CacheStats",
    "DEFAULT_MAX_BYTES",
    "Entry",
    "USAGE_FILE",
    "UsageLog",
    "VariantCache",
    "decode_entry",
    "encode_entry",
    "entry_header",
    "key_path",
    "local_cache_secret",
    "open_entry",
    "read_usage",
    "variant_key",
]
