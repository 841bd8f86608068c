// out.blend[i] = mix(table.pos[i], table.vel[i], params.mix), by value whatever the stored kinds.
@compute @workgroup_size(32)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) {
        return;
    }
    let a = table_vec3(table_col_pos, i);
    let b = table_vec3(table_col_vel, i);
    out_set_vec3(out_col_blend, i, mix(a, b, vec3<f32>(params.mix)));
    out_set_u32(out_col_count, i, 0u, table_u32(table_col_id, i, 0u));
}
