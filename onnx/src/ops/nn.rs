//! Neural-network ONNX ops: matrix products, convolutions, pooling, normalization, softmax.

use super::{Ctx, OpFn, Outputs, axis, one};
use crate::value::Value;
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;
use kiln_core::{BinaryOp, Conv2dParams, Error, Pool2dParams, Result, Tensor, UnaryOp};

pub(super) const OPS: &[(&str, OpFn)] = &[
    ("MatMul", matmul),
    ("Gemm", gemm),
    ("Conv", conv),
    ("MaxPool", |c, a| pool(c, a, true)),
    ("AveragePool", |c, a| pool(c, a, false)),
    ("GlobalAveragePool", global_average_pool),
    ("BatchNormalization", batch_norm),
    ("Softmax", |c, a| softmax(c, a, false)),
    ("LogSoftmax", |c, a| softmax(c, a, true)),
    ("Dropout", dropout),
];

fn matmul(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    one(c.tensor(a, 0)?.matmul(&c.tensor(a, 1)?)?)
}

/// `alpha * A' B' + beta * C`, A' and B' optionally transposed.
fn gemm(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let (mut x, mut w) = (c.tensor(a, 0)?, c.tensor(a, 1)?);
    if c.int("transA", 0)? != 0 {
        x = x.t()?;
    }
    if c.int("transB", 0)? != 0 {
        w = w.t()?;
    }
    let (alpha, beta) = (c.float("alpha", 1.0)?, c.float("beta", 1.0)?);
    let mut y = x.matmul(&w)?;
    if alpha != 1.0 {
        y = y.binary_scalar(BinaryOp::Mul, f64::from(alpha))?;
    }
    if let Some(bias) = c.optional(a, 2) {
        let mut b = bias.tensor(c.device, "input 2")?;
        if beta != 1.0 {
            b = b.binary_scalar(BinaryOp::Mul, f64::from(beta))?;
        }
        y = y.binary(BinaryOp::Add, &b)?;
    }
    one(y)
}

/// Spatial attributes of Conv and the pools, resolved to 2-D: (kernel, strides, dilations,
/// pads as [begin_h, begin_w, end_h, end_w]). A 1-D op is run as 2-D with height 1.
struct Window {
    kernel: [usize; 2],
    strides: [usize; 2],
    dilations: [usize; 2],
    pads: [usize; 4],
}

fn pair(v: &[i64], one_d: bool, default: usize) -> [usize; 2] {
    match (one_d, v) {
        (true, [w]) => [1, *w as usize],
        (false, [h, w]) => [*h as usize, *w as usize],
        _ => [default; 2],
    }
}

fn window(c: &Ctx<'_>, spatial: &[usize], kernel: &[usize]) -> Result<Window> {
    let one_d = spatial.len() == 1;
    if spatial.len() > 2 {
        return Err(c.unsupported(format!(
            "{}-D spatial input (1-D and 2-D are)",
            spatial.len()
        )));
    }
    let k = kernel.iter().map(|&k| k as i64).collect::<Vec<_>>();
    let kernel = pair(&k, one_d, 1);
    let strides = pair(&c.ints_attr("strides")?.unwrap_or_default(), one_d, 1);
    let dilations = pair(&c.ints_attr("dilations")?.unwrap_or_default(), one_d, 1);
    let [h, w] = if one_d {
        [1, spatial[0]]
    } else {
        [spatial[0], spatial[1]]
    };
    let auto = c.string("auto_pad", "NOTSET")?;
    let pads = match auto.as_str() {
        "NOTSET" => match c.ints_attr("pads")?.as_deref() {
            Some([b, e]) if one_d => [0, *b as usize, 0, *e as usize],
            Some([bh, bw, eh, ew]) => [*bh, *bw, *eh, *ew].map(|p| p as usize),
            None => [0; 4],
            Some(other) => return Err(c.unsupported(format!("pads {other:?}"))),
        },
        "VALID" => [0; 4],
        "SAME_UPPER" | "SAME_LOWER" => {
            let total = |size: usize, k: usize, s: usize, d: usize| {
                let out = size.div_ceil(s);
                ((out - 1) * s + (k - 1) * d + 1).saturating_sub(size)
            };
            let th = total(h, kernel[0], strides[0], dilations[0]);
            let tw = total(w, kernel[1], strides[1], dilations[1]);
            let (sh, sw) = if auto == "SAME_UPPER" {
                (th / 2, tw / 2)
            } else {
                (th - th / 2, tw - tw / 2)
            };
            [sh, sw, th - sh, tw - sw]
        }
        other => return Err(c.unsupported(format!("auto_pad {other}"))),
    };
    Ok(Window {
        kernel,
        strides,
        dilations,
        pads,
    })
}

/// `x` as NCHW (a 1-D input gains a height of 1) and its padding made symmetric: uneven pads
/// are applied with `fill` first. Returns the input and the symmetric padding left.
fn prepare(x: &Tensor, w: &Window, fill: f64) -> Result<(Tensor, [usize; 2])> {
    let x = if x.rank() == 3 {
        x.unsqueeze(2)?
    } else {
        x.clone()
    };
    let [bh, bw, eh, ew] = w.pads;
    if bh == eh && bw == ew {
        return Ok((x, [bh, bw]));
    }
    let (ph, pw) = (bh.min(eh), bw.min(ew));
    let x = x.pad(
        &[(0, 0), (0, 0), (bh - ph, eh - ph), (bw - pw, ew - pw)],
        fill,
    )?;
    Ok((x, [ph, pw]))
}

