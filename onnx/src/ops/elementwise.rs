//! Elementwise ONNX ops: activations and math (kiln's unary table, or compositions of it),
//! broadcasting arithmetic, comparisons and logic (on the host for host integers), `Where`,
//! `Cast`/`CastLike`, `Clip`.
//!
//! Operands of one op may arrive as different kinds (host integers next to a float tensor, a
//! bool tensor next to an int one): [`unify`] brings them to one device dtype first.

use super::{Ctx, OpFn, Outputs, host_values, one, one_ints};
use crate::value::{Ints, Value, kiln_dtype};
use crate::{DataType, NodeAttrs, narrow};
use alloc::format;
use alloc::vec::Vec;
use core::f64::consts::{FRAC_1_SQRT_2, FRAC_2_SQRT_PI, FRAC_PI_2};
use kiln_core::{
    BinaryOp, CmpOp, DType, Device, Error, Result, Shape, Tensor, TensorData, UnaryOp,
};

pub(super) const OPS: &[(&str, OpFn)] = &[
    ("Identity", identity),
    ("Relu", |c, a| unary(c, a, UnaryOp::Relu)),
    ("Sigmoid", |c, a| unary(c, a, UnaryOp::Sigmoid)),
    ("Tanh", |c, a| unary(c, a, UnaryOp::Tanh)),
    ("Exp", |c, a| unary(c, a, UnaryOp::Exp)),
    ("Log", |c, a| unary(c, a, UnaryOp::Log)),
    ("Sqrt", |c, a| unary(c, a, UnaryOp::Sqrt)),
    ("Abs", |c, a| unary(c, a, UnaryOp::Abs)),
    ("Neg", |c, a| unary(c, a, UnaryOp::Neg)),
    ("Floor", |c, a| unary(c, a, UnaryOp::Floor)),
    ("Ceil", |c, a| unary(c, a, UnaryOp::Ceil)),
    ("Round", |c, a| unary(c, a, UnaryOp::Round)),
    ("Sign", |c, a| unary(c, a, UnaryOp::Sign)),
    ("Erf", |c, a| unary(c, a, UnaryOp::Erf)),
    ("Sin", |c, a| unary(c, a, UnaryOp::Sin)),
    ("Cos", |c, a| unary(c, a, UnaryOp::Cos)),
    ("Reciprocal", |c, a| unary(c, a, UnaryOp::Recip)),
    ("Tan", |c, a| float_fn(c, a, |x| x.sin()?.div(&x.cos()?))),
    ("Atan", |c, a| float_fn(c, a, atan)),
    ("Asin", |c, a| float_fn(c, a, asin)),
    ("Acos", |c, a| float_fn(c, a, acos)),
    ("Sinh", |c, a| float_fn(c, a, sinh)),
    ("Cosh", |c, a| float_fn(c, a, cosh)),
    ("Asinh", |c, a| float_fn(c, a, asinh)),
    ("Acosh", |c, a| float_fn(c, a, acosh)),
    ("Atanh", |c, a| float_fn(c, a, atanh)),
    ("Add", |c, a| binary(c, a, BinaryOp::Add)),
    ("Sub", |c, a| binary(c, a, BinaryOp::Sub)),
    ("Mul", |c, a| binary(c, a, BinaryOp::Mul)),
    ("Div", |c, a| binary(c, a, BinaryOp::Div)),
    ("Pow", |c, a| binary(c, a, BinaryOp::Pow)),
    ("Mod", modulo),
    ("Max", |c, a| variadic(c, a, BinaryOp::Max)),
    ("Min", |c, a| variadic(c, a, BinaryOp::Min)),
    ("Sum", |c, a| variadic(c, a, BinaryOp::Add)),
    ("Mean", mean),
    ("Equal", |c, a| compare(c, a, CmpOp::Eq)),
    ("Less", |c, a| compare(c, a, CmpOp::Lt)),
    ("LessOrEqual", |c, a| compare(c, a, CmpOp::Le)),
    ("Greater", |c, a| compare(c, a, CmpOp::Gt)),
    ("GreaterOrEqual", |c, a| compare(c, a, CmpOp::Ge)),
    ("And", |c, a| logical(c, a, Logic::And)),
    ("Or", |c, a| logical(c, a, Logic::Or)),
    ("Xor", |c, a| logical(c, a, Logic::Xor)),
    ("Not", not),
    ("BitwiseAnd", |c, a| bitwise(c, a, |p, q| Some(p & q))),
    ("BitwiseOr", |c, a| bitwise(c, a, |p, q| Some(p | q))),
    ("BitwiseXor", |c, a| bitwise(c, a, |p, q| Some(p ^ q))),
    ("BitwiseNot", bitwise_not),
    ("BitShift", bit_shift),
    ("IsNaN", is_nan),
    ("IsInf", is_inf),
    ("Where", where_),
    ("Cast", cast),
    ("CastLike", cast_like),
    ("BitCast", bit_cast),
    ("Clip", clip),
    ("LeakyRelu", leaky_relu),
    ("PRelu", prelu),
    ("ThresholdedRelu", thresholded_relu),
    ("Elu", elu),
    ("Selu", selu),
    ("Celu", celu),
    ("Softplus", |c, a| float_fn(c, a, softplus)),
    ("Softsign", |c, a| {
        float_fn(c, a, |x| x.div(&x.abs()?.add_scalar(1.0)?))
    }),
    ("HardSigmoid", hard_sigmoid),
    ("HardSwish", |c, a| {
        float_fn(c, a, |x| {
            x.mul(&x.mul_scalar(1.0 / 6.0)?.add_scalar(0.5)?.clamp(0.0, 1.0)?)
        })
    }),
    ("Gelu", gelu),
    ("Mish", |c, a| {
        float_fn(c, a, |x| x.mul(&softplus(x)?.tanh()?))
    }),
    ("Shrink", shrink),
    ("Swish", swish),
];

fn identity(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    Ok(alloc::vec![c.arg(a, 0)?.clone()])
}

/// A unary op from kiln's table; host integers stay on the host where the op is integral.
fn unary(c: &Ctx<'_>, a: &[Value], op: UnaryOp) -> Outputs {
    if let Value::Ints(x) = c.arg(a, 0)? {
        let f: Option<fn(i64) -> Option<i64>> = match op {
            UnaryOp::Neg => Some(i64::checked_neg),
            UnaryOp::Abs => Some(i64::checked_abs),
            UnaryOp::Sign => Some(|v| Some(v.signum())),
            UnaryOp::Relu => Some(|v| Some(v.max(0))),
            UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round => Some(Some),
            _ => None,
        };
        if let Some(f) = f {
            return one_ints(host_map(&[x], |v| f(v[0]))?);
        }
    }
    one(c.tensor(a, 0)?.unary(op)?)
}

/// A float function composed of kiln ops, on input 0. f16 runs in f32 and rounds once at the
/// end, so that a composition does not round after every step.
fn float_fn(c: &Ctx<'_>, a: &[Value], f: impl Fn(&Tensor) -> Result<Tensor>) -> Outputs {
    let x = c.tensor(a, 0)?;
    one(in_f32(&x, f)?)
}

