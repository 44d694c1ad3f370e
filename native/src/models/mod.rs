//! Model architectures the `kiln` command trains, and loading a model file for `eval`/`predict`.

pub mod mnist;

/// The GPT lives in kiln-core (the page runs it too); re-exported here beside the other models.
pub use crate::core::nn::gpt;

pub use mnist::MnistCnn;

use crate::checkpoint::write_atomic;
use crate::core::model::{Model, load_safetensors, save_model};
use crate::core::nn::{Forward, Init, Module};
use crate::core::{Device, Error, Result, Tensor};
use crate::data::mnist::{Split, normalize};
use std::collections::BTreeMap;
use std::path::Path;

/// A digit classifier loaded from a file: a kiln model file run from its graph (no Rust model
/// code), or a bare state_dict loaded by name into a built-in architecture.
#[derive(Debug)]
pub enum Classifier {
    /// A kiln model file, run by [`Model::forward`].
    Graph(Model),
    /// Tensors loaded by name into [`MnistCnn`].
    Cnn(Box<MnistCnn>),
}

/// One prediction of [`Classifier::predict`].
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    /// The most likely digit.
    pub digit: usize,
    /// Softmax of the logits.
    pub probabilities: Vec<f32>,
    /// The model's raw outputs.
    pub logits: Vec<f32>,
}

impl Classifier {
    /// Loads `path`: a kiln model file when `arch` is `None`, else a safetensors state_dict
    /// loaded into the architecture named `arch` (`mnist-cnn`).
    pub fn load(path: &Path, arch: Option<&str>, device: &Device) -> Result<Classifier> {
        let bytes = std::fs::read(path)
            .map_err(|e| Error::io("load", format!("cannot read {}: {e}", path.display())))?;
        let ctx = |e: Error| e.context(path.display());
        match arch {
            None => Ok(Classifier::Graph(Model::load(&bytes, device).map_err(ctx)?)),
            Some(mnist::ARCH) => {
                let tensors = load_safetensors(&bytes)
                    .map_err(ctx)?
                    .to_device(device)
                    .map_err(ctx)?;
                let mut model = MnistCnn::new(&mut Init::new(device, 0))?;
                model.load_named(&tensors).map_err(ctx)?;
                model.set_training(false);
                Ok(Classifier::Cnn(Box::new(model)))
            }
            Some(other) => Err(Error::invalid(
                "load",
                format!("expected --arch {}, found {other:?}", mnist::ARCH),
            )),
        }
    }
    /// Logits for a batch of normalised images `[N, 1, 28, 28]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Classifier::Graph(m) => m.forward(x),
            Classifier::Cnn(m) => m.forward(x),
        }
    }
    /// Accuracy on the first `limit` images of `split` (all when `None`).
    pub fn accuracy(&self, split: &Split, limit: Option<usize>) -> Result<f64> {
        let device = match self {
            Classifier::Graph(m) => m.device().clone(),
            Classifier::Cnn(m) => m.conv1.weight.tensor().device().clone(),
        };
        crate::train::accuracy_with(split, limit, &device, |x| self.forward(x))
    }
    /// Classifies one 28x28 image of raw pixel values in `[0, 255]` (light ink on dark).
    pub fn predict(&self, pixels: &[f32]) -> Result<Prediction> {
        if pixels.len() != 28 * 28 {
            return Err(Error::shape(
                "predict",
                format!("expected 784 pixels (28x28), found {}", pixels.len()),
            ));
        }
        let device = match self {
            Classifier::Graph(m) => m.device().clone(),
            Classifier::Cnn(m) => m.conv1.weight.tensor().device().clone(),
        };
        let x: Vec<f32> = pixels.iter().map(|&p| normalize(p)).collect();
        let x = Tensor::from_vec(x, [1, 1, 28, 28], &device)?;
        let logits = crate::core::autodiff::no_grad(|| self.forward(&x))?.to_vec::<f32>()?;
        let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let exp: Vec<f32> = logits.iter().map(|l| (l - max).exp()).collect();
        let sum: f32 = exp.iter().sum();
        let probabilities: Vec<f32> = exp.iter().map(|e| e / sum).collect();
        let digit = crate::train::argmax(&logits);
        Ok(Prediction {
            digit,
            probabilities,
            logits,
        })
    }
}

/// Writes `model` as a kiln model file (weights and the graph traced on one 28x28 image) to
/// `path` atomically, with `arch` and the caller's `extra` entries in its metadata. Leaves the
/// model in evaluation mode.
pub fn save_classifier(
    model: &mut MnistCnn,
    path: &Path,
    extra: &BTreeMap<String, String>,
) -> Result<()> {
    let device = model.conv1.weight.tensor().device().clone();
    let sample = Tensor::zeros([1, 1, 28, 28], crate::core::DType::F32, &device)?;
    let mut meta = extra.clone();
    meta.insert("arch".to_string(), mnist::ARCH.to_string());
    let bytes = save_model(model, &sample, &meta)?;
    write_atomic(path, &bytes)
}
