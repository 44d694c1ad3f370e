//! 2-D convolution (NCHW, OIHW), its transpose and its weight gradient, as GEMMs over each
//! image's im2col matrix. With at least one image per thread, images are spread over the threads
//! and each runs single-threaded GEMMs on a column matrix that stays in cache; smaller batches go
//! image after image with the GEMMs threaded instead.

use super::num::{Float, sum_into_first};
use super::par;
use super::pool;
use super::storage::{self, CpuStorage, Src};
use super::tail::Tail;
use super::unsupported;
use super::winograd;
use crate::backend::View;
use crate::op::Conv2dParams;
use crate::{DType, Error, Result, Shape};
use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

/// Output size of a convolution along one axis, or `None` when the kernel does not fit.
pub(crate) fn out_size(
    size: usize,
    k: usize,
    stride: usize,
    pad: usize,
    dil: usize,
) -> Option<usize> {
    let span = dil.checked_mul(k.checked_sub(1)?)? + 1;
    if stride == 0 || size + 2 * pad < span {
        return None;
    }
    Some((size + 2 * pad - span) / stride + 1)
}

fn dims4(op: &'static str, s: &Shape) -> Result<[usize; 4]> {
    <[usize; 4]>::try_from(s.dims()).map_err(|_| {
        Error::shape(
            op,
            alloc::format!("expected a 4-D (N, C, H, W) tensor, got {s}"),
        )
    })
}

/// The geometry of one convolution: input `[n, c, h, w]`, kernel `[kh, kw]`, output `[oh, ow]`.
#[derive(Clone, Copy)]
struct Geom {
    c: usize,
    h: usize,
    w: usize,
    kh: usize,
    kw: usize,
    oh: usize,
    ow: usize,
    p: Conv2dParams,
}

impl Geom {
    fn k(&self) -> usize {
        self.c * self.kh * self.kw
    }
    /// A 1x1 kernel at stride 1 without padding: the image is its own column matrix.
    fn is_pointwise(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.p.stride == [1, 1] && self.p.padding == [0, 0]
    }
    /// Whether Winograd's convolution (F(4x4, 3x3) or F(6x6, 3x3)) serves this one: a 3x3
    /// kernel at stride 1 without dilation, over enough input channels per group that its GEMMs
    /// outweigh the transforms (a first layer's one channel is left to the row updates of
    /// [`gemm()`]).
    fn winograd(&self) -> bool {
        let cg = self.c / self.p.groups.max(1);
        WINOGRAD
            && self.kh == 3
            && self.kw == 3
            && self.p.stride == [1, 1]
            && self.p.dilation == [1, 1]
            && cg >= WINOGRAD_MIN_CHANNELS
    }
    /// Elements of the scratch column matrix one image needs.
    fn col_len(&self) -> usize {
        if self.is_pointwise() {
            0
        } else {
            self.k() * self.oh * self.ow
        }
    }
    /// The column matrix `[c*kh*kw, oh*ow]` (row-major) of one image `img` (`[c, h, w]`): the
    /// image itself when pointwise, else built in `buf`.
    fn columns<'a, T: Float>(&self, img: &'a [T], buf: &'a mut [T]) -> &'a [T] {
        if self.is_pointwise() {
            return img;
        }
        let (ohw, hw) = (self.oh * self.ow, self.h * self.w);
        let col = &mut buf[..self.k() * ohw];
        for (row, dst) in col.chunks_exact_mut(ohw).enumerate() {
            let (c, kk) = (row / (self.kh * self.kw), row % (self.kh * self.kw));
            let (ki, kj) = (kk / self.kw, kk % self.kw);
            let dy = (ki * self.p.dilation[0]) as isize - self.p.padding[0] as isize;
            let dx = (kj * self.p.dilation[1]) as isize - self.p.padding[1] as isize;
            let plane = &img[c * hw..][..hw];
            for (oy, d) in dst.chunks_exact_mut(self.ow).enumerate() {
                let iy = (oy * self.p.stride[0]) as isize + dy;
                if iy < 0 || iy >= self.h as isize {
                    d.fill(T::ZERO);
                    continue;
                }
                let src = &plane[iy as usize * self.w..][..self.w];
                if self.p.stride[1] == 1 {
                    // ix = ox + dx: copy the in-range span, zero the rest.
                    let r = overlap(self.ow, self.w, dx);
                    d[..r.start].fill(T::ZERO);
                    d[r.end..].fill(T::ZERO);
                    // an empty overlap (a tap entirely in the padding) copies nothing; its
                    // source start may lie outside the row
                    if !r.is_empty() {
                        let s0 = (r.start as isize + dx) as usize;
                        d[r.clone()].copy_from_slice(&src[s0..s0 + r.len()]);
                    }
                } else {
                    for (ox, v) in d.iter_mut().enumerate() {
                        let ix = (ox * self.p.stride[1]) as isize + dx;
                        *v = if ix >= 0 && ix < self.w as isize {
                            src[ix as usize]
                        } else {
                            T::ZERO
                        };
                    }
                }
            }
        }
        col
    }
}

