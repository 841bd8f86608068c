"""Readback callbacks that misbehave (review helper 183): a close() from inside one, an
interrupt out of one, arrays kept past close(). Each readback is released exactly once, its
budget share comes back, and no staging buffer is destroyed twice or mapped for good."""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest
import wgpu

from engine_plugin.gpu import ReadbackDesc, ReadbackPolicy, WgpuBackend, WgpuBackendConfig, WgpuProductDesc

pytestmark = pytest.mark.gpu
U = wgpu.BufferUsage


def _backend(gpu, callback, reuse=False):
    dev = gpu.device
    pipe = dev.create_compute_pipeline(
        layout="auto", compute={"module": dev.create_shader_module(code="@compute @workgroup_size(1) fn main() {}"), "entry_point": "main"}
    )
    be = WgpuBackend(gpu, WgpuBackendConfig(max_inflight_readbacks=2, max_inflight_readback_bytes=64, reuse_staging=reuse))
    src = dev.create_buffer(size=16, usage=U.COPY_SRC | U.COPY_DST)
    dev.queue.write_buffer(src, 0, np.arange(4, dtype=np.uint32).tobytes())
    handle = be.register_product("p", WgpuProductDesc(pipe, readback_source=src, callback=callback))
    return be, handle


def _drain(be, seconds=5.0):
    deadline = time.perf_counter() + seconds
    while be.inflight_readbacks and time.perf_counter() < deadline:
        try:
            be.poll()
        except KeyboardInterrupt:
            pass
        time.sleep(0.002)


@pytest.mark.parametrize("reuse", [False, True])
def test_a_close_from_inside_a_callback_releases_its_readback_once(gpu, reuse):
    # The close released it, then its delivery released it again: live_staging_buffers -1.
    seen = []
    holder = {}

    def callback(result):
        first = bytes(result.data)
        holder["be"].close()
        seen.append((first, bytes(result.data)))  # still valid inside the callback

    be, handle = _backend(gpu, callback, reuse)
    holder["be"] = be
    assert be.readback(ReadbackDesc(handle, ReadbackPolicy.SUMMARY))
    deadline = time.perf_counter() + 5
    while not seen and time.perf_counter() < deadline:
        be.poll()
        time.sleep(0.002)
    want = np.arange(4, dtype=np.uint32).tobytes()
    assert seen == [(want, want)]
    assert be.live_staging_buffers == 0 and be.inflight_readbacks == 0


def test_an_interrupt_out_of_a_callback_releases_its_readback(gpu):
    # It stayed delivered but never released: one slot and its bytes used until close().
    calls = []

    def callback(result):
        calls.append(result.request_id)
        if len(calls) == 1:
            raise KeyboardInterrupt

    be, handle = _backend(gpu, callback)
    assert be.readback(ReadbackDesc(handle, ReadbackPolicy.SUMMARY)) and be.readback(ReadbackDesc(handle, ReadbackPolicy.SUMMARY))
    _drain(be)
    assert len(calls) == 2 and len(set(calls)) == 2  # each once
    assert be.inflight_readbacks == 0 and be.inflight_readback_bytes == 0 and be.live_staging_buffers == 0
    be.close()


def test_arrays_kept_past_close_free_their_staging_when_they_die(gpu):
    # Quarantined readbacks stayed mapped and counted for good once closed (no poll looks).
    kept = []
    be, handle = _backend(gpu, lambda result: kept.append(result.array(np.uint32)))
    assert be.readback(ReadbackDesc(handle, ReadbackPolicy.SUMMARY)) and be.readback(ReadbackDesc(handle, ReadbackPolicy.SUMMARY))
    deadline = time.perf_counter() + 5
    while len(kept) < 2 and time.perf_counter() < deadline:
        be.poll()
        time.sleep(0.002)
    be.close()
    assert [a.tolist() for a in kept] == [[0, 1, 2, 3]] * 2  # still readable: mapped while kept
    assert be.inflight_readbacks == 0 and be.live_staging_buffers == 2
    kept.clear()
    gc.collect()
    assert be.live_staging_buffers == 0


def test_calls_given_the_wrong_kind_of_argument_say_what_they_take(gpu):
    # Bare AttributeErrors from deep inside ("'str' object has no attribute 'tag'": helper 183).
    be, handle = _backend(gpu, lambda result: None)
    with pytest.raises(TypeError, match="register_field takes a FieldMirrorDesc, not str"):
        be.register_field("h")
    with pytest.raises(TypeError, match="upload takes a UploadDesc, not NoneType"):
        be.upload(None)
    with pytest.raises(TypeError, match="unregister_product takes a GpuProductHandle, not str"):
        be.unregister_product("k")
    assert be.is_live(None) is False and be.is_live(handle) is True
    be.close()
