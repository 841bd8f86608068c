"""The remote tier against a real redis-server: sharing, verification, faults, concurrency."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest
from conftest import REPO, run_cli

from engine_plugin.assets import AssetLibrary
from engine_plugin.assets.library import allow_network
from engine_plugin.cache import decode_entry, encode_entry
from engine_plugin.cache.remote import NAMESPACE, RemoteCache, RemoteMissingError
from engine_plugin.errors import PluginError
from engine_plugin.lowering import LOWERING_VERSION, enumerate_variants, lower
from engine_plugin.lowering.fingerprint import CACHE_FORMAT_VERSION
from engine_plugin.runtime import lowering_count

SAMPLES = os.path.join(REPO, "assets", "samples")
MACHINE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "machine.py")


def entries_of(folder: str) -> dict[str, bytes]:
    out = {}
    for name in os.listdir(folder):
        if name.endswith(".msgpack") and len(name) == 64 + len(".msgpack"):
            with open(os.path.join(folder, name), "rb") as f:
                out[name[:64]] = f.read()
    return out


def contents(entries: dict[str, bytes]) -> dict[str, dict]:
    """Entries as what they hold: the envelope without the local signature and the bake's
    validated mark with the checksum covering it (a local entry is signed under its machine's key,
    a server value is not)."""
    import msgpack

    return {k: {f: v for f, v in msgpack.unpackb(d, raw=False).items() if f not in ("mac", "validated", "sha256")} for k, d in entries.items()}


def _compiled_lines(data: bytes) -> str:
    """An entry's lowered source without its header line (which names the baker's files)."""
    from engine_plugin.cache import decode_entry
    from engine_plugin.cache.entry import entry_header

    return decode_entry(entry_header(data)["key"], data, signed=False).source.split("\n", 1)[1]


def server_values(server) -> dict[str, bytes]:
    client = server.client()
    return {n.decode()[len(NAMESPACE):]: client.get(n) for n in client.scan_iter(match=NAMESPACE + "*")}


def upload(server, entries: dict[str, bytes]) -> None:
    client = server.client()
    for key, data in entries.items():
        client.set(NAMESPACE + key, data)


def machine(cache: str, url: str, timeout: float = 0.25, env: dict | None = None) -> dict:
    res = subprocess.run([sys.executable, MACHINE, cache, url, str(timeout)], capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})})
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def samples_copy(tmp_path) -> str:
    """assets/samples under this test's own folder: programs are registered per asset path in
    a process, so a library over the shared folder would meet an earlier test's programs."""
    import shutil

    root = tmp_path / "samples"
    if not root.exists():
        shutil.copytree(SAMPLES, root)
    return str(root)


def library(tmp_path, url, **kw) -> tuple[AssetLibrary, dict]:
    lib = AssetLibrary(samples_copy(tmp_path), cache=str(tmp_path / "game-cache"), remote=url, **kw)
    refs = lib.load_all()
    wanted = {r.path: list(enumerate_variants(r.program().schema)) for r in refs}
    return lib, wanted


def keys_of(lib: AssetLibrary, wanted: dict) -> dict[str, tuple]:
    """{key: (ref, spec)} for the variants wanted."""
    from engine_plugin.lowering.fingerprint import variant_key

    out = {}
    for rel, specs in wanted.items():
        ref = lib.load(rel)
        prog = ref.program()
        for spec in specs:
            out[variant_key(prog.schema.text, prog.wgsl, spec)] = (ref, spec)
    return out


# -- sharing -------------------------------------------------------------------------------
def test_a_second_machine_starts_warm_from_what_the_first_baked_with_zero_lowerings(redis_server, tmp_path):
    a, b, report = str(tmp_path / "A"), str(tmp_path / "B"), str(tmp_path / "bake.json")
    res = run_cli("bake", "assets/samples", "--cache", a, "--remote", redis_server.url, "-j", "1", "--progress", "none", "--json", report)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"remote {redis_server.url}: wrote 26 entries" in res.stdout
    with open(report) as f:
        remote = json.load(f)["remote"]
    assert remote["writes"] == 26 and remote["errors"] == 0 and remote["timeouts"] == 0

    out = machine(b, redis_server.url)
    assert out["lowered"] == 0
    assert out["prefetch"]["remote"] == 26 and out["prefetch"]["local"] == 0 and out["prefetch"]["missed"] == 0
    assert out["remote"]["verified"] == 26 and out["remote"]["rejected"] == 0 and out["remote"]["hits"] == 26
    baked, fetched = entries_of(a), entries_of(b)
    # The same variants on both machines: B keeps its own lowering of each (its own paths in
    # the header line and the file names), equal in every line the GPU compiles.
    assert len(baked) == 26 and sorted(fetched) == sorted(baked)
    assert {k: _compiled_lines(d) for k, d in fetched.items()} == {k: _compiled_lines(d) for k, d in baked.items()}
    assert contents(server_values(redis_server)) == contents(baked)  # the server holds what A baked

    again = machine(b, redis_server.url)  # the next start is all local: the server is not asked
    assert again["prefetch"]["local"] == 26 and again["remote"]["hits"] + again["remote"]["misses"] == 0 and again["lowered"] == 0


def test_with_a_studio_secret_the_second_machines_entries_are_the_bakes_bytes(redis_server, tmp_path):
    # Issue 20: "one bakes, the other starts warm from the remote tier with zero lowerings,
    # byte-identical entries". Review helper 109: the copy lacked the bake's validated mark
    # (and the checksum covering it). Signed by the farm, the mark is the farm's word and is
    # kept; the local signature is the machine's (here one user's key: the same bytes).
    a, b = str(tmp_path / "A"), str(tmp_path / "B")
    secret = {"ENGINE_PLUGIN_REMOTE_SECRET": "studio-secret"}
    res = run_cli("bake", "assets/samples", "--cache", a, "--remote", redis_server.url, "-j", "1", "--progress", "none", env=secret)
    assert res.returncode == 0, res.stdout + res.stderr
    out = machine(b, redis_server.url, env=secret)
    assert out["lowered"] == 0 and out["remote"]["signed"] == 26 and out["remote"]["relowered"] == 0
    baked, fetched = entries_of(a), entries_of(b)
    assert len(baked) == 26 and fetched == baked


