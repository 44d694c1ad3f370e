//! Creation, unary, binary, comparison, select and cast kernels.

use super::num::{Float, Num};
use super::storage::{CpuElem, CpuStorage, Src, buffer};
use super::strided::{map1, map2, map3};
use super::{dispatch_any, unsupported};
use crate::backend::View;
use crate::op::{BinaryOp, CmpOp, Op, UnaryOp};
use crate::random::{normal_f64, uniform_f32};
use crate::{DType, Error, Result, Shape};
use alloc::vec;
use alloc::vec::Vec;
use half::f16;

/// `Full`, `Arange`, `Eye`, `RandUniform`, `RandNormal`: values computed in f64, then rounded.
pub(crate) fn create(op: &Op, dt: DType, shape: &Shape) -> Result<CpuStorage> {
    fn fill<T: CpuElem>(op: &Op, n: usize) -> Result<CpuStorage> {
        let v: Vec<T> = match *op {
            Op::Full { value, .. } => vec![T::from_f64(value); n],
            Op::Arange { start, step, .. } => (0..n)
                .map(|i| T::from_f64(start + i as f64 * step))
                .collect(),
            Op::Eye { m, .. } => (0..n)
                .map(|i| T::from_f64((i / m == i % m) as u8 as f64))
                .collect(),
            Op::RandUniform {
                low, high, seed, ..
            } => (0..n)
                .map(|i| T::from_f64(low + (high - low) * uniform_f32(seed, i as u64) as f64))
                .collect(),
            Op::RandNormal {
                mean, std, seed, ..
            } => (0..n)
                .map(|i| T::from_f64(mean + std * normal_f64(seed, i as u64)))
                .collect(),
            _ => return Err(Error::invalid(op.name(), "is not a creation op")),
        };
        Ok(CpuStorage::new(v))
    }
    let n = shape.numel();
    dispatch_any!(dt, T => fill::<T>(op, n))
}

/// A row's integer kernel, or the error for a float-only row.
macro_rules! int_arm {
    ($op:ident, $s:ident) => {
        return Err(unsupported($op.name(), T::DTYPE))
    };
    ($op:ident, $s:ident, |$v:ident| $e:expr) => {
        map1(&$s, |$v: T| $e)
    };
}

