//! ONNX operators as kiln ops: one function per ONNX op type, grouped by family. Composite ONNX
//! ops (HardSigmoid, Softplus, LayerNormalization, ...) are compositions of kiln's primitives,
//! written here and nowhere else.
//!
//! Every function gets the node's context ([`Ctx`]: device, opset, attributes) and its input
//! [`Value`]s (absent optional inputs are [`Value::Absent`]) and returns its outputs in order.
//! Integer values known on the host ([`Value::Ints`]) are computed on the host where an op
//! supports it (shape arithmetic), and lowered to i32 tensors otherwise.

mod elementwise;
mod nn;
mod reduce;
mod rnn;
mod shape;
mod signal;
mod vision;

use crate::NodeAttrs;
use crate::model::onnx_err;
use crate::value::{Ints, Value};
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use kiln_core::{DType, Device, Error, Result, Shape, Tensor, TensorData};

/// What an op import returns: its outputs in order.
pub(crate) type Outputs = Result<Vec<Value>>;

/// An op import.
pub(crate) type OpFn = fn(&Ctx<'_>, &[Value]) -> Outputs;

/// Every family's table of (ONNX op type, import).
const FAMILIES: &[&[(&str, OpFn)]] = &[
    elementwise::OPS,
    shape::OPS,
    nn::OPS,
    reduce::OPS,
    rnn::OPS,
    signal::OPS,
    vision::OPS,
];

/// The import of ONNX op type `op_type` (default domain), if kiln has one.
pub(crate) fn find(op_type: &str) -> Option<OpFn> {
    FAMILIES
        .iter()
        .flat_map(|f| f.iter())
        .find(|(name, _)| *name == op_type)
        .map(|(_, f)| *f)
}

/// Every ONNX op type kiln imports, sorted.
pub fn supported_ops() -> Vec<&'static str> {
    let mut v: Vec<&str> = FAMILIES
        .iter()
        .flat_map(|f| f.iter().map(|(n, _)| *n))
        .collect();
    v.sort_unstable();
    v
}

/// What an op import sees of its node.
pub(crate) struct Ctx<'a> {
    pub device: &'a Device,
    pub opset: i64,
    pub node: &'a crate::NodeProto,
}

impl Ctx<'_> {
    /// Integer attribute `name`, or `default` when the node does not set it.
    pub fn int(&self, name: &str, default: i64) -> Result<i64> {
        Ok(self
            .node
            .attr_int(name)
            .map_err(onnx_err)?
            .unwrap_or(default))
    }

    /// Float attribute `name`, or `default`.
    pub fn float(&self, name: &str, default: f32) -> Result<f32> {
        Ok(self
            .node
            .attr_float(name)
            .map_err(onnx_err)?
            .unwrap_or(default))
    }

    /// Integer-list attribute `name`, if set.
    pub fn ints_attr(&self, name: &str) -> Result<Option<Vec<i64>>> {
        Ok(self
            .node
            .attr_ints(name)
            .map_err(onnx_err)?
            .map(<[i64]>::to_vec))
    }

    /// Float-list attribute `name`, if set.
    #[allow(dead_code)] // for the ops that take float lists (e.g. Resize scales)
    pub fn floats_attr(&self, name: &str) -> Result<Option<Vec<f32>>> {
        Ok(self
            .node
            .attr_floats(name)
            .map_err(onnx_err)?
            .map(<[f32]>::to_vec))
    }

    /// String attribute `name`, or `default`.
    pub fn string(&self, name: &str, default: &str) -> Result<String> {
        Ok(self
            .node
            .attr_string(name)
            .map_err(onnx_err)?
            .unwrap_or(default)
            .into())
    }

    /// Input `i` as a device tensor (an error names the input when it is absent).
    pub fn tensor(&self, args: &[Value], i: usize) -> Result<Tensor> {
        self.arg(args, i)?
            .tensor(self.device, &format!("input {i}"))
    }

    /// Input `i` as host integers (an error for a computed device tensor).
    pub fn ints<'v>(&self, args: &'v [Value], i: usize) -> Result<&'v Ints> {
        self.arg(args, i)?.ints(&format!("input {i}"))
    }

    /// Input `i`, which must exist (it may still be [`Value::Absent`]).
    pub fn arg<'v>(&self, args: &'v [Value], i: usize) -> Result<&'v Value> {
        args.get(i).ok_or_else(|| {
            Error::invalid(
                "onnx",
                format!("expects input {i}, has {} inputs", args.len()),
            )
        })
    }

    /// Optional input `i`: `None` when missing or absent.
    pub fn optional<'v>(&self, args: &'v [Value], i: usize) -> Option<&'v Value> {
        args.get(i).filter(|v| v.is_present())
    }

    /// An unsupported attribute value, as an error naming it.
    pub fn unsupported(&self, what: impl core::fmt::Display) -> Error {
        Error::unsupported("onnx", format!("{what}"))
    }
}

