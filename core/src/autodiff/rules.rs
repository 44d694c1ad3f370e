//! One backward rule per op, written only with tensor ops so that it runs on every backend.
//!
//! A rule gets the op, its inputs, its output `y` and the gradient `g` flowing into `y`, and
//! returns the gradient for each input (`None` where an input gets none). `want[i]` says which
//! inputs need one, so that unneeded work is skipped. Choices where the derivative is not
//! defined follow PyTorch:
//! - `relu`, `abs`, `clamp`: the gradient at the kink is that of the flat side for relu (0),
//!   0 for `abs` at 0, and 1 for `clamp` on the bounds (`min <= x <= max`);
//! - `floor`, `ceil`, `round`, `sign`: zero gradients;
//! - elementwise `maximum`/`minimum` split the gradient evenly between equal operands;
//! - `max`/`min` reductions split it evenly between all elements equal to the extremum;
//! - `pow(a, b)` gives 0 (not NaN) wrt `b` where `a == 0`, and wrt `a` where `b == 0`.

use crate::op::{Conv2dParams, Op, Pool2d, ReduceOp, UnaryOp};
use crate::{BinaryOp, Error, Result, Shape, SliceRange, Tensor, reduced_shape};
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

type Grads = Vec<Option<Tensor>>;

/// The gradients of `op`'s inputs given the gradient `g` of its output `y`.
pub(super) fn input_grads(
    op: &Op,
    inputs: &[Tensor],
    y: &Tensor,
    g: &Tensor,
    want: &[bool],
) -> Result<Grads> {
    let arg = |i: usize| {
        inputs
            .get(i)
            .ok_or_else(|| Error::invalid(op.name(), format!("recorded without input {i}")))
    };
    let wants = |i: usize| want.get(i).copied().unwrap_or(false);
    let none = || vec![None; inputs.len()];
    Ok(match op {
        // Creation ops have no inputs; the others give bool or integer outputs.
        Op::Full { .. }
        | Op::Arange { .. }
        | Op::Eye { .. }
        | Op::RandUniform { .. }
        | Op::RandNormal { .. }
        | Op::Compare(_)
        | Op::OneHot { .. } => none(),
        // optimizer steps run outside the graph
        Op::AdamStep(_) => none(),
        Op::Custom(c) => crate::op::custom::backward(c, inputs, y, g)?,
        Op::Reduce {
            op: ReduceOp::ArgMax | ReduceOp::ArgMin,
            ..
        } => none(),

        Op::Unary(u) => vec![Some(unary(*u, arg(0)?, y, g)?)],
        Op::Binary(b) => {
            let (ga, gb) = binary(*b, arg(0)?, arg(1)?, y, g, wants(0), wants(1))?;
            vec![ga, gb]
        }
        Op::Where => {
            let (cond, a, b) = (arg(0)?, arg(1)?, arg(2)?);
            let zero = g.scalar_like(0.0)?;
            vec![
                None,
                on(wants(1), || sum_to(&cond.where_cond(g, &zero)?, a.shape()))?,
                on(wants(2), || sum_to(&cond.where_cond(&zero, g)?, b.shape()))?,
            ]
        }
        Op::Cast { .. } => {
            let x = arg(0)?;
            // Only float -> float casts carry a gradient; integers have none.
            vec![on(x.dtype().is_float(), || g.cast(x.dtype()))?]
        }
        Op::Reduce { op: r, axes, .. } => vec![Some(reduce(*r, axes, arg(0)?, y, g)?)],
        Op::Cumsum { axis, reverse } => vec![Some(Tensor::apply(
            Op::Cumsum {
                axis: *axis,
                reverse: !reverse,
            },
            &[g],
        )?)],
        // causal rows need nothing more: y is 0 past each row's last key, so is the gradient
        Op::Softmax { axis, .. } => {
            let dot = g.mul(y)?.sum(&[*axis as isize], true)?;
            vec![Some(y.mul(&g.sub(&dot)?)?)]
        }
        Op::Normalize { eps } => vec![Some(Tensor::apply(
            Op::NormalizeBackward { eps: *eps },
            &[arg(0)?, g],
        )?)],
        // layer norm's second derivative is not needed by any optimizer here
        Op::NormalizeBackward { .. } => none(),
        Op::LogSoftmax { axis } => {
            let total = g.sum(&[*axis as isize], true)?;
            vec![Some(g.sub(&y.exp()?.mul(&total)?)?)]
        }
        Op::Matmul => {
            let (ga, gb) = matmul(arg(0)?, arg(1)?, g, wants(0), wants(1))?;
            vec![ga, gb]
        }

        Op::Reshape { .. } | Op::Contiguous => vec![Some(g.reshape(arg(0)?.shape())?)],
        Op::Permute { dims } => {
            let mut inverse = vec![0; dims.len()];
            for (i, &d) in dims.iter().enumerate() {
                *inverse
                    .get_mut(d)
                    .ok_or_else(|| Error::index("permute", format!("bad dims {dims:?}")))? = i;
            }
            vec![Some(g.permute(&inverse)?)]
        }
        Op::Slice { ranges } => vec![Some(unslice(g, arg(0)?.shape(), ranges)?)],
        Op::Expand { .. } => vec![Some(sum_to(g, arg(0)?.shape())?)],
        Op::Concat { axis } => {
            let mut start = 0;
            let mut grads = Vec::with_capacity(inputs.len());
            for (t, &w) in inputs.iter().zip(want) {
                let len = t.dims()[*axis];
                grads.push(on(w, || g.narrow(*axis as isize, start, len))?);
                start += len;
            }
            grads
        }
        Op::Gather { axis } => {
            let x = arg(0)?;
            vec![
                Some(x.zeros_like()?.scatter_add(*axis as isize, arg(1)?, g)?),
                None,
            ]
        }
        Op::IndexSelect { axis } => {
            let (x, index) = (arg(0)?, arg(1)?);
            // Spread the rank-1 index over g's shape so that scatter_add adds each row back.
            let mut dims = vec![1; g.rank()];
            dims[*axis] = index.numel();
            let index = index.reshape(dims)?.expand(g.shape())?;
            vec![
                Some(x.zeros_like()?.scatter_add(*axis as isize, &index, g)?),
                None,
            ]
        }
        Op::ScatterAdd { axis } => {
            let (index, src) = (arg(1)?, arg(2)?);
            let gsrc = on(wants(2), || {
                // src elements the index does not reach get zeros.
                let picked = g.gather(*axis as isize, index)?;
                let pads: Vec<(usize, usize)> = src
                    .dims()
                    .iter()
                    .zip(index.dims())
                    .map(|(&s, &i)| (0, s - i))
                    .collect();
                picked.pad(&pads, 0.0)
            })?;
            vec![Some(g.clone()), None, gsrc]
        }
        Op::Pad { pads, .. } => {
            let x = arg(0)?;
            let ranges: Vec<SliceRange> = pads
                .iter()
                .zip(x.dims())
                .map(|(&(before, _), &d)| SliceRange {
                    start: before,
                    end: before + d,
                    step: 1,
                })
                .collect();
            vec![Some(g.slice(&ranges)?)]
        }

        Op::Conv2d(p) => {
            let (x, w) = (arg(0)?, arg(1)?);
            let gx = on(wants(0), || conv2d_input_grad(g, w, *p, x.shape()))?;
            let gw = on(wants(1), || {
                Tensor::apply(
                    Op::Conv2dBackwardWeight {
                        params: *p,
                        kernel: [w.dims()[2], w.dims()[3]],
                    },
                    &[x, g],
                )
            })?;
            vec![gx, gw]
        }
        Op::ConvTranspose2d { params: p, .. } => {
            let (x, w) = (arg(0)?, arg(1)?);
            // conv_transpose2d is the input gradient of conv2d, so its gradients are conv2d
            // (wrt the input) and conv2d's weight gradient with input and grad_out swapped.
            let gx = on(wants(0), || {
                let full = Tensor::apply(Op::Conv2d(*p), &[g, w])?;
                full.narrow(2, 0, x.dims()[2])?.narrow(3, 0, x.dims()[3])
            })?;
            let gw = on(wants(1), || {
                // With output_padding >= stride, conv2d over g yields more positions than x
                // has; those taps met no input, so x is padded with zeros to match.
                let mut extra = [0; 2];
                for (i, e) in extra.iter_mut().enumerate() {
                    let span = p.dilation[i] * (w.dims()[2 + i] - 1) + 1;
                    let conv_out =
                        (g.dims()[2 + i] + 2 * p.padding[i]).saturating_sub(span) / p.stride[i] + 1;
                    *e = conv_out.saturating_sub(x.dims()[2 + i]);
                }
                let x = if extra == [0, 0] {
                    x.clone()
                } else {
                    x.pad(&[(0, 0), (0, 0), (0, extra[0]), (0, extra[1])], 0.0)?
                };
                Tensor::apply(
                    Op::Conv2dBackwardWeight {
                        params: *p,
                        kernel: [w.dims()[2], w.dims()[3]],
                    },
                    &[g, &x],
                )
            })?;
            vec![gx, gw]
        }
        Op::Pool2d(pool) => vec![Some(Tensor::apply(
            Op::Pool2dBackward(*pool),
            &[arg(0)?, g],
        )?)],
        // The average poolings' gradients are linear in grad_out, and their adjoints are the
        // poolings themselves; x only gives the shape.
        Op::Pool2dBackward(pool @ (Pool2d::Avg(_) | Pool2d::AdaptiveAvg { .. })) => {
            vec![
                None,
                on(wants(1), || Tensor::apply(Op::Pool2d(*pool), &[g]))?,
            ]
        }
        // The weight gradient is bilinear in (x, grad_out): each gradient is the conv2d pass
        // that pairs the other operand with g.
        Op::Conv2dBackwardWeight { params, .. } => {
            let (x, go) = (arg(0)?, arg(1)?);
            vec![
                on(wants(0), || conv2d_input_grad(go, g, *params, x.shape()))?,
                on(wants(1), || Tensor::apply(Op::Conv2d(*params), &[x, g]))?,
            ]
        }
        Op::Pool2dBackward(Pool2d::Max(_)) => {
            return Err(Error::unsupported(
                op.name(),
                "second-order gradients through max pooling are not supported",
            ));
        }
    })
}