/// `f(x)`, computed in f32 when `x` is f16 (or an integer tensor) and cast back to its dtype.
fn in_f32(x: &Tensor, f: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    let dt = x.dtype();
    let wd = super::work_dtype(dt);
    if wd == dt {
        f(x)
    } else {
        f(&x.cast(wd)?)?.cast(dt)
    }
}

// ------------------------------------------------------------------ host integers

/// Host elementwise map over broadcast operands (ONNX's multidirectional rule); `f` returns
/// `None` for an overflow or a division by zero.
fn host_map(xs: &[&Ints], f: impl Fn(&[i64]) -> Option<i64>) -> Result<Ints> {
    for x in xs {
        if x.data.len() != x.dims.iter().product::<usize>() {
            return Err(Error::invalid(
                "onnx",
                format!(
                    "host value of shape {:?} holds {} values",
                    x.dims,
                    x.data.len()
                ),
            ));
        }
    }
    let shapes: Vec<&[usize]> = xs.iter().map(|x| &x.dims[..]).collect();
    let (dims, offsets) = super::broadcast_offsets(&shapes)?;
    let n: usize = dims.iter().product();
    let mut args = alloc::vec![0i64; xs.len()];
    let mut data = Vec::with_capacity(n);
    for i in 0..n {
        for ((arg, x), at) in args.iter_mut().zip(xs).zip(&offsets) {
            *arg = x.data[at[i]];
        }
        data.push(f(&args).ok_or_else(|| {
            Error::invalid("onnx", "integer arithmetic overflows or divides by zero")
        })?);
    }
    Ok(Ints {
        dims,
        data,
        bool: false,
    })
}

/// Host binary arithmetic with broadcasting.
fn host_binary(x: &Ints, y: &Ints, f: impl Fn(i64, i64) -> Option<i64>) -> Result<Ints> {
    host_map(&[x, y], |v| f(v[0], v[1]))
}

/// The result as a host bool value.
fn host_bool(mut i: Ints) -> Ints {
    i.bool = true;
    i
}

/// Integer power as NumPy computes it (a negative exponent is an error there too).
fn int_pow(b: i64, e: i64) -> Option<i64> {
    b.checked_pow(u32::try_from(e).ok()?)
}

/// Integer remainder: with the dividend's sign (`fmod`) or the divisor's (Python's `%`).
fn int_mod(x: i64, y: i64, fmod: bool) -> Option<i64> {
    let r = x.checked_rem(y)?;
    Some(if !fmod && r != 0 && (r < 0) != (y < 0) {
        r + y
    } else {
        r
    })
}

// ------------------------------------------------------------------ operand kinds

/// Host integers as a device tensor of `dtype`.
fn ints_as(device: &Device, i: &Ints, dtype: DType) -> Result<Tensor> {
    let shape = Shape::from(i.dims.clone());
    let data = match dtype {
        DType::I32 => TensorData::new(i.to_i32("host integers")?, shape)?,
        DType::Bool => {
            let v: Vec<u8> = i.data.iter().map(|&v| u8::from(v != 0)).collect();
            TensorData::from_bytes(v, DType::Bool, shape)?
        }
        _ => {
            let v: Vec<f64> = i.data.iter().map(|&v| v as f64).collect();
            TensorData::new(v, shape)?.convert(dtype)
        }
    };
    Tensor::from_data(&data, device)
}

/// A value as a device tensor of `dtype`.
fn as_dtype(c: &Ctx<'_>, v: &Value, dtype: DType) -> Result<Tensor> {
    match v {
        Value::Tensor(t) => t.cast(dtype),
        Value::Ints(i) => ints_as(c.device, i, dtype),
        other => other.tensor(c.device, "an input"),
    }
}

/// The dtype operands of different kinds meet in: the first float tensor's, else the first
/// integer tensor's, else bool when every operand is bool, else i32.
fn common_dtype(vals: &[&Value]) -> DType {
    let dts: Vec<DType> = vals
        .iter()
        .filter_map(|v| match v {
            Value::Tensor(t) => Some(t.dtype()),
            _ => None,
        })
        .collect();
    if let Some(&d) = dts.iter().find(|d| d.is_float()) {
        return d;
    }
    if let Some(&d) = dts.iter().find(|d| d.is_int()) {
        return d;
    }
    let all_bool = vals.iter().all(|v| match v {
        Value::Tensor(t) => t.dtype() == DType::Bool,
        Value::Ints(i) => i.bool,
        _ => true,
    });
    if all_bool { DType::Bool } else { DType::I32 }
}

/// The operands as device tensors of one dtype ([`common_dtype`]).
fn unify(c: &Ctx<'_>, vals: &[&Value]) -> Result<Vec<Tensor>> {
    let dt = common_dtype(vals);
    vals.iter().map(|v| as_dtype(c, v, dt)).collect()
}

/// Bool as i32 (0/1): kiln's arithmetic and comparisons take numbers only.
fn numeric(t: Tensor) -> Result<Tensor> {
    if t.dtype() == DType::Bool {
        t.cast(DType::I32)
    } else {
        Ok(t)
    }
}

/// Two operands unified and numeric.
fn numeric_pair(c: &Ctx<'_>, a: &[Value]) -> Result<(Tensor, Tensor)> {
    let mut t = unify(c, &[c.arg(a, 0)?, c.arg(a, 1)?])?.into_iter();
    match (t.next(), t.next()) {
        (Some(x), Some(y)) => Ok((numeric(x)?, numeric(y)?)),
        _ => Err(Error::invalid("onnx", "expects two inputs")),
    }
}

// ------------------------------------------------------------------ arithmetic

/// Before opset 7, `broadcast = 1` with an `axis` aligns input 1's dimensions at `axis` of
/// input 0 instead of at its end: the operands with input 1 reshaped to NumPy's rule.
fn legacy_broadcast(c: &Ctx<'_>, a: &[Value]) -> Result<Vec<Value>> {
    let axis = c.node.attr_int("axis").map_err(crate::model::onnx_err)?;
    let (Some(axis), true) = (axis, c.opset < 7 && c.int("broadcast", 0)? == 1) else {
        return Ok(a.to_vec());
    };
    let (rank, yd) = (c.arg(a, 0)?.dims().len(), c.arg(a, 1)?.dims());
    let at = super::axis(axis, rank)?;
    if at + yd.len() > rank {
        return Err(Error::shape(
            "onnx",
            format!("input 1 of shape {yd:?} does not fit rank {rank} at axis {axis}"),
        ));
    }
    let mut dims = alloc::vec![1; at];
    dims.extend(&yd);
    dims.resize(rank, 1);
    let mut v = a.to_vec();
    v[1] = match &v[1] {
        Value::Tensor(t) => Value::Tensor(t.reshape(dims)?),
        Value::Ints(i) => Value::Ints(Ints { dims, ..i.clone() }),
        other => other.clone(),
    };
    Ok(v)
}

