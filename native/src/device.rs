//! Choosing the device a command runs on, by name (`--device cpu|wgpu|cuda[:N]|rocm[:N]`).

use crate::core::{Device, Error, Result};
use crate::profile::Profiler;
use std::sync::Arc;

/// The device names `kiln` knows, whether or not this build includes them.
pub const NAMES: [&str; 4] = ["cpu", "wgpu", "cuda", "rocm"];

/// The device called `name`: `cpu` (always), `wgpu` or `webgpu` (the default GPU through wgpu:
/// Vulkan, Metal, DX12 or GL), `cuda` or `cuda:N` (NVIDIA GPU `N`, 0 by default; builds with
/// the `cuda` feature) and `rocm` or `rocm:N` (AMD GPU `N` through HIP; builds with the `rocm`
/// feature). Unknown names and devices missing from this build or this machine are errors that
/// say which devices exist or what is missing.
///
/// ```
/// let cpu = kiln::device::select("cpu")?;
/// assert_eq!(cpu.name(), "cpu");
/// assert!(kiln::device::select("tpu").is_err());
/// assert!(kiln::device::select("cuda:x").is_err());
/// assert!(kiln::device::select("rocm:x").is_err());
/// # Ok::<(), kiln::core::Error>(())
/// ```
///
/// GPU devices (`wgpu`, `cuda`, `rocm`) come behind the fusion decorator
/// ([`kiln_kernels::fusion::wrap`]: chains of elementwise ops run as one generated kernel)
/// unless the environment sets `KILN_FUSION=0`; [`select_unfused`] never wraps.
pub fn select(name: &str) -> Result<Device> {
    Ok(fused_if_gpu(name, select_unfused(name)?))
}

/// [`select`] with [`Profiler`]'s per-op timer under the fusion decorator, so that each
/// generated kernel is timed as an op of its own (`kiln.fused.<hash>`) and the elementwise ops it
/// replaced do not appear. `by_shape` keys the times by op and input shapes
/// ([`Profiler::wrap_by_shape`]).
///
/// ```
/// let (cpu, profiler) = kiln::device::select_profiled("cpu", false)?;
/// kiln::core::Tensor::from_vec(vec![1.0f32, 2.0], [2], &cpu)?.exp()?.to_data()?;
/// assert_eq!(profiler.report()[0].op, "exp");
/// # Ok::<(), kiln::core::Error>(())
/// ```
pub fn select_profiled(name: &str, by_shape: bool) -> Result<(Device, Arc<Profiler>)> {
    let (timed, profiler) = Profiler::wrap_keyed(&select_unfused(name)?, by_shape);
    Ok((fused_if_gpu(name, timed), profiler))
}

/// `device` (called `name`) behind the fusion decorator when it is a GPU.
fn fused_if_gpu(name: &str, device: Device) -> Device {
    match name.trim().eq_ignore_ascii_case("cpu") {
        true => device,
        false => kiln_kernels::fusion::wrap_if_enabled(device),
    }
}

/// [`select`] without the fusion decorator: each op its own kernel.
pub fn select_unfused(name: &str) -> Result<Device> {
    let name = name.trim().to_ascii_lowercase();
    let (kind, index) = match name.split_once(':') {
        Some((kind @ ("cuda" | "rocm"), n)) => {
            let index = n.parse().map_err(|_| {
                Error::invalid(
                    "device",
                    format!("expected {kind}:N with N a GPU index ({kind}:0), found {name:?}"),
                )
            })?;
            (kind, index)
        }
        _ => (name.as_str(), 0),
    };
    match kind {
        "cpu" => Ok(Device::cpu()),
        "wgpu" | "webgpu" => kiln_kernels::wgpu_device(),
        "cuda" => cuda(index),
        "rocm" => rocm(index),
        _ => Err(Error::invalid(
            "device",
            format!("expected one of {NAMES:?}, cuda:N or rocm:N, found {name:?}"),
        )),
    }
}

#[cfg(feature = "cuda")]
fn cuda(index: usize) -> Result<Device> {
    crate::cuda::device(index)
}

#[cfg(not(feature = "cuda"))]
fn cuda(index: usize) -> Result<Device> {
    Err(Error::device(
        "device",
        format!(
            "cuda:{index}: this build of kiln has no CUDA backend; rebuild with `--features cuda`"
        ),
    ))
}

#[cfg(feature = "rocm")]
fn rocm(index: usize) -> Result<Device> {
    crate::rocm::device(index)
}

#[cfg(not(feature = "rocm"))]
fn rocm(index: usize) -> Result<Device> {
    Err(Error::device(
        "device",
        format!(
            "rocm:{index}: this build of kiln has no ROCm (HIP) backend; rebuild with `--features rocm`"
        ),
    ))
}
