"""Backend additions serving the engine, against the fake device: dispatch-time writes into
product-owned buffers, dynamic offsets, one-submission batches, gap-joined upload spans."""

from __future__ import annotations

import numpy as np
import pytest
import wgpu
from fake_wgpu_device import FakeBindGroup, FakeDevice, FakePipeline

from engine_plugin.gpu import (
    DispatchDesc,
    ReadbackDesc,
    ReadbackPolicy,
    ReadbackStatus,
    WgpuProductDesc,
    coalesce_uploads,
    field_mirror_desc,
)
from engine_plugin.world import World

U = wgpu.BufferUsage


def world_with(n: int = 4) -> World:
    w = World((4, 4), {"h": np.float32}, max_chunks=8)
    for k in range(n):
        w.add(10 + k, {"h": np.full((4, 4), k + 1)})
    return w


class WritingProduct:
    """A product with a work-list buffer it writes at dispatch and a readback source; its
    "shader" copies the work list into the source when the dispatch executes."""

    def __init__(self, fake: FakeDevice, label: str = "p"):
        self.items = fake.create_buffer(size=64, usage=U.STORAGE | U.COPY_DST, label=f"{label}.items")
        self.out = fake.create_buffer(size=64, usage=U.STORAGE | U.COPY_SRC, label=f"{label}.out")
        self.results: list = []
        self.seen: list = []

        def shader(groups, wg):
            self.seen.append(bytes(self.items.data[:16]))
            self.out.data[:] = self.items.data

        self.desc = WgpuProductDesc(FakePipeline(shader), [FakeBindGroup([self.items, self.out])],
                                    readback_source=self.out, callback=self.record, fields=("h",),
                                    dynamic_offsets=[[0]], writable=(self.items,))

    def record(self, result) -> None:
        self.results.append((result.status, result.array(np.uint32).copy() if result.ok else None))

    def dispatch(self, handle, values) -> DispatchDesc:
        return DispatchDesc(handle, "h", 1, 1, writes=((self.items, 0, np.asarray(values, np.uint32)),))


def setup(fake, make_backend, n_products: int = 1, **config):
    w = world_with()
    be = make_backend(fake, **config)
    be.register_field(field_mirror_desc(w, "h"))
    products = [WritingProduct(fake, f"p{i}") for i in range(n_products)]
    handles = [be.register_product(f"p{i}", p.desc) for i, p in enumerate(products)]
    assert all(handles), be.last_refusal
    return w, be, products, handles


def test_dispatch_writes_land_before_the_dispatch_and_only_when_it_is_accepted(fake, make_backend):
    w, be, (p,), (h,) = setup(fake, make_backend)
    assert be.dispatch(p.dispatch(h, [7, 8, 9, 10]))
    assert p.seen == [np.array([7, 8, 9, 10], np.uint32).tobytes()]
    be.unregister_product(h)
    writes = len(fake.writes)
    assert not be.dispatch(p.dispatch(h, [1, 1, 1, 1])) and "stale" in be.last_refusal
    assert len(fake.writes) == writes  # a refused dispatch writes nothing


@pytest.mark.parametrize("writes, reason", [
    (lambda p, o: ((o, 0, np.zeros(4, np.uint32)),), "did not declare writable"),
    (lambda p, o: ((p.items, 2, np.zeros(4, np.uint32)),), "aligned"),
    (lambda p, o: ((p.items, 0, np.zeros(3, np.uint8)),), "aligned"),
    (lambda p, o: ((p.items, 60, np.zeros(4, np.uint32)),), "past the 64 B buffer"),
])
def test_bad_dispatch_writes_are_refused_before_anything_is_written(fake, make_backend, writes, reason):
    w, be, (p,), (h,) = setup(fake, make_backend)
    other = fake.create_buffer(size=64, usage=U.STORAGE | U.COPY_DST)
    before = len(fake.writes)
    assert not be.dispatch(DispatchDesc(h, "h", 1, 1, writes=writes(p, other)))
    assert reason in be.last_refusal and len(fake.writes) == before and fake.submits == 0 and be.healthy


def test_products_with_bad_dynamic_offsets_or_unwritable_buffers_are_refused(fake, make_backend):
    be = make_backend(fake)
    ro = fake.create_buffer(size=16, usage=U.STORAGE)
    assert be.register_product("a", WgpuProductDesc(FakePipeline(), [FakeBindGroup()], dynamic_offsets=[[4]])) is None
    assert "multiples of 256" in be.last_refusal
    assert be.register_product("b", WgpuProductDesc(FakePipeline(), [], dynamic_offsets=[[0]])) is None
    assert "dynamic offset lists for 0 bind groups" in be.last_refusal
    assert be.register_product("c", WgpuProductDesc(FakePipeline(), writable=(ro,))) is None
    assert "COPY_DST" in be.last_refusal


