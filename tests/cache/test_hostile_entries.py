"""Hostile cache folders: entries crafted to crash, hang or exhaust a reader, files of the wrong
type under an entry's name, and user files among the entries. Every reader (``get``,
``verify``, ``gc``, the CLI) treats them as counted misses and never crashes, blocks or reads
more than an entry can be; ``gc`` and ``clear`` touch only names of the cache's own shape."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
import time
import tracemalloc

import msgpack
import pytest

from cache_support import REPO, reference_variants

from engine_plugin.cache import VariantCache, decode_entry
from engine_plugin.cache.entry import LAYOUT, MAGIC, MAX_ENTRY_BYTES, BadEntry, _digest
from engine_plugin.cli import main
from engine_plugin.lowering import LOWERING_VERSION
from engine_plugin.lowering.fingerprint import CACHE_FORMAT_VERSION


def _envelope(key: str, payload: bytes) -> bytes:
    """A well-formed entry around ``payload``, checksum and all (anyone can recompute it)."""
    asset, spec, columns = "x.wgsl", [], []
    env = {
        "magic": MAGIC, "format": CACHE_FORMAT_VERSION, "lowering": LOWERING_VERSION, "layout": LAYOUT, "key": key,
        "asset": asset, "spec": spec, "columns": columns, "sha256": _digest(payload, asset, spec, columns, header=(key, CACHE_FORMAT_VERSION, LOWERING_VERSION, LAYOUT)), "payload": payload,
    }
    return msgpack.packb(env, use_bin_type=True)


def _nested_ext_payload(depth: int, code: int = 2) -> bytes:
    data = msgpack.packb(0)
    for _ in range(depth):
        data = msgpack.packb(msgpack.ExtType(code, data))
    return data


def _nested_array_payload(depth: int) -> bytes:
    return b"\x91" * depth + b"\x00"


KEY = "ab" * 32


@pytest.mark.parametrize("depth", [250, 5000])
def test_a_deeply_nested_entry_is_a_miss_not_a_segfault(tmp_path, depth):
    # 250 nested extension records (about 1.2 KB) overflowed the C stack of every reader.
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / f"{KEY}.msgpack").write_bytes(_envelope(KEY, _nested_ext_payload(depth)))
    script = textwrap.dedent(
        f"""
        from engine_plugin.cache import BadEntry, VariantCache, decode_entry
        data = open({str(folder / f"{KEY}.msgpack")!r}, "rb").read()
        try:  # a remote entry is decoded before it is proven (the local tier refuses it unsigned)
            decode_entry({KEY!r}, data, signed=False)
            raise SystemExit("decoded")
        except BadEntry:
            pass
        c = VariantCache({str(folder)!r})
        assert c.verify() and c.get({KEY!r}) is None and c.stats().corrupt == 1
        print("survived")
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "survived" in proc.stdout


@pytest.mark.parametrize("depth", [9, 40])  # deeper ones: in a subprocess above
def test_nested_extension_records_are_refused_past_a_small_depth(depth):
    with pytest.raises(BadEntry, match="nested"):
        decode_entry(KEY, _envelope(KEY, _nested_ext_payload(depth)), signed=False)  # as a remote entry is


def test_nested_arrays_and_huge_counts_are_bad_entries():
    with pytest.raises(BadEntry):
        decode_entry(KEY, _envelope(KEY, _nested_array_payload(100_000)), signed=False)
    # An array header claiming 2**32-1 items in a few bytes must not allocate for them.
    with pytest.raises(BadEntry):
        decode_entry(KEY, _envelope(KEY, b"\xdd\xff\xff\xff\xff" + b"\x00" * 16), signed=False)
    with pytest.raises(BadEntry):
        decode_entry(KEY, b"\xdf\xff\xff\xff\xff" + b"\x00" * 16, signed=False)


def _cache_with_entry(tmp_path):
    folder = str(tmp_path / "cache")
    cache = VariantCache(folder)
    key, lowered = reference_variants()[0]
    return cache, key, lowered


