"""Params of any type a uniform buffer holds: fixed arrays, matrices, in the YAML forms people
write (quoted, unquoted in a flow mapping, block style), packed from numpy by WGSL's rules."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.errors import DispatchError, SchemaError

pytestmark = pytest.mark.gpu

YAML = """\
workgroup: 1
bindings:
  - { name: out, kind: buffer, access: read_write, element: f32, count: "24" }
params:
  - { name: planes, type: array<vec4<f32>, 6> }
  - { name: m, type: mat4x4<f32> }
  - { name: s, type: f32 }
  - { name: m3, type: "mat3x3<f32>" }
  - name: ids
    type: array<vec4<u32>, 2>
  - { name: m2, type: mat2x2f }
"""
WGSL = """\
@compute @workgroup_size(1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x != 0u) { return; }
    for (var k = 0u; k < 6u; k++) { out_set(k, params.planes[k].w); }
    for (var c = 0u; c < 4u; c++) { out_set(6u + c, params.m[c].y); }
    out_set(10u, params.s);
    for (var c = 0u; c < 3u; c++) { for (var r = 0u; r < 3u; r++) { out_set(11u + c * 3u + r, params.m3[c][r]); } }
    out_set(20u, f32(params.ids[1].z));
    out_set(21u, params.m2[1][0]);
    out_set(22u, params.m2[0][1]);
}
"""


def variant():
    return abi.program(key="t17/params", schema=abi.parse(YAML, "p/bindings.yaml"), wgsl=WGSL).variant()


def test_arrays_and_matrices_reach_the_kernel_by_wgsl_layout():
    planes = np.arange(24, dtype=np.float32).reshape(6, 4)  # a frustum's planes
    m = np.arange(16, dtype=np.float64).reshape(4, 4)  # m[c] is column c (WGSL's order)
    m3 = np.arange(9, dtype=np.float32).reshape(3, 3) + 100
    got = abi.read(
        variant().run(n=1, params={"planes": planes, "m": m, "s": 7.5, "m3": m3, "ids": [[1, 2, 3, 4], [5, 6, 7, 8]], "m2": [1, 2, 3, 4]}).outputs["out"]
    )
    np.testing.assert_array_equal(got[:6], planes[:, 3])
    np.testing.assert_array_equal(got[6:10], m[:, 1])
    assert got[10] == 7.5
    np.testing.assert_array_equal(got[11:20], m3.ravel())  # the mat3's columns sit 16 bytes apart
    assert got[20] == 7 and got[21] == 3 and got[22] == 2  # mat2x2 from a flat list, column by column


def test_a_param_of_the_wrong_shape_is_refused_naming_its_line():
    good = {"planes": np.zeros((6, 4)), "m": np.eye(4), "s": 1.0, "m3": np.eye(3), "ids": np.zeros((2, 4)), "m2": np.eye(2)}
    with pytest.raises(DispatchError, match=r"param 'planes' \(array<vec4<f32>, 6>\) takes 24 numbers") as info:
        variant().run(n=1, params={**good, "planes": np.zeros((5, 4))})
    assert info.value.span.line == 5
    with pytest.raises(DispatchError, match="out of range"):
        variant().run(n=1, params={**good, "ids": -np.ones((2, 4))})


@pytest.mark.parametrize("name, value", [("ids", [[1, 2, 3, 4], [5, True, 7, 8]]), ("m2", [True, 0, 0, 1]), ("m2", ((1.0, False), (0.0, 1.0)))])
def test_a_bool_inside_an_array_or_matrix_param_is_refused_as_in_a_vector(name, value):
    # Review helper 136: a vec4 param refused [True, 2, 3, 4], an array or matrix packed a
    # bool nested in it as 1 (numpy makes the list integers).
    good = {"planes": np.zeros((6, 4)), "m": np.eye(4), "s": 1.0, "m3": np.eye(3), "ids": np.zeros((2, 4)), "m2": np.eye(2)}
    with pytest.raises(DispatchError, match=rf"param '{name}' .* takes numbers, not"):
        variant().run(n=1, params={**good, name: value})


def test_a_matrix_of_the_right_count_but_not_its_shape_is_refused_not_packed_transposed():
    # Review helper 109: a row-major (3, 2) matrix handed to a mat2x3 param (which takes
    # (columns, rows) = (2, 3)) was packed by count: m * (1, 10) gave [41, 52, 63] for [21, 43, 65].
    yaml = 'bindings:\n  - { name: out, kind: buffer, access: read_write, element: vec3<f32>, count: "1" }\nparams:\n  - { name: m, type: "mat2x3<f32>" }\nworkgroup: 1\n'
    body = "@compute @workgroup_size(1)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n    out_set(0u, params.m * vec2<f32>(1.0, 10.0));\n}\n"
    v = abi.program(key="t/param_mat_shape", schema=abi.parse(yaml, "t/pms/bindings.yaml"), wgsl=body).variant()
    rows = np.array([[1, 2], [3, 4], [5, 6]], np.float32)
    with pytest.raises(DispatchError, match=r"shape \(2, 3\)\), not shape \(3, 2\): a matrix is \(columns, rows\), pass M.T") as info:
        v.run(n=1, params={"m": rows})
    assert info.value.span.line == 4
    np.testing.assert_array_equal(abi.read(v.run(n=1, params={"m": rows.T}).outputs["out"])[0], rows @ [1, 10])
    np.testing.assert_array_equal(abi.read(v.run(n=1, params={"m": rows.T.reshape(-1)}).outputs["out"])[0], rows @ [1, 10])  # flat: column by column
    with pytest.raises(DispatchError, match=r"not shape \(4, 6\)"):
        variant().run(n=1, params={"planes": np.zeros((4, 6)), "m": np.eye(4), "s": 1.0, "m3": np.eye(3), "ids": np.zeros((2, 4)), "m2": np.eye(2)})


@pytest.mark.parametrize(
    "type_,message",
    [
        ("array<f32, 8>", "16-byte array stride there and f32 takes 4; use array<vec4<f32>, 2>"),
        ("array<vec4<f32>>", "has no length"),
        ("mat4x4<i32>", "param type must be"),
        ("array<vec4<f32>, N>", "must be a number"),
    ],
)
def test_types_a_uniform_cannot_hold_are_refused_with_the_fix(type_, message):
    with pytest.raises(SchemaError, match=message) as info:
        abi.parse(f'bindings: []\nparams:\n  - {{ name: p, type: "{type_}" }}\n', "p/bindings.yaml")
    assert info.value.span.line == 3


@pytest.mark.parametrize("ptype, cols, rows", [("array<mat2x2<f32>, 2>", 2, 2), ("array<mat4x2<f32>, 2>", 4, 2)])
def test_a_params_array_of_two_row_matrices_compiles_and_reads_every_value(ptype, cols, rows):
    # The host packs a uniform array 16-aligned; the struct member had no @align(16), so naga
    # took the element's 8 and refused the offset: a documented type that never compiled
    # (review helper 62).
    from engine_plugin import abi

    reads = " ".join(f"out_set({(k * cols + c) * rows + r}u, params.m[{k}][{c}][{r}]);" for k in range(2) for c in range(cols) for r in range(rows))
    yaml = f'bindings:\n  - {{ name: out, kind: buffer, access: read_write, element: f32, count: "{2 * cols * rows}" }}\nparams:\n  - {{ name: m, type: "{ptype}" }}\nworkgroup: 1\n'
    body = f"@compute @workgroup_size(1)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {{\n    if (gid.x != 0u) {{ return; }}\n    {reads}\n}}\n"
    variant = abi.program(key=f"t/param_mat_array_{cols}", schema=abi.parse(yaml, "t/pm/bindings.yaml"), wgsl=body).variant()
    value = np.arange(2 * cols * rows, dtype=np.float32).reshape(2, cols, rows)  # m[k][column][row]
    got = abi.read(variant.run(n=1, params={"m": value}).outputs["out"])
    np.testing.assert_array_equal(got, value.reshape(-1))


@pytest.mark.parametrize(
    "written",
    [
        "array<array<vec4<f32>, 2>, 3>",
        "array<array<vec4<f32>,2>,3>",
        '"array<array<vec4<f32>, 2>, 3>"',
        "array<array<vec4<f32>,   # two rows\n      2>, 3>",  # a comment inside (helper 82: it was pasted into the type)
    ],
)
def test_a_nested_array_param_unquoted_in_a_flow_mapping_is_one_type(written):
    # Review helper 77: YAML split the unquoted form at both commas; the stray key '3>' was
    # refused as an unknown key of the param.
    yaml = f"""workgroup: 1
