// Shared module: uniform random floats from a hash. Import with `#import random`.
#import hash

// A float in [0, 1) from a key: the hash's top 24 bits, exactly representable in f32.
fn random_unit(key: u32) -> f32 {
    return f32(hash_pcg(key) >> 8u) / 16777216.0;
}
