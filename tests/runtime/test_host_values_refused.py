"""Host values a binding cannot take as they are are refused with a DispatchError, never cast
into other numbers or raised as a raw Python error (review helper 47's fuzzer and probes)."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.errors import DispatchError

pytestmark = pytest.mark.gpu

COPY_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    y_set(i, x_get(i));
}
"""


def copy(key: str, element: str):
    yaml = f"""bindings:
  - {{ name: x, kind: buffer, access: read, element: {element} }}
  - {{ name: y, kind: buffer, access: read_write, element: {element}, count: "len(x)" }}
"""
    return abi.program(key=key, schema=abi.parse(yaml, f"{key}/bindings.yaml"), wgsl=COPY_WGSL).variant()


def test_an_output_of_another_element_type_given_back_binds_only_its_own_bytes():
    # An 8-element f32 Output (32 bytes) given to a vec4 output was bound as 8 vec4 (128
    # bytes): rows 2-7 read back an earlier run's data from the pool's slack.
    f32, v4 = copy("t15h/f32", "f32"), copy("t15h/v4", "vec4<f32>")
    junk = v4.run(n=16, inputs={"x": np.full((16, 4), 99, np.float32)}).outputs["y"]
    abi.read(junk)
    del junk
    small = f32.run(n=8, inputs={"x": np.arange(8, dtype=np.float32)}).outputs["y"]
    out = v4.run(n=2, inputs={"x": np.ones((2, 4), np.float32)}, outputs={"y": small}).outputs["y"]
    assert out.capacity == 2
    np.testing.assert_array_equal(abi.read(out), np.ones((2, 4), np.float32))
    with pytest.raises(DispatchError, match="holds 2 elements; 'y' needs 3"):
        v4.run(n=3, inputs={"x": np.ones((3, 4), np.float32)}, outputs={"y": small})
    with pytest.raises(DispatchError, match="past the 2 vec4<f32> elements"):
        v4.run(n=2, inputs={"x": np.ones((2, 4), np.float32)}, outputs={"y": {"buffer": small, "capacity": 3}})


@pytest.mark.parametrize(("element", "values"), [("i32", [2147483648.0, 1.0]), ("u32", [4294967296.0, 5.0]), ("vec2<i32>", [[2147483648.0, 1.0]])])
def test_float32_values_just_past_an_int_range_are_refused(element, values):
    # numpy compared a float32 max with iinfo's int in float32 (2147483647 -> 2147483648.0).
    v = copy(f"t15h/range_{element.replace('<', '_').replace('>', '')}", element)
    with pytest.raises(DispatchError, match="outside"):
        v.run(n=1, inputs={"x": np.array(values, np.float32)})


STRUCT_YAML = """\
structs:
  P: { pos: vec3<f32>, id: u32, w: vec2<i32> }
bindings:
  - { name: x, kind: buffer, access: read, element: P }
  - { name: y, kind: buffer, access: read_write, element: P, count: "len(x)" }
"""


@pytest.mark.parametrize(("field", "value"), [("id", -1), ("w", [2147483648.0, 0.0]), ("w", [np.nan, 0.0])])
def test_struct_fields_are_cast_with_the_checks_a_plain_binding_makes(field, value):
    v = abi.program(key="t15h/struct", schema=abi.parse(STRUCT_YAML, "t15h/struct/bindings.yaml"), wgsl=COPY_WGSL).variant()
    a = np.zeros(1, [("pos", "<f4", 3), ("id", "<i4"), ("w", "<f4", 2)])
    a[field] = value
    with pytest.raises(DispatchError, match=f"field '{field}'"):
        v.run(n=1, inputs={"x": a})
    ok = np.zeros(2, [("pos", "<f4", 3), ("id", "<i4"), ("w", "<f4", 2)])
    ok["id"], ok["w"] = [3, 4], [[1.0, -2.0], [5.0, 6.0]]
    got = abi.read(v.run(n=2, inputs={"x": ok}).outputs["y"])
    np.testing.assert_array_equal(got["id"], [3, 4])
    np.testing.assert_array_equal(got["w"], [[1, -2], [5, 6]])


