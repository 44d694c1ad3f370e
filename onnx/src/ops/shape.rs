//! Shape and data-movement ONNX ops. Shapes are computed on the host: `Shape` of any value is a
//! host integer vector, and ops whose inputs are all host integers (`Gather`, `Concat`,
//! `Unsqueeze`, ... on shapes) run on the host, so shape subgraphs fold away at run time.

use super::{Ctx, OpFn, Outputs, axis, one, one_ints};
use crate::model::constant;
use crate::value::{Ints, Value};
use alloc::format;
use alloc::vec::Vec;
use kiln_core::{Error, Result, Tensor};

pub(super) const OPS: &[(&str, OpFn)] = &[
    ("Shape", shape),
    ("Constant", constant_op),
    ("Reshape", reshape),
    ("Flatten", flatten),
    ("Transpose", transpose),
    ("Unsqueeze", unsqueeze),
    ("Squeeze", squeeze),
    ("Concat", concat),
    ("Gather", gather),
];

fn shape(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let dims = c.arg(a, 0)?.dims();
    let r = dims.len() as i64;
    let clip = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let start = clip(c.int("start", 0)?);
    let end = clip(c.int("end", r)?);
    let v = dims[start..end.max(start)]
        .iter()
        .map(|&d| d as i64)
        .collect();
    one_ints(Ints::vector(v))
}

fn constant_op(c: &Ctx<'_>, _: &[Value]) -> Outputs {
    use crate::NodeAttrs;
    let err = crate::model::onnx_err;
    if let Some(t) = c.node.attr_tensor("value").map_err(err)? {
        return Ok(alloc::vec![constant(t, c.device)?]);
    }
    if let Some(v) = c.node.attr_int("value_int").map_err(err)? {
        return one_ints(Ints::scalar(v));
    }
    if let Some(v) = c.node.attr_ints("value_ints").map_err(err)? {
        return one_ints(Ints::vector(v.to_vec()));
    }
    if let Some(v) = c.node.attr_float("value_float").map_err(err)? {
        return one(Tensor::from_slice(&[v], [0usize; 0], c.device)?);
    }
    if let Some(v) = c.node.attr_floats("value_floats").map_err(err)? {
        return one(Tensor::from_slice(v, [v.len()], c.device)?);
    }
    Err(c.unsupported("Constant without a value, value_int(s) or value_float(s) attribute"))
}

/// `dims` with ONNX Reshape's rules: 0 copies the input's dimension (unless `allowzero`), one
/// -1 is inferred.
fn reshape_dims(input: &[usize], spec: &[i64], allow_zero: bool) -> Result<Vec<usize>> {
    let n: usize = input.iter().product();
    let mut dims = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &d) in spec.iter().enumerate() {
        dims.push(match d {
            0 if !allow_zero => *input.get(i).ok_or_else(|| {
                Error::shape(
                    "onnx",
                    format!("shape {spec:?} copies dimension {i} of {input:?}"),
                )
            })?,
            -1 if infer.is_none() => {
                infer = Some(i);
                1
            }
            d if d >= 0 => d as usize,
            _ => return Err(Error::shape("onnx", format!("bad target shape {spec:?}"))),
        });
    }
    if let Some(i) = infer {
        let known: usize = dims.iter().product();
        if known == 0 || !n.is_multiple_of(known) {
            return Err(Error::shape(
                "onnx",
                format!("cannot reshape {input:?} ({n} elements) to {spec:?}"),
            ));
        }
        dims[i] = n / known;
    }
    if dims.iter().product::<usize>() != n {
        return Err(Error::shape(
            "onnx",
            format!("cannot reshape {input:?} ({n} elements) to {spec:?}"),
        ));
    }
    Ok(dims)
}

fn reshape(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let spec = if c.opset < 5 {
        c.ints_attr("shape")?.unwrap_or_default()
    } else {
        c.ints(a, 1)?.data.clone()
    };
    let allow_zero = c.int("allowzero", 0)? != 0;
    match c.arg(a, 0)? {
        Value::Ints(x) => {
            let dims = reshape_dims(&x.dims, &spec, allow_zero)?;
            one_ints(Ints { dims, ..x.clone() })
        }
        _ => {
            let x = c.tensor(a, 0)?;
            let dims = reshape_dims(x.dims(), &spec, allow_zero)?;
            one(x.reshape(dims)?)
        }
    }
}

fn flatten(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let at = axis(c.int("axis", 1)?, x.rank() + 1)?.min(x.rank());
    let outer: usize = x.dims()[..at].iter().product();
    one(x.reshape([outer, x.numel() / outer.max(1)])?)
}

fn transpose(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let perm: Vec<usize> = match c.ints_attr("perm")? {
        Some(p) => p
            .iter()
            .map(|&d| axis(d, x.rank()))
            .collect::<Result<_>>()?,
        None => (0..x.rank()).rev().collect(),
    };
    one(x.permute(&perm)?.contiguous()?)
}

/// The `axes` of Unsqueeze/Squeeze/Reduce*: an attribute before `input_from` opset, then
/// optional input 1.
pub(super) fn axes_arg(c: &Ctx<'_>, a: &[Value], input_from: i64) -> Result<Option<Vec<i64>>> {
    if c.opset < input_from {
        return c.ints_attr("axes");
    }
    match c.optional(a, 1) {
        Some(v) => Ok(Some(v.ints("axes")?.data.clone())),
        None => Ok(None),
    }
}