def test_keys_are_namespaced_by_format_and_lowering_version(redis_server, baked_samples, tmp_path):
    assert NAMESPACE == f"engine_plugin:v{CACHE_FORMAT_VERSION}.{LOWERING_VERSION}:"
    client = redis_server.client()
    for key, data in entries_of(baked_samples).items():
        client.set(f"engine_plugin:v{CACHE_FORMAT_VERSION}.{LOWERING_VERSION}0:{key}", data)  # another build
    lib, wanted = library(tmp_path, redis_server.url)
    rep = lib.prefetch(wanted)
    assert rep.remote == 0 and rep.missed == 26 and rep.rejected == 0


def test_entries_carry_the_ttl_option(redis_server, baked_samples):
    remote = RemoteCache(redis_server.url, ttl=120)
    key, data = next(iter(entries_of(baked_samples).items()))
    assert remote.put_entries([(key, data)]) == 1
    assert 0 < redis_server.client().ttl(NAMESPACE + key) <= 120
    assert redis_server.client().get(NAMESPACE + key) == data
    assert remote.stats().writes == 1 and remote.stats().bytes_written == len(data)


# -- verification --------------------------------------------------------------------------
def test_forged_and_garbage_values_are_refused_counted_warned_once_and_never_served(redis_server, baked_samples, tmp_path, caplog):
    honest = entries_of(baked_samples)
    lib, wanted = library(tmp_path, redis_server.url)
    by_key = keys_of(lib, wanted)
    ref_keys = sorted(k for k, (ref, _) in by_key.items() if ref.path == "reference.computeShader")
    particles_key = next(k for k, (ref, _) in by_key.items() if ref.path == "particles.computeShader")
    swapped, edited, other_asset, garbage, version = ref_keys[:5]
    upload(redis_server, honest)
    client = redis_server.client()
    client.set(NAMESPACE + swapped, honest[ref_keys[5]])  # a real entry of another variant
    real = decode_entry(edited, honest[edited])
    evil = replace(real, source=real.source.replace("vec4<f32>(f32(i),", "vec4<f32>(f32(i) * 666.0,"))
    assert evil.source != real.source
    client.set(NAMESPACE + edited, encode_entry(edited, evil))  # re-checksummed: decodes fine
    client.set(NAMESPACE + other_asset, encode_entry(other_asset, decode_entry(particles_key, honest[particles_key])))
    client.set(NAMESPACE + garbage, os.urandom(700))
    client.set(NAMESPACE + version, encode_entry(version, decode_entry(version, honest[version]), format_version=CACHE_FORMAT_VERSION + 1))
    bad = {swapped, edited, other_asset, garbage, version}

    caplog.set_level(logging.WARNING, logger="engine_plugin.cache")
    rep = lib.prefetch(wanted)
    assert rep.remote == 26 - 5 and rep.rejected == 5 and rep.missed == 5
    st = lib.remote.stats()
    assert st.rejected == 5 and st.verified == 21 and st.hits == 21

    before = lowering_count()
    for key, (ref, spec) in by_key.items():
        got = ref.program().lowered(spec)
        own = lower(ref.program().schema, ref.program().wgsl, spec, wgsl_path=ref.program().wgsl_path)
        # the same program (the first line is a comment naming whichever files it came from)
        assert got.source.split("\n", 1)[1] == own.source.split("\n", 1)[1] and got.bindings == own.bindings
    assert lowering_count() - before == 5  # exactly the refused ones were lowered here
    lib.flush_writes()
    local = entries_of(str(tmp_path / "game-cache"))
    assert set(local) == set(by_key)
    for key in bad:  # what the local cache holds for them is this machine's own lowering
        ref, spec = by_key[key]
        own = lower(ref.program().schema, ref.program().wgsl, spec, wgsl_path=ref.program().wgsl_path)
        assert decode_entry(key, local[key]).source == own.source
    assert "666.0" not in decode_entry(edited, local[edited]).source

    # Asked again (on demand), a bad value is counted again but reported once per key.
    for key in sorted(bad):
        ref, spec = by_key[key]
        prog = ref.program()
        assert lib.remote.fetch(key, schema=prog.schema, wgsl=prog.wgsl, spec=spec) is None
    assert lib.remote.stats().rejected == 10
    warned = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(warned) == 5 and all(any(k[:16] in m for m in warned) for k in bad)


def test_signed_values_verify_without_relowering_and_a_wrong_secret_is_refused(redis_server, baked_samples, tmp_path):
    honest = entries_of(baked_samples)
    writer = RemoteCache(redis_server.url, secret="studio-secret")
    assert writer.put_entries(honest.items()) == 26
    lib, wanted = library(tmp_path, RemoteCache(redis_server.url, secret="studio-secret"))
    rep = lib.prefetch(wanted)
    st = lib.remote.stats()
    assert rep.remote == 26 and st.signed == 26 and st.relowered == 0
    lib.close()
    assert contents(entries_of(str(tmp_path / "game-cache"))) == contents(honest)  # the local copy is the entry

    lib2 = AssetLibrary(samples_copy(tmp_path / "x"), cache=str(tmp_path / "other"), remote=RemoteCache(redis_server.url, secret="not-the-secret"))
    lib2.load_all()
    rep2 = lib2.prefetch(wanted)
    assert rep2.remote == 0 and rep2.rejected == 26


# -- faults: the game keeps running --------------------------------------------------------
def test_a_server_stopped_mid_run_is_a_counted_miss_and_the_breaker_stops_asking(redis_server, baked_samples, tmp_path):
    upload(redis_server, entries_of(baked_samples))
    lib, wanted = library(tmp_path, redis_server.url)
    specs = wanted["reference.computeShader"]
    first = lib.prefetch({"reference.computeShader": specs[:10]})
    assert first.remote == 10

    redis_server.stop()
    t0 = time.perf_counter()
    second = lib.prefetch({"reference.computeShader": specs[10:]})
    assert time.perf_counter() - t0 < 3.0  # not a 0.25 s timeout per key (25 keys), whatever the load
    assert second.remote == 0 and second.missed == 15
    st = lib.remote.stats()
    assert st.errors + st.timeouts >= 1 and not lib.remote.available

    third = lib.prefetch({"reference.computeShader": specs[10:]})  # the breaker answers, no socket
    st3 = lib.remote.stats()
    assert third.missed == 15 and st3.errors + st3.timeouts == st.errors + st.timeouts and st3.skipped >= 15

    before = lowering_count()
    ref = lib.load("reference.computeShader")
    for spec in specs:
        assert ref.program().lowered(spec).source
    assert lowering_count() - before == 15  # the rest still came from the remote tier earlier


