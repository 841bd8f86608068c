"""Xvfb for window tests: started on a free display number, stopped by its own PID."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest


def _free_display() -> int:
    for n in range(90, 200):
        if not os.path.exists(f"/tmp/.X{n}-lock") and not os.path.exists(f"/tmp/.X11-unix/X{n}"):
            return n
    raise RuntimeError("no free X display number in 90..199")


@pytest.fixture()
def xvfb():
    """A running Xvfb; yields its DISPLAY string. Missing Xvfb is a failure (make test installs it)."""
    exe = shutil.which("Xvfb")
    assert exe, "Xvfb is not installed (Debian: apt-get install xvfb); make test's bootstrap installs it"
    n = _free_display()
    proc = subprocess.Popen([exe, f":{n}", "-screen", "0", "1024x768x24", "-nolisten", "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not os.path.exists(f"/tmp/.X11-unix/X{n}"):
        assert proc.poll() is None, f"Xvfb :{n} exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"Xvfb :{n} did not start within 10 s"
        time.sleep(0.05)
    try:
        yield f":{n}"
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