/// For `j = i + off`: the `i` in `0..ni` whose `j` lies in `0..nj`.
fn overlap(ni: usize, nj: usize, off: isize) -> Range<usize> {
    let lo = (-off).clamp(0, ni as isize);
    let hi = (nj as isize - off).clamp(lo, ni as isize);
    lo as usize..hi as usize
}

/// How `n` images are processed: in runs of this many images, and whether the GEMMs inside a
/// run are threaded (only when there is a single run).
fn split(n: usize) -> (usize, bool) {
    let threads = par::threads();
    if threads > 1 && n >= threads {
        (par::piece(n, 1), false)
    } else {
        (n.max(1), true)
    }
}

/// The `n * per` outputs of `n` images: calls `image(b, dst, col, threaded)` for every image `b`,
/// whose `per`-element output `dst` (zeros on entry, just written, so in cache) is its chunk;
/// `col` is a scratch buffer of `scratch` elements, not zeroed (`storage::scratch`).
fn for_images<T: Float>(
    n: usize,
    per: usize,
    scratch: usize,
    image: impl Fn(usize, &mut [T], &mut [T], bool) + Send + Sync,
) -> Vec<T> {
    if per == 0 {
        return Vec::new();
    }
    let (step, threaded) = split(n);
    par::zeros_with(n * per, step * per, |t, run| {
        let mut col = storage::scratch(scratch);
        for (j, dst) in run.chunks_exact_mut(per).enumerate() {
            image(t * step + j, dst, &mut col[..scratch], threaded);
        }
        storage::keep_scratch(col);
    })
}

/// Input channels per group from which 3x3 convolutions go through Winograd's algorithms.
const WINOGRAD_MIN_CHANNELS: usize = 8;
/// Whether Winograd's convolution is used: with the portable GEMM (wasm32, `no_std`), and in
/// the unit tests, which check it natively. Native builds keep the column matrix for now: with
/// the `gemm` crate's FMA kernels, F(4x4, 3x3) gained nothing on MNIST's conv2 at batch 64
/// (7.2-7.7 ms against 7.4-7.5, 2 threads under load) and 1.6x on a 64-channel 56x56 layer,
/// and the native CPU backend is the f32 reference of the GPU backends' tests.
const WINOGRAD: bool = cfg!(any(
    test,
    not(all(feature = "std", not(target_arch = "wasm32")))
));

/// Reduction lengths up to which [`gemm()`] multiplies with plain row updates.
const SMALL_K: usize = 16;