def test_a_fifo_named_like_an_entry_is_a_counted_miss_not_a_hang(tmp_path):
    cache, key, lowered = _cache_with_entry(tmp_path)
    os.mkfifo(cache.path(key))
    script = textwrap.dedent(
        f"""
        from engine_plugin.cache import VariantCache
        c = VariantCache({cache.folder!r})
        assert c.get({key!r}) is None
        st = c.stats()
        assert (st.misses, st.corrupt) == (1, 1), st
        assert {key!r} in c.verify() or not c.verify()
        c.gc()
        print("survived")
        """
    )
    try:
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, cwd=REPO)
    except subprocess.TimeoutExpired:
        pytest.fail("opening a FIFO named like an entry blocked the reader")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not os.path.exists(cache.path(key))  # removed like any other bad entry
    assert cache.put(key, lowered) and VariantCache(cache.folder).get(key) == lowered


def test_a_symlink_to_dev_zero_is_a_miss_and_nothing_outside_the_cache_is_read(tmp_path):
    cache, key, lowered = _cache_with_entry(tmp_path)
    os.symlink("/dev/zero", cache.path(key))
    script = textwrap.dedent(
        f"""
        from engine_plugin.cache import VariantCache
        c = VariantCache({cache.folder!r})
        assert c.get({key!r}) is None and c.stats().corrupt == 1
        print("survived")
        """
    )
    # In a subprocess: reading the link's target never ends (until memory runs out).
    try:
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, cwd=REPO)
    except subprocess.TimeoutExpired:
        pytest.fail("reading an entry that links to /dev/zero did not end")
    assert proc.returncode == 0 and "survived" in proc.stdout, proc.stderr[-2000:]
    assert not os.path.lexists(cache.path(key))  # the link is removed, its target untouched
    assert os.path.exists("/dev/zero")


def test_a_symlink_to_a_valid_entry_outside_the_cache_is_not_served(tmp_path):
    cache, key, lowered = _cache_with_entry(tmp_path)
    other = VariantCache(str(tmp_path / "elsewhere"))
    other.put(key, lowered)
    os.symlink(other.path(key), cache.path(key))
    assert cache.get(key) is None
    assert cache.stats().corrupt == 1
    assert os.path.isfile(other.path(key))  # never follows the link to delete its target


def test_a_sparse_huge_file_is_refused_by_size_before_reading(tmp_path):
    cache, key, lowered = _cache_with_entry(tmp_path)
    with open(cache.path(key), "wb") as f:
        f.truncate(1024 * 1024 * 1024)  # 1 GiB, sparse: costs no disk, would cost 1 GiB to read
    tracemalloc.start()
    try:
        assert cache.get(key) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024, f"reading a 1 GiB sparse entry allocated {peak} bytes"
    assert cache.stats().corrupt == 1
    assert not os.path.exists(cache.path(key))


def test_files_no_read_would_take_never_push_good_entries_out_of_a_capped_cache(tmp_path):
    # Review helper 108: a 1 GiB sparse file named like an entry (a key nobody asks for) made
    # the cap count 1 GiB, and the LRU evicted every good entry before reaching it: one planted
    # file discarded a whole baked cache. Files no read takes go first, whatever their age.
    cache = VariantCache(str(tmp_path / "cache"), max_bytes=256 * 1024)
    variants = reference_variants()
    for key, lowered in variants[:-1]:
        cache.put(key, lowered)
    good = {key for key, _ in variants[:-1]}
    sparse = cache.path("f" * 64)
    with open(sparse, "wb") as f:
        f.truncate(1024 * 1024 * 1024)
    os.mkdir(cache.path("e" * 64))  # a folder under an entry's name
    for path in (sparse, cache.path("e" * 64)):
        os.utime(path, (time.time() + 3600, time.time() + 3600))  # the most recently used, by mtime
    key, lowered = variants[-1]
    cache = VariantCache(cache.folder, max_bytes=256 * 1024)  # the next start: its first write scans
    cache.put(key, lowered)  # past the cap as counted before: the LRU evicted every good entry
    assert cache.stats().evictions == 0
    assert {i.key for i in cache.entries()} == good | {key}
    assert not os.path.exists(sparse) and not os.path.exists(cache.path("e" * 64))
    assert all(cache.get(k) is not None for k in good)


