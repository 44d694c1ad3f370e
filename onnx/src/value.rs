//! The values that flow between ONNX nodes at run time.
//!
//! ONNX leans on int64 for shapes and indices, and WGSL has no 64-bit integers. kiln therefore
//! keeps integer values that come from the graph's own constants and shapes (initializers,
//! `Constant`, `Shape`, and the arithmetic on them) on the host as [`Ints`] (i64), where shape
//! computations are folded without touching the device. Where an integer value becomes the
//! data of a device op (indices of a `Gather` on a float tensor, an int64 model input) it is
//! lowered to an i32 tensor, and a value outside i32's range is an error naming the node.
//! Int64 results of device ops are i32 tensors.
//!
//! Element types that no kiln dtype holds (`BFLOAT16`, `FLOAT8*`, `FLOAT4E2M1`, `[U]INT4`,
//! `[U]INT2`, ...) are [`Value::Narrow`]: a tensor of the type's values (floats in f32, the
//! integers in i32) tagged with the ONNX type; [`crate::narrow`] makes those values.

use crate::{DataType, TensorElems, TensorValue, narrow};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use kiln_core::{DType, Device, Error, Result, Shape, Tensor, TensorData};

/// `dtype`, or f32 where `device` cannot hold it (f64 and f16 on GPUs).
pub(crate) fn held(device: &Device, dtype: DType) -> DType {
    if device.backend().supports(dtype) {
        dtype
    } else {
        DType::F32
    }
}

/// The kiln dtype that carries ONNX element type `t` on `device`: floats as themselves where
/// the device holds them (else f32), the signed and narrow integer types and uint64 in i32
/// (see the module doc), uint32 in u32, bool as bool. `None` for a type kiln has no dtype for.
pub(crate) fn kiln_dtype(device: &Device, t: DataType) -> Option<DType> {
    use DataType as D;
    Some(match t {
        D::Float => DType::F32,
        D::Double => held(device, DType::F64),
        D::Float16 => held(device, DType::F16),
        D::Int8 | D::Uint8 | D::Int16 | D::Uint16 | D::Int32 | D::Int64 | D::Uint64 => DType::I32,
        D::Uint32 => DType::U32,
        D::Bool => DType::Bool,
        _ => return None,
    })
}

/// An i64 tensor held on the host (shape arithmetic, indices, constants).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ints {
    /// Dimensions (empty for a scalar).
    pub dims: Vec<usize>,
    /// Row-major values.
    pub data: Vec<i64>,
    /// Whether ONNX declares the value bool (kept as 0/1).
    pub bool: bool,
}

impl Ints {
    /// A 1-D value.
    pub fn vector(data: Vec<i64>) -> Self {
        Ints {
            dims: alloc::vec![data.len()],
            data,
            bool: false,
        }
    }

    /// A scalar.
    pub fn scalar(v: i64) -> Self {
        Ints {
            dims: Vec::new(),
            data: alloc::vec![v],
            bool: false,
        }
    }

    /// The values as i32 data for a device, or an error naming `what` for one out of range.
    pub fn to_i32(&self, what: &str) -> Result<Vec<i32>> {
        self.data
            .iter()
            .map(|&v| {
                i32::try_from(v).map_err(|_| {
                    Error::unsupported(
                        "onnx",
                        format!("{what}: int64 value {v} does not fit the i32 that GPUs hold"),
                    )
                })
            })
            .collect()
    }

    /// This value as a device tensor: i32, or bool for a bool value.
    pub fn to_tensor(&self, device: &Device, what: &str) -> Result<Tensor> {
        let shape = Shape::from(self.dims.clone());
        let data = if self.bool {
            let v: Vec<u8> = self.data.iter().map(|&v| u8::from(v != 0)).collect();
            TensorData::from_bytes(v, DType::Bool, shape)?
        } else {
            TensorData::new(self.to_i32(what)?, shape)?
        };
        Tensor::from_data(&data, device)
    }
}

