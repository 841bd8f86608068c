"""``engine-plugin watch ASSETS`` prints reloads and diagnostics live."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from asset_support import kernel, write

pytestmark = pytest.mark.gpu

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _read_until(proc, needle: str, lines: list, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return
    raise AssertionError(f"no {needle!r} in the output:\n{''.join(lines)}")


def test_watch_prints_a_failure_with_its_line_then_the_reload_that_fixes_it(asset_root, tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "engine_plugin.cli", "watch", asset_root, "--cache", str(tmp_path / "cache"), "--all-variants", "--max-events", "2", "--duration", "60", "-v"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO)
    lines: list[str] = []
    try:
        _read_until(proc, "watching 1 asset", lines)
        path = os.path.join(asset_root, "k.computeShader", "kernel.wgsl")
        write(path, kernel("typo_here"))
        _read_until(proc, "failed", lines)
        _read_until(proc, "^", lines)  # the caret under the column
        write(path, kernel(3.0))
        _read_until(proc, "reloaded k.computeShader -> generation 1", lines)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = "".join(lines)
    assert "kernel.wgsl:6:" in out and "typo_here" in out
    assert "3 variant(s) recompiled" in out  # --all-variants: every variant is in use
