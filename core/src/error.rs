//! The one error type of kiln. Every message names the operation, what was expected and what was found.

use alloc::borrow::Cow;
use alloc::string::String;
use core::fmt;

/// An f64 as error messages print it: the shortest digits that read back as it (serde_json's
/// float writer, which the web package carries for JSON anyway), `NaN`, `inf` or `-inf`.
/// `{}` of an f64 would bring Rust's own float formatting (6.7 KB gzipped) into the web
/// package for a few messages.
///
/// ```
/// use kiln_core::error::Num;
/// assert_eq!(format!("{} {} {}", Num(0.1), Num(-2.5e-8), Num(f64::NEG_INFINITY)), "0.1 -2.5e-8 -inf");
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Num(pub f64);

impl fmt::Display for Num {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match serde_json::Number::from_f64(self.0) {
            Some(n) => fmt::Display::fmt(&n, f),
            None if self.0.is_nan() => f.write_str("NaN"),
            None if self.0 > 0.0 => f.write_str("inf"),
            None => f.write_str("-inf"),
        }
    }
}

/// What class of failure an [`Error`] is; lets callers react without parsing messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Shapes that do not fit the operation (rank, broadcasting, inner dimensions...).
    Shape,
    /// A dtype the operation does not accept, or two dtypes that differ.
    DType,
    /// An index or axis out of range.
    Index,
    /// A valid request this backend cannot execute.
    Unsupported,
    /// The device is missing, lost, or out of memory.
    Device,
    /// A file or byte buffer that is not what it claims to be.
    Format,
    /// Reading or writing outside the process failed.
    Io,
    /// An argument outside its allowed range.
    InvalidArgument,
}

impl ErrorKind {
    /// A short lowercase name (`"shape"`, `"invalid_argument"`), as JS errors carry it in their
    /// `kind` property.
    ///
    /// ```
    /// assert_eq!(kiln_core::ErrorKind::InvalidArgument.name(), "invalid_argument");
    /// ```
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Shape => "shape",
            ErrorKind::DType => "dtype",
            ErrorKind::Index => "index",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Device => "device",
            ErrorKind::Format => "format",
            ErrorKind::Io => "io",
            ErrorKind::InvalidArgument => "invalid_argument",
        }
    }
}

/// An error from any kiln operation. Displays as `op: message`.
///
/// ```
/// use kiln_core::{Error, ErrorKind};
/// let e = Error::shape("matmul", "lhs [2, 3] and rhs [4, 5]: inner dimensions 3 and 4 differ");
/// assert_eq!(e.kind(), ErrorKind::Shape);
/// assert_eq!(e.to_string(), "matmul: lhs [2, 3] and rhs [4, 5]: inner dimensions 3 and 4 differ");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    op: Cow<'static, str>,
    message: String,
}

/// `Result` with kiln's [`Error`].
pub type Result<T, E = Error> = core::result::Result<T, E>;

impl Error {
    /// An error of `kind` raised by `op`.
    pub fn new(
        kind: ErrorKind,
        op: impl Into<Cow<'static, str>>,
        message: impl Into<String>,
    ) -> Self {
        Error {
            kind,
            op: op.into(),
            message: message.into(),
        }
    }
    /// A [`ErrorKind::Shape`] error.
    pub fn shape(op: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Shape, op, message)
    }
    /// A [`ErrorKind::DType`] error.
    pub fn dtype(op: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::DType, op, message)
    }
    /// A [`ErrorKind::Index`] error.
    pub fn index(op: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Index, op, message)
    }
    /// A [`ErrorKind::Unsupported`] error.
    pub fn unsupported(op: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, op, message)
    }
    /// A [`ErrorKind::Device`] error.
    pub fn device(op: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Device, op, message)
    }
    /// A [`ErrorKind::Format`] error.
    pub fn format(op: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Format, op, message)
    }
    /// A [`ErrorKind::Io`] error.
    pub fn io(op: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Io, op, message)
    }
    /// A [`ErrorKind::InvalidArgument`] error.
    pub fn invalid(op: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, op, message)
    }
    /// The class of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
    /// The operation that failed (`"matmul"`, `"Model::load"`...).
    pub fn op(&self) -> &str {
        &self.op
    }
    /// What was expected and what was found.
    pub fn message(&self) -> &str {
        &self.message
    }
    /// The same error with `outer` prepended to the op, for errors raised deep inside a larger task
    /// (`"Model::load: conv1.weight: ..."`).
    pub fn context(self, outer: impl fmt::Display) -> Self {
        let op = alloc::format!("{outer}: {}", self.op);
        Error {
            op: op.into(),
            ..self
        }
    }
}

/// An error whose message is formatted out of line: the checks that raise it (an op's inputs,
/// a model file's fields) run once per op or file and rarely fail, so their messages share one
/// copy of the formatting and of the error's construction instead of each inlining its own
/// (issue 18, bytes).
#[cold]
#[inline(never)]
pub(crate) fn fail(kind: ErrorKind, op: &'static str, message: fmt::Arguments<'_>) -> Error {
    Error::new(kind, op, alloc::fmt::format(message))
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.op, self.message)
    }
}

impl core::error::Error for Error {}

#[cfg(feature = "std")]
impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::io("io", alloc::format!("{e}"))
    }
}
