//! Where new parameters come from: a device, a dtype and a stream of seeds.

use crate::{DType, Device, Result, Shape, Tensor};

/// Creates layer parameters on one device with PyTorch's default initialisations, drawing a new
/// seed for each tensor so that a model built from the same `Init` seed is the same everywhere.
///
/// ```
/// use kiln_core::{nn::Init, Device};
/// let mut a = Init::new(&Device::cpu(), 7);
/// let mut b = Init::new(&Device::cpu(), 7);
/// assert_eq!(a.next_seed(), b.next_seed());
/// ```
#[derive(Clone, Debug)]
pub struct Init {
    device: Device,
    dtype: DType,
    seed: u64,
    drawn: u64,
}

impl Init {
    /// Parameters in f32 on `device`, seeded by `seed`.
    pub fn new(device: &Device, seed: u64) -> Self {
        Init {
            device: device.clone(),
            dtype: DType::F32,
            seed,
            drawn: 0,
        }
    }
    /// The same, creating parameters of `dtype` (a float type).
    pub fn with_dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }
    /// The device parameters are created on.
    pub fn device(&self) -> &Device {
        &self.device
    }
    /// The dtype of new parameters.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// The next seed of the stream (splitmix64 of the base seed and a counter).
    pub fn next_seed(&mut self) -> u64 {
        self.drawn += 1;
        mix(self.seed, self.drawn)
    }
    /// Uniform in `[-bound, bound)`.
    pub fn uniform(&mut self, shape: impl Into<Shape>, bound: f64) -> Result<Tensor> {
        let seed = self.next_seed();
        Tensor::rand_uniform(shape, -bound, bound, seed, self.dtype, &self.device)
    }
    /// Normal with mean 0 and standard deviation `std`.
    pub fn normal(&mut self, shape: impl Into<Shape>, std: f64) -> Result<Tensor> {
        let seed = self.next_seed();
        Tensor::rand_normal(shape, 0.0, std, seed, self.dtype, &self.device)
    }
    /// PyTorch's default for Linear/Conv weights and biases: `kaiming_uniform(a = sqrt(5))`, which
    /// for weights is uniform in `±1/sqrt(fan_in)`, the same bound PyTorch gives the biases.
    pub fn fan_in_uniform(&mut self, shape: impl Into<Shape>, fan_in: usize) -> Result<Tensor> {
        let bound = if fan_in > 0 {
            1.0 / crate::math::sqrt(fan_in as f64)
        } else {
            0.0
        };
        self.uniform(shape, bound)
    }
    /// Every element `value`.
    pub fn full(&self, shape: impl Into<Shape>, value: f64) -> Result<Tensor> {
        Tensor::full(shape, value, self.dtype, &self.device)
    }
}

/// splitmix64 of `seed + n`: well-spread, distinct seeds for nearby inputs.
pub(crate) fn mix(seed: u64, n: u64) -> u64 {
    let mut z = seed.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
