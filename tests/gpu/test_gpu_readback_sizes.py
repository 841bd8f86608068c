"""Readback requests at the edges (review helper 189): a size whose staging size class is past
the device's largest buffer, numpy integers as offset and size, a policy that is no
ReadbackPolicy."""

from __future__ import annotations

import time

import numpy as np
import pytest
import wgpu

from engine_plugin.device.context import get_context
from engine_plugin.gpu import ReadbackDesc, ReadbackPolicy, WgpuBackend, WgpuProductDesc
from engine_plugin.gpu.ring import ReadbackRing


class _Device:
    """What create_staging asks of a device: its limits, and a buffer made (not allocated: a
    2 GiB staging buffer is what is being avoided)."""

    def __init__(self, max_buffer: int):
        self.limits = {"max-buffer-size": max_buffer}
        self.made: list[int] = []

    def create_buffer(self, size, usage, label=""):
        if size > self.limits["max-buffer-size"]:
            raise RuntimeError(f"buffer of {size} B past max-buffer-size")
        self.made.append(size)
        return type("Buffer", (), {"size": size, "map_state": "unmapped", "destroy": lambda self: None})()


def test_a_staging_size_class_past_the_device_limit_is_the_exact_size_and_not_pooled():
    # lavapipe's max-buffer-size is 2^31 - 1: a 1 GiB + 4 KiB readback's class (2 GiB) failed,
    # and the failure disabled the backend.
    ring = ReadbackRing(max_count=8, max_bytes=8 << 30, slice_s=0.001)
    device = _Device((1 << 31) - 1)
    size = (1 << 30) + 4096
    staging = ring.create_staging(device, size, 0)
    assert device.made == [size] and staging.size == size
    ring.destroy_staging(staging)
    assert ring.pooled == 0  # not a size class: destroyed, never handed out for another size
    small = ring.create_staging(device, 1000, 0)
    assert small.size == 1024  # below the limit: classes and pooling as before


