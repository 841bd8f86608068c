"""A GPU reset the guard was not told about, found while a product's dispatch is prepared:
after recover_gpu() puts the product back on the GPU, product_error() is None again."""

import time

import numpy as np

from engine_plugin.engine import Engine, fallbacks, kernel_program
from engine_plugin.world import World

world = World((4, 4), {"h": np.float32}, max_chunks=8)
for k in range(4):
    world.add(k, {"h": np.full((4, 4), k, np.float32)})
engine = Engine(world)
sources = []
handle = engine.register_product(kernel_program("summary"), key="s", spec={"T": "f32"}, fields={"src": "h"},
                                 apply=lambda r: sources.append(r.source), cpu_fallback=fallbacks.summary)


def frames(n):
    for i in range(n):
        world.write(i % 4, "h", float(i))
        engine.frame()
        time.sleep(0.002)


frames(10)
device = engine.backend.device
type(device).destroy(device)  # behind the guard's back
engine.invalidate(handle)
# Frames until the engine meets the loss: the first frame after it may touch no GPU object (a
# readback of the last frame still pending defers the dispatch) and find it a frame later (an
# upload) or at the stall probe; what is checked is what product_error() says once it is met.
for _ in range(400):
    world.write(0, "h", 5.0)
    engine.frame()
    if not engine.gpu_active:
        break
    time.sleep(0.01)
print("error after the loss:", engine.product_error(handle) is not None)
frames(3)
print("recovered:", engine.recover_gpu())
sources.clear()
frames(30)
print("on the gpu:", sorted(set(sources)) == ["gpu"], "| error now:", engine.product_error(handle))
engine.close()

# A reset nobody reported, and recover_gpu() at once: True the first time (it answered False,
# building on the dead device, and a second call worked: helper 73).
world2 = World((4, 4), {"h": np.float32}, max_chunks=8)
for k in range(4):
    world2.add(k, {"h": np.full((4, 4), k, np.float32)})
engine2 = Engine(world2)
engine2.register_product(kernel_program("summary"), key="s", spec={"T": "f32"}, fields={"src": "h"}, apply=lambda r: None, cpu_fallback=fallbacks.summary)
for i in range(10):
    world2.write(i % 4, "h", float(i))
    engine2.frame()
    time.sleep(0.002)
dead = engine2.backend.device
type(dead).destroy(dead)
print("recover at once:", engine2.recover_gpu(), engine2.gpu_active, engine2.backend.device is not dead)
engine2.close()
