//! Creating kiln's WebGPU device: kiln-kernels' wgpu backend on the browser's WebGPU.

use crate::js;
use kiln_core::Device as KDevice;

/// A new WebGPU device, or why there is none.
pub async fn create() -> Result<KDevice, String> {
    let gpu = js::get(&js::get(&js_sys::global().into(), "navigator"), "gpu");
    if gpu.is_undefined() || gpu.is_null() {
        return Err("this browser has no navigator.gpu (WebGPU is off or unsupported)".into());
    }
    backend().await
}

#[cfg(feature = "webgpu")]
async fn backend() -> Result<KDevice, String> {
    kiln_kernels::wgpu_device_async(kiln_kernels::WgpuOptions::default())
        .await
        .map_err(|e| e.to_string())
}

#[cfg(not(feature = "webgpu"))]
async fn backend() -> Result<KDevice, String> {
    Err("this build of kiln-web has no WebGPU backend (built without the `webgpu` feature)".into())
}
