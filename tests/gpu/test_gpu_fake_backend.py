"""WgpuBackend against a fake device: ownership, generations, budgets, failures, loss.

The fake raises FakeAbort (a BaseException) wherever a real device would abort the process,
so any such path taken by the backend fails the test.
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest
import wgpu
from fake_wgpu_device import FakeBindGroup, FakeDevice, FakePipeline

from engine_plugin.errors import StaleHandleError, StaleSpanError
from engine_plugin.gpu import (
    DispatchDesc,
    ReadbackDesc,
    ReadbackPolicy,
    ReadbackStatus,
    WgpuProductDesc,
    coalesce_uploads,
    field_mirror_desc,
    ring,
    upload_desc,
)
from engine_plugin.gpu import wgpu_backend as wb
from engine_plugin.world import World

U = wgpu.BufferUsage


def world_with(n: int = 4, shape=(4, 4), dtype=np.float32) -> World:
    w = World(shape, {"h": dtype}, max_chunks=8)
    for k in range(n):
        w.add(10 + k, {"h": np.full(shape, k + 1)})
    return w


class Product:
    """A fake product: a source buffer of ``size`` bytes, a callback recording results."""

    def __init__(self, fake: FakeDevice, size: int = 64, usage: int = U.STORAGE | U.COPY_SRC):
        self.source = fake.create_buffer(size=size, usage=usage, label="source")
        self.source.data[:] = np.arange(size // 4, dtype=np.uint32).tobytes()
        self.results: list = []
        self.desc = WgpuProductDesc(FakePipeline(), [FakeBindGroup([self.source])],
                                    readback_source=self.source, callback=self.record)

    def record(self, result) -> None:
        data = result.array(np.uint32).copy() if result.ok else None
        self.results.append((result.status, data, result.message))


def summary(handle, **kw) -> ReadbackDesc:
    return ReadbackDesc(handle, ReadbackPolicy.SUMMARY, **kw)


# ---- fields and uploads -----------------------------------------------------------------

def test_field_registration_makes_a_storage_copy_dst_copy_src_buffer_sized_from_the_mirror(fake, make_backend):
    w = world_with()
    be = make_backend(fake)
    assert be.register_field(field_mirror_desc(w, "h"))
    buf = be.field_buffer("h")
    assert buf.size == 8 * 16 * 4
    assert buf.usage == U.STORAGE | U.COPY_DST | U.COPY_SRC


def test_field_registration_is_refused_for_duplicates_past_max_fields_and_past_the_device_limit(make_backend):
    w = World((64, 64), {"a": np.float32, "b": np.float32, "c": np.uint8}, max_chunks=8)
    be = make_backend(FakeDevice(max_buffer_size=64 * 64 * 4 * 8), max_fields=2)
    assert be.register_field(field_mirror_desc(w, "a"))
    assert not be.register_field(field_mirror_desc(w, "a")) and "registered already" in be.last_refusal
    assert be.register_field(field_mirror_desc(w, "c"))
    assert not be.register_field(field_mirror_desc(w, "b")) and "max_fields" in be.last_refusal
    small = make_backend(FakeDevice(max_buffer_size=1024))
    assert not small.register_field(field_mirror_desc(w, "a")) and "device allows" in small.last_refusal


def test_upload_writes_the_span_bytes_at_the_slot_offset_of_the_mirror(fake, make_backend):
    w = world_with()
    be = make_backend(fake)
    be.register_field(field_mirror_desc(w, "h"))
    w.evict(11)
    w.write(12, "h", 7.0)
    for d in coalesce_uploads(w, "h", [10, 12, 13]):
        assert be.upload(d)
    mirror = np.frombuffer(be.field_buffer("h").data, np.float32).reshape(8, 4, 4)
    assert (mirror[0] == 1).all() and (mirror[1] == 0).all()
    assert (mirror[2] == 7).all() and (mirror[3] == 4).all()
    assert [n for _, _, n in fake.writes] == [64, 128]  # slots 2 and 3 coalesced into one write


def test_misaligned_upload_is_refused_before_reaching_the_device(fake, make_backend):
    import dataclasses

    w = World((3, 3), {"m": np.uint8}, max_chunks=4)
    w.add(0)
    w.add(1)
    be = make_backend(fake)
    be.register_field(field_mirror_desc(w, "m"))
    assert be.upload(upload_desc(w, "m", 1))  # 9-byte chunks sit in 12-byte slots: aligned
    assert fake.writes[-1][1:] == (12, 12)
    odd = dataclasses.replace(upload_desc(w, "m", 1), dst_offset=9, nbytes=9, padded=False)  # a hand-made span
    assert not be.upload(odd)
    assert "aligned" in be.last_refusal and len(fake.writes) == 1 and be.healthy


def test_upload_of_a_stale_span_raises_and_writes_nothing(fake, make_backend):
    w = world_with()
    be = make_backend(fake)
    be.register_field(field_mirror_desc(w, "h"))
    span = upload_desc(w, "h", 10)
    w.set_tile(10, "h", (0, 0), 5.0)
    with pytest.raises(StaleSpanError):
        be.upload(span)
    assert fake.writes == []


def test_upload_to_an_unregistered_field_is_refused(fake, make_backend):
    w = world_with()
    be = make_backend(fake)
    assert not be.upload(upload_desc(w, "h", 10)) and "not registered" in be.last_refusal


# ---- products and generations -----------------------------------------------------------

@pytest.mark.parametrize("change, reason", [
    (dict(readback_source=None), "callback without a readback source"),
    (dict(callback=None), "source without a callback"),
    (dict(readback_offset=2), "not 4-byte aligned"),
    (dict(readback_offset=60, readback_size=8), "outside"),
])
def test_product_registration_refuses_readback_settings_that_can_never_work(fake, make_backend, change, reason):
    be = make_backend(fake)
    p = Product(fake)
    desc = WgpuProductDesc(**{**p.desc.__dict__, **change})
    assert be.register_product("p", desc) is None
    assert reason in be.last_refusal


def test_product_registration_refuses_a_source_without_copy_src(fake, make_backend):
    be = make_backend(fake)
    p = Product(fake, usage=U.STORAGE)
    assert be.register_product("p", p.desc) is None and "COPY_SRC" in be.last_refusal


def test_product_registration_refuses_an_offset_without_a_source(fake, make_backend):
    be = make_backend(fake)
    assert be.register_product("p", WgpuProductDesc(FakePipeline(), readback_offset=4)) is None


def test_unregister_makes_the_handle_stale_for_dispatch_and_readback(fake, make_backend):
    w = world_with()
    be = make_backend(fake)
    be.register_field(field_mirror_desc(w, "h"))
    p = Product(fake)
    h = be.register_product("p", p.desc)
    assert be.is_live(h) and be.unregister_product(h)
    assert not be.is_live(h)
    assert not be.dispatch(DispatchDesc(h, "h", 1, 1)) and "stale" in be.last_refusal
    assert not be.readback(summary(h)) and "stale" in be.last_refusal
    with pytest.raises(StaleHandleError, match="'p'"):
        be.require_live(h)
    assert not be.unregister_product(h)


def test_a_reused_slot_gets_a_new_generation_and_old_handles_stay_stale(fake, make_backend):
    be = make_backend(fake, max_products=1)
    p = Product(fake)
    first = be.register_product("p", p.desc)
    assert be.register_product("q", p.desc) is None and "max_products" in be.last_refusal
    be.unregister_product(first)
    again = be.register_product("p", p.desc)
    assert again.key == first.key and again.generation > first.generation
    assert be._products.slot_of(again) == 0
    assert not be.is_live(first) and be.is_live(again)


def test_registering_a_live_key_again_is_refused(fake, make_backend):
    be = make_backend(fake)
    p = Product(fake)
    be.register_product("p", p.desc)
    assert be.register_product("p", p.desc) is None and "registered already" in be.last_refusal


def test_handles_of_one_backend_are_not_live_on_another(fake, make_backend):
    a, b = make_backend(fake), make_backend(fake)
    p = Product(fake)
    ha = a.register_product("p", p.desc)
    hb = b.register_product("p", p.desc)
    assert ha != hb and not b.is_live(ha) and not a.is_live(hb)


# ---- dispatch ---------------------------------------------------------------------------

def test_dispatch_encodes_one_compute_pass_with_the_products_pipeline_bind_groups_and_workgroups(fake, make_backend):
    w = world_with()
    be = make_backend(fake)
    be.register_field(field_mirror_desc(w, "h"))
    seen = []
    pipeline = FakePipeline(lambda groups, wg: seen.append(wg))
    group = FakeBindGroup([be.field_buffer("h")])
    h = be.register_product("p", WgpuProductDesc(pipeline, [group]))
    assert be.dispatch(DispatchDesc(h, "h", 4, (3, 2)))
    assert fake.dispatches == [(pipeline, [group], (3, 2, 1))] and seen == [(3, 2, 1)]


@pytest.mark.parametrize("desc_kw, config, reason", [
    (dict(field="nope"), {}, "not registered"),
    (dict(chunk_count=0), {}, "chunk_count"),
    (dict(chunk_count=9), dict(max_chunks_per_dispatch=8), "max_chunks_per_dispatch"),
    (dict(workgroups=65_536), {}, "exceed the limit"),
    (dict(workgroups=100), dict(max_workgroups_x=99), "exceed the limit"),
    (dict(workgroups=(1, 0, 1)), {}, ">= 1"),
])
def test_dispatch_validation_refuses_without_submitting(fake, make_backend, desc_kw, config, reason):
    w = world_with()
    be = make_backend(fake, **config)
    be.register_field(field_mirror_desc(w, "h"))
    h = be.register_product("p", WgpuProductDesc(FakePipeline()))
    kw = dict(field="h", chunk_count=1, workgroups=1) | desc_kw
    assert not be.dispatch(DispatchDesc(h, **kw))
    assert reason in be.last_refusal and fake.submits == 0 and be.healthy


def test_dispatch_of_a_product_restricted_to_other_fields_is_refused(fake, make_backend):
    w = World((4, 4), {"a": np.float32, "b": np.float32})
    be = make_backend(fake)
    be.register_field(field_mirror_desc(w, "a"))
    be.register_field(field_mirror_desc(w, "b"))
    h = be.register_product("p", WgpuProductDesc(FakePipeline(), fields=("a",)))
    assert be.dispatch(DispatchDesc(h, "a", 1)) and not be.dispatch(DispatchDesc(h, "b", 1))


def test_a_wgpu_error_while_encoding_fails_closed(fake, make_backend):
    w = world_with()
    be = make_backend(fake)
    be.register_field(field_mirror_desc(w, "h"))
    h = be.register_product("p", WgpuProductDesc(FakePipeline()))
    fake.fail_next("finish", wgpu.GPUValidationError("a bind group is missing"))
    assert not be.dispatch(DispatchDesc(h, "h", 1))
    assert not be.healthy and not be.lost and "bind group is missing" in be.fault
    assert not be.dispatch(DispatchDesc(h, "h", 1)) and fake.submits == 0


# ---- readback ---------------------------------------------------------------------------

def test_readback_is_delivered_ready_exactly_once_from_poll_and_releases_its_staging(fake, make_backend, poll_until):
    be = make_backend(fake)
    p = Product(fake)
    h = be.register_product("p", p.desc)
    assert be.readback(summary(h, offset=8, size=16))
    assert fake.live_staging() == 1 and be.poll() == 0 and p.results == []
    fake.complete_work()
    poll_until(be, lambda: p.results)
    [(status, data, _)] = p.results
    assert status is ReadbackStatus.READY and data.tolist() == [2, 3, 4, 5]
    assert fake.live_staging() == 0 and be.inflight_readbacks == 0 and be.poll() == 0


def test_readbacks_past_the_count_budget_are_refused_and_the_freed_budget_is_reusable(fake, make_backend, poll_until):
    be = make_backend(fake, max_inflight_readbacks=2)
    p = Product(fake)
    h = be.register_product("p", p.desc)
    assert be.readback(summary(h, size=4)) and be.readback(summary(h, size=4))
    assert not be.readback(summary(h, size=4)) and "max_inflight_readbacks" in be.last_refusal
    assert fake.live_staging() == 2  # a refused request creates nothing
    fake.complete_work()
    poll_until(be, lambda: len(p.results) == 2)
    assert be.readback(summary(h, size=4)) and be.inflight_readbacks == 1
    fake.complete_work()
    poll_until(be, lambda: len(p.results) == 3)


def test_readbacks_past_the_byte_budget_are_refused_and_the_freed_budget_is_reusable(fake, make_backend, poll_until):
    be = make_backend(fake, max_inflight_readback_bytes=48)
    p = Product(fake)
    h = be.register_product("p", p.desc)
    assert be.readback(summary(h, size=32))
    assert not be.readback(summary(h, size=32)) and "max_inflight_readback_bytes" in be.last_refusal
    assert be.readback(summary(h, size=16)) and be.inflight_readback_bytes == 48
    assert not be.readback(summary(h, size=4))
    fake.complete_work()
    poll_until(be, lambda: len(p.results) == 2)
    assert be.inflight_readback_bytes == 0 and be.readback(summary(h, size=48))
    fake.complete_work()
    poll_until(be, lambda: len(p.results) == 3)


def test_a_failed_map_reports_failed_and_releases_its_staging_without_disabling(fake, make_backend, poll_until):
    be = make_backend(fake)
    p = Product(fake)
    h = be.register_product("p", p.desc)
    fake.fail_maps = True
    assert be.readback(summary(h))
    fake.complete_work()
    poll_until(be, lambda: p.results)
    assert p.results[0][0] is ReadbackStatus.FAILED and "injected map failure" in p.results[0][2]
    assert fake.live_staging() == 0 and be.inflight_readbacks == 0


def test_a_missing_map_promise_is_refused_and_releases_staging_and_budget_at_once(fake, make_backend):
    be = make_backend(fake)
    p = Product(fake)
    h = be.register_product("p", p.desc)
    fake.map_returns_none = True
    assert not be.readback(summary(h)) and "no promise" in be.last_refusal
    assert fake.live_staging() == 0 and be.inflight_readback_bytes == 0 and p.results == []


def test_a_staging_allocation_failure_refuses_and_fails_closed(fake, make_backend):
    be = make_backend(fake)
    p = Product(fake)
    h = be.register_product("p", p.desc)
    fake.fail_next("create_buffer", wgpu.GPUOutOfMemoryError("out of memory"))
    assert not be.readback(summary(h)) and not be.healthy and fake.live_staging() == 0


@pytest.mark.parametrize("desc_kw, reason", [
    (dict(policy=ReadbackPolicy.NONE), "NONE"),
    (dict(policy=ReadbackPolicy.FULL_FIELD), "allow_full_field"),
    (dict(policy=ReadbackPolicy.SELECTED_TILES), "tiles"),
    (dict(policy=ReadbackPolicy.SELECTED_PATH), "path"),
    (dict(size=6), "aligned"),
    (dict(offset=60, size=8), "outside"),
    (dict(field="h"), "only FULL_FIELD"),
])
def test_readback_requests_that_cannot_be_served_are_refused_without_staging(fake, make_backend, desc_kw, reason):
    be = make_backend(fake)
    p = Product(fake)
    h = be.register_product("p", p.desc)
    kw = dict(policy=ReadbackPolicy.SUMMARY) | desc_kw
    assert not be.readback(ReadbackDesc(h, **kw))
    assert reason in be.last_refusal and fake.live_staging() == 0


def test_selected_tiles_and_paths_are_served_when_given(fake, make_backend, poll_until):
    be = make_backend(fake)
    p = Product(fake)
    h = be.register_product("p", p.desc)
    assert be.readback(ReadbackDesc(h, ReadbackPolicy.SELECTED_TILES, size=8, tiles=((0, 1), (2, 3))))
    assert be.readback(ReadbackDesc(h, ReadbackPolicy.SELECTED_PATH, size=8, path=((0, 0), (0, 1))))
    fake.complete_work()
    poll_until(be, lambda: len(p.results) == 2)


def test_full_field_readback_reads_the_field_mirror_only_when_configured(fake, make_backend, poll_until):
    w = world_with()
    be = make_backend(fake, allow_full_field=True)
    be.register_field(field_mirror_desc(w, "h"))
    for d in coalesce_uploads(w, "h", w.keys()):
        be.upload(d)
    got = []
    src = fake.create_buffer(size=4, usage=U.COPY_SRC)
    h = be.register_product("dbg", WgpuProductDesc(FakePipeline(), readback_source=src,
                                                   callback=lambda r: got.append(r.array(np.float32).copy())))
    assert be.readback(ReadbackDesc(h, ReadbackPolicy.FULL_FIELD, field="h"))
    fake.complete_work()
    poll_until(be, lambda: got)
    assert np.array_equal(got[0], w.mirror("h").ravel())


def test_a_result_is_current_only_while_its_generation_and_chunk_versions_are(fake, make_backend, poll_until):
    w = world_with()
    be = make_backend(fake)
    verdicts = []
    src = fake.create_buffer(size=16, usage=U.COPY_SRC)
    h = be.register_product("p", WgpuProductDesc(FakePipeline(), readback_source=src,
                                                 callback=lambda r: verdicts.append(r.is_current(be, w))))

    def read_and_wait(change=lambda: None) -> bool:
        keys = (10, 11)
        be.readback(summary(h, chunk_keys=keys, versions=tuple(w.version(k) for k in keys)))
        change()  # what happens while the readback is in flight
        fake.complete_work()
        n = len(verdicts)
        poll_until(be, lambda: len(verdicts) > n)
        return verdicts[-1]

    assert read_and_wait() is True
    assert read_and_wait(lambda: w.set_tile(11, "h", (0, 0), 9.0)) is False
    assert read_and_wait(lambda: w.write(12, "h", 9.0)) is True  # a chunk it does not cover
    assert read_and_wait(lambda: be.unregister_product(h)) is False


def test_the_callback_data_is_unusable_after_the_callback(fake, make_backend, poll_until):
    be = make_backend(fake)
    kept = []
    src = fake.create_buffer(size=16, usage=U.COPY_SRC)
    h = be.register_product("p", WgpuProductDesc(FakePipeline(), readback_source=src, callback=kept.append))
    be.readback(summary(h))
    fake.complete_work()
    poll_until(be, lambda: kept)
    with pytest.raises(ValueError):
        bytes(kept[0].data)  # released: "operation forbidden on released memoryview object"


def test_a_callback_keeping_an_array_over_its_data_keeps_the_staging_mapped_until_the_array_dies(
        fake, make_backend, poll_until):
    be = make_backend(fake)
    kept = []
    src = fake.create_buffer(size=16, usage=U.COPY_SRC)
    h = be.register_product("p", WgpuProductDesc(FakePipeline(), readback_source=src,
                                                 callback=lambda r: kept.append(r.array(np.uint32))))
    be.readback(summary(h))
    fake.complete_work()
    poll_until(be, lambda: kept)
    assert fake.live_staging() == 1 and kept[0].tolist() == [0, 0, 0, 0]  # still mapped, still valid
    kept.clear()
    be.poll()
    assert fake.live_staging() == 0 and be.inflight_readbacks == 0


def test_a_raising_callback_does_not_leak_staging_and_its_error_surfaces_from_poll(fake, make_backend, poll_until):
    be = make_backend(fake)
    src = fake.create_buffer(size=16, usage=U.COPY_SRC)

    def boom(result):
        raise KeyError("engine bug")

    h = be.register_product("p", WgpuProductDesc(FakePipeline(), readback_source=src, callback=boom))
    be.readback(summary(h))
    fake.complete_work()
    with pytest.raises(KeyError, match="engine bug"):
        poll_until(be, lambda: False, timeout=2)
    assert fake.live_staging() == 0 and be.healthy


def test_unregistering_a_product_still_delivers_its_accepted_readbacks(fake, make_backend, poll_until):
    be = make_backend(fake)
    p = Product(fake)
    h = be.register_product("p", p.desc)
    be.readback(summary(h))
    be.unregister_product(h)
    fake.complete_work()
    poll_until(be, lambda: p.results)
    assert p.results[0][0] is ReadbackStatus.READY and not be.is_live(h)


# ---- device errors, loss, close --------------------------------------------------------

def test_device_loss_during_a_pending_readback_fails_it_and_disables_submissions(fake, make_backend, poll_until):
    w = world_with()
    be = make_backend(fake)
    be.register_field(field_mirror_desc(w, "h"))
    p = Product(fake)
    h = be.register_product("p", p.desc)
    assert be.readback(summary(h))
    fake.lose()  # logs "DEVICE LOST!" on the wgpu logger; the pending map never settles
    poll_until(be, lambda: p.results)
    assert p.results[0][0] is ReadbackStatus.FAILED and be.lost
    assert fake.live_staging() == 0 and be.inflight_readbacks == 0
    assert not be.upload(upload_desc(w, "h", 10))
    assert not be.dispatch(DispatchDesc(h, "h", 1)) and not be.readback(summary(h))
    assert not be.capabilities().usable


def test_a_silent_loss_is_found_by_probing_a_stalled_readback(fake, make_backend, poll_until):
    be = make_backend(fake, stall_probe_s=0.02)
    p = Product(fake)
    h = be.register_product("p", p.desc)
    be.readback(summary(h))
    fake.lose(log=False)
    poll_until(be, lambda: p.results)
    assert p.results[0][0] is ReadbackStatus.FAILED and "stalled" in p.results[0][2] and be.lost


def test_loss_raised_by_a_call_fails_closed_without_ever_submitting_on_the_lost_device(fake, make_backend):
    w = world_with()
    be = make_backend(fake)
    be.register_field(field_mirror_desc(w, "h"))
    h = be.register_product("p", WgpuProductDesc(FakePipeline()))
    fake.lose(log=False)
    assert not be.dispatch(DispatchDesc(h, "h", 1))  # finish() raised; submit would have aborted
    assert be.lost and "Parent device is lost" in be.fault


def test_a_logged_loss_disables_only_the_backend_whose_device_is_lost(make_backend):
    lost_dev, live_dev = FakeDevice(), FakeDevice()
    lost_be, live_be = make_backend(lost_dev), make_backend(live_dev)
    lost_dev.lose()
    lost_be.poll()
    live_be.poll()
    assert lost_be.lost and live_be.healthy


def test_notify_device_error_from_another_thread_fails_pending_readbacks_and_refuses_work(
        fake, make_backend, poll_until):
    w = world_with()
    be = make_backend(fake)
    be.register_field(field_mirror_desc(w, "h"))
    p = Product(fake)
    h = be.register_product("p", p.desc)
    be.readback(summary(h))
    t = threading.Thread(target=be.notify_device_error, args=("validation error seen by the app",))
    t.start()
    t.join()
    fake.complete_work()  # the bytes arrive after the error: the error decided first
    poll_until(be, lambda: p.results and be.inflight_readbacks == 0)
    assert p.results == [(ReadbackStatus.FAILED, None, "validation error seen by the app")]
    assert not be.lost and not be.dispatch(DispatchDesc(h, "h", 1)) and fake.live_staging() == 0


def race_completion_against_device_error(make_backend, poll_until) -> list:
    """One readback whose bytes arrive (waiter thread) while another thread reports an error."""
    fake = FakeDevice()
    be = make_backend(fake)
    p = Product(fake)
    be.readback(summary(be.register_product("p", p.desc)))
    go = threading.Barrier(2)
    threads = [threading.Thread(target=lambda: (go.wait(), fake.complete_work())),
               threading.Thread(target=lambda: (go.wait(), be.notify_device_error("race")))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    poll_until(be, lambda: p.results and be.inflight_readbacks == 0)
    assert fake.live_staging() == 0
    return p.results


def test_a_completion_racing_a_device_error_is_decided_once(make_backend, poll_until):
    for _ in range(25):
        results = race_completion_against_device_error(make_backend, poll_until)
        assert len(results) == 1 and results[0][0] in (ReadbackStatus.READY, ReadbackStatus.FAILED)


def test_closing_first_fails_pending_readbacks_and_frees_their_staging_once_their_copies_finish(
        fake, make_backend):
    be = make_backend(fake)
    p = Product(fake)
    h = be.register_product("p", p.desc)
    be.readback(summary(h))
    be.readback(summary(h))
    be.close()
    assert [r[0] for r in p.results] == [ReadbackStatus.FAILED] * 2
    assert be.live_staging_buffers == 0 and be.inflight_readbacks == 0 and be.poll() == 0
    assert not be.readback(summary(h)) and "closed" in be.last_refusal
    # Their copies were still "running": released, not destroyed, and freed when they finish.
    assert fake.live_staging() == 2 and not any(b.destroyed for b in fake.live_buffers(U.MAP_READ))
    fake.complete_work()
    assert fake.live_staging() == 0


def test_closing_destroys_the_staging_of_readbacks_whose_copies_are_over(fake, make_backend, poll_until):
    be = make_backend(fake)
    p = Product(fake)
    h = be.register_product("p", p.desc)
    be.readback(summary(h))
    fake.complete_work()
    time.sleep(0.05)  # the waiter sees the map settle; nobody polls
    be.close()
    assert p.results[0][0] is ReadbackStatus.FAILED and fake.live_staging() == 0 and fake.destroyed_buffers >= 1


def test_a_readback_failed_by_a_device_error_keeps_its_staging_until_its_copy_is_over(
        fake, make_backend, poll_until):
    be = make_backend(fake)
    p = Product(fake)
    h = be.register_product("p", p.desc)
    be.readback(summary(h))
    be.notify_device_error("reported")
    be.poll()
    assert p.results[0][0] is ReadbackStatus.FAILED
    assert fake.live_staging() == 1 and be.inflight_readbacks == 1  # the GPU may still copy into it
    fake.complete_work()
    poll_until(be, lambda: be.inflight_readbacks == 0)
    assert fake.live_staging() == 0 and len(p.results) == 1


def test_close_stops_the_readback_waiter_thread(fake, make_backend, poll_until):
    be = make_backend(fake)
    p = Product(fake)
    h = be.register_product("p", p.desc)
    be.readback(summary(h))
    waiter = be._ring.waiter
    assert waiter.alive
    be.close()
    assert not waiter.alive


def test_a_backend_made_on_a_lost_device_is_disabled_from_the_start(make_backend):
    lost = FakeDevice()
    lost.lose(log=False)
    be = make_backend(lost, warm_up=True)
    assert be.lost and not be.capabilities().usable and lost.submits == 0


def test_a_disabled_configuration_creates_nothing_and_refuses_everything(fake, make_backend):
    w = world_with()
    be = make_backend(fake, enabled=False)
    assert not be.register_field(field_mirror_desc(w, "h"))
    assert be.register_product("p", WgpuProductDesc(FakePipeline())) is None
    assert not be.capabilities().usable and fake.created == 0 and "configuration" in be.last_refusal


def test_capabilities_report_the_device_and_config_limits_while_healthy(fake, make_backend):
    caps = make_backend(fake, max_workgroups_x=1000).capabilities()
    assert caps.usable and caps.max_workgroups_x == 1000 and caps.upload_alignment == 4
    assert caps.max_buffer_bytes == fake.limits["max-buffer-size"]


def test_the_backends_usage_flag_numbers_are_wgpus():
    assert (wb._MAP_READ, wb._COPY_SRC, wb._COPY_DST, wb._STORAGE) == (
        U.MAP_READ, U.COPY_SRC, U.COPY_DST, U.STORAGE)
    assert ring._MAP_MODE_READ == wgpu.MapMode.READ
    assert (ring._MAP_READ, ring._COPY_DST) == (U.MAP_READ, U.COPY_DST)


def test_backend_warnings_go_to_the_engine_plugin_logger(fake, make_backend, caplog):
    be = make_backend(fake)
    with caplog.at_level(logging.WARNING, logger="engine_plugin.gpu"):
        be.notify_device_error("boom")
    assert any("boom" in r.getMessage() for r in caplog.records)


def test_the_wgpu_backend_implements_the_whole_resource_boundary_the_engine_calls(gpu):
    """The engine reaches a resource backend only through ResourceBackend's members: the real
    one implements them all, and a backend missing one is not taken for a resource backend."""
    from engine_plugin.gpu import WgpuBackend
    from engine_plugin.gpu.backend import GpuBackend, NoGpuBackend, ResourceBackend

    backend = WgpuBackend(gpu)
    try:
        assert isinstance(backend, ResourceBackend) and isinstance(backend, GpuBackend)
    finally:
        backend.close()
    assert isinstance(NoGpuBackend(), GpuBackend) and not isinstance(NoGpuBackend(), ResourceBackend)