/// One tensor output.
pub(crate) fn one(t: Tensor) -> Outputs {
    Ok(vec![Value::Tensor(t)])
}

/// One host-integer output.
pub(crate) fn one_ints(i: Ints) -> Outputs {
    Ok(vec![Value::Ints(i)])
}

/// The values of a small input that decides an output's shape (Resize scales, Range bounds,
/// OneHot depth): host integers as they are, a device tensor read back. The read blocks until
/// the device is done (free on the CPU); without `std` it is an error naming `what`.
pub(crate) fn host_values(v: &Value, what: &str) -> Result<Vec<f64>> {
    match v {
        Value::Ints(i) => Ok(i.data.iter().map(|&x| x as f64).collect()),
        Value::Tensor(t) => read_back(t, what),
        Value::Absent => Ok(Vec::new()),
        other => Err(Error::invalid(
            "onnx",
            format!("{what}: expects numbers, gets {}", other.describe()),
        )),
    }
}

#[cfg(feature = "std")]
fn read_back(t: &Tensor, _: &str) -> Result<Vec<f64>> {
    Ok(t.to_data()?.to_f64_vec())
}

#[cfg(not(feature = "std"))]
fn read_back(_: &Tensor, what: &str) -> Result<Vec<f64>> {
    Err(Error::unsupported(
        "onnx",
        format!("{what}: a computed tensor whose value decides the output shape"),
    ))
}

/// A table computed on the host from shapes and attributes (DFT matrices, windows, sampling
/// positions) as a `dtype` tensor on `device`.
pub(crate) fn float_table(
    device: &Device,
    data: Vec<f64>,
    dims: Vec<usize>,
    dtype: DType,
) -> Result<Tensor> {
    let d = TensorData::new(data, Shape::from(dims))?;
    Tensor::from_data(&d.convert(crate::value::held(device, dtype)), device)
}

/// ONNX axis `axis` (negative counts from the end) of a rank-`rank` value.
pub(crate) fn axis(axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    if axis < -r.max(1) || axis >= r.max(1) {
        return Err(Error::invalid(
            "onnx",
            format!("axis {axis} is out of range for rank {rank}"),
        ));
    }
    Ok(if axis < 0 {
        (axis + r) as usize
    } else {
        axis as usize
    })
}

#[cfg(test)]
pub(crate) mod testing {
    //! Building single nodes and their inputs for the family files' unit tests.
    use super::*;
    use crate::proto::attribute_proto::AttributeType;
    use crate::proto::{AttributeProto, NodeProto};
    use kiln_core::Device;

    /// An attribute value.
    pub enum A {
        I(i64),
        F(f32),
        Fs(Vec<f32>),
        S(&'static str),
        Ss(Vec<&'static str>),
    }

    /// A node of type `op` with `attrs`.
    pub fn node(op: &str, attrs: Vec<(&str, A)>) -> NodeProto {
        let attribute = attrs
            .into_iter()
            .map(|(name, a)| {
                let mut p = AttributeProto {
                    name: Some(name.into()),
                    ..Default::default()
                };
                let t = match a {
                    A::I(i) => {
                        p.i = Some(i);
                        AttributeType::Int
                    }
                    A::F(f) => {
                        p.f = Some(f);
                        AttributeType::Float
                    }
                    A::Fs(f) => {
                        p.floats = f;
                        AttributeType::Floats
                    }
                    A::S(s) => {
                        p.s = Some(s.as_bytes().to_vec());
                        AttributeType::String
                    }
                    A::Ss(s) => {
                        p.strings = s.iter().map(|s| s.as_bytes().to_vec()).collect();
                        AttributeType::Strings
                    }
                };
                p.r#type = Some(t as i32);
                p
            })
            .collect();
        NodeProto {
            op_type: Some(op.into()),
            attribute,
            ..Default::default()
        }
    }

    /// The outputs of `f` on `node` and `args` (CPU, opset `opset`) as f64 values.
    pub fn outputs(f: OpFn, opset: i64, node: &NodeProto, args: &[Value]) -> Vec<Vec<f64>> {
        let device = Device::cpu();
        let c = Ctx {
            device: &device,
            opset,
            node,
        };
        f(&c, args)
            .unwrap()
            .iter()
            .map(|v| host_values(v, "output").unwrap())
            .collect()
    }

    /// An f32 tensor of `v`.
    pub fn t(v: &[f64], dims: &[usize]) -> Value {
        let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
        Value::Tensor(Tensor::from_slice(&v, dims.to_vec(), &Device::cpu()).unwrap())
    }

    /// Deterministic values in [-1, 1).
    pub fn fill(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
            })
            .collect()
    }

    /// `a` and `b` agree within 1e-5.
    pub fn close(a: &[f64], b: &[f64], what: &str) {
        assert_eq!(a.len(), b.len(), "{what}: lengths");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() < 1e-5, "{what}: element {i}: {x} vs {y}");
        }
    }
}
