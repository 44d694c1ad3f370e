//! [`Op`]'s `Deserialize`, written by hand over a `serde_json::Value`: the derived one (a
//! visitor per variant, each reading maps and sequences, with field enums) was the largest
//! piece of model-loading code in the web package (about 13 KiB of its gzipped wasm). It reads
//! exactly what the derived `Serialize` writes: `"matmul"` for a unit variant, `{"unary": ..}`
//! for a newtype, `{"pad": {"pads": .., "value": ..}}` for a struct variant. The ops' parameter
//! types ([`UnaryOp`], [`ReduceOp`], [`Pool2d`], [`Conv2dParams`], [`AdamParams`],
//! [`SliceRange`], [`CustomCall`]) are read the same way (their derived decoders, each a map
//! and a sequence visitor with a field enum, were the bulk of what was left). The model file's
//! graph (`model/graph.rs`) is read the same way, with [`Fields`]. Each field's value is read
//! by [`FromJson`] rather than by serde's decoders, so that no serde visitor (and with it Rust's
//! float formatting, which their error messages use) is left on the page's model-loading path.

use super::custom::{Attrs, CustomCall};
use super::{
    AdamParams, BinaryOp, CmpOp, Conv2dParams, Op, Pool2d, Pool2dParams, ReduceOp, UnaryOp,
};
use crate::DType;
use crate::shape::{Shape, SliceRange};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use serde::de::{Deserialize, Deserializer, Error as _};
use serde_json::{Map, Value};

/// Why a JSON value could not be decoded: a message. Not `serde_json::Error`, whose `custom`
/// looks for a position in the message and whose `Display` carries every parser message: the
/// page parses with `JSON.parse` and had no other use for them (issue 18, bytes).
/// Boxed: one word, as serde_json's, so that every decoder's `Result` stays as small.
#[derive(Debug)]
#[allow(clippy::box_collection)] // the one word is the point (errors are rare)
pub(crate) struct Error(alloc::boxed::Box<String>);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Error {
        bad(format_args!("{e}"))
    }
}

/// A decoding error, its message formatted out of line: one copy of the formatting for every
/// decoder's messages instead of one inlined at each (issue 18, bytes).
#[cold]
#[inline(never)]
pub(crate) fn bad(message: fmt::Arguments<'_>) -> Error {
    Error(alloc::fmt::format(message).into())
}

/// A JSON value as error messages show it: compact JSON, its strings quoted as Rust's `{:?}`
/// quotes them. Not `Value`'s `Display`, which brings serde_json's serializer into the page for
/// a few messages (issue 18, bytes).
pub(crate) struct Shown<'a>(pub(crate) &'a Value);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Value::Null => f.write_str("null"),
            Value::Bool(b) => f.write_str(if *b { "true" } else { "false" }),
            Value::Number(n) => fmt::Display::fmt(n, f),
            Value::String(s) => write!(f, "{s:?}"),
            Value::Array(a) => {
                f.write_str("[")?;
                for (i, v) in a.iter().enumerate() {
                    write!(f, "{}{}", if i > 0 { "," } else { "" }, Shown(v))?;
                }
                f.write_str("]")
            }
            Value::Object(m) => {
                f.write_str("{")?;
                for (i, (k, v)) in m.iter().enumerate() {
                    write!(f, "{}{k:?}:{}", if i > 0 { "," } else { "" }, Shown(v))?;
                }
                f.write_str("}")
            }
        }
    }
}

/// `Deserialize` for types whose decoder is a function over a `serde_json::Value`.
macro_rules! from_value_impls {
    ($($t:ty => $f:path),* $(,)?) => {$(
        impl<'de> serde::de::Deserialize<'de> for $t {
            fn deserialize<D: serde::de::Deserializer<'de>>(
                d: D,
            ) -> core::result::Result<Self, D::Error> {
                use serde::de::Error as _;
                $f(serde_json::Value::deserialize(d)?).map_err(D::Error::custom)
            }
        }
    )*};
}
pub(crate) use from_value_impls;

// The enums (UnaryOp, ReduceOp, Pool2d) keep their derived `Deserialize` (the kernels' tests
// read their variant names through it); the page reaches only the decoders below, through
// `op_from_value`, so the derived ones are left out of its wasm.
from_value_impls!(Pool2dParams => pool2d_params, Conv2dParams => conv2d_params,
    AdamParams => adam_params, SliceRange => slice_range, CustomCall => custom_call);