fn binary(c: &Ctx<'_>, a: &[Value], op: BinaryOp) -> Outputs {
    let a = &legacy_broadcast(c, a)?;
    let (x, y) = (c.arg(a, 0)?, c.arg(a, 1)?);
    if let (Value::Ints(p), Value::Ints(q)) = (x, y) {
        return one_ints(host_binary(p, q, host_op(op))?);
    }
    if op == BinaryOp::Pow {
        return pow(c, x, y);
    }
    let (x, y) = numeric_pair(c, a)?;
    one(x.binary(op, &y)?)
}

/// The host version of a binary op (integer division truncates, as ONNX's does).
fn host_op(op: BinaryOp) -> fn(i64, i64) -> Option<i64> {
    match op {
        BinaryOp::Add => i64::checked_add,
        BinaryOp::Sub => i64::checked_sub,
        BinaryOp::Mul => i64::checked_mul,
        BinaryOp::Div => i64::checked_div,
        BinaryOp::Pow => int_pow,
        BinaryOp::Max => |p, q| Some(p.max(q)),
        BinaryOp::Min => |p, q| Some(p.min(q)),
    }
}

/// ONNX Pow: the result has the base's type, whatever the exponent's. An integer base is
/// raised in floats; an integral exponent's result is rounded (exact powers of integers)
/// before the cast back, a fractional one's truncated as a cast does.
fn pow(c: &Ctx<'_>, x: &Value, y: &Value) -> Outputs {
    let base = match x {
        Value::Tensor(t) => t.dtype(),
        _ => DType::I32,
    };
    if base.is_float() {
        let b = as_dtype(c, x, base)?;
        return one(b.pow(&as_dtype(c, y, base)?)?);
    }
    let f = if c.device.backend().supports(DType::F64) {
        DType::F64
    } else {
        DType::F32
    };
    let (b, e) = (as_dtype(c, x, f)?, as_dtype(c, y, f)?);
    let p = b.pow(&e)?;
    let integral = e.floor()?.eq(&e)?;
    one(integral.where_cond(&p.round()?, &p)?.cast(base)?)
}

/// ONNX Mod: `fmod = 1` takes the dividend's sign (C fmod), `fmod = 0` the divisor's.
fn modulo(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let fmod = c.int("fmod", 0)? != 0;
    if let (Value::Ints(p), Value::Ints(q)) = (c.arg(a, 0)?, c.arg(a, 1)?) {
        return one_ints(host_binary(p, q, |x, y| int_mod(x, y, fmod))?);
    }
    let (x, y) = numeric_pair(c, a)?;
    if x.dtype().is_float() {
        let r = in_f32(&x, |x| {
            let y = y.cast(x.dtype())?;
            let q = x.div(&y)?;
            let whole = if fmod {
                // truncation toward zero
                q.lt(&q.scalar_like(0.0)?)?
                    .where_cond(&q.ceil()?, &q.floor()?)?
            } else {
                q.floor()?
            };
            x.sub(&y.mul(&whole)?)
        })?;
        return one(r);
    }
    // integer division truncates, so this is the remainder with the dividend's sign
    let r = x.sub(&y.mul(&x.div(&y)?)?)?;
    if fmod {
        return one(r);
    }
    let zero = r.scalar_like(0.0)?;
    let sign_differs = r
        .lt(&zero)?
        .cast(DType::I32)?
        .sub(&y.lt(&zero)?.cast(DType::I32)?)?;
    let fix = sign_differs
        .mul(&r.ne(&zero)?.cast(DType::I32)?)?
        .ne(&sign_differs.scalar_like(0.0)?)?;
    one(fix.where_cond(&r.add(&y)?, &r)?)
}

/// Max, Min, Sum: variadic and broadcasting.
fn variadic(c: &Ctx<'_>, a: &[Value], op: BinaryOp) -> Outputs {
    let vals: Vec<&Value> = a.iter().filter(|v| v.is_present()).collect();
    let Some((first, rest)) = vals.split_first() else {
        return Err(Error::invalid("onnx", "expects at least one input"));
    };
    if rest.is_empty() {
        return Ok(alloc::vec![(*first).clone()]);
    }
    let host: Option<Vec<&Ints>> = vals
        .iter()
        .map(|v| match v {
            Value::Ints(i) => Some(i),
            _ => None,
        })
        .collect();
    if let Some(host) = host {
        let f = host_op(op);
        let mut acc = host[0].clone();
        for i in &host[1..] {
            acc = host_binary(&acc, i, f)?;
        }
        return one_ints(acc);
    }
    let ts = unify(c, &vals)?;
    let mut acc = numeric(ts[0].clone())?;
    for t in &ts[1..] {
        acc = acc.binary(op, &numeric(t.clone())?)?;
    }
    one(acc)
}

/// Mean: the variadic sum over the input count.
fn mean(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let n = a.iter().filter(|v| v.is_present()).count();
    let sum = variadic(c, a, BinaryOp::Add)?;
    let Some(sum) = sum.first() else {
        return Err(Error::invalid("onnx", "Mean has no result"));
    };
    let sum = sum.tensor(c.device, "sum")?;
    one(sum.div_scalar(n as f64)?)
}

fn compare(c: &Ctx<'_>, a: &[Value], op: CmpOp) -> Outputs {
    let a = &legacy_broadcast(c, a)?;
    if let (Value::Strings(x), Value::Strings(y), CmpOp::Eq) = (c.arg(a, 0)?, c.arg(a, 1)?, op) {
        return one_ints(super::strings::equal(x, y)?);
    }
    if let (Value::Ints(x), Value::Ints(y)) = (c.arg(a, 0)?, c.arg(a, 1)?) {
        let f = move |p: i64, q: i64| {
            Some(i64::from(match op {
                CmpOp::Eq => p == q,
                CmpOp::Ne => p != q,
                CmpOp::Lt => p < q,
                CmpOp::Le => p <= q,
                CmpOp::Gt => p > q,
                CmpOp::Ge => p >= q,
            }))
        };
        return one_ints(host_bool(host_binary(x, y, f)?));
    }
    let (x, y) = numeric_pair(c, a)?;
    one(x.compare(op, &y)?)
}

// ------------------------------------------------------------------ logic

#[derive(Clone, Copy)]
enum Logic {
    And,
    Or,
    Xor,
}

/// A value as 0/1 i32 (nonzero is true).
fn zero_one(t: Tensor) -> Result<Tensor> {
    if t.dtype() == DType::Bool {
        t.cast(DType::I32)
    } else {
        t.ne(&t.scalar_like(0.0)?)?.cast(DType::I32)
    }
}

