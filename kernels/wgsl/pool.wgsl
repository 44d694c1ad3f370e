// 2-D pooling over NCHW and its gradients, one invocation per output element. Backward modes
// gather (each input element sums the windows that contain it), so no atomics are needed.
//
// params: PoolParams (kernels/src/header.rs): numel, the window geometry, x and dy offsets.
// defines: MODE (max avg max_back max_back_tiles avg_back adaptive adaptive_back), T (f32), WG.
// Forward modes read x (binding 1); max_back(_tiles) read x and dy; the other backward modes
// read dy. max_back_tiles is max_back for windows that tile the input exactly (stride = kernel,
// no padding or dilation, nothing left over): one invocation per window finds its maximum once
// and writes the window's whole gradient, instead of every input searching its window.
#include "common.wgsl"

@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
#if MODE == max_back || MODE == max_back_tiles
@group(0) @binding(2) var<storage, read> dy: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> out: array<{{T}}>;
#else
@group(0) @binding(2) var<storage, read_write> out: array<{{T}}>;
#endif

struct PoolGeometry {
    n: u32, c: u32, h: u32, w: u32, oh: u32, ow: u32, kh: u32, kw: u32,
    sh: u32, sw: u32, ph: u32, pw: u32, dh: u32, dw: u32, include_pad: u32,
}
struct PoolParams {
    numel: u32,
    pool: PoolGeometry,
    x_offset: u32,
    dy_offset: u32,
}
@group(0) @binding(0) var<storage, read> params: PoolParams;

// Start (inclusive) and end (exclusive) of adaptive window i of `outs` over `size` inputs.
fn adaptive_start(i: u32, size: u32, outs: u32) -> u32 {
    return (i * size) / outs;
}
fn adaptive_end(i: u32, size: u32, outs: u32) -> u32 {
    return ((i + 1u) * size + outs - 1u) / outs;
}

// Flat index (within the plane) of the first maximum of window (oy, ox); plane starts at `base`.
fn window_argmax(p: PoolGeometry, base: u32, oy: u32, ox: u32) -> u32 {
    var best = neg_inf();
    var at = 0xffffffffu;
    for (var ky = 0u; ky < p.kh; ky++) {
        let iy = i32(oy * p.sh + ky * p.dh) - i32(p.ph);
        for (var kx = 0u; kx < p.kw; kx++) {
            let ix = i32(ox * p.sw + kx * p.dw) - i32(p.pw);
            if (iy >= 0 && ix >= 0 && iy < i32(p.h) && ix < i32(p.w)) {
                let flat = u32(iy) * p.w + u32(ix);
                let v = x[base + flat];
                if (v > best || at == 0xffffffffu) {
                    best = v;
                    at = flat;
                }
            }
        }
    }
    return at;
}

// Taps of a window along one axis that land inside the input: kernel k, dilation d, first tap
// at `start` (before padding is subtracted), size `size`.
fn taps_inside(start: i32, k: u32, d: u32, size: u32) -> u32 {
    var n = 0u;
    for (var t = 0u; t < k; t++) {
        let at = start + i32(t * d);
        if (at >= 0 && at < i32(size)) {
            n++;
        }
    }
    return n;
}

// Divisor of average window (oy, ox): the whole kernel, or only its taps inside the input.
fn avg_count(p: PoolGeometry, oy: u32, ox: u32) -> f32 {
    if (p.include_pad != 0u) {
        return f32(p.kh * p.kw);
    }
    let ny = taps_inside(i32(oy * p.sh) - i32(p.ph), p.kh, p.dh, p.h);
    let nx = taps_inside(i32(ox * p.sw) - i32(p.pw), p.kw, p.dw, p.w);
    return f32(ny * nx);
}

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = group_index(wid, nwg) * {{WG}}u + lid;
    if (i >= params.numel) {
        return;
    }
    let p = params.pool;
#if MODE == max || MODE == avg || MODE == adaptive
    // i indexes the output (n, c, oy, ox)
    let plane = i / (p.oh * p.ow);
    let oy = (i / p.ow) % p.oh;
    let ox = i % p.ow;
    let base = params.x_offset + plane * p.h * p.w;
#if MODE == max
    out[i] = x[base + window_argmax(p, base, oy, ox)];
