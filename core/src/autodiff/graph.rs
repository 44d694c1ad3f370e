//! The backward pass: a topological walk of the recorded graph from an output to its leaves.

use super::{Gradients, rules, untracked};
use crate::{Error, Result, Tensor, TensorId};
use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;

impl Tensor {
    /// Computes the gradient of this tensor with respect to every leaf made with
    /// [`Tensor::require_grad`] that it depends on.
    ///
    /// The pass is seeded with ones of this tensor's shape, so for a non-scalar output it computes
    /// the gradient of the sum of its elements (as `y.sum().backward()` in PyTorch); use
    /// [`Tensor::backward_with`] for another seed. Leaves reached only through
    /// non-differentiable ops (comparisons, argmax, one-hot, integer casts) get no entry.
    ///
    /// Fails when this tensor does not require grad or is not a float tensor.
    ///
    /// ```
    /// use kiln_core::{Device, Tensor};
    /// let dev = Device::cpu();
    /// let x = Tensor::from_vec(vec![1.0f64, -2.0], [2], &dev)?.require_grad();
    /// let grads = x.exp()?.backward()?; // d/dx sum(e^x) = e^x
    /// let g = grads.get(&x).unwrap().to_vec::<f64>()?;
    /// assert!((g[0] - 1f64.exp()).abs() < 1e-12 && (g[1] - (-2f64).exp()).abs() < 1e-12);
    /// # Ok::<(), kiln_core::Error>(())
    /// ```
    pub fn backward(&self) -> Result<Gradients> {
        check_output(self)?;
        let seed = untracked(|| self.ones_like())?;
        self.backward_with(&seed)
    }

    /// Like [`Tensor::backward`], seeded with `grad` (the gradient of some loss with respect to
    /// this tensor), which must have this tensor's shape, dtype and device.
    pub fn backward_with(&self, grad: &Tensor) -> Result<Gradients> {
        check_output(self)?;
        if grad.shape() != self.shape() || grad.dtype() != self.dtype() {
            return Err(Error::shape(
                "backward",
                format!(
                    "the seed gradient must match the output {} {}, got {} {}",
                    self.dtype(),
                    self.shape(),
                    grad.dtype(),
                    grad.shape()
                ),
            ));
        }
        if !grad.device().same(self.device()) {
            return Err(Error::device(
                "backward",
                format!(
                    "the seed gradient is on {} but the output is on {}",
                    grad.device().name(),
                    self.device().name()
                ),
            ));
        }
        untracked(|| run_backward(self, grad.detach()))
    }
}

fn check_output(t: &Tensor) -> Result<()> {
    if !t.requires_grad() {
        return Err(Error::invalid(
            "backward",
            "the output does not require grad: no input was made with require_grad, or it was \
             computed under no_grad or detached",
        ));
    }
    if !t.dtype().is_float() {
        return Err(Error::dtype(
            "backward",
            format!("the output must be a float tensor, got {}", t.dtype()),
        ));
    }
    Ok(())
}

/// A leaf gradients are computed for.
fn is_grad_leaf(t: &Tensor) -> bool {
    t.node().is_none() && t.requires_grad()
}

/// Every tensor `root` depends on, each after all of its inputs. Iterative, so that long
/// chains (thousands of ops) cannot overflow the stack.
fn topological_order(root: &Tensor) -> Vec<Tensor> {
    let mut order = Vec::new();
    let mut entered = BTreeSet::new();
    // (tensor, its inputs are already on the stack)
    let mut stack = vec![(root.clone(), false)];
    while let Some((t, expanded)) = stack.pop() {
        if expanded {
            order.push(t);
            continue;
        }
        if !entered.insert(t.id()) {
            continue;
        }
        let inputs: Vec<Tensor> = t
            .node()
            .map(|n| n.inputs.iter().rev().cloned().collect())
            .unwrap_or_default();
        stack.push((t, true));
        stack.extend(
            inputs
                .into_iter()
                .filter(|i| !entered.contains(&i.id()))
                .map(|i| (i, false)),
        );
    }
    order
}

fn run_backward(root: &Tensor, seed: Tensor) -> Result<Gradients> {
    let order = topological_order(root);

    // Tensors on a float path to a grad leaf: only they need a gradient. Nodes kept by
    // `tracing` inside `no_grad` do not require grad and cut the path, as `no_grad` promises.
    let mut needed = BTreeSet::new();
    for t in &order {
        let on_path = is_grad_leaf(t)
            || t.node()
                .is_some_and(|n| n.inputs.iter().any(|i| needed.contains(&i.id())));
        if on_path && t.requires_grad() && t.dtype().is_float() {
            needed.insert(t.id());
        }
    }

    let mut pending: BTreeMap<TensorId, Tensor> = BTreeMap::new();
    pending.insert(root.id(), seed);
    let mut grads = Gradients::new();
    for t in order.iter().rev() {
        if !needed.contains(&t.id()) {
            continue;
        }
        // A tensor nothing flowed into (e.g. only reached through non-differentiable ops).
        let Some(grad) = pending.remove(&t.id()) else {
            continue;
        };
        let Some(node) = t.node() else {
            grads.insert(t, grad);
            continue;
        };
        let want: Vec<bool> = node
            .inputs
            .iter()
            .map(|i| needed.contains(&i.id()))
            .collect();
        if !want.contains(&true) {
            continue;
        }
        let input_grads = rules::input_grads(&node.op, &node.inputs, t, &grad, &want)
            .map_err(|e| e.context(format_args!("backward of {}", node.op.name())))?;
        // `grad` and everything computed from it can be freed before the next node.
        drop(grad);
        for ((input, g), w) in node.inputs.iter().zip(input_grads).zip(want) {
            let Some(g) = g.filter(|_| w) else { continue };
            if g.shape() != input.shape() || g.dtype() != input.dtype() {
                return Err(Error::shape(
                    format!("backward of {}", node.op.name()),
                    format!(
                        "the rule gave a {} {} gradient for a {} {} input (a kiln bug)",
                        g.dtype(),
                        g.shape(),
                        input.dtype(),
                        input.shape()
                    ),
                ));
            }
            let total = match pending.remove(&input.id()) {
                Some(prev) => prev.add(&g)?,
                None => g,
            };
            pending.insert(input.id(), total);
        }
    }
    Ok(grads)
}
