//! Shape and data-movement ONNX ops. Shapes are computed on the host: `Shape` of any value is a
//! host integer vector, and ops whose inputs are all host integers (`Gather`, `Concat`,
//! `Unsqueeze`, ... on shapes) run on the host, so shape subgraphs fold away at run time.
//!
//! On device tensors the ops are kiln views and data movement (slice, expand, permute, pad,
//! index_select, gather, scatter_add). Where an op's element order depends only on shapes and
//! host-known integers (a negative Slice step, Pad's reflect/edge/wrap, ReverseSequence, GatherND
//! with host indices, scatters), the source positions are computed on the host and applied with
//! one `index_select`; the host path applies the same positions to host integers.

use super::{Ctx, OpFn, Outputs, axis, one, one_ints};
use crate::NodeAttrs;
use crate::model::{constant, onnx_err};
use crate::value::{Ints, Value};
use crate::{TensorElems, tensor_value};
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;
use kiln_core::{BinaryOp, CmpOp, DType, Error, Op, Result, Shape, SliceRange, Tensor, TensorData};

pub(super) const OPS: &[(&str, OpFn)] = &[
    ("Shape", shape),
    ("Size", size),
    ("Constant", constant_op),
    ("ConstantOfShape", constant_of_shape),
    ("Reshape", reshape),
    ("Flatten", flatten),
    ("Transpose", transpose),
    ("Unsqueeze", unsqueeze),
    ("Squeeze", squeeze),
    ("Concat", concat),
    ("Gather", gather),
    ("Slice", slice),
    ("Expand", expand),
    ("Range", range),
    ("Split", split),
    ("Tile", tile),
    ("Pad", pad),
    ("CenterCropPad", center_crop_pad),
    ("GatherElements", gather_elements),
    ("GatherND", gather_nd),
    ("ScatterElements", scatter_elements),
    ("Scatter", scatter_elements),
    ("ScatterND", scatter_nd),
    ("OneHot", one_hot),
    ("Trilu", trilu),
    ("EyeLike", eye_like),
    ("DepthToSpace", depth_to_space),
    ("SpaceToDepth", space_to_depth),
    ("CumSum", cumsum),
    ("CumProd", cumprod),
    ("ReverseSequence", reverse_sequence),
    ("Compress", compress),
    ("NonZero", non_zero),
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
    let err = onnx_err;
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
        let known = numel(&dims)?;
        if known == 0 || !n.is_multiple_of(known) {
            return Err(Error::shape(
                "onnx",
                format!("cannot reshape {input:?} ({n} elements) to {spec:?}"),
            ));
        }
        dims[i] = n / known;
    }
    if numel(&dims)? != n {
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

/// Flatten: a 2-D `[prod(dims[..axis]), prod(dims[axis..])]`, with `axis` in `-rank..=rank`.
fn flatten(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    let r = dims.len() as i64;
    let ax = c.int("axis", 1)?;
    let at = if ax < 0 { ax + r } else { ax };
    if !(0..=r).contains(&at) {
        return Err(Error::invalid(
            "onnx",
            format!("Flatten axis {ax} is out of range for rank {r}"),
        ));
    }
    let at = at as usize;
    let outer: usize = dims[..at].iter().product();
    let inner: usize = dims[at..].iter().product();
    reshaped(c, x, vec![outer, inner])
}

fn transpose(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    let perm: Vec<usize> = match c.ints_attr("perm")? {
        Some(p) => p
            .iter()
            .map(|&d| axis(d, dims.len()))
            .collect::<Result<_>>()?,
        None => (0..dims.len()).rev().collect(),
    };
    if let Value::Ints(_) = x {
        let post: Vec<usize> = perm.iter().filter_map(|&p| dims.get(p).copied()).collect();
        return Ok(vec![rearrange(c, x, dims, &perm, post)?]);
    }
    one(c.tensor(a, 0)?.permute(&perm)?.contiguous()?)
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
    Ok(vec![with_dims(c, x, dims)?])
}

/// [`reshaped`] as one value.
pub(super) fn with_dims(c: &Ctx<'_>, x: &Value, dims: Vec<usize>) -> Result<Value> {
    Ok(match x {
        Value::Ints(i) => Value::Ints(Ints { dims, ..i.clone() }),
        _ => Value::Tensor(x.tensor(c.device, "input 0")?.reshape(dims)?),
    })
}

fn concat(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let present: Vec<&Value> = a.iter().filter(|v| v.is_present()).collect();
    let rank = present.first().map_or(0, |v| v.dims().len());
    if rank == 0 {
        return Err(Error::invalid(
            "onnx",
            "Concat needs at least one input of rank 1 or more",
        ));
    }
    let ax = axis(c.int("axis", 0)?, rank)?;
    Ok(vec![join(c, &present, ax)?])
}

/// `parts` (at least one) joined along axis `ax`: on the host when all are host integers.
pub(super) fn join(c: &Ctx<'_>, parts: &[&Value], ax: usize) -> Result<Value> {
    if parts.iter().all(|v| matches!(v, Value::Ints(_))) {
        let ints: Vec<&Ints> = parts
            .iter()
            .map(|v| v.ints("Concat"))
            .collect::<Result<_>>()?;
        return Ok(Value::Ints(host_concat(&ints, ax)?));
    }
    let ts: Vec<Tensor> = parts
        .iter()
        .map(|v| v.tensor(c.device, "Concat input"))
        .collect::<Result<_>>()?;
    Ok(Value::Tensor(Tensor::concat(&ts, ax as isize)?))
}

/// `parts` (at least one, of one shape) stacked along a new axis `ax`.
pub(super) fn stack(c: &Ctx<'_>, parts: &[&Value], ax: usize) -> Result<Value> {
    let grown: Vec<Value> = parts
        .iter()
        .map(|v| {
            let mut dims = v.dims();
            if ax > dims.len() {
                return Err(Error::invalid(
                    "onnx",
                    format!("cannot stack values of shape {dims:?} along axis {ax}"),
                ));
            }
            dims.insert(ax, 1);
            with_dims(c, v, dims)
        })
        .collect::<Result<_>>()?;
    join(c, &grown.iter().collect::<Vec<_>>(), ax)
}

/// Entry `i` of `x` along axis `ax`, that axis removed (Scan's slices).
pub(super) fn entry(c: &Ctx<'_>, x: &Value, ax: usize, i: usize) -> Result<Value> {
    let dims = x.dims();
    let mut plan: Vec<Span> = dims.iter().map(|&d| Span::whole(d)).collect();
    plan[ax] = Span {
        start: i as i64,
        step: 1,
        len: 1,
    };
    let mut kept = dims;
    kept.remove(ax);
    with_dims(c, &apply_plan(c, x, &plan)?, kept)
}

/// Host Concat of `parts` (at least one, rank above `ax`) along axis `ax`.
fn host_concat(parts: &[&Ints], ax: usize) -> Result<Ints> {
    let Some(&first) = parts.first() else {
        return Err(Error::invalid("onnx", "Concat of no inputs"));
    };
    if ax >= first.dims.len() {
        return Err(Error::shape(
            "onnx",
            format!("Concat axis {ax} of {:?}", first.dims),
        ));
    }
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
            let part = p.data.get(o * inner..(o + 1) * inner).ok_or_else(|| {
                Error::shape(
                    "onnx",
                    format!("Concat input {:?} has too few values", p.dims),
                )
            })?;
            data.extend_from_slice(part);
        }
    }
    Ok(Ints {
        dims,
        data,
        bool: first.bool,
    })
}

/// Gather: entries along `axis` picked by `indices`, whose shape replaces that axis (a scalar
/// index removes it).
fn gather(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    if dims.is_empty() {
        return Err(Error::shape("onnx", "Gather of a scalar"));
    }
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
                let row = xi.data.get(at..at + inner).ok_or_else(|| {
                    Error::shape("onnx", format!("Gather input {dims:?} has too few values"))
                })?;
                data.extend_from_slice(row);
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
            let t = fix_negative(&other.tensor(c.device, "input 1")?, dims[ax])?;
            let d = t.dims().to_vec();
            (t.reshape([t.numel()])?, d)
        }
    };
    let picked = if index.numel() == 0 {
        let mut d = dims.clone();
        d[ax] = 0;
        Tensor::zeros(d, t.dtype(), c.device)?
    } else {
        t.index_select(ax as isize, &index)?
    };
    let mut out_dims = dims[..ax].to_vec();
    out_dims.extend_from_slice(&index_dims);
    out_dims.extend_from_slice(&dims[ax + 1..]);
    one(picked.reshape(out_dims)?)
}

// ------------------------------------------------------------------ host index helpers

