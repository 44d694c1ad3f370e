// Register-tiled GEMM: each workgroup computes a BM x BN tile of C = A x B for one batch (or
// group). BK-deep slices of A and B are staged in workgroup memory as vec4s (A's along M, B's
// along N); each invocation keeps a TM x TN block of C in vec4 registers and, for every k of the
// slice, multiplies TM scalars of A by TN / 4 vec4s of B. Elements past the edges of M, N or K
// are staged as zeros and never stored, so any size works. The MODE picks how A, B and C are
// addressed, so one kernel serves:
//   matmul      A [.., M, K] and B [.., K, N] strided views, broadcast batch, C contiguous
//   conv        implicit GEMM of conv2d: A = weight (O, C/g * KH * KW), B = im2col(x) on the fly
//   conv_t      gradient of conv2d wrt its input (= conv_transpose2d): A = weight^T, B = gathered dy
//   conv_wgrad  gradient of conv2d wrt its weight: A = dy, B = im2col(x)^T
//
// Split-K: when the output has too few tiles to fill the GPU but K is long, K is cut into
// `splits` chunks of k_chunk (a multiple of BK); split s computes its chunk's partial product
// and stores it as batch s * batches + g of a [splits, batches, M, N] scratch, which a
// reduction then sums (only for modes that store C as plain [batches, M, N]: matmul,
// conv_wgrad).
//
// params: [M, N, K, tiles_m, batches, k_chunk, splits, mode params...]
//   matmul: [7] batch rank br, [8..11) a offset/row/col strides, [11..14) b offset/row/col
//           strides, [14..14+br) batch shape, then a batch view (0, strides[br]) and b batch view
//   conv*:  [7..22) N C H W O OH OW KH KW sh sw ph pw dh dw (conv2d terms: x is N,C,H,W, weight
//           O,C/g,KH,KW, y is N,O,OH,OW), [22] a offset, [23] b offset; batches = groups
// grid: x = column tiles, y (* z) = row tiles times batches times splits, each dimension at
// most 65535.
// defines: MODE, T, BM BN BK TM TN (tile sizes; BM, BN, TM, TN multiples of 4),
// WG = (BM / TM) * (BN / TN).
#include "common.wgsl"

@group(0) @binding(1) var<storage, read> a: array<{{T}}>;
@group(0) @binding(2) var<storage, read> b: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> c: array<{{T}}>;

const BM: u32 = {{BM}}u;
const BN: u32 = {{BN}}u;
const BK: u32 = {{BK}}u;
const TM: u32 = {{TM}}u;
const TN: u32 = {{TN}}u;
const WG: u32 = {{WG}}u;
// invocations along N
const WG_X: u32 = BN / TN;
// vec4s per staged row of A (along M) and of B (along N), and per invocation's block of C row
const BM4: u32 = BM / 4u;
const BN4: u32 = BN / 4u;
const TN4: u32 = TN / 4u;
// where B's slice starts in `tiles`
const B_AT: u32 = BK * BM4;

// The staged slices: A's k-th row (rows 4i..4i+3 of M at column k) at tiles[k * BM4 + i],
// then B's k-th row (columns 4j..4j+3 of N at row k) at tiles[B_AT + k * BN4 + j].
var<workgroup> tiles: array<vec4<{{T}}>, BK * (BM4 + BN4)>;

#if MODE == matmul
fn batch_offset(g: u32, which: u32) -> u32 {
    let br = params[7];
    return strided_index(g, br, 14u, 14u + br + which * (1u + br));
}
fn load_a(g: u32, row: u32, k: u32) -> {{T}} {
    return a[params[8] + batch_offset(g, 0u) + row * params[9] + k * params[10]];
}
fn load_b(g: u32, k: u32, col: u32) -> {{T}} {
    return b[params[11] + batch_offset(g, 1u) + k * params[12] + col * params[13]];
}
fn store_c(g: u32, row: u32, col: u32, v: {{T}}) {
    c[(g * params[0] + row) * params[1] + col] = v;
}
#else
// conv2d geometry, in conv2d's own terms (see the header).
struct Conv {
    n: u32, ci: u32, h: u32, w: u32, co: u32, oh: u32, ow: u32, kh: u32, kw: u32,
    sh: u32, sw: u32, ph: u32, pw: u32, dh: u32, dw: u32, groups: u32,
}
fn conv() -> Conv {
    return Conv(params[7], params[8], params[9], params[10], params[11], params[12], params[13],
        params[14], params[15], params[16], params[17], params[18], params[19], params[20],
        params[21], params[4]);
}
// Element (n, ch, iy, ix) of the conv input x at a signed position; 0 in the padding.
fn x_at(p: Conv, n: u32, ch: u32, iy: i32, ix: i32) -> {{T}} {
    if (iy < 0 || ix < 0 || iy >= i32(p.h) || ix >= i32(p.w)) {
        return {{T}}(0);
    }
    return b[params[23] + ((n * p.ci + ch) * p.h + u32(iy)) * p.w + u32(ix)];
}
#endif

