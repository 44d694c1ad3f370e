// The untyped parameter block (#include "params.wgsl"): binding 0 as u32 words that the
// kernel's Rust planner writes (shapes, strides, offsets in elements, f32 constants as bits),
// so one pipeline serves every shape. Kernels with a typed header include "common.wgsl" instead.
#include "common.wgsl"

@group(0) @binding(0) var<storage, read> params: array<u32>;

fn word(i: u32) -> u32 {
    return params[i];
}

#include "strided.wgsl"