/// Row-major strides of `dims`.
fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// Calls `f` with every multi-index of `dims`, in row-major order (once for a scalar).
fn each_index(dims: &[usize], mut f: impl FnMut(&[usize]) -> Result<()>) -> Result<()> {
    if dims.contains(&0) {
        return Ok(());
    }
    let mut idx = vec![0; dims.len()];
    loop {
        f(&idx)?;
        let mut k = dims.len();
        loop {
            if k == 0 {
                return Ok(());
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < dims[k] {
                break;
            }
            idx[k] = 0;
        }
    }
}

/// Index `i` of an axis of size `n`, negative counting from the end, checked.
fn fix_index(i: i64, n: usize, what: &str) -> Result<usize> {
    let j = if i < 0 { i.saturating_add(n as i64) } else { i };
    if j < 0 || j >= n as i64 {
        return Err(Error::index(
            "onnx",
            format!("{what} index {i} is out of range for size {n}"),
        ));
    }
    Ok(j as usize)
}

/// A device index tensor with negative entries counted from the end of an axis of size `n`.
fn fix_negative(idx: &Tensor, n: usize) -> Result<Tensor> {
    let neg = idx.compare(CmpOp::Lt, &idx.scalar_like(0.0)?)?;
    neg.where_cond(&idx.binary_scalar(BinaryOp::Add, n as f64)?, idx)
}

/// Host indices as an i32 index tensor.
pub(super) fn index_tensor(c: &Ctx<'_>, v: &[usize]) -> Result<Tensor> {
    let data: Vec<i32> = v
        .iter()
        .map(|&i| {
            i32::try_from(i).map_err(|_| c.unsupported(format!("index {i} does not fit i32")))
        })
        .collect::<Result<_>>()?;
    Tensor::from_vec(data, [v.len()], c.device)
}

/// A host-built bool tensor (masks computed from shapes only).
pub(super) fn mask_tensor(c: &Ctx<'_>, dims: Vec<usize>, mask: &[bool]) -> Result<Tensor> {
    let bytes = mask.iter().map(|&b| u8::from(b)).collect();
    Tensor::from_data(
        &TensorData::from_bytes(bytes, DType::Bool, Shape::from(dims))?,
        c.device,
    )
}

/// Rows of `inner` consecutive elements of `x` (row-major), picked by `rows` and shaped
/// `dims`: on the host for host integers, else one `index_select` on the device.
fn take_rows(
    c: &Ctx<'_>,
    x: &Value,
    rows: &[usize],
    inner: usize,
    dims: Vec<usize>,
) -> Result<Value> {
    match x {
        Value::Ints(i) => {
            let mut data = Vec::with_capacity(rows.len() * inner);
            for &r in rows {
                let row = i.data.get(r * inner..(r + 1) * inner).ok_or_else(|| {
                    Error::index("onnx", format!("row {r} is out of range for {:?}", i.dims))
                })?;
                data.extend_from_slice(row);
            }
            Ok(Value::Ints(Ints {
                dims,
                data,
                bool: i.bool,
            }))
        }
        _ => {
            let t = x.tensor(c.device, "input 0")?;
            if rows.is_empty() || inner == 0 || dims.contains(&0) {
                return Ok(Value::Tensor(Tensor::zeros(dims, t.dtype(), c.device)?));
            }
            let flat = t.reshape([t.numel() / inner, inner])?;
            let picked = flat.index_select(0, &index_tensor(c, rows)?)?;
            Ok(Value::Tensor(picked.reshape(dims)?))
        }
    }
}

/// `x`'s elements at the row-major flat indices `src`, shaped `dims`.
fn take(c: &Ctx<'_>, x: &Value, src: &[usize], dims: Vec<usize>) -> Result<Value> {
    take_rows(c, x, src, 1, dims)
}

/// The entries along `ax` of `x` picked by `picks` (Compress).
fn select_axis(c: &Ctx<'_>, x: &Value, ax: usize, picks: &[usize]) -> Result<Value> {
    let dims = x.dims();
    let mut out = dims.clone();
    out[ax] = picks.len();
    if let Value::Tensor(t) = x {
        if picks.is_empty() || out.contains(&0) {
            return Ok(Value::Tensor(Tensor::zeros(out, t.dtype(), c.device)?));
        }
        return Ok(Value::Tensor(
            t.index_select(ax as isize, &index_tensor(c, picks)?)?,
        ));
    }
    let outer: usize = dims[..ax].iter().product();
    let inner: usize = dims[ax + 1..].iter().product();
    let mut rows = Vec::with_capacity(outer * picks.len());
    for o in 0..outer {
        rows.extend(picks.iter().map(|&p| o * dims[ax] + p));
    }
    take_rows(c, x, &rows, inner, out)
}

/// `x` reshaped to `pre`, permuted by `perm` and reshaped to `post` (DepthToSpace, ...).
fn rearrange(
    c: &Ctx<'_>,
    x: &Value,
    pre: Vec<usize>,
    perm: &[usize],
    post: Vec<usize>,
) -> Result<Value> {
    if let Value::Tensor(t) = x {
        return Ok(Value::Tensor(t.reshape(pre)?.permute(perm)?.reshape(post)?));
    }
    let mut seen = vec![false; pre.len()];
    if perm.len() != pre.len()
        || perm
            .iter()
            .any(|&p| p >= pre.len() || core::mem::replace(&mut seen[p], true))
    {
        return Err(Error::invalid(
            "onnx",
            format!("{perm:?} is not a permutation of the axes of {pre:?}"),
        ));
    }
    let st = strides(&pre);
    let out: Vec<usize> = perm.iter().map(|&p| pre[p]).collect();
    if out.iter().product::<usize>() != post.iter().product::<usize>() {
        return Err(Error::shape(
            "onnx",
            format!("cannot reshape {out:?} to {post:?}"),
        ));
    }
    let mut src = Vec::with_capacity(post.iter().product());
    each_index(&out, |i| {
        src.push(i.iter().zip(perm).map(|(&v, &p)| v * st[p]).sum());
        Ok(())
    })?;
    take(c, x, &src, post)
}

/// A one-element value as an integer. A device tensor is read back (see [`read_scalar`]).
pub(super) fn scalar_i64(c: &Ctx<'_>, v: &Value, what: &str) -> Result<i64> {
    match v {
        Value::Ints(i) if i.data.len() == 1 => Ok(i.data[0]),
        _ => Ok(scalar_f64(c, v, what)? as i64),
    }
}

/// A one-element value as f64. A device tensor is read back (see [`read_scalar`]).
fn scalar_f64(c: &Ctx<'_>, v: &Value, what: &str) -> Result<f64> {
    match v {
        Value::Ints(i) if i.data.len() == 1 => Ok(i.data[0] as f64),
        Value::Tensor(t) | Value::Narrow { tensor: t, .. } if t.numel() == 1 => {
            read_scalar(c, t, what)
        }
        other => Err(Error::shape(
            "onnx",
            format!("{what}: expects one element, got {}", other.describe()),
        )),
    }
}

/// Reads a one-element device tensor back: the op's output shape depends on its value
/// (Range bounds, OneHot depth), so it must be known on the host.
fn read_scalar(_: &Ctx<'_>, t: &Tensor, what: &str) -> Result<f64> {
    let v = super::host_values(&Value::Tensor(t.clone()), what)?;
    v.first()
        .copied()
        .ok_or_else(|| Error::shape("onnx", format!("{what}: expects one element, got none")))
}

// ------------------------------------------------------------------ Size, ConstantOfShape, Range

/// Size: the element count, a host scalar.
fn size(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let n: usize = c.arg(a, 0)?.dims().iter().product();
    one_ints(Ints::scalar(n as i64))
}

/// Dimensions from host integers (a shape input), each non-negative.
fn to_dims(v: &[i64], what: &str) -> Result<Vec<usize>> {
    let dims = v
        .iter()
        .map(|&d| {
            usize::try_from(d).map_err(|_| {
                Error::shape(
                    "onnx",
                    format!("{what}: dimension {d} in {v:?} is negative"),
                )
            })
        })
        .collect::<Result<Vec<usize>>>()?;
    numel(&dims)?;
    Ok(dims)
}

/// The element count of `dims`, or an error where it overflows.
pub(super) fn numel(dims: &[usize]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| Error::shape("onnx", format!("shape {dims:?} has too many elements")))
}

/// The most elements a host integer value may have (host values are shapes and indices; a
/// larger one is a malformed or hostile model, refused instead of exhausting memory).
const HOST_LIMIT: usize = 1 << 28;

/// [`numel`] of a host integer value, refused above [`HOST_LIMIT`].
pub(super) fn host_numel(dims: &[usize]) -> Result<usize> {
    let n = numel(dims)?;
    if n > HOST_LIMIT {
        return Err(Error::unsupported(
            "onnx",
            format!("a host integer value of shape {dims:?} ({n} elements)"),
        ));
    }
    Ok(n)
}

/// ConstantOfShape: a tensor of shape `input` filled with the one-element `value` attribute
/// (default float 0); integer and bool fills stay on the host.
fn constant_of_shape(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let dims = to_dims(&c.ints(a, 0)?.data, "ConstantOfShape")?;
    let n = numel(&dims)?;
    let Some(t) = c.node.attr_tensor("value").map_err(onnx_err)? else {
        return one(Tensor::zeros(dims, DType::F32, c.device)?);
    };
    let v = tensor_value(t).map_err(onnx_err)?;
    if v.data.len() != 1 {
        return Err(Error::invalid(
            "onnx",
            format!(
                "ConstantOfShape value has {} elements, not one",
                v.data.len()
            ),
        ));
    }
    let (value, dtype) = match &v.data {
        TensorElems::F32(d) => (f64::from(d[0]), DType::F32),
        TensorElems::F64(d) => (d[0], DType::F64),
        TensorElems::F16(b) => (f64::from(half::f16::from_bits(b[0])), DType::F16),
        _ => match constant(t, c.device)? {
            Value::Ints(i) => {
                host_numel(&dims)?;
                return one_ints(Ints {
                    dims,
                    data: vec![i.data[0]; n],
                    bool: i.bool,
                });
            }
            _ => return Err(c.unsupported("ConstantOfShape value of this element type")),
        },
    };
    let dtype = if c.device.backend().supports(dtype) {
        dtype
    } else {
        DType::F32
    };
    one(Tensor::full(dims, value, dtype, c.device)?)
}

/// Range: `start, start + delta, ...` up to but excluding `limit`.
fn range(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let (s, l, d) = (c.arg(a, 0)?, c.arg(a, 1)?, c.arg(a, 2)?);
    if let (Value::Ints(s), Value::Ints(l), Value::Ints(d)) = (s, l, d) {
        let one_of = |i: &Ints| {
            i.data
                .first()
                .copied()
                .filter(|_| i.data.len() == 1)
                .ok_or_else(|| {
                    Error::shape("onnx", format!("Range expects scalars, got {:?}", i.dims))
                })
        };
        let (s, l, d) = (one_of(s)?, one_of(l)?, one_of(d)?);
        if d == 0 {
            return Err(Error::invalid("onnx", "Range delta is 0"));
        }
        let span = i128::from(l) - i128::from(s);
        let d128 = i128::from(d);
        let n = if (span > 0) == (d > 0) && span != 0 {
            (span.abs() + d128.abs() - 1) / d128.abs()
        } else {
            0
        };
        host_numel(&[usize::try_from(n).unwrap_or(usize::MAX)])?;
        let data = (0..n).map(|i| (i128::from(s) + i * d128) as i64).collect();
        return one_ints(Ints::vector(data));
    }
    let dtype = match s {
        Value::Tensor(t) => t.dtype(),
        _ => DType::I32,
    };
    let (s, l, d) = (
        scalar_f64(c, s, "Range start")?,
        scalar_f64(c, l, "Range limit")?,
        scalar_f64(c, d, "Range delta")?,
    );
    one(Tensor::arange(s, l, d, dtype, c.device)?)
}

// ------------------------------------------------------------------ Slice

/// One axis of a Slice after ONNX's clamping: first index, step (not 0) and count.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Span {
    start: i64,
    step: i64,
    len: usize,
}

impl Span {
    fn whole(d: usize) -> Span {
        Span {
            start: 0,
            step: 1,
            len: d,
        }
    }

    /// `start..end` by `step` on an axis of size `dim`: negative bounds count from the end, and
    /// bounds are clamped to `[0, dim]` (`[-1, dim - 1]` for a negative step).
    fn new(dim: usize, start: i64, end: i64, step: i64) -> Result<Span> {
        if step == 0 {
            return Err(Error::invalid("onnx", "Slice step is 0"));
        }
        let d = dim as i64;
        if d == 0 {
            return Ok(Span {
                start: 0,
                step,
                len: 0,
            });
        }
        let fix = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
        let (s, e) = if step > 0 {
            (fix(start).clamp(0, d), fix(end).clamp(0, d))
        } else {
            (fix(start).clamp(0, d - 1), fix(end).clamp(-1, d - 1))
        };
        let dist = if step > 0 { e - s } else { s - e };
        let len = if dist > 0 {
            (dist as u64).div_ceil(step.unsigned_abs()) as usize
        } else {
            0
        };
        Ok(Span {
            start: s,
            step,
            len,
        })
    }

    /// The input index of output index `i`.
    fn at(&self, i: usize) -> usize {
        (self.start + i as i64 * self.step) as usize
    }
}

/// Every axis's [`Span`] for Slice's `starts`/`ends`/`axes`/`steps` on `dims`.
fn slice_plan(
    dims: &[usize],
    starts: &[i64],
    ends: &[i64],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
) -> Result<Vec<Span>> {
    let bad = |what: &str| Error::invalid("onnx", format!("Slice: {what}"));
    if starts.len() != ends.len() {
        return Err(bad("starts and ends differ in length"));
    }
    let mut plan: Vec<Span> = dims.iter().map(|&d| Span::whole(d)).collect();
    let mut seen = vec![false; dims.len()];
    for (k, (&s, &e)) in starts.iter().zip(ends).enumerate() {
        let ax = match axes {
            Some(a) => axis(
                *a.get(k).ok_or_else(|| bad("fewer axes than starts"))?,
                dims.len(),
            )?,
            None => k,
        };
        if ax >= dims.len() || core::mem::replace(&mut seen[ax], true) {
            return Err(bad("an axis is out of range or repeated"));
        }
        let step = match steps {
            Some(st) => *st.get(k).ok_or_else(|| bad("fewer steps than starts"))?,
            None => 1,
        };
        plan[ax] = Span::new(dims[ax], s, e, step)?;
    }
    Ok(plan)
}

