//! `Unique`: its output size depends on the values, so they are compared on the host (a
//! device tensor is read back, which needs `std`).

use super::{Ctx, OpFn, Outputs, host_values};
use crate::NodeAttrs;
use crate::value::{Ints, Value};
use alloc::vec;
use alloc::vec::Vec;
use core::cmp::Ordering;
use kiln_core::{Shape, Tensor, TensorData};

pub(super) const OPS: &[(&str, OpFn)] = &[("Unique", unique)];

/// Unique: the distinct elements (or, with `axis`, the distinct slices along it) in ascending
/// order (`sorted`, the default) or in order of first appearance, with the index of each one's
/// first appearance, the index in the output of every input element or slice, and the counts.
fn unique(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    let sorted = c.int("sorted", 1)? != 0;
    let axis = match c.node.attr_int("axis").map_err(crate::model::onnx_err)? {
        Some(ax) => Some(super::axis(ax, dims.len())?),
        None => None,
    };
    // the input as (outer, n, inner): `n` slices of `outer * inner` elements each
    let (outer, n, inner) = match axis {
        Some(ax) => (
            dims[..ax].iter().product(),
            dims[ax],
            dims[ax + 1..].iter().product(),
        ),
        None => (1, dims.iter().product(), 1),
    };
    let groups = match x {
        Value::Ints(i) => distinct(&i.data, outer, n, inner, sorted, i64::cmp),
        _ => {
            let v = host_values(x, "Unique's input")?;
            distinct(&v, outer, n, inner, sorted, float_order)
        }
    };
    let first: Vec<usize> = groups.iter().map(|g| g.first).collect();
    let mut inverse = vec![0i64; n];
    for (u, g) in groups.iter().enumerate() {
        for &i in &g.members {
            inverse[i] = u as i64;
        }
    }
    let mut y_dims = match axis {
        Some(_) => dims.clone(),
        None => vec![n],
    };
    let at = axis.unwrap_or(0);
    y_dims[at] = first.len();
    let y = match x {
        Value::Ints(i) => {
            let mut data = Vec::with_capacity(outer * first.len() * inner);
            for o in 0..outer {
                for &f in &first {
                    let start = (o * n + f) * inner;
                    data.extend_from_slice(&i.data[start..start + inner]);
                }
            }
            Value::Ints(Ints {
                dims: y_dims,
                data,
                bool: i.bool,
            })
        }
        _ => {
            let t = c.tensor(a, 0)?;
            let t = if axis.is_none() { t.reshape([n])? } else { t };
            let idx: Vec<i32> = first.iter().map(|&f| f as i32).collect();
            let idx = TensorData::new(idx, Shape::from([first.len()]))?;
            let idx = Tensor::from_data(&idx, c.device)?;
            Value::Tensor(t.index_select(at as isize, &idx)?)
        }
    };
    let counts = groups.iter().map(|g| g.members.len() as i64).collect();
    Ok(vec![
        y,
        Value::Ints(Ints::vector(first.iter().map(|&f| f as i64).collect())),
        Value::Ints(Ints::vector(inverse)),
        Value::Ints(Ints::vector(counts)),
    ])
}

/// A set of equal slices: the first one's index and all of theirs.
struct Group {
    first: usize,
    members: Vec<usize>,
}

/// The groups of equal slices of `data` laid out as (outer, n, inner), in ascending order of
/// the slices (compared element by element) when `sorted`, else in order of first appearance.
fn distinct<T>(
    data: &[T],
    outer: usize,
    n: usize,
    inner: usize,
    sorted: bool,
    order: impl Fn(&T, &T) -> Ordering,
) -> Vec<Group> {
    let slice_order = |p: &usize, q: &usize| {
        (0..outer)
            .flat_map(|o| (0..inner).map(move |j| (o, j)))
            .map(|(o, j)| {
                order(
                    &data[(o * n + p) * inner + j],
                    &data[(o * n + q) * inner + j],
                )
            })
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    };
    let mut idx: Vec<usize> = (0..n).collect();
    // stable: equal slices keep their order, so each group starts at its first appearance
    idx.sort_by(slice_order);
    let mut groups: Vec<Group> = Vec::new();
    for i in idx {
        match groups.last_mut() {
            Some(g) if slice_order(&g.first, &i).is_eq() => g.members.push(i),
            _ => groups.push(Group {
                first: i,
                members: vec![i],
            }),
        }
    }
    if !sorted {
        groups.sort_by_key(|g| g.first);
    }
    groups
}

/// A total order on floats for grouping: NumPy's (`-0.0 == 0.0`), with NaNs last and equal.
fn float_order(p: &f64, q: &f64) -> Ordering {
    match (p.is_nan(), q.is_nan()) {
        (false, false) => p.partial_cmp(q).unwrap_or(Ordering::Equal),
        (a, b) => a.cmp(&b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_group_as_numpy_does() {
        // -0.0 equals 0.0; NaNs sort last, as one group
        let v = [f64::NAN, 0.0, 1.0, -0.0, f64::NAN];
        let g = distinct(&v, 1, v.len(), 1, true, float_order);
        let members: Vec<&[usize]> = g.iter().map(|g| g.members.as_slice()).collect();
        assert_eq!(members, [&[1, 3][..], &[2], &[0, 4]]);
        let g = distinct(&v, 1, v.len(), 1, false, float_order);
        let first: Vec<usize> = g.iter().map(|g| g.first).collect();
        assert_eq!(first, [0, 1, 2]);
    }
}
