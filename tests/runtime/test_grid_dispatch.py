"""Dispatch domains of 1, 2 or 3 dimensions: ``gid`` is the grid coordinate on every axis
whatever fold the host needs, ``zero_index`` stays linear (row-major) and answers
0xFFFFFFFF outside the domain, ``workgroup_id``/``num_workgroups`` are logical."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.errors import DispatchError
from engine_plugin.lowering import geometry

pytestmark = pytest.mark.gpu

GRID_YAML = """\
bindings:
  - { name: xy, kind: buffer, access: read_write, element: vec2<u32>, count: "n" }
workgroup: [8, 8]
"""
# Game of life style: every cell writes its own coordinate where zero_index puts it.
GRID_WGSL = """\
@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    xy_set(i, gid.xy);
}
"""


def grid_variant():
    return abi.program(key="t17/grid", schema=abi.parse(GRID_YAML), wgsl=GRID_WGSL).variant()


def test_gid_xy_is_the_cell_of_a_2d_grid():
    w, h = 37, 21  # not multiples of the 8x8 workgroup: partial workgroups on both axes
    got = abi.read(grid_variant().run(n=(w, h)).outputs["xy"])
    ys, xs = np.mgrid[0:h, 0:w]
    np.testing.assert_array_equal(got, np.stack([xs.ravel(), ys.ravel()], axis=1))


def test_gid_xy_holds_for_every_cell_of_a_grid_larger_than_one_fold(gpu):
    limit = gpu.limit("max-compute-workgroups-per-dimension")
    # one row of cells needing more x workgroups than one dimension launches: the host folds
    w, h = (limit + 3) * 8, 9
    run = grid_variant().run(n=(w, h))
    assert run.groups[0] <= limit and run.groups[1] <= limit
    got = abi.read(run.outputs["xy"])
    assert got.shape == (w * h, 2)
    np.testing.assert_array_equal(got[:, 0], np.tile(np.arange(w, dtype=np.uint32), h))
    np.testing.assert_array_equal(got[:, 1], np.repeat(np.arange(h, dtype=np.uint32), w))


BUILTINS_YAML = """\
bindings:
  - { name: out, kind: buffer, access: read_write, element: vec4<u32>, count: "n * 3" }