def test_sparse_files_under_the_size_limit_count_what_they_take_on_disk(tmp_path):
    # Eight 60 MiB sparse files (each small enough to be read and refused) would make a
    # 512 MiB cap evict every good entry if the cap counted their apparent size.
    cache = VariantCache(str(tmp_path / "cache"), max_bytes=256 * 1024)
    variants = reference_variants()
    for key, lowered in variants[:-1]:
        cache.put(key, lowered)
    for k in range(8):
        with open(cache.path(f"{k:x}" * 64), "wb") as f:
            f.truncate(60 * 1024 * 1024)
    cache = VariantCache(cache.folder, max_bytes=256 * 1024)
    cache.put(*variants[-1])
    assert cache.stats().evictions == 0
    assert {key for key, _ in variants} <= {i.key for i in cache.entries()}


def test_writing_over_a_sparse_file_keeps_the_size_cap(tmp_path):
    # Review helper 110: put() took the apparent size of the file it replaced off its running
    # count while gc counted disk bytes: writing over one 60 MiB sparse file under an entry's
    # name made the count 60 MiB low, and the cap was never enforced again.
    variants = reference_variants()
    cap = 64 * 1024
    folder = str(tmp_path / "cache")
    cache = VariantCache(folder, max_bytes=cap)
    cache.put(*variants[0])  # the first write scans: the count is what is on disk
    with open(cache.path(variants[1][0]), "wb") as f:
        f.truncate(60 * 1024 * 1024)
    for key, lowered in variants[1:]:
        cache.put(key, lowered)
    assert sum(i.size for i in cache.entries()) <= cap and cache.stats().evictions > 0


def test_an_entry_stamped_in_the_future_is_evicted_first(tmp_path):
    # Review helper 112: a file of an entry's size stamped years ahead looked like the most
    # recently used entry and outlived every entry in use (it held most of a small cap).
    variants = reference_variants()
    cache = VariantCache(str(tmp_path / "cache"), max_bytes=10**9)
    for key, lowered in variants[:6]:
        cache.put(key, lowered)
    planted = variants[0][0]
    ahead = time.time() + 10 * 365 * 86400
    os.utime(cache.path(planted), (ahead, ahead))
    sizes = sum(i.size for i in cache.entries())
    assert cache.gc(max_bytes=sizes - 1, low_water=1.0) == 1  # one eviction is enough: the planted one goes
    assert planted not in {i.key for i in cache.entries()}
    # Helper 113: a stamp minutes ahead is another machine's clock (a shared folder), not a
    # plant: entries used a moment ago there stay newer than yesterday's.
    fresh, old = variants[1][0], variants[2][0]
    os.utime(cache.path(fresh), (time.time() + 120, time.time() + 120))
    os.utime(cache.path(old), (time.time() - 86400, time.time() - 86400))
    sizes = sum(i.size for i in cache.entries())
    assert cache.gc(max_bytes=sizes - 1, low_water=1.0) == 1
    assert old not in {i.key for i in cache.entries()} and fresh in {i.key for i in cache.entries()}



def test_verify_and_gc_report_non_regular_files_without_opening_them(tmp_path, deadline):
    cache, key, lowered = _cache_with_entry(tmp_path)
    os.mkfifo(cache.path(key))
    bad = cache.verify()
    assert key in bad and "not a regular file" in bad[key]


