use alloc::{boxed::Box, string::String, vec::Vec};
use core::fmt;

use crate::DataType;

/// Everything that can go wrong reading ONNX data. The message names what was expected and what
/// was found.
///
/// ```
/// let err = kiln_onnx::decode_model(b"\xff").unwrap_err().in_file("model.onnx");
/// assert!(err.to_string().starts_with("model.onnx: not an ONNX model"));
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum OnnxError {
    /// An error about the file `path`.
    File {
        /// The file (or URL) the bytes came from.
        path: String,
        /// What went wrong with it.
        source: Box<OnnxError>,
    },
    /// The file could not be read.
    Io {
        /// The operating system's message.
        reason: String,
    },
    /// The bytes are not a protobuf message of the expected kind.
    Decode {
        /// What the bytes should have been, e.g. "an ONNX model (ModelProto)".
        expected: &'static str,
        /// Why decoding failed (prost's message, with the field path).
        reason: String,
    },
    /// The tensor's data lives in another file, which this crate does not read.
    ExternalData {
        /// The tensor's name.
        tensor: String,
        /// The `location` entry of its `external_data`.
        location: String,
    },
    /// The tensor has a data type or layout this crate does not handle.
    Unsupported {
        /// The tensor's name.
        tensor: String,
        /// What it uses, e.g. "data type COMPLEX64".
        what: String,
    },
    /// The tensor's dims are negative or their product overflows.
    BadDims {
        /// The tensor's name.
        tensor: String,
        /// The dims as stored.
        dims: Vec<i64>,
        /// What is wrong with them.
        reason: &'static str,
    },
    /// The tensor holds a different amount of data than its type and dims call for.
    DataLength {
        /// The tensor's name.
        tensor: String,
        /// The field read: "raw_data" (counted in bytes) or a typed field (counted in values).
        field: &'static str,
        /// How many bytes or values the field holds.
        found: usize,
        /// How many the type and dims call for.
        expected: usize,
        /// The tensor's data type.
        dtype: DataType,
        /// The tensor's dims.
        dims: Vec<usize>,
    },
    /// A node's attribute has another type than the caller asked for, or no value.
    Attribute {
        /// The node's name (may be empty).
        node: String,
        /// The node's op type.
        op_type: String,
        /// The attribute's name.
        attr: String,
        /// The type asked for, e.g. "INT".
        expected: &'static str,
        /// What the attribute holds, e.g. "INTS".
        found: String,
    },
    /// A node lacks an attribute the caller requires.
    MissingAttribute {
        /// The node's name (may be empty).
        node: String,
        /// The node's op type.
        op_type: String,
        /// The attribute's name.
        attr: String,
    },
}

impl OnnxError {
    /// Prefixes the message with the file (or URL) the data came from.
    ///
    /// ```
    /// let err = kiln_onnx::decode_model(&[]).unwrap_err().in_file("a.onnx");
    /// assert_eq!(err.to_string(), "a.onnx: not an ONNX model (ModelProto): it has no graph");
    /// ```
    pub fn in_file(self, path: impl Into<String>) -> Self {
        OnnxError::File {
            path: path.into(),
            source: Box::new(self),
        }
    }
}

impl fmt::Display for OnnxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OnnxError::File { path, source } => write!(f, "{path}: {source}"),
            OnnxError::Io { reason } => write!(f, "cannot read: {reason}"),
            OnnxError::Decode { expected, reason } => write!(f, "not {expected}: {reason}"),
            OnnxError::ExternalData { tensor, location } => write!(
                f,
                "tensor '{tensor}' uses external data (location '{location}'); \
                 external data is not supported yet"
            ),
            OnnxError::Unsupported { tensor, what } => {
                write!(f, "tensor '{tensor}' uses {what}, which is not supported")
            }
            OnnxError::BadDims {
                tensor,
                dims,
                reason,
            } => {
                write!(f, "tensor '{tensor}': dims {dims:?} {reason}")
            }
            OnnxError::DataLength {
                tensor,
                field,
                found,
                expected,
                dtype,
                dims,
            } => {
                let unit = if *field == "raw_data" {
                    "bytes"
                } else {
                    "values"
                };
                write!(
                    f,
                    "tensor '{tensor}': {field} holds {found} {unit}, {expected} expected for {} {dims:?}",
                    dtype.as_str_name()
                )
            }
            OnnxError::Attribute {
                node,
                op_type,
                attr,
                expected,
                found,
            } => write!(
                f,
                "node '{node}' ({op_type}): attribute '{attr}' is {found}, expected {expected}"
            ),
            OnnxError::MissingAttribute {
                node,
                op_type,
                attr,
            } => {
                write!(
                    f,
                    "node '{node}' ({op_type}): required attribute '{attr}' is missing"
                )
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for OnnxError {}
