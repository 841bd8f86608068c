// One tile per invocation: map its value through the palette, store the colour into the block of
// pixels whose nearest tile it is (the texture the window shows; its format orders the channels).

// Column 0 of the palette table holds the colour stops (vec4 each), evenly spaced over [0, 1].
fn palette_at(t: f32) -> vec4<f32> {
    let stops = palette_count(0u);
    let x = clamp(t, 0.0, 1.0) * f32(stops - 1u);
    let i = min(u32(floor(x)), stops - 2u);
    let a = palette_vec4(0u, i);
    let b = palette_vec4(0u, i + 1u);
    return mix(a, b, x - f32(i));
}

// The first of `out` pixels whose nearest tile (of `size` along the same axis) is tile `f`.
fn first_pixel(f: u32, size: u32, out: u32) -> u32 {
    return (f * out + size - 1u) / size;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let item = zero_index(gid);
    if (item >= zero_n()) {
        return;
    }
    let tile = tiles_get(item);
    let v = field_get(tile);
    let t = (v - params.lo) / max(params.hi - params.lo, 1e-6);
    let colour = clamp(palette_at(t), vec4<f32>(0.0), vec4<f32>(1.0));
    let tiles = params.chunk_w * params.chunk_h;
    let slot = tile / tiles;
    let local = tile % tiles;
    let fx = (slot % params.grid_w) * params.chunk_w + local % params.chunk_w;
    let fy = (slot / params.grid_w) * params.chunk_h + local / params.chunk_w;
    let field_w = params.grid_w * params.chunk_w;
    let field_h = (field_len() / tiles / params.grid_w) * params.chunk_h;
    let x0 = first_pixel(fx, field_w, params.out_w);
    let x1 = first_pixel(fx + 1u, field_w, params.out_w);
    let y1 = first_pixel(fy + 1u, field_h, params.out_h);
    for (var py = first_pixel(fy, field_h, params.out_h); py < y1; py = py + 1u) {
        for (var px = x0; px < x1; px = px + 1u) {
            textureStore(pixels, vec2<u32>(px, py), colour);
        }
    }
}
