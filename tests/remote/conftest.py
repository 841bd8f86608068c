"""A real redis-server on a free loopback port, started per test and stopped by its PID."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """One redis-server process: no persistence, loopback only, DEBUG allowed from loopback."""

    def __init__(self, folder: str):
        self.folder = folder
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, deadline_s: float = 10.0) -> "RedisServer":
        binary = shutil.which("redis-server")
        if binary is None:  # the bootstrap installs it: its absence is a failure, not a skip
            pytest.fail("redis-server is not installed (tools/bootstrap.sh installs the Debian package redis-server)")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.folder, "--enable-debug-command", "local", "--daemonize", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.folder,
        )
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"redis-server exited with {self.proc.returncode} on port {self.port}")
            try:
                if self.client().ping():
                    return self
            except Exception:
                time.sleep(0.01)
        self.stop()
        pytest.fail(f"redis-server did not answer PING on port {self.port} within {deadline_s} s")

    def client(self):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5, socket_connect_timeout=1)

    def stop(self) -> None:
        """Stop it by its PID (SIGTERM, then SIGKILL past a deadline) and wait for it."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)


@pytest.fixture
def redis_server(tmp_path):
    server = RedisServer(str(tmp_path)).start()
    try:
        yield server
    finally:
        server.stop()


def run_cli(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``engine-plugin ARGS`` in a fresh process (another "machine": its own local cache)."""
    full_env = dict(os.environ)
    full_env.pop("ENGINE_PLUGIN_REMOTE_CACHE", None)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "engine_plugin.cli", *args], cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def baked_samples(tmp_path_factory) -> str:
    """A local cache holding every variant of assets/samples, baked once for the session."""
    folder = str(tmp_path_factory.mktemp("baked-samples"))
    res = run_cli("bake", "assets/samples", "--cache", folder, "-j", "1", "--progress", "none")
    assert res.returncode == 0, res.stdout + res.stderr
    return folder
