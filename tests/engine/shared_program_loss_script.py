"""Run by test_engine_reload_pinning.py in a subprocess (real device losses must never take the
test run down): products sharing one Program through three real losses and recoveries. Each
product's pinned view made its own copy on the new device (one compile a product), and the
copies kept every lost device alive (review helper 61). Exits 0 when one compile serves every
product at each recovery and no lost device is kept."""

import gc
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from engine_support import Applied, make_world, run_until_idle, summary_product  # noqa: E402

import engine_plugin.runtime  # noqa: E402,F401
from engine_plugin.device.context import DeviceContext, get_context  # noqa: E402
from engine_plugin.engine import Engine, kernel_program  # noqa: E402

logging.basicConfig(level=logging.ERROR)
world = make_world(n=4)
engine = Engine(world)
shared = kernel_program("summary")
handles = [summary_product(engine, "height", Applied(world), key=f"p{i}", program=shared) for i in range(4)]
run_until_idle(engine)
program_module = sys.modules["engine_plugin.runtime.program"]  # the package binds `program` to the function
compiles = []
real_compile = program_module.compile_lowered


def counting(*args, **kwargs):
    compiles.append(1)
    return real_compile(*args, **kwargs)


program_module.compile_lowered = counting
problems = []
for cycle in range(3):
    get_context().device.destroy()
    world.write(1, "height", float(cycle))
    run_until_idle(engine, timeout=20)
    compiles.clear()
    assert engine.recover_gpu(), "recover_gpu failed"
    world.write(2, "height", float(cycle))
    run_until_idle(engine, timeout=20)
    variants = {id(engine.product(h).gpu.variant) for h in handles}
    if len(compiles) != 1 or len(variants) != 1:
        problems.append(f"cycle {cycle}: {len(compiles)} compiles, {len(variants)} variants for 4 products sharing a program")
gc.collect()
lost = [o for o in gc.get_objects() if isinstance(o, DeviceContext) and o.lost]
if len(lost) > 1:
    problems.append(f"{len(lost)} lost device contexts kept alive after 3 recoveries")
print("; ".join(problems) or "one compile a recovery, lost devices freed")
sys.exit(1 if problems else 0)
