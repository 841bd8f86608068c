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
