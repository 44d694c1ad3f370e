//! Custom ops written in JavaScript: `registerOp({ name, wgsl, cpu, shape, params,
//! workgroupSize })` wraps the JS functions in a kiln [`CustomOp`], so the op then runs like a
//! built-in one (`customOp(name, inputs, attrs)`): the CPU backend calls `cpu`, WebGPU runs
//! `wgsl`, and a model file naming it loads.
//!
//! A JS op runs forward only: the page has no autodiff (kiln-core's backward rules would add
//! ~26 KiB gzipped to the module; in-page training is left to a lazily loaded module later), so
//! `registerOp` rejects a `backward` rather than ignore it.
//!
//! Only the WGSL's `#include` lines are checked here; the rest is not (naga's WGSL front end
//! would add a lot to the module): the browser compiles it when the op first runs on WebGPU,
//! and its compilation message (with line numbers) comes back as the `KilnError` of that run,
//! naming the op's kernel.

use crate::error::{IntoJs, JsResult, invalid, to_js};
use crate::js;
use crate::tensor::{Tensor, data_from_js, typed_array};
use js_sys::{Array, Function, Object};
use kiln_core::error::Num;
use kiln_core::op::custom::{self, Attrs, CustomOp, Grid, KernelLaunch};
use kiln_core::{DType, Error, Meta, Result, Shape, Tensor as KTensor, TensorData};
use std::sync::Arc;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

/// A custom op whose rules are JS functions.
struct JsOp {
    name: String,
    wgsl: Option<String>,
    cpu: Function,
    shape: Option<Function>,
    params: Option<Function>,
    workgroup_size: u32,
}

// SAFETY: `CustomOp` must be Send + Sync, and `js_sys::Function` is neither because a JS value
// belongs to the thread that made it. kiln-web is built for single-threaded wasm32 (no atomics,
// no workers sharing this module's memory), so every call reaches these functions on the one
// thread that created them. A threaded build (wasm32 with atomics) must revisit this.
unsafe impl Send for JsOp {}
// SAFETY: as for Send above: there is no second thread to share the op with.
unsafe impl Sync for JsOp {}

impl JsOp {
    /// Calls the op's JS function `what` with `args`; a throw becomes an error naming both.
    fn call(&self, f: &Function, what: &str, args: &[JsValue]) -> Result<JsValue> {
        let args: Array = args.iter().collect();
        f.apply(&JsValue::NULL, &args)
            .map_err(|e| self.err(format!("its {what} function threw: {}", js::message(&e))))
    }
    fn err(&self, message: String) -> Error {
        Error::invalid(self.name.clone(), message)
    }
}

/// `{ dtype, shape }` for JS.
fn meta_js(m: &Meta) -> JsValue {
    let shape: Array =
        m.1.dims()
            .iter()
            .map(|&d| JsValue::from(d as f64))
            .collect();
    js::object(&[("dtype", m.0.name().into()), ("shape", shape.into())]).into()
}

fn metas_js(ms: &[Meta]) -> JsValue {
    ms.iter().map(meta_js).collect::<Array>().into()
}

fn attrs_js(a: &Attrs) -> JsValue {
    let o = Object::new();
    for (k, v) in a {
        js::set(&o, k, (*v).into());
    }
    o.into()
}

/// Attributes from a plain object of numbers (`undefined`/`null`: none).
fn attrs_from_js(v: &JsValue, op: &'static str) -> JsResult<Attrs> {
    if v.is_undefined() || v.is_null() {
        return Ok(Attrs::new());
    }
    let o = v.dyn_ref::<Object>().ok_or_else(|| {
        invalid(
            op,
            format_args!(
                "attrs must be an object of numbers, got {}",
                js::type_name(v)
            ),
        )
    })?;
    let mut attrs = Attrs::new();
    for kv in Object::entries(o).iter() {
        let kv: Array = kv.unchecked_into();
        let key = kv.get(0).as_string().unwrap_or_default();
        let value = kv.get(1).as_f64().ok_or_else(|| {
            invalid(
                op,
                format_args!(
                    "attribute {key:?} must be a number, got {}",
                    js::type_name(&kv.get(1))
                ),
            )
        })?;
        attrs.insert(key, value);
    }
    Ok(attrs)
}

impl CustomOp for JsOp {
    fn name(&self) -> &str {
        &self.name
    }

