//! Running an op on the CPU: the checks around every kernel, f16 computed in f32, and the
//! dispatch to each family's kernels. Built with kiln-core's `cpu-kernels` feature only.

use super::storage::{self, CpuStorage};
use super::{conv, elementwise, matmul, movement, optim, pool, reduce, tail, unsupported};
use crate::backend::View;
use crate::op::{Meta, Op};
use crate::{DType, Error, Layout, Result, Shape, Storage};
use alloc::vec::Vec;

/// `op` on the CPU: its inputs and outputs checked, f16 computed in f32 where the op needs it.
pub(super) fn execute(op: &Op, inputs: &[View<'_>], outputs: &[Meta]) -> Result<Vec<Storage>> {
    let (out_dtype, out_shape) = check_inputs(op, inputs, outputs)?;
    let outs = if !native_f16(op)
        && (out_dtype == DType::F16 || inputs.iter().any(|v| v.dtype == DType::F16))
    {
        execute_via_f32(op, inputs, out_dtype, out_shape)?
    } else {
        run(op, inputs, out_dtype, out_shape)?
    };
    check_outputs(op, outs, outputs)
}

/// Whether [`execute_with_tail`] takes `op`: an f32 convolution, or an f32 matmul without a pool.
pub(super) fn fuses_tail(op: &Op, dtype: DType, max_pool: bool) -> bool {
    let product = match op {
        Op::Conv2d(_) => true,
        Op::Matmul => !max_pool,
        _ => false,
    };
    product && dtype == DType::F32
}

/// A product with its bias, ReLU and (convolutions) 2x2 max pool applied as it is written.
pub(super) fn execute_with_tail(
    op: &Op,
    x: &[View<'_>],
    tail: crate::backend::Tail<'_>,
    output: &Meta,
) -> Result<Storage> {
    let outputs = core::slice::from_ref(output);
    let (dtype, shape) = check_inputs(op, x, outputs)?;
    if !fuses_tail(op, dtype, tail.max_pool) {
        return Err(unsupported(op.name(), dtype));
    }
    let channels = match op {
        Op::Conv2d(_) => shape.dims().get(1),
        _ => shape.dims().last(),
    };
    let tail = tail::Tail::new(op.name(), &tail, channels.copied().unwrap_or(1))?;
    // `fuses_tail` admitted it: an f32 Conv2d, or an f32 Matmul without a pool.
    let out = match op {
        Op::Conv2d(p) => conv::conv2d(&x[0], &x[1], *p, Some(&tail))?,
        _ => {
            let mut m = matmul::matmul(&x[0], &x[1])?;
            if let CpuStorage::F32(v) = &mut m {
                tail.apply_columns(v);
            }
            m
        }
    };
    let mut out = check_outputs(op, alloc::vec![out], outputs)?;
    out.pop()
        .ok_or_else(|| Error::invalid(op.name(), "produced no output"))
}

/// Ops that only move or create elements (every dtype natively); the rest compute f16 in f32.
fn native_f16(op: &Op) -> bool {
    matches!(
        op,
        Op::Full { .. }
            | Op::Arange { .. }
            | Op::Eye { .. }
            | Op::RandUniform { .. }
            | Op::RandNormal { .. }
            | Op::Cast { .. }
            | Op::Where
            | Op::Reshape { .. }
            | Op::Permute { .. }
            | Op::Slice { .. }
            | Op::Expand { .. }
            | Op::Contiguous
            | Op::Concat { .. }
            | Op::Gather { .. }
            | Op::IndexSelect { .. }
            | Op::Pad { .. }
            | Op::OneHot { .. }
            | Op::Custom(_)
    )
}

/// A custom op's reference implementation, on its inputs as row-major data.
fn custom(
    call: &crate::op::custom::CustomCall,
    x: &[View<'_>],
    out_dtype: DType,
    out_shape: &Shape,
) -> Result<CpuStorage> {
    let r = call.resolve()?;
    let inputs = x
        .iter()
        .map(storage::read_view)
        .collect::<Result<Vec<_>>>()?;
    let out =
        r.op.cpu(&call.attrs, &inputs, &(out_dtype, out_shape.clone()))?;
    if out.shape() != out_shape || out.dtype() != out_dtype {
        return Err(Error::invalid(
            r.name,
            alloc::format!(
                "the cpu reference returned a {} tensor of shape {}, expected {out_dtype} of shape {out_shape}",
                out.dtype(),
                out.shape()
            ),
        ));
    }
    Ok(CpuStorage::from_data(&out))
}

/// An output the process cannot allocate (a malformed model's shape, say) is an error rather
/// than an abort: reserving the bytes up front and releasing them is cheap (the pages are never
/// touched) and fails cleanly where the real allocation would abort.
fn check_allocatable(op: &Op, dt: DType, shape: &Shape) -> Result<()> {
    let bytes = shape.byte_len(dt, op.name())?;
    if Vec::<u8>::new().try_reserve_exact(bytes).is_ok() {
        return Ok(());
    }
    Err(Error::device(
        op.name(),
        alloc::format!("out of memory: a {dt} tensor of shape {shape} does not fit in memory"),
    ))
}

/// Checks `op`'s input count and that its outputs can be allocated; returns the first output.
fn check_inputs<'a>(
    op: &Op,
    inputs: &[View<'_>],
    outputs: &'a [Meta],
) -> Result<(DType, &'a Shape)> {
    let want = op.arity();
    let custom = matches!(op, Op::Custom(_));
    if want.is_some_and(|n| n != inputs.len()) || (want.is_none() && inputs.is_empty() && !custom) {
        return Err(crate::op::arity(op, want.unwrap_or(1), inputs.len()));
    }
    let Some((out_dtype, out_shape)) = outputs.first() else {
        return Err(Error::invalid(op.name(), "asked for no outputs"));
    };
    for (dt, shape) in outputs {
        check_allocatable(op, *dt, shape)?;
    }
    Ok((*out_dtype, out_shape))
}

/// `outs` as storages, once checked against the dtypes and sizes `outputs` asked for.
fn check_outputs(op: &Op, outs: Vec<CpuStorage>, outputs: &[Meta]) -> Result<Vec<Storage>> {
    let produced = |o: &CpuStorage| (o.dtype(), o.len());
    let wanted = |(d, s): &Meta| (*d, s.numel());
    if outs.len() != outputs.len() || outs.iter().map(produced).ne(outputs.iter().map(wanted)) {
        let list = |v: &mut dyn Iterator<Item = (DType, usize)>| {
            v.map(|(d, n)| alloc::format!("{n} {d}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Err(Error::invalid(
            op.name(),
            alloc::format!(
                "cpu produced [{}] elements, expected [{}]",
                list(&mut outs.iter().map(produced)),
                list(&mut outputs.iter().map(wanted))
            ),
        ));
    }
    Ok(outs.into_iter().map(Storage::new).collect())
}

/// Runs an op on f16 data in f32: f16 inputs widened (exactly), an f16 result rounded back.
fn execute_via_f32(
    op: &Op,
    inputs: &[View<'_>],
    out_dtype: DType,
    out_shape: &Shape,
) -> Result<Vec<CpuStorage>> {
    let wide = inputs
        .iter()
        .map(|v| {
            (v.dtype == DType::F16)
                .then(|| {
                    let s = Storage::new(elementwise::widen_f16(v)?);
                    Ok((s, Layout::contiguous(v.layout.shape().clone())))
                })
                .transpose()
        })
        .collect::<Result<Vec<Option<(Storage, Layout)>>>>()?;
    let views: Vec<View<'_>> = inputs
        .iter()
        .zip(&wide)
        .map(|(v, w)| match w {
            Some((storage, layout)) => View {
                storage,
                layout,
                dtype: DType::F32,
            },
            None => *v,
        })
        .collect();
    let dt = if out_dtype == DType::F16 {
        DType::F32
    } else {
        out_dtype
    };
    let outs = run(op, &views, dt, out_shape)?;
    if out_dtype == DType::F16 {
        outs.iter().map(elementwise::narrow_f32).collect()
    } else {
        Ok(outs)
    }
}

/// Executes `op` natively (f16 only for the element-moving ops); every output but Adam's is
/// the first output's dtype and shape.
fn run(op: &Op, x: &[View<'_>], out_dtype: DType, out_shape: &Shape) -> Result<Vec<CpuStorage>> {
    match op {
        Op::AdamStep(p) => optim::adam_step(x, p),
        _ => Ok(alloc::vec![run_one(op, x, out_dtype, out_shape)?]),
    }
}

/// [`run`] for the ops of one output.
fn run_one(op: &Op, x: &[View<'_>], out_dtype: DType, out_shape: &Shape) -> Result<CpuStorage> {
    match op {
        Op::Full { .. }
        | Op::Arange { .. }
        | Op::Eye { .. }
        | Op::RandUniform { .. }
        | Op::RandNormal { .. } => elementwise::create(op, out_dtype, out_shape),
        Op::Unary(u) => elementwise::unary(*u, &x[0]),
        Op::Binary(b) => elementwise::binary(*b, &x[0], &x[1], out_shape),
        Op::Compare(c) => elementwise::compare(*c, &x[0], &x[1], out_shape),
        Op::Where => elementwise::select(&x[0], &x[1], &x[2], out_shape),
        Op::Cast { dtype } => elementwise::cast(&x[0], *dtype),
        Op::Reduce { op: r, axes, .. } => reduce::reduce(*r, axes, &x[0], out_shape.numel()),
        Op::Cumsum { axis, reverse } => reduce::cumsum(&x[0], *axis, *reverse),
        Op::Softmax { axis, causal } => reduce::softmax(&x[0], *axis, false, *causal),
        Op::LogSoftmax { axis } => reduce::softmax(&x[0], *axis, true, false),
        Op::Normalize { eps } => reduce::normalize(&x[0], None, *eps),
        Op::NormalizeBackward { eps } => reduce::normalize(&x[0], Some(&x[1]), *eps),
        Op::Matmul => matmul::matmul(&x[0], &x[1]),
        Op::AdamStep(_) => Err(Error::invalid("adam_step", "has two outputs")),
        // View ops normally never get here; executed, they are copies of the view.
        Op::Reshape { .. } | Op::Contiguous => movement::copy(&x[0], x[0].layout),
        Op::Permute { dims } => movement::copy(&x[0], &x[0].layout.permute(dims)?),
        Op::Slice { ranges } => movement::copy(&x[0], &x[0].layout.slice(ranges)?),
        Op::Expand { shape } => movement::copy(&x[0], &x[0].layout.broadcast_to(shape)?),
        Op::Concat { axis } => movement::concat(x, *axis, out_shape),
        Op::Gather { axis } => movement::gather(&x[0], &x[1], *axis),
        Op::IndexSelect { axis } => movement::index_select(&x[0], &x[1], *axis),
        Op::ScatterAdd { axis } => movement::scatter_add(&x[0], &x[1], &x[2], *axis),
        Op::Pad { pads, value } => movement::pad(&x[0], pads, *value, out_shape),
        Op::OneHot { classes, dtype } => movement::one_hot(&x[0], *classes, *dtype),
        Op::Conv2d(p) => conv::conv2d(&x[0], &x[1], *p, None),
        Op::ConvTranspose2d { params, .. } => {
            conv::conv_transpose2d(&x[0], &x[1], *params, out_shape)
        }
        Op::Conv2dBackwardWeight { params, kernel } => {
            conv::conv2d_backward_weight(&x[0], &x[1], *params, *kernel)
        }
        Op::Pool2d(_) | Op::Pool2dBackward(_) => pool::pool(op, x, out_shape),
        Op::Custom(c) => custom(c, x, out_dtype, out_shape),
    }
}
