//! kiln errors as JavaScript `Error`s: the message is kiln's (`op: what was expected and found`),
//! with `name = "KilnError"` and `kind`/`op` properties so callers can react without parsing.

use js_sys::{Error as JsErr, Reflect};
use kiln_core::Error;
use std::fmt;
use wasm_bindgen::JsValue;

/// What every exported function returns on failure.
pub type JsResult<T> = Result<T, JsValue>;

/// The JS `Error` for a kiln error.
pub fn to_js(e: &Error) -> JsValue {
    let err = JsErr::new(&e.to_string());
    err.set_name("KilnError");
    let kind = e.kind().name();
    // Setting plain data properties on a fresh Error object cannot fail.
    let _ = Reflect::set(&err, &"kind".into(), &kind.into());
    let _ = Reflect::set(&err, &"op".into(), &e.op().into());
    err.into()
}

/// Converts `Result<T, kiln_core::Error>` for export.
pub trait IntoJs<T> {
    /// The same result with the error as a JS `Error`.
    fn js(self) -> JsResult<T>;
}

impl<T> IntoJs<T> for kiln_core::Result<T> {
    fn js(self) -> JsResult<T> {
        self.map_err(|e| to_js(&e))
    }
}

/// A kiln `InvalidArgument` error raised by `op`, as a JS `Error`. Out of line, with the
/// message formatted here: one copy of the formatting serves every argument check of the
/// exports (issue 18, bytes).
#[cold]
#[inline(never)]
pub fn invalid(op: &'static str, message: fmt::Arguments<'_>) -> JsValue {
    to_js(&Error::invalid(op, fmt::format(message)))
}