def _wait_until_busy(port: int, deadline_s: float = 5.0) -> None:
    """Poll until a PING goes unanswered for 50 ms: the server is asleep or paused."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.settimeout(0.05)
            s.sendall(b"PING\r\n")
            try:
                s.recv(16)
            except socket.timeout:
                return
    raise AssertionError("the server never looked busy")


@pytest.mark.parametrize("how", ["debug sleep", "client pause"])
def test_a_slowed_server_costs_one_timeout_then_nothing(redis_server, baked_samples, tmp_path, how):
    upload(redis_server, entries_of(baked_samples))
    lib, wanted = library(tmp_path, redis_server.url, remote_timeout=0.25)
    slow = redis_server.client()
    sleeper = None
    if how == "debug sleep":
        sleeper = threading.Thread(target=lambda: slow.execute_command("DEBUG", "SLEEP", "2"))
        sleeper.start()
    else:
        slow.execute_command("CLIENT", "PAUSE", "2000", "ALL")
    try:
        _wait_until_busy(redis_server.port)
        t0 = time.perf_counter()
        rep = lib.prefetch(wanted)
        spent = time.perf_counter() - t0
        st = lib.remote.stats()
        assert rep.remote == 0 and rep.missed == 26
        assert st.timeouts >= 1 and st.hits == 0
        assert spent < 1.0, spent  # parallel round trips: one timeout's worth, not 26

        t1 = time.perf_counter()
        before = lowering_count()
        for rel, specs in wanted.items():
            for spec in specs:
                with allow_network():  # even a thread allowed the network is answered by the breaker
                    lib.load(rel).program().lowered(spec)
        assert lowering_count() - before == 26
        assert lib.remote.stats().timeouts == st.timeouts and lib.remote.stats().skipped >= 26
        assert time.perf_counter() - t1 < 26 * 0.25
    finally:
        if sleeper is not None:
            sleeper.join(timeout=10)


def test_the_engine_thread_never_asks_the_remote_tier_unless_told(redis_server, baked_samples, tmp_path):
    upload(redis_server, entries_of(baked_samples))
    lib, wanted = library(tmp_path, redis_server.url)
    ref = lib.load("reference.computeShader")
    spec = wanted["reference.computeShader"][0]
    before = lowering_count()
    ref.program().lowered(spec)  # a variant first asked for in the frame loop: lowered here
    st = lib.remote.stats()
    assert lowering_count() - before == 1 and st.hits + st.misses == 0

    lib2 = AssetLibrary(samples_copy(tmp_path / "y"), cache=str(tmp_path / "c2"), remote=redis_server.url, remote_on_demand=True)
    ref2 = lib2.load("reference.computeShader")
    before = lowering_count()
    ref2.program().lowered(spec)
    assert lowering_count() == before and lib2.remote.stats().hits == 1
    assert set(ref2.origins([spec]).values()) == {"remote"}


def test_a_reload_fetches_from_the_remote_tier_on_the_worker_and_says_so(redis_server, tmp_path):
    import shutil

    root = tmp_path / "assets"
    shutil.copytree(os.path.join(SAMPLES, "reference.computeShader"), root / "reference.computeShader")
    wgsl = root / "reference.computeShader" / "kernel.wgsl"
    new_text = wgsl.read_text().replace("return a + b;", "return b + a;")
    # The farm baked the new text already (another machine's tier, written through the library).
    farm = AssetLibrary(str(tmp_path / "farm-assets"), cache=None, remote=False)
    shutil.copytree(root, tmp_path / "farm-assets")
    (tmp_path / "farm-assets" / "reference.computeShader" / "kernel.wgsl").write_text(new_text)
    fref = farm.load("reference.computeShader")
    spec = next(iter(enumerate_variants(fref.program().schema)))
    from engine_plugin.lowering.fingerprint import variant_key

    key = variant_key(fref.program().schema.text, new_text, spec)
    assert RemoteCache(redis_server.url).put(key, fref.program().lowered(spec))

    lib = AssetLibrary(str(root), cache=str(tmp_path / "game"), remote=redis_server.url)
    ref = lib.load("reference.computeShader")
    ref.variant(spec)
    wgsl.write_text(new_text)
    lib.request_reload("reference.computeShader")
    deadline = time.monotonic() + 30
    events = []
    while not events and time.monotonic() < deadline:
        events = [e for e in lib.poll() if e.ok]
        time.sleep(0.01)
    assert events, "the reload never arrived"
    assert ref.origins(events[0].recompiled, events[0].program) == {spec: "remote"}
    assert lib.remote.stats().verified == 1


def test_concurrent_bakers_writing_the_same_keys_leave_whole_verified_entries(redis_server, tmp_path):
    env = dict(os.environ)
    env.pop("ENGINE_PLUGIN_REMOTE_CACHE", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "engine_plugin.cli", "bake", "assets/samples", "--cache", str(tmp_path / f"baker{i}"),
             "--remote", redis_server.url, "-j", "1", "--progress", "none"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    one, two = entries_of(str(tmp_path / "baker0")), entries_of(str(tmp_path / "baker1"))
    assert len(one) == 26 and one == two
    assert contents(server_values(redis_server)) == contents(one)  # whole values, the same whoever won
    out = machine(str(tmp_path / "reader"), redis_server.url)
    assert out["remote"]["verified"] == 26 and out["remote"]["rejected"] == 0 and out["lowered"] == 0


# -- command line and setup ----------------------------------------------------------------
def test_cache_stats_gc_and_clear_show_and_trim_the_remote_tier(redis_server, baked_samples, tmp_path):
    import shutil

    local = str(tmp_path / "local")
    shutil.copytree(baked_samples, local)
    res = run_cli("bake", "assets/samples", "--cache", local, "--remote", redis_server.url, "--progress", "none", "--json", str(tmp_path / "r.json"))
    assert res.returncode == 0, res.stdout + res.stderr
    with open(tmp_path / "r.json") as f:
        doc = json.load(f)
    assert doc["totals"]["skipped"] == 26 and doc["remote"]["uploaded"] == 26  # already local: uploaded
    redis_server.client().set(NAMESPACE + "f" * 64, b"not an entry")

    res = run_cli("cache", "stats", "--cache", local, "--json", env={"ENGINE_PLUGIN_REMOTE_CACHE": redis_server.url})
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["local"]["entries"] == 26 and doc["remote"]["entries"] == 27 and doc["remote"]["namespace"] == NAMESPACE
    assert doc["remote"]["counters"]["writes"] == 26  # the bake's, published studio-wide
    out = machine(str(tmp_path / "game"), redis_server.url)  # a game start adds its counters
    assert out["remote"]["hits"] == 26
    res = run_cli("cache", "stats", "--cache", local, "--remote", redis_server.url)
    assert "studio-wide hits 26, misses 0, verified 26 (26 re-lowered, 0 signed), rejected 0" in res.stdout, res.stdout
    res = run_cli("cache", "stats", "--cache", local, "--remote", redis_server.url, "--verify")
    assert res.returncode == 1 and "unusable    1" in res.stdout and "remote tier" in res.stdout
    res = run_cli("cache", "gc", "--cache", local, "--remote", redis_server.url)
    assert res.returncode == 0 and "removed 1 unusable values, kept 26" in res.stdout, res.stdout + res.stderr
    assert len(server_values(redis_server)) == 26
    res = run_cli("cache", "clear", "--cache", str(tmp_path / "none"), "--remote", redis_server.url)
    assert res.returncode == 0 and "removed 26 entries of this build" in res.stdout
    assert server_values(redis_server) == {}


def test_a_dead_server_in_the_cli_is_an_error_with_exit_2_and_a_bake_still_succeeds(tmp_path, baked_samples):
    import shutil

    dead = "redis://127.0.0.1:1/0"
    res = run_cli("cache", "stats", "--cache", baked_samples, "--remote", dead)
    assert res.returncode == 2 and "does not answer" in res.stderr
    local = str(tmp_path / "local")
    shutil.copytree(baked_samples, local)
    res = run_cli("bake", "assets/samples", "--cache", local, "--remote", dead, "--progress", "none")
    assert res.returncode == 0 and "unreachable" in res.stdout, res.stdout + res.stderr
    # Quiet too: a farm job meant to fill the tier printed nothing (review helper 123).
    res = run_cli("bake", "assets/samples", "--cache", local, "--remote", dead, "-q")
    assert res.returncode == 0 and "unreachable" in res.stderr and "rerun to upload" in res.stderr, res.stdout + res.stderr


def test_a_missing_redis_client_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "redis", None)
    with pytest.raises(RemoteMissingError, match=r"engine_plugin\[remote\]") as err:
        RemoteCache("redis://127.0.0.1:1/0")
    assert isinstance(err.value, PluginError)


def test_a_bad_url_is_a_clear_error():
    from engine_plugin.cache.remote import RemoteCacheError

    with pytest.raises(RemoteCacheError, match="redis://host:port/db"):
        RemoteCache("http://example.invalid/")


def test_the_environment_variable_names_the_remote_tier_and_false_turns_it_off(redis_server, tmp_path, monkeypatch):
    from engine_plugin.cache.remote import ENV_REMOTE

    monkeypatch.setenv(ENV_REMOTE, redis_server.url)
    lib = AssetLibrary(samples_copy(tmp_path), cache=str(tmp_path / "c"))
    assert lib.remote is not None and lib.remote.url == redis_server.url
    assert AssetLibrary(samples_copy(tmp_path), cache=str(tmp_path / "c"), remote=False).remote is None
    monkeypatch.delenv(ENV_REMOTE)
    assert AssetLibrary(samples_copy(tmp_path), cache=str(tmp_path / "c")).remote is None


def _forged(data: bytes, change) -> bytes:
    """``data`` (an entry) with its Lowered changed by ``change``, checksum and all recomputed."""
    from engine_plugin.cache import decode_entry, encode_entry
    from engine_plugin.cache.entry import entry_header

    key = entry_header(data)["key"]
    return encode_entry(key, change(decode_entry(key, data, signed=False)), signed=False)


def test_a_server_entry_with_a_forged_header_or_file_names_is_never_served(redis_server, baked_samples, tmp_path):
    # The header line and the file names were not compared: a NUL in the header was served,
    # signed locally and failed to compile on every start; an int for the files crashed every
    # start (review helper 70). The client serves and keeps its own lowering, and refuses an
    # entry whose files are not paths.
    from dataclasses import replace

    honest = entries_of(baked_samples)
    forged = {}
    for i, (key, data) in enumerate(honest.items()):
        if i % 2:
            forged[key] = _forged(data, lambda lw: replace(lw, source=lw.source.replace("\n", " \x00 x\n", 1)))
        else:
            forged[key] = _forged(data, lambda lw: replace(lw, source_map=replace(lw.source_map, files=12345)))
    upload(redis_server, forged)
    lib, wanted = library(tmp_path, redis_server.url)
    rep = lib.prefetch(wanted)
    assert rep.remote + rep.rejected == 26 and rep.rejected >= 13
    for ref in lib.load_all():
        for spec in wanted[ref.path]:
            variant = ref.program().variant(spec.as_dict())
            assert "\x00" not in variant.lowered.source and all(isinstance(f, str) for f in variant.lowered.source_map.files)
    lib.close()
    again = AssetLibrary(samples_copy(tmp_path), cache=str(tmp_path / "game-cache"))  # the next start: local entries only
    for ref in again.load_all():
        for spec in wanted[ref.path]:
            assert "\x00" not in ref.program().variant(spec.as_dict()).lowered.source
    again.close()


def test_a_fractional_ttl_rounds_up_and_entries_are_written(redis_server, baked_samples):
    # --remote-ttl 0.5 passed the option check, became EX 0 and every write was refused:
    # "wrote 0 entries", exit 0, an empty tier (review helper 123).
    remote = RemoteCache(redis_server.url, ttl=0.5)
    key, data = next(iter(entries_of(baked_samples).items()))
    assert remote.put_entries([(key, data)]) == 1
    assert redis_server.client().get(NAMESPACE + key) == data
    assert 0 < redis_server.client().pttl(NAMESPACE + key) <= 1000


@pytest.mark.parametrize("url", ["redis://:pw-secret@127.0.0.1:99999/0", "redis://:pw-secret@cache.studio:63x9/0", "redis://[::1/0",
                                 "reddis://:pw-secret@h/0", "redis://:pw/secret@h:99999/0", "redis://h:99999/0?password=pw-secret",
                                 "redis://:pw#secret@127.0.0.1:1/0", "redis://:pw?secret@127.0.0.1:1/0"])
def test_an_unparsable_url_with_a_password_is_a_clear_error_that_hides_the_password(url, tmp_path):
    # Masking the password read the URL's port, which raised inside the error report: "engine_plugin
    # bug, please report: ValueError" (review helper 123).
    from engine_plugin.cache.remote import RemoteCacheError

    try:
        RemoteCache(url)
    except RemoteCacheError as exc:
        assert "secret" not in str(exc) and "secret" not in str(exc.span), str(exc)
    res = run_cli("cache", "stats", "--cache", str(tmp_path / "none"), "--remote", url)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "bug" not in res.stderr and "secret" not in res.stdout + res.stderr, res.stderr


def test_a_full_server_refusing_writes_is_said_once_with_the_fix(redis_server, baked_samples, caplog):
    # One warning per refused write: 39 lines for 52 variants, and none said why (review helper 123).
    import logging

    client = redis_server.client()
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) + 1024)
    remote = RemoteCache(redis_server.url)
    entries = list(entries_of(baked_samples).items())
    with caplog.at_level(logging.WARNING, logger="engine_plugin"):
        for pair in entries:
            remote.put_entries([pair])
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert remote.stats().errors >= 2, "the server must have refused several writes"
    assert len(refused) == 1, [r.getMessage() for r in refused]
    assert "maxmemory-policy allkeys-lru" in refused[0].getMessage()


def test_junk_of_other_redis_types_is_counted_by_stats_and_removed_by_gc(redis_server, baked_samples, tmp_path):
    # A list under the namespace made stats and gc exit 2 with "does not answer: WRONGTYPE", and
    # gc could not remove it; a non-integer studio counter was "engine_plugin bug: ValueError"
    # and made every publish fail after adding its other counters (review helper 123).
    remote = RemoteCache(redis_server.url)
    entries = list(entries_of(baked_samples).items())
    assert remote.put_entries(entries[:3]) == 3
    client = redis_server.client()
    client.lpush(NAMESPACE + "junk-list", b"x")
    from engine_plugin.cache.remote import STATS_KEY

    client.hset(STATS_KEY, "hits", "not a number")
    res = run_cli("cache", "stats", "--cache", str(tmp_path / "none"), "--remote", redis_server.url)
    assert res.returncode == 0 and "bug" not in res.stderr, res.stdout + res.stderr
    assert "1 keys of this namespace hold another Redis type" in res.stdout, res.stdout
    res = run_cli("cache", "gc", "--cache", str(tmp_path / "none"), "--remote", redis_server.url)
    assert res.returncode == 0 and "removed 1 unusable values, kept 3" in res.stdout, res.stdout + res.stderr
    assert client.exists(NAMESPACE + "junk-list") == 0
    remote._count("misses", 5)
    remote._count("hits", 2)
    assert remote.publish() and remote.publish() is False  # published once: nothing left to re-send
    assert int(client.hget(STATS_KEY, "misses")) == 5 and client.hget(STATS_KEY, "hits") == b"not a number"


def test_entries_refused_by_the_tier_during_a_bake_are_uploaded_at_its_end(redis_server, tmp_path):
    # A tier refusing writes mid-bake (full, or out for longer than the breaker) left those
    # variants out of it, and the report said nothing once the server answered again: only
    # already-local entries were checked at the end (review helper 123).
    from engine_plugin.bake import bake

    client = redis_server.client()
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", 1)  # every write refused while the bake runs
    remote = RemoteCache(redis_server.url)
    ask = remote.existing

    def server_back(keys):
        client.config_set("maxmemory", 0)  # the outage is over when the bake ends
        return ask(keys)

    remote.existing = server_back
    report = bake([os.path.join(REPO, "assets", "samples")], str(tmp_path / "cache"), remote=remote, validate=False)
    baked = {v.key for v in report.variants if v.status == "baked"}
    assert baked and remote.stats().errors >= 1, "the bake's own writes must have been refused"
    assert set(server_values(redis_server)) >= baked
    assert report.remote["uploaded"] >= len(baked) and report.remote["reachable"]


def test_a_rebake_replaces_a_forgery_that_decodes(redis_server, tmp_path):
    # Another variant's entry filed under a key is refused by every client (it lowers another
    # specialisation), but gc keeps it (it decodes) and a re-bake skipped it (the key existed):
    # never repaired (review helper 123).
    from engine_plugin.bake import bake

    cache = str(tmp_path / "cache")
    samples = [os.path.join(REPO, "assets", "samples")]
    bake(samples, cache, remote=RemoteCache(redis_server.url), validate=False)
    values = server_values(redis_server)
    a, b = sorted(values)[:2]
    redis_server.client().set(NAMESPACE + a, values[b])  # B's bytes under A's key
    report = bake(samples, cache, remote=RemoteCache(redis_server.url), validate=False)
    assert report.remote["replaced"] == 0 and report.remote["writes"] == 0, "a plain bake reads no values"
    report = bake(samples, cache, remote=RemoteCache(redis_server.url), validate=False, remote_verify=True)
    assert report.totals["baked"] == 0 and report.remote["replaced"] == 1, report.remote
    from engine_plugin.cache import VariantCache

    with open(VariantCache(cache).path(a), "rb") as f:
        assert server_values(redis_server)[a] == f.read()
    assert "1 replacing other bytes" in report.remote_line()


class _SlowLink:
    """A loopback TCP proxy to ``port`` that forwards the server's replies at ``rate`` bytes/s
    in 512-byte pieces: every socket read gets bytes well inside the client's timeout."""

    def __init__(self, port: int, rate: float):
        self.rate, self.target = rate, port
        self.server = socket.socket()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(16)
        self.port = self.server.getsockname()[1]
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, slow: bool) -> None:
        try:
            while not self.stopped:
                data = src.recv(512 if slow else 65536)
                if not data:
                    break
                dst.sendall(data)
                if slow:
                    time.sleep(len(data) / self.rate)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

    def close(self) -> None:
        self.stopped = True
        self.server.close()


