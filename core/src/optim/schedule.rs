//! Learning-rate schedules: pure functions of the step, so resuming needs only the step count.

use alloc::boxed::Box;

/// A learning rate for each step (0-based). Drive an optimizer with
/// `opt.set_lr(schedule.lr(step))` before each step.
///
/// ```
/// use kiln_core::optim::{Cosine, Schedule, Warmup};
/// let s = Warmup::new(10, Cosine::new(1e-3, 0.0, 100));
/// assert!(s.lr(0) < s.lr(9));
/// assert_eq!(s.lr(10), 1e-3);
/// assert!(s.lr(110).abs() < 1e-12);
/// ```
pub trait Schedule: Send + Sync {
    /// The learning rate at `step`.
    fn lr(&self, step: usize) -> f64;
}

/// The same rate at every step.
#[derive(Clone, Copy, Debug)]
pub struct Constant(pub f64);

impl Schedule for Constant {
    fn lr(&self, _step: usize) -> f64 {
        self.0
    }
}

/// `base * gamma^(step / every)` (`torch.optim.lr_scheduler.StepLR`).
#[derive(Clone, Copy, Debug)]
pub struct StepDecay {
    base: f64,
    every: usize,
    gamma: f64,
}

impl StepDecay {
    /// Multiplies `base` by `gamma` every `every` steps (`every` of 0 counts as 1).
    pub fn new(base: f64, every: usize, gamma: f64) -> Self {
        StepDecay {
            base,
            every: every.max(1),
            gamma,
        }
    }
}

impl Schedule for StepDecay {
    fn lr(&self, step: usize) -> f64 {
        self.base * libm::pow(self.gamma, (step / self.every) as f64)
    }
}

/// Cosine annealing from `base` to `min` over `total` steps, then `min`
/// (`torch.optim.lr_scheduler.CosineAnnealingLR` without restarts).
#[derive(Clone, Copy, Debug)]
pub struct Cosine {
    base: f64,
    min: f64,
    total: usize,
}

impl Cosine {
    /// Anneals `base` to `min` over `total` steps.
    pub fn new(base: f64, min: f64, total: usize) -> Self {
        Cosine {
            base,
            min,
            total: total.max(1),
        }
    }
}

impl Schedule for Cosine {
    fn lr(&self, step: usize) -> f64 {
        let t = step.min(self.total) as f64 / self.total as f64;
        self.min + (self.base - self.min) * (1.0 + libm::cos(core::f64::consts::PI * t)) / 2.0
    }
}

/// A linear ramp over the first `steps` steps up to the inner schedule's first rate
/// (`(step + 1) / steps` of it), then the inner schedule shifted by `steps`.
pub struct Warmup {
    steps: usize,
    inner: Box<dyn Schedule>,
}

impl Warmup {
    /// Warms up for `steps` steps into `inner`.
    pub fn new(steps: usize, inner: impl Schedule + 'static) -> Self {
        Warmup {
            steps,
            inner: Box::new(inner),
        }
    }
}

impl core::fmt::Debug for Warmup {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Warmup({} steps)", self.steps)
    }
}

impl Schedule for Warmup {
    fn lr(&self, step: usize) -> f64 {
        if step < self.steps {
            self.inner.lr(0) * (step + 1) as f64 / self.steps as f64
        } else {
            self.inner.lr(step - self.steps)
        }
    }
}
