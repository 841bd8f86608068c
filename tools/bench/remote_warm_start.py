#!/usr/bin/env python3
"""Warm start of 100 variants from the remote tier (a Redis server) against cold lowering and
against a warm local cache; and the start-up delay a dead or stalled server adds.

The asset is the reference sample (25 variants) crossed with four ``BODY`` splices: 100
variants. The script starts its own ``redis-server`` on a free loopback port (no
persistence, in a temporary folder) and stops it by its PID at the end. Each phase is a fresh
process (a game start), ``--repeat`` times; the time counted is library creation, asset read
and parse, ``prefetch()`` of the 100 variants and fetching each one's lowering (what a start
does before its first compile; imports and device creation are excluded, as in
``warm_start.py``):

  cold         an empty local cache: lower all 100 (and write them: what a first start does)
  nocache      no cache at all: lower all 100 (the lowering alone)
  local        a warm local cache
  remote       an empty local cache, the remote tier alone; each entry verified by lowering
               it again here (the default: nothing is trusted)
  signed       the same with studio-signed values (HMAC secret): verified by the signature
  refused      the remote URL points at a closed port (connection refused), empty local cache
  stalled      the server is paused (CLIENT PAUSE): every read would hang; timeout 0.25 s

    python tools/bench/remote_warm_start.py [--repeat 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BODIES = ["v", "v * T(2)", "v + v", "abs(v)"]
SECRET = "bench-secret"


def _specs(schema):
    from engine_plugin.lowering import enumerate_variants

    return [dict(s.as_dict(), BODY=b) for s in enumerate_variants(schema) for b in BODIES]


def phase(root: str, cache: str | None, remote: str | None, secret: str | None) -> dict:
    """One timed start in this process (the child side)."""
    from engine_plugin.assets import AssetLibrary
    from engine_plugin.cache.remote import RemoteCache
    from engine_plugin.device.context import get_context
    from engine_plugin.lowering import resolve_spec
    from engine_plugin.runtime import lowering_count

    ctx = get_context()
    if remote:
        import redis  # noqa: F401  (imports are excluded, as in warm_start.py: ~0.1 s here)
    before = lowering_count()
    t0 = time.perf_counter()
    tier = RemoteCache(remote, secret=secret) if remote else False
    lib = AssetLibrary(root, cache=cache, device=ctx, remote=tier)
    ref = lib.load("reference.computeShader")
    prog = ref.program()
    specs = [resolve_spec(prog.schema, s) for s in _specs(prog.schema)]
    t_pre = time.perf_counter()
    report = lib.prefetch({"reference.computeShader": specs})
    prefetch_s = time.perf_counter() - t_pre
    lows = [prog.lowered(s) for s in specs]
    seconds = time.perf_counter() - t0
    lib.close()  # not timed: the local copies of remote entries finish in the background
    out = {"seconds": seconds, "prefetch_s": prefetch_s, "variants": len(lows), "lowered": lowering_count() - before, "prefetch": report.as_dict()}
    if lib.remote is not None:
        out["remote"] = lib.remote.stats().as_dict()
    return out


def _child(root: str, cache: str | None, remote: str | None, secret: str | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("ENGINE_PLUGIN_REMOTE_CACHE", None)
    env.pop("ENGINE_PLUGIN_REMOTE_SECRET", None)
    args = [root, cache or "-", remote or "-", secret or "-"]
    res = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True, env=env, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A redis-server of our own on loopback, stopped by its PID."""

    def __init__(self, folder: str):
        self.port = _free_port()
        binary = shutil.which("redis-server")
        if binary is None:
            raise SystemExit("remote_warm_start: redis-server is not installed (apt-get install redis-server; tools/bootstrap.sh does it)")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", folder,
             "--maxmemory", "256mb", "--maxmemory-policy", "allkeys-lru"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        import redis

        self.client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
        deadline = time.monotonic() + 10
        while True:
            try:
                if self.client.ping():
                    break
            except redis.exceptions.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise SystemExit("remote_warm_start: redis-server did not start")
                time.sleep(0.01)

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _ms(xs: list[float]) -> str:
    return ", ".join(f"{x * 1e3:.0f}" for x in xs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    os.environ.setdefault("XDG_RUNTIME_DIR", os.path.join(tempfile.gettempdir(), f"engine-plugin-xdg-{os.getuid()}"))
    os.makedirs(os.environ["XDG_RUNTIME_DIR"], mode=0o700, exist_ok=True)
    if args.child:
        root, cache, remote, secret = (None if a == "-" else a for a in args.child)
        print(json.dumps(phase(root, cache, remote, secret)))
        return 0

    from engine_plugin.cache.remote import RemoteCache

    work = tempfile.mkdtemp(prefix="remote-warm-start-")
    server = Server(work)
    runs: dict[str, list[dict]] = {k: [] for k in ("cold", "nocache", "local", "remote", "signed", "refused", "stalled")}
    try:
        root = os.path.join(work, "assets")
        shutil.copytree(os.path.join(REPO, "assets", "samples"), root)
        local = os.path.join(work, "local")
        fill = _child(root, local, None)  # lowers the 100 into the local cache
        assert fill["lowered"] == 100, fill
        entries = []
        for name in sorted(os.listdir(local)):
            if name.endswith(".msgpack"):
                with open(os.path.join(local, name), "rb") as f:
                    entries.append((name[:64], f.read()))
        assert RemoteCache(server.url(0)).put_entries(entries) == 100
        assert RemoteCache(server.url(1), secret=SECRET).put_entries(entries) == 100
        dead = f"redis://127.0.0.1:{_free_port()}/0"
        for i in range(args.repeat):
            empty = lambda tag: os.path.join(work, f"empty-{tag}-{i}")  # noqa: E731
            runs["cold"].append(_child(root, empty("c"), None))
            runs["nocache"].append(_child(root, None, None))
            runs["local"].append(_child(root, local, None))
            runs["remote"].append(_child(root, empty("r"), server.url(0)))
            runs["signed"].append(_child(root, empty("s"), server.url(1), SECRET))
            runs["refused"].append(_child(root, empty("d"), dead))
            server.client.execute_command("CLIENT", "PAUSE", "3000", "ALL")
            runs["stalled"].append(_child(root, empty("p"), server.url(0)))
            server.client.execute_command("CLIENT", "UNPAUSE")
        for r in runs["remote"] + runs["signed"]:
            assert r["lowered"] == 0 and r["prefetch"]["remote"] == 100, r
        for r in runs["cold"] + runs["nocache"] + runs["refused"] + runs["stalled"]:
            assert r["lowered"] == 100, r
        for r in runs["local"]:
            assert r["lowered"] == 0 and r["prefetch"]["local"] == 100, r
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)

    med = {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items()}
    pre = {k: statistics.median(r["prefetch_s"] for r in v) for k, v in runs.items()}
    print(f"start-up with 100 variants (reference sample x {len(BODIES)} BODY splices), median of {args.repeat} fresh processes")
    labels = {
        "cold": "cold (empty local cache: lower + write all)",
        "nocache": "cold, no cache (lowering alone)",
        "local": "warm local cache",
        "remote": "remote tier only, re-lowered to verify",
        "signed": "remote tier only, signed values",
        "refused": "remote down (connection refused)",
        "stalled": "remote stalled (CLIENT PAUSE), 0.25 s timeout",
    }
    for k, label in labels.items():
        print(f"  {label:<48} {med[k] * 1e3:8.1f} ms   prefetch {pre[k] * 1e3:7.1f} ms   (runs: {_ms([r['seconds'] for r in runs[k]])})")
    print(f"  remote (verified by re-lowering) vs cold: {med['cold'] / med['remote']:.2f}x;  signed vs cold: {med['cold'] / med['signed']:.1f}x;  local vs cold: {med['cold'] / med['local']:.1f}x")
    print(
        f"  delay a dead server adds to a cold start: the prefetch's wait, refused {pre['refused'] * 1e3:.0f} ms, stalled {pre['stalled'] * 1e3:.0f} ms "
        f"(whole-start medians vs cold: {1e3 * (med['refused'] - med['cold']):+.0f} ms, {1e3 * (med['stalled'] - med['cold']):+.0f} ms; noisy host)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"median_ms": {k: v * 1e3 for k, v in med.items()}, "prefetch_ms": {k: v * 1e3 for k, v in pre.items()}, "runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
