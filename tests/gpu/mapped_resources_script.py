"""Run by test_gpu_mapped_resources.py in a subprocess (an abort kills the process): buffers a
submission would use while they are still mapped (wgpu-native panics inside
``wgpuQueueSubmit`` as for a destroyed one), and a product's resources of another device."""

from __future__ import annotations

import sys
import time

import numpy as np
import wgpu

from engine_plugin import abi
from engine_plugin.device.context import get_context
from engine_plugin.errors import DispatchError
from engine_plugin.gpu import DispatchDesc, ReadbackDesc, ReadbackPolicy, WgpuBackend, WgpuProductDesc, field_mirror_desc
from engine_plugin.world import World

U = wgpu.BufferUsage
YAML = """bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n" }
"""
WGSL = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, src_get(i) * 2.0);
}
"""


def main(case: str) -> None:
    ctx = get_context()
    dev = ctx.device
    if case == "read":
        buf = dev.create_buffer(size=16, usage=U.MAP_WRITE | U.COPY_SRC, mapped_at_creation=True)
        try:
            abi.read(buf)
            raise SystemExit("read a mapped buffer")
        except DispatchError as exc:
            assert "still mapped" in str(exc), exc
        buf.unmap()
        assert bytes(abi.read(buf)) == bytes(16)  # unmapped: read as usual
    elif case == "run":
        variant = abi.program(key="mapped/run", schema=abi.parse(YAML), wgsl=WGSL).variant()
        src = dev.create_buffer(size=16, usage=U.STORAGE | U.COPY_DST, mapped_at_creation=True)
        try:
            variant.run(4, inputs={"src": src})
            raise SystemExit("ran over a mapped buffer")
        except DispatchError as exc:
            assert "'src'" in str(exc) and "still mapped" in str(exc), exc
        src.write_mapped(np.arange(4, dtype=np.float32))
        src.unmap()
        assert abi.read(variant.run(4, inputs={"src": src}).outputs["dst"]).tolist() == [0.0, 2.0, 4.0, 6.0]
    elif case == "foreign_source":
        be = WgpuBackend(ctx)
        other = wgpu.gpu.request_adapter_sync(power_preference="high-performance").request_device_sync()
        src = other.create_buffer(size=64, usage=U.STORAGE | U.COPY_SRC)
        assert be.register_product("p", WgpuProductDesc(pipeline=object(), readback_source=src, callback=lambda r: None)) is None, "registered"
        assert "another device" in be.last_refusal, be.last_refusal
        assert be.healthy
        be.close()
    elif case == "readback_source":
        # Registered mapped (WebGPU allows unmapping later), refused while mapped at its use,
        # read back once unmapped.
        be = WgpuBackend(ctx)
        src = dev.create_buffer(size=64, usage=U.MAP_WRITE | U.COPY_SRC, mapped_at_creation=True)
        got: list = []
        handle = be.register_product(
            "p", WgpuProductDesc(pipeline=object(), readback_source=src, callback=lambda r: got.append(None if r.data is None else bytes(r.data)))
        )
        assert handle is not None, be.last_refusal
        assert not be.readback(ReadbackDesc(handle, ReadbackPolicy.SUMMARY))
        assert "still mapped" in be.last_refusal and be.healthy, be.last_refusal
        src.unmap()
        assert be.readback(ReadbackDesc(handle, ReadbackPolicy.SUMMARY)), be.last_refusal
        for _ in range(500):
            be.poll()
            if got:
                break
            time.sleep(0.01)
        assert got == [bytes(64)], got  # the data lives during the callback only
        be.close()
    elif case == "bound":
        world = World((4, 4), {"h": np.float32}, max_chunks=4)
        world.add(0)
        be = WgpuBackend(ctx)
        assert be.register_field(field_mirror_desc(world, "h"))
        module = dev.create_shader_module(
            code="@group(0) @binding(0) var<storage, read_write> o: array<f32>;\n@compute @workgroup_size(1) fn main() { o[0] = 1.0; }"
        )
        pipeline = dev.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
        out = dev.create_buffer(size=16, usage=U.STORAGE, mapped_at_creation=True)
        group = dev.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=[{"binding": 0, "resource": {"buffer": out}}])
        handle = be.register_product("p", WgpuProductDesc(pipeline, [group], fields=("h",)))
        assert handle is not None, be.last_refusal
        assert not be.dispatch(DispatchDesc(handle, "h", 1, 1))
        assert "still mapped" in be.last_refusal and be.healthy, be.last_refusal
        out.unmap()
        assert be.dispatch(DispatchDesc(handle, "h", 1, 1)), be.last_refusal
        be.close()
    print(f"ok {case}")


if __name__ == "__main__":
    main(sys.argv[1])
