use alloc::{format, string::String, vec::Vec};

use crate::proto::tensor_proto::DataLocation;
use crate::{DataType, OnnxError, TensorProto};

/// A tensor's contents, read out of a [`TensorProto`] by [`tensor_value`].
///
/// ```
/// use kiln_onnx::{TensorElems, TensorProto, tensor_value};
///
/// let t = TensorProto { dims: vec![2], data_type: Some(7), int64_data: vec![3, 4], ..Default::default() };
/// let v = tensor_value(&t)?;
/// assert_eq!((v.dims, v.data), (vec![2], TensorElems::I64(vec![3, 4])));
/// # Ok::<(), kiln_onnx::OnnxError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct TensorValue {
    /// The tensor's name (empty if it has none).
    pub name: String,
    /// The shape; empty for a scalar. Checked non-negative, and their product is `data.len()`.
    pub dims: Vec<usize>,
    /// The elements in row-major order.
    pub data: TensorElems,
}

/// Tensor elements, one vector variant per ONNX data type. Integers keep their ONNX width
/// (`INT64` stays `i64`); half floats keep their bit patterns.
///
/// ```
/// let e = kiln_onnx::TensorElems::F16(vec![0x3c00]); // 1.0 as IEEE half
/// assert_eq!((e.len(), e.dtype()), (1, kiln_onnx::DataType::Float16));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum TensorElems {
    /// `FLOAT`.
    F32(Vec<f32>),
    /// `DOUBLE`.
    F64(Vec<f64>),
    /// `FLOAT16`, as IEEE 754 half-precision bit patterns.
    F16(Vec<u16>),
    /// `BFLOAT16`, as bit patterns (the upper half of an `f32`).
    BF16(Vec<u16>),
    /// `INT64`.
    I64(Vec<i64>),
    /// `INT32`.
    I32(Vec<i32>),
    /// `INT16`.
    I16(Vec<i16>),
    /// `INT8`.
    I8(Vec<i8>),
    /// `UINT8`.
    U8(Vec<u8>),
    /// `UINT16`.
    U16(Vec<u16>),
    /// `UINT32`.
    U32(Vec<u32>),
    /// `UINT64`.
    U64(Vec<u64>),
    /// `BOOL`.
    Bool(Vec<bool>),
    /// `STRING`: byte strings (ONNX says UTF-8 but does not enforce it).
    String(Vec<Vec<u8>>),
    /// The 8-bit-or-narrower formats (`FLOAT8*`, `FLOAT6*`, `FLOAT4E2M1`, `INT4`, `UINT4`,
    /// `INT2`, `UINT2`): one element per byte, unpacked, as the raw code in the low bits (signed
    /// integers are not sign-extended).
    Codes {
        /// Which format the codes are in.
        dtype: DataType,
        /// One code per element.
        codes: Vec<u8>,
    },
}

impl TensorElems {
    /// The number of elements.
    ///
    /// ```
    /// assert_eq!(kiln_onnx::TensorElems::Bool(vec![true, false]).len(), 2);
    /// ```
    pub fn len(&self) -> usize {
        use TensorElems::*;
        match self {
            F32(v) => v.len(),
            F64(v) => v.len(),
            F16(v) | BF16(v) | U16(v) => v.len(),
            I64(v) => v.len(),
            I32(v) => v.len(),
            I16(v) => v.len(),
            I8(v) => v.len(),
            U8(v) | Codes { codes: v, .. } => v.len(),
            U32(v) => v.len(),
            U64(v) => v.len(),
            Bool(v) => v.len(),
            String(v) => v.len(),
        }
    }

    /// Whether there are no elements (some dim is 0).
    ///
    /// ```
    /// assert!(kiln_onnx::TensorElems::F32(vec![]).is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The ONNX data type of the elements.
    ///
    /// ```
    /// assert_eq!(kiln_onnx::TensorElems::I8(vec![]).dtype(), kiln_onnx::DataType::Int8);
    /// ```
    pub fn dtype(&self) -> DataType {
        use TensorElems::*;
        match self {
            F32(_) => DataType::Float,
            F64(_) => DataType::Double,
            F16(_) => DataType::Float16,
            BF16(_) => DataType::Bfloat16,
            I64(_) => DataType::Int64,
            I32(_) => DataType::Int32,
            I16(_) => DataType::Int16,
            I8(_) => DataType::Int8,
            U8(_) => DataType::Uint8,
            U16(_) => DataType::Uint16,
            U32(_) => DataType::Uint32,
            U64(_) => DataType::Uint64,
            Bool(_) => DataType::Bool,
            String(_) => DataType::String,
            Codes { dtype, .. } => *dtype,
        }
    }
}