def test_gc_and_clear_remove_only_names_of_the_caches_own_shape(tmp_path):
    cache, key, lowered = _cache_with_entry(tmp_path)
    cache.put(key, lowered)
    user_files = [".tmp-notes.txt", ".tmp-", ".tmp-project", "readme.txt", "a" * 64 + ".msgpack.bak"]
    for name in user_files:
        p = os.path.join(cache.folder, name)
        with open(p, "w") as f:
            f.write("mine")
        os.utime(p, (time.time() - 3600, time.time() - 3600))  # older than any stale temp
    # A stale temporary of our own shape is removed.
    ours = os.path.join(cache.folder, f".tmp-{key[:16]}-123-0a1b2c3d")
    with open(ours, "wb") as f:
        f.write(b"x")
    os.utime(ours, (time.time() - 3600, time.time() - 3600))
    cache.gc()
    assert not os.path.exists(ours)
    assert cache.clear() == 1
    assert sorted(os.listdir(cache.folder)) == sorted(user_files)


def test_cli_verify_and_gc_survive_every_hostile_entry(tmp_path, capsys):
    folder = tmp_path / "cache"
    cache = VariantCache(str(folder))
    for key, lowered in reference_variants()[:2]:
        cache.put(key, lowered)
    keys = ["1" * 64, "2" * 64, "3" * 64, "4" * 64]
    (folder / f"{keys[0]}.msgpack").write_bytes(_envelope(keys[0], _nested_ext_payload(300)))
    os.mkfifo(folder / f"{keys[1]}.msgpack")
    os.symlink("/dev/zero", folder / f"{keys[2]}.msgpack")
    with open(folder / f"{keys[3]}.msgpack", "wb") as f:
        f.truncate(256 * 1024 * 1024)
    script = textwrap.dedent(
        f"""
        import sys
        from engine_plugin.cli import main
        rc1 = main(["cache", "stats", "--cache", {str(folder)!r}, "--verify"])
        rc2 = main(["cache", "gc", "--cache", {str(folder)!r}])
        rc3 = main(["cache", "stats", "--cache", {str(folder)!r}, "--verify"])
        print("rcs", rc1, rc2, rc3)
        """
    )
    try:
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO)
    except subprocess.TimeoutExpired:
        pytest.fail("cache stats --verify / gc blocked on a hostile entry")
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert "rcs 1 0 0" in proc.stdout
    assert "unusable    4" in proc.stdout and "removed 4 unusable" in proc.stdout
    assert sorted(n for n in os.listdir(folder) if n.endswith(".msgpack")) == sorted(k + ".msgpack" for k, _ in reference_variants()[:2])


def test_a_cache_folder_that_cannot_be_created_disables_the_cache_with_one_warning(tmp_path, caplog):
    # As a read-only game install: the folder cannot be made (here: a file stands in its path,
    # which holds even for root, who can write read-only folders).
    from engine_plugin.assets import AssetLibrary

    (tmp_path / "install").write_text("not a folder")
    with caplog.at_level(logging.WARNING):
        lib = AssetLibrary(root=os.path.join(REPO, "assets"), cache=str(tmp_path / "install" / "cache"))
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "variant cache disabled" in warnings[0].getMessage()
    assert lib.cache is None
    src = lib.load("samples/reference.computeShader").source
    assert src.yaml_text  # the library works without its cache


