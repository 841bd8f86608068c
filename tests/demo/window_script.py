"""Runs the windowed demo for the window tests (a subprocess: a wgpu panic must not take pytest down).

argv: ASSETS CACHE STATE PAUSE_AT SCREENSHOTS.

Every frame it writes STATE (JSON, replaced atomically): the frame index, the colorize
generation, paused, the first diagnostics line, the overlay's text log (what it drew), the
error panel's rectangle, the picture's viewport, the surface size. It pauses the simulation at
frame PAUSE_AT. Commands are lines appended to STATE + '.cmd', run in the window loop after a
frame: ``key NAME`` (``key space`` for the space bar) submits a real ``key_down`` event to the canvas (the same path glfw's key
callback takes, so the demo's and imgui's handlers both see it); ``resize W H`` resizes the
window. It exits when STATE + '.stop' appears.
"""

import json
import os
import sys

from engine_plugin.demo.game import HeatDemo
from engine_plugin.demo.window import run_window

assets, cache, state, pause_at, shots = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
done_commands = [0]
paused_once = [False]  # pause once at PAUSE_AT; later pauses and resumes are the test's keys


def run_commands(window):
    path = state + ".cmd"
    if not os.path.exists(path):
        return
    with open(path) as f:
        lines = [ln.split() for ln in f.read().splitlines() if ln.strip()]
    for words in lines[done_commands[0] :]:
        if words[0] == "key":
            key = {"space": " "}.get(words[1], words[1])  # command lines are split on spaces
            window.canvas.submit_event({"event_type": "key_down", "key": key, "modifiers": ()})
            window.canvas.submit_event({"event_type": "key_up", "key": key, "modifiers": ()})
        elif words[0] == "resize":
            window.canvas.set_logical_size(int(words[1]), int(words[2]))
    done_commands[0] = len(lines)


def on_frame(window, shown):
    demo = window.demo
    if demo.frame_index >= pause_at and not paused_once[0]:
        demo.paused = paused_once[0] = True
    run_commands(window)
    diag = (demo.hud.diagnostics or "").splitlines()[0] if demo.hud.diagnostics else ""
    snapshot = {
        "frame": demo.frame_index,
        "generation": demo.color_ref.generation,
        "paused": demo.paused,
        "diagnostics": diag,
        "overlay": window.overlay.lines,
        "overlay_visible": window.overlay.visible,
        "error_rect": window.overlay.error_rect,
        "viewport": window.viewport,
        "size": list(window.frame_size),
        "screenshot": window.last_screenshot,
        "commands": done_commands[0],
        "shown": shown,
    }
    tmp = state + ".tmp"
    with open(tmp, "w") as f:
        json.dump(snapshot, f)
    os.replace(tmp, state)
    if os.path.exists(state + ".stop"):
        raise SystemExit(0)


try:
    run_window(lambda **kw: HeatDemo(assets, cache, watch=True, **kw), frames=None, on_frame=on_frame, screenshots=shots)
except SystemExit:
    pass
