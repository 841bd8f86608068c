"""A hot reload that fails because the device was lost (not yet noticed) is no error of the
user's asset: it is not reported against the .wgsl, and it is retried after recovery. Runs in
a subprocess: a lost device must never take the test run down."""

from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(__file__)


def test_a_reload_failed_by_an_unnoticed_device_loss_is_retried_after_recovery_not_blamed_on_the_asset():
    proc = subprocess.run([sys.executable, os.path.join(HERE, "reload_loss_script.py")], capture_output=True, text=True,
                          timeout=180, env=dict(os.environ))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"exit {proc.returncode}\nstderr:\n{proc.stderr[-4000:]}"
    report = json.loads(lines[-1])
    assert report["error_after_loss"] is None and report["failures"] == 0, report
    assert report["recovered"] and report["generation"] == 1 and report["error"] is None, report
    assert report["new_kernel"] and report["last_source"] == "gpu", report
    assert proc.returncode == 0, proc.stderr[-4000:]
