// Shared by every kernel (#include "common.wgsl"): the parameter block and index helpers.
//
// Binding 0 of every kernel is `params`, the u32 words its Rust descriptor writes (shapes,
// strides, offsets in elements, f32 constants as bits), so that one pipeline serves every shape.
@group(0) @binding(0) var<storage, read> params: array<u32>;

// Index of this workgroup in a 1-D launch that the planner split into an x * y * z grid
// (each grid dimension is capped at 65535).
fn group_index(wid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return (wid.z * nwg.y + wid.y) * nwg.x + wid.x;
}

// Storage index of row-major element `i` of a view: its shape is params[shape_at..shape_at+rank],
// its offset params[view_at] and its strides params[view_at+1..view_at+1+rank].
fn strided_index(i: u32, rank: u32, shape_at: u32, view_at: u32) -> u32 {
    var at = params[view_at];
    if (rank == 1u) {
        return at + i * params[view_at + 1u];
    }
    var rem = i;
    for (var d = rank; d > 0u; d--) {
        let n = params[shape_at + d - 1u];
        at += (rem % n) * params[view_at + d];
        rem /= n;
    }
    return at;
}

// Storage indices of row-major element `i` in `views` (at most 4) views of one shape, the first
// view at params[view_at] and each next one 1 + rank words further: one pass of integer
// divisions serves them all (the divisions cost more than the memory access they address).
fn strided_indices(i: u32, rank: u32, shape_at: u32, view_at: u32, views: u32) -> vec4<u32> {
    let step = 1u + rank;
    var at = vec4<u32>(0u);
    for (var v = 0u; v < views; v++) {
        at[v] = params[view_at + v * step];
    }
    var rem = i;
    for (var d = rank; d > 1u; d--) {
        let n = params[shape_at + d - 1u];
        let c = rem % n;
        rem /= n;
        for (var v = 0u; v < views; v++) {
            at[v] += c * params[view_at + v * step + d];
        }
    }
    // what remains is the outermost coordinate (i < numel)
    if (rank > 0u) {
        for (var v = 0u; v < views; v++) {
            at[v] += rem * params[view_at + v * step + 1u];
        }
    }
    return at;
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
