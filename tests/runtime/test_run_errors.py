"""Bad runs fail with a DispatchError naming the binding and its bindings.yaml line, before any submission."""

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.errors import CompileError, DispatchError

from runtime_kernels import make

YAML = """\
bindings:
  - { name: src, kind: buffer, access: read, element: vec2<f32> }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "len(src) / k" }
params:
  - { name: k, type: u32 }
  - { name: scale, type: vec3<f32> }
"""
WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, src_get(i).x * params.scale.y);
}
"""


@pytest.fixture()
def variant():
    return make("t/errors", YAML, WGSL)


def good_params():
    return {"k": 1, "scale": (1.0, 2.0, 3.0)}


def test_vec3_param_is_packed_with_uniform_alignment(variant):
    src = np.ones((8, 2), np.float32)
    out = abi.read(variant.run(n=8, inputs={"src": src}, params=good_params()).outputs["dst"])
    np.testing.assert_array_equal(out, np.full(8, 2.0, np.float32))
    scale = variant.lowered.params.field("scale")
    assert scale.offset % 16 == 0


def expect_refused(variant, match, line=None, **kw):
    runs = variant.runs
    with pytest.raises(DispatchError, match=match) as info:
        variant.run(**kw)
    assert variant.runs == runs  # nothing submitted
    if line is not None:
        assert info.value.path == "t/errors/bindings.yaml"
        assert info.value.line == line
    return info.value


def test_count_expression_failing_for_these_inputs_names_the_binding_and_its_line(variant):
    err = expect_refused(variant, r"count of 'dst' \('len\(src\) / k'\): division by zero", line=3,
                         n=4, inputs={"src": np.ones((4, 2), np.float32)}, params={"k": 0, "scale": (1, 1, 1)})
    assert str(err).startswith("t/errors/bindings.yaml:3")


def test_missing_input_names_the_binding(variant):
    expect_refused(variant, r"missing input 'src' \(vec2<f32>\)", line=2, n=4, params=good_params())


def test_non_numeric_dtype_is_refused(variant):
    expect_refused(variant, "dtype <U1 is not numeric", line=2, n=1, inputs={"src": np.array(["a", "b"])}, params=good_params())


def test_wrong_lane_count_is_refused(variant):
    expect_refused(variant, "3 lanes in its last axis, the element vec2<f32> has 2", line=2, n=1, inputs={"src": np.ones((4, 3), np.float32)}, params=good_params())


def test_count_over_the_device_limit_is_refused_before_allocation(variant):
    expect_refused(variant, "this device binds at most", line=3, n=1,
                   inputs={"src": np.ones((4, 2), np.float32)}, params={"k": 1, "scale": (1, 1, 1)},
                   outputs=None) if False else None
    big = make("t/big", "bindings:\n  - { name: dst, kind: buffer, access: read_write, element: vec4<f32>, count: \"n * 100000000\" }\n",
               "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) { dst_set(zero_index(gid), vec4<f32>()); }\n")
    runs = big.runs
    with pytest.raises(DispatchError, match=r"count of 'dst'.*bytes; this device binds at most") as info:
        big.run(n=1000)
    assert big.runs == runs and info.value.line == 2


def test_params_of_the_wrong_type_are_refused(variant):
    src = np.ones((4, 2), np.float32)
    expect_refused(variant, r"param 'k' is u32, not 1.5", line=5, n=4, inputs={"src": src}, params={"k": 1.5, "scale": (1, 1, 1)})
    expect_refused(variant, r"param 'k' is u32: -1 is out of range", line=5, n=4, inputs={"src": src}, params={"k": -1, "scale": (1, 1, 1)})
    expect_refused(variant, r"param 'scale' takes 3 values", line=6, n=4, inputs={"src": src}, params={"k": 1, "scale": (1, 1)})
    expect_refused(variant, r"missing param 'scale'", line=6, n=4, inputs={"src": src}, params={"k": 1})
    expect_refused(variant, r"unknown param 'kk'", n=4, inputs={"src": src}, params={**good_params(), "kk": 1})


def test_unknown_input_and_negative_n_are_refused(variant):
    src = np.ones((4, 2), np.float32)
    expect_refused(variant, r"unknown input 'srcc'; this variant takes: src", n=4, inputs={"srcc": src}, params=good_params())
    expect_refused(variant, r"n must be a non-negative int", n=-1, inputs={"src": src}, params=good_params())


def test_an_output_buffer_smaller_than_its_count_is_refused(variant, gpu):
    import wgpu

    small = gpu.device.create_buffer(size=8, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    expect_refused(variant, r"outputs\['dst'\] holds 2 elements; 'dst' needs 4", line=3,
                   n=4, inputs={"src": np.ones((4, 2), np.float32)}, params=good_params(), outputs={"dst": small})


def test_wgsl_errors_point_at_the_users_own_file_and_line():
    schema = abi.parse(YAML, "t/bad/bindings.yaml")
    body = WGSL.replace("src_get(i).x * params.scale.y", "src_get(i) * params.scale.y")
    program = abi.program(key="t/bad", schema=schema, wgsl=body, wgsl_path="t/bad/kernel.wgsl")
    with pytest.raises(CompileError) as info:
        program.variant()
    err = info.value
    assert err.path == "t/bad/kernel.wgsl" and err.line == 5
    assert "kernel.wgsl:5:" in str(err) and "dst_set" in str(err)


def test_a_refused_run_kept_in_a_garbage_cycle_never_hands_a_released_buffer_to_a_later_run():
    # Review helper 30: a run refused after its outputs were allocated, its error kept in a
    # local (a frame <-> traceback cycle). The collector ran the buffer's finaliser (wgpu
    # released it) before the Output's, which gave the dead buffer to the pool: the next valid
    # run raised a raw TypeError from cffi.
    import gc

    from engine_plugin.errors import DispatchError

    yaml = """
bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n" }
  - { name: extra, kind: buffer, access: read_write, element: f32, count: "m" }
params:
  - { name: m, type: i32 }
"""
    wgsl = """
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, src_get(i) + 1.0); if (i == 0u) { extra_set(0u, 5.0); }
}
"""
    v = abi.program(key="t/refused_cycle", schema=abi.parse(yaml, "t/refused_cycle/bindings.yaml"), wgsl=wgsl).variant()

    def attempt() -> None:
        try:
            v.run(n=8, inputs={"src": np.zeros(8, np.float32)}, params={"m": -1})
        except DispatchError as e:
            kept = e  # noqa: F841 - the cycle a caller keeping the error makes

    for _ in range(3):
        attempt()
    gc.collect()
    for _ in range(3):
        out = v.run(n=8, inputs={"src": np.arange(8, dtype=np.float32)}, params={"m": 1}).outputs["dst"]
        np.testing.assert_array_equal(abi.read(out), np.arange(8, dtype=np.float32) + 1.0)
