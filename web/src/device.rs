//! `Device`: where tensors live, and the one home of kiln's choice between WebGPU and the CPU:
//! `Device.auto()` decides from the adapter the browser offers (without creating a GPU device
//! when it picks the CPU), and `Model.load(.., { device: "auto" })` times the model on both.

use crate::error::{IntoJs, JsResult, invalid};
use crate::js;
use crate::webgpu::{self, Adapter};
use kiln_core::Device as KDevice;
use kiln_core::model::Model as KModel;
#[cfg(all(feature = "webgpu", feature = "cpu"))]
use kiln_core::{DType, Tensor as KTensor};
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use wasm_bindgen::prelude::*;

/// The page's one WebGPU device, both ways: behind the fusion decorator and without it. Both
/// share the GPU device (buffers, pipelines); tensors of one are not accepted by ops of the other.
#[derive(Clone)]
struct Gpu {
    fused: KDevice,
    plain: KDevice,
}

impl Gpu {
    fn get(&self, fusion: bool) -> KDevice {
        if fusion {
            self.fused.clone()
        } else {
            self.plain.clone()
        }
    }
}

thread_local! {
    /// The page's one WebGPU device, created on first request.
    static WEBGPU: RefCell<Option<Gpu>> = const { RefCell::new(None) };
}