@pytest.mark.parametrize(
    "call",
    [
        lambda v, o: v.run(n=2, inputs={"x": [[1.0, 2.0], [3.0]]}),  # ragged
        lambda v, o: v.run(n=np.array([2, 2]), inputs={"x": np.ones(4, np.float32)}),  # an array as n
        lambda v, o: v.run(n=2, inputs={"x": np.ones(2, np.float32)}, outputs={"y": {"buffer": None}}),
        lambda v, o: v.run(n=2, inputs=[("x", np.ones(2, np.float32))]),  # pairs, not a mapping
        lambda v, o: v.run(n=2, inputs={"x": np.ones(2, np.float32)}, outputs={"y": {"buffer": o, "capacity": "2"}}),
        lambda v, o: v.run(n=2, inputs={"x": np.ones(2, np.float32)}, outputs={"y": {"buffer": o, "capacity": 1.5}}),
        lambda v, o: v.run(n=2, inputs={"x": np.ones(2, np.float32)}, outputs={"y": {"buffer": o, "counter": 5}}),
        # Review helper 194: a misspelt key was ignored (an append's counter dropped).
        lambda v, o: v.run(n=2, inputs={"x": np.ones(2, np.float32)}, outputs={"y": {"buffer": o, "countr": o.buffer}}),
        lambda v, o: v.run(n=2, inputs={"x": np.ones(2, np.float32)}, outputs={"y": {"buffer": o, "cap": 2}}),
    ],
)
def test_malformed_arguments_are_dispatch_errors(call):
    v = copy("t15h/f32_bad", "f32")
    out = v.run(n=4, inputs={"x": np.ones(4, np.float32)}).outputs["y"]
    v.run(n=4, inputs={"x": np.ones(4, np.float32)})  # a remembered run: the repeat path sees the call first
    with pytest.raises(DispatchError):
        call(v, out)


def test_one_value_is_not_a_vector_element():
    v = copy("t15h/v2", "vec2<f32>")
    with pytest.raises(DispatchError, match="not a vec2<f32> element"):
        v.run(n=1, inputs={"x": np.float32(5)})


def test_a_handed_back_buffer_reads_its_newest_outputs_elements_on_the_repeat_path_too():
    # Review helper 48: the repeat path collected the share and never made it: from the second
    # identical run, reading the handed-back buffer answered raw words of another type.
    v = copy("t15h/u32_share", "u32")
    first = v.run(n=8, inputs={"x": np.arange(100, 108, dtype=np.uint32)}).outputs["y"]
    buf = first.buffer
    src = v.run(n=2, inputs={"x": np.array([7, 9], np.uint32)}).outputs["y"]
    for _ in range(3):
        run = v.run(n=2, inputs={"x": src}, outputs={"y": buf})  # its Output is the buffer's newest
        got = abi.read(buf)
        assert got.dtype == np.uint32 and got.tolist() == [7, 9] and run.outputs["y"].count == 2


def test_len_of_a_given_output_is_what_it_holds_as_the_kernel_and_its_output_say():
    # Review helpers 48 and 77: a given Output is bound over its capacity, its NAME_len() and
    # its answered count say so, but len(y) in a count expression read this run's size: an
    # output sized from it was smaller than the kernel was told it may index. All four agree
    # now; what this run does not write of z reads as zeros (a fresh output).
    yaml = """bindings:
  - { name: x, kind: buffer, access: read, element: f32 }
  - { name: y, kind: buffer, access: read_write, element: f32, count: "len(x)" }
  - { name: z, kind: buffer, access: read_write, element: f32, count: "len(y)" }
"""
    wgsl = COPY_WGSL.replace("y_set(i, x_get(i));", "y_set(i, x_get(i)); z_set(i, 2.0 * x_get(i)); if (i == 0u) { z_set(z_len() - 1u, f32(y_len())); }")
    v = abi.program(key="t15h/sized_from", schema=abi.parse(yaml, "t15h/sized_from/bindings.yaml"), wgsl=wgsl).variant()
    big = v.run(n=16, inputs={"x": np.arange(16, dtype=np.float32)}).outputs["y"]
    run = v.run(n=4, inputs={"x": np.ones(4, np.float32)}, outputs={"y": big})
    assert run.outputs["y"].count == 16 and run.outputs["z"].capacity == 16
    want = np.zeros(16, np.float32)
    want[:4] = 2.0
    want[15] = 16.0  # y_len(), stored at z_len() - 1: in range
    np.testing.assert_array_equal(abi.read(run.outputs["z"]), want)


