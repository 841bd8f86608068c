// A zero or subnormal tile or threshold reads as +0.0, by bits: the H200 flushes subnormals,
// lavapipe does not (WGSL allows either), and the count must not depend on it.
fn flush_in(v: f32) -> f32 {
    let b = bitcast<u32>(v);
    return bitcast<f32>(select(b, 0u, (b & 0x7f800000u) == 0u));
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) {
        return;
    }
    let base = chunks_get(i) * params.tile_count;
    let threshold = flush_in(params.threshold);
    var count = 0u;
    for (var t = 0u; t < params.tile_count; t = t + 1u) {
        if (flush_in(src_get(base + t)) > threshold) {
            count = count + 1u;
        }
    }
    above_set(i, count);
}
