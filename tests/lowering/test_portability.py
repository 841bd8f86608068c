"""A kernel beyond WebGPU's default limits is named at its line: `engine-plugin lower` warns,
`--strict` refuses (exit 1); kernels within the limits say nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

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
    # Review helper 195: each issue was four lines (a blank line, the source, a caret) without
    # -v, said under -q too, and --strict's refusals were labelled "warning:".
    assert all(line.startswith("engine-plugin lower: ") for line in warned.stderr.splitlines()), warned.stderr
    assert all(line.startswith("engine-plugin lower: ") and ": warning: " not in line for line in strict.stderr.splitlines()), strict.stderr
    assert len(strict.stderr.splitlines()) == 4  # three issues and the refusal
    quiet = subprocess.run([sys.executable, "-m", "engine_plugin", "-q", "lower", str(asset)], capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert quiet.returncode == 0 and quiet.stderr == "" and "fn zero_user_main" in quiet.stdout
    verbose = subprocess.run([sys.executable, "-m", "engine_plugin", "-v", "lower", str(asset)], capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert "@compute @workgroup_size(1024)" in verbose.stderr and "^" in verbose.stderr  # the source line and caret with -v


def test_bake_says_each_portability_issue_once_on_one_line_and_nothing_under_q(tmp_path):
    # Review helper 195: the bake's workers logged them as they were: several lines each, no
    # prefix, under -q too.
    asset = tmp_path / "assets" / "big.computeShader"
    asset.mkdir(parents=True)
    (asset / "bindings.yaml").write_text(BIG)
    (asset / "kernel.wgsl").write_text(BIG_WGSL)
    bake = lambda *extra: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "engine_plugin", *extra, "bake", str(tmp_path / "assets"), "--cache", str(tmp_path / f"c{len(extra)}"), "--progress", "plain"],
        capture_output=True, text=True, timeout=300, env=dict(os.environ),
    )
    plain = bake()
    assert plain.returncode == 0, plain.stderr
    said = [line for line in plain.stderr.splitlines() if "WebGPU guarantees" in line]
    assert len(said) == 3 and all(line.startswith("engine-plugin bake: ") and "big.computeShader/kernel.wgsl:" in line for line in said), plain.stderr
    assert not any(line.strip() == "^" or line.strip().startswith("@compute") for line in plain.stderr.splitlines())
    quiet = bake("-q")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


SMALL = """\
bindings:
  - { name: o, kind: buffer, access: read_write, element: f32, count: "n" }
"""
USE = """
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = zero_index(gid);
    if (i < zero_n()) { o_set(i, f32(li)); }
}
"""


@pytest.mark.parametrize(
    ("decls", "line", "total"),
    [
        # Review helper 193: each of these counted 0 bytes (or too few) and passed --strict.
        ("struct Body { pos: vec3<f32>, mass: f32 }\nvar<workgroup> tile: array<Body, 1025>;", 2, 16400),
        ("alias Tile = array<f32, 4200>;\nvar<workgroup> tile: Tile;", 2, 16800),
        ("const TILE = 64u;\nvar<workgroup> tile: array<f32, TILE * (TILE + 2u)>;", 2, 16896),
        ("var<workgroup> flags: array<bool, 4500>;", 1, 18000),
        ("var<workgroup> a: array<vec2f, 1024>;\nvar<workgroup> b: array<mat2x2f, 520>;", 2, 8192 + 8320),
        # One per variable rounded to 16 bytes, as WebGPU counts them.
        ("var<workgroup> a: array<f32, 4095>;\nvar<workgroup> b: f32;", 1, 16384 + 16),
        ("struct S { a: f32, b: vec3<f32> }\nvar<workgroup> t: array<S, 512>;", 2, 16384),
        # Review helper 198: member attributes, a space before '<' and a vector constant's lane.
        ("struct S { a: f32, @size(16) b: f32 }\nvar<workgroup> t: array<S, 900>;", 2, 18000),
        ("struct S { @align(16) a: f32 }\nvar<workgroup> t: array<S, 1100>;", 2, 17600),
        ("var<workgroup> a: array <f32, 4200>;", 1, 16800),
        ("const WG = vec3u(8u, 8u, 1u);\nvar<workgroup> a: array<f32, WG.x * WG.y * 66u>;", 2, 16896),
    ],
)
def test_workgroup_memory_is_sized_through_structs_aliases_and_constants(decls, line, total):
    from engine_plugin.lowering import lower

    lowered = lower(abi.parse(SMALL, "k/bindings.yaml"), decls + USE, {}, wgsl_path="k/kernel.wgsl")
    issues = [((i.span.path, i.span.line), i.message) for i in portability_issues(lowered)]
    if total > 16384:
        assert issues == [(("k/kernel.wgsl", line), f"{total} bytes of workgroup memory; WebGPU guarantees 16384")]
    else:
        assert issues == []


WHEN = """\
bindings:
  - { name: o, kind: buffer, access: read_write, element: f32, count: "n" }
