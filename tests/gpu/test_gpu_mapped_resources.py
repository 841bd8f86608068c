"""A buffer still mapped (``mapped_at_creation`` never unmapped, or mapped again) that a
submission would use is refused, never a process abort: wgpu-native panics inside
``wgpuQueueSubmit`` on one as on a destroyed buffer; and a product's readback source of
another device is refused at registration (its first readback disabled the backend) (review
helper 189)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

SCRIPT = os.path.join(os.path.dirname(__file__), "mapped_resources_script.py")


@pytest.mark.parametrize("case", ["read", "run", "readback_source", "foreign_source", "bound"])
def test_a_mapped_or_foreign_buffer_is_refused_not_an_abort(case):
    proc = subprocess.run([sys.executable, SCRIPT, case], capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert f"ok {case}" in proc.stdout
