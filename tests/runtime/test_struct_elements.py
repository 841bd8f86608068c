"""Struct elements: boids' `array<Particle>` with `{pos, vel}` as it is written, laid out by
WGSL's storage rules and packed from numpy structured arrays."""

from __future__ import annotations

import numpy as np
import pytest

from engine_plugin import abi
from engine_plugin.errors import DispatchError, SchemaError

pytestmark = pytest.mark.gpu

YAML = """\
structs:
  Particle: { pos: vec3<f32>, vel: vec3<f32>, mass: f32, id: u32 }
bindings:
  - { name: src, kind: buffer, access: read, element: Particle }
  - { name: dst, kind: buffer, access: read_write, element: Particle, count: "len(src)" }
params:
  - { name: dt, type: f32 }
"""
WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    var p: Particle = src_get(i);
    p.pos = p.pos + p.vel * params.dt;
    dst_set(i, p);
    dst_set_mass(i, src_mass(i) * 2.0);
}
"""


def particles(n):
    dtype = np.dtype([("pos", "<f4", 3), ("vel", "<f4", 3), ("mass", "<f4"), ("id", "<u4")])
    p = np.zeros(n, dtype)
    p["pos"] = np.arange(n * 3).reshape(n, 3)
    p["vel"] = 1.0
    p["mass"] = np.arange(n) + 0.5
    p["id"] = np.arange(n) + 100
    return p


def step():
    return abi.program(key="t17/boids", schema=abi.parse(YAML), wgsl=WGSL).variant()


def test_the_struct_is_laid_out_by_wgsl_storage_rules():
    (slot, *_) = step().lowered.host_slots
    st = slot.value_type
    assert [(f.name, f.offset) for f in st.fields] == [("pos", 0), ("vel", 16), ("mass", 28), ("id", 32)]
    assert st.size == 48  # rounded up to the struct's 16-byte alignment


def test_a_particle_step_matches_numpy():
    p = particles(100)
    got = abi.read(step().run(n=100, inputs={"src": p}, params={"dt": 0.5}).outputs["dst"])
    np.testing.assert_allclose(got["pos"], p["pos"] + 0.5 * p["vel"])
    np.testing.assert_array_equal(got["vel"], p["vel"])
    np.testing.assert_array_equal(got["mass"], p["mass"] * 2)
    np.testing.assert_array_equal(got["id"], p["id"])
    # chained: the output is the next step's input
    again = abi.read(step().run(n=100, inputs={"src": step().run(n=100, inputs={"src": p}, params={"dt": 1.0}).outputs["dst"]}, params={"dt": 1.0}).outputs["dst"])
    np.testing.assert_allclose(again["pos"], p["pos"] + 2.0)


def test_a_plain_array_for_a_struct_binding_is_refused():
    with pytest.raises(DispatchError, match="structured array with fields"):
        step().run(n=4, inputs={"src": np.zeros(4, np.float32)}, params={"dt": 1.0})
    wrong = np.zeros(4, [("pos", "<f4", 2), ("vel", "<f4", 3), ("mass", "<f4"), ("id", "<u4")])
    with pytest.raises(DispatchError, match="Particle.pos is vec3<f32>"):
        step().run(n=4, inputs={"src": wrong}, params={"dt": 1.0})


@pytest.mark.parametrize("yaml,message", [
    (YAML.replace("mass: f32", "mass: f64"), "Particle.mass must be u32, i32, f32"),
    (YAML.replace("element: Particle }", "element: Particle, bits: true }"), "no raw words"),
    (YAML.replace("element: Particle }", "element: Partcle }"), "a struct of structs:"),
])
def test_bad_structs_are_refused_at_their_line(yaml, message):
    with pytest.raises(SchemaError, match=message):
        abi.parse(yaml)


def test_a_body_repeating_the_schemas_struct_is_told_to_delete_it():
    # Review helper 145: ported boids code keeps its own `struct Particle`; the message said
    # "rename yours", but the body wants the schema's struct itself: delete it.
    from engine_plugin.errors import LoweringError

    body = "struct Particle { pos: vec3<f32>, vel: vec3<f32>, mass: f32, id: u32, }\n" + WGSL
    with pytest.raises(LoweringError) as info:
        abi.program(key="t145/struct_twice", schema=abi.parse(YAML, "p/bindings.yaml"), wgsl=body, wgsl_path="p/kernel.wgsl").variant()
    err = info.value
    assert (err.span.path, err.span.line) == ("p/kernel.wgsl", 1)
    assert "'Particle' is declared here and also generated for struct 'Particle'" in err.message and "delete yours" in err.message


def test_chaining_a_struct_output_into_another_layout_of_the_same_name_says_the_layouts_differ():
    # "input 'x' is P but the chained output 'o' holds P" (review helper 168).
    make_yaml = """\
structs:
  P: {{ {members} }}
bindings:
  - {{ name: {src}, kind: buffer, access: read, element: f32 }}
  - {{ name: o, kind: buffer, access: read_write, element: P, count: "len({src})" }}
"""
    body = "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {\n    let i = zero_index(gid);\n    if (i >= zero_n()) { return; }\n}\n"
    first = abi.program(key="t/structs/chain_a", schema=abi.parse(make_yaml.format(members="a: f32, b: u32", src="s"), "a/bindings.yaml"), wgsl=body).variant()
    second_yaml = """\
structs:
  P: { b: u32, a: f32 }
bindings:
  - { name: x, kind: buffer, access: read, element: P }
  - { name: y, kind: buffer, access: read_write, element: f32, count: "len(x)" }
"""
    second = abi.program(key="t/structs/chain_b", schema=abi.parse(second_yaml, "b/bindings.yaml"), wgsl=body).variant()
    out = first.run(4, inputs={"s": np.zeros(4, np.float32)}).outputs["o"]
    with pytest.raises(DispatchError, match=r"struct P \{ b: u32, a: f32 \}.*struct P \{ a: f32, b: u32 \}: the layouts differ"):
        second.run(4, inputs={"x": out})