impl<'de> Deserialize<'de> for Op {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Op, D::Error> {
        op_from_value(Value::deserialize(d)?).map_err(D::Error::custom)
    }
}

/// A struct's (or struct variant's) fields, taken by name. Not inlined: each field is then a
/// call, not a copy of its type's decoder (kiln-core is built at opt-level 3 for its kernels).
/// A field that cannot be read gives a placeholder and keeps the first such error, which
/// [`Fields::finish`] returns: no early return per field, each of which dropped the fields read
/// before it (the decoders' drop glue, in `op_from_value` above all). The map is dropped by one
/// out-of-line call: its drop glue (a walk of the `BTreeMap`) was inlined at every return of
/// every decoder.
pub(crate) struct Fields {
    map: core::mem::ManuallyDrop<Map<String, Value>>,
    err: Option<Error>,
}

impl Drop for Fields {
    #[inline(never)]
    fn drop(&mut self) {
        // SAFETY: the map is dropped here only, once, and never used afterwards.
        unsafe { core::mem::ManuallyDrop::drop(&mut self.map) }
    }
}

impl Fields {
    /// The fields of `v`, which must be an object (`what` names it in the error).
    pub(crate) fn of(v: Value, what: &str) -> Result<Fields, Error> {
        match v {
            Value::Object(m) => Ok(Fields {
                map: core::mem::ManuallyDrop::new(m),
                err: None,
            }),
            other => Err(bad(format_args!(
                "{what} expects an object of fields, found {}",
                Shown(&other)
            ))),
        }
    }
    /// `value` built from the fields read, or the first field's error.
    #[inline(never)]
    pub(crate) fn finish<T>(mut self, value: T) -> Result<T, Error> {
        match self.err.take() {
            None => Ok(value),
            Some(e) => Err(e),
        }
    }
    /// `r`'s value, or `placeholder` with its error kept (the first one only).
    fn keep<T>(&mut self, r: Result<T, Error>, placeholder: fn() -> T) -> T {
        r.unwrap_or_else(|e| {
            self.err.get_or_insert(e);
            placeholder()
        })
    }
    /// The field `name`, taken out (a `null` left in its place: `remove` would bring
    /// `BTreeMap`'s rebalancing code into the web package, for these maps alone).
    #[inline(never)]
    pub(crate) fn value(&mut self, name: &str) -> Result<Value, Error> {
        self.map
            .get_mut(name)
            .map(Value::take)
            .ok_or_else(|| bad(format_args!("missing field `{name}`")))
    }
    /// The field `name`, read by [`FromJson`].
    #[inline(never)]
    pub(crate) fn get<T: FromJson>(&mut self, name: &str) -> T {
        let r = self.value(name).and_then(|v| read(name, &v));
        self.keep(r, T::placeholder)
    }
    /// The field `name`, decoded by `decode` (`placeholder` if it cannot be).
    #[inline(never)]
    pub(crate) fn with<T>(
        &mut self,
        name: &str,
        decode: fn(Value) -> Result<T, Error>,
        placeholder: fn() -> T,
    ) -> T {
        let r = self.value(name).and_then(decode);
        self.keep(r, placeholder)
    }
    /// An f64 field: a number, or `"inf"`, `"-inf"`, `"nan"` (see [`any_f64`](super::any_f64)).
    #[inline(never)]
    fn f64(&mut self, name: &str) -> f64 {
        let r = self.value(name).and_then(|v| any_f64_of(name, v));
        self.keep(r, f64::placeholder)
    }
    /// A field that may be left out (`#[serde(default)]`).
    #[inline(never)]
    pub(crate) fn or_default<T: FromJson + Default>(&mut self, name: &str) -> T {
        let r = match self.map.get_mut(name).map(Value::take) {
            Some(v) => read(name, &v),
            None => Ok(T::default()),
        };
        self.keep(r, T::default)
    }
    /// An array field, each element decoded by `item`.
    pub(crate) fn list<T>(&mut self, name: &str, item: fn(Value) -> Result<T, Error>) -> Vec<T> {
        let r = self.value(name).and_then(|v| match v {
            Value::Array(items) => items.into_iter().map(item).collect(),
            other => Err(bad(format_args!(
                "{name} expects an array, found {}",
                Shown(&other)
            ))),
        });
        self.keep(r, Vec::new)
    }
}

