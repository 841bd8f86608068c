"""``engine-plugin watch ASSETS`` prints reloads and diagnostics live."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from typing import Iterator

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


@contextlib.contextmanager
def _watch(asset_root: str, cache: str, *options: str, cwd: str = REPO) -> Iterator[subprocess.Popen]:
    """``engine-plugin watch ASSET_ROOT --cache CACHE OPTIONS`` in a process whose stdout (and
    stderr) the test reads line by line; killed if the test leaves it running."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "engine_plugin.cli", "watch", asset_root, "--cache", cache, *options]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_watch_prints_a_failure_with_its_line_then_the_reload_that_fixes_it(asset_root, tmp_path):
    lines: list[str] = []
    with _watch(asset_root, str(tmp_path / "cache"), "--all-variants", "--max-events", "2", "--duration", "60", "-v") as proc:
        _read_until(proc, "watching 1 asset", lines)
        path = os.path.join(asset_root, "k.computeShader", "kernel.wgsl")
        write(path, kernel("typo_here"))
        _read_until(proc, "failed", lines)
        _read_until(proc, "^", lines)  # the caret under the column
        write(path, kernel(3.0))
        _read_until(proc, "reloaded k.computeShader -> generation 1", lines)
        assert proc.wait(timeout=30) == 0
        lines.append(proc.stdout.read())
    out = "".join(lines)
    assert "kernel.wgsl:6:" in out and "typo_here" in out
    assert "3 variant(s) recompiled" in out  # --all-variants: every variant is in use
    assert "variants from: 3 lowered" in out


def test_watch_json_says_where_a_reloads_variants_came_from(asset_root, tmp_path):
    # Review helper 109: the text log said "variants from: 1 remote"; the JSON stream (the form
    # for editor plugins) had no origin at all.
    import json

    lines: list[str] = []
    with _watch(asset_root, str(tmp_path / "cache"), "--json", "--max-events", "1", "--duration", "60") as proc:
        _read_until(proc, '"event": "watching"', lines)
        write(os.path.join(asset_root, "k.computeShader", "kernel.wgsl"), kernel(5.0))
        _read_until(proc, '"event": "reload"', lines)
        assert proc.wait(timeout=30) == 0
    (reload,) = [json.loads(line) for line in lines if '"event": "reload"' in line]
    assert reload["origins"] == {"lowered": len(reload["recompiled"])} and reload["recompiled"]


def test_watch_reports_a_body_broken_at_start_and_an_undone_failed_edit(asset_root, tmp_path):
    # Review helpers 80 and 84: a body that did not compile when the watch started was never
    # reported (only with --all-variants), and undoing a failed edit back to the live content
    # printed nothing, so an editor kept showing the fixed error.
    import json

    broken = os.path.join(asset_root, "b.computeShader")
    os.makedirs(broken)
    with open(os.path.join(asset_root, "k.computeShader", "bindings.yaml")) as f:
        write(os.path.join(broken, "bindings.yaml"), f.read())
    write(os.path.join(broken, "kernel.wgsl"), kernel("broken_at_start"))
    lines: list[str] = []
    with _watch(asset_root, str(tmp_path / "cache"), "--json", "--max-events", "2", "--duration", "60") as proc:
        _read_until(proc, '"event": "watching"', lines)
        path = os.path.join(asset_root, "k.computeShader", "kernel.wgsl")
        with open(path) as f:
            live = f.read()
        write(path, kernel("typo_here"))
        _read_until(proc, "typo_here", lines)
        write(path, live)  # undone
        _read_until(proc, '"event": "cleared"', lines)
        assert proc.wait(timeout=30) == 1  # b.computeShader still fails as it stops (the exit contract)
    events = [json.loads(line) for line in lines if line.startswith("{")]
    # Told what is watched before a failure of one of those assets (review helper 152).
    assert events[0]["event"] == "watching" and events[0]["assets"] == ["b.computeShader", "k.computeShader"]
    assert [(e["event"], e["asset"]) for e in events if e["event"] != "watching"] == [
        ("failure", "b.computeShader"),
        ("failure", "k.computeShader"),
        ("cleared", "k.computeShader"),
    ]
    assert "broken_at_start" in events[1]["message"] and events[1]["path"].endswith(os.path.join("b.computeShader", "kernel.wgsl"))


def test_watch_undoing_back_to_a_body_that_never_compiled_reports_its_failure_not_cleared(asset_root, tmp_path):
    # Review helper 85: the undo read as "back to its live content; diagnostics cleared" though
    # the live content was the body reported broken at start.
    import json

    path = os.path.join(asset_root, "k.computeShader", "kernel.wgsl")
    write(path, kernel("broken_at_start"))
    lines: list[str] = []
    with _watch(asset_root, str(tmp_path / "cache"), "--json", "--max-events", "2", "--duration", "60") as proc:
        _read_until(proc, '"event": "watching"', lines)
        write(path, kernel("another_typo"))
        _read_until(proc, "another_typo", lines)
        write(path, kernel("broken_at_start"))  # undone: the live, broken, content
        assert proc.wait(timeout=30) == 1  # failing as it stops (the exit contract)
        lines += proc.stdout.readlines()
    events = [json.loads(line) for line in lines if line.startswith("{")]
    kinds = [e["event"] for e in events if e["event"] != "watching"]
    assert kinds == ["failure", "failure", "failure"], events
    assert "broken_at_start" in events[-1]["message"]