specialize:
  - { name: TILE, options: [small, big] }
  - { name: WG, kind: workgroup, options: [64, 256] }
workgroup: WG
"""
WHEN_WGSL = """\
// @when TILE small
var<workgroup> tile: array<f32, 1024>;
// @end
// @when TILE big
var<workgroup> tile: array<f32, 8192>;
// @end
var<workgroup> per: array<vec4<f32>, WG>;
@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = zero_index(gid);
    tile[li] = f32(li);
    per[li] = vec4<f32>(1.0);
    workgroupBarrier();
    if (i < zero_n()) { o_set(i, tile[li] + per[li].x); }
}
"""


@pytest.mark.parametrize(("tile", "wg", "total"), [("small", 64, 0), ("small", 256, 0), ("big", 64, 32768 + 1024)])
def test_workgroup_memory_counts_what_the_variant_compiles(tile, wg, total):
    # Review helper 193: the check read the body as written, so a `// @when` block another
    # variant compiles counted too (TILE=small refused by --strict at 36,864 bytes).
    from engine_plugin.lowering import lower

    lowered = lower(abi.parse(WHEN, "w/bindings.yaml"), WHEN_WGSL, {"TILE": tile, "WG": str(wg)}, wgsl_path="w/kernel.wgsl")
    issues = [((i.span.path, i.span.line), i.message) for i in portability_issues(lowered) if "workgroup memory" in i.message]
    assert issues == ([(("w/kernel.wgsl", 5), f"{total} bytes of workgroup memory; WebGPU guarantees 16384")] if total else [])


def test_textures_and_samplers_count_against_their_own_limits_not_the_storage_buffers():
    # Review helper 208: every binding that was no uniform counted as a storage buffer: 6
    # buffers and 4 textures were "10 storage buffers", refused on a default-limits device that
    # creates that pipeline. Each kind counts against its own WebGPU limit.
    buffers = "".join(f"  - {{ name: b{i}, kind: buffer, access: read, element: f32 }}\n" for i in range(5))
    textures = "".join(f"  - {{ name: t{i}, kind: texture }}\n" for i in range(4))
    yaml = "bindings:\n" + buffers + '  - { name: out, kind: buffer, access: read_write, element: f32, count: "n" }\n' + textures
    body = (
        "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
        "    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n"
        "    out_set(i, b0_get(i) + b1_get(i) + b2_get(i) + b3_get(i) + b4_get(i)"
        + "".join(f" + textureLoad(t{k}, vec2<u32>(0u), 0).x" for k in range(4))
        + ");\n}\n"
    )
    assert portability_issues(abi.lower(abi.parse(yaml, "tx/bindings.yaml"), body)) == []
    storage = "".join(f"  - {{ name: s{i}, kind: storage_texture, format: r32float, access: read }}\n" for i in range(5))
    many = abi.lower(abi.parse("bindings:\n" + '  - { name: out, kind: buffer, access: read_write, element: f32, count: "n" }\n' + storage, "st/bindings.yaml"),
                     "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n    out_set(zero_index(gid), "
                     + " + ".join(f"textureLoad(s{k}, vec2<u32>(0u)).x" for k in range(5)) + ");\n}\n")
    (issue,) = portability_issues(many)
    assert "5 storage textures" in issue.message and issue.span.line == 7, issue
