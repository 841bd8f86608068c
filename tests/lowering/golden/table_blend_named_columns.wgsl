// engine_plugin: lowered from tests/lowering/assets/table_blend.computeShader/bindings.yaml + tests/lowering/assets/table_blend.computeShader/blend.wgsl; variant out=[blend,count] table=[pos,vel,id]
struct ZeroParams {
    n: u32,
    zero_nx: u32,
    zero_ny: u32,
    zero_nz: u32,
    zero_gx: u32,
    zero_gy: u32,
    zero_gz: u32,
    zero_px: u32,
    zero_py: u32,
    mix: f32,
}
@group(0) @binding(0) var<storage, read> table: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding(2) var<uniform> params: ZeroParams;
fn zero_n() -> u32 { return params.n; }
fn zero_grid() -> vec3<u32> { return vec3<u32>(params.zero_nx, params.zero_ny, params.zero_nz); }
fn zero_index(zero_gid: vec3<u32>) -> u32 { if (any(zero_gid >= zero_grid())) { return 0xFFFFFFFFu; } return zero_gid.x + params.zero_nx * (zero_gid.y + params.zero_ny * zero_gid.z); }
const table_col_pos: u32 = 0u;
const table_col_vel: u32 = 1u;
const table_col_id: u32 = 2u;
fn table_count(zero_c: u32) -> u32 { if (zero_c >= table[0]) { return 0u; } return table[1u + zero_c * 4u + 2u]; }
fn table_lanes(zero_c: u32) -> u32 { if (zero_c >= table[0]) { return 0u; } return table[1u + zero_c * 4u + 1u]; }
fn table_kind(zero_c: u32) -> u32 { return table[1u + zero_c * 4u + 3u]; }
fn table_addr(zero_c: u32, zero_i: u32, zero_lane: u32) -> u32 { let zero_l = table[1u + zero_c * 4u + 1u]; return table[1u + zero_c * 4u] + min(zero_i, table[1u + zero_c * 4u + 2u] - 1u) * zero_l + min(zero_lane, max(zero_l, 1u) - 1u); }
fn table_f32(zero_c: u32, zero_i: u32, zero_lane: u32) -> f32 {
    if (table_count(zero_c) == 0u) { return 0.0; }
    let zero_w = table[table_addr(zero_c, zero_i, zero_lane)]; let zero_k = table_kind(zero_c);
    if (zero_k == 1u) { return f32(bitcast<i32>(zero_w)); }
    if (zero_k == 2u) { return f32(zero_w); }
    return bitcast<f32>(zero_w);
}
fn table_i32(zero_c: u32, zero_i: u32, zero_lane: u32) -> i32 {
    if (table_count(zero_c) == 0u) { return 0i; }
    let zero_w = table[table_addr(zero_c, zero_i, zero_lane)]; let zero_k = table_kind(zero_c);
    if (zero_k == 1u) { return bitcast<i32>(zero_w); }
    if (zero_k == 2u) { return i32(min(zero_w, 2147483647u)); }
    return select(i32(bitcast<f32>(zero_w)), 0i, (bitcast<u32>(bitcast<f32>(zero_w)) & 0x7fffffffu) > 0x7f800000u);
}
fn table_u32(zero_c: u32, zero_i: u32, zero_lane: u32) -> u32 {
    if (table_count(zero_c) == 0u) { return 0u; }
    let zero_w = table[table_addr(zero_c, zero_i, zero_lane)]; let zero_k = table_kind(zero_c);
    if (zero_k == 1u) { return u32(max(bitcast<i32>(zero_w), 0)); }
    if (zero_k == 2u) { return zero_w; }
    return select(u32(bitcast<f32>(zero_w)), 0u, (bitcast<u32>(bitcast<f32>(zero_w)) & 0x7fffffffu) > 0x7f800000u);
}
fn table_vec2(zero_c: u32, zero_i: u32) -> vec2<f32> { return vec2<f32>(table_f32(zero_c, zero_i, 0u), table_f32(zero_c, zero_i, 1u)); }
fn table_vec3(zero_c: u32, zero_i: u32) -> vec3<f32> { return vec3<f32>(table_f32(zero_c, zero_i, 0u), table_f32(zero_c, zero_i, 1u), table_f32(zero_c, zero_i, 2u)); }
fn table_vec4(zero_c: u32, zero_i: u32) -> vec4<f32> { return vec4<f32>(table_f32(zero_c, zero_i, 0u), table_f32(zero_c, zero_i, 1u), table_f32(zero_c, zero_i, 2u), table_f32(zero_c, zero_i, 3u)); }
const out_col_blend: u32 = 0u;
const out_col_count: u32 = 1u;
fn out_count(zero_c: u32) -> u32 { if (zero_c >= out[0]) { return 0u; } return out[1u + zero_c * 4u + 2u]; }
fn out_lanes(zero_c: u32) -> u32 { if (zero_c >= out[0]) { return 0u; } return out[1u + zero_c * 4u + 1u]; }
fn out_kind(zero_c: u32) -> u32 { return out[1u + zero_c * 4u + 3u]; }
fn out_addr(zero_c: u32, zero_i: u32, zero_lane: u32) -> u32 { let zero_l = out[1u + zero_c * 4u + 1u]; return out[1u + zero_c * 4u] + min(zero_i, out[1u + zero_c * 4u + 2u] - 1u) * zero_l + min(zero_lane, max(zero_l, 1u) - 1u); }
fn out_f32(zero_c: u32, zero_i: u32, zero_lane: u32) -> f32 {
    if (out_count(zero_c) == 0u) { return 0.0; }
    let zero_w = out[out_addr(zero_c, zero_i, zero_lane)]; let zero_k = out_kind(zero_c);
    if (zero_k == 1u) { return f32(bitcast<i32>(zero_w)); }
    if (zero_k == 2u) { return f32(zero_w); }
    return bitcast<f32>(zero_w);
}
fn out_i32(zero_c: u32, zero_i: u32, zero_lane: u32) -> i32 {
    if (out_count(zero_c) == 0u) { return 0i; }
    let zero_w = out[out_addr(zero_c, zero_i, zero_lane)]; let zero_k = out_kind(zero_c);
    if (zero_k == 1u) { return bitcast<i32>(zero_w); }
    if (zero_k == 2u) { return i32(min(zero_w, 2147483647u)); }
    return select(i32(bitcast<f32>(zero_w)), 0i, (bitcast<u32>(bitcast<f32>(zero_w)) & 0x7fffffffu) > 0x7f800000u);
}
fn out_u32(zero_c: u32, zero_i: u32, zero_lane: u32) -> u32 {
    if (out_count(zero_c) == 0u) { return 0u; }
    let zero_w = out[out_addr(zero_c, zero_i, zero_lane)]; let zero_k = out_kind(zero_c);
    if (zero_k == 1u) { return u32(max(bitcast<i32>(zero_w), 0)); }
    if (zero_k == 2u) { return zero_w; }
    return select(u32(bitcast<f32>(zero_w)), 0u, (bitcast<u32>(bitcast<f32>(zero_w)) & 0x7fffffffu) > 0x7f800000u);
}
fn out_vec2(zero_c: u32, zero_i: u32) -> vec2<f32> { return vec2<f32>(out_f32(zero_c, zero_i, 0u), out_f32(zero_c, zero_i, 1u)); }
fn out_vec3(zero_c: u32, zero_i: u32) -> vec3<f32> { return vec3<f32>(out_f32(zero_c, zero_i, 0u), out_f32(zero_c, zero_i, 1u), out_f32(zero_c, zero_i, 2u)); }
fn out_vec4(zero_c: u32, zero_i: u32) -> vec4<f32> { return vec4<f32>(out_f32(zero_c, zero_i, 0u), out_f32(zero_c, zero_i, 1u), out_f32(zero_c, zero_i, 2u), out_f32(zero_c, zero_i, 3u)); }
fn out_set_f32(zero_c: u32, zero_i: u32, zero_lane: u32, zero_v: f32) {
    if (out_count(zero_c) == 0u) { return; }
    let zero_k = out_kind(zero_c); var zero_w = bitcast<u32>(zero_v);
    if (zero_k == 1u) { zero_w = bitcast<u32>(select(i32(zero_v), 0i, (bitcast<u32>(zero_v) & 0x7fffffffu) > 0x7f800000u)); }
    if (zero_k == 2u) { zero_w = select(u32(zero_v), 0u, (bitcast<u32>(zero_v) & 0x7fffffffu) > 0x7f800000u); }
    out[out_addr(zero_c, zero_i, zero_lane)] = zero_w;
}
fn out_set_i32(zero_c: u32, zero_i: u32, zero_lane: u32, zero_v: i32) {
    if (out_count(zero_c) == 0u) { return; }
    let zero_k = out_kind(zero_c); var zero_w = bitcast<u32>(f32(zero_v));
    if (zero_k == 1u) { zero_w = bitcast<u32>(zero_v); }
    if (zero_k == 2u) { zero_w = u32(max(zero_v, 0)); }
    out[out_addr(zero_c, zero_i, zero_lane)] = zero_w;
}
fn out_set_u32(zero_c: u32, zero_i: u32, zero_lane: u32, zero_v: u32) {
    if (out_count(zero_c) == 0u) { return; }
    let zero_k = out_kind(zero_c); var zero_w = bitcast<u32>(f32(zero_v));
    if (zero_k == 1u) { zero_w = bitcast<u32>(i32(min(zero_v, 2147483647u))); }
    if (zero_k == 2u) { zero_w = zero_v; }
    out[out_addr(zero_c, zero_i, zero_lane)] = zero_w;
}
fn out_set_vec2(zero_c: u32, zero_i: u32, zero_v: vec2<f32>) { out_set_f32(zero_c, zero_i, 0u, zero_v.x); out_set_f32(zero_c, zero_i, 1u, zero_v.y); }
fn out_set_vec3(zero_c: u32, zero_i: u32, zero_v: vec3<f32>) { out_set_f32(zero_c, zero_i, 0u, zero_v.x); out_set_f32(zero_c, zero_i, 1u, zero_v.y); out_set_f32(zero_c, zero_i, 2u, zero_v.z); }
fn out_set_vec4(zero_c: u32, zero_i: u32, zero_v: vec4<f32>) { out_set_f32(zero_c, zero_i, 0u, zero_v.x); out_set_f32(zero_c, zero_i, 1u, zero_v.y); out_set_f32(zero_c, zero_i, 2u, zero_v.z); out_set_f32(zero_c, zero_i, 3u, zero_v.w); }
// ---- kernel body ----
// out.blend[i] = mix(table.pos[i], table.vel[i], params.mix), by value whatever the stored kinds.
                            
