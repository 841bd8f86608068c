// Integrate particle positions, bounce on the floor, and count particles per height bucket.
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) {
        return;
    }
    var p = pos_get(i) + vel_get(i) * params.dt;
    p.y = max(p.y, params.floor_y);
    pos_set(i, p);
    let bucket = u32(max(0.0, (p.y - params.floor_y) / params.bucket_size));
    hist_atomic_add(min(bucket, hist_len() - 1u), 1u);
}
