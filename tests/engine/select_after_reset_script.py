"""A GPU reset the guard was not told about, then a selection that outgrows a product's GPU
buffers before any frame met the reset: the product's fallback serves it (select_tiles
raised whatever registering the bigger buffers met). recover_gpu() puts it back on the GPU."""
import logging
import time
import numpy as np
logging.basicConfig(level=logging.CRITICAL)
from engine_plugin.engine import Engine, fallbacks, kernel_program
from engine_plugin.gpu import ReadbackPolicy
from engine_plugin.world import World

w = World((4, 4), {"a": np.float32, "b": np.float32}, max_chunks=8)
for k in range(8):
    w.add(k, {"a": np.full((4, 4), k + 0.5, np.float32), "b": np.ones((4, 4), np.float32)})
e = Engine(w)
got = []
h = e.register_product(kernel_program("combine"), key="C", spec={"OP": "add"}, fields={"a": "a", "b": "b"},
                       policy=ReadbackPolicy.SELECTED_TILES, tiles=[(0, (0, 0))], apply=got.append, cpu_fallback=fallbacks.combine)

def frames(n):
    for _ in range(n):
        e.frame(); time.sleep(0.002)

frames(5)
before = e.product(h).gpu.capacity
dev = e.backend.device
type(dev).destroy(dev)  # a reset: the guard is not told
tiles = [(k, (y, x)) for k in range(8) for y in range(4) for x in range(4)]
e.select_tiles(h, tiles)  # more tiles than its buffers hold: registered anew
print("outgrown:", len(tiles) > before)
got.clear()
frames(10)
print("served:", sorted({r.source for r in got}), "| tiles:", sum(len(r.tiles) for r in got))
print("recover_gpu:", e.recover_gpu())
for k in range(8):
    w.write(k, "a", np.full((4, 4), k + 0.25, np.float32))
got.clear()
deadline = time.monotonic() + 30
while sum(len(r.tiles) for r in got if r.source == "gpu") < len(tiles) and time.monotonic() < deadline:
    frames(1)
values = {t: float(v) for r in got if r.source == "gpu" for t, v in zip(r.tiles, r.values)}
print("gpu tiles:", len(values), "| right:", all(values[t] == t[0] + 1.25 for t in tiles))
e.close()
