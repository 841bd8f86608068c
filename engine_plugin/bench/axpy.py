"""The axpy kernel the host-path cases run: the plugin's asset text and the same body by hand
(the raw reference), shared by :mod:`.cases` and :mod:`.host_cases`."""

from __future__ import annotations

import wgpu

STORAGE = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST

AXPY_YAML = """\
bindings:
  - { name: x, kind: buffer, access: read, element: f32 }
  - { name: y, kind: buffer, access: read_write, element: f32, count: "n" }
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
# The same body by hand; the plugin's kernel also reads n and the fold stride from its params.
RAW_WGSL = """\
struct P { n: u32, a: f32, stride: u32, pad: u32 }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: P;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x + gid.y * p.stride;
    if (i >= p.n) { return; }
    y[i] = p.a * x[i] + 1.0;
}
"""
