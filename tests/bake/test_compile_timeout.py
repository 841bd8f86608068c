"""A compile the driver never finishes does not hang a bake (``--compile-timeout``): a compile
cannot be interrupted, so a pool worker stuck in one notes its variant and ends, and the
client fails that variant and bakes the rest; with ``--jobs 1`` the compile is left running on
its thread and the rest bake. Lavapipe compiled a huge ``var<private>`` array for minutes and a bake waited for
good (review helper 128)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
from bake_support import SAMPLE_VARIANTS, cli_env, copy_samples, entries, run_bake, write_asset

pytestmark = pytest.mark.gpu

YAML = 'bindings:\n  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n" }\n'
# What made lavapipe's compiler run for minutes (over 60 s here, user and system time).
HUGE_PRIVATE_WGSL = """\
var<private> big: array<f32, 4000000>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    big[i % 4000000u] = 1.0;
    dst_set(i, big[(i * 7u) % 4000000u]);
}
"""
PLAIN_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, 1.0);
}
"""
# Every process of the bake: compiling the asset named "stuck" never returns (deterministic,
# where the real compile above depends on the driver). The sleep is Python's, the deadline
# the same thread timer that ends a process stuck in native code.
STUCK_SITE = textwrap.dedent(
    """
    import time
    import engine_plugin.bake.worker as w
    plain = w._validate
    def validate(lowered):
        if "stuck.computeShader" in lowered.asset or "stuck.computeShader" in str(lowered.source_map.files):
            time.sleep(600)
        plain(lowered)
    w._validate = validate
    """
)


def _assets(tmp_path, stuck_wgsl: str = PLAIN_WGSL) -> str:
    root = copy_samples(str(tmp_path / "assets"))
    write_asset(os.path.join(root, "stuck.computeShader"), YAML, stuck_wgsl)
    return root


def _site(tmp_path) -> str:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(STUCK_SITE)
    return str(site)


def _run(tmp_path, args: list[str], site: str | None = None):
    env_path = os.environ.get("PYTHONPATH", "")
    if site is not None:
        os.environ["PYTHONPATH"] = site + os.pathsep + env_path
    try:
        return run_bake(["assets", "--cache", "cache", "--progress", "plain", *args], cwd=str(tmp_path), timeout=180)
    finally:
        os.environ["PYTHONPATH"] = env_path


def test_a_pool_worker_stuck_in_a_compile_fails_that_variant_and_the_rest_bake(tmp_path):
    _assets(tmp_path)
    done = _run(tmp_path, ["-j", "2", "--compile-timeout", "3"], site=_site(tmp_path))
    assert done.returncode == 1, done.stderr[-3000:]
    out = done.stdout + done.stderr
    assert "stuck.computeShader" in out and "did not finish within 3 s (--compile-timeout)" in out, out[-3000:]
    assert f"baked {SAMPLE_VARIANTS}, skipped 0, failed 1 of {SAMPLE_VARIANTS + 1}" in out, out[-3000:]
    assert len(entries(str(tmp_path / "cache"))) == SAMPLE_VARIANTS  # every other variant, none of the stuck one's
    assert "Traceback" not in out


def test_a_compile_stuck_in_the_bake_s_own_process_fails_that_variant_and_the_rest_bake(tmp_path):
    # --jobs 1: the compile runs on a thread of its own, left behind at the deadline; the bake
    # goes on, reports and writes its JSON (it ended the process with os._exit, skipping all
    # of that: review helper 141), then ends without waiting for the compile.
    _assets(tmp_path)
    done = _run(tmp_path, ["-j", "1", "--compile-timeout", "3", "--json", "report.json"], site=_site(tmp_path))
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    assert "stuck.computeShader/kernel.wgsl: compiling this variant did not finish within 3 s" in out, out[-3000:]
    assert f"baked {SAMPLE_VARIANTS}, skipped 0, failed 1 of {SAMPLE_VARIANTS + 1}" in out, out[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert not report["ok"] and len(entries(str(tmp_path / "cache"))) == SAMPLE_VARIANTS
    assert "Traceback" not in out


def test_ctrl_c_ends_a_bake_whose_own_process_waits_on_a_stuck_compile(tmp_path):
    # lavapipe's real endless compile, in the main thread, held Ctrl-C off for the whole
    # --compile-timeout (review helper 141): the main thread now waits on the compile's thread.
    _assets(tmp_path, HUGE_PRIVATE_WGSL)
    env = cli_env()
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine_plugin.cli", "bake", "assets", "--cache", "cache", "-j", "1", "--compile-timeout", "120", "--progress", "plain"],
        cwd=str(tmp_path),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90  # the stuck asset bakes last (assets in name order)
        while time.monotonic() < deadline and not ((tmp_path / "cache").exists() and len(entries(str(tmp_path / "cache"))) >= SAMPLE_VARIANTS):
            time.sleep(0.2)
        time.sleep(2)  # inside the stuck variant's wait now
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 130, out[-3000:]
        assert time.monotonic() - t0 < 15
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_pool_s_note_folder_left_by_a_killed_bake_is_removed_by_the_next(tmp_path):
    # A killed client's folder stayed in the temporary folder for good (review helper 141).
    # A live bake's folder stays (its client holds the folder's lock; a pid does not tell across
    # PID namespaces sharing the temporary folder, review helper 142).
    from engine_plugin.bake.runners import _note_dir

    orphan = os.path.join(tempfile.mkdtemp(prefix="engine_plugin-bake-"))
    open(os.path.join(orphan, ".client"), "w").close()  # its client is gone: nobody holds it
    half_made = tempfile.mkdtemp(prefix="engine_plugin-bakeinit-")  # killed before its rename (helper 144)
    open(os.path.join(half_made, ".client"), "w").close()
    live, fd = _note_dir()
    try:
        copy_samples(str(tmp_path / "assets"))
        done = _run(tmp_path, ["-j", "2"])
        assert done.returncode == 0, done.stderr[-3000:]
        assert not os.path.exists(orphan) and not os.path.exists(half_made)
        assert os.path.isdir(live)
    finally:
        os.close(fd)
        shutil.rmtree(live, ignore_errors=True)


def test_lavapipe_s_endless_compile_of_a_huge_private_array_fails_alone(tmp_path):
    _assets(tmp_path, HUGE_PRIVATE_WGSL)
    done = _run(tmp_path, ["-j", "2", "--compile-timeout", "5"])
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    assert "did not finish within 5 s" in out and f"baked {SAMPLE_VARIANTS}, skipped 0, failed 1" in out, out[-3000:]


def test_the_cli_s_main_returns_to_its_caller_when_a_compile_was_left_behind(tmp_path, monkeypatch):
    # main() ended the whole process (os._exit) when a --jobs 1 bake had left a compile behind,
    # and would for every later call in that process (review helper 142).
    import engine_plugin.bake.worker as worker
    from engine_plugin.cli import main

    plain = worker._validate

    def validate(lowered):
        if "stuck.computeShader" in str(lowered.source_map.files):
            time.sleep(20)
        plain(lowered)

    monkeypatch.setattr(worker, "_validate", validate)
    _assets(tmp_path)
    monkeypatch.chdir(tmp_path)
    status = main(["-q", "bake", "assets", "--cache", "cache", "-j", "1", "--compile-timeout", "1"])
    assert status == 1
    assert main(["-q", "cache", "stats", "--cache", "cache"]) == 0
