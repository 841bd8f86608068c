// engine_plugin: lowered from assets/samples/reference.computeShader/bindings.yaml + assets/samples/reference.computeShader/kernel.wgsl; variant BODY=v FOLD=mean T=vec3<f32>
alias T = vec3<f32>;
const FOLD: u32 = 3u;
const FOLD_add: u32 = 0u;
const FOLD_min: u32 = 1u;
const FOLD_max: u32 = 2u;
const FOLD_mean: u32 = 3u;
const FOLD_set: u32 = 4u;
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
    zero_len_src: u32,
    zero_len_dst: u32,
    zero_len_hits: u32,
}
@group(0) @binding(0) var<storage, read> cols: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
@group(0) @binding(3) var<storage, read_write> hits: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> hits_count: array<atomic<u32>>;
@group(0) @binding(5) var<uniform> params: ZeroParams;
fn zero_n() -> u32 { return params.n; }
fn zero_grid() -> vec3<u32> { return vec3<u32>(params.zero_nx, params.zero_ny, params.zero_nz); }
fn zero_index(zero_gid: vec3<u32>) -> u32 { if (any(zero_gid >= zero_grid())) { return 0xFFFFFFFFu; } return zero_gid.x + params.zero_nx * (zero_gid.y + params.zero_ny * zero_gid.z); }
fn cols_count(zero_c: u32) -> u32 { if (zero_c >= cols[0]) { return 0u; } return cols[1u + zero_c * 4u + 2u]; }
fn cols_lanes(zero_c: u32) -> u32 { if (zero_c >= cols[0]) { return 0u; } return cols[1u + zero_c * 4u + 1u]; }
fn cols_kind(zero_c: u32) -> u32 { return cols[1u + zero_c * 4u + 3u]; }
fn cols_addr(zero_c: u32, zero_i: u32, zero_lane: u32) -> u32 { let zero_l = cols[1u + zero_c * 4u + 1u]; return cols[1u + zero_c * 4u] + min(zero_i, cols[1u + zero_c * 4u + 2u] - 1u) * zero_l + min(zero_lane, max(zero_l, 1u) - 1u); }
fn cols_f32(zero_c: u32, zero_i: u32, zero_lane: u32) -> f32 {
    if (cols_count(zero_c) == 0u) { return 0.0; }
    let zero_w = cols[cols_addr(zero_c, zero_i, zero_lane)]; let zero_k = cols_kind(zero_c);
    if (zero_k == 1u) { return f32(bitcast<i32>(zero_w)); }
    if (zero_k == 2u) { return f32(zero_w); }
    return bitcast<f32>(zero_w);
}
fn cols_i32(zero_c: u32, zero_i: u32, zero_lane: u32) -> i32 {
    if (cols_count(zero_c) == 0u) { return 0i; }
    let zero_w = cols[cols_addr(zero_c, zero_i, zero_lane)]; let zero_k = cols_kind(zero_c);
    if (zero_k == 1u) { return bitcast<i32>(zero_w); }
    if (zero_k == 2u) { return i32(min(zero_w, 2147483647u)); }
    return select(i32(bitcast<f32>(zero_w)), 0i, (bitcast<u32>(bitcast<f32>(zero_w)) & 0x7fffffffu) > 0x7f800000u);
}
fn cols_u32(zero_c: u32, zero_i: u32, zero_lane: u32) -> u32 {
    if (cols_count(zero_c) == 0u) { return 0u; }
    let zero_w = cols[cols_addr(zero_c, zero_i, zero_lane)]; let zero_k = cols_kind(zero_c);
    if (zero_k == 1u) { return u32(max(bitcast<i32>(zero_w), 0)); }
    if (zero_k == 2u) { return zero_w; }
    return select(u32(bitcast<f32>(zero_w)), 0u, (bitcast<u32>(bitcast<f32>(zero_w)) & 0x7fffffffu) > 0x7f800000u);
}
fn cols_vec2(zero_c: u32, zero_i: u32) -> vec2<f32> { return vec2<f32>(cols_f32(zero_c, zero_i, 0u), cols_f32(zero_c, zero_i, 1u)); }
fn cols_vec3(zero_c: u32, zero_i: u32) -> vec3<f32> { return vec3<f32>(cols_f32(zero_c, zero_i, 0u), cols_f32(zero_c, zero_i, 1u), cols_f32(zero_c, zero_i, 2u)); }
fn cols_vec4(zero_c: u32, zero_i: u32) -> vec4<f32> { return vec4<f32>(cols_f32(zero_c, zero_i, 0u), cols_f32(zero_c, zero_i, 1u), cols_f32(zero_c, zero_i, 2u), cols_f32(zero_c, zero_i, 3u)); }
fn src_len() -> u32 { return params.zero_len_src; }
fn src_get(zero_i: u32) -> vec3<f32> { let zero_b = zero_i * 3u; return vec3<f32>(src[zero_b], src[zero_b + 1u], src[zero_b + 2u]); }
fn dst_len() -> u32 { return params.zero_len_dst; }
fn dst_get(zero_i: u32) -> vec3<f32> { let zero_b = zero_i * 3u; return vec3<f32>(dst[zero_b], dst[zero_b + 1u], dst[zero_b + 2u]); }
fn dst_set(zero_i: u32, zero_v: vec3<f32>) { let zero_b = zero_i * 3u; dst[zero_b] = zero_v.x; dst[zero_b + 1u] = zero_v.y; dst[zero_b + 2u] = zero_v.z; }
fn hits_len() -> u32 { return params.zero_len_hits; }
fn hits_get(zero_i: u32) -> vec4<f32> { return hits[zero_i]; }
fn hits_set(zero_i: u32, zero_v: vec4<f32>) { hits[zero_i] = zero_v; }
fn hits_capacity() -> u32 { return params.zero_len_hits; }
fn hits_store(zero_slot: u32, zero_v: vec4<f32>) { if (zero_slot < hits_capacity()) { hits_set(zero_slot, zero_v); } }
fn hits_set_count(zero_c: u32) { atomicStore(&hits_count[0], zero_c); }
fn hits_count_value() -> u32 { return atomicLoad(&hits_count[0]); }
// ---- kernel body ----
// dst[i] = FOLD(BODY(src[i]) * weight[i], src[i + 1]); one hit record per element.
// BODY is spliced source over `v` (the element), written as is (like a C macro): the body
// brackets it where precedence matters. weight is column 0 of the table `cols`.

fn fold(a: T, b: T) -> T {
    // @when FOLD add

    // @end
    // @when FOLD min

    // @end
    // @when FOLD max

    // @end
    // @when FOLD mean
    return (a + b) / T(2);
    // @end
    // @when FOLD set

    // @end
}

                            
fn zero_user_main(                               gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) {
        return;
    }
    let v = src_get(i);
    let right = src_get(min(i + 1u, src_len() - 1u));
    let weight = T(cols_f32(0u, min(i, cols_count(0u) - 1u), 0u));
    dst_set(i, fold((v) * weight, right)); // (BODY): spliced text, as written
    hits_store(i, vec4<f32>(f32(i), f32(FOLD), 0.0, 1.0));
    if (i == 0u) {
        hits_set_count(zero_n());
    }
}

// ---- generated entry point ----
@compute @workgroup_size(64, 1, 1)
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
        let zero_g = zero_w * vec3<u32>(64u, 1u, 1u) + zero_lid;
        zero_user_main(zero_g);
        if (zero_total - zero_l <= zero_step) { break; }
        zero_l += zero_step;
    }
}
