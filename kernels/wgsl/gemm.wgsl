// Tiled GEMM: each workgroup computes a BM x BN tile of C = A x B for one batch (or group),
// staging BK-deep slices of A and B in workgroup memory; each invocation accumulates TM x TN
// results in registers. The MODE picks how A, B and C are addressed, so one kernel serves:
//   matmul      A [.., M, K] and B [.., K, N] strided views, broadcast batch, C contiguous
//   conv        implicit GEMM of conv2d: A = weight (O, C/g * KH * KW), B = im2col(x) on the fly
//   conv_t      gradient of conv2d wrt its input (= conv_transpose2d): A = weight^T, B = gathered dy
//   conv_wgrad  gradient of conv2d wrt its weight: A = dy, B = im2col(x)^T
//
// params: [M, N, K, tiles_m, batches, mode params...]
//   matmul: [5] batch rank br, [6..9) a offset/row/col strides, [9..12) b offset/row/col strides,
//           [12..12+br) batch shape, then a batch view (0, strides[br]) and b batch view
//   conv*:  [5..20) N C H W O OH OW KH KW sh sw ph pw dh dw (conv2d terms: x is N,C,H,W, weight
//           O,C/g,KH,KW, y is N,O,OH,OW), [20] a offset, [21] b offset; batches = groups
// defines: MODE, T, BM BN BK TM TN (tile sizes), WG = (BM / TM) * (BN / TN).
#include "common.wgsl"

@group(0) @binding(1) var<storage, read> a: array<{{T}}>;
@group(0) @binding(2) var<storage, read> b: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> c: array<{{T}}>;

const BM: u32 = {{BM}}u;
const BN: u32 = {{BN}}u;
const BK: u32 = {{BK}}u;
const TM: u32 = {{TM}}u;
const TN: u32 = {{TN}}u;
const WG_X: u32 = BN / TN;
const WG_Y: u32 = BM / TM;
const WG: u32 = {{WG}}u;

var<workgroup> tile_a: array<{{T}}, BK * BM>;
var<workgroup> tile_b: array<{{T}}, BK * BN>;

#if MODE == matmul
fn batch_offset(g: u32, which: u32) -> u32 {
    let br = params[5];
    return strided_index(g, br, 12u, 12u + br + which * (1u + br));
}
fn load_a(g: u32, row: u32, k: u32) -> {{T}} {
    return a[params[6] + batch_offset(g, 0u) + row * params[7] + k * params[8]];
}
fn load_b(g: u32, k: u32, col: u32) -> {{T}} {
    return b[params[9] + batch_offset(g, 1u) + k * params[10] + col * params[11]];
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
    return Conv(params[5], params[6], params[7], params[8], params[9], params[10], params[11],
        params[12], params[13], params[14], params[15], params[16], params[17], params[18],
        params[19], params[4]);
}
// Element (n, ch, iy, ix) of the conv input x at a signed position; 0 in the padding.
fn x_at(p: Conv, n: u32, ch: u32, iy: i32, ix: i32) -> {{T}} {
    if (iy < 0 || ix < 0 || iy >= i32(p.h) || ix >= i32(p.w)) {
        return {{T}}(0);
    }
    return b[params[21] + ((n * p.ci + ch) * p.h + u32(iy)) * p.w + u32(ix)];
}
#endif

#if MODE == conv
// A = weight rows of group g: (o, (c, ky, kx)); B = im2col(x): ((c, ky, kx), (n, oy, ox)).
fn load_a(g: u32, row: u32, k: u32) -> {{T}} {
    return a[params[20] + (g * params[0] + row) * params[2] + k];
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
    return a[params[20] + (o * cg + row) * kk + k % kk];
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
    return b[params[21] + ((n * p.co + o) * p.oh + oy) * p.ow + ox];
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
    return a[params[20] + (n * p.co + g * params[0] + row) * plane + k % plane];
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

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m = params[0];
    let n = params[1];
    let k_len = params[2];
    let tiles_m = params[3];
    // grid: x = column tiles, y * z = row tiles times batches (split so each stays <= 65535)
    let yz = wid.z * 65535u + wid.y;
    let g = yz / tiles_m;
    let row0 = (yz % tiles_m) * BM;
    let col0 = wid.x * BN;
    let live = g < params[4];
    let tx = lid % WG_X;
    let ty = lid / WG_X;

    var acc: array<{{T}}, TM * TN>;
    for (var i = 0u; i < TM * TN; i++) {
        acc[i] = {{T}}(0);
    }
    for (var k0 = 0u; k0 < k_len; k0 += BK) {
        for (var i = lid; i < BM * BK; i += WG) {
            let r = row0 + i / BK;
            let k = k0 + i % BK;
            var v = {{T}}(0);
            if (live && r < m && k < k_len) {
                v = load_a(g, r, k);
            }
            tile_a[(i % BK) * BM + i / BK] = v;
        }
        for (var i = lid; i < BK * BN; i += WG) {
            let k = k0 + i / BN;
            let col = col0 + i % BN;
            var v = {{T}}(0);
            if (live && col < n && k < k_len) {
                v = load_b(g, k, col);
            }
            tile_b[i] = v;
        }
        workgroupBarrier();
        for (var k = 0u; k < BK; k++) {
            var av: array<{{T}}, TM>;
            var bv: array<{{T}}, TN>;
            for (var i = 0u; i < TM; i++) {
                av[i] = tile_a[k * BM + ty + i * WG_Y];
            }
            for (var j = 0u; j < TN; j++) {
                bv[j] = tile_b[k * BN + tx + j * WG_X];
            }
            for (var i = 0u; i < TM; i++) {
                for (var j = 0u; j < TN; j++) {
                    acc[i * TN + j] += av[i] * bv[j];
                }
            }
        }
        workgroupBarrier();
    }
    if (!live) {
        return;
    }
    for (var i = 0u; i < TM; i++) {
        let r = row0 + ty + i * WG_Y;
        for (var j = 0u; j < TN; j++) {
            let col = col0 + tx + j * WG_X;
            if (r < m && col < n) {
                store_c(g, r, col, acc[i * TN + j]);
            }
        }
    }
}
