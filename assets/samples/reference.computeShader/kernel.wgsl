// dst[i] = FOLD(BODY(src[i]) * weight[i], src[i + 1]); one hit record per element.
// BODY is spliced source over `v` (the element), written as is (like a C macro): the body
// brackets it where precedence matters. weight is column 0 of the table `cols`.

fn fold(a: T, b: T) -> T {
    // @when FOLD add
    return a + b;
    // @end
    // @when FOLD min
    return min(a, b);
    // @end
    // @when FOLD max
    return max(a, b);
    // @end
    // @when FOLD mean
    return (a + b) / T(2);
    // @end
    // @when FOLD set
    return a;
    // @end
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) {
        return;
    }
    let v = src_get(i);
    let right = src_get(min(i + 1u, src_len() - 1u));
    let weight = T(cols_f32(0u, min(i, cols_count(0u) - 1u), 0u));
    dst_set(i, fold((BODY) * weight, right)); // (BODY): spliced text, as written
    hits_store(i, vec4<f32>(f32(i), f32(FOLD), 0.0, 1.0));
    if (i == 0u) {
        hits_set_count(zero_n());
    }
}
