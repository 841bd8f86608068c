// next = heat + rate * (neighbour average - heat) + source - cooling * heat
fn tile_index(gx: i32, gy: i32) -> u32 {
    let w = i32(params.grid_w * params.chunk_w);
    let h = i32(params.grid_h * params.chunk_h);
    let x = u32(clamp(gx, 0, w - 1));
    let y = u32(clamp(gy, 0, h - 1));
    let slot = (y / params.chunk_h) * params.grid_w + x / params.chunk_w;
    return slot * params.chunk_w * params.chunk_h + (y % params.chunk_h) * params.chunk_w + x % params.chunk_w;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let item = zero_index(gid);
    if (item >= zero_n()) {
        return;
    }
    let i = tiles_get(item);
    let tiles = params.chunk_w * params.chunk_h;
    let slot = i / tiles;
    let local = i % tiles;
    let gx = i32((slot % params.grid_w) * params.chunk_w + local % params.chunk_w);
    let gy = i32((slot / params.grid_w) * params.chunk_h + local / params.chunk_w);
    let h = heat_get(i);
    var sum = heat_get(tile_index(gx - 1, gy)) + heat_get(tile_index(gx + 1, gy))
            + heat_get(tile_index(gx, gy - 1)) + heat_get(tile_index(gx, gy + 1));
    var count = 4.0;
    // @when STENCIL box
    sum = sum + heat_get(tile_index(gx - 1, gy - 1)) + heat_get(tile_index(gx + 1, gy - 1))
              + heat_get(tile_index(gx - 1, gy + 1)) + heat_get(tile_index(gx + 1, gy + 1));
    count = 8.0;
    // @end
    let avg = sum / count;
    next_set(i, h + params.rate * (avg - h) + source_get(i) - params.cooling * h);
}
