//! Choosing the device a command runs on, by name (`--device cpu|wgpu|cuda`).

use crate::core::{Device, Error, Result};

/// The device names `kiln` knows, whether or not this build includes them.
pub const NAMES: [&str; 3] = ["cpu", "wgpu", "cuda"];

/// The device called `name`: `cpu` (always), `wgpu` (WebGPU's native backends) and `cuda` (built with
/// the `cuda` feature). Unknown names and devices missing from this build or this machine are
/// errors that say which devices exist.
///
/// ```
/// let cpu = kiln::device::select("cpu")?;
/// assert_eq!(cpu.name(), "cpu");
/// assert!(kiln::device::select("tpu").is_err());
/// # Ok::<(), kiln::core::Error>(())
/// ```
pub fn select(name: &str) -> Result<Device> {
    match name.to_ascii_lowercase().as_str() {
        "cpu" => Ok(Device::cpu()),
        "wgpu" | "webgpu" => Err(Error::device(
            "device",
            "wgpu: this build of kiln does not include the wgpu backend yet; use --device cpu",
        )),
        "cuda" => cuda(),
        other => Err(Error::invalid(
            "device",
            format!("expected one of {NAMES:?}, found {other:?}"),
        )),
    }
}

#[cfg(feature = "cuda")]
fn cuda() -> Result<Device> {
    Err(Error::device(
        "device",
        "cuda: the CUDA backend is not wired into `kiln` yet; use --device cpu",
    ))
}

#[cfg(not(feature = "cuda"))]
fn cuda() -> Result<Device> {
    Err(Error::device(
        "device",
        "cuda: this build of kiln has no CUDA backend; rebuild with `--features cuda`",
    ))
}
