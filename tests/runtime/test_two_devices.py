"""Runs on two devices in one process: a batch mixing them loses only the lost device's runs
(review helper 161: the healthy device's were dropped too, and their Outputs read zeros)."""

from __future__ import annotations

import numpy as np
import pytest
import wgpu

from engine_plugin import abi
from engine_plugin.bench.axpy import AXPY_WGSL, AXPY_YAML
from engine_plugin.errors import DeviceLostError

pytestmark = pytest.mark.gpu


def _new_device():
    return wgpu.gpu.request_adapter_sync(power_preference="high-performance").request_device_sync()


def _axpy_on_two_devices(key):
    """(a second device, the axpy variant on the default device, the same on the second)."""
    other = _new_device()
    schema = abi.parse(AXPY_YAML)
    on_a = abi.program(key=key, schema=schema, wgsl=AXPY_WGSL).variant()
    on_b = abi.program(key=key, schema=schema, wgsl=AXPY_WGSL, device=other).variant()
    return other, on_a, on_b


@pytest.mark.parametrize("order", ["AB", "BA"])
def test_a_batch_mixing_devices_submits_the_healthy_devices_runs_when_the_other_is_lost(order):
    other, on_a, on_b = _axpy_on_two_devices("t161/axpy")
    n = 4096
    x = np.arange(n, dtype=np.float32)
    for v in (on_a, on_b):  # pooled buffers holding other data first
        abi.read(v.run(n, inputs={"x": np.full(n, 777, np.float32)}, params={"a": 1.0}).outputs["y"])
    runs = {}
    with pytest.raises(DeviceLostError):
        with abi.batch(slices=False):  # one submission (see the nested test below)
            for side in order:
                runs[side] = (on_a if side == "A" else on_b).run(n, inputs={"x": x}, params={"a": 4.0 if side == "A" else 5.0})
            other.destroy()
    expected = abi.read(on_a.run(n, inputs={"x": x}, params={"a": 4.0}).outputs["y"])  # this kernel's answer
    np.testing.assert_array_equal(abi.read(runs["A"].outputs["y"]), expected)
    with pytest.raises(DeviceLostError):
        abi.read(runs["B"].outputs["y"])


def test_a_table_on_a_destroyed_device_is_a_device_lost_error():
    # Review helper 161: wgpu's raw GPUValidationError ("Parent device is lost").
    other = _new_device()
    other.destroy()
    with pytest.raises(DeviceLostError):
        abi.table({"w": np.ones(4, np.float32)}, device=other)


def test_destroyed_devices_handed_to_the_plugin_are_released():
    # Review helper 161: every device handed in kept its context (pools, pipelines) for good:
    # about 20 MB a device. A lost device's context goes when the next device comes in.
    import gc
    import weakref

    schema = abi.parse(AXPY_YAML)
    refs = []
    for _ in range(4):
        device = _new_device()
        variant = abi.program(key="t161/leak", schema=schema, wgsl=AXPY_WGSL, device=device).variant()
        out = abi.read(variant.run(64, inputs={"x": np.ones(64, np.float32)}, params={"a": 2.0}).outputs["y"])
        assert out[0] == 3.0  # y = a x + 1
        refs.append(weakref.ref(device))
        device.destroy()
        del device, variant
        gc.collect()
    assert sum(r() is not None for r in refs) <= 1  # only the last, until another comes in


def test_a_nested_batch_submits_its_healthy_runs_when_its_outer_batch_meets_a_lost_device():
    # Review helper 162: the inner batch's exit flushed the outer batch first, which raised
    # for the lost device before the inner batch submitted (or dropped) anything: its run on
    # the healthy device read zeros, and its params slot stayed taken for good.
    other, on_a, on_b = _axpy_on_two_devices("t162/axpy")
    n = 1024
    x = np.arange(n, dtype=np.float32)
    staged_before = len(on_a._ring.staged)
    # One submission each (slices=False): on a GPU a default batch may submit a slice by age
    # before the destroy, and then nothing of the lost device is left to raise (the H200 did).
    with pytest.raises(DeviceLostError):
        with abi.batch(slices=False):
            on_b.run(n, inputs={"x": x}, params={"a": 5.0})
            outer_a = on_a.run(n, inputs={"x": x}, params={"a": 3.0})
            with abi.batch(slices=False):
                inner_a = on_a.run(n, inputs={"x": x}, params={"a": 4.0})
                other.destroy()
    np.testing.assert_array_equal(abi.read(outer_a.outputs["y"]), 3.0 * x + 1.0)
    np.testing.assert_array_equal(abi.read(inner_a.outputs["y"]), 4.0 * x + 1.0)
    assert len(on_a._ring.staged) == staged_before  # no params slot left taken


def test_a_program_made_on_a_callers_device_never_moves_to_the_default_one_after_a_loss():
    # Its device destroyed, program.variant() compiled quietly on the default device: runs went
    # to another device than the caller's other resources (left over from review helper 161).
    # A program made without device= moves, as documented.
    other = _new_device()
    schema = abi.parse(AXPY_YAML, "two/bindings.yaml")
    mine = abi.program(key="test/two_devices/mine", schema=schema, wgsl=AXPY_WGSL, device=other)
    x = np.arange(8, dtype=np.float32)
    first = mine.variant().run(8, inputs={"x": x}, params={"a": 2.0})
    assert first.outputs["y"]._buffer._device is other
    other.destroy()
    with pytest.raises(DeviceLostError, match="device it was made on"):
        mine.variant()
    default = abi.program(key="test/two_devices/default", schema=schema, wgsl=AXPY_WGSL)
    assert default.variant().ctx.device is abi.device()
