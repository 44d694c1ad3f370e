//! Neural-network building blocks: the [`Module`] trait that visits named parameters, its derive,
//! layers, activations and losses.
//!
//! Parameters carry PyTorch-style dotted names (`conv1.weight`, `layers.0.bias`,
//! `bn.running_mean`), so a PyTorch `state_dict` loads into the same architecture by name.
//!
//! ```
//! use kiln_core::nn::{Forward, Init, Linear, Module, ReLU};
//! use kiln_core::{Device, DType, Tensor};
//!
//! #[derive(kiln_core::nn::Module)]
//! struct Mlp {
//!     fc1: Linear,
//!     act: ReLU,
//!     fc2: Linear,
//! }
//! impl Forward for Mlp {
//!     fn forward(&self, x: &Tensor) -> kiln_core::Result<Tensor> {
//!         self.fc2.forward(&self.act.forward(&self.fc1.forward(x)?)?)
//!     }
//! }
//! let dev = Device::cpu();
//! let mut init = Init::new(&dev, 0);
//! let mlp = Mlp { fc1: Linear::new(&mut init, 4, 8)?, act: ReLU, fc2: Linear::new(&mut init, 8, 2)? };
//! let names: Vec<String> = mlp.named_tensors().into_iter().map(|(n, _)| n).collect();
//! assert_eq!(names, ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]);
//! assert_eq!(mlp.num_params(), 4 * 8 + 8 + 8 * 2 + 2);
//! # Ok::<(), kiln_core::Error>(())
//! ```

mod activation;
pub mod attention;
mod conv;
pub mod gpt;
mod init;
mod linear;
pub mod loss;
mod norm;
mod pool;
mod sequential;

pub use activation::{Dropout, GELU, GELUTanh, ReLU, Sigmoid, Softmax, Tanh};
pub use attention::{KvCache, MultiHeadAttention, TransformerBlock, scaled_dot_product_attention};
pub use conv::{Conv2d, Conv2dConfig, ConvTranspose2d};
pub use init::Init;
pub use kiln_derive::Module;
pub use linear::{Embedding, Linear};
pub use norm::{BatchNorm, BatchNorm1d, BatchNorm2d, LayerNorm, RmsNorm};
pub use pool::{AdaptiveAvgPool2d, AvgPool2d, Flatten, MaxPool2d};
pub use sequential::Sequential;

use crate::error::{ErrorKind, fail};
use crate::{Result, Tensor};
use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::sync::atomic::AtomicUsize;

/// A tensor owned by a module: a trainable parameter (gradients flow to it) or a buffer (state
/// such as BatchNorm's running statistics, saved with the model but not trained). Tensors are
/// immutable, so updating a parameter means replacing its tensor with [`Param::set`].
///
/// The value sits behind a lock so that layers can update buffers during `forward(&self)`
/// (BatchNorm's running statistics) and modules stay `Send + Sync`.
#[derive(Debug)]
pub struct Param {
    value: spin::Mutex<Tensor>,
    trainable: bool,
}

impl Param {
    /// A trainable parameter: a fresh gradient leaf holding `tensor`'s data.
    pub fn new(tensor: Tensor) -> Self {
        Param {
            value: spin::Mutex::new(tensor.require_grad()),
            trainable: true,
        }
    }
    /// A buffer: saved and loaded with the module, never given gradients.
    pub fn buffer(tensor: Tensor) -> Self {
        Param {
            value: spin::Mutex::new(tensor.detach()),
            trainable: false,
        }
    }
    /// The current value (a cheap handle).
    pub fn tensor(&self) -> Tensor {
        self.value.lock().clone()
    }
    /// `true` for trainable parameters, `false` for buffers.
    pub fn is_trainable(&self) -> bool {
        self.trainable
    }
    /// Replaces the value (keeping the kind); the new value starts a fresh history, so a
    /// trainable parameter gets a new [`crate::TensorId`].
    pub fn set(&self, tensor: Tensor) {
        *self.value.lock() = if self.trainable {
            tensor.require_grad()
        } else {
            tensor.detach()
        };
    }
}

