//! Ops of the `ai.onnx.preview.training` domain: one step of the optimizers `Adagrad`, `Adam`
//! and `Momentum`, compositions of elementwise ops. Their inputs are the learning rate `R`, the
//! update count `T`, then `k` groups of `n` tensors each (`X...`, `G...`, then the optimizer's
//! state); the outputs are the `n` new `X`s, then the new state, group by group.

use super::{Ctx, OpFn, Outputs, host_values, work_dtype};
use crate::NodeAttrs;
use crate::model::onnx_err;
use crate::value::Value;
use alloc::format;
use alloc::vec::Vec;
use kiln_core::{Error, Result, Tensor};

pub(super) const OPS: &[(&str, OpFn)] =
    &[("Adagrad", adagrad), ("Adam", adam), ("Momentum", momentum)];

/// The inputs of an optimizer step, every tensor in the dtype the step computes in.
struct Step {
    /// The learning rate, a scalar.
    r: Tensor,
    /// The update count.
    t: f64,
    /// `groups[g][i]`: tensor `i` of group `g` (`X`, `G`, then the state).
    groups: Vec<Vec<Tensor>>,
}

impl Step {
    /// Reads `R`, `T` and `k` groups of tensors: each group as long as the others, each tensor
    /// of a float dtype and of its `X`'s shape.
    fn read(c: &Ctx<'_>, a: &[Value], k: usize) -> Result<Step> {
        let n = a.len().saturating_sub(2) / k;
        if n == 0 || a.len() != 2 + k * n {
            return Err(Error::invalid(
                "onnx",
                format!(
                    "expects R, T and {k} groups of as many tensors, gets {} inputs",
                    a.len()
                ),
            ));
        }
        let r = c.tensor(a, 0)?;
        if r.numel() != 1 {
            return Err(Error::shape(
                "onnx",
                format!("the learning rate R is a scalar, gets {}", r.shape()),
            ));
        }
        let t = host_values(c.arg(a, 1)?, "the update count T")?;
        let [t] = t[..] else {
            return Err(Error::shape(
                "onnx",
                format!("the update count T is a scalar, gets {} values", t.len()),
            ));
        };
        let mut groups = Vec::with_capacity(k);
        for g in 0..k {
            let mut group = Vec::with_capacity(n);
            for i in 0..n {
                let at = 2 + g * n + i;
                let v = c.tensor(a, at)?;
                if !v.dtype().is_float() {
                    return Err(Error::unsupported(
                        "onnx",
                        format!("input {at}: expects floats, gets {}", v.dtype()),
                    ));
                }
                if let Some(x) = groups.first().map(|xs: &Vec<Tensor>| &xs[i])
                    && v.dims() != x.dims()
                {
                    return Err(Error::shape(
                        "onnx",
                        format!(
                            "input {at}: expects the shape of input {}, {}, gets {}",
                            2 + i,
                            x.shape(),
                            v.shape()
                        ),
                    ));
                }
                group.push(v.cast(work_dtype(v.dtype()))?);
            }
            groups.push(group);
        }
        let r = r.reshape(Vec::<usize>::new())?.cast(groups[0][0].dtype())?;
        Ok(Step { r, t, groups })
    }

    /// The `n` outputs of group `g`'s new values, each in its input's dtype.
    fn outputs(a: &[Value], new: Vec<Vec<Tensor>>) -> Outputs {
        let n = new.first().map_or(0, Vec::len);
        let mut out = Vec::with_capacity(new.len() * n);
        for (g, group) in new.into_iter().enumerate() {
            for (i, v) in group.into_iter().enumerate() {
                let dt = match &a[2 + g * n + i] {
                    Value::Tensor(t) | Value::Narrow { tensor: t, .. } => t.dtype(),
                    _ => v.dtype(),
                };
                out.push(Value::Tensor(v.cast(dt)?));
            }
        }
        Ok(out)
    }

    /// `R` as a scalar of `x`'s dtype times `f`.
    fn rate(&self, x: &Tensor, f: f64) -> Result<Tensor> {
        self.r.cast(x.dtype())?.mul_scalar(f)
    }
}

/// `G + norm * X`: the gradient with that of the L2 penalty `norm / 2 * ||X||²` added.
fn regularized(x: &Tensor, g: &Tensor, norm: f64) -> Result<Tensor> {
    g.add(&x.mul_scalar(norm)?)
}

