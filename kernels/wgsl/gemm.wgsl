// Register-tiled GEMM: each workgroup computes a BM x BN tile of C = A x B for one batch (or
// group). BK-deep slices of A and B are staged in workgroup memory as vec4s (A's along M, B's
// along N); each invocation keeps a TM x TN block of C in vec4 registers and, for every k of the
// slice, multiplies TM scalars of A by TN / 4 vec4s of B. While a slice is multiplied, the next
// one is already being read from memory into registers, so its latency is hidden. Elements past
// K are staged as zeros; rows and columns past M and N read a valid line again and are never
// stored, so any size works. The MODE picks how A, B and C are addressed, so one kernel serves:
//   matmul      A [.., M, K] and B [.., K, N] strided views, broadcast batch, C contiguous
//   conv        implicit GEMM of conv2d: A = weight (O, C/g * KH * KW), B = im2col(x) on the fly
//   conv_t      gradient of conv2d wrt its input (= conv_transpose2d): A = weight^T, B = gathered dy
//   conv_wgrad  gradient of conv2d wrt its weight: A = dy, B = im2col(x)^T
//
// Addresses are split in two parts so that the integer divisions of the convolutions' index
// arithmetic happen once per line or per k, not per element: a `Line` (a row of A or a column of
// B, fixed for an invocation over the whole K loop) and a `Step` (what k adds, shared by the four
// lines of a staged vec4).
//
// Split-K: when the output has too few tiles to fill the GPU but K is long, K is cut into
// `splits` chunks of k_chunk (a multiple of BK); split s computes its chunk's partial product
// and stores it as batch s * batches + g of a [splits, batches, M, N] scratch, which a
// reduction then sums (only for modes that store C as plain [batches, M, N]: matmul,
// conv_wgrad, and conv and conv_t of a single image).
//
// params: MatmulParams (mode matmul) or ConvParams (the convolutions), kernels/src/header.rs.
//   Both start with the launch's Gemm: M N K, tiles_m, batches (groups for the convolutions),
//   k_chunk, splits, and where a fused epilogue's words start in the tail. matmul's tail: the
//   batch shape, then A's and B's batch views. The
//   convolutions' tail: 4 words per k of group 0 (conv, conv_t) or per output position
//   (conv_wgrad): A's step, B's step, tap row and column offsets (the planner's division of k
//   into channel and tap, or of the position into oy and ox, done once).
// grid: x = column tiles, y (* z) = row tiles times batches times splits, each dimension at
// most 65535.
// defines: MODE, T, BM BN BK TM TN (tile sizes; BM, BN, TM, TN multiples of 4; BK * BM / 4 and
// BK * BN / 4 multiples of WG), WG = (BM / TM) * (BN / TN), STAGE_ONE (1 where each invocation
// stages exactly one vec4 of A and one of B per slice, else 0), SKINNY (1: the matrix-vector
// kernel at the end, for matmuls of at most 4 rows, BM = 4, BN = WG; else 0), EPILOGUE (the name
// of a fused epilogue appended to the source, see `put_c`; absent without one).
#include "common.wgsl"
#if EPILOGUE
#include "math.wgsl"
#endif

struct Gemm {
    m: u32, n: u32, k: u32, tiles_m: u32, batches: u32, k_chunk: u32, splits: u32,
    epilogue: u32,
}
#if MODE == matmul
struct MatmulParams {
    gemm: Gemm,
    batch_rank: u32,
    a_offset: u32, a_row_stride: u32, a_col_stride: u32,
    b_offset: u32, b_row_stride: u32, b_col_stride: u32,
    tail: array<u32>,
}
@group(0) @binding(0) var<storage, read> params: MatmulParams;

fn word(i: u32) -> u32 {
    return params.tail[i];
}
#include "strided.wgsl"
#else
// conv2d geometry, in conv2d's own terms (x: n, ci, h, w; weight: co, ci / groups, kh, kw).
struct ConvGeometry {
    n: u32, ci: u32, h: u32, w: u32, co: u32, oh: u32, ow: u32, kh: u32, kw: u32,
    sh: u32, sw: u32, ph: u32, pw: u32, dh: u32, dw: u32, groups: u32,
}
struct ConvParams {
    gemm: Gemm,
    conv: ConvGeometry,
    a_offset: u32,
    b_offset: u32,
    tail: array<u32>,
}
@group(0) @binding(0) var<storage, read> params: ConvParams;
#endif

