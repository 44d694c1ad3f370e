//! Normalisation layers.

use super::{Forward, Init, Param, expect_rank};
use crate::autodiff::no_grad;
use crate::error::{ErrorKind, fail};
use crate::{DType, Error, Result, Tensor};
use alloc::vec::Vec;

/// Batch normalisation over the channel axis 1, as `torch.nn.BatchNorm1d/2d`: inputs `[N, C]`,
/// `[N, C, L]` or `[N, C, H, W]`. Training normalises with the batch statistics and updates the
/// running ones (`momentum` 0.1, unbiased variance); evaluation uses the running statistics.
#[derive(Debug, Clone, kiln_derive::Module)]
pub struct BatchNorm {
    /// scale `[C]`
    pub weight: Param,
    /// shift `[C]`
    pub bias: Param,
    /// running mean `[C]` (buffer)
    pub running_mean: Param,
    /// running unbiased variance `[C]` (buffer)
    pub running_var: Param,
    /// training batches seen (buffer, i32)
    pub num_batches_tracked: Param,
    /// added to the variance
    #[module(skip)]
    pub eps: f64,
    /// weight of the new batch in the running statistics
    #[module(skip)]
    pub momentum: f64,
    #[module(training)]
    training: bool,
}

/// [`BatchNorm`] on `[N, C]` or `[N, C, L]` inputs.
pub type BatchNorm1d = BatchNorm;
/// [`BatchNorm`] on `[N, C, H, W]` inputs.
pub type BatchNorm2d = BatchNorm;

impl BatchNorm {
    /// Normalisation of `channels` with PyTorch's defaults (eps 1e-5, momentum 0.1, affine).
    pub fn new(init: &mut Init, channels: usize) -> Result<Self> {
        Ok(BatchNorm {
            weight: Param::new(init.full([channels], 1.0)?),
            bias: Param::new(init.full([channels], 0.0)?),
            running_mean: Param::buffer(init.full([channels], 0.0)?),
            running_var: Param::buffer(init.full([channels], 1.0)?),
            num_batches_tracked: Param::buffer(Tensor::zeros([], DType::I32, init.device())?),
            eps: 1e-5,
            momentum: 0.1,
            training: true,
        })
    }
}

impl Forward for BatchNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        expect_rank(x, &[2, 3, 4], "BatchNorm")?;
        let c = self.weight.tensor().numel();
        if x.dims()[1] != c {
            return Err(fail(
                ErrorKind::Shape,
                "BatchNorm",
                format_args!("expects {c} channels on axis 1, got shape {}", x.shape()),
            ));
        }
        // Per-channel vectors broadcast as [1, C, 1, ...].
        let mut bshape = alloc::vec![1usize; x.rank()];
        bshape[1] = c;
        let per_channel = |t: Tensor| t.reshape(bshape.clone());
        let axes: Vec<isize> = (0..x.rank() as isize).filter(|&a| a != 1).collect();
        let (mean, var) = if self.training {
            let n = x.numel() / c.max(1);
            if n < 2 {
                return Err(fail(
                    ErrorKind::Shape,
                    "BatchNorm",
                    format_args!(
                        "training needs more than one value per channel, got shape {}",
                        x.shape()
                    ),
                ));
            }
            let mean = x.mean(&axes, false)?;
            let var = x.var(&axes, 0, false)?;
            no_grad(|| -> Result<()> {
                let m = self.momentum;
                let unbiased = var.detach().mul_scalar(n as f64 / (n - 1) as f64)?;
                let rm = self.running_mean.tensor().mul_scalar(1.0 - m)?;
                self.running_mean
                    .set(rm.add(&mean.detach().mul_scalar(m)?)?);
                let rv = self.running_var.tensor().mul_scalar(1.0 - m)?;
                self.running_var.set(rv.add(&unbiased.mul_scalar(m)?)?);
                let seen = self.num_batches_tracked.tensor();
                self.num_batches_tracked.set(seen.add_scalar(1.0)?);
                Ok(())
            })?;
            (mean, var)
        } else {
            (self.running_mean.tensor(), self.running_var.tensor())
        };
        let scale = var
            .add_scalar(self.eps)?
            .rsqrt()?
            .mul(&self.weight.tensor())?;
        let shift = self.bias.tensor().sub(&mean.mul(&scale)?)?;
        x.mul(&per_channel(scale)?)?.add(&per_channel(shift)?)
    }
}

