"""A real device loss (``device.destroy()``) mid-run, in a subprocess: frames keep running
on the CPU fallbacks with identical results, the loss is reported once, and
``recover_gpu()`` re-acquires a device and re-registers the products."""

from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(__file__)


def test_device_destroyed_mid_run_falls_back_reports_once_and_recovers():
    proc = subprocess.run([sys.executable, os.path.join(HERE, "loss_script.py")], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["lost_reports"] == 1 and not report["gpu_active_after_loss"]
    assert report["identical_while_lost"] and report["identical_after_recovery"]
    assert report["recovered"] and report["new_device"] and report["last_source"] == "gpu"


def test_readbacks_recover_gpu_drops_are_counted_stale_so_the_totals_add_up():
    # A readback in flight when recover_gpu() replaced the backend was counted nowhere:
    # requested != applied + stale + failed (helper 73).
    import time

    import numpy as np

    from engine_plugin.engine import Engine, fallbacks, kernel_program
    from engine_plugin.world import World

    world = World((4, 4), {"h": np.float32}, max_chunks=8)
    for k in range(4):
        world.add(k, {"h": np.full((4, 4), k, np.float32)})
    engine = Engine(world)
    engine.register_product(kernel_program("summary"), key="s", spec={"T": "f32"}, fields={"src": "h"}, apply=lambda r: None, cpu_fallback=fallbacks.summary)

    def settle():
        for _ in range(3000):
            engine.frame()
            if engine.idle and engine.backend.inflight_readbacks == 0:
                return
            time.sleep(0.002)
        raise AssertionError("not idle")

    settle()
    world.write(1, "h", 7.0)
    assert engine.frame().readbacks_requested == 1
    assert engine.recover_gpu()
    settle()
    t = engine.totals
    assert t.readbacks_requested == t.readbacks_applied + t.readbacks_stale + t.readbacks_failed
    engine.close()


def test_a_mirror_writer_runs_again_over_every_chunk_after_recovery():
    # Review helper 81: after recover_gpu() the NONE product writing the kernel-written mirror
    # owed nothing, so the new mirror kept the world's bytes and its reader applied zeros.
    proc = subprocess.run([sys.executable, os.path.join(HERE, "mirror_writer_loss_script.py")], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["recovered"]
    assert report["before"] == {k: [v, "gpu"] for k, v in report["expected"].items()}
    assert report["mirror"] == [3.0, 5.0]  # aux = 2 f + 1 of each chunk's first tile
    assert report["after"] == {k: [v, "gpu"] for k, v in report["expected"].items()}


def test_a_device_reported_faulty_is_never_offered_again_by_a_later_recovery():
    proc = subprocess.run([sys.executable, os.path.join(HERE, "faulted_device_script.py")], capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["recovered"] == [True, True]
    assert not report["d2_is_d1"] and not report["d3_is_d1"] and not report["d3_is_d2"]
    assert report["again"] == [True] * 10


def test_product_error_names_a_loss_found_outside_a_dispatch_until_recovery(gpu):
    # Found by an upload, a readback or the guard rather than by the product's own dispatch,
    # a loss left product_error() None while the product ran on its CPU fallback (a suite run
    # under load: loss_error_script's "error after the loss" read False).
    from engine_plugin.device.context import fresh_context
    from engine_plugin.engine import Engine, fallbacks, kernel_program
    from engine_plugin.errors import DeviceLostError

    from engine_support import make_world, run_until_idle

    private = fresh_context(avoid=gpu)
    world = make_world(n=8)
    engine = Engine(world, device=private)
    try:
        handle = engine.register_product(kernel_program("summary"), key="s", spec={"T": "f32"}, fields={"src": "height"},
                                         apply=lambda r: None, cpu_fallback=fallbacks.summary)
        run_until_idle(engine)
        assert engine.product_error(handle) is None
        private.lost = True  # what a backend or a probe marks when it finds the loss
        world.write(0, "height", 1.0)
        engine.frame()
        assert not engine.gpu_active
        assert isinstance(engine.product_error(handle), DeviceLostError), engine.product_error(handle)
        # One registered while it lasts, and a reload applied meanwhile, answer the loss too
        # (they answered None: helper 121).
        later = engine.register_product(kernel_program("summary"), key="s2", spec={"T": "f32"}, fields={"src": "height"},
                                        apply=lambda r: None, cpu_fallback=fallbacks.summary)
        engine.frame()
        assert isinstance(engine.product_error(later), DeviceLostError), engine.product_error(later)
        engine.product(handle).fail(None)  # what applying a reload does to the product
        engine.frame()
        assert isinstance(engine.product_error(handle), DeviceLostError), engine.product_error(handle)
        assert engine.recover_gpu(gpu)
        world.write(1, "height", 2.0)
        run_until_idle(engine)
        assert engine.product_error(handle) is None and engine.product_error(later) is None
    finally:
        engine.close()