/// Reads a tensor's elements out of `raw_data` (little-endian) or the typed field its data type
/// uses, checking that their number matches the dims.
///
/// Errors (never panics) on external data, segments, negative or overflowing dims, unknown,
/// undefined and complex data types, and data of the wrong length. Allocates only after the
/// length check, so a file cannot make it allocate more than its own size in elements.
///
/// ```
/// use kiln_onnx::{TensorElems, TensorProto, tensor_value};
///
/// let t = TensorProto {
///     name: Some("W".into()),
///     dims: vec![2],
///     data_type: Some(1), // FLOAT
///     raw_data: Some([1.5f32, -2.0].iter().flat_map(|x| x.to_le_bytes()).collect()),
///     ..Default::default()
/// };
/// assert_eq!(tensor_value(&t)?.data, TensorElems::F32(vec![1.5, -2.0]));
///
/// let short = TensorProto { raw_data: Some(vec![0; 7]), ..t };
/// assert_eq!(
///     tensor_value(&short).unwrap_err().to_string(),
///     "tensor 'W': raw_data holds 7 bytes, 8 expected for FLOAT [2]"
/// );
/// # Ok::<(), kiln_onnx::OnnxError>(())
/// ```
pub fn tensor_value(t: &TensorProto) -> Result<TensorValue, OnnxError> {
    let name = t.name();
    if t.data_location() == DataLocation::External || !t.external_data.is_empty() {
        let location = t.external_data.iter().find(|e| e.key() == "location");
        return Err(OnnxError::ExternalData {
            tensor: name.into(),
            location: location.map_or("", |e| e.value()).into(),
        });
    }
    let unsupported = |what: String| OnnxError::Unsupported {
        tensor: name.into(),
        what,
    };
    if let Some(s) = &t.segment {
        let range = format!("a segment [{}, {}) of a larger tensor", s.begin(), s.end());
        return Err(unsupported(range));
    }
    let dtype = match DataType::try_from(t.data_type()) {
        Err(_) => {
            return Err(unsupported(format!(
                "unknown data type code {}",
                t.data_type()
            )));
        }
        Ok(d @ (DataType::Undefined | DataType::Complex64 | DataType::Complex128)) => {
            return Err(unsupported(format!("data type {}", d.as_str_name())));
        }
        Ok(d) => d,
    };
    let bad_dims = |reason| OnnxError::BadDims {
        tensor: name.into(),
        dims: t.dims.clone(),
        reason,
    };
    let dims = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<usize>, _>>()
        .map_err(|_| bad_dims("contain a negative dimension"))?;
    let too_many = || bad_dims("hold more elements than this platform can address");
    let n = dims
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(too_many)?;
    let packed = packed_len(n, bit_width(dtype)).ok_or_else(too_many)?;
    let header = Header {
        name,
        dtype,
        dims: &dims,
        n,
        packed,
    };
    let data = match &t.raw_data {
        Some(_) if dtype == DataType::String => {
            return Err(unsupported(
                "raw_data for STRING elements (ONNX requires string_data)".into(),
            ));
        }
        Some(raw) => {
            header.check("raw_data", raw.len(), packed)?;
            from_le_bytes(dtype, raw, n)
        }
        None => header.read_fields(t)?,
    };
    Ok(TensorValue {
        name: name.into(),
        dims,
        data,
    })
}

/// The tensor's header, for reading its typed fields and naming it in errors.
struct Header<'a> {
    name: &'a str,
    dtype: DataType,
    dims: &'a [usize],
    /// The element count (product of `dims`).
    n: usize,
    /// The size of the elements in bytes, packed as in `raw_data`.
    packed: usize,
}

