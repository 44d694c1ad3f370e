//! 2-D convolutions over NCHW input.

use super::{Forward, Init, Param, expect_rank};
use crate::{Conv2dParams, Error, Result, Tensor};
use alloc::format;

/// Hyper-parameters of [`Conv2d`] and [`ConvTranspose2d`], PyTorch's defaults unless set.
///
/// ```
/// use kiln_core::nn::{Conv2dConfig, Init};
/// let mut init = Init::new(&kiln_core::Device::cpu(), 0);
/// let conv = Conv2dConfig::new(3, 16, 3).stride(2).padding(1).build(&mut init)?;
/// assert_eq!(conv.weight.tensor().dims(), &[16, 3, 3, 3]);
/// # Ok::<(), kiln_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dConfig {
    /// input channels
    pub in_channels: usize,
    /// output channels
    pub out_channels: usize,
    /// kernel size (h, w)
    pub kernel: [usize; 2],
    /// stride, padding, dilation and groups
    pub params: Conv2dParams,
    /// whether the layer adds a bias per output channel
    pub bias: bool,
}

impl Conv2dConfig {
    /// A square `kernel`, stride 1, no padding, a bias.
    pub fn new(in_channels: usize, out_channels: usize, kernel: usize) -> Self {
        Conv2dConfig {
            in_channels,
            out_channels,
            kernel: [kernel, kernel],
            params: Conv2dParams::default(),
            bias: true,
        }
    }
    /// A rectangular kernel (h, w).
    pub fn kernel(mut self, kernel: [usize; 2]) -> Self {
        self.kernel = kernel;
        self
    }
    /// The same stride on both axes.
    pub fn stride(mut self, s: usize) -> Self {
        self.params.stride = [s, s];
        self
    }
    /// The same zero padding on both axes.
    pub fn padding(mut self, p: usize) -> Self {
        self.params.padding = [p, p];
        self
    }
    /// The same dilation on both axes.
    pub fn dilation(mut self, d: usize) -> Self {
        self.params.dilation = [d, d];
        self
    }
    /// Channel groups.
    pub fn groups(mut self, g: usize) -> Self {
        self.params.groups = g;
        self
    }
    /// With or without a bias.
    pub fn bias(mut self, on: bool) -> Self {
        self.bias = on;
        self
    }
    /// A [`Conv2d`] with PyTorch's default initialisation.
    pub fn build(self, init: &mut Init) -> Result<Conv2d> {
        self.check("Conv2d")?;
        let [kh, kw] = self.kernel;
        let g = self.params.groups;
        let fan_in = self.in_channels / g * kh * kw;
        let weight =
            init.fan_in_uniform([self.out_channels, self.in_channels / g, kh, kw], fan_in)?;
        Ok(Conv2d {
            weight: Param::new(weight),
            bias: self.make_bias(init, fan_in)?,
            params: self.params,
        })
    }
    /// A [`ConvTranspose2d`] (weight `[in, out/groups, kh, kw]`) with PyTorch's default
    /// initialisation and the given output padding.
    pub fn build_transpose(
        self,
        init: &mut Init,
        output_padding: usize,
    ) -> Result<ConvTranspose2d> {
        self.check("ConvTranspose2d")?;
        let [kh, kw] = self.kernel;
        let g = self.params.groups;
        // PyTorch computes fan_in from weight.size(1) * kernel area for the transpose too.
        let fan_in = self.out_channels / g * kh * kw;
        let weight =
            init.fan_in_uniform([self.in_channels, self.out_channels / g, kh, kw], fan_in)?;
        Ok(ConvTranspose2d {
            weight: Param::new(weight),
            bias: self.make_bias(init, fan_in)?,
            params: self.params,
            output_padding: [output_padding, output_padding],
        })
    }
    fn make_bias(&self, init: &mut Init, fan_in: usize) -> Result<Option<Param>> {
        if !self.bias {
            return Ok(None);
        }
        Ok(Some(Param::new(
            init.fan_in_uniform([self.out_channels], fan_in)?,
        )))
    }
    fn check(&self, layer: &'static str) -> Result<()> {
        let p = &self.params;
        let g = p.groups;
        if g == 0 || !self.in_channels.is_multiple_of(g) || !self.out_channels.is_multiple_of(g) {
            return Err(Error::invalid(
                layer,
                format!(
                    "groups {g} must be positive and divide in_channels {} and out_channels {}",
                    self.in_channels, self.out_channels
                ),
            ));
        }
        if self.kernel.contains(&0) || p.stride.contains(&0) || p.dilation.contains(&0) {
            return Err(Error::invalid(
                layer,
                format!(
                    "kernel {:?}, stride {:?} and dilation {:?} must be positive",
                    self.kernel, p.stride, p.dilation
                ),
            ));
        }
        Ok(())
    }
}

/// 2-D convolution, as `torch.nn.Conv2d` (weight `[out, in/groups, kh, kw]`, bias `[out]`).
#[derive(Clone, Debug, kiln_derive::Module)]
pub struct Conv2d {
    /// `[out_channels, in_channels / groups, kh, kw]`
    pub weight: Param,
    /// `[out_channels]`
    pub bias: Option<Param>,
    /// stride, padding, dilation, groups
    #[module(skip)]
    pub params: Conv2dParams,
}

impl Conv2d {
    /// A convolution with a square `kernel`, stride 1, no padding and a bias.
    pub fn new(
        init: &mut Init,
        in_channels: usize,
        out_channels: usize,
        kernel: usize,
    ) -> Result<Self> {
        Conv2dConfig::new(in_channels, out_channels, kernel).build(init)
    }
}

impl Forward for Conv2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        expect_rank(x, &[4], "Conv2d")?;
        let bias = self.bias.as_ref().map(Param::tensor);
        x.conv2d(&self.weight.tensor(), bias.as_ref(), self.params)
    }
}

/// Transposed 2-D convolution, as `torch.nn.ConvTranspose2d` (weight `[in, out/groups, kh, kw]`).
#[derive(Clone, Debug, kiln_derive::Module)]
pub struct ConvTranspose2d {
    /// `[in_channels, out_channels / groups, kh, kw]`
    pub weight: Param,
    /// `[out_channels]`
    pub bias: Option<Param>,
    /// stride, padding, dilation, groups
    #[module(skip)]
    pub params: Conv2dParams,
    /// extra rows/columns added to one side of the output
    #[module(skip)]
    pub output_padding: [usize; 2],
}

impl ConvTranspose2d {
    /// A transposed convolution with a square `kernel`, stride 1, no padding and a bias.
    pub fn new(
        init: &mut Init,
        in_channels: usize,
        out_channels: usize,
        kernel: usize,
    ) -> Result<Self> {
        Conv2dConfig::new(in_channels, out_channels, kernel).build_transpose(init, 0)
    }
}

impl Forward for ConvTranspose2d {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        expect_rank(x, &[4], "ConvTranspose2d")?;
        let bias = self.bias.as_ref().map(Param::tensor);
        x.conv_transpose2d(
            &self.weight.tensor(),
            bias.as_ref(),
            self.params,
            self.output_padding,
        )
    }
}