/// And, Or, Xor on bools, broadcasting.
fn logical(c: &Ctx<'_>, a: &[Value], op: Logic) -> Outputs {
    let a = &legacy_broadcast(c, a)?;
    if let (Value::Ints(x), Value::Ints(y)) = (c.arg(a, 0)?, c.arg(a, 1)?) {
        let f = move |p: i64, q: i64| {
            let (p, q) = (p != 0, q != 0);
            Some(i64::from(match op {
                Logic::And => p && q,
                Logic::Or => p || q,
                Logic::Xor => p != q,
            }))
        };
        return one_ints(host_bool(host_binary(x, y, f)?));
    }
    let (x, y) = (zero_one(c.tensor(a, 0)?)?, zero_one(c.tensor(a, 1)?)?);
    let r = match op {
        Logic::And => x.minimum(&y)?.ne(&x.scalar_like(0.0)?)?,
        Logic::Or => x.maximum(&y)?.ne(&x.scalar_like(0.0)?)?,
        Logic::Xor => x.ne(&y)?,
    };
    one(r)
}

fn not(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    if let Value::Ints(x) = c.arg(a, 0)? {
        return one_ints(host_bool(host_map(&[x], |v| Some(i64::from(v[0] == 0)))?));
    }
    let x = zero_one(c.tensor(a, 0)?)?;
    one(x.eq(&x.scalar_like(0.0)?)?)
}

/// Bitwise ops: host integers only (kiln has no bitwise device ops). And, Or and Xor of the
/// host's sign- or zero-extended values are exact for every ONNX integer width.
fn bitwise(c: &Ctx<'_>, a: &[Value], f: fn(i64, i64) -> Option<i64>) -> Outputs {
    match (c.arg(a, 0)?, c.arg(a, 1)?) {
        (Value::Ints(x), Value::Ints(y)) => one_ints(host_binary(x, y, f)?),
        (x, y) => Err(c.unsupported(format!(
            "bitwise op on device tensors ({}, {})",
            x.describe(),
            y.describe()
        ))),
    }
}

/// BitwiseNot on host integers. Signed values are sign-extended on the host, so `!v` is exact
/// for every signed width; unsigned ones are zero-extended, so their NOT keeps only the type's
/// bits (uint8: NOT 5 = 250), and the width is the type the graph declares. Without a declared
/// type, a negative value says signed; values that are all non-negative could be unsigned of
/// any width, an error. uint64 is an error too: its NOT of a host value is above i64's range.
fn bitwise_not(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    use DataType as D;
    let x = match c.arg(a, 0)? {
        Value::Ints(x) if !x.bool => x,
        x => {
            return Err(c.unsupported(format!(
                "BitwiseNot of {} (expects integers known on the host)",
                x.describe()
            )));
        }
    };
    let bits = match c.input_type(0) {
        Some(D::Int8 | D::Int16 | D::Int32 | D::Int64) => None,
        Some(D::Uint8) => Some(8),
        Some(D::Uint16) => Some(16),
        Some(D::Uint32) => Some(32),
        Some(t) => {
            return Err(c.unsupported(format!(
                "BitwiseNot of type {} (expects an integer type of at most 32 bits, or int64)",
                t.as_str_name()
            )));
        }
        None if x.data.is_empty() || x.data.iter().any(|&v| v < 0) => None,
        None => {
            return Err(c.unsupported(
                "BitwiseNot of non-negative integers of no declared type (signed or unsigned, and how wide, decides the result)",
            ));
        }
    };
    one_ints(host_map(&[x], |v| match bits {
        None => Some(!v[0]),
        Some(b) => Some(!v[0] & ((1i64 << b) - 1)),
    })?)
}

/// BitShift (unsigned types) on host integers. Host values do not carry their width, so a
/// left shift whose result does not fit uint8, the narrowest type, might have wrapped and is
/// reported as unsupported.
fn bit_shift(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let left = match c.string("direction", "")?.as_str() {
        "LEFT" => true,
        "RIGHT" => false,
        d => return Err(c.unsupported(format!("BitShift direction '{d}'"))),
    };
    let (Value::Ints(x), Value::Ints(y)) = (c.arg(a, 0)?, c.arg(a, 1)?) else {
        return Err(c.unsupported("BitShift on device tensors"));
    };
    let r = host_binary(x, y, |p, q| {
        let q = u32::try_from(q).ok().filter(|&q| q < 64)?;
        if left {
            p.checked_shl(q)
        } else {
            p.checked_shr(q)
        }
    })?;
    if left && r.data.iter().any(|&v| !(0..256).contains(&v)) {
        return Err(c.unsupported(
            "BitShift LEFT with a result above 255 (the value's integer width is unknown)",
        ));
    }
    one_ints(r)
}

fn is_nan(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    if let Value::Ints(x) = c.arg(a, 0)? {
        return one_ints(host_bool(host_map(&[x], |_| Some(0))?));
    }
    let x = numeric(c.tensor(a, 0)?)?;
    one(x.ne(&x)?)
}

/// IsInf: `detect_negative` / `detect_positive` choose which infinities count.
fn is_inf(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let (neg, pos) = (
        c.int("detect_negative", 1)? != 0,
        c.int("detect_positive", 1)? != 0,
    );
    if let Value::Ints(x) = c.arg(a, 0)? {
        return one_ints(host_bool(host_map(&[x], |_| Some(0))?));
    }
    let x = numeric(c.tensor(a, 0)?)?;
    if !x.dtype().is_float() {
        return one(x.ne(&x)?);
    }
    let inf = x.scalar_like(f64::INFINITY)?;
    one(match (neg, pos) {
        (true, true) => x.abs()?.eq(&inf)?,
        (false, true) => x.eq(&inf)?,
        (true, false) => x.eq(&inf.neg()?)?,
        // x < x is false everywhere, NaN included
        (false, false) => x.lt(&x)?,
    })
}

fn where_(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let (cond, x, y) = (c.arg(a, 0)?, c.arg(a, 1)?, c.arg(a, 2)?);
    if let (Value::Ints(k), Value::Ints(p), Value::Ints(q)) = (cond, x, y) {
        let mut r = host_map(&[k, p, q], |v| Some(if v[0] != 0 { v[1] } else { v[2] }))?;
        r.bool = p.bool && q.bool;
        return one_ints(r);
    }
    let cond = match cond {
        Value::Ints(k) => ints_as(c.device, k, DType::Bool)?,
        v => {
            let t = v.tensor(c.device, "condition")?;
            if t.dtype() == DType::Bool {
                t
            } else {
                t.ne(&t.scalar_like(0.0)?)?
            }
        }
    };
    let xy = unify(c, &[x, y])?;
    match xy.as_slice() {
        [x, y] => one(cond.where_cond(x, y)?),
        _ => Err(Error::invalid("onnx", "Where expects three inputs")),
    }
}

// ------------------------------------------------------------------ casts

/// Cast to the ONNX type `to`.
fn cast(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let to = c.int("to", 0)?;
    let to = i32::try_from(to)
        .ok()
        .and_then(|t| DataType::try_from(t).ok())
        .ok_or_else(|| c.unsupported(format!("Cast to type {to}")))?;
    cast_to(c, c.arg(a, 0)?, to)
}