fn unsqueeze(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let axes = axes_arg(c, a, 13)?.ok_or_else(|| c.unsupported("Unsqueeze without axes"))?;
    let rank = x.dims().len() + axes.len();
    let mut axes: Vec<usize> = axes.iter().map(|&d| axis(d, rank)).collect::<Result<_>>()?;
    axes.sort_unstable();
    let mut dims = x.dims();
    for &ax in &axes {
        dims.insert(ax, 1);
    }
    reshaped(c, x, dims)
}

fn squeeze(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    let axes: Vec<usize> = match axes_arg(c, a, 13)? {
        Some(ax) => ax
            .iter()
            .map(|&d| axis(d, dims.len()))
            .collect::<Result<_>>()?,
        None => (0..dims.len()).filter(|&i| dims[i] == 1).collect(),
    };
    if let Some(&bad) = axes.iter().find(|&&i| dims[i] != 1) {
        return Err(Error::shape(
            "onnx",
            format!("cannot squeeze axis {bad} of {dims:?}: its size is not 1"),
        ));
    }
    let kept = (0..dims.len())
        .filter(|i| !axes.contains(i))
        .map(|i| dims[i])
        .collect();
    reshaped(c, x, kept)
}

/// `x` with new dimensions of the same element count, on the host or the device.
fn reshaped(c: &Ctx<'_>, x: &Value, dims: Vec<usize>) -> Outputs {
    match x {
        Value::Ints(i) => one_ints(Ints { dims, ..i.clone() }),
        _ => one(x.tensor(c.device, "input 0")?.reshape(dims)?),
    }
}

fn concat(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let present: Vec<&Value> = a.iter().filter(|v| v.is_present()).collect();
    let rank = present.first().map_or(0, |v| v.dims().len());
    let ax = axis(c.int("axis", 0)?, rank)?;
    if present.iter().all(|v| matches!(v, Value::Ints(_))) {
        let ints: Vec<&Ints> = present
            .iter()
            .map(|v| v.ints("Concat"))
            .collect::<Result<_>>()?;
        return one_ints(host_concat(&ints, ax)?);
    }
    let ts: Vec<Tensor> = present
        .iter()
        .map(|v| v.tensor(c.device, "Concat input"))
        .collect::<Result<_>>()?;
    one(Tensor::concat(&ts, ax as isize)?)
}

fn host_concat(parts: &[&Ints], ax: usize) -> Result<Ints> {
    let first = parts[0];
    let outer: usize = first.dims[..ax].iter().product();
    let mut dims = first.dims.clone();
    dims[ax] = 0;
    for p in parts {
        if p.dims.len() != first.dims.len()
            || p.dims
                .iter()
                .zip(&first.dims)
                .enumerate()
                .any(|(i, (x, y))| i != ax && x != y)
        {
            return Err(Error::shape(
                "onnx",
                format!(
                    "Concat of {:?} and {:?} along axis {ax}",
                    first.dims, p.dims
                ),
            ));
        }
        dims[ax] += p.dims[ax];
    }
    let mut data = Vec::with_capacity(dims.iter().product());
    for o in 0..outer {
        for p in parts {
            let inner: usize = p.dims[ax..].iter().product();
            data.extend_from_slice(&p.data[o * inner..(o + 1) * inner]);
        }
    }
    Ok(Ints {
        dims,
        data,
        bool: first.bool,
    })
}

fn gather(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    let ax = axis(c.int("axis", 0)?, dims.len())?;
    let idx = c.arg(a, 1)?;
    // negative indices count from the end of the axis
    let fix = |i: i64| -> Result<usize> {
        let n = dims[ax] as i64;
        let j = if i < 0 { i + n } else { i };
        if j < 0 || j >= n {
            return Err(Error::index(
                "onnx",
                format!("Gather index {i} out of range for size {n}"),
            ));
        }
        Ok(j as usize)
    };
    if let (Value::Ints(xi), Value::Ints(ii)) = (x, idx) {
        let outer: usize = dims[..ax].iter().product();
        let inner: usize = dims[ax + 1..].iter().product();
        let picks: Vec<usize> = ii.data.iter().map(|&i| fix(i)).collect::<Result<_>>()?;
        let mut data = Vec::with_capacity(outer * picks.len() * inner);
        for o in 0..outer {
            for &p in &picks {
                let at = (o * dims[ax] + p) * inner;
                data.extend_from_slice(&xi.data[at..at + inner]);
            }
        }
        let mut out_dims = dims[..ax].to_vec();
        out_dims.extend_from_slice(&ii.dims);
        out_dims.extend_from_slice(&dims[ax + 1..]);
        return one_ints(Ints {
            dims: out_dims,
            data,
            bool: xi.bool,
        });
    }
    let t = x.tensor(c.device, "input 0")?;
    let (index, index_dims) = match idx {
        Value::Ints(ii) => {
            let fixed: Vec<i64> = ii
                .data
                .iter()
                .map(|&i| fix(i).map(|j| j as i64))
                .collect::<Result<_>>()?;
            let flat = Ints::vector(fixed).to_tensor(c.device, "Gather indices")?;
            (flat, ii.dims.clone())
        }
        other => {
            let t = other.tensor(c.device, "input 1")?;
            let d = t.dims().to_vec();
            (t.reshape([t.numel()])?, d)
        }
    };
    let picked = t.index_select(ax as isize, &index)?;
    let mut out_dims = dims[..ax].to_vec();
    out_dims.extend_from_slice(&index_dims);
    out_dims.extend_from_slice(&dims[ax + 1..]);
    one(picked.reshape(out_dims)?)
}
