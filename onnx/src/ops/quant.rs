//! Quantization ONNX ops: `QuantizeLinear`, `DequantizeLinear`, `DynamicQuantizeLinear`,
//! `MatMulInteger`, `ConvInteger`, `QLinearMatMul`, `QLinearConv`.
//!
//! Integer arithmetic runs in floats on the device (f64 where it has it, else f32, where sums
//! of products of 8-bit values stay exact up to 2^24) and is cast to i32 at the end, as
//! integers are carried (see [`crate::value`]). Results of a narrow type (`INT4`, `FLOAT8*`, ...)
//! are [`Value::Narrow`]; float8 and float4 rounding reads the values back
//! ([`crate::narrow`]).

use super::{Ctx, OpFn, Outputs, host_values, one};
use crate::DataType;
use crate::narrow;
use crate::value::{Value, held};
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;
use kiln_core::{DType, Error, Result, Shape, Tensor};

pub(super) const OPS: &[(&str, OpFn)] = &[
    ("QuantizeLinear", quantize_linear),
    ("DequantizeLinear", dequantize_linear),
    ("DynamicQuantizeLinear", dynamic_quantize_linear),
    ("MatMulInteger", matmul_integer),
    ("ConvInteger", conv_integer),
    ("QLinearMatMul", qlinear_matmul),
    ("QLinearConv", qlinear_conv),
];

/// The float dtype integer arithmetic runs in: f64 where the device has it.
fn wide(c: &Ctx<'_>) -> DType {
    held(c.device, DType::F64)
}

/// Input `i` as a tensor of `dt` (absent: `None`).
fn opt_as(c: &Ctx<'_>, a: &[Value], i: usize, dt: DType) -> Result<Option<Tensor>> {
    match c.optional(a, i) {
        Some(v) => Ok(Some(v.tensor(c.device, &format!("input {i}"))?.cast(dt)?)),
        None => Ok(None),
    }
}

/// Input `i` as a tensor of `dt`.
fn input_as(c: &Ctx<'_>, a: &[Value], i: usize, dt: DType) -> Result<Tensor> {
    c.tensor(a, i)?.cast(dt)
}

/// The ONNX element type of input `i`: a narrow value's tag, else what the graph declares.
fn input_type(c: &Ctx<'_>, a: &[Value], i: usize) -> Option<DataType> {
    match c.optional(a, i) {
        Some(Value::Narrow { ty, .. }) => Some(*ty),
        Some(_) => c.input_type(i),
        None => None,
    }
}

/// A scale or zero point shaped to broadcast against `dims`: per tensor (a scalar or one
/// value) as it is; per axis (1-D of `dims[axis]` values) along `axis`; blocked (the rank of
/// `dims`, `dims[axis]` divided into blocks of `block`) repeated over each block.
fn broadcast_param(
    c: &Ctx<'_>,
    p: Tensor,
    dims: &[usize],
    axis: i64,
    block: usize,
    what: &str,
) -> Result<Tensor> {
    let pd = p.dims().to_vec();
    if p.numel() == 1 && block == 0 {
        return p.reshape(Shape::scalar());
    }
    let axis = super::axis(axis, dims.len())?;
    if axis >= dims.len() {
        return Err(Error::shape(
            "onnx",
            format!("{what} of shape {pd:?} is per axis, but the input is a scalar"),
        ));
    }
    let bad = || {
        Error::shape(
            "onnx",
            format!(
                "{what} of shape {pd:?} does not fit input {dims:?} at axis {axis} (block_size {block})"
            ),
        )
    };
    if block == 0 {
        if pd.len() != 1 || pd[0] != dims[axis] {
            return Err(bad());
        }
        let mut shape = vec![1; dims.len()];
        shape[axis] = pd[0];
        return p.reshape(shape);
    }
    let fits = pd.len() == dims.len()
        && pd.iter().zip(dims).enumerate().all(|(k, (&q, &d))| {
            if k == axis {
                q == d.div_ceil(block)
            } else {
                q == d
            }
        });
    if !fits {
        return Err(bad());
    }
    let idx: Vec<i32> = (0..dims[axis]).map(|i| (i / block) as i32).collect();
    let idx = Tensor::from_slice(&idx, [dims[axis]], c.device)?;
    p.index_select(axis as isize, &idx)
}