/// The value `v` of the field `name`, or an error saying what it should have been.
fn read<T: FromJson>(name: &str, v: &Value) -> Result<T, Error> {
    T::from_json(v).ok_or_else(|| not_a(name, T::expected(), v))
}

/// The error for a value `v` of `what` that is not `expected`.
#[inline(never)]
pub(crate) fn not_a(what: &str, expected: String, v: &Value) -> Error {
    bad(format_args!(
        "{what} expects {expected}, found {}",
        Shown(v)
    ))
}

/// A value read from JSON by hand, as its derived or built-in `Deserialize` reads it, but
/// without serde's visitors: their invalid-type messages print floats, which kept f64
/// formatting (and a decoder per type) in the web package.
pub(crate) trait FromJson: Sized {
    /// The value, or `None` when `v` is not one.
    fn from_json(v: &Value) -> Option<Self>;
    /// What a value must be, for errors (`"a whole number >= 0"`).
    fn expected() -> String;
    /// A value that stands in for one that could not be read (see [`Fields`]).
    fn placeholder() -> Self;
}

impl FromJson for usize {
    fn from_json(v: &Value) -> Option<usize> {
        usize::try_from(v.as_u64()?).ok()
    }
    fn expected() -> String {
        "a whole number >= 0".into()
    }
    fn placeholder() -> Self {
        0
    }
}

impl FromJson for u64 {
    fn from_json(v: &Value) -> Option<u64> {
        v.as_u64()
    }
    fn expected() -> String {
        "a whole number >= 0".into()
    }
    fn placeholder() -> Self {
        0
    }
}

impl FromJson for bool {
    fn from_json(v: &Value) -> Option<bool> {
        v.as_bool()
    }
    fn expected() -> String {
        "true or false".into()
    }
    fn placeholder() -> Self {
        false
    }
}

/// Any number (as serde reads an f64); `"inf"` and the like only through [`any_f64_of`].
impl FromJson for f64 {
    fn from_json(v: &Value) -> Option<f64> {
        v.as_f64()
    }
    fn expected() -> String {
        "a number".into()
    }
    fn placeholder() -> Self {
        0.0
    }
}

impl FromJson for String {
    fn from_json(v: &Value) -> Option<String> {
        v.as_str().map(String::from)
    }
    fn expected() -> String {
        "a string".into()
    }
    fn placeholder() -> Self {
        String::new()
    }
}

impl FromJson for DType {
    fn from_json(v: &Value) -> Option<DType> {
        DType::parse(v.as_str()?)
    }
    fn expected() -> String {
        let names: Vec<&str> = DType::ALL.iter().map(|d| d.name()).collect();
        format!("a dtype ({})", names.join(", "))
    }
    fn placeholder() -> Self {
        DType::F32
    }
}

impl FromJson for Shape {
    fn from_json(v: &Value) -> Option<Shape> {
        Vec::from_json(v).map(Shape::new)
    }
    fn expected() -> String {
        Vec::<usize>::expected()
    }
    fn placeholder() -> Self {
        Shape::default()
    }
}

impl<T: FromJson> FromJson for Option<T> {
    fn from_json(v: &Value) -> Option<Option<T>> {
        match v {
            Value::Null => Some(None),
            v => T::from_json(v).map(Some),
        }
    }
    fn expected() -> String {
        format!("{} or null", T::expected())
    }
    fn placeholder() -> Self {
        None
    }
}

impl<T: FromJson> FromJson for Vec<T> {
    fn from_json(v: &Value) -> Option<Vec<T>> {
        v.as_array()?.iter().map(T::from_json).collect()
    }
    fn expected() -> String {
        format!("an array, each item {}", T::expected())
    }
    fn placeholder() -> Self {
        Vec::new()
    }
}

