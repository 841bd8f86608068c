"""A compile the driver never finishes does not hang a bake (``--compile-timeout``): a compile
cannot be interrupted, so a pool worker stuck in one notes its variant and ends, and the
client fails that variant and bakes the rest; with ``--jobs 1`` the bake stops, exit 1,
naming it. Lavapipe compiled a huge ``var<private>`` array for minutes and a bake waited for
good (review helper 128)."""

from __future__ import annotations

import os
import textwrap

import pytest

from bake_support import SAMPLE_VARIANTS, copy_samples, entries, run_bake, write_asset

pytestmark = pytest.mark.gpu

YAML = 'bindings:\n  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n" }\n'
# What made lavapipe's compiler run for minutes (over 60 s here, user and system time).
HUGE_PRIVATE_WGSL = """\
var<private> big: array<f32, 4000000>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    big[i % 4000000u] = 1.0;
    dst_set(i, big[(i * 7u) % 4000000u]);
}
"""
PLAIN_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, 1.0);
}
"""
# Every process of the bake: compiling the asset named "stuck" never returns (deterministic,
# where the real compile above depends on the driver). The sleep is Python's, the deadline
# the same thread timer that ends a process stuck in native code.
STUCK_SITE = textwrap.dedent(
    """
    import time
    import engine_plugin.bake.worker as w
    plain = w._validate
    def validate(lowered):
        if "stuck.computeShader" in lowered.asset or "stuck.computeShader" in str(lowered.source_map.files):
            time.sleep(600)
        plain(lowered)
    w._validate = validate
    """
)


def _assets(tmp_path, stuck_wgsl: str = PLAIN_WGSL) -> str:
    root = copy_samples(str(tmp_path / "assets"))
    write_asset(os.path.join(root, "stuck.computeShader"), YAML, stuck_wgsl)
    return root


def _site(tmp_path) -> str:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(STUCK_SITE)
    return str(site)


def _run(tmp_path, args: list[str], site: str | None = None):
    env_path = os.environ.get("PYTHONPATH", "")
    if site is not None:
        os.environ["PYTHONPATH"] = site + os.pathsep + env_path
    try:
        return run_bake(["assets", "--cache", "cache", "--progress", "plain", *args], cwd=str(tmp_path), timeout=180)
    finally:
        os.environ["PYTHONPATH"] = env_path


def test_a_pool_worker_stuck_in_a_compile_fails_that_variant_and_the_rest_bake(tmp_path):
    _assets(tmp_path)
    done = _run(tmp_path, ["-j", "2", "--compile-timeout", "3"], site=_site(tmp_path))
    assert done.returncode == 1, done.stderr[-3000:]
    out = done.stdout + done.stderr
    assert "stuck.computeShader" in out and "did not finish within 3 s (--compile-timeout)" in out, out[-3000:]
    assert f"baked {SAMPLE_VARIANTS}, skipped 0, failed 1 of {SAMPLE_VARIANTS + 1}" in out, out[-3000:]
    assert len(entries(str(tmp_path / "cache"))) == SAMPLE_VARIANTS  # every other variant, none of the stuck one's
    assert "Traceback" not in out


def test_a_compile_stuck_in_the_bake_s_own_process_stops_it_naming_the_variant(tmp_path):
    _assets(tmp_path)
    done = _run(tmp_path, ["-j", "1", "--compile-timeout", "3"], site=_site(tmp_path))
    assert done.returncode == 1, done.stderr[-3000:]
    assert "stuck.computeShader/kernel.wgsl variant (default) did not finish within 3 s" in done.stderr, done.stderr[-3000:]
    assert "the bake stops" in done.stderr and "Traceback" not in done.stderr


def test_lavapipe_s_endless_compile_of_a_huge_private_array_fails_alone(tmp_path):
    _assets(tmp_path, HUGE_PRIVATE_WGSL)
    done = _run(tmp_path, ["-j", "2", "--compile-timeout", "5"])
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    assert "did not finish within 5 s" in out and f"baked {SAMPLE_VARIANTS}, skipped 0, failed 1" in out, out[-3000:]