def test_a_given_append_output_too_small_is_refused_quoting_its_capacity_not_its_buffers():
    # Review helper 77: past its pooled buffer's size class the refusal quoted the buffer (32
    # elements) where the Output holds 8.
    yaml = """bindings:
  - { name: ap, kind: buffer, access: read_write, element: vec2<u32>, capacity: "n", append: true }
"""
    wgsl = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    ap_store(i, vec2<u32>(i));
    if (i == 0u) { ap_set_count(zero_n()); }
}
"""
    v = abi.program(key="t15h/append_small", schema=abi.parse(yaml, "t15h/append_small/bindings.yaml"), wgsl=wgsl).variant()
    held = v.run(n=8).outputs["ap"]
    assert held.capacity == 8
    for n in (20, 153):
        with pytest.raises(DispatchError, match=rf"holds 8 elements; 'ap' needs {n}\n"):
            v.run(n=n, outputs={"ap": held})


def test_a_refused_given_output_stays_pooled():
    # Review helper 48: reading the given Output's buffer handed it out before the checks: a
    # refused run marked it the caller's for good, and the pool lost it.
    import gc

    import engine_plugin.runtime.output as output

    f32, v4 = copy("t15h/f32_pool", "f32"), copy("t15h/v4_pool", "vec4<f32>")
    y = f32.run(n=4, inputs={"x": np.arange(4, dtype=np.float32)}).outputs["y"]
    buf = y._buffer
    with pytest.raises(DispatchError):
        v4.run(n=2, inputs={"x": np.ones((2, 4), np.float32)}, outputs={"y": y})  # holds 1 vec4, needs 2
    assert id(buf) not in output._escaped and output.output_of(buf) is None  # still pooled, still y's
    given_back = []
    pool = f32._pool
    real = pool.give
    pool.give = lambda b: given_back.append(b) or real(b)
    try:
        del y
        gc.collect()
    finally:
        del pool.give
    assert any(b is buf for b in given_back)  # back to the pool with y


def test_a_given_buffer_without_storage_usage_is_a_dispatch_error():
    import wgpu

    from engine_plugin.device.context import get_context

    plain = get_context().device.create_buffer(size=64, usage=wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
    with pytest.raises(DispatchError, match="lacks STORAGE"):
        copy("t15h/f32_usage", "f32").run(n=4, inputs={"x": np.ones(4, np.float32)}, outputs={"y": plain})


def test_empty_sequences_and_a_0d_capacity_are_taken():
    v = copy("t15h/f32_empty", "f32")
    np.testing.assert_array_equal(abi.read(v.run(n=2, inputs={"x": np.ones(2, np.float32)}, outputs=[]).outputs["y"]), np.ones(2, np.float32))
    out = v.run(n=4, inputs={"x": np.ones(4, np.float32)}).outputs["y"]
    got = v.run(n=3, inputs={"x": np.full(3, 2.0, np.float32)}, outputs={"y": {"buffer": out, "capacity": np.array(3)}}).outputs["y"]
    np.testing.assert_array_equal(abi.read(got), np.full(3, 2.0, np.float32))


ARRAY_PARAMS_YAML = """\
params:
  - { name: a, type: "array<vec4<i32>, 1>" }
