"""``engine-plugin cache stats|gc|clear``."""

from __future__ import annotations

import errno
import json
import os
import shutil

import pytest
from cache_support import REPO, reference_variants

from engine_plugin.cache import VariantCache, store
from engine_plugin.cli import main


def _fill(folder: str, n: int = 6) -> VariantCache:
    cache = VariantCache(folder)
    for key, lowered in reference_variants()[:n]:
        cache.put(key, lowered)
    return cache


def test_cache_stats_reports_entries_and_size(tmp_path, capsys):
    folder = str(tmp_path / "cache")
    _fill(folder)
    assert main(["cache", "stats", "--cache", folder]) == 0
    out = capsys.readouterr().out
    assert "entries     6" in out and "KiB of 512.0 MiB cap" in out


def test_cache_stats_counts_only_regular_files_as_entries(tmp_path, capsys):
    # A FIFO, a link and a folder under entry names were counted as entries (review helper 128).
    folder = str(tmp_path / "cache")
    _fill(folder, 2)
    name = "a" * 64 + ".msgpack"
    os.mkfifo(os.path.join(folder, name))
    os.symlink("/dev/zero", os.path.join(folder, name.replace("a", "b")))
    os.mkdir(os.path.join(folder, name.replace("a", "c")))
    assert main(["cache", "stats", "--cache", folder]) == 0
    assert "entries     2" in capsys.readouterr().out


def test_cache_stats_verify_lists_unusable_entries(tmp_path, capsys):
    folder = str(tmp_path / "cache")
    cache = _fill(folder, 3)
    key = reference_variants()[1][0]
    with open(cache.path(key), "r+b") as f:
        f.truncate(100)
    assert main(["cache", "stats", "--cache", folder, "--verify"]) == 1
    out = capsys.readouterr().out
    assert "unusable    1" in out and key[:16] in out and "truncated" in out


