//! Ops as data: the single list of kiln's primitives, their parameters, and their output
//! dtype/shape rules (the one place where op arguments are validated, for every backend).

use crate::shape::SliceRange;
use crate::{DType, Error, Result, Shape};
use alloc::format;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

pub mod custom;
mod elementwise;
pub(crate) mod json;

/// serde for op fields of type f64 that may be infinite or NaN (a max pool's `-inf` padding, an
/// attention mask's fill), which JSON numbers cannot hold: those are written as the strings
/// `"inf"`, `"-inf"` and `"nan"`, finite values as numbers.
pub(crate) mod any_f64 {
    use alloc::format;
    use serde::de::Error;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        match *v {
            v if v.is_finite() => s.serialize_f64(v),
            v if v.is_nan() => s.serialize_str("nan"),
            v if v > 0.0 => s.serialize_str("inf"),
            _ => s.serialize_str("-inf"),
        }
    }

    /// The value of one of the three names `serialize` writes for a non-finite f64.
    pub(crate) fn named(s: &str) -> Option<f64> {
        match s {
            "inf" => Some(f64::INFINITY),
            "-inf" => Some(f64::NEG_INFINITY),
            "nan" => Some(f64::NAN),
            _ => None,
        }
    }

    /// Accepts a JSON number or one of the three names (a visitor rather than an untagged enum,
    /// which would buffer each value first and pull serde's buffering code into the wasm).
    struct AnyF64;

    impl serde::de::Visitor<'_> for AnyF64 {
        type Value = f64;
        fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.write_str("a number, \"inf\", \"-inf\" or \"nan\"")
        }
        fn visit_f64<E: Error>(self, v: f64) -> Result<f64, E> {
            Ok(v)
        }
        fn visit_i64<E: Error>(self, v: i64) -> Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_u64<E: Error>(self, v: u64) -> Result<f64, E> {
            Ok(v as f64)
        }
        fn visit_str<E: Error>(self, v: &str) -> Result<f64, E> {
            named(v).ok_or_else(|| {
                E::custom(format!(
                    "expected a number, \"inf\", \"-inf\" or \"nan\", found {v:?}"
                ))
            })
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        d.deserialize_any(AnyF64)
    }
}
pub use elementwise::{BinaryOp, CmpOp, TestRange, UnaryOp};

/// Reductions over a set of axes.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReduceOp {
    /// sum
    Sum,
    /// arithmetic mean (floats only)
    Mean,
    /// maximum
    Max,
    /// minimum
    Min,
    /// product
    Prod,
    /// variance with `correction` (1 = unbiased, as `torch.var`) (floats only)
    Var {
        /// subtracted from the count in the denominator
        correction: usize,
    },
    /// index of the maximum, first on ties; one axis only; i32 result
    ArgMax,
    /// index of the minimum, first on ties; one axis only; i32 result
    ArgMin,
}

impl ReduceOp {
    /// One op of each variant (`Var` with the unbiased correction).
    pub fn samples() -> Vec<ReduceOp> {
        use ReduceOp::*;
        alloc::vec![
            Sum,
            Mean,
            Max,
            Min,
            Prod,
            Var { correction: 1 },
            ArgMax,
            ArgMin
        ]
    }
    /// Lowercase name for messages and kernels.
    pub fn name(&self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Prod => "prod",
            ReduceOp::Var { .. } => "var",
            ReduceOp::ArgMax => "argmax",
            ReduceOp::ArgMin => "argmin",
        }
    }
}

/// Parameters of a 2-D convolution (NCHW input, OIHW weight), shared by conv2d, its
/// transpose and their gradients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Conv2dParams {
    /// step between windows, (h, w)
    pub stride: [usize; 2],
    /// zeros added on each side, (h, w)
    pub padding: [usize; 2],
    /// spacing between kernel taps, (h, w)
    pub dilation: [usize; 2],
    /// channel groups; in and out channels must be divisible by it
    pub groups: usize,
}

