//! Optimizers (SGD, Adam, AdamW) with PyTorch's update rules, learning-rate schedules and
//! gradient clipping.
//!
//! Gradients are values ([`Gradients`] from [`Tensor::backward`]), so there is nothing to zero:
//! each step takes the gradients of one backward pass and replaces the parameters it updates,
//! matching them by name, under [`crate::autodiff::no_grad`].
//!
//! ```
//! use kiln_core::nn::{loss, Forward, Init, Linear};
//! use kiln_core::optim::{Adam, Optimizer};
//! use kiln_core::{Device, DType, Tensor};
//! let dev = Device::cpu();
//! let mut init = Init::new(&dev, 0);
//! let mut model = Linear::new(&mut init, 3, 1)?;
//! let mut opt = Adam::new(1e-2);
//! let x = Tensor::rand_normal([8, 3], 0.0, 1.0, 1, DType::F32, &dev)?;
//! let y = x.sum(&[-1], true)?;
//! let first = loss::mse(&model.forward(&x)?, &y)?.to_scalar()?;
//! for _ in 0..50 {
//!     let grads = loss::mse(&model.forward(&x)?, &y)?.backward()?;
//!     opt.step(&mut model, &grads)?;
//! }
//! assert!(loss::mse(&model.forward(&x)?, &y)?.to_scalar()? < first);
//! # Ok::<(), kiln_core::Error>(())
//! ```

mod adam;
mod schedule;
mod sgd;

pub use adam::Adam;
pub use schedule::{Constant, Cosine, Schedule, StepDecay, Warmup};
pub use sgd::Sgd;

use crate::autodiff::{Gradients, no_grad};
use crate::nn::Module;
use crate::{DType, Error, Result, Tensor};
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// Updates a module's trainable parameters from gradients.
pub trait Optimizer {
    /// One update of every trainable parameter of `model` that has a gradient in `grads`
    /// (parameters without one are left alone, as in PyTorch).
    fn step(&mut self, model: &mut dyn Module, grads: &Gradients) -> Result<()>;
    /// [`Optimizer::step`] with every gradient first multiplied by `scale`, a rank-0 tensor on
    /// the gradients' device (gradient clipping's coefficient from [`clip_coefficient`]). This
    /// default scales the gradients, then steps; [`Adam`] folds the scale into its fused update.
    ///
    /// ```
    /// use kiln_core::nn::{loss, Forward, Init, Linear};
    /// use kiln_core::optim::{clip_coefficient, Adam, Optimizer};
    /// use kiln_core::{Device, DType, Tensor};
    /// let dev = Device::cpu();
    /// let mut model = Linear::new(&mut Init::new(&dev, 0), 3, 1)?;
    /// let x = Tensor::rand_normal([8, 3], 0.0, 1.0, 1, DType::F32, &dev)?;
    /// let grads = loss::mse(&model.forward(&x)?, &x.sum(&[-1], true)?)?.backward()?;
    /// let (_norm, coef) = clip_coefficient(&model, &grads, 1.0)?;
    /// Adam::new(1e-2).step_scaled(&mut model, &grads, &coef)?;
    /// # Ok::<(), kiln_core::Error>(())
    /// ```
    fn step_scaled(
        &mut self,
        model: &mut dyn Module,
        grads: &Gradients,
        scale: &Tensor,
    ) -> Result<()> {
        let mut scaled = grads.clone();
        no_grad(|| scale_grads(model, &mut scaled, scale))?;
        self.step(model, &scaled)
    }
    /// The current learning rate.
    fn lr(&self) -> f64;
    /// Sets the learning rate (what a [`Schedule`] drives).
    fn set_lr(&mut self, lr: f64);
    /// The optimizer's state: per-parameter tensors named `<param>.<slot>` and a JSON string
    /// with its hyper-parameters and step counts, enough to resume exactly.
    fn state(&self) -> OptimizerState;
    /// Restores a state saved by [`Optimizer::state`] of the same kind of optimizer.
    fn load_state(&mut self, state: &OptimizerState) -> Result<()>;
}

/// A saved optimizer state (see [`Optimizer::state`]).
#[derive(Clone, Debug, Default)]
pub struct OptimizerState {
    /// per-parameter tensors such as `fc1.weight.exp_avg`
    pub tensors: BTreeMap<String, Tensor>,
    /// hyper-parameters and step counts as JSON
    pub config: String,
}

/// Per-parameter slots and step counts shared by the optimizers.
#[derive(Clone, Debug, Default)]
pub(crate) struct Slots {
    pub tensors: BTreeMap<String, Tensor>,
    pub steps: BTreeMap<String, u64>,
}

impl Slots {
    pub fn get(&self, param: &str, slot: &str) -> Option<&Tensor> {
        self.tensors.get(&format!("{param}.{slot}"))
    }
    pub fn set(&mut self, param: &str, slot: &str, t: Tensor) {
        self.tensors.insert(format!("{param}.{slot}"), t);
    }
    /// Increments and returns the step count of `param`.
    pub fn bump(&mut self, param: &str) -> u64 {
        let n = self.steps.entry(param.into()).or_insert(0);
        *n += 1;
        *n
    }
}

