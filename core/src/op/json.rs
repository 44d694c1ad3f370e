//! [`Op`]'s `Deserialize`, written by hand over a `serde_json::Value`: the derived one (a
//! visitor per variant, each reading maps and sequences, with field enums) was the largest
//! piece of model-loading code in the web package (about 13 KiB of its gzipped wasm). It reads
//! exactly what the derived `Serialize` writes: `"matmul"` for a unit variant, `{"unary": ..}`
//! for a newtype, `{"pad": {"pads": .., "value": ..}}` for a struct variant; the variants'
//! payloads and fields go through their own serde impls (`serde_json::from_value`). The model
//! file's graph (`model/graph.rs`) is read the same way, with [`Fields`].

use super::{Op, any_f64};
use alloc::format;
use alloc::string::String;
use serde::de::{Deserialize, DeserializeOwned, Deserializer, Error as _};
use serde_json::{Error, Map, Value};

impl<'de> Deserialize<'de> for Op {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Op, D::Error> {
        op_from_value(Value::deserialize(d)?).map_err(D::Error::custom)
    }
}

/// A struct's (or struct variant's) fields, taken by name. Not inlined: each field is then a
/// call, not a copy of its type's decoder (kiln-core is built at opt-level 3 for its kernels).
pub(crate) struct Fields(Map<String, Value>);

impl Fields {
    /// The fields of `v`, which must be an object (`what` names it in the error).
    pub(crate) fn of(v: Value, what: &str) -> Result<Fields, Error> {
        match v {
            Value::Object(m) => Ok(Fields(m)),
            other => Err(Error::custom(format!(
                "{what} expects an object of fields, found {other}"
            ))),
        }
    }
    #[inline(never)]
    pub(crate) fn value(&mut self, name: &str) -> Result<Value, Error> {
        self.0
            .remove(name)
            .ok_or_else(|| Error::custom(format!("missing field `{name}`")))
    }
    #[inline(never)]
    pub(crate) fn get<T: DeserializeOwned>(&mut self, name: &str) -> Result<T, Error> {
        serde_json::from_value(self.value(name)?)
    }
    /// An f64 field: a number, or `"inf"`, `"-inf"`, `"nan"` (see [`any_f64`]).
    #[inline(never)]
    fn f64(&mut self, name: &str) -> Result<f64, Error> {
        any_f64::deserialize(self.value(name)?)
    }
    /// A field that may be left out (`#[serde(default)]`).
    #[inline(never)]
    pub(crate) fn or_default<T: DeserializeOwned + Default>(
        &mut self,
        name: &str,
    ) -> Result<T, Error> {
        self.0
            .remove(name)
            .map_or(Ok(T::default()), serde_json::from_value)
    }
    /// An array field, each element decoded by `item`.
    pub(crate) fn list<T>(
        &mut self,
        name: &str,
        item: fn(Value) -> Result<T, Error>,
    ) -> Result<alloc::vec::Vec<T>, Error> {
        match self.value(name)? {
            Value::Array(items) => items.into_iter().map(item).collect(),
            other => Err(Error::custom(format!(
                "{name} expects an array, found {other}"
            ))),
        }
    }
}

/// Decodes one op of a model file's graph.
pub(crate) fn op_from_value(v: Value) -> Result<Op, Error> {
    let (name, payload) = match v {
        Value::String(name) => (name, Value::Null),
        Value::Object(m) if m.len() == 1 => m.into_iter().next().unwrap_or_default(),
        other => {
            return Err(Error::custom(format!(
                "expected an op (a name or an object of one key), found {other}"
            )));
        }
    };
    let unit = match name.as_str() {
        "where" => Some(Op::Where),
        "matmul" => Some(Op::Matmul),
        "contiguous" => Some(Op::Contiguous),
        _ => None,
    };
    let payload = match (unit, payload) {
        (Some(op), Value::Null) => return Ok(op),
        (Some(_), other) => {
            return Err(Error::custom(format!(
                "{name} takes no fields, found {other}"
            )));
        }
        (None, payload) => payload,
    };
    use serde_json::from_value as from;
    match name.as_str() {
        "unary" => return from(payload).map(Op::Unary),
        "binary" => return from(payload).map(Op::Binary),
        "compare" => return from(payload).map(Op::Compare),
        "conv2d" => return from(payload).map(Op::Conv2d),
        "pool2d" => return from(payload).map(Op::Pool2d),
        "pool2d_backward" => return from(payload).map(Op::Pool2dBackward),
        "adam_step" => return from(payload).map(Op::AdamStep),
        "custom" => return from(payload).map(Op::Custom),
        _ => {}
    }
    let mut f = Fields::of(payload, &name)?;
    Ok(match name.as_str() {
        "full" => Op::Full {
            shape: f.get("shape")?,
            value: f.f64("value")?,
            dtype: f.get("dtype")?,
        },
        "arange" => Op::Arange {
            start: f.f64("start")?,
            step: f.f64("step")?,
            len: f.get("len")?,
            dtype: f.get("dtype")?,
        },
        "eye" => Op::Eye {
            n: f.get("n")?,
            m: f.get("m")?,
            dtype: f.get("dtype")?,
        },
        "rand_uniform" => Op::RandUniform {
            shape: f.get("shape")?,
            low: f.f64("low")?,
            high: f.f64("high")?,
            seed: f.get("seed")?,
            dtype: f.get("dtype")?,
        },
        "rand_normal" => Op::RandNormal {
            shape: f.get("shape")?,
            mean: f.f64("mean")?,
            std: f.f64("std")?,
            seed: f.get("seed")?,
            dtype: f.get("dtype")?,
        },
        "cast" => Op::Cast {
            dtype: f.get("dtype")?,
        },
        "reduce" => Op::Reduce {
            op: f.get("op")?,
            axes: f.get("axes")?,
            keepdim: f.get("keepdim")?,
        },
        "cumsum" => Op::Cumsum {
            axis: f.get("axis")?,
            reverse: f.get("reverse")?,
        },
        "softmax" => Op::Softmax {
            axis: f.get("axis")?,
            causal: f.or_default("causal")?,
        },
        "log_softmax" => Op::LogSoftmax {
            axis: f.get("axis")?,
        },
        "normalize" => Op::Normalize { eps: f.f64("eps")? },
        "normalize_backward" => Op::NormalizeBackward { eps: f.f64("eps")? },
        "reshape" => Op::Reshape {
            shape: f.get("shape")?,
        },
        "permute" => Op::Permute {
            dims: f.get("dims")?,
        },
        "slice" => Op::Slice {
            ranges: f.get("ranges")?,
        },
        "expand" => Op::Expand {
            shape: f.get("shape")?,
        },
        "concat" => Op::Concat {
            axis: f.get("axis")?,
        },
        "gather" => Op::Gather {
            axis: f.get("axis")?,
        },
        "index_select" => Op::IndexSelect {
            axis: f.get("axis")?,
        },
        "scatter_add" => Op::ScatterAdd {
            axis: f.get("axis")?,
        },
        "pad" => Op::Pad {
            pads: f.get("pads")?,
            value: f.f64("value")?,
        },
        "one_hot" => Op::OneHot {
            classes: f.get("classes")?,
            dtype: f.get("dtype")?,
        },
        "conv_transpose2d" => Op::ConvTranspose2d {
            params: f.get("params")?,
            output_padding: f.get("output_padding")?,
        },
        "conv2d_backward_weight" => Op::Conv2dBackwardWeight {
            params: f.get("params")?,
            kernel: f.get("kernel")?,
        },
        _ => return Err(Error::custom(format!("unknown op `{name}`"))),
    })
}
