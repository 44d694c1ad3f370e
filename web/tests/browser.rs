//! kiln-web in a real browser (headless Chromium through wasm-pack's runner; see
//! web/webdriver.json): ops through the JS API on the CPU against independent references and on
//! WebGPU against the CPU, the model-file path, errors crossing into JS, and leak accounting.
//!
//!   cd web && WASM_BINDGEN_TEST_TIMEOUT=600 wasm-pack test --headless --chrome --mode no-install
#![cfg(target_arch = "wasm32")]

use js_sys::{Array, Float32Array, Reflect};
use kiln_core::model::save_model;
use kiln_core::nn::{Forward, Init, Linear};
use kiln_core::{DType, Device as KDevice, Tensor as KTensor};
use kiln_web::{Device, Model, Tensor, memory_report as memory};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

/// Deterministic values in [-1, 1).
fn rand(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn obj(pairs: &[(&str, JsValue)]) -> JsValue {
    let o = js_sys::Object::new();
    for (k, v) in pairs {
        Reflect::set(&o, &(*k).into(), v).unwrap();
    }
    o.into()
}

fn shape(dims: &[u32]) -> JsValue {
    dims.iter().map(|&d| JsValue::from(d)).collect::<Array>().into()
}

fn tensor(v: &[f32], dims: &[u32], device: &Device) -> Tensor {
    let opts = obj(&[("device", device.clone().into())]);
    Tensor::from(&Float32Array::from(v).into(), &shape(dims), &opts).unwrap()
}

async fn read(t: &Tensor) -> Vec<f32> {
    let v = JsFuture::from(t.data()).await.unwrap();
    v.dyn_into::<Float32Array>().unwrap().to_vec()
}

fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}[{i}]: {g} vs {w}");
    }
}

fn message(e: &JsValue) -> String {
    Reflect::get(e, &"message".into()).unwrap().as_string().unwrap_or_default()
}

/// The ops of the JS API on one device; returns every result, flattened, in order.
async fn op_suite(dev: &Device) -> Vec<Vec<f32>> {
    let a = tensor(&rand(3 * 5, 1), &[3, 5], dev);
    let b = tensor(&rand(5 * 7, 2), &[5, 7], dev);
    let r = tensor(&rand(5, 3), &[5], dev);
    let x = tensor(&rand(2 * 3 * 6 * 5, 4), &[2, 3, 6, 5], dev);
    let w = tensor(&rand(4 * 3 * 3 * 3, 5), &[4, 3, 3, 3], dev);
    let bias = tensor(&rand(4, 6), &[4], dev);
    let (bj, rj): (JsValue, JsValue) = (b.clone_handle().unwrap().into(), r.clone_handle().unwrap().into());
    let mut outs = Vec::new();
    let results = [
        a.matmul(&bj).unwrap(),
        a.add(&rj).unwrap(),
        a.mul(&JsValue::from(1.5)).unwrap().sub(&rj).unwrap(),
        a.exp().unwrap(),
        a.tanh().unwrap(),
        a.relu().unwrap(),
        a.softmax(Some(-1)).unwrap(),
        a.sum(&JsValue::from(1), None).unwrap(),
        a.mean(&JsValue::UNDEFINED, None).unwrap(),
        a.max(&JsValue::from(0), None).unwrap(),
        a.permute(&shape(&[1, 0])).unwrap().reshape(&shape(&[15])).unwrap(),
        a.slice(&Array::of2(&JsValue::NULL, &shape(&[1, 5, 2])).into()).unwrap(),
        x.conv2d(&w.clone_handle().unwrap().into(), &bias.clone_handle().unwrap().into(), &obj(&[("padding", 1.into()), ("stride", shape(&[1, 2]))]))
            .unwrap(),
        x.max_pool2d(&obj(&[("kernel", 2.into())])).unwrap(),
        x.avg_pool2d(&obj(&[("kernel", 3.into()), ("stride", 1.into())])).unwrap(),
        a.argmax(Some(-1), None).unwrap().cast(&"f32".into()).unwrap(),
    ];
    for t in &results {
        outs.push(read(t).await);
    }
    outs
}

#[wasm_bindgen_test]
async fn cpu_ops_match_independent_references() {
    let cpu = Device::cpu();
    let outs = op_suite(&cpu).await;
    let (a, b, r) = (rand(15, 1), rand(35, 2), rand(5, 3));
    let mut mm = vec![0f32; 21];
    for i in 0..3 {
        for j in 0..7 {
            mm[i * 7 + j] = (0..5).map(|k| a[i * 5 + k] * b[k * 7 + j]).sum();
        }
    }
    assert_close(&outs[0], &mm, 1e-5, "matmul");
    let add: Vec<f32> = a.iter().enumerate().map(|(i, v)| v + r[i % 5]).collect();
    assert_close(&outs[1], &add, 1e-6, "add");
    let mut sm = Vec::new();
    for row in a.chunks(5) {
        let m = row.iter().cloned().fold(f32::MIN, f32::max);
        let z: f32 = row.iter().map(|v| (v - m).exp()).sum();
        sm.extend(row.iter().map(|v| (v - m).exp() / z));
    }
    assert_close(&outs[6], &sm, 1e-5, "softmax");
    let sums: Vec<f32> = a.chunks(5).map(|r| r.iter().sum()).collect();
    assert_close(&outs[7], &sums, 1e-5, "sum");
    let argmax: Vec<f32> = a
        .chunks(5)
        .map(|r| r.iter().enumerate().fold(0, |bi, (i, v)| if *v > r[bi] { i } else { bi }) as f32)
        .collect();
    assert_eq!(outs[15], argmax, "argmax");
}

