//! `Device`: where tensors live. `Device.auto()` picks WebGPU when the browser has an adapter
//! and the CPU otherwise, and says which and why.

use crate::error::{JsResult, invalid};
use crate::js;
use kiln_core::Device as KDevice;
use std::cell::RefCell;
use wasm_bindgen::prelude::*;

thread_local! {
    /// The page's one WebGPU device, created on first request.
    static WEBGPU: RefCell<Option<KDevice>> = const { RefCell::new(None) };
}

/// A compute device: `"webgpu"` (the GPU through the browser's WebGPU) or `"cpu"` (kiln's
/// reference backend, compiled into the wasm module).
#[wasm_bindgen]
#[derive(Clone, Debug)]
pub struct Device {
    inner: KDevice,
    reason: String,
}

/// `"webgpu"` or `"cpu"`: the kind of a kiln device, as JS names it.
pub fn kind_of(d: &KDevice) -> &'static str {
    if d.same(&KDevice::cpu()) {
        "cpu"
    } else {
        "webgpu"
    }
}

impl Device {
    /// The kiln device.
    pub fn inner(&self) -> &KDevice {
        &self.inner
    }
    /// Wraps a kiln device with the reason it was chosen.
    pub fn from_kiln(inner: KDevice, reason: impl Into<String>) -> Self {
        Device {
            inner,
            reason: reason.into(),
        }
    }
    /// The device an options bag names: `{device: Device | "cpu" | "webgpu"}`; the CPU when absent.
    pub fn from_options(options: &JsValue, op: &'static str) -> JsResult<KDevice> {
        let d = js::get(options, "device");
        if d.is_undefined() || d.is_null() {
            return Ok(KDevice::cpu());
        }
        let kind = d.as_string().or_else(|| js::get(&d, "kind").as_string());
        match kind.as_deref() {
            Some("cpu") => Ok(KDevice::cpu()),
            Some("webgpu") => WEBGPU.with_borrow(|w| w.clone()).ok_or_else(|| {
                invalid(
                    op,
                    "WebGPU is not initialised; call `await Device.webgpu()` first",
                )
            }),
            _ => Err(invalid(
                op,
                format!(
                    "options.device must be a Device, \"cpu\" or \"webgpu\", got {}",
                    js::type_name(&d)
                ),
            )),
        }
    }
}

#[wasm_bindgen]
impl Device {
    /// kiln's CPU backend (always available).
    pub fn cpu() -> Device {
        Device::from_kiln(KDevice::cpu(), "requested explicitly")
    }

    /// The GPU through WebGPU. Rejects with an error saying why when the browser has no WebGPU
    /// or no adapter.
    pub async fn webgpu() -> JsResult<Device> {
        let dev = webgpu_device()
            .await
            .map_err(|why| invalid("Device.webgpu", why))?;
        Ok(Device::from_kiln(dev, "requested explicitly"))
    }

    /// WebGPU when an adapter exists, else the CPU; `reason` says why.
    pub async fn auto() -> Device {
        match webgpu_device().await {
            Ok(dev) => Device::from_kiln(dev, "a WebGPU adapter is available"),
            Err(why) => Device::from_kiln(KDevice::cpu(), format!("WebGPU unavailable: {why}")),
        }
    }

    /// `"webgpu"` or `"cpu"`.
    #[wasm_bindgen(getter)]
    pub fn kind(&self) -> String {
        kind_of(&self.inner).into()
    }

    /// The backend's own name (`"cpu"`, or the GPU adapter).
    #[wasm_bindgen(getter)]
    pub fn name(&self) -> String {
        self.inner.name()
    }

    /// Why this device was chosen (for `Device.auto()`: why WebGPU was or was not used).
    #[wasm_bindgen(getter)]
    pub fn reason(&self) -> String {
        self.reason.clone()
    }

    /// `"webgpu (NVIDIA ...)"` / `"cpu"`.
    #[wasm_bindgen(js_name = toString)]
    pub fn to_string_js(&self) -> String {
        match kind_of(&self.inner) {
            "cpu" => "cpu".into(),
            k => format!("{k} ({})", self.inner.name()),
        }
    }
}

/// The page's WebGPU device, created once; `Err` says why there is none.
async fn webgpu_device() -> Result<KDevice, String> {
    if let Some(d) = WEBGPU.with_borrow(|w| w.clone()) {
        return Ok(d);
    }
    let d = crate::webgpu::create().await?;
    WEBGPU.with_borrow_mut(|w| *w = Some(d.clone()));
    Ok(d)
}
