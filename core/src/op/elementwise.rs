//! The elementwise op families as tables: one row per op, holding all kiln knows about it.
//!
//! Each table is a macro that hands its rows to another macro, so that one list of rows
//! defines the enum and its properties (here), the CPU kernels (`cpu/elementwise.rs`), the
//! `Tensor` methods (`tensor.rs`), the JavaScript methods (`web/src/tensor.rs`), the WGSL the GPU
//! kernels compute (`map.wgsl` and `binary.wgsl` splice [`UnaryOp::wgsl`] and friends in) and
//! the samples every test and the kernel-variant list iterate over. Adding an op is a row here,
//! its rule in `autodiff/rules.rs`, and its reference in `core/tests/ops_reference.rs`.
//!
//! A unary row is `Variant(fields) method { .. }`:
//! - `float: |v| ..`: the CPU function on a float `v` of type `T: Float` (f32 and f64; f16 runs
//!   as f32). `int: |v| ..` the same on `T: Num` integers; `ints: all` (i32 and u32) or
//!   `ints: signed` (i32 only) says which integer dtypes it accepts. Without `ints`, floats only.
//! - `wgsl: ".."`: the WGSL expression of `v` (type `T`, constants `c0`, `c1`) on f32;
//!   `wgsl_int` on integers and `wgsl_u32` on u32 where they differ.
//! - `consts: [a, b]`: the f64 values of `c0` and `c1`, from the variant's fields.
//! - `sample: (..)` or `{..}`: fields of a representative op (variants with fields only).
//! - `test: (lo, hi)`: where inputs of the tests are drawn (inside the op's domain);
//!   `kinks` marks ops that are piecewise (the gradient checks avoid the kinks).
//!
//! Binary and comparison rows are alike, with `x` and `y` as the operands.