#if MODE == conv
// A = weight rows of group g: (o, (c, ky, kx)); B = im2col(x): ((c, ky, kx), (n, oy, ox)).
fn load_a(g: u32, row: u32, k: u32) -> {{T}} {
    return a[params[22] + (g * params[0] + row) * params[2] + k];
}
fn load_b(g: u32, k: u32, col: u32) -> {{T}} {
    let p = conv();
    let kk = p.kh * p.kw;
    let ch = k / kk;
    let ky = (k % kk) / p.kw;
    let kx = k % p.kw;
    let plane = p.oh * p.ow;
    let n = col / plane;
    let oy = (col % plane) / p.ow;
    let ox = col % p.ow;
    let iy = i32(oy * p.sh + ky * p.dh) - i32(p.ph);
    let ix = i32(ox * p.sw + kx * p.dw) - i32(p.pw);
    return x_at(p, n, g * (p.ci / p.groups) + ch, iy, ix);
}
fn store_c(g: u32, row: u32, col: u32, v: {{T}}) {
    let p = conv();
    let plane = p.oh * p.ow;
    let n = col / plane;
    c[(n * p.co + g * params[0] + row) * plane + col % plane] = v;
}
#elif MODE == conv_t
// dx[n, c, iy, ix] = sum over (o, ky, kx) of weight[o, c, ky, kx] * dy[n, o, oy, ox]
// where oy * sh = iy + ph - ky * dh. A = weight^T: (c, (o, ky, kx)); B: ((o, ky, kx), (n, iy, ix)).
fn load_a(g: u32, row: u32, k: u32) -> {{T}} {
    let p = conv();
    let kk = p.kh * p.kw;
    let cg = p.ci / p.groups;
    let o = g * (p.co / p.groups) + k / kk;
    return a[params[22] + (o * cg + row) * kk + k % kk];
}
fn load_b(g: u32, k: u32, col: u32) -> {{T}} {
    let p = conv();
    let kk = p.kh * p.kw;
    let o = g * (p.co / p.groups) + k / kk;
    let ky = (k % kk) / p.kw;
    let kx = k % p.kw;
    let plane = p.h * p.w;
    let n = col / plane;
    let iy = (col % plane) / p.w;
    let ix = col % p.w;
    let ty = i32(iy + p.ph) - i32(ky * p.dh);
    let tx = i32(ix + p.pw) - i32(kx * p.dw);
    if (ty < 0 || tx < 0 || u32(ty) % p.sh != 0u || u32(tx) % p.sw != 0u) {
        return {{T}}(0);
    }
    let oy = u32(ty) / p.sh;
    let ox = u32(tx) / p.sw;
    if (oy >= p.oh || ox >= p.ow) {
        return {{T}}(0);
    }
    return b[params[23] + ((n * p.co + o) * p.oh + oy) * p.ow + ox];
}
fn store_c(g: u32, row: u32, col: u32, v: {{T}}) {
    let p = conv();
    let plane = p.h * p.w;
    let n = col / plane;
    c[(n * p.ci + g * params[0] + row) * plane + col % plane] = v;
}
#elif MODE == conv_wgrad
// dw[o, c, ky, kx] = sum over (n, oy, ox) of dy[n, o, oy, ox] * x[n, c, oy*sh - ph + ky*dh, ..].
// A = dy: (o, (n, oy, ox)); B = im2col(x)^T: ((n, oy, ox), (c, ky, kx)).
fn load_a(g: u32, row: u32, k: u32) -> {{T}} {
    let p = conv();
    let plane = p.oh * p.ow;
    let n = k / plane;
    return a[params[22] + (n * p.co + g * params[0] + row) * plane + k % plane];
}
fn load_b(g: u32, k: u32, col: u32) -> {{T}} {
    let p = conv();
    let plane = p.oh * p.ow;
    let n = k / plane;
    let oy = (k % plane) / p.ow;
    let ox = k % p.ow;
    let kk = p.kh * p.kw;
    let ch = col / kk;
    let ky = (col % kk) / p.kw;
    let kx = col % p.kw;
    let iy = i32(oy * p.sh + ky * p.dh) - i32(p.ph);
    let ix = i32(ox * p.sw + kx * p.dw) - i32(p.pw);
    return x_at(p, n, g * (p.ci / p.groups) + ch, iy, ix);
}
fn store_c(g: u32, row: u32, col: u32, v: {{T}}) {
    c[(g * params[0] + row) * params[1] + col] = v;
}
#endif