/// `options.fusion` (default `true`): whether WebGPU runs chains of elementwise ops as one
/// generated kernel. `d` is `options.device`; a `Device` passed there brings its own setting.
fn fusion_option(options: &JsValue, d: &JsValue) -> bool {
    js::get(options, "fusion")
        .as_bool()
        .or_else(|| js::get(d, "fusion").as_bool())
        .unwrap_or(true)
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

/// What an options bag's `device` asks for.
pub enum Wanted {
    /// `"auto"`: let kiln choose (only `Model.load` accepts it); WebGPU fused or not.
    Auto { fusion: bool },
    /// A device, with the reason it was chosen.
    Given(Device),
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
    /// What `options.device` asks for: a Device, `"cpu"`, `"webgpu"` or `"auto"`; when absent,
    /// the CPU, or in the WebGPU-only module (no CPU kernels) the page's WebGPU device once
    /// created, else `"auto"`.
    pub fn wanted(options: &JsValue, op: &'static str) -> JsResult<Wanted> {
        let d = js::get(options, "device");
        if d.is_undefined() || d.is_null() {
            let reason = "the default (no options.device given)";
            if cfg!(feature = "cpu") {
                return Ok(Wanted::Given(Device::from_kiln(KDevice::cpu(), reason)));
            }
            let fusion = fusion_option(options, &d);
            return Ok(match WEBGPU.with_borrow(|w| w.clone()) {
                Some(gpu) => Wanted::Given(Device::from_kiln(gpu.get(fusion), reason)),
                None => Wanted::Auto { fusion },
            });
        }
        let reason = js::get(&d, "reason")
            .as_string()
            .unwrap_or_else(|| "requested explicitly".into());
        let kind = d.as_string().or_else(|| js::get(&d, "kind").as_string());
        let fusion = fusion_option(options, &d);
        match kind.as_deref() {
            Some("auto") if d.is_string() => Ok(Wanted::Auto { fusion }),
            Some("cpu") => Ok(Wanted::Given(Device::from_kiln(KDevice::cpu(), reason))),
            Some("webgpu") => match WEBGPU.with_borrow(|w| w.clone()) {
                Some(gpu) => Ok(Wanted::Given(Device::from_kiln(gpu.get(fusion), reason))),
                None => Err(invalid(
                    op,
                    format_args!("WebGPU is not initialised; call `await Device.webgpu()` first"),
                )),
            },
            _ => Err(invalid(
                op,
                format_args!(
                    "options.device must be a Device, \"cpu\", \"webgpu\" or \"auto\", got {}",
                    d.as_string()
                        .map(|s| format!("{s:?}"))
                        .unwrap_or_else(|| js::type_name(&d))
                ),
            )),
        }
    }
    /// The device an options bag names: `{device: Device | "cpu" | "webgpu"}`; when absent, as
    /// for `wanted` (the CPU before WebGPU is created, in the WebGPU-only module).
    pub fn from_options(options: &JsValue, op: &'static str) -> JsResult<KDevice> {
        match Self::wanted(options, op)? {
            Wanted::Given(d) => Ok(d.inner),
            // No device given, in the WebGPU-only module before WebGPU is set up: the CPU, which
            // holds data (Tensor.from) though it runs no op.
            Wanted::Auto { .. } if !js::get(options, "device").is_string() => Ok(KDevice::cpu()),
            Wanted::Auto { .. } => Err(invalid(
                op,
                format_args!(
                    "options.device \"auto\" is only for Model.load; pass `await Device.auto()` here"
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
    /// or no adapter. `options.fusion: false` turns kernel fusion off (it is on by default):
    ///
    /// ```js
    /// const plain = await Device.webgpu({ fusion: false }); // one kernel per op
    /// ```
    pub async fn webgpu(options: JsValue) -> JsResult<Device> {
        let fusion = fusion_option(&options, &JsValue::UNDEFINED);
        let dev = webgpu_device(fusion)
            .await
            .map_err(|why| invalid("Device.webgpu", format_args!("{why}")))?;
        Ok(Device::from_kiln(dev, "requested explicitly"))
    }

    /// WebGPU on a hardware adapter, else the CPU (no WebGPU, no adapter, or only a software
    /// fallback adapter, which is slower than kiln's CPU backend); `reason` says why. Without
    /// CPU kernels (the WebGPU-only module) any adapter is taken.
    /// `options.fusion` as for `Device.webgpu`.
    pub async fn auto(options: JsValue) -> Device {
        auto(fusion_option(&options, &JsValue::UNDEFINED)).await
    }

    /// Whether chains of elementwise ops run as one generated kernel: `true` on WebGPU unless
    /// it was asked for with `fusion: false`; `false` on the CPU.
    #[wasm_bindgen(getter)]
    pub fn fusion(&self) -> bool {
        WEBGPU.with_borrow(|w| w.as_ref().is_some_and(|g| g.fused.same(&self.inner)))
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

    /// The threads kiln's CPU kernels spread over: the page's pool in the threaded build (a
    /// cross-origin isolated page, see `init`), else 1. The same on every device.
    ///
    /// ```js
    /// console.log(Device.cpu().threads); // 2 on an isolated page of a 2-core machine
    /// ```
    #[wasm_bindgen(getter)]
    pub fn threads(&self) -> usize {
        kiln_core::cpu::threads()
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

/// A boxed future: awaited from several places, its code is in the .wasm once.
type Boxed<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// The page's WebGPU device (created once), fused or not; `Err` says why there is none.
fn webgpu_device(fusion: bool) -> Boxed<'static, Result<KDevice, String>> {
    Box::pin(async move {
        if let Some(gpu) = WEBGPU.with_borrow(|w| w.clone()) {
            return Ok(gpu.get(fusion));
        }
        let plain = webgpu::create().await?;
        let gpu = Gpu {
            fused: fused(&plain),
            plain,
        };
        WEBGPU.with_borrow_mut(|w| *w = Some(gpu.clone()));
        Ok(gpu.get(fusion))
    })
}

/// The WebGPU device behind kiln's fusion decorator: chains of elementwise ops run as one
/// generated kernel (`kiln_kernels::fusion`).
#[cfg(feature = "webgpu")]
fn fused(d: &KDevice) -> KDevice {
    kiln_kernels::fusion::wrap(d)
}

#[cfg(not(feature = "webgpu"))]
fn fused(d: &KDevice) -> KDevice {
    d.clone()
}

/// The names and WGSL of the kernels fusion generated so far in this page,
/// ordered by name: `[{ name: "kiln.fused.<hash>", wgsl }]`, then the GEMM epilogues
/// (`kiln.epilogue.<hash>`: a chain run in a matmul's or convolution's store; the WGSL is the
/// part appended to the GEMM kernel).
///
/// ```js
/// const x = Tensor.randNormal([1000], { device: await Device.webgpu() });
/// await x.mul(0.5).add(1).data();
/// fusedKernels().length; // 1
/// ```
#[wasm_bindgen(js_name = fusedKernels)]
pub fn fused_kernels() -> js_sys::Array {
    #[cfg(feature = "webgpu")]
    let kernels = kiln_kernels::fusion::kernels();
    #[cfg(not(feature = "webgpu"))]
    let kernels: Vec<(String, String)> = Vec::new();
    kernels
        .into_iter()
        .map(|(name, wgsl)| {
            JsValue::from(js::object(&[("name", name.into()), ("wgsl", wgsl.into())]))
        })
        .collect()
}

/// `Device.auto()`, with WebGPU fused or not.
pub async fn auto(fusion: bool) -> Device {
    by_adapter(fusion).await.0
}

fn on_cpu(reason: String) -> Device {
    Device::from_kiln(KDevice::cpu(), reason)
}

/// `Device.auto()`'s choice, with the adapter when it is WebGPU. The adapter is read through JS
/// first: a GPU device is created only for a hardware adapter.
fn by_adapter(fusion: bool) -> Boxed<'static, (Device, Option<Adapter>)> {
    Box::pin(async move {
        match webgpu::adapter().await {
            Err(why) => (on_cpu(format!("WebGPU unavailable: {why}")), None),
            // Without CPU kernels (the WebGPU-only module) a fallback adapter is still the faster.
            Ok(a) if a.fallback && cfg!(feature = "cpu") => (
                on_cpu(format!(
                    "the only WebGPU adapter is a software fallback ({}), slower than kiln's CPU backend",
                    a.label
                )),
                None,
            ),
            Ok(a) => match webgpu_device(fusion).await {
                Ok(dev) => (
                    Device::from_kiln(dev, format!("WebGPU adapter: {}", a.label)),
                    Some(a),
                ),
                Err(why) => (
                    on_cpu(format!(
                        "the WebGPU adapter ({}) gave no device: {why}",
                        a.label
                    )),
                    None,
                ),
            },
        }
    })
}

/// `Model.load(.., { device: "auto" })`: the model loaded on the faster device for it. The CPU
/// when `Device.auto()` says so; otherwise the choice remembered in `localStorage` for this
/// adapter and these model bytes, else measured (load on both, one warm-up, median of 3 timed
/// runs on random inputs) and remembered.
pub async fn load_on_fastest(bytes: &[u8], fusion: bool) -> JsResult<(KModel, Device)> {
    let (auto, adapter) = by_adapter(fusion).await;
    // Without the webgpu feature there is never an adapter here (no GPU device can be made):
    // the measuring code is compiled only with it, so it is out of the CPU-only module (a
    // `cfg!` test in a filter left its probe in).
    #[cfg(all(feature = "webgpu", feature = "cpu"))]
    if let Some(adapter) = adapter {
        return load_measured(bytes, auto, adapter).await;
    }
    #[cfg(not(all(feature = "webgpu", feature = "cpu")))]
    let _ = adapter;
    Ok((load(bytes, &auto.inner)?, auto))
}

/// `load_on_fastest` on a WebGPU adapter: the remembered choice, else both measured.
#[cfg(all(feature = "webgpu", feature = "cpu"))]
async fn load_measured(bytes: &[u8], auto: Device, adapter: Adapter) -> JsResult<(KModel, Device)> {
    let (gpu, cpu) = (auto.inner, KDevice::cpu());
    let key = format!("kiln.device|{}|{:016x}", adapter.label, fnv1a64(bytes));
    if let Some((gpu_wins, gpu_ms, cpu_ms)) = remembered(&key) {
        let dev = if gpu_wins { gpu } else { cpu };
        let reason = format!(
            "remembered from an earlier measurement of this model on this adapter: {}",
            timings(gpu_ms, cpu_ms)
        );
        return Ok((load(bytes, &dev)?, Device::from_kiln(dev, reason)));
    }
    let on_cpu_model = load(bytes, &cpu)?;
    let cpu_ms = probe(&on_cpu_model, &cpu).await.js()?;
    let measured = match KModel::load_with(bytes, &gpu, &js::parse_json) {
        Ok(m) => probe(&m, &gpu).await.map(|ms| (m, ms)),
        Err(e) => Err(e),
    };
    let (on_gpu_model, gpu_ms) = match measured {
        Ok(m) => m,
        Err(e) => {
            let reason = format!("WebGPU failed on this model ({e}), so the CPU");
            return Ok((on_cpu_model, on_cpu(reason)));
        }
    };
    let gpu_wins = gpu_ms < cpu_ms;
    remember(&key, gpu_wins, gpu_ms, cpu_ms);
    let reason = format!("measured on this model: {}", timings(gpu_ms, cpu_ms));
    // The loser is dropped here, freeing its weights.
    Ok(if gpu_wins {
        (on_gpu_model, Device::from_kiln(gpu, reason))
    } else {
        (on_cpu_model, on_cpu(reason))
    })
}

#[cfg(all(feature = "webgpu", feature = "cpu"))]
/// The choice stored under `key` (`{"webgpu": bool, "webgpuMs", "cpuMs"}` as JSON): whether
/// WebGPU won, and the two timings.
fn remembered(key: &str) -> Option<(bool, f64, f64)> {
    let v = js_sys::JSON::parse(&js::stored(key)?).ok()?;
    let won = js::get(&v, "webgpu").as_bool()?;
    Some((won, js::num(&v, "webgpuMs")?, js::num(&v, "cpuMs")?))
}

#[cfg(all(feature = "webgpu", feature = "cpu"))]
fn remember(key: &str, gpu_wins: bool, gpu_ms: f64, cpu_ms: f64) {
    let v = js::object(&[
        ("webgpu", gpu_wins.into()),
        ("webgpuMs", gpu_ms.into()),
        ("cpuMs", cpu_ms.into()),
    ]);
    if let Some(json) = js_sys::JSON::stringify(&v).ok().and_then(|s| s.as_string()) {
        js::store(key, &json);
    }
}

fn load(bytes: &[u8], dev: &KDevice) -> JsResult<KModel> {
    KModel::load_with(bytes, dev, &js::parse_json).js()
}

#[cfg(all(feature = "webgpu", feature = "cpu"))]
/// `"WebGPU 812.30 ms, CPU 5.91 ms per run"`.
fn timings(gpu_ms: f64, cpu_ms: f64) -> String {
    format!("WebGPU {} ms, CPU {} ms per run", ms(gpu_ms), ms(cpu_ms))
}

#[cfg(all(feature = "webgpu", feature = "cpu"))]
/// A duration in ms with 2 decimals, as `{:.2}` writes it, through integers rather than Rust's
/// float formatting, which the WebGPU modules then leave (issue 18, bytes: with fusion's
/// expression keys written without `core::fmt`, main 401.5 -> 392.0 KiB gzipped).
fn ms(ms: f64) -> String {
    let hundredths = (ms.max(0.0) * 100.0).round() as u64;
    format!("{}.{:02}", hundredths / 100, hundredths % 100)
}

#[cfg(all(feature = "webgpu", feature = "cpu"))]
/// FNV-1a, 64 bits: a fast fingerprint of the model bytes for the remembered choice.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(all(feature = "webgpu", feature = "cpu"))]
/// Milliseconds per run of `model` on `dev` (one warm-up, then the median of 3 runs, outputs read
/// back) on random normal inputs shaped by its input specs (free dimensions 1).
fn probe<'a>(model: &'a KModel, dev: &'a KDevice) -> Boxed<'a, kiln_core::Result<f64>> {
    Box::pin(async move {
        let mut inputs = Vec::new();
        for (spec, seed) in model.inputs().iter().zip(1u64..) {
            let dims: Vec<usize> = spec.shape.iter().map(|d| d.unwrap_or(1)).collect();
            let x = KTensor::rand_normal(dims, 0.0, 1.0, seed, DType::F32, dev)?;
            inputs.push(if spec.dtype == DType::F32 {
                x
            } else {
                x.cast(spec.dtype)?
            });
        }
        let mut ms = [0.0; 4];
        for t in &mut ms {
            let t0 = js::now_ms();
            for y in model.run(&inputs)? {
                y.data().await?;
            }
            *t = js::now_ms() - t0;
        }
        let [_, a, b, c] = ms;
        Ok(a.min(b).max(a.max(b).min(c)))
    })
}