def test_watch_says_once_that_a_cache_path_it_cannot_use_turns_the_cache_off(asset_root, tmp_path):
    # Review helper 107: watch silences the library's warnings about its assets (it reports
    # each diagnostic itself), which silenced "variant cache disabled" too.
    (tmp_path / "cachefile").write_text("not a folder")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "engine_plugin.cli", "watch", asset_root, "--cache", str(tmp_path / "cachefile"), "--duration", "0.5"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("variant cache disabled") == 1 and "is not a folder" in proc.stderr


def test_watch_takes_an_asset_made_under_its_folder_while_it_runs(asset_root, tmp_path):
    # The asset list was fixed at start: a new asset (or one moved in) and every later edit of
    # it went unreported until watch was restarted (review helper 117).
    import json

    from asset_support import make_asset

    lines: list[str] = []
    with _watch(asset_root, str(tmp_path / "cache"), "--json", "--duration", "60") as proc:
        _read_until(proc, '"event": "watching"', lines)
        staging = tmp_path / "elsewhere"
        folder = make_asset(str(staging), name="fresh")
        os.makedirs(os.path.join(asset_root, "sub"))
        os.rename(folder, os.path.join(asset_root, "sub", "fresh.computeShader"))  # moved in, one folder down
        _read_until(proc, '"event": "added"', lines)
        added = json.loads(lines[-1])
        assert added["asset"] == "sub/fresh.computeShader" and added["generation"] == 0
        time.sleep(0.2)
        write(os.path.join(asset_root, "sub", "fresh.computeShader", "kernel.wgsl"), kernel("typo_here"))
        _read_until(proc, '"event": "failure"', lines)
        failure = json.loads(lines[-1])
        assert failure["asset"] == "sub/fresh.computeShader" and failure["path"].endswith("kernel.wgsl") and failure["line"] > 0
        write(os.path.join(asset_root, "sub", "fresh.computeShader", "kernel.wgsl"), kernel(5.0))
        _read_until(proc, '"event": "reload"', lines)
        assert json.loads(lines[-1])["asset"] == "sub/fresh.computeShader"


def test_watch_says_an_asset_removed_or_renamed_is_gone_not_failing_and_exits_0(asset_root, tmp_path):
    # A renamed or deleted asset was reported as a failure for good and made watch exit 1
    # (review helper 120).
    import json
    import shutil
    import signal

    from asset_support import make_asset

    make_asset(asset_root, name="b")
    lines: list[str] = []
    with _watch(asset_root, str(tmp_path / "cache"), "--json", "--duration", "60") as proc:
        _read_until(proc, '"event": "watching"', lines)
        os.rename(os.path.join(asset_root, "k.computeShader"), os.path.join(asset_root, "k2.computeShader"))
        _read_until(proc, '"asset": "k2.computeShader"', lines)
        kept = str(tmp_path / "b_copy")
        shutil.copytree(os.path.join(asset_root, "b.computeShader"), kept)
        shutil.rmtree(os.path.join(asset_root, "b.computeShader"))
        _read_until(proc, '"event": "removed", "asset": "b.computeShader"', lines)
        shutil.copytree(kept, os.path.join(asset_root, "b.computeShader"))
        _read_until(proc, '"event": "added", "asset": "b.computeShader"', lines)
        time.sleep(1.5)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        lines += proc.stdout.readlines()
    events = [json.loads(line) for line in lines if line.startswith("{")]
    said = [(e["event"], e["asset"]) for e in events if e["event"] != "watching"]
    assert ("removed", "k.computeShader") in said and ("added", "k2.computeShader") in said
    assert ("removed", "b.computeShader") in said and ("added", "b.computeShader") in said
    assert not [e for e in events if e["event"] == "failure"], events


def test_watch_of_a_relative_folder_keeps_an_asset_put_back_at_once(asset_root, tmp_path):
    # With a relative target ("assets", the default) the scan's paths and the library's never
    # matched: an asset removed and put back within a scan was never watched again (helper 121).
    import json
    import shutil

    lines: list[str] = []
    parent = os.path.dirname(asset_root)
    with _watch(os.path.basename(asset_root), str(tmp_path / "cache"), "--json", "--duration", "60", cwd=parent) as proc:
        _read_until(proc, '"event": "watching"', lines)
        kept = str(tmp_path / "k_copy")
        shutil.copytree(os.path.join(asset_root, "k.computeShader"), kept)
        shutil.rmtree(os.path.join(asset_root, "k.computeShader"))
        _read_until(proc, '"event": "removed"', lines)
        shutil.copytree(kept, os.path.join(asset_root, "k.computeShader"))  # at once
        _read_until(proc, '"event": "added"', lines)
        time.sleep(1.5)
        write(os.path.join(asset_root, "k.computeShader", "kernel.wgsl"), kernel("typo_here"))
        _read_until(proc, '"event": "failure"', lines)
        assert json.loads(lines[-1])["asset"] == "k.computeShader"


def test_watch_stopped_by_sigterm_exits_as_by_ctrl_c(asset_root, tmp_path):
    # An editor plugin stops watch with SIGTERM: it died of the signal (-15), without closing
    # its library or the exit status saying an asset is failing (review helper 175).
    import signal

    from asset_support import kernel

    write(os.path.join(asset_root, "k.computeShader", "kernel.wgsl"), kernel("typo_here"))
    lines: list[str] = []
    with _watch(asset_root, str(tmp_path / "cache"), "--json", "--duration", "60") as proc:
        _read_until(proc, '"event": "failure"', lines)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 1  # an asset is failing as it stops
    with _watch(asset_root, str(tmp_path / "cache"), "--json", "--duration", "60") as proc:
        _read_until(proc, '"event": "watching"', lines)
        proc.send_signal(signal.SIGTERM)  # at once: before the assets are checked (helper 178)
        assert proc.wait(timeout=30) in (0, 1)
