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


@pytest.fixture(scope="session")
def demo_cache(tmp_path_factory):
    """One variant cache for every demo test: a window test starts from warm lowerings."""
    return str(tmp_path_factory.mktemp("demo-cache"))


@pytest.fixture()
def assets_copy(tmp_path):
    """The demo's own kernels (package data) copied, so a test can edit them."""
    from engine_plugin.demo.game import demo_assets

    root = tmp_path / "assets"
    shutil.copytree(demo_assets(), root)
    return str(root)


@pytest.fixture()
def demo_window(xvfb, assets_copy, demo_cache, tmp_path):
    """The windowed demo under Xvfb, paused at frame PAUSE_AT (see window_script.py): enough
    frames for the heaters to draw a picture, few enough to start in seconds."""
    from window_support import PAUSE_AT, DemoWindowRun

    run = DemoWindowRun(xvfb, assets_copy, demo_cache, str(tmp_path), pause_at=PAUSE_AT)
    try:
        run.wait(lambda s: s["paused"], f"the demo to pause at frame {PAUSE_AT}", timeout=120)
        yield run
    finally:
        run.close()
