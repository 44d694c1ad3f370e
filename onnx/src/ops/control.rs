//! Control flow: `If`, `Loop` and `Scan` run their graph attributes (prepared at load, see
//! [`crate::model`]) with [`Ctx::run_graph`]; the graphs read the enclosing graphs' values by
//! name. A condition or trip count computed on the device is read back, since it decides what
//! runs next.

use super::shape::{entry, scalar_i64, stack};
use super::{Ctx, OpFn, Outputs, axis};
use crate::value::{Ints, Value};
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;
use kiln_core::{Error, Result};

pub(super) const OPS: &[(&str, OpFn)] = &[("If", if_op), ("Loop", loop_op), ("Scan", scan)];

/// A host bool scalar, as graph inputs take it.
fn host_bool(b: bool) -> Value {
    Value::Ints(Ints {
        dims: Vec::new(),
        data: vec![i64::from(b)],
        bool: true,
    })
}

/// If: the outputs of `then_branch` or `else_branch`.
fn if_op(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let cond = scalar_i64(c, c.arg(a, 0)?, "If condition")? != 0;
    c.run_graph(if cond { "then_branch" } else { "else_branch" }, Vec::new())
}

/// Loop: runs `body` while the trip count (input 0, optional) and the condition (input 1,
/// optional) allow, carrying N values; the body's further outputs are stacked over iterations.
fn loop_op(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let max = match c.optional(a, 0) {
        Some(v) => Some(scalar_i64(c, v, "Loop trip count")?),
        None => None,
    };
    let mut cond = match c.optional(a, 1) {
        Some(v) => scalar_i64(c, v, "Loop condition")? != 0,
        None => true,
    };
    let mut carried: Vec<Value> = a.iter().skip(2).cloned().collect();
    let n = carried.len();
    let mut scanned: Vec<Vec<Value>> = Vec::new();
    let mut i = 0i64;
    while cond && max.is_none_or(|m| i < m) {
        let mut inputs = vec![Value::Ints(Ints::scalar(i)), host_bool(cond)];
        inputs.append(&mut carried);
        let mut outs = c.run_graph("body", inputs)?.into_iter();
        let out_cond = outs
            .next()
            .ok_or_else(|| Error::invalid("onnx", "Loop body has no outputs"))?;
        cond = scalar_i64(c, &out_cond, "Loop body condition")? != 0;
        carried = outs.by_ref().take(n).collect();
        if carried.len() != n {
            return Err(Error::invalid(
                "onnx",
                format!(
                    "Loop body gives {} carried values, expected {n}",
                    carried.len()
                ),
            ));
        }
        let rest: Vec<Value> = outs.collect();
        if scanned.is_empty() {
            scanned = vec![Vec::new(); rest.len()];
        }
        for (s, v) in scanned.iter_mut().zip(rest) {
            s.push(v);
        }
        i += 1;
    }
    let k = c.node.output.len().saturating_sub(n);
    if i == 0 && k > 0 {
        return Err(c.unsupported("Loop with scan outputs that runs no iteration"));
    }
    for s in scanned {
        let parts: Vec<&Value> = s.iter().collect();
        carried.push(stack(c, &parts, 0)?);
    }
    Ok(carried)
}

/// Per-input axis and direction attributes of Scan: `name`'s values, or `default` for each of
/// `n`.
fn per_input(c: &Ctx<'_>, name: &str, n: usize) -> Result<Vec<i64>> {
    match c.ints_attr(name)? {
        Some(v) if v.len() == n => Ok(v),
        Some(v) => Err(Error::invalid(
            "onnx",
            format!("Scan {name} has {} entries, expected {n}", v.len()),
        )),
        None => Ok(vec![0; n]),
    }
}