@group(0) @binding(1) var<storage, read> a: array<{{T}}>;
@group(0) @binding(2) var<storage, read> b: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> c: array<{{T}}>;

const BM: u32 = {{BM}}u;
const BN: u32 = {{BN}}u;
const BK: u32 = {{BK}}u;
const TM: u32 = {{TM}}u;
const TN: u32 = {{TN}}u;
const WG: u32 = {{WG}}u;
// invocations along N and along M
const WG_X: u32 = BN / TN;
const WG_Y: u32 = BM / TM;
// vec4s per staged row of A (along M) and of B (along N), and per invocation's block of C
const BM4: u32 = BM / 4u;
const BN4: u32 = BN / 4u;
const TM4: u32 = TM / 4u;
const TN4: u32 = TN / 4u;
// A's staged rows are one vec4 longer than needed: the invocations storing consecutive k then
// hit different banks of workgroup memory.
const A_ROW: u32 = BM4 + 1u;
// where B's slice starts in `tiles`
const B_AT: u32 = BK * A_ROW;
// vec4s each invocation stages per slice, of A and of B
const A_PER: u32 = BK * BM4 / WG;
const B_PER: u32 = BK * BN4 / WG;

// The staged slices: A's k-th row (rows 4i..4i+3 of M at column k) at tiles[k * A_ROW + i],
// then B's k-th row (columns 4j..4j+3 of N at row k) at tiles[B_AT + k * BN4 + j].
var<workgroup> tiles: array<vec4<{{T}}>, BK * (A_ROW + BN4)>;

// The k-independent part of an operand's address for one row of A or column of B; for the
// convolutions' gathered operand also the input position of its first tap.
struct Line {
    at: u32,
    y: i32,
    x: i32,
}

// The k-dependent part: added to a Line's address and position.
struct Step {
    at: u32,
    y: i32,
    x: i32,
}

#if MODE == matmul
fn batch_offset(g: u32, which: u32) -> u32 {
    let br = params.batch_rank;
    return strided_index(g, br, 0u, br + which * (1u + br));
}
fn line_a(g: u32, row: u32) -> Line {
    return Line(params.a_offset + batch_offset(g, 0u) + row * params.a_row_stride, 0, 0);
}
fn step_a(g: u32, k: u32) -> Step {
    return Step(k * params.a_col_stride, 0, 0);
}
fn line_b(g: u32, col: u32) -> Line {
    return Line(params.b_offset + batch_offset(g, 1u) + col * params.b_col_stride, 0, 0);
}
fn step_b(g: u32, k: u32) -> Step {
    return Step(k * params.b_row_stride, 0, 0);
}
fn load_b(l: Line, s: Step) -> {{T}} {
    return b[l.at + s.at];
}
fn store_c(g: u32, row: u32, col: u32, v: {{T}}) {
    let r = g * params.gemm.m + row;
    put_c(r * params.gemm.n + col, r, col, v);
}
#else
// The conv input x at the tap (l.y + s.y, l.x + s.x) of the plane at l.at + s.at; 0 in the
// padding.
fn x_tap(l: Line, s: Step) -> {{T}} {
    let iy = l.y + s.y;
    let ix = l.x + s.x;
    let h = params.conv.h;
    let w = params.conv.w;
    if (iy < 0 || ix < 0 || iy >= i32(h) || ix >= i32(w)) {
        return {{T}}(0);
    }
    return b[l.at + s.at + u32(iy) * w + u32(ix)];
}
// The planner's table of steps (the tail, see the header) spares the K loop integer divisions,
// each of which costs more instructions than the multiply-adds it feeds.
#endif

// A is read where its line and step point in every mode (B is gathered in the convolutions).
fn load_a(l: Line, s: Step) -> {{T}} {
    return a[l.at + s.at];
}

