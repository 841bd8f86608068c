"""Small kernels (schema + body) used by the runtime tests."""

from engine_plugin import abi


def make(key: str, yaml: str, wgsl: str, **spec):
    schema = abi.parse(yaml, f"{key}/bindings.yaml")
    program = abi.program(key=key, schema=schema, wgsl=wgsl, wgsl_path=f"{key}/kernel.wgsl")
    return program.variant(specialize=spec or None) if spec or not schema.specialize else program


FILTER_YAML = """\
bindings:
  - { name: src,  kind: buffer, access: read, element: f32 }
  - { name: hits, kind: buffer, access: read_write, element: f32, capacity: "cap", append: true }
params:
  - { name: threshold, type: f32 }
  - { name: cap, type: u32 }
determinism: float_order
"""
FILTER_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let v = src_get(i);
    if (v > params.threshold) {
        hits_append(v);
    }
}
"""

DOUBLE_LIVE_YAML = """\
bindings:
  - { name: live, kind: domain_count }
  - { name: src,  kind: buffer, access: read, element: f32 }
  - { name: dst,  kind: buffer, access: read_write, element: f32, count: "n", live: true }
"""
DOUBLE_LIVE_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, src_get(i) * 2.0);
}
"""

INDEX_YAML = """\
bindings:
  - { name: dst, kind: buffer, access: read_write, element: u32, count: "n" }
workgroup: 1
"""
INDEX_WGSL = """\
@compute @workgroup_size(1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    dst_set(i, i);
}
"""


# y = a * x + 1 over len(x) elements (the host-path and pooling tests).
AXPY_YAML = """\
bindings:
  - { name: x, kind: buffer, access: read, element: f32 }
  - { name: y, kind: buffer, access: read_write, element: f32, count: "len(x)" }
params:
  - { name: a, type: f32 }
"""
AXPY_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    y_set(i, params.a * x_get(i) + 1.0);
}
"""