impl Header<'_> {
    fn check(&self, field: &'static str, found: usize, expected: usize) -> Result<(), OnnxError> {
        if found == expected {
            return Ok(());
        }
        Err(OnnxError::DataLength {
            tensor: self.name.into(),
            field,
            found,
            expected,
            dtype: self.dtype,
            dims: self.dims.into(),
        })
    }

    /// Converts a typed field holding one value per element.
    fn take<S: Copy, T>(
        &self,
        field: &'static str,
        values: &[S],
        convert: impl Fn(S) -> T,
    ) -> Result<Vec<T>, OnnxError> {
        self.check(field, values.len(), self.n)?;
        Ok(values.iter().map(|&v| convert(v)).collect())
    }

    fn read_fields(&self, t: &TensorProto) -> Result<TensorElems, OnnxError> {
        use TensorElems as E;
        // Everything narrower than 32 bits lives in int32_data; the casts keep the low bits.
        Ok(match self.dtype {
            DataType::Float => E::F32(self.take("float_data", &t.float_data, |v| v)?),
            DataType::Double => E::F64(self.take("double_data", &t.double_data, |v| v)?),
            DataType::Int64 => E::I64(self.take("int64_data", &t.int64_data, |v| v)?),
            DataType::Uint64 => E::U64(self.take("uint64_data", &t.uint64_data, |v| v)?),
            DataType::Uint32 => E::U32(self.take("uint64_data", &t.uint64_data, |v| v as u32)?),
            DataType::Int32 => E::I32(self.take("int32_data", &t.int32_data, |v| v)?),
            DataType::Int16 => E::I16(self.take("int32_data", &t.int32_data, |v| v as i16)?),
            DataType::Uint16 => E::U16(self.take("int32_data", &t.int32_data, |v| v as u16)?),
            DataType::Float16 => E::F16(self.take("int32_data", &t.int32_data, |v| v as u16)?),
            DataType::Bfloat16 => E::BF16(self.take("int32_data", &t.int32_data, |v| v as u16)?),
            DataType::Int8 => E::I8(self.take("int32_data", &t.int32_data, |v| v as i8)?),
            DataType::Uint8 => E::U8(self.take("int32_data", &t.int32_data, |v| v as u8)?),
            DataType::Bool => E::Bool(self.take("int32_data", &t.int32_data, |v| v != 0)?),
            DataType::String => {
                let strings = &t.string_data;
                self.check("string_data", strings.len(), self.n)?;
                E::String(strings.clone())
            }
            // The FLOAT6 formats hold one code per int32; the others pack int32s like raw bytes.
            dtype if bit_width(dtype) == 6 => E::Codes {
                dtype,
                codes: self.take("int32_data", &t.int32_data, |v| v as u8 & 0x3f)?,
            },
            dtype => {
                self.check("int32_data", t.int32_data.len(), self.packed)?;
                let raw: Vec<u8> = t.int32_data.iter().map(|&v| v as u8).collect();
                from_le_bytes(dtype, &raw, self.n)
            }
        })
    }
}

/// Bits per element in `raw_data`; 0 for the types that are never read from it.
fn bit_width(dtype: DataType) -> usize {
    use DataType::*;
    match dtype {
        Double | Int64 | Uint64 => 64,
        Float | Int32 | Uint32 => 32,
        Float16 | Bfloat16 | Int16 | Uint16 => 16,
        Uint8 | Int8 | Bool | Float8e4m3fn | Float8e4m3fnuz | Float8e5m2 | Float8e5m2fnuz
        | Float8e8m0 => 8,
        Float6e2m3 | Float6e3m2 => 6,
        Uint4 | Int4 | Float4e2m1 => 4,
        Uint2 | Int2 => 2,
        Undefined | String | Complex64 | Complex128 => 0,
    }
}

/// Bytes that `n` elements of `width` bits take when packed; `None` on overflow.
fn packed_len(n: usize, width: usize) -> Option<usize> {
    Some(n.checked_mul(width)?.div_ceil(8))
}

/// Decodes `n` elements from little-endian bytes whose length was checked by the caller.
fn from_le_bytes(dtype: DataType, raw: &[u8], n: usize) -> TensorElems {
    fn le<const N: usize, T>(raw: &[u8], convert: fn([u8; N]) -> T) -> Vec<T> {
        raw.chunks_exact(N)
            .map(|c| convert(c.try_into().unwrap_or([0; N])))
            .collect()
    }
    use TensorElems as E;
    match dtype {
        DataType::Float => E::F32(le(raw, f32::from_le_bytes)),
        DataType::Double => E::F64(le(raw, f64::from_le_bytes)),
        DataType::Float16 => E::F16(le(raw, u16::from_le_bytes)),
        DataType::Bfloat16 => E::BF16(le(raw, u16::from_le_bytes)),
        DataType::Int64 => E::I64(le(raw, i64::from_le_bytes)),
        DataType::Int32 => E::I32(le(raw, i32::from_le_bytes)),
        DataType::Int16 => E::I16(le(raw, i16::from_le_bytes)),
        DataType::Int8 => E::I8(le(raw, i8::from_le_bytes)),
        DataType::Uint8 => E::U8(raw.into()),
        DataType::Uint16 => E::U16(le(raw, u16::from_le_bytes)),
        DataType::Uint32 => E::U32(le(raw, u32::from_le_bytes)),
        DataType::Uint64 => E::U64(le(raw, u64::from_le_bytes)),
        DataType::Bool => E::Bool(raw.iter().map(|&b| b != 0).collect()),
        dtype => E::Codes {
            dtype,
            codes: unpack(raw, bit_width(dtype), n),
        },
    }
}

/// Unpacks `n` codes of `width` ≤ 8 bits from an LSB-first bit stream, the layout ONNX uses for
/// all its sub-byte types (for 8 bits it is a copy).
fn unpack(bytes: &[u8], width: usize, n: usize) -> Vec<u8> {
    let mask = (1u16 << width) - 1;
    let byte = |i: usize| u16::from(bytes.get(i).copied().unwrap_or(0));
    (0..n)
        .map(|i| {
            let bit = i * width;
            let pair = byte(bit / 8) | byte(bit / 8 + 1) << 8;
            ((pair >> (bit % 8)) & mask) as u8
        })
        .collect()
}
