// Ops along one axis of each "row": softmax and log-softmax in one pass over the data (online
// max and rescaled sum, then the write), inclusive cumulative sums, and layer norm's
// normalization and its gradient (the last axis; mean and variance from x). The planner
// describes the inputs and the output as rows (kept axes) times the op's axis, so no transpose
// is copied.
//
// Causal softmax rows (params.causal = Tq > 0) see only their first len - Tq + row % Tq + 1
// entries: the rest are never read and are written as 0.
//
// params: RowsParams (kernels/src/header.rs): n_rows, rank_keep (rk), len, reverse, causal, eps
// (f32 bits); tail: shape_keep[rk], x view (offset, strides[rk], axis stride), out view (same),
// then normalize_backward's gradient view (same).
// defines: OP (softmax log_softmax cumsum normalize normalize_backward), T, PER_THREAD (one
// invocation per row), WG (invocations per row, or per workgroup with PER_THREAD),
// VEC4 (softmax: rows contiguous from multiples of 4, len a multiple of 4).
#include "common.wgsl"
#include "math.wgsl"
#include "vec.wgsl"

struct RowsParams {
    n_rows: u32,
    rank_keep: u32,
    len: u32,
    reverse: u32,
    causal: u32,
    eps: u32,
    tail: array<u32>,
}
@group(0) @binding(0) var<storage, read> params: RowsParams;

fn word(i: u32) -> u32 {
    return params.tail[i];
}
#include "strided.wgsl"

@group(0) @binding(1) var<storage, read> x: array<V>;
#if OP == normalize_backward
@group(0) @binding(2) var<storage, read> grad: array<V>;
@group(0) @binding(3) var<storage, read_write> out: array<V>;
#else
@group(0) @binding(2) var<storage, read_write> out: array<V>;
#endif

const WG: u32 = {{WG}}u;

// A row, in units of V: x[x + j * xs] and out[o + j * os], j < n; its first `seen` elements
// (not units) are visible.
struct Row {
    x: u32,
    xs: u32,
    o: u32,
    os: u32,
    n: u32,
    seen: u32,
    // normalize_backward's gradient: grad[g + j * gs]
    g: u32,
    gs: u32,
}

fn row_at(row: u32) -> Row {
    let rk = params.rank_keep;
    let xv = rk;
    let ov = xv + rk + 2u;
    let xb = strided_index(row, rk, 0u, xv);
    let ob = strided_index(row, rk, 0u, ov);
    let tq = params.causal;
    let seen = select(params.len, params.len - tq + row % max(tq, 1u) + 1u, tq != 0u);
    var r = Row(xb / W, word(xv + 1u + rk), ob / W, word(ov + 1u + rk), params.len / W, seen,
                0u, 0u);
#if OP == normalize_backward
    let gv = ov + rk + 2u;
    r.g = strided_index(row, rk, 0u, gv) / W;
    r.gs = word(gv + 1u + rk);
#endif
    return r;
}

#if OP == normalize || OP == normalize_backward
// A workgroup per row; each invocation walks every WG-th unit of the row (later walks hit the
// cache), and the row's sums meet in workgroup memory.
var<workgroup> sums: array<vec2<f32>, WG>;

// The sum of v over the workgroup (every invocation gets it).
fn row_total(v: vec2<f32>, lid: u32) -> vec2<f32> {
    sums[lid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            sums[lid] += sums[lid + s];
        }
        workgroupBarrier();
    }
    let t = sums[0];
    // before the next total overwrites it
    workgroupBarrier();
    return t;
}

