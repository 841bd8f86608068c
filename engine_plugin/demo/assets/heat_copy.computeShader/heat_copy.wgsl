// heat = next, tile by tile (the step cannot write `heat` in place: its neighbours still read it).
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let item = zero_index(gid);
    if (item >= zero_n()) {
        return;
    }
    let i = tiles_get(item);
    heat_set(i, next_get(i));
}
