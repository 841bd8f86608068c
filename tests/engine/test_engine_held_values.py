"""A product keeps its own copy of the arrays in ``params=`` and ``inputs=`` (review helper
235): an array the caller changes in place afterwards reached the chunks computed next and not
the others, a silent mix of old and new values under one generation. Results read back from
the GPU (lavapipe) and compared with numpy."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.engine import Engine
from engine_plugin.gpu import NoGpuBackend, ReadbackPolicy
from engine_plugin.world import World

from engine_support import run_until_idle

PARAM_YAML = """bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: h, kind: buffer, access: read, element: f32 }
  - { name: o, kind: buffer, access: read_write, element: f32, count: "n" }
params:
  - { name: tile_count, type: u32 }
  - { name: w, type: vec3<f32> }
"""
PARAM_WGSL = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    o_set(i, h_get(chunks_get(i) * params.tile_count) * params.w.y + params.w.z);
}
"""
LUT_YAML = """bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: h, kind: buffer, access: read, element: f32 }
  - { name: lut, kind: buffer, access: read, element: f32 }
  - { name: o, kind: buffer, access: read_write, element: f32, count: "n" }
params:
  - { name: tile_count, type: u32 }
"""
LUT_WGSL = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    o_set(i, h_get(chunks_get(i) * params.tile_count) * lut_get(0u));
}
"""


def _world() -> World:
    world = World((2, 2), {"h": np.float32}, max_chunks=4)
    for k in range(3):
        world.add(k, {"h": np.full((2, 2), k + 1, np.float32)})
    return world


def _program(name: str, yaml: str, wgsl: str):
    return abi.program(key=f"test/{name}", schema=abi.parse(yaml, f"{name}.computeShader/bindings.yaml"), wgsl=wgsl)


def _latest(got: dict):
    return lambda r: got.update({k: float(v) for k, v in zip(r.keys, r.values)})


def _first_h(world: World, k: int) -> float:
    return float(world.read(k, "h").reshape(-1)[0])


def test_params_array_changed_in_place_reaches_no_chunk() -> None:
    world, got = _world(), {}
    w = np.array([0.0, 1.0, 0.0], np.float32)
    with Engine(world) as engine:
        handle = engine.register_product(_program("pv", PARAM_YAML, PARAM_WGSL), fields={"h": "h"}, policy=ReadbackPolicy.SUMMARY, apply=_latest(got), params={"w": w})
        run_until_idle(engine)
        assert got == {0: 1.0, 1: 2.0, 2: 3.0}
        w[1], w[2] = 10.0, 0.5  # without set_params: every chunk keeps the registered values
        world.write(1, "h", np.full((2, 2), 5, np.float32))
        run_until_idle(engine)
        assert got == {0: 1.0, 1: 5.0, 2: 3.0}
        engine.set_params(handle, {"w": w})  # the new values, for every chunk, in a new generation
        w[1] = 100.0  # changed after set_params: again reaches nothing
        world.write(2, "h", np.full((2, 2), 7, np.float32))
        run_until_idle(engine)
        assert got == {k: _first_h(world, k) * 10 + 0.5 for k in range(3)}


def test_an_inputs_array_is_used_as_given_and_invalidate_applies_its_change() -> None:
    # Review helper 243: copied at registration, an inputs= table could not be changed at all
    # (invalidate recomputed every chunk from the copy). inputs= are used as given, as buffers
    # are: a change in place is said with invalidate(), and every chunk then has it.
    world, got = _world(), {}
    lut = np.array([2.0], np.float32)
    with Engine(world) as engine:
        handle = engine.register_product(_program("lut", LUT_YAML, LUT_WGSL), fields={"h": "h"}, inputs={"lut": lut}, policy=ReadbackPolicy.SUMMARY, apply=_latest(got))
        run_until_idle(engine)
        assert got == {0: 2.0, 1: 4.0, 2: 6.0}
        lut[0] = 100.0
        engine.invalidate(handle)
        run_until_idle(engine)
        assert got == {0: 100.0, 1: 200.0, 2: 300.0}


def test_cpu_fallback_sees_the_held_params() -> None:
    world, got, seen = _world(), {}, []
    w = np.array([0.0, 3.0, 0.0], np.float32)

    def fallback(world: World, work) -> np.ndarray:
        seen.append(np.array(work.params["w"]))
        return np.array([world.read(k, "h").reshape(-1)[0] * work.params["w"][1] for k in work.keys], np.float32)

    with Engine(world, backend=NoGpuBackend()) as engine:
        handle = engine.register_product(None, fields=["h"], cpu_fallback=fallback, apply=_latest(got), params={"w": w})
        run_until_idle(engine)
        w[1] = 50.0
        world.write(0, "h", np.full((2, 2), 4, np.float32))
        run_until_idle(engine)
        assert got[0] == 12.0 and all(s[1] == 3.0 for s in seen)
        assert engine.product(handle).params["w"] is not w


def test_held_values_copies_arrays_in_containers_and_keeps_the_rest() -> None:
    import array

    from engine_plugin.engine.products import held_values

    a = np.arange(3.0)
    marker = object()
    other = array.array("d", [0.0, 1.0, 2.0])
    held = held_values({"a": a, "l": [a, 1.5], "t": (a,), "d": {"x": a}, "o": marker, "s": 2.0, "aa": other, "mv": memoryview(a)})
    other[0] = 9.0
    for copy in (held["a"], held["l"][0], held["t"][0], held["d"]["x"], held["aa"], held["mv"]):
        assert copy is not a and np.array_equal(copy, a) and not copy.flags.writeable
    assert held["o"] is marker and held["s"] == 2.0
    a[0] = 9.0
    assert held["a"][0] == 0.0
    masked = held_values({"m": np.ma.masked_array([1.0, 2.0], mask=[False, True])})["m"]
    assert isinstance(masked, np.ma.MaskedArray) and masked.mask[1]  # still refused where data comes in


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
