//! Choosing the device a command runs on, by name (`--device cpu|wgpu|cuda|cuda:N`).

use crate::core::{Device, Error, Result};

/// The device names `kiln` knows, whether or not this build includes them.
pub const NAMES: [&str; 3] = ["cpu", "wgpu", "cuda"];

/// The device called `name`: `cpu` (always), `wgpu` or `webgpu` (the default GPU through wgpu:
/// Vulkan, Metal, DX12 or GL) and `cuda` or `cuda:N` (GPU `N`, 0 by default; builds with the
/// `cuda` feature). Unknown names and devices missing from this build or this machine are
/// errors that say which devices exist.
///
/// ```
/// let cpu = kiln::device::select("cpu")?;
/// assert_eq!(cpu.name(), "cpu");
/// assert!(kiln::device::select("tpu").is_err());
/// assert!(kiln::device::select("cuda:x").is_err());
/// # Ok::<(), kiln::core::Error>(())
/// ```
pub fn select(name: &str) -> Result<Device> {
    match name.to_ascii_lowercase().as_str() {
        "cpu" => Ok(Device::cpu()),
        "wgpu" | "webgpu" => kiln_kernels::wgpu_device(),
        "cuda" => cuda(0),
        other => match other.strip_prefix("cuda:") {
            Some(index) => cuda(index.parse().map_err(|_| {
                Error::invalid(
                    "device",
                    format!("expected cuda:N with N a GPU index (cuda:0), found {other:?}"),
                )
            })?),
            None => Err(Error::invalid(
                "device",
                format!("expected one of {NAMES:?} or cuda:N, found {other:?}"),
            )),
        },
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