/// CastLike: cast to the type of input 1. A host integer or i32 tensor stands for any ONNX
/// integer type, treated as int64 (no wrapping); a narrow value names its type.
fn cast_like(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let to = match c.arg(a, 1)? {
        Value::Narrow { ty, .. } => *ty,
        Value::Ints(i) if i.bool => DataType::Bool,
        Value::Ints(_) => DataType::Int64,
        Value::Tensor(t) => match t.dtype() {
            DType::F32 => DataType::Float,
            DType::F64 => DataType::Double,
            DType::F16 => DataType::Float16,
            DType::I32 => DataType::Int64,
            DType::U32 => DataType::Uint32,
            DType::Bool => DataType::Bool,
        },
        other => {
            return Err(Error::invalid(
                "onnx",
                format!(
                    "CastLike: expects a target tensor, gets {}",
                    other.describe()
                ),
            ));
        }
    };
    cast_to(c, c.arg(a, 0)?, to)
}

/// ONNX Cast: host integers cast to an integer type stay on the host (wrapping into the
/// type's range, as NumPy's `astype` does); everything else is a kiln cast (floats to
/// integers truncate toward zero). int64 and the narrow integers live in i32 on devices.
fn cast_to(c: &Ctx<'_>, x: &Value, to: DataType) -> Outputs {
    use DataType as D;
    if narrow::is_narrow(to) {
        return cast_narrow(c, x, to);
    }
    let dtype = kiln_dtype(c.device, to)
        .ok_or_else(|| c.unsupported(format!("Cast to {}", to.as_str_name())))?;
    let wrap: Option<fn(i64) -> i64> = match to {
        D::Int8 => Some(|v| i64::from(v as i8)),
        D::Uint8 => Some(|v| i64::from(v as u8)),
        D::Int16 => Some(|v| i64::from(v as i16)),
        D::Uint16 => Some(|v| i64::from(v as u16)),
        D::Int32 => Some(|v| i64::from(v as i32)),
        D::Uint32 => Some(|v| i64::from(v as u32)),
        D::Int64 | D::Uint64 => Some(|v| v),
        D::Bool => Some(|v| i64::from(v != 0)),
        _ => None,
    };
    match (x, wrap) {
        (Value::Ints(i), Some(w)) => one_ints(Ints {
            dims: i.dims.clone(),
            data: i.data.iter().map(|&v| w(v)).collect(),
            bool: to == D::Bool,
        }),
        (Value::Ints(i), None) => one(ints_as(c.device, i, dtype)?),
        (Value::Tensor(t) | Value::Narrow { tensor: t, .. }, _) => one(t.cast(dtype)?),
        (other, _) => Err(Error::invalid(
            "onnx",
            format!("Cast: expects a tensor, gets {}", other.describe()),
        )),
    }
}

/// Cast to a narrow type ([`narrow::round`]), on the host: the input is read back, rounded
/// as the `saturate` and `round_mode` attributes say, and uploaded as a [`Value::Narrow`].
fn cast_narrow(c: &Ctx<'_>, x: &Value, to: DataType) -> Outputs {
    let saturate = c.int("saturate", 1)? != 0;
    let mode = narrow::RoundMode::parse(&c.string("round_mode", "up")?)
        .map_err(|e| e.context("attribute round_mode"))?;
    Ok(alloc::vec![super::to_narrow(
        c.device, x, to, saturate, mode
    )?])
}

/// The width in bits of ONNX type `t` as BitCast sees it (`None` for the types it does not
/// reinterpret: narrow types, strings).
fn bit_width(t: DataType) -> Option<u32> {
    use DataType as D;
    Some(match t {
        D::Bool | D::Int8 | D::Uint8 => 8,
        D::Float16 | D::Int16 | D::Uint16 => 16,
        D::Float | D::Int32 | D::Uint32 => 32,
        D::Double | D::Int64 | D::Uint64 => 64,
        _ => return None,
    })
}

/// The ONNX type a value stands for: what the graph declares for input `i`, else what its
/// kiln dtype says (an i32 tensor or host integers as int32 / int64).
fn onnx_type(c: &Ctx<'_>, v: &Value, i: usize) -> Option<DataType> {
    if let Some(t) = c.input_type(i) {
        return Some(t);
    }
    Some(match v {
        Value::Ints(x) if x.bool => DataType::Bool,
        Value::Ints(_) => DataType::Int64,
        Value::Tensor(t) => match t.dtype() {
            DType::F32 => DataType::Float,
            DType::F64 => DataType::Double,
            DType::F16 => DataType::Float16,
            DType::I32 => DataType::Int32,
            DType::U32 => DataType::Uint32,
            DType::Bool => DataType::Bool,
        },
        _ => return None,
    })
}

/// BitCast: each element's bits reinterpreted as type `to` of the same width, on the host
/// (a device tensor is read back). Integer results are host integers; float results tensors.
fn bit_cast(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    use DataType as D;
    let x = c.arg(a, 0)?;
    let to = c.int("to", 0)?;
    let to = i32::try_from(to)
        .ok()
        .and_then(|t| DataType::try_from(t).ok())
        .ok_or_else(|| c.unsupported(format!("BitCast to type {to}")))?;
    let from = onnx_type(c, x, 0).ok_or_else(|| {
        Error::invalid(
            "onnx",
            format!("BitCast: expects a numeric tensor, gets {}", x.describe()),
        )
    })?;
    let (Some(wf), Some(wt)) = (bit_width(from), bit_width(to)) else {
        return Err(c.unsupported(format!(
            "BitCast from {} to {}",
            from.as_str_name(),
            to.as_str_name()
        )));
    };
    if wf != wt {
        return Err(Error::invalid(
            "onnx",
            format!(
                "BitCast: {} is {wf} bits, {} is {wt}",
                from.as_str_name(),
                to.as_str_name()
            ),
        ));
    }
    let mask = if wf == 64 { u64::MAX } else { (1u64 << wf) - 1 };
    // every element's bits
    let bits: Vec<u64> = match (x, from) {
        (Value::Ints(i), _) => i.data.iter().map(|&v| v as u64 & mask).collect(),
        (_, D::Float) => host_values(x, "BitCast")?
            .iter()
            .map(|&v| u64::from((v as f32).to_bits()))
            .collect(),
        (_, D::Double) => host_values(x, "BitCast")?
            .iter()
            .map(|&v| v.to_bits())
            .collect(),
        (_, D::Float16) => host_values(x, "BitCast")?
            .iter()
            .map(|&v| u64::from(half::f16::from_f64(v).to_bits()))
            .collect(),
        _ => host_values(x, "BitCast")?
            .iter()
            .map(|&v| v as i64 as u64 & mask)
            .collect(),
    };
    let dims = x.dims();
    let floats = |v: Vec<f64>| -> Outputs {
        let dtype = kiln_dtype(c.device, to).unwrap_or(DType::F32);
        let data = TensorData::new(v, Shape::from(dims.clone()))?.convert(dtype);
        one(Tensor::from_data(&data, c.device)?)
    };
    match to {
        D::Float => floats(
            bits.iter()
                .map(|&b| f64::from(f32::from_bits(b as u32)))
                .collect(),
        ),
        D::Double => floats(bits.iter().map(|&b| f64::from_bits(b)).collect()),
        D::Float16 => floats(
            bits.iter()
                .map(|&b| half::f16::from_bits(b as u16).to_f64())
                .collect(),
        ),
        _ => {
            let signed = matches!(to, D::Int8 | D::Int16 | D::Int32 | D::Int64);
            let data = bits
                .iter()
                .map(|&b| {
                    if signed {
                        // sign-extended from bit `wt - 1`
                        let shift = 64 - wt;
                        Ok(((b << shift) as i64) >> shift)
                    } else {
                        i64::try_from(b).map_err(|_| {
                            Error::unsupported(
                                "onnx",
                                format!("BitCast: uint64 value {b} is above i64's range"),
                            )
                        })
                    }
                })
                .collect::<Result<Vec<i64>>>()?;
            if to == D::Bool && data.iter().any(|&v| v > 1) {
                return Err(Error::invalid(
                    "onnx",
                    "BitCast to BOOL: a byte other than 0 or 1",
                ));
            }
            one_ints(Ints {
                dims,
                data,
                bool: to == D::Bool,
            })
        }
    }
}

