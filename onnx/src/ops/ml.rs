//! Ops of the `ai.onnx.ml` domain: `LabelEncoder` (a lookup table), `ArrayFeatureExtractor` and
//! `TreeEnsemble` on the host; `Binarizer`, a comparison.

use super::shape::host_numel;
use super::{Ctx, OpFn, Outputs, host_values, one};
use crate::model::onnx_err;
use crate::value::{Ints, Strings, Value, held};
use crate::{NodeAttrs, TensorElems, tensor_value};
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use kiln_core::{DType, Error, Result, Shape, Tensor, TensorData};

pub(super) const OPS: &[(&str, OpFn)] = &[
    ("LabelEncoder", label_encoder),
    ("Binarizer", binarizer),
    ("ArrayFeatureExtractor", array_feature_extractor),
    ("TreeEnsemble", tree_ensemble),
];

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

/// Binarizer: 1 where `X > threshold`, else 0, in `X`'s type. An integer `x` is above the
/// threshold exactly when it is above its floor, which the integers hold.
fn binarizer(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let th = f64::from(c.float("threshold", 0.0)?);
    if let Value::Ints(x) = c.arg(a, 0)? {
        let data = x.data.iter().map(|&v| i64::from(v as f64 > th)).collect();
        return Ok(vec![Value::Ints(Ints {
            dims: x.dims.clone(),
            data,
            bool: false,
        })]);
    }
    let x = c.tensor(a, 0)?;
    let th = if x.dtype().is_float() {
        th
    } else {
        libm::floor(th)
    };
    one(x.gt(&x.scalar_like(th)?)?.cast(x.dtype())?)
}

/// ArrayFeatureExtractor: the elements at indices `Y` (flattened) of `X`'s last axis, of shape
/// `X`'s leading dims and `Y`'s count (`[1, count]` for a 1-D `X`).
fn array_feature_extractor(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    let Some((&last, lead)) = dims.split_last() else {
        return Err(Error::invalid(
            "onnx",
            format!(
                "ArrayFeatureExtractor expects X of rank 1 or more, gets {}",
                x.describe()
            ),
        ));
    };
    let index: Vec<usize> = host_values(c.arg(a, 1)?, "ArrayFeatureExtractor's indices")?
        .into_iter()
        .map(|i| {
            if i >= 0.0 && i < last as f64 {
                Ok(i as usize)
            } else {
                Err(Error::invalid(
                    "onnx",
                    format!("ArrayFeatureExtractor index {i} is out of range for X's last axis of {last}"),
                ))
            }
        })
        .collect::<Result<_>>()?;
    let mut out = if lead.is_empty() {
        vec![1]
    } else {
        lead.to_vec()
    };
    out.push(index.len());
    // the gathered positions of host values (of `len` elements), row by row
    let at = |len: usize| {
        host_numel(&out)?;
        let rows = host_numel(lead)?;
        if len != rows * last {
            return Err(Error::invalid(
                "onnx",
                format!("a host value of shape {dims:?} holds {len} values"),
            ));
        }
        Ok((0..rows).flat_map(|r| index.iter().map(move |&i| r * last + i)))
    };
    Ok(vec![match x {
        Value::Ints(v) => Value::Ints(Ints {
            data: at(v.data.len())?.map(|k| v.data[k]).collect(),
            dims: out,
            bool: v.bool,
        }),
        Value::Strings(v) => Value::Strings(Strings {
            data: at(v.data.len())?.map(|k| v.data[k].clone()).collect(),
            dims: out,
        }),
        _ => {
            let idx: Vec<i32> = index.iter().map(|&i| i as i32).collect();
            let idx = Tensor::from_slice(&idx, vec![idx.len()], c.device)?;
            let t = c.tensor(a, 0)?;
            Value::Tensor(t.index_select(-1, &idx)?.reshape(out)?)
        }
    }])
}

/// A TreeEnsemble tensor attribute of floats (`nodes_splits`, `leaf_weights`, ...), if set.
fn float_tensor(c: &Ctx<'_>, name: &str) -> Result<Option<Vec<f64>>> {
    let Some(t) = c.node.attr_tensor(name).map_err(onnx_err)? else {
        return Ok(None);
    };
    Ok(Some(match tensor_value(t).map_err(onnx_err)?.data {
        TensorElems::F32(d) => d.into_iter().map(f64::from).collect(),
        TensorElems::F64(d) => d,
        TensorElems::F16(d) => d
            .into_iter()
            .map(|b| f64::from(half::f16::from_bits(b)))
            .collect(),
        other => {
            return Err(c.unsupported(format!("{name} of {:?} (expects floats)", other.dtype())));
        }
    }))
}

