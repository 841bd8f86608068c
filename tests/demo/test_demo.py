"""The live-edit demo for real: headless determinism, and a real window under Xvfb that follows
edits of colorize.wgsl on disk and survives a broken save."""

import os
import subprocess

import numpy as np
from demo_support import advance
from PIL import Image
from window_support import PAUSE_AT  # the windowed demo pauses there (conftest's demo_window)

from engine_plugin.demo.game import HeatDemo
from engine_plugin.demo.headless import run_headless


def headless_pixels(assets: str, cache: str, frames: int, order: str = "rgba") -> np.ndarray:
    """The picture after ``frames`` game frames (host frames the engine defers advance nothing)."""
    demo = HeatDemo(assets, cache, pixel_order=order)
    try:
        advance(demo, frames)
        assert demo.frame_index == frames
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
    assert out["frames"] == 20 and demo.frame_index == 20 and os.path.getsize(tmp_path / "snap.png") > 1000
    assert out["host_frames"] >= 20  # frames the engine deferred do not count
    assert Image.open(tmp_path / "snap.png").size == (512, 512)


def test_window_shows_the_field_follows_a_colorize_edit_and_survives_a_broken_save(demo_window, assets_copy, tmp_path):
    run = demo_window
    run.command("key o")  # the overlay off: the whole picture is the field
    run.frames_later()
    shot = run.screenshot("a.png", (512, 512))
    assert shot.std() > 5, "the window is blank"
    want = headless_pixels(assets_copy, str(tmp_path / "cache2"), PAUSE_AT)[..., :3].astype(np.int16)
    assert np.abs(shot - want).mean() < 3.0, "the window does not show what the headless run computes"
    gen0 = run.state()["generation"]

    # Swap red and blue in the kernel, on disk, while the game runs.
    wgsl = os.path.join(assets_copy, "colorize.computeShader", "colorize.wgsl")
    text = open(wgsl).read()
    swapped = text.replace("clamp(palette_at(t), vec4<f32>(0.0)", "clamp(palette_at(t).bgra, vec4<f32>(0.0)", 1)
    assert swapped != text
    with open(wgsl, "w") as f:
        f.write(swapped)
    run.wait(lambda s: s["generation"] > gen0, "the edit to reload")
    run.frames_later()
    edited = run.screenshot("b.png", (512, 512))
    assert np.abs(edited - shot[..., ::-1]).mean() < 3.0, "the edit (red <-> blue) is not what the window shows"
    assert np.abs(edited - shot).mean() > 3.0

    # A broken save: the picture stays (outside the error panel), the diagnostics show in the title too.
    with open(wgsl, "w") as f:
        f.write(swapped.replace("let v = field_get(tile);", "let v = field_get(tile)"))
    state = run.wait(lambda s: "colorize.wgsl:" in s["diagnostics"] and s["error_rect"], "the diagnostics")
    run.frames_later()
    broken = run.screenshot("c.png", (512, 512))
    top = state["error_rect"][1]
    assert np.abs(broken[:top] - edited[:top]).mean() < 1.0, "a broken save changed the picture"
    assert "colorize.wgsl:" in _window_title(run.display)


def _window_title(display: str) -> str:
    out = subprocess.run(["xwininfo", "-display", display, "-root", "-tree"], capture_output=True, text=True, timeout=10).stdout
    return "\n".join(line for line in out.splitlines() if "engine_plugin demo" in line)


