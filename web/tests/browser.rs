//! kiln-web in a real browser (headless Chromium driven by wasm-bindgen-test-runner, with the
//! flags in web/webdriver.json): ops through the JS API on the CPU against independent references
//! and on WebGPU against the CPU, the model-file path, errors crossing into JS, and leak accounting.
//!
//!   scripts/test-web.sh runs them; by hand (tools from scripts/lib/ensure.sh):
//!   cd web && PATH=../target/tools/bin:$PATH CHROMEDRIVER=$(command -v chromedriver) \
//!     CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
//!     cargo test --release --target wasm32-unknown-unknown --test browser
#![cfg(target_arch = "wasm32")]

use js_sys::{Array, Float32Array, Reflect};
use kiln_core::model::save_model;
use kiln_core::nn::{Conv2d, Flatten, Forward, Init, Linear, MaxPool2d, ReLU, Sequential};
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

/// What the Rust module computes for `xv` (shaped `dims`) on the CPU: the reference a loaded
/// model file must reproduce.
fn cpu_forward(net: &impl Forward, xv: &[f32], dims: &[usize]) -> Vec<f32> {
    net.forward(&KTensor::from_slice(xv, dims.to_vec(), &KDevice::cpu()).unwrap())
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
}

fn obj(pairs: &[(&str, JsValue)]) -> JsValue {
    let o = js_sys::Object::new();
    for (k, v) in pairs {
        Reflect::set(&o, &(*k).into(), v).unwrap();
    }
    o.into()
}

fn shape(dims: &[u32]) -> JsValue {
    dims.iter()
        .map(|&d| JsValue::from(d))
        .collect::<Array>()
        .into()
}

fn tensor(v: &[f32], dims: &[u32], device: &Device) -> Tensor {
    let opts = obj(&[("device", device.clone().into())]);
    Tensor::from(&Float32Array::from(v).into(), &shape(dims), &opts).unwrap()
}

/// The f32 values of a tensor (other dtypes are cast first), or kiln's error message.
async fn try_read(t: &Tensor) -> Result<Vec<f32>, String> {
    let t = if t.dtype().map_err(|e| message(&e))? == "f32" {
        t.clone_handle()
    } else {
        t.cast(&"f32".into())
    }
    .map_err(|e| message(&e))?;
    let v = JsFuture::from(t.data()).await.map_err(|e| message(&e));
    t.dispose();
    Ok(v?.unchecked_into::<Float32Array>().to_vec())
}

async fn read(t: &Tensor) -> Vec<f32> {
    try_read(t).await.unwrap()
}

/// `await v.data()` on a JS-side f32 Tensor object, through the JS method.
async fn read_js(v: &JsValue) -> Vec<f32> {
    let f: js_sys::Function = Reflect::get(v, &"data".into()).unwrap().unchecked_into();
    let p: js_sys::Promise = f.call0(v).unwrap().unchecked_into();
    JsFuture::from(p)
        .await
        .unwrap()
        .unchecked_into::<Float32Array>()
        .to_vec()
}

/// Frees a JS-side Tensor object through its own `dispose()`, as JS callers do.
fn dispose(v: &JsValue) {
    let f: js_sys::Function = Reflect::get(v, &"dispose".into()).unwrap().unchecked_into();
    f.call0(v).unwrap();
}

fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    if let Err(e) = check_close(got, want, tol) {
        panic!("{what}: {e}");
    }
}

fn check_close(got: &[f32], want: &[f32], tol: f32) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} values, expected {}", got.len(), want.len()));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let same_nan = g.is_nan() && w.is_nan();
        // NaN compares false, so a NaN where a number is expected is caught here.
        let within = (g - w).abs() <= tol * (1.0 + w.abs());
        if !same_nan && !within {
            return Err(format!("element {i}: {g} vs {w}"));
        }
    }
    Ok(())
}

fn message(e: &JsValue) -> String {
    Reflect::get(e, &"message".into())
        .ok()
        .and_then(|m| m.as_string())
        .unwrap_or_else(|| format!("{e:?}"))
}