workgroup: [4, 2, 2]
"""
BUILTINS_WGSL = """\
@compute @workgroup_size(4, 2, 2)
fn main(@builtin(num_workgroups) groups: vec3<u32>, @builtin(global_invocation_id) gid: vec3<u32>,
        @builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lii: u32) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    out_set(3u * i, vec4<u32>(gid, lii));
    out_set(3u * i + 1u, vec4<u32>(wid, 0u));
    out_set(3u * i + 2u, vec4<u32>(groups, 0u));
}
"""


def test_builtins_of_a_3d_domain_are_logical_in_any_parameter_order():
    v = abi.program(key="t17/builtins", schema=abi.parse(BUILTINS_YAML), wgsl=BUILTINS_WGSL).variant()
    w, h, d = 6, 3, 5
    got = abi.read(v.run(n=(w, h, d)).outputs["out"]).reshape(d, h, w, 3, 4)
    z, y, x = np.meshgrid(np.arange(d), np.arange(h), np.arange(w), indexing="ij")
    np.testing.assert_array_equal(got[..., 0, 0], x)
    np.testing.assert_array_equal(got[..., 0, 1], y)
    np.testing.assert_array_equal(got[..., 0, 2], z)
    np.testing.assert_array_equal(got[..., 0, 3], (x % 4) + 4 * ((y % 2) + 2 * (z % 2)))
    np.testing.assert_array_equal(got[..., 1, 0], x // 4)
    np.testing.assert_array_equal(got[..., 1, 1], y // 2)
    np.testing.assert_array_equal(got[..., 1, 2], z // 2)
    assert (got[..., 2, :3] == np.array([2, 2, 3])).all()


BUILTINS_STRUCT_WGSL = """\
struct Ids {
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(global_invocation_id) gid: vec3u,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) lii: u32,
}
alias In = Ids;
@compute @workgroup_size(4, 2, 2)
fn main(ids: In) {
    let i = zero_index(ids.gid);
    if (i >= zero_n()) { return; }
    out_set(3u * i, vec4<u32>(ids.gid, ids.lii));
    out_set(3u * i + 1u, vec4<u32>(ids.wid, 0u));
    out_set(3u * i + 2u, vec4<u32>(ids.groups, 0u));
}
"""


def test_builtins_taken_as_struct_members_are_the_same_logical_values():
    # WGSL's other spelling of an entry point's builtins (public kernels use it) was refused
    # as "a compute entry point takes builtins only" (review helper 126).
    w, h, d = 6, 3, 5
    plain = abi.program(key="t17/builtins", schema=abi.parse(BUILTINS_YAML), wgsl=BUILTINS_WGSL).variant()
    struct = abi.program(key="t17/builtins_struct", schema=abi.parse(BUILTINS_YAML), wgsl=BUILTINS_STRUCT_WGSL).variant()
    expected = abi.read(plain.run(n=(w, h, d)).outputs["out"])
    got = abi.read(struct.run(n=(w, h, d)).outputs["out"])
    np.testing.assert_array_equal(got, expected)
    assert got.reshape(d, h, w, 3, 4)[..., 0, 0].max() == w - 1  # a real grid, not zeros


@pytest.mark.parametrize(
    ("members", "line", "col", "message"),
    [
        ("    @builtin(global_invocation_id) gid: vec3<u32>,\n    extra: u32,\n", 3, 5, "member 'extra' of struct Ids has no @builtin"),
        ("    @builtin(local_invocation_index) lii: vec3<u32>,\n", 2, 38, "@builtin(local_invocation_index) is u32, not vec3<u32>"),
        ("    @builtin(position) p: vec4<f32>,\n", 2, 24, "is not a compute builtin"),
        # Review helper 193: a subgroup builtin is one, of an extension naga here lacks.
        ("    @builtin(subgroup_invocation_id) sid: u32,\n", 2, 38, "needs WGSL's subgroups extension, which wgpu 0.32 (naga) does not support"),
    ],
)
def test_a_struct_of_builtins_main_cannot_take_is_named_in_the_users_file(members, line, col, message):
    from engine_plugin.errors import PluginError

    wgsl = "struct Ids {\n" + members + "}\n@compute @workgroup_size(4, 2, 2)\nfn main(ids: Ids) {\n}\n"
    with pytest.raises(PluginError) as info:
        abi.program(key="t17/builtins_bad", schema=abi.parse(BUILTINS_YAML), wgsl=wgsl, wgsl_path="t17/kernel.wgsl").variant()
    assert message in str(info.value) and (info.value.span.line, info.value.span.col) == (line, col), str(info.value)


def test_a_1d_kernel_sees_its_linear_index_as_gid_x_past_the_fold(gpu, monkeypatch):
    # launch every logical group (no grid-stride cap), so the fold itself is what runs
    monkeypatch.setitem(geometry.INVOCATION_BUDGET, "cpu", 1 << 40)
    monkeypatch.setitem(geometry.INVOCATION_BUDGET, "gpu", 1 << 40)
    gpu.cache("group_cap")
    monkeypatch.setitem(gpu._caches, "group_cap", {})  # caps computed from the budget above, for this test only
    yaml = "bindings:\n  - { name: dst, kind: buffer, access: read_write, element: u32, count: 'n' }\nworkgroup: 1\n"
    wgsl = "@compute @workgroup_size(1)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n    if (gid.x >= zero_n()) { return; }\n    dst_set(gid.x, gid.x + 1000u * gid.y);\n}\n"
    v = abi.program(key="t17/gidx", schema=abi.parse(yaml), wgsl=wgsl).variant()
    n = gpu.limit("max-compute-workgroups-per-dimension") + 5
    run = v.run(n=n)
    assert run.groups[1] == 2  # folded...
    np.testing.assert_array_equal(abi.read(run.outputs["dst"]), np.arange(n, dtype=np.uint32))  # ...and gid.y is 0


@pytest.mark.parametrize("n", [(2, 3, 4, 5), (-1, 2), (2.5, 2), "8", True])
def test_a_domain_that_is_not_one_to_three_counts_is_refused(n):
    with pytest.raises(DispatchError, match="tuple of 1 to 3"):
        grid_variant().run(n=n)


def test_a_grid_run_repeats_only_for_the_same_shape():
    v = grid_variant()
    a = abi.read(v.run(n=(4, 2)).outputs["xy"])
    b = abi.read(v.run(n=(2, 4)).outputs["xy"])  # same count, other shape
    assert a[:, 0].max() == 3 and b[:, 0].max() == 1


LOOP_YAML = """\
bindings:
  - { name: x, kind: buffer, access: read, element: u32 }
  - { name: y, kind: buffer, access: read_write, element: u32, count: "n" }