@pytest.mark.skipif(shutil.which("setpriv") is None or os.geteuid() != 0, reason="needs root and setpriv to act as a user without DAC override")
def test_a_cache_folder_the_user_cannot_open_is_no_cache_for_the_game_and_a_clear_error_for_bake(tmp_path):
    # Review helper 107: a cache folder of mode 000 (another user's private folder) made
    # AssetLibrary.variant() raise a raw PermissionError from every read, and bake printed
    # "engine_plugin bug". setpriv drops root's permission override: an ordinary user.
    folder = tmp_path / "cache"
    folder.mkdir()
    os.chmod(folder, 0)
    user = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
    game = textwrap.dedent(
        f"""
        import numpy as np
        from engine_plugin import abi
        from engine_plugin.assets import AssetLibrary
        lib = AssetLibrary({os.path.join(REPO, "assets", "samples")!r}, {str(folder)!r})
        assert lib.cache is None
        v = lib.load("reference.computeShader").variant(specialize={{"T": "f32", "FOLD": "add"}})
        print("ran", v.lowered.source.count("fn main"))
        """
    )
    try:
        proc = subprocess.run([*user, sys.executable, "-c", game], capture_output=True, text=True, timeout=120, cwd=REPO)
        assert proc.returncode == 0 and "ran 1" in proc.stdout, proc.stderr[-1500:]
        assert "cannot read the variant cache folder" in proc.stderr
        bake = subprocess.run([*user, sys.executable, "-m", "engine_plugin", "bake", "assets/samples", "--cache", str(folder), "-j", "1", "-q"], capture_output=True, text=True, timeout=120, cwd=REPO)
        assert bake.returncode == 2 and "bug" not in bake.stderr + bake.stdout and "cannot read the variant cache folder" in bake.stderr, (bake.returncode, bake.stdout, bake.stderr)
    finally:
        os.chmod(folder, 0o755)


def test_a_read_only_cache_serves_entries_and_warns_once_instead_of_failing_each_write(tmp_path, monkeypatch, caplog):
    folder = str(tmp_path / "cache")
    key, lowered = reference_variants()[0]
    VariantCache(folder).put(key, lowered)
    cache = VariantCache(folder)
    real_open = os.open

    def read_only_open(path, flags, *args):
        if flags & (os.O_WRONLY | os.O_RDWR):
            raise OSError(30, "Read-only file system", path)  # EROFS, as on a read-only mount
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", read_only_open)
    with caplog.at_level(logging.WARNING, logger="engine_plugin.cache"):
        results = [cache.put(k, lw) for k, lw in reference_variants()[1:6]]
        assert cache.get(key) == lowered
    assert results == [False] * 5 and cache.read_only
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1


def test_a_fifo_in_place_of_the_usage_log_is_ignored_not_a_hang(tmp_path, deadline, caplog):
    from engine_plugin.cache import read_usage

    path = str(tmp_path / "usage.msgpack")
    os.mkfifo(path)
    with caplog.at_level(logging.WARNING, logger="engine_plugin.cache"):
        assert read_usage(path) == {}
    assert any("FIFO" in r.getMessage() for r in caplog.records)


def _usage_doc(assets_header: bytes, body: bytes) -> bytes:
    head = b"\x83" + msgpack.packb("magic") + msgpack.packb("engine_plugin.usage") + msgpack.packb("format") + msgpack.packb(1)
    return head + msgpack.packb("assets") + assets_header + body


def _peak_reading_nothing(path, caplog) -> int:
    """The peak traced memory of reading the usage log at ``path``, which must answer nothing."""
    from engine_plugin.cache import read_usage

    tracemalloc.start()
    try:
        with caplog.at_level(logging.WARNING, logger="engine_plugin.cache"):
            assert read_usage(str(path)) == {}
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("shape", ["rows", "assets"])
def test_a_planted_usage_log_of_millions_of_rows_is_ignored_from_its_headers(tmp_path, deadline, caplog, shape):
    # 22 million empty rows (63 MiB, under the entry cap) took 70 s and 4.6 GB to read, in a
    # game's close() too (its flush merges the log on disk): review helper 128.
    from engine_plugin.cache import UsageLog
    from engine_plugin.lowering import VariantSpec

    n = 63 * 1024 * 1024 // 3
    if shape == "rows":  # one asset, n rows [[], []]
        doc = _usage_doc(b"\x81" + msgpack.packb("k/a.computeShader") + b"\xdd" + n.to_bytes(4, "big"), b"\x92\x90\x90" * n)
    else:  # n assets of no rows
        doc = _usage_doc(b"\xdf" + n.to_bytes(4, "big"), b"".join(msgpack.packb(f"k{i}") + b"\x90" for i in range(200_000)))
    path = tmp_path / "usage.msgpack"
    path.write_bytes(doc)
    peak = _peak_reading_nothing(path, caplog)
    assert peak < 3 * len(doc), peak  # the file's bytes, not millions of rows (4.6 GB before)
    assert any("too large" in r.getMessage() and "100000" in r.getMessage() for r in caplog.records)
    usage = UsageLog(str(path))  # a game's close(): a log past the cap is kept as it is, not merged into
    usage.record("k/a.computeShader", VariantSpec((("T", "f32"),), ()))
    assert not usage.flush()
    assert path.read_bytes() == doc


