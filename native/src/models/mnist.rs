//! The classic MNIST CNN (PyTorch's `examples/mnist` net): two 3x3 convolutions, a 2x2 max-pool
//! and two linear layers, with optional dropout.
//!
//! Parameter names match the PyTorch module below, so its `state_dict` loads by name:
//!
//! ```python
//! class Net(nn.Module):
//!     def __init__(self):
//!         super().__init__()
//!         self.conv1 = nn.Conv2d(1, 32, 3); self.conv2 = nn.Conv2d(32, 64, 3)
//!         self.fc1 = nn.Linear(9216, 128); self.fc2 = nn.Linear(128, 10)
//! ```

use crate::core::nn::{Conv2d, Dropout, Forward, Init, Linear, MaxPool2d, Module};
use crate::core::{Result, Tensor};

/// Name of this architecture for `kiln eval --arch`.
pub const ARCH: &str = "mnist-cnn";

/// `conv(1->32,3) relu conv(32->64,3) relu maxpool2 [dropout] flatten fc(9216->128) relu
/// [dropout] fc(128->10)`. Input `[N, 1, 28, 28]` normalised pixels; output `[N, 10]` logits.
#[derive(Clone, Debug, Module)]
pub struct MnistCnn {
    /// 1 -> 32 channels, 3x3.
    pub conv1: Conv2d,
    /// 32 -> 64 channels, 3x3.
    pub conv2: Conv2d,
    /// 9216 -> 128.
    pub fc1: Linear,
    /// 128 -> 10 logits.
    pub fc2: Linear,
    /// Dropout after the pool (p = 0.25 in PyTorch's example), when enabled.
    pub dropout1: Option<Dropout>,
    /// Dropout after fc1 (p = 0.5), when enabled.
    pub dropout2: Option<Dropout>,
}

impl MnistCnn {
    /// A freshly initialised network (PyTorch's default initialisation), without dropout.
    pub fn new(init: &mut Init) -> Result<MnistCnn> {
        Ok(MnistCnn {
            conv1: Conv2d::new(init, 1, 32, 3)?,
            conv2: Conv2d::new(init, 32, 64, 3)?,
            fc1: Linear::new(init, 9216, 128)?,
            fc2: Linear::new(init, 128, 10)?,
            dropout1: None,
            dropout2: None,
        })
    }
    /// The same network with PyTorch's example dropout (0.25 and 0.5), masks drawn from `seed`.
    pub fn with_dropout(mut self, seed: u64) -> Result<MnistCnn> {
        self.dropout1 = Some(Dropout::new(0.25, seed)?);
        self.dropout2 = Some(Dropout::new(0.5, seed.wrapping_add(1))?);
        Ok(self)
    }
}

fn maybe(d: &Option<Dropout>, x: Tensor) -> Result<Tensor> {
    match d {
        Some(d) => d.forward(&x),
        None => Ok(x),
    }
}

impl Forward for MnistCnn {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = self.conv1.forward(x)?.relu()?;
        let x = self.conv2.forward(&x)?.relu()?;
        let x = MaxPool2d::new(2).forward(&x)?;
        let x = maybe(&self.dropout1, x)?.flatten(1, -1)?;
        let x = self.fc1.forward(&x)?.relu()?;
        self.fc2.forward(&maybe(&self.dropout2, x)?)
    }
}
