//! The safetensors format, read and written by hand (no_std): an 8-byte little-endian header
//! length, a JSON header mapping each tensor name to `{dtype, shape, data_offsets}` plus an
//! optional `__metadata__` string map, then the raw little-endian tensor bytes.

use crate::error::{ErrorKind, fail};
use crate::op::json::Shown;
use crate::{DType, Error, Result, Shape, TensorData};
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use serde_json::{Map, Value};

/// Largest header accepted (the reference implementation's limit).
const MAX_HEADER: u64 = 100_000_000;
const OP: &str = "load_safetensors";

/// The contents of a safetensors file: tensors on the host by name, and the metadata map.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SafeTensors {
    /// tensors by name
    pub tensors: BTreeMap<String, TensorData>,
    /// the `__metadata__` map
    pub metadata: BTreeMap<String, String>,
}

impl SafeTensors {
    /// Uploads every tensor to `device`.
    pub fn to_device(&self, device: &crate::Device) -> Result<BTreeMap<String, crate::Tensor>> {
        // Inserted one by one: `collect` into a map sorts first, another sort's code in the web
        // package (which has a size budget).
        let mut out = BTreeMap::new();
        for (n, d) in &self.tensors {
            let t = crate::Tensor::from_data(d, device).map_err(|e| e.context(n))?;
            out.insert(n.clone(), t);
        }
        Ok(out)
    }
}

/// The file's name for a dtype.
fn dtype_tag(d: DType) -> &'static str {
    match d {
        DType::F64 => "F64",
        DType::F32 => "F32",
        DType::F16 => "F16",
        DType::I32 => "I32",
        DType::U32 => "U32",
        DType::Bool => "BOOL",
    }
}

/// Encodes tensors and metadata as a safetensors file. Tensors are laid out in name order;
/// the header is padded with spaces to a multiple of 8 bytes so the data stays aligned.
///
/// ```
/// use kiln_core::model::{decode_safetensors, encode_safetensors};
/// use kiln_core::TensorData;
/// use std::collections::BTreeMap;
/// let w = TensorData::new(vec![1.0f32, -2.0, 3.5], [3]).unwrap();
/// let meta = BTreeMap::from([("note".to_string(), "hi".to_string())]);
/// let bytes = encode_safetensors(&[("w".to_string(), w.clone())], &meta).unwrap();
/// let back = decode_safetensors(&bytes).unwrap();
/// assert_eq!(back.tensors["w"], w);
/// assert_eq!(back.metadata["note"], "hi");
/// ```
pub fn encode_safetensors(
    tensors: &[(String, TensorData)],
    metadata: &BTreeMap<String, String>,
) -> Result<Vec<u8>> {
    let mut sorted: Vec<&(String, TensorData)> = tensors.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(w) = sorted.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(fail(
            ErrorKind::InvalidArgument,
            "save_safetensors",
            format_args!("tensor name {} appears twice", w[0].0),
        ));
    }
    let mut header = Map::new();
    if !metadata.is_empty() {
        let m: Map<String, Value> = metadata
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        header.insert("__metadata__".into(), Value::Object(m));
    }
    let mut offset = 0usize;
    for (name, data) in &sorted {
        if name == "__metadata__" {
            return Err(Error::invalid(
                "save_safetensors",
                "a tensor cannot be named __metadata__",
            ));
        }
        let len = data.as_bytes().len();
        let entry = serde_json::json!({
            "dtype": dtype_tag(data.dtype()),
            "shape": data.shape().dims(),
            "data_offsets": [offset, offset + len],
        });
        header.insert(name.clone(), entry);
        offset += len;
    }
    let mut json = serde_json::to_string(&Value::Object(header)).map_err(|e| {
        fail(
            ErrorKind::InvalidArgument,
            "save_safetensors",
            format_args!("header: {e}"),
        )
    })?;
    while json.len() % 8 != 0 {
        json.push(' ');
    }
    let mut out = Vec::with_capacity(8 + json.len() + offset);
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(json.as_bytes());
    for (_, data) in &sorted {
        out.extend_from_slice(data.as_bytes());
    }
    Ok(out)
}

