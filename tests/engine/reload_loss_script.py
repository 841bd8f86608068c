"""Run by test_engine_reload_loss.py in a subprocess: a hot reload arrives while the device is
lost but nobody has noticed yet (destroyed behind the submission guard's back, as a GPU reset
would). Prints one JSON line; exits non-zero on a mismatch."""

import json
import logging
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))

import numpy as np  # noqa: E402

from engine_support import Applied, cpu_summary, make_world  # noqa: E402

from engine_plugin.assets import AssetLibrary  # noqa: E402
from engine_plugin.engine import Engine, fallbacks, kernel_folder  # noqa: E402
from engine_plugin.device.context import get_context  # noqa: E402

logging.basicConfig(level=logging.ERROR)
ASSET = "engine/summary.computeShader"
tmp = tempfile.mkdtemp()
root = os.path.join(tmp, "assets")
shutil.copytree(kernel_folder("summary"), os.path.join(root, ASSET))
lib = AssetLibrary(root, cache=os.path.join(tmp, "cache"))
world = make_world(n=8)
engine = Engine(world, library=lib)
applied = Applied(world)
ref = lib.load(ASSET)
engine.register_product(ASSET, spec={"T": "f32"}, fields={"src": "height"}, apply=applied, cpu_fallback=fallbacks.summary)
for _ in range(20):
    engine.frame()
    time.sleep(0.005)
dev = get_context().device
type(dev).destroy(dev)  # lost, and the guard was not told

kernel = os.path.join(root, ASSET, "kernel.wgsl")
text = open(kernel).read()
open(kernel, "w").write(text.replace("sum * params.inv_tile_count, sum)", "sum * params.inv_tile_count + 1.0, sum)"))
lib.request_reload(ASSET)
deadline = time.monotonic() + 10
while lib.pending == 0 and time.monotonic() < deadline:
    time.sleep(0.005)
out = {"prepared": lib.pending}
for _ in range(5):
    engine.frame()
out["error_after_loss"] = str(ref.error) if ref.error is not None else None
out["failures"] = ref.failures
out["gpu_active_after_loss"] = engine.gpu_active
out["recovered"] = engine.recover_gpu()
deadline = time.monotonic() + 60  # bounded by time: the reload worker compiles off-thread
while not (engine.idle and ref.generation == 1) and time.monotonic() < deadline:
    engine.frame()
    time.sleep(0.005)
out["generation"] = ref.generation
out["error"] = str(ref.error) if ref.error is not None else None
world.write(3, "height", 2.0)  # computed by the reloaded kernel on the new device
deadline = time.monotonic() + 60
while True:
    engine.frame()
    if engine.idle or time.monotonic() > deadline:
        break
    time.sleep(0.005)
want = cpu_summary(world, "height", 3)
want[2] += np.float32(1.0)
out["new_kernel"] = bool(np.array_equal(applied.latest[3], want))
out["last_source"] = applied.results[-1].source
engine.close()
lib.close()
print(json.dumps(out))
ok = out["error_after_loss"] is None and out["failures"] == 0 and out["generation"] == 1 and out["error"] is None and out["new_kernel"]
sys.exit(0 if ok else 1)
