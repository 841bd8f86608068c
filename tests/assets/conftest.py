"""Fixtures of the asset tests: a temp asset root with one small asset, a library over it."""

from __future__ import annotations

import os

import pytest
from asset_support import QUIET, make_asset


@pytest.fixture
def asset_root(tmp_path) -> str:
    root = str(tmp_path / "assets")
    os.makedirs(root)
    make_asset(root)
    return root


@pytest.fixture
def make_library(tmp_path, gpu):
    """``make_library(root, **kwargs)``: an AssetLibrary on the real device, closed after the test."""
    from engine_plugin.assets import AssetLibrary

    made = []

    def make(root: str, **kwargs):
        kwargs.setdefault("cache", str(tmp_path / "cache"))
        kwargs.setdefault("quiet", QUIET)
        kwargs.setdefault("device", gpu)
        lib = AssetLibrary(root, **kwargs)
        made.append(lib)
        return lib

    yield make
    for lib in made:
        lib.close()


@pytest.fixture
def watched(asset_root, make_library):
    """(library, reference, asset folder) with the observer running and delivering events."""
    from asset_support import wait_watching

    lib = make_library(asset_root)
    ref = lib.load("k.computeShader")
    ref.program().variant({"T": "f32"})  # one variant in use
    lib.watch()
    folder = os.path.join(asset_root, "k.computeShader")
    wait_watching(lib, folder)
    return lib, ref, folder
