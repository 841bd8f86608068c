"""Local entries are signed under this user's cache key; bakes skip only entries a bake
validated (review helper 55). Every game side runs in a fresh process: in one process the
program registry would answer the variant it holds without reading the cache."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest

from engine_plugin.bake import bake
from engine_plugin.cache import BadEntry, VariantCache, decode_entry, encode_entry, open_entry
from engine_plugin.cache import local_key
from engine_plugin.errors import CacheError
from engine_plugin.lowering import lower, parse, resolve_spec
from engine_plugin.lowering.fingerprint import variant_key

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "assets"))
from asset_support import kernel, make_asset, write  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

GAME = textwrap.dedent(
    """
    import sys
    import numpy as np
    from engine_plugin import abi
    from engine_plugin.assets import AssetLibrary
    lib = AssetLibrary(sys.argv[1], cache=sys.argv[2])
    v = lib.load("k.computeShader").program().variant({"T": "f32"})
    print(abi.read(v.run(n=4, inputs={"src": np.arange(1, 5, dtype=np.float32)}).outputs["dst"]).tolist())
    lib.close()
    """
)


@pytest.fixture
def own_key(tmp_path, monkeypatch):
    """This test's cache key (not the user's), for this process and its children."""
    path = str(tmp_path / "mine.key")
    with open(path, "wb") as f:
        f.write(os.urandom(local_key.KEY_BYTES))
    os.chmod(path, 0o600)
    monkeypatch.setenv("ENGINE_PLUGIN_CACHE_KEY", path)
    return path


def _honest(root: str):
    folder = os.path.join(root, "k.computeShader")
    yaml_path, wgsl_path = os.path.join(folder, "bindings.yaml"), os.path.join(folder, "kernel.wgsl")
    schema = parse(open(yaml_path).read(), yaml_path)
    wgsl = open(wgsl_path).read()
    spec = resolve_spec(schema, {"T": "f32"}, None)
    return variant_key(schema.text, wgsl, spec), lower(schema, wgsl, spec, wgsl_path=wgsl_path)


def test_an_entry_signed_under_another_key_is_a_miss_and_its_wgsl_never_runs(tmp_path, own_key, monkeypatch):
    root, cache_dir = str(tmp_path / "assets"), str(tmp_path / "cache")
    make_asset(root)
    key, honest = _honest(root)
    # Someone else's entry (a copied or downloaded cache folder): the texts its source map
    # quotes are this asset's, the WGSL it holds is not. Its checksum is right.
    forged = replace(honest, source=honest.source.replace("T(2.0)", "T(1000.0)"))
    theirs = tmp_path / "theirs.key"
    theirs.write_bytes(os.urandom(local_key.KEY_BYTES))
    monkeypatch.setenv("ENGINE_PLUGIN_CACHE_KEY", str(theirs))
    VariantCache(cache_dir).put(key, forged)
    monkeypatch.setenv("ENGINE_PLUGIN_CACHE_KEY", own_key)
    with open(VariantCache(cache_dir).path(key), "rb") as f:
        with pytest.raises(BadEntry, match="not signed under this user's cache key"):
            decode_entry(key, f.read())
    game = subprocess.run([sys.executable, "-c", GAME, root, cache_dir], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert game.returncode == 0, game.stderr[-2000:]
    assert game.stdout.strip().splitlines()[-1] == "[2.0, 4.0, 6.0, 8.0]"
    assert "not signed under this user's cache key" in game.stderr
    # ...and replaced by this user's own lowering
    with open(VariantCache(cache_dir).path(key), "rb") as f:
        entry = open_entry(key, f.read())
    assert "T(2.0)" in entry.lowered.source and "T(1000.0)" not in entry.lowered.source


def test_an_entry_a_game_lowered_but_never_compiled_is_not_skipped_by_a_bake(tmp_path, own_key):
    # A game (or a refused hot reload) lowers a variant whose WGSL does not compile: its
    # entry is in the cache. A bake skipped it as baked and exited 0 over a broken asset.
    root, cache_dir = str(tmp_path / "assets"), str(tmp_path / "cache")
    folder = make_asset(root)
    write(os.path.join(folder, "kernel.wgsl"), kernel(2.0).replace("src_get(i) * T(2.0)", "src_get(i) * T(2.0) + not_defined"))
    game = subprocess.run([sys.executable, "-c", GAME, root, cache_dir], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert game.returncode != 0 and "not_defined" in game.stderr
    assert any(name.endswith(".msgpack") for name in os.listdir(cache_dir))  # lowered, put, then refused by the compiler
    report = bake([root], cache_dir)
    assert not report.ok
    assert [v.status for v in report.variants].count("failed") == 3
    assert not any(v.status == "skipped" for v in report.variants)
    # A lowering-only bake does skip it: it checks nothing a compile would.
    assert all(v.status == "skipped" for v in bake([root], cache_dir, validate=False).variants if v.spec.as_dict().get("T") == "f32")


def test_a_validated_entry_is_skipped_by_the_next_bake(tmp_path, own_key):
    root, cache_dir = str(tmp_path / "assets"), str(tmp_path / "cache")
    make_asset(root)
    first = bake([root], cache_dir)
    assert first.ok and {v.status for v in first.variants} == {"baked"}
    again = bake([root], cache_dir)
    assert again.ok and {v.status for v in again.variants} == {"skipped"}
    with open(VariantCache(cache_dir).path(first.variants[0].key), "rb") as f:
        assert open_entry(first.variants[0].key, f.read()).validated


def test_a_signed_entry_with_a_workgroup_or_params_size_no_lowering_makes_is_a_bad_entry(tmp_path, own_key):
    root = str(tmp_path / "assets")
    make_asset(root)
    key, honest = _honest(root)
    for bad in (replace(honest, workgroup=(0, 1, 1)), replace(honest, workgroup=("x", 1, 1)), replace(honest, params=replace(honest.params, size=-16))):
        with pytest.raises(BadEntry, match="workgroup or params size"):
            decode_entry(key, encode_entry(key, bad))
    # Values no lowering makes, signed all the same (review helper 176: a params size of 2**40
    # raised a raw MemoryError on every load, a workgroup of 2**40 a compile error blaming
    # bindings.yaml, and the entry was never replaced).
    fields = honest.params.fields
    huge = (
        replace(honest, workgroup=(1 << 40, 1, 1)),
        replace(honest, workgroup=(64, 64, 1)),  # 4,096 invocations a group: the lowering refuses past 1,024
        replace(honest, params=replace(honest.params, size=1 << 40)),
        replace(honest, params=replace(honest.params, size=honest.params.size + 8)),  # not a multiple of 16
        replace(honest, params=replace(honest.params, fields=(replace(fields[0], offset=honest.params.size),) + fields[1:])),
        replace(honest, params=replace(honest.params, fields=(replace(fields[0], offset=-4),) + fields[1:])),
    )
    for bad in huge:
        with pytest.raises(BadEntry, match="workgroup or params (size|layout)"):
            decode_entry(key, encode_entry(key, bad))


def test_a_signed_entry_with_bindings_slots_or_a_source_map_no_lowering_makes_is_a_bad_entry(tmp_path, own_key):
    # Review helper 206: served as hits, they failed the same way on every load: a source-map
    # file index past its files (a raw IndexError), a slot of 0 lanes (an output read back
    # empty: a wrong result), a slot's binding no binding has (KeyError), an f64 scalar, a
    # negative binding ("engine_plugin bug"), a line past the file (an error at a line that
    # does not exist). As bad entries they are lowered again and replaced.
    root = str(tmp_path / "assets")
    make_asset(root)
    key, honest = _honest(root)
    smap, slot, binding = honest.source_map, honest.host_slots[0], honest.bindings[0]
    bad_entries = (
        replace(honest, source_map=replace(smap, entries=((7, 1),) + smap.entries[1:])),
        replace(honest, source_map=replace(smap, entries=(("x", [1]),) + smap.entries[1:])),
        replace(honest, source_map=replace(smap, entries=((1, 100_000),) + smap.entries[1:])),
        replace(honest, source_map=replace(smap, splices=((1, 1, 1, "x", 1),))),
        replace(honest, host_slots=(replace(slot, lanes=0),) + honest.host_slots[1:]),
        replace(honest, host_slots=(replace(slot, lanes=-3),) + honest.host_slots[1:]),
        replace(honest, host_slots=(replace(slot, binding=4000),) + honest.host_slots[1:]),
        replace(honest, host_slots=(replace(slot, scalar="f64"),) + honest.host_slots[1:]),
        replace(honest, bindings=(replace(binding, binding=-1),) + honest.bindings[1:]),
        replace(honest, bindings=(replace(binding, lanes=9),) + honest.bindings[1:]),
    )
    for bad in bad_entries:
        with pytest.raises(BadEntry, match="no lowering makes"):
            decode_entry(key, encode_entry(key, bad))
    assert decode_entry(key, encode_entry(key, honest)) == honest


def test_the_cache_key_is_created_once_private_and_reused(tmp_path, monkeypatch):
    path = tmp_path / "state" / "engine_plugin" / "cache.key"
    monkeypatch.delenv("ENGINE_PLUGIN_CACHE_KEY", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(local_key, "_keys", {})
    first = local_key.local_cache_secret()
    assert path.read_bytes() == first and len(first) == local_key.KEY_BYTES
    assert (path.stat().st_mode & 0o777) == 0o600
    monkeypatch.setattr(local_key, "_keys", {})
    assert local_key.local_cache_secret() == first  # read back, not made again
    # A key that cannot be read or created: a process-own key, and entries still round-trip.
    monkeypatch.setenv("ENGINE_PLUGIN_CACHE_KEY", str(tmp_path / "a-file" / "below-a-file.key"))
    (tmp_path / "a-file").write_text("")
    own = local_key.local_cache_secret()
    assert len(own) == local_key.KEY_BYTES and own != first


def test_one_entry_that_cannot_be_replaced_fails_alone(tmp_path, own_key, monkeypatch):
    # An immutable entry, or another user's in a sticky folder: EPERM on that one rename. It
    # made the whole cache read-only for the rest of the process.
    root = str(tmp_path / "assets")
    make_asset(root)
    key, honest = _honest(root)
    cache = VariantCache(str(tmp_path / "cache"))
    blocked = cache.path(key)
    real_replace = os.replace

    def replace_refusing_one(src, dst, *a, **k):
        if dst == blocked:
            raise PermissionError(errno.EPERM, "Operation not permitted", dst)
        return real_replace(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", replace_refusing_one)
    assert not cache.put(key, honest)
    assert not cache.read_only
    other = "0" * 64
    assert cache.put(other, honest) and cache.get(other) is not None


def test_a_cache_path_that_is_a_file_says_so(tmp_path):
    path = tmp_path / "cachefile"
    path.write_text("not a folder")
    with pytest.raises(CacheError, match="exists and is not a folder"):
        VariantCache(str(path))


def test_cache_clear_usage_over_a_folder_named_like_the_usage_log_is_an_error_not_a_traceback(tmp_path, own_key):
    cache = tmp_path / "cache"
    VariantCache(str(cache))
    (cache / "usage.msgpack").mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "engine_plugin", "cache", "clear", "--usage", "--cache", str(cache)], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert proc.returncode == 1, proc.stderr
    assert "usage log was not removed" in proc.stderr and "bug" not in proc.stderr
    assert (cache / "usage.msgpack").is_dir()


def test_a_cache_key_named_through_a_link_is_used_and_entries_stay_hits_across_processes(tmp_path, monkeypatch):
    # Mounted secrets are links (..data/cache.key): the named key was refused as a link, every
    # process signed with a key of its own, and each start re-lowered and rewrote every entry.
    real = tmp_path / "secret" / "..data" / "cache.key"
    real.parent.mkdir(parents=True)
    real.write_bytes(os.urandom(32))
    link = tmp_path / "secret" / "cache.key"
    link.symlink_to(real)
    monkeypatch.setenv("ENGINE_PLUGIN_CACHE_KEY", str(link))
    monkeypatch.setattr(local_key, "_keys", {})
    assert local_key.local_cache_secret() == real.read_bytes()
    root, cache_dir = str(tmp_path / "assets"), str(tmp_path / "cache")
    make_asset(root)
    for _ in range(2):
        game = subprocess.run([sys.executable, "-c", GAME, root, cache_dir], capture_output=True, text=True, timeout=120, cwd=REPO)
        assert game.returncode == 0 and game.stdout.strip().splitlines()[-1] == "[2.0, 4.0, 6.0, 8.0]", game.stderr[-2000:]
        assert "cannot be used" not in game.stderr and "not signed" not in game.stderr, game.stderr[-2000:]


def test_a_cache_key_others_can_read_is_used_with_a_warning(tmp_path, monkeypatch, caplog):
    # Accepted silently before (review helper 58): anyone who can read it can sign entries.
    path = tmp_path / "shared.key"
    path.write_bytes(os.urandom(32))
    path.chmod(0o644)
    monkeypatch.setenv("ENGINE_PLUGIN_CACHE_KEY", str(path))
    monkeypatch.setattr(local_key, "_keys", {})
    assert local_key.local_cache_secret() == path.read_bytes()
    assert any("readable by other users" in m for m in caplog.messages)


def _cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    """``engine-plugin ARGS`` in a subprocess with ``env``."""
    return subprocess.run([sys.executable, "-m", "engine_plugin", *args], env=env, capture_output=True, text=True, timeout=120, cwd=REPO)


def _entries_of(cache_dir: str) -> dict[str, bytes]:
    return {name: open(os.path.join(cache_dir, name), "rb").read() for name in os.listdir(cache_dir)}


@pytest.mark.parametrize("bad", ["/dev/null", "a-folder"])
def test_a_bake_with_an_unusable_cache_key_refuses_and_leaves_the_baked_cache_whole(tmp_path, own_key, bad):
    """A mistyped ENGINE_PLUGIN_CACHE_KEY made a bake delete every entry it could not verify,
    rewrite them under a throwaway key no later process accepts, and exit 0 (review helper
    137): it is a usage error now, the entries untouched; a game in that state is served the
    cache read-only and removes nothing either."""
    root, cache_dir = str(tmp_path / "assets"), str(tmp_path / "cache")
    make_asset(root)
    assert bake([root], cache_dir).ok
    before = _entries_of(cache_dir)
    assert before
    if bad == "a-folder":
        bad = str(tmp_path / "a-folder")
        os.mkdir(bad)
    env = {**os.environ, "ENGINE_PLUGIN_CACHE_KEY": bad}
    cli = _cli(env, "bake", root, "--cache", cache_dir, "-j", "1", "-q")
    assert cli.returncode == 2, cli.stderr[-2000:]
    assert "cannot be used" in cli.stderr and "ENGINE_PLUGIN_CACHE_KEY" in cli.stderr
    game = subprocess.run([sys.executable, "-c", GAME, root, cache_dir], env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert game.returncode == 0, game.stderr[-2000:]
    assert game.stdout.strip().splitlines()[-1] == "[2.0, 4.0, 6.0, 8.0]"
    assert "without writes" in game.stderr
    assert _entries_of(cache_dir) == before
    again = bake([root], cache_dir)  # the user's key again: every entry still skipped
    assert again.ok and {v.status for v in again.variants} == {"skipped"}
    # gc and clear need no key: they still work (they said "read-only to you", review helper 139)
    cleared = _cli(env, "cache", "clear", "--cache", cache_dir)
    assert cleared.returncode == 0, cleared.stderr[-2000:]
    assert not [name for name in os.listdir(cache_dir) if name in before]


def test_a_key_file_the_variable_names_that_does_not_exist_is_never_made(tmp_path, own_key):
    # A mistyped name (a missing file, in a folder that exists or not) was made: every entry was
    # signed under the new key, so every bake after baked everything again (review helpers 139,
    # 143). Bake refuses, saying how to make one; the baked cache is untouched.
    root, cache_dir = str(tmp_path / "assets"), str(tmp_path / "cache")
    make_asset(root)
    assert bake([root], cache_dir).ok
    before = _entries_of(cache_dir)
    for typo in (tmp_path / "mien.key", tmp_path / "kyes" / "mine.key"):
        env = {**os.environ, "ENGINE_PLUGIN_CACHE_KEY": str(typo)}
        cli = _cli(env, "bake", root, "--cache", cache_dir, "-j", "1", "-q")
        assert cli.returncode == 2, cli.stderr[-2000:]
        assert "head -c 32 /dev/urandom" in cli.stderr, cli.stderr
        assert not typo.exists() and (typo.parent == tmp_path or not typo.parent.exists())
    assert _entries_of(cache_dir) == before
    # One line each, no warning before it claiming the process goes on with a key of its own
    # (review helper 204: cache gc printed three).
    for args in (["bake", root, "--cache", cache_dir, "-j", "1", "-q"], ["cache", "gc", "--cache", cache_dir], ["cache", "stats", "--verify", "--cache", cache_dir]):
        cli = _cli({**os.environ, "ENGINE_PLUGIN_CACHE_KEY": str(tmp_path / "mien.key")}, *args)
        assert cli.returncode == 2 and len(cli.stderr.strip().splitlines()) == 1 and "a key of its own" not in cli.stderr, cli.stderr


def test_cache_stats_and_clear_make_no_key(tmp_path):
    # They need none; the cache asked for the key as it was made (review helper 143). (gc and
    # stats --verify check signatures: they need the key, and make the default one on first use.)
    env = {k: v for k, v in os.environ.items() if k != "ENGINE_PLUGIN_CACHE_KEY"}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    (tmp_path / "cache").mkdir()
    for args in (["stats"], ["clear"]):
        done = _cli(env, "cache", *args, "--cache", str(tmp_path / "cache"))
        assert done.returncode == 0, done.stderr[-2000:]
    assert not (tmp_path / "state").exists()


def test_gc_and_verify_without_the_key_refuse_and_remove_nothing(tmp_path, own_key):
    # gc removes what does not verify: with a missing key file, every entry read as forged and a
    # whole baked cache was removed, exit 0 (review helper 144).
    root, cache_dir = str(tmp_path / "assets"), str(tmp_path / "cache")
    make_asset(root)
    assert bake([root], cache_dir).ok
    before = _entries_of(cache_dir)
    env = {**os.environ, "ENGINE_PLUGIN_CACHE_KEY": str(tmp_path / "mien.key")}
    for args in (["gc"], ["stats", "--verify"]):
        done = _cli(env, "cache", *args, "--cache", cache_dir)
        assert done.returncode == 2 and "cannot tell" in done.stderr, done.stderr[-2000:]
    assert _entries_of(cache_dir) == before


def test_a_key_in_the_temporary_folder_is_used_with_a_warning_naming_it(tmp_path, monkeypatch, caplog):
    # Review helper 190: with a read-only home the key moved to <tmp>/engine_plugin-<uid>/ with
    # nothing said, and processes with the two keys replaced each other's entries for good.
    home = tmp_path / "home-state"
    home.write_text("")  # a file where the state folder would be: the home key cannot be made
    monkeypatch.delenv("ENGINE_PLUGIN_CACHE_KEY", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    monkeypatch.setattr(local_key, "_keys", {})
    fallback = tmp_path / "tmpkey" / "cache.key"
    monkeypatch.setattr(local_key, "_fallback_path", lambda: str(fallback))
    key = local_key.local_cache_secret()
    assert fallback.read_bytes() == key
    said = [m for m in caplog.messages if "signing with the cache key" in m]
    assert len(said) == 1 and str(fallback) in said[0] and "ENGINE_PLUGIN_CACHE_KEY" in said[0], caplog.messages
    assert local_key.local_key_problem() is None  # a key of this user's, kept: the cache writes