def test_a_headless_demo_stopped_by_sigterm_writes_its_log_whole_and_exits_143(assets_copy, tmp_path):
    # Review helper 199: SIGTERM killed it with nothing said; the figures log stopped frames
    # before the progress line (Ctrl-C: exit 130, a message, a whole log).
    import json
    import signal
    import sys
    import time

    log = tmp_path / "figures.jsonl"
    env = dict(os.environ, DISPLAY="")
    cmd = [
        sys.executable,
        "-m",
        "engine_plugin",
        "demo",
        "--headless",
        "--assets",
        assets_copy,
        "--cache",
        str(tmp_path / "cache"),
        "--frames",
        "100000",
        "--snapshot",
        "",
        "--log",
        str(log),
        "--log-every",
        "1",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not log.exists() or log.stat().st_size < 2000):
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, (proc.returncode, err[-2000:])
    assert "interrupted (SIGTERM)" in err, err[-2000:]
    lines = log.read_text().splitlines()
    frames = [json.loads(line)["frame"] for line in lines]  # every line whole JSON
    assert frames and frames == sorted(frames)


def test_a_headless_demo_stopped_by_ctrl_c_writes_the_snapshot_of_its_last_frame_and_exits_130(assets_copy, tmp_path):
    # Review helper 228: SIGINT after some frames wrote the figures log whole but no snapshot.
    import json
    import signal
    import sys
    import time

    log = tmp_path / "figures.jsonl"
    png = tmp_path / "out" / "snap.png"
    env = dict(os.environ, DISPLAY="", WAYLAND_DISPLAY="")
    cmd = [sys.executable, "-m", "engine_plugin", "demo", "--assets", assets_copy, "--cache", str(tmp_path / "cache"), "--frames", "100000"]
    cmd += ["--snapshot", str(png), "--log", str(log), "--log-every", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not log.exists() or len(log.read_text().splitlines()) < 5):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (proc.returncode, err[-2000:])
    assert "interrupted (Ctrl-C)" in err, err[-2000:]
    frames = [json.loads(line)["frame"] for line in log.read_text().splitlines()]  # every line whole JSON
    assert frames and frames == sorted(frames)
    assert png.exists(), out[-2000:]
    pixels = np.asarray(Image.open(png))
    assert pixels.ndim == 3 and pixels.shape[2] == 4 and pixels[..., :3].std() > 0  # a picture, not a blank
    assert f"snapshot {png}" in out, out[-2000:]


def test_the_headless_progress_line_shows_brackets_in_the_title_as_they_are():
    # The line went to rich as markup: "[paused]" vanished as a tag, and a diagnostic quoting
    # the user's WGSL ("[/]") raised MarkupError out of the demo (review helper 224).
    import io

    from rich.console import Console

    from engine_plugin.demo.game import Hud
    from engine_plugin.demo.headless import _progress

    out = io.StringIO()
    hud = Hud(paused=True, diagnostics="k[old].computeShader/kernel.wgsl:3:5: unknown identifier 'b[/]'")
    _progress(Console(file=out, width=400), False, hud, 99, 100)
    assert "[paused]" in out.getvalue() and "k[old].computeShader/kernel.wgsl:3:5: unknown identifier 'b[/]'" in out.getvalue()


def test_ctrl_c_closes_the_window_between_frames_and_exits_0(xvfb, assets_copy, demo_cache):
    # Review helper 244: rendercanvas's loop stopped itself inside its SIGINT handler, in the
    # middle of a frame: a wgpu-native panic (exit 134, "Texture ... does not exist", "a
    # SwapchainAcquireSemaphore that is still in use") or tracebacks in 5 of 9 Ctrl-Cs. The
    # window now closes after the frame being drawn, as Esc closes it (README: exit 0).
    import signal
    import sys
    import time

    env = dict(os.environ, DISPLAY=xvfb, WAYLAND_DISPLAY="")
    cmd = [sys.executable, "-m", "engine_plugin", "demo", "--assets", assets_copy, "--cache", demo_cache, "--frames", "1000000"]
    for attempt in range(2):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None and "engine_plugin demo" not in _window_title(xvfb):
                time.sleep(0.2)
            time.sleep(2.0 + attempt)  # frames drawing, their readbacks in flight
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, (attempt, proc.returncode, err[-3000:])
        for bad in ("Traceback", "panicked", "Exception ignored", "Draw error"):
            assert bad not in err, (attempt, err[-3000:])
