"""Natural vector storage and the generated grid-stride loop, run on the device (lavapipe).

vec2/vec4 kernels read and write whole elements (checked against numpy, odd and empty
counts included); with the launch cap lowered to a few workgroups, the entry point's loop
still runs every element exactly once, keeps workgroup memory zeroed per logical workgroup
and keeps 2-D coordinates right.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_plugin import abi
from engine_plugin.lowering import geometry

pytestmark = pytest.mark.gpu

VEC_YAML = """\
bindings:
  - { name: x, kind: buffer, access: read, element: T }
  - { name: y, kind: buffer, access: read_write, element: T, count: "len(x)" }
  - { name: lens, kind: buffer, access: read_write, element: u32, count: "4" }
specialize:
  - { name: T, options: [vec4<f32>, vec2<f32>, vec4<i32>, vec2<u32>, f32] }
workgroup: 64
"""
VEC_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i == 0u) {
        lens_set(0u, x_len());
        lens_set(1u, arrayLength(&x));
        lens_set(2u, y_len());
        lens_set(3u, arrayLength(&y));
    }
    if (i >= x_len()) { return; }
    let v = x_get(i);
    y_set(i, v + v + T(1));
}
"""
_DTYPE = {"f32": np.float32, "i32": np.int32, "u32": np.uint32}


def _vec_variant(t: str):
    program = abi.program(key="t15/vec", schema=abi.parse(VEC_YAML, "t15/vec/bindings.yaml"), wgsl=VEC_WGSL)
    return program.variant(specialize={"T": t})


@pytest.mark.parametrize("t", ["vec4<f32>", "vec2<f32>", "vec4<i32>", "vec2<u32>", "f32"])
@pytest.mark.parametrize("count", [1, 3, 63, 65, 257, 1001])
def test_vector_kernels_read_and_write_whole_elements_like_numpy(t, count):
    lanes = int(t[3]) if t.startswith("vec") else 1
    scalar = t[-4:-1] if lanes > 1 else t
    rng = np.random.default_rng(count)
    shape = (count, lanes) if lanes > 1 else (count,)
    x = rng.integers(0, 1000, size=shape).astype(_DTYPE[scalar])
    run = _vec_variant(t).run(n=count, inputs={"x": x})
    np.testing.assert_array_equal(abi.read(run.outputs["y"]), x + x + 1)
    # arrayLength counts whole elements, like NAME_len()
    np.testing.assert_array_equal(abi.read(run.outputs["lens"]), [count] * 4)


@pytest.mark.parametrize("t", ["vec4<f32>", "vec2<u32>"])
def test_an_empty_vector_input_binds_and_reports_no_elements(t):
    lanes = int(t[3])
    x = np.zeros((0, lanes), _DTYPE[t[-4:-1]])
    run = _vec_variant(t).run(n=1, inputs={"x": x})
    assert abi.read(run.outputs["y"]).size == 0
    assert abi.read(run.outputs["lens"])[0] == 0  # NAME_len(); arrayLength covers one padding element


def test_a_vec4_output_chains_into_a_vec4_input_and_a_scalar_one():
    v4 = _vec_variant("vec4<f32>")
    x = np.arange(28, dtype=np.float32).reshape(7, 4)
    first = v4.run(n=7, inputs={"x": x}).outputs["y"]
    second = v4.run(n=7, inputs={"x": first}).outputs["y"]
    np.testing.assert_array_equal(abi.read(second), (x + x + 1) * 2 + 1)
    scalar = _vec_variant("f32").run(n=28, inputs={"x": first}).outputs["y"]  # the same words, as 28 f32
    np.testing.assert_array_equal(abi.read(scalar), ((x + x + 1) * 2 + 1).ravel())


# --------------------------------------------------------------------- grid-stride loop
COVER_YAML = """\
bindings:
  - { name: hits, kind: buffer, access: read_write, element: u32, count: "n", atomic: true }
  - { name: seen_by, kind: buffer, access: read_write, element: u32, count: "n" }
specialize:
  - { name: WG, kind: workgroup, options: [64, 1, 256], default: 64 }
workgroup: WG
"""
COVER_WGSL = """\
@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    hits_atomic_add(i, 1u);
    seen_by_set(i, wid.x);
}
"""


