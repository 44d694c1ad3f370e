//! # kiln-kernels
//!
//! kiln's GPU kernels and the wgpu backend.
//!
//! - [`kernels`]: every kernel as a `.wgsl` file (in `kernels/wgsl/`), specialised by the small
//!   [`preprocess`]or (dtype, op, tile sizes).
//! - [`plan`]: backend-neutral planning: an op and its input views become kernel dispatches
//!   (kernel variant, params words, buffer bindings, workgroup grid). Every GPU backend executes
//!   these plans; the wgpu backend here, the CUDA backend with the kernels translated from WGSL.
//! - [`exec`]: [`GpuBackend`], the one plan executor, on any [`Runtime`] (memory, copies, launches).
//! - [`WgpuBackend`]: the plans on WebGPU (browsers), Vulkan, Metal, DX12 and GL.
//! - [`cuda`]: the naga-IR -> CUDA C / HIP translator of the same kernels.
//! - [`fusion`]: a decorator over any device that records elementwise ops and runs each chain as
//!   one generated WGSL kernel (on by default for the GPU devices of `kiln::device::select`).
//!
//! ```no_run
//! use kiln_core::{DType, Tensor};
//! let dev = kiln_kernels::wgpu_device()?;
//! let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32, &dev)?.reshape([2, 3])?;
//! println!("{:?}", x.softmax(-1)?.to_vec::<f32>()?);
//! # Ok::<(), kiln_core::Error>(())
//! ```

extern crate alloc;

mod backend;
pub mod cuda;
pub mod custom;
pub mod exec;
pub mod fusion;
pub mod header;
pub mod kernels;
pub mod plan;
pub mod preprocess;

pub use backend::{ReadBack, WgpuBackend, WgpuBuffer, WgpuOptions, WgpuRuntime};
pub use custom::register_op;
pub use exec::{GpuBackend, Launch, Runtime};

/// A kiln [`kiln_core::Device`] on the default GPU through wgpu. Native only (browsers use
/// [`wgpu_device_async`]). Fails with a clear error when no adapter exists.
#[cfg(not(target_arch = "wasm32"))]
pub fn wgpu_device() -> kiln_core::Result<kiln_core::Device> {
    Ok(kiln_core::Device::new(WgpuBackend::new_blocking(
        WgpuOptions::default(),
    )?))
}

/// A kiln [`kiln_core::Device`] on the GPU chosen by `options`, without blocking.
pub async fn wgpu_device_async(options: WgpuOptions) -> kiln_core::Result<kiln_core::Device> {
    Ok(kiln_core::Device::new(WgpuBackend::new(options).await?))
}
