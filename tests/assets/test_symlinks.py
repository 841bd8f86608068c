"""Asset files that are symlinks leading outside the asset root are refused with a clear
``AssetError`` before anything is read, so nothing of the target appears in errors or logs;
links inside the root still work; files that are not regular files are refused, not read."""

from __future__ import annotations

import logging
import os

import pytest
from asset_support import SCHEMA, kernel, make_asset, write

from engine_plugin.assets import AssetLibrary, read_asset_folder
from engine_plugin.bake import bake
from engine_plugin.errors import AssetError

SECRET = "TOP-SECRET-9f8e7d"


@pytest.fixture
def outside(tmp_path) -> str:
    """A folder beside the asset root holding files that must never be read through a link."""
    folder = str(tmp_path / "outside")
    os.makedirs(folder)
    write(os.path.join(folder, "passwords.txt"), f"bindings:\n  - {SECRET}: [\n")
    write(os.path.join(folder, "kernel.wgsl"), f"// {SECRET}\n" + kernel(2.0).replace("fn main", "fn oops"))
    return folder


def _link(target: str, link: str) -> None:
    os.remove(link)
    os.symlink(target, link)


@pytest.mark.parametrize("which", ["bindings.yaml", "kernel.wgsl"])
def test_an_asset_file_linking_outside_the_root_is_refused_without_echoing_it(tmp_path, outside, which, caplog):
    root = str(tmp_path / "assets")
    folder = make_asset(root)
    target = os.path.join(outside, "passwords.txt" if which == "bindings.yaml" else "kernel.wgsl")
    _link(target, os.path.join(folder, which))
    with pytest.raises(AssetError) as info:
        read_asset_folder(folder, root=root)
    err = info.value
    assert err.path == os.path.join(folder, which) and "outside the asset root" in err.message and "symlink" in err.message
    assert SECRET not in str(err) and target not in str(err)

    with caplog.at_level(logging.DEBUG):
        lib = AssetLibrary(root, cache=None)
        with pytest.raises(AssetError):
            lib.load("k.computeShader")
        ref = lib.load("k.computeShader", strict=False)
    assert ref.error is not None and "outside the asset root" in ref.diagnostics
    assert SECRET not in ref.diagnostics and all(SECRET not in r.getMessage() for r in caplog.records)


def test_an_asset_folder_linking_outside_the_root_is_refused(tmp_path, outside):
    root = str(tmp_path / "assets")
    os.makedirs(root)
    elsewhere = make_asset(outside, "k")
    os.symlink(elsewhere, os.path.join(root, "k.computeShader"))
    with pytest.raises(AssetError, match="outside the asset root"):
        AssetLibrary(root, cache=None).load("k.computeShader")


def test_links_that_stay_inside_the_root_are_followed(tmp_path):
    root = str(tmp_path / "assets")
    folder = make_asset(root)
    shared = os.path.join(root, "shared")
    os.makedirs(shared)
    write(os.path.join(shared, "common.yaml"), SCHEMA)
    _link(os.path.join("..", "shared", "common.yaml"), os.path.join(folder, "bindings.yaml"))
    src = read_asset_folder(folder, root=root)
    assert src.yaml_text == SCHEMA and src.wgsl_text == kernel(2.0)


def test_without_a_root_the_asset_folder_is_the_root(tmp_path, outside):
    folder = make_asset(str(tmp_path / "assets"))
    _link(os.path.join(outside, "kernel.wgsl"), os.path.join(folder, "kernel.wgsl"))
    with pytest.raises(AssetError, match="outside the asset root"):
        read_asset_folder(folder)


def test_bake_refuses_an_asset_linking_outside_what_it_was_asked_to_bake(tmp_path, outside):
    root = str(tmp_path / "assets")
    folder = make_asset(root)
    _link(os.path.join(outside, "passwords.txt"), os.path.join(folder, "bindings.yaml"))
    report = bake([root], str(tmp_path / "cache"), validate=False)
    assert not report.ok
    (failure,) = report.failures
    assert "outside the asset root" in failure.failure.headline and SECRET not in failure.failure.rendered


def test_a_fifo_in_place_of_an_asset_file_is_refused_not_a_hang(tmp_path, deadline):
    root = str(tmp_path / "assets")
    folder = make_asset(root)
    os.remove(os.path.join(folder, "kernel.wgsl"))
    os.mkfifo(os.path.join(folder, "kernel.wgsl"))
    with pytest.raises(AssetError, match="not a regular file"):
        read_asset_folder(folder, root=root)


def test_a_huge_asset_file_is_refused_before_it_is_read(tmp_path):
    root = str(tmp_path / "assets")
    folder = make_asset(root)
    with open(os.path.join(folder, "kernel.wgsl"), "ab") as f:
        f.truncate(1024 * 1024 * 1024)  # sparse
    with pytest.raises(AssetError, match="too large"):
        read_asset_folder(folder, root=root)


def test_a_link_removed_while_its_path_is_resolved_is_nothing_to_reload_not_an_error(tmp_path, monkeypatch):
    # Review helper 111: Python 3.11's realpath raises when a link it saw is gone before it
    # reads it (a link renamed away and deleted): the watcher logged an ERROR and dropped the
    # event's other paths. Forced here: the race itself needs luck.
    from engine_plugin.assets import AssetLibrary
    from engine_plugin.assets.folder import real_path

    real = os.path.realpath
    gone = str(tmp_path / "modules" / "link.wgsl")

    def racing(p, *args, **kwargs):
        if os.path.abspath(p) == gone:
            raise FileNotFoundError(2, "No such file or directory", p)
        return real(p, *args, **kwargs)

    monkeypatch.setattr(os.path, "realpath", racing)
    assert real_path(gone) == os.path.join(real(str(tmp_path / "modules")), "link.wgsl")
    lib = AssetLibrary(str(tmp_path), cache=None)
    assert lib._dependents(gone) == []
