"""Forms real kernels take: multi-dimensional numpy arrays where the element count matches,
and `bake:` entries that name table columns (so such an asset bakes without a usage log)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.errors import DispatchError, SchemaError
from engine_plugin.lowering import enumerate_variants

pytestmark = pytest.mark.gpu

COPY_YAML = """\
bindings:
  - { name: src, kind: buffer, access: read, element: T }
  - { name: dst, kind: buffer, access: read_write, element: T, count: "len(src)" }
specialize:
  - { name: T, options: [f32, vec4<f32>] }
"""
COPY_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, src_get(i) * 2.0);
}
"""


def copy(T):
    return abi.program(key="t17/copy", schema=abi.parse(COPY_YAML), wgsl=COPY_WGSL).variant(specialize={"T": T})


def test_a_2d_grid_goes_to_a_scalar_binding_row_major():
    grid = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(abi.read(copy("f32").run(n=grid.size, inputs={"src": grid}).outputs["dst"]), grid.ravel() * 2)
    transposed = grid.T  # not contiguous: its logical (C) order is what goes up
    np.testing.assert_array_equal(abi.read(copy("f32").run(n=12, inputs={"src": transposed}).outputs["dst"]), transposed.ravel() * 2)


def test_an_rgba_image_goes_to_a_vec4_binding():
    image = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    got = abi.read(copy("vec4<f32>").run(n=6, inputs={"src": image}).outputs["dst"])
    np.testing.assert_array_equal(got, image.reshape(6, 4) * 2)
    with pytest.raises(DispatchError, match="3 lanes in its last axis"):
        copy("vec4<f32>").run(n=6, inputs={"src": np.zeros((2, 3, 3), np.float32)})


TABLE_YAML = """\
bindings:
  - { name: cols, kind: columns, access: read }
  - { name: dst, kind: buffer, access: read_write, element: f32, count: "n" }
bake:
  - { columns: { cols: [weight, bias] } }
"""
TABLE_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, cols_f32(cols_col_weight, i, 0u) + cols_f32(cols_col_bias, i, 0u));
}
"""


def test_a_bake_entry_names_table_columns():
    schema = abi.parse(TABLE_YAML)
    (spec,) = enumerate_variants(schema)
    assert spec.columns_dict() == {"cols": ("weight", "bias")}
    program = abi.program(key="t17/table", schema=schema, wgsl=TABLE_WGSL)
    table = abi.table({"weight": np.ones(3, np.float32), "bias": np.arange(3, dtype=np.float32)})
    out = program.variant(columns={"cols": ["weight", "bias"]}).run(n=3, inputs={"cols": table}).outputs["dst"]
    np.testing.assert_array_equal(abi.read(out), [1, 2, 3])


def test_bake_columns_must_name_a_columns_binding():
    with pytest.raises(SchemaError, match="not a kind: columns binding") as info:
        abi.parse(TABLE_YAML.replace("{ cols: [weight, bias] }", "{ dst: [weight] }"), "t/bindings.yaml")
    assert info.value.span.line == 5


def test_an_asset_using_named_columns_bakes_with_a_plain_bake(tmp_path):
    asset = tmp_path / "assets" / "blend.computeShader"
    asset.mkdir(parents=True)
    (asset / "bindings.yaml").write_text(TABLE_YAML)
    (asset / "blend.wgsl").write_text(TABLE_WGSL)
    proc = subprocess.run([sys.executable, "-m", "engine_plugin", "bake", str(tmp_path / "assets"), "--cache", str(tmp_path / "cache")],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(list((tmp_path / "cache").rglob("*.msgpack"))) >= 1


SOURCE_MEMBERS_YAML = """\
bindings:
  - { name: x, kind: buffer, access: read, element: vec4<f32> }
  - { name: y, kind: buffer, access: read_write, element: f32, count: "len(x)" }
params:
  - { name: gain, type: f32 }
specialize:
  - { name: w, kind: source, default: "2.0" }
  - { name: gain, kind: source, default: "x" }
"""
SOURCE_MEMBERS_WGSL = """\
struct Pair { w: f32, gain: f32 }

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= x_len()) { return; }
    let v = x_get(i);
    let p = Pair(v . w, params.gain);
    y_set(i, v.w * w + p.gain + p.w);
}
"""


def test_a_source_parameter_never_replaces_a_member_name():
    # A `kind: source` name spliced into member names too: `v.w` became `v.2.0` (refused at
    # the user's line), and with an identifier as the splice a member silently changed (`v.w`
    # read `v.x`: review helper 168). Members after "." and declared in a struct stay.
    from runtime_kernels import make

    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    for w in ("2.0", "x[0].y"):  # any expression; an identifier-like one too
        variant = make("test/kernel_forms/source_members", SOURCE_MEMBERS_YAML.replace('default: "2.0"', f'default: "{w}"'), SOURCE_MEMBERS_WGSL)
        variant = variant.variant() if hasattr(variant, "variant") else variant
        got = abi.read(variant.run(4, inputs={"x": x}, params={"gain": 3.0}).outputs["y"])
        lane_w = x[:, 3]
        factor = np.float32(2.0) if w == "2.0" else x[0, 1]
        np.testing.assert_array_equal(got, lane_w * factor + np.float32(3.0) + lane_w)