// ------------------------------------------------------------------ clip and activations

/// Clip: bounds are attributes before opset 11 and optional inputs from it on; `min(max(x,
/// lo), hi)`, so `hi` wins where `lo > hi` (as NumPy's clip).
fn clip(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    if c.opset < 11 {
        let x = c.tensor(a, 0)?;
        let (lo, hi) = (
            c.float("min", f32::NEG_INFINITY)?,
            c.float("max", f32::INFINITY)?,
        );
        let x = if lo.is_finite() {
            x.maximum_scalar(f64::from(lo))?
        } else {
            x
        };
        let x = if hi.is_finite() {
            x.minimum_scalar(f64::from(hi))?
        } else {
            x
        };
        return one(x);
    }
    let x = c.arg(a, 0)?;
    let (lo, hi) = (c.optional(a, 1), c.optional(a, 2));
    let bounds: Vec<&Value> = [lo, hi].into_iter().flatten().collect();
    if let Value::Ints(xi) = x
        && bounds.iter().all(|b| matches!(b, Value::Ints(_)))
    {
        let mut r = xi.clone();
        if let Some(Value::Ints(l)) = lo {
            r = host_binary(&r, l, |p, q| Some(p.max(q)))?;
        }
        if let Some(Value::Ints(h)) = hi {
            r = host_binary(&r, h, |p, q| Some(p.min(q)))?;
        }
        return one_ints(r);
    }
    let mut vals = alloc::vec![x];
    vals.extend(&bounds);
    let ts = unify(c, &vals)?;
    let mut ts = ts.into_iter();
    let mut r = ts
        .next()
        .ok_or_else(|| Error::invalid("onnx", "Clip has no input"))?;
    if lo.is_some()
        && let Some(l) = ts.next()
    {
        r = r.maximum(&l)?;
    }
    if hi.is_some()
        && let Some(h) = ts.next()
    {
        r = r.minimum(&h)?;
    }
    one(r)
}

/// `x < 0` as a bool tensor.
fn negative(x: &Tensor) -> Result<Tensor> {
    x.lt(&x.scalar_like(0.0)?)
}

fn leaky_relu(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let alpha = f64::from(c.float("alpha", 0.01)?);
    let x = c.tensor(a, 0)?;
    one(negative(&x)?.where_cond(&x.mul_scalar(alpha)?, &x)?)
}

/// PRelu: `slope * x` where `x < 0`, the slope broadcasting to `x` (before opset 7, a slope
/// of shape `[C]` is per channel, axis 1).
fn prelu(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let (x, slope) = numeric_pair(c, a)?;
    let slope = match (x.dims(), slope.dims()) {
        (&[_, ch, ref rest @ ..], &[n]) if c.opset < 7 && n == ch && n > 1 => {
            let mut dims = alloc::vec![n];
            dims.extend(rest.iter().map(|_| 1));
            slope.reshape(dims)?
        }
        _ => slope,
    };
    one(negative(&x)?.where_cond(&x.mul(&slope)?, &x)?)
}

/// ThresholdedRelu: `x` where `x > alpha`, else 0.
fn thresholded_relu(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let alpha = f64::from(c.float("alpha", 1.0)?);
    let x = c.tensor(a, 0)?;
    let above = x.gt(&x.scalar_like(alpha)?)?;
    one(above.where_cond(&x, &x.scalar_like(0.0)?)?)
}

/// Elu: `alpha * (e^x - 1)` where `x < 0`.
fn elu(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let alpha = f64::from(c.float("alpha", 1.0)?);
    float_fn(c, a, |x| {
        let e = x.exp()?.add_scalar(-1.0)?.mul_scalar(alpha)?;
        negative(x)?.where_cond(&e, x)
    })
}

/// Selu: `gamma * x` for `x > 0`, `gamma * alpha * (e^x - 1)` otherwise.
fn selu(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let alpha = f64::from(c.float("alpha", 1.673_263_2)?);
    let gamma = f64::from(c.float("gamma", 1.050_701)?);
    float_fn(c, a, |x| {
        let e = x.exp()?.add_scalar(-1.0)?.mul_scalar(alpha)?;
        let pos = x.gt(&x.scalar_like(0.0)?)?;
        pos.where_cond(x, &e)?.mul_scalar(gamma)
    })
}

/// Celu: `max(0, x) + min(0, alpha * (e^(x/alpha) - 1))`.
fn celu(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let alpha = f64::from(c.float("alpha", 1.0)?);
    float_fn(c, a, |x| {
        let e = x
            .div_scalar(alpha)?
            .exp()?
            .add_scalar(-1.0)?
            .mul_scalar(alpha)?;
        x.relu()?.add(&e.minimum_scalar(0.0)?)
    })
}

/// `log(1 + e^x)` as `max(x, 0) + log(1 + e^-|x|)`, which does not overflow.
pub(super) fn softplus(x: &Tensor) -> Result<Tensor> {
    x.relu()?
        .add(&x.abs()?.neg()?.exp()?.add_scalar(1.0)?.log()?)
}

/// HardSigmoid: `clamp(alpha * x + beta, 0, 1)`.
fn hard_sigmoid(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let alpha = f64::from(c.float("alpha", 0.2)?);
    let beta = f64::from(c.float("beta", 0.5)?);
    float_fn(c, a, |x| {
        x.mul_scalar(alpha)?.add_scalar(beta)?.clamp(0.0, 1.0)
    })
}

/// Gelu: exact (`approximate = "none"`, kiln's erf form) or the tanh approximation.
fn gelu(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    match c.string("approximate", "none")?.as_str() {
        "none" => float_fn(c, a, Tensor::gelu),
        "tanh" => float_fn(c, a, |x| {
            let inner = x
                .mul(x)?
                .mul(x)?
                .mul_scalar(0.044715)?
                .add(x)?
                .mul_scalar(FRAC_2_SQRT_PI * FRAC_1_SQRT_2)?;
            x.mul_scalar(0.5)?.mul(&inner.tanh()?.add_scalar(1.0)?)
        }),
        other => Err(c.unsupported(format!("Gelu approximate '{other}'"))),
    }
}