@pytest.fixture
def few_groups(monkeypatch, gpu):
    """Launch at most ``k`` workgroups a dispatch (what a big GPU caps far larger domains at)."""

    def set_cap(k: int, wg: int) -> None:
        monkeypatch.setitem(geometry.INVOCATION_BUDGET, "cpu", k * wg)
        monkeypatch.setitem(geometry.INVOCATION_BUDGET, "gpu", k * wg)
        gpu.cache("group_cap").clear()

    yield set_cap
    gpu.cache("group_cap").clear()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    wg=st.sampled_from([64, 1, 256]),
    groups=st.integers(0, 9),
    delta=st.sampled_from([-1, 0, 1]),
    launched=st.integers(1, 5),
)
def test_the_grid_stride_entry_point_runs_every_element_exactly_once(few_groups, wg, groups, delta, launched):
    n = max(0, groups * wg + delta)
    few_groups(launched, wg)
    v = abi.program(key="t15/cover", schema=abi.parse(COVER_YAML), wgsl=COVER_WGSL).variant(specialize={"WG": str(wg)})
    run = v.run(n=n)
    if n == 0:
        return
    np.testing.assert_array_equal(abi.read(run.outputs["hits"]), np.ones(n, np.uint32))
    # workgroup_id is the logical group's, whatever physical group ran it
    np.testing.assert_array_equal(abi.read(run.outputs["seen_by"]), np.arange(n) // wg)


GRID_YAML = """\
bindings:
  - { name: out, kind: buffer, access: read_write, element: vec2<u32>, count: "n" }
workgroup: [8, 8]
"""
GRID_WGSL = """\
@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    out_set(i, gid.xy);
}
"""


@pytest.mark.parametrize("shape", [(17, 9), (64, 64), (3, 100)])
def test_a_two_dimensional_domain_keeps_its_coordinates_under_the_loop(few_groups, shape):
    few_groups(3, 64)
    v = abi.program(key="t15/grid", schema=abi.parse(GRID_YAML), wgsl=GRID_WGSL).variant()
    w, h = shape
    got = abi.read(v.run(n=(w, h)).outputs["out"])
    ys, xs = np.mgrid[0:h, 0:w]
    np.testing.assert_array_equal(got, np.stack([xs.ravel(), ys.ravel()], axis=1))


SHARED_YAML = """\
bindings:
  - { name: sums, kind: buffer, access: read_write, element: u32, count: "n" }
workgroup: 64
"""
SHARED_WGSL = """\
var<workgroup> acc: atomic<u32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_index) lii: u32) {
    let i = zero_index(gid);
    if (i < zero_n()) { atomicAdd(&acc, 1u); }
    workgroupBarrier();
    if (i < zero_n()) { sums_set(i, atomicLoad(&acc)); }
}
"""


def test_workgroup_memory_starts_at_zero_in_every_logical_workgroup_of_the_loop(few_groups):
    few_groups(2, 64)
    v = abi.program(key="t15/shared", schema=abi.parse(SHARED_YAML), wgsl=SHARED_WGSL).variant()
    n = 64 * 7 + 5
    got = abi.read(v.run(n=n).outputs["sums"])
    want = np.full(n, 64, np.uint32)
    want[64 * 7 :] = 5
    np.testing.assert_array_equal(got, want)


PRIVATE_YAML = """\
bindings:
  - { name: x, kind: buffer, access: read, element: f32 }
  - { name: y, kind: buffer, access: read_write, element: f32, count: "len(x)" }
structs:
  Acc: { sum: f32, hits: u32 }
"""
PRIVATE_WGSL = """\
var<private> acc: f32;
var<private> seen: bool = false;
var<private> first = 7.0;
var<private> rec: Acc;
var<private> ring: array<f32, 3>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    acc += x_get(i);
    rec.hits += 1u;
    ring[1] += 1.0;
    y_set(i, acc + select(0.0, 1000.0, seen) + first + f32(rec.hits - 1u) * 100.0 + (ring[1] - 1.0) * 10000.0);
    seen = true;
    first = 0.0;
}
"""


def test_private_variables_start_fresh_in_every_logical_workgroup_of_the_loop(few_groups):
    # Review helper 79: the grid-stride loop called the body again with the previous logical
    # workgroup's private state (768 of 1,024 values wrong with 4 groups launched for 16); a GPU
    # adapter loops past 2**23 invocations.
    few_groups(4, 64)
    v = abi.program(key="t15/private", schema=abi.parse(PRIVATE_YAML), wgsl=PRIVATE_WGSL).variant()
    x = np.arange(1024, dtype=np.float32)
    run = v.run(n=1024, inputs={"x": x})
    assert run.groups[0] * run.groups[1] * run.groups[2] == 4  # the loop ran four logical groups a physical one
    np.testing.assert_array_equal(abi.read(run.outputs["y"]), x + 7.0)


ATOMIC_TYPES_YAML = """\
bindings:
  - { name: x, kind: buffer, access: read, element: u32 }
  - { name: y, kind: buffer, access: read_write, element: u32, count: "3 * ceil(n / 64)" }
"""
ATOMIC_TYPES_WGSL = """\
struct Acc { hits: atomic<u32>, @align(16) total: atomic<u32>, spare: array<atomic<u32>, 3> }
alias Counter = atomic<u32>;
alias Bins = array<Acc, 2>;
var<workgroup> acc: Acc;
var<workgroup> count: Counter;
var<workgroup> bins: Bins;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = zero_index(gid);
    var v = 0u;
    if (i < zero_n()) { v = x_get(i); atomicAdd(&count, 1u); }
    atomicAdd(&acc.total, v);
    atomicAdd(&bins[v & 1u].spare[2], v);
    workgroupBarrier();
    if (li == 0u) {
        y_set(3u * wid.x, atomicLoad(&acc.total));
        y_set(3u * wid.x + 1u, atomicLoad(&count));
        y_set(3u * wid.x + 2u, atomicLoad(&bins[1].spare[2]));
    }
}
"""


def test_workgroup_structs_and_aliases_holding_atomics_start_zeroed_in_every_logical_workgroup(few_groups):
    # Review helper 79: the zeroing wrote `acc = Acc();`, which a type holding atomics cannot
    # be: a compile error in generated code, naming no line of the user's.
    few_groups(2, 64)
    v = abi.program(key="t15/wg_atomic_types", schema=abi.parse(ATOMIC_TYPES_YAML), wgsl=ATOMIC_TYPES_WGSL).variant()
    x = np.arange(7, 7 + 400, dtype=np.uint32)
    got = abi.read(v.run(n=400, inputs={"x": x}).outputs["y"]).reshape(-1, 3)
    groups = [x[g * 64 : (g + 1) * 64] for g in range(7)]
    want = np.array([[g.sum(), g.size, g[g & 1 == 1].sum()] for g in groups], dtype=np.uint32)
    np.testing.assert_array_equal(got, want)


SHIFTS_YAML = """\
bindings:
  - { name: y, kind: buffer, access: read_write, element: u32, count: "n" }
determinism: float_order
"""
SHIFTS_WGSL = """\
var<private> m: u32 = 1u << 3u;
var<private> b: bool = 2 > 3;
var<private> c = (3 < 2) || (8u >> 1u) != 4u;
var<workgroup> seen: array<atomic<u32>, (1u << 6u)>;
fn helper() -> u32 { var k = 0u; k += 1u; return k; }
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let i = zero_index(gid);
    let before = atomicAdd(&seen[li], helper());
    if (i >= zero_n()) { return; }
    y_set(i, m + select(0u, 100u, b) + select(0u, 1000u, c) + before * 10000u);
    m += 1u;
    b = true;
    c = true;
}
"""


def test_initialisers_that_shift_or_compare_are_reset_and_zeroed_too(few_groups):
    # Review helper 82: a `<<`, `<` or `>` in an initialiser (or a template length) unbalanced
    # the declaration scanner: the variable was never reset (8, 9, 10, 11 where 8 throughout),
    # or the reset swallowed the next declaration and compiling failed in generated code.
    few_groups(4, 64)
    v = abi.program(key="t15/private_shifts", schema=abi.parse(SHIFTS_YAML), wgsl=SHIFTS_WGSL).variant()
    np.testing.assert_array_equal(abi.read(v.run(n=1024).outputs["y"]), np.full(1024, 8, np.uint32))