/// The `axis` attribute (resolved where a parameter is per axis or blocked) and `block_size`.
fn axis_block(c: &Ctx<'_>) -> Result<(i64, usize)> {
    let block = c.int("block_size", 0)?;
    let block = usize::try_from(block)
        .map_err(|_| c.unsupported(format!("block_size {block}: expects >= 0")))?;
    Ok((c.int("axis", 1)?, block))
}

/// `v` (of values already rounded in floats) as a value of ONNX integer or narrow type `ty`:
/// a narrow value, or an i32 tensor.
fn as_type(v: Tensor, ty: DataType) -> Result<Value> {
    let t = v.cast(DType::I32)?;
    Ok(if narrow::is_narrow(ty) {
        Value::Narrow { ty, tensor: t }
    } else {
        Value::Tensor(t)
    })
}

/// The range of an integer output type, or `None` for a float type.
fn int_limits(ty: DataType) -> Option<(f64, f64)> {
    use DataType as D;
    let r = match ty {
        D::Uint8 => (0, 255),
        D::Int8 => (-128, 127),
        D::Uint16 => (0, 65535),
        D::Int16 => (-32768, 32767),
        D::Int32 => (i64::from(i32::MIN), i64::from(i32::MAX)),
        t => narrow::int_range(t)?,
    };
    Some((r.0 as f64, r.1 as f64))
}

/// Rounds `v` (the scaled values plus the zero point, in floats) into output type `ty`: the
/// integer types round half to even and saturate; the float types (`FLOAT8*`, `FLOAT4E2M1`)
/// round on the host as a cast with `saturate` does.
fn requantize(c: &Ctx<'_>, v: Tensor, ty: DataType, saturate: bool) -> Result<Value> {
    if let Some((lo, hi)) = int_limits(ty) {
        return as_type(v.round()?.clamp(lo, hi)?, ty);
    }
    if !narrow::is_narrow(ty) || narrow::is_int(ty) {
        return Err(c.unsupported(format!("quantized output type {}", ty.as_str_name())));
    }
    let vals = host_values(&Value::Tensor(v.clone()), "quantized values")?;
    let out = vals
        .iter()
        .map(|&x| narrow::quantize(ty, x, saturate))
        .collect::<Result<Vec<f64>>>()?;
    Value::narrow_values(ty, &out, Shape::from(v.dims().to_vec()), c.device)
}

/// The output type of QuantizeLinear: the zero point's type, else `output_dtype`, else uint8.
fn quantized_type(c: &Ctx<'_>, a: &[Value], zp: usize) -> Result<DataType> {
    let attr = c.int("output_dtype", 0)?;
    let attr = if attr == 0 {
        None
    } else {
        Some(
            i32::try_from(attr)
                .ok()
                .and_then(|t| DataType::try_from(t).ok())
                .ok_or_else(|| c.unsupported(format!("output_dtype {attr}")))?,
        )
    };
    match (c.optional(a, zp), input_type(c, a, zp), attr) {
        (Some(_), Some(t), Some(o)) if t != o => Err(Error::invalid(
            "onnx",
            format!(
                "output_dtype {} differs from the zero point's type {}",
                o.as_str_name(),
                t.as_str_name()
            ),
        )),
        (Some(_), Some(t), _) => Ok(t),
        (_, _, Some(o)) => Ok(o),
        (None, _, None) => Ok(DataType::Uint8),
        (Some(v), None, None) => Err(c.unsupported(format!(
            "input {zp} (the zero point, {}): its integer type (int8 or uint8, ...) is not known; \
             kiln knows it for graph inputs, initializers and constants",
            v.describe()
        ))),
    }
}

