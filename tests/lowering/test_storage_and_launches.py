"""Storage the card likes and no wasted launches (issue 15), checked without a device.

- Buffers of f32/i32/u32/vec2/vec4 are declared with their natural WGSL element, so a vec4
  access is one 16-byte load or store; vec3, ``bits`` and ``atomic`` buffers stay flat words.
- The dispatch fold is tight (less than one row of padding groups) and, with a cap, launches
  at most the cap; the generated entry point's grid-stride loop then visits every logical
  workgroup exactly once.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_plugin.lowering import lower, parse
from engine_plugin.lowering.geometry import INVOCATION_BUDGET, Domain, dispatch_fields, fold_groups, group_cap

YAML = """\
bindings:
  - { name: a, kind: buffer, access: read, element: ELEM }
  - { name: o, kind: buffer, access: read_write, element: ELEM, count: "n"EXTRA }
"""
BODY = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    o_set(i, a_get(i));
}
"""


def _lowered(elem: str, extra: str = ""):
    return lower(parse(YAML.replace("ELEM", elem).replace("EXTRA", extra)), BODY)


def _declared(source: str, name: str) -> str:
    return re.search(rf"var<storage, [a-z_]+> {name}: (.+);", source).group(1)  # type: ignore[union-attr]


@pytest.mark.parametrize("elem", ["f32", "i32", "u32", "vec2<f32>", "vec2<i32>", "vec4<f32>", "vec4<u32>", "vec4f", "vec2u"])
def test_scalar_vec2_and_vec4_buffers_are_declared_with_their_natural_element(elem):
    lowered = _lowered(elem)
    wgsl = lowered.bindings[0].scalar if lowered.bindings[0].lanes == 1 else f"vec{lowered.bindings[0].lanes}<{lowered.bindings[0].scalar}>"
    assert _declared(lowered.source, "a") == f"array<{wgsl}>"
    assert _declared(lowered.source, "o") == f"array<{wgsl}>"
    # one access per element, no flat word arithmetic
    assert f"fn a_get(zero_i: u32) -> {wgsl} {{ return a[zero_i]; }}" in lowered.source
    assert f"fn o_set(zero_i: u32, zero_v: {wgsl}) {{ o[zero_i] = zero_v; }}" in lowered.source
    assert lowered.bindings[0].storage_type == f"array<{wgsl}>"


@pytest.mark.parametrize("elem,extra", [("vec3<f32>", ""), ("vec3<u32>", ""), ("vec4<f32>", ", bits: true"), ("vec2<f32>", ", bits: true")])
def test_vec3_and_bits_buffers_keep_flat_words(elem, extra):
    lowered = _lowered(elem, extra)
    lanes = int(elem[3])
    out = _declared(lowered.source, "o")
    assert out in ("array<u32>", "array<f32>")
    assert f"let zero_b = zero_i * {lanes}u;" in lowered.source
    assert lowered.slot("o").lanes == lanes  # type: ignore[union-attr]


def test_atomic_buffers_keep_atomic_words():
    lowered = lower(parse("bindings:\n  - { name: h, kind: buffer, access: read_write, element: u32, count: \"n\", atomic: true }\n"), BODY.replace("o_set(i, a_get(i));", "h_atomic_add(i, 1u);"))
    assert _declared(lowered.source, "h") == "array<atomic<u32>>"


def test_an_empty_natural_vector_binding_still_covers_one_element():
    # WebGPU binds no less than one element of the declared array; the runtime pads to this.
    sizes = {b.name: b.min_binding_size for b in _lowered("vec4<f32>").bindings}
    assert sizes["a"] == 16 and sizes["o"] == 16 and sizes["params"] == 4
    assert {b.name: b.min_binding_size for b in _lowered("vec2<i32>").bindings}["a"] == 8
    assert {b.name: b.min_binding_size for b in _lowered("vec3<f32>").bindings}["a"] == 4
    assert {b.name: b.min_binding_size for b in _lowered("f32").bindings}["a"] == 4


