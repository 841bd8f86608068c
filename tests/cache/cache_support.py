"""Shared pieces of the cache tests: lowered variants of the reference sample, and their keys."""

from __future__ import annotations

import os
from functools import lru_cache

from engine_plugin.assets.folder import read_asset_folder
from engine_plugin.lowering import Lowered, enumerate_variants, lower, parse
from engine_plugin.lowering.fingerprint import variant_key

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REFERENCE = os.path.join("assets", "samples", "reference.computeShader")


@lru_cache(maxsize=None)
def reference_variants() -> tuple[tuple[str, Lowered], ...]:
    """(key, lowered) of all 25 variants of the reference sample (repository-relative paths)."""
    src = read_asset_folder(os.path.join(REPO, REFERENCE))
    schema = parse(src.yaml_text, REFERENCE + "/bindings.yaml")
    out = []
    for spec in enumerate_variants(schema):
        lowered = lower(schema, src.wgsl_text, spec, wgsl_path=REFERENCE + "/kernel.wgsl")
        out.append((variant_key(schema.text, src.wgsl_text, spec), lowered))
    return tuple(out)
