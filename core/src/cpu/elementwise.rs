//! Creation, unary, binary, comparison, select and cast kernels.

use super::num::{Float, Num};
use super::storage::{CpuElem, CpuStorage, Src};
use super::strided::{map1, map2, map3};
use super::{dispatch_any, unsupported};
use crate::backend::View;
use crate::dtype::Element as _;
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

fn float_unary<T: Float>(op: UnaryOp, x: &View<'_>) -> Result<CpuStorage> {
    let s = Src::<T>::new(op.name(), x)?;
    let (zero, one, half) = (T::ZERO, T::ONE, T::from_f(0.5));
    let out: Vec<T> = match op {
        UnaryOp::Neg => map1(&s, |v| -v),
        UnaryOp::Abs => map1(&s, T::abs),
        UnaryOp::Exp => map1(&s, T::exp),
        UnaryOp::Log => map1(&s, T::ln),
        UnaryOp::Sqrt => map1(&s, T::sqrt),
        UnaryOp::Rsqrt => map1(&s, |v| one / v.sqrt()),
        UnaryOp::Recip => map1(&s, |v| one / v),
        UnaryOp::Sin => map1(&s, T::sin),
        UnaryOp::Cos => map1(&s, T::cos),
        UnaryOp::Tanh => map1(&s, T::tanh),
        // Split at 0 so that exp never overflows.
        UnaryOp::Sigmoid => map1(&s, |v| {
            if v >= zero {
                one / (one + (-v).exp())
            } else {
                let e = v.exp();
                e / (one + e)
            }
        }),
        UnaryOp::Relu => map1(&s, |v| if v > zero || v.is_nan() { v } else { zero }),
        UnaryOp::Gelu => {
            let r = T::from_f(core::f64::consts::FRAC_1_SQRT_2);
            map1(&s, |v| half * v * (one + (v * r).erf()))
        }
        UnaryOp::Erf => map1(&s, T::erf),
        UnaryOp::Floor => map1(&s, T::floor),
        UnaryOp::Ceil => map1(&s, T::ceil),
        UnaryOp::Round => map1(&s, T::rint),
        UnaryOp::Sign => map1(&s, T::sign),
        UnaryOp::Powf(p) => {
            let p = T::from_f(p);
            map1(&s, |v| v.powf(p))
        }
        UnaryOp::Clamp { min, max } => {
            let (lo, hi) = (T::from_f(min), T::from_f(max));
            map1(&s, |v| clamp(v, lo, hi))
        }
    };
    Ok(CpuStorage::new(out))
}

/// `min(max(v, lo), hi)` as `torch.clamp`: NaN stays NaN, and `hi` wins when `lo > hi`.
#[inline(always)]
fn clamp<T: Num>(v: T, lo: T, hi: T) -> T {
    let v = if v < lo { lo } else { v };
    if v > hi { hi } else { v }
}

fn int_unary<T: Num>(op: UnaryOp, x: &View<'_>) -> Result<CpuStorage> {
    let s = Src::<T>::new(op.name(), x)?;
    let out: Vec<T> = match op {
        UnaryOp::Neg => map1(&s, T::neg),
        UnaryOp::Abs => map1(&s, T::abs),
        UnaryOp::Relu => map1(&s, |v| if v > T::ZERO { v } else { T::ZERO }),
        UnaryOp::Sign => map1(&s, T::sign),
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => map1(&s, |v| v),
        // Integer bounds: the smallest integer >= min and the largest <= max.
        UnaryOp::Clamp { min, max } => {
            let (lo, hi) = (T::from_f64(libm::ceil(min)), T::from_f64(libm::floor(max)));
            map1(&s, |v| clamp(v, lo, hi))
        }
        _ => return Err(unsupported(op.name(), T::DTYPE)),
    };
    Ok(CpuStorage::new(out))
}

/// Elementwise functions of two broadcast tensors.
pub(crate) fn binary(
    op: BinaryOp,
    a: &View<'_>,
    b: &View<'_>,
    shape: &Shape,
) -> Result<CpuStorage> {
    fn num<T: Num>(op: BinaryOp, a: &View<'_>, b: &View<'_>, shape: &Shape) -> Result<Vec<T>> {
        let (x, y) = (Src::<T>::new(op.name(), a)?, Src::<T>::new(op.name(), b)?);
        Ok(match op {
            BinaryOp::Add => map2(&x, &y, shape, T::add),
            BinaryOp::Sub => map2(&x, &y, shape, T::sub),
            BinaryOp::Mul => map2(&x, &y, shape, T::mul),
            BinaryOp::Div => map2(&x, &y, shape, T::div),
            BinaryOp::Max => map2(&x, &y, shape, T::maximum),
            BinaryOp::Min => map2(&x, &y, shape, T::minimum),
            BinaryOp::Pow => return Err(unsupported(op.name(), T::DTYPE)),
        })
    }
    fn float<T: Float>(op: BinaryOp, a: &View<'_>, b: &View<'_>, shape: &Shape) -> Result<Vec<T>> {
        if op == BinaryOp::Pow {
            let (x, y) = (Src::<T>::new(op.name(), a)?, Src::<T>::new(op.name(), b)?);
            return Ok(map2(&x, &y, shape, T::powf));
        }
        num(op, a, b, shape)
    }
    Ok(match a.dtype {
        DType::F64 => CpuStorage::new(float::<f64>(op, a, b, shape)?),
        DType::F32 => CpuStorage::new(float::<f32>(op, a, b, shape)?),
        DType::I32 => CpuStorage::new(num::<i32>(op, a, b, shape)?),
        DType::U32 => CpuStorage::new(num::<u32>(op, a, b, shape)?),
        dt => return Err(unsupported(op.name(), dt)),
    })
}

/// Comparisons of two broadcast tensors; the result is bool.
pub(crate) fn compare(op: CmpOp, a: &View<'_>, b: &View<'_>, shape: &Shape) -> Result<CpuStorage> {
    fn cmp<T: Num>(op: CmpOp, a: &View<'_>, b: &View<'_>, shape: &Shape) -> Result<CpuStorage> {
        let (x, y) = (Src::<T>::new(op.name(), a)?, Src::<T>::new(op.name(), b)?);
        Ok(CpuStorage::new(match op {
            CmpOp::Eq => map2(&x, &y, shape, |p, q| p == q),
            CmpOp::Ne => map2(&x, &y, shape, |p, q| p != q),
            CmpOp::Lt => map2(&x, &y, shape, |p, q| p < q),
            CmpOp::Le => map2(&x, &y, shape, |p, q| p <= q),
            CmpOp::Gt => map2(&x, &y, shape, |p, q| p > q),
            CmpOp::Ge => map2(&x, &y, shape, |p, q| p >= q),
        }))
    }
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
/// Rust's `as` and PyTorch do.
pub(crate) fn cast(x: &View<'_>, to: DType) -> Result<CpuStorage> {
    fn from<S: CpuElem>(x: &View<'_>, to: DType) -> Result<CpuStorage> {
        let s = Src::<S>::new("cast", x)?;
        match (S::DTYPE, to) {
            (DType::I32, DType::U32) => Ok(CpuStorage::new(map1(&s, |v| v.to_f64() as i32 as u32))),
            (DType::U32, DType::I32) => Ok(CpuStorage::new(map1(&s, |v| v.to_f64() as u32 as i32))),
            _ => dispatch_any!(to, D => Ok(CpuStorage::new(map1(&s, |v| D::from_f64(v.to_f64()))))),
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