#if MODE == conv || MODE == conv_t
fn step_a(g: u32, k: u32) -> Step {
    return Step(params.tail[4u * k], 0, 0);
}
fn step_b(g: u32, k: u32) -> Step {
    let at = 4u * k;
    return Step(params.tail[at + 1u], i32(params.tail[at + 2u]), i32(params.tail[at + 3u]));
}
#endif

#if MODE == conv
// A = weight rows of group g: (o, (c, ky, kx)); B = im2col(x): ((c, ky, kx), (n, oy, ox)).
fn line_a(g: u32, row: u32) -> Line {
    return Line(params.a_offset + (g * params.gemm.m + row) * params.gemm.k, 0, 0);
}
fn line_b(g: u32, col: u32) -> Line {
    let p = params.conv;
    let plane = p.oh * p.ow;
    let n = col / plane;
    let oy = (col % plane) / p.ow;
    let ox = col % p.ow;
    let ch0 = g * (p.ci / p.groups);
    return Line(params.b_offset + (n * p.ci + ch0) * p.h * p.w, i32(oy * p.sh) - i32(p.ph),
        i32(ox * p.sw) - i32(p.pw));
}
fn load_b(l: Line, s: Step) -> {{T}} {
    return x_tap(l, s);
}
fn store_c(g: u32, row: u32, col: u32, v: {{T}}) {
    let p = params.conv;
    let plane = p.oh * p.ow;
    let n = col / plane;
    let r = g * params.gemm.m + row;
    put_c((n * p.co + r) * plane + col % plane, r, col, v);
}
#elif MODE == conv_t
// dx[n, c, iy, ix] = sum over (o, ky, kx) of weight[o, c, ky, kx] * dy[n, o, oy, ox]
// where oy * sh = iy + ph - ky * dh. A = weight^T: (c, (o, ky, kx)); B: ((o, ky, kx), (n, iy, ix)).
// The steps count o from the group's first output channel, whose offsets the lines add.
fn line_a(g: u32, row: u32) -> Line {
    let p = params.conv;
    let kk = p.kh * p.kw;
    let o0 = g * (p.co / p.groups);
    return Line(params.a_offset + (o0 * (p.ci / p.groups) + row) * kk, 0, 0);
}
fn line_b(g: u32, col: u32) -> Line {
    let p = params.conv;
    let plane = p.h * p.w;
    let n = col / plane;
    let iy = (col % plane) / p.w;
    let ix = col % p.w;
    let o0 = g * (p.co / p.groups);
    return Line(params.b_offset + (n * p.co + o0) * p.oh * p.ow, i32(iy + p.ph), i32(ix + p.pw));
}
fn load_b(l: Line, s: Step) -> {{T}} {
    let p = params.conv;
    let ty = l.y - s.y;
    let tx = l.x - s.x;
    if (ty < 0 || tx < 0) {
        return {{T}}(0);
    }
    var oy = u32(ty);
    var ox = u32(tx);
    // (uniform) integer divisions cost more than the rest of the load: skip them at stride 1
    if (p.sh != 1u || p.sw != 1u) {
        if (oy % p.sh != 0u || ox % p.sw != 0u) {
            return {{T}}(0);
        }
        oy /= p.sh;
        ox /= p.sw;
    }
    if (oy >= p.oh || ox >= p.ow) {
        return {{T}}(0);
    }
    return b[l.at + s.at + oy * p.ow + ox];
}
fn store_c(g: u32, row: u32, col: u32, v: {{T}}) {
    let p = params.conv;
    let plane = p.h * p.w;
    let n = col / plane;
    let r = g * params.gemm.m + row;
    put_c((n * p.ci + r) * plane + col % plane, r, col, v);
}
#elif MODE == conv_wgrad
// dw[o, c, ky, kx] = sum over (n, oy, ox) of dy[n, o, oy, ox] * x[n, c, oy*sh - ph + ky*dh, ..].
// A = dy: (o, (n, oy, ox)); B = im2col(x)^T: ((n, oy, ox), (c, ky, kx)).
fn line_a(g: u32, row: u32) -> Line {
    let p = params.conv;
    return Line(params.a_offset + (g * params.gemm.m + row) * p.oh * p.ow, 0, 0);
}
// k runs over (n, oy, ox): one division splits it into the image and the position, whose tap
// offsets come from the planner's table (4 words per position, as for conv).
fn step_a(g: u32, k: u32) -> Step {
    let p = params.conv;
    let plane = p.oh * p.ow;
    let n = k / plane;
    return Step(n * p.co * plane + k - n * plane, 0, 0);
}
fn line_b(g: u32, col: u32) -> Line {
    let p = params.conv;
    let kk = p.kh * p.kw;
    let ch = g * (p.ci / p.groups) + col / kk;
    let ky = (col % kk) / p.kw;
    let kx = col % p.kw;
    return Line(params.b_offset + ch * p.h * p.w, i32(ky * p.dh) - i32(p.ph),
        i32(kx * p.dw) - i32(p.pw));
}
fn step_b(g: u32, k: u32) -> Step {
    let p = params.conv;
    let plane = p.oh * p.ow;
    let n = k / plane;
    let at = 4u * (k - n * plane);
    return Step(n * p.ci * p.h * p.w, i32(params.tail[at + 2u]), i32(params.tail[at + 3u]));
}
fn load_b(l: Line, s: Step) -> {{T}} {
    return x_tap(l, s);
}
fn store_c(g: u32, row: u32, col: u32, v: {{T}}) {
    let r = g * params.gemm.m + row;
    put_c(r * params.gemm.n + col, r, col, v);
}
#endif