/// QuantizeLinear: `saturate(round(x / scale) + zero_point)` per tensor, per axis or blocked.
fn quantize_linear(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let f = if x.dtype() == DType::F64 {
        DType::F64
    } else {
        DType::F32
    };
    let x = x.cast(f)?;
    let dims = x.dims().to_vec();
    let (ax, block) = axis_block(c)?;
    let scale = broadcast_param(c, input_as(c, a, 1, f)?, &dims, ax, block, "y_scale")?;
    let ty = quantized_type(c, a, 2)?;
    let mut v = x.div(&scale)?;
    if int_limits(ty).is_some() {
        v = v.round()?;
    }
    if let Some(zp) = opt_as(c, a, 2, f)? {
        v = v.add(&broadcast_param(c, zp, &dims, ax, block, "y_zero_point")?)?;
    }
    let saturate = c.int("saturate", 1)? != 0;
    Ok(vec![requantize(c, v, ty, saturate)?])
}

/// DequantizeLinear: `(x - zero_point) * scale`, in the scale's float type (or
/// `output_dtype`).
fn dequantize_linear(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = input_as(c, a, 0, DType::F32)?;
    let dims = x.dims().to_vec();
    let (ax, block) = axis_block(c)?;
    let scale = c.tensor(a, 1)?;
    let out = match c.int("output_dtype", 0)? {
        0 => scale.dtype(),
        t => i32::try_from(t)
            .ok()
            .and_then(|t| DataType::try_from(t).ok())
            .filter(|t| matches!(t, DataType::Float | DataType::Float16 | DataType::Double))
            .and_then(|t| crate::value::kiln_dtype(c.device, t))
            .ok_or_else(|| {
                c.unsupported(format!(
                    "output_dtype {t}: expects FLOAT, FLOAT16 or DOUBLE (bfloat16 outputs are not supported)"
                ))
            })?,
    };
    let scale = broadcast_param(c, scale.cast(DType::F32)?, &dims, ax, block, "x_scale")?;
    let mut v = x;
    if let Some(zp) = opt_as(c, a, 2, DType::F32)? {
        v = v.sub(&broadcast_param(c, zp, &dims, ax, block, "x_zero_point")?)?;
    }
    one(v.mul(&scale)?.cast(out)?)
}

/// DynamicQuantizeLinear: uint8 quantization with the scale and zero point that map
/// `[min(0, min x), max(0, max x)]` onto `[0, 255]`.
fn dynamic_quantize_linear(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = input_as(c, a, 0, DType::F32)?;
    let zero = x.scalar_like(0.0)?;
    let lo = x.min(&[], false)?.minimum(&zero)?;
    let hi = x.max(&[], false)?.maximum(&zero)?;
    let scale = hi.sub(&lo)?.div_scalar(255.0)?;
    let zp = zero.sub(&lo.div(&scale)?)?.round()?.clamp(0.0, 255.0)?;
    let y = x.div(&scale)?.round()?.add(&zp)?.clamp(0.0, 255.0)?;
    Ok(vec![
        Value::Tensor(y.cast(DType::I32)?),
        Value::Tensor(scale),
        Value::Tensor(zp.cast(DType::I32)?),
    ])
}

/// `x - zero_point` in the wide float type, the zero point per tensor or (a 1-D one) along
/// `axis` of `x`.
fn centered(c: &Ctx<'_>, a: &[Value], x: usize, zp: usize, axis: usize) -> Result<Tensor> {
    let f = wide(c);
    let t = input_as(c, a, x, f)?;
    let Some(z) = opt_as(c, a, zp, f)? else {
        return Ok(t);
    };
    let dims = t.dims().to_vec();
    if axis >= dims.len() {
        return Err(Error::shape(
            "onnx",
            format!("input {x} of shape {dims:?} has no axis {axis}"),
        ));
    }
    let z = broadcast_param(
        c,
        z,
        &dims,
        axis as i64,
        0,
        &format!("input {zp} (zero point)"),
    )?;
    t.sub(&z)
}

