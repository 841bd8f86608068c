"""Fixtures of the engine tests: worlds (the real device, lavapipe in CI, and ``make_engine``,
engines closed after each test, come from tests/conftest.py)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # engine_support, next to this file

from engine_support import make_world  # noqa: E402


@pytest.fixture
def world():
    return make_world()