def test_a_slow_but_live_link_costs_the_deadline_not_the_whole_transfer(redis_server, baked_samples):
    # The timeout bounds each socket read; a link that trickles bytes never tripped it: a game
    # start took 9.4 s over 5 KB/s (review helper 123). A command's whole time is bounded now.
    entries = entries_of(baked_samples)
    upload(redis_server, entries)
    link = _SlowLink(redis_server.port, rate=5000)
    try:
        remote = RemoteCache(f"redis://127.0.0.1:{link.port}/0", timeout=0.25)
        t0 = time.monotonic()
        got = remote.get_values(list(entries))
        spent = time.monotonic() - t0
    finally:
        link.close()
    total = sum(len(v) for v in entries.values())
    assert total / 5000 > 10, "the transfer must take far longer than the deadline for this to test anything"
    assert spent < remote.deadline + 2.0, f"reading over a slow link took {spent:.1f} s (deadline {remote.deadline} s)"
    assert remote.stats().timeouts >= 1 and not remote.available, "a slow link is a timeout and opens the breaker"
    assert len(got) < len(entries)


def test_an_oversized_value_is_never_read(redis_server, baked_samples):
    # Values were read whole before the size check: three forged 200 MB values took the client
    # from 138 MB to 1.16 GB (review helper 123). Sizes are asked first now.
    from engine_plugin.cache.remote import MAX_VALUE_BYTES

    entries = entries_of(baked_samples)
    key = next(iter(entries))
    upload(redis_server, entries)
    redis_server.client().set(NAMESPACE + key, b"\0" * (MAX_VALUE_BYTES + 1))
    remote = RemoteCache(redis_server.url)
    got = remote.get_values(list(entries))
    assert key not in got and len(got) == len(entries) - 1
    assert remote.stats().rejected == 1 and remote.stats().bytes_read == sum(len(v) for k, v in entries.items() if k != key)


