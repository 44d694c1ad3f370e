// One-input elementwise map: unary math, cast, and strided copy (contiguous, concat, pad).
// Output and input are both strided views of one logical shape.
//
// params: MapParams (kernels/src/header.rs): numel, rank, c0/c1 (the op's constants as bits of
// {{TI}}: powf exponent; clamp min/max); tail: shape[rank], out view, x view (a view is offset,
// strides[rank]).
// defines: OP (a UnaryOp name, "cast" or "copy"), EXPR (for a UnaryOp: its WGSL expression of
// `v`, `T`, `c0`, `c1`, from kiln-core's unary table), TI/TO (input/output element types),
// TO_BOOL (cast to bool), WG (workgroup size), VEC4 (as in binary.wgsl), STRIDED (with VEC4:
// each view walks its inner axis contiguously; the tail is in units of vec4).
#include "common.wgsl"
#include "math.wgsl"

struct MapParams {
    numel: u32,
    rank: u32,
    c0: u32,
    c1: u32,
    tail: array<u32>,
}
@group(0) @binding(0) var<storage, read> params: MapParams;

fn word(i: u32) -> u32 {
    return params.tail[i];
}
#include "strided.wgsl"

#if VEC4
@group(0) @binding(1) var<storage, read> x: array<vec4<{{TI}}>>;
@group(0) @binding(2) var<storage, read_write> out: array<vec4<{{TO}}>>;
#else
@group(0) @binding(1) var<storage, read> x: array<{{TI}}>;
@group(0) @binding(2) var<storage, read_write> out: array<{{TO}}>;
#endif

alias T = {{TI}};

fn apply(v: {{TI}}) -> {{TO}} {
#if OP == copy
    return v;
#elif OP == cast && TO_BOOL && TI == f32
    // on the bits, so that NaN is true even where drivers assume no NaNs
    return select(0u, 1u, (bitcast<u32>(v) & 0x7fffffffu) != 0u);
#elif OP == cast && TO_BOOL
    return select(0u, 1u, v != {{TI}}(0));
#elif OP == cast && TI == i32 && TO == u32
    // integers to integers wrap, as Rust's `as`
    return bitcast<u32>(v);
#elif OP == cast && TI == u32 && TO == i32
    return bitcast<i32>(v);
#elif OP == cast && TI == f32 && TO == i32
    // floats to integers truncate and saturate as Rust's `as` (WGSL's conversion stops at the
    // largest f32 below 2^31); NaN gives 0
    return select(select(i32(v), 2147483647i, v >= 2147483648.0), 0i, is_nan_(v));
#elif OP == cast && TI == f32 && TO == u32
    return select(select(u32(v), 4294967295u, v >= 4294967296.0), 0u, is_nan_(v));
#elif OP == cast
    return {{TO}}(v);
#else
    let c0 = bitcast<{{TI}}>(params.c0);
    let c1 = bitcast<{{TI}}>(params.c1);
    return {{EXPR}};
#endif
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = group_index(wid, nwg) * {{WG}}u + lid;
    let numel = params.numel;
    let rank = params.rank;
    let shape_at = 0u;
    let out_at = shape_at + rank;
#if VEC4
    if (i >= numel / 4u) {
        return;
    }
#if STRIDED
    // the tail's shape and views are in units of vec4
    let at = strided_indices(i, rank, shape_at, out_at, 2u);
    let v = x[at.y];
    out[at.x] = vec4<{{TO}}>(apply(v.x), apply(v.y), apply(v.z), apply(v.w));
#else
    let v = x[word(out_at + 1u + rank) / 4u + i];
    out[word(out_at) / 4u + i] = vec4<{{TO}}>(apply(v.x), apply(v.y), apply(v.z), apply(v.w));
#endif
#else
    if (i >= numel) {
        return;
    }
    let at = strided_indices(i, rank, shape_at, out_at, 2u);
    out[at.x] = apply(x[at.y]);
#endif
}
