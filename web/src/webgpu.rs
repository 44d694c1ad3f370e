//! The browser's WebGPU: what adapter it offers (read through JS, without creating a device) and
//! creating kiln's device on it (kiln-kernels' wgpu backend).

use crate::js;
use kiln_core::Device as KDevice;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

/// The adapter `navigator.gpu.requestAdapter()` gives, as far as choosing a device needs it.
#[derive(Clone, Debug)]
pub struct Adapter {
    /// A software adapter (SwiftShader, WARP...): `info.isFallbackAdapter`, or the older
    /// `adapter.isFallbackAdapter`.
    pub fallback: bool,
    /// vendor, architecture, device and description from `adapter.info`, the non-empty ones.
    pub label: String,
}

fn navigator_gpu() -> Result<JsValue, String> {
    let gpu = js::get(&js::get(&js_sys::global().into(), "navigator"), "gpu");
    if gpu.is_undefined() || gpu.is_null() {
        return Err("this browser has no navigator.gpu (WebGPU is off or unsupported)".into());
    }
    Ok(gpu)
}

#[wasm_bindgen]
extern "C" {
    /// `navigator.gpu.requestAdapter(options)`.
    #[wasm_bindgen(js_namespace = ["navigator", "gpu"], js_name = requestAdapter, catch)]
    fn request_adapter(options: &JsValue) -> Result<js_sys::Promise, JsValue>;
}

/// The adapter the browser offers, or why there is none. Creates no GPU device.
pub async fn adapter() -> Result<Adapter, String> {
    if !cfg!(feature = "webgpu") {
        return Err(NO_BACKEND.into());
    }
    navigator_gpu()?;
    let options = js::object(&[("powerPreference", "high-performance".into())]);
    let adapter = match request_adapter(&options) {
        Ok(p) => JsFuture::from(p).await,
        Err(e) => Err(e),
    }
    .map_err(|e| format!("navigator.gpu.requestAdapter() failed: {}", js::message(&e)))?;
    if !adapter.is_object() {
        return Err("navigator.gpu.requestAdapter() found no adapter".into());
    }
    let info = js::get(&adapter, "info");
    let fallback = js::get(&info, "isFallbackAdapter")
        .as_bool()
        .or_else(|| js::get(&adapter, "isFallbackAdapter").as_bool())
        .unwrap_or(false);
    let mut label = String::new();
    for key in ["vendor", "architecture", "device", "description"] {
        if let Some(word) = js::get(&info, key).as_string() {
            if !word.is_empty() && !label.is_empty() {
                label.push(' ');
            }
            label.push_str(&word);
        }
    }
    if label.is_empty() {
        label = "unnamed adapter".into();
    }
    Ok(Adapter { fallback, label })
}

const NO_BACKEND: &str = "this is kiln's CPU-only module (loaded by init() with `webgpu: false`, \
     or where the page has no navigator.gpu), which has no WebGPU backend; \
     `init(undefined, { webgpu: true })` loads one with it";

/// A new WebGPU device, or why there is none.
#[cfg(feature = "webgpu")]
pub async fn create() -> Result<KDevice, String> {
    navigator_gpu()?;
    kiln_kernels::wgpu_device_async(kiln_kernels::WgpuOptions::default())
        .await
        .map_err(|e| e.to_string())
}

#[cfg(not(feature = "webgpu"))]
pub async fn create() -> Result<KDevice, String> {
    Err(NO_BACKEND.into())
}