// Element i of C (the op's output, or split-K's scratch) gets v, through the fused epilogue
// where there is one: an elementwise chain on the output, generated and appended to this file
// by kiln's fusion (kernels/src/fusion/epilogue.rs), whose inputs are bound from 4 on. row
// and col: the element's row of C counted over the batches or groups before it (a
// convolution's output channel) and its column, at which the epilogue reads a bias by the
// channel or the column without dividing i.
fn put_c(i: u32, row: u32, col: u32, v: {{T}}) {
#if EPILOGUE
    c[i] = epilogue(i, row, col, v);
#else
    c[i] = v;
#endif
}

// Four lines: the rows of A (or columns of B) of one staged vec4.
struct Quad {
    l0: Line,
    l1: Line,
    l2: Line,
    l3: Line,
}

// The lines of rows first..first+3 of A, clamped to its last row.
fn quad_a(g: u32, first: u32) -> Quad {
    let last = max(params.gemm.m, 1u) - 1u;
    return Quad(line_a(g, min(first, last)), line_a(g, min(first + 1u, last)),
        line_a(g, min(first + 2u, last)), line_a(g, min(first + 3u, last)));
}

// The same for columns of B.
fn quad_b(g: u32, first: u32) -> Quad {
    let last = max(params.gemm.n, 1u) - 1u;
    return Quad(line_b(g, min(first, last)), line_b(g, min(first + 1u, last)),
        line_b(g, min(first + 2u, last)), line_b(g, min(first + 3u, last)));
}

// A's four lines at k, zeros past k_end.
fn vec_a(g: u32, k: u32, k_end: u32, q: Quad) -> vec4<{{T}}> {
    if (k >= k_end) {
        return vec4<{{T}}>({{T}}(0));
    }
    let s = step_a(g, k);
    return vec4<{{T}}>(load_a(q.l0, s), load_a(q.l1, s), load_a(q.l2, s), load_a(q.l3, s));
}

// The same for B.
fn vec_b(g: u32, k: u32, k_end: u32, q: Quad) -> vec4<{{T}}> {
    if (k >= k_end) {
        return vec4<{{T}}>({{T}}(0));
    }
    let s = step_b(g, k);
    return vec4<{{T}}>(load_b(q.l0, s), load_b(q.l1, s), load_b(q.l2, s), load_b(q.l3, s));
}

#if !STAGE_ONE && !SKINNY
// Slice k0 of A as this invocation stages it: vec4 i holds quads[i] at
// k = k0 + (lid + i * WG) % BK.
fn fetch_a(g: u32, lid: u32, k0: u32, k_end: u32, quads: array<Quad, A_PER>)
    -> array<vec4<{{T}}>, A_PER> {
    var out: array<vec4<{{T}}>, A_PER>;
    for (var i = 0u; i < A_PER; i++) {
        out[i] = vec_a(g, k0 + (lid + i * WG) % BK, k_end, quads[i]);
    }
    return out;
}