fn zero_user_main(                               gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) {
        return;
    }
    let a = table_vec3(table_col_pos, i);
    let b = table_vec3(table_col_vel, i);
    out_set_vec3(out_col_blend, i, mix(a, b, vec3<f32>(params.mix)));
    out_set_u32(out_col_count, i, 0u, table_u32(table_col_id, i, 0u));
}

// ---- generated entry point ----
@compute @workgroup_size(32, 1, 1)
fn main(@builtin(workgroup_id) zero_wid: vec3<u32>, @builtin(num_workgroups) zero_nwg: vec3<u32>, @builtin(local_invocation_id) zero_lid: vec3<u32>, @builtin(local_invocation_index) zero_lii: u32) {
    let zero_gc = vec3<u32>(params.zero_gx, params.zero_gy, params.zero_gz);
    let zero_total = zero_gc.x * zero_gc.y * zero_gc.z;
    let zero_step = zero_nwg.x * zero_nwg.y * zero_nwg.z;
    var zero_l = zero_wid.x + zero_nwg.x * (zero_wid.y + zero_nwg.y * zero_wid.z);
    loop {
        if (zero_l >= zero_total) { break; }
        var zero_w = vec3<u32>(zero_l, 0u, 0u);
        if (zero_gc.y * zero_gc.z != 1u) {
            zero_w = vec3<u32>(zero_l % zero_gc.x, (zero_l / zero_gc.x) % zero_gc.y, zero_l / (zero_gc.x * zero_gc.y));
        }
        let zero_g = zero_w * vec3<u32>(32u, 1u, 1u) + zero_lid;
        zero_user_main(zero_g);
        if (zero_total - zero_l <= zero_step) { break; }
        zero_l += zero_step;
    }
}
