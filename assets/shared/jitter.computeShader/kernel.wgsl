// Add reproducible noise in [-amplitude/2, amplitude/2) to every value.
#import random

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = zero_index(gid);
    if (i >= zero_n()) {
        return;
    }
    let noise = (random_unit(i ^ hash_pcg(params.seed)) - 0.5) * params.amplitude;
    dst_set(i, src_get(i) + noise);
}
