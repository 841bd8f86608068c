// Every bit is defined on every adapter (see summary.computeShader): min and max skip a NaN
// operand by its bits and keep a on a tie (0.0 against -0.0), and a NaN result is the quiet
// NaN 0x7fc00000. A zero or subnormal operand reads as +0.0 and a zero or subnormal sum is
// +0.0, by bits (the H200 flushes subnormals, lavapipe does not; WGSL allows either).
fn flush(v: f32) -> f32 {
    let b = bitcast<u32>(v);
    return bitcast<f32>(select(b, 0u, (b & 0x7f800000u) == 0u));
}

fn is_nan_bits(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) {
        return;
    }
    let t = tiles_get(i);
    let x = flush(a_get(t));
    let y = flush(b_get(t));
    var v = flush(x + y);
    if (OP == OP_min) {
        v = select(x, y, y < x || is_nan_bits(x));
    } else if (OP == OP_max) {
        v = select(x, y, y > x || is_nan_bits(x));
    }
    value_set(i, bitcast<f32>(select(bitcast<u32>(v), 0x7fc00000u, is_nan_bits(v))));
}
