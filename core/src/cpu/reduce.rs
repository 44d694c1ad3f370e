//! Reductions over axes, cumulative sums and (log-)softmax.

use super::num::{Float, Num};
use super::par;
use super::storage::{CpuElem, CpuStorage, Src};
use super::strided::Walk;
use super::unsupported;
use crate::backend::View;
use crate::op::ReduceOp;
use crate::{DType, Result};
use alloc::borrow::Cow;
use alloc::vec;
use alloc::vec::Vec;

/// The input reordered so that each output element's inputs are one contiguous run: kept axes
/// first, reduced axes last. Returns the values and the run length.
fn runs<'a, T: CpuElem>(x: &Src<'a, T>, axes: &[usize]) -> Result<(Cow<'a, [T]>, usize)> {
    let rank = x.dims().len();
    let reduced: Vec<usize> = if axes.is_empty() {
        (0..rank).collect()
    } else {
        axes.to_vec()
    };
    let mut perm: Vec<usize> = (0..rank).filter(|a| !reduced.contains(a)).collect();
    perm.extend(&reduced);
    let run = reduced.iter().map(|&a| x.dims()[a]).product();
    if perm.iter().enumerate().all(|(i, &p)| i == p) {
        return Ok((x.to_contiguous(), run));
    }
    let layout = x.layout.permute(&perm)?;
    let permuted = Src {
        data: x.data,
        layout: &layout,
    };
    Ok((Cow::Owned(permuted.to_contiguous().into_owned()), run))
}

/// Reduces `axes` (all when empty); the output holds one value per kept position, in order.
pub(crate) fn reduce(
    op: ReduceOp,
    axes: &[usize],
    x: &View<'_>,
    out_len: usize,
) -> Result<CpuStorage> {
    match x.dtype {
        DType::F64 => float::<f64>(op, axes, x, out_len),
        DType::F32 => float::<f32>(op, axes, x, out_len),
        DType::I32 => int::<i32>(op, axes, x, out_len),
        DType::U32 => int::<u32>(op, axes, x, out_len),
        DType::Bool => {
            let s = Src::<bool>::new(op.name(), x)?;
            let (v, run) = runs(&s, axes)?;
            let out: Vec<bool> = match op {
                ReduceOp::Max => chunks(&v, run, out_len, |c| c.iter().any(|&b| b)),
                ReduceOp::Min => chunks(&v, run, out_len, |c| c.iter().all(|&b| b)),
                _ => return Err(unsupported(op.name(), DType::Bool)),
            };
            Ok(CpuStorage::new(out))
        }
        dt => Err(unsupported(op.name(), dt)),
    }
}

/// `f` of each run of `run` values; `out_len` results (runs of length 0 see an empty slice).
fn chunks<T, O>(v: &[T], run: usize, out_len: usize, f: impl Fn(&[T]) -> O) -> Vec<O> {
    if run == 0 {
        return (0..out_len).map(|_| f(&[])).collect();
    }
    v.chunks_exact(run).map(f).collect()
}

/// Per-output sums of the elements that `axes` (all when empty) reduce, in the accumulator type,
/// read in place. The input is cut into pieces summed on all cores, each into its own
/// accumulators (pieces are at least eight times the output, so those stay small), added last.
fn sums<T: Num>(x: &Src<'_, T>, axes: &[usize], out_len: usize) -> Vec<T::Acc> {
    let dims = x.dims();
    // Output strides over the input's axes: 0 on reduced ones.
    let mut to_out = vec![0isize; dims.len()];
    let mut step = 1;
    for a in (0..dims.len()).rev() {
        if !axes.is_empty() && !axes.contains(&a) {
            to_out[a] = step as isize;
            step *= dims[a];
        }
    }
    let walk = Walk::new(dims, [x.layout.strides(), &to_out], [x.layout.offset(), 0]);
    let (_, [sx, so]) = walk.inner();
    let numel = x.layout.shape().numel();
    let size = par::piece(numel, par::GRAIN.max(8 * out_len));
    let pieces = numel.div_ceil(size).max(1);
    let mut partial = vec![T::ACC_ZERO; pieces * out_len];
    par::chunks_mut(&mut partial, out_len, |t, acc| {
        walk.for_each_run(t * size..(t + 1) * size, |_, n, [px, po]| match (sx, so) {
            (1, 0) => acc[po] = T::acc_add(acc[po], T::sum_acc(&x.data[px..px + n])),
            (_, 0) => {
                let s = (0..n).fold(T::ACC_ZERO, |s, i| {
                    T::acc_add(s, x.data[(px as isize + i as isize * sx) as usize].acc())
                });
                acc[po] = T::acc_add(acc[po], s);
            }
            _ => {
                for i in 0..n {
                    let (o, v) = (
                        po + i * so as usize,
                        (px as isize + i as isize * sx) as usize,
                    );
                    acc[o] = T::acc_add(acc[o], x.data[v].acc());
                }
            }
        });
    });
    if let Some((first, rest)) = partial.split_at_mut_checked(out_len) {
        for piece in rest.chunks_exact(out_len.max(1)) {
            for (a, &b) in first.iter_mut().zip(piece) {
                *a = T::acc_add(*a, b);
            }
        }
    }
    partial.truncate(out_len);
    partial
}

