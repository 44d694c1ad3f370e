//! A chain of layers.

use super::{Forward, Layer, Module, Param, join};
use crate::{Result, Tensor};
use alloc::boxed::Box;
use alloc::string::ToString;
use alloc::vec::Vec;
use core::fmt;

/// Layers applied in order, named by position (`0.weight`, `2.bias`) as `torch.nn.Sequential`.
///
/// ```
/// use kiln_core::nn::{Init, Linear, Module, ReLU, Sequential};
/// let mut init = Init::new(&kiln_core::Device::cpu(), 0);
/// let net = Sequential::new()
///     .with(Linear::new(&mut init, 4, 8)?)
///     .with(ReLU)
///     .with(Linear::new(&mut init, 8, 2)?);
/// assert_eq!(net.named_tensors()[2].0, "2.weight");
/// # Ok::<(), kiln_core::Error>(())
/// ```
#[derive(Default)]
pub struct Sequential {
    layers: Vec<Box<dyn Layer>>,
}

impl Sequential {
    /// An empty chain (the identity).
    pub fn new() -> Self {
        Self::default()
    }
    /// The chain with `layer` appended (builder style).
    pub fn with(mut self, layer: impl Layer + 'static) -> Self {
        self.push(layer);
        self
    }
    /// Appends a layer.
    pub fn push(&mut self, layer: impl Layer + 'static) {
        self.layers.push(Box::new(layer));
    }
    /// Number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }
    /// `true` when there are no layers.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
}

impl fmt::Debug for Sequential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sequential({} layers)", self.layers.len())
    }
}

impl Module for Sequential {
    fn visit(&self, v: &mut dyn FnMut(&str, &Param)) {
        for (i, m) in self.layers.iter().enumerate() {
            m.visit(&mut |n, p| v(&join(&i.to_string(), n), p));
        }
    }
    fn visit_mut(&mut self, v: &mut dyn FnMut(&str, &mut Param)) {
        for (i, m) in self.layers.iter_mut().enumerate() {
            m.visit_mut(&mut |n, p| v(&join(&i.to_string(), n), p));
        }
    }
    fn set_training(&mut self, on: bool) {
        self.layers.iter_mut().for_each(|m| m.set_training(on));
    }
    fn visit_counters(&self, v: &mut dyn FnMut(&str, &core::sync::atomic::AtomicUsize)) {
        for (i, m) in self.layers.iter().enumerate() {
            m.visit_counters(&mut |n, c| v(&join(&i.to_string(), n), c));
        }
    }
}

impl Forward for Sequential {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut h = x.clone();
        for layer in &self.layers {
            h = layer.forward(&h)?;
        }
        Ok(h)
    }
}