#elif MODE == avg
    var s = 0.0;
    for (var ky = 0u; ky < p.kh; ky++) {
        let iy = i32(oy * p.sh + ky * p.dh) - i32(p.ph);
        for (var kx = 0u; kx < p.kw; kx++) {
            let ix = i32(ox * p.sw + kx * p.dw) - i32(p.pw);
            if (iy >= 0 && ix >= 0 && iy < i32(p.h) && ix < i32(p.w)) {
                s += x[base + u32(iy) * p.w + u32(ix)];
            }
        }
    }
    out[i] = s / avg_count(p, oy, ox);
#else
    let y0 = adaptive_start(oy, p.h, p.oh);
    let y1 = adaptive_end(oy, p.h, p.oh);
    let x0 = adaptive_start(ox, p.w, p.ow);
    let x1 = adaptive_end(ox, p.w, p.ow);
    var s = 0.0;
    for (var iy = y0; iy < y1; iy++) {
        for (var ix = x0; ix < x1; ix++) {
            s += x[base + iy * p.w + ix];
        }
    }
    out[i] = s / f32((y1 - y0) * (x1 - x0));
#endif
#elif MODE == max_back_tiles
    // i indexes the window (n, c, oy, ox), which is also where its gradient is in dy
    let plane = i / (p.oh * p.ow);
    let oy = (i / p.ow) % p.oh;
    let ox = i % p.ow;
    let base = plane * p.h * p.w;
    let at = window_argmax(p, params.x_offset + base, oy, ox);
    let g = dy[params.dy_offset + i];
    for (var ky = 0u; ky < p.kh; ky++) {
        for (var kx = 0u; kx < p.kw; kx++) {
            let flat = (oy * p.kh + ky) * p.w + ox * p.kw + kx;
            out[base + flat] = select({{T}}(0), g, flat == at);
        }
    }
#else
    // i indexes the input gradient (n, c, iy, ix); sum over the windows that hold (iy, ix)
    let plane = i / (p.h * p.w);
    let iy = (i / p.w) % p.h;
    let ix = i % p.w;
    let dy_base = params.dy_offset + plane * p.oh * p.ow;
    var s = 0.0;
#if MODE == adaptive_back
    let oy0 = max(i32((iy * p.oh) / p.h) - 1, 0);
    let oy1 = min(((iy + 1u) * p.oh) / p.h + 2u, p.oh);
    let ox0 = max(i32((ix * p.ow) / p.w) - 1, 0);
    let ox1 = min(((ix + 1u) * p.ow) / p.w + 2u, p.ow);
    for (var oy = u32(oy0); oy < oy1; oy++) {
        let y0 = adaptive_start(oy, p.h, p.oh);
        let y1 = adaptive_end(oy, p.h, p.oh);
        for (var ox = u32(ox0); ox < ox1; ox++) {
            let x0 = adaptive_start(ox, p.w, p.ow);
            let x1 = adaptive_end(ox, p.w, p.ow);
            if (iy >= y0 && iy < y1 && ix >= x0 && ix < x1) {
                s += x[dy_base + oy * p.ow + ox] / f32((y1 - y0) * (x1 - x0));
            }
        }
    }
#else
    let x_base = params.x_offset + plane * p.h * p.w;
    for (var ky = 0u; ky < p.kh; ky++) {
        let ty = i32(iy + p.ph) - i32(ky * p.dh);
        if (ty < 0 || u32(ty) % p.sh != 0u || u32(ty) / p.sh >= p.oh) {
            continue;
        }
        let oy = u32(ty) / p.sh;
        for (var kx = 0u; kx < p.kw; kx++) {
            let tx = i32(ix + p.pw) - i32(kx * p.dw);
            if (tx < 0 || u32(tx) % p.sw != 0u || u32(tx) / p.sw >= p.ow) {
                continue;
            }
            let ox = u32(tx) / p.sw;
#if MODE == max_back
            if (window_argmax(p, x_base, oy, ox) == iy * p.w + ix) {
                s += dy[dy_base + oy * p.ow + ox];
            }
#else
            s += x[dy_base + oy * p.ow + ox] / avg_count(p, oy, ox);
#endif
        }
    }
#endif
    out[i] = s;
#endif
}