def _two_checkouts(tmp_path):
    import shutil

    here = os.path.join(REPO, "assets", "samples")
    there = str(tmp_path / "elsewhere" / "samples")
    shutil.copytree(here, there)
    return here, there


def test_a_second_machines_bake_neither_rewrites_nor_replaces_the_firsts_entries(redis_server, tmp_path):
    # Entries name the baker's file paths: comparing them whole replaced every entry of the
    # other checkout, every bake, forever (review helper 124). Clients' own relation is used.
    from engine_plugin.bake import bake

    here, there = _two_checkouts(tmp_path)
    bake([here], str(tmp_path / "a"), remote=RemoteCache(redis_server.url), validate=False)
    bake([there], str(tmp_path / "b"), remote=RemoteCache(redis_server.url), validate=False)  # bakes: writes its own
    before = server_values(redis_server)
    for _ in range(2):  # each machine bakes again: everything skipped, the tier left as it is
        for folder, cache in ((here, "a"), (there, "b")):
            report = bake([folder], str(tmp_path / cache), remote=RemoteCache(redis_server.url), validate=False, remote_verify=True)
            assert report.remote["compared"] and report.remote["writes"] == 0, report.remote
    assert server_values(redis_server) == before


def test_remote_verify_replaces_values_a_client_with_the_studio_secret_refuses(redis_server, tmp_path, monkeypatch):
    # Signed under another secret (a rotation): every client refused and lowered again, every
    # start; verify ignored the signature (review helper 124).
    from engine_plugin.bake import bake
    from engine_plugin.cache.verify import split_signed

    samples = [os.path.join(REPO, "assets", "samples")]
    cache = str(tmp_path / "cache")
    bake(samples, cache, remote=RemoteCache(redis_server.url, secret="old"), validate=False)
    report = bake(samples, cache, remote=RemoteCache(redis_server.url, secret="new"), validate=False, remote_verify=True)
    values = server_values(redis_server)
    assert report.remote["replaced"] == len(values) > 0, report.remote
    remote = RemoteCache(redis_server.url, secret="new")
    from engine_plugin.cache.verify import sign

    assert all(v == sign(remote.secret, split_signed(v)[1]) for v in values.values())


