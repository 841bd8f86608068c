// One invocation per chunk: count its tiles above the threshold, remember the hottest one.
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) {
        return;
    }
    let base = chunks_get(i) * params.tile_count;
    var count = 0u;
    var hottest = 0u;
    for (var t = 0u; t < params.tile_count; t = t + 1u) {
        let v = heat_get(base + t);
        if (v > params.threshold) {
            count = count + 1u;
        }
        if (v > heat_get(base + hottest)) {
            hottest = t;
        }
    }
    hot_set(i, vec2<u32>(count, hottest));
}