impl Default for Conv2dParams {
    fn default() -> Self {
        Conv2dParams {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

/// One Adam or AdamW step ([`Op::AdamStep`]), as `torch.optim.Adam` / `AdamW` compute it:
/// `m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
/// p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)`, with weight decay added to
/// the gradient (`g += wd p`, Adam) or, `decoupled`, applied to the parameter first
/// (`p *= 1 - lr wd`, AdamW).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct AdamParams {
    /// learning rate
    pub lr: f64,
    /// decay of the first moment
    pub beta1: f64,
    /// decay of the second moment
    pub beta2: f64,
    /// added to the denominator
    pub eps: f64,
    /// weight decay (0: none)
    pub weight_decay: f64,
    /// AdamW's decoupled weight decay
    pub decoupled: bool,
    /// this step's number, from 1 (for the bias corrections)
    pub step: u64,
}

impl AdamParams {
    /// The bias corrections folded into two factors: `lr / (1 - b1^t)` for the step and
    /// `1 / sqrt(1 - b2^t)` for `sqrt(v)`.
    pub fn corrections(&self) -> (f64, f64) {
        let t = self.step.min(i32::MAX as u64) as f64;
        let bc1 = 1.0 - libm::pow(self.beta1, t);
        let bc2 = 1.0 - libm::pow(self.beta2, t);
        (self.lr / bc1, 1.0 / crate::math::sqrt(bc2))
    }
}

/// Parameters of 2-D pooling over NCHW input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Pool2dParams {
    /// window size, (h, w)
    pub kernel: [usize; 2],
    /// step between windows, (h, w)
    pub stride: [usize; 2],
    /// implicit padding on each side (-inf for max, excluded or zero for avg)
    pub padding: [usize; 2],
    /// spacing between window taps (max pool only; 1 for avg)
    pub dilation: [usize; 2],
    /// avg pool: count padded zeros in the divisor (PyTorch's default is true)
    pub count_include_pad: bool,
}

/// A 2-D pooling over NCHW input ([`Op::Pool2d`], and [`Op::Pool2dBackward`] its gradient).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pool2d {
    /// the maximum of each window (NaN counts as the maximum)
    Max(Pool2dParams),
    /// the mean of each window
    Avg(Pool2dParams),
    /// the mean of PyTorch's adaptive windows, which cut the input into `output` (h, w) cells
    AdaptiveAvg {
        /// output size, (h, w)
        output: [usize; 2],
    },
}

impl Pool2d {
    /// Lowercase name for messages (`"max_pool2d"`).
    pub fn name(&self) -> &'static str {
        match self {
            Pool2d::Max(_) => "max_pool2d",
            Pool2d::Avg(_) => "avg_pool2d",
            Pool2d::AdaptiveAvg { .. } => "adaptive_avg_pool2d",
        }
    }
    /// The name of its gradient (`"max_pool2d_backward"`).
    pub fn backward_name(&self) -> &'static str {
        match self {
            Pool2d::Max(_) => "max_pool2d_backward",
            Pool2d::Avg(_) => "avg_pool2d_backward",
            Pool2d::AdaptiveAvg { .. } => "adaptive_avg_pool2d_backward",
        }
    }
    /// One pooling of each kind.
    pub fn samples() -> Vec<Pool2d> {
        let p = Pool2dParams {
            kernel: [2, 2],
            stride: [2, 2],
            padding: [0, 0],
            dilation: [1, 1],
            count_include_pad: true,
        };
        alloc::vec![
            Pool2d::Max(p),
            Pool2d::Avg(p),
            Pool2d::AdaptiveAvg { output: [2, 2] }
        ]
    }
}