#[wasm_bindgen_test]
async fn webgpu_ops_match_the_cpu() {
    let gpu = match Device::webgpu().await {
        Ok(d) => d,
        Err(e) => {
            web_sys::console::log_1(&format!("SKIP webgpu_ops_match_the_cpu: {}", message(&e)).into());
            return;
        }
    };
    assert_eq!(gpu.kind(), "webgpu");
    let want = op_suite(&Device::cpu()).await;
    let got = op_suite(&gpu).await;
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_close(g, w, 1e-4, &format!("op {i} on webgpu"));
    }
}

#[wasm_bindgen_test]
fn errors_cross_into_js_with_kiln_messages() {
    let cpu = Device::cpu();
    let a = tensor(&rand(6, 7), &[2, 3], &cpu);
    let b: JsValue = tensor(&rand(8, 8), &[4, 2], &cpu).into();
    let e = a.matmul(&b).unwrap_err();
    assert!(e.is_instance_of::<js_sys::Error>());
    assert_eq!(Reflect::get(&e, &"name".into()).unwrap(), "KilnError");
    assert_eq!(Reflect::get(&e, &"kind".into()).unwrap(), "shape");
    let m = message(&e);
    assert!(m.starts_with("matmul:") && m.contains('3') && m.contains('4'), "{m}");
    let e = Tensor::from(&Float32Array::from(&[1.0f32; 5][..]).into(), &shape(&[2, 3]), &JsValue::UNDEFINED)
        .unwrap_err();
    assert!(message(&e).contains("5 values given for shape [2, 3]"), "{}", message(&e));
    a.dispose();
    assert!(message(&a.relu().unwrap_err()).contains("disposed"));
}

/// A small model file: Linear(16 -> 8) traced by kiln's own save path.
fn small_model() -> (Vec<u8>, Linear) {
    let dev = KDevice::cpu();
    let mut fc = Linear::new(&mut Init::new(&dev, 3), 16, 8).unwrap();
    let sample = KTensor::rand_normal([2, 16], 0.0, 1.0, 4, DType::F32, &dev).unwrap();
    let bytes = save_model(&mut fc, &sample, &Default::default()).unwrap();
    (bytes, fc)
}

#[wasm_bindgen_test]
async fn model_file_loads_and_runs_like_the_module() {
    let (bytes, fc) = small_model();
    let src: JsValue = js_sys::Uint8Array::from(bytes.as_slice()).into();
    let model = Model::load(src, JsValue::UNDEFINED).await.unwrap();
    let inputs = model.inputs().unwrap();
    assert_eq!(inputs.length(), 1);
    let xv = rand(3 * 16, 9);
    let x = tensor(&xv, &[3, 16], &Device::cpu());
    let y = model.forward(&x.clone_handle().unwrap().into()).unwrap();
    let want = fc
        .forward(&KTensor::from_slice(&xv, [3, 16], &KDevice::cpu()).unwrap())
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_close(&read(&y).await, &want, 1e-6, "model output");

    let bad: JsValue = js_sys::Uint8Array::from(&bytes[..bytes.len() / 2]).into();
    let e = Model::load(bad, JsValue::UNDEFINED).await.err().unwrap();
    assert!(message(&e).contains("Model::load"), "{}", message(&e));
    let e = Model::load("/no/such/model.safetensors".into(), JsValue::UNDEFINED).await.err().unwrap();
    assert!(message(&e).contains("HTTP 404"), "{}", message(&e));
}

fn live_bytes() -> f64 {
    Reflect::get(&memory(), &"bytes".into()).unwrap().as_f64().unwrap()
}

async fn leak_check(device: Device) {
    let (bytes, _) = small_model();
    let src: JsValue = js_sys::Uint8Array::from(bytes.as_slice()).into();
    let model = Model::load(src, obj(&[("device", device.clone().into())])).await.unwrap();
    let xv = rand(16, 11);
    let before = live_bytes();
    let mut after_warmup = None;
    for i in 0..10_000 {
        let x = tensor(&xv, &[1, 16], &device);
        let y = model.forward(&x.clone_handle().unwrap().into()).unwrap();
        if i % 1000 == 999 {
            assert_eq!(read(&y).await.len(), 8);
        }
        x.dispose();
        y.dispose();
        if i == 99 {
            after_warmup = Some(memory());
        }
    }
    let end = memory();
    assert_eq!(live_bytes(), before, "live bytes after 10,000 runs on {}", device.kind());
    // The backend's own allocation (WebGPU buffers and pool) must not grow after warm-up either.
    let dev_alloc = |m: &JsValue| {
        let d = Reflect::get(&Reflect::get(m, &"devices".into()).unwrap(), &device.kind().into()).unwrap();
        Reflect::get(&d, &"allocatedBytes".into()).ok().and_then(|v| v.as_f64())
    };
    if let (Some(a), Some(b)) = (after_warmup.as_ref().and_then(dev_alloc), dev_alloc(&end)) {
        assert!(b <= a, "{} backend grew from {a} to {b} bytes", device.kind());
    }
    model.dispose();
    assert_eq!(live_bytes(), before - 16.0 * 8.0 * 4.0 - 8.0 * 4.0);
}

#[wasm_bindgen_test]
async fn ten_thousand_runs_leave_live_bytes_flat_on_cpu() {
    leak_check(Device::cpu()).await;
}

#[wasm_bindgen_test]
async fn ten_thousand_runs_leave_live_bytes_flat_on_webgpu() {
    match Device::webgpu().await {
        Ok(d) => leak_check(d).await,
        Err(e) => web_sys::console::log_1(&format!("SKIP webgpu leak check: {}", message(&e)).into()),
    }
}
