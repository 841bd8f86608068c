"""An engine on a machine without a usable GPU adapter (SPEC §4: NoGpuBackend when no device is
there; §1: a refusal leaves the caller on the CPU path) registers asset products with CPU
fallbacks: the library makes their programs without a device (helper 75: NoAdapterError)."""

from __future__ import annotations

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_asset_products_run_on_their_cpu_fallbacks_where_no_adapter_is(tmp_path):
    env = dict(os.environ, ENGINE_PLUGIN_ADAPTER="no_such_adapter_anywhere")
    proc = subprocess.run([sys.executable, os.path.join(HERE, "no_adapter_script.py"), str(tmp_path)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "backend NoGpuBackend" in proc.stdout and "applied 3" in proc.stdout
    assert "broken ['ReloadFailure']" in proc.stdout and "good ['ReloadEvent']" in proc.stdout and "alive True" in proc.stdout


def test_a_products_loss_error_clears_once_recover_gpu_puts_it_back_on_the_gpu(tmp_path):
    # product_error() kept answering the loss after a successful recovery (helper 73).
    proc = subprocess.run([sys.executable, os.path.join(HERE, "loss_error_script.py")], capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "error after the loss: True" in proc.stdout and "recovered: True" in proc.stdout
    assert "on the gpu: True | error now: None" in proc.stdout
    assert "recover at once: True True True" in proc.stdout


def test_a_good_reload_after_an_unreported_reset_and_recovery_is_applied(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(HERE, "reload_after_reset_script.py"), str(tmp_path)], capture_output=True, text=True, timeout=180, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "recover_gpu: True" in proc.stdout and "bug" not in proc.stdout
    assert "ref.generation: 2" in proc.stdout and "product kernel has slot_count: False" in proc.stdout


def test_a_product_registered_after_an_unreported_reset_runs_on_its_fallback_then_on_the_gpu(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(HERE, "register_after_reset_script.py")], capture_output=True, text=True, timeout=180, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "registered: ['C1', 'C2']" in out and "served by: ['cpu'] | loss answered: True" in out, out
    assert "recover_gpu: True" in out and "on the gpu: True | error now: None" in out, out
    assert "cpu values: [2.5]" in out and "gpu values: [7.25]" in out, out  # max(a, b) by the fallback, then the kernel


def test_a_selection_outgrowing_its_buffers_after_an_unreported_reset_is_served_then_recovered(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(HERE, "select_after_reset_script.py")], capture_output=True, text=True, timeout=180, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "outgrown: True" in out and "served: ['cpu'] | tiles: 128" in out, out
    assert "recover_gpu: True" in out and "gpu tiles: 128 | right: True" in out, out