/// One primitive operation with its parameters. Every backend executes this set; autodiff,
/// tracing, the model file and the kernels all speak it.
///
/// Inputs are listed in each variant's doc. View ops (`Reshape`, `Permute`, `Slice`, `Expand`)
/// change only the layout and are applied by [`crate::Tensor`] without calling the backend,
/// except when a reshape of a non-contiguous tensor needs a `Contiguous` copy first.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)] // fields are described in each variant's doc
pub enum Op {
    // ---- creation (no inputs)
    /// every element `value`
    Full {
        shape: Shape,
        #[serde(with = "any_f64")]
        value: f64,
        dtype: DType,
    },
    /// `start + i * step` for `i in 0..len`
    Arange {
        start: f64,
        step: f64,
        len: usize,
        dtype: DType,
    },
    /// `n x m` identity
    Eye { n: usize, m: usize, dtype: DType },
    /// uniform in `[low, high)`, deterministic in `seed`
    RandUniform {
        shape: Shape,
        low: f64,
        high: f64,
        seed: u64,
        dtype: DType,
    },
    /// normal with `mean`, `std`, deterministic in `seed`
    RandNormal {
        shape: Shape,
        mean: f64,
        std: f64,
        seed: u64,
        dtype: DType,
    },

    // ---- elementwise
    /// inputs: `[x]`
    Unary(UnaryOp),
    /// inputs: `[a, b]`, broadcast, same dtype
    Binary(BinaryOp),
    /// inputs: `[a, b]`, broadcast, same dtype; output bool
    Compare(CmpOp),
    /// inputs: `[cond (bool), a, b]`, all broadcast; `cond ? a : b`
    Where,
    /// inputs: `[x]`; numeric conversion (`as` semantics; to bool is `x != 0`)
    Cast { dtype: DType },

    // ---- reductions and scans
    /// inputs: `[x]`; over `axes` (sorted, unique; empty means all axes)
    Reduce {
        op: ReduceOp,
        axes: Vec<usize>,
        keepdim: bool,
    },
    /// inputs: `[x]`; inclusive running sum along `axis` (`reverse` runs from the end)
    Cumsum { axis: usize, reverse: bool },
    /// inputs: `[x]`; along `axis`, numerically stable. With `causal` (then `axis` is the last
    /// of `[.., Tq, Tk]`, `Tq <= Tk`), row `i` sees only the keys `0 ..= Tk - Tq + i`: the rest
    /// get probability 0 and are never read, as in causal attention.
    Softmax {
        axis: usize,
        #[serde(default)]
        causal: bool,
    },
    /// inputs: `[x]`; along `axis`, numerically stable
    LogSoftmax { axis: usize },
    /// inputs: `[x]` (f32/f64); each row along the last axis to zero mean and unit variance:
    /// `(x - mean) / sqrt(var + eps)`, the variance biased (layer norm's core, one pass)
    Normalize { eps: f64 },
    /// inputs: `[x, g]`, same shape: the gradient of [`Op::Normalize`] at `x` for the output
    /// gradient `g`, `rstd (g - mean(g) - x̂ mean(g x̂))` per row (statistics recomputed from `x`)
    NormalizeBackward { eps: f64 },

    // ---- linear algebra
    /// inputs: `[a, b]`; `[..., m, k] x [..., k, n]`, batch dims broadcast; rank-1 operands are
    /// promoted as in NumPy
    Matmul,

    // ---- views (layout only)
    /// inputs: `[x]`
    Reshape { shape: Shape },
    /// inputs: `[x]`
    Permute { dims: Vec<usize> },
    /// inputs: `[x]`
    Slice { ranges: Vec<SliceRange> },
    /// inputs: `[x]`; broadcast to `shape`
    Expand { shape: Shape },
    /// inputs: `[x]`; a row-major copy
    Contiguous,