bindings:
  - { name: y, kind: buffer, access: read_write, element: vec4<i32>, count: "1" }
"""
ARRAY_PARAMS_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (gid.x > 0u) { return; }
    y_set(0u, params.a[0]);
}
"""


def test_float32_array_params_just_past_an_int_range_are_refused_and_tables_cast_by_value():
    v = abi.program(key="t15h/array_params", schema=abi.parse(ARRAY_PARAMS_YAML, "t15h/array_params/bindings.yaml"), wgsl=ARRAY_PARAMS_WGSL).variant()
    with pytest.raises(DispatchError, match="out of range"):
        v.run(n=1, params={"a": np.array([[2147483648.0, 0, 0, 0]], np.float32)})
    for column in (np.array([2**31, 1], np.int64), np.array([1e40, 1.0]), np.array([2**32 + 5, 1], np.uint64)):
        with pytest.raises(DispatchError, match="table column 'c'"):
            abi.table({"c": column})
    np.testing.assert_array_equal(abi.read(abi.table({"c": np.array([3, 1], np.int64)}))["c"], [3, 1])


def test_a_cr_only_schema_keeps_its_column_and_caret():
    text = COPY_YAML_F32 = (
        'bindings:\r  - { name: x, kind: buffer, access: read, element: f32 }\r  - { name: y, kind: buffer, access: read_write, element: f32, count: "len(x)" }\r'
    )
    v = abi.program(key="t15h/cr", schema=abi.parse(text, "t15h/cr/bindings.yaml"), wgsl=COPY_WGSL).variant()
    with pytest.raises(DispatchError) as info:
        v.run(n=2, inputs={"x": np.zeros(2, np.complex64)})
    assert (info.value.line, info.value.col) == (2, 5) and "^" in str(info.value), COPY_YAML_F32


STORAGE_LOAD_YAML = """\
bindings:
  - {{ name: img, kind: storage_texture, format: {fmt}, access: read }}
  - {{ name: dst, kind: buffer, access: read_write, element: vec4<{scalar}>, count: "n" }}
workgroup: [8, 8]
"""
STORAGE_LOAD_WGSL = """\
@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, textureLoad(img, gid.xy));
}
"""


@pytest.mark.parametrize(
    ("fmt", "scalar", "texel", "want"),
    [
        ("rgba8unorm", "f32", np.array([0.5, 0.25, 1.0, 0.0], np.float32), np.array([128, 64, 255, 0]) / 255.0),  # floats scaled, as stored
        ("rgba8unorm", "f32", np.array([200, 255, 128, 0], np.uint8), np.array([200, 255, 128, 0]) / 255.0),  # its own bytes as they are
        ("rgba32uint", "u32", np.array([1.0, 5.0, 7.0, 9.0], np.float32), np.array([1, 5, 7, 9])),
        ("rgba32float", "f32", np.array([1, 2, 3], np.uint16), np.array([1.0, 2.0, 3.0, 1.0])),  # by value, an opaque alpha of 1
        ("rgba16float", "f32", np.array([True, False, True, True]), np.array([1.0, 0.0, 1.0, 1.0])),  # a mask: 1.0
    ],
)
def test_numpy_texels_go_into_a_storage_texture_as_the_values_the_kernel_reads(fmt, scalar, texel, want):
    # Review helper 51: cast by numpy's own rules, 0.5 into rgba8unorm read back as 0, and a
    # uint8 RGB array into rgba32float got an alpha of 255.
    v = abi.program(
        key=f"t15h/st_{fmt}_{texel.dtype}", schema=abi.parse(STORAGE_LOAD_YAML.format(fmt=fmt, scalar=scalar), "t15h/st/bindings.yaml"), wgsl=STORAGE_LOAD_WGSL
    ).variant()
    got = abi.read(v.run(n=(1, 1), inputs={"img": texel.reshape(1, 1, -1)}).outputs["dst"])
    np.testing.assert_allclose(got.reshape(-1), want, rtol=0, atol=1e-7)