/// A TreeEnsemble branch node's comparison of its feature `x` with its split `s`
/// (`nodes_modes`).
#[derive(Clone, Copy)]
enum Branch {
    Leq,
    Lt,
    Gte,
    Gt,
    Eq,
    Neq,
    /// `x` is one of the node's set of values (`membership_values`).
    Member,
}

/// A TreeEnsemble branch node.
struct TreeNode {
    branch: Branch,
    split: f64,
    members: Vec<f64>,
    feature: usize,
    /// A missing (NaN) feature takes the true branch.
    missing_true: bool,
    /// The (is a leaf, index) of the true and the false branch's node.
    next: [(bool, usize); 2],
}

impl TreeNode {
    fn holds(&self, x: f64) -> bool {
        if x.is_nan() && self.missing_true {
            return true;
        }
        match self.branch {
            Branch::Leq => x <= self.split,
            Branch::Lt => x < self.split,
            Branch::Gte => x >= self.split,
            Branch::Gt => x > self.split,
            Branch::Eq => x == self.split,
            Branch::Neq => x != self.split,
            Branch::Member => self.members.contains(&x),
        }
    }
}

/// TreeEnsemble's branch nodes, checked: every list as long as `nodes_splits`, feature ids
/// below `features`, branches to existing nodes and leaves (`leaves` of them).
fn tree_nodes(c: &Ctx<'_>, features: usize, leaves: usize) -> Result<Vec<TreeNode>> {
    let invalid = |m: String| Error::invalid("onnx", m);
    let splits = float_tensor(c, "nodes_splits")?
        .ok_or_else(|| invalid("TreeEnsemble sets no nodes_splits".into()))?;
    let n = splits.len();
    let list = |name: &str, required: bool| -> Result<Vec<i64>> {
        let v = match c.ints_attr(name)? {
            Some(v) => v,
            None if !required => vec![0; n],
            None => return Err(invalid(format!("TreeEnsemble sets no {name}"))),
        };
        if v.len() != n {
            return Err(invalid(format!(
                "TreeEnsemble's {name} has {} values for {n} nodes",
                v.len()
            )));
        }
        Ok(v)
    };
    let feature = list("nodes_featureids", true)?;
    let (true_ids, true_leaf) = (
        list("nodes_truenodeids", true)?,
        list("nodes_trueleafs", true)?,
    );
    let (false_ids, false_leaf) = (
        list("nodes_falsenodeids", true)?,
        list("nodes_falseleafs", true)?,
    );
    let missing = list("nodes_missing_value_tracks_true", false)?;
    let modes = match c.node.attr_tensor("nodes_modes").map_err(onnx_err)? {
        Some(t) => match tensor_value(t).map_err(onnx_err)?.data {
            TensorElems::U8(m) => m,
            other => {
                return Err(c.unsupported(format!(
                    "nodes_modes of {:?} (expects uint8)",
                    other.dtype()
                )));
            }
        },
        None => return Err(invalid("TreeEnsemble sets no nodes_modes".into())),
    };
    if modes.len() != n {
        return Err(invalid(format!(
            "TreeEnsemble's nodes_modes has {} values for {n} nodes",
            modes.len()
        )));
    }
    // each membership node's set, in node order: runs of values ended by NaN
    let members = float_tensor(c, "membership_values")?.unwrap_or_default();
    let mut sets = members.split(|v| v.is_nan());
    let child = |leaf: i64, id: i64| -> Result<(bool, usize)> {
        let (leaf, bound) = (leaf != 0, if leaf != 0 { leaves } else { n });
        match usize::try_from(id) {
            Ok(i) if i < bound => Ok((leaf, i)),
            _ => Err(invalid(format!(
                "TreeEnsemble branches to {} {id} of {bound}",
                if leaf { "leaf" } else { "node" }
            ))),
        }
    };
    (0..n)
        .map(|i| {
            let branch = match modes[i] {
                0 => Branch::Leq,
                1 => Branch::Lt,
                2 => Branch::Gte,
                3 => Branch::Gt,
                4 => Branch::Eq,
                5 => Branch::Neq,
                6 => Branch::Member,
                m => return Err(c.unsupported(format!("TreeEnsemble node mode {m}"))),
            };
            let members = match branch {
                Branch::Member => sets
                    .next()
                    .ok_or_else(|| invalid(format!("membership_values holds no set for node {i}")))?
                    .to_vec(),
                _ => Vec::new(),
            };
            let feature = usize::try_from(feature[i])
                .ok()
                .filter(|&f| f < features)
                .ok_or_else(|| {
                    invalid(format!(
                        "TreeEnsemble node {i} reads feature {} of {features}",
                        feature[i]
                    ))
                })?;
            Ok(TreeNode {
                branch,
                split: splits[i],
                members,
                feature,
                missing_true: missing[i] != 0,
                next: [
                    child(true_leaf[i], true_ids[i])?,
                    child(false_leaf[i], false_ids[i])?,
                ],
            })
        })
        .collect()
}