def test_a_usage_log_row_of_nested_empty_lists_is_refused_before_it_is_decoded(tmp_path, deadline, caplog):
    # Each array within the per-array cap, nested: 4096 x 4096 empty lists in one row (16 MiB)
    # took 6 s and 1.2 GB (review helper 132). Only text is decoded whole now.
    from engine_plugin.cache import UsageLog, read_usage
    from engine_plugin.lowering import VariantSpec

    inner = b"\xdc" + (4096).to_bytes(2, "big") + b"\x90" * 4096
    row = b"\x92" + b"\xdc" + (4096).to_bytes(2, "big") + inner * 4096 + b"\x90"
    doc = _usage_doc(b"\x81" + msgpack.packb("k/a.computeShader") + b"\x91", row)
    path = tmp_path / "usage.msgpack"
    path.write_bytes(doc)
    peak = _peak_reading_nothing(path, caplog)
    assert peak < 3 * len(doc), peak  # the bytes and the reader's copy of them (1.2 GB before)
    assert any("malformed" in r.getMessage() for r in caplog.records)
    usage = UsageLog(str(path))  # malformed (not past the cap): the game's records replace it
    spec = VariantSpec((("T", "f32"),), ())
    usage.record("k/a.computeShader", spec)
    assert usage.flush()
    assert read_usage(str(path)) == {"k/a.computeShader": [spec]}


def test_a_usage_log_with_its_assets_twice_is_malformed(tmp_path):
    from engine_plugin.cache import read_usage

    rows = b"\x81" + msgpack.packb("k/a.computeShader") + b"\x91" + msgpack.packb([[["T", "f32"]], []])
    doc = b"\x84" + msgpack.packb("magic") + msgpack.packb("engine_plugin.usage") + msgpack.packb("format") + msgpack.packb(1)
    doc += (msgpack.packb("assets") + rows) * 2
    path = tmp_path / "usage.msgpack"
    path.write_bytes(doc)
    assert read_usage(str(path)) == {}


def test_a_usage_log_at_the_variant_limit_is_read_whole(tmp_path):
    from engine_plugin.cache import UsageLog, read_usage
    from engine_plugin.cache.usage import MAX_USAGE_VARIANTS
    from engine_plugin.lowering import VariantSpec

    rows = [[[["T", str(i)]], []] for i in range(MAX_USAGE_VARIANTS)]
    path = tmp_path / "usage.msgpack"
    path.write_bytes(msgpack.packb({"magic": "engine_plugin.usage", "format": 1, "assets": {"k/a.computeShader": rows[:60_000], "k/b.computeShader": rows[60_000:]}}))
    found = read_usage(str(path))
    assert [len(found[a]) for a in sorted(found)] == [60_000, MAX_USAGE_VARIANTS - 60_000]
    # A game adding one more is not written (one more emptied the whole log: review helper 132).
    usage = UsageLog(str(path))
    usage.record("k/c.computeShader", VariantSpec((("T", "one more"),), ()))
    assert not usage.flush()
    assert sum(len(v) for v in read_usage(str(path)).values()) == MAX_USAGE_VARIANTS
    rows.append([[["T", "one more"]], []])
    path.write_bytes(msgpack.packb({"magic": "engine_plugin.usage", "format": 1, "assets": {"k/a.computeShader": rows}}))
    assert read_usage(str(path)) == {}