    // ---- data movement
    /// inputs: `[x0, x1, ...]` of one dtype, equal but for `axis`
    Concat { axis: usize },
    /// inputs: `[x, index (i32/u32)]`; `torch.gather`: `out[i][j] = x[i][index[i][j]]` along `axis`
    Gather { axis: usize },
    /// inputs: `[x, index (i32/u32, rank 1)]`; rows of `x` along `axis`
    IndexSelect { axis: usize },
    /// inputs: `[x, index, src]`; `torch.scatter_add`: x with src added at index along `axis`
    ScatterAdd { axis: usize },
    /// inputs: `[x]`; constant padding, `(before, after)` per axis (fewer pairs pad the leading axes)
    Pad {
        pads: Vec<(usize, usize)>,
        #[serde(with = "any_f64")]
        value: f64,
    },
    /// inputs: `[index (i32/u32)]`; appends an axis of `classes`
    OneHot { classes: usize, dtype: DType },

    // ---- convolution and pooling (NCHW)
    /// inputs: `[x (N,C,H,W), weight (O, C/groups, kh, kw)]`
    Conv2d(Conv2dParams),
    /// inputs: `[x (N,C,H,W), weight (C, O/groups, kh, kw)]`; the gradient of conv2d wrt its input
    ConvTranspose2d {
        params: Conv2dParams,
        output_padding: [usize; 2],
    },
    /// inputs: `[x (N,C,H,W), grad_out (N,O,OH,OW)]`; the gradient of conv2d wrt its weight
    Conv2dBackwardWeight {
        params: Conv2dParams,
        kernel: [usize; 2],
    },
    /// inputs: `[x]`
    Pool2d(Pool2d),
    /// inputs: `[x, grad_out]`; the gradient of the pooling wrt `x` (max routes each output
    /// gradient to its window's first maximum; the averages spread it over their windows)
    Pool2dBackward(Pool2d),

    // ---- optimisation
    /// inputs: `[param, grad, exp_avg, exp_avg_sq]` (float, one shape), then optionally a rank-0
    /// `scale` multiplying the gradient first (gradient clipping's coefficient); one fused Adam
    /// step (a dozen elementwise ops in one pass). Two outputs (run it with
    /// [`crate::Tensor::apply_many`]): the new param, and the new moments as one `[2, ..shape]`
    /// tensor, exp_avg then exp_avg_sq (one buffer, so that the step fits WebGPU's 8 storage
    /// buffers with the scale)
    AdamStep(AdamParams),

    // ---- user-defined
    /// inputs: as the registered op takes them; a call of a [`custom::CustomOp`] registered
    /// under `name` with [`custom::register_op`]
    Custom(custom::CustomCall),
}

/// The dtype and shape of an op's input or output.
pub type Meta = (DType, Shape);