/// Whether `op`'s rule reads the values of its input `i` (`Some(i)`) or of its output
/// (`None`), rather than only their shapes, when `grad(k)` says whether input `k` takes a
/// gradient. Where it does not, the graph keeps them without their data: a bias add keeps
/// neither the product nor the bias, a scaling by a constant not what it scales, a ReLU only
/// its output. Inputs of unlisted ops are read; a rule that reads its output must be listed.
pub(super) fn reads(op: &Op, value: Option<usize>, grad: impl Fn(usize) -> bool) -> bool {
    use UnaryOp as U;
    // the rules written with the output in place of the input
    let output_for_input = matches!(
        op,
        Op::Unary(U::Exp | U::Sqrt | U::Rsqrt | U::Recip | U::Tanh | U::Sigmoid | U::Relu)
            | Op::Softmax { .. }
            | Op::LogSoftmax { .. }
    );
    let Some(i) = value else {
        return output_for_input
            || match op {
                Op::Unary(U::Clamp { .. })
                | Op::Binary(BinaryOp::Pow)
                | Op::Reduce {
                    op: ReduceOp::Max | ReduceOp::Min | ReduceOp::Prod,
                    ..
                }
                | Op::Custom(_) => true,
                // d/db a/b = -y/b
                Op::Binary(BinaryOp::Div) => grad(1),
                _ => false,
            };
    };
    match op {
        _ if output_for_input => false,
        Op::Unary(U::Neg)
        | Op::Binary(BinaryOp::Add | BinaryOp::Sub)
        | Op::Reduce {
            op: ReduceOp::Sum | ReduceOp::Mean,
            ..
        }
        | Op::Cast { .. }
        | Op::Cumsum { .. }
        | Op::Reshape { .. }
        | Op::Contiguous
        | Op::Permute { .. }
        | Op::Slice { .. }
        | Op::Expand { .. }
        | Op::Concat { .. }
        | Op::Pad { .. } => false,
        // each factor only for the other's gradient
        Op::Binary(BinaryOp::Mul) => grad(1 - i),
        // g / b and -g y / b: never the numerator
        Op::Binary(BinaryOp::Div) => i == 1,
        // the condition picks; the branches give only their shapes
        Op::Where => i == 0,
        _ => true,
    }
}

