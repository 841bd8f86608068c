"""Issue 15: a readback whose map has landed is delivered by the next ``poll`` on the frame
thread, without a hand-over through the waiter thread; spans are checked in O(1) while the
world holds still, and refused the moment it does not."""

from __future__ import annotations

import numpy as np
import pytest
import wgpu
from fake_wgpu_device import FakeBindGroup, FakeDevice, FakePipeline

from engine_plugin.errors import StaleSpanError
from engine_plugin.gpu import ReadbackDesc, ReadbackPolicy, ReadbackStatus, WgpuProductDesc
from engine_plugin.gpu.descriptors import take_dirty_changes, take_dirty_uploads
from engine_plugin.world import World

U = wgpu.BufferUsage


class _Product:
    def __init__(self, fake: FakeDevice) -> None:
        self.source = fake.create_buffer(size=64, usage=U.STORAGE | U.COPY_SRC, label="source")
        self.source.data[:] = np.arange(16, dtype=np.uint32).tobytes()
        self.results: list = []
        self.desc = WgpuProductDesc(FakePipeline(), [FakeBindGroup([self.source])], readback_source=self.source, callback=self.record)

    def record(self, result) -> None:
        self.results.append((result.status, result.array(np.uint32).copy() if result.ok else None))


def test_a_landed_readback_is_delivered_by_the_next_poll_without_the_waiter_thread(fake, make_backend):
    be = make_backend(fake)
    p = _Product(fake)
    h = be.register_product("p", p.desc)
    watched: list = []
    be._ring.waiter.watch = watched.append  # the waiter never sees it: only the frame thread can deliver
    assert be.readback(ReadbackDesc(h, ReadbackPolicy.SUMMARY))
    fake.complete_work()  # the GPU is done; nobody waited
    assert be.poll() == 1
    assert p.results[0][0] is ReadbackStatus.READY and list(p.results[0][1]) == list(range(16))
    assert watched == [] and be.inflight_readbacks == 0


def test_a_readback_still_pending_a_frame_later_is_handed_to_the_waiter(fake, make_backend, poll_until):
    be = make_backend(fake)
    p = _Product(fake)
    h = be.register_product("p", p.desc)
    assert be.readback(ReadbackDesc(h, ReadbackPolicy.SUMMARY))
    for _ in range(3):
        assert be.poll() == 0  # pending: nothing delivered, nothing blocks
    req = be._ring.tracker.requests()[0]
    assert req.watched and not req.claimed
    fake.complete_work()
    poll_until(be, lambda: p.results)
    assert p.results[0][0] is ReadbackStatus.READY and be.inflight_readbacks == 0


def _world() -> World:
    w = World((4, 4), {"h": np.float32}, max_chunks=8)
    for k in range(6):
        w.add(k)
    return w


def test_a_span_of_a_world_that_held_still_is_current_by_its_clock():
    w = _world()
    _, (span,) = take_dirty_uploads(w, "h", max_gap=8)
    assert span.clock == w.clock
    assert span.data().nbytes == span.nbytes


def test_a_span_refuses_its_bytes_after_any_covered_chunk_changes_or_is_evicted():
    w = _world()
    _, (span,) = take_dirty_uploads(w, "h", max_gap=8)
    w.write(3, "h", 1.0)
    with pytest.raises(StaleSpanError):
        span.data()
    w2 = _world()
    _, (span2,) = take_dirty_uploads(w2, "h", max_gap=8)
    w2.evict(5)
    with pytest.raises(StaleSpanError):
        span2.data()


def test_a_span_stays_current_when_only_chunks_outside_it_change():
    w = _world()
    w.take_dirty("h")
    w.write(1, "h", 2.0)
    _, (span,) = take_dirty_uploads(w, "h")
    w.write(4, "h", 3.0)  # the clock moved, the span's chunk did not: the vector check passes
    assert span.data().nbytes == span.nbytes


def test_dirty_changes_answer_the_versions_and_slots_of_the_changed_chunks():
    w = _world()
    w.take_dirty("h")
    w.write(2, "h", 1.0)
    w.write(5, "h", 1.0)
    found = take_dirty_changes(w, "h", spans=False)
    assert found.keys == [2, 5] and found.spans == []
    assert found.slots.tolist() == [w.slot(2), w.slot(5)] and found.versions.tolist() == [w.version(2), w.version(5)]
