"""WgpuBackend on the real device (lavapipe in CI): uploads, a real compute dispatch, asynchronous
readback through poll(), generations, budgets, device errors, close, staging accounting.

Device loss by ``device.destroy()`` runs in subprocesses: test_gpu_device_loss.py.
"""

from __future__ import annotations

import dataclasses
import gc
import threading
import time

import numpy as np
import pytest
import wgpu

from engine_plugin.errors import StaleSpanError
from engine_plugin.gpu import (
    DispatchDesc,
    ReadbackDesc,
    ReadbackPolicy,
    ReadbackStatus,
    WgpuProductDesc,
    coalesce_uploads,
    field_mirror_desc,
    upload_desc,
)
from engine_plugin.world import World

U = wgpu.BufferUsage
CHUNK = (32, 32)

SUM_WGSL = """
@group(0) @binding(0) var<storage, read> h: array<f32>;
@group(0) @binding(1) var<storage, read_write> sums: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let slot = gid.x;
    if (slot >= arrayLength(&sums)) { return; }
    var s = 0.0;
    for (var i = 0u; i < 1024u; i++) { s += h[slot * 1024u + i]; }
    sums[slot] = s;
}
"""


def buffer_count() -> int:
    """Live GPUBuffer objects. Garbage from earlier tests (reference cycles) is collected
    first: a collection landing between two counts otherwise moves them (a flaky 105 != 109)."""
    gc.collect()
    return wgpu.diagnostics.object_counts.get_dict()["Buffer"]["count"]


@pytest.fixture(scope="module")
def sum_pipeline(ctx):
    module = ctx.device.create_shader_module(code=SUM_WGSL)
    return ctx.device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})


class SumProduct:
    """Per-slot sums of field ``h``: a real pipeline, bind group and COPY_SRC output buffer."""

    def __init__(self, ctx, backend, pipeline, slots: int):
        self.out = ctx.device.create_buffer(size=slots * 4, usage=U.STORAGE | U.COPY_SRC)
        group = ctx.device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=[
            {"binding": 0, "resource": {"buffer": backend.field_buffer("h")}},
            {"binding": 1, "resource": {"buffer": self.out}},
        ])
        self.results: list = []
        self.inside_readback = False
        self.desc = WgpuProductDesc(pipeline, [group], readback_source=self.out, callback=self.record, fields=("h",))

    def record(self, result) -> None:
        assert not self.inside_readback, "a callback ran inside readback(), not from poll()"
        data = result.array(np.float32).copy() if result.ok else None
        self.results.append((result.status, data, result.message))


def summing_world(max_chunks: int = 16, n: int = 10) -> World:
    w = World(CHUNK, {"h": np.float32}, max_chunks=max_chunks)
    rng = np.random.default_rng(7)
    for k in range(n):
        w.add(100 + k, {"h": rng.integers(0, 100, CHUNK).astype(np.float32)})  # exact sums in f32
    return w


def upload_dirty(world: World, backend, tag: str = "h") -> None:
    for desc in coalesce_uploads(world, tag, [k for k, _ in world.take_dirty(tag)]):
        assert backend.upload(desc), backend.last_refusal


@pytest.fixture
def summing(ctx, make_backend, sum_pipeline):
    """(world, backend, product, handle) with every chunk uploaded."""
    w = summing_world()
    be = make_backend(ctx)
    assert be.register_field(field_mirror_desc(w, "h"))
    upload_dirty(w, be)
    p = SumProduct(ctx, be, sum_pipeline, w.max_chunks)
    h = be.register_product("sum", p.desc)
    assert h is not None, be.last_refusal
    return w, be, p, h


def cpu_sums(world: World) -> np.ndarray:
    return np.array([world.read(k, "h").sum(dtype=np.float64) for k in world.keys()], np.float32)


def test_uploads_read_back_byte_exact_for_every_field_format(ctx, make_backend, poll_until):
    w = World((8, 8), {"f": np.float32, "u": np.uint8, "i": np.int64, "b": bool}, max_chunks=8)
    rng = np.random.default_rng(1)
    for k in range(6):
        w.add(k, {"f": rng.standard_normal((8, 8)), "u": rng.integers(0, 256, (8, 8)),
                  "i": rng.integers(-2**62, 2**62, (8, 8)), "b": rng.integers(0, 2, (8, 8))})
    w.evict(2)
    w.write(4, "f", 9.5)
    be = make_backend(ctx, allow_full_field=True)
    src = ctx.device.create_buffer(size=4, usage=U.COPY_SRC)
    got: dict[str, bytes] = {}
    h = be.register_product("dbg", WgpuProductDesc(
        ctx.device.create_compute_pipeline(layout="auto", compute={"module": ctx.device.create_shader_module(
            code="@compute @workgroup_size(1) fn main() {}"), "entry_point": "main"}),
        readback_source=src, callback=lambda r: got.__setitem__(r.desc.field, bytes(r.data))))
    for spec in w.fields:
        assert be.register_field(field_mirror_desc(w, spec.name))
        upload_dirty(w, be, spec.name)
        assert be.readback(ReadbackDesc(h, ReadbackPolicy.FULL_FIELD, field=spec.name)), be.last_refusal
    poll_until(be, lambda: len(got) == 4)
    for spec in w.fields:
        gpu = np.frombuffer(got[spec.name], spec.dtype).reshape(w.mirror(spec.name).shape)
        for k in w.keys():
            assert gpu[w.slot(k)].tobytes() == w.read(k, spec.name).tobytes()


