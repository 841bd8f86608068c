// Calls every accessor the lowering generates for every_kind, so the compiler checks each one.
@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) {
        return;
    }
    // buffers of T and fixed elements
    let v = src_get(i);
    dst_set(i, EXPR + dst_get(i));
    let total = src_len() + dst_len() + vi4_len() + vu2_len() + v3f_len() + raw_len() + raw_out_len();
    let q: vec4<i32> = vi4_get(i);
    vu2_set(i, vu2_get(i) + vec2<u32>(u32(q.x), total));
    v3f_set(i, v3f_get(i) * params.p_v3f + vec3<f32>(params.p_f));
    // raw bits
    let r: f32 = raw_get(i);
    raw_out_set(i, raw_out_get(i) + vec2<i32>(i32(r), params.p_i));
    // atomic buffers: every op of every one-lane type
    let s = i % au_len();
    au_set(s, au_get(s) + params.p_u);
    _ = au_atomic_exchange(s, 1u);
    _ = au_atomic_min(s, 2u);
    _ = au_atomic_max(s, 3u);
    _ = au_atomic_add(s, 4u);
    _ = au_atomic_and(s, 5u);
    _ = au_atomic_or(s, 6u);
    _ = au_atomic_xor(s, 7u);
    ai_set(s, ai_get(s) + i32(ai_len()));
    _ = ai_atomic_exchange(s, -1);
    _ = ai_atomic_min(s, -2);
    _ = ai_atomic_max(s, -3);
    _ = ai_atomic_add(s, -4);
    _ = ai_atomic_and(s, -5);
    _ = ai_atomic_or(s, -6);
    _ = ai_atomic_xor(s, -7);
    af_set(s, af_get(s) + f32(af_len()));
    _ = af_atomic_exchange(s, 0.5);
    _ = af_atomic_add(s, 1.5);
    _ = af_atomic_min(s, -2.5);
    _ = af_atomic_max(s, 3.5);
    // append, live
    hits_store(i, v);
    _ = hits_append(v);
    if (i == 0u) {
        hits_set_count(min(hits_count_value(), hits_capacity()) + hits_len());
    }
    alive_set(i, alive_get(i) + alive_len());
    // tables: read by value in every type, written back through out_table
    let w = table_f32(table_col_pos, i, 0u) + f32(table_i32(table_col_vel, i, 1u)) + f32(table_u32(table_col_mass, i, 0u));
    let t2 = table_vec2(table_col_pos, i);
    let t3 = table_vec3(table_col_vel, i);
    let t4 = table_vec4(table_col_pos, i);
    let heads = table_count(0u) + table_lanes(0u) + table_kind(0u) + table_addr(0u, i, 0u);
    out_table_set_f32(out_table_col_heat, i, 0u, w + t2.x + t3.y + t4.z);
    out_table_set_i32(out_table_col_heat, i, 1u, out_table_i32(out_table_col_cold, i, 0u));
    out_table_set_u32(out_table_col_cold, i, 0u, heads + out_table_u32(out_table_col_heat, i, 1u));
    out_table_set_vec2(out_table_col_heat, i, out_table_vec2(out_table_col_cold, i));
    out_table_set_vec3(out_table_col_heat, i, out_table_vec3(out_table_col_cold, i));
    out_table_set_vec4(out_table_col_heat, i, out_table_vec4(out_table_col_cold, i) + vec4<f32>(out_table_f32(out_table_col_heat, i, 0u)));
    // page PA: every element type, read_write by default (the page's access), one read column
    a_f32_set(i, a_f32_get(i) + 1.0);
    a_i32_set(i, a_i32_get(i) - 1);
    a_u32_set(i, a_u32_get(i) + a_u32_len());
    a_v2f_set(i, a_v2f_get(i) * params.p_v2f);
    a_v3f_set(i, a_v3f_get(i) + a_ro_get(i));
    a_v4f_set(i, a_v4f_get(i) + params.p_v4f);
    a_v2i_set(i, a_v2i_get(i) + params.p_v2i);
    a_v3i_set(i, a_v3i_get(i) + params.p_v3i);
    a_v4u_set(i, a_v4u_get(i) + params.p_v4u);
    a_t_set(i, a_t_get(i) + v);
    a_f32_set_word(0u, a_f32_word(0u) + a_ro_word(0u) + a_ro_len());
    // page PB (atomic words): every atomic op of every one-lane column
    _ = b_u32_atomic_exchange(i, 1u);
    _ = b_u32_atomic_min(i, 2u);
    _ = b_u32_atomic_max(i, 3u);
    _ = b_u32_atomic_add(i, 4u);
    _ = b_u32_atomic_and(i, 5u);
    _ = b_u32_atomic_or(i, 6u);
    _ = b_u32_atomic_xor(i, 7u);
    _ = b_i32_atomic_exchange(i, -1);
    _ = b_i32_atomic_min(i, -2);
    _ = b_i32_atomic_max(i, -3);
    _ = b_i32_atomic_add(i, -4);
    _ = b_i32_atomic_and(i, -5);
    _ = b_i32_atomic_or(i, -6);
    _ = b_i32_atomic_xor(i, -7);
    _ = b_f32_atomic_exchange(i, 0.5);
    _ = b_f32_atomic_add(i, 1.5);
    _ = b_f32_atomic_min(i, -2.5);
    _ = b_f32_atomic_max(i, 3.5);
    b_v3f_set(i, b_v3f_get(i) + vec3<f32>(f32(b_ro_get(i) + b_ro_word(0u))));
    b_u32_set_word(1u, b_u32_word(1u) + b_i32_len() + b_f32_len() + b_v3f_len());
    b_i32_set(i, b_i32_get(i));
    b_f32_set(i, b_f32_get(i));
    // page PC (read-only)
    let c = c_f32_get(i) + f32(c_v4i_get(i).w) + f32(c_f32_word(0u) + c_v4i_len());
    a_f32_set(i, a_f32_get(i) + c);
    // bindings that exist per variant
    // @when MODE a
    let m: f32 = sel_get(i) + f32(sel_len());
    // @when COUNT plain
    d_u32_set(i, d_u32_get(i) + u32(m) + d_u32_word(0u) + d_u32_len());
    // @end
    // @end
    // @when MODE b
    sel_set(i, sel_get(i) + vec3<f32>(params.p_f));
    // @when COUNT device
    d_u32_set_word(0u, dom[0] + d_u32_get(i) + params.p_v3u.z + params.p_v2u.y + u32(params.p_v4i.w));
    // @end
    // @end
}
