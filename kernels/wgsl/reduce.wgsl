// Reductions over any set of axes. The planner permutes the input view so that kept axes come
// first and reduced axes last (no copy); each output element reduces `len` strided elements,
// either by a whole workgroup with a tree in workgroup memory (long rows) or by one invocation
// (PER_THREAD, short rows).
//
// params: ReduceParams (kernels/src/header.rs): n_out, rank_keep (rk), rank_red (rr), len,
// correction; tail: shape_keep[rk], shape_red[rr], keep view (offset, strides[rk]), red view
// (0, strides[rr]).
// defines: OP (sum mean prod max min var argmax argmin), T, TO (output type), LOWEST/HIGHEST
// (identity of max/min as WGSL expressions of T), PER_THREAD, WG (workgroup size), VEC4 (each
// output's run contiguous from a multiple of 4, len a multiple of 4: x read as vec4).
#include "common.wgsl"
#include "vec.wgsl"

struct ReduceParams {
    n_out: u32,
    rank_keep: u32,
    rank_red: u32,
    len: u32,
    correction: u32,
    tail: array<u32>,
}
@group(0) @binding(0) var<storage, read> params: ReduceParams;

fn word(i: u32) -> u32 {
    return params.tail[i];
}
#include "strided.wgsl"

@group(0) @binding(1) var<storage, read> x: array<V>;
@group(0) @binding(2) var<storage, read_write> out: array<{{TO}}>;

const WG: u32 = {{WG}}u;

// A running value and, for argmax/argmin, the reduced-axis position it came from.
struct Acc {
    v: {{T}},
    i: u32,
}

fn identity() -> Acc {
#if OP == prod
    return Acc({{T}}(1), 0u);
#elif OP == max || OP == argmax
    return Acc({{LOWEST}}, 0xffffffffu);
#elif OP == min || OP == argmin
    return Acc({{HIGHEST}}, 0xffffffffu);
#else
    return Acc({{T}}(0), 0u);
#endif
}

// Folds b into a; for arg ops ties go to the smaller position (the first occurrence).
fn combine(a: Acc, b: Acc) -> Acc {
#if OP == prod
    return Acc(a.v * b.v, 0u);
#elif OP == max
    return Acc(max(a.v, b.v), 0u);
#elif OP == min
    return Acc(min(a.v, b.v), 0u);
#elif OP == argmax
    if (b.v > a.v || (b.v == a.v && b.i < a.i)) {
        return b;
    }
    return a;
#elif OP == argmin
    if (b.v < a.v || (b.v == a.v && b.i < a.i)) {
        return b;
    }
    return a;
#else
    return Acc(a.v + b.v, 0u);
#endif
}

// Output o's run: x[base + r * stride], r < n (in units of V), if flat (one reduced axis).
struct Red {
    base: u32,
    stride: u32,
    n: u32,
    flat: bool,
}

fn red_of(o: u32) -> Red {
    let rk = params.rank_keep;
    let rr = params.rank_red;
    let red_view_at = rk + rr + rk + 1u;
    let base = strided_index(o, rk, 0u, rk + rr);
    return Red(base / W, word(red_view_at + 1u), params.len / W, rr == 1u);
}

fn load(red: Red, r: u32) -> V {
    if (red.flat) {
        return x[red.base + r * red.stride];
    }
    let rk = params.rank_keep;
    let rr = params.rank_red;
    let red_shape_at = rk;
    return x[red.base + strided_index(r, rr, red_shape_at, red_shape_at + rr + 1u + rk)];
}

#if VEC4
fn fold(a: Acc, v: V, r: u32) -> Acc {
    let at = 4u * r;
    let b = combine(combine(a, Acc(v.x, at)), Acc(v.y, at + 1u));
    return combine(combine(b, Acc(v.z, at + 2u)), Acc(v.w, at + 3u));
}
#else
fn fold(a: Acc, v: V, r: u32) -> Acc {
    return combine(a, Acc(v, r));
}
#endif

// Folds elements r = first, first + step, .. (r < red.n) into a in that order, four loads at a
// time: a load per iteration left one read in flight per invocation, too few to keep the memory
// system busy.
fn fold_run(a: Acc, red: Red, first: u32, step: u32) -> Acc {
    var acc = a;
    var r = first;
    for (; r + 3u * step < red.n; r += 4u * step) {
        let v0 = load(red, r);
        let v1 = load(red, r + step);
        let v2 = load(red, r + 2u * step);
        let v3 = load(red, r + 3u * step);
        acc = fold(fold(acc, v0, r), v1, r + step);
        acc = fold(fold(acc, v2, r + 2u * step), v3, r + 3u * step);
    }
    for (; r < red.n; r += step) {
        acc = fold(acc, load(red, r), r);
    }
    return acc;
}

#if OP == var && VEC4
fn squares(v: V, mean: {{T}}) -> {{T}} {
    let d = v - V(mean);
    return dot(d, d);
}
#elif OP == var
fn squares(v: V, mean: {{T}}) -> {{T}} {
    let d = v - mean;
    return d * d;
}
#endif

fn finish(a: Acc, sq: {{T}}) -> {{TO}} {
    let len = params.len;
#if OP == mean
    return a.v / f32(len);
#elif OP == var
    return sq / f32(i32(len) - i32(params.correction));
#elif OP == argmax || OP == argmin
    return i32(a.i);
#else
    return a.v;
#endif
}

#if PER_THREAD
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let o = group_index(wid, nwg) * WG + lid;
    if (o >= params.n_out) {
        return;
    }
    let len = params.len;
    let red = red_of(o);
    let acc = fold_run(identity(), red, 0u, 1u);
    var sq = {{T}}(0);
#if OP == var
    let mean = acc.v / f32(len);
    for (var r = 0u; r < red.n; r++) {
        sq += squares(load(red, r), mean);
    }
#endif
    out[o] = finish(acc, sq);
}
#else
var<workgroup> tree: array<Acc, WG>;

// Folds every invocation's value into tree[0] (all invocations must call it).
fn tree_reduce(lid: u32, mine: Acc) -> Acc {
    tree[lid] = mine;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            tree[lid] = combine(tree[lid], tree[lid + s]);
        }
        workgroupBarrier();
    }
    let all = tree[0];
    workgroupBarrier();
    return all;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    // Grids rounded up to 2-D hold a few spare workgroups; they compute a copy of the last row
    // (so every barrier is reached by the whole workgroup) and store nothing.
    let o = group_index(wid, nwg);
    let len = params.len;
    let red = red_of(min(o, params.n_out - 1u));
    let acc = fold_run(identity(), red, lid, WG);
    let total = tree_reduce(lid, acc);
    var sq = {{T}}(0);
#if OP == var
    let mean = total.v / f32(len);
    var mine = {{T}}(0);
    for (var r = lid; r < red.n; r += WG) {
        mine += squares(load(red, r), mean);
    }
    sq = tree_reduce(lid, Acc(mine, 0u)).v;
#endif
    if (lid == 0u && o < params.n_out) {
        out[o] = finish(total, sq);
    }
}
#endif
