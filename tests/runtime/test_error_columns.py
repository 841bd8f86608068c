"""A run's or a product's refusal names the user's bindings.yaml line and column, with the
line and a caret under the entry it is about (the brief: file, line and column)."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.engine import Engine, ProductError
from engine_plugin.errors import DispatchError
from engine_plugin.gpu import NoGpuBackend, ReadbackPolicy
from engine_plugin.world import World

pytestmark = pytest.mark.gpu

YAML = """\
bindings:
  - { name: chunks, kind: buffer, access: read, element: u32 }
  - { name: src,    kind: buffer, access: read, element: f32 }
  -   name: out
      kind: buffer
      access: read_write
      element: vec4<f32>
      count: "n"
params:
    - { name: a, type: f32 }
"""
WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    out_set(i, vec4<f32>(params.a * src_get(chunks_get(i))));
}
"""


def _program():
    return abi.program(key="t15/errcols", schema=abi.parse(YAML, "t15/errcols/bindings.yaml"), wgsl=WGSL, wgsl_path="t15/errcols/kernel.wgsl")


@pytest.mark.parametrize(
    ("kwargs", "line", "col"),
    [
        ({"inputs": {"chunks": np.zeros(4, np.uint32), "src": np.zeros(4, np.complex64)}, "params": {"a": 1.0}}, 3, 5),  # a flow mapping
        ({"inputs": {"chunks": np.zeros(4, np.uint32), "src": np.zeros(4, np.float32)}, "params": {}}, 10, 7),  # deeper indentation
        ({"inputs": {"chunks": np.zeros(4, np.uint32), "src": np.zeros(4, np.float32)}, "params": {"a": "z"}}, 10, 7),
    ],
)
def test_dispatch_errors_name_the_line_and_column_with_a_caret(kwargs, line, col):
    variant = _program().variant()
    with pytest.raises(DispatchError) as info:
        variant.run(4, **kwargs)
    err = info.value
    assert (err.path, err.line, err.col) == ("t15/errcols/bindings.yaml", line, col)
    text = str(err)
    assert text.startswith(f"t15/errcols/bindings.yaml:{line}:{col}: ")
    source, caret = text.splitlines()[1:3]
    assert source.strip() == YAML.splitlines()[line - 1].strip()
    assert caret.index("^") - 4 == col - 1  # under the entry's first character


def test_a_product_contract_refusal_names_the_line_and_column():
    world = World((4, 4), {"h": np.float32}, max_chunks=4)
    engine = Engine(world, backend=NoGpuBackend())
    with pytest.raises(ProductError) as info:  # its field input names no world field
        engine.register_product(_program(), key="p", fields={"src": "nope"}, apply=lambda r: None, params={"a": 1.0}, policy=ReadbackPolicy.SUMMARY)
    err = info.value
    assert err.line == 3 and err.col == 5, str(err)
    assert str(err).startswith("t15/errcols/bindings.yaml:3:5: ")
    assert "^" in str(err)