/// The flat input index of every output element of `plan` on `dims`.
fn span_map(dims: &[usize], plan: &[Span]) -> Result<Vec<usize>> {
    let st = strides(dims);
    let out: Vec<usize> = plan.iter().map(|s| s.len).collect();
    let mut src = Vec::with_capacity(out.iter().product());
    each_index(&out, |i| {
        src.push(
            i.iter()
                .zip(plan)
                .zip(&st)
                .map(|((&v, s), &k)| s.at(v) * k)
                .sum(),
        );
        Ok(())
    })?;
    Ok(src)
}

/// `plan` applied to a device tensor: a strided view, then a reversing `index_select` for each
/// axis of negative step.
fn slice_tensor(c: &Ctx<'_>, t: &Tensor, plan: &[Span]) -> Result<Tensor> {
    let ranges: Vec<SliceRange> = plan
        .iter()
        .map(|s| {
            if s.len == 0 {
                SliceRange {
                    start: 0,
                    end: 0,
                    step: 1,
                }
            } else if s.step > 0 {
                SliceRange {
                    start: s.at(0),
                    end: s.at(s.len - 1) + 1,
                    step: s.step as usize,
                }
            } else {
                SliceRange {
                    start: s.at(s.len - 1),
                    end: s.at(0) + 1,
                    step: s.step.unsigned_abs() as usize,
                }
            }
        })
        .collect();
    let mut out = t.slice(&ranges)?;
    for (ax, s) in plan.iter().enumerate() {
        if s.step < 0 && s.len > 1 {
            let rev: Vec<usize> = (0..s.len).rev().collect();
            out = out.index_select(ax as isize, &index_tensor(c, &rev)?)?;
        }
    }
    Ok(out)
}

/// `plan` applied to a value, on the host or the device.
fn apply_plan(c: &Ctx<'_>, x: &Value, plan: &[Span]) -> Result<Value> {
    match x {
        Value::Ints(_) => {
            let out = plan.iter().map(|s| s.len).collect();
            take(c, x, &span_map(&x.dims(), plan)?, out)
        }
        _ => Ok(Value::Tensor(slice_tensor(
            c,
            &x.tensor(c.device, "input 0")?,
            plan,
        )?)),
    }
}

/// Slice: starts/ends/axes as attributes before opset 10, then inputs with optional steps.
fn slice(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    let plan = if c.opset < 10 {
        let starts = c.ints_attr("starts")?.unwrap_or_default();
        let ends = c.ints_attr("ends")?.unwrap_or_default();
        let axes = c.ints_attr("axes")?;
        slice_plan(&dims, &starts, &ends, axes.as_deref(), None)?
    } else {
        let opt = |i: usize, what: &str| c.optional(a, i).map(|v| v.ints(what)).transpose();
        let (axes, steps) = (opt(3, "Slice axes")?, opt(4, "Slice steps")?);
        slice_plan(
            &dims,
            &c.ints(a, 1)?.data,
            &c.ints(a, 2)?.data,
            axes.map(|v| v.data.as_slice()),
            steps.map(|v| v.data.as_slice()),
        )?
    };
    Ok(vec![apply_plan(c, x, &plan)?])
}

// ------------------------------------------------------------------ Expand, Tile

/// ONNX's multidirectional (NumPy) broadcast of two shapes.
fn broadcast_dims(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let at = |d: &[usize], i: usize| (i + d.len()).checked_sub(rank).map_or(1, |k| d[k]);
    (0..rank)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            _ => Err(Error::shape(
                "onnx",
                format!("shapes {a:?} and {b:?} do not broadcast"),
            )),
        })
        .collect()
}

/// The flat index in `from` of every element of `from` broadcast to `to`.
fn broadcast_map(from: &[usize], to: &[usize]) -> Result<Vec<usize>> {
    let off = to.len() - from.len();
    let st = strides(from);
    let mut src = Vec::with_capacity(host_numel(to)?);
    each_index(to, |i| {
        src.push(
            (0..from.len())
                .filter(|&k| from[k] != 1)
                .map(|k| i[off + k] * st[k])
                .sum(),
        );
        Ok(())
    })?;
    Ok(src)
}

/// Expand: `x` broadcast with the `shape` input (either side may be larger).
fn expand(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let shape = to_dims(&c.ints(a, 1)?.data, "Expand shape")?;
    let dims = x.dims();
    let out = broadcast_dims(&dims, &shape)?;
    numel(&out)?;
    match x {
        Value::Ints(_) => Ok(vec![take(c, x, &broadcast_map(&dims, &out)?, out)?]),
        _ => one(c.tensor(a, 0)?.expand(out)?),
    }
}

/// Tile: `x` repeated `repeats[i]` times along each axis.
fn tile(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    let reps = to_dims(&c.ints(a, 1)?.data, "Tile repeats")?;
    if reps.len() != dims.len() {
        return Err(Error::shape(
            "onnx",
            format!("Tile repeats {reps:?} for shape {dims:?}"),
        ));
    }
    let out: Vec<usize> = dims
        .iter()
        .zip(&reps)
        .map(|(d, r)| d.checked_mul(*r))
        .collect::<Option<_>>()
        .ok_or_else(|| Error::shape("onnx", format!("Tile of {dims:?} by {reps:?}")))?;
    numel(&out)?;
    if let Value::Ints(_) = x {
        let st = strides(&dims);
        let mut src = Vec::with_capacity(host_numel(&out)?);
        each_index(&out, |i| {
            src.push((0..dims.len()).map(|k| (i[k] % dims[k]) * st[k]).sum());
            Ok(())
        })?;
        return Ok(vec![take(c, x, &src, out)?]);
    }
    // [d0, d1] -> [1, d0, 1, d1] -> [r0, d0, r1, d1] -> [r0 * d0, r1 * d1]
    let pre: Vec<usize> = dims.iter().flat_map(|&d| [1, d]).collect();
    let big: Vec<usize> = dims.iter().zip(&reps).flat_map(|(&d, &r)| [r, d]).collect();
    one(c.tensor(a, 0)?.reshape(pre)?.expand(big)?.reshape(out)?)
}

// ------------------------------------------------------------------ Pad

/// For each output position along an axis of size `d` padded by `before`/`after` (negative
/// crops), the input position it copies, or `None` where the constant goes.
fn pad_axis(d: usize, before: i64, after: i64, mode: &str) -> Result<Vec<Option<usize>>> {
    let di = d as i64;
    let n = di
        .checked_add(before)
        .and_then(|v| v.checked_add(after))
        .filter(|&n| (0..=HOST_LIMIT as i64).contains(&n))
        .ok_or_else(|| Error::shape("onnx", format!("Pad {before}, {after} of an axis of {d}")))?;
    (0..n)
        .map(|o| {
            let i = o - before;
            if (0..di).contains(&i) {
                return Ok(Some(i as usize));
            }
            if mode == "constant" {
                return Ok(None);
            }
            if d == 0 {
                return Err(Error::shape(
                    "onnx",
                    format!("Pad mode {mode} cannot pad an empty axis"),
                ));
            }
            Ok(Some(match mode {
                "edge" => i.clamp(0, di - 1) as usize,
                "wrap" => i.rem_euclid(di) as usize,
                "reflect" if d == 1 => 0,
                "reflect" => {
                    let p = 2 * (di - 1);
                    let m = i.rem_euclid(p);
                    (if m >= di { p - m } else { m }) as usize
                }
                other => return Err(Error::unsupported("onnx", format!("Pad mode '{other}'"))),
            }))
        })
        .collect()
}

/// Pad: pads (and the constant value) as attributes before opset 11, then inputs; `axes` from
/// opset 18; modes constant, reflect, edge, wrap.
fn pad(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    let rank = dims.len();
    let mode = c.string("mode", "constant")?;
    if !["constant", "reflect", "edge", "wrap"].contains(&mode.as_str()) {
        return Err(c.unsupported(format!("Pad mode '{mode}'")));
    }
    let pads = if c.opset < 11 {
        let name = if c.opset < 2 { "paddings" } else { "pads" };
        c.ints_attr(name)?
            .ok_or_else(|| Error::invalid("onnx", "Pad without pads"))?
    } else {
        c.ints(a, 1)?.data.clone()
    };
    let axes: Vec<usize> = match c.optional(a, 3).filter(|_| c.opset >= 18) {
        Some(v) => v
            .ints("Pad axes")?
            .data
            .iter()
            .map(|&d| axis(d, rank))
            .collect::<Result<_>>()?,
        None => (0..rank).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(Error::shape(
            "onnx",
            format!("Pad: {} pads for {} axes", pads.len(), axes.len()),
        ));
    }
    let (mut before, mut after) = (vec![0i64; rank], vec![0i64; rank]);
    for (k, &ax) in axes.iter().enumerate() {
        before[ax] = pads[k];
        after[ax] = pads[k + axes.len()];
    }
    // the constant: an attribute before opset 11, else an optional input
    let (attr_value, fill) = if c.opset < 11 {
        (f64::from(c.float("value", 0.0)?), None)
    } else {
        (0.0, c.optional(a, 2).cloned())
    };
    let pad = Padding {
        before,
        after,
        mode: &mode,
        attr_value,
        fill,
    };
    Ok(vec![padded(c, x, &pad)?])
}

/// What [`padded`] adds (negative amounts crop).
struct Padding<'m> {
    before: Vec<i64>,
    after: Vec<i64>,
    mode: &'m str,
    /// The constant when `fill` is absent.
    attr_value: f64,
    /// The constant as a value (Pad's `constant_value` input).
    fill: Option<Value>,
}

