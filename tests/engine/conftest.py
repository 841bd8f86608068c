"""Fixtures of the engine tests: the real device (lavapipe in CI; no adapter fails, never
skips), worlds, and engines closed after each test."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # engine_support, next to this file

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