/// The CPU kernels of the unary table (`op/elementwise.rs`): `float_unary` and `int_unary`,
/// one `map1` per row with the row's closure inlined.
macro_rules! unary_kernels {
    ($(
        $(#[$doc:meta])*
        $var:ident $(($($arg:ident: $ty:ty),*))? $({$($(#[$fdoc:meta])* $field:ident: $fty:ty),*})? $method:ident {
            float: |$fv:ident| $float:expr,
            $(int: |$iv:ident| $int:expr, ints: $ints:ident,)?
            wgsl: $($rest:tt)*
        }
    )*) => {
        fn float_unary<T: Float>(op: UnaryOp, x: &View<'_>) -> Result<CpuStorage> {
            let s = Src::<T>::new(op.name(), x)?;
            let out: Vec<T> = match op {
                $(UnaryOp::$var $(($($arg),*))? $({$($field),*})? => map1(&s, |$fv: T| $float),)*
            };
            Ok(CpuStorage::new(out))
        }

        #[allow(unused_variables)]
        fn int_unary<T: Num>(op: UnaryOp, x: &View<'_>) -> Result<CpuStorage> {
            let s = Src::<T>::new(op.name(), x)?;
            let out: Vec<T> = match op {
                $(UnaryOp::$var $(($($arg),*))? $({$($field),*})? => int_arm!(op, s $(, |$iv| $int)?),)*
            };
            Ok(CpuStorage::new(out))
        }
    };
}

crate::unary_table!(unary_kernels);

/// Elementwise functions of one tensor.
pub(crate) fn unary(op: UnaryOp, x: &View<'_>) -> Result<CpuStorage> {
    match x.dtype {
        DType::F64 => float_unary::<f64>(op, x),
        DType::F32 => float_unary::<f32>(op, x),
        DType::I32 => int_unary::<i32>(op, x),
        DType::U32 => int_unary::<u32>(op, x),
        dt => Err(unsupported(op.name(), dt)),
    }
}

/// `1/(1+e^-v)`, split at 0 so that exp never overflows.
#[inline(always)]
fn sigmoid<T: Float>(v: T) -> T {
    if v >= T::ZERO {
        T::ONE / (T::ONE + (-v).exp())
    } else {
        let e = v.exp();
        e / (T::ONE + e)
    }
}

/// `min(max(v, lo), hi)` as `torch.clamp`: NaN stays NaN, and `hi` wins when `lo > hi`.
#[inline(always)]
fn clamp<T: Num>(v: T, lo: T, hi: T) -> T {
    let v = if v < lo { lo } else { v };
    if v > hi { hi } else { v }
}

/// The CPU kernels of the binary table: `num_binary` for rows on every numeric type,
/// `float_binary` adds the float-only rows.
macro_rules! binary_kernels {
    ($(
        $(#[$doc:meta])*
        $var:ident $method:ident $scalar:ident $name:literal {
            $(cpu: |$cx:ident, $cy:ident| $cpu:expr,)?
            $(float: |$fx:ident, $fy:ident| $float:expr,)?
            wgsl: $($rest:tt)*
        }
    )*) => {
        fn num_binary<T: Num>(op: BinaryOp, x: &Src<'_, T>, y: &Src<'_, T>, shape: &Shape) -> Result<Vec<T>> {
            Ok(match op {
                $($(BinaryOp::$var => map2(x, y, shape, |$cx: T, $cy: T| $cpu),)?)*
                _ => return Err(unsupported(op.name(), T::DTYPE)),
            })
        }

        fn float_binary<T: Float>(op: BinaryOp, x: &Src<'_, T>, y: &Src<'_, T>, shape: &Shape) -> Result<Vec<T>> {
            Ok(match op {
                $($(BinaryOp::$var => map2(x, y, shape, |$fx: T, $fy: T| $float),)?)*
                _ => return num_binary(op, x, y, shape),
            })
        }
    };
}
crate::binary_table!(binary_kernels);

/// Elementwise functions of two broadcast tensors.
pub(crate) fn binary(
    op: BinaryOp,
    a: &View<'_>,
    b: &View<'_>,
    shape: &Shape,
) -> Result<CpuStorage> {
    fn num<T: Num>(op: BinaryOp, a: &View<'_>, b: &View<'_>, shape: &Shape) -> Result<CpuStorage> {
        let (x, y) = (Src::<T>::new(op.name(), a)?, Src::<T>::new(op.name(), b)?);
        Ok(CpuStorage::new(num_binary(op, &x, &y, shape)?))
    }
    fn float<T: Float>(
        op: BinaryOp,
        a: &View<'_>,
        b: &View<'_>,
        shape: &Shape,
    ) -> Result<CpuStorage> {
        let (x, y) = (Src::<T>::new(op.name(), a)?, Src::<T>::new(op.name(), b)?);
        Ok(CpuStorage::new(float_binary(op, &x, &y, shape)?))
    }
    match a.dtype {
        DType::F64 => float::<f64>(op, a, b, shape),
        DType::F32 => float::<f32>(op, a, b, shape),
        DType::I32 => num::<i32>(op, a, b, shape),
        DType::U32 => num::<u32>(op, a, b, shape),
        dt => Err(unsupported(op.name(), dt)),
    }
}

/// The CPU kernel of the comparison table. A comparison's result depends only on how `x` and
/// `y` order (unordered, less, equal, greater), so each dtype has one loop for all of them,
/// looking the result up in the op's outcomes: one loop instead of six per dtype (the web
/// package has a size budget).
macro_rules! compare_kernel {
    ($(
        $(#[$doc:meta])*
        $var:ident $method:ident { cpu: |$x:ident, $y:ident| $cpu:expr, $($rest:tt)* }
    )*) => {
        /// Bit `k` of the result: `op`'s row of the table on a pair of ordering `k` (0 unordered,
        /// 1 less, 2 equal, 3 greater), as [`ordering`] numbers them.
        fn outcomes(op: CmpOp) -> u8 {
            let pairs = [(f64::NAN, 0.0), (0.0, 1.0), (0.0, 0.0), (1.0, 0.0)];
            pairs.iter().enumerate().fold(0, |bits, (k, &(x, y))| {
                let r = match op {
                    $(CmpOp::$var => (|$x: f64, $y: f64| $cpu)(x, y),)*
                };
                bits | (r as u8) << k
            })
        }
    };
}
crate::compare_table!(compare_kernel);

/// How `x` and `y` order, numbered as [`outcomes`] reads it.
#[inline(always)]
fn ordering<T: Num>(x: T, y: T) -> u8 {
    x.partial_cmp(&y).map_or(0, |o| (o as i8 + 2) as u8)
}

fn cmp<T: Num>(op: CmpOp, a: &View<'_>, b: &View<'_>, shape: &Shape) -> Result<CpuStorage> {
    let (x, y) = (Src::<T>::new(op.name(), a)?, Src::<T>::new(op.name(), b)?);
    let bits = outcomes(op);
    Ok(CpuStorage::new(map2(&x, &y, shape, move |p: T, q: T| {
        bits >> ordering(p, q) & 1 != 0
    })))
}

/// Comparisons of two broadcast tensors; the result is bool.
pub(crate) fn compare(op: CmpOp, a: &View<'_>, b: &View<'_>, shape: &Shape) -> Result<CpuStorage> {
    match a.dtype {
        DType::F64 => cmp::<f64>(op, a, b, shape),
        DType::F32 => cmp::<f32>(op, a, b, shape),
        DType::I32 => cmp::<i32>(op, a, b, shape),
        DType::U32 => cmp::<u32>(op, a, b, shape),
        dt => Err(unsupported(op.name(), dt)),
    }
}

/// `cond ? a : b`, all broadcast.
pub(crate) fn select(
    cond: &View<'_>,
    a: &View<'_>,
    b: &View<'_>,
    shape: &Shape,
) -> Result<CpuStorage> {
    fn sel<T: CpuElem>(
        c: &View<'_>,
        a: &View<'_>,
        b: &View<'_>,
        shape: &Shape,
    ) -> Result<CpuStorage> {
        let c = Src::<bool>::new("where", c)?;
        let (x, y) = (Src::<T>::new("where", a)?, Src::<T>::new("where", b)?);
        Ok(CpuStorage::new(map3(&c, &x, &y, shape, |c, p, q| {
            if c { p } else { q }
        })))
    }
    dispatch_any!(a.dtype, T => sel::<T>(cond, a, b, shape))
}

/// Numeric conversion: through f64 (exact for every source), so floats to integers truncate
/// and saturate (NaN gives 0) and anything to bool is `x != 0`; integers to integers wrap, as
/// Rust's `as` and PyTorch do. The source is widened a block at a time and each block narrowed
/// to the target: one loop per source dtype and one per target rather than one per pair (36; the
/// web package has a size budget).
pub(crate) fn cast(x: &View<'_>, to: DType) -> Result<CpuStorage> {
    const BLOCK: usize = 256;
    fn into<D: CpuElem>(n: usize, widen: &dyn Fn(usize, &mut [f64])) -> CpuStorage {
        let mut out = buffer(n);
        let mut wide = [0.0; BLOCK];
        for start in (0..n).step_by(BLOCK) {
            let w = &mut wide[..BLOCK.min(n - start)];
            widen(start, w);
            out.extend(w.iter().map(|&v| D::from_f64(v)));
        }
        CpuStorage::new(out)
    }
    fn from<S: CpuElem>(x: &View<'_>, to: DType) -> Result<CpuStorage> {
        let s = Src::<S>::new("cast", x)?;
        match (S::DTYPE, to) {
            (DType::I32, DType::U32) => Ok(CpuStorage::new(map1(&s, |v| v.to_f64() as i32 as u32))),
            (DType::U32, DType::I32) => Ok(CpuStorage::new(map1(&s, |v| v.to_f64() as u32 as i32))),
            _ => {
                let v = s.to_contiguous();
                let widen = |start: usize, w: &mut [f64]| {
                    for (w, e) in w.iter_mut().zip(&v[start..]) {
                        *w = e.to_f64();
                    }
                };
                Ok(dispatch_any!(to, D => into::<D>(v.len(), &widen)))
            }
        }
    }
    dispatch_any!(x.dtype, S => from::<S>(x, to))
}

/// f16 data as f32 (exact), and back (rounded to nearest even).
pub(crate) fn widen_f16(x: &View<'_>) -> Result<CpuStorage> {
    let s = Src::<f16>::new("f16", x)?;
    Ok(CpuStorage::new(map1(&s, f16::to_f32)))
}

/// f32 results rounded to f16.
pub(crate) fn narrow_f32(values: &CpuStorage) -> Result<CpuStorage> {
    match values {
        CpuStorage::F32(v) => Ok(CpuStorage::new(
            v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>(),
        )),
        s => Err(Error::dtype(
            "f16",
            alloc::format!(
                "expected an f32 result to round to f16, found {}",
                s.dtype()
            ),
        )),
    }
}