/// `c[m x n] (+)= a[m x k] b[k x n]`, all row-major slices with the given row strides.
#[allow(clippy::too_many_arguments)]
pub(super) fn gemm<T: Float>(
    m: usize,
    k: usize,
    n: usize,
    a: &[T],
    a_s: [isize; 2],
    b: &[T],
    b_s: [isize; 2],
    accumulate: bool,
    c: &mut [T],
    parallel: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    let reach = |s: [isize; 2], r: usize, q: usize| {
        (r.saturating_sub(1) as isize * s[0] + q.saturating_sub(1) as isize * s[1]) as usize
    };
    // Guards the raw-pointer call below; callers size the slices, so this never fires.
    if k > 0 && (reach(a_s, m, k) >= a.len() || reach(b_s, k, n) >= b.len()) || m * n > c.len() {
        return;
    }
    if k == 0 {
        if !accumulate {
            c[..m * n].fill(T::ZERO);
        }
        return;
    }
    if k <= SMALL_K && b_s[1] == 1 {
        // A few input taps (a first layer's single channel): row updates beat packing for GEMM.
        let update = |i: usize, row: &mut [T]| {
            let w = |kk: usize| a[(i as isize * a_s[0] + kk as isize * a_s[1]) as usize];
            let src = |kk: usize| &b[(kk as isize * b_s[0]) as usize..][..n];
            let mut j = 0;
            if !accumulate {
                // Sixteen outputs at a time summed over the taps in registers (four SIMD
                // vectors), each stored once, instead of a load and a store per tap: the MNIST
                // CNN's conv1 at batch 1 took 62 us in Node, 18 this way. The same sums in the
                // same order as the rest's below.
                for d in row.chunks_exact_mut(16) {
                    let mut acc = [T::ZERO; 16];
                    for kk in 0..k {
                        let (w, s) = (w(kk), &src(kk)[j..j + 16]);
                        for l in 0..16 {
                            acc[l] = acc[l] + w * s[l];
                        }
                    }
                    d.copy_from_slice(&acc);
                    j += 16;
                }
                row[j..].fill(T::ZERO);
            }
            for kk in 0..k {
                let w = w(kk);
                for (d, &v) in row[j..].iter_mut().zip(&src(kk)[j..]) {
                    *d = *d + w * v;
                }
            }
        };
        // A row per task, or all rows in one: `update` compiled once either way.
        let rows = if parallel && par::worth_splitting(m * k * n / 4) {
            1
        } else {
            m
        };
        par::chunks_mut(&mut c[..m * n], rows * n, |t, block| {
            for (i, row) in block.chunks_exact_mut(n).enumerate() {
                update(t * rows + i, row);
            }
        });
        return;
    }
    let beta = if accumulate { T::ONE } else { T::ZERO };
    // SAFETY: the extents were checked against the slice lengths just above, and `c` is a
    // distinct mutable slice.
    unsafe {
        T::gemm(
            m,
            k,
            n,
            a.as_ptr(),
            a_s[0],
            a_s[1],
            b.as_ptr(),
            b_s[0],
            b_s[1],
            beta,
            c.as_mut_ptr(),
            n as isize,
            1,
            parallel,
        );
    }
}

fn float_dispatch(
    op: &'static str,
    dt: DType,
    f32f: impl FnOnce() -> Result<CpuStorage>,
    f64f: impl FnOnce() -> Result<CpuStorage>,
) -> Result<CpuStorage> {
    match dt {
        DType::F32 => f32f(),
        DType::F64 => f64f(),
        dt => Err(unsupported(op, dt)),
    }
}

/// Convolution: per chunk of images, im2col then `weight[g] @ col[g]` per group; then `tail`
/// (f32 only), when given, on each output channel's plane as it is written.
pub(crate) fn conv2d(
    x: &View<'_>,
    w: &View<'_>,
    p: Conv2dParams,
    tail: Option<&Tail<'_>>,
) -> Result<CpuStorage> {
    float_dispatch(
        "conv2d",
        x.dtype,
        || conv2d_t::<f32>(x, w, p, tail),
        || conv2d_t::<f64>(x, w, p, None),
    )
}

fn conv2d_t<T: Float>(
    x: &View<'_>,
    w: &View<'_>,
    p: Conv2dParams,
    tail: Option<&Tail<'_>>,
) -> Result<CpuStorage> {
    let op = "conv2d";
    let (xs, ws) = (Src::<T>::new(op, x)?, Src::<T>::new(op, w)?);
    let [n, c, h, wd] = dims4(op, xs.shape())?;
    let [o, cg, kh, kw] = dims4(op, ws.shape())?;
    let groups = p.groups.max(1);
    let (oh, ow) = match (
        out_size(h, kh, p.stride[0], p.padding[0], p.dilation[0]),
        out_size(wd, kw, p.stride[1], p.padding[1], p.dilation[1]),
    ) {
        (Some(a), Some(b)) if cg * groups == c && o % groups == 0 => (a, b),
        _ => {
            return Err(Error::shape(
                op,
                alloc::format!(
                    "input {} and weight {} do not fit {p:?}",
                    xs.shape(),
                    ws.shape()
                ),
            ));
        }
    };
    let g = Geom {
        c,
        h,
        w: wd,
        kh,
        kw,
        oh,
        ow,
        p,
    };
    let (xv, wv) = (xs.to_contiguous(), ws.to_contiguous());
    let (ohw, og, kg) = (oh * ow, o / groups, cg * kh * kw);
    // A max pool in the tail: each image's output is the pooled one.
    let pooled = tail.is_some_and(|t| t.max_pool);
    let (poh, pow) = if pooled { (oh / 2, ow / 2) } else { (oh, ow) };
    if let (true, Some(x), Some(w)) = (g.winograd(), T::as_f32(&xv), T::as_f32(&wv)) {
        let t = winograd::Tiles::new(h, wd, p.padding);
        let f = winograd::Filters::cached(w, groups, og, cg, t.tile());
        let out = for_images(
            n,
            o * poh * pow,
            t.scratch_len(og, cg),
            |b, dst, buf, threaded| {
                let img = &x[b * c * h * wd..][..c * h * wd];
                winograd::conv_image(&f, &t, img, dst, buf, threaded, tail);
            },
        );
        return Ok(CpuStorage::new(out));
    }
    // With a pool, an image's product goes to the scratch after its column matrix first.
    let full = if pooled { o * ohw } else { 0 };
    let out = for_images(
        n,
        o * poh * pow,
        g.col_len() + full,
        |b, dst, buf, threaded| {
            let (buf, product) = buf.split_at_mut(g.col_len());
            let col = g.columns(&xv[b * c * h * wd..][..c * h * wd], buf);
            // The product and its bias and ReLU into `y` (`[o, oh, ow]`).
            let multiply = |y: &mut [T]| {
                for gi in 0..groups {
                    gemm(
                        og,
                        kg,
                        ohw,
                        &wv[gi * og * kg..],
                        [kg as isize, 1],
                        &col[gi * kg * ohw..],
                        [ohw as isize, 1],
                        false,
                        &mut y[gi * og * ohw..],
                        threaded,
                    );
                }
                if let (Some(t), Some(y)) = (tail, T::as_f32_mut(y)) {
                    for (channel, plane) in y.chunks_exact_mut(ohw).enumerate() {
                        t.apply(channel, plane);
                    }
                }
            };
            if pooled {
                let y = &mut product[..full];
                multiply(y);
                for (plane, d) in y.chunks_exact(ohw).zip(dst.chunks_exact_mut(poh * pow)) {
                    pool::max_2x2(plane, ow, d, pow);
                }
            } else {
                multiply(dst);
            }
        },
    );
    Ok(CpuStorage::new(out))
}

