"""Runs the windowed demo for the window test (a subprocess: a wgpu panic must not take pytest down).

argv: ASSETS CACHE STATE_FILE PAUSE_AT. Writes "frame generation paused|diagnostics" to STATE_FILE
every frame; pauses the simulation at frame PAUSE_AT; exits when STATE_FILE + '.stop' appears.
"""

import os
import sys

from engine_plugin.demo.game import HeatDemo
from engine_plugin.demo.window import run_window

assets, cache, state, pause_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])


def on_frame(demo, shown):
    if demo.frame_index >= pause_at and not demo.paused:
        demo.paused = True
    diag = (demo.hud.diagnostics or "").splitlines()[0] if demo.hud.diagnostics else ""
    tmp = state + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{demo.frame_index} {demo.color_ref.generation} {int(demo.paused)}|{diag}")
    os.replace(tmp, state)
    if os.path.exists(state + ".stop"):
        raise SystemExit(0)


try:
    run_window(lambda **kw: HeatDemo(assets, cache, watch=True, **kw), frames=None, on_frame=on_frame)
except SystemExit:
    pass
