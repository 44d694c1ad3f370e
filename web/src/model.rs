//! `Model`: a kiln model file (safetensors weights + the traced graph in its metadata), loaded
//! from a URL or bytes onto a device and run on tensors.

use crate::device::{self, Device, Wanted, kind_of};
use crate::error::{IntoJs, JsResult, invalid, to_js};
use crate::tensor::Tensor;
use crate::{js, ledger};
use js_sys::{Array, Uint8Array};
use kiln_core::Tensor as KTensor;
use kiln_core::model::{Model as KModel, ValueInfo};
use std::cell::RefCell;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

#[wasm_bindgen]
extern "C" {
    /// The global `fetch` (window, worker or Node >= 18).
    #[wasm_bindgen(js_name = fetch, catch)]
    fn global_fetch(url: &str) -> Result<js_sys::Promise, JsValue>;
}

/// A loaded model on a device.
#[wasm_bindgen]
pub struct Model {
    inner: RefCell<Option<KModel>>,
    /// Where the weights live, with the reason they are there.
    device: Device,
    /// The ledger entry that accounts for the weights in `kiln.memory()`.
    weights: u32,
}

impl Drop for Model {
    fn drop(&mut self) {
        ledger::remove(self.weights);
    }
}

impl Model {
    fn with<T>(&self, op: &'static str, f: impl FnOnce(&KModel) -> JsResult<T>) -> JsResult<T> {
        match &*self.inner.borrow() {
            Some(m) => f(m),
            None => Err(invalid(op, format_args!("this Model was disposed"))),
        }
    }
}

/// The bytes of a model source: a URL string, a `URL`, a `Response`, an `ArrayBuffer` or a
/// typed array.
pub(crate) async fn source_bytes(source: &JsValue, op: &'static str) -> JsResult<Vec<u8>> {
    let response = if let Some(url) = source.as_string().or_else(|| {
        (js::type_name(source) == "URL")
            .then(|| js::get(source, "href").as_string())
            .flatten()
    }) {
        let r = JsFuture::from(global_fetch(&url)?).await.map_err(|e| {
            to_js(&kiln_core::Error::io(
                op,
                format!("fetching {url} failed: {}", js::message(&e)),
            ))
        })?;
        let r: web_sys::Response = r.unchecked_into();
        if !r.ok() {
            return Err(to_js(&kiln_core::Error::io(
                op,
                format!("fetching {url}: HTTP {} {}", r.status(), r.status_text()),
            )));
        }
        r
    } else if source.is_instance_of::<web_sys::Response>() {
        source.clone().unchecked_into::<web_sys::Response>()
    } else if source.is_instance_of::<js_sys::ArrayBuffer>() || js_sys::ArrayBuffer::is_view(source)
    {
        let view = if let Some(b) = source.dyn_ref::<js_sys::ArrayBuffer>() {
            Uint8Array::new(b)
        } else {
            let buf: js_sys::ArrayBuffer = js::get(source, "buffer").unchecked_into();
            let off = js::num(source, "byteOffset").unwrap_or(0.0) as u32;
            let len = js::num(source, "byteLength").unwrap_or(0.0) as u32;
            Uint8Array::new_with_byte_offset_and_length(&buf, off, len)
        };
        return Ok(view.to_vec());
    } else {
        return Err(invalid(
            op,
            format_args!(
                "source must be a URL, a Response, an ArrayBuffer or a Uint8Array, got {}",
                js::type_name(source)
            ),
        ));
    };
    let buf = JsFuture::from(response.array_buffer()?).await?;
    Ok(Uint8Array::new(&buf).to_vec())
}

/// `[{name, shape, dtype}]` for a model's inputs or outputs.
fn describe<'a>(specs: impl IntoIterator<Item = &'a ValueInfo>) -> Array {
    specs
        .into_iter()
        .map(|s| -> JsValue {
            let shape: Array = s
                .shape
                .iter()
                .map(|d| {
                    d.map(|d| JsValue::from_f64(d as f64))
                        .unwrap_or(JsValue::NULL)
                })
                .collect();
            js::object(&[
                ("name", s.name.as_str().into()),
                ("shape", shape.into()),
                ("dtype", s.dtype.name().into()),
            ])
            .into()
        })
        .collect()
}

#[wasm_bindgen]
impl Model {
    /// Loads a kiln model file from a URL or bytes onto `options.device` (default: the CPU;
    /// `"auto"`: the faster of WebGPU and the CPU for this model, see `Device` for how).
    pub async fn load(source: JsValue, options: JsValue) -> JsResult<Model> {
        let wanted = Device::wanted(&options, "Model.load")?;
        let bytes = source_bytes(&source, "Model.load").await?;
        let (model, device) = match wanted {
            Wanted::Given(d) => (
                KModel::load_with(&bytes, d.inner(), &js::parse_json).js()?,
                d,
            ),
            Wanted::Auto { fusion } => device::load_on_fastest(&bytes, fusion).await?,
        };
        let params = model.tensors();
        let bytes: u64 = params.values().map(ledger::tensor_bytes).sum();
        let weights = ledger::insert_weights(kind_of(device.inner()).into(), params.len(), bytes);
        Ok(Model {
            inner: RefCell::new(Some(model)),
            device,
            weights,
        })
    }

    /// Runs the model: `inputs` is an array of Tensors in `model.inputs` order, or an object
    /// keyed by input name. Returns the output Tensors in `model.outputs` order.
    pub fn run(&self, inputs: &JsValue) -> JsResult<Array> {
        let op = "Model.run";
        self.with(op, |m| {
            let ts: Vec<KTensor> = if Array::is_array(inputs) {
                Tensor::many_from_js(inputs, op)?
            } else if inputs.is_object() && js::get(inputs, "__kilnHandle").is_undefined() {
                m.inputs()
                    .iter()
                    .map(|s| {
                        let v = js::get(inputs, &s.name);
                        if v.is_undefined() {
                            return Err(invalid(
                                op,
                                format_args!("no tensor given for input {:?}", s.name),
                            ));
                        }
                        Tensor::from_js(&v, op)
                    })
                    .collect::<JsResult<_>>()?
            } else {
                vec![Tensor::from_js(inputs, op)?]
            };
            let outs = m.run(&ts).js()?;
            Ok(outs
                .into_iter()
                .map(|t| JsValue::from(Tensor::wrap(t)))
                .collect())
        })
    }

    /// Runs a one-input model and returns its first output.
    pub fn forward(&self, input: &JsValue) -> JsResult<Tensor> {
        let op = "Model.forward";
        self.with(op, |m| {
            let x = Tensor::from_js(input, op)?;
            Ok(Tensor::wrap(m.forward(&x).js()?))
        })
    }

    /// `[{name, shape, dtype}]` of the inputs (`null` for a free dimension such as the batch).
    #[wasm_bindgen(getter)]
    pub fn inputs(&self) -> JsResult<Array> {
        self.with("inputs", |m| Ok(describe(m.inputs())))
    }

    /// `[{name, shape, dtype}]` of the outputs.
    #[wasm_bindgen(getter)]
    pub fn outputs(&self) -> JsResult<Array> {
        self.with("outputs", |m| Ok(describe(m.outputs())))
    }

    /// The device the weights live on; its `reason` says why it was chosen.
    #[wasm_bindgen(getter)]
    pub fn device(&self) -> Device {
        self.device.clone()
    }

    /// Frees the weights now; using the model afterwards is an error.
    pub fn dispose(&self) {
        self.inner.borrow_mut().take();
        ledger::remove(self.weights);
    }
}