/// Runs `update(name, value, grad)` for each trainable parameter with a gradient and stores what
/// it returns, all under no_grad. The first error stops the step.
pub(crate) fn for_each_param(
    model: &mut dyn Module,
    grads: &Gradients,
    op: &'static str,
    mut update: impl FnMut(&str, &Tensor, &Tensor) -> Result<Tensor>,
) -> Result<()> {
    let mut failure = None;
    no_grad(|| {
        model.visit_mut(&mut |name, p| {
            if failure.is_some() || !p.is_trainable() {
                return;
            }
            let value = p.tensor();
            let Some(g) = grads.get(&value) else { return };
            let r = if g.shape() != value.shape() {
                Err(Error::shape(
                    op,
                    format!(
                        "{name}: gradient {} for a parameter of shape {}",
                        g.shape(),
                        value.shape()
                    ),
                ))
            } else {
                g.cast(value.dtype())
                    .and_then(|g| update(name, &value, &g.detach()))
            };
            match r {
                Ok(new) => p.set(new),
                Err(e) => failure = Some(e.context(format!("{op}: {name}"))),
            }
        })
    });
    failure.map_or(Ok(()), Err)
}

/// Scales the gradients of `model`'s parameters so that their joint L2 norm is at most
/// `max_norm` (as `torch.nn.utils.clip_grad_norm_`, coefficient `max_norm / (norm + 1e-6)`).
/// Returns the norm before clipping as a rank-0 f32 tensor; nothing is read back to the host.
pub fn clip_grad_norm(model: &dyn Module, grads: &mut Gradients, max_norm: f64) -> Result<Tensor> {
    let (norm, coef) = clip_coefficient(model, grads, max_norm)?;
    no_grad(|| scale_grads(model, grads, &coef))?;
    Ok(norm)
}

/// Multiplies the gradient of each trainable parameter of `model` by the rank-0 `scale`.
fn scale_grads(model: &dyn Module, grads: &mut Gradients, scale: &Tensor) -> Result<()> {
    for p in &graded_params(model, grads) {
        if let Some(g) = grads.get(p) {
            let scaled = g.mul(&scale.cast(g.dtype())?)?;
            grads.insert(p, scaled);
        }
    }
    Ok(())
}

/// The trainable parameters of `model` that have a gradient in `grads`, in visiting order.
fn graded_params(model: &dyn Module, grads: &Gradients) -> Vec<Tensor> {
    let mut params = Vec::new();
    model.visit(&mut |_, p| {
        let t = p.tensor();
        if p.is_trainable() && grads.contains(&t) {
            params.push(t);
        }
    });
    params
}

/// The joint L2 norm of the gradients of `model`'s trainable parameters, and the coefficient
/// [`clip_grad_norm`] would scale them by, `min(1, max_norm / (norm + 1e-6))`, both rank-0 f32
/// tensors on the gradients' device, for [`Optimizer::step_scaled`].
pub fn clip_coefficient(
    model: &dyn Module,
    grads: &Gradients,
    max_norm: f64,
) -> Result<(Tensor, Tensor)> {
    if max_norm.is_nan() || max_norm <= 0.0 {
        return Err(Error::invalid(
            "clip_grad_norm",
            format!("max_norm must be positive, got {max_norm}"),
        ));
    }
    let params = graded_params(model, grads);
    no_grad(|| {
        let mut squares = Vec::with_capacity(params.len());
        for p in &params {
            let Some(g) = grads.get(p) else { continue };
            let g = g.cast(DType::F32)?;
            squares.push(g.mul(&g)?.sum_all()?);
        }
        // added only once every square is there, so that a fusing device adds them in a few
        // kernels rather than one per parameter
        let mut squares = squares.into_iter();
        let Some(total) = squares
            .next()
            .map(|first| squares.try_fold(first, |t, sq| t.add(&sq)))
            .transpose()?
        else {
            let cpu = crate::Device::cpu();
            let norm = Tensor::scalar(0.0, DType::F32, &cpu)?;
            return Ok((norm, Tensor::scalar(1.0, DType::F32, &cpu)?));
        };
        let norm = total.sqrt()?;
        let coef = norm
            .add_scalar(1e-6)?
            .recip()?
            .mul_scalar(max_norm)?
            .clamp(0.0, 1.0)?;
        Ok((norm, coef))
    })
}

/// Parses an optimizer's JSON config after checking that it is of `kind`.
pub(crate) fn parse_config<T: serde::de::DeserializeOwned>(
    json: &str,
    kind: &str,
    op: &'static str,
) -> Result<T> {
    let bad = |e: &dyn core::fmt::Display| {
        Error::format(op, format!("bad optimizer state config ({e}): {json}"))
    };
    let value: serde_json::Value = serde_json::from_str(json).map_err(|e| bad(&e))?;
    let found = value.get("kind").and_then(|k| k.as_str()).unwrap_or("none");
    if found != kind {
        return Err(Error::format(
            op,
            format!("expected the state of a {kind} optimizer, found {found}"),
        ));
    }
    serde_json::from_value(value).map_err(|e| bad(&e))
}

/// Checks that a saved state's tensors match the slots this optimizer would create.
pub(crate) fn take_slots(
    state: &OptimizerState,
    steps: BTreeMap<String, u64>,
    slot_names: &[&str],
    op: &'static str,
) -> Result<Slots> {
    let mut slots = Slots {
        tensors: BTreeMap::new(),
        steps,
    };
    for (name, t) in &state.tensors {
        let known = slot_names.iter().any(|s| {
            name.strip_suffix(s)
                .and_then(|p| p.strip_suffix('.'))
                .is_some_and(|p| slots.steps.contains_key(p))
        });
        if !known {
            return Err(Error::format(
                op,
                format!("state tensor {name} belongs to no parameter with a step count"),
            ));
        }
        slots.tensors.insert(name.clone(), t.clone());
    }
    Ok(slots)
}