/// How a model file's JSON text becomes a [`Value`] (an error says why it could not):
/// [`parse_json`], or another parser, such as the browser's `JSON.parse` in the web package,
/// which then carries no JSON parser of its own.
pub type JsonParser<'a> = &'a dyn Fn(&str) -> core::result::Result<Value, String>;

/// serde_json's parser: the [`JsonParser`] of [`decode_safetensors`] and `Model::load`.
///
/// ```
/// use kiln_core::model::parse_json;
/// assert_eq!(parse_json(r#"{"a": [1, 2.5]}"#).unwrap()["a"][1], 2.5);
/// assert!(parse_json("{").unwrap_err().contains("EOF"));
/// ```
pub fn parse_json(text: &str) -> core::result::Result<Value, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

/// Decodes a safetensors file. Besides kiln's own dtypes it accepts what PyTorch writes:
/// `BF16` is widened to f32; `I64`, `I16`, `I8`, `U16` and `U8` become i32 (an `I64` value
/// outside the i32 range is an error). Every inconsistency is an error naming the tensor,
/// what was expected and what was found.
pub fn decode_safetensors(bytes: &[u8]) -> Result<SafeTensors> {
    decode_safetensors_with(bytes, &parse_json)
}

/// [`decode_safetensors`] with the header read by `parse`.
pub fn decode_safetensors_with(bytes: &[u8], parse: JsonParser<'_>) -> Result<SafeTensors> {
    let Some(len_bytes) = bytes.get(..8) else {
        return Err(fail(
            ErrorKind::Format,
            OP,
            format_args!(
                "file is {} bytes, expected at least 8 for the header length",
                bytes.len()
            ),
        ));
    };
    let mut len8 = [0u8; 8];
    len8.copy_from_slice(len_bytes);
    let header_len = u64::from_le_bytes(len8);
    let available = (bytes.len() - 8) as u64;
    if header_len > MAX_HEADER || header_len > available {
        return Err(fail(
            ErrorKind::Format,
            OP,
            format_args!(
                "header length field says {header_len} bytes, but {available} bytes follow \
                 (limit {MAX_HEADER}); the file is truncated or not safetensors"
            ),
        ));
    }
    let header_end = 8 + header_len as usize;
    let header = core::str::from_utf8(&bytes[8..header_end]).map_err(|e| {
        fail(
            ErrorKind::Format,
            OP,
            format_args!("header is not UTF-8: {e}"),
        )
    })?;
    let header: Value = parse(header).map_err(|e| {
        fail(
            ErrorKind::Format,
            OP,
            format_args!("header is not valid JSON: {e}"),
        )
    })?;
    let Value::Object(header) = header else {
        return Err(Error::format(
            OP,
            "header must be a JSON object of tensor entries",
        ));
    };
    let data = &bytes[header_end..];
    let mut out = SafeTensors::default();
    for (name, entry) in header {
        if name == "__metadata__" {
            out.metadata = parse_metadata(entry)?;
            continue;
        }
        let t =
            parse_tensor(&name, &entry, data).map_err(|e| e.context(format!("{OP}: {name}")))?;
        out.tensors.insert(name, t);
    }
    Ok(out)
}

fn parse_metadata(v: Value) -> Result<BTreeMap<String, String>> {
    let Value::Object(m) = v else {
        return Err(Error::format(
            OP,
            "__metadata__ must be an object of strings",
        ));
    };
    let mut out = BTreeMap::new();
    for (k, v) in m {
        match v {
            Value::String(s) => out.insert(k, s),
            other => {
                return Err(fail(
                    ErrorKind::Format,
                    OP,
                    format_args!(
                        "__metadata__ value of {k} must be a string, found {}",
                        Shown(&other)
                    ),
                ));
            }
        };
    }
    Ok(out)
}

