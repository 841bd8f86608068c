"""Run by test_engine_reload_pinning.py in a subprocess (a real device loss must never take the
test run down): a product whose asset ``#import``s a module, a device destroyed, recover_gpu.
It stayed on its CPU fallback for good: the program was rebuilt on the new device without its
modules ("no module ident.wgsl"). Exits 0 when the product is back on the GPU."""

import logging
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))

import numpy as np  # noqa: E402
from engine_support import Applied, cpu_summary, make_world, run_until_idle  # noqa: E402

from engine_plugin.assets import AssetLibrary  # noqa: E402
from engine_plugin.device.context import get_context  # noqa: E402
from engine_plugin.engine import Engine, fallbacks, kernel_folder  # noqa: E402

logging.basicConfig(level=logging.ERROR)
ASSET = "engine/summary.computeShader"
tmp = tempfile.mkdtemp()
root = os.path.join(tmp, "assets")
shutil.copytree(kernel_folder("summary"), os.path.join(root, ASSET))
os.makedirs(os.path.join(root, "modules"))
with open(os.path.join(root, "modules", "plus.wgsl"), "w") as f:
    f.write("fn plus_thousand(x: f32) -> f32 { return x + 1000.0; }\n")
kernel = os.path.join(root, ASSET, "kernel.wgsl")
body = open(kernel).read()
with open(kernel, "w") as f:
    f.write("#import plus\n" + body.replace("sum * params.inv_tile_count, sum)", "plus_thousand(sum * params.inv_tile_count), sum)"))
ctx = get_context()
lib = AssetLibrary(root, cache=os.path.join(tmp, "cache"))
world = make_world(n=4)
engine = Engine(world, library=lib, device=ctx)
got = Applied(world)
handle = engine.register_product(ASSET, spec={"T": "f32"}, fields={"src": "height"}, apply=got, cpu_fallback=fallbacks.summary)
run_until_idle(engine)
assert got.results[-1].source == "gpu", "not on the GPU before the loss"
ctx.device.destroy()
for i in range(3):
    world.write(1, "height", float(i))
    run_until_idle(engine, timeout=20)
assert not engine.gpu_active
assert engine.recover_gpu()
world.write(2, "height", 7.0)
run_until_idle(engine, timeout=20)
product = engine.product(handle)
want = cpu_summary(world, "height", 2)
want[2] += 1000.0
ok = product.gpu is not None and got.results[-1].source == "gpu" and np.allclose(got.latest[2], want, rtol=1e-6)
print("back on the GPU" if ok else f"not back: gpu={product.gpu is not None} error={engine.product_error(handle)!r}")
sys.exit(0 if ok else 1)
