//! Adam and AdamW.

use super::{Optimizer, OptimizerState, Slots, for_each_param, parse_config, take_slots};
use crate::autodiff::Gradients;
use crate::nn::Module;
use crate::{AdamParams, Error, Op, Result, Tensor};
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec;
use serde::{Deserialize, Serialize};

/// Adam (`torch.optim.Adam`, L2 weight decay added to the gradient) or AdamW
/// (`torch.optim.AdamW`, decoupled decay `p *= 1 - lr * wd`):
/// `m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
/// p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)`.
#[derive(Clone, Debug)]
pub struct Adam {
    cfg: AdamConfig,
    slots: Slots,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct AdamConfig {
    kind: String,
    lr: f64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    weight_decay: f64,
}

#[derive(Serialize, Deserialize)]
struct AdamSaved {
    #[serde(flatten)]
    cfg: AdamConfig,
    steps: BTreeMap<String, u64>,
}

impl Adam {
    /// Adam with PyTorch's defaults (betas 0.9/0.999, eps 1e-8, no weight decay).
    pub fn new(lr: f64) -> Self {
        Self::with_kind("adam", lr, 0.0)
    }
    /// AdamW with decoupled weight decay `weight_decay` (PyTorch's default is 0.01).
    pub fn adamw(lr: f64, weight_decay: f64) -> Self {
        Self::with_kind("adamw", lr, weight_decay)
    }
    fn with_kind(kind: &str, lr: f64, weight_decay: f64) -> Self {
        Adam {
            cfg: AdamConfig {
                kind: kind.into(),
                lr,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay,
            },
            slots: Slots::default(),
        }
    }
    /// Sets the moment decay rates.
    pub fn betas(mut self, beta1: f64, beta2: f64) -> Self {
        self.cfg.beta1 = beta1;
        self.cfg.beta2 = beta2;
        self
    }
    /// Sets the denominator's epsilon.
    pub fn eps(mut self, eps: f64) -> Self {
        self.cfg.eps = eps;
        self
    }
    /// Sets the weight decay (L2 for Adam, decoupled for AdamW).
    pub fn weight_decay(mut self, wd: f64) -> Self {
        self.cfg.weight_decay = wd;
        self
    }
    fn decoupled(&self) -> bool {
        self.cfg.kind == "adamw"
    }
}

impl Adam {
    /// One step, the gradients multiplied by `scale` inside the update where there is one.
    fn update(
        &mut self,
        model: &mut dyn Module,
        grads: &Gradients,
        scale: Option<&Tensor>,
    ) -> Result<()> {
        let decoupled = self.decoupled();
        let AdamConfig {
            lr,
            beta1,
            beta2,
            eps,
            weight_decay,
            ..
        } = self.cfg;
        let slots = &mut self.slots;
        for_each_param(model, grads, "Adam::step", |name, p, g| {
            let step = slots.bump(name);
            let m = slots
                .get(name, "exp_avg")
                .map_or_else(|| p.zeros_like(), |m| Ok(m.clone()))?;
            let v = (slots.get(name, "exp_avg_sq"))
                .map_or_else(|| p.zeros_like(), |v| Ok(v.clone()))?;
            let params = AdamParams {
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
                decoupled,
                step,
            };
            let scale = scale.map(|s| s.cast(p.dtype())).transpose()?;
            let mut ins = vec![p, g, &m, &v];
            ins.extend(&scale);
            // one pass over the inputs: the new param and both moments, stacked
            let out = Tensor::apply_many(Op::AdamStep(params), &ins, Some(2))?;
            let [p, moments]: [Tensor; 2] = out.try_into().map_err(|_| {
                Error::invalid("Adam::step", "adam_step returned a wrong number of outputs")
            })?;
            let half = |i: usize| moments.narrow(0, i, 1)?.reshape(p.dims());
            slots.set(name, "exp_avg", half(0)?);
            slots.set(name, "exp_avg_sq", half(1)?);
            Ok(p)
        })
    }
}

impl Optimizer for Adam {
    fn step(&mut self, model: &mut dyn Module, grads: &Gradients) -> Result<()> {
        self.update(model, grads, None)
    }
    /// The scale goes into the fused step: no pass over the gradients.
    fn step_scaled(
        &mut self,
        model: &mut dyn Module,
        grads: &Gradients,
        scale: &Tensor,
    ) -> Result<()> {
        self.update(model, grads, Some(scale))
    }
    fn lr(&self) -> f64 {
        self.cfg.lr
    }
    fn set_lr(&mut self, lr: f64) {
        self.cfg.lr = lr;
    }
    fn state(&self) -> OptimizerState {
        let saved = AdamSaved {
            cfg: self.cfg.clone(),
            steps: self.slots.steps.clone(),
        };
        OptimizerState {
            tensors: self.slots.tensors.clone(),
            config: serde_json::to_string(&saved).unwrap_or_default(),
        }
    }
    fn load_state(&mut self, state: &OptimizerState) -> Result<()> {
        let saved: AdamSaved = parse_config(&state.config, &self.cfg.kind, "Adam::load_state")?;
        self.slots = take_slots(
            state,
            saved.steps,
            &["exp_avg", "exp_avg_sq"],
            "Adam::load_state",
        )?;
        self.cfg = saved.cfg;
        Ok(())
    }
}
