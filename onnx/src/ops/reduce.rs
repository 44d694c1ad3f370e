//! Reductions over axes (`ReduceSum`, `ReduceMean`, ...) and index reductions (`ArgMax`, ...).
//!
//! The `Reduce*` ops share one frame ([`reduce`]): `axes` (an attribute before opset 13 for
//! `ReduceSum` and 18 for the others, then optional input 1), `keepdims` and
//! `noop_with_empty_axes`; empty axes reduce everything. Reductions over an empty axis give the
//! op's identity (0 for sums, 1 for products, -inf for max and log-sums, +inf for min).

use super::{Ctx, OpFn, Outputs, axis, one, one_ints};
use crate::value::{Ints, Value};
use alloc::format;
use alloc::vec::Vec;
use kiln_core::{BinaryOp, DType, Result, Tensor, UnaryOp};

pub(super) const OPS: &[(&str, OpFn)] = &[
    ("ReduceSum", |c, a| reduce(c, a, Kind::Sum)),
    ("ReduceMean", |c, a| reduce(c, a, Kind::Mean)),
    ("ReduceMax", |c, a| reduce(c, a, Kind::Max)),
    ("ReduceMin", |c, a| reduce(c, a, Kind::Min)),
    ("ReduceProd", |c, a| reduce(c, a, Kind::Prod)),
    ("ReduceL1", |c, a| reduce(c, a, Kind::L1)),
    ("ReduceL2", |c, a| reduce(c, a, Kind::L2)),
    ("ReduceLogSum", |c, a| reduce(c, a, Kind::LogSum)),
    ("ReduceLogSumExp", |c, a| reduce(c, a, Kind::LogSumExp)),
    ("ReduceSumSquare", |c, a| reduce(c, a, Kind::SumSquare)),
    ("ArgMax", |c, a| arg_reduce(c, a, true)),
    ("ArgMin", |c, a| arg_reduce(c, a, false)),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    L1,
    L2,
    LogSum,
    LogSumExp,
    SumSquare,
}

impl Kind {
    /// The value of a reduction over no elements.
    fn identity(self) -> f64 {
        match self {
            Kind::Sum | Kind::L1 | Kind::L2 | Kind::SumSquare => 0.0,
            Kind::Prod => 1.0,
            Kind::Max | Kind::LogSum | Kind::LogSumExp => f64::NEG_INFINITY,
            Kind::Min => f64::INFINITY,
            Kind::Mean => f64::NAN,
        }
    }
}

/// The axes a `Reduce*` node reduces (sorted, distinct), or `None` for the identity
/// (`noop_with_empty_axes` with no axes).
fn reduce_axes(c: &Ctx<'_>, a: &[Value], kind: Kind, rank: usize) -> Result<Option<Vec<usize>>> {
    let from = if kind == Kind::Sum { 13 } else { 18 };
    let axes = super::shape::axes_arg(c, a, from)?.unwrap_or_default();
    if axes.is_empty() {
        if c.int("noop_with_empty_axes", 0)? != 0 {
            return Ok(None);
        }
        return Ok(Some((0..rank).collect()));
    }
    let mut v: Vec<usize> = axes.iter().map(|&d| axis(d, rank)).collect::<Result<_>>()?;
    v.sort_unstable();
    v.dedup();
    Ok(Some(v))
}

