"""`workgroup` can be specialised: a `kind: workgroup` parameter is a size the schema's
`workgroup` names and the body's `@workgroup_size` uses; each variant dispatches by its own."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.errors import SchemaError
from engine_plugin.lowering import enumerate_variants

pytestmark = pytest.mark.gpu

YAML = """\
bindings:
  - { name: dst, kind: buffer, access: read_write, element: u32, count: "n" }
specialize:
  - { name: WG, kind: workgroup, options: [64, 256], default: 256 }
workgroup: [WG, 1]
"""
WGSL = """\
@compute @workgroup_size(WG, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_index) lii: u32) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, WG * 1000u + lii);
}
"""


@pytest.mark.parametrize("wg", ["64", 256])
def test_each_variant_dispatches_by_its_own_workgroup_size(wg):
    v = abi.program(key="t17/wg", schema=abi.parse(YAML), wgsl=WGSL).variant(specialize={"WG": wg})
    size = int(wg)
    assert v.lowered.workgroup == (size, 1, 1)
    got = abi.read(v.run(n=1000).outputs["dst"])
    np.testing.assert_array_equal(got, size * 1000 + np.arange(1000) % size)


def test_the_unset_size_is_its_default_and_bake_covers_every_size():
    schema = abi.parse(YAML)
    assert abi.program(key="t17/wg", schema=schema, wgsl=WGSL).variant().lowered.workgroup == (256, 1, 1)
    assert sorted(s.as_dict()["WG"] for s in enumerate_variants(schema)) == ["256", "64"]


@pytest.mark.parametrize("yaml,message", [
    (YAML.replace("[64, 256]", "[64, 2048]").replace(", default: 256", ""), "from 1 to 1024"),
    (YAML.replace("workgroup: [WG, 1]", "workgroup: [WG, 8]"), "2048 invocations"),
    (YAML.replace("workgroup: [WG, 1]", "workgroup: [NOPE, 1]"), "kind: workgroup specialisations"),
])
def test_bad_workgroup_specialisations_are_refused_at_their_line(yaml, message):
    with pytest.raises(SchemaError, match=message):
        abi.parse(yaml)


BLOCKS_YAML = """\
bindings:
  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: partials, kind: buffer, access: read_write, element: f32, count: "ceil(n / WG)" }
specialize:
  - { name: WG, kind: workgroup, options: [64, 256], default: 256 }
workgroup: WG
"""
BLOCKS_WGSL = """\
@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n() || i % WG != 0u) { return; }
    var sum = 0.0;
    for (var k = i; k < min(i + WG, zero_n()); k = k + 1u) {
        sum = sum + src_get(k);
    }
    partials_set(i / WG, sum);
}
"""


@pytest.mark.parametrize("wg", [64, 256])
def test_a_count_expression_names_a_workgroup_specialisation(wg):
    """The first pass of a block reduction: one partial sum per WG elements, its output sized
    ``ceil(n / WG)`` with WG the variant's own workgroup size (not repeated as a param)."""
    variant = abi.program(key="t17/blocks", schema=abi.parse(BLOCKS_YAML, "blocks/bindings.yaml"), wgsl=BLOCKS_WGSL).variant(specialize={"WG": wg})
    src = np.arange(1000, dtype=np.float32) % 7
    got = abi.read(variant.run(n=1000, inputs={"src": src}).outputs["partials"])
    want = np.add.reduceat(src, np.arange(0, 1000, wg))
    assert got.shape == (-(-1000 // wg),)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("yaml,message", [
    (BLOCKS_YAML.replace("ceil(n / WG)", "ceil(n / WGX)"), r"unknown name 'WGX'.*kind: workgroup specialisations \(WG\)"),
    (BLOCKS_YAML + "params:\n  - { name: WG, type: u32 }\n", "'WG' is both a param and a kind: workgroup specialisation"),
])
def test_a_count_naming_a_missing_or_ambiguous_size_is_refused(yaml, message):
    with pytest.raises(SchemaError, match=message):
        abi.parse(yaml, "blocks/bindings.yaml")
