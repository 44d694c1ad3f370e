//! Creating kiln's WebGPU device (kiln-kernels' wgpu backend on the browser's WebGPU).

use crate::js;
use kiln_core::Device as KDevice;

/// A new WebGPU device, or why there is none.
pub async fn create() -> Result<KDevice, String> {
    let gpu = js::get(&js::get(&js_sys::global().into(), "navigator"), "gpu");
    if gpu.is_undefined() || gpu.is_null() {
        return Err("this browser has no navigator.gpu (WebGPU is off or unsupported)".into());
    }
    Err("this build of kiln has no WebGPU backend yet".into())
}
