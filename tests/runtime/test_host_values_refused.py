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