/// Runs `f` only when `wanted`.
fn on(wanted: bool, f: impl FnOnce() -> Result<Tensor>) -> Result<Option<Tensor>> {
    wanted.then(f).transpose()
}

/// Sums a gradient of a broadcast result back to the `shape` of the operand.
fn sum_to(g: &Tensor, shape: &Shape) -> Result<Tensor> {
    if g.shape() == shape {
        return Ok(g.clone());
    }
    let lead = g.rank().checked_sub(shape.rank()).ok_or_else(|| {
        Error::shape(
            "sum_to",
            format!(
                "gradient {} has a lower rank than operand {shape}",
                g.shape()
            ),
        )
    })?;
    let axes: Vec<isize> = (0..g.rank())
        .filter(|&a| a < lead || (shape.dims()[a - lead] == 1 && g.dims()[a] != 1))
        .map(|a| a as isize)
        .collect();
    let summed = if axes.is_empty() {
        g.clone()
    } else {
        g.sum(&axes, true)?
    };
    summed.reshape(shape)
}

/// `g` (shaped like a reduction's output) with the reduced axes back as size 1.
fn keep_dims(t: &Tensor, input: &Shape, axes: &[usize]) -> Result<Tensor> {
    t.reshape(reduced_shape(input, axes, true))
}