impl Op {
    /// Number of inputs the op takes (`None`: one or more for `Concat`, four or five for
    /// `AdamStep`, any number for a custom op, each checked where its output is inferred).
    pub fn arity(&self) -> Option<usize> {
        Some(match self {
            Op::Full { .. }
            | Op::Arange { .. }
            | Op::Eye { .. }
            | Op::RandUniform { .. }
            | Op::RandNormal { .. } => 0,
            Op::Binary(_)
            | Op::Compare(_)
            | Op::Matmul
            | Op::Gather { .. }
            | Op::IndexSelect { .. }
            | Op::Conv2d(_)
            | Op::ConvTranspose2d { .. }
            | Op::Conv2dBackwardWeight { .. }
            | Op::Pool2dBackward(_)
            | Op::NormalizeBackward { .. } => 2,
            Op::Where | Op::ScatterAdd { .. } => 3,
            Op::Concat { .. } | Op::Custom(_) | Op::AdamStep(_) => return None,
            _ => 1,
        })
    }
    /// Short lowercase name for messages (`"matmul"`, `"conv2d"`).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Full { .. } => "full",
            Op::Arange { .. } => "arange",
            Op::Eye { .. } => "eye",
            Op::RandUniform { .. } => "rand_uniform",
            Op::RandNormal { .. } => "rand_normal",
            Op::Unary(u) => u.name(),
            Op::Binary(b) => b.name(),
            Op::Compare(c) => c.name(),
            Op::Where => "where",
            Op::Cast { .. } => "cast",
            Op::Reduce { op, .. } => op.name(),
            Op::Cumsum { .. } => "cumsum",
            Op::Softmax { .. } => "softmax",
            Op::LogSoftmax { .. } => "log_softmax",
            Op::Normalize { .. } => "normalize",
            Op::NormalizeBackward { .. } => "normalize_backward",
            Op::Matmul => "matmul",
            Op::Reshape { .. } => "reshape",
            Op::Permute { .. } => "permute",
            Op::Slice { .. } => "slice",
            Op::Expand { .. } => "expand",
            Op::Contiguous => "contiguous",
            Op::Concat { .. } => "concat",
            Op::Gather { .. } => "gather",
            Op::IndexSelect { .. } => "index_select",
            Op::ScatterAdd { .. } => "scatter_add",
            Op::Pad { .. } => "pad",
            Op::OneHot { .. } => "one_hot",
            Op::Conv2d(_) => "conv2d",
            Op::ConvTranspose2d { .. } => "conv_transpose2d",
            Op::Conv2dBackwardWeight { .. } => "conv2d_backward_weight",
            Op::Pool2d(p) => p.name(),
            Op::Pool2dBackward(p) => p.backward_name(),
            Op::AdamStep(_) => "adam_step",
            Op::Custom(c) => custom::name(c),
        }
    }

    /// `true` for ops that only change the layout.
    pub fn is_view(&self) -> bool {
        matches!(
            self,
            Op::Reshape { .. } | Op::Permute { .. } | Op::Slice { .. } | Op::Expand { .. }
        )
    }

    /// Validates the inputs and computes each output's dtype and shape (one output for every
    /// op but [`Op::AdamStep`]). Every backend relies on this, so backends never re-check shapes.
    ///
    /// ```
    /// use kiln_core::{DType, Op, Shape};
    /// let outs = Op::Matmul.infer(&[(DType::F32, Shape::from([2, 3])), (DType::F32, Shape::from([3, 4]))])?;
    /// assert_eq!(outs, [(DType::F32, Shape::from([2, 4]))]);
    /// # Ok::<(), kiln_core::Error>(())
    /// ```
    pub fn infer(&self, inputs: &[Meta]) -> Result<Vec<Meta>> {
        crate::infer::infer(self, inputs)
    }
}

/// An error for a wrong number of inputs.
#[cold]
#[inline(never)]
pub(crate) fn arity(op: &Op, want: usize, got: usize) -> Error {
    Error::invalid(op.name(), format!("expects {want} inputs, got {got}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Infinite and NaN fields survive the model file's JSON, which has no such numbers.
    #[test]
    fn non_finite_fields_round_trip_through_json() {
        let ops = [
            Op::Pad {
                pads: alloc::vec![(1, 2)],
                value: f64::NEG_INFINITY,
            },
            Op::Full {
                shape: Shape::from([2]),
                value: f64::INFINITY,
                dtype: DType::F32,
            },
            Op::Unary(UnaryOp::Clamp {
                min: 0.0,
                max: f64::INFINITY,
            }),
            Op::Unary(UnaryOp::Powf(-1.5)),
        ];
        for op in ops {
            let json = serde_json::to_string(&op).unwrap();
            let back: Op = serde_json::from_str(&json).unwrap();
            assert_eq!(back, op, "{json}");
        }
        let nan = serde_json::to_string(&Op::Unary(UnaryOp::Powf(f64::NAN))).unwrap();
        assert!(
            matches!(serde_json::from_str(&nan), Ok(Op::Unary(UnaryOp::Powf(p))) if p.is_nan())
        );
        let bad = r#"{"pad":{"pads":[[0,1]],"value":"lots"}}"#;
        let err = serde_json::from_str::<Op>(bad).unwrap_err().to_string();
        assert!(err.contains("\"lots\""), "{err}");
    }
}