@pytest.mark.parametrize(
    ("fmt", "scalar", "texel"),
    [
        ("rgba8unorm", "f32", np.array([300, -1, 2, 255], np.int32)),  # ints other than its own: ambiguous
        ("rgba8unorm", "f32", np.array([1.5, 0, 0, 0], np.float32)),  # past [0, 1]
        ("rgba8snorm", "f32", np.array([200, 255, 128, 0], np.uint8)),
        ("rgba32uint", "u32", np.array([-1, -5, 1.7, np.nan], np.float32)),
        ("rgba32float", "f32", np.array([1e300, 0, 0, 0], np.float64)),
        # Review helper 205: an image's bytes read 0-1 through a texture binding and 0-255 here.
        ("rgba16float", "f32", np.array([0, 128, 255, 255], np.uint8)),
        ("r32float", "f32", np.array([200], np.uint8)),
    ],
)
def test_texels_a_storage_format_cannot_hold_are_refused(fmt, scalar, texel):
    v = abi.program(
        key=f"t15h/stbad_{fmt}_{texel.dtype}",
        schema=abi.parse(STORAGE_LOAD_YAML.format(fmt=fmt, scalar=scalar), "t15h/stbad/bindings.yaml"),
        wgsl=STORAGE_LOAD_WGSL,
    ).variant()
    with pytest.raises(DispatchError, match="storage texture 'img'"):
        v.run(n=(1, 1), inputs={"img": texel.reshape(1, 1, -1)})


@pytest.mark.parametrize("columns", ["abc", None, np.zeros(3), {"a": [[1, 2], [3]]}])
def test_malformed_tables_are_dispatch_errors(columns):
    with pytest.raises(DispatchError, match="table"):
        abi.table(columns)
    with pytest.raises(DispatchError, match="distinct names"):
        abi.table({"a": np.zeros(2)}, order=["a", "a"])


def test_a_bool_mask_and_integer_texels_go_into_a_unorm_storage_texture_as_stored():
    v = abi.program(
        key="t15h/st_bool", schema=abi.parse(STORAGE_LOAD_YAML.format(fmt="rgba8unorm", scalar="f32"), "t15h/st_bool/bindings.yaml"), wgsl=STORAGE_LOAD_WGSL
    ).variant()
    np.testing.assert_array_equal(abi.read(v.run(n=(1, 1), inputs={"img": np.ones((1, 1, 4), bool)}).outputs["dst"]).reshape(-1), np.ones(4, np.float32))
    got = abi.read(v.run(n=(1, 1), inputs={"img": [[[255, 0, 51, 255]]]}).outputs["dst"]).reshape(-1)  # a list of its byte values
    np.testing.assert_allclose(got, np.array([255, 0, 51, 255]) / 255.0, rtol=0, atol=1e-7)


def test_integers_past_f16_are_refused_for_a_half_float_storage_texture():
    v = abi.program(
        key="t15h/st_f16", schema=abi.parse(STORAGE_LOAD_YAML.format(fmt="rgba16float", scalar="f32"), "t15h/st_f16/bindings.yaml"), wgsl=STORAGE_LOAD_WGSL
    ).variant()
    with pytest.raises(DispatchError, match="f16"):
        v.run(n=(1, 1), inputs={"img": np.array([[[70000, 0, 0, 0]]], np.int32)})


def test_table_orders_of_any_iterable_kind_are_taken():
    columns = {"a": np.arange(2, dtype=np.float32), "b": np.array([5, 6], np.int32)}
    for order in (np.array(["b", "a"]), columns.keys(), (n for n in ["b", "a"])):
        t = abi.table(columns, order=order)
        assert [str(n) for n in t.names][0] in ("a", "b")
        np.testing.assert_array_equal(abi.read(t)["b"], [5, 6])


SAMPLE_YAML = """\
bindings:
  - { name: img, kind: texture, sample: float }
  - { name: dst, kind: buffer, access: read_write, element: vec4<f32>, count: "n" }
workgroup: [8, 8]
"""
SAMPLE_WGSL = """\
@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, textureLoad(img, gid.xy, 0));
}
"""