fn lanes_sum(v: V) -> f32 {
#if VEC4
    return f32(v.x) + f32(v.y) + f32(v.z) + f32(v.w);
#else
    return f32(v);
#endif
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    // spare workgroups of a rounded-up grid redo the last row and store nothing (see reduce.wgsl)
    let g = group_index(wid, nwg);
    let r = row_at(min(g, params.n_rows - 1u));
    let n = f32(params.len);
    var s = 0.0;
    for (var j = lid; j < r.n; j += WG) {
        s += lanes_sum(x[r.x + j * r.xs]);
    }
    let mean = row_total(vec2(s, 0.0), lid).x / n;
    // the variance from the deviations, as the CPU computes it (no cancellation)
    var q = 0.0;
    for (var j = lid; j < r.n; j += WG) {
        let d = x[r.x + j * r.xs] - V(mean);
        q += lanes_sum(d * d);
    }
    let rstd = 1.0 / sqrt(row_total(vec2(q, 0.0), lid).x / n + bitcast<f32>(params.eps));
#if OP == normalize_backward
    var sg = vec2(0.0, 0.0);
    for (var j = lid; j < r.n; j += WG) {
        let gj = grad[r.g + j * r.gs];
        sg += vec2(lanes_sum(gj), lanes_sum(gj * (x[r.x + j * r.xs] - V(mean)) * rstd));
    }
    let m = row_total(sg, lid) / n;
#endif
    if (g >= params.n_rows) {
        return;
    }
    for (var j = lid; j < r.n; j += WG) {
        let h = (x[r.x + j * r.xs] - V(mean)) * rstd;
#if OP == normalize_backward
        out[r.o + j * r.os] = (grad[r.g + j * r.gs] - V(m.x) - h * m.y) * rstd;
#else
        out[r.o + j * r.os] = h;
#endif
    }
}
#elif OP == cumsum
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = group_index(wid, nwg) * WG + lid;
    if (row >= params.n_rows) {
        return;
    }
    let r = row_at(row);
    let reverse = params.reverse != 0u;
    var acc = {{T}}(0);
    for (var k = 0u; k < r.n; k++) {
        let j = select(k, r.n - 1u - k, reverse);
        acc += x[r.x + j * r.xs];
        out[r.o + j * r.os] = acc;
    }
}
#else
// Running maximum m and sum s of exp(x - m), from m = -inf and s = 0. Infinities are only
// ever compared, never computed with: NVIDIA's Vulkan compiler gave NaN where arithmetic met
// them (or -f32::MAX, which overflows to -inf in exp). A row of only -inf keeps s = 0 and
// gives NaN, as on the CPU.
struct Stat {
    m: f32,
    s: f32,
}

fn start() -> Stat {
    return Stat(neg_inf(), 0.0);
}