impl<T: FromJson + Copy + Default> FromJson for [T; 2] {
    fn from_json(v: &Value) -> Option<[T; 2]> {
        match v.as_array()?.as_slice() {
            [a, b] => Some([T::from_json(a)?, T::from_json(b)?]),
            _ => None,
        }
    }
    fn expected() -> String {
        format!("an array of 2 items, each {}", T::expected())
    }
    fn placeholder() -> Self {
        [T::default(); 2]
    }
}

/// serde's form of a pair: an array of 2.
impl<T: FromJson + Copy + Default> FromJson for (T, T) {
    fn from_json(v: &Value) -> Option<(T, T)> {
        <[T; 2]>::from_json(v).map(|[a, b]| (a, b))
    }
    fn expected() -> String {
        <[T; 2]>::expected()
    }
    fn placeholder() -> Self {
        (T::default(), T::default())
    }
}

/// Attributes: an object of numbers.
impl FromJson for Attrs {
    fn from_json(v: &Value) -> Option<Attrs> {
        let mut attrs = Attrs::new();
        for (k, x) in v.as_object()? {
            attrs.insert(k.clone(), x.as_f64()?);
        }
        Some(attrs)
    }
    fn expected() -> String {
        "an object of numbers".into()
    }
    fn placeholder() -> Self {
        Attrs::new()
    }
}

/// An f64 as [`any_f64`](super::any_f64) writes it: a number, or `"inf"`, `"-inf"`, `"nan"` (`what` names it
/// in the error).
pub(crate) fn any_f64_of(what: &str, v: Value) -> Result<f64, Error> {
    let named = v.as_str().and_then(super::any_f64::named);
    (named.or_else(|| v.as_f64()))
        .ok_or_else(|| not_a(what, "a number, \"inf\", \"-inf\" or \"nan\"".into(), &v))
}

/// serde's form of an enum value: a unit variant's name (`"matmul"`), or an object of one key,
/// the variant's name, over its payload (`{"pad": {..}}`); the payload of a bare name is
/// `Null`. `what` says what was expected in the error.
fn tagged(v: Value, what: &str) -> Result<(String, Value), Error> {
    match v {
        Value::String(name) => Ok((name, Value::Null)),
        Value::Object(m) if m.len() == 1 => Ok(m.into_iter().next().unwrap_or_default()),
        other => Err(bad(format_args!(
            "expected {what} (a name or an object of one key), found {}",
            Shown(&other)
        ))),
    }
}

/// `unit` when the variant `name` came without a payload (`null` counts as none, as for serde).
fn no_fields<T>(name: &str, payload: Value, unit: T) -> Result<T, Error> {
    match payload {
        Value::Null => Ok(unit),
        other => Err(bad(format_args!(
            "{name} takes no fields, found {}",
            Shown(&other)
        ))),
    }
}