/// The unary table; calls `$then! { rows }`. See the [module docs](self) for a row's fields.
#[doc(hidden)]
#[macro_export]
macro_rules! unary_table {
    ($then:ident) => {
        $then! {
            /// `-x`
            Neg neg { float: |v| -v, int: |v| v.neg(), ints: signed, wgsl: "-v", test: (-3.0, 3.0) }
            /// `|x|`
            Abs abs { float: |v| v.abs(), int: |v| v.abs(), ints: all, wgsl: "abs(v)", test: (-3.0, 3.0), kinks }
            /// `e^x`
            Exp exp { float: |v| v.exp(), wgsl: "exp(v)", test: (-3.0, 3.0) }
            /// natural log
            Log log { float: |v| v.ln(), wgsl: "log(v)", test: (0.1, 5.0) }
            /// square root
            Sqrt sqrt { float: |v| v.sqrt(), wgsl: "sqrt(v)", test: (0.1, 5.0) }
            /// `1/sqrt(x)`
            Rsqrt rsqrt { float: |v| T::ONE / v.sqrt(), wgsl: "inverseSqrt(v)", test: (0.1, 5.0) }
            /// `1/x`
            Recip recip { float: |v| T::ONE / v, wgsl: "1.0 / v", test: (0.5, 5.0) }
            /// sine
            Sin sin { float: |v| v.sin(), wgsl: "sin(v)", test: (-3.0, 3.0) }
            /// cosine
            Cos cos { float: |v| v.cos(), wgsl: "cos(v)", test: (-3.0, 3.0) }
            /// hyperbolic tangent
            Tanh tanh { float: |v| v.tanh(), wgsl: "tanh_(v)", test: (-4.0, 4.0) }
            /// `1/(1+e^-x)`
            Sigmoid sigmoid { float: |v| sigmoid(v), wgsl: "1.0 / (1.0 + exp(-v))", test: (-6.0, 6.0) }
            /// `x * sigmoid(x)` (SiLU, also called swish)
            Silu silu { float: |v| v * sigmoid(v), wgsl: "v / (1.0 + exp(-v))", test: (-6.0, 6.0) }
            /// `max(x, 0)`
            Relu relu {
                // NaN stays NaN
                float: |v| v.relu(),
                int: |v| if v > T::ZERO { v } else { T::ZERO },
                ints: all,
                wgsl: "max(v, T(0))",
                test: (-3.0, 3.0),
                kinks
            }
            /// `x * Φ(x)` with the exact erf form
            Gelu gelu {
                float: |v| T::from_f(0.5) * v * (T::ONE + (v * T::from_f(core::f64::consts::FRAC_1_SQRT_2)).erf()),
                wgsl: "0.5 * v * (1.0 + erf_(v * 0.70710678118654752))",
                test: (-3.0, 3.0)
            }
            /// `0.5 x (1 + tanh(sqrt(2/π) (x + 0.044715 x³)))`: GELU's tanh approximation (GPT-2's)
            GeluTanh gelu_tanh {
                float: |v| T::from_f(0.5) * v * (T::ONE + (T::from_f(0.797_884_560_802_865_4) * (v + T::from_f(0.044715) * v * v * v)).tanh()),
                wgsl: "0.5 * v * (1.0 + tanh_(0.7978845608028654 * (v + 0.044715 * v * v * v)))",
                test: (-3.0, 3.0)
            }
            /// error function
            Erf erf { float: |v| v.erf(), wgsl: "erf_(v)", test: (-3.0, 3.0) }
            /// round toward -inf
            Floor floor { float: |v| v.floor(), int: |v| v, ints: all, wgsl: "floor(v)", wgsl_int: "v", test: (-3.0, 3.0), kinks }
            /// round toward +inf
            Ceil ceil { float: |v| v.ceil(), int: |v| v, ints: all, wgsl: "ceil(v)", wgsl_int: "v", test: (-3.0, 3.0), kinks }
            /// round half to even (as PyTorch and NumPy)
            Round round { float: |v| v.rint(), int: |v| v, ints: all, wgsl: "round(v)", wgsl_int: "v", test: (-3.0, 3.0), kinks }
            /// -1, 0 or 1
            Sign sign { float: |v| v.sign(), int: |v| v.sign(), ints: all, wgsl: "sign(v)", wgsl_u32: "min(v, 1u)", test: (-3.0, 3.0), kinks }
            /// `x^p` for a constant exponent
            Powf(p: f64) powf {
                float: |v| v.powf(T::from_f(p)),
                wgsl: "pow_(v, c0)",
                consts: [p, 0.0],
                sample: (2.5),
                test: (0.1, 3.0)
            }
            /// `min(max(x, lo), hi)`; on integers the bounds round inward
            Clamp {
                /// lower bound
                min: f64,
                /// upper bound
                max: f64
            } clamp {
                float: |v| clamp(v, T::from_f(min), T::from_f(max)),
                int: |v| clamp(v, T::from_f64($crate::math::ceil(min)), T::from_f64($crate::math::floor(max))),
                ints: all,
                wgsl: "min(max(v, c0), c1)",
                consts: [min, max],
                sample: { min: -0.5, max: 1.25 },
                test: (-3.0, 3.0),
                kinks
            }
        }
    };
}

/// The binary table; calls `$then! { rows }`. A row: `Variant method scalar_method "name" { .. }`
/// with `cpu: |x, y| ..` on every numeric `T: Num`, or `float: |x, y| ..` on floats only, and
/// `wgsl` (with `wgsl_int` where integers differ).
#[doc(hidden)]
#[macro_export]
macro_rules! binary_table {
    ($then:ident) => {
        $then! {
            /// `a + b`
            Add add add_scalar "add" { cpu: |x, y| x.add(y), wgsl: "x + y" }
            /// `a - b`
            Sub sub sub_scalar "sub" { cpu: |x, y| x.sub(y), wgsl: "x - y" }
            /// `a * b`
            Mul mul mul_scalar "mul" { cpu: |x, y| x.mul(y), wgsl: "x * y" }
            /// `a / b` (integer division truncates toward zero; division by zero is 0 on integers)
            Div div div_scalar "div" {
                cpu: |x, y| x.div(y),
                wgsl: "x / y",
                // WGSL would give x for an integer division by zero
                wgsl_int: "select(x / y, T(0), y == T(0))"
            }
            /// `a ^ b`
            Pow pow pow_scalar "pow" { float: |x, y| x.powf(y), wgsl: "pow_(x, y)" }
            /// elementwise maximum (NaN propagates)
            Max maximum maximum_scalar "maximum" {
                cpu: |x, y| x.maximum(y),
                wgsl: "select(max(x, y), x + y, is_nan_(x) || is_nan_(y))",
                wgsl_int: "max(x, y)"
            }
            /// elementwise minimum (NaN propagates)
            Min minimum minimum_scalar "minimum" {
                cpu: |x, y| x.minimum(y),
                wgsl: "select(min(x, y), x + y, is_nan_(x) || is_nan_(y))",
                wgsl_int: "min(x, y)"
            }
        }
    };
}

