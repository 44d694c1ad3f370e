//! Element types.

use core::fmt;
use half::f16;
use serde::Serialize;
use serde::de::{Deserialize, Deserializer, Error as _};

/// The element type of a tensor.
///
/// ```
/// use kiln_core::DType;
/// assert_eq!(DType::F16.size_in_bytes(), 2);
/// assert!(DType::F32.is_float() && !DType::I32.is_float());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// 64-bit IEEE float (CPU backend; the precision gradient checks run in).
    F64,
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float (through the `half` crate).
    F16,
    /// 32-bit signed integer.
    I32,
    /// 32-bit unsigned integer.
    U32,
    /// Boolean, one byte per element (0 or 1).
    Bool,
}

/// Read as a name through [`DType::parse`]: smaller in the web package than the derived enum
/// visitor, and it takes what `Serialize` writes (`"f32"`).
impl<'de> Deserialize<'de> for DType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = alloc::string::String::deserialize(d)?;
        DType::parse(&name)
            .ok_or_else(|| D::Error::custom(alloc::format!("unknown dtype {name:?}")))
    }
}

impl DType {
    /// Every dtype, for tests and tables.
    pub const ALL: [DType; 6] = [
        DType::F64,
        DType::F32,
        DType::F16,
        DType::I32,
        DType::U32,
        DType::Bool,
    ];

    /// Bytes one element takes in [`crate::TensorData`].
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 => 2,
            DType::Bool => 1,
        }
    }
    /// `true` for F64, F32 and F16.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F64 | DType::F32 | DType::F16)
    }
    /// `true` for I32 and U32.
    pub fn is_int(self) -> bool {
        matches!(self, DType::I32 | DType::U32)
    }
    /// The lowercase name used in messages, files and JS (`"f32"`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F64 => "f64",
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::I32 => "i32",
            DType::U32 => "u32",
            DType::Bool => "bool",
        }
    }
    /// Parses [`DType::name`]; also accepts `"float32"`, `"float16"`, `"int32"`, `"uint32"`.
    pub fn parse(s: &str) -> Option<DType> {
        Some(match s {
            "f64" | "float64" | "F64" => DType::F64,
            "f32" | "float32" | "F32" => DType::F32,
            "f16" | "float16" | "F16" => DType::F16,
            "i32" | "int32" | "I32" => DType::I32,
            "u32" | "uint32" | "U32" => DType::U32,
            "bool" | "BOOL" => DType::Bool,
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust type that is the element of one [`DType`].
pub trait Element: Copy + Default + PartialEq + fmt::Debug + Send + Sync + 'static {
    /// The dtype this type stores.
    const DTYPE: DType;
    /// Converts to f64 (exact for every supported type).
    fn to_f64(self) -> f64;
    /// Converts from f64 with Rust `as` semantics (saturating for ints; non-zero is true for bool).
    fn from_f64(v: f64) -> Self;
}

impl Element for f64 {
    const DTYPE: DType = DType::F64;
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
}
impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}
impl Element for f16 {
    const DTYPE: DType = DType::F16;
    fn to_f64(self) -> f64 {
        f16::to_f64(self)
    }
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
}
impl Element for i32 {
    const DTYPE: DType = DType::I32;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as i32
    }
}
impl Element for u32 {
    const DTYPE: DType = DType::U32;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as u32
    }
}
impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn to_f64(self) -> f64 {
        if self { 1.0 } else { 0.0 }
    }
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
}
