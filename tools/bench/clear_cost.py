"""Cost of zeroing outputs (issue: results you can trust): the same run with the default
`clear` and with `clear: false`, interleaved in one process, median of 5 x 200 runs each, at a
small and a large size. Run: python tools/bench/clear_cost.py"""

import statistics
import time

import numpy as np

from engine_plugin import abi
from engine_plugin.bench.cases import STORAGE
from engine_plugin.device.context import get_context

Y = """
bindings:
  - { name: x, kind: buffer, access: read, element: f32 }
  - { name: y, kind: buffer, access: read_write, element: f32, count: "n"CLEAR }
params:
  - { name: a, type: f32 }
"""
W = """
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    y_set(i, params.a * x_get(i));
}
"""
res = {}
for n in (1024, 1 << 20):
    x = get_context().device.create_buffer_with_data(data=np.arange(n, dtype=np.float32), usage=STORAGE)
    vs = {c: abi.program(key=f"cc{c}", schema=abi.parse(Y.replace("CLEAR", ", clear: false" if c == "off" else "")), wgsl=W).variant() for c in ("on", "off")}
    for c, v in vs.items():
        for _ in range(20):
            v.run(n, inputs={"x": x}, params={"a": 2.0})
    times = {"on": [], "off": []}
    for rep in range(5):
        for c, v in vs.items():
            t = time.perf_counter()
            for _ in range(200):
                v.run(n, inputs={"x": x}, params={"a": 2.0})
            abi.read(v.run(n, inputs={"x": x}, params={"a": 2.0}).outputs["y"])  # wait for the GPU
            times[c].append((time.perf_counter() - t) / 201)
    on, off = statistics.median(times["on"]), statistics.median(times["off"])
    print(
        f"n={n}: clear on {on * 1e6:.1f} us/run, off {off * 1e6:.1f} us/run, cost {100 * (on / off - 1):+.0f}% (spread on {min(times['on']) * 1e6:.0f}-{max(times['on']) * 1e6:.0f}, off {min(times['off']) * 1e6:.0f}-{max(times['off']) * 1e6:.0f})"
    )
