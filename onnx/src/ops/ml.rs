//! Ops of the `ai.onnx.ml` domain: `LabelEncoder`, a lookup table on the host.

use super::{Ctx, OpFn, Outputs, host_values};
use crate::model::onnx_err;
use crate::value::{Ints, Strings, Value, held};
use crate::{NodeAttrs, TensorElems, tensor_value};
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;
use kiln_core::{DType, Error, Result, Shape, Tensor, TensorData};

pub(super) const OPS: &[(&str, OpFn)] = &[("LabelEncoder", label_encoder)];

/// The keys, values or default of a LabelEncoder: one of its three element kinds.
enum Column {
    Strings(Vec<Vec<u8>>),
    Ints(Vec<i64>),
    /// Floats, and whether ONNX declares them double.
    Floats(Vec<f64>, bool),
}

impl Column {
    fn len(&self) -> usize {
        match self {
            Column::Strings(v) => v.len(),
            Column::Ints(v) => v.len(),
            Column::Floats(v, _) => v.len(),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Column::Strings(_) => "strings",
            Column::Ints(_) => "integers",
            Column::Floats(..) => "floats",
        }
    }
}

/// A tensor attribute (`name`) as a column.
fn tensor_column(c: &Ctx<'_>, t: &crate::TensorProto, name: &str) -> Result<Column> {
    let v = tensor_value(t).map_err(onnx_err)?;
    Ok(match v.data {
        TensorElems::String(d) => Column::Strings(d),
        TensorElems::F32(d) => Column::Floats(d.into_iter().map(f64::from).collect(), false),
        TensorElems::F64(d) => Column::Floats(d, true),
        _ => match Value::from_tensor(v, c.device)? {
            Value::Ints(i) => Column::Ints(i.data),
            other => {
                return Err(c.unsupported(format!(
                    "{name} of {} (expects strings, integers or floats)",
                    other.describe()
                )));
            }
        },
    })
}

/// The column a node sets as `<prefix>_tensor`, `_strings`, `_int64s` or `_floats`, if any.
fn column(c: &Ctx<'_>, prefix: &str) -> Result<Option<Column>> {
    let n = c.node;
    let name = format!("{prefix}_tensor");
    if let Some(t) = n.attr_tensor(&name).map_err(onnx_err)? {
        return tensor_column(c, t, &name).map(Some);
    }
    if let Some(v) = n
        .attr_strings(&format!("{prefix}_strings"))
        .map_err(onnx_err)?
    {
        return Ok(Some(Column::Strings(
            v.into_iter().map(|x| x.as_bytes().to_vec()).collect(),
        )));
    }
    if let Some(v) = n.attr_ints(&format!("{prefix}_int64s")).map_err(onnx_err)? {
        return Ok(Some(Column::Ints(v.to_vec())));
    }
    if let Some(v) = n
        .attr_floats(&format!("{prefix}_floats"))
        .map_err(onnx_err)?
    {
        return Ok(Some(Column::Floats(
            v.iter().map(|&x| f64::from(x)).collect(),
            false,
        )));
    }
    Ok(None)
}

/// The default for `values`: `default_tensor` (one value of their kind), else the singular
/// attribute of their kind, else the spec's default for it.
fn default_for(c: &Ctx<'_>, values: &Column) -> Result<Column> {
    if let Some(t) = c.node.attr_tensor("default_tensor").map_err(onnx_err)? {
        let d = tensor_column(c, t, "default_tensor")?;
        if d.kind() != values.kind() || d.len() != 1 {
            return Err(Error::invalid(
                "onnx",
                format!(
                    "default_tensor holds {} {}, expects one of the values' {}",
                    d.len(),
                    d.kind(),
                    values.kind()
                ),
            ));
        }
        return Ok(d);
    }
    Ok(match values {
        Column::Strings(_) => {
            Column::Strings(vec![c.string("default_string", "_Unused")?.into_bytes()])
        }
        Column::Ints(_) => Column::Ints(vec![c.int("default_int64", -1)?]),
        Column::Floats(_, double) => {
            Column::Floats(vec![f64::from(c.float("default_float", -0.0)?)], *double)
        }
    })
}

/// Each key's first position.
fn index<K: Ord>(keys: &[K]) -> BTreeMap<&K, usize> {
    let mut at = BTreeMap::new();
    for (i, k) in keys.iter().enumerate().rev() {
        at.insert(k, i);
    }
    at
}

/// LabelEncoder: each input element's value at the position of its key, or the default.
/// Float keys match by value, and NaN matches NaN.
fn label_encoder(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let missing = |what: &str| Error::invalid("onnx", format!("LabelEncoder sets no {what}"));
    let keys = column(c, "keys")?.ok_or_else(|| missing("keys"))?;
    let values = column(c, "values")?.ok_or_else(|| missing("values"))?;
    if keys.len() != values.len() {
        return Err(Error::invalid(
            "onnx",
            format!("{} keys but {} values", keys.len(), values.len()),
        ));
    }
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    // the index of each input element's key, if it has one
    let found: Vec<Option<usize>> = match (&keys, x) {
        (Column::Strings(k), Value::Strings(s)) => {
            let at = index(k);
            s.data.iter().map(|e| at.get(e).copied()).collect()
        }
        (Column::Ints(k), Value::Ints(i)) => {
            let at = index(k);
            i.data.iter().map(|e| at.get(e).copied()).collect()
        }
        // integers computed on the device (int64 results are i32 there)
        (Column::Ints(k), Value::Tensor(t)) if !t.dtype().is_float() => {
            let at = index(k);
            host_values(x, "LabelEncoder's input")?
                .iter()
                .map(|&e| at.get(&(e as i64)).copied())
                .collect()
        }
        (Column::Floats(k, _), Value::Tensor(_)) => host_values(x, "LabelEncoder's input")?
            .iter()
            .map(|e| k.iter().position(|q| q == e || (q.is_nan() && e.is_nan())))
            .collect(),
        (k, x) => {
            return Err(Error::invalid(
                "onnx",
                format!(
                    "LabelEncoder keys are {}, but the input is {}",
                    k.kind(),
                    x.describe()
                ),
            ));
        }
    };
    let default = default_for(c, &values)?;
    Ok(vec![match (&values, &default) {
        (Column::Strings(v), Column::Strings(d)) => {
            let data = found
                .into_iter()
                .map(|i| i.map_or_else(|| d[0].clone(), |i| v[i].clone()))
                .collect();
            Value::Strings(Strings { dims, data })
        }
        (Column::Ints(v), Column::Ints(d)) => {
            let data = found
                .into_iter()
                .map(|i| i.map_or(d[0], |i| v[i]))
                .collect();
            Value::Ints(Ints {
                dims,
                data,
                bool: false,
            })
        }
        (Column::Floats(v, double), Column::Floats(d, _)) => {
            let data: Vec<f64> = found
                .into_iter()
                .map(|i| i.map_or(d[0], |i| v[i]))
                .collect();
            let dt = if *double {
                held(c.device, DType::F64)
            } else {
                DType::F32
            };
            let data = TensorData::new(data, Shape::from(dims))?.convert(dt);
            Value::Tensor(Tensor::from_data(&data, c.device)?)
        }
        // default_for gives the values' kind
        _ => {
            return Err(Error::invalid(
                "onnx",
                "LabelEncoder's default is of another kind",
            ));
        }
    }])
}
