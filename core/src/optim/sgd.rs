//! Stochastic gradient descent.

use super::{Optimizer, OptimizerState, Slots, for_each_param, parse_config, take_slots};
use crate::Result;
use crate::autodiff::Gradients;
use crate::nn::Module;
use alloc::collections::BTreeMap;
use alloc::string::String;
use serde::{Deserialize, Serialize};

/// SGD with momentum, Nesterov momentum and L2 weight decay, as `torch.optim.SGD`
/// (dampening 0):
/// `g = grad + wd * p; buf = momentum * buf + g (buf = g on the first step);
/// g = nesterov ? g + momentum * buf : buf; p -= lr * g`.
#[derive(Clone, Debug)]
pub struct Sgd {
    cfg: SgdConfig,
    slots: Slots,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct SgdConfig {
    kind: String,
    lr: f64,
    momentum: f64,
    nesterov: bool,
    weight_decay: f64,
}

#[derive(Serialize, Deserialize)]
struct SgdSaved {
    #[serde(flatten)]
    cfg: SgdConfig,
    steps: BTreeMap<String, u64>,
}

impl Sgd {
    /// Plain SGD with learning rate `lr`.
    pub fn new(lr: f64) -> Self {
        Sgd {
            cfg: SgdConfig {
                kind: "sgd".into(),
                lr,
                momentum: 0.0,
                nesterov: false,
                weight_decay: 0.0,
            },
            slots: Slots::default(),
        }
    }
    /// With momentum (`nesterov` for Nesterov's variant).
    pub fn momentum(mut self, momentum: f64, nesterov: bool) -> Self {
        self.cfg.momentum = momentum;
        self.cfg.nesterov = nesterov;
        self
    }
    /// With L2 weight decay added to the gradient.
    pub fn weight_decay(mut self, wd: f64) -> Self {
        self.cfg.weight_decay = wd;
        self
    }
}

impl Optimizer for Sgd {
    fn step(&mut self, model: &mut dyn Module, grads: &Gradients) -> Result<()> {
        let SgdConfig {
            lr,
            momentum,
            nesterov,
            weight_decay,
            ..
        } = self.cfg;
        let slots = &mut self.slots;
        for_each_param(model, grads, "Sgd::step", |name, p, g| {
            let mut g = g.clone();
            if weight_decay != 0.0 {
                g = g.add(&p.mul_scalar(weight_decay)?)?;
            }
            slots.bump(name);
            if momentum != 0.0 {
                let buf = match slots.get(name, "momentum_buffer") {
                    Some(b) => b.mul_scalar(momentum)?.add(&g)?,
                    None => g.clone(),
                };
                slots.set(name, "momentum_buffer", buf.clone());
                g = if nesterov {
                    g.add(&buf.mul_scalar(momentum)?)?
                } else {
                    buf
                };
            }
            p.sub(&g.mul_scalar(lr)?)
        })
    }
    fn lr(&self) -> f64 {
        self.cfg.lr
    }
    fn set_lr(&mut self, lr: f64) {
        self.cfg.lr = lr;
    }
    fn state(&self) -> OptimizerState {
        let saved = SgdSaved {
            cfg: self.cfg.clone(),
            steps: self.slots.steps.clone(),
        };
        OptimizerState {
            tensors: self.slots.tensors.clone(),
            config: serde_json::to_string(&saved).unwrap_or_default(),
        }
    }
    fn load_state(&mut self, state: &OptimizerState) -> Result<()> {
        let saved: SgdSaved = parse_config(&state.config, "sgd", "Sgd::load_state")?;
        self.slots = take_slots(state, saved.steps, &["momentum_buffer"], "Sgd::load_state")?;
        self.cfg = saved.cfg;
        Ok(())
    }
}