/// `x` padded (or cropped) per axis, on the host or the device.
fn padded(c: &Ctx<'_>, x: &Value, p: &Padding<'_>) -> Result<Value> {
    let dims = x.dims();
    let rank = dims.len();
    let (before, after, mode, attr_value) = (&p.before, &p.after, p.mode, p.attr_value);
    let maps: Vec<Vec<Option<usize>>> = (0..rank)
        .map(|k| pad_axis(dims[k], before[k], after[k], mode))
        .collect::<Result<_>>()?;
    let out: Vec<usize> = maps.iter().map(Vec::len).collect();
    numel(&out)?;
    if let Value::Ints(xi) = x {
        let value = match &p.fill {
            Some(v) if mode == "constant" => scalar_i64(c, v, "Pad constant_value")?,
            _ => attr_value as i64,
        };
        let st = strides(&dims);
        let mut data = Vec::with_capacity(host_numel(&out)?);
        each_index(&out, |i| {
            let mut at = 0;
            for (k, &o) in i.iter().enumerate() {
                match maps[k][o] {
                    Some(s) => at += s * st[k],
                    None => {
                        data.push(value);
                        return Ok(());
                    }
                }
            }
            data.push(xi.data.get(at).copied().unwrap_or(value));
            Ok(())
        })?;
        return Ok(Value::Ints(Ints {
            dims: out,
            data,
            bool: xi.bool,
        }));
    }
    let mut t = x.tensor(c.device, "input 0")?;
    if mode != "constant" {
        // each axis: one index_select with the host-computed source positions
        for (k, m) in maps.iter().enumerate() {
            let src: Vec<usize> = m.iter().map(|s| s.unwrap_or(0)).collect();
            if src.len() != dims[k] || src.iter().enumerate().any(|(i, &s)| i != s) {
                t = if src.is_empty() {
                    let mut d = t.dims().to_vec();
                    d[k] = 0;
                    Tensor::zeros(d, t.dtype(), c.device)?
                } else {
                    t.index_select(k as isize, &index_tensor(c, &src)?)?
                };
            }
        }
        return Ok(Value::Tensor(t));
    }
    // constant: crop the negative pads, then pad the rest
    let crop: Vec<Span> = (0..rank)
        .map(|k| {
            let (b, e) = ((-before[k]).max(0), (-after[k]).max(0));
            Span {
                start: b,
                step: 1,
                len: (dims[k] as i64 - b - e).max(0) as usize,
            }
        })
        .collect();
    let t = slice_tensor(c, &t, &crop)?;
    let pairs: Vec<(usize, usize)> = (0..rank)
        .map(|k| (before[k].max(0) as usize, after[k].max(0) as usize))
        .collect();
    Ok(Value::Tensor(match &p.fill {
        Some(Value::Tensor(v)) => {
            // the value stays on the device: pad with 0 and select it outside the input
            let padded = t.pad(&pairs, 0.0)?;
            let inside = t.ones_like()?.pad(&pairs, 0.0)?;
            let inside = inside.compare(CmpOp::Ne, &inside.scalar_like(0.0)?)?;
            let v = v.reshape(Vec::<usize>::new())?.cast(t.dtype())?;
            inside.where_cond(&padded, &v)?
        }
        Some(v) => t.pad(&pairs, scalar_f64(c, v, "Pad constant_value")?)?,
        None => t.pad(&pairs, attr_value)?,
    }))
}

/// CenterCropPad: each of `axes` cropped or zero-padded to `shape`, centred (the extra element
/// of an odd difference goes at the end).
fn center_crop_pad(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    let rank = dims.len();
    let shape = to_dims(&c.ints(a, 1)?.data, "CenterCropPad shape")?;
    let axes: Vec<usize> = match c.ints_attr("axes")? {
        Some(v) => v.iter().map(|&d| axis(d, rank)).collect::<Result<_>>()?,
        None => (0..rank).collect(),
    };
    if shape.len() != axes.len() {
        return Err(Error::shape(
            "onnx",
            format!("CenterCropPad shape {shape:?} for axes {axes:?}"),
        ));
    }
    let (mut before, mut after) = (vec![0i64; rank], vec![0i64; rank]);
    for (&ax, &s) in axes.iter().zip(&shape) {
        let diff = s as i64 - dims[ax] as i64;
        // crop: (d - s) / 2 from the start; pad: (s - d) / 2 before
        before[ax] = if diff < 0 { -((-diff) / 2) } else { diff / 2 };
        after[ax] = diff - before[ax];
    }
    let pad = Padding {
        before,
        after,
        mode: "constant",
        attr_value: 0.0,
        fill: None,
    };
    Ok(vec![padded(c, x, &pad)?])
}

// ------------------------------------------------------------------ Split

/// Split: sizes from the `split` attribute (input before opset 2 and from 13), else equal parts
/// (`num_outputs` from opset 18, where the last part may be smaller).
fn split(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    if dims.is_empty() {
        return Err(Error::shape("onnx", "Split of a scalar"));
    }
    let ax = axis(c.int("axis", 0)?, dims.len())?;
    let d = dims[ax];
    let input = || -> Result<Option<Vec<i64>>> {
        c.optional(a, 1)
            .map(|v| v.ints("Split split").map(|i| i.data.clone()))
            .transpose()
    };
    let given = if (2..13).contains(&c.opset) {
        c.ints_attr("split")?
    } else if c.opset < 2 {
        match c.ints_attr("split")? {
            Some(s) => Some(s),
            None => input()?,
        }
    } else {
        input()?
    };
    let sizes: Vec<usize> = match given {
        Some(s) => to_dims(&s, "Split split")?,
        None => {
            let n_out = c.node.output.len() as i64;
            let n = if c.opset >= 18 {
                c.int("num_outputs", n_out)?
            } else {
                n_out
            };
            let n = usize::try_from(n)
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| Error::invalid("onnx", format!("Split into {n} parts")))?;
            if c.opset >= 18 {
                let size = d.div_ceil(n);
                (0..n)
                    .map(|i| size.min(d.saturating_sub(i * size)))
                    .collect()
            } else if d % n == 0 {
                vec![d / n; n]
            } else {
                return Err(Error::shape(
                    "onnx",
                    format!("Split of size {d} into {n} equal parts"),
                ));
            }
        }
    };
    if sizes.iter().sum::<usize>() != d {
        return Err(Error::shape(
            "onnx",
            format!("Split sizes {sizes:?} do not sum to {d}"),
        ));
    }
    pieces(c, x, ax, &sizes)
}

/// `x` cut along axis `ax` into consecutive pieces of `sizes` (which sum to its size there).
pub(super) fn pieces(c: &Ctx<'_>, x: &Value, ax: usize, sizes: &[usize]) -> Result<Vec<Value>> {
    let dims = x.dims();
    let mut start = 0;
    sizes
        .iter()
        .map(|&n| {
            let mut plan: Vec<Span> = dims.iter().map(|&d| Span::whole(d)).collect();
            plan[ax] = Span {
                start: start as i64,
                step: 1,
                len: n,
            };
            start += n;
            apply_plan(c, x, &plan)
        })
        .collect()
}

// ------------------------------------------------------------------ gathers and scatters

/// GatherElements: `out[p] = x[p with axis replaced by index[p]]`.
fn gather_elements(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    if dims.is_empty() {
        return Err(Error::shape("onnx", "GatherElements of a scalar"));
    }
    let ax = axis(c.int("axis", 0)?, dims.len())?;
    match c.arg(a, 1)? {
        Value::Ints(ii) => {
            if ii.dims.len() != dims.len() {
                return Err(Error::shape(
                    "onnx",
                    format!("GatherElements indices {:?} for data {dims:?}", ii.dims),
                ));
            }
            let src = element_positions(&dims, ii, ax, "GatherElements")?;
            Ok(vec![take(c, x, &src, ii.dims.clone())?])
        }
        idx => {
            let idx = fix_negative(&idx.tensor(c.device, "input 1")?, dims[ax])?;
            one(c.tensor(a, 0)?.gather(ax as isize, &idx)?)
        }
    }
}

/// The flat positions in data of shape `dims` that GatherElements reads (ScatterElements
/// writes): each index of `ii` replaces its own coordinate along `ax`.
fn element_positions(dims: &[usize], ii: &Ints, ax: usize, op: &str) -> Result<Vec<usize>> {
    let st = strides(dims);
    let mut out = Vec::with_capacity(ii.data.len());
    let mut values = ii.data.iter();
    each_index(&ii.dims, |p| {
        let v = *values
            .next()
            .ok_or_else(|| Error::shape("onnx", "indices too short"))?;
        let mut at = 0;
        for (k, &pk) in p.iter().enumerate() {
            let i = if k == ax {
                fix_index(v, dims[k], op)?
            } else if pk < dims[k] {
                pk
            } else {
                return Err(Error::shape(
                    "onnx",
                    format!("{op} indices {:?} exceed data {dims:?}", ii.dims),
                ));
            };
            at += i * st[k];
        }
        out.push(at);
        Ok(())
    })?;
    Ok(out)
}

/// GatherND: slices of `x` picked by the index tuples in the last axis of `indices`, after
/// `batch_dims` shared leading axes.
fn gather_nd(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    let b = usize::try_from(c.int("batch_dims", 0)?)
        .map_err(|_| Error::invalid("onnx", "negative batch_dims"))?;
    let ii = match c.arg(a, 1)? {
        Value::Tensor(t) => return gather_nd_device(c, x, t, b),
        other => other.ints("GatherND indices")?,
    };
    let r = ii.dims.len();
    let m = ii.dims.last().copied().unwrap_or(0);
    if r == 0 || b >= r || b + m > dims.len() || ii.dims[..b] != dims[..b] {
        return Err(Error::shape(
            "onnx",
            format!(
                "GatherND indices {:?} for data {dims:?}, batch_dims {b}",
                ii.dims
            ),
        ));
    }
    let inner: usize = dims[b + m..].iter().product();
    let pos = &ii.dims[..r - 1];
    let rows = tuple_rows(&dims, ii, b, "GatherND")?;
    let mut out = pos.to_vec();
    out.extend_from_slice(&dims[b + m..]);
    Ok(vec![take_rows(c, x, &rows, inner, out)?])
}

/// The rows that the index tuples of `ii` (its last axis, `m` long, after `b` batch axes shared
/// with the data) pick in data of shape `dims` viewed as `[prod(dims[..b + m]), inner]`:
/// GatherND reads them, ScatterND writes them. The caller has checked the shapes.
fn tuple_rows(dims: &[usize], ii: &Ints, b: usize, op: &str) -> Result<Vec<usize>> {
    let r = ii.dims.len();
    let m = ii.dims.last().copied().unwrap_or(0);
    let st = strides(&dims[..b + m]);
    let pos = &ii.dims[..r.saturating_sub(1)];
    let mut rows = Vec::with_capacity(pos.iter().product());
    let mut tuples = ii.data.chunks(m.max(1));
    each_index(pos, |p| {
        let tuple = if m == 0 {
            &[][..]
        } else {
            tuples.next().unwrap_or(&[])
        };
        if tuple.len() != m {
            return Err(Error::shape("onnx", format!("{op} indices too short")));
        }
        let mut row: usize = p[..b].iter().zip(&st).map(|(i, s)| i * s).sum();
        for (j, &v) in tuple.iter().enumerate() {
            row += fix_index(v, dims[b + j], op)? * st[b + j];
        }
        rows.push(row);
        Ok(())
    })?;
    Ok(rows)
}

/// GatherND with indices computed on the device: the row of each index tuple (in data reshaped
/// `[rows, inner]`) is a dot product with the row strides plus a host-built batch offset.
fn gather_nd_device(c: &Ctx<'_>, x: &Value, idx: &Tensor, b: usize) -> Outputs {
    let dims = x.dims();
    let idims = idx.dims().to_vec();
    let r = idims.len();
    let m = idims.last().copied().unwrap_or(0);
    if r == 0 || b >= r || b + m > dims.len() || idims[..b] != dims[..b] {
        return Err(Error::shape(
            "onnx",
            format!("GatherND indices {idims:?} for data {dims:?}, batch_dims {b}"),
        ));
    }
    let st = strides(&dims[..b + m]);
    let pos = &idims[..r - 1];
    let mut offsets = Vec::with_capacity(host_numel(pos)?);
    each_index(pos, |p| {
        offsets.push(p[..b].iter().zip(&st).map(|(i, s)| i * s).sum());
        Ok(())
    })?;
    let mut rows = index_tensor(c, &offsets)?.reshape(pos.to_vec())?;
    if m > 0 {
        let idx = idx.cast(DType::I32)?;
        let sizes = index_tensor(c, &dims[b..b + m])?;
        let neg = idx.compare(CmpOp::Lt, &idx.scalar_like(0.0)?)?;
        let idx = neg.where_cond(&idx.binary(BinaryOp::Add, &sizes)?, &idx)?;
        let tuple = idx.binary(BinaryOp::Mul, &index_tensor(c, &st[b..b + m])?)?;
        rows = rows.binary(BinaryOp::Add, &tuple.sum(&[-1], false)?)?;
    }
    let inner: usize = dims[b + m..].iter().product();
    let mut out = pos.to_vec();
    out.extend_from_slice(&dims[b + m..]);
    let t = x.tensor(c.device, "input 0")?;
    if rows.numel() == 0 || inner == 0 {
        return one(Tensor::zeros(out, t.dtype(), c.device)?);
    }
    let flat = t.reshape([t.numel() / inner, inner])?;
    let picked = flat.index_select(0, &rows.reshape([rows.numel()])?)?;
    one(picked.reshape(out)?)
}

