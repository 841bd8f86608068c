"""A bake killed outright (SIGKILL or SIGTERM from a supervisor, an IDE, the OOM killer) leaves
no worker process behind: they lived on for good, 130-200 MB each (review helper 117)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from bake_support import cli_env, copy_samples


def _children(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_killing_a_parallel_bake_ends_its_workers(tmp_path, sig):
    copy_samples(str(tmp_path / "assets"))
    cmd = [sys.executable, "-m", "engine_plugin.cli", "-q", "bake", "assets", "--cache", "cache", "-j", "2", "--progress", "none", "--force"]
    proc = subprocess.Popen(cmd, cwd=str(tmp_path), env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            # the pool's two workers (and the resource tracker), once they are up
            workers = _children(proc.pid)
            if len(workers) >= 3:
                break
            time.sleep(0.05)
        assert proc.poll() is None and len(workers) >= 2, "the bake ended before its workers could be seen"
        time.sleep(0.5)  # the workers are past their start-up
        proc.send_signal(sig)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(p) for p in workers):
            time.sleep(0.1)
        left = [p for p in workers if _alive(p)]
        assert not left, f"{len(left)} of the bake's processes outlived it: {left}"
    finally:
        for p in workers:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        if proc.poll() is None:
            proc.kill()


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def test_a_bake_killed_while_its_workers_still_start_leaves_none_behind(tmp_path):
    # A worker still importing when the client died took its new parent (init) for the client
    # and watched it for good: the test above failed on a loaded machine. Here every pool
    # process starts 3 s late (a sitecustomize), and the client is killed meanwhile.
    copy_samples(str(tmp_path / "assets"))
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text("import sys, time\nif '--multiprocessing-fork' in sys.argv:\n    time.sleep(3)\n")
    env = cli_env()
    env["PYTHONPATH"] = str(slow) + os.pathsep + env["PYTHONPATH"]
    cmd = [sys.executable, "-m", "engine_plugin.cli", "-q", "bake", "assets", "--cache", "cache", "-j", "2", "--progress", "none", "--force"]
    proc = subprocess.Popen(cmd, cwd=str(tmp_path), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None and len(workers) < 2:
            workers = {p for p in _children(proc.pid) if "--multiprocessing-fork" in _cmdline(p)}
            time.sleep(0.02)
        assert proc.poll() is None and len(workers) >= 2, "the bake ended before its workers could be seen"
        proc.kill()  # inside their 3 s start
        proc.wait(timeout=30)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(p) for p in workers):
            time.sleep(0.1)
        left = [p for p in workers if _alive(p)]
        assert not left, f"{len(left)} of the bake's workers outlived it: {left}"
    finally:
        for p in workers:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        if proc.poll() is None:
            proc.kill()


def test_ctrl_c_ends_a_bake_whose_workers_are_stuck_in_a_chunk(tmp_path):
    # Ctrl-C let the running chunks finish: a compile that never ends (lavapipe and a huge
    # var<private> array) kept the bake running for good (review helper 128). Here every chunk
    # sleeps for 10 minutes in its worker (a sitecustomize), and Ctrl-C reaches the process group.
    copy_samples(str(tmp_path / "assets"))
    stuck = tmp_path / "stuck"
    stuck.mkdir()
    (stuck / "sitecustomize.py").write_text(
        "import sys\n"
        "if '--multiprocessing-fork' in sys.argv:\n"
        "    import time, engine_plugin.bake.worker as w\n"
        "    w.bake_chunk = lambda job: time.sleep(600)\n"
    )
    env = cli_env()
    env["PYTHONPATH"] = str(stuck) + os.pathsep + env["PYTHONPATH"]
    cmd = [sys.executable, "-m", "engine_plugin.cli", "-q", "bake", "assets", "--cache", "cache", "-j", "2", "--progress", "none", "--force"]
    proc = subprocess.Popen(cmd, cwd=str(tmp_path), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None and len(workers) < 2:
            workers = {p for p in _children(proc.pid) if "--multiprocessing-fork" in _cmdline(p)}
            time.sleep(0.05)
        assert proc.poll() is None and len(workers) >= 2, "the bake ended before its workers could be seen"
        time.sleep(3)  # the workers are inside their chunks
        os.killpg(proc.pid, signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("the bake still ran 30 s after Ctrl-C")
        assert proc.returncode == 130, err
        assert "Traceback" not in err and "leaked" not in err, err
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(p) for p in workers):
            time.sleep(0.1)
        assert not [p for p in workers if _alive(p)]
    finally:
        for p in workers:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