@pytest.mark.parametrize(
    ("fmt", "usage_name", "dimension", "match"),
    [
        ("r8snorm", "TEXTURE_BINDING", "2d", "not one a binding takes"),  # a format formats.py does not list: KeyError before
        ("rgba8unorm", "COPY_DST", "2d", "lacks TEXTURE_BINDING"),
        ("rgba8unorm", "TEXTURE_BINDING", "3d", "is 2d; the texture"),
    ],
)
def test_a_gpu_texture_a_binding_cannot_take_is_a_dispatch_error(fmt, usage_name, dimension, match):
    import wgpu

    from engine_plugin.device.context import get_context

    ctx = get_context()
    usage = getattr(wgpu.TextureUsage, usage_name) | wgpu.TextureUsage.COPY_DST
    texture = ctx.device.create_texture(size=(2, 2, 1), format=fmt, usage=usage, dimension=dimension)
    v = abi.program(key="t15h/sample", schema=abi.parse(SAMPLE_YAML, "t15h/sample/bindings.yaml"), wgsl=SAMPLE_WGSL).variant()
    with pytest.raises(DispatchError, match=match):
        v.run(n=(2, 2), inputs={"img": texture})


def test_an_f64_that_rounds_to_the_f32_maximum_is_taken_and_one_past_it_refused():
    # The check compared with f32's maximum, not with what rounds to infinity: 3.4028235e38
    # (it rounds to the maximum) was refused (review helper 69).
    from engine_plugin.lowering.casts import cast_refusal

    assert cast_refusal(np.array([3.4028235e38, -3.4028235e38]), np.dtype(np.float32)) is None
    assert cast_refusal(np.array([3.5e38]), np.dtype(np.float32)) is not None


@pytest.mark.parametrize(("element", "values", "bad"), [("i32", [1.0, 1.5, -2.7], "1.5"), ("u32", [0.9], "0.9"), ("vec2<i32>", [[3.0, -0.5]], "-0.5")])
def test_a_float_array_with_a_fraction_is_refused_for_an_integer_binding(element, values, bad):
    # Truncated silently (1.5 -> 1, -2.7 -> -2, 0.9 -> 0, review helper 126), where a param of
    # the same value is refused: a cast by value that changes a value.
    v = copy(f"t15h/frac_{element.replace('<', '_').replace('>', '')}", element)
    for dtype in (np.float64, np.float32):
        with pytest.raises(DispatchError, match=f"value {bad}\\d* is not a whole number"):
            v.run(n=len(values), inputs={"x": np.array(values, dtype)})
    whole = np.array(values, np.float64)
    whole = np.trunc(whole) if element != "u32" else np.abs(np.trunc(whole))
    got = abi.read(v.run(n=len(values), inputs={"x": whole}).outputs["y"])
    np.testing.assert_array_equal(np.asarray(got).reshape(whole.shape), whole)


@pytest.mark.parametrize(
    ("dtype", "values", "bad"),
    [
        (np.uint32, [16777217, 3], "16777217"),
        (np.uint32, [4294967295], "4294967295"),
        (np.int32, [-(2**31) + 1], "-2147483647"),
        (np.int64, [2**53 + 1], "9007199254740993"),
        (np.int64, [2**63 - 1], "9223372036854775807"),  # rounds to 2^63: past int64 on the way back
        (np.uint64, [2**64 - 1], "18446744073709551615"),
    ],
)
def test_an_integer_array_that_would_round_as_f32_is_refused(dtype, values, bad):
    # Review helper 151: a u32 array bound to an f32 binding reached the kernel rounded
    # (4294967295 as 4294967296.0) without a word, where a fraction into an integer binding is
    # refused: a cast by value that changes a value.
    v = copy("t15h/int_to_f32", "f32")
    with pytest.raises(DispatchError, match=f"value {bad} is not exactly a float32"):
        v.run(n=len(values), inputs={"x": np.array(values, dtype)})
    # Integers an f32 holds exactly pass, past 2^24 too (multiples of their spacing).
    exact = np.array([16777216, -16777216, 2**31, 3, 0], np.int64)
    got = abi.read(v.run(n=5, inputs={"x": exact}).outputs["y"])
    np.testing.assert_array_equal(got.astype(np.float64), exact.astype(np.float64))