def test_a_batch_submits_its_dispatches_and_readback_copies_once(fake, make_backend, poll_until):
    w, be, products, handles = setup(fake, make_backend, n_products=3)
    with be.batch():
        for i, (p, h) in enumerate(zip(products, handles)):
            assert be.dispatch(p.dispatch(h, [i, i, i, i]))
            assert be.readback(ReadbackDesc(h, ReadbackPolicy.SUMMARY, 0, 16))
        assert fake.submits == 0 and be.inflight_readbacks == 3  # budgets count from acceptance
    assert fake.submits == 1 and len(fake.pending_maps) == 3
    fake.complete_work()
    poll_until(be, lambda: all(p.results for p in products))
    for i, p in enumerate(products):
        assert p.results[0][0] is ReadbackStatus.READY and list(p.results[0][1]) == [i] * 4
    assert be.live_staging_buffers == 0


def test_the_readback_budget_counts_readbacks_still_in_an_open_batch(fake, make_backend):
    w, be, products, handles = setup(fake, make_backend, n_products=2, max_inflight_readbacks=1)
    with be.batch():
        assert be.readback(ReadbackDesc(handles[0], ReadbackPolicy.SUMMARY, 0, 16))
        assert not be.readback(ReadbackDesc(handles[1], ReadbackPolicy.SUMMARY, 0, 16))
        assert "max_inflight_readbacks" in be.last_refusal


def test_a_second_write_of_the_same_buffer_in_a_batch_flushes_first(fake, make_backend):
    w, be, (p,), (h,) = setup(fake, make_backend)
    with be.batch():
        assert be.dispatch(p.dispatch(h, [1, 1, 1, 1]))
        assert be.dispatch(p.dispatch(h, [2, 2, 2, 2]))  # would overwrite what the first must read
    assert fake.submits == 2
    assert p.seen == [np.full(4, 1, np.uint32).tobytes(), np.full(4, 2, np.uint32).tobytes()]


def test_an_upload_inside_a_batch_with_encoded_work_flushes_first(fake, make_backend):
    w, be, (p,), (h,) = setup(fake, make_backend)
    with be.batch():
        assert be.dispatch(p.dispatch(h, [1, 1, 1, 1]))
        w.write(10, "h", 5.0)
        (span,) = coalesce_uploads(w, "h", [10])
        assert be.upload(span)
        assert fake.submits == 1  # the dispatch went first
    assert fake.submits == 1  # nothing left to submit at exit


def test_a_failed_batch_submission_fails_its_readbacks_and_the_backend(fake, make_backend):
    w, be, (p,), (h,) = setup(fake, make_backend)
    fake.fail_next("submit", wgpu.GPUValidationError("injected submit failure"))
    with be.batch():
        assert be.dispatch(p.dispatch(h, [1, 1, 1, 1]))
        assert be.readback(ReadbackDesc(h, ReadbackPolicy.SUMMARY, 0, 16))
    assert not be.healthy and "injected" in be.fault
    assert be.poll() == 1 and p.results == [(ReadbackStatus.FAILED, None)]
    assert be.inflight_readbacks == 0 and fake.live_staging() == 0


def test_a_device_error_reported_during_a_batch_submits_nothing(fake, make_backend):
    w, be, (p,), (h,) = setup(fake, make_backend)
    with be.batch():
        assert be.dispatch(p.dispatch(h, [1, 1, 1, 1]))
        assert be.readback(ReadbackDesc(h, ReadbackPolicy.SUMMARY, 0, 16))
        be.notify_device_error("reported by the application")
        fake.lose(log=False)  # a submit now would abort the process (FakeAbort fails the test)
    assert fake.submits == 0 and be.poll() == 1 and p.results[0][0] is ReadbackStatus.FAILED


def test_coalescing_across_gaps_writes_filler_but_checks_only_the_dirty_chunks():
    w = World((2, 2), {"h": np.float32}, max_chunks=16)
    for k in range(10):
        w.add(k, {"h": float(k)})
    w.evict(4)  # a free slot inside a gap
    spans = coalesce_uploads(w, "h", [2, 5, 9], max_gap=2)
    assert [(s.first_slot, s.slot_count, s.chunk_keys) for s in spans] == [(2, 4, (2, 5)), (9, 1, (9,))]
    assert spans[0].nbytes == 4 * 16 and spans[0].data().shape == (4, 2, 2)
    w.write(3, "h", 1.0)  # filler changed: the span still sends what the world holds
    assert spans[0].data()[1, 0, 0] == 1.0
    assert coalesce_uploads(w, "h", [2, 5, 9]) and len(coalesce_uploads(w, "h", [2, 5, 9])) == 3


def test_the_usage_flag_numbers_of_batches_and_engine_products_are_wgpus():
    from engine_plugin.engine import gpu_product
    from engine_plugin.device import mapping
    from engine_plugin.gpu import batch

    assert batch._STAGING_USAGE == U.MAP_READ | U.COPY_DST
    assert (gpu_product._COPY_SRC, gpu_product._COPY_DST, gpu_product._STORAGE) == (U.COPY_SRC, U.COPY_DST, U.STORAGE)
    assert mapping._MAP_MODE_READ_SUBMITTED == "READ_NOSYNC"  # wgpu-py's own read_buffer mode