/// Adagrad: `H += G²`, `X -= R / (1 + T * decay_factor) * G / (sqrt(H) + epsilon)`.
fn adagrad(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let decay = f64::from(c.float("decay_factor", 0.0)?);
    let eps = f64::from(c.float("epsilon", 1e-6)?);
    let norm = f64::from(c.float("norm_coefficient", 0.0)?);
    let s = Step::read(c, a, 3)?;
    let (mut xs, mut hs) = (Vec::new(), Vec::new());
    for ((x, g), h) in s.groups[0].iter().zip(&s.groups[1]).zip(&s.groups[2]) {
        let g = regularized(x, g, norm)?;
        let h = h.add(&g.mul(&g)?)?;
        let step = g.div(&h.sqrt()?.add_scalar(eps)?)?;
        let r = s.rate(x, 1.0 / (1.0 + s.t * decay))?;
        xs.push(x.sub(&step.mul(&r)?)?);
        hs.push(h);
    }
    Step::outputs(a, alloc::vec![xs, hs])
}

/// Adam: the averages `V` of the gradient and `H` of its square (weights `alpha`, `beta`),
/// `X -= R' * V / (sqrt(H) + epsilon)` with `R'` corrected for the averages' bias toward zero
/// after `T > 0` steps, then `X` scaled by `1 - norm_coefficient_post`.
fn adam(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let alpha = f64::from(c.float("alpha", 0.9)?);
    let beta = f64::from(c.float("beta", 0.999)?);
    let eps = f64::from(c.float("epsilon", 1e-6)?);
    let norm = f64::from(c.float("norm_coefficient", 0.0)?);
    let post = f64::from(c.float("norm_coefficient_post", 0.0)?);
    let s = Step::read(c, a, 4)?;
    let corrected = if s.t > 0.0 {
        libm::sqrt(1.0 - libm::pow(beta, s.t)) / (1.0 - libm::pow(alpha, s.t))
    } else {
        1.0
    };
    let (mut xs, mut vs, mut hs) = (Vec::new(), Vec::new(), Vec::new());
    let state = s.groups[2].iter().zip(&s.groups[3]);
    for ((x, g), (v, h)) in s.groups[0].iter().zip(&s.groups[1]).zip(state) {
        let g = regularized(x, g, norm)?;
        let v = v.mul_scalar(alpha)?.add(&g.mul_scalar(1.0 - alpha)?)?;
        let h = h
            .mul_scalar(beta)?
            .add(&g.mul(&g)?.mul_scalar(1.0 - beta)?)?;
        let step = v.div(&h.sqrt()?.add_scalar(eps)?)?;
        let x = x.sub(&step.mul(&s.rate(x, corrected)?)?)?;
        xs.push(x.mul_scalar(1.0 - post)?);
        vs.push(v);
        hs.push(h);
    }
    Step::outputs(a, alloc::vec![xs, vs, hs])
}

/// Momentum: `V = alpha * V + beta * G` (`beta` is 1 at `T = 0`), then `X -= R * V`
/// (`standard`) or `X -= R * (G + alpha * V)` (`nesterov`). Every attribute is required.
fn momentum(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let required = |name: &str| -> Result<f64> {
        let v = c.node.attr_float(name).map_err(onnx_err)?;
        v.map(f64::from)
            .ok_or_else(|| Error::invalid("onnx", format!("Momentum expects attribute '{name}'")))
    };
    let (alpha, beta, norm) = (
        required("alpha")?,
        required("beta")?,
        required("norm_coefficient")?,
    );
    let nesterov = match c.string("mode", "")?.as_str() {
        "standard" => false,
        "nesterov" => true,
        m => {
            return Err(c.unsupported(format!(
                "Momentum mode '{m}' (expects 'standard' or 'nesterov')"
            )));
        }
    };
    let s = Step::read(c, a, 3)?;
    let beta = if s.t > 0.0 { beta } else { 1.0 };
    let (mut xs, mut vs) = (Vec::new(), Vec::new());
    for ((x, g), v) in s.groups[0].iter().zip(&s.groups[1]).zip(&s.groups[2]) {
        let g = regularized(x, g, norm)?;
        let v = v.mul_scalar(alpha)?.add(&g.mul_scalar(beta)?)?;
        let step = if nesterov {
            g.add(&v.mul_scalar(alpha)?)?
        } else {
            v.clone()
        };
        xs.push(x.sub(&step.mul(&s.rate(x, 1.0)?)?)?);
        vs.push(v);
    }
    Step::outputs(a, alloc::vec![xs, vs])
}
