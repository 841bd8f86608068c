"""The live-edit demo for real: headless determinism, and a real window under Xvfb that follows
edits of colorize.wgsl on disk and survives a broken save."""

import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
from PIL import Image

from engine_plugin.demo.game import HeatDemo, demo_assets
from engine_plugin.demo.headless import run_headless

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAUSE_AT = 60


@pytest.fixture()
def assets_copy(tmp_path):
    # The demo's own kernels (package data) copied, so the window test can edit them; the
    # engine's summary kernel is found by the library whatever its root.
    root = tmp_path / "assets"
    shutil.copytree(demo_assets(), root)
    return str(root)


def headless_pixels(assets: str, cache: str, frames: int, order: str = "rgba") -> np.ndarray:
    demo = HeatDemo(assets, cache, pixel_order=order)
    try:
        for _ in range(frames):
            demo.step()
        return demo.read_pixels()
    finally:
        demo.close()


def test_headless_demo_is_deterministic_and_writes_a_non_blank_png(assets_copy, tmp_path):
    cache = str(tmp_path / "cache")
    a = headless_pixels(assets_copy, cache, 40)
    b = headless_pixels(assets_copy, cache, 40)
    assert a.tobytes() == b.tobytes()
    assert len(np.unique(a.reshape(-1, 4), axis=0)) > 20  # a picture, not a flat colour
    demo = HeatDemo(assets_copy, cache)
    try:
        out = run_headless(demo, 20, str(tmp_path / "snap.png"), out=open(os.devnull, "w"))
    finally:
        demo.close()
    assert out["frames"] == 20 and os.path.getsize(tmp_path / "snap.png") > 1000
    assert Image.open(tmp_path / "snap.png").size == (512, 512)


def _screenshot(display: str, path: str) -> np.ndarray:
    subprocess.run(["import", "-display", display, "-window", "root", "-crop", "512x512+0+0", path],
                   check=True, timeout=30, capture_output=True)
    return np.asarray(Image.open(path).convert("RGB")).astype(np.int16)


def _wait_state(state: str, proc, predicate, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the demo exited ({proc.returncode}): {proc.stderr.read().decode()[-3000:]}"
        if os.path.exists(state):
            with open(state) as f:
                text = f.read()
            head, _, diag = text.partition("|")
            parts = head.split()
            if len(parts) == 3:
                last = (int(parts[0]), int(parts[1]), parts[2] == "1", diag)
                if predicate(*last):
                    return last
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}; last state {last}")


def _window_title(display: str) -> str:
    out = subprocess.run(["xwininfo", "-display", display, "-root", "-tree"], capture_output=True, text=True, timeout=10).stdout
    return "\n".join(line for line in out.splitlines() if "engine_plugin demo" in line)


def test_window_shows_the_field_follows_a_colorize_edit_and_survives_a_broken_save(xvfb, assets_copy, tmp_path):
    cache = str(tmp_path / "cache")
    state = str(tmp_path / "state")
    env = dict(os.environ, DISPLAY=xvfb)
    proc = subprocess.Popen([sys.executable, os.path.join(REPO, "tests", "demo", "window_script.py"), assets_copy, cache, state, str(PAUSE_AT)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _, gen0, _, _ = _wait_state(state, proc, lambda f, g, p, d: p, "the demo to pause at frame 60")
        time.sleep(0.3)
        shot = _screenshot(xvfb, str(tmp_path / "a.png"))
        assert shot.std() > 5, "the window is blank"
        want = headless_pixels(assets_copy, str(tmp_path / "cache2"), PAUSE_AT)[..., :3].astype(np.int16)
        assert np.abs(shot - want).mean() < 3.0, "the window does not show what the headless run computes"

        # Swap red and blue in the kernel, on disk, while the game runs.
        wgsl = os.path.join(assets_copy, "colorize.computeShader", "colorize.wgsl")
        text = open(wgsl).read()
        swapped = text.replace("clamp(palette_at(t), vec4<f32>(0.0)", "clamp(palette_at(t).bgra, vec4<f32>(0.0)", 1)
        assert swapped != text
        with open(wgsl, "w") as f:
            f.write(swapped)
        _wait_state(state, proc, lambda f, g, p, d: g > gen0, "the edit to reload")
        time.sleep(0.3)
        edited = _screenshot(xvfb, str(tmp_path / "b.png"))
        assert np.abs(edited - shot[..., ::-1]).mean() < 3.0, "the edit (red <-> blue) is not what the window shows"
        assert np.abs(edited - shot).mean() > 3.0

        # A broken save: the picture stays, the diagnostics show in the title.
        with open(wgsl, "w") as f:
            f.write(swapped.replace("let px = gid.x;", "let px = gid.x"))
        _, _, _, diag = _wait_state(state, proc, lambda f, g, p, d: "colorize.wgsl:" in d, "the diagnostics")
        time.sleep(0.3)
        broken = _screenshot(xvfb, str(tmp_path / "c.png"))
        assert np.abs(broken - edited).mean() < 1.0, "a broken save changed the picture"
        assert "colorize.wgsl:" in _window_title(xvfb)
    finally:
        open(state + ".stop", "w").close()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