def test_an_output_of_another_scalar_type_given_back_through_outputs_is_refused():
    # Written in place as the binding's type: a u32 Output read an f32 kernel's 2.0 back as
    # 1073741824 (review helper 130), where the same Output as a read_write input is refused.
    u32, f32, v4 = copy("t15h/o_u32", "u32"), copy("t15h/o_f32", "f32"), copy("t15h/o_v4", "vec4<f32>")
    words = u32.run(n=4, inputs={"x": np.arange(4, dtype=np.uint32)}).outputs["y"]
    with pytest.raises(DispatchError, match=r"outputs\['y'\] \(f32\) cannot take u32 output 'y'"):
        f32.run(n=4, inputs={"x": np.full(4, 2.0, np.float32)}, outputs={"y": words})
    with pytest.raises(DispatchError, match="written in place"):
        f32.run(n=4, inputs={"x": np.full(4, 2.0, np.float32)}, outputs={"y": {"buffer": words, "capacity": 4}})
    for given in (words.buffer, {"buffer": words.buffer}):  # its handed-out buffer (review helper 132)
        with pytest.raises(DispatchError, match="written in place"):
            f32.run(n=4, inputs={"x": np.full(4, 2.0, np.float32)}, outputs={"y": given})
    np.testing.assert_array_equal(abi.read(words), np.arange(4, dtype=np.uint32))  # untouched
    floats = f32.run(n=8, inputs={"x": np.zeros(8, np.float32)}).outputs["y"]  # the same scalar, other lanes: its words
    out = v4.run(n=2, inputs={"x": np.full((2, 4), 3.0, np.float32)}, outputs={"y": floats}).outputs["y"]
    np.testing.assert_array_equal(abi.read(out), np.full((2, 4), 3.0, np.float32))


def test_integers_a_half_float_target_would_round_are_refused_and_exact_ones_taken():
    # Review helper 156: the check stopped at f32's 2^24 whatever the target, so integer texels
    # into an rgba16float texture rounded (2049 -> 2048) without a word.
    from engine_plugin.lowering.casts import cast_refusal

    f16 = np.dtype(np.float16)
    assert "not exactly a float16 (integers past 2^11 round: it would become 2048)" in cast_refusal(np.array([2049], np.int32), f16)
    assert cast_refusal(np.array([2048, -2048, 4096, 65504], np.int32), f16) is None  # exact halves
    assert cast_refusal(np.array([16777216], np.int64), np.dtype(np.float32)) is None


def test_an_f64_too_small_for_an_f32_is_refused_not_made_zero():
    # 1e-50 became 0.0 without a word, where 1e39 (inf) is refused (review helper 174); a
    # subnormal f32 and an exact zero of either sign are taken as they are.
    v = copy("t15h/underflow_f32", "f32")
    with pytest.raises(DispatchError, match=r"value 1e-50 is below float32's smallest .* it would become 0"):
        v.run(n=2, inputs={"x": np.array([1.0, 1e-50])})
    run = v.run(n=4, inputs={"x": np.array([1.0, 1e-44, 0.0, -0.0])})
    got = abi.read(run.outputs["y"])
    assert got[[0, 2, 3]].tolist() == [1.0, 0.0, -0.0] and np.signbit(got[3])
    assert got[1] in (np.float32(1e-44), 0.0)  # uploaded as the subnormal it is (an adapter may flush it)


