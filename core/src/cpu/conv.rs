//! 2-D convolution (NCHW, OIHW), its transpose and its weight gradient, all as GEMMs over an
//! im2col matrix. Images are processed in chunks so that the column matrix stays bounded, and
//! each chunk is one GEMM per group (large enough for the threaded GEMM to pay off).

use super::num::Float;
use super::par;
use super::storage::{CpuStorage, Src};
use super::unsupported;
use crate::backend::View;
use crate::op::Conv2dParams;
use crate::{DType, Error, Result, Shape};
use alloc::vec;

/// Column-matrix elements per chunk (32 MiB of f32).
const COL_BUDGET: usize = 1 << 23;

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
    /// Images per chunk so that the column matrix stays within the budget.
    fn chunk(&self, n: usize) -> usize {
        (COL_BUDGET / (self.k() * self.oh * self.ow).max(1)).clamp(1, n.max(1))
    }
}

/// Fills `col` (`[c*kh*kw, nb*oh*ow]`, row-major) with the windows of images `n0..n0+nb` of `x`.
fn im2col<T: Float>(x: &[T], g: &Geom, n0: usize, nb: usize, col: &mut [T]) {
    let (ohw, hw) = (g.oh * g.ow, g.h * g.w);
    let cols = nb * ohw;
    par::chunks_mut(&mut col[..g.k() * cols], cols, |row, dst| {
        let (c, kk) = (row / (g.kh * g.kw), row % (g.kh * g.kw));
        let (ki, kj) = (kk / g.kw, kk % g.kw);
        let dy = (ki * g.p.dilation[0]) as isize - g.p.padding[0] as isize;
        let dx = (kj * g.p.dilation[1]) as isize - g.p.padding[1] as isize;
        for b in 0..nb {
            let img = &x[((n0 + b) * g.c + c) * hw..][..hw];
            for oy in 0..g.oh {
                let d = &mut dst[b * ohw + oy * g.ow..][..g.ow];
                let iy = (oy * g.p.stride[0]) as isize + dy;
                if iy < 0 || iy >= g.h as isize {
                    d.fill(T::ZERO);
                    continue;
                }
                let src = &img[iy as usize * g.w..][..g.w];
                if g.p.stride[1] == 1 {
                    // ix = ox + dx: copy the in-range span, zero the rest.
                    let lo = (-dx).clamp(0, g.ow as isize) as usize;
                    let hi = (g.w as isize - dx).clamp(lo as isize, g.ow as isize) as usize;
                    d[..lo].fill(T::ZERO);
                    d[hi..].fill(T::ZERO);
                    let s0 = (lo as isize + dx) as usize;
                    d[lo..hi].copy_from_slice(&src[s0..s0 + hi - lo]);
                } else {
                    for (ox, v) in d.iter_mut().enumerate() {
                        let ix = (ox * g.p.stride[1]) as isize + dx;
                        *v = if ix >= 0 && ix < g.w as isize {
                            src[ix as usize]
                        } else {
                            T::ZERO
                        };
                    }
                }
            }
        }
    });
}