/// A scatter's reduction: how an update combines with the value it lands on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Reduction {
    None,
    Add,
    Mul,
    Max,
    Min,
}

fn reduction(c: &Ctx<'_>) -> Result<Reduction> {
    Ok(match c.string("reduction", "none")?.as_str() {
        "none" => Reduction::None,
        "add" => Reduction::Add,
        "mul" => Reduction::Mul,
        "max" => Reduction::Max,
        "min" => Reduction::Min,
        other => return Err(c.unsupported(format!("scatter reduction '{other}'"))),
    })
}

/// `x` with update element `k` (row-major in `upd`) combined into flat position `targets[k]`,
/// in order. On the device: positions hit once per round are updated with one gather and
/// `where`, so duplicates take one round each and "none" keeps the last write.
fn scatter(c: &Ctx<'_>, x: &Value, upd: &Value, targets: &[usize], red: Reduction) -> Outputs {
    let dims = x.dims();
    let n: usize = dims.iter().product();
    if targets.iter().any(|&t| t >= n) {
        return Err(Error::index("onnx", "scatter target out of range"));
    }
    if let (Value::Ints(xi), Value::Ints(ui)) = (x, upd) {
        let mut data = xi.data.clone();
        for (&t, &u) in targets.iter().zip(&ui.data) {
            let d = &mut data[t];
            *d = match red {
                Reduction::None => u,
                Reduction::Add => d.wrapping_add(u),
                Reduction::Mul => d.wrapping_mul(u),
                Reduction::Max => (*d).max(u),
                Reduction::Min => (*d).min(u),
            };
        }
        return one_ints(Ints { data, ..xi.clone() });
    }
    let xt = x.tensor(c.device, "input 0")?;
    if targets.is_empty() {
        return one(xt);
    }
    let ut = upd.tensor(c.device, "updates")?;
    let flat_u = ut.reshape([ut.numel()])?;
    if flat_u.numel() < targets.len() {
        return Err(Error::shape(
            "onnx",
            "scatter has fewer updates than indices",
        ));
    }
    if red == Reduction::Add {
        let flat_x = xt.reshape([n])?;
        let u = flat_u.narrow(0, 0, targets.len())?;
        return one(flat_x
            .scatter_add(0, &index_tensor(c, targets)?, &u)?
            .reshape(dims)?);
    }
    // rounds[r] = the (target, update) pairs that are the r-th write to their target
    let mut hits = vec![0usize; n];
    let mut rounds: Vec<Vec<(usize, usize)>> = Vec::new();
    for (k, &t) in targets.iter().enumerate() {
        let r = if red == Reduction::None { 0 } else { hits[t] };
        hits[t] += 1;
        if rounds.len() <= r {
            rounds.resize(r + 1, Vec::new());
        }
        rounds[r].push((t, k));
    }
    let mut cur = xt;
    for round in rounds {
        let mut src = vec![0usize; n];
        let mut mask = vec![false; n];
        for (t, k) in round {
            src[t] = k;
            mask[t] = true;
        }
        let picked = flat_u
            .index_select(0, &index_tensor(c, &src)?)?
            .reshape(dims.clone())?;
        let combined = match red {
            Reduction::None | Reduction::Add => picked,
            Reduction::Mul => cur.binary(BinaryOp::Mul, &picked)?,
            Reduction::Max => cur.binary(BinaryOp::Max, &picked)?,
            Reduction::Min => cur.binary(BinaryOp::Min, &picked)?,
        };
        cur = mask_tensor(c, dims.clone(), &mask)?.where_cond(&combined, &cur)?;
    }
    one(cur)
}

/// ScatterElements (and opset-9 Scatter): `updates[p]` goes to `x[p with axis replaced by
/// indices[p]]`.
fn scatter_elements(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let upd = c.arg(a, 2)?;
    let dims = x.dims();
    if dims.is_empty() {
        return Err(Error::shape("onnx", "ScatterElements of a scalar"));
    }
    let ax = axis(c.int("axis", 0)?, dims.len())?;
    let red = reduction(c)?;
    match c.arg(a, 1)? {
        Value::Ints(ii) => {
            if ii.dims.len() != dims.len() || ii.dims != upd.dims() {
                return Err(Error::shape(
                    "onnx",
                    format!(
                        "ScatterElements indices {:?}, updates {:?}, data {dims:?}",
                        ii.dims,
                        upd.dims()
                    ),
                ));
            }
            let targets = element_positions(&dims, ii, ax, "ScatterElements")?;
            scatter(c, x, upd, &targets, red)
        }
        idx => {
            // computed indices: add is scatter_add; none assumes distinct targets
            let idx = fix_negative(&idx.tensor(c.device, "input 1")?, dims[ax])?;
            let (xt, ut) = (c.tensor(a, 0)?, c.tensor(a, 2)?);
            match red {
                Reduction::Add => one(xt.scatter_add(ax as isize, &idx, &ut)?),
                Reduction::None => {
                    let written = xt.zeros_like()?.scatter_add(ax as isize, &idx, &ut)?;
                    let ones = Tensor::ones(idx.dims(), DType::F32, c.device)?;
                    let hit = Tensor::zeros(dims, DType::F32, c.device)?.scatter_add(
                        ax as isize,
                        &idx,
                        &ones,
                    )?;
                    let hit = hit.compare(CmpOp::Gt, &hit.scalar_like(0.0)?)?;
                    one(hit.where_cond(&written, &xt)?)
                }
                _ => Err(c.unsupported("ScatterElements mul/max/min with computed indices")),
            }
        }
    }
}

/// ScatterND: `updates` slices go to the positions named by the index tuples in the last axis of
/// `indices`.
fn scatter_nd(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let upd = c.arg(a, 2)?;
    let dims = x.dims();
    let ii = c.ints(a, 1)?;
    let red = reduction(c)?;
    let r = ii.dims.len();
    let m = ii.dims.last().copied().unwrap_or(0);
    let pos = &ii.dims[..r.saturating_sub(1)];
    let mut want = pos.to_vec();
    want.extend_from_slice(dims.get(m..).unwrap_or(&[]));
    if r == 0 || m > dims.len() || upd.dims() != want {
        return Err(Error::shape(
            "onnx",
            format!(
                "ScatterND indices {:?}, updates {:?}, data {dims:?}",
                ii.dims,
                upd.dims()
            ),
        ));
    }
    let inner: usize = dims[m..].iter().product();
    let targets: Vec<usize> = tuple_rows(&dims, ii, 0, "ScatterND")?
        .into_iter()
        .flat_map(|row| row * inner..(row + 1) * inner)
        .collect();
    scatter(c, x, upd, &targets, red)
}

// ------------------------------------------------------------------ OneHot, Trilu, EyeLike

/// OneHot: a new axis of `depth` holding `values[1]` at each index (negative counts from the
/// end) and `values[0]` elsewhere.
fn one_hot(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let idx = c.arg(a, 0)?;
    let depth = scalar_i64(c, c.arg(a, 1)?, "OneHot depth")?;
    let depth = usize::try_from(depth)
        .ok()
        .filter(|&d| d > 0)
        .ok_or_else(|| Error::invalid("onnx", format!("OneHot depth {depth}")))?;
    let values = c.arg(a, 2)?;
    if values.dims().iter().product::<usize>() != 2 {
        return Err(Error::shape("onnx", "OneHot values must hold two elements"));
    }
    let dims = idx.dims();
    let ax = axis(c.int("axis", -1)?, dims.len() + 1)?;
    let mut out = dims.clone();
    out.insert(ax, depth);
    let d = depth as i64;
    if let (Value::Ints(ii), Value::Ints(vi)) = (idx, values) {
        let (off, on) = (vi.data[0], vi.data[1]);
        let inner: usize = dims[ax..].iter().product();
        let mut data = Vec::with_capacity(ii.data.len() * depth);
        for chunk in ii.data.chunks(inner.max(1)) {
            for k in 0..d {
                data.extend(chunk.iter().map(|&i| {
                    let i = if i < 0 { i + d } else { i };
                    if i == k { on } else { off }
                }));
            }
        }
        return one_ints(Ints {
            dims: out,
            data,
            bool: vi.bool,
        });
    }
    let it = match idx {
        Value::Tensor(t) if t.dtype().is_float() => {
            t.unary(kiln_core::UnaryOp::Floor)?.cast(DType::I32)?
        }
        other => other.tensor(c.device, "indices")?.cast(DType::I32)?,
    };
    let it = fix_negative(&it, depth)?.unsqueeze(ax as isize)?;
    let mut cls_dims = vec![1; out.len()];
    cls_dims[ax] = depth;
    let classes =
        Tensor::arange(0.0, depth as f64, 1.0, DType::I32, c.device)?.reshape(cls_dims)?;
    let hit = it.compare(CmpOp::Eq, &classes)?;
    let vt = values.tensor(c.device, "values")?.reshape([2])?;
    let off = vt.narrow(0, 0, 1)?.reshape(Vec::<usize>::new())?;
    let on = vt.narrow(0, 1, 1)?.reshape(Vec::<usize>::new())?;
    one(hit.where_cond(&on, &off)?)
}

/// Trilu: the upper (or lower) triangle of the last two axes from diagonal `k`, zeros elsewhere.
fn trilu(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    if dims.len() < 2 {
        return Err(Error::shape("onnx", format!("Trilu of {dims:?}")));
    }
    let k = match c.optional(a, 1) {
        Some(v) => scalar_i64(c, v, "Trilu k")?,
        None => 0,
    };
    let upper = c.int("upper", 1)? != 0;
    let (n, m) = (dims[dims.len() - 2], dims[dims.len() - 1]);
    let keep = |e: usize| {
        let (i, j) = ((e / m.max(1)) % n.max(1), e % m.max(1));
        let d = j as i64 - i as i64;
        if upper { d >= k } else { d <= k }
    };
    if let Value::Ints(xi) = x {
        let data = xi
            .data
            .iter()
            .enumerate()
            .map(|(e, &v)| if keep(e) { v } else { 0 })
            .collect();
        return one_ints(Ints { data, ..xi.clone() });
    }
    let mask: Vec<bool> = (0..n * m).map(keep).collect();
    let t = c.tensor(a, 0)?;
    one(mask_tensor(c, vec![n, m], &mask)?.where_cond(&t, &t.scalar_like(0.0)?)?)
}

