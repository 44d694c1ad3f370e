//! Host-side tensor contents: bytes, dtype and shape.

use crate::{DType, Element, Error, Result, Shape};
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

/// The contents of a tensor on the host: little-endian bytes in row-major order, its dtype and shape.
/// This is what uploads take and reads return.
///
/// ```
/// use kiln_core::TensorData;
/// let d = TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]).unwrap();
/// assert_eq!(d.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
/// assert!(TensorData::new(vec![1.0f32; 3], [2, 2]).is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorData {
    bytes: Vec<u8>,
    dtype: DType,
    shape: Shape,
}

impl TensorData {
    /// Data from typed values; the length must match the shape.
    pub fn new<T: Element>(values: Vec<T>, shape: impl Into<Shape>) -> Result<Self> {
        let shape = shape.into();
        shape.byte_len(T::DTYPE, "TensorData::new")?;
        if values.len() != shape.numel() {
            return Err(Error::shape(
                "TensorData::new",
                alloc::format!(
                    "{} values given for shape {shape} which holds {}",
                    values.len(),
                    shape.numel()
                ),
            ));
        }
        let bytes = match T::DTYPE {
            // bool is not Pod; store it as one byte 0/1.
            DType::Bool => values.iter().map(|v| v.to_f64() as u8).collect(),
            _ => {
                let mut bytes = alloc::vec![0u8; values.len() * T::DTYPE.size_in_bytes()];
                // SAFETY-free: element types other than bool are plain little-endian numbers.
                for (chunk, v) in bytes
                    .chunks_exact_mut(T::DTYPE.size_in_bytes())
                    .zip(&values)
                {
                    write_le(chunk, T::DTYPE, v.to_f64());
                }
                bytes
            }
        };
        Ok(TensorData {
            bytes,
            dtype: T::DTYPE,
            shape,
        })
    }
    /// Data from raw little-endian bytes; the length must be `numel * dtype size`.
    pub fn from_bytes(bytes: Vec<u8>, dtype: DType, shape: impl Into<Shape>) -> Result<Self> {
        let shape = shape.into();
        let want = shape.byte_len(dtype, "TensorData::from_bytes")?;
        if bytes.len() != want {
            return Err(Error::shape(
                "TensorData::from_bytes",
                alloc::format!(
                    "{} bytes given for {dtype} shape {shape}, which needs {want}",
                    bytes.len()
                ),
            ));
        }
        Ok(TensorData {
            bytes,
            dtype,
            shape,
        })
    }
    /// Data whose every element is `value` (converted to `dtype`).
    pub fn full(shape: impl Into<Shape>, value: f64, dtype: DType) -> Self {
        let shape = shape.into();
        let n = shape.numel();
        Self::from_f64_iter(core::iter::repeat_n(value, n), dtype, shape)
    }
    /// Data from f64 values converted to `dtype` (`as` semantics). The iterator must yield `numel` items.
    pub fn from_f64_iter(
        values: impl IntoIterator<Item = f64>,
        dtype: DType,
        shape: Shape,
    ) -> Self {
        let size = dtype.size_in_bytes();
        let mut bytes = Vec::with_capacity(shape.numel() * size);
        for v in values {
            let start = bytes.len();
            bytes.resize(start + size, 0);
            write_le(&mut bytes[start..], dtype, v);
        }
        bytes.resize(shape.numel() * size, 0);
        TensorData {
            bytes,
            dtype,
            shape,
        }
    }
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// The shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }
    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
    /// Takes the raw bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
    /// The same bytes under another shape with as many elements.
    pub fn reshape(self, shape: impl Into<Shape>) -> Result<Self> {
        let shape = shape.into();
        if shape.numel() != self.shape.numel() {
            return Err(Error::shape(
                "TensorData::reshape",
                alloc::format!(
                    "cannot view {} elements of shape {} as {shape}",
                    self.shape.numel(),
                    self.shape
                ),
            ));
        }
        Ok(TensorData { shape, ..self })
    }
    /// The values as `T`; `T` must be this data's dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype {
            return Err(Error::dtype(
                "TensorData::to_vec",
                alloc::format!("requested {} but the data is {}", T::DTYPE, self.dtype),
            ));
        }
        Ok(self.iter_f64().map(T::from_f64).collect())
    }
    /// Every element converted to f64, in row-major order. Exact for all dtypes.
    pub fn iter_f64(&self) -> impl Iterator<Item = f64> + '_ {
        let dtype = self.dtype;
        self.bytes
            .chunks_exact(dtype.size_in_bytes())
            .map(move |c| read_le(c, dtype))
    }
    /// Every element converted to f64.
    pub fn to_f64_vec(&self) -> Vec<f64> {
        self.iter_f64().collect()
    }
    /// The data converted to another dtype (`as` semantics).
    pub fn convert(&self, dtype: DType) -> TensorData {
        Self::from_f64_iter(self.iter_f64(), dtype, self.shape.clone())
    }
}

fn write_le(out: &mut [u8], dtype: DType, v: f64) {
    match dtype {
        DType::F64 => out.copy_from_slice(&v.to_le_bytes()),
        DType::F32 => out.copy_from_slice(&(v as f32).to_le_bytes()),
        DType::F16 => out.copy_from_slice(&half::f16::from_f64(v).to_le_bytes()),
        DType::I32 => out.copy_from_slice(&(v as i32).to_le_bytes()),
        DType::U32 => out.copy_from_slice(&(v as u32).to_le_bytes()),
        DType::Bool => out[0] = (v != 0.0) as u8,
    }
}

fn read_le(c: &[u8], dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::from_le_bytes(c.try_into().unwrap_or([0; 8])),
        DType::F32 => f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
        DType::F16 => half::f16::from_le_bytes([c[0], c[1]]).to_f64(),
        DType::I32 => i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
        DType::U32 => u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
        DType::Bool => (c[0] != 0) as u8 as f64,
    }
}
