"""The model-based fuzzer of issue 14 (see fuzz_model.py): seeded, bounded, on lavapipe.

Many short sequences over small worlds: 0 stale, 0 duplicate and 0 lost-without-report
applications, and liveness within K frames once edits stop.
"""

from __future__ import annotations

import shutil
import time

from engine_plugin.engine import kernel_folder

from fuzz_model import ASSET, Asset, Report, Sequence

SEQUENCES = 50
STEPS = 200  # 10,000 steps in all


def test_model_based_fuzzer_finds_no_stale_duplicate_or_lost_result_and_stays_live(tmp_path, gpu):
    from engine_plugin.assets import AssetLibrary

    root = tmp_path / "assets"
    shutil.copytree(kernel_folder("summary"), root / ASSET)
    library = AssetLibrary(str(root), cache=str(tmp_path / "cache"), device=None)
    total = Report()
    t0 = time.perf_counter()
    try:
        library.load(ASSET)
        asset = Asset(str(root), library)
        for seed in range(SEQUENCES):
            total.add(Sequence(seed, None, asset, STEPS).run())
    finally:
        library.close()
    elapsed = time.perf_counter() - t0
    print(f"fuzzer: {total.steps} steps, {total.frames} frames, {total.applied} chunk results checked in {elapsed:.1f} s; events {sorted(total.events.items())}")
    assert total.steps >= 10_000
    assert total.stale == [], total.stale[:5]
    assert total.duplicates == [], total.duplicates[:5]
    assert total.lost == [], total.lost[:5]
    assert total.not_live == [], total.not_live[:3]