def test_a_compute_dispatch_is_read_back_asynchronously_and_becomes_ready_through_poll(summing, poll_until):
    w, be, p, h = summing
    assert be.dispatch(DispatchDesc(h, "h", len(w), 1))
    p.inside_readback = True
    t0 = time.perf_counter()
    assert be.readback(ReadbackDesc(h, ReadbackPolicy.SUMMARY, size=len(w) * 4, chunk_keys=tuple(w.keys())))
    request_s = time.perf_counter() - t0
    p.inside_readback = False
    assert p.results == []  # nothing is delivered except by poll()
    longest_poll = poll_until(be, lambda: p.results)
    [(status, sums, _)] = p.results
    assert status is ReadbackStatus.READY and np.array_equal(sums, cpu_sums(w))
    # The frame path never waits for the GPU: polls take microseconds (generous bound for CI).
    assert longest_poll < 0.05 and request_s < 0.5
    assert be.live_staging_buffers == 0


def test_a_mutation_after_upload_makes_the_span_stale_and_a_fresh_upload_is_read_back(summing, poll_until):
    w, be, p, h = summing
    span = upload_desc(w, "h", 103)
    w.write(103, "h", 1.0)
    with pytest.raises(StaleSpanError):
        be.upload(span)
    upload_dirty(w, be)
    be.dispatch(DispatchDesc(h, "h", len(w), 1))
    be.readback(ReadbackDesc(h, ReadbackPolicy.SUMMARY, size=len(w) * 4))
    poll_until(be, lambda: p.results)
    assert p.results[0][1][3] == 1024.0 and np.array_equal(p.results[0][1], cpu_sums(w))


def test_a_stale_handle_is_refused_after_unregister_and_re_registration(summing):
    w, be, p, h = summing
    assert be.unregister_product(h)
    assert not be.dispatch(DispatchDesc(h, "h", len(w), 1)) and "stale" in be.last_refusal
    again = be.register_product("sum", p.desc)
    assert again.generation != h.generation
    assert not be.readback(ReadbackDesc(h, ReadbackPolicy.SUMMARY)) and be.dispatch(DispatchDesc(again, "h", 1))


def test_overlapping_readbacks_past_count_and_byte_budgets_are_refused_and_freed_budget_is_reused(
        ctx, make_backend, sum_pipeline, poll_until):
    w = summing_world()
    be = make_backend(ctx, max_inflight_readbacks=3, max_inflight_readback_bytes=40)
    be.register_field(field_mirror_desc(w, "h"))
    p = SumProduct(ctx, be, sum_pipeline, w.max_chunks)
    h = be.register_product("sum", p.desc)
    rb = lambda n: be.readback(ReadbackDesc(h, ReadbackPolicy.SUMMARY, size=n))  # noqa: E731
    assert rb(16) and rb(16)
    assert not rb(16) and "max_inflight_readback_bytes" in be.last_refusal
    assert rb(8) and be.inflight_readback_bytes == 40
    assert not rb(4) and "max_inflight_readbacks" in be.last_refusal
    poll_until(be, lambda: len(p.results) == 3)
    assert be.inflight_readbacks == 0 and rb(40)
    poll_until(be, lambda: len(p.results) == 4)
    assert [r[0] for r in p.results] == [ReadbackStatus.READY] * 4


def test_many_readbacks_leave_no_staging_buffer_behind(summing, poll_until):
    w, be, p, h = summing
    before = buffer_count()
    for _ in range(12):
        assert be.readback(ReadbackDesc(h, ReadbackPolicy.SUMMARY, size=16))
        poll_until(be, lambda: be.inflight_readbacks == 0)
    assert len(p.results) == 12 and be.live_staging_buffers == 0
    assert buffer_count() == before  # wgpu's own count of live GPUBuffer objects


def test_notify_device_error_from_another_thread_fails_a_pending_readback(summing, poll_until):
    w, be, p, h = summing
    assert be.readback(ReadbackDesc(h, ReadbackPolicy.SUMMARY, size=16))
    t = threading.Thread(target=be.notify_device_error, args=("uncaptured validation error",))
    t.start()
    t.join()
    poll_until(be, lambda: p.results and be.inflight_readbacks == 0)  # staging goes once its copy is over
    assert p.results == [(ReadbackStatus.FAILED, None, "uncaptured validation error")]
    assert not be.dispatch(DispatchDesc(h, "h", 1)) and not be.capabilities().usable
    assert be.live_staging_buffers == 0


