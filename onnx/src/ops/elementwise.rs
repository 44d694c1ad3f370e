//! Elementwise ONNX ops: activations and math (kiln's unary table, or compositions of it),
//! broadcasting arithmetic and comparisons (on the host for host integers), `Where`, `Cast`,
//! `Clip`.

use super::{Ctx, OpFn, Outputs, one, one_ints};
use crate::value::{Ints, Value};
use alloc::format;
use alloc::vec::Vec;
use kiln_core::{BinaryOp, CmpOp, DType, Error, Result, UnaryOp};

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
    ("Add", |c, a| binary(c, a, BinaryOp::Add)),
    ("Sub", |c, a| binary(c, a, BinaryOp::Sub)),
    ("Mul", |c, a| binary(c, a, BinaryOp::Mul)),
    ("Div", |c, a| binary(c, a, BinaryOp::Div)),
    ("Pow", |c, a| binary(c, a, BinaryOp::Pow)),
    ("Equal", |c, a| compare(c, a, CmpOp::Eq)),
    ("Less", |c, a| compare(c, a, CmpOp::Lt)),
    ("LessOrEqual", |c, a| compare(c, a, CmpOp::Le)),
    ("Greater", |c, a| compare(c, a, CmpOp::Gt)),
    ("GreaterOrEqual", |c, a| compare(c, a, CmpOp::Ge)),
    ("Where", where_),
    ("LeakyRelu", leaky_relu),
];

fn identity(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    Ok(alloc::vec![c.arg(a, 0)?.clone()])
}

fn unary(c: &Ctx<'_>, a: &[Value], op: UnaryOp) -> Outputs {
    one(c.tensor(a, 0)?.unary(op)?)
}

/// Host arithmetic on integers, with NumPy broadcasting (ONNX's multidirectional rule).
fn host_binary(x: &Ints, y: &Ints, f: impl Fn(i64, i64) -> Option<i64>) -> Result<Ints> {
    let rank = x.dims.len().max(y.dims.len());
    let pad = |d: &[usize]| {
        let mut v = alloc::vec![1; rank - d.len()];
        v.extend_from_slice(d);
        v
    };
    let (xd, yd) = (pad(&x.dims), pad(&y.dims));
    let mut dims = Vec::with_capacity(rank);
    for (&a, &b) in xd.iter().zip(&yd) {
        if a != b && a != 1 && b != 1 {
            return Err(Error::shape(
                "onnx",
                format!("shapes {:?} and {:?} do not broadcast", x.dims, y.dims),
            ));
        }
        dims.push(if a == 1 { b } else { a });
    }
    let n: usize = dims.iter().product();
    let index = |d: &[usize], mut i: usize| {
        let (mut at, mut stride) = (0, 1);
        for k in (0..rank).rev() {
            let c = i % dims[k];
            i /= dims[k];
            if d[k] != 1 {
                at += c * stride;
            }
            stride *= d[k];
        }
        at
    };
    let data = (0..n)
        .map(|i| {
            f(x.data[index(&xd, i)], y.data[index(&yd, i)]).ok_or_else(|| {
                Error::invalid("onnx", "integer arithmetic overflows or divides by zero")
            })
        })
        .collect::<Result<Vec<i64>>>()?;
    Ok(Ints {
        dims,
        data,
        bool: false,
    })
}

fn binary(c: &Ctx<'_>, a: &[Value], op: BinaryOp) -> Outputs {
    if let (Value::Ints(x), Value::Ints(y)) = (c.arg(a, 0)?, c.arg(a, 1)?) {
        let f = match op {
            BinaryOp::Add => i64::checked_add,
            BinaryOp::Sub => i64::checked_sub,
            BinaryOp::Mul => i64::checked_mul,
            BinaryOp::Div => i64::checked_div,
            _ => |_, _| None,
        };
        if op != BinaryOp::Pow {
            return one_ints(host_binary(x, y, f)?);
        }
    }
    let (x, y) = (c.tensor(a, 0)?, c.tensor(a, 1)?);
    one(x.binary(op, &y)?)
}

fn compare(c: &Ctx<'_>, a: &[Value], op: CmpOp) -> Outputs {
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
        let mut r = host_binary(x, y, f)?;
        r.bool = true;
        return one_ints(r);
    }
    let (x, y) = (c.tensor(a, 0)?, c.tensor(a, 1)?);
    one(x.compare(op, &y)?)
}

fn where_(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let cond = c.tensor(a, 0)?;
    let cond = if cond.dtype() == DType::Bool {
        cond
    } else {
        cond.compare(CmpOp::Ne, &cond.scalar_like(0.0)?)?
    };
    one(cond.where_cond(&c.tensor(a, 1)?, &c.tensor(a, 2)?)?)
}

fn leaky_relu(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let alpha = c.float("alpha", 0.01)?;
    let x = c.tensor(a, 0)?;
    let neg = x.compare(CmpOp::Lt, &x.scalar_like(0.0)?)?;
    let scaled = x.binary_scalar(BinaryOp::Mul, f64::from(alpha))?;
    one(neg.where_cond(&scaled, &x)?)
}
