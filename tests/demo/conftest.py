"""Xvfb for window tests: on a display number it picks itself, stopped by its own PID."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import time

import pytest


@pytest.fixture()
def xvfb():
    """A running Xvfb; yields its DISPLAY string. Missing Xvfb is a failure (make test installs it).

    Xvfb picks a free display itself (``-displayfd``) and says which: two test runs on one
    machine looked for a free number at the same moment, took the same one, and the second's
    window died when the first stopped its server."""
    exe = shutil.which("Xvfb")
    assert exe, "Xvfb is not installed (Debian: apt-get install xvfb); make test's bootstrap installs it"
    read, write = os.pipe()
    proc = subprocess.Popen([exe, "-displayfd", str(write), "-screen", "0", "1024x768x24", "-nolisten", "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(write,))
    os.close(write)
    number = b""
    deadline = time.monotonic() + 10
    try:
        while not number.endswith(b"\n"):
            assert proc.poll() is None, f"Xvfb exited with {proc.returncode}"
            assert time.monotonic() < deadline, "Xvfb did not report its display within 10 s"
            ready, _, _ = select.select([read], [], [], 0.1)
            if ready:
                chunk = os.read(read, 16)
                assert chunk, f"Xvfb closed its display pipe (exit {proc.poll()})"
                number += chunk
    finally:
        os.close(read)
    n = int(number.strip())
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
