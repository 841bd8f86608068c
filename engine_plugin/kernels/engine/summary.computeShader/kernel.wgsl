// One invocation per chunk of the work list: chunks_get(i) is the chunk's mirror slot.
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) {
        return;
    }
    let base = chunks_get(i) * params.tile_count;
    var lo = src_get(base);
    var hi = lo;
    var sum = 0.0;
    for (var t = 0u; t < params.tile_count; t = t + 1u) {
        let v = src_get(base + t);
        lo = min(lo, v);
        hi = max(hi, v);
        sum = sum + f32(v);
    }
    summary_set(i, vec4<f32>(f32(lo), f32(hi), sum * params.inv_tile_count, sum));
}
