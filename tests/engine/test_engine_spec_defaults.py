"""A product registered without ``spec=`` runs its asset's default specialisation; a save that
drops that value and picks another default is taken, as for a plain ``program.variant()`` user,
and the product computes with the new default (review helper 236: the engine asked for its
variant with every value given by name, so the save was refused and the old kernel kept). On
lavapipe, with the engine's combine asset; results read back from the GPU."""

from __future__ import annotations

import shutil
import time

import numpy as np
from engine_support import run_until_idle

from engine_plugin.assets import AssetLibrary
from engine_plugin.engine import Engine, fallbacks, kernel_folder
from engine_plugin.gpu import ReadbackPolicy
from engine_plugin.world import World

ASSET = "k/combine.computeShader"
OLD, NEW = "options: [add, min, max], default: add", "options: [min, max], default: max"


def _engine(tmp_path, spec):
    shutil.copytree(kernel_folder("combine"), tmp_path / "assets" / ASSET)
    assert OLD in (tmp_path / "assets" / ASSET / "bindings.yaml").read_text()
    lib = AssetLibrary(str(tmp_path / "assets"), cache=str(tmp_path / "cache"))
    world = World((4, 4), {"a": np.float32, "b": np.float32}, max_chunks=4)
    world.add(0, {"a": np.full((4, 4), 2.0, np.float32), "b": np.full((4, 4), 5.0, np.float32)})
    engine = Engine(world, lib)
    got: list = []
    handle = engine.register_product(
        lib.load(ASSET), key="c", spec=spec, fields=["a", "b"], policy=ReadbackPolicy.SELECTED_TILES, tiles=[(0, (0, 0))],
        apply=lambda r: got.append((r.source, float(r.values[0]))), cpu_fallback=fallbacks.combine,
    )
    run_until_idle(engine)
    return lib, engine, handle, got


def _save(tmp_path, lib, engine):
    path = tmp_path / "assets" / ASSET / "bindings.yaml"
    path.write_text(path.read_text().replace(OLD, NEW))
    ref = lib.load(ASSET)
    before = ref.generation
    lib.request_reload(ASSET)
    deadline = time.monotonic() + 30
    while ref.generation == before and ref.error is None and time.monotonic() < deadline:
        engine.frame()
        time.sleep(0.01)
    return ref


def test_a_defaulted_value_follows_the_new_default(tmp_path):
    lib, engine, handle, got = _engine(tmp_path, None)
    try:
        assert got[-1] == ("gpu", 7.0)  # add
        ref = _save(tmp_path, lib, engine)
        run_until_idle(engine)
        assert ref.error is None and engine.product_error(handle) is None
        assert got[-1] == ("gpu", 5.0)  # max, the new default, computed on the GPU
    finally:
        engine.close()
        lib.close()


def test_a_value_given_by_name_is_still_held(tmp_path):
    lib, engine, handle, got = _engine(tmp_path, {"OP": "add"})
    try:
        assert got[-1] == ("gpu", 7.0)
        ref = _save(tmp_path, lib, engine)
        run_until_idle(engine)
        assert ref.error is not None and "OP=add" in str(ref.error)  # the game asked for add by name: refused, said
        engine.invalidate(handle)
        run_until_idle(engine)
        assert got[-1] == ("gpu", 7.0)  # the last good kernel runs on
    finally:
        engine.close()
        lib.close()
