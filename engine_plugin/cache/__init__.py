"""The msgpack variant cache: one ``<key>.msgpack`` entry per lowered variant, and the usage log.

    from engine_plugin.cache import VariantCache
    cache = VariantCache("cache", max_bytes=256 << 20)
    program = abi.program(key="blur", schema=schema, wgsl=body, store=cache)  # lowers once, ever

Depends on ``lowering`` only (never on wgpu): a bake worker or a tool can read and write it
without a device. ``remote`` is the shared Redis tier behind it (the ``[remote]`` extra,
imported on use), ``verify`` proves an untrusted entry against the asset text.
"""

from ..lowering.fingerprint import CACHE_FORMAT_VERSION, variant_key
from .entry import BadEntry, decode_entry, encode_entry, entry_header
from .store import DEFAULT_MAX_BYTES, CacheEntryInfo, CacheStats, VariantCache
from .usage import USAGE_FILE, UsageLog, read_usage

__all__ = [
    "BadEntry",
    "CACHE_FORMAT_VERSION",
    "CacheEntryInfo",
    "CacheStats",
    "DEFAULT_MAX_BYTES",
    "USAGE_FILE",
    "UsageLog",
    "VariantCache",
    "decode_entry",
    "encode_entry",
    "entry_header",
    "read_usage",
    "variant_key",
]