def test_a_usage_log_round_trips_whatever_a_flush_writes(tmp_path, monkeypatch, caplog):
    # A 4,550-character source value (or 2,000 euro signs, 6,000 bytes) was written and then
    # read as malformed, and the next game's flush replaced the log (review helper 133). What
    # the reader would refuse is never written: a row past its limits is left out (said), a log
    # past the name cap is not grown.
    from engine_plugin.cache import UsageLog, read_usage
    from engine_plugin.cache import usage as usage_module
    from engine_plugin.lowering import VariantSpec

    path = str(tmp_path / "usage.msgpack")
    first = UsageLog(path)
    first.record("a.computeShader", VariantSpec((("BODY", "x"),)))
    first.record("b.computeShader", VariantSpec((("BODY", "v = v + 1.0; " * 350),)))
    first.record("c.computeShader", VariantSpec((("BODY", "\u20ac" * 2000),)))
    assert first.flush()
    second = UsageLog(path)
    second.record("d.computeShader", VariantSpec((("BODY", "y"),)))
    second.record("e.computeShader", VariantSpec(tuple((f"N{k:03d}", "1") for k in range(300))))  # 300 names in a row: left out
    with caplog.at_level(logging.WARNING, logger="engine_plugin.cache"):
        assert second.flush()
    assert sorted(read_usage(path)) == ["a.computeShader", "b.computeShader", "c.computeShader", "d.computeShader"]
    assert any("1 variant(s) not recorded" in r.getMessage() for r in caplog.records)
    monkeypatch.setattr(usage_module, "_MAX_STRINGS", 20)  # the names cap, lowered: a flush past it writes nothing
    third = UsageLog(path)
    for k in range(10):
        third.record("f.computeShader", VariantSpec((("BODY", str(k)),)))
    before = open(path, "rb").read()
    assert not third.flush()
    assert open(path, "rb").read() == before


def test_an_entry_nested_past_the_depth_limit_is_refused_with_a_reason():
    # Review helper 149: `cache stats --verify` listed it as "entry is not msgpack ()".
    from engine_plugin.cache import decode_entry
    from engine_plugin.cache.entry import BadEntry

    deep = b"\x91" * 100_000 + b"\xc0"  # an array holding an array ... 100,000 deep
    with pytest.raises(BadEntry) as info:
        decode_entry("0" * 64, deep)
    assert "()" not in str(info.value) and "not msgpack (" in str(info.value)


def _fifty_rows_log(path) -> None:
    from engine_plugin.cache import UsageLog
    from engine_plugin.lowering import VariantSpec

    usage = UsageLog(str(path))
    for i in range(50):
        usage.record(f"k/a{i}.computeShader", VariantSpec((("T", "f32"),), ()))
    assert usage.flush()


def test_a_usage_log_that_cannot_be_opened_now_is_kept_and_the_records_wait(tmp_path, monkeypatch):
    # One failed open (EMFILE) during a flush read as "unusable": the file was replaced with
    # this game's one record and 50 others were lost (review helper 167).
    import errno

    from engine_plugin.cache import UsageLog, read_usage
    from engine_plugin.cache import store
    from engine_plugin.lowering import VariantSpec

    path = tmp_path / "usage.msgpack"
    _fifty_rows_log(path)
    before = path.read_bytes()
    usage = UsageLog(str(path))
    usage.record("k/new.computeShader", VariantSpec((("T", "i32"),), ()))
    real = os.open

    def too_many(p, *a, **k):
        if str(p) == str(path):
            raise OSError(errno.EMFILE, "Too many open files")
        return real(p, *a, **k)

    monkeypatch.setattr(store.os, "open", too_many)
    assert not usage.flush() and usage.dirty
    monkeypatch.setattr(store.os, "open", real)
    assert path.read_bytes() == before
    assert usage.flush()
    assert len(read_usage(str(path))) == 51


