// Shared by every kernel (#include "common.wgsl"): helpers that need no parameters.
//
// Binding 0 of every kernel is `params`, a typed header: a struct that mirrors a Rust struct of
// `kernels/src/header.rs`, optionally ending in `tail: array<u32>`.

// Index of this workgroup in a 1-D launch that the planner split into an x * y * z grid
// (each grid dimension is capped at 65535).
fn group_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return (wid.z * nwg.y + wid.y) * nwg.x + wid.x;
}

// An f32 from its bits, computed at run time: WGSL has no literal for infinities, and Chrome's
// compiler (Tint) rejects an infinite value in a constant expression such as
// `bitcast<f32>(0xff800000u)`, which naga accepts.
fn f32_from_bits(bits: u32) -> f32 {
    var b = bits;
    return bitcast<f32>(b);
}

fn neg_inf() -> f32 {
    return f32_from_bits(0xff800000u);
}