def test_closing_first_fails_pending_readbacks_and_destroys_their_staging(summing):
    w, be, p, h = summing
    before = buffer_count()
    be.readback(ReadbackDesc(h, ReadbackPolicy.SUMMARY, size=16))
    be.readback(ReadbackDesc(h, ReadbackPolicy.SUMMARY, size=16))
    be.close()
    assert [r[0] for r in p.results] == [ReadbackStatus.FAILED] * 2
    assert be.live_staging_buffers == 0 and buffer_count() <= before  # both staging buffers are gone
    time.sleep(0.05)  # late map completions after close must touch nothing
    assert be.poll() == 0


def test_a_callback_keeping_its_array_keeps_the_mapped_bytes_valid_until_it_is_dropped(
        summing, poll_until):
    w, be, p, h = summing
    be.dispatch(DispatchDesc(h, "h", len(w), 1))
    kept = []
    be.unregister_product(h)
    h2 = be.register_product("keep", WgpuProductDesc(p.desc.pipeline, p.desc.bind_groups, readback_source=p.out,
                                                     callback=lambda r: kept.append(r.array(np.float32))))
    be.readback(ReadbackDesc(h2, ReadbackPolicy.SUMMARY, size=len(w) * 4))
    poll_until(be, lambda: kept)
    assert be.live_staging_buffers == 1 and np.array_equal(kept[0], cpu_sums(w))
    kept.clear()
    be.poll()
    assert be.live_staging_buffers == 0


def test_uploads_and_readbacks_of_a_healthy_backend_are_unaffected_by_another_backends_error(
        summing, ctx, make_backend, poll_until):
    w, be, p, h = summing
    other = make_backend(ctx)
    other.notify_device_error("only mine")
    assert be.healthy and be.dispatch(DispatchDesc(h, "h", len(w), 1))
    be.readback(ReadbackDesc(h, ReadbackPolicy.SUMMARY, size=16))
    poll_until(be, lambda: p.results)
    assert p.results[0][0] is ReadbackStatus.READY


def _mirror_slots(be, name: str, slots: int) -> np.ndarray:
    """The mirror read back from the GPU: one row of 16 f32 a slot (slot padding cut)."""
    from engine_plugin.runtime.output import read_words

    words = np.frombuffer(read_words(be.field_buffer(name)), np.float32)
    return words.reshape(slots, -1)[:, :16]


def _numbered_world(ctx, make_backend, chunks: int):
    """A world of ``chunks`` 4x4 chunks, chunk k all k + 1, and a backend mirroring it."""
    w = World((4, 4), {"h": np.float32}, max_chunks=chunks)
    for k in range(chunks):
        w.add(k, {"h": np.full((4, 4), k + 1, np.float32)})
    be = make_backend(ctx)
    assert be.register_field(field_mirror_desc(w, "h"))
    return w, be


def test_upload_spans_writes_each_span_and_stops_at_the_first_refused_one(ctx, make_backend):
    from engine_plugin.gpu.backend import upload_spans

    w, be = _numbered_world(ctx, make_backend, 8)
    assert not _mirror_slots(be, "h", 8).any()  # a mirror starts as zeros
    good = [upload_desc(w, "h", k) for k in (1, 3, 6)]
    bad = dataclasses.replace(good[1], dst_offset=2)  # misaligned: refused
    assert upload_spans(be, [good[0], bad, good[2]]) == 1
    assert "aligned" in be.last_refusal
    got = _mirror_slots(be, "h", 8)
    assert (got[w.slot(1)] == 2).all() and not got[w.slot(6)].any()  # nothing after the refusal
    assert be.stats["uploads"] == 1 and be.stats["upload_bytes"] == 64
    assert upload_spans(be, good) == 3
    got = _mirror_slots(be, "h", 8)
    for k in (1, 3, 6):
        assert (got[w.slot(k)] == k + 1).all()
    assert be.stats["uploads"] == 4


def test_upload_spans_raise_on_a_stale_span_after_writing_the_ones_before(ctx, make_backend):
    from engine_plugin.gpu.backend import upload_spans

    w, be = _numbered_world(ctx, make_backend, 4)
    spans = [upload_desc(w, "h", k) for k in range(4)]
    w.write(2, "h", 7.0)  # span 2 is stale now
    with pytest.raises(StaleSpanError, match="chunk 2"):
        upload_spans(be, spans)
    got = _mirror_slots(be, "h", 4)
    assert (got[w.slot(0)] == 1).all() and (got[w.slot(1)] == 2).all()
    assert not got[w.slot(2)].any() and not got[w.slot(3)].any()
    assert be.stats["uploads"] == 2


def test_upload_spans_honour_an_upload_replaced_on_the_backend(ctx, make_backend):
    from engine_plugin.gpu.backend import upload_spans

    w = World((4, 4), {"h": np.float32}, max_chunks=4)
    for k in range(4):
        w.add(k)
    be = make_backend(ctx)
    assert be.register_field(field_mirror_desc(w, "h"))
    seen = []
    be.upload = lambda desc: seen.append(desc.chunk_key) or desc.chunk_key != 2  # refuses chunk 2
    assert upload_spans(be, [upload_desc(w, "h", k) for k in range(4)]) == 2
    assert seen == [0, 1, 2]
