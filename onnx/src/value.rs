//! The values that flow between ONNX nodes at run time.
//!
//! ONNX leans on int64 for shapes and indices, and WGSL has no 64-bit integers. kiln therefore
//! keeps integer values that come from the graph's own constants and shapes (initializers,
//! `Constant`, `Shape`, and the arithmetic on them) on the host as [`Ints`] (i64), where shape
//! computations are folded without touching the device. Where an integer value becomes the
//! data of a device op (indices of a `Gather` on a float tensor, an int64 model input) it is
//! lowered to an i32 tensor, and a value outside i32's range is an error naming the node.
//! Int64 results of device ops are i32 tensors.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use kiln_core::{DType, Device, Error, Result, Shape, Tensor, TensorData};

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

/// One ONNX value at run time.
#[derive(Clone, Debug)]
pub enum Value {
    /// A tensor on the model's device.
    Tensor(Tensor),
    /// Integers (or bools) known on the host.
    Ints(Ints),
    /// An optional input left empty (`""` in the node's input list).
    Absent,
}

impl Value {
    /// The dimensions.
    pub fn dims(&self) -> Vec<usize> {
        match self {
            Value::Tensor(t) => t.dims().to_vec(),
            Value::Ints(i) => i.dims.clone(),
            Value::Absent => Vec::new(),
        }
    }

    /// Whether the value is present.
    pub fn is_present(&self) -> bool {
        !matches!(self, Value::Absent)
    }

    /// The value as a device tensor (host integers are lowered to i32 or bool).
    pub fn tensor(&self, device: &Device, what: &str) -> Result<Tensor> {
        match self {
            Value::Tensor(t) => Ok(t.clone()),
            Value::Ints(i) => i.to_tensor(device, what),
            Value::Absent => Err(Error::invalid("onnx", format!("{what}: input is absent"))),
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
        }
    }

    /// A short description for messages: `f32 [2, 3]`, `ints [4]`.
    pub fn describe(&self) -> String {
        match self {
            Value::Tensor(t) => format!("{} {}", t.dtype(), t.shape()),
            Value::Ints(i) => format!("ints {:?}", i.dims),
            Value::Absent => "absent".into(),
        }
    }
}