// Element (mn, k) of operand `which` (0: A at row mn, 1: B at column mn) of batch g; zero
// outside the matrix.
fn fetch(which: u32, g: u32, mn: u32, k: u32) -> {{T}} {
    if (k < params[2]) {
        if (which == 0u && mn < params[0]) {
            return load_a(g, mn, k);
        }
        if (which == 1u && mn < params[1]) {
            return load_b(g, k, mn);
        }
    }
    return {{T}}(0);
}

// Stages the BK-deep slice at k0 of operand `which` (its tile along M or N starts at mn0 and is
// span4 vec4s wide) into tiles[at..]. Consecutive invocations walk the axis that row-major
// operands store contiguously: k for A, N for B.
fn stage(which: u32, g: u32, live: bool, lid: u32, k0: u32, mn0: u32, span4: u32, at: u32) {
    for (var v = lid; v < BK * span4; v += WG) {
        var k = v / span4;
        var q = v % span4;
        if (which == 0u) {
            k = v % BK;
            q = v / BK;
        }
        var val = vec4<{{T}}>({{T}}(0));
        if (live) {
            let mn = mn0 + 4u * q;
            val = vec4<{{T}}>(fetch(which, g, mn, k0 + k), fetch(which, g, mn + 1u, k0 + k),
                fetch(which, g, mn + 2u, k0 + k), fetch(which, g, mn + 3u, k0 + k));
        }
        tiles[at + k * span4 + q] = val;
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m = params[0];
    let n = params[1];
    let k_len = params[2];
    let tiles_m = params[3];
    let yz = wid.z * 65535u + wid.y;
    // batch g of split s, stored as batch gs (= g without split-K)
    let gs = yz / tiles_m;
    let g = gs % params[4];
    let k_begin = (gs / params[4]) * params[5];
    let k_end = min(k_len, k_begin + params[5]);
    let row0 = (yz % tiles_m) * BM;
    let col0 = wid.x * BN;
    let live = gs < params[4] * params[6];
    // this invocation's block of C: rows r0..r0+TM, columns c0..c0+TN
    let tx = lid % WG_X;
    let ty = lid / WG_X;

    var acc: array<vec4<{{T}}>, TM * TN4>;
    for (var i = 0u; i < TM * TN4; i++) {
        acc[i] = vec4<{{T}}>({{T}}(0));
    }
    for (var k0 = k_begin; k0 < k_end; k0 += BK) {
        stage(0u, g, live, lid, k0, row0, BM4, 0u);
        stage(1u, g, live, lid, k0, col0, BN4, B_AT);
        workgroupBarrier();
        for (var k = 0u; k < BK; k++) {
            var bv: array<vec4<{{T}}>, TN4>;
            for (var j = 0u; j < TN4; j++) {
                bv[j] = tiles[B_AT + k * BN4 + tx * TN4 + j];
            }
            for (var i4 = 0u; i4 < TM / 4u; i4++) {
                let av = tiles[k * BM4 + ty * (TM / 4u) + i4];
                for (var r = 0u; r < 4u; r++) {
                    let s = av[r];
                    for (var j = 0u; j < TN4; j++) {
                        acc[(i4 * 4u + r) * TN4 + j] += s * bv[j];
                    }
                }
            }
        }
        workgroupBarrier();
    }
    if (!live) {
        return;
    }
    for (var i = 0u; i < TM; i++) {
        let r = row0 + ty * TM + i;
        if (r >= m) {
            break;
        }
        for (var j = 0u; j < TN4; j++) {
            let v = acc[i * TN4 + j];
            for (var q = 0u; q < 4u; q++) {
                let col = col0 + (tx * TN4 + j) * 4u + q;
                if (col < n) {
                    store_c(gs, r, col, v[q]);
                }
            }
        }
    }
}
