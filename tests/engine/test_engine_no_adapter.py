"""An engine on a machine without a usable GPU adapter (SPEC §4: NoGpuBackend when no device is
there; §1: a refusal leaves the caller on the CPU path) registers asset products with CPU
fallbacks: the library makes their programs without a device (helper 75: NoAdapterError)."""

from __future__ import annotations

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _script(name: str, *args: str, timeout: float = 180, env: dict | None = None) -> str:
    """Run the script ``name`` beside this file (a process of its own: it loses its device);
    answers its stdout once it exited 0."""
    proc = subprocess.run([sys.executable, os.path.join(HERE, name), *args], capture_output=True, text=True, timeout=timeout, env=env or dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_asset_products_run_on_their_cpu_fallbacks_where_no_adapter_is(tmp_path):
    env = dict(os.environ, ENGINE_PLUGIN_ADAPTER="no_such_adapter_anywhere")
    out = _script("no_adapter_script.py", str(tmp_path), timeout=120, env=env)
    assert "backend NoGpuBackend" in out and "applied 3" in out
    assert "broken ['ReloadFailure']" in out and "good ['ReloadEvent']" in out and "alive True" in out


def test_a_products_loss_error_clears_once_recover_gpu_puts_it_back_on_the_gpu(tmp_path):
    # product_error() kept answering the loss after a successful recovery (helper 73).
    out = _script("loss_error_script.py", timeout=120)
    assert "error after the loss: True" in out and "recovered: True" in out
    assert "on the gpu: True | error now: None" in out
    assert "recover at once: True True True" in out


def test_a_good_reload_after_an_unreported_reset_and_recovery_is_applied(tmp_path):
    out = _script("reload_after_reset_script.py", str(tmp_path))
    assert "recover_gpu: True" in out and "bug" not in out
    assert "ref.generation: 2" in out and "product kernel has slot_count: False" in out


def test_a_product_registered_after_an_unreported_reset_runs_on_its_fallback_then_on_the_gpu(tmp_path):
    out = _script("register_after_reset_script.py")
    assert "registered: ['C1', 'C2']" in out and "served by: ['cpu'] | loss answered: True" in out, out
    assert "recover_gpu: True" in out and "on the gpu: True | error now: None" in out, out
    assert "cpu values: [2.5]" in out and "gpu values: [7.25]" in out, out  # max(a, b) by the fallback, then the kernel


def test_a_selection_outgrowing_its_buffers_after_an_unreported_reset_is_served_then_recovered(tmp_path):
    out = _script("select_after_reset_script.py")
    assert "outgrown: True" in out and "served: ['cpu'] | tiles: 128" in out, out
    assert "recover_gpu: True" in out and "gpu tiles: 128 | right: True" in out, out
