// Two-input elementwise ops with broadcasting: arithmetic (BinaryOp) and comparisons (CmpOp),
// plus `where` (three inputs) in the same shape.
//
// params: BinaryParams (kernels/src/header.rs): numel, rank, period, inner (BCAST's; else 0);
// tail: shape[rank], out view, (cond view for where,) a view, b view; a view is offset,
// strides[rank] (stride 0 on broadcast axes).
// defines: OP (a BinaryOp/CmpOp name or "where"), EXPR (the op's WGSL expression of `x`, `y`
// and `T`, from kiln-core's tables; a comparison's yields 0u or 1u), T (input element type),
// TO (output type), WG (workgroup size), VEC4: views contiguous from multiples of 4, numel a
// multiple of 4: one vec4 per invocation; BCAST (a or b): that input of a VEC4 launch repeats,
// element e of out reading its element (e / inner) % period (a scalar, a row, or a channel of
// NCHW when inner is H * W, a multiple of 4), read as scalars.
#include "common.wgsl"
#include "math.wgsl"

struct BinaryParams {
    numel: u32,
    rank: u32,
    period: u32,
    inner: u32,
    tail: array<u32>,
}
@group(0) @binding(0) var<storage, read> params: BinaryParams;

fn word(i: u32) -> u32 {
    return params.tail[i];
}
#include "strided.wgsl"

#if VEC4
alias O = vec4<{{TO}}>;
alias C = vec4<u32>;
#else
alias O = {{TO}};
alias C = u32;
#endif
#if VEC4 && BCAST != a
alias A = vec4<{{T}}>;
#else
alias A = {{T}};
#endif
#if VEC4 && BCAST != b
alias B = vec4<{{T}}>;
#else
alias B = {{T}};
#endif

#if OP == where
@group(0) @binding(1) var<storage, read> cond: array<C>;
@group(0) @binding(2) var<storage, read> a: array<A>;
@group(0) @binding(3) var<storage, read> b: array<B>;
@group(0) @binding(4) var<storage, read_write> out: array<O>;
#else
@group(0) @binding(1) var<storage, read> a: array<A>;
@group(0) @binding(2) var<storage, read> b: array<B>;
@group(0) @binding(3) var<storage, read_write> out: array<O>;
#endif

#if OP != where
alias T = {{T}};

fn apply(x: T, y: T) -> {{TO}} {
    return {{EXPR}};
}
#endif

#if VEC4
@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = group_index(wid, nwg) * {{WG}}u + lid;
    if (i >= params.numel / 4u) {
        return;
    }
    let view = 1u + params.rank;
    let out_at = params.rank;
#if OP == where
    let a_at = out_at + 2u * view;
#else
    let a_at = out_at + view;
#endif
#if BCAST
    // a row steps through the repeating input with the vec4's lanes; a channel's lanes share
    // one value
    let p = params.period;
    let inner = params.inner;
    let row = inner == 1u;
    let rep = select(((4u * i) / max(inner, 1u)) % p, (4u * i) % p, row);
    let hop = select(0u, min(p - 1u, 1u), row);
#endif
#if BCAST == a
    let at = word(a_at) + rep;
    let va = vec4<{{T}}>(a[at], a[at + hop], a[at + 2u * hop], a[at + 3u * hop]);
#else
    let va = a[word(a_at) / 4u + i];
#endif
#if BCAST == b
    let at = word(a_at + view) + rep;
    let vb = vec4<{{T}}>(b[at], b[at + hop], b[at + 2u * hop], b[at + 3u * hop]);
#else
    let vb = b[word(a_at + view) / 4u + i];
#endif
#if OP == where
    let c = cond[word(out_at + view) / 4u + i];
    out[word(out_at) / 4u + i] = select(vb, va, c != vec4<u32>(0u));
#else
    out[word(out_at) / 4u + i] = vec4<{{TO}}>(apply(va.x, vb.x), apply(va.y, vb.y),
                                                apply(va.z, vb.z), apply(va.w, vb.w));
#endif
}
#else
@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = group_index(wid, nwg) * {{WG}}u + lid;
    if (i >= params.numel) {
        return;
    }
    let rank = params.rank;
    let shape_at = 0u;
    let out_at = shape_at + rank;
#if OP == where
    let at = strided_indices(i, rank, shape_at, out_at, 4u);
    out[at.x] = select(b[at.w], a[at.z], cond[at.y] != 0u);
#else
    let at = strided_indices(i, rank, shape_at, out_at, 3u);
    out[at.x] = apply(a[at.y], b[at.z]);
#endif
}
#endif