/// The kiln dtype of an ONNX element type code for a device result (`Ok`), or `Err(is_bool)` for
/// an integer or bool type, whose constant result stays on the host.
pub(super) fn onnx_dtype(c: &Ctx<'_>, code: i64) -> Result<core::result::Result<DType, bool>> {
    let t = i32::try_from(code)
        .ok()
        .and_then(|t| crate::DataType::try_from(t).ok());
    match t.and_then(|t| crate::value::kiln_dtype(c.device, t)) {
        Some(DType::Bool) => Ok(Err(true)),
        Some(DType::I32 | DType::U32) => Ok(Err(false)),
        Some(dt) => Ok(Ok(dt)),
        None => Err(c.unsupported(format!("ONNX element type {code}"))),
    }
}

/// EyeLike: ones on diagonal `k` of a 2-D tensor shaped like the input, of type `dtype`
/// (default the input's).
fn eye_like(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    let [n, m] = dims[..] else {
        return Err(Error::shape("onnx", format!("EyeLike of {dims:?}")));
    };
    let k = c.int("k", 0)?;
    let vals = (0..n * m).map(|e| i64::from((e % m) as i64 - (e / m) as i64 == k));
    let kind = match (c.int("dtype", -1)?, x) {
        (-1, Value::Ints(i)) => Err(i.bool),
        (-1, _) => Ok(c.tensor(a, 0)?.dtype()),
        (code, _) => onnx_dtype(c, code)?,
    };
    match kind {
        Err(bool) => one_ints(Ints {
            dims,
            data: vals.collect(),
            bool,
        }),
        Ok(dt) => {
            let data = TensorData::from_f64_iter(vals.map(|v| v as f64), dt, Shape::from(dims));
            one(Tensor::from_data(&data, c.device)?)
        }
    }
}

// ------------------------------------------------------------------ DepthToSpace, SpaceToDepth

/// The 4-D dims and the block size of DepthToSpace/SpaceToDepth.
fn block_args(c: &Ctx<'_>, x: &Value) -> Result<([usize; 4], usize)> {
    let dims = x.dims();
    let [n, ch, h, w] = dims[..] else {
        return Err(Error::shape(
            "onnx",
            format!("expects a 4-D input, got {dims:?}"),
        ));
    };
    let b = usize::try_from(c.int("blocksize", 0)?)
        .ok()
        .filter(|&b| b > 0)
        .ok_or_else(|| Error::invalid("onnx", "blocksize must be positive"))?;
    Ok(([n, ch, h, w], b))
}

/// DepthToSpace: channel blocks moved into `blocksize x blocksize` spatial tiles (mode DCR or
/// CRD).
fn depth_to_space(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let ([n, ch, h, w], b) = block_args(c, x)?;
    if ch % (b * b) != 0 {
        return Err(Error::shape(
            "onnx",
            format!("{ch} channels for blocksize {b}"),
        ));
    }
    let co = ch / (b * b);
    let post = vec![n, co, h * b, w * b];
    let out = match c.string("mode", "DCR")?.as_str() {
        "DCR" => rearrange(c, x, vec![n, b, b, co, h, w], &[0, 3, 4, 1, 5, 2], post)?,
        "CRD" => rearrange(c, x, vec![n, co, b, b, h, w], &[0, 1, 4, 2, 5, 3], post)?,
        other => return Err(c.unsupported(format!("DepthToSpace mode '{other}'"))),
    };
    Ok(vec![out])
}

/// SpaceToDepth: `blocksize x blocksize` spatial tiles moved into channels.
fn space_to_depth(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let ([n, ch, h, w], b) = block_args(c, x)?;
    if h % b != 0 || w % b != 0 {
        return Err(Error::shape("onnx", format!("{h}x{w} for blocksize {b}")));
    }
    let pre = vec![n, ch, h / b, b, w / b, b];
    let post = vec![n, ch * b * b, h / b, w / b];
    Ok(vec![rearrange(c, x, pre, &[0, 3, 5, 1, 2, 4], post)?])
}

// ------------------------------------------------------------------ CumSum, ReverseSequence

/// CumSum along the `axis` input; `exclusive` leaves out the element itself, `reverse` runs from
/// the end.
fn cumsum(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    scan(c, a, false)
}

/// CumProd: CumSum's running product.
fn cumprod(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    scan(c, a, true)
}

/// Inclusive running sum of a device tensor along `ax`.
fn running_sum(t: &Tensor, ax: usize, reverse: bool) -> Result<Tensor> {
    Tensor::apply(Op::Cumsum { axis: ax, reverse }, &[t])
}

/// CumSum (`prod` false) or CumProd.
fn scan(c: &Ctx<'_>, a: &[Value], prod: bool) -> Outputs {
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    if dims.is_empty() {
        return Err(Error::shape("onnx", "a running sum or product of a scalar"));
    }
    let ax = axis(scalar_i64(c, c.arg(a, 1)?, "axis input")?, dims.len())?;
    let excl = c.int("exclusive", 0)? != 0;
    let rev = c.int("reverse", 0)? != 0;
    let len = dims[ax];
    let (unit, step): (i64, fn(i64, i64) -> i64) = if prod {
        (1, i64::wrapping_mul)
    } else {
        (0, i64::wrapping_add)
    };
    if let Value::Ints(xi) = x {
        let inner: usize = dims[ax + 1..].iter().product();
        let mut data = xi.data.clone();
        for lane in 0..xi.data.len() / len.max(1) {
            let (o, i) = (lane / inner.max(1), lane % inner.max(1));
            let at = |k: usize| (o * len + k) * inner + i;
            let order: Vec<usize> = if rev {
                (0..len).rev().collect()
            } else {
                (0..len).collect()
            };
            let mut acc = unit;
            for k in order {
                let v = xi.data[at(k)];
                data[at(k)] = if excl { acc } else { step(acc, v) };
                acc = step(acc, v);
            }
        }
        return one_ints(Ints { data, ..xi.clone() });
    }
    let t = c.tensor(a, 0)?;
    let cs = if prod {
        if !t.dtype().is_float() {
            return Err(c.unsupported(format!("CumProd of a computed {} tensor", t.dtype())));
        }
        // |product| = exp(sum of log|x|); the sign is the parity of the negatives so far, and
        // a zero so far makes it 0
        let zero = t.compare(CmpOp::Eq, &t.scalar_like(0.0)?)?;
        let neg = t.compare(CmpOp::Lt, &t.scalar_like(0.0)?)?;
        let mag = zero.where_cond(&t.scalar_like(1.0)?, &t.unary(kiln_core::UnaryOp::Abs)?)?;
        let log = running_sum(&mag.unary(kiln_core::UnaryOp::Log)?, ax, rev)?;
        let negs = running_sum(&neg.cast(t.dtype())?, ax, rev)?;
        let half = negs.binary_scalar(BinaryOp::Mul, 0.5)?;
        let odd = half.compare(CmpOp::Ne, &half.unary(kiln_core::UnaryOp::Floor)?)?;
        let zeros = running_sum(&zero.cast(t.dtype())?, ax, rev)?;
        let mag = log.unary(kiln_core::UnaryOp::Exp)?;
        let signed = odd.where_cond(&mag.unary(kiln_core::UnaryOp::Neg)?, &mag)?;
        let any_zero = zeros.compare(CmpOp::Gt, &zeros.scalar_like(0.0)?)?;
        any_zero.where_cond(&t.scalar_like(0.0)?, &signed)?
    } else {
        running_sum(&t, ax, rev)?
    };
    if !excl || len == 0 {
        return one(cs);
    }
    // exclusive: the inclusive results shifted by one along the axis, the unit first
    let mut pads = vec![(0, 0); ax + 1];
    let part = if rev {
        pads[ax] = (0, 1);
        cs.narrow(ax as isize, 1, len - 1)?
    } else {
        pads[ax] = (1, 0);
        cs.narrow(ax as isize, 0, len - 1)?
    };
    one(part.pad(&pads, unit as f64)?)
}

/// ReverseSequence: for each batch entry `b`, its first `sequence_lens[b]` time steps reversed.
fn reverse_sequence(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    let lens = c.ints(a, 1)?;
    let time = axis(c.int("time_axis", 0)?, dims.len())?;
    let batch = axis(c.int("batch_axis", 1)?, dims.len())?;
    if dims.len() < 2 || time == batch || lens.data.len() != dims[batch] {
        return Err(Error::shape(
            "onnx",
            format!(
                "ReverseSequence of {dims:?} with {} lengths",
                lens.data.len()
            ),
        ));
    }
    let st = strides(&dims);
    let mut src = Vec::with_capacity(dims.iter().product());
    each_index(&dims, |i| {
        let l = lens.data[i[batch]].clamp(0, dims[time] as i64) as usize;
        let t = i[time];
        let from = if t < l { l - 1 - t } else { t };
        src.push(
            i.iter()
                .enumerate()
                .map(|(k, &v)| if k == time { from } else { v } * st[k])
                .sum(),
        );
        Ok(())
    })?;
    Ok(vec![take(c, x, &src, dims)?])
}

// ------------------------------------------------------------------ Compress, NonZero

/// Compress: the entries (along `axis`, or of the flattened input) whose condition is true.
/// The condition must be known on the host: it decides the output shape.
fn compress(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let cond = c.ints(a, 1)?;
    let dims = x.dims();
    let picks = |n: usize| -> Vec<usize> {
        (0..n.min(cond.data.len()))
            .filter(|&i| cond.data[i] != 0)
            .collect()
    };
    match c.node.attr_int("axis").map_err(onnx_err)? {
        None => {
            let p = picks(dims.iter().product());
            let n = p.len();
            Ok(vec![take(c, x, &p, vec![n])?])
        }
        Some(ax) => {
            if dims.is_empty() {
                return Err(Error::shape("onnx", "Compress of a scalar along an axis"));
            }
            let ax = axis(ax, dims.len())?;
            Ok(vec![select_axis(c, x, ax, &picks(dims[ax]))?])
        }
    }
}