    fn infer(&self, attrs: &Attrs, inputs: &[Meta]) -> Result<Meta> {
        let Some(f) = &self.shape else {
            // no rule: the output is like the first input
            return inputs.first().cloned().ok_or_else(|| {
                self.err("has no shape function, so it needs at least one input".into())
            });
        };
        let out = self.call(f, "shape", &[metas_js(inputs), attrs_js(attrs)])?;
        // a bare shape keeps the first input's dtype
        let (dtype, shape) = if Array::is_array(&out) || js::get(&out, "shape").is_undefined() {
            (JsValue::UNDEFINED, out)
        } else {
            (js::get(&out, "dtype"), js::get(&out, "shape"))
        };
        let bad = |what: String| {
            self.err(format!(
                "its shape function must return a shape (an array of sizes) or {{ dtype, shape }}; {what}"
            ))
        };
        let dims = js::sizes(&shape, "shape", "the shape").map_err(|e| bad(js::message(&e)))?;
        let dtype = match dtype.as_string() {
            Some(s) => DType::parse(&s).ok_or_else(|| bad(format!("got dtype {s:?}")))?,
            None if dtype.is_undefined() => match inputs.first() {
                Some(m) => m.0,
                None => return Err(bad("without inputs the dtype must be given".into())),
            },
            None => {
                return Err(bad(format!(
                    "got a dtype of type {}",
                    js::type_name(&dtype)
                )));
            }
        };
        Ok((dtype, Shape::new(dims)))
    }

    fn cpu(&self, attrs: &Attrs, inputs: &[TensorData], output: &Meta) -> Result<TensorData> {
        let xs: Array = inputs
            .iter()
            .map(|d| {
                let m = meta_js(&(d.dtype(), d.shape().clone()));
                js::set(m.unchecked_ref(), "data", typed_array(d));
                m
            })
            .collect();
        let out = self.call(&self.cpu, "cpu", &[xs.into(), attrs_js(attrs)])?;
        let shape: Array = output.1.dims().iter().map(|&d| JsValue::from(d)).collect();
        // read as Tensor.from reads data, checked against the output's shape and cast to its dtype
        data_from_js(&out, &shape.into(), Some(output.0), "cpu").map_err(|e| {
            Error::shape(
                self.name.clone(),
                format!(
                    "its cpu function must return the {} values of the {} output of shape {} \
                     (a typed array or an array); {}",
                    output.1.numel(),
                    output.0,
                    output.1,
                    js::message(&e)
                ),
            )
        })
    }

    fn wgsl(&self) -> Option<&str> {
        self.wgsl.as_deref()
    }

    fn launch(&self, attrs: &Attrs, inputs: &[Meta], output: &Meta) -> Result<KernelLaunch> {
        let numel = output.1.numel();
        let params = match &self.params {
            None => vec![u32::try_from(numel).map_err(|_| {
                self.err(format!(
                    "has {numel} output elements, more than a u32 holds"
                ))
            })?],
            Some(f) => {
                let args = [metas_js(inputs), meta_js(output), attrs_js(attrs)];
                words(&self.call(f, "params", &args)?).map_err(|m| {
                    self.err(format!(
                        "its params function must return the header's 32-bit words as a \
                         Uint32Array, Int32Array, Float32Array or an array of integers; {m}"
                    ))
                })?
            }
        };
        Ok(KernelLaunch {
            params,
            grid: Grid::Invocations {
                count: numel as u64,
                workgroup_size: self.workgroup_size,
            },
        })
    }
}

/// The 32-bit words of a params header: a 4-byte typed array as it lies in memory (so a
/// Float32Array gives f32 bits), or an array of integers (u32, or negative i32).
fn words(v: &JsValue) -> std::result::Result<Vec<u32>, String> {
    let four = v.is_instance_of::<js_sys::Uint32Array>()
        || v.is_instance_of::<js_sys::Int32Array>()
        || v.is_instance_of::<js_sys::Float32Array>();
    if four {
        let a: &js_sys::Uint8Array = &js_sys::Uint8Array::new_with_byte_offset_and_length(
            &js::get(v, "buffer"),
            js::get(v, "byteOffset").as_f64().unwrap_or(0.0) as u32,
            js::get(v, "byteLength").as_f64().unwrap_or(0.0) as u32,
        );
        let bytes = a.to_vec();
        return Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect());
    }
    if !Array::is_array(v) {
        return Err(format!("got {}", js::type_name(v)));
    }
    Array::from(v)
        .iter()
        .enumerate()
        .map(|(i, x)| match x.as_f64() {
            Some(f) if f.fract() == 0.0 && (0.0..=u32::MAX as f64).contains(&f) => Ok(f as u32),
            Some(f) if f.fract() == 0.0 && (i32::MIN as f64..0.0).contains(&f) => {
                Ok(f as i32 as u32)
            }
            _ => Err(format!(
                "word {i} is {} (pass f32 fields through a Float32Array)",
                x.as_f64()
                    .map_or_else(|| js::type_name(&x), |f| Num(f).to_string())
            )),
        })
        .collect()
}

