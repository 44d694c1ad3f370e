//! 2-D max/avg/adaptive-avg pooling over NCHW input and their gradients, one plane at a time.

use super::conv::out_size;
use super::lanes::F4;
use super::num::Float;
use super::par;
use super::par::zeros;
use super::storage::{CpuStorage, Src};
use super::unsupported;
use crate::backend::View;
use crate::op::{Op, Pool2d, Pool2dParams};
use crate::{DType, Error, Result, Shape};
use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

/// Runs a pooling op or its gradient. `inputs` and `out_shape` as given to `Backend::execute`.
pub(crate) fn pool(op: &Op, inputs: &[View<'_>], out_shape: &Shape) -> Result<CpuStorage> {
    match inputs.first().map(|v| v.dtype) {
        Some(DType::F32) => pool_t::<f32>(op, inputs, out_shape),
        Some(DType::F64) => pool_t::<f64>(op, inputs, out_shape),
        Some(dt) => Err(unsupported(op.name(), dt)),
        None => Err(Error::invalid(op.name(), "expects an input")),
    }
}

fn dims4(op: &'static str, what: &str, s: &Shape) -> Result<[usize; 4]> {
    <[usize; 4]>::try_from(s.dims()).map_err(|_| {
        Error::shape(
            op,
            alloc::format!("{what} must be 4-D (N, C, H, W), got {s}"),
        )
    })
}

/// The input rows/columns `[start, end)` of output position `i` (before clipping for max/avg).
fn window(kind: Pool2d, axis: usize, i: usize, size: usize, out: usize) -> (isize, isize, usize) {
    match kind {
        Pool2d::Max(p) | Pool2d::Avg(p) => {
            let start = (i * p.stride[axis]) as isize - p.padding[axis] as isize;
            (start, p.kernel[axis] as isize, p.dilation[axis])
        }
        // PyTorch: start = floor(i * in / out), end = ceil((i + 1) * in / out).
        Pool2d::AdaptiveAvg { .. } => {
            let start = i * size / out;
            let end = ((i + 1) * size).div_ceil(out);
            (start as isize, (end - start) as isize, 1)
        }
    }
}

/// The valid input positions of one window along one axis: `count` of them, `step` apart from
/// `first` (clipping a progression to the input leaves a progression).
#[derive(Clone, Copy)]
struct Taps {
    first: usize,
    count: usize,
    step: usize,
}

impl Taps {
    fn new(start: isize, len: isize, step: usize, size: usize) -> Taps {
        let at = |t: isize| start + t * step as isize;
        let mut valid = (0..len).filter(|&t| at(t) >= 0 && at(t) < size as isize);
        match valid.next() {
            Some(t) => Taps {
                first: at(t) as usize,
                count: 1 + valid.count(),
                step,
            },
            None => Taps {
                first: 0,
                count: 0,
                step,
            },
        }
    }
    fn iter(self) -> impl DoubleEndedIterator<Item = usize> {
        (0..self.count).map(move |t| self.first + t * self.step)
    }
}

/// The divisor of an average window.
fn divisor(kind: Pool2d, valid: usize) -> usize {
    match kind {
        Pool2d::Avg(p) if p.count_include_pad => p.kernel[0] * p.kernel[1],
        _ => valid,
    }
}

/// Index (within the plane) of the first maximum of a window; NaN counts as the maximum.
fn argmax<T: Float>(plane: &[T], w: usize, ys: Taps, xs: Taps) -> Option<usize> {
    let mut best: Option<(usize, T)> = None;
    for y in ys.iter() {
        for x in xs.iter() {
            let (i, v) = (y * w + x, plane[y * w + x]);
            match best {
                Some((_, b)) if !(v > b || (v.is_nan() && !b.is_nan())) => {}
                _ => best = Some((i, v)),
            }
        }
    }
    best.map(|(i, _)| i)
}

fn pool_t<T: Float>(op: &Op, inputs: &[View<'_>], out_shape: &Shape) -> Result<CpuStorage> {
    let name = op.name();
    let (kind, backward) = match op {
        Op::Pool2d(p) => (*p, false),
        Op::Pool2dBackward(p) => (*p, true),
        _ => return Err(Error::invalid(name, "is not a pooling op")),
    };
    // The input geometry `[n, c, h, w]` and the pooled geometry `[oh, ow]`.
    let inp = dims4(name, "input", inputs[0].layout.shape())?;
    let pooled = match inputs.get(1) {
        Some(g) if backward => dims4(name, "grad_out", g.layout.shape())?,
        _ => dims4(name, "output", out_shape)?,
    };
    let [n, c, h, w] = inp;
    let [_, _, oh, ow] = pooled;
    let expect = match kind {
        Pool2d::Max(p) | Pool2d::Avg(p) => (
            out_size(h, p.kernel[0], p.stride[0], p.padding[0], p.dilation[0]),
            out_size(w, p.kernel[1], p.stride[1], p.padding[1], p.dilation[1]),
        ),
        Pool2d::AdaptiveAvg { output } => (Some(output[0]), Some(output[1])),
    };
    if pooled[..2] != [n, c] || expect != (Some(oh), Some(ow)) {
        return Err(Error::shape(
            name,
            alloc::format!("pooled shape {pooled:?} does not match input {inp:?} for this op"),
        ));
    }
    // Window taps per output row and column.
    let rows: Vec<Taps> = (0..oh)
        .map(|i| {
            let (s, l, d) = window(kind, 0, i, h, oh);
            Taps::new(s, l, d, h)
        })
        .collect();
    let cols: Vec<Taps> = (0..ow)
        .map(|i| {
            let (s, l, d) = window(kind, 1, i, w, ow);
            Taps::new(s, l, d, w)
        })
        .collect();
    let (hw, ohw) = (h * w, oh * ow);
    // the input, contiguous (the average gradients read only grad_out)
    let x = || Src::<T>::new(name, &inputs[0]).map(|s| s.to_contiguous());
    if let Pool2d::Max(p) = kind {
        let first = x()?;
        let grad = match backward {
            true => Some(Src::<T>::new(name, &inputs[1])?.to_contiguous()),
            false => None,
        };
        let out = if p.kernel == p.stride && p.padding == [0, 0] && p.dilation == [1, 1] {
            max_pool_tiled(&first, grad.as_deref(), n * c, [h, w], [oh, ow], p.kernel)
        } else {
            max_pool(&first, grad.as_deref(), n * c, w, &rows, &cols, p)
        };
        return Ok(CpuStorage::new(out));
    }
    if !backward {
        let first = x()?;
        let mut out = zeros(n * c * ohw);
        par::chunks_mut(&mut out, ohw, |pl, dst| {
            let plane = &first[pl * hw..][..hw];
            for (oy, &ys) in rows.iter().enumerate() {
                for (ox, &xs) in cols.iter().enumerate() {
                    let mut s = 0f64;
                    for y in ys.iter() {
                        for x in xs.iter() {
                            s += plane[y * w + x].into();
                        }
                    }
                    let d = divisor(kind, ys.count * xs.count);
                    dst[oy * ow + ox] = T::from_f(if d == 0 { 0.0 } else { s / d as f64 });
                }
            }
        });
        return Ok(CpuStorage::new(out));
    }
    // Gradients: each output gradient is shared out over its window.
    let grad = Src::<T>::new(name, &inputs[1])?.to_contiguous();
    let mut out = zeros::<T>(n * c * hw);
    par::chunks_mut(&mut out, hw, |pl, dst| {
        let g = &grad[pl * ohw..][..ohw];
        for (oy, &ys) in rows.iter().enumerate() {
            for (ox, &xs) in cols.iter().enumerate() {
                let d = divisor(kind, ys.count * xs.count);
                if d == 0 {
                    continue;
                }
                let share = g[oy * ow + ox] / T::from_f(d as f64);
                for y in ys.iter() {
                    for x in xs.iter() {
                        dst[y * w + x] = dst[y * w + x] + share;
                    }
                }
            }
        }
    });
    Ok(CpuStorage::new(out))
}

/// Max pooling of `planes` planes of width `w` (with `grad`, its gradient: each output gradient
/// goes to the first maximum of its window), one output row at a time by [`Row::max`].
fn max_pool<T: Float>(
    x: &[T],
    grad: Option<&[T]>,
    planes: usize,
    w: usize,
    rows: &[Taps],
    cols: &[Taps],
    p: Pool2dParams,
) -> Vec<T> {
    let (ow, hw) = (cols.len(), x.len().checked_div(planes).unwrap_or(0));
    let ohw = rows.len() * ow;
    // The columns whose windows the border does not clip: one run in the middle.
    let whole = |ox: &usize| cols[*ox].count == p.kernel[1];
    let lo = (0..ow).find(whole).unwrap_or(ow);
    let full = lo..(lo..ow).find(|ox| !whole(ox)).unwrap_or(ow);
    let per = if grad.is_some() { hw } else { ohw };
    let mut out = zeros::<T>(planes * per);
    par::chunks_mut(&mut out, per, |pl, dst| {
        let plane = &x[pl * hw..][..hw];
        let mut idx = vec![0usize; if grad.is_some() { ow } else { 0 }];
        let mut val = vec![T::ZERO; ow];
        for (oy, &ys) in rows.iter().enumerate() {
            let win = Row {
                plane,
                w,
                ys,
                cols,
                p,
                full: full.clone(),
            };
            match grad {
                None => win.max(&mut dst[oy * ow..][..ow], None),
                Some(g) => {
                    win.max(&mut val, Some(&mut idx));
                    for (&go, &i) in g[pl * ohw + oy * ow..][..ow].iter().zip(&idx) {
                        if let Some(d) = dst.get_mut(i) {
                            *d = *d + go;
                        }
                    }
                }
            }
        }
    });
    out
}

/// Max pooling (with `grad`, its gradient) whose windows tile the input: kernel == stride, no
/// padding or dilation, as in the usual 2x2 pooling. Each input element lies in at most one
/// window, so the gradient is written window by window instead of added into zeros.
fn max_pool_tiled<T: Float>(
    x: &[T],
    grad: Option<&[T]>,
    planes: usize,
    [h, w]: [usize; 2],
    [oh, ow]: [usize; 2],
    [kh, kw]: [usize; 2],
) -> Vec<T> {
    let (hw, ohw) = (h * w, oh * ow);
    let per = if grad.is_some() { hw } else { ohw };
    // A plane per piece, or all in one when too few to split.
    let step = if par::worth_splitting(planes * hw) {
        1
    } else {
        planes.max(1)
    };
    par::zeros_with(planes * per, step * per, |i, dst| {
        for (j, dst) in dst.chunks_exact_mut(per).enumerate() {
            let pl = i * step + j;
            let plane = &x[pl * hw..][..hw];
            let g = grad.map(|g| &g[pl * ohw..][..ohw]);
            // The common 2x2 window gets loops with constant bounds.
            if (kh, kw) == (2, 2) {
                tiled_plane(plane, dst, g, w, [oh, ow], [2, 2]);
            } else {
                tiled_plane(plane, dst, g, w, [oh, ow], [kh, kw]);
            }
        }
    })
}

/// One plane of [`max_pool_tiled`]: the maxima into `dst` (`[oh, ow]`) or, with `g`, the
/// gradient into `dst` (`[h, w]`, zeros on entry) at the first maximum of each window (NaN counts
/// as the maximum).
#[inline(always)]
fn tiled_plane<T: Float>(
    plane: &[T],
    dst: &mut [T],
    g: Option<&[T]>,
    w: usize,
    [oh, ow]: [usize; 2],
    [kh, kw]: [usize; 2],
) {
    if g.is_none() && (kh, kw) == (2, 2) && ow > 0 {
        max_2x2(plane, w, &mut dst[..oh * ow], ow);
        return;
    }
    let mut args = vec![0u32; ow];
    for oy in 0..oh {
        for (ox, arg) in args.iter_mut().enumerate() {
            let win = |ki: usize| &plane[(oy * kh + ki) * w + ox * kw..][..kw];
            // The maximum as `if v > best`, which compiles to a max instruction; NaN separately
            // (the data-dependent selects must not become branches, which mispredict).
            let (mut best, mut nan) = (win(0)[0], false);
            for ki in 0..kh {
                for &v in win(ki) {
                    best = if v > best { v } else { best };
                    nan |= v.is_nan();
                }
            }
            if nan {
                best = T::from_f(f64::NAN);
            }
            let Some(_) = g else {
                dst[oy * ow + ox] = best;
                continue;
            };
            // The first tap at the maximum: the last met going backwards, picked with a mask.
            let mut at = 0u32;
            for ki in (0..kh).rev() {
                for (kj, &v) in win(ki).iter().enumerate().rev() {
                    let hit = (v == best) | (v.is_nan() & nan);
                    let m = u32::from(hit).wrapping_neg();
                    at = ((ki * kw + kj) as u32 & m) | (at & !m);
                }
            }
            *arg = at;
        }
        let Some(g) = g else { continue };
        // Second pass, row by row: each window's gradient at its tap, zeros at the others.
        for ki in 0..kh {
            let row = dst[(oy * kh + ki) * w..][..ow * kw].chunks_exact_mut(kw);
            for ((out, &gv), &at) in row.zip(&g[oy * ow..][..ow]).zip(&args) {
                for (kj, d) in out.iter_mut().enumerate() {
                    *d = T::select((ki * kw + kj) as u32 == at, gv, T::ZERO);
                }
            }
        }
    }
}

/// The maxima of the 2x2 windows at stride 2 of `plane` (rows of `w` values) into `dst`, rows
/// of `ow` values (`ow` > 0), as many as it holds: a max pool's plane, or a convolution's output
/// rows in its fused tail ([`super::tail::Tail`]).
pub(super) fn max_2x2<T: Float>(plane: &[T], w: usize, dst: &mut [T], ow: usize) {
    for (oy, d) in dst.chunks_exact_mut(ow).enumerate() {
        let r0 = &plane[2 * oy * w..][..2 * ow];
        let r1 = &plane[(2 * oy + 1) * w..][..2 * ow];
        max_2x2_row(r0, r1, d);
    }
}

/// One output row `d` of the forward 2x2 window (the common CNN pool) from its two input rows:
/// pairwise maxima, ties to the first. f32 rows take four windows per step in SIMD lanes: the
/// scalar `maximum`s branch, and where they do not predict they cost most of the time (the MNIST
/// CNN with random weights in the page, batch 64, one thread: 8.9-9.4 ms, then 1.3-1.8 ms). With
/// the trained model on digits they predicted well: its whole forward gained only 2-4%.
fn max_2x2_row<T: Float>(r0: &[T], r1: &[T], d: &mut [T]) {
    let mut done = 0;
    if let (Some(a), Some(b), Some(out)) = (T::as_f32(r0), T::as_f32(r1), T::as_f32_mut(d)) {
        done = out.len() / 4 * 4;
        let pairs = |s: &[f32]| {
            // SAFETY: `s` holds eight values (a chunk of eight below).
            let (even, odd) = unsafe { F4::load(s.as_ptr()).unzip(F4::load(s[4..].as_ptr())) };
            even.maximum(odd)
        };
        for ((o, a), b) in out
            .chunks_exact_mut(4)
            .zip(a.chunks_exact(8))
            .zip(b.chunks_exact(8))
        {
            // SAFETY: `o` holds four values.
            unsafe { pairs(a).maximum(pairs(b)).store(o.as_mut_ptr()) };
        }
    }
    let rows = r0[2 * done..]
        .chunks_exact(2)
        .zip(r1[2 * done..].chunks_exact(2));
    for (d, (a, b)) in d[done..].iter_mut().zip(rows) {
        *d = a[0].maximum(a[1]).maximum(b[0].maximum(b[1]));
    }
}

/// The windows of one output row of max pooling: rows `ys` of `plane`, columns `cols`, of which
/// those in `full` are whole (not clipped by the border).
struct Row<'a, T> {
    plane: &'a [T],
    w: usize,
    ys: Taps,
    cols: &'a [Taps],
    p: Pool2dParams,
    full: Range<usize>,
}

impl<T: Float> Row<'_, T> {
    /// The maximum of each window in `val` (-inf for an empty one) and, when asked, the plane
    /// index of its first maximum in `idx` (`usize::MAX` for none); NaN counts as the maximum.
    /// Whole windows are scanned tap by tap across the row with selects rather than branches
    /// (the comparisons of random data do not predict); the others go through [`argmax`].
    fn max(&self, val: &mut [T], mut idx: Option<&mut [usize]>) {
        let (ys, full, w) = (self.ys, self.full.clone(), self.w);
        for (ox, &xs) in self.cols.iter().enumerate() {
            if !full.contains(&ox) || ys.count == 0 {
                let i = argmax(self.plane, w, ys, xs);
                val[ox] = i.map_or(T::from_f(f64::NEG_INFINITY), |i| self.plane[i]);
                if let Some(idx) = idx.as_deref_mut() {
                    idx[ox] = i.unwrap_or(usize::MAX);
                }
            }
        }
        if full.is_empty() || ys.count == 0 {
            return;
        }
        let (s, n) = (self.p.stride[1], full.len());
        let x0 = self.cols[full.start].first;
        // Tap (y, kj) of every whole window, in steps of `s` from column `full.start`'s.
        let taps = |y: usize, kj: usize| {
            let start = y * w + x0 + kj * self.p.dilation[1];
            (
                start,
                self.plane[start..][..(n - 1) * s + 1].iter().step_by(s),
            )
        };
        let best = &mut val[full.clone()];
        for (b, &v) in best.iter_mut().zip(taps(ys.first, 0).1) {
            *b = v;
        }
        for y in ys.iter() {
            for kj in 0..self.p.kernel[1] {
                for (b, &v) in best.iter_mut().zip(taps(y, kj).1) {
                    *b = if (v > *b) | v.is_nan() { v } else { *b };
                }
            }
        }
        let Some(idx) = idx else { return };
        // The first tap equal to the maximum: the last one met going backwards.
        for y in ys.iter().rev() {
            for kj in (0..self.p.kernel[1]).rev() {
                let (start, row) = taps(y, kj);
                for (j, ((i, &b), &v)) in idx[full.clone()]
                    .iter_mut()
                    .zip(&*best)
                    .zip(row)
                    .enumerate()
                {
                    // An all-ones mask on a hit, as arithmetic: a branch here mispredicts.
                    let hit = usize::from((v == b) | (v.is_nan() & b.is_nan())).wrapping_neg();
                    *i = ((start + j * s) & hit) | (*i & !hit);
                }
            }
        }
    }
}
