// The seed's example as a kernel: dst[i] = FOLD(BODY * weight, src[i + 1]), one hit per element.
// BODY is spliced source. Left unset (as in the seed's usage line) it stays the identifier
// BODY, which main declares as the element itself. weight is column 0 of the table `cols`,
// or 1 when the run binds no table (an unbound columns binding is an empty table).

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
    let BODY = src_get(i);
    let right = src_get(min(i + 1u, src_len() - 1u));
    var weight = T(1);
    if (cols_count(0u) > 0u) {
        weight = T(cols_f32(0u, min(i, cols_count(0u) - 1u), 0u));
    }
    dst_set(i, fold(BODY * weight, right));
    hits_store(i, vec4<f32>(f32(i), f32(FOLD), 0.0, 1.0));
    if (i == 0u) {
        hits_set_count(zero_n());
    }
}