// The same for B, whose vec4 i is at k = k0 + (lid + i * WG) / BN4.
fn fetch_b(g: u32, lid: u32, k0: u32, k_end: u32, quads: array<Quad, B_PER>)
    -> array<vec4<{{T}}>, B_PER> {
    var out: array<vec4<{{T}}>, B_PER>;
    for (var i = 0u; i < B_PER; i++) {
        out[i] = vec_b(g, k0 + (lid + i * WG) / BN4, k_end, quads[i]);
    }
    return out;
}
#endif

// acc + s * b, fused where the type has fma.
fn mac(s: {{T}}, b: vec4<{{T}}>, acc: vec4<{{T}}>) -> vec4<{{T}}> {
#if T == i32 || T == u32
    return acc + s * b;
#else
    return fma(vec4<{{T}}>(s), b, acc);
#endif
}

#if SKINNY
// At most 4 rows (a matrix-vector product: a batch-1 linear layer): an invocation per column of
// C holds all its rows in one vec4 and walks its chunk of K without workgroup memory, so no
// multiply-add is spent on the rows a 32- or 64-row tile would pad. Rows past M read the last
// row again and are never stored. Grid: x = columns / WG, y (* z) = batches times splits.
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m = params.gemm.m;
    let n = params.gemm.n;
    let gs = wid.z * 65535u + wid.y;
    let g = gs % params.gemm.batches;
    let k_begin = (gs / params.gemm.batches) * params.gemm.k_chunk;
    let k_end = min(params.gemm.k, k_begin + params.gemm.k_chunk);
    let col = wid.x * WG + lid;
    let rows = quad_a(g, 0u);
    let line = line_b(g, min(col, max(n, 1u) - 1u));
    var acc = vec4<{{T}}>({{T}}(0));
    for (var k = k_begin; k < k_end; k++) {
        acc = mac(load_b(line, step_b(g, k)), vec_a(g, k, k_end, rows), acc);
    }
    if (gs >= params.gemm.batches * params.gemm.splits || col >= n) {
        return;
    }
    for (var r = 0u; r < min(m, 4u); r++) {
        store_c(gs, r, col, acc[r]);
    }
}
#else
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m = params.gemm.m;
    let n = params.gemm.n;
    let k_len = params.gemm.k;
    let tiles_m = params.gemm.tiles_m;
    let yz = wid.z * 65535u + wid.y;
    // batch g of split s, stored as batch gs (= g without split-K)
    let gs = yz / tiles_m;
    let g = gs % params.gemm.batches;
    let k_begin = (gs / params.gemm.batches) * params.gemm.k_chunk;
    let k_end = min(k_len, k_begin + params.gemm.k_chunk);
    let row0 = (yz % tiles_m) * BM;
    let col0 = wid.x * BN;
    // this invocation's block of C: vec4 rows ty + i * WG_Y and vec4 columns tx + j * WG_X, so
    // that neighbouring invocations read neighbouring vec4s of workgroup memory
    let tx = lid % WG_X;
    let ty = lid / WG_X;

    // The lines this invocation stages, fixed for the whole K loop: staged vec4 i of A is rows
    // 4q..4q+3 (v = lid + i * WG, q = v / BK: consecutive invocations walk a row of A along k,
    // the way row-major A is stored); of B, columns 4q..4q+3 (q = v % BN4).
#if STAGE_ONE
    // One vec4 of each (i = 0), held by name: SwiftShader copies an array passed by value and
    // reads an indexed one lane by lane, which cost conv2 of the MNIST CNN 1.5x its time.
    let quad_a0 = quad_a(g, row0 + 4u * (lid / BK));
    let quad_b0 = quad_b(g, col0 + 4u * (lid % BN4));
#else
    var quads_a: array<Quad, A_PER>;
    for (var i = 0u; i < A_PER; i++) {
        quads_a[i] = quad_a(g, row0 + 4u * ((lid + i * WG) / BK));
    }
    var quads_b: array<Quad, B_PER>;
    for (var i = 0u; i < B_PER; i++) {
        quads_b[i] = quad_b(g, col0 + 4u * ((lid + i * WG) % BN4));
    }
#endif