/// `dims` with `axes` reduced: kept as 1 or removed.
fn reduced_dims(dims: &[usize], axes: &[usize], keep: bool) -> Vec<usize> {
    dims.iter()
        .enumerate()
        .filter_map(|(i, &d)| match (axes.contains(&i), keep) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// Sum, product, max or min of host integers over `axes`.
fn host_reduce(x: &Ints, axes: &[usize], keep: bool, kind: Kind) -> Option<Ints> {
    let f: fn(i64, i64) -> Option<i64> = match kind {
        Kind::Sum => i64::checked_add,
        Kind::Prod => i64::checked_mul,
        Kind::Max => |p, q| Some(p.max(q)),
        Kind::Min => |p, q| Some(p.min(q)),
        _ => return None,
    };
    let rank = x.dims.len();
    if axes.iter().any(|&ax| x.dims[ax] == 0) && matches!(kind, Kind::Max | Kind::Min) {
        return None;
    }
    let out_full = reduced_dims(&x.dims, axes, true);
    let n_out: usize = out_full.iter().product();
    let mut acc: Vec<Option<i64>> = alloc::vec![None; n_out];
    for (i, &v) in x.data.iter().enumerate() {
        // the output index of element i: its coordinates with reduced axes set to 0
        let (mut rem, mut at, mut stride) = (i, 0, 1);
        for k in (0..rank).rev() {
            let coord = rem % x.dims[k];
            rem /= x.dims[k];
            if !axes.contains(&k) {
                at += coord * stride;
            }
            stride *= out_full[k];
        }
        acc[at] = Some(match acc[at] {
            None => v,
            Some(a) => f(a, v)?,
        });
    }
    let empty = if kind == Kind::Prod { 1 } else { 0 };
    Some(Ints {
        dims: reduced_dims(&x.dims, axes, keep),
        data: acc.into_iter().map(|v| v.unwrap_or(empty)).collect(),
        bool: x.bool,
    })
}

/// `Reduce*` over the node's axes.
fn reduce(c: &Ctx<'_>, a: &[Value], kind: Kind) -> Outputs {
    let input = c.arg(a, 0)?;
    let dims = input.dims();
    let keep = c.int("keepdims", 1)? != 0;
    let Some(axes) = reduce_axes(c, a, kind, dims.len())? else {
        return Ok(alloc::vec![input.clone()]);
    };
    if let Value::Ints(x) = input
        && let Some(r) = host_reduce(x, &axes, keep, kind)
    {
        return one_ints(r);
    }
    let x = c.tensor(a, 0)?;
    let out_dims = reduced_dims(&dims, &axes, keep);
    if axes.iter().any(|&ax| dims[ax] == 0) {
        // a reduction over no elements is the op's identity
        let dt = if x.dtype().is_float() {
            x.dtype()
        } else {
            return Err(c.unsupported(format!("an empty {} reduction", x.dtype())));
        };
        return one(Tensor::full(out_dims, kind.identity(), dt, c.device)?);
    }
    let ax: Vec<isize> = axes.iter().map(|&d| d as isize).collect();
    let y = match kind {
        Kind::Sum => x.sum(&ax, keep)?,
        Kind::Mean => x.mean(&ax, keep)?,
        Kind::Max => x.max(&ax, keep)?,
        Kind::Min => x.min(&ax, keep)?,
        Kind::Prod => x.prod(&ax, keep)?,
        Kind::L1 => x.unary(UnaryOp::Abs)?.sum(&ax, keep)?,
        Kind::L2 => {
            let s = x.binary(BinaryOp::Mul, &x)?.sum(&ax, keep)?;
            if s.dtype().is_float() {
                s.unary(UnaryOp::Sqrt)?
            } else {
                // integer L2 is the square root truncated back to the integer type
                let dt = s.dtype();
                s.cast(DType::F32)?.unary(UnaryOp::Sqrt)?.cast(dt)?
            }
        }
        Kind::SumSquare => x.binary(BinaryOp::Mul, &x)?.sum(&ax, keep)?,
        Kind::LogSum => x.sum(&ax, keep)?.unary(UnaryOp::Log)?,
        Kind::LogSumExp => {
            // max + log(sum(exp(x - max))), stable for large x
            let m = x.max(&ax, true)?;
            let s = x.binary(BinaryOp::Sub, &m)?.unary(UnaryOp::Exp)?;
            let y = s
                .sum(&ax, true)?
                .unary(UnaryOp::Log)?
                .binary(BinaryOp::Add, &m)?;
            y.reshape(out_dims.clone())?
        }
    };
    one(y.reshape(out_dims)?)
}

/// ArgMax/ArgMin along `axis` (int64 indices, here i32); `select_last_index` picks the last of
/// equal extremes, computed on the input reversed along the axis.
fn arg_reduce(c: &Ctx<'_>, a: &[Value], max: bool) -> Outputs {
    let x = c.tensor(a, 0)?;
    let ax = axis(c.int("axis", 0)?, x.rank())?;
    let keep = c.int("keepdims", 1)? != 0;
    let last = c.int("select_last_index", 0)? != 0;
    let n = x.dims().get(ax).copied().unwrap_or(1);
    let pick = |t: &Tensor| {
        if max {
            t.argmax(ax as isize, keep)
        } else {
            t.argmin(ax as isize, keep)
        }
    };
    if !last || n <= 1 {
        return one(pick(&x)?);
    }
    let rev: Vec<i64> = (0..n as i64).rev().collect();
    let rev = Ints::vector(rev).to_tensor(c.device, "ArgMax reversal")?;
    let flipped = x.index_select(ax as isize, &rev)?;
    // index i in the reversed input is n - 1 - i in the input
    let i = pick(&flipped)?;
    one(i
        .binary_scalar(BinaryOp::Mul, -1.0)?
        .binary_scalar(BinaryOp::Add, (n - 1) as f64)?)
}