/// A string tensor, held on the host (no kiln device has strings).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Strings {
    /// Dimensions (empty for a scalar).
    pub dims: Vec<usize>,
    /// Row-major values, as bytes (ONNX says UTF-8 but does not enforce it).
    pub data: Vec<Vec<u8>>,
}

/// One ONNX value at run time.
#[derive(Clone, Debug)]
pub enum Value {
    /// A tensor on the model's device.
    Tensor(Tensor),
    /// Integers (or bools) known on the host.
    Ints(Ints),
    /// Strings, on the host.
    Strings(Strings),
    /// An ONNX sequence: an ordered list of values (tensors, in the suites).
    Sequence(Vec<Value>),
    /// An ONNX optional: `None` when it holds nothing.
    Optional(Option<alloc::boxed::Box<Value>>),
    /// An optional input left empty (`""` in the node's input list).
    Absent,
    /// A tensor of a narrow ONNX element type ([`crate::narrow`]): `tensor` holds exactly
    /// the values of type `ty` (f32 for the float types, i32 for `[U]INT4` / `[U]INT2`).
    /// Ops that do not care about the type compute on `tensor` as on any other.
    Narrow {
        /// The ONNX element type.
        ty: DataType,
        /// The values, on the model's device.
        tensor: Tensor,
    },
}

impl Value {
    /// A stored tensor (an initializer, a `Constant`, test data) as a value: floats as tensors on
    /// `device` (f64 and f16 as f32 where the device lacks them), integers and bools on the host.
    pub fn from_tensor(v: TensorValue, device: &Device) -> Result<Value> {
        let shape = Shape::from(v.dims.clone());
        let ints = |data: Vec<i64>, bool: bool| {
            Ok(Value::Ints(Ints {
                dims: v.dims.clone(),
                data,
                bool,
            }))
        };
        let floats = |data: TensorData| {
            // converted (through f64) only where the device lacks the dtype
            let dt = held(device, data.dtype());
            let data = if dt == data.dtype() {
                data
            } else {
                data.convert(dt)
            };
            Ok(Value::Tensor(Tensor::from_data(&data, device)?))
        };
        match v.data {
            TensorElems::F32(d) => floats(TensorData::new(d, shape)?),
            TensorElems::F64(d) => floats(TensorData::new(d, shape)?),
            TensorElems::F16(bits) => {
                let h: Vec<half::f16> = bits.into_iter().map(half::f16::from_bits).collect();
                floats(TensorData::new(h, shape)?)
            }
            TensorElems::I64(d) => ints(d, false),
            TensorElems::I32(d) => ints(d.into_iter().map(i64::from).collect(), false),
            TensorElems::I16(d) => ints(d.into_iter().map(i64::from).collect(), false),
            TensorElems::I8(d) => ints(d.into_iter().map(i64::from).collect(), false),
            TensorElems::U8(d) => ints(d.into_iter().map(i64::from).collect(), false),
            TensorElems::U16(d) => ints(d.into_iter().map(i64::from).collect(), false),
            TensorElems::U32(d) => ints(d.into_iter().map(i64::from).collect(), false),
            TensorElems::U64(d) => match d.into_iter().map(i64::try_from).collect() {
                Ok(d) => ints(d, false),
                Err(_) => Err(Error::unsupported(
                    "onnx",
                    format!("tensor '{}': uint64 values above i64's range", v.name),
                )),
            },
            TensorElems::Bool(d) => ints(d.into_iter().map(i64::from).collect(), true),
            TensorElems::String(data) => Ok(Value::Strings(Strings { dims: v.dims, data })),
            TensorElems::BF16(bits) => {
                let d: Vec<f32> = bits.into_iter().map(narrow::bf16_value).collect();
                Value::narrow(DataType::Bfloat16, TensorData::new(d, shape)?, device)
            }
            TensorElems::Codes { dtype, codes } if narrow::is_narrow(dtype) => {
                let vals = codes
                    .into_iter()
                    .map(|c| narrow::decode(dtype, c))
                    .collect::<Result<Vec<f64>>>()?;
                Value::narrow_values(dtype, &vals, shape, device)
            }
            other => Err(Error::unsupported(
                "onnx",
                format!(
                    "tensor '{}': element type {:?} is not supported",
                    v.name,
                    other.dtype()
                ),
            )),
        }
    }

