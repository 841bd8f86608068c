"""The overlay in a real window under Xvfb: the error panel after a broken save and gone after
the fix, the letterbox when the window is resized, the screenshot and step keys.

Keys are real rendercanvas ``key_down`` events submitted to the canvas inside the window loop
(the path glfw's key callback takes; xdotool is not installed here), see window_script.py.
"""

import os

import numpy as np
from PIL import Image

SIZE = (512, 512)


def _break(path: str) -> str:
    good = open(path).read()
    with open(path, "w") as f:
        f.write(good.replace("let v = field_get(tile);", "let v = field_get(tile)"))
    return good


def test_a_broken_save_shows_the_error_panel_at_file_line_col_until_the_file_is_fixed(demo_window, assets_copy):
    run = demo_window
    healthy_state = run.frames_later()
    assert healthy_state["error_rect"] is None and any("frame" in line for line in healthy_state["overlay"])
    healthy = run.screenshot("healthy.png", SIZE)

    wgsl = os.path.join(assets_copy, "colorize.computeShader", "colorize.wgsl")
    good = _break(wgsl)
    state = run.wait(lambda s: s["error_rect"] is not None, "the error panel")
    text = "\n".join(state["overlay"])
    assert "colorize.computeShader/colorize.wgsl:27:5: expected `;`" in text, text
    i = state["overlay"].index(next(line for line in state["overlay"] if "colorize.wgsl:27:5" in line))
    assert state["overlay"][i + 1].strip().startswith("let t = (v - params.lo)") and state["overlay"][i + 2].strip() == "^"
    assert state["overlay"][i + 2].index("^") == state["overlay"][i + 1].index("let")  # the caret under column 5
    run.frames_later()
    broken = run.screenshot("broken.png", SIZE)
    x, y, w, h = state["error_rect"]
    assert (x, x + w, y + h) == (0, SIZE[0], SIZE[1]) and 0 < h < SIZE[1] // 2
    panel, before = broken[y:, :], healthy[y:, :]
    assert np.abs(panel - before).mean() > 20, "the error panel is not visible where it should be"
    assert panel[..., 0].mean() > panel[..., 2].mean() + 30, "the error panel is not red"

    # Still there frames later: it stays until the file is fixed.
    assert run.frames_later(5)["error_rect"] is not None

    with open(wgsl, "w") as f:
        f.write(good)
    state = run.wait(lambda s: s["error_rect"] is None, "the error panel to go away")
    assert not any("colorize.wgsl:27:5" in line for line in state["overlay"])
    run.frames_later()
    fixed = run.screenshot("fixed.png", SIZE)
    assert np.abs(fixed[y:, :] - before).mean() < 2.0, "the panel's region does not look healthy again"


def _bars(shot: np.ndarray) -> tuple[int, int, int, int]:
    """(left, right, top, bottom) widths of the pure-black bars around the picture (the
    palette's darkest stop is (0, 0, 5): a picture pixel is never pure black)."""
    content = shot.max(axis=2) > 0
    cols, rows = np.flatnonzero(content.any(axis=0)), np.flatnonzero(content.any(axis=1))
    return int(cols[0]), int(shot.shape[1] - 1 - cols[-1]), int(rows[0]), int(shot.shape[0] - 1 - rows[-1])


def test_resizing_the_window_keeps_the_picture_square_between_letterbox_bars(demo_window):
    run = demo_window
    run.command("key o")  # hide the overlay: the bars are measured from the picture alone
    for size, bars in (((800, 400), (200, 200, 0, 0)), ((400, 640), (0, 0, 120, 120))):
        run.command(f"resize {size[0]} {size[1]}")
        state = run.wait(lambda s, size=size: s["size"] == list(size), f"the window at {size}")
        assert state["viewport"] == [bars[0], bars[2], min(size), min(size)]
        run.frames_later()
        shot = run.screenshot(f"resized-{size[0]}x{size[1]}.png", size)
        assert _bars(shot) == bars, f"at {size}"
        x, y, side = bars[0], bars[2], min(size)
        picture = shot[y : y + side, x : x + side]
        assert picture.std() > 5 and (picture.max(axis=2) > 0).all()


def test_the_screenshot_key_writes_a_png_of_what_the_window_shows(demo_window):
    run = demo_window
    state = run.command("key F12")
    state = run.wait(lambda s: s["screenshot"], "the screenshot")
    assert any(line.startswith("screenshot: ") for line in run.frames_later()["overlay"])
    path = state["screenshot"]
    assert os.path.dirname(path) == run.shots and path.endswith(".png")
    saved = np.asarray(Image.open(path).convert("RGB")).astype(np.int16)
    assert saved.shape == (SIZE[1], SIZE[0], 3) and saved.std() > 5
    shown = run.screenshot("x.png", SIZE)
    # Paused: the same picture and overlay; the stats panel's timings and its new notice line
    # differ, so the rows below it (the picture alone; the panel lists five products and ends
    # near row 340) must match and the rest be close.
    assert np.abs(saved[380:] - shown[380:]).mean() < 1.0 and np.abs(saved - shown).mean() < 10.0
    assert np.abs(saved[:40, :300] - shown[:40, :300]).max(axis=2).mean() < 40  # the overlay is in it


def test_the_step_key_advances_exactly_one_frame_while_paused(demo_window):
    run = demo_window
    frame = run.state()["frame"]
    state = run.command("key n")
    state = run.wait(lambda s: s["frame"] == frame + 1, "one step")
    assert state["paused"]
    assert run.frames_later(5)["frame"] == frame + 1
    run.command("key space")  # resume
    run.wait(lambda s: not s["paused"] and s["frame"] > frame + 2, "the demo to run again")


def test_a_screenshot_folder_that_cannot_be_made_is_said_and_the_demo_goes_on(demo_window):
    # Review helper 199: a raw traceback on stderr ("Draw error"), nothing in the overlay.
    run = demo_window
    with open(run.shots, "w") as f:  # a file where the folder should be
        f.write("not a folder")
    run.command("key F12")
    state = run.wait(lambda s: s["screenshot"], "the screenshot attempt")
    assert state["screenshot"].startswith("not saved"), state["screenshot"]
    later = run.frames_later()
    assert any(line.startswith("screenshot: not saved") for line in later["overlay"]), later["overlay"]