/// Transposed convolution (the gradient of conv2d wrt its input): per chunk, `weight[g]^T @ x[g]`
/// gives every tap's contribution, which col2im adds into the output.
pub(crate) fn conv_transpose2d(
    x: &View<'_>,
    w: &View<'_>,
    p: Conv2dParams,
    out_shape: &Shape,
) -> Result<CpuStorage> {
    float_dispatch(
        "conv_transpose2d",
        x.dtype,
        || conv_transpose2d_t::<f32>(x, w, p, out_shape),
        || conv_transpose2d_t::<f64>(x, w, p, out_shape),
    )
}

fn conv_transpose2d_t<T: Float>(
    x: &View<'_>,
    w: &View<'_>,
    p: Conv2dParams,
    out_shape: &Shape,
) -> Result<CpuStorage> {
    let op = "conv_transpose2d";
    let (xs, ws) = (Src::<T>::new(op, x)?, Src::<T>::new(op, w)?);
    let [n, cin, h, wd] = dims4(op, xs.shape())?;
    let [wc, og, kh, kw] = dims4(op, ws.shape())?;
    let [on, oc, oh, ow] = dims4(op, out_shape)?;
    let groups = p.groups.max(1);
    if wc != cin || cin % groups != 0 || on != n || oc != og * groups {
        return Err(Error::shape(
            op,
            alloc::format!(
                "input {}, weight {} and output {out_shape} do not fit {p:?}",
                xs.shape(),
                ws.shape()
            ),
        ));
    }
    let (xv, wv) = (xs.to_contiguous(), ws.to_contiguous());
    let (hw, ohw, cg, kk) = (h * wd, oh * ow, cin / groups, kh * kw);
    let rows = og * kk; // rows of one group's column matrix
    let out = for_images(n, oc * ohw, groups * rows * hw, |b, dst, col, threaded| {
        let img = &xv[b * cin * hw..][..cin * hw];
        for gi in 0..groups {
            // weight[g] is [cg, og*kh*kw]; its transpose has strides (1, rows).
            gemm(
                rows,
                cg,
                hw,
                &wv[gi * cg * rows..],
                [1, rows as isize],
                &img[gi * cg * hw..],
                [hw as isize, 1],
                false,
                &mut col[gi * rows * hw..],
                threaded,
            );
        }
        // col2im: each output plane gathers the taps that land on it.
        for (c, plane) in dst.chunks_exact_mut(ohw).enumerate() {
            let (gi, ol) = (c / og, c % og);
            for ki in 0..kh {
                for kj in 0..kw {
                    let src = &col[(gi * rows + ol * kk + ki * kw + kj) * hw..][..hw];
                    let dy = (ki * p.dilation[0]) as isize - p.padding[0] as isize;
                    let dx = (kj * p.dilation[1]) as isize - p.padding[1] as isize;
                    for (iy, srow) in src.chunks_exact(wd).enumerate() {
                        let y = (iy * p.stride[0]) as isize + dy;
                        if y < 0 || y >= oh as isize {
                            continue;
                        }
                        let drow = &mut plane[y as usize * ow..][..ow];
                        if p.stride[1] == 1 {
                            // x = ix + dx: add the in-range span.
                            let r = overlap(wd, ow, dx);
                            let x0 = (r.start as isize + dx) as usize;
                            for (d, &v) in drow[x0..x0 + r.len()].iter_mut().zip(&srow[r]) {
                                *d = *d + v;
                            }
                        } else {
                            for (ix, &v) in srow.iter().enumerate() {
                                let x = (ix * p.stride[1]) as isize + dx;
                                if x >= 0 && x < ow as isize {
                                    drow[x as usize] = drow[x as usize] + v;
                                }
                            }
                        }
                    }
                }
            }
        }
    });
    Ok(CpuStorage::new(out))
}