fn unary(u: UnaryOp, x: &Tensor, y: &Tensor, g: &Tensor) -> Result<Tensor> {
    use core::f64::consts::{FRAC_1_SQRT_2, FRAC_2_SQRT_PI, PI};
    let zero = || g.scalar_like(0.0);
    match u {
        UnaryOp::Neg => g.neg(),
        UnaryOp::Abs => g.mul(&x.sign()?),
        UnaryOp::Exp => g.mul(y),
        UnaryOp::Log => g.div(x),
        UnaryOp::Sqrt => g.mul_scalar(0.5)?.div(y),
        // d/dx x^-1/2 = -x^-3/2 / 2 = -y^3 / 2
        UnaryOp::Rsqrt => g.mul(&y.powf(3.0)?.mul_scalar(-0.5)?),
        UnaryOp::Recip => g.mul(&y.mul(y)?.neg()?),
        UnaryOp::Sin => g.mul(&x.cos()?),
        UnaryOp::Cos => g.mul(&x.sin()?.neg()?),
        UnaryOp::Tanh => g.mul(&y.mul(y)?.neg()?.add_scalar(1.0)?),
        UnaryOp::Sigmoid => g.mul(&y.mul(&y.neg()?.add_scalar(1.0)?)?),
        // d/dx x s(x) = s (1 + x (1 - s)) with s = sigmoid(x)
        UnaryOp::Silu => {
            let s = x.sigmoid()?;
            let inner = x.mul(&s.neg()?.add_scalar(1.0)?)?.add_scalar(1.0)?;
            g.mul(&s.mul(&inner)?)
        }
        // y > 0 exactly where x > 0: the graph need not keep x (see `reads`)
        UnaryOp::Relu => y.gt(&zero()?)?.where_cond(g, &zero()?),
        UnaryOp::Gelu => {
            // d/dx x Φ(x) = Φ(x) + x φ(x)
            let cdf = x
                .mul_scalar(FRAC_1_SQRT_2)?
                .erf()?
                .add_scalar(1.0)?
                .mul_scalar(0.5)?;
            let pdf = x
                .mul(x)?
                .mul_scalar(-0.5)?
                .exp()?
                .mul_scalar(1.0 / crate::math::sqrt(2.0 * PI))?;
            g.mul(&cdf.add(&x.mul(&pdf)?)?)
        }
        UnaryOp::GeluTanh => {
            // with u = c (x + a x^3), t = tanh(u):
            // d/dx x (1 + t) / 2 = (1 + t) / 2 + x (1 - t^2) c (1 + 3 a x^2) / 2
            let (c, a) = (crate::math::sqrt(2.0 / PI), 0.044715);
            let x2 = x.mul(x)?;
            let t = x
                .mul(&x2.mul_scalar(a)?.add_scalar(1.0)?)?
                .mul_scalar(c)?
                .tanh()?;
            let du = x2.mul_scalar(3.0 * a * c)?.add_scalar(c)?;
            let slope = t.mul(&t)?.neg()?.add_scalar(1.0)?.mul(&du)?.mul(x)?;
            g.mul(&t.add_scalar(1.0)?.add(&slope)?.mul_scalar(0.5)?)
        }
        UnaryOp::Erf => g.mul(&x.mul(x)?.neg()?.exp()?.mul_scalar(FRAC_2_SQRT_PI)?),
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Sign => x.zeros_like(),
        UnaryOp::Powf(0.0) => x.zeros_like(),
        UnaryOp::Powf(p) => g.mul(&x.powf(p - 1.0)?.mul_scalar(p)?),
        // Inside [min, max] (bounds included) the output is the input.
        UnaryOp::Clamp { .. } => x.eq(y)?.where_cond(g, &zero()?),
    }
}

