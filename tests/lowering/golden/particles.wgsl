// engine_plugin: lowered from assets/samples/particles.computeShader/bindings.yaml + assets/samples/particles.computeShader/integrate.wgsl; variant (default)
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
    dt: f32,
    floor_y: f32,
    bucket_size: f32,
    col_base_pos: u32,
    col_len_pos: u32,
    col_base_vel: u32,
    col_len_vel: u32,
    col_base_hist: u32,
    col_len_hist: u32,
}
@group(0) @binding(0) var<storage, read_write> PA: array<u32>;
@group(0) @binding(1) var<storage, read_write> PB: array<atomic<u32>>;
@group(0) @binding(2) var<uniform> params: ZeroParams;
fn zero_n() -> u32 { return params.n; }
fn zero_grid() -> vec3<u32> { return vec3<u32>(params.zero_nx, params.zero_ny, params.zero_nz); }
fn zero_index(zero_gid: vec3<u32>) -> u32 { if (any(zero_gid >= zero_grid())) { return 0xFFFFFFFFu; } return zero_gid.x + params.zero_nx * (zero_gid.y + params.zero_ny * zero_gid.z); }
fn pos_len() -> u32 { return params.col_len_pos; }
fn pos_word(zero_w: u32) -> u32 { return PA[params.col_base_pos + min(zero_w, max(params.col_len_pos * 3u, 1u) - 1u)]; }
fn pos_get(zero_i: u32) -> vec3<f32> { let zero_b = params.col_base_pos + min(zero_i, max(params.col_len_pos, 1u) - 1u) * 3u; return vec3<f32>(bitcast<f32>(PA[zero_b]), bitcast<f32>(PA[zero_b + 1u]), bitcast<f32>(PA[zero_b + 2u])); }
fn pos_set(zero_i: u32, zero_v: vec3<f32>) { if (params.col_len_pos == 0u) { return; } let zero_b = params.col_base_pos + min(zero_i, max(params.col_len_pos, 1u) - 1u) * 3u; PA[zero_b] = bitcast<u32>(zero_v.x); PA[zero_b + 1u] = bitcast<u32>(zero_v.y); PA[zero_b + 2u] = bitcast<u32>(zero_v.z); }
fn pos_set_word(zero_w: u32, zero_v: u32) { if (params.col_len_pos == 0u) { return; } PA[params.col_base_pos + min(zero_w, max(params.col_len_pos * 3u, 1u) - 1u)] = zero_v; }
fn vel_len() -> u32 { return params.col_len_vel; }
fn vel_word(zero_w: u32) -> u32 { return PA[params.col_base_vel + min(zero_w, max(params.col_len_vel * 3u, 1u) - 1u)]; }
fn vel_get(zero_i: u32) -> vec3<f32> { let zero_b = params.col_base_vel + min(zero_i, max(params.col_len_vel, 1u) - 1u) * 3u; return vec3<f32>(bitcast<f32>(PA[zero_b]), bitcast<f32>(PA[zero_b + 1u]), bitcast<f32>(PA[zero_b + 2u])); }
fn hist_len() -> u32 { return params.col_len_hist; }
fn hist_word(zero_w: u32) -> u32 { return atomicLoad(&PB[params.col_base_hist + min(zero_w, max(params.col_len_hist, 1u) - 1u)]); }
fn hist_get(zero_i: u32) -> u32 { let zero_b = params.col_base_hist + min(zero_i, max(params.col_len_hist, 1u) - 1u); return atomicLoad(&PB[zero_b]); }
fn hist_set(zero_i: u32, zero_v: u32) { if (params.col_len_hist == 0u) { return; } let zero_b = params.col_base_hist + min(zero_i, max(params.col_len_hist, 1u) - 1u); atomicStore(&PB[zero_b], zero_v); }
fn hist_set_word(zero_w: u32, zero_v: u32) { if (params.col_len_hist == 0u) { return; } atomicStore(&PB[params.col_base_hist + min(zero_w, max(params.col_len_hist, 1u) - 1u)], zero_v); }
fn hist_atomic_exchange(zero_i: u32, zero_v: u32) -> u32 { let zero_b = params.col_base_hist + min(zero_i, max(params.col_len_hist, 1u) - 1u); return atomicExchange(&PB[zero_b], zero_v); }
fn hist_atomic_min(zero_i: u32, zero_v: u32) -> u32 { let zero_b = params.col_base_hist + min(zero_i, max(params.col_len_hist, 1u) - 1u); return atomicMin(&PB[zero_b], zero_v); }
fn hist_atomic_max(zero_i: u32, zero_v: u32) -> u32 { let zero_b = params.col_base_hist + min(zero_i, max(params.col_len_hist, 1u) - 1u); return atomicMax(&PB[zero_b], zero_v); }
fn hist_atomic_add(zero_i: u32, zero_v: u32) -> u32 { let zero_b = params.col_base_hist + min(zero_i, max(params.col_len_hist, 1u) - 1u); return atomicAdd(&PB[zero_b], zero_v); }
fn hist_atomic_and(zero_i: u32, zero_v: u32) -> u32 { let zero_b = params.col_base_hist + min(zero_i, max(params.col_len_hist, 1u) - 1u); return atomicAnd(&PB[zero_b], zero_v); }
fn hist_atomic_or(zero_i: u32, zero_v: u32) -> u32 { let zero_b = params.col_base_hist + min(zero_i, max(params.col_len_hist, 1u) - 1u); return atomicOr(&PB[zero_b], zero_v); }
fn hist_atomic_xor(zero_i: u32, zero_v: u32) -> u32 { let zero_b = params.col_base_hist + min(zero_i, max(params.col_len_hist, 1u) - 1u); return atomicXor(&PB[zero_b], zero_v); }
// ---- kernel body ----
// Integrate particle positions, bounce on the floor, and count particles per height bucket.
                            
fn zero_user_main(                               gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) {
        return;
    }
    var p = pos_get(i) + vel_get(i) * params.dt;
    p.y = max(p.y, params.floor_y);
    pos_set(i, p);
    let bucket = u32(max(0.0, (p.y - params.floor_y) / params.bucket_size));
    hist_atomic_add(min(bucket, hist_len() - 1u), 1u);
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