/// Decodes one op of a model file's graph.
pub(crate) fn op_from_value(v: Value) -> Result<Op, Error> {
    let (name, payload) = tagged(v, "an op")?;
    let unit = match name.as_str() {
        "where" => Some(Op::Where),
        "matmul" => Some(Op::Matmul),
        "contiguous" => Some(Op::Contiguous),
        _ => None,
    };
    if let Some(op) = unit {
        return no_fields(&name, payload, op);
    }
    match name.as_str() {
        "unary" => return unary(payload).map(Op::Unary),
        "binary" => {
            return unit_of(payload, "binary op", BinaryOp::ALL, BinaryOp::variant).map(Op::Binary);
        }
        "compare" => {
            return unit_of(payload, "comparison", CmpOp::ALL, CmpOp::variant).map(Op::Compare);
        }
        "conv2d" => return conv2d_params(payload).map(Op::Conv2d),
        "pool2d" => return pool2d(payload).map(Op::Pool2d),
        "pool2d_backward" => return pool2d(payload).map(Op::Pool2dBackward),
        "adam_step" => return adam_params(payload).map(Op::AdamStep),
        "custom" => return custom_call(payload).map(Op::Custom),
        _ => {}
    }
    let mut f = Fields::of(payload, &name)?;
    let op = match name.as_str() {
        "full" => Op::Full {
            shape: f.get("shape"),
            value: f.f64("value"),
            dtype: f.get("dtype"),
        },
        "arange" => Op::Arange {
            start: f.f64("start"),
            step: f.f64("step"),
            len: f.get("len"),
            dtype: f.get("dtype"),
        },
        "eye" => Op::Eye {
            n: f.get("n"),
            m: f.get("m"),
            dtype: f.get("dtype"),
        },
        "rand_uniform" => Op::RandUniform {
            shape: f.get("shape"),
            low: f.f64("low"),
            high: f.f64("high"),
            seed: f.get("seed"),
            dtype: f.get("dtype"),
        },
        "rand_normal" => Op::RandNormal {
            shape: f.get("shape"),
            mean: f.f64("mean"),
            std: f.f64("std"),
            seed: f.get("seed"),
            dtype: f.get("dtype"),
        },
        "cast" => Op::Cast {
            dtype: f.get("dtype"),
        },
        "reduce" => Op::Reduce {
            op: reduce_op(f.value("op")?)?,
            axes: f.get("axes"),
            keepdim: f.get("keepdim"),
        },
        "cumsum" => Op::Cumsum {
            axis: f.get("axis"),
            reverse: f.get("reverse"),
        },
        "softmax" => Op::Softmax {
            axis: f.get("axis"),
            causal: f.or_default("causal"),
        },
        "log_softmax" => Op::LogSoftmax {
            axis: f.get("axis"),
        },
        "normalize" => Op::Normalize { eps: f.f64("eps") },
        "normalize_backward" => Op::NormalizeBackward { eps: f.f64("eps") },
        "reshape" => Op::Reshape {
            shape: f.get("shape"),
        },
        "permute" => Op::Permute {
            dims: f.get("dims"),
        },
        "slice" => Op::Slice {
            ranges: f.list("ranges", slice_range),
        },
        "expand" => Op::Expand {
            shape: f.get("shape"),
        },
        "concat" => Op::Concat {
            axis: f.get("axis"),
        },
        "gather" => Op::Gather {
            axis: f.get("axis"),
        },
        "index_select" => Op::IndexSelect {
            axis: f.get("axis"),
        },
        "scatter_add" => Op::ScatterAdd {
            axis: f.get("axis"),
        },
        "pad" => Op::Pad {
            pads: f.get("pads"),
            value: f.f64("value"),
        },
        "one_hot" => Op::OneHot {
            classes: f.get("classes"),
            dtype: f.get("dtype"),
        },
        "conv_transpose2d" => Op::ConvTranspose2d {
            params: conv2d_params(f.value("params")?)?,
            output_padding: f.get("output_padding"),
        },
        "conv2d_backward_weight" => Op::Conv2dBackwardWeight {
            params: conv2d_params(f.value("params")?)?,
            kernel: f.get("kernel"),
        },
        _ => return Err(bad(format_args!("unknown op `{name}`"))),
    };
    f.finish(op)
}

/// A unary op: its name (`"relu"`), `{"powf": p}` or `{"clamp": {"min": .., "max": ..}}`.
fn unary(v: Value) -> Result<UnaryOp, Error> {
    let (name, payload) = tagged(v, "a unary op")?;
    match name.as_str() {
        "powf" => return any_f64_of("powf", payload).map(UnaryOp::Powf),
        "clamp" => {
            let mut f = Fields::of(payload, "clamp")?;
            let clamp = UnaryOp::Clamp {
                min: f.f64("min"),
                max: f.f64("max"),
            };
            return f.finish(clamp);
        }
        _ => {}
    }
    // The other variants have no fields; serde's name of each is its method name (a test
    // round-trips every sample).
    let ops = UnaryOp::samples();
    match ops.iter().find(|op| op.name() == name) {
        Some(&op) => no_fields(&name, payload, op),
        None => {
            let names: Vec<&str> = ops.iter().map(UnaryOp::name).collect();
            Err(bad(format_args!(
                "unknown unary op `{name}`, expected one of {}",
                names.join(", ")
            )))
        }
    }
}

/// A variant without fields among `all`, by serde's name of it: its Rust name (`variant`) in
/// snake_case, which for these one-word names is the lowercase name (`Max` is `"max"`). For
/// `BinaryOp` and `CmpOp`, whose derived decoders the page then leaves out.
fn unit_of<T: Copy>(
    v: Value,
    what: &str,
    all: &[T],
    variant: fn(&T) -> &'static str,
) -> Result<T, Error> {
    let (name, payload) = tagged(v, &format!("a {what}"))?;
    let names: Vec<String> = all
        .iter()
        .map(|op| variant(op).to_ascii_lowercase())
        .collect();
    match names.iter().position(|n| *n == name) {
        Some(i) => no_fields(&name, payload, all[i]),
        None => Err(bad(format_args!(
            "unknown {what} `{name}`, expected one of {}",
            names.join(", ")
        ))),
    }
}