/// The row axis of a matmul operand of rank `rank` (a vector has none: its only axis).
fn rows(rank: usize) -> usize {
    rank.saturating_sub(2)
}

/// `(a - a_zero_point) @ (b - b_zero_point)` in floats: a's zero point per row, b's per column.
fn int_matmul(c: &Ctx<'_>, a: &[Value], ia: [usize; 2], ib: [usize; 2]) -> Result<Tensor> {
    let ra = c.arg(a, ia[0])?.dims().len();
    let rb = c.arg(a, ib[0])?.dims().len();
    let x = centered(c, a, ia[0], ia[1], rows(ra))?;
    let y = centered(c, a, ib[0], ib[1], rb.saturating_sub(1))?;
    x.matmul(&y)
}

/// MatMulInteger: the int32 product of zero-point-shifted 8-bit matrices.
fn matmul_integer(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    one(int_matmul(c, a, [0, 2], [1, 3])?
        .round()?
        .cast(DType::I32)?)
}

/// QLinearMatMul: the integer product rescaled by `a_scale * b_scale / y_scale` and quantized
/// into y's type.
fn qlinear_matmul(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let acc = int_matmul(c, a, [0, 2], [3, 5])?;
    let f = wide(c);
    let n = acc.rank();
    let sa = scale_along(c, input_as(c, a, 1, f)?, &acc, rows(n), "a_scale")?;
    let sb = scale_along(
        c,
        input_as(c, a, 4, f)?,
        &acc,
        n.saturating_sub(1),
        "b_scale",
    )?;
    let sy = input_as(c, a, 6, f)?;
    let v = acc.mul(&sa.mul(&sb)?.div(&sy)?)?;
    let ty = out_type(c, a, 7)?;
    finish(c, a, v, ty, 7)
}

/// A scale per tensor, or 1-D along `axis` of `like`.
fn scale_along(c: &Ctx<'_>, s: Tensor, like: &Tensor, axis: usize, what: &str) -> Result<Tensor> {
    broadcast_param(c, s, like.dims(), axis as i64, 0, what)
}

/// The type of output zero point `i` (uint8 when it is absent).
fn out_type(c: &Ctx<'_>, a: &[Value], i: usize) -> Result<DataType> {
    match (c.optional(a, i), input_type(c, a, i)) {
        (None, _) => Ok(DataType::Uint8),
        (Some(_), Some(t)) => Ok(t),
        (Some(v), None) => Err(c.unsupported(format!(
            "input {i} (the output zero point, {}): its integer type is not known; kiln knows \
             it for graph inputs, initializers and constants",
            v.describe()
        ))),
    }
}

/// Rounds, adds output zero point `zp` and saturates into `ty`.
fn finish(c: &Ctx<'_>, a: &[Value], v: Tensor, ty: DataType, zp: usize) -> Outputs {
    let mut v = v.round()?;
    if let Some(z) = opt_as(c, a, zp, v.dtype())? {
        v = v.add(&z)?;
    }
    Ok(vec![requantize(c, v, ty, true)?])
}

/// Runs Conv on float tensors with this node's attributes.
fn conv_floats(c: &Ctx<'_>, x: Tensor, w: Tensor) -> Result<Tensor> {
    let out = super::nn::conv(c, &[Value::Tensor(x), Value::Tensor(w)])?;
    out.into_iter()
        .next()
        .ok_or_else(|| Error::invalid("onnx", "Conv gave no output"))?
        .tensor(c.device, "Conv output")
}

/// `(x - x_zero_point) conv (w - w_zero_point)`: x's zero point per tensor, w's per tensor or
/// per output channel. In f32, where kiln's convolutions run.
fn int_conv(c: &Ctx<'_>, a: &[Value], ix: [usize; 2], iw: [usize; 2]) -> Result<Tensor> {
    let x = centered(c, a, ix[0], ix[1], 1)?.cast(DType::F32)?;
    let w = centered(c, a, iw[0], iw[1], 0)?.cast(DType::F32)?;
    conv_floats(c, x, w)
}