/// Shrink: `x + bias` below `-lambd`, `x - bias` above `lambd`, else 0.
fn shrink(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let lambd = f64::from(c.float("lambd", 0.5)?);
    let bias = f64::from(c.float("bias", 0.0)?);
    let x = c.tensor(a, 0)?;
    let below = x.lt(&x.scalar_like(-lambd)?)?;
    let above = x.gt(&x.scalar_like(lambd)?)?;
    let zero = x.scalar_like(0.0)?;
    let hi = above.where_cond(&x.sub_scalar(bias)?, &zero)?;
    one(below.where_cond(&x.add_scalar(bias)?, &hi)?)
}

/// Swish: `x * sigmoid(alpha * x)`.
fn swish(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let alpha = f64::from(c.float("alpha", 1.0)?);
    float_fn(c, a, |x| swish_of(x, alpha))
}

/// `x * sigmoid(alpha * x)` (Swish, and the gate of SwiGLU).
pub(super) fn swish_of(x: &Tensor, alpha: f64) -> Result<Tensor> {
    x.mul(&x.mul_scalar(alpha)?.sigmoid()?)
}

// ------------------------------------------------------------------ inverse trig, hyperbolic

/// atan: `|x| > 1` reduces by `atan(a) = pi/2 - atan(1/a)`, the half-angle identity
/// `atan(r) = 2 atan(r / (1 + sqrt(1 + r^2)))` brings `r` under tan(pi/8), where Cephes'
/// atanf polynomial is accurate to about 1e-7 relative.
fn atan(x: &Tensor) -> Result<Tensor> {
    let a = x.abs()?;
    let big = a.gt(&a.scalar_like(1.0)?)?;
    let r = big.where_cond(&a.recip()?, &a)?;
    let t = r.div(&r.mul(&r)?.add_scalar(1.0)?.sqrt()?.add_scalar(1.0)?)?;
    let z = t.mul(&t)?;
    let p = z
        .mul_scalar(8.053_744_495_38e-2)?
        .add_scalar(-1.387_768_560_32e-1)?
        .mul(&z)?
        .add_scalar(1.997_771_064_78e-1)?
        .mul(&z)?
        .add_scalar(-3.333_294_915_39e-1)?
        .mul(&z)?
        .mul(&t)?
        .add(&t)?
        .mul_scalar(2.0)?;
    let y = big.where_cond(&p.neg()?.add_scalar(FRAC_PI_2)?, &p)?;
    y.mul(&x.sign()?)
}

/// asin(x) = atan(x / sqrt((1 - x)(1 + x))).
fn asin(x: &Tensor) -> Result<Tensor> {
    let one_minus = x.neg()?.add_scalar(1.0)?;
    let c = one_minus.mul(&x.add_scalar(1.0)?)?.sqrt()?;
    atan(&x.div(&c)?)
}

/// acos(x) = 2 atan(sqrt((1 - x) / (1 + x))), accurate near both ends.
fn acos(x: &Tensor) -> Result<Tensor> {
    let q = x.neg()?.add_scalar(1.0)?.div(&x.add_scalar(1.0)?)?;
    atan(&q.sqrt()?)?.mul_scalar(2.0)
}

fn sinh(x: &Tensor) -> Result<Tensor> {
    x.exp()?.sub(&x.neg()?.exp()?)?.mul_scalar(0.5)
}

fn cosh(x: &Tensor) -> Result<Tensor> {
    x.exp()?.add(&x.neg()?.exp()?)?.mul_scalar(0.5)
}

/// asinh(x) = sign(x) log(|x| + sqrt(x^2 + 1)) (odd, so no cancellation for negative x).
fn asinh(x: &Tensor) -> Result<Tensor> {
    let a = x.abs()?;
    let r = a.mul(&a)?.add_scalar(1.0)?.sqrt()?.add(&a)?.log()?;
    r.mul(&x.sign()?)
}

/// acosh(x) = log(x + sqrt((x - 1)(x + 1))).
fn acosh(x: &Tensor) -> Result<Tensor> {
    let s = x.add_scalar(-1.0)?.mul(&x.add_scalar(1.0)?)?.sqrt()?;
    x.add(&s)?.log()
}

/// atanh(x) = log((1 + x) / (1 - x)) / 2.
fn atanh(x: &Tensor) -> Result<Tensor> {
    let q = x.add_scalar(1.0)?.div(&x.neg()?.add_scalar(1.0)?)?;
    q.log()?.mul_scalar(0.5)
}

#[cfg(test)]
mod tests {
    //! The device paths the suites reach only through host integers: each against the host.
    use super::super::testing::A;
    use super::*;
    use crate::proto::NodeProto;

    fn node(ints: &[(&str, i64)]) -> NodeProto {
        let attrs = ints.iter().map(|&(n, i)| (n, A::I(i))).collect();
        super::super::testing::node("", attrs)
    }

    fn run(f: OpFn, node: &NodeProto, args: &[Value]) -> Value {
        super::super::run_alone(f, &Device::cpu(), 21, node, args)
            .unwrap()
            .remove(0)
    }

    fn ints(v: &[i64]) -> Ints {
        Ints::vector(v.to_vec())
    }

    fn dev(i: &Ints) -> Value {
        Value::Tensor(i.to_tensor(&Device::cpu(), "test").unwrap())
    }

    fn floats(v: &[f32]) -> Value {
        Value::Tensor(Tensor::from_slice(v, [v.len()], &Device::cpu()).unwrap())
    }

    fn values(v: &Value) -> Vec<f64> {
        match v {
            Value::Ints(i) => i.data.iter().map(|&x| x as f64).collect(),
            Value::Tensor(t) => t.to_data().unwrap().to_f64_vec(),
            _ => Vec::new(),
        }
    }

    fn op(name: &str) -> OpFn {
        OPS.iter().find(|(n, _)| *n == name).unwrap().1
    }