fn reduce_op(v: Value) -> Result<ReduceOp, Error> {
    let (name, payload) = tagged(v, "a reduction")?;
    let op = match name.as_str() {
        "var" => {
            let mut f = Fields::of(payload, "var")?;
            let correction = f.get("correction");
            return f.finish(ReduceOp::Var { correction });
        }
        "sum" => ReduceOp::Sum,
        "mean" => ReduceOp::Mean,
        "max" => ReduceOp::Max,
        "min" => ReduceOp::Min,
        "prod" => ReduceOp::Prod,
        "arg_max" => ReduceOp::ArgMax,
        "arg_min" => ReduceOp::ArgMin,
        _ => {
            return Err(bad(format_args!(
                "unknown reduction `{name}`, expected one of sum, mean, max, min, prod, var, arg_max, arg_min"
            )));
        }
    };
    no_fields(&name, payload, op)
}

fn pool2d(v: Value) -> Result<Pool2d, Error> {
    let (name, payload) = tagged(v, "a pooling")?;
    match name.as_str() {
        "max" => pool2d_params(payload).map(Pool2d::Max),
        "avg" => pool2d_params(payload).map(Pool2d::Avg),
        "adaptive_avg" => {
            let mut f = Fields::of(payload, "adaptive_avg")?;
            let output = f.get("output");
            f.finish(Pool2d::AdaptiveAvg { output })
        }
        _ => Err(bad(format_args!(
            "unknown pooling `{name}`, expected one of max, avg, adaptive_avg"
        ))),
    }
}

fn pool2d_params(v: Value) -> Result<Pool2dParams, Error> {
    let mut f = Fields::of(v, "pooling parameters")?;
    let params = Pool2dParams {
        kernel: f.get("kernel"),
        stride: f.get("stride"),
        padding: f.get("padding"),
        dilation: f.get("dilation"),
        count_include_pad: f.get("count_include_pad"),
    };
    f.finish(params)
}

fn conv2d_params(v: Value) -> Result<Conv2dParams, Error> {
    let mut f = Fields::of(v, "convolution parameters")?;
    let params = Conv2dParams {
        stride: f.get("stride"),
        padding: f.get("padding"),
        dilation: f.get("dilation"),
        groups: f.get("groups"),
    };
    f.finish(params)
}

fn adam_params(v: Value) -> Result<AdamParams, Error> {
    let mut f = Fields::of(v, "Adam parameters")?;
    let params = AdamParams {
        lr: f.get("lr"),
        beta1: f.get("beta1"),
        beta2: f.get("beta2"),
        eps: f.get("eps"),
        weight_decay: f.get("weight_decay"),
        decoupled: f.get("decoupled"),
        step: f.get("step"),
    };
    f.finish(params)
}

fn slice_range(v: Value) -> Result<SliceRange, Error> {
    let mut f = Fields::of(v, "a slice range")?;
    let params = SliceRange {
        start: f.get("start"),
        end: f.get("end"),
        step: f.get("step"),
    };
    f.finish(params)
}

