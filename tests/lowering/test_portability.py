"""A kernel beyond WebGPU's default limits is named at its line: `engine-plugin lower` warns,
`--strict` refuses (exit 1); kernels within the limits say nothing."""

from __future__ import annotations

import os
import subprocess
import sys

from engine_plugin import abi
from engine_plugin.lowering.portability import portability_issues

BIG = """\
bindings:
  - { name: dst, kind: buffer, access: read_write, element: u32, count: "n" }
workgroup: 1024
"""
BIG_WGSL = """\
const BINS = 8192u;
var<workgroup> bins: array<atomic<u32>, BINS>;

@compute @workgroup_size(1024)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    atomicAdd(&bins[i % BINS], 1u);
    dst_set(i, atomicLoad(&bins[i % BINS]));
}
"""


def test_each_excess_is_named_at_the_users_line():
    from engine_plugin.lowering import lower

    lowered = lower(abi.parse(BIG, "big/bindings.yaml"), BIG_WGSL, {}, wgsl_path="big/kernel.wgsl")
    issues = [((i.span.path, i.span.line, i.span.col), i.message) for i in portability_issues(lowered)]
    assert (("big/kernel.wgsl", 4, 11), "a workgroup of 1024 invocations; WebGPU guarantees 256") in issues
    assert (("big/kernel.wgsl", 4, 11), "workgroup size 1024 in x; WebGPU guarantees 256") in issues
    assert (("big/kernel.wgsl", 2, 1), "32768 bytes of workgroup memory; WebGPU guarantees 16384") in issues
    assert len(issues) == 3


def test_a_kernel_within_the_limits_has_no_issue():
    from engine_plugin.lowering import lower

    small = lower(abi.parse(BIG.replace("1024", "64")), BIG_WGSL.replace("1024", "64").replace("8192u", "256u"), {})
    assert portability_issues(small) == []


def test_lower_warns_and_strict_refuses(tmp_path):
    asset = tmp_path / "big.computeShader"
    asset.mkdir()
    (asset / "bindings.yaml").write_text(BIG)
    (asset / "big.wgsl").write_text(BIG_WGSL)
    run = lambda *extra: subprocess.run([sys.executable, "-m", "engine_plugin", "lower", str(asset), *extra],  # noqa: E731
                                        capture_output=True, text=True, timeout=120, env=dict(os.environ))
    warned = run()
    assert warned.returncode == 0 and "fn zero_user_main" in warned.stdout
    assert "big.wgsl:4:11: warning: a workgroup of 1024 invocations" in warned.stderr
    strict = run("--strict")
    assert strict.returncode == 1 and strict.stdout == "" and "refused (--strict)" in strict.stderr