bindings:
  - {{ name: out, kind: buffer, access: read_write, element: f32, count: "6" }}
params:
  - {{ name: grid, type: {written} }}
  - {{ name: s, type: f32 }}
"""
    wgsl = """@compute @workgroup_size(1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x != 0u) { return; }
    for (var a = 0u; a < 3u; a++) { for (var b = 0u; b < 2u; b++) { out_set(a * 2u + b, params.grid[a][b].z + params.s); } }
}
"""
    schema = abi.parse(yaml, "nested/bindings.yaml")
    assert [(p.name, p.type) for p in schema.params] == [("grid", "array<array<vec4<f32>, 2>, 3>"), ("s", "f32")]
    grid = np.arange(24, dtype=np.float32).reshape(3, 2, 4)
    got = abi.read(abi.program(key=f"t17/nested{len(written)}", schema=schema, wgsl=wgsl).variant().run(n=1, params={"grid": grid, "s": 0.5}).outputs["out"])
    np.testing.assert_array_equal(got, grid[:, :, 2].ravel() + 0.5)


BITS_YAML = """\
workgroup: 1
bindings:
  - { name: out, kind: buffer, access: read_write, element: u32, count: "4" }
params:
  - { name: v, type: vec2<f32> }
  - { name: m, type: mat2x2<f32> }