/// ConvInteger: the int32 convolution of zero-point-shifted 8-bit tensors.
fn conv_integer(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    one(int_conv(c, a, [0, 2], [1, 3])?.round()?.cast(DType::I32)?)
}

/// QLinearConv: the integer convolution plus the int32 bias, rescaled by
/// `x_scale * w_scale / y_scale` (w_scale per tensor or per output channel) and quantized.
fn qlinear_conv(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let f = wide(c);
    let mut acc = int_conv(c, a, [0, 2], [3, 5])?.cast(f)?;
    if let Some(b) = opt_as(c, a, 8, f)? {
        acc = acc.add(&scale_along(c, b, &acc, 1, "B")?)?;
    }
    let sx = input_as(c, a, 1, f)?;
    let sw = scale_along(c, input_as(c, a, 4, f)?, &acc, 1, "w_scale")?;
    let sy = input_as(c, a, 6, f)?;
    let v = acc.mul(&sx.mul(&sw)?.div(&sy)?)?;
    let ty = out_type(c, a, 7)?;
    finish(c, a, v, ty, 7)
}

#[cfg(test)]
mod tests {
    //! The quantizers' rounding, saturation and parameter shapes, against values worked out
    //! from the ONNX definitions.
    use super::super::testing::A;
    use super::*;
    use alloc::collections::BTreeMap;
    use alloc::string::{String, ToString};
    use kiln_core::Device;

    /// Runs `f` on a node with inputs `x`, `s`, `z` (declared `types`) and int attributes.
    fn run(
        f: OpFn,
        attrs: &[(&str, i64)],
        types: &[(&str, DataType)],
        args: &[Value],
    ) -> Result<Vec<Value>> {
        let device = Device::cpu();
        let attrs = attrs.iter().map(|&(n, i)| (n, A::I(i))).collect();
        let mut node = super::super::testing::node("", attrs);
        node.input = ["x", "s", "z"][..args.len()]
            .iter()
            .map(|n| n.to_string())
            .collect();
        let types: BTreeMap<String, DataType> =
            types.iter().map(|&(n, t)| (n.to_string(), t)).collect();
        super::super::run_typed(f, &device, 21, &node, &types, args)
    }

    fn floats(v: &[f32], dims: &[usize]) -> Value {
        Value::Tensor(Tensor::from_slice(v, dims.to_vec(), &Device::cpu()).unwrap())
    }

    fn ints(v: &[i64], dims: &[usize]) -> Value {
        Value::Ints(crate::value::Ints {
            dims: dims.to_vec(),
            data: v.to_vec(),
            bool: false,
        })
    }

    fn values(v: &Value) -> Vec<f64> {
        host_values(v, "test").unwrap()
    }

    #[test]
    fn quantize_rounds_half_to_even_and_saturates() {
        // x / 1 = -300, -1.5, 2.5, 300: ties to even (-2, 2), then into int8's [-128, 127]
        let x = floats(&[-300.0, -1.5, 2.5, 300.0], &[4]);
        let out = run(
            quantize_linear,
            &[],
            &[("z", DataType::Int8)],
            &[x.clone(), floats(&[1.0], &[]), ints(&[0], &[])],
        )
        .unwrap();
        assert_eq!(values(&out[0]), [-128.0, -2.0, 2.0, 127.0]);
        // the same into uint8 with zero point 10: 10 + (-300, -2, 2, 300) into [0, 255]
        let out = run(
            quantize_linear,
            &[],
            &[("z", DataType::Uint8)],
            &[x, floats(&[1.0], &[]), ints(&[10], &[])],
        )
        .unwrap();
        assert_eq!(values(&out[0]), [0.0, 8.0, 12.0, 255.0]);
    }