def test_a_key_of_another_type_where_an_entry_belongs_is_replaced_by_a_plain_bake(redis_server, tmp_path):
    # EXISTS said it was there, MGET answered nil: never replaced (review helper 124).
    from engine_plugin.bake import bake

    samples = [os.path.join(REPO, "assets", "samples")]
    cache = str(tmp_path / "cache")
    bake(samples, cache, remote=RemoteCache(redis_server.url), validate=False)
    key = sorted(server_values(redis_server))[0]
    client = redis_server.client()
    client.delete(NAMESPACE + key)
    client.hset(NAMESPACE + key, "x", "1")
    report = bake(samples, cache, remote=RemoteCache(redis_server.url), validate=False)
    assert report.remote["uploaded"] == 1 and client.type(NAMESPACE + key) == b"string"


def test_a_late_command_cuts_other_threads_commands_without_an_exception_escaping(redis_server, baked_samples):
    # The watchdog closes every connection of the pool: other threads' reads raised
    # "ValueError: I/O operation on closed file" out of the remote cache (review helper 124).
    entries = entries_of(baked_samples)
    upload(redis_server, entries)
    link = _SlowLink(redis_server.port, rate=5000)
    escaped: list[BaseException] = []
    remote = RemoteCache(f"redis://127.0.0.1:{link.port}/0", timeout=0.25)

    def small_reads() -> None:
        deadline = time.monotonic() + 2.0
        try:
            while time.monotonic() < deadline:
                remote.existing(list(entries)[:4])  # tiny answers: in time on their own
        except BaseException as exc:  # noqa: BLE001 - what escapes is the finding
            escaped.append(exc)

    threads = [threading.Thread(target=small_reads) for _ in range(6)]
    try:
        for t in threads:
            t.start()
        remote.get_values(list(entries))  # late: cut by the watchdog
        for t in threads:
            t.join(10)
    finally:
        link.close()
    assert not escaped, [f"{type(e).__name__}: {e}" for e in escaped]
    assert remote.stats().timeouts >= 1


def test_an_empty_value_under_a_bakes_key_is_uploaded_again(redis_server, tmp_path):
    # An empty string counted as present (its type is a string), and clients read it as a miss:
    # the variant was missing from the tier for good, --remote-verify included (review helper 125).
    from engine_plugin.bake import bake

    samples = [os.path.join(REPO, "assets", "samples")]
    cache = str(tmp_path / "cache")
    bake(samples, cache, remote=RemoteCache(redis_server.url), validate=False)
    key = sorted(server_values(redis_server))[0]
    redis_server.client().set(NAMESPACE + key, b"")
    report = bake(samples, cache, remote=RemoteCache(redis_server.url), validate=False)
    assert report.remote["uploaded"] == 1 and redis_server.client().strlen(NAMESPACE + key) > 0


