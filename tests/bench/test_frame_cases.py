"""The same-work raw loop of the frame bench joins dirty runs exactly as the engine does."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin.bench.frame_cases import joined_runs
from engine_plugin.gpu.descriptors import take_dirty_uploads
from engine_plugin.world import World


@pytest.mark.parametrize("gap", [0, 1, 16])
@pytest.mark.parametrize("seed", range(5))
def test_raw_loop_writes_the_spans_of_the_engines_joining_rule(gap, seed):
    world = World((4, 4), {"h": np.float32}, max_chunks=256)
    for k in range(256):
        world.add(k)
    world.take_dirty()
    rng = np.random.default_rng(seed)
    for k in rng.choice(256, size=int(rng.integers(1, 80)), replace=False):
        world.write(int(k), "h", 1.0)
    slots = np.array(sorted(world.slot(k) for k, _ in world.dirty("h")))
    _, spans = take_dirty_uploads(world, "h", gap)
    assert joined_runs(slots, gap) == [(s.first_slot, s.slot_count) for s in spans]