F32_PARAMS_YAML = """\
bindings:
  - { name: x, kind: buffer, access: read, element: f32 }
  - { name: y, kind: buffer, access: read_write, element: f32, count: "len(x)" }
params:
  - { name: a, type: f32 }
  - { name: m, type: mat2x2<f32> }
  - { name: v, type: vec2<f32> }
"""
F32_PARAMS_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    y_set(i, params.a * x_get(i) + params.m[0][0] + params.v.x);
}
"""


@pytest.mark.parametrize(("bad", "line"), [({"a": 1e40}, 5), ({"a": 10**400}, 5), ({"a": np.float64(-1e39)}, 5), ({"m": [[1e40, 0.0], [0.0, 1.0]]}, 6), ({"v": [0.0, -1e40]}, 7)])
def test_an_f32_param_past_f32s_range_is_a_dispatch_error_not_an_overflow_or_inf(bad, line):
    # A finite value that packs as inf: struct raised OverflowError out of run() (not a
    # PluginError), and a matrix went to the GPU as inf with a numpy warning.
    variant = abi.program(key="t15/f32params", schema=abi.parse(F32_PARAMS_YAML, "t15/f32params/bindings.yaml"), wgsl=F32_PARAMS_WGSL).variant()
    params = {"a": 1.0, "m": [[1.0, 0.0], [0.0, 1.0]], "v": [0.0, 0.0], **bad}
    with pytest.raises(DispatchError, match="past f32's range") as info:
        variant.run(4, inputs={"x": np.ones(4, np.float32)}, params=params)
    assert info.value.line == line
    y = variant.run(4, inputs={"x": np.ones(4, np.float32)}, params={"a": np.inf, "m": [[1.0, 0.0], [0.0, 1.0]], "v": [0.0, 0.0]}).outputs["y"]
    assert np.all(np.isinf(abi.read(y)))  # inf itself is a value one may ask for


def test_a_one_value_list_for_a_scalar_param_runs_as_the_value():
    # Review helper 46: check() took [2.0] for an f32, count expressions' scalars() raised a
    # raw TypeError (and set_params left the product on its CPU fallback).
    variant = abi.program(key="t15/f32params_list", schema=abi.parse(F32_PARAMS_YAML, "t15/f32params_list/bindings.yaml"), wgsl=F32_PARAMS_WGSL).variant()
    y = variant.run(4, inputs={"x": np.ones(4, np.float32)}, params={"a": [2.0], "m": [[1.0, 0.0], [0.0, 1.0]], "v": [0.0, 0.0]}).outputs["y"]
    np.testing.assert_array_equal(abi.read(y), np.full(4, 3.0, np.float32))


def test_a_long_double_past_float64s_range_is_refused_not_made_inf():
    variant = abi.program(key="t15/f32params_ld", schema=abi.parse(F32_PARAMS_YAML, "t15/f32params_ld/bindings.yaml"), wgsl=F32_PARAMS_WGSL).variant()
    huge = np.longdouble("1e400")
    if not np.isfinite(huge):
        pytest.skip("this platform's long double is float64")
    with pytest.raises(DispatchError, match="past f32's range"):
        variant.run(4, inputs={"x": np.ones(4, np.float32)}, params={"a": huge, "m": [[1.0, 0.0], [0.0, 1.0]], "v": [0.0, 0.0]})
    with pytest.raises(DispatchError, match="past f32's range"):
        variant.run(4, inputs={"x": np.ones(4, np.float32)}, params={"a": 1.0, "m": np.full((2, 2), huge), "v": [0.0, 0.0]})


def test_the_caret_line_is_counted_as_the_schema_counts_lines():
    # Review helper 46: str.splitlines() also splits at U+2028: a comment holding one moved
    # every later caret to another line.
    text = "# gain \u2028\n" + F32_PARAMS_YAML
    variant = abi.program(key="t15/ls", schema=abi.parse(text, "t15/ls/bindings.yaml"), wgsl=F32_PARAMS_WGSL).variant()
    with pytest.raises(DispatchError) as info:
        variant.run(4, inputs={"x": np.ones(4, np.float32)}, params={"a": "abc", "m": [[1.0, 0.0], [0.0, 1.0]], "v": [0.0, 0.0]})
    assert (info.value.line, info.value.col) == (6, 5)
    assert str(info.value).splitlines()[1].strip() == "- { name: a, type: f32 }"


def test_a_naga_error_with_a_hint_keeps_its_headline():
    # "function does not return any value" was dropped for its note alone (review helper 184).
    from engine_plugin.errors import CompileError

    yaml = 'bindings:\n  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n" }\n'
    wgsl = "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n    let w = dst_set(0u, 1.0);\n}\n"
    with pytest.raises(CompileError) as err:
        abi.program(key="t14/hint", schema=abi.parse(yaml, "hint/bindings.yaml"), wgsl=wgsl, wgsl_path="hint/kernel.wgsl").variant()
    assert "function does not return any value" in str(err.value) and "perhaps you meant" in str(err.value)
    assert (err.value.span.path, err.value.span.line, err.value.span.col) == ("hint/kernel.wgsl", 3, 13)
