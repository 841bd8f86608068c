"""Fixtures of the adversarial tests: a world as in tests/engine (the real device and
``make_engine`` come from tests/conftest.py)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "engine"))  # engine_support

from engine_support import make_world  # noqa: E402


@pytest.fixture
def world():
    return make_world()