/// How a file dtype maps onto kiln's: the stored element size and its reader.
fn file_dtype(tag: &str) -> Option<(usize, DType)> {
    Some(match tag {
        "F64" => (8, DType::F64),
        "F32" => (4, DType::F32),
        "F16" => (2, DType::F16),
        "BF16" => (2, DType::F32),
        "I32" => (4, DType::I32),
        "U32" => (4, DType::U32),
        "BOOL" => (1, DType::Bool),
        "I64" => (8, DType::I32),
        "I16" | "U16" => (2, DType::I32),
        "I8" | "U8" => (1, DType::I32),
        _ => return None,
    })
}

fn parse_tensor(name: &str, entry: &Value, data: &[u8]) -> Result<TensorData> {
    let field = |key: &str| {
        entry.get(key).ok_or_else(|| {
            fail(
                ErrorKind::Format,
                "entry",
                format_args!("missing \"{key}\" in {}", Shown(entry)),
            )
        })
    };
    let tag = field("dtype")?
        .as_str()
        .ok_or_else(|| Error::format("entry", "dtype must be a string"))?;
    let (size, dtype) = file_dtype(tag).ok_or_else(|| {
        fail(
            ErrorKind::Unsupported,
            "entry",
            format_args!("dtype {tag} is not supported"),
        )
    })?;
    let dims: Vec<usize> = field("shape")?
        .as_array()
        .and_then(|a| a.iter().map(|d| d.as_u64().map(|d| d as usize)).collect())
        .ok_or_else(|| Error::format("entry", "shape must be an array of non-negative integers"))?;
    let offsets: Vec<usize> = field("data_offsets")?
        .as_array()
        .and_then(|a| a.iter().map(|d| d.as_u64().map(|d| d as usize)).collect())
        .ok_or_else(|| Error::format("entry", "data_offsets must be two integers"))?;
    let &[start, end] = offsets.as_slice() else {
        return Err(fail(
            ErrorKind::Format,
            "entry",
            format_args!("data_offsets must be two integers, found {}", offsets.len()),
        ));
    };
    let numel = dims
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| {
            fail(
                ErrorKind::Format,
                "entry",
                format_args!("shape {dims:?} overflows"),
            )
        })?;
    let want = numel.checked_mul(size);
    if start > end || end > data.len() || want != Some(end - start) {
        return Err(fail(
            ErrorKind::Format,
            "entry",
            format_args!(
                "{tag} shape {dims:?} needs {} bytes, but data_offsets are [{start}, {end}] \
                 in a data section of {} bytes",
                want.map_or_else(|| "too many".to_string(), |w| w.to_string()),
                data.len()
            ),
        ));
    }
    let raw = &data[start..end];
    let shape = Shape::new(dims);
    let chunks = raw.chunks_exact(size);
    let widened: Option<Vec<f64>> = match tag {
        "BF16" => Some(
            chunks
                .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64())
                .collect(),
        ),
        "I64" => {
            let mut vals = Vec::with_capacity(numel);
            for c in chunks {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                let v = i64::from_le_bytes(b);
                if i32::try_from(v).is_err() {
                    return Err(fail(
                        ErrorKind::Unsupported,
                        "entry",
                        format_args!("I64 value {v} of {name} does not fit in i32"),
                    ));
                }
                vals.push(v as f64);
            }
            Some(vals)
        }
        "I16" => Some(
            chunks
                .map(|c| i16::from_le_bytes([c[0], c[1]]) as f64)
                .collect(),
        ),
        "U16" => Some(
            chunks
                .map(|c| u16::from_le_bytes([c[0], c[1]]) as f64)
                .collect(),
        ),
        "I8" => Some(chunks.map(|c| c[0] as i8 as f64).collect()),
        "U8" => Some(chunks.map(|c| c[0] as f64).collect()),
        _ => None,
    };
    match widened {
        Some(vals) => Ok(TensorData::from_f64_iter(vals, dtype, shape)),
        None => TensorData::from_bytes(raw.to_vec(), dtype, shape),
    }
}
