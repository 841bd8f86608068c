"""Shared test setup: the real (software) GPU, golden-file regeneration, quiet Vulkan loader."""

from __future__ import annotations

import os
import signal
import tempfile

import pytest

# The Vulkan loader warns without XDG_RUNTIME_DIR; Mesa's shader cache keeps lavapipe's JIT warm.
_xdg = os.environ.setdefault("XDG_RUNTIME_DIR", os.path.join(tempfile.gettempdir(), f"engine-plugin-xdg-{os.getuid()}"))
os.makedirs(_xdg, mode=0o700, exist_ok=True)
os.environ.setdefault("MESA_SHADER_CACHE_DIR", os.path.join(tempfile.gettempdir(), "engine-plugin-mesa-cache"))

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A suite started in the background of a non-interactive shell (`nohup make test &`) inherits an
# ignored SIGINT, which Python keeps: the Ctrl-C tests (in-process bakes, and the subprocesses
# they signal, which inherit it too) then saw no KeyboardInterrupt and failed. They test what
# Ctrl-C does, so the suite runs with Python's own handler whatever started it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_addoption(parser):
    parser.addoption("--regen-golden", action="store_true", help="rewrite golden files instead of comparing")


@pytest.fixture
def deadline(request):
    """Fail (rather than hang the suite) when the test body blocks for 10 s, or the seconds of
    its ``@pytest.mark.deadline(seconds)``: a guard against a hang, not a timing."""
    marker = request.node.get_closest_marker("deadline")
    seconds = int(marker.args[0]) if marker is not None else 10

    def expired(*_):
        raise TimeoutError(f"{request.node.name}: blocked for {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="session")
def regen_golden(request) -> bool:
    return bool(request.config.getoption("--regen-golden"))


@pytest.fixture(scope="session")
def gpu():
    """The process's DeviceContext on the real adapter (lavapipe in CI). No adapter is a failure, never a skip."""
    from engine_plugin.device.context import get_context

    return get_context()


@pytest.fixture(scope="session")
def repo_root() -> str:
    return REPO


@pytest.fixture
def make_engine(gpu):
    """``make_engine(world, **kwargs)``: an Engine on the real device, closed at teardown."""
    from engine_plugin.engine import Engine

    made = []

    def make(world, **kwargs):
        kwargs.setdefault("device", gpu)
        engine = Engine(world, **kwargs)
        made.append(engine)
        return engine

    yield make
    for engine in made:
        engine.close()


@pytest.fixture
def young_gc():
    """Collections during the test walk only what the test made: everything alive before it is
    frozen (``gc.freeze``) and thawed after. Tests that drop objects and call ``gc.collect()``
    step after step otherwise pay for the whole suite's heap each time (40 s instead of 14 in
    the run-model fuzzer, late in ``make test``); what they check is only their own objects."""
    import gc

    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.fixture
def slow_compiles(monkeypatch):
    """Compiles of a lowered source holding a marker take that long: ``slow_compiles[mark] =
    seconds`` (a sleep inside each compile, where a driver stuck on a shader would be)."""
    import time

    import engine_plugin.runtime.compile as compile_module

    sleeps: dict[str, float] = {}
    plain = compile_module._user_lines

    def slowed(lowered):
        for mark, seconds in sleeps.items():
            if mark in lowered.source:
                time.sleep(seconds)
        return plain(lowered)

    monkeypatch.setattr(compile_module, "_user_lines", slowed)
    return sleeps