params:
  - { name: steps, type: u32 }
"""
LOOP_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    var h = x_get(i);
    for (var s = 0u; s < params.steps; s = s + 1u) {
        h = (h ^ s) * 16777619u;
    }
    y_set(i, h);
}
"""


def test_a_looping_kernel_over_a_million_elements_is_right_on_the_default_launch(gpu):
    # llvmpipe ends an invocation's loops after 65,535 iterations in all, silently. A kernel
    # looping 1,100 times an element is within that; the launch must not make one invocation
    # loop over many elements (a grid-stride cap of 2**14 invocations cut 81,920 results).
    v = abi.program(key="t17/loop", schema=abi.parse(LOOP_YAML, "t17/loop/bindings.yaml"), wgsl=LOOP_WGSL).variant()
    n, steps = 1 << 20, 1100
    x = np.random.default_rng(3).integers(0, 2**32, n, dtype=np.uint32)
    got = abi.read(v.run(n, inputs={"x": x}, params={"steps": steps}).outputs["y"])
    # Checked at 8,192 elements (numpy over all of them takes seconds): a random sample and the
    # last elements, which a capped launch leaves to the longest-looping invocations.
    at = np.unique(np.concatenate([np.random.default_rng(4).integers(0, n, 4096), np.arange(n - 4096, n)]))
    want = x[at].astype(np.uint64)
    for s in range(steps):
        want = ((want ^ s) * 16777619) & 0xFFFFFFFF
    np.testing.assert_array_equal(got[at], want.astype(np.uint32))


def test_a_cpu_adapters_launch_of_the_largest_domain_fits_the_u32_the_entry_point_counts_in():
    # The entry point counts launched workgroups in u32: a fold past 2**32 - 1 of them wraps
    # its step and runs logical groups many times over.
    for workgroup in ((1, 1, 1), (64, 1, 1), (8, 8, 1)):
        domain = geometry.as_domain(0xFFFFFFFF)
        cap = geometry.group_cap(workgroup, "llvmpipe (LLVM 15.0.6, 256 bits) (CPU, Vulkan)")
        _, physical = geometry.dispatch_fields(domain, workgroup, 65535, cap)
        assert physical[0] * physical[1] * physical[2] <= 0xFFFFFFFF - 65535, (workgroup, physical)


def test_buffer_counts_may_name_the_grid_axes_as_the_parser_allows():
    # Review helper 32: nx/ny/nz passed parse, lowering and bake, then every run refused them
    # ("unknown name 'nx'"): only texture sizes saw them.
    yaml = 'bindings:\n  - { name: row, kind: buffer, access: read_write, element: u32, count: "ny" }\n  - { name: all, kind: buffer, access: read_write, element: u32, count: "nx * ny" }\nworkgroup: [8, 8]\n'
    wgsl = (
        "@compute @workgroup_size(8, 8)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
        "    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n"
        "    all_set(i, gid.x + 100u * gid.y);\n    if (gid.x == 0u) { row_set(gid.y, gid.y); }\n}\n"
    )
    v = abi.program(key="t/grid_counts", schema=abi.parse(yaml, "t/grid_counts/bindings.yaml"), wgsl=wgsl).variant()
    run = v.run(n=(16, 5))
    assert run.outputs["all"].count == 80 and run.outputs["row"].count == 5
    x, y = np.meshgrid(np.arange(16), np.arange(5))
    np.testing.assert_array_equal(abi.read(run.outputs["all"]), (x + 100 * y).reshape(-1).astype(np.uint32))
    np.testing.assert_array_equal(abi.read(run.outputs["row"]), np.arange(5, dtype=np.uint32))
    flat = v.run(n=7)  # a 1-D domain: nx = n, ny = 1
    assert flat.outputs["all"].count == 7 and flat.outputs["row"].count == 1
