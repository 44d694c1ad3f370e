//! Neural-network ONNX ops: matrix products, convolutions, pooling, normalization, softmax.

use super::{Ctx, OpFn, Outputs, axis, one};
use crate::NodeAttrs;
use crate::value::Value;
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use kiln_core::{BinaryOp, Conv2dParams, Error, Pool2dParams, Result, Tensor, UnaryOp};

pub(super) const OPS: &[(&str, OpFn)] = &[
    ("MatMul", matmul),
    ("Gemm", gemm),
    ("Conv", conv),
    ("MaxPool", |c, a| pool(c, a, PoolKind::Max)),
    ("AveragePool", |c, a| pool(c, a, PoolKind::Avg)),
    ("LpPool", |c, a| pool(c, a, PoolKind::Lp)),
    ("GlobalAveragePool", global_average_pool),
    ("BatchNormalization", batch_norm),
    ("Softmax", |c, a| softmax(c, a, false)),
    ("LogSoftmax", |c, a| softmax(c, a, true)),
    ("Dropout", dropout),
    ("ConvTranspose", conv_transpose),
    ("GlobalMaxPool", global_max_pool),
    ("LRN", lrn),
    ("InstanceNormalization", instance_norm),
    ("LayerNormalization", layer_norm),
    ("GroupNormalization", group_norm),
    ("RMSNormalization", rms_norm),
    ("MeanVarianceNormalization", mvn),
    ("LpNormalization", lp_norm),
    ("Hardmax", hardmax),
    ("Einsum", einsum),
    ("NegativeLogLikelihoodLoss", nll_loss),
    ("SoftmaxCrossEntropyLoss", sce_loss),
    ("Resize", resize),
    ("Upsample", resize),
    ("TopK", top_k),
    ("Attention", attention),
    ("RotaryEmbedding", rotary_embedding),
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

/// Spatial attributes of Conv, resolved to 2-D: (strides, dilations, pads as [begin_h, begin_w,
/// end_h, end_w]). A 1-D op is run as 2-D with height 1.
struct Window {
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

/// ONNX Conv (1-D to 3-D), also run by the integer convolutions of the quantization ops.
pub(super) fn conv(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let (x, weight) = (c.tensor(a, 0)?, c.tensor(a, 1)?);
    let rank = x.rank();
    if rank == 5 {
        return conv3d(c, a);
    }
    if rank < 3 {
        return Err(Error::shape(
            "onnx",
            format!("Conv input {} has no spatial axes", x.shape()),
        ));
    }
    if weight.rank() != rank {
        return Err(Error::shape(
            "onnx",
            format!(
                "Conv weight {} must have the rank of input {}",
                weight.shape(),
                x.shape()
            ),
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

/// The (begin, end) padding of each spatial axis of an N-d Conv or pool: `pads`, or what
/// `auto_pad` implies (SAME_*: the output is the input divided by the stride, rounded up).
fn nd_pads(
    c: &Ctx<'_>,
    size: &[usize],
    kernel: &[usize],
    strides: &[usize],
    dilations: &[usize],
) -> Result<(Vec<usize>, Vec<usize>)> {
    let nsp = size.len();
    let auto = c.string("auto_pad", "NOTSET")?;
    Ok(match auto.as_str() {
        "NOTSET" => match c.ints_attr("pads")? {
            Some(p) if p.len() == 2 * nsp => (
                p[..nsp].iter().map(|&v| v.max(0) as usize).collect(),
                p[nsp..].iter().map(|&v| v.max(0) as usize).collect(),
            ),
            None => (vec![0; nsp], vec![0; nsp]),
            Some(p) => return Err(c.unsupported(format!("pads {p:?}"))),
        },
        "VALID" => (vec![0; nsp], vec![0; nsp]),
        "SAME_UPPER" | "SAME_LOWER" => (0..nsp)
            .map(|i| {
                let out = size[i].div_ceil(strides[i]);
                let span = (kernel[i] - 1) * dilations[i] + 1;
                let total = ((out.max(1) - 1) * strides[i] + span).saturating_sub(size[i]);
                let small = total / 2;
                if auto == "SAME_UPPER" {
                    (small, total - small)
                } else {
                    (total - small, small)
                }
            })
            .unzip(),
        other => return Err(c.unsupported(format!("auto_pad {other}"))),
    })
}

/// 3-D convolution as a sum over the kernel's depth of 2-D convolutions: for each depth tap,
/// the input's depth slices that tap reads (folded into the batch) convolved with that tap's
/// 2-D kernel.
fn conv3d(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let (x, weight) = (c.tensor(a, 0)?, c.tensor(a, 1)?);
    if weight.rank() != 5 {
        return Err(Error::shape(
            "onnx",
            format!("Conv weight {} for input {}", weight.shape(), x.shape()),
        ));
    }
    let kernel: Vec<usize> = weight.dims()[2..].to_vec();
    let list = |name: &str| -> Result<Vec<usize>> {
        let v = c.ints_attr(name)?.unwrap_or_else(|| vec![1; 3]);
        if v.len() != 3 {
            return Err(c.unsupported(format!("{name} {v:?} for 3 spatial axes")));
        }
        Ok(v.iter().map(|&d| d.max(1) as usize).collect())
    };
    let (strides, dilations) = (list("strides")?, list("dilations")?);
    let size: Vec<usize> = x.dims()[2..].to_vec();
    let (begin, end) = nd_pads(c, &size, &kernel, &strides, &dilations)?;
    let mut pads = vec![(0, 0), (0, 0)];
    pads.extend(begin.iter().zip(&end).map(|(&b, &e)| (b, e)));
    let xp = x.pad(&pads, 0.0)?;
    let (n, depth) = (xp.dims()[0], xp.dims()[2]);
    let span = (kernel[0] - 1) * dilations[0] + 1;
    if depth < span {
        return Err(Error::shape("onnx", "Conv kernel is deeper than its input"));
    }
    let od = (depth - span) / strides[0] + 1;
    let params = Conv2dParams {
        stride: [strides[1], strides[2]],
        padding: [0, 0],
        dilation: [dilations[1], dilations[2]],
        groups: c.int("group", 1)? as usize,
    };
    let mut acc: Option<Tensor> = None;
    for kd in 0..kernel[0] {
        let from = kd * dilations[0];
        let xs = xp.slice_axis(2, from, from + (od - 1) * strides[0] + 1, strides[0])?;
        let d = xs.dims().to_vec();
        let xs = xs
            .permute(&[0, 2, 1, 3, 4])?
            .contiguous()?
            .reshape([n * od, d[1], d[3], d[4]])?;
        let wk = weight.narrow(2, kd, 1)?.squeeze(2)?.contiguous()?;
        let y = xs.conv2d(&wk, None, params)?;
        acc = Some(match acc {
            None => y,
            Some(p) => p.binary(BinaryOp::Add, &y)?,
        });
    }
    let y = acc.ok_or_else(|| c.unsupported("Conv with an empty kernel"))?;
    let (o, oh, ow) = (y.dims()[1], y.dims()[2], y.dims()[3]);
    let mut y = y
        .reshape([n, od, o, oh, ow])?
        .permute(&[0, 2, 1, 3, 4])?
        .contiguous()?;
    if let Some(b) = c.optional(a, 2) {
        let b = b.tensor(c.device, "input 2")?;
        y = y.binary(BinaryOp::Add, &per_channel(&b, 5)?)?;
    }
    one(y)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PoolKind {
    Max,
    Avg,
    /// `(sum of |x|^p)^(1/p)` over the window
    Lp,
}

/// MaxPool/AveragePool/LpPool over 1, 2 or 3 spatial axes. All padding (explicit, `auto_pad`,
/// and the extra end rows that `ceil_mode` adds) is applied before pooling: -inf for max; for
/// averages the sum of a zero-padded window is divided by the count of its elements that count
/// (the input, and the explicit pads when `count_include_pad`), itself an average pool of a
/// mask.
fn pool(c: &Ctx<'_>, a: &[Value], kind: PoolKind) -> Outputs {
    let x = c.tensor(a, 0)?;
    let rank = x.rank();
    let nsp = rank.saturating_sub(2);
    if !(1..=3).contains(&nsp) {
        return Err(c.unsupported(format!("pooling of a rank-{rank} input")));
    }
    let indices = wants(c, 1);
    if indices && (kind != PoolKind::Max || nsp != 2) {
        return Err(c.unsupported("the Indices output of a MaxPool that is not 2-D"));
    }
    let kernel: Vec<usize> = c
        .ints_attr("kernel_shape")?
        .ok_or_else(|| c.unsupported("a pool without kernel_shape"))?
        .iter()
        .map(|&k| k.max(1) as usize)
        .collect();
    let list = |name: &str| -> Result<Vec<usize>> {
        let v = c.ints_attr(name)?.unwrap_or_else(|| vec![1; nsp]);
        Ok(v.iter().map(|&d| d.max(1) as usize).collect())
    };
    let (strides, dilations) = (list("strides")?, list("dilations")?);
    if kernel.len() != nsp || strides.len() != nsp || dilations.len() != nsp {
        return Err(c.unsupported(format!(
            "kernel_shape {kernel:?}, strides {strides:?}, dilations {dilations:?} for {nsp} spatial axes"
        )));
    }
    let size: Vec<usize> = x.dims()[2..].to_vec();
    let span = |i: usize| (kernel[i] - 1) * dilations[i] + 1;
    let (begin, end) = nd_pads(c, &size, &kernel, &strides, &dilations)?;
    // extra end padding for ceil_mode: windows that start inside the input or its begin pads
    let ceil = c.int("ceil_mode", 0)? != 0;
    let extra: Vec<usize> = (0..nsp)
        .map(|i| {
            let padded = size[i] + begin[i] + end[i];
            if !ceil || padded < span(i) {
                return 0;
            }
            let mut out = (padded - span(i)).div_ceil(strides[i]) + 1;
            if (out - 1) * strides[i] >= size[i] + begin[i] {
                out -= 1;
            }
            ((out - 1) * strides[i] + span(i)).saturating_sub(padded)
        })
        .collect();
    let all_pads = |b: &[usize], e: &[usize]| -> Vec<(usize, usize)> {
        let mut p = vec![(0, 0), (0, 0)];
        p.extend(b.iter().zip(e).map(|(&b, &e)| (b, e)));
        p
    };
    let full_end: Vec<usize> = end.iter().zip(&extra).map(|(e, x)| e + x).collect();
    let pads = all_pads(&begin, &full_end);
    let win = PoolWindow {
        kernel: &kernel,
        strides: &strides,
        dilations: &dilations,
    };
    if indices {
        let fields = (
            begin.as_slice(),
            pads.as_slice(),
            c.int("storage_order", 0)? != 0,
        );
        return max_pool_with_indices(c, &x, &win, fields);
    }
    let y = match kind {
        PoolKind::Max => {
            // kiln pools floats: integers (exact in f32 up to 2^24) go through f32
            let dt = x.dtype();
            let xf = if dt.is_float() {
                x
            } else {
                x.cast(kiln_core::DType::F32)?
            };
            pool_nd(&xf.pad(&pads, f64::NEG_INFINITY)?, &win, true)?.cast(dt)?
        }
        PoolKind::Avg => {
            let sum = pool_nd(&x.pad(&pads, 0.0)?, &win, false)?;
            let mut ones_dims = vec![1, 1];
            ones_dims.extend_from_slice(&size);
            let ones = Tensor::ones(ones_dims, x.dtype(), c.device)?;
            let fill = if c.int("count_include_pad", 0)? != 0 {
                1.0
            } else {
                0.0
            };
            let mask = ones
                .pad(&all_pads(&begin, &end), fill)?
                .pad(&all_pads(&vec![0; nsp], &extra), 0.0)?;
            sum.binary(BinaryOp::Div, &pool_nd(&mask, &win, false)?)?
        }
        PoolKind::Lp => {
            let p = c.int("p", 2)?;
            if p < 1 {
                return Err(c.unsupported(format!("LpPool p {p}")));
            }
            let volume: usize = kernel.iter().product();
            let powered = x.unary(UnaryOp::Abs)?.powf(p as f64)?.pad(&pads, 0.0)?;
            pool_nd(&powered, &win, false)?
                .binary_scalar(BinaryOp::Mul, volume as f64)?
                .powf(1.0 / p as f64)?
        }
    };
    one(y)
}

/// A 2-D MaxPool with its Indices output: the flat index (`(n * C + c) * H * W + h * W + w`, or
/// `w * H + h` within a channel for `storage_order` 1) of each window's first maximum in
/// row-major window order. Each kernel tap's strided view is compared with the pooled maximum;
/// the first tap that matches gives the index.
fn max_pool_with_indices(
    c: &Ctx<'_>,
    x: &Tensor,
    win: &PoolWindow<'_>,
    (begin, pads, column_major): (&[usize], &[(usize, usize)], bool),
) -> Outputs {
    let dt = x.dtype();
    let xf = if dt.is_float() {
        x.clone()
    } else {
        x.cast(kiln_core::DType::F32)?
    };
    let xp = xf.pad(pads, f64::NEG_INFINITY)?;
    let y = pool_nd(&xp, win, true)?;
    let (n, ch, h, w) = (x.dims()[0], x.dims()[1], x.dims()[2], x.dims()[3]);
    let (oh, ow) = (y.dims()[2], y.dims()[3]);
    let (s, d) = (win.strides, win.dilations);
    let yes = Tensor::scalar(1.0, kiln_core::DType::Bool, c.device)?;
    let no = Tensor::scalar(0.0, kiln_core::DType::Bool, c.device)?;
    let mut found: Option<(Tensor, Tensor)> = None;
    for ki in 0..win.kernel[0] {
        for kj in 0..win.kernel[1] {
            let (r0, c0) = (ki * d[0], kj * d[1]);
            let tap = xp
                .slice_axis(2, r0, r0 + (oh - 1) * s[0] + 1, s[0])?
                .slice_axis(3, c0, c0 + (ow - 1) * s[1] + 1, s[1])?;
            let hit = tap.compare(kiln_core::CmpOp::Eq, &y)?;
            let mut flat = Vec::with_capacity(oh * ow);
            for oy in 0..oh {
                for ox in 0..ow {
                    let hh = (oy * s[0] + r0) as i64 - begin[0] as i64;
                    let ww = (ox * s[1] + c0) as i64 - begin[1] as i64;
                    flat.push(if column_major {
                        ww * h as i64 + hh
                    } else {
                        hh * w as i64 + ww
                    });
                }
            }
            let pos = crate::value::Ints {
                dims: vec![1, 1, oh, ow],
                data: flat,
                bool: false,
            }
            .to_tensor(c.device, "MaxPool indices")?;
            found = Some(match found {
                None => (hit.clone(), hit.where_cond(&pos, &pos.scalar_like(0.0)?)?),
                Some((seen, idx)) => {
                    let take = seen.where_cond(&no, &hit)?;
                    (seen.where_cond(&yes, &hit)?, take.where_cond(&pos, &idx)?)
                }
            });
        }
    }
    let (_, idx) = found.ok_or_else(|| c.unsupported("MaxPool with an empty kernel"))?;
    let base = crate::value::Ints {
        dims: vec![n, ch, 1, 1],
        data: (0..(n * ch) as i64).map(|i| i * (h * w) as i64).collect(),
        bool: false,
    }
    .to_tensor(c.device, "MaxPool indices")?;
    Ok(vec![
        Value::Tensor(y.cast(dt)?),
        Value::Tensor(idx.binary(BinaryOp::Add, &base)?),
    ])
}

/// The window of an N-d pool.
struct PoolWindow<'a> {
    kernel: &'a [usize],
    strides: &'a [usize],
    dilations: &'a [usize],
}

/// An unpadded max or average pool of `x` (N, C, spatial...) over 1 to 3 spatial axes; a 3-D
/// pool is a 2-D pool over (H, W) then one over D, which is the same for max and average.
fn pool_nd(x: &Tensor, w: &PoolWindow<'_>, max: bool) -> Result<Tensor> {
    let run = |t: &Tensor, kernel: [usize; 2], stride: [usize; 2], dilation: [usize; 2]| {
        let p = Pool2dParams {
            kernel,
            stride,
            padding: [0, 0],
            dilation,
            count_include_pad: true,
        };
        if max {
            t.max_pool2d(p)
        } else {
            t.avg_pool2d(p)
        }
    };
    let (k, s, d) = (w.kernel, w.strides, w.dilations);
    let dims = x.dims().to_vec();
    match k.len() {
        1 => run(&x.unsqueeze(2)?, [1, k[0]], [1, s[0]], [1, d[0]])?.squeeze(2),
        2 => run(x, [k[0], k[1]], [s[0], s[1]], [d[0], d[1]]),
        _ => {
            let (n, ch, depth) = (dims[0], dims[1], dims[2]);
            let hw = x.reshape([n * ch, depth, dims[3], dims[4]])?;
            let y = run(&hw, [k[1], k[2]], [s[1], s[2]], [d[1], d[2]])?;
            let (oh, ow) = (y.dims()[2], y.dims()[3]);
            let y = y.reshape([n * ch, 1, depth, oh * ow])?;
            let y = run(&y, [k[0], 1], [s[0], 1], [d[0], 1])?;
            let od = y.dims()[2];
            y.reshape([n, ch, od, oh, ow])
        }
    }
}

fn global_average_pool(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let axes: Vec<isize> = (2..x.rank() as isize).collect();
    one(x.mean(&axes, true)?)
}

/// Inference-mode batch normalization: `(x - mean) / sqrt(var + eps) * scale + bias` per
/// channel (axis 1), folded into one multiply and one add.
fn batch_norm(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    if c.int("training_mode", 0)? != 0 {
        return batch_norm_training(c, a);
    }
    if c.node.output.iter().filter(|o| !o.is_empty()).count() > 1 {
        return Err(c.unsupported("BatchNormalization's training outputs before opset 14"));
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

/// Training-mode batch normalization (opset 14+): normalizes with the batch's statistics
/// (population variance over every axis but 1) and outputs the running mean and variance
/// updated with `momentum`: `running * momentum + batch * (1 - momentum)`.
fn batch_norm_training(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let rank = x.rank();
    let [scale, bias, mean, var] = [1, 2, 3, 4].map(|i| c.tensor(a, i));
    let eps = f64::from(c.float("epsilon", 1e-5)?);
    let momentum = f64::from(c.float("momentum", 0.9)?);
    let axes: Vec<isize> = (0..rank as isize).filter(|&i| i != 1).collect();
    let (y, batch_mean, _) = standardize(&x, &axes, eps)?;
    let y = y.binary(BinaryOp::Mul, &per_channel(&scale?, rank)?)?;
    let y = y.binary(BinaryOp::Add, &per_channel(&bias?, rank)?)?;
    let batch_var = x.var(&axes, 0, false)?;
    let channels = [x.dims().get(1).copied().unwrap_or(1)];
    let blend = |running: Tensor, batch: Tensor| -> Result<Tensor> {
        running.binary_scalar(BinaryOp::Mul, momentum)?.binary(
            BinaryOp::Add,
            &batch
                .reshape(channels)?
                .binary_scalar(BinaryOp::Mul, 1.0 - momentum)?,
        )
    };
    let mut out = vec![Value::Tensor(y)];
    if wants(c, 1) || wants(c, 2) {
        out.push(Value::Tensor(blend(mean?, batch_mean)?));
        out.push(Value::Tensor(blend(var?, batch_var)?));
    }
    Ok(out)
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
    // training mode (input 2, opset 12+) with a nonzero ratio draws a random mask
    let training = match c.optional(a, 2) {
        Some(Value::Ints(t)) => t.data.first().is_some_and(|&v| v != 0),
        Some(_) => true,
        None => false,
    };
    let ratio = match c.optional(a, 1) {
        Some(r) => host_floats(r)?.first().copied().unwrap_or(0.5),
        None => f64::from(c.float("ratio", 0.5)?),
    };
    if training && ratio != 0.0 {
        return Err(c.unsupported("training-mode Dropout (a random mask)"));
    }
    if c.node.output.len() > 1 && !c.node.output[1].is_empty() {
        let mask = x.ones_like()?.cast(kiln_core::DType::Bool)?;
        return Ok(vec![Value::Tensor(x), Value::Tensor(mask)]);
    }
    one(x)
}

/// Transposed convolution (1-D and 2-D). Computed unpadded, then cropped by `pads` (or the pads
/// that `output_shape`/`auto_pad` imply) and extended by `output_padding`; the extension holds
/// no kernel taps, so it is zeros before the bias.
fn conv_transpose(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let (x, weight) = (c.tensor(a, 0)?, c.tensor(a, 1)?);
    let rank = x.rank();
    if !(3..=5).contains(&rank) {
        return Err(c.unsupported(format!(
            "ConvTranspose of a rank-{rank} input (1-D to 3-D are supported)"
        )));
    }
    let nsp = rank - 2;
    let one_d = nsp == 1;
    let kernel: Vec<usize> = weight.dims().get(2..).unwrap_or_default().to_vec();
    if kernel.len() != nsp {
        return Err(Error::shape(
            "onnx",
            format!(
                "ConvTranspose weight {} for input {}",
                weight.shape(),
                x.shape()
            ),
        ));
    }
    let list = |name: &str, default: i64| -> Result<Vec<i64>> {
        let v = c.ints_attr(name)?.unwrap_or_else(|| vec![default; nsp]);
        if v.len() != nsp {
            return Err(c.unsupported(format!("{name} {v:?} for {nsp} spatial axes")));
        }
        Ok(v)
    };
    let strides = list("strides", 1)?;
    let dilations = list("dilations", 1)?;
    let out_pad = list("output_padding", 0)?;
    let input: Vec<i64> = x.dims()[2..].iter().map(|&d| d as i64).collect();
    // the unpadded output size per axis
    let full: Vec<i64> = (0..nsp)
        .map(|i| strides[i] * (input[i] - 1) + (kernel[i] as i64 - 1) * dilations[i] + 1)
        .collect();
    let auto = c.string("auto_pad", "NOTSET")?;
    let output_shape = c.ints_attr("output_shape")?;
    // (begin, end) crop per axis; a negative end extends the output
    let mut pads: Vec<(i64, i64)> = Vec::with_capacity(nsp);
    if output_shape.is_some() || auto == "SAME_UPPER" || auto == "SAME_LOWER" {
        let target: Vec<i64> = match &output_shape {
            Some(s) if s.len() >= nsp => s[s.len() - nsp..].to_vec(),
            Some(s) => return Err(c.unsupported(format!("output_shape {s:?}"))),
            None => (0..nsp).map(|i| input[i] * strides[i]).collect(),
        };
        for i in 0..nsp {
            let total = full[i] + out_pad[i] - target[i];
            let half = total.div_euclid(2);
            let (b, e) = if auto == "SAME_UPPER" {
                (half, total - half)
            } else {
                (total - half, half)
            };
            pads.push((b, e - out_pad[i]));
        }
    } else {
        match auto.as_str() {
            "NOTSET" | "VALID" => {}
            other => return Err(c.unsupported(format!("auto_pad {other}"))),
        }
        let p = match c.ints_attr("pads")? {
            Some(p) if auto != "VALID" => p,
            _ => vec![0; 2 * nsp],
        };
        if p.len() != 2 * nsp {
            return Err(c.unsupported(format!("pads {p:?}")));
        }
        for i in 0..nsp {
            pads.push((p[i], p[i + nsp] - out_pad[i]));
        }
    }
    let groups = c.int("group", 1)? as usize;
    let to_usize = |v: &[i64]| v.iter().map(|&d| d.max(1) as usize).collect::<Vec<_>>();
    let mut y = if nsp == 3 {
        conv_transpose3d(
            &x,
            &weight,
            &to_usize(&strides),
            &to_usize(&dilations),
            groups,
        )?
    } else {
        let (x4, w4) = if one_d {
            (x.unsqueeze(2)?, weight.unsqueeze(2)?)
        } else {
            (x, weight)
        };
        let pair = |v: &[i64]| {
            if one_d {
                [1, v[0] as usize]
            } else {
                [v[0] as usize, v[1] as usize]
            }
        };
        let params = Conv2dParams {
            stride: pair(&strides),
            padding: [0, 0],
            dilation: pair(&dilations),
            groups,
        };
        x4.conv_transpose2d(&w4, None, params, [0, 0])?
    };
    for (i, &(b, e)) in pads.iter().enumerate() {
        let ax = if one_d { 3 } else { 2 + i };
        let size = y.dims()[ax] as i64;
        let (keep_from, keep_to) = (b.max(0), (size - e.max(0)));
        if keep_to <= keep_from {
            return Err(Error::shape("onnx", "ConvTranspose pads leave no output"));
        }
        y = y.narrow(
            ax as isize,
            keep_from as usize,
            (keep_to - keep_from) as usize,
        )?;
        let (pb, pe) = ((-b).max(0) as usize, (-e).max(0) as usize);
        if pb > 0 || pe > 0 {
            let mut p = vec![(0, 0); y.rank()];
            p[ax] = (pb, pe);
            y = y.pad(&p, 0.0)?;
        }
    }
    if let Some(bias) = c.optional(a, 2) {
        let b = bias.tensor(c.device, "input 2")?;
        y = y.binary(BinaryOp::Add, &per_channel(&b, y.rank())?)?;
    }
    one(finish(y, rank)?)
}

/// Unpadded 3-D transposed convolution as a sum over the kernel's depth: each depth tap is a 2-D
/// transposed convolution of every input depth slice (folded into the batch), spread to output
/// depths `input depth * stride + tap * dilation` (zeros between, by padding).
fn conv_transpose3d(
    x: &Tensor,
    w: &Tensor,
    strides: &[usize],
    dilations: &[usize],
    groups: usize,
) -> Result<Tensor> {
    let (n, ch, id, h, wd) = (
        x.dims()[0],
        x.dims()[1],
        x.dims()[2],
        x.dims()[3],
        x.dims()[4],
    );
    let kd = w.dims()[2];
    let full = (id - 1) * strides[0] + (kd - 1) * dilations[0] + 1;
    let xs = x
        .permute(&[0, 2, 1, 3, 4])?
        .contiguous()?
        .reshape([n * id, ch, h, wd])?;
    let params = Conv2dParams {
        stride: [strides[1], strides[2]],
        padding: [0, 0],
        dilation: [dilations[1], dilations[2]],
        groups,
    };
    let mut acc: Option<Tensor> = None;
    for k in 0..kd {
        let wk = w.narrow(2, k, 1)?.squeeze(2)?.contiguous()?;
        let z = xs.conv_transpose2d(&wk, None, params, [0, 0])?;
        let (o, oh, ow) = (z.dims()[1], z.dims()[2], z.dims()[3]);
        // (N, O, ID, 1, OH, OW) padded to a stride of depths, then flattened
        let z = z
            .reshape([n, id, o, oh, ow])?
            .permute(&[0, 2, 1, 3, 4])?
            .contiguous()?
            .reshape([n, o, id, 1, oh, ow])?
            .pad(
                &[(0, 0), (0, 0), (0, 0), (0, strides[0] - 1), (0, 0), (0, 0)],
                0.0,
            )?
            .reshape([n, o, id * strides[0], oh, ow])?
            .narrow(2, 0, (id - 1) * strides[0] + 1)?;
        let before = k * dilations[0];
        let after = full - before - ((id - 1) * strides[0] + 1);
        let z = z.pad(&[(0, 0), (0, 0), (before, after), (0, 0), (0, 0)], 0.0)?;
        acc = Some(match acc {
            None => z,
            Some(p) => p.binary(BinaryOp::Add, &z)?,
        });
    }
    acc.ok_or_else(|| Error::shape("onnx", "ConvTranspose with an empty kernel"))
}

fn global_max_pool(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let axes: Vec<isize> = (2..x.rank() as isize).collect();
    one(x.max(&axes, true)?)
}

/// Local response normalization across channels:
/// `x / (bias + alpha / size * sum of x^2 over a window of channels)^beta`. The window sum is
/// an average pool over the channel axis of the zero-padded squares.
fn lrn(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let size = c.int("size", 0)?;
    if size < 1 || x.rank() < 3 {
        return Err(c.unsupported(format!("LRN size {size} on {}", x.shape())));
    }
    let (alpha, beta, bias) = (
        f64::from(c.float("alpha", 1e-4)?),
        f64::from(c.float("beta", 0.75)?),
        f64::from(c.float("bias", 1.0)?),
    );
    let size = size as usize;
    let dims = x.dims().to_vec();
    let (n, ch) = (dims[0], dims[1]);
    let rest: usize = dims[2..].iter().product();
    let sq = x
        .binary(BinaryOp::Mul, &x)?
        .reshape([n, 1, ch, rest])?
        .pad(&[(0, 0), (0, 0), ((size - 1) / 2, size / 2), (0, 0)], 0.0)?;
    let mean = sq.avg_pool2d(Pool2dParams {
        kernel: [size, 1],
        stride: [1, 1],
        padding: [0, 0],
        dilation: [1, 1],
        count_include_pad: true,
    })?;
    let den = mean
        .binary_scalar(BinaryOp::Mul, alpha)?
        .binary_scalar(BinaryOp::Add, bias)?
        .powf(beta)?
        .reshape(dims)?;
    one(x.binary(BinaryOp::Div, &den)?)
}

/// `(x - mean) / sqrt(var + eps)` over `axes` (population variance), and `1 / sqrt(var + eps)`.
fn standardize(x: &Tensor, axes: &[isize], eps: f64) -> Result<(Tensor, Tensor, Tensor)> {
    let mean = x.mean(axes, true)?;
    let centered = x.binary(BinaryOp::Sub, &mean)?;
    let var = centered
        .binary(BinaryOp::Mul, &centered)?
        .mean(axes, true)?;
    let inv = var
        .binary_scalar(BinaryOp::Add, eps)?
        .unary(UnaryOp::Rsqrt)?;
    Ok((centered.binary(BinaryOp::Mul, &inv)?, mean, inv))
}

/// `v` (one value per channel) shaped to broadcast over axis 1 of a rank-`rank` tensor.
fn per_channel(v: &Tensor, rank: usize) -> Result<Tensor> {
    let mut dims = vec![1; rank];
    dims[1] = v.numel();
    v.reshape(dims)
}

fn instance_norm(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let (scale, bias) = (c.tensor(a, 1)?, c.tensor(a, 2)?);
    let eps = f64::from(c.float("epsilon", 1e-5)?);
    let axes: Vec<isize> = (2..x.rank() as isize).collect();
    let (y, _, _) = standardize(&x, &axes, eps)?;
    let y = y.binary(BinaryOp::Mul, &per_channel(&scale, x.rank())?)?;
    one(y.binary(BinaryOp::Add, &per_channel(&bias, x.rank())?)?)
}

/// Whether output `i` of the node is requested.
fn wants(c: &Ctx<'_>, i: usize) -> bool {
    c.node.output.get(i).is_some_and(|o| !o.is_empty())
}

/// LayerNormalization over the axes from `axis` on: outputs Y, and Mean and InvStdDev (kept
/// dims) when requested. `stash_type` 1 computes in f32 (f16 inputs are promoted).
fn layer_norm(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let rank = x.rank();
    let ax = axis(c.int("axis", -1)?, rank)?;
    let eps = f64::from(c.float("epsilon", 1e-5)?);
    let dt = x.dtype();
    let xs = if c.int("stash_type", 1)? == 1 && dt == kiln_core::DType::F16 {
        x.cast(kiln_core::DType::F32)?
    } else {
        x
    };
    let axes: Vec<isize> = (ax as isize..rank as isize).collect();
    let (y, mean, inv) = standardize(&xs, &axes, eps)?;
    let mut y = y.cast(dt)?.binary(BinaryOp::Mul, &c.tensor(a, 1)?)?;
    if let Some(b) = c.optional(a, 2) {
        y = y.binary(BinaryOp::Add, &b.tensor(c.device, "input 2")?)?;
    }
    let mut out = vec![Value::Tensor(y)];
    if wants(c, 1) || wants(c, 2) {
        out.push(Value::Tensor(mean));
        out.push(Value::Tensor(inv));
    }
    Ok(out)
}

/// GroupNormalization: standardize each group of channels; scale and bias are per channel
/// (opset 21) or per group (opset 18).
fn group_norm(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let groups = c.int("num_groups", 0)?;
    let dims = x.dims().to_vec();
    if groups < 1 || dims.len() < 2 || !dims[1].is_multiple_of(groups as usize) {
        return Err(c.unsupported(format!("num_groups {groups} for {}", x.shape())));
    }
    let g = groups as usize;
    let eps = f64::from(c.float("epsilon", 1e-5)?);
    let (scale, bias) = (c.tensor(a, 1)?, c.tensor(a, 2)?);
    let grouped = x.reshape([dims[0], g, x.numel() / (dims[0] * g).max(1)])?;
    let (y, _, _) = standardize(&grouped, &[2], eps)?;
    let (y, scale, bias) = if scale.numel() == dims[1] {
        (y.reshape(dims.clone())?, scale, bias)
    } else {
        // per-group parameters: applied on the grouped view
        let r = |t: &Tensor| t.reshape([1, g, 1]);
        let y = y.binary(BinaryOp::Mul, &r(&scale)?)?;
        let y = y.binary(BinaryOp::Add, &r(&bias)?)?;
        return one(y.reshape(dims)?);
    };
    let y = y.binary(BinaryOp::Mul, &per_channel(&scale, dims.len())?)?;
    one(y.binary(BinaryOp::Add, &per_channel(&bias, dims.len())?)?)
}

/// RMSNormalization: `x / sqrt(mean(x^2 over the axes from axis) + eps) * scale`.
fn rms_norm(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let rank = x.rank();
    let ax = axis(c.int("axis", -1)?, rank)?;
    let eps = f64::from(c.float("epsilon", 1e-5)?);
    let axes: Vec<isize> = (ax as isize..rank as isize).collect();
    let dt = x.dtype();
    let xs = if dt == kiln_core::DType::F16 {
        x.cast(kiln_core::DType::F32)?
    } else {
        x
    };
    let inv = xs
        .binary(BinaryOp::Mul, &xs)?
        .mean(&axes, true)?
        .binary_scalar(BinaryOp::Add, eps)?
        .unary(UnaryOp::Rsqrt)?;
    let y = xs.binary(BinaryOp::Mul, &inv)?.cast(dt)?;
    one(y.binary(BinaryOp::Mul, &c.tensor(a, 1)?)?)
}

/// MeanVarianceNormalization: `(x - mean) / (std + 1e-9)` over `axes` (default N, H, W).
fn mvn(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let axes: Vec<isize> = c
        .ints_attr("axes")?
        .unwrap_or_else(|| vec![0, 2, 3])
        .iter()
        .map(|&d| axis(d, x.rank()).map(|d| d as isize))
        .collect::<Result<_>>()?;
    let mean = x.mean(&axes, true)?;
    let centered = x.binary(BinaryOp::Sub, &mean)?;
    let std = centered
        .binary(BinaryOp::Mul, &centered)?
        .mean(&axes, true)?
        .unary(UnaryOp::Sqrt)?
        .binary_scalar(BinaryOp::Add, 1e-9)?;
    one(centered.binary(BinaryOp::Div, &std)?)
}

/// LpNormalization: `x / ||x||_p` along `axis` (p 1 or 2).
fn lp_norm(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let ax = axis(c.int("axis", -1)?, x.rank())? as isize;
    let norm = match c.int("p", 2)? {
        1 => x.unary(UnaryOp::Abs)?.sum(&[ax], true)?,
        2 => x
            .binary(BinaryOp::Mul, &x)?
            .sum(&[ax], true)?
            .unary(UnaryOp::Sqrt)?,
        p => return Err(c.unsupported(format!("LpNormalization p {p}"))),
    };
    // a zero norm divides by 1 (the reference gives 0, not NaN)
    let zero = norm.compare(kiln_core::CmpOp::Eq, &norm.scalar_like(0.0)?)?;
    let norm = zero.where_cond(&norm.scalar_like(1.0)?, &norm)?;
    one(x.binary(BinaryOp::Div, &norm)?)
}

/// Hardmax: 1 at the first maximum along `axis` (opset 13+; before, of the input flattened to
/// 2-D at `axis`), 0 elsewhere.
fn hardmax(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let rank = x.rank();
    let default = if c.opset < 13 { 1 } else { -1 };
    let ax = axis(c.int("axis", default)?, rank)?;
    let dims = x.dims().to_vec();
    let (t, ax) = if c.opset < 13 {
        let outer: usize = dims[..ax].iter().product();
        (x.reshape([outer, x.numel() / outer.max(1)])?, 1)
    } else {
        (x.clone(), ax)
    };
    let n = t.dims()[ax];
    let hot = t.argmax(ax as isize, false)?.one_hot(n, t.dtype())?;
    // one_hot puts the class axis last: move it back to `ax`
    let r = hot.rank();
    let mut perm: Vec<usize> = (0..r - 1).collect();
    perm.insert(ax, r - 1);
    one(hot.permute(&perm)?.contiguous()?.reshape(dims)?)
}

/// One Einsum operand during evaluation: a tensor and the label of each of its axes.
struct Labeled {
    t: Tensor,
    labels: Vec<char>,
}

/// The equation's operand labels and output labels, with `...` replaced by digit labels
/// (right-aligned across operands, as broadcasting), and the implicit output (`...` then the
/// labels used once, sorted) when there is no `->`.
fn einsum_labels(eq: &str, ranks: &[usize]) -> Option<(Vec<Vec<char>>, Vec<char>)> {
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ranks.len() {
        return None;
    }
    let mut ell_rank = 0;
    let mut ops = Vec::new();
    for (term, &rank) in terms.iter().zip(ranks) {
        let named = term.replace("...", "");
        if named.chars().any(|c| !c.is_ascii_alphabetic()) {
            return None;
        }
        let k = if term.contains("...") {
            rank.checked_sub(named.chars().count())?
        } else {
            0
        };
        ell_rank = ell_rank.max(k);
        let ell: String = (0..k)
            .map(|i| char::from(b'0' + (10 - k + i) as u8))
            .collect();
        ops.push(term.replace("...", &ell).chars().collect::<Vec<char>>());
    }
    if ell_rank > 10 {
        return None;
    }
    let ell: String = (0..ell_rank)
        .map(|i| char::from(b'0' + (10 - ell_rank + i) as u8))
        .collect();
    let out = match rhs {
        Some(r) => r.replace("...", &ell).chars().collect(),
        None => {
            let mut once: Vec<char> = ops
                .iter()
                .flatten()
                .copied()
                .filter(|c| c.is_ascii_alphabetic())
                .filter(|c| ops.iter().flatten().filter(|d| *d == c).count() == 1)
                .collect();
            once.sort_unstable();
            ell.chars().chain(once).collect()
        }
    };
    Some((ops, out))
}

/// Einsum as diagonals (a product with the identity), sums of labels used once, and batched
/// matrix products of operand pairs.
fn einsum(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let eq = c.string("equation", "")?;
    let ts: Vec<Tensor> = (0..a.len())
        .map(|i| c.tensor(a, i))
        .collect::<Result<_>>()?;
    let ranks: Vec<usize> = ts.iter().map(Tensor::rank).collect();
    let (labels, out) =
        einsum_labels(&eq, &ranks).ok_or_else(|| c.unsupported(format!("equation {eq:?}")))?;
    // the size of each label: the largest over operands (size 1 broadcasts)
    let mut size = alloc::collections::BTreeMap::new();
    for (t, l) in ts.iter().zip(&labels) {
        if l.len() != t.rank() {
            return Err(Error::shape(
                "onnx",
                format!("Einsum {eq:?}: operand {} has rank {}", t.shape(), t.rank()),
            ));
        }
        for (&ch, &d) in l.iter().zip(t.dims()) {
            let e = size.entry(ch).or_insert(d);
            *e = (*e).max(d);
        }
    }
    let mut ops: Vec<Labeled> = Vec::new();
    for (t, l) in ts.into_iter().zip(labels) {
        let dims: Vec<usize> = l.iter().map(|ch| size[ch]).collect();
        let mut op = Labeled {
            t: t.expand(dims)?,
            labels: l,
        };
        diagonals(&mut op)?;
        ops.push(op);
    }
    let mut acc: Option<Labeled> = None;
    for i in 0..ops.len() {
        // labels still needed: the output's and those of the operands after this one
        let later: Vec<char> = ops[i + 1..]
            .iter()
            .flat_map(|o| o.labels.iter().copied())
            .chain(out.iter().copied())
            .collect();
        let mut cur = Labeled {
            t: ops[i].t.clone(),
            labels: ops[i].labels.clone(),
        };
        let keep_in_cur: Vec<char> = later
            .iter()
            .copied()
            .chain(acc.iter().flat_map(|o| o.labels.iter().copied()))
            .collect();
        sum_unused(&mut cur, &keep_in_cur)?;
        acc = Some(match acc {
            None => cur,
            Some(prev) => contract(prev, cur, &later)?,
        });
    }
    let mut res = acc.ok_or_else(|| c.unsupported("Einsum without operands"))?;
    sum_unused(&mut res, &out)?;
    let perm: Vec<usize> = out
        .iter()
        .map(|ch| res.labels.iter().position(|l| l == ch))
        .collect::<Option<_>>()
        .ok_or_else(|| c.unsupported(format!("equation {eq:?}")))?;
    one(res.t.permute(&perm)?.contiguous()?)
}

/// Takes the diagonal of each label repeated within one operand.
fn diagonals(op: &mut Labeled) -> Result<()> {
    while let Some((p, q)) = (0..op.labels.len()).find_map(|p| {
        (p + 1..op.labels.len())
            .find(|&q| op.labels[q] == op.labels[p])
            .map(|q| (p, q))
    }) {
        let n = op.t.dims()[p];
        let mut dims = vec![1; op.t.rank()];
        dims[p] = n;
        dims[q] = n;
        let eye = Tensor::eye(n, op.t.dtype(), op.t.device())?.reshape(dims)?;
        op.t =
            op.t.binary(BinaryOp::Mul, &eye)?
                .sum(&[q as isize], false)?;
        op.labels.remove(q);
    }
    Ok(())
}

/// Sums the labels of `op` that are not in `keep`.
fn sum_unused(op: &mut Labeled, keep: &[char]) -> Result<()> {
    let axes: Vec<isize> = (0..op.labels.len())
        .filter(|&i| !keep.contains(&op.labels[i]))
        .map(|i| i as isize)
        .collect();
    if !axes.is_empty() {
        op.t = op.t.sum(&axes, false)?;
        op.labels.retain(|l| keep.contains(l));
    }
    Ok(())
}

/// The product of two operands, summing their shared labels that are not in `later`.
fn contract(x: Labeled, y: Labeled, later: &[char]) -> Result<Labeled> {
    let shared = |l: &char| y.labels.contains(l);
    let batch: Vec<char> = x
        .labels
        .iter()
        .copied()
        .filter(|l| shared(l) && later.contains(l))
        .collect();
    let summed: Vec<char> = x
        .labels
        .iter()
        .copied()
        .filter(|l| shared(l) && !later.contains(l))
        .collect();
    let left: Vec<char> = x.labels.iter().copied().filter(|l| !shared(l)).collect();
    let right: Vec<char> = y
        .labels
        .iter()
        .copied()
        .filter(|l| !x.labels.contains(l))
        .collect();
    let arrange = |op: &Labeled, order: &[&[char]]| -> Result<(Tensor, Vec<usize>)> {
        let all: Vec<char> = order.iter().flat_map(|o| o.iter().copied()).collect();
        let perm: Vec<usize> = all
            .iter()
            .map(|ch| op.labels.iter().position(|l| l == ch).unwrap_or(0))
            .collect();
        let t = op.t.permute(&perm)?;
        let dims = t.dims().to_vec();
        let mut groups = Vec::new();
        let mut at = 0;
        for o in order {
            groups.push(dims[at..at + o.len()].iter().product());
            at += o.len();
        }
        Ok((t.contiguous()?.reshape(groups)?, dims))
    };
    let (xt, xd) = arrange(&x, &[&batch, &left, &summed])?;
    let (yt, yd) = arrange(&y, &[&batch, &summed, &right])?;
    let z = xt.matmul(&yt)?;
    let mut dims = xd[..batch.len() + left.len()].to_vec();
    dims.extend_from_slice(&yd[batch.len() + summed.len()..]);
    let labels = batch.into_iter().chain(left).chain(right).collect();
    Ok(Labeled {
        t: z.reshape(dims)?,
        labels,
    })
}

/// The negative log-likelihood of `target` classes in `logp` (N, C, d...): per element
/// `-logp[n, t, d] * weight[t]`, 0 where `t` is `ignore_index`; reduced by `reduction`
/// (`mean` divides by the sum of the weights used).
fn nll(
    c: &Ctx<'_>,
    logp: &Tensor,
    target: &Tensor,
    weight: Option<Tensor>,
    reduction: &str,
) -> Result<Tensor> {
    let rank = logp.rank();
    if rank < 2 || target.rank() + 1 != rank {
        return Err(Error::shape(
            "onnx",
            format!(
                "loss of input {} and target {}",
                logp.shape(),
                target.shape()
            ),
        ));
    }
    let classes = logp.dims()[1];
    let target = target.cast(kiln_core::DType::I32)?;
    let valid = match c
        .node
        .attr_int("ignore_index")
        .map_err(crate::model::onnx_err)?
    {
        Some(ii) => Some(target.compare(kiln_core::CmpOp::Ne, &target.scalar_like(ii as f64)?)?),
        None => None,
    };
    let safe = match &valid {
        Some(v) => v.where_cond(&target, &target.scalar_like(0.0)?)?,
        None => target,
    };
    // one-hot classes (N, d..., C) moved to axis 1
    let mut perm: Vec<usize> = vec![0, rank - 1];
    perm.extend(1..rank - 1);
    let hot = safe.one_hot(classes, logp.dtype())?.permute(&perm)?;
    let picked = logp.binary(BinaryOp::Mul, &hot)?.sum(&[1], false)?;
    let mut w = match weight {
        Some(w) => hot
            .binary(BinaryOp::Mul, &per_channel(&w, rank)?)?
            .sum(&[1], false)?,
        None => picked.ones_like()?,
    };
    if let Some(v) = valid {
        w = w.binary(BinaryOp::Mul, &v.cast(logp.dtype())?)?;
    }
    let loss = picked.binary(BinaryOp::Mul, &w)?.unary(UnaryOp::Neg)?;
    match reduction {
        "none" => Ok(loss),
        "sum" => loss.sum_all(),
        "mean" => loss.sum_all()?.binary(BinaryOp::Div, &w.sum_all()?),
        other => Err(c.unsupported(format!("reduction {other}"))),
    }
}

fn nll_loss(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let weight = match c.optional(a, 2) {
        Some(w) => Some(w.tensor(c.device, "input 2")?),
        None => None,
    };
    let reduction = c.string("reduction", "mean")?;
    one(nll(
        c,
        &c.tensor(a, 0)?,
        &c.tensor(a, 1)?,
        weight,
        &reduction,
    )?)
}

/// SoftmaxCrossEntropyLoss: the NLL of the log-softmax over axis 1; output 1 is the
/// log-probabilities.
fn sce_loss(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let logp = c.tensor(a, 0)?.log_softmax(1)?;
    let weight = match c.optional(a, 2) {
        Some(w) => Some(w.tensor(c.device, "input 2")?),
        None => None,
    };
    let reduction = c.string("reduction", "mean")?;
    let loss = nll(c, &logp, &c.tensor(a, 1)?, weight, &reduction)?;
    let mut out = vec![Value::Tensor(loss)];
    if wants(c, 1) {
        out.push(Value::Tensor(logp));
    }
    Ok(out)
}

/// A small constant input (Resize scales or roi) on the host.
fn host_floats(v: &Value) -> Result<Vec<f64>> {
    super::host_values(v, "Resize scales or roi")
}

/// The interpolation of one Resize axis: for each tap, the source index and weight of every
/// output position, and which output positions lie outside the input (tf_crop_and_resize).
struct Taps {
    index: Vec<Vec<i64>>,
    weight: Vec<Vec<f64>>,
    outside: Vec<bool>,
}

/// Resize settings shared by every axis.
struct ResizeMode {
    mode: String,
    transform: String,
    nearest: String,
    cubic_a: f64,
    exclude_outside: bool,
    antialias: bool,
}

/// The taps of one axis from `n` to `m` elements at scale `s` (`roi` start and end for
/// tf_crop_and_resize), following the ONNX reference: edge-clamped neighbours of the source
/// coordinate, with nearest, linear or cubic coefficients.
fn resize_taps(r: &ResizeMode, n: usize, m: usize, s: f64, roi: (f64, f64)) -> Option<Taps> {
    // antialiasing widens the kernel by 1 / s when downsampling
    let aa = if r.antialias { s.min(1.0) } else { 1.0 };
    // the first tap's offset from the coordinate's floor; taps are symmetric around it
    let start = match r.mode.as_str() {
        "nearest" => 0,
        "linear" => libm::floor(-1.0 / aa) as i64 + 1,
        "cubic" => libm::floor(-2.0 / aa) as i64 + 1,
        _ => return None,
    };
    let taps = (2 - 2 * start) as usize;
    // the reference measures the output as `s * n` (not its floor) in the transforms
    let (nf, mf, lf) = (n as f64, m as f64, s * n as f64);
    let mut t = Taps {
        index: vec![Vec::with_capacity(m); taps],
        weight: vec![Vec::with_capacity(m); taps],
        outside: Vec::with_capacity(m),
    };
    for o in 0..m {
        let of = o as f64;
        let x = match r.transform.as_str() {
            "half_pixel" => (of + 0.5) / s - 0.5,
            "half_pixel_symmetric" => {
                let adjustment = mf / (s * nf);
                let offset = nf / 2.0 * (1.0 - adjustment);
                offset + (of + 0.5) / s - 0.5
            }
            "pytorch_half_pixel" if lf > 1.0 => (of + 0.5) / s - 0.5,
            "pytorch_half_pixel" => 0.0,
            "align_corners" if lf > 1.0 => of * (nf - 1.0) / (lf - 1.0),
            "align_corners" => 0.0,
            "asymmetric" => of / s,
            "tf_crop_and_resize" if lf > 1.0 => {
                roi.0 * (nf - 1.0) + of * (roi.1 - roi.0) * (nf - 1.0) / (lf - 1.0)
            }
            "tf_crop_and_resize" => 0.5 * (roi.0 + roi.1) * (nf - 1.0),
            _ => return None,
        };
        t.outside
            .push(r.transform == "tf_crop_and_resize" && (x < 0.0 || x > nf - 1.0));
        // the taps start below the coordinate; an integer coordinate is the last of the
        // lower taps, with ratio 1
        let mut fl = libm::floor(x);
        let ratio = if x == fl {
            fl -= 1.0;
            1.0
        } else {
            x - fl
        };
        let coeffs: Vec<f64> = match r.mode.as_str() {
            "nearest" => {
                let up = if ratio == 1.0 {
                    true
                } else {
                    match r.nearest.as_str() {
                        "round_prefer_floor" => ratio > 0.5,
                        "round_prefer_ceil" => ratio >= 0.5,
                        "floor" => false,
                        "ceil" => true,
                        _ => return None,
                    }
                };
                if up { vec![0.0, 1.0] } else { vec![1.0, 0.0] }
            }
            "linear" => (0..taps)
                .map(|j| (1.0 - ((start + j as i64) as f64 - ratio).abs() * aa).clamp(0.0, 1.0))
                .collect(),
            _ => {
                let a = r.cubic_a;
                let cubic = |d: f64| {
                    // Keys' kernel at distance d
                    if d <= 1.0 {
                        ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0
                    } else if d < 2.0 {
                        ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a
                    } else {
                        0.0
                    }
                };
                (0..taps)
                    .map(|j| cubic(((start + j as i64) as f64 - ratio).abs() * aa))
                    .collect()
            }
        };
        let total: f64 = coeffs.iter().sum();
        let coeffs: Vec<f64> = if aa < 1.0 && total != 0.0 {
            coeffs.iter().map(|v| v / total).collect()
        } else {
            coeffs
        };
        let first = fl as i64 + start;
        let idx: Vec<i64> = (0..taps as i64).map(|j| first + j).collect();
        let mut w = coeffs;
        if r.exclude_outside {
            for (wj, &i) in w.iter_mut().zip(&idx) {
                if i < 0 || i >= n as i64 {
                    *wj = 0.0;
                }
            }
            let total: f64 = w.iter().sum();
            if total != 0.0 {
                w.iter_mut().for_each(|v| *v /= total);
            }
        }
        for j in 0..taps {
            t.index[j].push(idx[j].clamp(0, n as i64 - 1));
            t.weight[j].push(w[j]);
        }
    }
    Some(t)
}

/// Resize (and Upsample): nearest, linear and cubic, each axis separately as a weighted sum of
/// gathered rows (source indices and weights computed on the host from the sizes).
fn resize(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let rank = x.rank();
    let upsample = c.node.op_type() == "Upsample";
    let axes: Vec<usize> = match c.ints_attr("axes")? {
        Some(ax) => ax.iter().map(|&d| axis(d, rank)).collect::<Result<_>>()?,
        None => (0..rank).collect(),
    };
    let (scales_in, sizes_in, roi_in) = if upsample {
        // Upsample-7 has a `scales` attribute, Upsample-9 an input
        let scales = match (c.floats_attr("scales")?, c.optional(a, 1)) {
            (Some(f), _) => f.iter().map(|&v| f64::from(v)).collect(),
            (None, Some(v)) => host_floats(v)?,
            (None, None) => return Err(c.unsupported("Upsample without scales")),
        };
        (scales, Vec::new(), Vec::new())
    } else if c.opset < 11 {
        (host_floats(c.arg(a, 1)?)?, Vec::new(), Vec::new())
    } else {
        let scales = c.optional(a, 2).map(host_floats).transpose()?;
        let sizes = match c.optional(a, 3) {
            Some(v) => v.ints("sizes")?.data.clone(),
            None => Vec::new(),
        };
        let roi = c.optional(a, 1).map(host_floats).transpose()?;
        (scales.unwrap_or_default(), sizes, roi.unwrap_or_default())
    };
    let dims = x.dims().to_vec();
    let k = axes.len();
    // per-axis (output size, scale)
    let mut plan: Vec<(usize, f64)> = dims.iter().map(|&d| (d, 1.0)).collect();
    if !scales_in.is_empty() {
        if scales_in.len() != k {
            return Err(c.unsupported(format!("scales {scales_in:?} for {k} axes")));
        }
        for (&ax, &s) in axes.iter().zip(&scales_in) {
            plan[ax] = ((dims[ax] as f64 * s) as usize, s);
        }
    } else if !sizes_in.is_empty() {
        if sizes_in.len() != k {
            return Err(c.unsupported(format!("sizes {sizes_in:?} for {k} axes")));
        }
        let ratio = |i: usize| sizes_in[i] as f64 / dims[axes[i]] as f64;
        let policy = c.string("keep_aspect_ratio_policy", "stretch")?;
        let common = match policy.as_str() {
            "stretch" => None,
            "not_larger" => Some((0..k).map(ratio).fold(f64::INFINITY, f64::min)),
            "not_smaller" => Some((0..k).map(ratio).fold(0.0, f64::max)),
            other => return Err(c.unsupported(format!("keep_aspect_ratio_policy {other}"))),
        };
        for (i, &ax) in axes.iter().enumerate() {
            plan[ax] = match common {
                None => (sizes_in[i].max(0) as usize, ratio(i)),
                Some(s) => (libm::floor(dims[ax] as f64 * s + 0.5) as usize, s),
            };
        }
    } else {
        return Err(c.unsupported("Resize without scales or sizes"));
    }
    let default_transform = if c.opset < 11 {
        "asymmetric"
    } else {
        "half_pixel"
    };
    let r = ResizeMode {
        mode: c.string("mode", "nearest")?,
        transform: c.string("coordinate_transformation_mode", default_transform)?,
        nearest: c.string(
            "nearest_mode",
            if c.opset < 11 {
                "floor"
            } else {
                "round_prefer_floor"
            },
        )?,
        cubic_a: f64::from(c.float("cubic_coeff_a", -0.75)?),
        exclude_outside: c.int("exclude_outside", 0)? != 0,
        antialias: c.int("antialias", 0)? != 0,
    };
    let extrapolation = f64::from(c.float("extrapolation_value", 0.0)?);
    let mut y = x;
    for ax in 0..rank {
        let (m, s) = plan[ax];
        let n = dims[ax];
        let roi = match axes.iter().position(|&d| d == ax) {
            Some(i) if roi_in.len() == 2 * k => (roi_in[i], roi_in[k + i]),
            _ if roi_in.len() == 2 * rank => (roi_in[ax], roi_in[rank + ax]),
            _ => (0.0, 1.0),
        };
        if m == n && s == 1.0 && r.transform != "tf_crop_and_resize" {
            continue;
        }
        if n == 0 || m == 0 {
            return Err(c.unsupported(format!("Resize of axis {ax} from {n} to {m}")));
        }
        let taps = resize_taps(&r, n, m, s, roi).ok_or_else(|| {
            c.unsupported(format!(
                "Resize mode {} with {} / {}",
                r.mode, r.transform, r.nearest
            ))
        })?;
        let mut shape = vec![1; rank];
        shape[ax] = m;
        let mut acc: Option<Tensor> = None;
        for (idx, w) in taps.index.iter().zip(&taps.weight) {
            if w.iter().all(|&v| v == 0.0) {
                continue;
            }
            let index = crate::value::Ints::vector(idx.clone()).to_tensor(c.device, "Resize")?;
            let rows = y.index_select(ax as isize, &index)?;
            let wt: Vec<f32> = w.iter().map(|&v| v as f32).collect();
            let wt = Tensor::from_slice(&wt, shape.clone(), c.device)?.cast(y.dtype())?;
            let term = rows.binary(BinaryOp::Mul, &wt)?;
            acc = Some(match acc {
                None => term,
                Some(p) => p.binary(BinaryOp::Add, &term)?,
            });
        }
        let mut out = match acc {
            Some(t) => t,
            None => y.index_select(
                ax as isize,
                &crate::value::Ints::vector(taps.index[0].clone()).to_tensor(c.device, "Resize")?,
            )?,
        };
        if taps.outside.iter().any(|&o| o) {
            let inside: Vec<u8> = taps.outside.iter().map(|&o| u8::from(!o)).collect();
            let mask = Tensor::from_data(
                &kiln_core::TensorData::from_bytes(
                    inside,
                    kiln_core::DType::Bool,
                    kiln_core::Shape::from(shape.clone()),
                )?,
                c.device,
            )?;
            out = mask.where_cond(&out, &out.scalar_like(extrapolation)?)?;
        }
        y = out;
    }
    one(y)
}

/// TopK: the `k` largest (or smallest) along `axis`, sorted, with their indices (the lower index
/// first among equals). kiln has no sort, so this is `k` rounds of arg-max, each masking its pick.
fn top_k(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let rank = x.rank();
    let ax = axis(c.int("axis", -1)?, rank)?;
    let k = if c.opset < 10 {
        c.int("k", 0)?
    } else {
        let ks = c.ints(a, 1)?;
        *ks.data
            .first()
            .ok_or_else(|| c.unsupported("TopK without k"))?
    };
    let n = x.dims()[ax];
    if k < 1 || k as usize > n {
        return Err(c.unsupported(format!("TopK k {k} of {n} elements")));
    }
    let largest = c.int("largest", 1)? != 0;
    let fill = match (x.dtype().is_float(), largest) {
        (true, true) => f64::NEG_INFINITY,
        (true, false) => f64::INFINITY,
        (false, true) => f64::from(i32::MIN),
        (false, false) => f64::from(i32::MAX),
    };
    let mut shape = vec![1; rank];
    shape[ax] = n;
    let positions = crate::value::Ints {
        dims: shape,
        data: (0..n as i64).collect(),
        bool: false,
    }
    .to_tensor(c.device, "TopK")?;
    let fill = x.scalar_like(fill)?;
    let (mut values, mut indices) = (Vec::new(), Vec::new());
    let mut cur = x.clone();
    for _ in 0..k {
        let i = if largest {
            cur.argmax(ax as isize, true)?
        } else {
            cur.argmin(ax as isize, true)?
        };
        values.push(x.gather(ax as isize, &i)?);
        let picked = positions.compare(kiln_core::CmpOp::Eq, &i)?;
        cur = picked.where_cond(&fill, &cur)?;
        indices.push(i);
    }
    Ok(vec![
        Value::Tensor(Tensor::concat(&values, ax as isize)?),
        Value::Tensor(Tensor::concat(&indices, ax as isize)?),
    ])
}

/// A host-built f32 bias of `dims`: 0 where `allow(index)` says so, -inf elsewhere.
fn bias_mask(c: &Ctx<'_>, dims: [usize; 4], allow: impl Fn([usize; 4]) -> bool) -> Result<Tensor> {
    let mut v = Vec::with_capacity(dims.iter().product());
    for b in 0..dims[0] {
        for h in 0..dims[1] {
            for i in 0..dims[2] {
                for j in 0..dims[3] {
                    v.push(if allow([b, h, i, j]) {
                        0.0f32
                    } else {
                        f32::NEG_INFINITY
                    });
                }
            }
        }
    }
    Tensor::from_slice(&v, dims, c.device)
}

/// Attention (opset 23/24): `softmax(softcap(Q K^T * scale) + bias) V` per head, with 3-D
/// inputs split into heads, a key/value cache (`past_*` concatenated before the new keys and
/// returned as `present_*`), grouped-query heads repeated, and the bias from `attn_mask`
/// (bool: allowed or -inf; float: added; padded with -inf to the key length), `is_causal`
/// (query i sees keys up to i + offset) and `nonpad_kv_seqlen`. Output 3 is the scores at the
/// stage `qk_matmul_output_mode` names.
fn attention(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let (q, k, v) = (c.tensor(a, 0)?, c.tensor(a, 1)?, c.tensor(a, 2)?);
    let three_d = q.rank() == 3;
    let dt = q.dtype();
    let heads = |t: &Tensor, name: &str| -> Result<Tensor> {
        if !three_d {
            return Ok(t.clone());
        }
        let n = c.int(name, 0)?;
        let d = t.dims().to_vec();
        if n < 1 || !d[2].is_multiple_of(n as usize) {
            return Err(c.unsupported(format!("{name} {n} for {}", t.shape())));
        }
        let n = n as usize;
        t.reshape([d[0], d[1], n, d[2] / n])?.permute(&[0, 2, 1, 3])
    };
    let (q, mut k, mut v) = (
        heads(&q, "q_num_heads")?,
        heads(&k, "kv_num_heads")?,
        heads(&v, "kv_num_heads")?,
    );
    if q.rank() != 4 || k.rank() != 4 || v.rank() != 4 {
        return Err(c.unsupported("Attention inputs that are not 3-D or 4-D"));
    }
    let past = match c.optional(a, 4) {
        Some(p) => {
            let p = p.tensor(c.device, "past_key")?;
            let n = p.dims()[2];
            k = Tensor::concat(&[p, k], 2)?;
            Some(n)
        }
        None => None,
    };
    if let Some(p) = c.optional(a, 5) {
        v = Tensor::concat(&[p.tensor(c.device, "past_value")?, v], 2)?;
    }
    let (present_k, present_v) = (k.clone(), v.clone());
    let (batch, qh, ql, hs) = (q.dims()[0], q.dims()[1], q.dims()[2], q.dims()[3]);
    let (kvh, kl) = (k.dims()[1], k.dims()[2]);
    let scale = match c.node.attr_float("scale").map_err(crate::model::onnx_err)? {
        Some(s) => f64::from(s),
        None => 1.0 / libm::sqrt(hs as f64),
    };
    let root = libm::sqrt(scale);
    // the bias added to the scores, (.., ql, kl)
    let mut bias: Option<Tensor> = None;
    if let Some(m) = c.optional(a, 3) {
        let m = m.tensor(c.device, "attn_mask")?;
        let m = if m.dtype() == kiln_core::DType::Bool {
            let zero = Tensor::scalar(0.0, kiln_core::DType::F32, c.device)?;
            m.where_cond(&zero, &zero.scalar_like(f64::NEG_INFINITY)?)?
        } else {
            m.cast(kiln_core::DType::F32)?
        };
        let short = kl.saturating_sub(m.dims().last().copied().unwrap_or(kl));
        let m = if short > 0 {
            let mut p = vec![(0, 0); m.rank()];
            p[m.rank() - 1] = (0, short);
            m.pad(&p, f64::NEG_INFINITY)?
        } else {
            m
        };
        bias = Some(m);
    }
    let nonpad: Option<Vec<i64>> = match c.optional(a, 6) {
        Some(n) => Some(n.ints("nonpad_kv_seqlen")?.data.clone()),
        None => None,
    };
    let add = |bias: Option<Tensor>, t: Tensor| -> Result<Option<Tensor>> {
        Ok(Some(match bias {
            None => t,
            Some(b) => b.binary(BinaryOp::Add, &t)?,
        }))
    };
    if c.int("is_causal", 0)? != 0 {
        let causal = match (&past, &nonpad) {
            (None, Some(n)) => bias_mask(c, [batch, 1, ql, kl], |[b, _, i, j]| {
                (j as i64) <= i as i64 + n.get(b).copied().unwrap_or(0) - ql as i64
            })?,
            _ => {
                let off = past.unwrap_or(0);
                bias_mask(c, [1, 1, ql, kl], |[_, _, i, j]| j <= i + off)?
            }
        };
        bias = add(bias, causal)?;
    }
    if let Some(n) = &nonpad {
        let pad = bias_mask(c, [batch, 1, 1, kl], |[b, _, _, j]| {
            (j as i64) < n.get(b).copied().unwrap_or(0)
        })?;
        bias = add(bias, pad)?;
    }
    if qh != kvh {
        if qh % kvh != 0 {
            return Err(c.unsupported(format!("{qh} query heads over {kvh} key heads")));
        }
        // each key/value head serves qh / kvh consecutive query heads
        let rep = |t: &Tensor| -> Result<Tensor> {
            let d = t.dims().to_vec();
            t.unsqueeze(2)?
                .expand([d[0], d[1], qh / kvh, d[2], d[3]])?
                .contiguous()?
                .reshape([d[0], qh, d[2], d[3]])
        };
        k = rep(&k)?;
        v = rep(&v)?;
    }
    let f32t = kiln_core::DType::F32;
    let qs = q.cast(f32t)?.binary_scalar(BinaryOp::Mul, root)?;
    let ks = k.cast(f32t)?.binary_scalar(BinaryOp::Mul, root)?;
    let mut qk = qs.matmul(&ks.permute(&[0, 1, 3, 2])?)?;
    let softcap = f64::from(c.float("softcap", 0.0)?);
    if softcap > 0.0 {
        qk = qk
            .binary_scalar(BinaryOp::Div, softcap)?
            .unary(UnaryOp::Tanh)?
            .binary_scalar(BinaryOp::Mul, softcap)?;
    }
    let with_bias = match &bias {
        Some(b) => qk.binary(BinaryOp::Add, b)?,
        None => qk.clone(),
    };
    // a fully masked row (every score -inf) attends to nothing: zeros, not NaN
    let dead = with_bias.max(&[-1], true)?.compare(
        kiln_core::CmpOp::Eq,
        &with_bias.scalar_like(f64::NEG_INFINITY)?,
    )?;
    let probs = dead.where_cond(&with_bias.scalar_like(0.0)?, &with_bias.softmax(-1)?)?;
    let y = probs.matmul(&v.cast(f32t)?)?.cast(dt)?;
    let y = if three_d {
        let d = y.dims().to_vec();
        y.permute(&[0, 2, 1, 3])?
            .contiguous()?
            .reshape([d[0], d[2], d[1] * d[3]])?
    } else {
        y
    };
    let mut out = vec![Value::Tensor(y)];
    if c.node.output.len() > 1 {
        out.push(Value::Tensor(present_k));
        out.push(Value::Tensor(present_v));
    }
    if wants(c, 3) {
        let scores = match c.int("qk_matmul_output_mode", 0)? {
            0 | 1 => qk,
            2 => with_bias,
            3 => probs,
            m => return Err(c.unsupported(format!("qk_matmul_output_mode {m}"))),
        };
        out.push(Value::Tensor(scores.cast(dt)?));
    }
    Ok(out)
}

/// RotaryEmbedding (opset 23): rotates the first `rotary_embedding_dim` features of each head
/// by the cached angles (`cos_cache`/`sin_cache`, picked by `position_ids` when given): pairs
/// are the two halves, or neighbours when `interleaved`.
fn rotary_embedding(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let shape = x.dims().to_vec();
    // (B, S, heads, H)
    let x4 = match x.rank() {
        4 => x.permute(&[0, 2, 1, 3])?,
        3 => {
            let n = c.int("num_heads", 0)?;
            if n < 1 || !shape[2].is_multiple_of(n as usize) {
                return Err(c.unsupported(format!("num_heads {n} for {}", x.shape())));
            }
            x.reshape([shape[0], shape[1], n as usize, shape[2] / n as usize])?
        }
        r => return Err(c.unsupported(format!("RotaryEmbedding of a rank-{r} input"))),
    };
    let (b, s, hs) = (x4.dims()[0], x4.dims()[1], x4.dims()[3]);
    let dim = match c.int("rotary_embedding_dim", 0)? {
        0 => hs,
        d if d > 0 && d as usize <= hs && d % 2 == 0 => d as usize,
        d => return Err(c.unsupported(format!("rotary_embedding_dim {d}"))),
    };
    let half = dim / 2;
    let (cos, sin) = (c.tensor(a, 1)?, c.tensor(a, 2)?);
    let pick = |cache: &Tensor| -> Result<Tensor> {
        let t = match c.optional(a, 3) {
            Some(p) => {
                let p = p.tensor(c.device, "position_ids")?;
                let flat = p.reshape([p.numel()])?;
                let width = cache.dims().last().copied().unwrap_or(0);
                cache.index_select(0, &flat)?.reshape([b, s, width])?
            }
            None => cache.clone(),
        };
        t.narrow(2, 0, half)?.unsqueeze(2)
    };
    let (cos, sin) = (pick(&cos)?, pick(&sin)?);
    let rot = x4.narrow(3, 0, dim)?;
    let interleaved = c.int("interleaved", 0)? != 0;
    let (x1, x2) = if interleaved {
        (rot.slice_axis(3, 0, dim, 2)?, rot.slice_axis(3, 1, dim, 2)?)
    } else {
        (rot.narrow(3, 0, half)?, rot.narrow(3, half, half)?)
    };
    let mul = |p: &Tensor, q: &Tensor| p.binary(BinaryOp::Mul, q);
    let real = mul(&cos, &x1)?.binary(BinaryOp::Sub, &mul(&sin, &x2)?)?;
    let imag = mul(&sin, &x1)?.binary(BinaryOp::Add, &mul(&cos, &x2)?)?;
    let rotated = if interleaved {
        Tensor::stack(&[real, imag], -1)?.reshape(rot.dims().to_vec())?
    } else {
        Tensor::concat(&[real, imag], 3)?
    };
    let y = if dim < hs {
        Tensor::concat(&[rotated, x4.narrow(3, dim, hs - dim)?], 3)?
    } else {
        rotated
    };
    let y = if shape.len() == 3 {
        y.contiguous()?.reshape(shape)?
    } else {
        y.permute(&[0, 2, 1, 3])?.contiguous()?
    };
    one(y)
}
