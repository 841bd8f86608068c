"""A device the application reported faulty (``notify_device_error``) is never offered again by
``recover_gpu()``, also after a later loss of the device that replaced it (review helper 88:
the second recovery went back to it). Run by test_engine_device_loss.py in a subprocess (it
destroys a device); prints one JSON line."""

from __future__ import annotations

import json
import logging

import numpy as np

from engine_plugin.engine import Engine
from engine_plugin.world import World

logging.basicConfig(level=logging.CRITICAL)
world = World((4, 4), {"f": np.float32}, max_chunks=2)
world.add(0)
engine = Engine(world)
d1 = engine._gpu._ctx.device
engine.backend.notify_device_error("the application saw a device error on d1")
engine.frame()
first = engine.recover_gpu()
d2 = engine._gpu._ctx.device
d2.destroy()
engine.frame()
second = engine.recover_gpu()
d3 = engine._gpu._ctx.device
# Many faults in a row (helper 89: only the last eight were remembered): none comes back.
faulted = [d1, d3]
again = []
for _ in range(10):
    engine.backend.notify_device_error("another device error")
    engine.frame()
    again.append(engine.recover_gpu())
    if any(engine._gpu._ctx.device is d for d in faulted):
        again.append("faulted device offered again")
    faulted.append(engine._gpu._ctx.device)
print(json.dumps({"recovered": [first, second], "d2_is_d1": d2 is d1, "d3_is_d1": d3 is d1, "d3_is_d2": d3 is d2, "again": again}))
engine.close()