/// The comparison table; calls `$then! { rows }`. A row: `Variant method { cpu: |x, y| .., wgsl }`
/// (every numeric dtype; the result is bool). The CPU backend tries `cpu` once on an f64 pair of
/// each ordering (less, equal, greater, unordered) and looks the result up per element, so a
/// row's result must depend only on how `x` and `y` order.
#[doc(hidden)]
#[macro_export]
macro_rules! compare_table {
    ($then:ident) => {
        $then! {
            /// `a == b`
            Eq eq { cpu: |x, y| x == y, wgsl: "x == y" }
            /// `a != b`
            // not (x == y): true for NaN, where some SPIR-V paths compile `!=` as an ordered compare
            Ne ne { cpu: |x, y| x != y, wgsl: "!(x == y)" }
            /// `a < b`
            Lt lt { cpu: |x, y| x < y, wgsl: "x < y" }
            /// `a <= b`
            Le le { cpu: |x, y| x <= y, wgsl: "x <= y" }
            /// `a > b`
            Gt gt { cpu: |x, y| x > y, wgsl: "x > y" }
            /// `a >= b`
            Ge ge { cpu: |x, y| x >= y, wgsl: "x >= y" }
        }
    };
}

use crate::DType;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

/// Where the tests draw an op's inputs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TestRange {
    /// smallest input
    pub lo: f64,
    /// largest input
    pub hi: f64,
    /// piecewise: gradients are checked away from the kinks
    pub kinks: bool,
}

const FLOATS: &[DType] = &[DType::F64, DType::F32, DType::F16];
const ALL_NUMERIC: &[DType] = &[DType::F64, DType::F32, DType::F16, DType::I32, DType::U32];
const SIGNED: &[DType] = &[DType::F64, DType::F32, DType::F16, DType::I32];

macro_rules! unary_dtypes {
    () => {
        FLOATS
    };
    (all) => {
        ALL_NUMERIC
    };
    (signed) => {
        SIGNED
    };
}

/// `true` when given any tokens: turns an optional part of a row into a flag.
macro_rules! present {
    () => {
        false
    };
    ($($t:tt)+) => {
        true
    };
}

/// The second value when given, else the first: an optional part of a row with a default.
macro_rules! first_or {
    ($default:expr) => {
        $default
    };
    ($default:expr, $given:expr) => {
        $given
    };
}

