//! The decoder blocks of recent language models (opsets 24 to 28): the recurrent state of
//! linear attention (`LinearAttention`) and of the short causal convolution before it
//! (`CausalConvWithState`), the SwiGLU feed-forward gate, and the KV-cache write
//! (`TensorScatter`). Each is a composition of kiln ops; floats narrower than f32 are computed
//! in f32 and rounded once at the end.

use super::{Ctx, OpFn, Outputs, one, work_dtype};
use crate::NodeAttrs;
use crate::value::Value;
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;
use kiln_core::{Conv2dParams, DType, Error, Result, Tensor};

pub(super) const OPS: &[(&str, OpFn)] = &[
    ("LinearAttention", linear_attention),
    ("CausalConvWithState", causal_conv_with_state),
    ("SwiGLU", swiglu),
    ("TensorScatter", tensor_scatter),
];

/// The dims of `t`, which must have rank `rank` (`what` names it in the error).
fn dims_of<const N: usize>(t: &Tensor, what: &str) -> Result<[usize; N]> {
    t.dims().try_into().map_err(|_| {
        Error::shape(
            "onnx",
            format!("{what} must have rank {N}, gets {}", t.shape()),
        )
    })
}

/// `want` or an error saying what `what` should be and is.
fn check_dims(t: &Tensor, want: &[usize], what: &str) -> Result<()> {
    if t.dims() == want {
        Ok(())
    } else {
        Err(Error::shape(
            "onnx",
            format!("{what} must have shape {want:?}, gets {}", t.shape()),
        ))
    }
}