// The stat of a row holding NaN: NaN in both, so that no merge takes it for an empty one.
fn poisoned() -> Stat {
    let nan = f32_from_bits(0x7fc00000u);
    return Stat(nan, nan);
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

// The row's maximum, and 1 / sum (softmax) or log(sum) (log-softmax).
struct Norm {
    m: f32,
    k: f32,
}

fn settle(a: Stat) -> Norm {
    // +inf: all NaN, as on the CPU
    let s = select(a.s, f32_from_bits(0x7fc00000u), a.m == f32_from_bits(0x7f800000u));
#if OP == log_softmax
    return Norm(a.m, log(s));
#else
    return Norm(a.m, 1.0 / s);
#endif
}

#if VEC4
fn top(v: V) -> f32 {
    return max(max(v.x, v.y), max(v.z, v.w));
}

fn any_nan(v: V) -> bool {
    return is_nan_(v.x) || is_nan_(v.y) || is_nan_(v.z) || is_nan_(v.w);
}

// The sum of exp(v - m) over v's lanes, -inf lanes adding 0 (whatever exp gives for them).
fn part(v: V, m: f32) -> f32 {
    let e = select(exp(v - V(m)), V(0.0), v == V(neg_inf()));
    return e.x + e.y + e.z + e.w;
}
#else
fn top(v: V) -> f32 {
    return v;
}

fn any_nan(v: V) -> bool {
    return is_nan_(v);
}

fn part(v: V, m: f32) -> f32 {
    return select(exp(v - m), 0.0, v == neg_inf());
}
#endif

// The stat of the four values an invocation holds in registers: their maximum first, then one
// exp per element and no rescaling of the sum.
fn stat_of(v0: V, v1: V, v2: V, v3: V) -> Stat {
    if (any_nan(v0) || any_nan(v1) || any_nan(v2) || any_nan(v3)) {
        return poisoned();
    }
    let m = max(max(top(v0), top(v1)), max(top(v2), top(v3)));
    if (m == neg_inf()) {
        return start();
    }
    return Stat(m, part(v0, m) + part(v1, m) + part(v2, m) + part(v3, m));
}

// Folds v into the running stat: only a new maximum rescales the sum, -inf lanes add nothing
// and NaN poisons it.
fn fold(a: Stat, v: V) -> Stat {
    if (any_nan(v)) {
        return poisoned();
    }
    let t = top(v);
    if (!(t > a.m)) {
        if (t == neg_inf()) {
            return a;
        }
        return Stat(a.m, a.s + part(v, a.m));
    }
    let old = select(a.s * exp(a.m - t), 0.0, a.m == neg_inf());
    return Stat(t, old + part(v, t));
}

fn finish(v: V, n: Norm) -> V {
#if OP == log_softmax
    return v - V(n.m) - V(n.k);
#else
    return exp(v - V(n.m)) * n.k;
#endif
}

// Which lanes of unit j are past the row's visible elements.
#if VEC4
fn hidden(r: Row, j: u32) -> vec4<bool> {
    return vec4<u32>(j * 4u) + vec4<u32>(0u, 1u, 2u, 3u) >= vec4<u32>(r.seen);
}
#else
fn hidden(r: Row, j: u32) -> bool {
    return j >= r.seen;
}
#endif

// Unit j of the row, hidden lanes as -inf (they add nothing); a wholly hidden unit is not read.
fn load_unit(r: Row, j: u32) -> V {
    if (j * W >= r.seen) {
        return V(neg_inf());
    }
    return select(x[r.x + j * r.xs], V(neg_inf()), hidden(r, j));
}

// Writes unit j's result, 0 in hidden lanes (whatever finish made of their -inf).
fn store_unit(r: Row, j: u32, v: V, n: Norm) {
    out[r.o + j * r.os] = select(finish(v, n), V(0.0), hidden(r, j));
}

#if PER_THREAD
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = group_index(wid, nwg) * WG + lid;
    if (row >= params.n_rows) {
        return;
    }
    let r = row_at(row);
    var st = start();
    for (var j = 0u; j < r.n; j++) {
        st = fold(st, load_unit(r, j));
    }
    let norm = settle(st);
    for (var j = 0u; j < r.n; j++) {
        store_unit(r, j, load_unit(r, j), norm);
    }
}
#else
var<workgroup> tree: array<Stat, WG>;

// Element j, or -inf (adds 0 to the sum) past the row's end.
fn load_at(r: Row, j: u32) -> V {
    if (j < r.n) {
        return load_unit(r, j);
    }
    return V(neg_inf());
}

fn store_at(r: Row, j: u32, v: V, n: Norm) {
    if (j < r.n) {
        store_unit(r, j, v, n);
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    // Spare workgroups of a rounded-up grid redo the last row and store nothing (see reduce.wgsl).
    let g = group_index(wid, nwg);
    let r = row_at(min(g, params.n_rows - 1u));
    // rows of up to 4 * WG units stay in registers, so x is read once
    let fits = r.n <= 4u * WG;
    var st = start();
    var v0 = V(0);
    var v1 = V(0);
    var v2 = V(0);
    var v3 = V(0);
    if (fits) {
        v0 = load_at(r, lid);
        v1 = load_at(r, lid + WG);
        v2 = load_at(r, lid + 2u * WG);
        v3 = load_at(r, lid + 3u * WG);
        st = stat_of(v0, v1, v2, v3);
    } else {
        for (var j = lid; j < r.n; j += WG) {
            st = fold(st, load_unit(r, j));
        }
    }
    tree[lid] = st;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            tree[lid] = merge(tree[lid], tree[lid + s]);
        }
        workgroupBarrier();
    }
    let all = settle(tree[0]);
    if (g >= params.n_rows) {
        return;
    }
    if (fits) {
        store_at(r, lid, v0, all);
        store_at(r, lid + WG, v1, all);
        store_at(r, lid + 2u * WG, v2, all);
        store_at(r, lid + 3u * WG, v3, all);
    } else {
        for (var j = lid; j < r.n; j += WG) {
            store_unit(r, j, load_unit(r, j), all);
        }
    }
}
#endif
#endif