macro_rules! define_unary {
    ($(
        $(#[$doc:meta])*
        $var:ident $(($($arg:ident: $ty:ty),*))? $({$($(#[$fdoc:meta])* $field:ident: $fty:ty),*})? $method:ident {
            float: |$fv:ident| $float:expr,
            $(int: |$iv:ident| $int:expr, ints: $ints:ident,)?
            wgsl: $wgsl:literal,
            $(wgsl_int: $wgsl_int:literal,)?
            $(wgsl_u32: $wgsl_u32:literal,)?
            $(consts: [$c0:expr, $c1:expr],)?
            $(sample: $sample:tt,)?
            test: ($lo:expr, $hi:expr) $(, $kinks:ident)?
        }
    )*) => {
        /// Elementwise functions of one tensor.
        #[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum UnaryOp {
            // every field is an f64, which may be infinite (`clamp(x, 0, inf)`)
            $($(#[$doc])* $var $(($(#[serde(with = "super::any_f64")] $ty),*))?
                $({$($(#[$fdoc])* #[serde(with = "super::any_f64")] $field: $fty),*})?,)*
        }

        #[allow(unused_variables)]
        impl UnaryOp {
            /// Lowercase name for messages, kernels and the JS method.
            pub fn name(&self) -> &'static str {
                match self {
                    $(UnaryOp::$var { .. } => stringify!($method),)*
                }
            }
            /// The dtypes it accepts (its output has the input's dtype).
            pub fn dtypes(&self) -> &'static [DType] {
                match self {
                    $(UnaryOp::$var { .. } => unary_dtypes!($($ints)?),)*
                }
            }
            /// `true` for functions defined only on floats.
            pub fn float_only(&self) -> bool {
                !self.dtypes().contains(&DType::I32)
            }
            /// The WGSL expression of `v` (of type `T`, with the constants `c0` and `c1`) on a
            /// device element of `dtype` (f32, i32, or u32 for u32 and bool).
            pub fn wgsl(&self, dtype: DType) -> &'static str {
                match self {
                    $(UnaryOp::$var { .. } => match dtype {
                        DType::U32 | DType::Bool => first_or!(first_or!($wgsl $(, $wgsl_int)?) $(, $wgsl_u32)?),
                        DType::I32 => first_or!($wgsl $(, $wgsl_int)?),
                        _ => $wgsl,
                    },)*
                }
            }
            /// The values of the WGSL constants `c0` and `c1`.
            pub fn consts(&self) -> [f64; 2] {
                match *self {
                    $(UnaryOp::$var $(($($arg),*))? $({$($field),*})? => first_or!([0.0, 0.0] $(, [$c0, $c1])?),)*
                }
            }
            /// One op of each variant (variants with fields get a representative value).
            pub fn samples() -> Vec<UnaryOp> {
                alloc::vec![$(UnaryOp::$var $($sample)?),*]
            }
            /// Where the tests draw its inputs.
            pub fn test_range(&self) -> TestRange {
                match self {
                    $(UnaryOp::$var { .. } => TestRange {
                        lo: $lo,
                        hi: $hi,
                        kinks: present!($($kinks)?),
                    },)*
                }
            }
        }
    };
}
unary_table!(define_unary);

macro_rules! define_binary {
    ($(
        $(#[$doc:meta])*
        $var:ident $method:ident $scalar:ident $name:literal {
            $(cpu: |$cx:ident, $cy:ident| $cpu:expr,)?
            $(float: |$fx:ident, $fy:ident| $float:expr,)?
            wgsl: $wgsl:literal
            $(, wgsl_int: $wgsl_int:literal)?
        }
    )*) => {
        /// Elementwise functions of two broadcast tensors of the same dtype.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum BinaryOp {
            $($(#[$doc])* $var,)*
        }

        impl BinaryOp {
            /// Lowercase name for messages, kernels and the JS method.
            pub fn name(&self) -> &'static str {
                match self {
                    $(BinaryOp::$var => $name,)*
                }
            }
            /// `true` for functions defined only on floats.
            pub fn float_only(&self) -> bool {
                match self {
                    $(BinaryOp::$var => present!($($fx)?),)*
                }
            }
            /// The WGSL expression of `x` and `y` (of type `T`) on a device element of `dtype`.
            pub fn wgsl(&self, dtype: DType) -> &'static str {
                match (self, dtype.is_float()) {
                    $((BinaryOp::$var, true) => $wgsl,
                      (BinaryOp::$var, false) => first_or!($wgsl $(, $wgsl_int)?),)*
                }
            }
            /// The variant's Rust name, which serde's name of it (`snake_case`) lowercases:
            /// op/json.rs's hand decoder reads it.
            pub(crate) fn variant(&self) -> &'static str {
                match self {
                    $(BinaryOp::$var => stringify!($var),)*
                }
            }
            /// Every op of the family.
            pub const ALL: &'static [BinaryOp] = &[$(BinaryOp::$var),*];
        }
    };
}
binary_table!(define_binary);

macro_rules! define_compare {
    ($(
        $(#[$doc:meta])*
        $var:ident $method:ident { cpu: |$x:ident, $y:ident| $cpu:expr, wgsl: $wgsl:literal }
    )*) => {
        /// Comparisons of two broadcast tensors of the same dtype; the result is bool.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum CmpOp {
            $($(#[$doc])* $var,)*
        }

        impl CmpOp {
            /// Lowercase name for messages, kernels and the JS method.
            pub fn name(&self) -> &'static str {
                match self {
                    $(CmpOp::$var => stringify!($method),)*
                }
            }
            /// The WGSL boolean expression of `x` and `y`.
            pub fn wgsl(&self) -> &'static str {
                match self {
                    $(CmpOp::$var => $wgsl,)*
                }
            }
            /// The variant's Rust name, which serde's name of it (`snake_case`) lowercases:
            /// op/json.rs's hand decoder reads it.
            pub(crate) fn variant(&self) -> &'static str {
                match self {
                    $(CmpOp::$var => stringify!($var),)*
                }
            }
            /// Every op of the family.
            pub const ALL: &'static [CmpOp] = &[$(CmpOp::$var),*];
        }
    };
}
compare_table!(define_compare);
