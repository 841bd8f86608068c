"""Run by test_gpu_destroyed_resources.py in a subprocess (an abort kills the process): a
caller destroys buffers the GPU backend uses, the backend refuses or fails closed."""

from __future__ import annotations

import sys

import numpy as np
import wgpu

from engine_plugin.device.context import get_context
from engine_plugin.gpu import DispatchDesc, ReadbackDesc, ReadbackPolicy, WgpuBackend, WgpuBackendConfig, WgpuProductDesc, coalesce_uploads, field_mirror_desc
from engine_plugin.world import World

WGSL = """
@group(0) @binding(0) var<storage, read> h: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) { let i = gid.x; if (i >= arrayLength(&out)) { return; } out[i] = h[i] * 2.0 + 1.0; }
"""
U = wgpu.BufferUsage


def _raw_device():
    return wgpu.gpu.request_adapter_sync(power_preference="high-performance").request_device_sync()


def main(case: str) -> None:
    dev = _raw_device() if case == "raw_device" else get_context().device
    world = World((8, 8), {"h": np.float32}, max_chunks=4)
    for k in range(4):
        world.add(k, {"h": np.full((8, 8), k, np.float32)})
    be = WgpuBackend(dev, WgpuBackendConfig())
    assert be.register_field(field_mirror_desc(world, "h"))
    for d in coalesce_uploads(world, "h", [k for k, _ in world.take_dirty("h")]):
        assert be.upload(d)
    pipeline = dev.create_compute_pipeline(layout="auto", compute={"module": dev.create_shader_module(code=WGSL), "entry_point": "main"})

    def product(out, key):
        entries = [{"binding": 0, "resource": {"buffer": be.field_buffer("h")}}, {"binding": 1, "resource": {"buffer": out}}]
        if case == "struct_entries":  # review helper 160: wgpu-py's structs, a generator
            entries = [wgpu.BindGroupEntry(binding=0, resource=wgpu.BufferBinding(buffer=be.field_buffer("h"))), wgpu.BindGroupEntry(binding=1, resource=wgpu.BufferBinding(buffer=out))]
        elif case == "generator":
            entries = (e for e in entries)
        group = dev.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=entries)
        got = []
        # The readback source is a buffer of its own: its check must not hide the bind group's.
        source = dev.create_buffer(size=1024, usage=U.STORAGE | U.COPY_SRC | U.COPY_DST)
        sources.append(source)
        desc = WgpuProductDesc(pipeline, [group], readback_source=source, callback=lambda *a: got.append(a))
        return be.register_product(key, desc), got

    sources: list = []
    out = dev.create_buffer(size=1024, usage=U.STORAGE | U.COPY_SRC | U.COPY_DST)
    handle, got = product(out, case)
    if case in ("bound_before_dispatch", "struct_entries", "generator", "raw_device"):
        out.destroy()
        assert not be.dispatch(DispatchDesc(handle, "h", 4, 4)) and "was destroyed" in be.last_refusal, be.last_refusal
    elif case == "bound_inside_batch":
        with be.batch():
            assert be.dispatch(DispatchDesc(handle, "h", 4, 4))
            assert be.readback(ReadbackDesc(handle, ReadbackPolicy.SUMMARY, offset=0, size=64))
            out.destroy()
        for _ in range(50):
            be.poll()
        assert got and "FAILED" in str(got[-1]), got  # the batch never ran: its readback failed
    elif case == "readback_source":
        sources[0].destroy()
        assert not be.readback(ReadbackDesc(handle, ReadbackPolicy.SUMMARY, offset=0, size=64)) and "destroyed" in be.last_refusal
    elif case == "field_mirror":
        be.field_buffer("h").destroy()
        assert not be.dispatch(DispatchDesc(handle, "h", 4, 4)) and "field mirror" in be.last_refusal, be.last_refusal
    # The backend goes on: a product over live buffers runs (field_mirror: the mirror is gone).
    if case != "field_mirror":
        fresh = dev.create_buffer(size=1024, usage=U.STORAGE | U.COPY_SRC | U.COPY_DST)
        again, _ = product(fresh, case + " again")
        assert be.dispatch(DispatchDesc(again, "h", 4, 4)), be.last_refusal
    # Closed before the process exits, as a game closes its engine: exiting with the last
    # dispatch's work still running on lavapipe's threads crashed the interpreter's teardown
    # once in a full suite run (SIGSEGV after "ok").
    be.close()
    dev.queue.read_buffer(dev.create_buffer(size=4, usage=U.COPY_SRC | U.COPY_DST))  # after every submission before it
    print("ok", case)


if __name__ == "__main__":
    main(sys.argv[1])