def test_the_end_of_bake_upload_goes_in_pipelines_a_slow_link_can_carry(redis_server, tmp_path):
    # 64 entries in one pipeline (~620 KB) did not fit the command deadline on a 600 KB/s link:
    # cut every bake, reported as "wrote 0", while part of it landed (review helper 125).
    from engine_plugin.bake import bake

    samples = [os.path.join(REPO, "assets", "samples")]
    cache = str(tmp_path / "cache")
    bake(samples, cache, validate=False)  # baked locally only: the tier lacks everything
    remote = RemoteCache(redis_server.url)
    batches: list[int] = []
    real = remote._put_batch  # one pipeline

    def counted(items, *how):
        batches.append(sum(len(v) for _, v in items))
        return real(items, *how)

    remote._put_batch = counted
    report = bake(samples, cache, remote=remote, validate=False)
    assert report.remote["uploaded"] == len(server_values(redis_server)) > 0
    largest_entry = max(len(v) for v in server_values(redis_server).values())
    assert max(batches) < 128 * 1024 + largest_entry, batches


@pytest.mark.parametrize("swap", ["link", "fifo", "forged"])
def test_the_end_of_bake_upload_sends_only_entries_a_client_accepts(redis_server, tmp_path, swap):
    # The upload at a bake's end read each local entry with a plain open(): an entry name
    # swapped for a link (another user of a shared cache folder) uploaded the linked file to
    # the studio's tier, a FIFO hung the bake, a file of other bytes went up as the variant
    # (review helper 167). Only regular entry files that decode under their key go up.
    from engine_plugin.bake import bake
    from engine_plugin.bake import driver

    secret = tmp_path / "secret.txt"
    secret.write_text("AWS_SECRET_ACCESS_KEY=hunter2\n")
    remote = RemoteCache(redis_server.url)
    remote.put = lambda *a, **k: False  # the tier refused every write during the bake
    real = driver._sync_remote
    swapped = []

    def swap_then_sync(store, remote, keys, verify=False):
        victim = store.path(keys[0])
        os.unlink(victim)
        if swap == "link":
            os.symlink(secret, victim)
        elif swap == "fifo":
            os.mkfifo(victim)
        else:
            with open(victim, "wb") as f:
                f.write(b"\x93\x01\x02\x03")
        swapped.append(keys[0])
        return real(store, remote, keys, verify)

    driver._sync_remote = swap_then_sync
    try:
        done = threading.Event()
        result: list = []
        worker = threading.Thread(
            target=lambda: (result.append(bake([os.path.join(REPO, "assets", "samples")], str(tmp_path / "cache"), remote=remote, validate=False)), done.set()),
            daemon=True,
        )
        worker.start()
        assert done.wait(60), "the bake hung on the upload"
    finally:
        driver._sync_remote = real
    values = server_values(redis_server)
    assert swapped and swapped[0] not in values
    assert not any(b"hunter2" in v for v in values.values())
    assert len(values) == result[0].remote["uploaded"] >= 1


def test_gc_removes_oversized_values_without_reading_them(redis_server, tmp_path, monkeypatch, baked_samples):
    # gc read every value whole: three planted 200 MB values took 869 MB and 9.5 s, or timed
    # out under the default timeout (review helper 167). Sizes first; oversized ones go unread.
    from engine_plugin.cache import remote as remote_module

    monkeypatch.setattr(remote_module, "MAX_VALUE_BYTES", 64 * 1024)
    remote = RemoteCache(redis_server.url)
    entries = list(entries_of(baked_samples).items())
    assert remote.put_entries(entries[:2]) == 2
    client = redis_server.client()
    for i in range(3):
        client.set(NAMESPACE + f"planted{i}", b"\0" * (128 * 1024))
    client.lpush(NAMESPACE + "junk-list", b"x")
    client.set(NAMESPACE + "empty", b"")
    read: list = []
    real_get, real_mget = remote._client.get, remote._client.mget
    monkeypatch.setattr(remote._client, "get", lambda name, *a: read.append(name) or real_get(name, *a))
    monkeypatch.setattr(remote._client, "mget", lambda names, *a: read.extend(names) or real_mget(names, *a))
    assert remote.gc() == {"removed": 5, "kept": 2}
    assert not any("planted" in (n.decode() if isinstance(n, bytes) else n) for n in read), read
    assert sorted(server_values(redis_server)) == sorted(k for k, _ in entries[:2])


@pytest.mark.parametrize(
    "options",
    [{"ttl": float("inf")}, {"ttl": 1e300}, {"ttl": float("nan")}, {"cooldown": float("nan")}, {"cooldown": -1.0}, {"timeout": float("inf")}, {"ttl": "60"}],
)
def test_options_the_command_line_refuses_are_refused_by_the_api_too(options):
    # Review helper 197: ttl=inf raised a raw OverflowError, ttl=1e300 was taken (every write
    # then refused by Redis), cooldown=nan was taken (the breaker never closed again).
    from engine_plugin.cache.remote import MAX_TTL_S, RemoteCacheError

    with pytest.raises(RemoteCacheError, match="must be"):
        RemoteCache("redis://127.0.0.1:1/0", **options)
    assert RemoteCache("redis://127.0.0.1:1/0", ttl=MAX_TTL_S, cooldown=0).ttl == MAX_TTL_S  # the bounds themselves are fine


def test_the_counters_key_of_another_type_and_a_full_server_are_said_as_they_are(redis_server, tmp_path, caplog):
    # Review helper 197: `cache stats --remote` exited 2 ("does not answer") when only the
    # counters key was of another Redis type; a full server's refused counters were said to be
    # "not integers"; a capped noeviction server was said to "grow without bound".
    from engine_plugin.cache.remote import STATS_KEY

    client = redis_server.client()
    client.lpush(STATS_KEY, b"x")
    res = run_cli("cache", "stats", "--cache", str(tmp_path / "none"), "--remote", redis_server.url)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "the studio counters key holds another Redis type" in res.stdout and "grows without bound" in res.stdout, res.stdout
    remote = RemoteCache(redis_server.url)
    remote._count("misses", 1)
    with caplog.at_level(logging.WARNING, logger="engine_plugin"):
        assert remote.publish()
    assert f"the studio counters key {STATS_KEY} holds another Redis type" in caplog.text and "not integers" not in caplog.text
    client.delete(STATS_KEY)
    client.config_set("maxmemory", client.info("memory")["used_memory"] + 1)  # full at the next write
    client.config_set("maxmemory-policy", "noeviction")
    caplog.clear()
    remote._count("misses", 1)
    with caplog.at_level(logging.WARNING, logger="engine_plugin"):
        remote.publish()
    assert "the server is full" in caplog.text and "not integers" not in caplog.text, caplog.text
    res = run_cli("cache", "stats", "--cache", str(tmp_path / "none"), "--remote", redis_server.url)
    assert "noeviction: once full the server refuses every write" in res.stdout and "grows without bound" not in res.stdout, res.stdout
    client.config_set("maxmemory-policy", "volatile-lru")
    res = run_cli("cache", "stats", "--cache", str(tmp_path / "none"), "--remote", redis_server.url)
    assert "evicts only keys with a TTL" in res.stdout, res.stdout