    /// A narrow value of type `ty` from its values' data (f32, or i32 for the integer types).
    pub fn narrow(ty: DataType, data: TensorData, device: &Device) -> Result<Value> {
        Ok(Value::Narrow {
            ty,
            tensor: Tensor::from_data(&data, device)?,
        })
    }

    /// A narrow value of type `ty` from values already in the type (see [`crate::narrow`]):
    /// stored as f32, or as i32 for the integer types.
    pub fn narrow_values(
        ty: DataType,
        vals: &[f64],
        shape: Shape,
        device: &Device,
    ) -> Result<Value> {
        let data = if narrow::is_int(ty) {
            TensorData::new(vals.iter().map(|&v| v as i32).collect::<Vec<i32>>(), shape)?
        } else {
            TensorData::new(vals.iter().map(|&v| v as f32).collect::<Vec<f32>>(), shape)?
        };
        Value::narrow(ty, data, device)
    }

    /// The dimensions.
    pub fn dims(&self) -> Vec<usize> {
        match self {
            Value::Tensor(t) | Value::Narrow { tensor: t, .. } => t.dims().to_vec(),
            Value::Ints(i) => i.dims.clone(),
            Value::Strings(s) => s.dims.clone(),
            Value::Sequence(_) | Value::Optional(_) | Value::Absent => Vec::new(),
        }
    }

    /// Whether the value is present.
    pub fn is_present(&self) -> bool {
        !matches!(self, Value::Absent)
    }

    /// The value as a device tensor (host integers are lowered to i32 or bool).
    pub fn tensor(&self, device: &Device, what: &str) -> Result<Tensor> {
        match self {
            Value::Tensor(t) | Value::Narrow { tensor: t, .. } => Ok(t.clone()),
            Value::Ints(i) => i.to_tensor(device, what),
            Value::Absent => Err(Error::invalid("onnx", format!("{what}: input is absent"))),
            other => Err(Error::invalid(
                "onnx",
                format!("{what}: expects a tensor, gets {}", other.describe()),
            )),
        }
    }

    /// The value as host integers: an error for a device tensor, whose contents are not known
    /// without reading it back (a data-dependent shape).
    pub fn ints(&self, what: &str) -> Result<&Ints> {
        match self {
            Value::Ints(i) => Ok(i),
            Value::Tensor(t) => Err(Error::unsupported(
                "onnx",
                format!(
                    "{what}: needs integer values known before running, but gets a computed {} tensor {} (a data-dependent shape)",
                    t.dtype(),
                    t.shape()
                ),
            )),
            Value::Absent => Err(Error::invalid("onnx", format!("{what}: input is absent"))),
            other => Err(Error::invalid(
                "onnx",
                format!("{what}: expects integers, gets {}", other.describe()),
            )),
        }
    }

    /// The value as an ONNX sequence, or an error naming `what`.
    pub fn sequence(&self, what: &str) -> Result<&[Value]> {
        match self {
            Value::Sequence(s) => Ok(s),
            other => Err(Error::invalid(
                "onnx",
                format!("{what}: expects a sequence, gets {}", other.describe()),
            )),
        }
    }

    /// A short description for messages: `f32 [2, 3]`, `ints [4]`.
    pub fn describe(&self) -> String {
        match self {
            Value::Tensor(t) => format!("{} {}", t.dtype(), t.shape()),
            Value::Narrow { ty, tensor } => {
                format!("{} {}", ty.as_str_name().to_lowercase(), tensor.shape())
            }
            Value::Ints(i) => format!("ints {:?}", i.dims),
            Value::Strings(s) => format!("strings {:?}", s.dims),
            Value::Sequence(s) => format!("a sequence of {}", s.len()),
            Value::Optional(None) => "an empty optional".into(),
            Value::Optional(Some(v)) => format!("an optional holding {}", v.describe()),
            Value::Absent => "absent".into(),
        }
    }
}
