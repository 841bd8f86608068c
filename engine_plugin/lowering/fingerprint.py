"""Content hashes of variants: stable across processes, Python versions and hash seeds."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Sequence

from .lower import LOWERING_VERSION
from .modules import Module
from .variants import VariantSpec

__all__ = ["variant_key", "CACHE_FORMAT_VERSION"]

# Bump when the cache entry layout changes; LOWERING_VERSION covers the generated code.
CACHE_FORMAT_VERSION = 2  # 2: the checksum (and MAC) cover the key and versions


def variant_key(schema_text: str, wgsl_text: str, spec: VariantSpec, modules: Sequence[Module] = ()) -> str:
    """sha256 over (format version, lowering version, schema text, WGSL text, spec, columns,
    and the name and text of every module the body imports, transitively).

    Module paths are left out (entries are content-addressed; the asset's store rebases the
    paths they name), and an asset without imports keeps the key it had before modules existed.
    """
    record: dict[str, Any] = {}
    if modules:
        record["modules"] = [[m.name, m.text] for m in modules]
    payload = json.dumps(
        {
            **record,
            "format": CACHE_FORMAT_VERSION,
            "lowering": LOWERING_VERSION,
            "schema": schema_text,
            "wgsl": wgsl_text,
            "spec": [list(v) for v in spec.values],
            "columns": [[k, list(v)] for k, v in spec.columns],
        },
        sort_keys=True,
        ensure_ascii=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode()).hexdigest()