def test_a_server_refusing_every_command_opens_the_breaker_after_one_line(redis_server, caplog):
    # Review helper 197: a database the server lacks (or not Redis at all) refused each command
    # with a line per command kind, and every lookup asked again.
    url = redis_server.url.rsplit("/", 1)[0] + "/99"  # 16 databases by default
    remote = RemoteCache(url, cooldown=60)
    with caplog.at_level(logging.WARNING, logger="engine_plugin"):
        assert remote.get_values(["a" * 64]) == {}
        before = remote.stats()
        assert remote.get_values(["b" * 64]) == {}
        remote.publish()
    after = remote.stats()
    assert not remote.available and after.skipped > before.skipped, (before, after)
    assert len([r for r in caplog.records if "remote variant cache" in r.getMessage()]) == 1, caplog.text


def test_an_empty_secret_is_no_secret_and_a_value_signed_under_the_empty_key_is_relowered(redis_server, baked_samples, tmp_path):
    # Anyone can compute an HMAC under the empty key: a client configured with secret="" took
    # such a forgery as signed and served its kernel (review helper 232).
    from engine_plugin.cache.entry import BadEntry
    from engine_plugin.cache.verify import sign, verify_entry

    honest = entries_of(baked_samples)
    lib, wanted = library(tmp_path, False)
    key, (ref, spec) = sorted(keys_of(lib, wanted).items())[0]
    prog = ref.program()
    real = decode_entry(key, honest[key])
    evil = replace(real, source=real.source.replace("\n", "\n// EVIL KERNEL\n", 1))
    forged = sign(b"", encode_entry(key, evil, signed=False))
    redis_server.client().set(NAMESPACE + key, forged)
    for secret in ("", b""):
        remote = RemoteCache(redis_server.url, secret=secret)
        assert remote.secret is None and remote.wrap(b"entry") == b"entry"  # nothing signed, nothing trusted
        got = remote.fetch(key, schema=prog.schema, wgsl=prog.wgsl, spec=spec, wgsl_path=prog.wgsl_path)
        assert got is None
        st = remote.stats()
        assert st.rejected == 1 and st.signed == 0 and st.hits == 0
        with pytest.raises(BadEntry):  # the function on its own too: an empty key proves nothing
            verify_entry(key, forged, schema=prog.schema, wgsl=prog.wgsl, spec=spec, wgsl_path=prog.wgsl_path, secret=b"")
    # The honest entry signed under the empty key is re-lowered, not taken as signed.
    redis_server.client().set(NAMESPACE + key, sign(b"", honest[key]))
    remote = RemoteCache(redis_server.url, secret="")
    got = remote.fetch(key, schema=prog.schema, wgsl=prog.wgsl, spec=spec, wgsl_path=prog.wgsl_path)
    assert got is not None and "EVIL" not in got.lowered.source
    assert remote.stats().relowered == 1 and remote.stats().signed == 0


def test_values_signed_under_a_rotated_secret_are_said_in_one_line_with_the_fix(redis_server, baked_samples, tmp_path, caplog):
    # After a secret rotation every game start logged one "refused" warning per variant (26
    # lines here, thousands in a studio) and never said what to do (review helper 232).
    assert RemoteCache(redis_server.url, secret="old-secret").put_entries(entries_of(baked_samples).items()) == 26
    lib, wanted = library(tmp_path, RemoteCache(redis_server.url, secret="new-secret"))
    caplog.set_level(logging.DEBUG, logger="engine_plugin.cache")
    rep = lib.prefetch(wanted)
    assert rep.remote == 0 and rep.rejected == 26 and lib.remote.stats().rejected == 26
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warned) == 1, warned
    assert "another secret" in warned[0] and "bake --remote-verify" in warned[0] and "cache gc --remote" in warned[0]
    detail = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG and "signature" in r.getMessage()]
    assert len(detail) == 26  # each key's own line, at debug level


def test_a_bake_under_a_stale_secret_never_replaces_the_farms_values_and_says_so(redis_server, tmp_path, caplog):
    # A workstation baking with a stale secret (or none) SET every baked variant over the
    # farm's good values, and the farm's routine bake repaired nothing (review helper 232). A
    # bake now writes only keys the tier lacks (SET NX); --remote-verify and gc replace.
    from engine_plugin.bake import bake
    from engine_plugin.cache.verify import sign, split_signed

    here, there = _two_checkouts(tmp_path)
    bake([here], str(tmp_path / "farm"), remote=RemoteCache(redis_server.url, secret="B"), validate=False)
    good = server_values(redis_server)
    assert good
    caplog.set_level(logging.WARNING, logger="engine_plugin.cache")
    for secret, cache in (("A", "ws"), (None, "ws-none")):
        report = bake([there], str(tmp_path / cache), remote=RemoteCache(redis_server.url, secret=secret), validate=False)
        assert report.ok and report.remote["writes"] == 0, report.remote
    assert server_values(redis_server) == good
    assert all(v == sign(b"B", split_signed(v)[1]) for v in good.values())
    said = [r.getMessage() for r in caplog.records if "another secret" in r.getMessage()]
    assert len(said) == 1 and "bake --remote-verify" in said[0] and "cache gc --remote" in said[0], said
    # Game starts under B still take every value as signed.
    lib, wanted = library(tmp_path, RemoteCache(redis_server.url, secret="B"))
    rep = lib.prefetch(wanted)
    assert rep.rejected == 0 and rep.remote == len(good) and lib.remote.stats().signed == len(good)
