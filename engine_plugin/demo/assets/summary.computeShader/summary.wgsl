// One invocation per chunk: chunks_get(i) is the chunk's slot in the engine's heat mirror.
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) {
        return;
    }
    let base = chunks_get(i) * params.tile_count;
    var hottest = heat_get(base);
    var sum = 0.0;
    for (var t = 0u; t < params.tile_count; t = t + 1u) {
        let v = heat_get(base + t);
        hottest = max(hottest, v);
        sum = sum + v;
    }
    stats_set(i, vec2<f32>(hottest, sum * params.inv_tile_count));
}
