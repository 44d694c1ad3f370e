//! Output dtype/shape of every op, and the validation of its inputs.

use crate::error::fail;
use crate::op::{Meta, Op, ReduceOp, arity};
use crate::{DType, ErrorKind, Result, Shape};
use alloc::format;
use alloc::vec::Vec;
use core::fmt;

pub(crate) fn infer(op: &Op, inputs: &[Meta]) -> Result<Vec<Meta>> {
    let (dtype, shape) = infer_unsized(op, inputs)?;
    shape.byte_len(dtype, op.name())?;
    if let Op::AdamStep(_) = op {
        // the new param, and both moments stacked
        let moments = Shape::new(
            [2].into_iter()
                .chain(shape.dims().iter().copied())
                .collect(),
        );
        moments.byte_len(dtype, op.name())?;
        return Ok(alloc::vec![(dtype, shape), (dtype, moments)]);
    }
    Ok(alloc::vec![(dtype, shape)])
}

/// [`infer`] without the check that the output fits in memory.
fn infer_unsized(op: &Op, inputs: &[Meta]) -> Result<Meta> {
    let name = op.name();
    // One check of the input count for every op with a fixed one, not one in each arm.
    if let Some(n) = op.arity().filter(|&n| n != inputs.len()) {
        return Err(arity(op, n, inputs.len()));
    }
    match op {
        Op::Full { shape, dtype, .. }
        | Op::RandUniform { shape, dtype, .. }
        | Op::RandNormal { shape, dtype, .. } => {
            if matches!(op, Op::RandUniform { .. } | Op::RandNormal { .. }) && !dtype.is_float() {
                return Err(fail(
                    ErrorKind::DType,
                    name,
                    format_args!("random values need a float dtype, got {dtype}"),
                ));
            }
            Ok((*dtype, shape.clone()))
        }
        Op::Arange { len, dtype, .. } => Ok((*dtype, Shape::from([*len]))),
        Op::Eye { n, m, dtype } => Ok((*dtype, Shape::from([*n, *m]))),
        Op::Unary(u) => {
            let (dt, s) = &inputs[0];
            if !u.dtypes().contains(dt) {
                let want = match u.dtypes().last() {
                    Some(DType::U32) => "a numeric",
                    Some(DType::I32) => "a float or i32",
                    _ => "a float",
                };
                return Err(fail(
                    ErrorKind::DType,
                    name,
                    format_args!("expects {want} tensor, got {dt}"),
                ));
            }
            Ok((*dt, s.clone()))
        }
        Op::Binary(_) | Op::Compare(_) => {
            let dt = same_dtype(name, inputs)?;
            if dt == DType::Bool {
                return Err(fail(
                    ErrorKind::DType,
                    name,
                    format_args!("expects numeric tensors, got bool"),
                ));
            }
            if matches!(op, Op::Binary(b) if b.float_only()) && !dt.is_float() {
                return Err(fail(
                    ErrorKind::DType,
                    name,
                    format_args!("expects float tensors, got {dt}"),
                ));
            }
            let s = Shape::broadcast(&inputs[0].1, &inputs[1].1, name)?;
            Ok((
                if matches!(op, Op::Compare(_)) {
                    DType::Bool
                } else {
                    dt
                },
                s,
            ))
        }
        Op::Where => {
            if inputs[0].0 != DType::Bool {
                return Err(fail(
                    ErrorKind::DType,
                    name,
                    format_args!("condition must be bool, got {}", inputs[0].0),
                ));
            }
            let dt = same_dtype(name, &inputs[1..])?;
            let s = Shape::broadcast(&inputs[0].1, &inputs[1].1, name)?;
            let s = Shape::broadcast(&s, &inputs[2].1, name)?;
            Ok((dt, s))
        }
        Op::Cast { dtype } => Ok((*dtype, inputs[0].1.clone())),
        Op::Reduce {
            op: r,
            axes,
            keepdim,
        } => {
            let (dt, s) = &inputs[0];
            check_axes(name, axes, s)?;
            if matches!(r, ReduceOp::Mean | ReduceOp::Var { .. }) && !dt.is_float() {
                return Err(fail(
                    ErrorKind::DType,
                    name,
                    format_args!("expects a float tensor, got {dt}"),
                ));
            }
            if *dt == DType::Bool && !matches!(r, ReduceOp::Max | ReduceOp::Min) {
                return Err(fail(
                    ErrorKind::DType,
                    name,
                    format_args!("expects a numeric tensor, got bool"),
                ));
            }
            if matches!(r, ReduceOp::ArgMax | ReduceOp::ArgMin) && axes.len() != 1 {
                return Err(fail(
                    ErrorKind::InvalidArgument,
                    name,
                    format_args!("reduces exactly one axis, got {axes:?}"),
                ));
            }
            if matches!(
                r,
                ReduceOp::Max | ReduceOp::Min | ReduceOp::ArgMax | ReduceOp::ArgMin
            ) && reduced_all(axes, s).iter().any(|&a| s.dims()[a] == 0)
            {
                return Err(fail(
                    ErrorKind::Shape,
                    name,
                    format_args!("cannot reduce an empty axis of shape {s}"),
                ));
            }
            let out_dt = if matches!(r, ReduceOp::ArgMax | ReduceOp::ArgMin) {
                DType::I32
            } else {
                *dt
            };
            Ok((out_dt, reduced_shape(s, axes, *keepdim)))
        }
        Op::Cumsum { axis, .. } => {
            let (dt, s) = &inputs[0];
            check_axis(name, *axis, s)?;
            if *dt == DType::Bool {
                return Err(fail(
                    ErrorKind::DType,
                    name,
                    format_args!("expects a numeric tensor, got bool"),
                ));
            }
            Ok((*dt, s.clone()))
        }
        Op::Softmax { axis, .. } | Op::LogSoftmax { axis } => {
            let (dt, s) = &inputs[0];
            check_axis(name, *axis, s)?;
            float(name, *dt)?;
            if let Op::Softmax { causal: true, .. } = op {
                let d = s.dims();
                if d.len() < 2 || *axis != d.len() - 1 || d[d.len() - 2] > d[d.len() - 1] {
                    return Err(fail(
                        ErrorKind::Shape,
                        name,
                        format_args!(
                            "causal softmax expects [.., Tq, Tk] with Tq <= Tk along the last \
                             axis, found shape {s} and axis {axis}"
                        ),
                    ));
                }
            }
            Ok((*dt, s.clone()))
        }
        Op::Normalize { .. } | Op::NormalizeBackward { .. } => {
            let n = if matches!(op, Op::Normalize { .. }) {
                1
            } else {
                2
            };
            let (dt, s) = &inputs[0];
            float(name, *dt)?;
            if s.rank() == 0 || inputs.iter().any(|(d, t)| d != dt || t != s) {
                return Err(fail(
                    ErrorKind::Shape,
                    name,
                    format_args!(
                        "expects {n} float tensors of one shape and rank >= 1, found {}",
                        inputs
                            .iter()
                            .map(|(d, s)| format!("{d:?} {s}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
            Ok((*dt, s.clone()))
        }
        Op::Matmul => {
            let dt = same_dtype(name, inputs)?;
            if dt == DType::Bool {
                return Err(fail(
                    ErrorKind::DType,
                    name,
                    format_args!("expects numeric tensors, got bool"),
                ));
            }
            Ok((dt, matmul_shape(&inputs[0].1, &inputs[1].1)?))
        }
        Op::Reshape { shape } => {
            let s = &inputs[0].1;
            if s.numel() != shape.numel() {
                return Err(fail(
                    ErrorKind::Shape,
                    name,
                    format_args!(
                        "cannot reshape {s} ({} elements) to {shape} ({} elements)",
                        s.numel(),
                        shape.numel()
                    ),
                ));
            }
            Ok((inputs[0].0, shape.clone()))
        }
        Op::Permute { dims } => {
            let l = crate::Layout::contiguous(inputs[0].1.clone()).permute(dims)?;
            Ok((inputs[0].0, l.shape().clone()))
        }
        Op::Slice { ranges } => {
            let l = crate::Layout::contiguous(inputs[0].1.clone()).slice(ranges)?;
            Ok((inputs[0].0, l.shape().clone()))
        }
        Op::Expand { shape } => {
            crate::Layout::contiguous(inputs[0].1.clone()).broadcast_to(shape)?;
            Ok((inputs[0].0, shape.clone()))
        }
        Op::Contiguous => Ok(inputs[0].clone()),
        Op::Concat { axis } => {
            if inputs.is_empty() {
                return Err(fail(
                    ErrorKind::InvalidArgument,
                    name,
                    format_args!("needs at least one tensor"),
                ));
            }
            let dt = same_dtype(name, inputs)?;
            let first = &inputs[0].1;
            check_axis(name, *axis, first)?;
            let mut dims = first.dims().to_vec();
            dims[*axis] = 0;
            for (i, (_, s)) in inputs.iter().enumerate() {
                let ok = s.rank() == first.rank()
                    && s.dims()
                        .iter()
                        .zip(first.dims())
                        .enumerate()
                        .all(|(a, (x, y))| a == *axis || x == y);
                if !ok {
                    return Err(fail(
                        ErrorKind::Shape,
                        name,
                        format_args!(
                            "tensor {i} has shape {s} but tensor 0 has {first}; all must match except axis {axis}"
                        ),
                    ));
                }
                dims[*axis] += s.dims()[*axis];
            }
            Ok((dt, Shape::new(dims)))
        }
        Op::Gather { axis } => {
            let (dt, s) = &inputs[0];
            let (it, is) = &inputs[1];
            index_dtype(name, *it)?;
            check_axis(name, *axis, s)?;
            if is.rank() != s.rank() {
                return Err(fail(
                    ErrorKind::Shape,
                    name,
                    format_args!("index {is} must have the rank of input {s}"),
                ));
            }
            if is
                .dims()
                .iter()
                .zip(s.dims())
                .enumerate()
                .any(|(a, (i, x))| a != *axis && i > x)
            {
                return Err(fail(
                    ErrorKind::Shape,
                    name,
                    format_args!("index {is} is larger than input {s} outside axis {axis}"),
                ));
            }
            Ok((*dt, is.clone()))
        }
        Op::IndexSelect { axis } => {
            let (dt, s) = &inputs[0];
            let (it, is) = &inputs[1];
            index_dtype(name, *it)?;
            check_axis(name, *axis, s)?;
            if is.rank() != 1 {
                return Err(fail(
                    ErrorKind::Shape,
                    name,
                    format_args!("index must be rank 1, got {is}"),
                ));
            }
            let mut dims = s.dims().to_vec();
            dims[*axis] = is.dims()[0];
            Ok((*dt, Shape::new(dims)))
        }
        Op::ScatterAdd { axis } => {
            let (dt, s) = &inputs[0];
            let (it, is) = &inputs[1];
            let (st, ss) = &inputs[2];
            index_dtype(name, *it)?;
            check_axis(name, *axis, s)?;
            if st != dt || *dt == DType::Bool {
                return Err(fail(
                    ErrorKind::DType,
                    name,
                    format_args!("input is {dt} and src is {st}; they must be one numeric dtype"),
                ));
            }
            if is.rank() != s.rank() || ss.rank() != s.rank() {
                return Err(fail(
                    ErrorKind::Shape,
                    name,
                    format_args!("input {s}, index {is} and src {ss} must have one rank"),
                ));
            }
            let fits = is
                .dims()
                .iter()
                .zip(ss.dims())
                .zip(s.dims())
                .enumerate()
                .all(|(a, ((i, src), x))| i <= src && (a == *axis || i <= x));
            if !fits {
                return Err(fail(
                    ErrorKind::Shape,
                    name,
                    format_args!(
                        "index {is} must fit in src {ss} and, outside axis {axis}, in input {s}"
                    ),
                ));
            }
            Ok((*dt, s.clone()))
        }
        Op::Pad { pads, .. } => {
            let (dt, s) = &inputs[0];
            if pads.len() > s.rank() {
                return Err(fail(
                    ErrorKind::Shape,
                    name,
                    format_args!("{} (before, after) pairs given for shape {s}", pads.len()),
                ));
            }
            let dims = s
                .dims()
                .iter()
                .enumerate()
                .map(|(i, &d)| pads.get(i).map_or(d, |(b, a)| d + b + a))
                .collect();
            Ok((*dt, Shape::new(dims)))
        }
        Op::OneHot { classes, dtype } => {
            let (it, s) = &inputs[0];
            index_dtype(name, *it)?;
            let mut dims = s.dims().to_vec();
            dims.push(*classes);
            Ok((*dtype, Shape::new(dims)))
        }
        Op::Conv2d(p) => {
            let dt = same_float(name, inputs)?;
            let (x, w) = (
                rank4(name, "input", &inputs[0].1)?,
                rank4(name, "weight", &inputs[1].1)?,
            );
            check_groups(name, p.groups, x[1], w[0])?;
            if w[1] * p.groups != x[1] {
                return Err(fail(
                    ErrorKind::Shape,
                    name,
                    format_args!(
                        "input {} has {} channels but weight {} expects {} (x {} groups)",
                        inputs[0].1, x[1], inputs[1].1, w[1], p.groups
                    ),
                ));
            }
            let oh = conv_out(name, x[2], w[2], p.stride[0], p.padding[0], p.dilation[0])?;
            let ow = conv_out(name, x[3], w[3], p.stride[1], p.padding[1], p.dilation[1])?;
            Ok((dt, Shape::from([x[0], w[0], oh, ow])))
        }
        Op::ConvTranspose2d {
            params: p,
            output_padding,
        } => {
            let dt = same_float(name, inputs)?;
            let (x, w) = (
                rank4(name, "input", &inputs[0].1)?,
                rank4(name, "weight", &inputs[1].1)?,
            );
            check_groups(name, p.groups, x[1], w[1] * p.groups)?;
            if w[0] != x[1] {
                return Err(fail(
                    ErrorKind::Shape,
                    name,
                    format_args!(
                        "input {} has {} channels but weight {} expects {}",
                        inputs[0].1, x[1], inputs[1].1, w[0]
                    ),
                ));
            }
            let out = |i: usize| -> Result<usize> {
                let full = (x[2 + i] - 1) * p.stride[i]
                    + p.dilation[i] * (w[2 + i] - 1)
                    + 1
                    + output_padding[i];
                if output_padding[i] >= p.stride[i].max(p.dilation[i])
                    || full <= 2 * p.padding[i]
                    || x[2 + i] == 0
                {
                    return Err(fail(
                        ErrorKind::Shape,
                        name,
                        format_args!(
                            "output padding {output_padding:?} / padding {:?} do not fit input {}",
                            p.padding, inputs[0].1
                        ),
                    ));
                }
                Ok(full - 2 * p.padding[i])
            };
            Ok((dt, Shape::from([x[0], w[1] * p.groups, out(0)?, out(1)?])))
        }
        Op::Conv2dBackwardWeight { params: p, kernel } => {
            let dt = same_float(name, inputs)?;
            let (x, g) = (
                rank4(name, "input", &inputs[0].1)?,
                rank4(name, "grad_out", &inputs[1].1)?,
            );
            check_groups(name, p.groups, x[1], g[1])?;
            Ok((
                dt,
                Shape::from([g[1], x[1] / p.groups, kernel[0], kernel[1]]),
            ))
        }
        Op::Pool2d(pool) => {
            let dt = inputs[0].0;
            float(name, dt)?;
            let x = rank4(name, "input", &inputs[0].1)?;
            let [oh, ow] = pooled_size(name, pool, x)?;
            Ok((dt, Shape::from([x[0], x[1], oh, ow])))
        }
        Op::Pool2dBackward(pool) => {
            let dt = same_float(name, inputs)?;
            let x = rank4(name, "input", &inputs[0].1)?;
            let [oh, ow] = pooled_size(name, pool, x)?;
            let want_grad = Shape::from([x[0], x[1], oh, ow]);
            if inputs[1].1 != want_grad {
                return Err(fail(
                    ErrorKind::Shape,
                    name,
                    format_args!(
                        "grad_out must have the pooled shape {want_grad}, got {}",
                        inputs[1].1
                    ),
                ));
            }
            Ok((dt, inputs[0].1.clone()))
        }
        Op::AdamStep(_) => {
            if !matches!(inputs.len(), 4 | 5) {
                return Err(arity(op, 4, inputs.len()));
            }
            let dt = same_float(name, inputs)?;
            let s = &inputs[0].1;
            if let Some((_, scale)) = inputs.get(4).filter(|(_, sc)| sc.rank() != 0) {
                return Err(fail(
                    ErrorKind::Shape,
                    name,
                    format_args!("expects a rank-0 gradient scale, got shape {scale}"),
                ));
            }
            if let Some((_, other)) = inputs[..4].iter().find(|(_, o)| o != s) {
                return Err(fail(
                    ErrorKind::Shape,
                    name,
                    format_args!(
                        "expects param, grad and moments of one shape, got {s} and {other}"
                    ),
                ));
            }
            Ok((dt, s.clone()))
        }
        Op::Custom(c) => crate::op::custom::infer(c, inputs),
    }
}

/// The shape left after reducing `axes` (all axes when empty).
pub fn reduced_shape(s: &Shape, axes: &[usize], keepdim: bool) -> Shape {
    let all = reduced_all(axes, s);
    let dims = s.dims().iter().enumerate().filter_map(|(i, &d)| {
        if all.contains(&i) {
            keepdim.then_some(1)
        } else {
            Some(d)
        }
    });
    Shape::new(dims.collect())
}

fn reduced_all(axes: &[usize], s: &Shape) -> Vec<usize> {
    if axes.is_empty() {
        (0..s.rank()).collect()
    } else {
        axes.to_vec()
    }
}

/// Output shape of `matmul` with NumPy's rules for rank-1 operands and broadcast batch dims.
pub fn matmul_shape(a: &Shape, b: &Shape) -> Result<Shape> {
    let err = |m: fmt::Arguments<'_>| {
        fail(
            ErrorKind::Shape,
            "matmul",
            format_args!("lhs {a} and rhs {b}: {m}"),
        )
    };
    if a.rank() == 0 || b.rank() == 0 {
        return Err(err(format_args!("operands must have rank >= 1")));
    }
    let ad: Vec<usize> = if a.rank() == 1 {
        alloc::vec![1, a.dims()[0]]
    } else {
        a.dims().to_vec()
    };
    let bd: Vec<usize> = if b.rank() == 1 {
        alloc::vec![b.dims()[0], 1]
    } else {
        b.dims().to_vec()
    };
    let (m, k) = (ad[ad.len() - 2], ad[ad.len() - 1]);
    let (k2, n) = (bd[bd.len() - 2], bd[bd.len() - 1]);
    if k != k2 {
        return Err(err(format_args!("inner dimensions {k} and {k2} differ")));
    }
    let batch = Shape::broadcast(
        &Shape::from(&ad[..ad.len() - 2]),
        &Shape::from(&bd[..bd.len() - 2]),
        "matmul",
    )
    .map_err(|_| err(format_args!("batch dimensions cannot be broadcast")))?;
    let mut dims = batch.dims().to_vec();
    if a.rank() > 1 {
        dims.push(m);
    }
    if b.rank() > 1 {
        dims.push(n);
    }
    Ok(Shape::new(dims))
}

fn same_dtype(name: &'static str, inputs: &[Meta]) -> Result<DType> {
    let dt = inputs[0].0;
    if inputs.iter().any(|(d, _)| *d != dt) {
        let dts: Vec<_> = inputs.iter().map(|(d, _)| d.name()).collect();
        return Err(fail(
            ErrorKind::DType,
            name,
            format_args!("inputs must share one dtype, got {}", dts.join(" and ")),
        ));
    }
    Ok(dt)
}

fn same_float(name: &'static str, inputs: &[Meta]) -> Result<DType> {
    let dt = same_dtype(name, inputs)?;
    float(name, dt)?;
    Ok(dt)
}

fn float(name: &'static str, dt: DType) -> Result<()> {
    if dt.is_float() {
        Ok(())
    } else {
        Err(fail(
            ErrorKind::DType,
            name,
            format_args!("expects a float tensor, got {dt}"),
        ))
    }
}

fn index_dtype(name: &'static str, dt: DType) -> Result<()> {
    if dt.is_int() {
        Ok(())
    } else {
        Err(fail(
            ErrorKind::DType,
            name,
            format_args!("index must be i32 or u32, got {dt}"),
        ))
    }
}

fn check_axis(name: &'static str, axis: usize, s: &Shape) -> Result<()> {
    if axis >= s.rank() {
        return Err(fail(
            ErrorKind::Index,
            name,
            format_args!("axis {axis} is out of range for shape {s}"),
        ));
    }
    Ok(())
}

fn check_axes(name: &'static str, axes: &[usize], s: &Shape) -> Result<()> {
    for (i, &a) in axes.iter().enumerate() {
        check_axis(name, a, s)?;
        if i > 0 && axes[i - 1] >= a {
            return Err(fail(
                ErrorKind::InvalidArgument,
                name,
                format_args!("axes {axes:?} must be sorted and unique"),
            ));
        }
    }
    Ok(())
}

fn rank4(name: &'static str, what: &str, s: &Shape) -> Result<[usize; 4]> {
    <[usize; 4]>::try_from(s.dims()).map_err(|_| {
        fail(
            ErrorKind::Shape,
            name,
            format_args!("{what} must be 4-D (N, C, H, W), got {s}"),
        )
    })
}

fn check_groups(name: &'static str, groups: usize, cin: usize, cout: usize) -> Result<()> {
    if groups == 0 || !cin.is_multiple_of(groups) || !cout.is_multiple_of(groups) {
        return Err(fail(
            ErrorKind::InvalidArgument,
            name,
            format_args!(
                "groups {groups} must divide input channels {cin} and output channels {cout}"
            ),
        ));
    }
    Ok(())
}

fn conv_out(
    name: &'static str,
    size: usize,
    k: usize,
    stride: usize,
    pad: usize,
    dil: usize,
) -> Result<usize> {
    if stride == 0 || dil == 0 {
        return Err(fail(
            ErrorKind::InvalidArgument,
            name,
            format_args!("stride and dilation must be positive"),
        ));
    }
    let span = dil * (k.max(1) - 1) + 1;
    if k == 0 || size + 2 * pad < span {
        return Err(fail(
            ErrorKind::Shape,
            name,
            format_args!(
                "kernel {k} (dilation {dil}) does not fit input size {size} with padding {pad}"
            ),
        ));
    }
    Ok((size + 2 * pad - span) / stride + 1)
}

/// The (h, w) a pooling of `x` (N, C, H, W) gives.
fn pooled_size(name: &'static str, pool: &crate::Pool2d, x: [usize; 4]) -> Result<[usize; 2]> {
    match pool {
        crate::Pool2d::Max(p) | crate::Pool2d::Avg(p) => {
            let (oh, ow) = pool_out(name, p, x)?;
            Ok([oh, ow])
        }
        crate::Pool2d::AdaptiveAvg { output } => {
            if output.contains(&0) {
                return Err(fail(
                    ErrorKind::InvalidArgument,
                    name,
                    format_args!("output size {output:?} must be positive"),
                ));
            }
            Ok(*output)
        }
    }
}

fn pool_out(name: &'static str, p: &crate::Pool2dParams, x: [usize; 4]) -> Result<(usize, usize)> {
    for i in 0..2 {
        if p.padding[i] * 2 > p.kernel[i] {
            return Err(fail(
                ErrorKind::InvalidArgument,
                name,
                format_args!(
                    "padding {:?} must be at most half of kernel {:?}",
                    p.padding, p.kernel
                ),
            ));
        }
    }
    Ok((
        conv_out(
            name,
            x[2],
            p.kernel[0],
            p.stride[0],
            p.padding[0],
            p.dilation[0],
        )?,
        conv_out(
            name,
            x[3],
            p.kernel[1],
            p.stride[1],
            p.padding[1],
            p.dilation[1],
        )?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::AdamParams;

    fn meta(dtype: DType, dims: &[usize]) -> Meta {
        (dtype, Shape::from(dims))
    }

    fn message(op: &Op, inputs: &[Meta]) -> (ErrorKind, alloc::string::String) {
        use alloc::string::ToString;
        let e = infer(op, inputs).unwrap_err();
        (e.kind(), e.to_string())
    }

    /// The input count is checked once, through `Op::arity`, before any arm reads an input.
    #[test]
    fn wrong_input_counts_name_the_op_and_both_counts() {
        let x = meta(DType::F32, &[2, 3]);
        let bad = ErrorKind::InvalidArgument;
        assert_eq!(
            message(&Op::Matmul, core::slice::from_ref(&x)),
            (bad, "matmul: expects 2 inputs, got 1".into())
        );
        assert_eq!(
            message(&Op::Normalize { eps: 1e-5 }, &[x.clone(), x.clone()]),
            (bad, "normalize: expects 1 inputs, got 2".into())
        );
        assert_eq!(
            message(&Op::Where, &[]),
            (bad, "where: expects 3 inputs, got 0".into())
        );
        let adam = Op::AdamStep(AdamParams {
            lr: 0.1,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            decoupled: false,
            step: 1,
        });
        assert_eq!(
            message(&adam, &[x.clone(), x.clone(), x.clone()]),
            (bad, "adam_step: expects 4 inputs, got 3".into())
        );
        assert_eq!(
            infer(&adam, &[x.clone(), x.clone(), x.clone(), x.clone()])
                .unwrap()
                .len(),
            2
        );
        assert_eq!(
            message(&Op::Concat { axis: 0 }, &[]),
            (bad, "concat: needs at least one tensor".into())
        );
    }

    /// Messages formatted out of line (`error::fail`) keep what was expected and what was found.
    #[test]
    fn failed_checks_keep_their_messages() {
        assert_eq!(
            message(
                &Op::Reshape {
                    shape: Shape::from([4usize])
                },
                &[meta(DType::F32, &[2, 3])]
            ),
            (
                ErrorKind::Shape,
                "reshape: cannot reshape [2, 3] (6 elements) to [4] (4 elements)".into()
            )
        );
        assert_eq!(
            message(
                &Op::Matmul,
                &[meta(DType::F32, &[2, 3]), meta(DType::F32, &[4, 5])]
            ),
            (
                ErrorKind::Shape,
                "matmul: lhs [2, 3] and rhs [4, 5]: inner dimensions 3 and 4 differ".into()
            )
        );
        assert_eq!(
            message(
                &Op::Binary(crate::BinaryOp::Add),
                &[meta(DType::F32, &[2]), meta(DType::I32, &[2])]
            ),
            (
                ErrorKind::DType,
                "add: inputs must share one dtype, got f32 and i32".into()
            )
        );
    }
}
