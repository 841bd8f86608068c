"""A device error, then a real reset the guard was not told about, recover_gpu() onto a new
device, then a good layout edit: the reload is applied on the new device (it was reported as an
engine_plugin bug from a raw wgpu error and never retried: helper 73)."""
import logging
import os
import shutil
import sys
import time
import numpy as np
logging.basicConfig(level=logging.CRITICAL)
from engine_plugin.assets import AssetLibrary
from engine_plugin.engine import Engine, fallbacks, kernel_folder
from engine_plugin.world import World

ASSET = "engine/summary.computeShader"
tmp = sys.argv[1]
root = os.path.join(tmp, "assets")
shutil.copytree(kernel_folder("summary"), os.path.join(root, ASSET))
lib = AssetLibrary(root, cache=os.path.join(tmp, "cache"))
w = World((4, 4), {"h": np.float32}, max_chunks=8)
for k in range(4):
    w.add(k, {"h": np.full((4, 4), k, np.float32)})
e = Engine(w, lib)
h = e.register_product(ASSET, key="s", spec={"T": "f32"}, fields={"src": "h"}, apply=lambda r: None, cpu_fallback=fallbacks.summary)
ref = lib.load(ASSET)

def frames(n):
    for _ in range(n):
        e.frame(); time.sleep(0.002)

yaml = os.path.join(root, ASSET, "bindings.yaml")
original = open(yaml).read()
layout = original.replace("  - { name: inv_tile_count, type: f32 }", "  - { name: inv_tile_count, type: f32 }\n  - { name: slot_count, type: u32 }")

def save(text):
    open(yaml, "w").write(text)
    lib.request_reload(ASSET)
    deadline = time.monotonic() + 30
    while not (lib.service.idle and lib.pending) and time.monotonic() < deadline:
        time.sleep(0.005)

frames(20)
save(layout)                      # a layout edit while all is well: applied
frames(5)
print("before the loss: generation", ref.generation, "| kernel has slot_count:", "slot_count" in e.product(h).kernel.schema.text)
e.backend.notify_device_error("application: a device error")   # the engine goes to the CPU
dev = e.backend.device
type(dev).destroy(dev)                                        # then the GPU resets (guard not told)
frames(2)
print("recover_gpu:", e.recover_gpu(), "| new device:", e.backend.device is not dev)
frames(5)

save(original)                    # the layout edit undone (content the library compiled before)
events = lib.poll()                                            # what engine.frame() step 1 does
for ev in events:
    print("reload event ok=%s:" % ev.ok, (ev.describe() if ev.ok else str(ev.error)).splitlines()[0])
frames(50)
print("ref.generation:", ref.generation, "| lib.idle:", lib.idle, "| product kernel has slot_count:", "slot_count" in e.product(h).kernel.schema.text, "(want False)")
e.close(); lib.close()