impl Clone for Param {
    fn clone(&self) -> Self {
        Param {
            value: spin::Mutex::new(self.tensor()),
            trainable: self.trainable,
        }
    }
}

/// Joins a field name and a nested name with a dot (`join("fc1", "weight") == "fc1.weight"`);
/// an empty nested name is the field itself. Used by `#[derive(Module)]`.
pub fn join(prefix: &str, name: &str) -> String {
    match (prefix.is_empty(), name.is_empty()) {
        (_, true) => prefix.to_string(),
        (true, false) => name.to_string(),
        _ => format!("{prefix}.{name}"),
    }
}

/// Something with named parameters and buffers: a layer, a model, a list of layers.
///
/// Implement it with `#[derive(Module)]` (see [`kiln_derive`]): each field that is a module or a
/// [`Param`] contributes its parameters under `field.name`.
pub trait Module {
    /// Calls `v` with the full dotted name and value of every parameter and buffer, in a stable order.
    fn visit(&self, v: &mut dyn FnMut(&str, &Param));
    /// Like [`Module::visit`], allowing the parameters to be replaced.
    fn visit_mut(&mut self, v: &mut dyn FnMut(&str, &mut Param));
    /// Switches training mode (dropout active, batch statistics) on or off (evaluation).
    fn set_training(&mut self, on: bool) {
        let _ = on;
    }
    /// Calls `v` with the dotted name and counter of every layer that draws new random numbers
    /// on each forward pass (dropout), so that a checkpoint can save them and a resumed run
    /// draw the same masks.
    fn visit_counters(&self, v: &mut dyn FnMut(&str, &AtomicUsize)) {
        let _ = v;
    }

    /// Every parameter and buffer by name, in visiting order (a PyTorch `state_dict`).
    fn named_tensors(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        self.visit(&mut |n, p| out.push((n.to_string(), p.tensor())));
        out
    }
    /// The trainable parameters by name.
    fn named_params(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        self.visit(&mut |n, p| {
            if p.is_trainable() {
                out.push((n.to_string(), p.tensor()))
            }
        });
        out
    }
    /// Number of trainable scalars.
    fn num_params(&self) -> usize {
        let mut n = 0;
        self.visit(&mut |_, p| {
            if p.is_trainable() {
                n += p.tensor().numel()
            }
        });
        n
    }
    /// Replaces every parameter and buffer with the tensor of the same name in `tensors`.
    ///
    /// All-or-nothing: when names are missing or extra, or shapes or dtypes differ, nothing is
    /// changed and the error lists every problem. Float tensors of another float dtype (and
    /// integers of another integer dtype) are converted.
    fn load_named(&mut self, tensors: &BTreeMap<String, Tensor>) -> Result<()> {
        let mut problems = Vec::new();
        let mut seen = BTreeMap::new();
        self.visit(&mut |name, p| {
            seen.insert(name.to_string(), ());
            let have = p.tensor();
            match tensors.get(name) {
                None => problems.push(format!(
                    "missing {name} ({} {})",
                    have.dtype(),
                    have.shape()
                )),
                Some(t) if t.shape() != have.shape() => problems.push(format!(
                    "{name}: expected shape {}, found {}",
                    have.shape(),
                    t.shape()
                )),
                Some(t)
                    if t.dtype() != have.dtype()
                        && !(t.dtype().is_float() && have.dtype().is_float())
                        && !(t.dtype().is_int() && have.dtype().is_int()) =>
                {
                    problems.push(format!(
                        "{name}: expected dtype {}, found {}",
                        have.dtype(),
                        t.dtype()
                    ))
                }
                Some(_) => {}
            }
        });
        for name in tensors.keys().filter(|n| !seen.contains_key(*n)) {
            problems.push(format!("unexpected {name}"));
        }
        if !problems.is_empty() {
            return Err(fail(
                ErrorKind::Format,
                "load_named",
                format_args!(
                    "{} problem(s) loading tensors: {}",
                    problems.len(),
                    problems.join("; ")
                ),
            ));
        }
        let mut failure = None;
        self.visit_mut(&mut |name, p| {
            if let Some(t) = tensors.get(name) {
                match t.cast(p.tensor().dtype()) {
                    Ok(t) => p.set(t),
                    Err(e) => failure = Some(e.context(format!("load_named: {name}"))),
                }
            }
        });
        failure.map_or(Ok(()), Err)
    }
}

