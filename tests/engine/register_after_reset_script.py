"""A GPU reset the guard was not told about, then a product registered before any frame met
it: the compile meets the loss. The product is registered, served by its CPU fallback, and
answers the loss in product_error(); recover_gpu() puts it on the GPU, with the same values
(register_product raised DeviceLostError and dropped the product: review helper 127)."""
import logging
import time
import numpy as np
logging.basicConfig(level=logging.CRITICAL)
from engine_plugin.engine import Engine, fallbacks, kernel_program
from engine_plugin.errors import DeviceLostError
from engine_plugin.gpu import ReadbackPolicy
from engine_plugin.world import World

w = World((4, 4), {"a": np.float32, "b": np.float32}, max_chunks=8)
for k in range(3):
    w.add(k, {"a": np.full((4, 4), k + 0.5, np.float32), "b": np.ones((4, 4), np.float32)})
e = Engine(w)
e.register_product(kernel_program("combine"), key="C1", spec={"OP": "add"}, fields={"a": "a", "b": "b"},
                   policy=ReadbackPolicy.SELECTED_TILES, tiles=[(0, (0, 0))], apply=lambda r: None, cpu_fallback=fallbacks.combine)

def frames(n):
    for _ in range(n):
        e.frame(); time.sleep(0.002)

frames(5)
dev = e.backend.device
type(dev).destroy(dev)  # a reset: the guard is not told
got = []
h = e.register_product(kernel_program("combine"), key="C2", spec={"OP": "max"}, fields={"a": "a", "b": "b"},
                       policy=ReadbackPolicy.SELECTED_TILES, tiles=[(2, (0, 0))], apply=got.append, cpu_fallback=fallbacks.combine)
frames(10)
print("registered:", sorted(e.product(x).key for x in e.products()))
print("served by:", sorted({r.source for r in got}), "| loss answered:", isinstance(e.product_error(h), DeviceLostError))
cpu = [r.values.copy() for r in got if r.source == "cpu"]
print("recover_gpu:", e.recover_gpu())
w.write(2, "a", np.full((4, 4), 7.25, np.float32))  # a change, so the GPU computes it
got.clear()
deadline = time.monotonic() + 30
while not any(r.source == "gpu" for r in got) and time.monotonic() < deadline:
    frames(1)
gpu = [r.values for r in got if r.source == "gpu"]
print("on the gpu:", bool(gpu), "| error now:", e.product_error(h))
print("cpu values:", cpu[0].tolist() if cpu else None)
print("gpu values:", gpu[-1].tolist() if gpu else None)
e.close()