/// LinearAttention: per step t, the state S (B, H_kv, d_k, d_v) is updated and read as
///
/// - `linear`: `S += k ⊗ v`
/// - `gated`: `S = exp(g) S + k ⊗ v`
/// - `delta`: `S += k ⊗ β (v - Sᵀk)`
/// - `gated_delta` (the default): `S = exp(g) S`, then as `delta`
///
/// and `o = scale · qᵀS`, with `q_num_heads / kv_num_heads` query heads reading each state.
/// The steps run one after another (a few kiln ops each), as decoding does.
fn linear_attention(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let (q, k, v) = (c.tensor(a, 0)?, c.tensor(a, 1)?, c.tensor(a, 2)?);
    let heads = |name| -> Result<usize> {
        match c.int(name, 0)? {
            h if h > 0 => Ok(h as usize),
            h => Err(Error::invalid(
                "onnx",
                format!("{name} must be a positive head count, gets {h}"),
            )),
        }
    };
    let (hq, hkv) = (heads("q_num_heads")?, heads("kv_num_heads")?);
    if hq % hkv != 0 {
        return Err(Error::invalid(
            "onnx",
            format!("q_num_heads {hq} is not a multiple of kv_num_heads {hkv}"),
        ));
    }
    let (gated, delta) = match c.string("update_rule", "gated_delta")?.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        other => {
            return Err(c.unsupported(format!(
                "update_rule '{other}' (expects linear, gated, delta or gated_delta)"
            )));
        }
    };
    let [b, t, qw] = dims_of(&q, "query")?;
    let [_, _, vw] = dims_of(&v, "value")?;
    let (dk, dv, g) = (qw / hq, vw / hkv, hq / hkv);
    check_dims(&q, &[b, t, hq * dk], "query (B, T, q_num_heads * d_k)")?;
    check_dims(&k, &[b, t, hkv * dk], "key (B, T, kv_num_heads * d_k)")?;
    check_dims(&v, &[b, t, hkv * dv], "value (B, T, kv_num_heads * d_v)")?;
    let dt = q.dtype();
    let wd = work_dtype(dt);
    let scale = match c.node.attr_float("scale").map_err(crate::model::onnx_err)? {
        Some(s) if s != 0.0 => f64::from(s),
        _ => 1.0 / libm::sqrt(dk as f64),
    };
    // (B, T, H, D) -> (B, H, T, D); the query's heads grouped by the state they read
    let heads_first = |x: &Tensor, h: usize| -> Result<Tensor> {
        x.cast(wd)?
            .reshape_infer(&[b as isize, t as isize, h as isize, -1])?
            .permute(&[0, 2, 1, 3])
    };
    let q = q
        .cast(wd)?
        .reshape([b, t, hkv, g, dk])?
        .permute(&[0, 2, 1, 3, 4])?;
    let (k, v) = (heads_first(&k, hkv)?, heads_first(&v, hkv)?);
    // log-space decay per key row: (B, T, H_kv * d_k) or one per head (B, T, H_kv)
    let decay = match (gated, c.optional(a, 4)) {
        (false, _) => None,
        (true, Some(d)) => {
            let d = d.tensor(c.device, "decay")?;
            let [_, _, dw] = dims_of(&d, "decay")?;
            if d.dims()[..2] != [b, t] || (dw != hkv * dk && dw != hkv) {
                return Err(Error::shape(
                    "onnx",
                    format!(
                        "decay must have shape [{b}, {t}, {}] or [{b}, {t}, {hkv}], gets {}",
                        hkv * dk,
                        d.shape()
                    ),
                ));
            }
            Some(heads_first(&d, hkv)?)
        }
        (true, None) => return Err(Error::invalid("onnx", "a gated update_rule needs decay")),
    };
    // the write strength per head (B, T, H_kv) or shared (B, T, 1), as (B, H, T, 1)
    let beta = match (delta, c.optional(a, 5)) {
        (false, _) => None,
        (true, Some(bt)) => {
            let bt = bt.tensor(c.device, "beta")?;
            let [_, _, bw] = dims_of(&bt, "beta")?;
            if bt.dims()[..2] != [b, t] || (bw != hkv && bw != 1) {
                return Err(Error::shape(
                    "onnx",
                    format!(
                        "beta must have shape [{b}, {t}, {hkv}] or [{b}, {t}, 1], gets {}",
                        bt.shape()
                    ),
                ));
            }
            Some(
                bt.cast(wd)?
                    .reshape([b, t, bw, 1])?
                    .permute(&[0, 2, 1, 3])?,
            )
        }
        (true, None) => return Err(Error::invalid("onnx", "a delta update_rule needs beta")),
    };
    let past = c
        .optional(a, 3)
        .map(|p| p.tensor(c.device, "past_state"))
        .transpose()?;
    let state_dt = past.as_ref().map_or(dt, Tensor::dtype);
    let mut state = match past {
        Some(p) => {
            check_dims(&p, &[b, hkv, dk, dv], "past_state (B, H_kv, d_k, d_v)")?;
            p.cast(wd)?
        }
        None => Tensor::zeros([b, hkv, dk, dv], wd, c.device)?,
    };
    let mut outs = Vec::with_capacity(t);
    for step in 0..t {
        let at = |x: &Tensor| x.narrow(2, step, 1);
        let k_row = at(&k)?; // (B, H, 1, d_k)
        let v_row = at(&v)?; // (B, H, 1, d_v)
        if let Some(d) = &decay {
            state = state.mul(&at(d)?.exp()?.transpose(-1, -2)?)?;
        }
        let write = match &beta {
            Some(bt) => at(bt)?.mul(&v_row.sub(&k_row.matmul(&state)?)?)?,
            None => v_row,
        };
        state = state.add(&k_row.transpose(-1, -2)?.matmul(&write)?)?;
        let q_t = at(&q)?.reshape([b, hkv, g, dk])?;
        outs.push(q_t.matmul(&state)?.reshape([b, 1, hq * dv])?);
    }
    let out = if outs.is_empty() {
        Tensor::zeros([b, 0, hq * dv], wd, c.device)?
    } else {
        Tensor::concat(&outs, 1)?.mul_scalar(scale)?
    };
    Ok(vec![
        Value::Tensor(out.cast(dt)?),
        Value::Tensor(state.cast(state_dt)?),
    ])
}

/// CausalConvWithState: a depthwise convolution of (B, C, L) over the last `k - 1` positions
/// of the previous call (`past_state`, zeros without it) and the input, with an optional
/// SiLU; `present_state` is the last `k - 1` positions of that padded input.
fn causal_conv_with_state(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let (x, w) = (c.tensor(a, 0)?, c.tensor(a, 1)?);
    let [b, ch, len] = dims_of(&x, "input (B, C, L)")?;
    let [_, _, k] = dims_of(&w, "weight (C, 1, k)")?;
    check_dims(&w, &[ch, 1, k], "weight (C, 1, k)")?;
    if k == 0 {
        return Err(Error::shape("onnx", "weight has kernel size 0"));
    }
    let silu = match c.string("activation", "none")?.as_str() {
        "none" => false,
        "silu" | "swish" => true,
        other => {
            return Err(c.unsupported(format!(
                "activation '{other}' (expects none, silu or swish)"
            )));
        }
    };
    let dt = x.dtype();
    let past = match c.optional(a, 3) {
        Some(p) => {
            let p = p.tensor(c.device, "past_state")?;
            check_dims(&p, &[b, ch, k - 1], "past_state (B, C, k - 1)")?;
            p.cast(dt)?
        }
        None => Tensor::zeros([b, ch, k - 1], dt, c.device)?,
    };
    let padded = if k > 1 {
        Tensor::concat(&[past, x], 2)?
    } else {
        x
    };
    let present = padded.narrow(2, len, k - 1)?;
    let wd = work_dtype(dt);
    let bias = match c.optional(a, 2) {
        Some(bias) => {
            let bias = bias.tensor(c.device, "bias")?;
            check_dims(&bias, &[ch], "bias (C)")?;
            Some(bias.cast(wd)?)
        }
        None => None,
    };
    let params = Conv2dParams {
        groups: ch,
        ..Default::default()
    };
    let y = padded
        .cast(wd)?
        .reshape([b, ch, 1, len + k - 1])?
        .conv2d(&w.cast(wd)?.reshape([ch, 1, 1, k])?, bias.as_ref(), params)?
        .reshape([b, ch, len])?;
    let y = if silu { y.silu()? } else { y };
    Ok(vec![Value::Tensor(y.cast(dt)?), Value::Tensor(present)])
}

