//! Activations and dropout (no parameters).

use super::Forward;
use super::init::mix;
use crate::error::Num;
use crate::{Error, Result, Tensor};
use alloc::format;
use core::sync::atomic::{AtomicUsize, Ordering};

macro_rules! activation {
    ($($(#[$doc:meta])* $name:ident => $method:ident),* $(,)?) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, kiln_derive::Module)]
        pub struct $name;
        impl Forward for $name {
            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                x.$method()
            }
        }
    )*};
}

activation! {
    /// `max(x, 0)`
    ReLU => relu,
    /// GELU in its exact erf form (PyTorch's default)
    GELU => gelu,
    /// GELU in its tanh approximation (GPT-2's; PyTorch's `GELU(approximate="tanh")`)
    GELUTanh => gelu_tanh,
    /// `1 / (1 + e^-x)`
    Sigmoid => sigmoid,
    /// hyperbolic tangent
    Tanh => tanh,
}

/// Softmax along an axis.
#[derive(Clone, Copy, Debug, kiln_derive::Module)]
pub struct Softmax {
    /// the normalised axis (negative counts from the end)
    #[module(skip)]
    pub axis: isize,
}

impl Softmax {
    /// Softmax along `axis`.
    pub fn new(axis: isize) -> Self {
        Softmax { axis }
    }
}

impl Forward for Softmax {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.softmax(self.axis)
    }
}

/// Zeroes each element with probability `p` in training and scales the rest by `1/(1-p)`;
/// the identity in evaluation. The masks come from `seed` and a step counter, so a run is
/// reproducible: the n-th forward pass of a layer built with the same seed draws the same mask.
#[derive(Debug, kiln_derive::Module)]
pub struct Dropout {
    /// drop probability
    #[module(skip)]
    p: f64,
    #[module(skip)]
    seed: u64,
    /// forward passes made in training mode so far
    #[module(counter)]
    step: AtomicUsize,
    #[module(training)]
    training: bool,
}

impl Dropout {
    /// Dropout with probability `p` in `[0, 1]`, in training mode.
    pub fn new(p: f64, seed: u64) -> Result<Self> {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::invalid(
                "Dropout",
                format!("probability must be in [0, 1], got {}", Num(p)),
            ));
        }
        Ok(Dropout {
            p,
            seed,
            step: AtomicUsize::new(0),
            training: true,
        })
    }
    /// The drop probability.
    pub fn p(&self) -> f64 {
        self.p
    }
    /// Forward passes made in training mode so far (saved in checkpoints to resume exactly).
    pub fn steps(&self) -> usize {
        self.step.load(Ordering::Relaxed)
    }
    /// Sets the step counter (when resuming from a checkpoint).
    pub fn set_steps(&self, steps: usize) {
        self.step.store(steps, Ordering::Relaxed)
    }
}

impl Clone for Dropout {
    fn clone(&self) -> Self {
        Dropout {
            p: self.p,
            seed: self.seed,
            step: AtomicUsize::new(self.steps()),
            training: self.training,
        }
    }
}

impl Forward for Dropout {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if !self.training || self.p == 0.0 {
            return Ok(x.clone());
        }
        if self.p == 1.0 {
            return x.zeros_like();
        }
        let step = self.step.fetch_add(1, Ordering::Relaxed) as u64;
        let u = Tensor::rand_uniform(
            x.shape(),
            0.0,
            1.0,
            mix(self.seed, step),
            x.dtype(),
            x.device(),
        )?;
        let keep = u.ge(&u.scalar_like(self.p)?)?.cast(x.dtype())?;
        x.mul(&keep)?.mul_scalar(1.0 / (1.0 - self.p))
    }
}
