"""A caller destroying buffers the GPU backend uses (its own product's, a field mirror it was
handed) gets a refusal or a failed readback, never a process abort: wgpu-native panics inside
``wgpuQueueSubmit`` on a destroyed buffer (review helper 159)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

SCRIPT = os.path.join(os.path.dirname(__file__), "destroyed_resources_script.py")


@pytest.mark.parametrize("case", ["bound_before_dispatch", "bound_inside_batch", "readback_source", "field_mirror", "struct_entries", "generator", "raw_device"])
def test_a_destroyed_buffer_a_product_uses_is_refused_not_an_abort(case):
    proc = subprocess.run([sys.executable, SCRIPT, case], capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert f"ok {case}" in proc.stdout
