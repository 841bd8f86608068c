"""Small page/column kernels (bindings.yaml text + WGSL body) used by the substrate tests."""

from __future__ import annotations

from engine_plugin import abi


def make(key: str, yaml: str, wgsl: str, **spec):
    """The compiled variant of a kernel given as text (its spec when it has specialisations)."""
    schema = abi.parse(yaml, f"{key}/bindings.yaml")
    program = abi.program(key=key, schema=schema, wgsl=wgsl, wgsl_path=f"{key}/kernel.wgsl")
    return program.variant(specialize=spec or None)


# -- thirty columns over three pages: c_k = a_k * f32(b_k) + k, guarded by c_k's own length ----
def thirty_columns_yaml() -> str:
    rows = ["bindings:", "  - { name: PA, kind: page, access: read }"]
    rows += [f"  - {{ name: a{k:02d}, kind: column, page: PA, element: f32 }}" for k in range(10)]
    rows += ["  - { name: PB, kind: page, access: read }"]
    rows += [f"  - {{ name: b{k:02d}, kind: column, page: PB, element: i32 }}" for k in range(10)]
    rows += ["  - { name: PC, kind: page, access: read_write }"]
    rows += [f"  - {{ name: c{k:02d}, kind: column, page: PC, element: vec2<f32>, access: read_write }}" for k in range(10)]
    return "\n".join(rows) + "\n"


def thirty_columns_wgsl() -> str:
    body = [
        "@compute @workgroup_size(64)",
        "fn main(@builtin(global_invocation_id) gid: vec3<u32>) {",
        "    let i = zero_index(gid);",
        "    if (i >= zero_n()) { return; }",
    ]
    for k in range(10):
        body.append(
            f"    if (i < c{k:02d}_len()) {{ let v = a{k:02d}_get(i) * f32(b{k:02d}_get(i)); c{k:02d}_set(i, vec2<f32>(v + {k}.0, -v)); }}"
        )
    body.append("}")
    return "\n".join(body) + "\n"


def ninth_page_yaml() -> str:
    rows = ["bindings:"]
    for k in range(9):
        rows.append(f"  - {{ name: P{k}, kind: page, access: read }}")
        rows.append(f"  - {{ name: c{k}, kind: column, page: P{k}, element: f32 }}")
    return "\n".join(rows) + "\n"


# -- an index past NAME_len() reaches the last element ------------------------------------------
CLAMP_YAML = """\
bindings:
  - { name: P,    kind: page, access: read }
  - { name: col,  kind: column, page: P, element: vec2<f32> }
  - { name: next, kind: column, page: P, element: u32 }
  - { name: out,  kind: buffer, access: read_write, element: vec2<f32>, count: "n" }
  - { name: outn, kind: buffer, access: read_write, element: u32, count: "n" }
  - { name: outw, kind: buffer, access: read_write, element: u32, count: "n" }
"""
CLAMP_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    out_set(i, col_get(col_len() + 5u + i));
    outn_set(i, next_get(next_len() + 5u + i));
    outw_set(i, col_word(col_len() * 2u + 3u + i));
}
"""

# -- every atomic op of a column on an atomic page, with contended slots ------------------------
ATOMIC_YAML = """\
bindings:
  - { name: vals,  kind: buffer, access: read, element: T }
  - { name: slots, kind: buffer, access: read, element: u32 }
  - { name: ACC,   kind: page, access: read_write, atomic: true }
  - { name: acc_add,  kind: column, page: ACC, element: T }
  - { name: acc_min,  kind: column, page: ACC, element: T }
  - { name: acc_max,  kind: column, page: ACC, element: T }
  - { name: acc_xchg, kind: column, page: ACC, element: T }
  - { name: acc_and,  kind: column, page: ACC, element: T }
  - { name: acc_or,   kind: column, page: ACC, element: T }
  - { name: acc_xor,  kind: column, page: ACC, element: T }
  - { name: olds,  kind: buffer, access: read_write, element: T, count: "n" }
specialize:
  - { name: T, kind: type, options: [u32, i32, f32] }
determinism: float_order
"""
ATOMIC_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let s = slots_get(i);
    let v = vals_get(i);
    acc_add_atomic_add(s, v);
    acc_min_atomic_min(s, v);
    acc_max_atomic_max(s, v);
    olds_set(i, acc_xchg_atomic_exchange(s, v));
    // @when T u32 i32
    acc_and_atomic_and(s, v);
    acc_or_atomic_or(s, v);
    acc_xor_atomic_xor(s, v);
    // @end
}
"""

# -- one plain page, two columns: dst = src * 2 (used by page-group plays) ----------------------
DOUBLE_YAML = """\
bindings:
  - { name: P,   kind: page, access: read_write }
  - { name: src, kind: column, page: P, element: f32, access: read }
  - { name: dst, kind: column, page: P, element: f32, access: read_write }
"""
DOUBLE_WGSL = """\
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= min(zero_n(), dst_len())) { return; }
    dst_set(i, src_get(i) * 2.0);
}
"""