fn common<T: Num>(op: ReduceOp, v: &[T], run: usize, out_len: usize) -> Option<CpuStorage> {
    Some(match op {
        ReduceOp::Prod => CpuStorage::new(chunks(v, run, out_len, |c| {
            T::from_acc(c.iter().fold(T::ACC_ONE, |a, &x| T::acc_mul(a, x.acc())))
        })),
        ReduceOp::Max => CpuStorage::new(chunks(v, run, out_len, |c| {
            c.iter()
                .fold(c.first().copied().unwrap_or(T::ZERO), |a, &x| a.maximum(x))
        })),
        ReduceOp::Min => CpuStorage::new(chunks(v, run, out_len, |c| {
            c.iter()
                .fold(c.first().copied().unwrap_or(T::ZERO), |a, &x| a.minimum(x))
        })),
        ReduceOp::ArgMax => {
            CpuStorage::new(chunks(v, run, out_len, |c| arg(c, |x, best| x > best)))
        }
        ReduceOp::ArgMin => {
            CpuStorage::new(chunks(v, run, out_len, |c| arg(c, |x, best| x < best)))
        }
        ReduceOp::Sum | ReduceOp::Mean | ReduceOp::Var { .. } => return None,
    })
}

/// Index of the first element that `better` prefers to all before it; NaN wins (as PyTorch).
fn arg<T: Num>(c: &[T], better: impl Fn(T, T) -> bool) -> i32 {
    let mut best = 0;
    for (i, &x) in c.iter().enumerate().skip(1) {
        let b = c[best];
        if b.is_nan() {
            break;
        }
        if x.is_nan() || better(x, b) {
            best = i;
        }
    }
    best as i32
}

fn int<T: Num>(op: ReduceOp, axes: &[usize], x: &View<'_>, out_len: usize) -> Result<CpuStorage> {
    let s = Src::<T>::new(op.name(), x)?;
    if op == ReduceOp::Sum {
        let out: Vec<T> = sums(&s, axes, out_len)
            .into_iter()
            .map(T::from_acc)
            .collect();
        return Ok(CpuStorage::new(out));
    }
    let (v, run) = runs(&s, axes)?;
    common(op, &v, run, out_len).ok_or_else(|| unsupported(op.name(), T::DTYPE))
}

fn float<T: Float>(
    op: ReduceOp,
    axes: &[usize],
    x: &View<'_>,
    out_len: usize,
) -> Result<CpuStorage> {
    let s = Src::<T>::new(op.name(), x)?;
    if let ReduceOp::Sum | ReduceOp::Mean = op {
        // Mean: over as many elements as each output reduces (NaN for none).
        let count = s.layout.shape().numel().checked_div(out_len).unwrap_or(0);
        let scale = if op == ReduceOp::Sum {
            1.0
        } else {
            1.0 / count as f64
        };
        let out: Vec<T> = sums(&s, axes, out_len)
            .into_iter()
            .map(|a| T::from_f(a * scale))
            .collect();
        return Ok(CpuStorage::new(out));
    }
    let (v, run) = runs(&s, axes)?;
    if let Some(out) = common(op, &v, run, out_len) {
        return Ok(out);
    }
    let mean = |c: &[T]| T::sum_acc(c) / c.len() as f64;
    Ok(CpuStorage::new(match op {
        ReduceOp::Var { correction } => chunks(&v, run, out_len, |c| {
            let m = mean(c);
            let ss: f64 = c.iter().map(|&x| (x.into() - m) * (x.into() - m)).sum();
            T::from_f(ss / c.len().saturating_sub(correction) as f64)
        }),
        _ => return Err(unsupported(op.name(), T::DTYPE)),
    }))
}

/// Splits a shape around `axis`: (product before, size of axis, product after).
pub(crate) fn around(dims: &[usize], axis: usize) -> (usize, usize, usize) {
    (
        dims[..axis].iter().product(),
        dims[axis],
        dims[axis + 1..].iter().product(),
    )
}

/// Inclusive running sum along `axis` (from the end when `reverse`).
pub(crate) fn cumsum(x: &View<'_>, axis: usize, reverse: bool) -> Result<CpuStorage> {
    fn run<T: Num>(x: &View<'_>, axis: usize, reverse: bool) -> Result<CpuStorage> {
        let s = Src::<T>::new("cumsum", x)?;
        let v = s.to_contiguous();
        let (outer, len, inner) = around(s.dims(), axis);
        let mut out = vec![T::ZERO; v.len()];
        for o in 0..outer {
            for i in 0..inner {
                let base = o * len * inner + i;
                let mut acc = T::ACC_ZERO;
                for j in 0..len {
                    let j = if reverse { len - 1 - j } else { j };
                    let at = base + j * inner;
                    acc = T::acc_add(acc, v[at].acc());
                    out[at] = T::from_acc(acc);
                }
            }
        }
        Ok(CpuStorage::new(out))
    }
    match x.dtype {
        DType::F64 => run::<f64>(x, axis, reverse),
        DType::F32 => run::<f32>(x, axis, reverse),
        DType::I32 => run::<i32>(x, axis, reverse),
        DType::U32 => run::<u32>(x, axis, reverse),
        dt => Err(unsupported("cumsum", dt)),
    }
}