def test_a_float_param_too_small_for_an_f32_is_refused_not_made_zero():
    from engine_plugin.lowering import parse

    yaml = "bindings:\n  - { name: y, kind: buffer, access: read_write, element: f32, count: '1' }\nparams:\n  - { name: a, type: f32 }\n"
    wgsl = "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) { y_set(0u, params.a * 1e30); }\n"
    v = abi.program(key="t15h/underflow_param", schema=parse(yaml, "t15h/underflow_param/bindings.yaml"), wgsl=wgsl).variant()
    with pytest.raises(DispatchError, match=r"param 'a' \(f32\): 1e-50 is below f32's smallest"):
        v.run(1, params={"a": 1e-50})
    v.run(1, params={"a": 1e-44})  # a subnormal f32: taken (what the GPU makes of it is the adapter's)
    assert abi.read(v.run(1, params={"a": 1e-20}).outputs["y"])[0] == np.float32(np.float32(1e-20) * np.float32(1e30))


@pytest.mark.parametrize("name", ["v", "a", "m"])
@pytest.mark.parametrize("bad", [[1e-50, 2.0, 3.0, 4.0], [16777217, 2, 3, 4], np.array([2**31 + 1, 2, 3, 4], np.int64)], ids=["underflow", "int", "int64"])
def test_array_and_matrix_f32_params_refuse_what_a_vector_param_refuses(name, bad):
    # An array or matrix param took 1e-50 as 0.0 and 16777217 as 16777216 where a vec4 refused
    # them (review helper 182).
    from engine_plugin.lowering import parse

    yaml = (
        'bindings:\n  - { name: out, kind: buffer, access: read_write, element: f32, count: "12" }\nparams:\n'
        '  - { name: v, type: vec4<f32> }\n  - { name: a, type: "array<vec4<f32>, 1>" }\n  - { name: m, type: mat2x2<f32> }\n'
    )
    wgsl = (
        "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
        "    for (var k = 0u; k < 4u; k++) { out_set(k, params.v[k]); out_set(4u + k, params.a[0][k]); out_set(8u + k, params.m[k / 2u][k % 2u]); }\n}\n"
    )
    v = abi.program(key="t15h/param_forms", schema=parse(yaml, "t15h/param_forms/bindings.yaml"), wgsl=wgsl).variant()
    ok = [1.0, 2.0, 3.0, 4.0]
    params = {"v": ok, "a": [ok], "m": [[1.0, 2.0], [3.0, 4.0]]}
    params[name] = np.asarray(bad).reshape({"v": (4,), "a": (1, 4), "m": (2, 2)}[name]) if isinstance(bad, np.ndarray) else (
        bad if name == "v" else [bad] if name == "a" else [list(bad[:2]), list(bad[2:])]
    )
    with pytest.raises(DispatchError, match=f"param '{name}'"):
        v.run(1, params=params)


def test_float32_params_keep_their_bits_signalling_nans_too():
    # A float32 param went through a Python float: a signalling NaN arrived quiet (its bits
    # changed), where an array param and a storage buffer keep them (review helper 182).
    from engine_plugin.lowering import parse

    yaml = 'bindings:\n  - { name: out, kind: buffer, access: read_write, element: u32, count: "5" }\nparams:\n  - { name: s, type: f32 }\n  - { name: v, type: vec4<f32> }\n'
    wgsl = (
        "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n"
        "    out_set(0u, bitcast<u32>(params.s)); for (var k = 0u; k < 4u; k++) { out_set(1u + k, bitcast<u32>(params.v[k])); }\n}\n"
    )
    v = abi.program(key="t15h/snan", schema=parse(yaml, "t15h/snan/bindings.yaml"), wgsl=wgsl).variant()
    words = np.array([0x7F800001, 0x7FA00000, 0xFFBFFFFF, 0x3F800000], np.uint32)
    got = abi.read(v.run(1, params={"s": words[:1].view(np.float32)[0], "v": words.view(np.float32)}).outputs["out"])
    assert [hex(int(w)) for w in got] == [hex(int(w)) for w in (words[0], *words)]