    #[test]
    fn quantize_blocked_and_per_axis() {
        // x [2, 4], scales [2, 2] in blocks of 2 along axis 1: row 0 by 1, 1, 2, 2; row 1 by
        // 4, 4, 8, 8
        let x = floats(&[1.0, 2.0, 4.0, 8.0, 4.0, 8.0, 16.0, 32.0], &[2, 4]);
        let s = floats(&[1.0, 2.0, 4.0, 8.0], &[2, 2]);
        let out = run(
            quantize_linear,
            &[("axis", 1), ("block_size", 2)],
            &[("z", DataType::Uint8)],
            &[x.clone(), s, ints(&[0, 0, 0, 0], &[2, 2])],
        )
        .unwrap();
        assert_eq!(values(&out[0]), [1.0, 2.0, 2.0, 4.0, 1.0, 2.0, 2.0, 4.0]);
        // per axis 0: row 0 by 1, row 1 by 4; the uint8 default with no zero point
        let out = run(
            quantize_linear,
            &[("axis", 0)],
            &[],
            &[x, floats(&[1.0, 4.0], &[2])],
        )
        .unwrap();
        assert_eq!(values(&out[0]), [1.0, 2.0, 4.0, 8.0, 1.0, 2.0, 4.0, 8.0]);
    }

    #[test]
    fn quantize_to_int4_and_float8() {
        let x = floats(&[-20.0, 3.0, 20.0], &[3]);
        let z = Value::Narrow {
            ty: DataType::Int4,
            tensor: Tensor::from_slice(&[0i32], [1], &Device::cpu()).unwrap(),
        };
        let out = run(
            quantize_linear,
            &[],
            &[],
            &[x.clone(), floats(&[1.0], &[]), z],
        )
        .unwrap();
        assert!(matches!(
            out[0],
            Value::Narrow {
                ty: DataType::Int4,
                ..
            }
        ));
        assert_eq!(values(&out[0]), [-8.0, 3.0, 7.0]);
        // float8 e4m3fn by output_dtype: x / 0.01 = -2000, 300, 2000; e4m3fn steps by 32 in
        // [256, 512), so 300 goes to 288, and 2000 saturates at 448
        let out = run(
            quantize_linear,
            &[("output_dtype", DataType::Float8e4m3fn as i64)],
            &[],
            &[x, floats(&[0.01], &[])],
        )
        .unwrap();
        assert_eq!(values(&out[0]), [-448.0, 288.0, 448.0]);
    }

    #[test]
    fn dequantize_per_axis() {
        // (x - z) * s along axis 1 of [1, 2]: (10 - 2) * 0.5, (10 - 4) * 2
        let out = run(
            dequantize_linear,
            &[],
            &[],
            &[
                ints(&[10, 10], &[1, 2]),
                floats(&[0.5, 2.0], &[2]),
                ints(&[2, 4], &[2]),
            ],
        )
        .unwrap();
        assert_eq!(values(&out[0]), [4.0, 12.0]);
    }

    #[test]
    fn bad_parameters_are_errors() {
        let x = floats(&[1.0, 2.0], &[2]);
        // a scale of 3 values along an axis of 2
        let e = run(
            dequantize_linear,
            &[("axis", 0)],
            &[],
            &[x.clone(), floats(&[1.0; 3], &[3])],
        );
        assert!(e.is_err());
        // a per-axis scale for a scalar input
        let e = run(
            dequantize_linear,
            &[],
            &[],
            &[floats(&[1.0], &[]), floats(&[1.0; 2], &[2])],
        );
        assert!(e.is_err());
        // a zero point whose integer type the graph does not declare
        let e = run(
            quantize_linear,
            &[],
            &[],
            &[x.clone(), floats(&[1.0], &[]), ints(&[0], &[])],
        );
        assert!(e.unwrap_err().to_string().contains("zero point"));
        // output_dtype disagreeing with the zero point's type
        let e = run(
            quantize_linear,
            &[("output_dtype", DataType::Int8 as i64)],
            &[("z", DataType::Uint8)],
            &[x, floats(&[1.0], &[]), ints(&[0], &[])],
        );
        assert!(e.is_err());
    }
}
