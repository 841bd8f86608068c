"""Lowering is a pure function of its inputs: byte-identical in any process, under any hash seed.

Caches keyed on generated text break silently when set or dict order leaks into the output,
so every reference variant (and the other test assets) is lowered in two fresh interpreters
with different ``PYTHONHASHSEED`` values and compared: source, fingerprint, and the msgpack
bytes of ``to_dict()`` (what the variant cache stores).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import msgpack

from engine_plugin.lowering import Lowered

from lowering_support import REPO, every_kind_assets, read_asset, sample, sample_assets

HERE = os.path.dirname(os.path.abspath(__file__))

# Run in a fresh interpreter: lower every variant of the assets, print one JSON line each.
_SCRIPT = """
import hashlib, json, sys
import msgpack
sys.path.insert(0, {here!r})
from lowering_support import every_kind_assets, read_asset, sample_assets
assets = sample_assets() + every_kind_assets() + [read_asset("tests/lowering/assets/table_blend.computeShader")]
for asset in assets:
    for variant in asset.variants():
        lowered = asset.lower(variant)
        blob = msgpack.packb(lowered.to_dict(), use_bin_type=True)
        print(json.dumps([asset.id, variant.label(), lowered.fingerprint,
                          hashlib.sha256(lowered.source.encode()).hexdigest(),
                          hashlib.sha256(blob).hexdigest()]))
"""


def _lower_in_fresh_processes(*seeds: str) -> list[list[list[str]]]:
    """One interpreter per seed, run side by side; each answers its JSON rows."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _SCRIPT.format(here=HERE)],
            cwd=REPO, env=dict(os.environ, PYTHONHASHSEED=seed),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for seed in seeds
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append([json.loads(line) for line in out.splitlines()])
    return results


def test_lowering_is_byte_identical_across_processes_with_different_hash_seeds():
    first, second = _lower_in_fresh_processes("0", "12345")
    assert sum(1 for row in first if row[0] == "reference") == 25
    assert len(first) == len(second) > 25
    for a, b in zip(first, second):
        assert a == b, f"{a[0]} {a[1]} differs between PYTHONHASHSEED=0 and 12345"
    # and this process (its own seed) agrees with both
    here = {(r[0], r[1]): r for r in first}
    for asset in [sample("reference"), sample("particles")]:
        for variant in asset.variants():
            lowered = asset.lower(variant)
            blob = msgpack.packb(lowered.to_dict(), use_bin_type=True)
            row = [asset.id, variant.label(), lowered.fingerprint, hashlib.sha256(lowered.source.encode()).hexdigest(), hashlib.sha256(blob).hexdigest()]
            assert here[asset.id, variant.label()] == row


def test_lowering_twice_in_one_process_gives_equal_results():
    asset = sample("reference")
    for variant in asset.variants():
        a, b = asset.lower(variant), asset.lower(variant)
        assert a == b and a.source == b.source and a.fingerprint == b.fingerprint


def test_every_variant_of_the_reference_has_its_own_source_and_fingerprint():
    lowered = [sample("reference").lower(v) for v in sample("reference").variants()]
    assert len({l.source for l in lowered}) == len({l.fingerprint for l in lowered}) == 25


def test_a_lowered_variant_round_trips_through_msgpack():
    for asset in sample_assets() + every_kind_assets()[:1] + [read_asset("tests/lowering/assets/table_blend.computeShader")]:
        variant = asset.variants()[-1]
        lowered = asset.lower(variant)
        blob = msgpack.packb(lowered.to_dict(), use_bin_type=True)
        back = Lowered.from_dict(msgpack.unpackb(blob, raw=False))
        assert back == lowered
        assert back.fingerprint == lowered.fingerprint
        assert msgpack.packb(back.to_dict(), use_bin_type=True) == blob