#if TM == 4 && TN == 4
    // A 4 x 4 block as four named vec4s (row r of the block in acc_r), multiplied without inner
    // loops: SwiftShader (Chromium's software WebGPU) keeps an indexed private array in memory,
    // one access per lane, and ran the MNIST CNN's conv2 3x slower with it. 8-wide blocks keep
    // the array.
    var acc_0 = vec4<{{T}}>({{T}}(0));
    var acc_1 = acc_0;
    var acc_2 = acc_0;
    var acc_3 = acc_0;
#else
    var acc: array<vec4<{{T}}>, TM * TN4>;
    for (var i = 0u; i < TM * TN4; i++) {
        acc[i] = vec4<{{T}}>({{T}}(0));
    }
#endif
#if STAGE_ONE
    var next_a = vec_a(g, k_begin + lid % BK, k_end, quad_a0);
    var next_b = vec_b(g, k_begin + lid / BN4, k_end, quad_b0);
#else
    var next_a = fetch_a(g, lid, k_begin, k_end, quads_a);
    var next_b = fetch_b(g, lid, k_begin, k_end, quads_b);
#endif
    for (var k0 = k_begin; k0 < k_end; k0 += BK) {
#if STAGE_ONE
        tiles[(lid % BK) * A_ROW + lid / BK] = next_a;
        tiles[B_AT + lid] = next_b;
        workgroupBarrier();
        // the next slice's loads are in flight while this one is multiplied
        next_a = vec_a(g, k0 + BK + lid % BK, k_end, quad_a0);
        next_b = vec_b(g, k0 + BK + lid / BN4, k_end, quad_b0);
#else
        for (var i = 0u; i < A_PER; i++) {
            let v = lid + i * WG;
            tiles[(v % BK) * A_ROW + v / BK] = next_a[i];
        }
        for (var i = 0u; i < B_PER; i++) {
            tiles[B_AT + lid + i * WG] = next_b[i];
        }
        workgroupBarrier();
        next_a = fetch_a(g, lid, k0 + BK, k_end, quads_a);
        next_b = fetch_b(g, lid, k0 + BK, k_end, quads_b);
#endif
#if TM == 4 && TN == 4
        for (var k = 0u; k < BK; k++) {
            let bv = tiles[B_AT + k * BN4 + tx];
            let av = tiles[k * A_ROW + ty];
            acc_0 = mac(av.x, bv, acc_0);
            acc_1 = mac(av.y, bv, acc_1);
            acc_2 = mac(av.z, bv, acc_2);
            acc_3 = mac(av.w, bv, acc_3);
        }
#else
        for (var k = 0u; k < BK; k++) {
            var bv: array<vec4<{{T}}>, TN4>;
            for (var j = 0u; j < TN4; j++) {
                bv[j] = tiles[B_AT + k * BN4 + j * WG_X + tx];
            }
            for (var i4 = 0u; i4 < TM4; i4++) {
                let av = tiles[k * A_ROW + i4 * WG_Y + ty];
                for (var r = 0u; r < 4u; r++) {
                    for (var j = 0u; j < TN4; j++) {
                        let at = (i4 * 4u + r) * TN4 + j;
                        acc[at] = mac(av[r], bv[j], acc[at]);
                    }
                }
            }
        }
#endif
        workgroupBarrier();
    }
#if TM == 4 && TN == 4
    var acc = array<vec4<{{T}}>, 4>(acc_0, acc_1, acc_2, acc_3);
#endif
    // spare workgroups of a rounded-up grid store nothing
    if (gs >= params.gemm.batches * params.gemm.splits) {
        return;
    }
    for (var i4 = 0u; i4 < TM4; i4++) {
        for (var r = 0u; r < 4u; r++) {
            let row = row0 + (i4 * WG_Y + ty) * 4u + r;
            if (row >= m) {
                break;
            }
            for (var j = 0u; j < TN4; j++) {
                let v = acc[(i4 * 4u + r) * TN4 + j];
                let col = col0 + (j * WG_X + tx) * 4u;
                for (var q = 0u; q < 4u; q++) {
                    if (col + q < n) {
                        store_c(gs, row, col + q, v[q]);
                    }
                }
            }
        }
    }
}
#endif
