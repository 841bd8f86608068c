"""A columns table's accessors stay inside the column they name, as a page column's do: an index
past its count reaches its last element, a lane past its lanes its last lane, and a column
without elements (or past the table's) reads zero and takes no writes (review helper 83: they
reached the next column's words)."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.errors import DispatchError

pytestmark = pytest.mark.gpu

YAML = """bindings:
  - { name: cols, kind: columns, access: read_write }
  - { name: out, kind: buffer, access: read_write, element: f32, count: "5" }
"""
WGSL = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (zero_index(gid) >= zero_n()) { return; }
    out_set(0u, cols_f32(0u, cols_count(0u), 0u));  // one past a's last element
    out_set(1u, cols_f32(0u, 1u, 1u));               // lane 1 of one-lane a: lane 0
    out_set(2u, cols_f32(1u, 0u, 0u));               // empty e
    out_set(3u, cols_f32(5u, 0u, 0u));               // past the table
    out_set(4u, cols_vec2(2u, 7u).y);                // past v's count, its last element's lane 1
    cols_set_f32(0u, cols_count(0u), 0u, 99.0);      // clamps onto a's last element
    cols_set_f32(1u, 0u, 0u, 55.0);                  // e has no element: nothing
    cols_set_f32(2u, 0u, 3u, 77.0);                  // lane 3 of two-lane v: its lane 1
}
"""


def test_table_accessors_clamp_into_the_column_they_name():
    v = abi.program(key="t83/table_bounds", schema=abi.parse(YAML, "t83/bindings.yaml"), wgsl=WGSL).variant()
    table = abi.table(
        {
            "a": np.array([1.0, 2.0], np.float32),
            "e": np.zeros(0, np.float32),
            "v": np.array([[3.0, 4.0], [5.0, 6.0]], np.float32),
            "b": np.array([10.0, 20.0], np.float32),
        }
    )
    run = v.run(n=1, inputs={"cols": table})
    np.testing.assert_array_equal(abi.read(run.outputs["out"]), [2.0, 2.0, 0.0, 0.0, 6.0])
    back = abi.read(table)
    np.testing.assert_array_equal(back["a"], [1.0, 99.0])
    np.testing.assert_array_equal(back["v"], [[3.0, 77.0], [5.0, 6.0]])
    np.testing.assert_array_equal(back["b"], [10.0, 20.0])
    assert back["e"].size == 0


def test_a_table_cannot_be_pointed_at_other_data_in_place():
    # Review helper 147: a repeated run with the very same Table object binds what the first
    # run checked; reassigning its buffer (or counts) in place would have been bound stale.
    import dataclasses

    t = abi.table({"a": np.arange(4, dtype=np.float32)})
    other = abi.table({"a": np.arange(8, dtype=np.float32)})
    for name, value in (("buffer", other.buffer), ("counts", other.counts), ("words", other.words)):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(t, name, value)


def test_a_raw_buffer_for_a_table_whose_columns_the_variant_names_is_refused():
    # Review helper 222: a Table packed y, x is refused for a variant made with columns
    # [x, y], but its .buffer was bound unchecked and cols_col_x read y's column.
    yaml = """\
bindings:
  - { name: cols, kind: columns, access: read }
  - { name: out, kind: buffer, access: read_write, element: f32, count: "2" }
"""
    wgsl = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (zero_index(gid) != 0u) { return; }
    out_set(0u, cols_f32(cols_col_x, 0u, 0u));
    out_set(1u, cols_f32(cols_col_y, 0u, 0u));
}
"""
    program = abi.program(key="t/table_raw_buffer", schema=abi.parse(yaml, "table_raw/bindings.yaml"), wgsl=wgsl)
    variant = program.variant(columns={"cols": ["x", "y"]})
    swapped = abi.table({"y": np.array([2.0], np.float32), "x": np.array([1.0], np.float32)})
    for given in (swapped, swapped.buffer):
        with pytest.raises(DispatchError, match=r"table 'cols'") as info:
            variant.run(n=1, inputs={"cols": given})
        assert info.value.span is not None and info.value.span.line == 2
    right = abi.table({"x": np.array([1.0], np.float32), "y": np.array([2.0], np.float32)})
    np.testing.assert_array_equal(abi.read(variant.run(n=1, inputs={"cols": right}).outputs["out"]), [1.0, 2.0])