"""
BITS_WGSL = """\
@compute @workgroup_size(1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x != 0u) { return; }
    out_set(0u, bitcast<u32>(params.v.x));
    out_set(1u, bitcast<u32>(params.v.y));
    out_set(2u, bitcast<u32>(params.m[0][0]));
    out_set(3u, bitcast<u32>(params.m[0][1]));
}
"""
SNAN = np.array([0x7F800001], "<u4").view("<f4")[0]
QNAN = np.array([0x7FC00001], "<u4").view("<f4")[0]
ID = [[1.0, 0.0], [0.0, 1.0]]


def _bits_variant(key: str):
    return abi.program(key=key, schema=abi.parse(BITS_YAML, "bits/bindings.yaml"), wgsl=BITS_WGSL).variant()


def _words(variant, v, m=ID) -> list[int]:
    return [int(w) for w in abi.read(variant.run(n=1, params={"v": v, "m": m}).outputs["out"]).view("<u4")]


def test_a_list_param_differing_from_the_last_only_past_float64_is_checked_and_packed_anew():
    # Review helper 215: the fingerprint that lets an identical set skip its checks and reuse
    # its bytes went through one float64 array: [2**53 + 1, 0.5] matched [2**53, 0.5] (and a
    # signalling NaN matched a quiet one), so the second set ran with the first one's bytes.
    v = _bits_variant("t17/fingerprint_big")
    assert _words(v, [2**53, 0.5])[0] == int(np.float32(2**53).view(np.uint32))
    with pytest.raises(DispatchError, match=r"9007199254740993 is not exactly an f32"):
        v.run(n=1, params={"v": [2**53 + 1, 0.5], "m": ID})
    assert _words(v, [SNAN, 1.0])[0] == 0x7F800001
    assert _words(v, [QNAN, 1.0])[0] == 0x7FC00001


def test_a_matrix_param_mixing_floats_with_an_inexact_integer_is_refused_as_a_vector_is():
    # Review helper 215: numpy made [[16777217, 0.5], ...] float64 first, so the integer an f32
    # rounds (refused in a vector, or in a matrix of integers alone) ran as 16777216.
    v = _bits_variant("t17/matrix_inexact")
    for m in ([[16777217, 0.5], [3, 4]], [[2**53 + 1, 0.5], [3, 4]], [[np.int64(16777217), 0.5], [3, 4]], [np.array([16777217, 2]), [0.5, 1.0]]):
        with pytest.raises(DispatchError, match=r"is not exactly an f32") as caught:
            v.run(n=1, params={"v": [1.0, 2.0], "m": m})
        assert "bits/bindings.yaml" in str(caught.value)
    assert _words(v, [1.0, 2.0], [[16777216, 0.5], [3, 4]])[2] == int(np.float32(16777216).view(np.uint32))


def test_a_matrix_param_keeps_a_float32_elements_bits_in_a_list_as_a_vector_does():
    # Review helper 215: the list went through float64, which quiets a signalling NaN.
    v = _bits_variant("t17/matrix_snan")
    words = _words(v, [SNAN, 1.0], [[SNAN, np.float32(-0.0)], [0.0, 1.0]])
    assert words[0] == 0x7F800001 and words[2] == 0x7F800001 and words[3] == 0x80000000
