// One pixel per invocation: find the tile under it, map its value through the palette, store
// the colour into the texture the window shows (the texture's format orders the channels).

// Column 0 of the palette table holds the colour stops (vec4 each), evenly spaced over [0, 1].
fn palette_at(t: f32) -> vec4<f32> {
    let stops = palette_count(0u);
    let x = clamp(t, 0.0, 1.0) * f32(stops - 1u);
    let i = min(u32(floor(x)), stops - 2u);
    let a = palette_vec4(0u, i);
    let b = palette_vec4(0u, i + 1u);
    return mix(a, b, x - f32(i));
}

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    if (zero_index(gid) >= zero_n()) {
        return;
    }
    let px = gid.x;
    let py = gid.y;
    let field_w = params.grid_w * params.chunk_w;
    let field_h = (field_len() / (params.chunk_w * params.chunk_h) / params.grid_w) * params.chunk_h;
    let fx = px * field_w / params.out_w;
    let fy = py * field_h / params.out_h;
    let slot = (fy / params.chunk_h) * params.grid_w + fx / params.chunk_w;
    let tile = (fy % params.chunk_h) * params.chunk_w + fx % params.chunk_w;
    let v = field_get(slot * params.chunk_w * params.chunk_h + tile);
    let t = (v - params.lo) / max(params.hi - params.lo, 1e-6);
    textureStore(pixels, gid.xy, clamp(palette_at(t), vec4<f32>(0.0), vec4<f32>(1.0)));
}
