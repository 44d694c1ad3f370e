//! ONNX operators as kiln ops: one function per ONNX op type, grouped by family. Composite ONNX
//! ops (HardSigmoid, Softplus, LayerNormalization, ...) are compositions of kiln's primitives,
//! written here and nowhere else.
//!
//! Every function gets the node's context ([`Ctx`]: device, opset, attributes) and its input
//! [`Value`]s (absent optional inputs are [`Value::Absent`]) and returns its outputs in order.
//! Integer values known on the host ([`Value::Ints`]) are computed on the host where an op
//! supports it (shape arithmetic), and lowered to i32 tensors otherwise.

mod control;
mod elementwise;
mod linalg;
mod llm;
mod ml;
mod nn;
mod quant;
mod reduce;
mod rnn;
mod sequence;
mod set;
mod shape;
mod signal;
mod strings;
mod training;
mod vision;

use crate::NodeAttrs;
use crate::model::{Graph, Scope, onnx_err};
use crate::value::{Ints, Value};
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use kiln_core::{DType, Device, Error, Result, Shape, Tensor, TensorData};

pub(crate) use training::{attach_forward, is_gradient};

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
    control::OPS,
    sequence::OPS,
    quant::OPS,
    strings::OPS,
    llm::OPS,
    linalg::OPS,
    set::OPS,
    rnn::OPS,
    signal::OPS,
    vision::OPS,
];

/// The ops of the `ai.onnx.ml` domain kiln imports.
const ML_FAMILIES: &[&[(&str, OpFn)]] = &[ml::OPS];

/// The ops of the `ai.onnx.preview.training` domain kiln imports.
const TRAINING_FAMILIES: &[&[(&str, OpFn)]] = &[training::OPS];

/// The import of ONNX op type `op_type` of `domain` (`""` or `"ai.onnx"` for the default one,
/// `"ai.onnx.ml"`, `"ai.onnx.preview.training"`), if kiln has one.
pub(crate) fn find(domain: &str, op_type: &str) -> Option<OpFn> {
    let families = match domain {
        "" | "ai.onnx" => FAMILIES,
        "ai.onnx.ml" => ML_FAMILIES,
        "ai.onnx.preview.training" => TRAINING_FAMILIES,
        _ => return None,
    };
    families
        .iter()
        .flat_map(|f| f.iter())
        .find(|(name, _)| *name == op_type)
        .map(|(_, f)| *f)
}

/// Every ONNX op type kiln imports (of every domain), sorted.
pub fn supported_ops() -> Vec<&'static str> {
    let mut v: Vec<&str> = FAMILIES
        .iter()
        .chain(ML_FAMILIES)
        .chain(TRAINING_FAMILIES)
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
    /// The node's graph attributes, prepared (If's branches, Loop's and Scan's bodies).
    pub graphs: &'a BTreeMap<String, Graph>,
    /// The values visible at the node, which its graphs may read.
    pub scope: &'a Scope<'a>,
    /// The ONNX element types the graph declares for its values (inputs, initializers,
    /// constants, value_info), by name.
    pub types: &'a BTreeMap<String, crate::DataType>,
}