fn custom_call(v: Value) -> Result<CustomCall, Error> {
    let mut f = Fields::of(v, "a custom op call")?;
    let params = CustomCall {
        name: f.get("name"),
        attrs: f.or_default("attrs"),
    };
    f.finish(params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BinaryOp, CmpOp};

    fn round_trip(op: Op) {
        let json = serde_json::to_string(&op).unwrap();
        let back: Op = serde_json::from_str(&json).unwrap();
        assert_eq!(back, op, "{json}");
    }

    /// Error messages show a value as compact JSON, strings quoted and escaped.
    #[test]
    fn shown_values_are_compact_json() {
        let v = serde_json::json!({"b": [1, -2.5, null, true], "a": "q\"x\n", "c": {}});
        assert_eq!(
            Shown(&v).to_string(),
            r#"{"a":"q\"x\n","b":[1,-2.5,null,true],"c":{}}"#
        );
        let err = op_from_value(serde_json::json!({"pad": [3, "x"]})).unwrap_err();
        assert!(err.to_string().ends_with(r#"found [3,"x"]"#), "{err}");
        // one word, like serde_json's error, so that decoders' results stay small
        assert_eq!(size_of::<Error>(), size_of::<usize>());
    }

    /// The hand-written decoders read what the derived `Serialize` writes, for every variant.
    #[test]
    fn every_parameter_type_round_trips() {
        for op in UnaryOp::samples() {
            round_trip(Op::Unary(op));
        }
        for &op in BinaryOp::ALL {
            round_trip(Op::Binary(op));
        }
        for &op in CmpOp::ALL {
            round_trip(Op::Compare(op));
        }
        for op in ReduceOp::samples() {
            round_trip(Op::Reduce {
                op,
                axes: alloc::vec![0, 2],
                keepdim: true,
            });
        }
        for p in Pool2d::samples() {
            round_trip(Op::Pool2d(p));
            round_trip(Op::Pool2dBackward(p));
        }
        let params = Conv2dParams {
            stride: [2, 1],
            padding: [1, 0],
            dilation: [1, 3],
            groups: 2,
        };
        round_trip(Op::Conv2d(params));
        round_trip(Op::ConvTranspose2d {
            params,
            output_padding: [1, 0],
        });
        round_trip(Op::Conv2dBackwardWeight {
            params,
            kernel: [3, 3],
        });
        round_trip(Op::AdamStep(AdamParams {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            decoupled: true,
            step: 7,
        }));
        round_trip(Op::Slice {
            ranges: alloc::vec![SliceRange {
                start: 1,
                end: 9,
                step: 2
            }],
        });
        let mut attrs = crate::op::custom::Attrs::new();
        attrs.insert("alpha".into(), 0.5);
        round_trip(Op::Custom(CustomCall {
            name: "my.op".into(),
            attrs,
        }));
        round_trip(Op::Full {
            shape: Shape::from([2, 3]),
            value: 1.5,
            dtype: DType::F16,
        });
        // A call without attributes may leave them out; a unit variant may carry `null`.
        let call: CustomCall = serde_json::from_str(r#"{"name":"x"}"#).unwrap();
        assert!(call.attrs.is_empty());
        let relu = unary(serde_json::json!({ "relu": null })).unwrap();
        assert_eq!(relu, UnaryOp::Relu);
    }

    /// `FromJson` reads what serde writes for each type, and says what it expected otherwise.
    #[test]
    fn from_json_reads_each_type_and_rejects_others() {
        use serde_json::json;
        assert_eq!(usize::from_json(&json!(7)), Some(7));
        for bad in [json!(-1), json!(1.5), json!("7"), json!(null), json!(1e300)] {
            assert_eq!(usize::from_json(&bad), None, "{bad}");
        }
        assert_eq!(u64::from_json(&json!(u64::MAX)), Some(u64::MAX));
        assert_eq!(bool::from_json(&json!(1)), None);
        assert_eq!(f64::from_json(&json!(-3)), Some(-3.0));
        assert_eq!(f64::from_json(&json!("inf")), None);
        assert_eq!(String::from_json(&json!(["a"])), None);
        assert_eq!(DType::from_json(&json!("f16")), Some(DType::F16));
        assert_eq!(DType::from_json(&json!("float")), None);
        assert!(DType::expected().contains("f32"), "{}", DType::expected());
        assert_eq!(Shape::from_json(&json!([2, 3])), Some(Shape::from([2, 3])));
        assert_eq!(
            <Vec<Option<usize>>>::from_json(&json!([null, 4])),
            Some(alloc::vec![None, Some(4)])
        );
        assert_eq!(<Vec<usize>>::from_json(&json!([1, "2"])), None);
        assert_eq!(<[usize; 2]>::from_json(&json!([1, 2, 3])), None);
        assert_eq!(<(usize, usize)>::from_json(&json!([1, 2])), Some((1, 2)));
        assert_eq!(
            Attrs::from_json(&json!({"a": 1})).map(|a| a["a"]),
            Some(1.0)
        );
        assert_eq!(Attrs::from_json(&json!([1])), None);
        assert_eq!(
            <Vec<[usize; 2]>>::expected(),
            "an array, each item an array of 2 items, each a whole number >= 0"
        );
        assert_eq!(any_f64_of("x", json!("-inf")).unwrap(), f64::NEG_INFINITY);
        assert!(any_f64_of("x", json!("nan")).unwrap().is_nan());
        let err = any_f64_of("x", json!([])).unwrap_err().to_string();
        assert!(
            err.contains("x expects a number, \"inf\", \"-inf\" or \"nan\", found []"),
            "{err}"
        );
        let mut f = Fields::of(json!({"dims": [1, -1]}), "test").unwrap();
        assert!(f.get::<Vec<usize>>("dims").is_empty());
        assert!(!f.or_default::<bool>("absent"));
        f.get::<usize>("absent");
        // The first error is the one returned.
        let err = f.finish(()).unwrap_err().to_string();
        assert_eq!(
            err,
            "dims expects an array, each item a whole number >= 0, found [1,-1]"
        );
    }

    /// Malformed parameters are errors that say what was wrong, never panics.
    #[test]
    fn malformed_parameters_are_clear_errors() {
        let cases = [
            (
                r#"{"unary":"nope"}"#,
                "unknown unary op `nope`, expected one of neg",
            ),
            (r#"{"unary":{"relu":1}}"#, "relu takes no fields, found 1"),
            (
                r#"{"unary":3}"#,
                "expected a unary op (a name or an object of one key), found 3",
            ),
            (
                r#"{"unary":{"relu":null,"exp":null}}"#,
                "expected a unary op",
            ),
            (r#"{"unary":{"powf":"lots"}}"#, "\"lots\""),
            (r#"{"unary":{"clamp":{"min":0}}}"#, "missing field `max`"),
            (
                r#"{"unary":"clamp"}"#,
                "clamp expects an object of fields, found null",
            ),
            (
                r#"{"reduce":{"op":"median","axes":[],"keepdim":false}}"#,
                "unknown reduction `median`",
            ),
            (
                r#"{"reduce":{"op":{"sum":[]},"axes":[],"keepdim":false}}"#,
                "sum takes no fields",
            ),
            (
                r#"{"reduce":{"op":{"var":{}},"axes":[],"keepdim":false}}"#,
                "missing field `correction`",
            ),
            (r#"{"pool2d":{"median":{}}}"#, "unknown pooling `median`"),
            (
                r#"{"pool2d":{"max":[2,2]}}"#,
                "pooling parameters expects an object",
            ),
            (
                r#"{"pool2d":{"max":{"kernel":[2]}}}"#,
                "kernel expects an array of 2 items, each a whole number >= 0, found [2]",
            ),
            (r#"{"conv2d":{"stride":[1,1]}}"#, "missing field `padding`"),
            (
                r#"{"conv2d":{"stride":[1,1],"padding":[0,0],"dilation":[1,1],"groups":-1}}"#,
                "groups expects a whole number >= 0, found -1",
            ),
            (
                r#"{"adam_step":{"lr":"fast"}}"#,
                "lr expects a number, found \"fast\"",
            ),
            (
                r#"{"slice":{"ranges":[{"start":0,"end":2}]}}"#,
                "missing field `step`",
            ),
            (r#"{"slice":{"ranges":{}}}"#, "ranges expects an array"),
            (r#"{"custom":{"attrs":{}}}"#, "missing field `name`"),
            (r#"{"custom":{"name":"x","attrs":{"a":"b"}}}"#, "\"b\""),
            (r#"{"matmul":{"x":1}}"#, "matmul takes no fields"),
            (
                r#"{"binary":"maximum"}"#,
                "unknown binary op `maximum`, expected one of add, sub, mul, div, pow, max, min",
            ),
            (
                r#"{"binary":{"add":[1]}}"#,
                "add takes no fields, found [1]",
            ),
            (r#"{"compare":"Eq"}"#, "unknown comparison `Eq`"),
            (
                r#"{"compare":7}"#,
                "expected a comparison (a name or an object of one key), found 7",
            ),
        ];
        for (json, want) in cases {
            let err = serde_json::from_str::<Op>(json).unwrap_err().to_string();
            assert!(err.contains(want), "{json}: {err}");
        }
    }
}