/// NonZero: the coordinates of the nonzero elements, `[rank, count]`. Only for values known on
/// the host: the count is the output's shape.
fn non_zero(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let Value::Ints(x) = c.arg(a, 0)? else {
        return Err(c.unsupported(
            "NonZero of a tensor computed on the device (its output shape depends on the data)",
        ));
    };
    let mut coords: Vec<Vec<i64>> = vec![Vec::new(); x.dims.len()];
    let mut count = 0;
    let mut values = x.data.iter();
    each_index(&x.dims, |i| {
        if values.next().is_some_and(|&v| v != 0) {
            count += 1;
            for (k, &v) in i.iter().enumerate() {
                coords[k].push(v as i64);
            }
        }
        Ok(())
    })?;
    one_ints(Ints {
        dims: vec![x.dims.len(), count],
        data: coords.concat(),
        bool: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::attribute_proto::AttributeType;
    use crate::{AttributeProto, NodeProto};
    use alloc::string::String;
    use kiln_core::Device;

    fn attr(name: &str, t: AttributeType) -> AttributeProto {
        AttributeProto {
            name: Some(name.into()),
            r#type: Some(t as i32),
            ..Default::default()
        }
    }

    fn int(name: &str, v: i64) -> AttributeProto {
        AttributeProto {
            i: Some(v),
            ..attr(name, AttributeType::Int)
        }
    }

    fn list(name: &str, v: &[i64]) -> AttributeProto {
        AttributeProto {
            ints: v.to_vec(),
            ..attr(name, AttributeType::Ints)
        }
    }

    fn text(name: &str, v: &str) -> AttributeProto {
        AttributeProto {
            s: Some(v.as_bytes().to_vec()),
            ..attr(name, AttributeType::String)
        }
    }

    fn float(name: &str, v: f32) -> AttributeProto {
        AttributeProto {
            f: Some(v),
            ..attr(name, AttributeType::Float)
        }
    }

    fn ints(dims: &[usize], data: &[i64]) -> Value {
        Value::Ints(Ints {
            dims: dims.to_vec(),
            data: data.to_vec(),
            bool: false,
        })
    }

    fn seq(dims: &[usize]) -> Value {
        let n: usize = dims.iter().product();
        ints(dims, &(0..n as i64).collect::<Vec<_>>())
    }

    fn run(f: OpFn, opset: i64, attrs: &[AttributeProto], args: &[Value], outs: usize) -> Outputs {
        let device = Device::cpu();
        let node = NodeProto {
            attribute: attrs.to_vec(),
            output: (0..outs)
                .map(|i| alloc::format!("y{i}"))
                .collect::<Vec<String>>(),
            ..Default::default()
        };
        super::super::run_alone(f, &device, opset, &node, args)
    }

    /// Dims and values of a result, host or device.
    fn vals(v: &Value) -> (Vec<usize>, Vec<i64>) {
        match v {
            Value::Ints(i) => (i.dims.clone(), i.data.clone()),
            Value::Tensor(t) => {
                let d = t.to_data().unwrap().to_f64_vec();
                (t.dims().to_vec(), d.iter().map(|&x| x as i64).collect())
            }
            other => panic!("not a tensor: {}", other.describe()),
        }
    }

    /// Runs `f` on host integers, then with the inputs `on_device` as i32 device tensors, and
    /// checks that both give `want` of shape `dims` (the second from the device path).
    fn check(
        f: OpFn,
        attrs: &[AttributeProto],
        args: &[Value],
        on_device: &[usize],
        dims: &[usize],
        want: &[i64],
    ) {
        let host = run(f, 18, attrs, args, 1).unwrap();
        assert!(matches!(host[0], Value::Ints(_)));
        assert_eq!(vals(&host[0]), (dims.to_vec(), want.to_vec()), "host");
        let dev = Device::cpu();
        let dargs: Vec<Value> = args
            .iter()
            .enumerate()
            .map(|(i, v)| match on_device.contains(&i) {
                true => Value::Tensor(v.tensor(&dev, "test").unwrap()),
                false => v.clone(),
            })
            .collect();
        let out = run(f, 18, attrs, &dargs, 1).unwrap();
        assert!(matches!(out[0], Value::Tensor(_)));
        assert_eq!(vals(&out[0]), (dims.to_vec(), want.to_vec()), "device");
    }

    #[test]
    fn reshape_dims_copies_zeros_and_infers_one_dimension() {
        assert_eq!(reshape_dims(&[2, 3, 4], &[0, -1], false).unwrap(), [2, 12]);
        assert_eq!(
            reshape_dims(&[2, 3, 4], &[-1, 0, 2], false).unwrap(),
            [4, 3, 2]
        );
        assert_eq!(reshape_dims(&[2, 3, 4], &[3, -1], false).unwrap(), [3, 8]);
        assert_eq!(reshape_dims(&[0, 3], &[-1, 3], false).unwrap(), [0, 3]);
        assert_eq!(reshape_dims(&[0, 3], &[3, 0], true).unwrap(), [3, 0]);
        assert_eq!(reshape_dims(&[], &[1, 1], false).unwrap(), [1, 1]);
        assert!(reshape_dims(&[2, 3, 4], &[5, -1], false).is_err());
        assert!(reshape_dims(&[2, 3, 4], &[-1, -1], false).is_err());
        assert!(reshape_dims(&[2, 3], &[0, 0, 0], false).is_err());
        assert!(reshape_dims(&[2, 3], &[-2, 3], false).is_err());
        assert!(reshape_dims(&[2, 3], &[i64::MAX, 4], false).is_err());
        assert!(reshape_dims(&[2, 3], &[i64::MAX, -1], false).is_err());
    }

    #[test]
    fn host_concat_interleaves_rows() {
        let a = Ints {
            dims: vec![2, 1],
            data: vec![1, 2],
            bool: false,
        };
        let b = Ints {
            dims: vec![2, 2],
            data: vec![3, 4, 5, 6],
            bool: false,
        };
        let c = host_concat(&[&a, &b], 1).unwrap();
        assert_eq!((c.dims, c.data), (vec![2, 3], vec![1, 3, 4, 2, 5, 6]));
        let e = Ints::vector(Vec::new());
        let c = host_concat(&[&e, &Ints::vector(vec![7]), &e], 0).unwrap();
        assert_eq!((c.dims, c.data), (vec![1], vec![7]));
        assert!(host_concat(&[&a, &Ints::vector(vec![1])], 0).is_err());
        assert!(host_concat(&[], 0).is_err());
    }

    #[test]
    fn concat_of_host_and_device_values() {
        let args = [seq(&[1, 2]), ints(&[1, 2], &[7, 8])];
        check(
            concat,
            &[int("axis", 0)],
            &args,
            &[0],
            &[2, 2],
            &[0, 1, 7, 8],
        );
        assert!(run(concat, 13, &[], &[ints(&[], &[1])], 1).is_err());
    }

    #[test]
    fn spans_clamp_as_onnx_says() {
        let s = Span::new(4, -1, -5, -2).unwrap();
        assert_eq!((s.start, s.len), (3, 2));
        assert_eq!(Span::new(4, 1, i64::MAX, 3).unwrap().len, 1);
        assert_eq!(Span::new(4, -100, 2, 1).unwrap().len, 2);
        assert_eq!(Span::new(4, 5, 9, 1).unwrap().len, 0);
        assert_eq!(Span::new(4, i64::MAX, i64::MIN, i64::MIN).unwrap().len, 1);
        assert_eq!(Span::new(0, 0, -1, -1).unwrap().len, 0);
        assert!(Span::new(4, 0, 1, 0).is_err());
        let plan = slice_plan(&[3, 4], &[-1, 2], &[-5, 0], Some(&[1, 0]), Some(&[-2, -1]));
        assert_eq!(span_map(&[3, 4], &plan.unwrap()).unwrap(), [11, 9, 7, 5]);
        assert!(slice_plan(&[3, 4], &[0, 0], &[1, 1], Some(&[1, -1]), None).is_err());
    }

    #[test]
    fn slice_with_negative_and_clamped_steps() {
        let args = [
            seq(&[3, 4]),
            ints(&[2], &[-1, 2]),
            ints(&[2], &[-5, 0]),
            ints(&[2], &[1, 0]),
            ints(&[2], &[-2, -1]),
        ];
        check(slice, &[], &args, &[0], &[2, 2], &[11, 9, 7, 5]);
        let args = [
            seq(&[3, 4]),
            ints(&[1], &[1]),
            ints(&[1], &[1000]),
            ints(&[1], &[-1]),
            ints(&[1], &[3]),
        ];
        check(slice, &[], &args, &[0], &[3, 1], &[1, 5, 9]);
        let attrs = [list("starts", &[1]), list("ends", &[2])];
        let out = run(slice, 9, &attrs, &[seq(&[3, 2])], 1).unwrap();
        assert_eq!(vals(&out[0]), (vec![1, 2], vec![2, 3]));
    }

    #[test]
    fn gather_with_a_scalar_index_drops_the_axis() {
        let args = [seq(&[2, 3]), ints(&[], &[-1])];
        check(gather, &[int("axis", 1)], &args, &[0], &[2], &[2, 5]);
        let args = [seq(&[3, 2]), ints(&[2, 2], &[2, 0, 1, 1])];
        check(
            gather,
            &[],
            &args,
            &[0],
            &[2, 2, 2],
            &[4, 5, 0, 1, 2, 3, 2, 3],
        );
        let args = [seq(&[3]), ints(&[0], &[])];
        check(gather, &[], &args, &[0], &[0], &[]);
        assert!(run(gather, 13, &[], &[seq(&[3]), ints(&[], &[3])], 1).is_err());
        assert!(run(gather, 13, &[], &[ints(&[], &[3]), ints(&[], &[0])], 1).is_err());
    }

    #[test]
    fn gather_elements_and_gather_nd() {
        let args = [ints(&[2, 2], &[1, 2, 3, 4]), ints(&[2, 2], &[0, 0, 1, -2])];
        check(
            gather_elements,
            &[int("axis", 1)],
            &args,
            &[0],
            &[2, 2],
            &[1, 1, 4, 3],
        );
        let args = [seq(&[2, 2, 2]), ints(&[2, 1], &[1, 0])];
        check(
            gather_nd,
            &[int("batch_dims", 1)],
            &args,
            &[0],
            &[2, 2],
            &[2, 3, 4, 5],
        );
        let args = [seq(&[2, 2]), ints(&[2, 2], &[0, 1, 1, -1])];
        check(gather_nd, &[], &args, &[0], &[2], &[1, 3]);
        check(gather_nd, &[], &args, &[0, 1], &[2], &[1, 3]);
        let args = [seq(&[2, 2, 2]), ints(&[2, 1], &[1, 0])];
        let attrs = [int("batch_dims", 1)];
        check(gather_nd, &attrs, &args, &[0, 1], &[2, 2], &[2, 3, 4, 5]);
        let args = [seq(&[2, 3]), ints(&[2, 0], &[])];
        check(
            gather_nd,
            &[],
            &args,
            &[0, 1],
            &[2, 2, 3],
            &[0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5],
        );
    }

    #[test]
    fn pad_modes() {
        let x = ints(&[1, 3], &[1, 2, 3]);
        let pads = ints(&[4], &[0, 2, 0, 1]);
        let run_mode = |mode: &str, want: &[i64]| {
            let args = [x.clone(), pads.clone()];
            check(pad, &[text("mode", mode)], &args, &[0], &[1, 6], want);
        };
        run_mode("reflect", &[3, 2, 1, 2, 3, 2]);
        run_mode("edge", &[1, 1, 1, 2, 3, 3]);
        run_mode("wrap", &[2, 3, 1, 2, 3, 1]);
        run_mode("constant", &[0, 0, 1, 2, 3, 0]);
        let args = [x.clone(), ints(&[4], &[0, -1, 0, 2]), ints(&[], &[9])];
        check(pad, &[], &args, &[0], &[1, 4], &[2, 3, 9, 9]);
        let args = [
            x.clone(),
            ints(&[2], &[1, 0]),
            Value::Absent,
            ints(&[1], &[0]),
        ];
        check(pad, &[], &args, &[0], &[2, 3], &[0, 0, 0, 1, 2, 3]);
        assert!(
            run(
                pad,
                18,
                &[text("mode", "edge")],
                &[seq(&[0]), ints(&[2], &[1, 0])],
                1
            )
            .is_err()
        );
    }

    #[test]
    fn pad_before_opset_11_takes_attributes() {
        let dev = Device::cpu();
        let x = Value::Tensor(seq(&[2]).tensor(&dev, "x").unwrap());
        let attrs = [list("pads", &[1, 2]), float("value", 5.0)];
        let out = run(pad, 2, &attrs, &[x], 1).unwrap();
        assert_eq!(vals(&out[0]), (vec![5], vec![5, 0, 1, 5, 5]));
        let attrs = [list("paddings", &[0, 1]), float("value", 5.0)];
        let out = run(pad, 1, &attrs, &[seq(&[2])], 1).unwrap();
        assert_eq!(vals(&out[0]), (vec![3], vec![0, 1, 5]));
    }

    #[test]
    fn squeeze_and_unsqueeze_on_the_host() {
        let out = run(unsqueeze, 13, &[], &[seq(&[2]), ints(&[2], &[-1, 0])], 1).unwrap();
        assert_eq!(out[0].dims(), [1, 2, 1]);
        let out = run(squeeze, 11, &[list("axes", &[-1])], &[seq(&[2, 1])], 1).unwrap();
        assert_eq!(vals(&out[0]), (vec![2], vec![0, 1]));
        let out = run(squeeze, 13, &[], &[seq(&[1, 2, 1])], 1).unwrap();
        assert_eq!(out[0].dims(), [2]);
        assert!(run(squeeze, 13, &[], &[seq(&[2]), ints(&[1], &[0])], 1).is_err());
    }

    #[test]
    fn tile_and_expand() {
        let args = [ints(&[2, 1], &[1, 2]), ints(&[2], &[2, 3])];
        let want = [1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2];
        check(tile, &[], &args, &[0], &[4, 3], &want);
        let args = [ints(&[3, 1], &[1, 2, 3]), ints(&[3], &[2, 1, 2])];
        let want = [1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3];
        check(expand, &[], &args, &[0], &[2, 3, 2], &want);
        let args = [seq(&[2]), ints(&[1], &[1])];
        check(expand, &[], &args, &[0], &[2], &[0, 1]);
        assert!(run(expand, 13, &[], &[seq(&[2]), ints(&[1], &[3])], 1).is_err());
        let huge = ints(&[2], &[i64::MAX, 2]);
        assert!(run(expand, 13, &[], &[seq(&[1]), huge.clone()], 1).is_err());
        assert!(run(tile, 13, &[], &[seq(&[1, 1]), huge], 1).is_err());
        let big = ints(&[1], &[1 << 40]);
        assert!(run(expand, 13, &[], &[seq(&[1]), big], 1).is_err());
    }

    #[test]
    fn trilu_keeps_a_triangle() {
        let x = ints(&[2, 3], &[1, 2, 3, 4, 5, 6]);
        check(
            trilu,
            &[],
            &[x.clone(), ints(&[], &[1])],
            &[0],
            &[2, 3],
            &[0, 2, 3, 0, 0, 6],
        );
        let args = [x, ints(&[], &[-1])];
        check(
            trilu,
            &[int("upper", 0)],
            &args,
            &[0],
            &[2, 3],
            &[0, 0, 0, 4, 0, 0],
        );
    }

    #[test]
    fn depth_and_space_moves() {
        let want = [0, 2, 4, 6, 1, 3, 5, 7];
        check(
            depth_to_space,
            &[int("blocksize", 2)],
            &[seq(&[1, 8, 1, 1])],
            &[0],
            &[1, 2, 2, 2],
            &want,
        );
        let attrs = [int("blocksize", 2), text("mode", "CRD")];
        let want: Vec<i64> = (0..8).collect();
        check(
            depth_to_space,
            &attrs,
            &[seq(&[1, 8, 1, 1])],
            &[0],
            &[1, 2, 2, 2],
            &want,
        );
        let want = [0, 4, 1, 5, 2, 6, 3, 7];
        check(
            space_to_depth,
            &[int("blocksize", 2)],
            &[seq(&[1, 2, 2, 2])],
            &[0],
            &[1, 8, 1, 1],
            &want,
        );
    }

    #[test]
    fn cumsum_exclusive_reverse() {
        let x = ints(&[2, 3], &[1, 2, 3, 4, 5, 6]);
        let attrs = [int("exclusive", 1), int("reverse", 1)];
        check(
            cumsum,
            &attrs,
            &[x.clone(), ints(&[], &[1])],
            &[0],
            &[2, 3],
            &[5, 3, 0, 11, 6, 0],
        );
        check(
            cumsum,
            &[int("exclusive", 1)],
            &[x.clone(), ints(&[], &[0])],
            &[0],
            &[2, 3],
            &[0, 0, 0, 1, 2, 3],
        );
        check(
            cumsum,
            &[],
            &[x, ints(&[], &[-1])],
            &[0],
            &[2, 3],
            &[1, 3, 6, 4, 9, 15],
        );
    }

    #[test]
    fn cumprod_signs_zeros_and_exclusive() {
        let dev = Device::cpu();
        let f = |v: &[f32]| Value::Tensor(Tensor::from_slice(v, [v.len()], &dev).unwrap());
        // exp(sum of logs) is exact only to rounding: compare to 6 digits
        let floats = |v: &Value| match v {
            Value::Tensor(t) => t
                .to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|x| (x * 1e6).round() / 1e6)
                .collect::<Vec<f32>>(),
            _ => panic!("expects a tensor"),
        };
        let out = run(
            cumprod,
            26,
            &[],
            &[f(&[-1.0, -2.0, 3.0]), ints(&[], &[0])],
            1,
        );
        assert_eq!(floats(&out.unwrap()[0]), [-1.0, 2.0, 6.0]);
        let x = f(&[2.0, -3.0, 0.5, 0.0, 4.0]);
        let out = run(cumprod, 26, &[], &[x.clone(), ints(&[], &[0])], 1).unwrap();
        assert_eq!(floats(&out[0]), [2.0, -6.0, -3.0, 0.0, 0.0]);
        let attrs = [int("exclusive", 1), int("reverse", 1)];
        let out = run(cumprod, 26, &attrs, &[x, ints(&[], &[0])], 1).unwrap();
        assert_eq!(floats(&out[0]), [0.0, 0.0, 0.0, 4.0, 1.0]);
        let args = [ints(&[4], &[1, 2, 3, 4]), ints(&[], &[0])];
        let out = run(cumprod, 26, &[int("exclusive", 1)], &args, 1).unwrap();
        assert_eq!(vals(&out[0]), (vec![4], vec![1, 1, 2, 6]));
    }

    #[test]
    fn center_crop_pad_centres() {
        // axis 0: 5 -> 2 crops from 1; axis 1: 1 -> 4 pads 1 before, 2 after
        let args = [seq(&[5, 1]), ints(&[2], &[2, 4])];
        let want = [0, 1, 0, 0, 0, 2, 0, 0];
        check(center_crop_pad, &[], &args, &[0], &[2, 4], &want);
        let args = [seq(&[2, 5]), ints(&[1], &[3])];
        check(
            center_crop_pad,
            &[list("axes", &[-1])],
            &args,
            &[0],
            &[2, 3],
            &[1, 2, 3, 6, 7, 8],
        );
    }

    #[test]
    fn scatters_with_duplicates_follow_the_reduction() {
        let data = ints(&[3], &[5, 5, 5]);
        let idx = ints(&[4], &[0, 2, 0, -1]);
        let upd = ints(&[4], &[7, 1, 3, 9]);
        let args = [data, idx, upd];
        for (red, want) in [
            ("none", [3, 5, 9]),
            ("add", [15, 5, 15]),
            ("mul", [105, 5, 45]),
            ("max", [7, 5, 9]),
            ("min", [3, 5, 1]),
        ] {
            check(
                scatter_elements,
                &[text("reduction", red)],
                &args,
                &[0, 2],
                &[3],
                &want,
            );
        }
        let args = [seq(&[2, 2]), ints(&[1, 1], &[1]), ints(&[1, 2], &[8, 9])];
        check(scatter_nd, &[], &args, &[0, 2], &[2, 2], &[0, 1, 8, 9]);
        let args = [
            seq(&[2, 2]),
            ints(&[2, 2], &[1, 0, 1, 0]),
            ints(&[2], &[8, 9]),
        ];
        check(
            scatter_nd,
            &[text("reduction", "add")],
            &args,
            &[0, 2],
            &[2, 2],
            &[0, 1, 19, 3],
        );
    }

    #[test]
    fn one_hot_axes_and_negative_indices() {
        let args = [
            ints(&[3], &[0, -1, 5]),
            ints(&[], &[3]),
            ints(&[2], &[0, 1]),
        ];
        check(
            one_hot,
            &[],
            &args,
            &[0, 2],
            &[3, 3],
            &[1, 0, 0, 0, 0, 1, 0, 0, 0],
        );
        check(
            one_hot,
            &[int("axis", 0)],
            &args,
            &[0, 2],
            &[3, 3],
            &[1, 0, 0, 0, 0, 0, 0, 1, 0],
        );
    }

    #[test]
    fn reverse_sequence_compress_nonzero() {
        let args = [seq(&[4, 2]), ints(&[2], &[3, 1])];
        check(
            reverse_sequence,
            &[],
            &args,
            &[0],
            &[4, 2],
            &[4, 1, 2, 3, 0, 5, 6, 7],
        );
        let args = [seq(&[3, 2]), ints(&[3], &[0, 1, 1])];
        check(
            compress,
            &[int("axis", 0)],
            &args,
            &[0],
            &[2, 2],
            &[2, 3, 4, 5],
        );
        let args = [seq(&[3, 2]), ints(&[5], &[1, 0, 0, 0, 1])];
        check(compress, &[], &args, &[0], &[2], &[0, 4]);
        let out = run(non_zero, 13, &[], &[ints(&[2, 2], &[1, 0, 0, 3])], 1).unwrap();
        assert_eq!(vals(&out[0]), (vec![2, 2], vec![0, 1, 0, 1]));
    }

    #[test]
    fn range_split_flatten_eyelike() {
        let r = |s, l, d| {
            run(
                range,
                11,
                &[],
                &[ints(&[], &[s]), ints(&[], &[l]), ints(&[], &[d])],
                1,
            )
        };
        assert_eq!(vals(&r(10, 4, -3).unwrap()[0]), (vec![2], vec![10, 7]));
        assert_eq!(vals(&r(0, 0, 1).unwrap()[0]), (vec![0], vec![]));
        assert_eq!(vals(&r(1, 5, -1).unwrap()[0]), (vec![0], vec![]));
        assert!(r(1, 5, 0).is_err());
        let out = run(split, 18, &[int("num_outputs", 3)], &[seq(&[7])], 3).unwrap();
        let lens: Vec<usize> = out.iter().map(|v| v.dims()[0]).collect();
        assert_eq!(lens, [3, 3, 1]);
        assert_eq!(vals(&out[2]).1, [6]);
        let dev = Device::cpu();
        let x = Value::Tensor(seq(&[2, 4]).tensor(&dev, "x").unwrap());
        let out = run(
            split,
            11,
            &[int("axis", 1), list("split", &[1, 3])],
            &[x],
            2,
        )
        .unwrap();
        assert_eq!(vals(&out[1]), (vec![2, 3], vec![1, 2, 3, 5, 6, 7]));
        let out = run(flatten, 13, &[int("axis", -1)], &[seq(&[2, 3, 4])], 1).unwrap();
        assert_eq!(out[0].dims(), [6, 4]);
        let out = run(eye_like, 22, &[int("k", 1)], &[seq(&[2, 3])], 1).unwrap();
        assert_eq!(vals(&out[0]), (vec![2, 3], vec![0, 1, 0, 0, 0, 1]));
    }
}