/// The gradient of conv2d wrt its weight: `sum over images of grad[g] @ col[g]^T`.
pub(crate) fn conv2d_backward_weight(
    x: &View<'_>,
    grad: &View<'_>,
    p: Conv2dParams,
    kernel: [usize; 2],
) -> Result<CpuStorage> {
    float_dispatch(
        "conv2d_backward_weight",
        x.dtype,
        || backward_weight_t::<f32>(x, grad, p, kernel),
        || backward_weight_t::<f64>(x, grad, p, kernel),
    )
}

fn backward_weight_t<T: Float>(
    x: &View<'_>,
    grad: &View<'_>,
    p: Conv2dParams,
    [kh, kw]: [usize; 2],
) -> Result<CpuStorage> {
    let op = "conv2d_backward_weight";
    let (xs, gs) = (Src::<T>::new(op, x)?, Src::<T>::new(op, grad)?);
    let [n, c, h, wd] = dims4(op, xs.shape())?;
    let [gn, o, goh, gow] = dims4(op, gs.shape())?;
    let groups = p.groups.max(1);
    let expect = (
        out_size(h, kh, p.stride[0], p.padding[0], p.dilation[0]),
        out_size(wd, kw, p.stride[1], p.padding[1], p.dilation[1]),
    );
    if gn != n || expect != (Some(goh), Some(gow)) || c % groups != 0 || o % groups != 0 {
        return Err(Error::shape(
            op,
            alloc::format!(
                "grad_out {} does not match input {} with kernel [{kh}, {kw}] and {p:?}",
                gs.shape(),
                xs.shape()
            ),
        ));
    }
    let g = Geom {
        c,
        h,
        w: wd,
        kh,
        kw,
        oh: goh,
        ow: gow,
        p,
    };
    let (xv, gv) = (xs.to_contiguous(), gs.to_contiguous());
    let (ohw, og, kg, chw) = (goh * gow, o / groups, (c / groups) * kh * kw, c * h * wd);
    // Each run of images sums into its own copy of the gradient, per group transposed
    // (`[kg, og]`: `col @ grad^T`, whose long operand `col` the GEMM then reads along its rows);
    // the copies are added and transposed back last.
    let (step, threaded) = split(n);
    let len = o * kg;
    let mut partial = vec![T::ZERO; n.div_ceil(step).max(1) * len];
    par::chunks_mut(&mut partial, len.max(1), |t, acc| {
        let mut buf = vec![T::ZERO; g.col_len()];
        for b in t * step..n.min((t + 1) * step) {
            let col = g.columns(&xv[b * chw..][..chw], &mut buf);
            for gi in 0..groups {
                gemm(
                    kg,
                    ohw,
                    og,
                    &col[gi * kg * ohw..],
                    [ohw as isize, 1],
                    &gv[(b * o + gi * og) * ohw..],
                    [1, ohw as isize],
                    true,
                    &mut acc[gi * og * kg..],
                    threaded,
                );
            }
        }
    });
    sum_into_first(&mut partial, len);
    let mut dw = vec![T::ZERO; len];
    for (block, sum) in dw
        .chunks_exact_mut(og * kg)
        .zip(partial.chunks_exact(og * kg))
    {
        for (i, row) in block.chunks_exact_mut(kg).enumerate() {
            for (j, d) in row.iter_mut().enumerate() {
                *d = sum[j * og + i];
            }
        }
    }
    Ok(CpuStorage::new(dw))
}