fn binary(
    op: BinaryOp,
    a: &Tensor,
    b: &Tensor,
    y: &Tensor,
    g: &Tensor,
    want_a: bool,
    want_b: bool,
) -> Result<(Option<Tensor>, Option<Tensor>)> {
    let zero = || g.scalar_like(0.0);
    let (ga, gb) = match op {
        BinaryOp::Add => (on(want_a, || Ok(g.clone()))?, on(want_b, || Ok(g.clone()))?),
        BinaryOp::Sub => (on(want_a, || Ok(g.clone()))?, on(want_b, || g.neg())?),
        BinaryOp::Mul => (on(want_a, || g.mul(b))?, on(want_b, || g.mul(a))?),
        BinaryOp::Div => (
            on(want_a, || g.div(b))?,
            // d/db a/b = -a/b^2 = -y/b
            on(want_b, || g.mul(y)?.div(b)?.neg())?,
        ),
        BinaryOp::Pow => (
            on(want_a, || {
                let d = g.mul(b)?.mul(&a.pow(&b.add_scalar(-1.0)?)?)?;
                b.eq(&zero()?)?.where_cond(&zero()?, &d)
            })?,
            on(want_b, || {
                let d = g.mul(y)?.mul(&a.log()?)?;
                a.eq(&zero()?)?.where_cond(&zero()?, &d)
            })?,
        ),
        BinaryOp::Max | BinaryOp::Min => {
            let wins = |p: &Tensor, q: &Tensor| {
                if op == BinaryOp::Max {
                    p.gt(q)
                } else {
                    p.lt(q)
                }
            };
            let tie = a.eq(b)?;
            let half = tie.where_cond(&g.mul_scalar(0.5)?, &zero()?)?;
            (
                on(want_a, || wins(a, b)?.where_cond(g, &half))?,
                on(want_b, || wins(b, a)?.where_cond(g, &half))?,
            )
        }
    };
    Ok((
        ga.map(|t| sum_to(&t, a.shape())).transpose()?,
        gb.map(|t| sum_to(&t, b.shape())).transpose()?,
    ))
}

fn reduce(r: ReduceOp, axes: &[usize], x: &Tensor, y: &Tensor, g: &Tensor) -> Result<Tensor> {
    // `keep_dims` restores the reduced axes whether or not the op kept them.
    let gk = keep_dims(g, x.shape(), axes)?;
    let count = (x.numel() / y.numel().max(1)) as f64;
    match r {
        ReduceOp::Sum => gk.expand(x.shape()),
        ReduceOp::Mean => gk.div_scalar(count)?.expand(x.shape()),
        ReduceOp::Max | ReduceOp::Min => {
            // Split evenly between every element equal to the extremum.
            let yk = keep_dims(y, x.shape(), axes)?;
            let hits = x
                .eq(&yk)?
                .where_cond(&g.scalar_like(1.0)?, &g.scalar_like(0.0)?)?;
            let n = hits.reduce(ReduceOp::Sum, &signed(axes), true)?;
            hits.mul(&gk.div(&n)?)
        }
        ReduceOp::Prod => {
            // d/dx_i prod = product of the others: y / x_i where x_i != 0; where x_i == 0 it is
            // the product of the non-zero others if x_i is the only zero, else 0.
            let (zero, one) = (x.scalar_like(0.0)?, x.scalar_like(1.0)?);
            let is_zero = x.eq(&zero)?;
            let zeros =
                is_zero
                    .where_cond(&one, &zero)?
                    .reduce(ReduceOp::Sum, &signed(axes), true)?;
            let others =
                is_zero
                    .where_cond(&one, x)?
                    .reduce(ReduceOp::Prod, &signed(axes), true)?;
            let at_zero = zeros.eq(&one)?.where_cond(&others, &zero)?;
            let yk = keep_dims(y, x.shape(), axes)?;
            is_zero.where_cond(&at_zero, &yk.div(x)?)?.mul(&gk)
        }
        ReduceOp::Var { correction } => {
            let mean = x.reduce(ReduceOp::Mean, &signed(axes), true)?;
            let scale = 2.0 / (count - correction as f64);
            x.sub(&mean)?.mul(&gk)?.mul_scalar(scale)
        }
        ReduceOp::ArgMax | ReduceOp::ArgMin => x.zeros_like(),
    }
}

fn signed(axes: &[usize]) -> Vec<isize> {
    axes.iter().map(|&a| a as isize).collect()
}

