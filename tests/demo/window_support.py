"""Drive the windowed demo (window_script.py) in a subprocess under Xvfb: its state, its
commands, X screenshots. Every wait polls with a timeout; none sleeps a fixed time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
PAUSE_AT = 30  # the frame the windowed demo pauses at


class DemoWindowRun:
    """A running ``window_script.py``: ``state()``, ``command(...)``, ``wait(...)``, ``screenshot(...)``."""

    def __init__(self, display: str, assets: str, cache: str, folder: str, pause_at: int = PAUSE_AT):
        self.display = display
        self.folder = folder
        self.state_path = os.path.join(folder, "state")
        self.shots = os.path.join(folder, "shots")
        env = dict(os.environ, DISPLAY=display)
        self.log = open(os.path.join(folder, "window.log"), "w")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "window_script.py"), assets, cache, self.state_path, str(pause_at), self.shots],
            env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )
        self._commands = 0

    def state(self) -> dict | None:
        try:
            with open(self.state_path) as f:
                return json.load(f)
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def wait(self, predicate, what: str, timeout: float = 60.0) -> dict:
        """The first state for which ``predicate(state)`` holds (the demo must keep running)."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"the demo exited ({self.proc.returncode}): {self.output()[-3000:]}")
            state = self.state()
            if state is not None:
                last = state
                if predicate(state):
                    return state
            time.sleep(0.02)
        raise AssertionError(f"timed out waiting for {what}; last state {last}")

    def frames_later(self, n: int = 3, timeout: float = 60.0) -> dict:
        """A state ``n`` drawn frames after now (what X shows then includes every earlier change)."""
        now = self.wait(lambda s: True, "any frame")["shown"]
        return self.wait(lambda s: s["shown"] >= now + n, f"{n} more frames", timeout)

    def command(self, line: str) -> dict:
        """Send a command (``key NAME`` or ``resize W H``); answers the first state after it ran."""
        with open(self.state_path + ".cmd", "a") as f:
            f.write(line + "\n")
        self._commands += 1
        n = self._commands
        return self.wait(lambda s: s["commands"] >= n, f"command {line!r} to run")

    def screenshot(self, name: str, size: tuple[int, int]) -> np.ndarray:
        """The window's pixels (it sits at the X screen's origin), RGB as int16."""
        path = os.path.join(self.folder, name)
        subprocess.run(["import", "-display", self.display, "-window", "root", "-crop", f"{size[0]}x{size[1]}+0+0", path],
                       check=True, timeout=30, capture_output=True)
        return np.asarray(Image.open(path).convert("RGB")).astype(np.int16)

    def output(self) -> str:
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def close(self) -> None:
        open(self.state_path + ".stop", "w").close()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