@pytest.mark.gpu
def test_numpy_integers_serve_as_offset_and_size_and_odd_types_are_refused():
    ctx = get_context()
    src = ctx.device.create_buffer(size=64, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
    ctx.queue.write_buffer(src, 0, np.arange(16, dtype=np.uint32))
    got: list = []
    with WgpuBackend(ctx) as be:  # closed on the way out
        handle = be.register_product("p", WgpuProductDesc(pipeline=object(), readback_source=src, callback=lambda r: got.append(r.array(np.uint32).tolist())))
        assert be.readback(ReadbackDesc(handle, ReadbackPolicy.SUMMARY, offset=np.int64(8), size=np.int64(2) * 4)), be.last_refusal
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            be.poll()
            time.sleep(0.005)
        assert got == [[2, 3]]
        assert not be.readback(ReadbackDesc(handle, ReadbackPolicy.SUMMARY, size=8.0))  # type: ignore[arg-type]
        assert "whole numbers of bytes" in be.last_refusal
        assert not be.readback(ReadbackDesc(handle, "summary"))  # type: ignore[arg-type]
        assert "must be a ReadbackPolicy" in be.last_refusal
        assert be.healthy


@pytest.mark.gpu
def test_a_span_of_another_world_laid_out_otherwise_is_refused():
    # Review helper 189: a span from another world with the same field tag (u8 2x2 against the
    # registered f32 4x4 mirror) was written mid-slot: chunk 0 read [1, nan, 1, 1] on the GPU.
    from engine_plugin.gpu import coalesce_uploads, field_mirror_desc, upload_desc
    from engine_plugin.gpu.descriptors import take_dirty_changes
    from engine_plugin.world import World

    ctx = get_context()
    a = World((4, 4), {"h": np.float32}, max_chunks=4)
    b = World((2, 2), {"h": np.uint8}, max_chunks=4)
    with WgpuBackend(ctx) as be:  # closed on the way out
        assert be.register_field(field_mirror_desc(a, "h"))
        a.add(0, {"h": np.full((4, 4), 1.0, np.float32)})
        assert be.upload(upload_desc(a, "h", 0))
        b.add(7)
        b.add(8, {"h": np.full((2, 2), 255, np.uint8)})
        assert not be.upload(upload_desc(b, "h", 8))
        assert "U8, 4 B and 4 tiles a chunk" in be.last_refusal and "F32, 64 B and 16 tiles a chunk" in be.last_refusal, be.last_refusal
        assert be.upload_spans(take_dirty_changes(b, "h").spans) == 0  # a whole frame's span list too
        got = np.frombuffer(ctx.queue.read_buffer(be.field_buffer("h")), np.float32)[:16]
        np.testing.assert_array_equal(got, np.ones(16, np.float32))  # chunk 0 as world a holds it
        assert be.upload_spans(coalesce_uploads(a, "h", [0])) == 1 and be.healthy  # its own world still uploads


@pytest.mark.gpu
def test_odd_inputs_are_refusals_not_raw_errors():
    # Review helper 189: raw ValueError / "engine_plugin bug" / raw TypeError on these.
    import dataclasses

    from engine_plugin import abi
    from engine_plugin.errors import DispatchError
    from engine_plugin.gpu import field_mirror_desc, upload_desc
    from engine_plugin.world import World

    ctx = get_context()
    six = ctx.device.create_buffer(size=6, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    with pytest.raises(DispatchError, match="not whole 4-byte words"):
        abi.read(six)
    w = World((4, 4), {"f": np.float32}, max_chunks=4)
    w.add(0)
    with WgpuBackend(ctx) as be:  # closed on the way out
        assert be.register_field(field_mirror_desc(w, "f"))
        assert not be.upload(dataclasses.replace(upload_desc(w, "f", 0), nbytes=0))
        assert "an empty span" in be.last_refusal and be.healthy
        assert be.register_product(["not", "hashable"], WgpuProductDesc(pipeline=object())) is None
        assert "not hashable" in be.last_refusal


@pytest.mark.gpu
def test_the_backend_keeps_no_world_alive_and_takes_test_doubles():
    # Review helper 191: the layout check held the last world that uploaded (its arrays stayed
    # alive with the backend); a MagicMock's invented map_state and _device read as "still
    # mapped" and "another device".
    import gc
    import weakref
    from unittest.mock import MagicMock

    from engine_plugin.device.destroyed import unusable
    from engine_plugin.gpu import field_mirror_desc, upload_desc
    from engine_plugin.world import World

    ctx = get_context()
    w = World((4, 4), {"h": np.float32}, max_chunks=4)
    w.add(0)
    with WgpuBackend(ctx) as be:  # closed on the way out
        assert be.register_field(field_mirror_desc(w, "h"))
        assert be.upload(upload_desc(w, "h", 0))
        gone = weakref.ref(w)
        del w
        gc.collect()
        assert gone() is None
        assert unusable(MagicMock()) is None
        assert be.register_product("mocked", WgpuProductDesc(pipeline=MagicMock())) is not None, be.last_refusal


@pytest.mark.gpu
@pytest.mark.parametrize("forge", ["first_slot", "dst_offset", "nbytes"])
def test_a_hand_made_span_whose_slots_are_not_its_chunks_is_refused(forge):
    # Review helper 189: an UploadDesc whose first_slot is another chunk's slot passed the
    # version check (its chunk is current) and sent the other slot's bytes.
    import dataclasses

    from engine_plugin.gpu import field_mirror_desc, upload_desc
    from engine_plugin.world import World

    ctx = get_context()
    w = World((2, 2), {"h": np.float32}, max_chunks=4)
    with WgpuBackend(ctx) as be:  # closed on the way out
        assert be.register_field(field_mirror_desc(w, "h"))
        w.add(10, {"h": np.full((2, 2), 1.0, np.float32)})
        w.add(11, {"h": np.full((2, 2), 2.0, np.float32)})
        assert be.upload(upload_desc(w, "h", 10)) and be.upload(upload_desc(w, "h", 11))
        with w.edit(11) as f:
            f["h"][...] = 7.0
        desc = upload_desc(w, "h", 10)
        change = {"first_slot": w.slot(11), "dst_offset": w.slot(11) * 16, "nbytes": 32}[forge]
        assert not be.upload(dataclasses.replace(desc, **{forge: change}))
        assert "hand-made UploadDesc" in be.last_refusal, be.last_refusal
        got = np.frombuffer(ctx.queue.read_buffer(be.field_buffer("h")), np.float32)[:8]
        np.testing.assert_array_equal(got, [1, 1, 1, 1, 2, 2, 2, 2])  # nothing of the forged span landed
        assert be.upload(desc) and be.upload(upload_desc(w, "h", 11)) and be.healthy  # real spans still go
        got = np.frombuffer(ctx.queue.read_buffer(be.field_buffer("h")), np.float32)[:8]
        np.testing.assert_array_equal(got, [1, 1, 1, 1, 7, 7, 7, 7])


@pytest.mark.gpu
def test_a_span_of_a_chunk_evicted_and_added_again_elsewhere_is_stale_not_hand_made():
    # Review helper 198: the hand-made span check refused it ("a hand-made UploadDesc?")
    # where upload() promises a StaleSpanError.
    from engine_plugin.errors import StaleSpanError
    from engine_plugin.gpu import field_mirror_desc, upload_desc
    from engine_plugin.world import World

    ctx = get_context()
    w = World((2, 2), {"h": np.float32}, max_chunks=4)
    with WgpuBackend(ctx) as be:  # closed on the way out
        assert be.register_field(field_mirror_desc(w, "h"))
        w.add(10)
        desc = upload_desc(w, "h", 10)
        w.evict(10)
        w.add(11)
        w.add(10)  # back, in another slot
        assert w.slot(10) != desc.first_slot
        with pytest.raises(StaleSpanError, match="chunk 10"):
            be.upload(desc)
        assert be.healthy
