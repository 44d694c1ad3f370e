// Ops along one axis of each "row": softmax and log-softmax in one pass over the data (online
// max and rescaled sum, then the write), and inclusive cumulative sums. The planner describes the
// input and the output as rows (kept axes) times the op's axis, so no transpose is copied.
//
// params: [n_rows, rank_keep, len, reverse, shape_keep[rk],
//          x view (offset, strides[rk], axis stride), out view (same)]
// defines: OP (softmax log_softmax cumsum), T, PER_THREAD (one invocation per row), WG.
#include "common.wgsl"

@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> out: array<{{T}}>;

const WG: u32 = {{WG}}u;

fn x_at(row: u32, j: u32) -> u32 {
    let rk = params[1];
    let view = 4u + rk;
    return strided_index(row, rk, 4u, view) + j * params[view + 1u + rk];
}

fn out_at(row: u32, j: u32) -> u32 {
    let rk = params[1];
    let view = 4u + rk + rk + 2u;
    return strided_index(row, rk, 4u, view) + j * params[view + 1u + rk];
}

#if OP == cumsum
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = group_index(wid, nwg) * WG + lid;
    if (row >= params[0]) {
        return;
    }
    let len = params[2];
    let reverse = params[3] != 0u;
    var acc = {{T}}(0);
    for (var k = 0u; k < len; k++) {
        let j = select(k, len - 1u - k, reverse);
        acc += x[x_at(row, j)];
        out[out_at(row, j)] = acc;
    }
}
#else
// Running maximum and sum of exp(x - max).
struct Stat {
    m: f32,
    s: f32,
}

fn merge(a: Stat, b: Stat) -> Stat {
    if (a.m == neg_inf()) {
        return b;
    }
    if (b.m == neg_inf()) {
        return a;
    }
    let m = max(a.m, b.m);
    return Stat(m, a.s * exp(a.m - m) + b.s * exp(b.m - m));
}

fn push(a: Stat, v: f32) -> Stat {
    return merge(a, Stat(v, 1.0));
}

fn result(v: f32, st: Stat) -> f32 {
#if OP == log_softmax
    return v - st.m - log(st.s);
#else
    return exp(v - st.m) / st.s;
#endif
}

#if PER_THREAD
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = group_index(wid, nwg) * WG + lid;
    if (row >= params[0]) {
        return;
    }
    let len = params[2];
    var st = Stat(neg_inf(), 0.0);
    for (var j = 0u; j < len; j++) {
        st = push(st, x[x_at(row, j)]);
    }
    for (var j = 0u; j < len; j++) {
        out[out_at(row, j)] = result(x[x_at(row, j)], st);
    }
}
#else
var<workgroup> tree: array<Stat, WG>;

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    // Spare workgroups of a rounded-up grid redo the last row and store nothing (see reduce.wgsl).
    let g = group_index(wid, nwg);
    let row = min(g, params[0] - 1u);
    let len = params[2];
    var st = Stat(neg_inf(), 0.0);
    for (var j = lid; j < len; j += WG) {
        st = push(st, x[x_at(row, j)]);
    }
    tree[lid] = st;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            tree[lid] = merge(tree[lid], tree[lid + s]);
        }
        workgroupBarrier();
    }
    let all = tree[0];
    if (g < params[0]) {
        for (var j = lid; j < len; j += WG) {
            out[out_at(row, j)] = result(x[x_at(row, j)], all);
        }
    }
}
#endif
#endif
