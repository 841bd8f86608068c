"""Run by test_engine_device_loss.py in a subprocess: a real ``device.destroy()`` mid-run.

Prints one JSON line with what happened; exits non-zero on any mismatch.
"""

import json
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

import numpy as np  # noqa: E402

from engine_support import Applied, make_world, run_until_idle, same_bits, summary_product  # noqa: E402

from engine_plugin.engine import Engine  # noqa: E402
from engine_plugin.gpu import NoGpuBackend  # noqa: E402
from engine_plugin.device.context import get_context  # noqa: E402

logging.basicConfig(level=logging.ERROR)
out = {}
world, reference = make_world(n=64), make_world(n=64)
ctx = get_context()
engine = Engine(world, device=ctx)
cpu = Engine(reference, backend=NoGpuBackend())
got, want = Applied(world), Applied(reference)
h = summary_product(engine, "height", got)
summary_product(cpu, "height", want)
run_until_idle(engine)
run_until_idle(cpu)
out["before"] = engine.generation(h)

# Readbacks in flight, then the device goes away under them.
for w in (world, reference):
    w.write(1, "height", 5.0)
engine.frame()
ctx.device.destroy()
frames = []
for step in range(2, 6):
    for w in (world, reference):
        w.write(step, "height", float(step))
    frames.append(run_until_idle(engine, timeout=20))
    run_until_idle(cpu)
    time.sleep(0.01)
out["lost_reports"] = sum(f.gpu_lost for f in frames)
out["failed"] = sum(f.readbacks_failed for f in frames)
out["cpu_fallbacks"] = sum(f.cpu_fallbacks for f in frames)
out["gpu_active_after_loss"] = engine.gpu_active
out["identical_while_lost"] = all(same_bits(got.latest[k], want.latest[k]) for k in reference.keys())

out["recovered"] = engine.recover_gpu()
out["new_device"] = engine.backend.device is not ctx.device
out["after"] = engine.generation(h)
for w in (world, reference):
    w.write(9, "height", 9.0)
st = run_until_idle(engine, timeout=20)
run_until_idle(cpu)
out["dispatches_after_recovery"] = st.dispatches
out["last_source"] = got.results[-1].source
out["identical_after_recovery"] = all(same_bits(got.latest[k], want.latest[k]) for k in reference.keys())
out["not_current"] = len(got.not_current)
engine.close()
print(json.dumps(out))
ok = (out["lost_reports"] == 1 and out["identical_while_lost"] and out["recovered"] and out["new_device"]
      and out["identical_after_recovery"] and out["dispatches_after_recovery"] == 1 and out["last_source"] == "gpu"
      and out["not_current"] == 0 and out["after"] not in (0, out["before"]) and np.isfinite(out["cpu_fallbacks"]))
sys.exit(0 if ok else 1)