/// Back to the input's rank (a 1-D op's height of 1 removed).
fn finish(y: Tensor, rank: usize) -> Result<Tensor> {
    if rank == 3 { y.squeeze(2) } else { Ok(y) }
}

fn conv(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let (x, weight) = (c.tensor(a, 0)?, c.tensor(a, 1)?);
    let rank = x.rank();
    if rank < 3 {
        return Err(Error::shape(
            "onnx",
            format!("Conv input {} has no spatial axes", x.shape()),
        ));
    }
    let kernel = &weight.dims()[2..];
    let win = window(c, &x.dims()[2..], kernel)?;
    let (xp, padding) = prepare(&x, &win, 0.0)?;
    let weight = if weight.rank() == 3 {
        weight.unsqueeze(2)?
    } else {
        weight
    };
    let params = Conv2dParams {
        stride: win.strides,
        padding,
        dilation: win.dilations,
        groups: c.int("group", 1)? as usize,
    };
    let bias = match c.optional(a, 2) {
        Some(b) => Some(b.tensor(c.device, "input 2")?),
        None => None,
    };
    one(finish(xp.conv2d(&weight, bias.as_ref(), params)?, rank)?)
}

fn pool(c: &Ctx<'_>, a: &[Value], max: bool) -> Outputs {
    let x = c.tensor(a, 0)?;
    let rank = x.rank();
    if c.int("ceil_mode", 0)? != 0 {
        return Err(c.unsupported("ceil_mode 1"));
    }
    if max && c.int("storage_order", 0)? != 0 {
        return Err(c.unsupported("storage_order 1"));
    }
    if a.len() > 1 || c.node.output.len() > 1 {
        return Err(c.unsupported("the Indices output of MaxPool"));
    }
    let kernel: Vec<usize> = c
        .ints_attr("kernel_shape")?
        .ok_or_else(|| c.unsupported("a pool without kernel_shape"))?
        .iter()
        .map(|&k| k as usize)
        .collect();
    let win = window(c, &x.dims()[2..], &kernel)?;
    let include_pad = c.int("count_include_pad", 0)? != 0;
    // uneven padding is applied first: -inf for max, and for averages zeros that count only
    // when count_include_pad says so
    let uneven = win.pads[0] != win.pads[2] || win.pads[1] != win.pads[3];
    if uneven && !max && !include_pad {
        return Err(c.unsupported("uneven pads of an average pool without count_include_pad"));
    }
    let (xp, padding) = prepare(&x, &win, if max { f64::NEG_INFINITY } else { 0.0 })?;
    let params = Pool2dParams {
        kernel: win.kernel,
        stride: win.strides,
        padding,
        dilation: win.dilations,
        count_include_pad: include_pad,
    };
    let y = if max {
        xp.max_pool2d(params)?
    } else {
        xp.avg_pool2d(params)?
    };
    one(finish(y, rank)?)
}

fn global_average_pool(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let axes: Vec<isize> = (2..x.rank() as isize).collect();
    one(x.mean(&axes, true)?)
}

/// Inference-mode batch normalization: `(x - mean) / sqrt(var + eps) * scale + bias` per
/// channel (axis 1), folded into one multiply and one add.
fn batch_norm(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    if c.node.output.iter().filter(|o| !o.is_empty()).count() > 1 || c.int("training_mode", 0)? != 0
    {
        return Err(c.unsupported("training-mode BatchNormalization"));
    }
    let x = c.tensor(a, 0)?;
    let [scale, bias, mean, var] = [1, 2, 3, 4].map(|i| c.tensor(a, i));
    let eps = f64::from(c.float("epsilon", 1e-5)?);
    let inv = var?
        .binary_scalar(BinaryOp::Add, eps)?
        .unary(UnaryOp::Rsqrt)?;
    let mul = scale?.binary(BinaryOp::Mul, &inv)?;
    let add = bias?.binary(BinaryOp::Sub, &mean?.binary(BinaryOp::Mul, &mul)?)?;
    // per-channel vectors broadcast over axis 1
    let mut dims = vec![1; x.rank()];
    dims[1] = x.dims()[1];
    let y = x.binary(BinaryOp::Mul, &mul.reshape(dims.clone())?)?;
    one(y.binary(BinaryOp::Add, &add.reshape(dims)?)?)
}

/// Softmax over `axis` (opset 13+); before 13, over everything from `axis` on, flattened.
fn softmax(c: &Ctx<'_>, a: &[Value], log: bool) -> Outputs {
    let x = c.tensor(a, 0)?;
    let rank = x.rank();
    let default = if c.opset < 13 { 1 } else { -1 };
    let ax = axis(c.int("axis", default)?, rank)?;
    let f = |t: &Tensor, ax: isize| {
        if log {
            t.log_softmax(ax)
        } else {
            t.softmax(ax)
        }
    };
    if c.opset >= 13 || ax + 1 == rank {
        return one(f(&x, ax as isize)?);
    }
    let outer: usize = x.dims()[..ax].iter().product();
    let flat = x.reshape([outer, x.numel() / outer.max(1)])?;
    one(f(&flat, 1)?.reshape(x.dims().to_vec())?)
}

/// Dropout at inference is the identity (and a mask of ones when asked for).
fn dropout(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    if c.node.output.len() > 1 && !c.node.output[1].is_empty() {
        let mask = x.ones_like()?.cast(kiln_core::DType::Bool)?;
        return Ok(vec![Value::Tensor(x), Value::Tensor(mask)]);
    }
    one(x)
}
