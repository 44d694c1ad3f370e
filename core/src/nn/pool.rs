//! Pooling and flattening (no parameters).

use super::{Forward, expect_rank};
use crate::{Pool2dParams, Result, Tensor};

fn pool_params(kernel: usize, stride: usize, padding: usize) -> Pool2dParams {
    Pool2dParams {
        kernel: [kernel, kernel],
        stride: [stride, stride],
        padding: [padding, padding],
        dilation: [1, 1],
        count_include_pad: true,
    }
}

/// 2-D max pooling, as `torch.nn.MaxPool2d`.
#[derive(Clone, Copy, Debug, kiln_derive::Module)]
pub struct MaxPool2d {
    /// window, stride, padding, dilation
    #[module(skip)]
    pub params: Pool2dParams,
}

impl MaxPool2d {
    /// Square windows of `kernel` with stride `kernel` (PyTorch's default), no padding.
    pub fn new(kernel: usize) -> Self {
        Self::with(kernel, kernel, 0)
    }
    /// Square windows with an explicit stride and padding.
    pub fn with(kernel: usize, stride: usize, padding: usize) -> Self {
        MaxPool2d {
            params: pool_params(kernel, stride, padding),
        }
    }
}

impl Forward for MaxPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        expect_rank(x, &[4], "MaxPool2d")?;
        x.max_pool2d(self.params)
    }
}

/// 2-D average pooling, as `torch.nn.AvgPool2d` (padded zeros counted by default).
#[derive(Clone, Copy, Debug, kiln_derive::Module)]
pub struct AvgPool2d {
    /// window, stride, padding, `count_include_pad`
    #[module(skip)]
    pub params: Pool2dParams,
}

impl AvgPool2d {
    /// Square windows of `kernel` with stride `kernel`, no padding.
    pub fn new(kernel: usize) -> Self {
        Self::with(kernel, kernel, 0)
    }
    /// Square windows with an explicit stride and padding.
    pub fn with(kernel: usize, stride: usize, padding: usize) -> Self {
        AvgPool2d {
            params: pool_params(kernel, stride, padding),
        }
    }
}

impl Forward for AvgPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        expect_rank(x, &[4], "AvgPool2d")?;
        x.avg_pool2d(self.params)
    }
}

/// Average pooling to a fixed output size, as `torch.nn.AdaptiveAvgPool2d`.
#[derive(Clone, Copy, Debug, kiln_derive::Module)]
pub struct AdaptiveAvgPool2d {
    /// output (h, w)
    #[module(skip)]
    pub output: [usize; 2],
}

impl AdaptiveAvgPool2d {
    /// Pools to `output` (h, w).
    pub fn new(output: [usize; 2]) -> Self {
        AdaptiveAvgPool2d { output }
    }
}

impl Forward for AdaptiveAvgPool2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        expect_rank(x, &[4], "AdaptiveAvgPool2d")?;
        x.adaptive_avg_pool2d(self.output)
    }
}

/// Merges axes `start..=end` (PyTorch's default: all but the batch axis).
#[derive(Clone, Copy, Debug, kiln_derive::Module)]
pub struct Flatten {
    /// first merged axis
    #[module(skip)]
    pub start: isize,
    /// last merged axis (negative counts from the end)
    #[module(skip)]
    pub end: isize,
}

impl Flatten {
    /// Flattens everything but the batch axis.
    pub fn new() -> Self {
        Flatten { start: 1, end: -1 }
    }
}

impl Default for Flatten {
    fn default() -> Self {
        Self::new()
    }
}

impl Forward for Flatten {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.flatten(self.start, self.end)
    }
}
