"""Fixtures of the adversarial tests: the real device (the session ``gpu`` fixture of
tests/conftest.py) and engines closed after each test, as in tests/engine/conftest.py."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "engine"))  # engine_support

from engine_support import make_world  # noqa: E402


@pytest.fixture
def world():
    return make_world()


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
