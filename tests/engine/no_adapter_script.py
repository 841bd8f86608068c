"""Run with ENGINE_PLUGIN_ADAPTER naming no adapter (a machine without a usable GPU): an engine
on NoGpuBackend registers an asset product with a CPU fallback, applies its results, takes a
good reload and refuses a broken one (validated by lowering: there is nothing to compile on)."""

import os
import shutil
import sys
import time

import numpy as np

from engine_plugin.assets import AssetLibrary
from engine_plugin.assets.builtin import builtin_folder
from engine_plugin.engine import Engine, fallbacks
from engine_plugin.world import World

tmp = sys.argv[1]
assets = os.path.join(tmp, "assets")
shutil.copytree(builtin_folder("engine/summary.computeShader"), os.path.join(assets, "my/summary.computeShader"))
world = World((4, 4), {"h": np.float32}, max_chunks=4)
for k in range(3):
    world.add(k, {"h": np.arange(16, dtype=np.float32).reshape(4, 4) + k})
library = AssetLibrary(assets, os.path.join(tmp, "cache"))
engine = Engine(world, library)
print("backend", type(engine.backend).__name__)
got = {}
handle = engine.register_product("my/summary.computeShader", fields={"src": "h"}, apply=lambda r: got.update(r.by_chunk()), cpu_fallback=fallbacks.summary)
for _ in range(5):
    engine.frame()
assert sorted(got) == [0, 1, 2], got
for k in world.keys():
    h = world.read(k, "h")
    assert got[k].tolist() == [h.min(), h.max(), h.mean(), h.sum()], (k, got[k])
print("applied", len(got))
# a broken edit: refused, the product keeps its program; a good one is taken
folder = os.path.join(assets, "my/summary.computeShader")
yaml_path = os.path.join(folder, "bindings.yaml")
good = open(yaml_path).read()


def reload_after(text):
    with open(yaml_path, "w") as f:
        f.write(text)
    library.request_reload("my/summary.computeShader")
    deadline = time.monotonic() + 30
    events = []
    while not events and time.monotonic() < deadline:
        events = library.poll()
        time.sleep(0.01)
    return [type(e).__name__ for e in events]


print("broken", reload_after(good + "  - { name: bogus, kind: nonsense }\n"))
print("good", reload_after(good + "# an edit\n"))
world.write(1, "h", np.full((4, 4), 2.0, np.float32))
for _ in range(5):
    engine.frame()
assert got[1].tolist() == [2.0, 2.0, 2.0, 32.0], got[1]
print("alive", engine.product(handle) is not None)