/// Softmax (or log-softmax) along `axis`, computed in f64 after subtracting the maximum.
pub(crate) fn softmax(x: &View<'_>, axis: usize, log: bool, causal: bool) -> Result<CpuStorage> {
    fn run<T: Float>(x: &View<'_>, axis: usize, log: bool, causal: bool) -> Result<CpuStorage> {
        let name = if log { "log_softmax" } else { "softmax" };
        let s = Src::<T>::new(name, x)?;
        let v = s.to_contiguous();
        let (outer, len, inner) = around(s.dims(), axis);
        // causal rows (axis last, so inner == 1): row o sees len - tq + o % tq + 1 entries
        let tq = if causal {
            s.dims()[s.dims().len() - 2].max(1)
        } else {
            1
        };
        let mut out = vec![T::ZERO; v.len()];
        let mut lane = vec![0f64; len];
        for o in 0..outer {
            let seen = if causal { len - tq + o % tq + 1 } else { len };
            for i in 0..inner {
                let base = o * len * inner + i;
                for (j, l) in lane[..seen].iter_mut().enumerate() {
                    *l = v[base + j * inner].into();
                }
                let lane = &lane[..seen];
                let max =
                    lane.iter().fold(
                        f64::NEG_INFINITY,
                        |a, &b| {
                            if a.is_nan() || b <= a { a } else { b }
                        },
                    );
                let sum: f64 = lane.iter().map(|&l| libm::exp(l - max)).sum();
                let ln_sum = libm::log(sum);
                for (j, &l) in lane.iter().enumerate() {
                    let y = if log {
                        l - max - ln_sum
                    } else {
                        libm::exp(l - max) / sum
                    };
                    out[base + j * inner] = T::from_f(y);
                }
            }
        }
        Ok(CpuStorage::new(out))
    }
    match x.dtype {
        DType::F64 => run::<f64>(x, axis, log, causal),
        DType::F32 => run::<f32>(x, axis, log, causal),
        dt => Err(unsupported(if log { "log_softmax" } else { "softmax" }, dt)),
    }
}

/// [`crate::Op::Normalize`] (`g` None) or [`crate::Op::NormalizeBackward`] (the output gradient
/// `g`) along the last axis, in f64: mean and biased variance in two passes, then per element
/// `x̂ = (x - mean) rstd`, or `rstd (g - mean(g) - x̂ mean(g x̂))`.
pub(crate) fn normalize(x: &View<'_>, g: Option<&View<'_>>, eps: f64) -> Result<CpuStorage> {
    fn run<T: Float>(x: &View<'_>, g: Option<&View<'_>>, eps: f64) -> Result<CpuStorage> {
        let name = if g.is_some() {
            "normalize_backward"
        } else {
            "normalize"
        };
        let xs = Src::<T>::new(name, x)?.to_contiguous();
        let gs = g
            .map(|g| Src::<T>::new(name, g).map(|s| s.to_contiguous()))
            .transpose()?;
        let len = x.layout.shape().dims().last().copied().unwrap_or(1).max(1);
        let mut out = vec![T::ZERO; xs.len()];
        let mut hat = vec![0f64; len];
        for (r, row) in xs.chunks(len).enumerate() {
            let n = row.len() as f64;
            let mean = row.iter().map(|&v| v.into()).sum::<f64>() / n;
            let var = row
                .iter()
                .map(|&v| (v.into() - mean) * (v.into() - mean))
                .sum::<f64>()
                / n;
            let rstd = 1.0 / crate::math::sqrt(var + eps);
            for (h, &v) in hat.iter_mut().zip(row) {
                *h = (v.into() - mean) * rstd;
            }
            let dst = &mut out[r * len..(r + 1) * len];
            match &gs {
                None => dst
                    .iter_mut()
                    .zip(&hat)
                    .for_each(|(o, &h)| *o = T::from_f(h)),
                Some(gs) => {
                    let gr = &gs[r * len..(r + 1) * len];
                    let mg = gr.iter().map(|&v| v.into()).sum::<f64>() / n;
                    let mgh = gr.iter().zip(&hat).map(|(&v, h)| v.into() * h).sum::<f64>() / n;
                    for ((o, &gv), h) in dst.iter_mut().zip(gr).zip(&hat) {
                        *o = T::from_f(rstd * (gv.into() - mg - h * mgh));
                    }
                }
            }
        }
        Ok(CpuStorage::new(out))
    }
    match x.dtype {
        DType::F64 => run::<f64>(x, g, eps),
        DType::F32 => run::<f32>(x, g, eps),
        dt => Err(unsupported("normalize", dt)),
    }
}
