//! Small helpers for building and reading plain JS values.

use js_sys::{Object, Reflect};
use wasm_bindgen::JsValue;

/// A plain object from key/value pairs.
pub fn object(pairs: &[(&str, JsValue)]) -> Object {
    let o = Object::new();
    for (k, v) in pairs {
        set(&o, k, v.clone());
    }
    o
}

/// `o[key] = value` on a plain object (cannot fail for ordinary objects).
pub fn set(o: &Object, key: &str, value: JsValue) {
    let _ = Reflect::set(o, &JsValue::from_str(key), &value);
}

/// A promise of `f`'s outcome, already settled when `f` is ready at its first poll (a read on
/// the CPU): `future_to_promise` would hand it to wasm-bindgen-futures' task queue first, and
/// that round trip took about 35 us of a 0.5 ms MNIST forward at batch 1 in the threaded module.
/// A future that is not ready (a WebGPU read) goes to `future_to_promise` as before, which
/// polls it again with a waker of its own.
pub fn promise(f: impl Future<Output = Result<JsValue, JsValue>> + 'static) -> js_sys::Promise {
    use core::task::{Context, Poll, Waker};
    let mut f = Box::pin(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(Ok(v)) => js_sys::Promise::resolve(&v),
        Poll::Ready(Err(e)) => js_sys::Promise::reject(&e),
        Poll::Pending => wasm_bindgen_futures::future_to_promise(f),
    }
}

/// `o[key]`, or `undefined` when `o` is not an object.
pub fn get(o: &JsValue, key: &str) -> JsValue {
    if !o.is_object() {
        return JsValue::UNDEFINED;
    }
    Reflect::get(o, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

/// A short description of a JS value's type for error messages.
pub fn type_name(v: &JsValue) -> String {
    if v.is_null() {
        return "null".into();
    }
    if v.is_undefined() {
        return "undefined".into();
    }
    if let Some(name) = get(&get(v, "constructor"), "name").as_string()
        && v.is_object()
    {
        return name;
    }
    v.js_typeof()
        .as_string()
        .unwrap_or_else(|| "unknown".into())
}

/// Integers from a number, an array of numbers or a typed array; `what` names the argument in
/// errors. Non-integers and non-numbers are rejected.
pub fn ints(v: &JsValue, op: &'static str, what: &str) -> crate::error::JsResult<Vec<i64>> {
    let bad = || {
        crate::error::invalid(
            op,
            format_args!(
                "{what} must be an integer or an array of integers, got {}",
                type_name(v)
            ),
        )
    };
    let one = |x: &JsValue| match x.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(f as i64),
        _ => Err(bad()),
    };
    if v.as_f64().is_some() {
        return Ok(vec![one(v)?]);
    }
    if js_sys::Array::is_array(v)
        || wasm_bindgen::JsCast::is_instance_of::<js_sys::Object>(v)
            && !get(v, "length").is_undefined()
    {
        return js_sys::Array::from(v).iter().map(|x| one(&x)).collect();
    }
    Err(bad())
}

/// Non-negative integers (sizes, dims).
pub fn sizes(v: &JsValue, op: &'static str, what: &str) -> crate::error::JsResult<Vec<usize>> {
    ints(v, op, what)?
        .into_iter()
        .map(|i| {
            usize::try_from(i).map_err(|_| {
                crate::error::invalid(op, format_args!("{what} must not be negative, got {i}"))
            })
        })
        .collect()
}

/// A pair `[h, w]` from a number (both) or a two-element array; `default` when undefined.
pub fn pair(
    v: &JsValue,
    default: [usize; 2],
    op: &'static str,
    what: &str,
) -> crate::error::JsResult<[usize; 2]> {
    if v.is_undefined() || v.is_null() {
        return Ok(default);
    }
    match sizes(v, op, what)?.as_slice() {
        [a] => Ok([*a, *a]),
        [a, b] => Ok([*a, *b]),
        other => Err(crate::error::invalid(
            op,
            format_args!(
                "{what} must be a number or [h, w], got {} values",
                other.len()
            ),
        )),
    }
}

/// An optional number field of an options bag.
pub fn num(options: &JsValue, key: &str) -> Option<f64> {
    get(options, key).as_f64()
}

#[wasm_bindgen::prelude::wasm_bindgen]
extern "C" {
    /// `performance.now()` (browsers, workers, Node >= 16).
    #[wasm_bindgen(js_namespace = performance, js_name = now)]
    pub fn now_ms() -> f64;
    /// `localStorage.getItem(key)`; throws where there is no `localStorage` (Node, workers) or
    /// reading it is forbidden (sandboxed iframes).
    #[wasm_bindgen(js_namespace = localStorage, js_name = getItem, catch)]
    fn get_item(key: &str) -> Result<Option<String>, JsValue>;
    /// `localStorage.setItem(key, value)`; throws as `get_item`, or when storage is full.
    #[wasm_bindgen(js_namespace = localStorage, js_name = setItem, catch)]
    fn set_item(key: &str, value: &str) -> Result<(), JsValue>;
}

/// `localStorage.getItem(key)`; `None` when absent or where there is no usable `localStorage`.
/// (Only `Model.load`'s remembered device choice uses storage, which needs WebGPU.)
#[cfg(feature = "webgpu")]
pub fn stored(key: &str) -> Option<String> {
    get_item(key).ok().flatten()
}

/// `localStorage.setItem(key, value)`; nothing where storage is unavailable or full.
#[cfg(feature = "webgpu")]
pub fn store(key: &str, value: &str) {
    let _ = set_item(key, value);
}

/// The `message` of a thrown JS value (an `Error`), else its debug form.
pub fn message(e: &JsValue) -> String {
    get(e, "message")
        .as_string()
        .unwrap_or_else(|| format!("{e:?}"))
}