    #[test]
    fn device_paths_match_the_host() {
        let mut p = ints(&[0, 1, 0, 1]);
        let mut q = ints(&[0, 0, 1, 1]);
        p.bool = true;
        q.bool = true;
        let plain = node(&[]);
        for name in ["And", "Or", "Xor", "Equal"] {
            let host = run(
                op(name),
                &plain,
                &[Value::Ints(p.clone()), Value::Ints(q.clone())],
            );
            let device = run(op(name), &plain, &[dev(&p), dev(&q)]);
            let mixed = run(op(name), &plain, &[dev(&p), Value::Ints(q.clone())]);
            assert_eq!(values(&host), values(&device), "{name}");
            assert_eq!(values(&host), values(&mixed), "{name}");
        }
        let not_host = run(op("Not"), &plain, &[Value::Ints(p.clone())]);
        assert_eq!(
            values(&not_host),
            values(&run(op("Not"), &plain, &[dev(&p)]))
        );

        let (x, y) = (ints(&[-7, 7, -7, 7, 6, -6]), ints(&[3, 3, -3, -3, 3, 4]));
        for fmod in [0, 1] {
            let n = node(&[("fmod", fmod)]);
            let host = run(
                modulo,
                &n,
                &[Value::Ints(x.clone()), Value::Ints(y.clone())],
            );
            let device = run(modulo, &n, &[dev(&x), dev(&y)]);
            assert_eq!(values(&host), values(&device), "fmod {fmod}");
        }
        assert_eq!(
            values(&run(
                modulo,
                &node(&[("fmod", 0)]),
                &[Value::Ints(x.clone()), Value::Ints(y.clone())]
            )),
            [2.0, 1.0, -1.0, -2.0, 0.0, 2.0]
        );
        let fx = floats(&[-7.5, 7.5, -7.5, 7.5]);
        let fy = floats(&[2.0, 2.0, -2.0, -2.0]);
        let r = run(modulo, &node(&[("fmod", 1)]), &[fx.clone(), fy.clone()]);
        assert_eq!(values(&r), [-1.5, 1.5, -1.5, 1.5]);
        let r = run(modulo, &node(&[("fmod", 0)]), &[fx, fy]);
        assert_eq!(values(&r), [0.5, 1.5, -1.5, -0.5]);

        let base = ints(&[2, 3, -2]);
        let pow = op("Pow");
        let host = run(
            pow,
            &plain,
            &[Value::Ints(base.clone()), Value::Ints(ints(&[3, 3, 3]))],
        );
        let device = run(pow, &plain, &[dev(&base), floats(&[3.0, 3.0, 3.0])]);
        assert_eq!(values(&host), [8.0, 27.0, -8.0]);
        assert_eq!(values(&host), values(&device));
        let r = run(
            pow,
            &plain,
            &[floats(&[2.0, 0.5]), Value::Ints(ints(&[2, -1]))],
        );
        assert_eq!(values(&r), [4.0, 2.0]);
    }

    #[test]
    fn casts_and_mixed_kinds() {
        let cast = op("Cast");
        let to = |t: DataType| node(&[("to", t as i64)]);
        let r = run(cast, &to(DataType::Uint8), &[Value::Ints(ints(&[300, -1]))]);
        assert_eq!(values(&r), [44.0, 255.0]);
        let r = run(cast, &to(DataType::Int32), &[floats(&[-2.7, 2.7])]);
        assert_eq!(values(&r), [-2.0, 2.0]);
        let r = run(cast, &to(DataType::Bool), &[floats(&[0.0, -0.5])]);
        assert_eq!(values(&r), [0.0, 1.0]);
        let r = run(cast, &to(DataType::Float), &[Value::Ints(ints(&[1 << 40]))]);
        assert_eq!(values(&r), [(1u64 << 40) as f64]);
        let n = to(DataType::String);
        let e =
            super::super::run_alone(cast, &Device::cpu(), 21, &n, &[floats(&[1.0])]).unwrap_err();
        assert_eq!(e.kind(), kiln_core::ErrorKind::Unsupported);

        let mut cond = ints(&[1, 0]);
        cond.bool = true;
        let r = run(
            where_,
            &node(&[]),
            &[
                Value::Ints(cond),
                floats(&[1.5, 2.5]),
                Value::Ints(ints(&[7, 8])),
            ],
        );
        assert_eq!(values(&r), [1.5, 8.0]);
        let r = run(
            op("Add"),
            &node(&[]),
            &[Value::Ints(ints(&[1, 2])), floats(&[0.5, 0.5])],
        );
        assert_eq!(values(&r), [1.5, 2.5]);
        let r = run(
            op("Max"),
            &node(&[]),
            &[
                floats(&[1.0, 5.0]),
                Value::Ints(ints(&[3])),
                floats(&[0.0, 4.0]),
            ],
        );
        assert_eq!(values(&r), [3.0, 5.0]);
    }

    #[test]
    fn legacy_axis_broadcast() {
        let device = Device::cpu();
        let n = node(&[("broadcast", 1), ("axis", 1)]);
        let x = Tensor::from_slice(&[0.0f32; 12], [2, 3, 2], &device).unwrap();
        let y = [Value::Tensor(x), floats(&[1.0, 2.0, 3.0])];
        let add: OpFn = |c, a| binary(c, a, BinaryOp::Add);
        let r = super::super::run_alone(add, &device, 6, &n, &y)
            .unwrap()
            .remove(0);
        assert_eq!(r.dims(), [2, 3, 2]);
        assert_eq!(values(&r)[..6], [1.0, 1.0, 2.0, 2.0, 3.0, 3.0]);
    }

    #[test]
    fn inverse_trig_is_accurate() {
        extern crate std;
        let xs: Vec<f32> = (-20..=20).map(|i| i as f32 / 20.0).collect();
        let wide: Vec<f32> = xs.iter().map(|x| x * 50.0).collect();
        let check = |f: fn(&Tensor) -> Result<Tensor>, g: fn(f64) -> f64, xs: &[f32]| {
            let got = values(
                &one(f(&match floats(xs) {
                    Value::Tensor(t) => t,
                    _ => unreachable!(),
                })
                .unwrap())
                .unwrap()[0],
            );
            for (x, y) in xs.iter().zip(got) {
                let want = g(f64::from(*x));
                assert!(
                    (y - want).abs() <= 1e-6 + 1e-5 * want.abs(),
                    "{x}: {y} vs {want}"
                );
            }
        };
        check(atan, f64::atan, &wide);
        check(atan, f64::atan, &xs);
        check(asin, f64::asin, &xs);
        check(acos, f64::acos, &xs);
        check(atanh, f64::atanh, &xs[1..xs.len() - 1]);
        check(asinh, f64::asinh, &wide);
    }

    #[test]
    fn bitwise_not_keeps_an_unsigned_type_s_bits() {
        let mut n = node(&[]);
        n.input = alloc::vec!["x".into()];
        let not = |x: &[i64], t: Option<DataType>| {
            let types = t.map(|t| ("x".into(), t)).into_iter().collect();
            let x = Value::Ints(ints(x));
            super::super::run_typed(bitwise_not, &Device::cpu(), 18, &n, &types, &[x])
                .map(|mut o| values(&o.remove(0)))
        };
        let x = [0, 5, 255];
        assert_eq!(not(&x, Some(DataType::Uint8)).unwrap(), [255.0, 250.0, 0.0]);
        assert_eq!(
            not(&x, Some(DataType::Uint16)).unwrap(),
            [65535.0, 65530.0, 65280.0]
        );
        assert_eq!(
            not(&x, Some(DataType::Int32)).unwrap(),
            [-1.0, -6.0, -256.0]
        );
        assert!(not(&x, Some(DataType::Uint64)).is_err());
        // without a declared type: non-negative values could be of any width, a negative one
        // says signed
        assert!(not(&x, None).is_err());
        assert_eq!(not(&[-1, 5], None).unwrap(), [0.0, -6.0]);
    }
}