fn matmul(
    a: &Tensor,
    b: &Tensor,
    g: &Tensor,
    want_a: bool,
    want_b: bool,
) -> Result<(Option<Tensor>, Option<Tensor>)> {
    // Work on the rank >= 2 forms NumPy promotes rank-1 operands to, then drop the added axes.
    let a2 = if a.rank() == 1 {
        a.reshape([1, a.numel()])?
    } else {
        a.clone()
    };
    let b2 = if b.rank() == 1 {
        b.reshape([b.numel(), 1])?
    } else {
        b.clone()
    };
    let g2 = g.reshape(crate::matmul_shape(a2.shape(), b2.shape())?)?;
    let ga = on(want_a, || {
        sum_to(&product_like(&g2, &b2.t()?, &a2)?, a2.shape())?.reshape(a.shape())
    })?;
    let gb = on(want_b, || {
        let (k, n) = (b2.dims()[0], b2.dims()[1]);
        if b2.rank() == 2 && a2.rank() > 2 && k * n > 0 {
            // A matrix shared by the whole batch (a linear layer's weight over [batch, time,
            // features]): one product over all rows at once. A batch of products summed
            // afterwards wrote and read batch-many copies of the weight's gradient.
            let rows = a2.reshape([a2.numel() / k, k])?;
            let g_rows = g2.reshape([g2.numel() / n, n])?;
            return product_like(&rows.t()?, &g_rows, &b2)?.reshape(b.shape());
        }
        sum_to(&product_like(&a2.t()?, &g2, &b2)?, b2.shape())?.reshape(b.shape())
    })?;
    Ok((ga, gb))
}

/// `p @ q`, the gradient of the rank-2 operand `like`. When `like` is a transposed view (the
/// weight of `Linear`, used as `w.t()`), it is computed as `(q^T @ p^T)^T`: the same product, in
/// the memory order of the tensor behind the view, so that its gradient needs no copy later.
fn product_like(p: &Tensor, q: &Tensor, like: &Tensor) -> Result<Tensor> {
    let transposed = like.rank() == 2
        && p.rank() == 2
        && q.rank() == 2
        && !like.layout().is_contiguous()
        && like.t()?.layout().is_contiguous();
    if transposed {
        q.t()?.matmul(&p.t()?)?.t()
    } else {
        p.matmul(q)
    }
}

/// The gradient of a slice: `g` put back at the sliced positions of zeros shaped `input`.
fn unslice(g: &Tensor, input: &Shape, ranges: &[SliceRange]) -> Result<Tensor> {
    if g.numel() == 0 {
        return Tensor::zeros(input, g.dtype(), g.device());
    }
    let mut t = g.clone();
    let mut pads = Vec::with_capacity(input.rank());
    for (axis, &dim) in input.dims().iter().enumerate() {
        let r = ranges.get(axis).copied().unwrap_or(SliceRange {
            start: 0,
            end: dim,
            step: 1,
        });
        let len = t.dims()[axis];
        if r.step > 1 && len > 1 {
            // Interleave step-1 zeros after each element: [.., len, ..] -> [.., len, step, ..]
            // -> [.., len * step, ..], then drop the zeros after the last one.
            let mut gaps = vec![(0, 0); axis + 2];
            gaps[axis + 1] = (0, r.step - 1);
            let mut dims = t.dims().to_vec();
            dims[axis] = len * r.step;
            t = t
                .unsqueeze(axis as isize + 1)?
                .pad(&gaps, 0.0)?
                .reshape(dims)?
                .narrow(axis as isize, 0, (len - 1) * r.step + 1)?;
        }
        let span = t.dims()[axis];
        pads.push((r.start, dim - r.start - span));
    }
    t.pad(&pads, 0.0)
}

/// The input gradient of conv2d: a transposed convolution with the output padding that
/// restores the input size (lost when the stride does not divide it).
fn conv2d_input_grad(g: &Tensor, w: &Tensor, p: Conv2dParams, input: &Shape) -> Result<Tensor> {
    let mut output_padding = [0; 2];
    for (i, op) in output_padding.iter_mut().enumerate() {
        let base = (g.dims()[2 + i] - 1) * p.stride[i] + p.dilation[i] * (w.dims()[2 + i] - 1) + 1;
        *op = (input.dims()[2 + i] + 2 * p.padding[i])
            .checked_sub(base)
            .ok_or_else(|| {
                Error::shape(
                    "conv2d",
                    format!("gradient {} does not fit input {input}", g.shape()),
                )
            })?;
    }
    Tensor::apply(
        Op::ConvTranspose2d {
            params: p,
            output_padding,
        },
        &[g, w],
    )
}
