//! Small helpers for building and reading plain JS values.

use js_sys::{Object, Reflect};
use wasm_bindgen::{JsCast, JsValue};

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
/// (Only `Model.load`'s remembered device choice uses storage, between WebGPU and the CPU.)
#[cfg(all(feature = "webgpu", feature = "cpu"))]
pub fn stored(key: &str) -> Option<String> {
    get_item(key).ok().flatten()
}

/// `localStorage.setItem(key, value)`; nothing where storage is unavailable or full.
#[cfg(all(feature = "webgpu", feature = "cpu"))]
pub fn store(key: &str, value: &str) {
    let _ = set_item(key, value);
}

/// The `message` of a thrown JS value (an `Error`), else the value if it is a string, else its
/// type (not `{:?}`: wasm-bindgen's debug formatting of JS values is its own code in the glue).
pub fn message(e: &JsValue) -> String {
    get(e, "message")
        .as_string()
        .or_else(|| e.as_string())
        .unwrap_or_else(|| format!("a thrown {}", type_name(e)))
}

/// A model file's JSON read by the page's `JSON.parse`, as a [`kiln_core::model::JsonParser`]:
/// the module then carries no JSON parser (serde_json's was 8.8 KB of the gzipped CPU-only
/// module). Integers come back as serde_json reads them (so that readers asking for one find
/// it); one beyond 2^53, which `JSON.parse` cannot hold exactly, is an error.
pub fn parse_json(text: &str) -> Result<serde_json::Value, String> {
    let v = js_sys::JSON::parse(text).map_err(|e| message(&e))?;
    json_value(&v, 0)
}

/// Nesting deeper than this is refused (serde_json's own limit), not a stack overflow.
const MAX_DEPTH: usize = 128;

fn json_value(v: &JsValue, depth: usize) -> Result<serde_json::Value, String> {
    use serde_json::Value;
    if depth > MAX_DEPTH {
        return Err(format!("nested more than {MAX_DEPTH} levels deep"));
    }
    if let Some(n) = v.as_f64() {
        return json_number(n);
    }
    if let Some(s) = v.as_string() {
        return Ok(Value::String(s));
    }
    if let Some(b) = v.as_bool() {
        return Ok(Value::Bool(b));
    }
    if v.is_null() {
        return Ok(Value::Null);
    }
    if js_sys::Array::is_array(v) {
        let items = js_sys::Array::from(v);
        return items
            .iter()
            .map(|x| json_value(&x, depth + 1))
            .collect::<Result<_, _>>()
            .map(Value::Array);
    }
    let mut map = serde_json::Map::new();
    for entry in Object::entries(v.unchecked_ref()).iter() {
        let entry: js_sys::Array = entry.unchecked_into();
        let key = entry.get(0).as_string().unwrap_or_default();
        map.insert(key, json_value(&entry.get(1), depth + 1)?);
    }
    Ok(Value::Object(map))
}

fn json_number(n: f64) -> Result<serde_json::Value, String> {
    // 2^53: every integer up to it is exact in an f64.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if n.fract() != 0.0 || (n == 0.0 && n.is_sign_negative()) {
        return Ok(serde_json::Number::from_f64(n).map_or(serde_json::Value::Null, Into::into));
    }
    if n.abs() >= EXACT {
        return Err(format!(
            "the integer {} is beyond 2^53, which JavaScript's JSON.parse cannot read exactly",
            kiln_core::error::Num(n)
        ));
    }
    Ok(if n >= 0.0 {
        (n as u64).into()
    } else {
        (n as i64).into()
    })
}