/// `c[m x n] (+)= a[m x k] b[k x n]`, all row-major slices with the given row strides.
#[allow(clippy::too_many_arguments)]
fn gemm<T: Float>(
    m: usize,
    k: usize,
    n: usize,
    a: &[T],
    a_s: [isize; 2],
    b: &[T],
    b_s: [isize; 2],
    accumulate: bool,
    c: &mut [T],
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

/// Convolution: per chunk of images, im2col then `weight[g] @ col[g]` per group.
pub(crate) fn conv2d(x: &View<'_>, w: &View<'_>, p: Conv2dParams) -> Result<CpuStorage> {
    float_dispatch(
        "conv2d",
        x.dtype,
        || conv2d_t::<f32>(x, w, p),
        || conv2d_t::<f64>(x, w, p),
    )
}

fn conv2d_t<T: Float>(x: &View<'_>, w: &View<'_>, p: Conv2dParams) -> Result<CpuStorage> {
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
    let mut out = vec![T::ZERO; n * o * ohw];
    let step = g.chunk(n);
    let mut col = vec![T::ZERO; g.k() * step * ohw];
    let mut tmp = vec![T::ZERO; o * step * ohw];
    for n0 in (0..n).step_by(step) {
        let nb = step.min(n - n0);
        let cols = nb * ohw;
        im2col(&xv, &g, n0, nb, &mut col);
        for gi in 0..groups {
            gemm(
                og,
                kg,
                cols,
                &wv[gi * og * kg..],
                [kg as isize, 1],
                &col[gi * kg * cols..],
                [cols as isize, 1],
                false,
                &mut tmp[gi * og * cols..],
            );
        }
        // tmp is [o, nb, oh*ow]; the output wants [nb, o, oh*ow].
        par::chunks_mut(
            &mut out[n0 * o * ohw..(n0 + nb) * o * ohw],
            ohw,
            |i, dst| {
                let (b, oc) = (i / o, i % o);
                dst.copy_from_slice(&tmp[oc * cols + b * ohw..][..ohw]);
            },
        );
    }
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
    let mut out = vec![T::ZERO; n * oc * ohw];
    let step = (COL_BUDGET / (groups * rows * hw).max(1)).clamp(1, n.max(1));
    let mut xt = vec![T::ZERO; cin * step * hw];
    let mut col = vec![T::ZERO; groups * rows * step * hw];
    for n0 in (0..n).step_by(step) {
        let nb = step.min(n - n0);
        let cols = nb * hw;
        // xt = x[n0..n0+nb] as [cin, nb*h*w].
        par::chunks_mut(&mut xt[..cin * cols], cols, |c, dst| {
            for b in 0..nb {
                dst[b * hw..(b + 1) * hw].copy_from_slice(&xv[((n0 + b) * cin + c) * hw..][..hw]);
            }
        });
        for gi in 0..groups {
            // weight[g] is [cg, og*kh*kw]; its transpose has strides (1, rows).
            gemm(
                rows,
                cg,
                cols,
                &wv[gi * cg * rows..],
                [1, rows as isize],
                &xt[gi * cg * cols..],
                [cols as isize, 1],
                false,
                &mut col[gi * rows * cols..],
            );
        }
        // col2im: each output plane gathers the taps that land on it.
        par::chunks_mut(
            &mut out[n0 * oc * ohw..(n0 + nb) * oc * ohw],
            ohw,
            |i, dst| {
                let (b, c) = (i / oc, i % oc);
                let (gi, ol) = (c / og, c % og);
                for ki in 0..kh {
                    for kj in 0..kw {
                        let src =
                            &col[(gi * rows + ol * kk + ki * kw + kj) * cols + b * hw..][..hw];
                        for iy in 0..h {
                            let y = (iy * p.stride[0] + ki * p.dilation[0]) as isize
                                - p.padding[0] as isize;
                            if y < 0 || y >= oh as isize {
                                continue;
                            }
                            let drow = &mut dst[y as usize * ow..][..ow];
                            for ix in 0..wd {
                                let xx = (ix * p.stride[1] + kj * p.dilation[1]) as isize
                                    - p.padding[1] as isize;
                                if xx >= 0 && xx < ow as isize {
                                    drow[xx as usize] = drow[xx as usize] + src[iy * wd + ix];
                                }
                            }
                        }
                    }
                }
            },
        );
    }
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
    let (ohw, og, kg) = (goh * gow, o / groups, (c / groups) * kh * kw);
    let mut dw = vec![T::ZERO; o * kg];
    let step = g.chunk(n);
    let mut col = vec![T::ZERO; g.k() * step * ohw];
    let mut gt = vec![T::ZERO; o * step * ohw];
    for n0 in (0..n).step_by(step) {
        let nb = step.min(n - n0);
        let cols = nb * ohw;
        im2col(&xv, &g, n0, nb, &mut col);
        // gt = grad[n0..n0+nb] as [o, nb*oh*ow].
        par::chunks_mut(&mut gt[..o * cols], cols, |oc, dst| {
            for b in 0..nb {
                dst[b * ohw..(b + 1) * ohw]
                    .copy_from_slice(&gv[((n0 + b) * o + oc) * ohw..][..ohw]);
            }
        });
        for gi in 0..groups {
            gemm(
                og,
                cols,
                kg,
                &gt[gi * og * cols..],
                [cols as isize, 1],
                &col[gi * kg * cols..],
                [1, cols as isize],
                true,
                &mut dw[gi * og * kg..],
            );
        }
    }
    Ok(CpuStorage::new(dw))
}
