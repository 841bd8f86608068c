"""Kernels of a chain of mirror writers (review helper 158's fuzzer): W1 writes m1's even
tiles as k a + 1 from field a, W1b its odd tiles as 3 b, W2 writes m2 = m1 + b; SUM sums a
field a chunk (times c), TIL reads selected tiles. Each writer also answers its chunk sum."""

from __future__ import annotations

import numpy as np

from engine_plugin import abi

SHAPE = (4, 4)
NT = 16
EVEN = np.arange(NT) % 2 == 0

HDR_C = "  - { name: chunks, kind: buffer, access: read, element: u32 }\n"
HDR_T = "  - { name: tiles, kind: buffer, access: read, element: u32 }\n"
OUT = "  - { name: out, kind: buffer, access: read_write, element: f32, count: \"n\" }\n"

W1_Y = "bindings:\n" + HDR_C + """  - { name: a, kind: buffer, access: read, element: f32 }
  - { name: m, kind: buffer, access: read_write, element: f32 }
""" + OUT + """params:
  - { name: tile_count, type: u32 }
  - { name: k, type: f32 }
"""
W1_W = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * params.tile_count;
    var s = 0.0;
    for (var t = 0u; t < params.tile_count; t = t + 2u) { let v = params.k * a_get(base + t) + 1.0; m_set(base + t, v); s = s + v; }
    out_set(i, s);
}
"""
W1B_Y = "bindings:\n" + HDR_C + """  - { name: b, kind: buffer, access: read, element: f32 }
  - { name: m, kind: buffer, access: read_write, element: f32 }
""" + OUT + """params:
  - { name: tile_count, type: u32 }
"""
W1B_W = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * params.tile_count;
    var s = 0.0;
    for (var t = 1u; t < params.tile_count; t = t + 2u) { let v = 3.0 * b_get(base + t); m_set(base + t, v); s = s + v; }
    out_set(i, s);
}
"""
W2_Y = "bindings:\n" + HDR_C + """  - { name: src, kind: buffer, access: read, element: f32 }
  - { name: b, kind: buffer, access: read, element: f32 }
  - { name: m, kind: buffer, access: read_write, element: f32 }
""" + OUT + """params:
  - { name: tile_count, type: u32 }
"""
W2_W = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * params.tile_count;
    var s = 0.0;
    for (var t = 0u; t < params.tile_count; t = t + 1u) { let v = src_get(base + t) + b_get(base + t); m_set(base + t, v); s = s + v; }
    out_set(i, s);
}
"""
SUM_Y = "bindings:\n" + HDR_C + """  - { name: src, kind: buffer, access: read, element: f32 }
""" + OUT + """params:
  - { name: tile_count, type: u32 }
  - { name: c, type: f32 }
"""
SUM_W = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    let base = chunks_get(i) * params.tile_count;
    var s = 0.0;
    for (var t = 0u; t < params.tile_count; t = t + 1u) { s = s + src_get(base + t); }
    out_set(i, params.c * s);
}
"""
TIL_Y = "bindings:\n" + HDR_T + """  - { name: src, kind: buffer, access: read, element: f32 }
""" + OUT + """params:
  - { name: c, type: f32 }
"""
TIL_W = """@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) { return; }
    out_set(i, src_get(tiles_get(i)) + params.c);
}
"""


def prog(key, y, w):
    return abi.program(key=key, schema=abi.parse(y, f"{key}/bindings.yaml"), wgsl=w, wgsl_path=f"{key}/kernel.wgsl")




def programs() -> dict:
    """The chain's programs by name (W1, W1b, W2, SUM, TIL)."""
    return {
        "W1": prog("f158/w1", W1_Y, W1_W),
        "W1b": prog("f158/w1b", W1B_Y, W1B_W),
        "W2": prog("f158/w2", W2_Y, W2_W),
        "SUM": prog("f158/sum", SUM_Y, SUM_W),
        "TIL": prog("f158/til", TIL_Y, TIL_W),
    }