impl Ctx<'_> {
    /// Runs graph attribute `name` on `inputs` (one per its declared inputs) with this node's
    /// visible values in scope, and returns its outputs.
    pub fn run_graph(&self, name: &str, inputs: Vec<Value>) -> Result<Vec<Value>> {
        let g = self
            .graphs
            .get(name)
            .ok_or_else(|| Error::invalid("onnx", format!("expects a graph attribute '{name}'")))?;
        g.run(inputs, Some(self.scope), self.device, self.opset)
            .map_err(|e| e.context(format!("in graph '{name}'")))
    }

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

    /// The ONNX element type the graph declares for input `i`, if it does.
    pub fn input_type(&self, i: usize) -> Option<crate::DataType> {
        let name = self.node.input.get(i)?;
        self.types.get(name.as_str()).copied()
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

/// Runs op `f` on `args` as `node`, outside any graph (for unit tests of single ops).
#[cfg(test)]
pub(crate) fn run_alone(
    f: OpFn,
    device: &Device,
    opset: i64,
    node: &crate::NodeProto,
    args: &[Value],
) -> Outputs {
    run_typed(f, device, opset, node, &BTreeMap::new(), args)
}

/// [`run_alone`] in a graph that declares the element `types` of some values.
#[cfg(test)]
pub(crate) fn run_typed(
    f: OpFn,
    device: &Device,
    opset: i64,
    node: &crate::NodeProto,
    types: &BTreeMap<String, crate::DataType>,
    args: &[Value],
) -> Outputs {
    let (graphs, env, constants) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
    let scope = Scope::new(&env, &constants);
    let ctx = Ctx {
        device,
        opset,
        node,
        graphs: &graphs,
        scope: &scope,
        types,
    };
    f(&ctx, args)
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
        Value::Tensor(t) | Value::Narrow { tensor: t, .. } => read_back(t, what),
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

/// `t`'s values rounded into narrow type `ty` ([`crate::narrow::round`], with `saturate` and
/// `mode` as a Cast's attributes say) as a [`Value::Narrow`]: the tensor is read back.
pub(crate) fn to_narrow(
    device: &Device,
    x: &Value,
    ty: crate::DataType,
    saturate: bool,
    mode: crate::narrow::RoundMode,
) -> Result<Value> {
    let vals = host_values(x, &format!("a value of type {}", ty.as_str_name()))?;
    let out = vals
        .iter()
        .map(|&v| crate::narrow::round(ty, v, saturate, mode))
        .collect::<Result<Vec<f64>>>()?;
    Value::narrow_values(ty, &out, kiln_core::Shape::from(x.dims()), device)
}

/// The dtype a composed float op computes in: f64 stays, narrower floats (and integers) widen
/// to f32, so that a composition rounds once at the end rather than after every step.
pub(crate) fn work_dtype(dt: DType) -> DType {
    if dt == DType::F64 { dt } else { DType::F32 }
}

/// ONNX's multidirectional broadcast of operands of shapes `dims`: the result's dims and, per
/// operand, the offset each result element (row-major) reads in it. For host values (integers,
/// strings), whose ops run element by element.
pub(crate) fn broadcast_offsets(dims: &[&[usize]]) -> Result<(Vec<usize>, Vec<Vec<usize>>)> {
    let rank = dims.iter().map(|d| d.len()).max().unwrap_or(0);
    let padded: Vec<Vec<usize>> = dims
        .iter()
        .map(|d| {
            let mut v = vec![1; rank - d.len()];
            v.extend_from_slice(d);
            v
        })
        .collect();
    let mut out = vec![1usize; rank];
    for (k, o) in out.iter_mut().enumerate() {
        for p in &padded {
            if p[k] != 1 {
                if *o != 1 && *o != p[k] {
                    return Err(Error::shape(
                        "onnx",
                        format!("shapes {dims:?} do not broadcast"),
                    ));
                }
                *o = p[k];
            }
        }
    }
    let n: usize = out.iter().product();
    let offsets = padded
        .iter()
        .map(|d| {
            (0..n)
                .map(|i| {
                    let (mut rest, mut at, mut stride) = (i, 0, 1);
                    for k in (0..rank).rev() {
                        if d[k] != 1 {
                            at += (rest % out[k]) * stride;
                        }
                        rest /= out[k];
                        stride *= d[k];
                    }
                    at
                })
                .collect()
        })
        .collect();
    Ok((out, offsets))
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
        super::run_alone(f, &Device::cpu(), opset, node, args)
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
        let mut rng = kiln_core::random::SplitMix64::new(seed);
        (0..n).map(|_| rng.next_f64() * 2.0 - 1.0).collect()
    }

    /// `a` and `b` agree within 1e-5.
    pub fn close(a: &[f64], b: &[f64], what: &str) {
        assert_eq!(a.len(), b.len(), "{what}: lengths");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).abs() < 1e-5, "{what}: element {i}: {x} vs {y}");
        }
    }
}