/// TreeEnsemble (`ai.onnx.ml` 5): each row of `X` (`[N, features]`) walks every tree from its
/// root to a leaf, whose weight goes to its target; the targets' weights are aggregated (sum,
/// average, min or max) and post-transformed (none, softmax, logistic).
fn tree_ensemble(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let invalid = |m: String| Error::invalid("onnx", m);
    let x = c.tensor(a, 0)?;
    let (&[rows, features], true) = (x.dims(), x.dtype().is_float()) else {
        return Err(invalid(format!(
            "TreeEnsemble expects floats X of shape [N, features], gets {} {}",
            x.dtype(),
            x.shape()
        )));
    };
    let weights = float_tensor(c, "leaf_weights")?
        .ok_or_else(|| invalid("TreeEnsemble sets no leaf_weights".into()))?;
    let targets = c.ints_attr("leaf_targetids")?.unwrap_or_default();
    let n_targets = c.int("n_targets", 0)?;
    if targets.len() != weights.len() {
        return Err(invalid(format!(
            "TreeEnsemble has {} leaf_targetids for {} leaf_weights",
            targets.len(),
            weights.len()
        )));
    }
    let targets = targets
        .iter()
        .map(|&t| {
            usize::try_from(t)
                .ok()
                .filter(|&t| (t as i64) < n_targets)
                .ok_or_else(|| invalid(format!("leaf target {t} of n_targets {n_targets}")))
        })
        .collect::<Result<Vec<usize>>>()?;
    let nodes = tree_nodes(c, features, weights.len())?;
    let roots = c
        .ints_attr("tree_roots")?
        .unwrap_or_default()
        .into_iter()
        .map(|r| {
            usize::try_from(r)
                .ok()
                .filter(|&r| r < nodes.len())
                .ok_or_else(|| invalid(format!("tree root {r} of {} nodes", nodes.len())))
        })
        .collect::<Result<Vec<usize>>>()?;
    let n_targets = n_targets as usize;
    let out_dims = vec![rows, n_targets];
    host_numel(&out_dims)?;
    // MIN and MAX start at the output type's extremes, as the reference does
    let dt = x.dtype();
    let big = match dt {
        DType::F64 => f64::MAX,
        DType::F16 => f64::from(half::f16::MAX),
        _ => f64::from(f32::MAX),
    };
    let (start, fold): (f64, fn(f64, f64, f64) -> f64) = match c.int("aggregate_function", 1)? {
        0 => (0.0, |acc, w, trees| acc + w / trees),
        1 => (0.0, |acc, w, _| acc + w),
        2 => (big, |acc, w, _| acc.min(w)),
        3 => (-big, |acc, w, _| acc.max(w)),
        f => return Err(c.unsupported(format!("TreeEnsemble aggregate_function {f}"))),
    };
    let post = c.int("post_transform", 0)?;
    if !(0..=2).contains(&post) {
        return Err(c.unsupported(format!(
            "TreeEnsemble post_transform {post} (expects 0 none, 1 softmax or 2 logistic)"
        )));
    }
    let xs = host_values(&Value::Tensor(x), "TreeEnsemble's X")?;
    let trees = roots.len() as f64;
    let mut out = vec![start; rows * n_targets];
    for row in 0..rows {
        let x = &xs[row * features..][..features];
        let out = &mut out[row * n_targets..][..n_targets];
        for &root in &roots {
            // a path through more nodes than there are is a cycle
            let mut at = root;
            let leaf = 'walk: {
                for _ in 0..=nodes.len() {
                    let node = &nodes[at];
                    let (leaf, next) = node.next[usize::from(!node.holds(x[node.feature]))];
                    if leaf {
                        break 'walk next;
                    }
                    at = next;
                }
                return Err(invalid(format!(
                    "TreeEnsemble's tree at node {root} has a cycle (row {row})"
                )));
            };
            let t = targets[leaf];
            out[t] = fold(out[t], weights[leaf], trees);
        }
        match post {
            1 => {
                let max = out.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                out.iter_mut().for_each(|v| *v = libm::exp(*v - max));
                let sum: f64 = out.iter().sum();
                out.iter_mut().for_each(|v| *v /= sum);
            }
            2 => out
                .iter_mut()
                .for_each(|v| *v = 1.0 / (1.0 + libm::exp(-*v))),
            _ => {}
        }
    }
    one(super::float_table(c.device, out, out_dims, dt)?)
}