/// Layer normalisation over the trailing axes, as `torch.nn.LayerNorm` (eps 1e-5, affine).
#[derive(Debug, Clone, kiln_derive::Module)]
pub struct LayerNorm {
    /// scale, shaped like the normalised axes
    pub weight: Param,
    /// shift, shaped like the normalised axes
    pub bias: Param,
    /// added to the variance
    #[module(skip)]
    pub eps: f64,
}

impl LayerNorm {
    /// Normalises the trailing axes of shape `normalized`.
    pub fn new(init: &mut Init, normalized: &[usize]) -> Result<Self> {
        if normalized.is_empty() {
            return Err(Error::invalid(
                "LayerNorm",
                "needs at least one normalised axis",
            ));
        }
        Ok(LayerNorm {
            weight: Param::new(init.full(normalized, 1.0)?),
            bias: Param::new(init.full(normalized, 0.0)?),
            eps: 1e-5,
        })
    }
}

impl Forward for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let w = self.weight.tensor();
        let k = w.rank();
        if x.rank() < k || x.dims()[x.rank() - k..] != *w.dims() {
            return Err(fail(
                ErrorKind::Shape,
                "LayerNorm",
                format_args!(
                    "expects inputs ending in {}, got shape {}",
                    w.shape(),
                    x.shape()
                ),
            ));
        }
        let y = if k == 1 {
            x.normalize(self.eps)?
        } else {
            let axes: Vec<isize> = (-(k as isize)..0).collect();
            let mean = x.mean(&axes, true)?;
            let var = x.var(&axes, 0, true)?;
            x.sub(&mean)?.mul(&var.add_scalar(self.eps)?.rsqrt()?)?
        };
        y.mul(&w)?.add(&self.bias.tensor())
    }
}

/// Root-mean-square normalisation over the last axis, as in LLaMA-style transformers:
/// `x / sqrt(mean(x²) + eps) * weight` (no mean subtraction, no bias; eps 1e-6).
///
/// ```
/// use kiln_core::nn::{Forward, Init, RmsNorm};
/// use kiln_core::{Device, Tensor};
/// let mut init = Init::new(&Device::cpu(), 0);
/// let norm = RmsNorm::new(&mut init, 2)?;
/// let y = norm.forward(&Tensor::from_vec(vec![3.0f32, 4.0], [1, 2], &Device::cpu())?)?;
/// let rms = 12.5f32.sqrt(); // sqrt of the mean of 3² and 4²
/// for (got, want) in y.to_vec::<f32>()?.iter().zip([3.0 / rms, 4.0 / rms]) {
///     assert!((got - want).abs() < 1e-6);
/// }
/// # Ok::<(), kiln_core::Error>(())
/// ```
#[derive(Debug, Clone, kiln_derive::Module)]
pub struct RmsNorm {
    /// scale `[dim]`
    pub weight: Param,
    /// added to the mean square
    #[module(skip)]
    pub eps: f64,
}

impl RmsNorm {
    /// Normalises a last axis of `dim` features (weight 1, eps 1e-6).
    pub fn new(init: &mut Init, dim: usize) -> Result<Self> {
        Ok(RmsNorm {
            weight: Param::new(init.full([dim], 1.0)?),
            eps: 1e-6,
        })
    }
}

impl Forward for RmsNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let w = self.weight.tensor();
        if x.dims().last() != w.dims().last() {
            return Err(fail(
                ErrorKind::Shape,
                "RmsNorm",
                format_args!(
                    "expects inputs ending in {}, got shape {}",
                    w.shape(),
                    x.shape()
                ),
            ));
        }
        let ms = x.mul(x)?.mean(&[-1], true)?;
        x.mul(&ms.add_scalar(self.eps)?.rsqrt()?)?.mul(&w)
    }
}