/// SwiGLU: `Swish(A) * B` for `A` and `B` of one shape.
fn swiglu(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let (gate, value) = (c.tensor(a, 0)?, c.tensor(a, 1)?);
    check_dims(&value, gate.dims(), "B (the shape of A)")?;
    let alpha = f64::from(c.float("alpha", 1.0)?);
    let dt = gate.dtype();
    let wd = work_dtype(dt);
    let y = super::elementwise::swish_of(&gate.cast(wd)?, alpha)?.mul(&value.cast(wd)?)?;
    one(y.cast(dt)?)
}

/// TensorScatter: `update` written into `past_cache` along the sequence `axis` at each batch
/// row's `write_indices` (0 without them), wrapping around in `circular` mode. Each cache
/// position reads the update position `s - write_index` (mod the cache length when circular)
/// where that lies in the update, and keeps its past value elsewhere.
fn tensor_scatter(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let (past, update) = (c.tensor(a, 0)?, c.tensor(a, 1)?);
    let circular = match c.string("mode", "linear")?.as_str() {
        "linear" => false,
        "circular" => true,
        other => {
            return Err(c.unsupported(format!("mode '{other}' (expects linear or circular)")));
        }
    };
    let rank = past.rank();
    let axis = super::axis(c.int("axis", -2)?, rank)?;
    if axis == 0 {
        return Err(Error::invalid(
            "onnx",
            "axis 0 is the batch axis, not a sequence axis",
        ));
    }
    let (max, len) = (
        past.dims()[axis],
        update.dims().get(axis).copied().unwrap_or(0),
    );
    let mut want = past.dims().to_vec();
    want[axis] = len;
    if update.dims() != want.as_slice() || len > max {
        return Err(Error::shape(
            "onnx",
            format!(
                "update must have the shape of past_cache {} outside axis {axis}, with at most {max} there, gets {}",
                past.shape(),
                update.shape()
            ),
        ));
    }
    if len == 0 {
        return one(past);
    }
    let batch = past.dims()[0];
    let mut w = match c.optional(a, 2) {
        Some(w) => w.tensor(c.device, "write_indices")?.cast(DType::I32)?,
        None => Tensor::zeros([batch], DType::I32, c.device)?,
    };
    check_dims(&w, &[batch], "write_indices (batch_size)")?;
    let m = max as f64;
    if circular {
        // integer division truncates: w mod max for w >= 0
        w = w.sub(&w.div_scalar(m)?.mul_scalar(m)?)?;
    }
    let s = Tensor::arange(0.0, m, 1.0, DType::I32, c.device)?.reshape([1, max])?;
    let mut rel = s.sub(&w.reshape([batch, 1])?)?;
    if circular {
        rel = rel
            .lt(&rel.scalar_like(0.0)?)?
            .where_cond(&rel.add_scalar(m)?, &rel)?;
    }
    let inside = rel.ge(&rel.scalar_like(0.0)?)?;
    let inside = inside.where_cond(&rel.lt(&rel.scalar_like(len as f64)?)?, &inside)?;
    let src = rel.clamp(0.0, (len - 1) as f64)?;
    // (B, max) laid along axes 0 and `axis`, broadcast over the rest
    let mut view = vec![1; rank];
    view[0] = batch;
    view[axis] = max;
    let src = src.reshape(view.clone())?.expand(past.shape().clone())?;
    let inside = inside.reshape(view)?.expand(past.shape().clone())?;
    one(inside.where_cond(&update.gather(axis as isize, &src)?, &past)?)
}