def test_a_usage_log_lock_held_elsewhere_delays_a_flush_without_blocking_it(tmp_path, monkeypatch):
    # A blocking flock: another process holding the lock (stopped in a debugger) blocked the
    # game's reload worker and close() for good (review helper 167).
    import fcntl
    import time

    from engine_plugin.cache import UsageLog, read_usage, usage as usage_module
    from engine_plugin.lowering import VariantSpec

    monkeypatch.setattr(usage_module, "LOCK_WAIT_S", 0.2)
    path = tmp_path / "usage.msgpack"
    _fifty_rows_log(path)
    holder = os.open(str(path) + ".lock", os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another open file description: another holder
    try:
        log = UsageLog(str(path))
        log.record("k/new.computeShader", VariantSpec((("T", "i32"),), ()))
        t0 = time.monotonic()
        assert not log.flush() and log.dirty
        assert time.monotonic() - t0 < 5
    finally:
        os.close(holder)
    assert log.flush() and len(read_usage(str(path))) == 51


def test_a_usage_log_never_grows_past_what_a_reader_takes(tmp_path, monkeypatch):
    # Written past the reader's byte cap, it read as empty and the next flush replaced it with
    # one game's records (review helper 167).
    from engine_plugin.cache import UsageLog, read_usage, usage as usage_module
    from engine_plugin.lowering import VariantSpec

    path = tmp_path / "usage.msgpack"
    _fifty_rows_log(path)
    monkeypatch.setattr(usage_module, "MAX_ENTRY_BYTES", path.stat().st_size + 100)
    log = UsageLog(str(path))
    for i in range(20):
        log.record(f"k/more{i}.computeShader", VariantSpec((("T", "i32"),), ()))
    before = path.read_bytes()
    assert not log.flush()
    assert path.read_bytes() == before and len(read_usage(str(path))) == 50


@pytest.mark.parametrize("field", ["key", "lowering", "format", "layout"])
def test_a_signed_entry_relabelled_to_another_key_or_version_is_not_signed(monkeypatch, field):
    # Review helper 197: the MAC covered the payload and the asset's spec, not the key nor the
    # versions: an older build's entry (signed by this user) relabelled to this build's key and
    # lowering version (plain msgpack, no key needed) was served, and its old kernel ran.
    import engine_plugin.cache.entry as entry_mod
    from engine_plugin.cache.entry import encode_entry, open_entry

    (key, lowered), (other_key, _) = reference_variants()[:2]
    old = {"key": other_key, "lowering": "0-older-build", "format": CACHE_FORMAT_VERSION - 1, "layout": "0123456789abcdef"}[field]
    if field == "key":
        data = encode_entry(other_key, lowered)
    elif field == "format":
        data = encode_entry(key, lowered, format_version=old)
    else:
        monkeypatch.setattr(entry_mod, {"lowering": "LOWERING_VERSION", "layout": "LAYOUT"}[field], old)
        data = encode_entry(key, lowered)
        monkeypatch.undo()
    env = msgpack.unpackb(data, raw=False)
    assert env[field] == old
    env[field] = {"key": key, "lowering": LOWERING_VERSION, "format": CACHE_FORMAT_VERSION, "layout": LAYOUT}[field]
    header = (key, CACHE_FORMAT_VERSION, LOWERING_VERSION, LAYOUT)
    for digest in (_digest(env["payload"], env["asset"], env["spec"], env["columns"]), _digest(env["payload"], env["asset"], env["spec"], env["columns"], header=header)):
        env["sha256"] = digest  # the checksum is public: the relabeller recomputes it either way
        with pytest.raises(BadEntry):
            open_entry(key, msgpack.packb(env, use_bin_type=True))
    assert open_entry(key, encode_entry(key, lowered)).lowered == lowered  # the real one opens
