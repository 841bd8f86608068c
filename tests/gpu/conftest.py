"""Fixtures of the GPU tests: the real device (lavapipe in CI), fake devices, and backends that
are closed after each test with a check that no staging buffer leaked.

A GPU test never skips: without an adapter, ``get_context()`` raises NoAdapterError and every
test using ``ctx`` errors out, which fails the run.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # fake_wgpu_device, next to this file

from fake_wgpu_device import FakeDevice  # noqa: E402

from engine_plugin.gpu import WgpuBackend, WgpuBackendConfig  # noqa: E402
from engine_plugin.device.context import DeviceContext, get_context  # noqa: E402

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp/xdg")


@pytest.fixture(scope="session")
def ctx() -> DeviceContext:
    """The real default device; fails (never skips) when this machine has no adapter."""
    return get_context()


@pytest.fixture
def fake() -> FakeDevice:
    return FakeDevice()


@pytest.fixture
def make_backend() -> Iterator[Callable[..., WgpuBackend]]:
    """``make_backend(device, **config)``: a backend closed at teardown, checked for leaks.

    Fake-device backends skip the warm-up readback and barely wait in close (the fake's maps
    settle only when a test says the GPU finished).
    """
    made: list[tuple[WgpuBackend, object]] = []

    def make(device: object, **config: object) -> WgpuBackend:
        if isinstance(device, FakeDevice):
            config.setdefault("warm_up", False)
            config.setdefault("close_wait_s", 0.01)  # the fake's copies finish only when told
            config.setdefault("reuse_staging", False)  # the fake tests count each buffer's life
        backend = WgpuBackend(device, WgpuBackendConfig(**config))
        made.append((backend, device))
        return backend

    yield make
    for backend, device in made:
        backend.close()
        assert backend.inflight_readbacks == 0, f"{backend!r} kept readbacks in flight after close"
        assert backend.live_staging_buffers == 0 or backend._ring.quarantine, \
            f"{backend!r} leaked {backend.live_staging_buffers} staging buffer(s)"
        if isinstance(device, FakeDevice):
            device.complete_work()  # the GPU finishes what was in flight; released buffers are freed
            quarantined = len(backend._ring.quarantine)
            assert device.live_staging() == quarantined, f"fake device has {device.live_staging()} live staging buffers"


def _poll_until(backend: WgpuBackend, done: Callable[[], bool], timeout: float = 5.0) -> float:
    deadline = time.perf_counter() + timeout
    longest = 0.0
    while not done():
        if time.perf_counter() > deadline:
            pytest.fail(f"not done after {timeout} s of polling; {backend!r}")
        t0 = time.perf_counter()
        backend.poll()
        longest = max(longest, time.perf_counter() - t0)
        time.sleep(0.0005)
    return longest


@pytest.fixture
def poll_until() -> Callable[..., float]:
    """``poll_until(backend, done, timeout=5)``: poll once a 'frame' (0.5 ms apart) until
    ``done()``; answers the longest single poll. Fails the test when ``timeout`` passes first."""
    return _poll_until
