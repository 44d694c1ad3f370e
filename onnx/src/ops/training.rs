//! Ops of the `ai.onnx.preview.training` domain: one step of the optimizers `Adagrad`, `Adam`
//! and `Momentum`, compositions of elementwise ops. Their inputs are the learning rate `R`, the
//! update count `T`, then `k` groups of `n` tensors each (`X...`, `G...`, then the optimizer's
//! state); the outputs are the `n` new `X`s, then the new state, group by group.
//!
//! `Gradient` differentiates part of its own graph: at load, [`attach_forward`] gives the node
//! that part as a graph attribute, which the op reruns with kiln's autodiff.

use super::{Ctx, OpFn, Outputs, host_values, work_dtype};
use crate::model::{mentions, onnx_err};
use crate::proto::attribute_proto::AttributeType;
use crate::proto::{AttributeProto, GraphProto, NodeProto, ValueInfoProto};
use crate::value::Value;
use crate::{NodeAttrs, OnnxError};
use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use kiln_core::{Error, Result, Tensor};

pub(super) const OPS: &[(&str, OpFn)] = &[
    ("Adagrad", adagrad),
    ("Adam", adam),
    ("Momentum", momentum),
    ("Gradient", gradient),
];

/// The graph attribute [`attach_forward`] gives a `Gradient` node (a name no ONNX op has).
const FORWARD: &str = "kiln.forward";

/// Whether `node` is an `ai.onnx.preview.training` `Gradient`.
pub(crate) fn is_gradient(node: &NodeProto) -> bool {
    node.domain() == "ai.onnx.preview.training" && node.op_type() == "Gradient"
}

/// Gives `Gradient` node `node` its forward pass as graph attribute [`FORWARD`]: the nodes of
/// `ahead` (those before it in its graph, as written: constant folding must not cut the path
/// from `xs`) that its `y` depends on, with `xs` and `zs` as the graph's inputs and `y` as its
/// output. Values the nodes read from elsewhere come from the enclosing scope; `infos` are the
/// enclosing graph's declared values, whose types the forward graph keeps.
pub(crate) fn attach_forward(
    node: &mut NodeProto,
    ahead: &[NodeProto],
    infos: &[ValueInfoProto],
) -> Result<()> {
    let names = |a: &str| -> core::result::Result<Vec<String>, OnnxError> {
        let v = node.attr_strings(a)?.unwrap_or_default();
        Ok(v.into_iter().map(String::from).collect())
    };
    let (xs, zs) = (
        names("xs").map_err(onnx_err)?,
        names("zs").map_err(onnx_err)?,
    );
    let y = node
        .attr_string("y")
        .map_err(onnx_err)?
        .ok_or_else(|| Error::invalid("onnx", "Gradient expects attribute 'y'"))?
        .to_string();
    let fed: Vec<String> = xs.into_iter().chain(zs).collect();
    // back from y to the nodes it depends on, stopping at the fed values
    let mut needed = BTreeSet::from([y.clone()]);
    let mut picked = Vec::new();
    for n in ahead.iter().rev() {
        if n.output.iter().any(|o| needed.contains(o)) {
            let mut read = Vec::new();
            mentions(n, &mut read);
            needed.extend(
                read.into_iter()
                    .filter(|r| !r.is_empty() && !fed.iter().any(|f| f == r))
                    .map(String::from),
            );
            picked.push(n.clone());
        }
    }
    picked.reverse();
    let info = |name: &str| {
        infos
            .iter()
            .find(|v| v.name() == name)
            .cloned()
            .unwrap_or_else(|| ValueInfoProto {
                name: Some(name.into()),
                ..Default::default()
            })
    };
    let value_info = picked
        .iter()
        .flat_map(|n| &n.output)
        .filter(|o| infos.iter().any(|v| v.name() == o.as_str()))
        .map(|o| info(o))
        .collect();
    let forward = GraphProto {
        name: Some(FORWARD.into()),
        input: fed.iter().map(|f| info(f)).collect(),
        output: alloc::vec![info(&y)],
        node: picked,
        value_info,
        ..Default::default()
    };
    node.attribute.push(AttributeProto {
        name: Some(FORWARD.into()),
        r#type: Some(AttributeType::Graph as i32),
        g: Some(forward),
        ..Default::default()
    });
    Ok(())
}

/// Gradient: the gradients of `y` (of the sum of its elements, for a non-scalar `y`) with
/// respect to `xs`, by reverse-mode autodiff through the forward graph [`attach_forward`]
/// made, run on the node's inputs (`xs`, then `zs`) with the `xs` as leaves. A gradient that
/// `y` does not depend on is zeros. Under tracing it is an error: the backward pass records
/// no history, so a traced model would hold these gradients as constants.
fn gradient(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    if kiln_core::autodiff::is_tracing() {
        return Err(c.unsupported("Gradient in a traced model"));
    }
    let xs = c
        .node
        .attr_strings("xs")
        .map_err(onnx_err)?
        .unwrap_or_default()
        .len();
    let mut leaves = Vec::with_capacity(xs);
    let mut inputs = Vec::with_capacity(a.len());
    for (i, v) in a.iter().enumerate() {
        if i < xs {
            let t = c.tensor(a, i)?;
            if !t.dtype().is_float() {
                return Err(Error::unsupported(
                    "onnx",
                    format!("Gradient with respect to input {i}, of {}", t.dtype()),
                ));
            }
            let leaf = t.detach().require_grad();
            leaves.push(leaf.clone());
            inputs.push(Value::Tensor(leaf));
        } else {
            inputs.push(v.clone());
        }
    }
    if leaves.len() != xs {
        return Err(Error::invalid(
            "onnx",
            format!("Gradient has {xs} xs but {} inputs", a.len()),
        ));
    }
    let y = c.run_graph(FORWARD, inputs)?;
    let y = y
        .first()
        .ok_or_else(|| Error::invalid("onnx", "Gradient's forward graph has no output"))?
        .tensor(c.device, "Gradient's y")?;
    let grads = if y.requires_grad() {
        Some(y.backward()?)
    } else {
        None
    };
    leaves
        .iter()
        .map(|x| {
            let g = match grads.as_ref().and_then(|g| g.get(x)) {
                Some(g) => g.detach(),
                None => x.detach().zeros_like()?,
            };
            Ok(Value::Tensor(g))
        })
        .collect()
}

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
