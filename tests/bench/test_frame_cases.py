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


class _RecordingQueue:
    def __init__(self):
        self.writes = []

    def write_buffer(self, buf, offset, data):
        self.writes.append((buf, offset, np.asarray(data).tobytes()))


@pytest.mark.parametrize("seed", range(3))
def test_same_work_raw_upload_takes_the_dirty_slots_and_writes_the_engines_spans(seed):
    """The uploads bench's raw side reads its world's dirty flags (not spans computed before
    the timed call) and writes exactly the spans the engine's take makes, with their bytes."""
    from engine_plugin.bench.frame_cases import SameWorkRawUpload
    from engine_plugin.gpu.descriptors import slot_stride

    world = World((4, 4), {"height": np.float32, "moisture": np.float32}, max_chunks=128)
    rng = np.random.default_rng(seed)
    for k in range(128):
        world.add(k, {"height": rng.random((4, 4), dtype=np.float32), "moisture": rng.random((4, 4), dtype=np.float32)})
    world.take_dirty()
    chunks = sorted(int(k) for k in rng.choice(128, size=20, replace=False))
    queue = _RecordingQueue()
    raw = SameWorkRawUpload(world, queue, {"height": "H", "moisture": "M"}, gap=2)
    raw.time(chunks, None)
    stride = slot_stride(world.chunk_nbytes("height"))
    want = []
    for name, tag in (("height", "H"), ("moisture", "M")):
        for k in chunks:
            world.mark_dirty(k, name)
        _, spans = take_dirty_uploads(world, name, 2)
        want += [(tag, s.first_slot * stride, world.slab(name, s.first_slot, s.slot_count).tobytes()) for s in spans]
    assert queue.writes == want
    assert not world.dirty()  # it took the flags it wrote
