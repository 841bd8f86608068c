"""Run by test_engine_random_loss.py: RUNS engines in this process, each losing its device at a
random moment, from a timer thread, while ``engine.frame()`` runs.

Each run: a fresh device (``get_context()`` after the previous loss must give a new one), a
world with two GPU products, a timer that calls ``device.destroy()`` after a random delay, and
frames (writing chunks between them) until well after the loss. An exception out of
``frame()`` is counted as escaped; a crash of the process (exit 134 from a wgpu-native panic)
is what the parent counts as an abort. Prints one JSON line per run and a final summary.

Usage: random_loss_script.py SEED RUNS [MODE]
MODE ``destroy`` (default): the timer calls ``device.destroy()``. ``reset``: it calls the
class's destroy, bypassing the instance's guarded one, like a GPU reset the application did
not ask for (used to measure what the submission guard cannot pre-empt; not asserted).
"""

import json
import logging
import os
import random
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(__file__))

from engine_support import Applied, make_world, summary_product  # noqa: E402

from engine_plugin.engine import Engine  # noqa: E402
from engine_plugin.device.context import get_context  # noqa: E402

logging.basicConfig(level=logging.CRITICAL)


def one_run(rng: random.Random, index: int, mode: str = "destroy") -> dict:
    ctx = get_context()
    assert not ctx.lost, "get_context() handed out a context already marked lost"
    world = make_world(n=16, seed=index)
    engine = Engine(world, device=ctx)
    applied = Applied(world)
    summary_product(engine, "height", applied)
    summary_product(engine, "moisture", Applied(world))
    for _ in range(2):
        engine.frame()  # warm: pipelines made, readbacks in flight
    delay = rng.uniform(0.0, 0.03)
    dev = ctx.device
    timer = threading.Timer(delay, dev.destroy if mode == "destroy" else (lambda: type(dev).destroy(dev)))
    escaped = []
    frames = 0
    timer.start()
    deadline = time.monotonic() + delay + 0.15
    while time.monotonic() < deadline:
        world.write(rng.randrange(16), "height", rng.random())
        try:
            engine.frame()
        except Exception as exc:  # what the test counts: nothing may escape frame()
            escaped.append(f"{type(exc).__name__}: {exc}".splitlines()[0][:200] + " | " + " <- ".join(l.strip() for l in traceback.format_exc().splitlines() if l.strip().startswith("File"))[-900:])
        frames += 1
        time.sleep(0.0005 if rng.random() < 0.5 else 0)
    timer.join()
    after = get_context()
    result = {"run": index, "delay_ms": round(delay * 1000, 2), "frames": frames, "escaped": escaped,
              "gpu_active": engine.gpu_active, "new_context": after is not ctx and not after.lost}
    try:
        engine.close()
    except Exception as exc:
        result["escaped"].append(f"close: {type(exc).__name__}: {exc}"[:200])
    return result


def main() -> int:
    seed, runs = int(sys.argv[1]), int(sys.argv[2])
    mode = sys.argv[3] if len(sys.argv) > 3 else "destroy"
    rng = random.Random(seed)
    escaped = 0
    stale = 0
    for i in range(runs):
        r = one_run(rng, seed * 1000 + i, mode)
        escaped += len(r["escaped"]) > 0
        stale += not r["new_context"]
        print(json.dumps(r), flush=True)
    print(json.dumps({"summary": True, "runs": runs, "escaped_runs": escaped, "stale_contexts": stale}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
