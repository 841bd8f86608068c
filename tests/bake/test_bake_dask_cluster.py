"""A real Dask cluster (scheduler and workers started here as processes, stopped by PID): an
unreachable scheduler fails fast with one line; a worker killed mid-bake is named in the
progress and the report, and every variant still bakes, byte-identical to a local bake."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from bake_support import cli_env, entries, explain, load_report, run_bake, write_asset

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

DASK = os.path.join(os.path.dirname(sys.executable), "dask")

# 3 types x 5 folds x 16 scales = 240 variants in 15 chunks: seconds of work on two workers, so a
# worker killed half a second in is mid-chunk (its first chunk also imports and makes its device).
YAML = """\
bindings:
  - { name: src, kind: buffer, access: read, element: T }
  - { name: dst, kind: buffer, access: read_write, element: T, count: "len(src)" }
specialize:
  - { name: T, options: [f32, i32, u32] }
  - { name: FOLD, options: [add, min, max, mean, set] }
  - { name: SCALE, options: [s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15] }
"""
WGSL = """\
fn fold(a: T, b: T) -> T {
    // @when FOLD add
    return a + b;
    // @end
    // @when FOLD min
    return min(a, b);
    // @end
    // @when FOLD max
    return max(a, b);
    // @end
    // @when FOLD mean
    return (a + b) / T(2);
    // @end
    // @when FOLD set
    return a;
    // @end
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) {
        return;
    }
    let right = src_get(min(i + 1u, src_len() - 1u));
    dst_set(i, fold(src_get(i) * T(f32(SCALE + 1u)), right));
}
"""
VARIANTS = 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"exited with {proc.returncode}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port} after {timeout} s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def _start_cluster(env: dict, workers: int, procs: list) -> tuple[str, subprocess.Popen, dict]:
    """A scheduler and ``workers`` one-thread workers without nannies on loopback (appended to
    ``procs``, for the caller to stop): (address, scheduler, {worker address: process})."""
    sport = _free_port()
    address = f"tcp://127.0.0.1:{sport}"
    scheduler = subprocess.Popen(
        [DASK, "scheduler", "--host", "127.0.0.1", "--port", str(sport), "--no-dashboard"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    procs.append(scheduler)
    _wait_port(sport, scheduler)
    started = {}
    for _ in range(workers):
        wport = _free_port()
        w = subprocess.Popen(
            [DASK, "worker", address, "--host", "127.0.0.1", "--worker-port", str(wport), "--nthreads", "1", "--no-nanny", "--no-dashboard"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(w)
        started[f"tcp://127.0.0.1:{wport}"] = w
    for worker_address, w in started.items():
        _wait_port(int(worker_address.rsplit(":", 1)[1]), w)
    return address, scheduler, started


def _kill_once_baking(bake: subprocess.Popen, victim: subprocess.Popen, address: str, victim_address: str) -> list[str]:
    """Read the bake's stderr until its first progress line, wait until the scheduler has
    given ``victim`` a chunk (a chunk is seconds of work: it is mid-chunk then), then SIGKILL
    it; answers the lines read. (Half a second after the line was too soon on a loaded
    machine: the chunks were not handed out yet, and nothing was retried.)"""
    from distributed import Client

    err_lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = bake.stderr.readline()
        if not line:
            break
        err_lines.append(line)
        if line.startswith("bake: ") and "variant(s) to bake on" in line:
            with Client(address, timeout=30) as client:
                while time.monotonic() < deadline and not client.processing(workers=[victim_address]).get(victim_address):
                    time.sleep(0.02)
            os.kill(victim.pid, signal.SIGKILL)
            victim.wait(10)
            break
    return err_lines


def test_an_unreachable_scheduler_fails_within_the_connect_timeout_with_one_line(tmp_path):
    write_asset(str(tmp_path / "assets" / "k.computeShader"), YAML, WGSL)
    port = _free_port()  # nothing listens there
    t0 = time.monotonic()
    proc = run_bake(["assets", "--cache", "c", "--scheduler", f"tcp://127.0.0.1:{port}", "--connect-timeout", "2"], cwd=str(tmp_path))
    elapsed = time.monotonic() - t0
    assert proc.returncode == 2, explain(proc)
    assert elapsed < 15, f"took {elapsed:.1f} s"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"engine-plugin bake: cannot reach the Dask scheduler at tcp://127.0.0.1:{port} within 2 s"), proc.stderr


@pytest.mark.parametrize("address", ["localhost", "tcp://x:y", "foo://1.2.3.4:5"])
def test_a_malformed_scheduler_address_is_a_usage_error_not_a_bug(tmp_path, address):
    # Review helper 155: distributed's ValueError reached the CLI as "engine_plugin bug,
    # please report" with exit 1.
    write_asset(str(tmp_path / "assets" / "k.computeShader"), YAML, WGSL)
    proc = run_bake(["assets", "--cache", "c", "--scheduler", address, "--connect-timeout", "2"], cwd=str(tmp_path))
    assert proc.returncode == 2, explain(proc)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and f"{address!r} is not a Dask scheduler address, e.g. tcp://farm:8786" in lines[0], proc.stderr
    assert "bug" not in proc.stderr


def test_an_empty_scheduler_address_is_a_usage_error_not_a_local_bake(tmp_path):
    write_asset(str(tmp_path / "assets" / "k.computeShader"), YAML, WGSL)
    proc = run_bake(["assets", "--cache", "c", "--scheduler", ""], cwd=str(tmp_path))
    assert proc.returncode == 2 and "--scheduler takes a Dask scheduler address" in proc.stderr, explain(proc)


def test_a_worker_killed_mid_bake_is_reported_and_every_variant_still_bakes_byte_identical(tmp_path):
    write_asset(str(tmp_path / "assets" / "k.computeShader"), YAML, WGSL)
    local = run_bake(["assets", "--cache", "cache-local", "--jobs", "1", "-q"], cwd=str(tmp_path), timeout=300)
    assert local.returncode == 0, explain(local)

    env = cli_env()
    procs: list = []
    try:
        address, _, workers = _start_cluster(env, 2, procs)
        cmd = [
            sys.executable,
            "-m",
            "engine_plugin",
            "bake",
            "assets",
            "--cache",
            "cache-dask",
            "--scheduler",
            address,
            "--progress",
            "plain",
            "--json",
            "dask.json",
        ]
        bake = subprocess.Popen(cmd, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(bake)
        victim_address, victim = next(iter(workers.items()))
        err_lines = _kill_once_baking(bake, victim, address, victim_address)  # a chunk runs on it: kill it
        out, rest = bake.communicate(timeout=120)
        stderr = "".join(err_lines) + rest
        assert bake.returncode == 0, f"exit {bake.returncode}\n{out}\n{stderr}"
    finally:
        for p in reversed(procs):
            _stop(p)

    report = load_report(str(tmp_path / "dask.json"))
    assert report["totals"]["baked"] == VARIANTS and report["totals"]["failed"] == 0
    assert [w["worker"] for w in report["lost_workers"]] == [victim_address], report["lost_workers"]
    assert report["retried_chunks"] >= 1 and report["lost_workers"][0]["variants"] >= 1
    assert f"lost worker {victim_address}" in stderr
    assert f"lost 1 worker(s) ({victim_address})" in out
    dask, local_entries = entries(str(tmp_path / "cache-dask")), entries(str(tmp_path / "cache-local"))
    assert len(dask) == VARIANTS and dask == local_entries


@pytest.mark.parametrize("victim", ["the last worker", "the scheduler"])
def test_a_cluster_that_loses_its_last_worker_or_its_scheduler_mid_bake_ends_the_bake_with_one_line(tmp_path, victim):
    # The last worker gone: the bake waited for good. The scheduler gone: every cancelled task
    # came out as a failure of the user's assets, exit 1 (review helper 171). Both are one
    # line and exit 2 now, within --connect-timeout; what was baked stays in the cache.
    write_asset(str(tmp_path / "assets" / "k.computeShader"), YAML, WGSL)
    env = cli_env()
    procs: list = []
    try:
        address, scheduler, workers = _start_cluster(env, 1, procs)
        worker = next(iter(workers.values()))
        cmd = [
            sys.executable,
            "-m",
            "engine_plugin",
            "bake",
            "assets",
            "--cache",
            "cache",
            "--scheduler",
            address,
            "--connect-timeout",
            "2",
            "--progress",
            "plain",
            "--json",
            "r.json",
        ]
        bake = subprocess.Popen(cmd, cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(bake)
        worker_address = next(iter(workers))
        err_lines = _kill_once_baking(bake, worker if victim == "the last worker" else scheduler, address, worker_address)
        started = time.monotonic()
        try:
            out, rest = bake.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the bake still waited 60 s after {victim} went away")
        stderr = "".join(err_lines) + rest
    finally:
        for p in reversed(procs):
            _stop(p)
    assert bake.returncode == 2, f"exit {bake.returncode}\n{out}\n{stderr}"
    assert time.monotonic() - started < 45
    said = [line for line in stderr.splitlines() if line.startswith("engine-plugin bake:")]
    assert len(said) == 1 and ("has had no worker" in said[0] or "went away mid-bake" in said[0]), stderr
    assert "k.computeShader" not in said[0] and "Traceback" not in stderr
    report = load_report(str(tmp_path / "r.json"))  # what was done, not ok (review helper 173)
    assert report["interrupted"] is True and report["ok"] is False and report["totals"]["failed"] == 0
