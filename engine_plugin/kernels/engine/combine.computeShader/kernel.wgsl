@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) {
        return;
    }
    let t = tiles_get(i);
    let x = a_get(t);
    let y = b_get(t);
    var v = x + y;
    if (OP == OP_min) {
        v = min(x, y);
    } else if (OP == OP_max) {
        v = max(x, y);
    }
    value_set(i, v);
}