/// Checks `src`'s `#include` lines now, so that an unknown file fails at `registerOp` with its
/// line. The GPU backends expand them when the kernel is planned
/// (`kiln_kernels::custom::expand_includes`: the files go at the end, so the browser's line
/// numbers stay those of the op's own source).
#[cfg(feature = "webgpu")]
fn check_includes(name: &str, src: &str) -> JsResult<()> {
    kiln_kernels::custom::expand_includes(name, src).map_err(|e| to_js(&e))?;
    Ok(())
}

/// Without the WebGPU backend kernels never run.
#[cfg(not(feature = "webgpu"))]
fn check_includes(_: &str, _: &str) -> JsResult<()> {
    Ok(())
}

/// An optional function field of the spec.
fn function(spec: &JsValue, key: &str) -> JsResult<Option<Function>> {
    let v = js::get(spec, key);
    if v.is_undefined() || v.is_null() {
        return Ok(None);
    }
    v.dyn_into::<Function>().map(Some).map_err(|v| {
        invalid(
            "registerOp",
            format_args!("{key} must be a function, got {}", js::type_name(&v)),
        )
    })
}

/// Registers a custom op written in JS (replacing one of the same name): `spec` is
/// `{ name, cpu, shape?, wgsl?, params?, workgroupSize? }` (see npm/index.d.ts).
#[wasm_bindgen(js_name = registerOp)]
pub fn register_op(spec: &JsValue) -> JsResult<()> {
    let op = "registerOp";
    let name = js::get(spec, "name").as_string().ok_or_else(|| {
        invalid(
            op,
            format_args!(
                "spec.name must be a string, got {}",
                js::type_name(&js::get(spec, "name"))
            ),
        )
    })?;
    let cpu = function(spec, "cpu")?.ok_or_else(|| {
        invalid(
            op,
            format_args!("{name}: spec.cpu (the reference implementation) is required"),
        )
    })?;
    if !js::get(spec, "backward").is_undefined() {
        return Err(invalid(
            op,
            format_args!(
                "{name}: spec.backward is not supported: JS ops have no gradient in the page yet \
                 (kiln-ml runs ops forward only; remove backward)"
            ),
        ));
    }
    let wgsl = js::get(spec, "wgsl");
    let wgsl = match wgsl.as_string() {
        Some(s) => Some(s),
        None if wgsl.is_undefined() || wgsl.is_null() => None,
        None => {
            return Err(invalid(
                op,
                format_args!(
                    "{name}: spec.wgsl must be a string, got {}",
                    js::type_name(&wgsl)
                ),
            ));
        }
    };
    if let Some(src) = &wgsl {
        check_includes(&name, src)?;
    }
    let workgroup_size = match js::num(spec, "workgroupSize") {
        None => 64,
        Some(n) if n.fract() == 0.0 && (1.0..=1024.0).contains(&n) => n as u32,
        Some(n) => {
            return Err(invalid(
                op,
                format_args!(
                    "{name}: spec.workgroupSize must be an integer in 1..=1024, got {}",
                    Num(n)
                ),
            ));
        }
    };
    let js_op = JsOp {
        name,
        wgsl,
        cpu,
        shape: function(spec, "shape")?,
        params: function(spec, "params")?,
        workgroup_size,
    };
    custom::register_op(Arc::new(js_op)).js()
}

/// Removes the custom op registered as `name`; `false` if there was none.
#[wasm_bindgen(js_name = unregisterOp)]
pub fn unregister_op(name: &str) -> bool {
    custom::unregister_op(name)
}

/// The names of the registered custom ops (JS and Rust ones), sorted.
#[wasm_bindgen(js_name = registeredOps)]
pub fn registered_ops() -> Array {
    custom::registered_ops()
        .into_iter()
        .map(JsValue::from)
        .collect()
}

/// Runs the registered custom op `name` on `inputs` (an array of `Tensor`s, at least one) with
/// `attrs` (an object of numbers, stored with the op in a traced model).
#[wasm_bindgen(js_name = customOp)]
pub fn custom_op(name: &str, inputs: &JsValue, attrs: &JsValue) -> JsResult<Tensor> {
    let op = "customOp";
    let xs = Tensor::many_from_js(inputs, op)?;
    if xs.is_empty() {
        return Err(invalid(
            op,
            format_args!("{name}: needs at least one input Tensor"),
        ));
    }
    let attrs = attrs_from_js(attrs, op)?;
    let refs: Vec<&KTensor> = xs.iter().collect();
    KTensor::custom(name, attrs, &refs)
        .map(Tensor::wrap)
        .map_err(|e| to_js(&e))
}
