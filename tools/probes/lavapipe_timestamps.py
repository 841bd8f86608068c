#!/usr/bin/env python3
"""lavapipe (Mesa llvmpipe, Vulkan): compute-pass timestamps stop bracketing dispatches once any
dispatch has written a storage texture in the process. Raw wgpu-py, no engine_plugin:

    python tools/probes/lavapipe_timestamps.py

prints a heavy kernel's wall time and its pass timestamps, twice before a storage-texture
write and three times after. On lavapipe (Mesa 22.3, LLVM 15) the timestamps agree with the
wall clock before (~180 ms each) and read ~0.1 ms after, while the wall clock is unchanged.
This is why the demo's per-product GPU times (``FrameStats.product_gpu_ms``; its colorize
kernel writes a storage texture) read a few microseconds on lavapipe for kernels that take
milliseconds. The H200's timestamps agree with its bandwidth (tools/bench/results).
"""

import time

import numpy as np
import wgpu

adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
dev = adapter.request_device_sync(required_features=["timestamp-query"])
q = dev.queue
HEAVY = """@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  var s = 0.0; for (var i = 0u; i < 2000u; i++) { s = s + sin(f32(i + g.x)); } y[g.x] = s; }"""
pipe = dev.create_compute_pipeline(layout="auto", compute={"module": dev.create_shader_module(code=HEAVY), "entry_point": "main"})
y = dev.create_buffer(size=4 * 65536, usage=wgpu.BufferUsage.STORAGE)
bg = dev.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=[{"binding": 0, "resource": {"buffer": y}}])
qs = dev.create_query_set(type="timestamp", count=2)
resolve = dev.create_buffer(size=16, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)


def timed() -> tuple[float, float]:
    enc = dev.create_command_encoder()
    cp = enc.begin_compute_pass(timestamp_writes={"query_set": qs, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1})
    cp.set_pipeline(pipe)
    cp.set_bind_group(0, bg)
    cp.dispatch_workgroups(1024)
    cp.end()
    enc.resolve_query_set(qs, 0, 2, resolve, 0)
    t0 = time.perf_counter()
    q.submit([enc.finish()])
    ticks = np.frombuffer(q.read_buffer(resolve), dtype=np.uint64)
    return (time.perf_counter() - t0) * 1e3, (int(ticks[1]) - int(ticks[0])) * adapter.limits.get("timestamp-period", 1.0) / 1e6


def texture_write() -> None:
    tex = dev.create_texture(size=(64, 64, 1), format="rgba8unorm", usage=wgpu.TextureUsage.STORAGE_BINDING)
    code = "@group(0) @binding(0) var t: texture_storage_2d<rgba8unorm, write>; @compute @workgroup_size(8, 8) fn main(@builtin(global_invocation_id) g: vec3<u32>) { textureStore(t, g.xy, vec4<f32>(1.0)); }"
    p = dev.create_compute_pipeline(layout="auto", compute={"module": dev.create_shader_module(code=code), "entry_point": "main"})
    b = dev.create_bind_group(layout=p.get_bind_group_layout(0), entries=[{"binding": 0, "resource": tex.create_view()}])
    enc = dev.create_command_encoder()
    c = enc.begin_compute_pass()
    c.set_pipeline(p)
    c.set_bind_group(0, b)
    c.dispatch_workgroups(8, 8)
    c.end()
    q.submit([enc.finish()])


print(adapter.info["device"])
for label in ("before", "before", "after a storage-texture write", "after", "after"):
    if label.startswith("after a"):
        texture_write()
    wall, gpu = timed()
    print(f"{label:32s} wall {wall:8.2f} ms   timestamps {gpu:8.3f} ms")