def test_host_layout_of_vectors_is_unchanged_flat_words():
    # The host contract: a vecN element is N words (vec3: 12 bytes), whatever WGSL declares.
    for elem, nbytes in (("vec2<f32>", 8), ("vec3<f32>", 12), ("vec4<f32>", 16), ("f32", 4)):
        assert _lowered(elem).slot("a").value_type.bytes == nbytes  # type: ignore[union-attr]


# ------------------------------------------------------------------ the fold and the cap
@settings(max_examples=400, deadline=None)
@given(total=st.integers(0, 65535**2), max_groups=st.sampled_from([65535, 1024, 7]))
def test_the_fold_launches_less_than_one_row_of_padding_groups(total, max_groups):
    if total > max_groups**2:
        total = total % (max_groups**2) + 1
    px, py, pz = fold_groups(total, max_groups)  # type: ignore[misc]
    assert max(px, py, pz) <= max_groups
    launched = px * py * pz
    assert launched >= total
    assert launched - total < max(px, 1)  # at most one partial row
    assert pz == (0 if total == 0 else 1)


@settings(max_examples=200, deadline=None)
@given(total=st.integers(65535**2 + 1, 65535**2 * 40))
def test_a_fold_into_planes_wastes_less_than_one_plane(total):
    px, py, pz = fold_groups(total, 65535)  # type: ignore[misc]
    assert max(px, py, pz) <= 65535
    assert 0 <= px * py * pz - total < px * py


@settings(max_examples=300, deadline=None)
@given(n=st.integers(0, (1 << 32) - 1), wg=st.sampled_from([1, 64, 256, 1024]), cap=st.integers(1, 1 << 17))
def test_a_capped_dispatch_launches_at_most_the_cap_and_still_names_every_logical_group(n, wg, cap):
    fields, (px, py, pz) = dispatch_fields(Domain((n, 1, 1)), (wg, 1, 1), 65535, cap)  # type: ignore[misc]
    total = -(-n // wg)
    assert fields["zero_gx"] * fields["zero_gy"] * fields["zero_gz"] == total
    launched = px * py * pz
    assert launched >= min(total, cap)
    assert launched - min(total, cap) < max(px, 1)


def _visits(total: int, launched: int) -> list[int]:
    """The logical workgroups the generated entry point runs, in Python (its loop, verbatim)."""
    seen = []
    for p in range(launched):
        lid = p
        while True:
            if lid >= total:
                break
            seen.append(lid)
            if total - lid <= launched:
                break
            lid += launched
    return seen


@settings(max_examples=300, deadline=None)
@given(total=st.integers(0, 5000), launched=st.integers(1, 700))
def test_the_grid_stride_loop_runs_every_logical_workgroup_exactly_once(total, launched):
    assert sorted(_visits(total, launched)) == list(range(total))


def test_the_entry_point_is_a_grid_stride_loop_over_logical_workgroups():
    source = _lowered("vec4<f32>").source
    assert "@builtin(num_workgroups) zero_nwg: vec3<u32>" in source
    assert "if (zero_total - zero_l <= zero_step) { break; }" in source
    assert "zero_l += zero_step;" in source


def test_the_group_cap_is_a_bounded_multiple_of_what_fills_the_adapter():
    h200 = "NVIDIA H200 (DiscreteGPU, Vulkan)"
    assert group_cap((256, 1, 1), h200) == INVOCATION_BUDGET["gpu"] // 256 == 32768  # 248 groups an SM of 132
    assert group_cap((64, 1, 1), h200) == 131072
    assert group_cap((8, 8, 1), "llvmpipe (LLVM 15.0.6, 256 bits) (CPU, Vulkan)") == INVOCATION_BUDGET["cpu"] // 64
    assert group_cap((1024, 1, 1), h200) >= 1
