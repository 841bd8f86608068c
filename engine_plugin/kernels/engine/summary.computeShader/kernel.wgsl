// One invocation per chunk of the work list: chunks_get(i) is the chunk's mirror slot.
//
// Every bit is defined on every adapter, so the CPU fallback can reproduce it: WGSL leaves
// min/max of a NaN, the choice between 0.0 and -0.0, and the bits of a NaN that arithmetic
// makes to the implementation (the H200 answered other bits than lavapipe). So NaN tiles are
// skipped by their bits, a tie keeps the earlier tile, a chunk of NaN only keeps its first
// tile's bits, and a NaN mean or sum is the quiet NaN 0x7fc00000. WGSL also lets an adapter
// flush subnormal f32 values to zero (the H200 does, lavapipe does not): a zero or subnormal
// tile reads as +0.0, and a zero or subnormal sum (after every add) or mean is +0.0, on every
// adapter. (|x| < 2^-126 holds for those on both kinds of adapter; x - x is +0.0 on both; for
// an i32/u32 tile it holds for 0 only, which stays 0.)
const MIN_NORMAL: f32 = 1.17549435e-38;  // 2^-126

fn flush_result(v: f32) -> f32 {
    let b = bitcast<u32>(v);
    return bitcast<f32>(select(b, 0u, (b & 0x7f800000u) == 0u));
}

fn is_nan_bits(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

fn quiet_nan(v: f32) -> f32 {
    return bitcast<f32>(select(bitcast<u32>(v), 0x7fc00000u, is_nan_bits(v)));
}

// The record with its mean flushed and its mean and sum NaN-quieted (min and max keep their
// tiles' bits; the sum is flushed after every add).
fn quiet_mean_and_sum(r: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(r.x, r.y, quiet_nan(flush_result(r.z)), quiet_nan(r.w));
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) {
        return;
    }
    let base = chunks_get(i) * params.tile_count;
    var lo = src_get(base);  // its type; its value is the first non-NaN tile's (or the first tile's)
    var hi = lo;
    var seen = false;
    var sum = 0.0;
    for (var t = 0u; t < params.tile_count; t = t + 1u) {
        let raw = src_get(base + t);
        let v = select(raw, raw - raw, abs(f32(raw)) < MIN_NORMAL);
        sum = flush_result(sum + f32(v));
        if (is_nan_bits(f32(v))) {
            continue;
        }
        if (!seen || v < lo) {
            lo = v;
        }
        if (!seen || v > hi) {
            hi = v;
        }
        seen = true;
    }
    summary_set(i, quiet_mean_and_sum(vec4<f32>(f32(lo), f32(hi), sum * params.inv_tile_count, sum)));
}
