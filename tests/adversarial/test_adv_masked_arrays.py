"""A numpy masked array handed in as data is refused, never uploaded with its mask dropped:
``np.asarray`` answers whatever the data holds under the mask, a wrong number nobody asked
for. Every place that takes user data: run inputs, params, textures, tables, substrate
writes, world fields."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.bench.axpy import AXPY_WGSL, AXPY_YAML
from engine_plugin.errors import DispatchError
from engine_plugin.world import World
from engine_plugin.world.errors import WorldError

pytestmark = pytest.mark.gpu


def _masked(n: int = 8) -> np.ma.MaskedArray:
    data = np.arange(n, dtype=np.float32)
    data[2] = 1e30  # what sits under the mask: never meant to be computed with
    return np.ma.masked_array(data, mask=[i == 2 for i in range(n)])


def _axpy():
    return abi.program(key="tmasked/axpy", schema=abi.parse(AXPY_YAML), wgsl=AXPY_WGSL).variant()


def test_a_masked_input_is_refused_naming_the_input():
    with pytest.raises(DispatchError, match=r"'x'.*masked array"):
        _axpy().run(8, inputs={"x": _masked()}, params={"a": 2.0})


def test_a_masked_input_is_refused_on_the_repeat_path_too():
    variant = _axpy()
    plain = np.arange(8, dtype=np.float32)
    for _ in range(3):  # a repeat of the same shape and dtype takes the remembered checks
        abi.read(variant.run(8, inputs={"x": plain}, params={"a": 2.0}).outputs["y"])
    with pytest.raises(DispatchError, match="masked array"):
        variant.run(8, inputs={"x": _masked()}, params={"a": 2.0})


def test_a_masked_param_is_refused():
    with pytest.raises(DispatchError, match="masked array"):
        _axpy().run(8, inputs={"x": np.ones(8, np.float32)}, params={"a": np.ma.masked_array([2.0], mask=[True])})
    with pytest.raises(DispatchError, match="masked array"):
        _axpy().run(8, inputs={"x": np.ones(8, np.float32)}, params={"a": np.ma.masked})


def test_a_masked_table_column_is_refused():
    with pytest.raises(DispatchError, match=r"'weight'.*masked array"):
        abi.table({"weight": _masked(3), "bias": np.arange(3, dtype=np.float32)})


def test_a_masked_texture_is_refused():
    from engine_plugin.device.context import get_context
    from engine_plugin.runtime.textures import upload_texture

    image = np.ma.masked_array(np.zeros((4, 4, 4), np.float32), mask=False)
    with pytest.raises(DispatchError, match=r"'img'.*masked array"):
        upload_texture(get_context(), image, "2d", "img")


def test_a_masked_substrate_write_is_refused():
    from engine_plugin.device.context import get_context
    from engine_plugin.substrate import Substrate
    from engine_plugin.substrate.handles import SubstrateError

    s = Substrate(get_context(), page_bytes=4096, label="masked")
    run = s.upload("f32", np.zeros(8, np.float32))
    with pytest.raises(SubstrateError, match="masked array"):
        s.write(run, _masked())
    assert not s.read(run).any()  # nothing of it was written


def test_masked_world_values_are_refused_and_the_chunk_keeps_its_content():
    world = World((2, 4), {"h": np.float32}, max_chunks=4)
    with pytest.raises(WorldError, match=r"'h'.*masked array"):
        world.add(1, {"h": _masked().reshape(2, 4)})
    assert 1 not in world
    world.add(2, {"h": np.ones((2, 4), np.float32)})
    version = world.version(2)
    with pytest.raises(WorldError, match="masked array"):
        world.write(2, "h", _masked().reshape(2, 4))
    with pytest.raises(WorldError, match="masked array"):
        world.set_tile(2, "h", (0, 0), np.ma.masked)
    assert world.version(2) == version
    np.testing.assert_array_equal(world.read(2, "h"), 1.0)


@pytest.mark.parametrize(
    "values",
    [
        lambda: list(np.ma.masked_array(np.arange(6, dtype=np.float32).reshape(2, 3), mask=[[0, 1, 0], [0, 0, 1]])),  # masked rows
        lambda: [1.0, np.ma.masked, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
        lambda: tuple(_masked()[i] for i in range(8)),  # masked scalars
        lambda: [[1.0, 2.0], [3.0, [np.ma.masked]]],  # deeper
    ],
)
def test_masked_values_inside_a_list_are_refused(values):
    # Review helper 238: np.asarray of a list holding masked arrays drops their masks (the
    # masked 2.0 and 6.0 went up as what the data held; np.ma.masked went up as NaN).
    variant = _axpy()
    with pytest.raises(DispatchError, match=r"'x'.*masked array"):
        variant.run(8, inputs={"x": values()}, params={"a": 2.0})
    with pytest.raises(DispatchError, match="masked array"):
        abi.table({"c": values()})
    y = abi.read(variant.run(8, inputs={"x": [float(i) for i in range(8)]}, params={"a": 2.0}).outputs["y"])
    want = abi.read(variant.run(8, inputs={"x": np.arange(8, dtype=np.float32)}, params={"a": 2.0}).outputs["y"])
    np.testing.assert_array_equal(y, want)  # a plain list still runs, as its array does
    np.testing.assert_array_equal(want, 2.0 * np.arange(8, dtype=np.float32) + 1.0)  # (axpy's y starts at 1)


@pytest.mark.parametrize("n", [lambda: np.ma.array(8, mask=True), lambda: (np.ma.array(2, mask=True), 4)])
def test_a_masked_n_is_a_dispatch_error(n):
    # Review helper 238: numpy's MaskError came out of run(), not a PluginError.
    with pytest.raises(DispatchError):
        _axpy().run(n(), inputs={"x": np.ones(8, np.float32)}, params={"a": 2.0})


def test_the_nested_masked_check_goes_level_by_level_without_recursion():
    # Review helper 243: a Python call a row, and recursion (5000-deep nesting raised
    # RecursionError where numpy raises ValueError).
    from engine_plugin.formats import masked_refusal

    deep: object = [1.0]
    for _ in range(5000):
        deep = [deep]
    assert masked_refusal(deep) is None
    deep_masked: object = [np.ma.masked]
    for _ in range(5000):
        deep_masked = [deep_masked]
    assert masked_refusal(deep_masked) is not None
    assert masked_refusal([[1.0, 2.0], (3.0, [4.0, np.ma.masked_array([5.0])])]) is not None
    assert masked_refusal([[1.0, 2.0], (3.0, [4.0, np.array([5.0])])]) is None
