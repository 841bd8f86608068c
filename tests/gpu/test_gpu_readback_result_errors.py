"""A ``ReadbackResult``'s data outside what it holds is a PluginError that says why (review
helper 202): a failed readback's ``array()`` raised a bare ValueError, and a result kept past
its callback raised CPython's "operation forbidden on released memoryview object"."""

from __future__ import annotations

import time

import numpy as np
import pytest
import wgpu

from engine_plugin import abi
from engine_plugin.errors import PluginError, ReadbackDataError
from engine_plugin.gpu import ReadbackDesc, ReadbackPolicy, ReadbackStatus, WgpuBackend, WgpuBackendConfig, WgpuProductDesc

pytestmark = pytest.mark.gpu

WGSL = "@group(0) @binding(0) var<storage, read_write> o: array<f32>;\n@compute @workgroup_size(1) fn main() { o[0] = 1.0; }"


def _wait(backend: WgpuBackend, kept: list, count: int) -> None:
    deadline = time.monotonic() + 10
    while len(kept) < count and time.monotonic() < deadline:
        backend.poll()
        time.sleep(0.005)
    assert len(kept) == count


def test_a_result_kept_past_its_callback_or_failed_says_why_as_a_plugin_error():
    dev = abi.device()
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    source = dev.create_buffer(size=16, usage=usage)
    dev.queue.write_buffer(source, 0, np.arange(4, dtype=np.float32))
    module = dev.create_shader_module(code=WGSL)
    pipeline = dev.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
    group = dev.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=[{"binding": 0, "resource": {"buffer": source}}])
    kept: list = []
    inside: list = []

    def callback(result):
        kept.append(result)
        if result.ok:
            inside.append(result.array(np.float32).copy())  # inside the callback: the bytes

    with WgpuBackend(dev, WgpuBackendConfig()) as backend:
        handle = backend.register_product("p", WgpuProductDesc(pipeline=pipeline, bind_groups=[group], readback_source=source, callback=callback))
        assert backend.readback(ReadbackDesc(handle, ReadbackPolicy.SUMMARY))
        _wait(backend, kept, 1)
        assert backend.readback(ReadbackDesc(handle, ReadbackPolicy.SUMMARY))
        backend.notify_device_error("the app reported an out-of-memory")
        _wait(backend, kept, 2)
    ready, failed = kept
    assert ready.status is ReadbackStatus.READY and inside[0].tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(ReadbackDataError, match="only inside its callback") as late:
        ready.array(np.float32)
    assert isinstance(late.value, PluginError) and isinstance(late.value, ValueError)
    assert failed.status is ReadbackStatus.FAILED
    with pytest.raises(ReadbackDataError, match="no data.*out-of-memory"):
        failed.array(np.float32)


def test_a_result_holding_bytes_reads_as_an_array():
    # Review helper 208: a result whose data is bytes (a test double's, a custom backend's)
    # raised AttributeError ('bytes' has no nbytes) once the released-memoryview check came in.
    from engine_plugin.gpu import GpuProductHandle, ReadbackResult

    desc = ReadbackDesc(GpuProductHandle("p", 1), ReadbackPolicy.SUMMARY)
    result = ReadbackResult(GpuProductHandle("p", 1), desc, ReadbackStatus.READY, np.arange(3, dtype=np.float32).tobytes(), 1)  # type: ignore[arg-type]
    assert result.array(np.float32).tolist() == [0.0, 1.0, 2.0]