/// One op of the suite: its name and how to compute it from the suite's inputs.
type OpCase = (&'static str, fn(&Inputs) -> Result<Tensor, JsValue>);

/// The suite's inputs on one device (random values, odd shapes), as JS sees them.
struct Inputs {
    a: Tensor,
    /// A second handle on `a`, as JS passes tensors to ops.
    a_js: JsValue,
    pos: Tensor,
    pos_js: JsValue,
    b: JsValue,
    r: JsValue,
    c: JsValue,
    bat: Tensor,
    bat_rhs: JsValue,
    x: Tensor,
    w: JsValue,
    bias: JsValue,
    idx: JsValue,
    cls: Tensor,
}

impl Inputs {
    fn new(dev: &Device) -> Inputs {
        let js = |t: Tensor| -> JsValue { t.into() };
        let pos = tensor(
            &rand(15, 12)
                .iter()
                .map(|v| v.abs() + 0.1)
                .collect::<Vec<_>>(),
            &[3, 5],
            dev,
        );
        let idx_opts = obj(&[("device", dev.clone().into()), ("dtype", "i32".into())]);
        let ints = |v: &[i32]| -> JsValue { js_sys::Int32Array::from(v).into() };
        let a = tensor(&rand(3 * 5, 1), &[3, 5], dev);
        Inputs {
            a_js: a.clone_handle().unwrap().into(),
            a,
            pos_js: pos.clone_handle().unwrap().into(),
            pos,
            b: js(tensor(&rand(5 * 7, 2), &[5, 7], dev)),
            r: js(tensor(&rand(5, 3), &[5], dev)),
            c: js(tensor(&rand(3 * 5, 13), &[3, 5], dev)),
            bat: tensor(&rand(2 * 3 * 5, 14), &[2, 3, 5], dev),
            bat_rhs: js(tensor(&rand(2 * 5 * 4, 15), &[2, 5, 4], dev)),
            x: tensor(&rand(2 * 3 * 6 * 5, 4), &[2, 3, 6, 5], dev),
            w: js(tensor(&rand(4 * 3 * 3 * 3, 5), &[4, 3, 3, 3], dev)),
            bias: js(tensor(&rand(4, 6), &[4], dev)),
            idx: Tensor::from(&ints(&[2, 0, 2, 1]), &JsValue::UNDEFINED, &idx_opts)
                .unwrap()
                .into(),
            cls: Tensor::from(&ints(&[3, 0, 1, 3, 2]), &JsValue::UNDEFINED, &idx_opts).unwrap(),
        }
    }

    fn dispose(self) {
        for t in [&self.a, &self.pos, &self.bat, &self.x, &self.cls] {
            t.dispose();
        }
        for v in [
            &self.a_js,
            &self.pos_js,
            &self.b,
            &self.r,
            &self.c,
            &self.bat_rhs,
            &self.w,
            &self.bias,
            &self.idx,
        ] {
            dispose(v);
        }
    }
}

/// Every op family of the JS API, each on random inputs.
const OPS: &[OpCase] = &[
    ("matmul", |i| i.a.matmul(&i.b)),
    ("batched matmul", |i| i.bat.matmul(&i.bat_rhs)),
    ("add (broadcast)", |i| i.a.add(&i.r)),
    ("mul scalar, sub", |i| i.a.mul(&1.5.into())?.sub(&i.r)),
    ("div", |i| i.a.div(&i.pos_js)),
    ("pow", |i| i.pos.pow(&i.c)),
    ("maximum", |i| i.a.maximum(&i.c)),
    ("minimum", |i| i.a.minimum(&i.c)),
    ("lt", |i| i.a.lt(&i.c)),
    ("eq (self)", |i| i.a.eq(&i.a_js)),
    ("where", |i| {
        i.a.gt(&0.0.into())?.where_(&i.c, &(-2.0).into())
    }),
    ("neg", |i| i.a.neg()),
    ("abs", |i| i.a.abs()),
    ("exp", |i| i.a.exp()),
    ("log", |i| i.pos.log()),
    ("sqrt", |i| i.pos.sqrt()),
    ("rsqrt", |i| i.pos.rsqrt()),
    ("recip", |i| i.pos.recip()),
    ("sin", |i| i.a.sin()),
    ("cos", |i| i.a.cos()),
    ("tanh", |i| i.a.tanh()),
    ("sigmoid", |i| i.a.sigmoid()),
    ("relu", |i| i.a.relu()),
    ("gelu", |i| i.a.gelu()),
    ("erf", |i| i.a.erf()),
    ("floor", |i| i.a.mul(&3.0.into())?.floor()),
    ("ceil", |i| i.a.mul(&3.0.into())?.ceil()),
    ("sign", |i| i.a.sign()),
    ("clamp", |i| i.a.clamp(-0.5, 0.25)),
    ("softmax", |i| i.a.softmax(Some(-1))),
    ("logSoftmax", |i| i.a.log_softmax(Some(0))),
    ("sum axis 1", |i| i.a.sum(&1.into(), None)),
    ("mean all", |i| i.a.mean(&JsValue::UNDEFINED, None)),
    ("max axis 0", |i| i.a.max(&0.into(), None)),
    ("min keepdim", |i| i.a.min(&1.into(), Some(true))),
    ("prod", |i| i.a.prod(&1.into(), None)),
    ("var", |i| i.a.var(&1.into(), None, None)),
    ("argmax", |i| i.a.argmax(Some(-1), None)),
    ("argmin", |i| i.a.argmin(Some(0), None)),
    ("cumsum", |i| i.a.cumsum(Some(1))),
    ("permute + reshape", |i| {
        i.a.permute(&shape(&[1, 0]))?.reshape(&shape(&[15]))
    }),
    ("transpose (batched)", |i| i.bat.transpose(None, None)),
    ("slice with step", |i| {
        i.a.slice(&Array::of2(&JsValue::NULL, &shape(&[1, 5, 2])).into())
    }),
    ("strided view + exp", |i| {
        i.x.permute(&shape(&[0, 2, 3, 1]))?.exp()
    }),
    ("expand", |i| {
        i.a.unsqueeze(0)?
            .expand(&shape(&[2, 3, 5]))?
            .add(&1.0.into())
    }),
    ("pad", |i| {
        i.a.pad(
            &Array::of2(&shape(&[1, 0]), &shape(&[2, 1])).into(),
            Some(0.5),
        )
    }),
    ("concat", |i| {
        Tensor::concat(&Array::of2(&i.a_js, &i.c).into(), Some(0))
    }),
    ("stack", |i| {
        Tensor::stack(&Array::of2(&i.a_js, &i.c).into(), Some(1))
    }),
    ("indexSelect", |i| i.a.index_select(1, &i.idx)),
    ("oneHot", |i| i.cls.one_hot(4, &JsValue::UNDEFINED)),
    ("conv2d stride/padding", |i| {
        i.x.conv2d(
            &i.w,
            &i.bias,
            &obj(&[("padding", 1.into()), ("stride", shape(&[1, 2]))]),
        )
    }),
    ("conv2d dilation", |i| {
        i.x.conv2d(
            &i.w,
            &JsValue::NULL,
            &obj(&[("dilation", 2.into()), ("padding", 2.into())]),
        )
    }),
    ("maxPool2d", |i| {
        i.x.max_pool2d(&obj(&[("kernel", 2.into())]))
    }),
    ("avgPool2d", |i| {
        i.x.avg_pool2d(&obj(&[("kernel", 3.into()), ("stride", 1.into())]))
    }),
    ("adaptiveAvgPool2d", |i| {
        i.x.adaptive_avg_pool2d(&shape(&[2, 3]))
    }),
];

/// Runs [`OPS`] on one device; each result is read back at once (so an error the GPU reports
/// asynchronously is charged to its own op) as f32 values, or kiln's error message.
async fn op_suite(dev: &Device) -> Vec<Result<Vec<f32>, String>> {
    let inputs = Inputs::new(dev);
    let mut outs = Vec::new();
    for (_, op) in OPS {
        let r = match op(&inputs) {
            Ok(t) => {
                let v = try_read(&t).await;
                t.dispose();
                v
            }
            Err(e) => Err(message(&e)),
        };
        outs.push(r);
    }
    inputs.dispose();
    outs
}

fn out(outs: &[Result<Vec<f32>, String>], name: &str) -> Vec<f32> {
    let i = OPS.iter().position(|(n, _)| *n == name).unwrap();
    match &outs[i] {
        Ok(v) => v.clone(),
        Err(e) => panic!("{name} failed on the CPU: {e}"),
    }
}

#[wasm_bindgen_test]
async fn cpu_ops_match_independent_references() {
    let before = live_bytes();
    let outs = op_suite(&Device::cpu()).await;
    assert_eq!(
        live_bytes(),
        before,
        "the suite disposed everything it made"
    );
    let failed: Vec<String> = OPS
        .iter()
        .zip(&outs)
        .filter_map(|((n, _), r)| r.as_ref().err().map(|e| format!("{n}: {e}")))
        .collect();
    assert!(
        failed.is_empty(),
        "ops failed on the CPU:\n{}",
        failed.join("\n")
    );
    let (a, b, r, c) = (rand(15, 1), rand(35, 2), rand(5, 3), rand(15, 13));
    let mut mm = vec![0f32; 21];
    for i in 0..3 {
        for j in 0..7 {
            mm[i * 7 + j] = (0..5).map(|k| a[i * 5 + k] * b[k * 7 + j]).sum();
        }
    }
    assert_close(&out(&outs, "matmul"), &mm, 1e-5, "matmul");
    let add: Vec<f32> = a.iter().enumerate().map(|(i, v)| v + r[i % 5]).collect();
    assert_close(&out(&outs, "add (broadcast)"), &add, 1e-6, "add");
    let wh: Vec<f32> = a
        .iter()
        .zip(&c)
        .map(|(x, y)| if *x > 0.0 { *y } else { -2.0 })
        .collect();
    assert_eq!(out(&outs, "where"), wh, "where");
    let mut sm = Vec::new();
    for row in a.chunks(5) {
        let m = row.iter().cloned().fold(f32::MIN, f32::max);
        let z: f32 = row.iter().map(|v| (v - m).exp()).sum();
        sm.extend(row.iter().map(|v| (v - m).exp() / z));
    }
    assert_close(&out(&outs, "softmax"), &sm, 1e-5, "softmax");
    let sums: Vec<f32> = a.chunks(5).map(|r| r.iter().sum()).collect();
    assert_close(&out(&outs, "sum axis 1"), &sums, 1e-5, "sum");
    let cums: Vec<f32> = a
        .chunks(5)
        .flat_map(|r| {
            r.iter()
                .scan(0.0, |s, v| {
                    *s += v;
                    Some(*s)
                })
                .collect::<Vec<_>>()
        })
        .collect();
    assert_close(&out(&outs, "cumsum"), &cums, 1e-5, "cumsum");
    let argmax: Vec<f32> = a
        .chunks(5)
        .map(|r| {
            r.iter()
                .enumerate()
                .fold(0, |bi, (i, v)| if *v > r[bi] { i } else { bi }) as f32
        })
        .collect();
    assert_eq!(out(&outs, "argmax"), argmax, "argmax");
    let sel: Vec<f32> = a.chunks(5).flat_map(|r| [r[2], r[0], r[2], r[1]]).collect();
    assert_eq!(out(&outs, "indexSelect"), sel, "indexSelect");
    let clamp: Vec<f32> = a.iter().map(|v| v.clamp(-0.5, 0.25)).collect();
    assert_eq!(out(&outs, "clamp"), clamp, "clamp");
}

#[wasm_bindgen_test]
async fn webgpu_ops_match_the_cpu() {
    let gpu = match Device::webgpu(JsValue::UNDEFINED).await {
        Ok(d) => d,
        Err(e) => {
            web_sys::console::log_1(
                &format!("SKIP webgpu_ops_match_the_cpu: {}", message(&e)).into(),
            );
            return;
        }
    };
    assert_eq!(gpu.kind(), "webgpu");
    assert!(gpu.name().starts_with("wgpu"), "{}", gpu.name());
    let want = op_suite(&Device::cpu()).await;
    let got = op_suite(&gpu).await;
    let mut failed = Vec::new();
    for (((name, _), g), w) in OPS.iter().zip(&got).zip(&want) {
        let w = w
            .as_ref()
            .unwrap_or_else(|e| panic!("{name} failed on the CPU: {e}"));
        match g {
            Err(e) => failed.push(format!("{name}: {e}")),
            Ok(g) => {
                if let Err(e) = check_close(g, w, 1e-4) {
                    failed.push(format!("{name}: {e}"));
                }
            }
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} ops differ on WebGPU:\n{}",
        failed.len(),
        OPS.len(),
        failed.join("\n")
    );
}

/// The browser's default WebGPU adapter, read here independently of kiln: `None` without one,
/// else whether it is a software fallback and its `info` words (vendor, architecture, ...).
async fn browser_adapter() -> Option<(bool, Vec<String>)> {
    let gpu = Reflect::get(&js_sys::global(), &"navigator".into())
        .and_then(|n| Reflect::get(&n, &"gpu".into()))
        .ok()
        .filter(|g| g.is_object())?;
    let request: js_sys::Function = Reflect::get(&gpu, &"requestAdapter".into())
        .unwrap()
        .unchecked_into();
    let p: js_sys::Promise = request.call0(&gpu).unwrap().unchecked_into();
    let adapter = JsFuture::from(p).await.ok().filter(|a| a.is_object())?;
    let info = Reflect::get(&adapter, &"info".into()).unwrap_or(JsValue::UNDEFINED);
    let field = |o: &JsValue, k: &str| {
        if o.is_object() {
            Reflect::get(o, &k.into()).unwrap_or(JsValue::UNDEFINED)
        } else {
            JsValue::UNDEFINED
        }
    };
    let fallback = field(&info, "isFallbackAdapter")
        .as_bool()
        .or_else(|| field(&adapter, "isFallbackAdapter").as_bool())
        .unwrap_or(false);
    let words = ["vendor", "architecture", "device", "description"]
        .iter()
        .filter_map(|k| field(&info, k).as_string())
        .filter(|w| !w.is_empty())
        .collect();
    Some((fallback, words))
}

#[wasm_bindgen_test]
async fn auto_is_the_cpu_on_a_software_adapter_and_webgpu_on_hardware_and_says_why() {
    let auto = Device::auto(JsValue::UNDEFINED).await;
    let reason = auto.reason();
    match browser_adapter().await {
        None => {
            assert_eq!(auto.kind(), "cpu", "{reason}");
            assert!(reason.starts_with("WebGPU unavailable"), "{reason}");
        }
        Some((true, words)) => {
            // SwiftShader in headless Chromium: slower than kiln's CPU backend.
            assert_eq!(auto.kind(), "cpu", "{reason}");
            assert!(reason.contains("software fallback"), "{reason}");
            for w in &words {
                assert!(reason.contains(w.as_str()), "{reason} should name {w}");
            }
        }
        Some((false, words)) => {
            assert_eq!(auto.kind(), "webgpu", "{reason}");
            assert!(reason.contains("WebGPU adapter"), "{reason}");
            for w in &words {
                assert!(reason.contains(w.as_str()), "{reason} should name {w}");
            }
        }
    }
    assert_eq!(Device::cpu().kind(), "cpu");
}

#[wasm_bindgen_test]
async fn webgpu_forced_still_works_and_matches_the_cpu() {
    let gpu = match Device::webgpu(JsValue::UNDEFINED).await {
        Ok(d) => d,
        Err(e) => {
            assert!(browser_adapter().await.is_none(), "{}", message(&e));
            web_sys::console::log_1(&format!("SKIP webgpu_forced: {}", message(&e)).into());
            return;
        }
    };
    assert_eq!(
        (gpu.kind(), gpu.reason()),
        ("webgpu".into(), "requested explicitly".into())
    );
    let (av, bv) = (rand(5 * 7, 41), rand(7 * 3, 42));
    let mut got = Vec::new();
    for dev in [&gpu, &Device::cpu()] {
        let (a, b) = (tensor(&av, &[5, 7], dev), tensor(&bv, &[7, 3], dev));
        // A handle of its own for the argument, disposed below: a handle left to the garbage
        // collector is freed whenever it runs, and the leak checks count live bytes.
        let b_arg: JsValue = b.clone_handle().unwrap().into();
        let y = a.matmul(&b_arg).unwrap().relu().unwrap();
        got.push(read(&y).await);
        dispose(&b_arg);
        for t in [a, b, y] {
            t.dispose();
        }
    }
    assert_close(&got[0], &got[1], 1e-5, "matmul+relu on WebGPU vs the CPU");
}

#[wasm_bindgen_test]
async fn model_load_auto_picks_the_faster_device_for_the_model_and_says_why() {
    let (bytes, net) = small_cnn();
    // Forget earlier measurements so the first load measures.
    if let Some(store) = web_sys::window().and_then(|w| w.local_storage().ok().flatten()) {
        let keys: Vec<String> = (0..store.length().unwrap())
            .filter_map(|i| store.key(i).ok().flatten())
            .collect();
        for k in keys.iter().filter(|k| k.starts_with("kiln.device|")) {
            store.remove_item(k).unwrap();
        }
    }
    let adapter = browser_adapter().await;
    let xv = rand(2 * 64, 43);
    let want = cpu_forward(&net, &xv, &[2, 1, 8, 8]);
    let mut kinds = Vec::new();
    for load in 0..2 {
        let src: JsValue = js_sys::Uint8Array::from(bytes.as_slice()).into();
        let model = Model::load(src, obj(&[("device", "auto".into())]))
            .await
            .unwrap();
        let dev = model.device();
        let reason = dev.reason();
        match &adapter {
            Some((false, _)) => {
                // A hardware adapter: measured on the first load, remembered on the second.
                let how = ["measured on this model", "remembered from an earlier"][load];
                assert!(reason.starts_with(how), "load {load}: {reason}");
                assert!(
                    reason.contains("WebGPU") && reason.contains("CPU"),
                    "{reason}"
                );
            }
            Some((true, _)) => {
                assert_eq!(dev.kind(), "cpu", "{reason}");
                assert!(reason.contains("software fallback"), "{reason}");
            }
            None => {
                assert_eq!(dev.kind(), "cpu", "{reason}");
                assert!(reason.starts_with("WebGPU unavailable"), "{reason}");
            }
        }
        kinds.push(dev.kind());
        let x: JsValue = tensor(&xv, &[2, 1, 8, 8], &dev).into();
        let y = model.forward(&x).unwrap();
        assert_close(
            &read(&y).await,
            &want,
            1e-4,
            &format!("auto ({}) vs the module", dev.kind()),
        );
        dispose(&x);
        y.dispose();
        model.dispose();
    }
    assert_eq!(
        kinds[0], kinds[1],
        "the remembered choice is the measured one"
    );

    // Explicit choices still work and say so; unknown names are errors.
    let src: JsValue = js_sys::Uint8Array::from(bytes.as_slice()).into();
    let model = Model::load(src.clone(), obj(&[("device", "cpu".into())]))
        .await
        .unwrap();
    assert_eq!(
        (model.device().kind(), model.device().reason()),
        ("cpu".into(), "requested explicitly".into())
    );
    model.dispose();
    let e = Model::load(src, obj(&[("device", "gpu".into())]))
        .await
        .err()
        .unwrap();
    assert!(message(&e).contains("\"auto\""), "{}", message(&e));
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
    assert!(
        m.starts_with("matmul:") && m.contains('3') && m.contains('4'),
        "{m}"
    );
    let e = Tensor::from(
        &Float32Array::from(&[1.0f32; 5][..]).into(),
        &shape(&[2, 3]),
        &JsValue::UNDEFINED,
    )
    .unwrap_err();
    assert!(
        message(&e).contains("5 values given for shape [2, 3]"),
        "{}",
        message(&e)
    );
    // Wrong argument types are kiln errors too, never panics.
    let e = a.matmul(&JsValue::from_str("nope")).unwrap_err();
    assert_eq!(Reflect::get(&e, &"name".into()).unwrap(), "KilnError");
    assert!(
        message(&e).contains("expected a Tensor, got string"),
        "{}",
        message(&e)
    );
    let e = a.reshape(&shape(&[4, 4])).unwrap_err();
    assert!(message(&e).starts_with("reshape"), "{}", message(&e));
    let e = Tensor::zeros(&shape(&[2]), &obj(&[("dtype", "q8".into())])).unwrap_err();
    assert!(message(&e).contains("got q8"), "{}", message(&e));
    dispose(&b);
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
    let x: JsValue = tensor(&xv, &[3, 16], &Device::cpu()).into();
    let y = model.forward(&x).unwrap();
    dispose(&x);
    let want = cpu_forward(&fc, &xv, &[3, 16]);
    assert_close(&read(&y).await, &want, 1e-6, "model output");
    y.dispose();
    model.dispose();
    let e = model.forward(&JsValue::NULL).unwrap_err();
    assert!(message(&e).contains("disposed"), "{}", message(&e));

    let bad: JsValue = js_sys::Uint8Array::from(&bytes[..bytes.len() / 2]).into();
    let e = Model::load(bad, JsValue::UNDEFINED).await.err().unwrap();
    assert!(message(&e).contains("Model::load"), "{}", message(&e));
    let e = Model::load("/no/such/model.safetensors".into(), JsValue::UNDEFINED)
        .await
        .err()
        .unwrap();
    assert!(message(&e).contains("HTTP 404"), "{}", message(&e));
}

/// A small CNN shaped like the MNIST demo's: conv, relu, max-pool, flatten, linear.
fn small_cnn() -> (Vec<u8>, Sequential) {
    let dev = KDevice::cpu();
    let mut init = Init::new(&dev, 21);
    let mut net = Sequential::new()
        .with(Conv2d::new(&mut init, 1, 4, 3).unwrap())
        .with(ReLU)
        .with(MaxPool2d::new(2))
        .with(Flatten::new())
        .with(Linear::new(&mut init, 4 * 3 * 3, 10).unwrap());
    let sample = KTensor::rand_normal([2, 1, 8, 8], 0.0, 1.0, 22, DType::F32, &dev).unwrap();
    let bytes = save_model(&mut net, &sample, &Default::default()).unwrap();
    (bytes, net)
}

/// A `blob:` URL serving `bytes`, so `Model.load(url)` goes through `fetch` like a page's would.
fn blob_url(bytes: &[u8]) -> String {
    let parts = Array::of1(&js_sys::Uint8Array::from(bytes));
    let blob = web_sys::Blob::new_with_u8_array_sequence(&parts).unwrap();
    web_sys::Url::create_object_url_with_blob(&blob).unwrap()
}

#[wasm_bindgen_test]
async fn cnn_model_from_a_url_runs_on_every_device_like_the_module() {
    let (bytes, net) = small_cnn();
    let url = blob_url(&bytes);
    let xv = rand(3 * 64, 23);
    let want = cpu_forward(&net, &xv, &[3, 1, 8, 8]);
    let mut devices = vec![Device::cpu()];
    if let Ok(gpu) = Device::webgpu(JsValue::UNDEFINED).await {
        devices.push(gpu);
    }
    for dev in devices {
        let before = live_bytes();
        let model = Model::load(url.clone().into(), obj(&[("device", dev.clone().into())]))
            .await
            .unwrap();
        assert_eq!(model.device().kind(), dev.kind());
        let spec = model.inputs().unwrap().get(0);
        let name = Reflect::get(&spec, &"name".into())
            .unwrap()
            .as_string()
            .unwrap();
        let dims: Vec<JsValue> =
            Array::from(&Reflect::get(&spec, &"shape".into()).unwrap()).to_vec();
        assert_eq!(dims.len(), 4, "input shape {dims:?}");
        assert!(dims[0].is_null(), "the batch axis is free: {dims:?}");
        assert_eq!(model.outputs().unwrap().length(), 1);
        let x: JsValue = tensor(&xv, &[3, 1, 8, 8], &dev).into();
        // `run` with inputs keyed by name, and `forward`, agree with the Rust module.
        let outs = model.run(&obj(&[(name.as_str(), x.clone())])).unwrap();
        assert_eq!(outs.length(), 1);
        assert_close(
            &read_js(&outs.get(0)).await,
            &want,
            1e-4,
            &format!("CNN run on {}", dev.kind()),
        );
        let y = model.forward(&x).unwrap();
        assert_close(
            &read(&y).await,
            &want,
            1e-4,
            &format!("CNN forward on {}", dev.kind()),
        );
        let probs = model.forward(&x).unwrap().softmax(None).unwrap();
        let p = read(&probs).await;
        assert!(
            (p[..10].iter().sum::<f32>() - 1.0).abs() < 1e-5,
            "softmax of the logits: {p:?}"
        );
        for o in outs.iter() {
            dispose(&o);
        }
        dispose(&x);
        y.dispose();
        probs.dispose();
        model.dispose();
        assert_eq!(live_bytes(), before, "everything freed on {}", dev.kind());
    }
    web_sys::Url::revoke_object_url(&url).unwrap();
}

fn live_bytes() -> f64 {
    Reflect::get(&memory(), &"bytes".into())
        .unwrap()
        .as_f64()
        .unwrap()
}

async fn leak_check(device: Device) {
    let (bytes, _) = small_model();
    let src: JsValue = js_sys::Uint8Array::from(bytes.as_slice()).into();
    let model = Model::load(src, obj(&[("device", device.clone().into())]))
        .await
        .unwrap();
    let xv = rand(16, 11);
    let before = live_bytes();
    let mut after_warmup = None;
    for i in 0..10_000 {
        let x: JsValue = tensor(&xv, &[1, 16], &device).into();
        let y = model.forward(&x).unwrap();
        if i % 1000 == 999 {
            assert_eq!(read(&y).await.len(), 8);
        }
        dispose(&x);
        y.dispose();
        if i == 99 {
            after_warmup = Some(memory());
        }
    }
    let end = memory();
    assert_eq!(
        live_bytes(),
        before,
        "live bytes after 10,000 runs on {}",
        device.kind()
    );
    // The backend's own allocation (WebGPU buffers and pool) must not grow after warm-up either.
    let dev_alloc = |m: &JsValue| {
        let d = Reflect::get(
            &Reflect::get(m, &"devices".into()).unwrap(),
            &device.kind().into(),
        )
        .unwrap();
        Reflect::get(&d, &"allocatedBytes".into())
            .ok()
            .and_then(|v| v.as_f64())
    };
    if let (Some(a), Some(b)) = (after_warmup.as_ref().and_then(dev_alloc), dev_alloc(&end)) {
        assert!(
            b <= a,
            "{} backend grew from {a} to {b} bytes",
            device.kind()
        );
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
    match Device::webgpu(JsValue::UNDEFINED).await {
        Ok(d) => leak_check(d).await,
        Err(e) => {
            web_sys::console::log_1(&format!("SKIP webgpu leak check: {}", message(&e)).into())
        }
    }
}

/// A JS function from its parameter list and body, as a page would write it.
fn js_fn(params: &str, body: &str) -> JsValue {
    js_sys::Function::new_with_args(params, body).into()
}

/// swish(x, beta) = x * sigmoid(beta * x), the npm README's custom op.
const SWISH_WGSL: &str = r#"#include "common.wgsl"
struct Params { n: u32, beta: f32 }
@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = group_index(wid, nwg) * 64u + lid.x;
  if i >= params.n { return; }
  y[i] = x[i] / (1.0 + exp(-params.beta * x[i]));
}"#;

/// Registers swish from JS functions under `name` with the kernel `wgsl`.
fn register_swish(name: &str, wgsl: &str) {
    let spec = obj(&[
        ("name", name.into()),
        ("wgsl", wgsl.into()),
        (
            "cpu",
            js_fn(
                "inputs, attrs",
                "return inputs[0].data.map((v) => v / (1 + Math.exp(-attrs.beta * v)));",
            ),
        ),
        (
            "params",
            js_fn(
                "inputs, out, attrs",
                "const w = new Uint32Array(2); w[0] = out.shape.reduce((a, b) => a * b, 1); \
                 new Float32Array(w.buffer, 4, 1)[0] = attrs.beta; return w;",
            ),
        ),
    ]);
    kiln_web::register_op(&spec).unwrap();
}

/// Runs the custom op `name` on one tensor of `xv`, disposing every handle it made.
async fn run_custom(
    name: &str,
    xv: &[f32],
    dims: &[u32],
    dev: &Device,
) -> Result<Vec<f32>, String> {
    let x = tensor(xv, dims, dev);
    let inputs: Array = std::iter::once(JsValue::from(x.clone_handle().unwrap())).collect();
    let attrs = obj(&[("beta", 1.5.into())]);
    let got = match kiln_web::custom_op(name, &inputs.clone().into(), &attrs) {
        Ok(y) => {
            let v = try_read(&y).await;
            y.dispose();
            v
        }
        Err(e) => Err(message(&e)),
    };
    dispose(&inputs.get(0));
    x.dispose();
    got
}

#[wasm_bindgen_test]
async fn a_js_custom_op_runs_on_webgpu_and_the_cpu_like_its_reference() {
    register_swish("browser_swish", SWISH_WGSL);
    // 7 * 37 = 259 elements: several workgroups, the last one partly past the end
    let xv = rand(259, 51);
    let want: Vec<f32> = xv.iter().map(|v| v / (1.0 + (-1.5 * v).exp())).collect();
    let cpu = run_custom("browser_swish", &xv, &[7, 37], &Device::cpu()).await;
    assert_close(&cpu.unwrap(), &want, 1e-6, "the JS op on the CPU");
    let gpu = match Device::webgpu(JsValue::UNDEFINED).await {
        Ok(d) => d,
        Err(e) => {
            web_sys::console::log_1(&format!("SKIP the JS op on WebGPU: {}", message(&e)).into());
            return;
        }
    };
    let got = run_custom("browser_swish", &xv, &[7, 37], &gpu).await;
    assert_close(&got.unwrap(), &want, 1e-5, "the JS op's WGSL on WebGPU");

    // A kernel the browser rejects (line 9 assigns a u32 to an f32): the run's error names the
    // op's kernel and carries the browser's message, at the line of the op's own source (the
    // included helpers are appended after it).
    let bad = SWISH_WGSL.replace(
        "let i = group_index",
        "let bad: f32 = 1u;\n  let i = group_index",
    );
    register_swish("browser_bad_swish", &bad);
    let e = run_custom("browser_bad_swish", &xv, &[7, 37], &gpu)
        .await
        .unwrap_err();
    web_sys::console::log_1(&format!("the bad kernel's error: {e}").into());
    assert!(
        e.contains("NAME=browser_bad_swish") && e.contains(":9:7 error") && e.contains("let bad"),
        "{e}"
    );
    assert!(kiln_web::unregister_op("browser_bad_swish"));
    // The device still works. The browser reports the bad kernel's follow-up errors (the
    // pipeline, the dispatch, then the submit of the batch that held it: "Invalid
    // CommandBuffer ... due to a previous error") asynchronously, and the wgpu backend's one
    // error slot hands each to the next read, whichever op it is for and however late it
    // arrives: drain them here (at most a few reads), so that the tests after this one start
    // clean. Error scopes around pipeline creation would tie each error to its own op.
    let mut stale = Vec::new();
    let again = loop {
        match run_custom("browser_swish", &xv, &[7, 37], &gpu).await {
            Err(e) if stale.len() < 8 => stale.push(e),
            other => break other,
        }
    };
    web_sys::console::log_1(
        &format!("{} stale errors of the bad kernel: {stale:?}", stale.len()).into(),
    );
    assert_close(
        &again.unwrap(),
        &want,
        1e-5,
        "the good op after the bad one",
    );
}

/// GELU composed from tensor ops through the JS API: `x * (erf(x / sqrt2) + 1) / 2`. Every
/// intermediate is freed here (the leak checks count live bytes).
fn js_gelu(x: &Tensor) -> Tensor {
    let sqrt2 = JsValue::from(std::f64::consts::SQRT_2);
    let e = x.div(&sqrt2).unwrap().erf().unwrap();
    let e1: JsValue = e.add(&1.0.into()).unwrap().into();
    let p = x.mul(&e1).unwrap();
    dispose(&e1);
    p.div(&2.0.into()).unwrap()
}

#[wasm_bindgen_test]
async fn webgpu_fusion_on_and_off_both_match_the_cpu_and_only_on_generates_kernels() {
    let Ok(fused) = Device::webgpu(JsValue::UNDEFINED).await else {
        web_sys::console::log_1(&"SKIP fusion on/off: no WebGPU".into());
        return;
    };
    let plain = Device::webgpu(obj(&[("fusion", false.into())]))
        .await
        .unwrap();
    assert!(fused.fusion() && !plain.fusion() && !Device::cpu().fusion());
    // The option works wherever JS names a device: a string with `fusion`, or a Device.
    let by_name = obj(&[("device", "webgpu".into()), ("fusion", false.into())]);
    let by_device = obj(&[("device", plain.clone().into())]);
    for options in [by_name, by_device] {
        let t = Tensor::zeros(&shape(&[2]), &options).unwrap();
        assert!(!t.device().unwrap().fusion());
    }

    // An odd shape (several workgroups, a partial vec4 tail), values over erf's whole range.
    let dims = [7, 37, 3];
    let xv: Vec<f32> = rand(7 * 37 * 3, 61).iter().map(|v| v * 4.0).collect();
    let gelu_on = |dev: &Device| {
        let x = tensor(&xv, &dims, dev);
        let y = js_gelu(&x);
        x.dispose();
        y
    };
    let want = read(&gelu_on(&Device::cpu())).await;
    let exact: Vec<f32> = xv
        .iter()
        .map(|&v| (v as f64 * 0.5 * (1.0 + libm_erf(v as f64 / std::f64::consts::SQRT_2))) as f32)
        .collect();
    assert_close(&want, &exact, 1e-5, "GELU on the CPU against f64");

    let before = kiln_web::fused_kernels().length();
    let off = read(&gelu_on(&plain)).await;
    assert_eq!(
        kiln_web::fused_kernels().length(),
        before,
        "fusion off generated a kernel"
    );
    assert_close(&off, &want, 1e-5, "GELU on WebGPU, fusion off");
    let on = read(&gelu_on(&fused)).await;
    assert_close(&on, &want, 1e-5, "GELU on WebGPU, fusion on");
    let kernels = kiln_web::fused_kernels();
    let erf_kernel = kernels.iter().any(|k| {
        let wgsl = Reflect::get(&k, &"wgsl".into())
            .unwrap()
            .as_string()
            .unwrap();
        let name = Reflect::get(&k, &"name".into())
            .unwrap()
            .as_string()
            .unwrap();
        name.starts_with("kiln.fused.") && wgsl.contains("erf")
    });
    assert!(
        erf_kernel,
        "no fused kernel with erf among {}",
        kernels.length()
    );
}

/// erf in f64 by its Taylor series, for |x| < 3 (the test's inputs stay under 2.9).
fn libm_erf(x: f64) -> f64 {
    assert!(x.abs() < 3.0, "{x}");
    let (mut term, mut sum, x2) = (x, x, x * x);
    for n in 1..200 {
        term *= -x2 / n as f64;
        sum += term / (2 * n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}