def test_cache_gc_drops_unusable_entries_and_evicts_to_the_cap(tmp_path, capsys):
    folder = str(tmp_path / "cache")
    cache = _fill(folder, 10)
    with open(cache.path(reference_variants()[0][0]), "wb") as f:
        f.write(b"junk")
    size = cache.stats(scan=True).bytes
    assert main(["cache", "gc", "--cache", folder, "--max-bytes", str(size // 2)]) == 0
    out = capsys.readouterr().out
    assert "removed 1 unusable" in out
    after = VariantCache(folder)
    assert after.stats(scan=True).bytes <= size // 2 and after.verify() == {}


def _unreadable_now(monkeypatch, path: str, code: int = errno.EACCES) -> None:
    """Opening the entry at ``path`` fails with ``code`` (as a descriptor shortage or a
    permission would: as root, a chmod would not), every other file opens."""
    real = store.os.open

    def failing(name, *args, **kwargs):
        if os.fspath(name) == path:
            raise OSError(code, os.strerror(code))
        return real(name, *args, **kwargs)

    monkeypatch.setattr(store.os, "open", failing)


@pytest.mark.parametrize("code", [errno.EACCES, errno.EMFILE, errno.EIO])
def test_cache_gc_keeps_an_entry_that_cannot_be_read_now(tmp_path, capsys, monkeypatch, code):
    # A transient I/O error while verifying says nothing of what the entry holds, yet gc
    # removed it as unusable (review helper 228: a good baked entry deleted).
    folder = str(tmp_path / "cache")
    cache = _fill(folder, 3)
    path = cache.path(reference_variants()[1][0])
    with open(path, "rb") as f:
        before = f.read()
    _unreadable_now(monkeypatch, path, code)
    assert main(["cache", "gc", "--cache", folder]) == 0
    out, err = capsys.readouterr()
    assert "removed 0 unusable" in out and "3 entries" in out
    assert f"{path}: cannot be read now ({os.strerror(code)}); kept" in err
    monkeypatch.undo()
    with open(path, "rb") as f:
        assert f.read() == before
    assert VariantCache(folder).verify() == {}


def test_cache_stats_verify_tells_an_entry_that_cannot_be_read_now_from_an_unusable_one(tmp_path, capsys, monkeypatch):
    # It was counted unusable ("corrupt"), with exit 1 (review helper 228); now it is listed
    # apart, and verification that could not look at every entry exits 2 (an environment error).
    folder = str(tmp_path / "cache")
    cache = _fill(folder, 3)
    path = cache.path(reference_variants()[1][0])
    _unreadable_now(monkeypatch, path)
    assert main(["cache", "stats", "--cache", folder, "--verify"]) == 2
    out, err = capsys.readouterr()
    assert "unusable    0" in out and "unreadable now  1" in out and "Permission denied" in out
    assert f"{path}: cannot be read now (Permission denied); not verified" in err and "unusable" not in err
    assert main(["cache", "stats", "--cache", folder, "--verify", "--json"]) == 2
    data = json.loads(capsys.readouterr().out)
    assert data["unusable"] == [] and data["unreadable_now"] == [{"key": reference_variants()[1][0], "reason": "Permission denied"}]
    # An unusable entry as well: that is what decides the exit status (1).
    with open(cache.path(reference_variants()[0][0]), "wb") as f:
        f.write(b"junk")
    assert main(["cache", "stats", "--cache", folder, "--verify"]) == 1
    out = capsys.readouterr().out
    assert "unusable    1" in out and "unreadable now  1" in out
    assert os.path.isfile(path)


def test_verify_leaves_out_an_entry_that_cannot_be_read_now_and_check_names_it(tmp_path, monkeypatch):
    folder = str(tmp_path / "cache")
    cache = _fill(folder, 2)
    key = reference_variants()[0][0]
    _unreadable_now(monkeypatch, cache.path(key), errno.EMFILE)
    assert cache.verify() == {}
    found = cache.check()
    assert found.unusable == {} and found.unreadable == {key: os.strerror(errno.EMFILE)}


def test_a_usage_log_that_cannot_be_read_now_is_said_in_the_os_words_once(tmp_path, capsys, monkeypatch):
    # It read "cannot be read (unreadable (Permission denied))" (review helper 228).
    folder = str(tmp_path / "cache")
    _fill(folder, 1)
    usage = os.path.join(folder, "usage.msgpack")
    with open(usage, "wb") as f:
        f.write(b"\x90")
    _unreadable_now(monkeypatch, usage)
    assert main(["cache", "stats", "--cache", folder]) == 0
    err = capsys.readouterr().err
    assert f"usage log {usage} cannot be read (Permission denied); ignored, and kept as it is" in err and "unreadable (" not in err


def test_looking_at_a_read_only_cache_says_nothing_of_serving_it(tmp_path, capsys, monkeypatch):
    # cache stats warned "is read-only: entries are served but not written", a game's words,
    # and gc and clear said it before their own error (review helper 228).
    folder = str(tmp_path / "cache")
    _fill(folder, 2)
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False if mode & os.W_OK and os.fspath(path) == folder else real(path, mode, **kw))
    assert main(["cache", "stats", "--cache", folder]) == 0
    out, err = capsys.readouterr()
    assert "entries     2" in out and err == ""
    for action in ("gc", "clear"):
        assert main(["cache", action, "--cache", folder]) == 2
        assert capsys.readouterr().err == f"engine-plugin cache: {folder} is read-only to you: nothing in it can be removed\n"
    assert len(list(VariantCache(folder).entries())) == 2


def test_cache_clear_removes_every_entry(tmp_path, capsys):
    folder = str(tmp_path / "cache")
    _fill(folder, 4)
    assert main(["cache", "clear", "--cache", folder]) == 0
    assert "removed 4 entries" in capsys.readouterr().out
    assert [n for n in os.listdir(folder) if n.endswith(".msgpack")] == []


def test_cache_clear_says_it_kept_a_fresh_temporary_file(tmp_path, capsys):
    # A live writer's temp file (or a killed writer's, for 10 minutes) was kept silently
    # (review helper 120).
    folder = str(tmp_path / "cache")
    _fill(folder, 2)
    with open(os.path.join(folder, ".tmp-0123456789abcdef-12345-deadbeef"), "wb") as f:
        f.write(b"x" * 100)
    assert main(["cache", "clear", "--cache", folder]) == 0
    out = capsys.readouterr().out
    assert "removed 2 entries" in out and "kept 1 temporary file(s)" in out


def test_cache_sizes_take_units(tmp_path, capsys):
    folder = str(tmp_path / "cache")
    _fill(folder, 1)
    assert main(["cache", "stats", "--cache", folder, "--max-bytes", "64K"]) == 0
    assert "of 64.0 KiB cap" in capsys.readouterr().out


def test_stats_gc_and_clear_agree_on_a_missing_cache_and_on_a_file(tmp_path, capsys):
    # Review helper 107: on a missing folder stats and clear exited 0, gc 2; on a file stats
    # said "is not a folder" (2), gc "no variant cache" (2), clear "nothing to clear" (0).
    missing, afile = str(tmp_path / "nope"), str(tmp_path / "f")
    with open(afile, "w") as f:
        f.write("x")
    for action in ("stats", "gc", "clear"):
        assert main(["cache", action, "--cache", missing]) == 0, action
        assert "no variant cache at" in capsys.readouterr().out
        assert main(["cache", action, "--cache", afile]) == 2, action
        assert "is not a folder" in capsys.readouterr().err
    assert not os.path.exists(missing)  # looking never creates one


@pytest.mark.skipif(shutil.which("setpriv") is None or os.geteuid() != 0, reason="needs root and setpriv to act as a user without DAC override")
def test_a_cache_under_a_folder_the_user_cannot_enter_is_an_error_not_no_cache(tmp_path):
    # Review helper 110: os.path.exists answered False on "permission denied": stats, gc and
    # clear said "no variant cache" and exited 0 (clear reporting success, removing nothing).
    import subprocess
    import sys

    parent = tmp_path / "p"
    (parent / "cache").mkdir(parents=True)
    os.chmod(parent, 0)
    try:
        for action in ("stats", "gc", "clear"):
            cmd = [
                "setpriv",
                "--bounding-set",
                "-dac_override,-dac_read_search",
                sys.executable,
                "-m",
                "engine_plugin",
                "cache",
                action,
                "--cache",
                str(parent / "cache"),
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
            assert proc.returncode == 2 and "cannot look at" in proc.stderr and "Permission denied" in proc.stderr, (action, proc.stdout, proc.stderr)
    finally:
        os.chmod(parent, 0o755)


def test_a_dangling_link_is_no_place_for_a_cache(tmp_path, capsys):
    # Review helper 112: stats said "no variant cache ... (bake one with: ...)" and exited 0,
    # but a bake there cannot make one.
    os.symlink(tmp_path / "nowhere", tmp_path / "cache")
    for action in ("stats", "gc", "clear"):
        assert main(["cache", action, "--cache", str(tmp_path / "cache")]) == 2, action
        assert "is a link to nothing" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("setpriv") is None or os.geteuid() != 0, reason="needs root and setpriv to act as a user without DAC override")
def test_gc_and_clear_of_a_cache_the_user_cannot_write_are_errors_not_success(tmp_path):
    # Review helper 112: clear printed "removed 0 entries" and gc "removed 3 unusable entries",
    # both exit 0, with every file still there.
    import subprocess
    import sys

    folder = tmp_path / "ro"
    folder.mkdir()
    for k in "abc":
        (folder / f"{k * 64}.msgpack").write_bytes(os.urandom(2000))
    os.chmod(folder, 0o555)
    try:
        for action in (["clear"], ["gc", "--max-bytes", "1K"]):
            cmd = [
                "setpriv",
                "--bounding-set",
                "-dac_override,-dac_read_search",
                sys.executable,
                "-m",
                "engine_plugin",
                "cache",
                *action,
                "--cache",
                str(folder),
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)
            assert proc.returncode == 2 and "read-only" in proc.stderr, (action, proc.stdout, proc.stderr)
            assert len(os.listdir(folder)) == 3
    finally:
        os.chmod(folder, 0o755)


def test_clear_counts_every_entry_it_removed(tmp_path, capsys):
    # Review helper 113: an empty file named like an entry was removed but not counted.
    folder = tmp_path / "cache"
    cache = VariantCache(str(folder))
    key, lowered = reference_variants()[0]
    cache.put(key, lowered)
    (folder / f"{'e' * 64}.msgpack").write_bytes(b"")
    assert main(["cache", "clear", "--cache", str(folder)]) == 0
    assert "removed 2 entries" in capsys.readouterr().out and not list(cache.entries())
