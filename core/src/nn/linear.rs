//! Fully connected layers and embeddings.

use super::{Forward, Init, Param};
use crate::{Error, Result, Tensor};
use alloc::format;
use alloc::vec::Vec;

/// `y = x W^T + b` over the last axis, as `torch.nn.Linear` (weight `[out, in]`, bias `[out]`).
#[derive(Clone, Debug, kiln_derive::Module)]
pub struct Linear {
    /// `[out_features, in_features]`
    pub weight: Param,
    /// `[out_features]`, when the layer has a bias
    pub bias: Option<Param>,
}

impl Linear {
    /// A layer with a bias, initialised as PyTorch does (uniform in `±1/sqrt(in)`).
    pub fn new(init: &mut Init, in_features: usize, out_features: usize) -> Result<Self> {
        Self::with_bias(init, in_features, out_features, true)
    }
    /// A layer with or without a bias.
    pub fn with_bias(
        init: &mut Init,
        in_features: usize,
        out_features: usize,
        bias: bool,
    ) -> Result<Self> {
        let weight = Param::new(init.fan_in_uniform([out_features, in_features], in_features)?);
        let bias = if bias {
            Some(Param::new(
                init.fan_in_uniform([out_features], in_features)?,
            ))
        } else {
            None
        };
        Ok(Linear { weight, bias })
    }
    /// Input features.
    pub fn in_features(&self) -> usize {
        self.weight.tensor().dims()[1]
    }
    /// Output features.
    pub fn out_features(&self) -> usize {
        self.weight.tensor().dims()[0]
    }
}

impl Forward for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let inner = x.dims().last().copied();
        if x.rank() == 0 || inner != Some(self.in_features()) {
            return Err(Error::shape(
                "Linear",
                format!(
                    "expects inputs whose last axis has {} features, got shape {}",
                    self.in_features(),
                    x.shape()
                ),
            ));
        }
        let y = x.matmul(&self.weight.tensor().t()?)?;
        match &self.bias {
            Some(b) => y.add(&b.tensor()),
            None => Ok(y),
        }
    }
}

/// A lookup table of `num` vectors of `dim` (`torch.nn.Embedding`, initialised N(0, 1)); the
/// input holds integer indices of any shape and the output appends an axis of `dim`.
#[derive(Clone, Debug, kiln_derive::Module)]
pub struct Embedding {
    /// `[num_embeddings, embedding_dim]`
    pub weight: Param,
}

impl Embedding {
    /// A table of `num` vectors of `dim`.
    pub fn new(init: &mut Init, num: usize, dim: usize) -> Result<Self> {
        Ok(Embedding {
            weight: Param::new(init.normal([num, dim], 1.0)?),
        })
    }
}

impl Forward for Embedding {
    fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        if !ids.dtype().is_int() {
            return Err(Error::dtype(
                "Embedding",
                format!("expects integer indices, got {}", ids.dtype()),
            ));
        }
        let w = self.weight.tensor();
        let rows = w.index_select(0, &ids.reshape([ids.numel()])?)?;
        let mut dims: Vec<usize> = ids.dims().to_vec();
        dims.push(w.dims()[1]);
        rows.reshape(dims)
    }
}