/// A module with one input and one output: every layer, and the models built from them.
pub trait Forward {
    /// Applies the module to `x`.
    fn forward(&self, x: &Tensor) -> Result<Tensor>;
}

/// A [`Module`] with a [`Forward`]: what [`Sequential`] holds and what a model file is traced from.
pub trait Layer: Module + Forward + Send + Sync {}
impl<T: Module + Forward + Send + Sync> Layer for T {}

impl Module for Param {
    fn visit(&self, v: &mut dyn FnMut(&str, &Param)) {
        v("", self)
    }
    fn visit_mut(&mut self, v: &mut dyn FnMut(&str, &mut Param)) {
        v("", self)
    }
}

impl<M: Module> Module for Option<M> {
    fn visit(&self, v: &mut dyn FnMut(&str, &Param)) {
        if let Some(m) = self {
            m.visit(v)
        }
    }
    fn visit_mut(&mut self, v: &mut dyn FnMut(&str, &mut Param)) {
        if let Some(m) = self {
            m.visit_mut(v)
        }
    }
    fn set_training(&mut self, on: bool) {
        if let Some(m) = self {
            m.set_training(on)
        }
    }
    fn visit_counters(&self, v: &mut dyn FnMut(&str, &AtomicUsize)) {
        if let Some(m) = self {
            m.visit_counters(v)
        }
    }
}

/// Items of a list are named by their index (`layers.0.weight`), as PyTorch's `ModuleList`.
impl<M: Module> Module for Vec<M> {
    fn visit(&self, v: &mut dyn FnMut(&str, &Param)) {
        for (i, m) in self.iter().enumerate() {
            m.visit(&mut |n, p| v(&join(&i.to_string(), n), p));
        }
    }
    fn visit_mut(&mut self, v: &mut dyn FnMut(&str, &mut Param)) {
        for (i, m) in self.iter_mut().enumerate() {
            m.visit_mut(&mut |n, p| v(&join(&i.to_string(), n), p));
        }
    }
    fn set_training(&mut self, on: bool) {
        self.iter_mut().for_each(|m| m.set_training(on));
    }
    fn visit_counters(&self, v: &mut dyn FnMut(&str, &AtomicUsize)) {
        for (i, m) in self.iter().enumerate() {
            m.visit_counters(&mut |n, c| v(&join(&i.to_string(), n), c));
        }
    }
}

impl<M: Module + ?Sized> Module for Box<M> {
    fn visit(&self, v: &mut dyn FnMut(&str, &Param)) {
        (**self).visit(v)
    }
    fn visit_mut(&mut self, v: &mut dyn FnMut(&str, &mut Param)) {
        (**self).visit_mut(v)
    }
    fn set_training(&mut self, on: bool) {
        (**self).set_training(on)
    }
    fn visit_counters(&self, v: &mut dyn FnMut(&str, &AtomicUsize)) {
        (**self).visit_counters(v)
    }
}

impl<M: Forward + ?Sized> Forward for Box<M> {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        (**self).forward(x)
    }
}

/// Checks that `x` has `rank` dimensions (any of `ranks`), for layer error messages.
pub(crate) fn expect_rank(x: &Tensor, ranks: &[usize], layer: &'static str) -> Result<()> {
    if ranks.contains(&x.rank()) {
        Ok(())
    } else {
        Err(fail(
            ErrorKind::Shape,
            layer,
            format_args!(
                "expects an input of rank {ranks:?}, got shape {}",
                x.shape()
            ),
        ))
    }
}
