"""A NONE product writing a kernel-written mirror, and a SUMMARY product reading it, across a
real device loss and ``recover_gpu()`` (run by test_engine_device_loss.py in a subprocess: it
destroys the process's device). Review helper 81: the writer was not run again over chunks it
had computed on the old device, so the new mirror kept the world's bytes, the engine read
idle, and the reader applied sums of zeros. Prints one JSON line.
"""

from __future__ import annotations

import json
import time

import numpy as np

from engine_plugin import abi
from engine_plugin.device.context import get_context
from engine_plugin.engine import Engine
from engine_plugin.gpu import ReadbackPolicy
from engine_plugin.world import World

P4_YAML = """\
bindings:
  - { name: tiles, kind: buffer, access: read, element: u32 }
  - { name: f, kind: buffer, access: read, element: f32 }
  - { name: aux, kind: buffer, access: read_write, element: f32 }
"""
P4_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let t = tiles_get(i);
    aux_set(t, f_get(t) * 2.0 + 1.0);
}
"""
from test_kernel_written_mirrors import SUM_WGSL, SUM_YAML  # noqa: E402  (the reader: a sum over a chunk's tiles)


def prog(key, yaml, wgsl):
    return abi.program(key=key, schema=abi.parse(yaml, f"{key}/bindings.yaml"), wgsl=wgsl, wgsl_path=f"{key}/kernel.wgsl")


def drain(engine):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        engine.frame()
        if engine.idle and getattr(engine.backend, "inflight_readbacks", 0) == 0:
            engine.frame()
            return
        time.sleep(0.002)
    raise AssertionError("never idle")


world = World((4, 4), {"f": np.float32, "aux": np.float32}, max_chunks=2)
for k in range(2):
    world.add(k, {"f": np.full((4, 4), k + 1.0, np.float32)})
engine = Engine(world)
latest: dict = {}
engine.register_product(prog("f01/p4", P4_YAML, P4_WGSL), key="p4", fields={"f": "f", "aux": "aux"}, policy=ReadbackPolicy.NONE)
h5 = engine.register_product(prog("f01/p5", SUM_YAML, SUM_WGSL), key="p5", fields={"heat": "aux"},
                             apply=lambda r: latest.update({k: (float(v), r.source) for k, v in zip(r.keys, r.values)}))
engine.field_buffer("aux", kernel_writes=True)
drain(engine)
expected = {str(k): float(2 * world.read(k, "f").sum() + 16) for k in world.keys()}
before = {str(k): v for k, v in latest.items()}

get_context().device.destroy()  # the device goes away
engine.frame()
recovered = engine.recover_gpu()
drain(engine)
mirror = np.frombuffer(abi.read(engine.backend.field_buffer("aux")), np.float32).reshape(2, -1)[:, 0].tolist()
engine.invalidate(h5)  # the game asks the reader for fresh values
drain(engine)
print(json.dumps({"before": before, "expected": expected, "recovered": recovered, "mirror": mirror, "after": {str(k): v for k, v in latest.items()}}))
engine.close()
