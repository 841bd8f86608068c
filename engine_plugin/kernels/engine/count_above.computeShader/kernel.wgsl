@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) {
        return;
    }
    let base = chunks_get(i) * params.tile_count;
    var count = 0u;
    for (var t = 0u; t < params.tile_count; t = t + 1u) {
        if (src_get(base + t) > params.threshold) {
            count = count + 1u;
        }
    }
    above_set(i, count);
}
