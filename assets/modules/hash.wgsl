// Shared module: integer hashing (PCG, Jarzynski & Olano 2020). Import with `#import hash`.
fn hash_pcg(v: u32) -> u32 {
    let state = v * 747796405u + 2891336453u;
    let word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}