/// Scan: runs `body` once per slice of the scan inputs along their scan axes, carrying state;
/// the body's further outputs are stacked along the scan output axes. Opset 8's form has a
/// batch axis first (and an optional `sequence_lens` input, which must be absent) and scans
/// each batch entry in turn.
fn scan(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let m = usize::try_from(c.int("num_scan_inputs", 0)?)
        .ok()
        .filter(|&m| m > 0)
        .ok_or_else(|| Error::invalid("onnx", "Scan needs num_scan_inputs of 1 or more"))?;
    if c.opset >= 9 {
        return scan_once(c, a, m);
    }
    if c.optional(a, 0).is_some() {
        return Err(c.unsupported("Scan (opset 8) with sequence_lens"));
    }
    let a = &a[1..];
    let batch = a
        .first()
        .and_then(|v| v.dims().first().copied())
        .ok_or_else(|| Error::invalid("onnx", "Scan (opset 8) needs inputs with a batch axis"))?;
    let mut per_batch: Vec<Vec<Value>> = Vec::new();
    for b in 0..batch {
        let slices: Vec<Value> = a.iter().map(|v| entry(c, v, 0, b)).collect::<Result<_>>()?;
        per_batch.push(scan_once(c, &slices, m)?);
    }
    let outs = per_batch.first().map_or(0, Vec::len);
    (0..outs)
        .map(|o| {
            let parts: Vec<&Value> = per_batch.iter().map(|r| &r[o]).collect();
            stack(c, &parts, 0)
        })
        .collect()
}

/// One Scan over `a`: its states, then `m` scan inputs.
fn scan_once(c: &Ctx<'_>, a: &[Value], m: usize) -> Outputs {
    let n = a.len().checked_sub(m).ok_or_else(|| {
        Error::invalid(
            "onnx",
            format!(
                "Scan has {} inputs, fewer than num_scan_inputs {m}",
                a.len()
            ),
        )
    })?;
    let (states, xs) = a.split_at(n);
    let in_axes = per_input(c, "scan_input_axes", m)?;
    let in_dirs = per_input(c, "scan_input_directions", m)?;
    let in_axes: Vec<usize> = xs
        .iter()
        .zip(&in_axes)
        .map(|(x, &ax)| axis(ax, x.dims().len()))
        .collect::<Result<_>>()?;
    let len = xs[0].dims().get(in_axes[0]).copied().unwrap_or(0);
    if let Some((x, _)) = xs
        .iter()
        .zip(&in_axes)
        .find(|(x, ax)| x.dims().get(**ax) != Some(&len))
    {
        return Err(Error::shape(
            "onnx",
            format!(
                "Scan inputs differ in scan length: {len} and {}",
                x.describe()
            ),
        ));
    }
    let mut state: Vec<Value> = states.to_vec();
    let mut scanned: Vec<Vec<Value>> = Vec::new();
    for t in 0..len {
        let mut inputs = core::mem::take(&mut state);
        for ((x, &ax), &dir) in xs.iter().zip(&in_axes).zip(&in_dirs) {
            let at = if dir == 1 { len - 1 - t } else { t };
            inputs.push(entry(c, x, ax, at)?);
        }
        let mut outs = c.run_graph("body", inputs)?;
        if outs.len() < n {
            return Err(Error::invalid(
                "onnx",
                format!(
                    "Scan body gives {} outputs, expected at least {n}",
                    outs.len()
                ),
            ));
        }
        let rest = outs.split_off(n);
        state = outs;
        if scanned.is_empty() {
            scanned = vec![Vec::new(); rest.len()];
        }
        for (s, v) in scanned.iter_mut().zip(rest) {
            s.push(v);
        }
    }
    if len == 0 && c.node.output.len() > n {
        return Err(c.unsupported("Scan with scan outputs over a length-0 axis"));
    }
    let k = scanned.len();
    let out_axes = per_input(c, "scan_output_axes", k)?;
    let out_dirs = per_input(c, "scan_output_directions", k)?;
    for ((mut s, &ax), &dir) in scanned.into_iter().zip(&out_axes).zip(&out_dirs) {
        if dir == 1 {
            s.reverse();
        }
        let rank = s[0].dims().len() + 1;
        let parts: Vec<&Value> = s.iter().collect();
        state.push(stack(c, &parts, axis(ax, rank)?)?);
    }
    Ok(state)
}
