//! Sequences and optionals: host-side lists of values ([`Value::Sequence`]) and possibly-empty
//! values ([`Value::Optional`]). The elements stay where they are (device tensors or host
//! integers); only the list is on the host.

use super::shape::{join, pieces, scalar_i64, stack};
use super::{Ctx, OpFn, Outputs, axis};
use crate::value::{Ints, Value};
use alloc::boxed::Box;
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;
use kiln_core::{Error, Result};

pub(super) const OPS: &[(&str, OpFn)] = &[
    ("SequenceEmpty", |_, _| {
        Ok(vec![Value::Sequence(Vec::new())])
    }),
    ("SequenceConstruct", |_, a| {
        Ok(vec![Value::Sequence(a.to_vec())])
    }),
    ("SequenceLength", sequence_length),
    ("SequenceAt", sequence_at),
    ("SequenceInsert", sequence_insert),
    ("SequenceErase", sequence_erase),
    ("SplitToSequence", split_to_sequence),
    ("ConcatFromSequence", concat_from_sequence),
    ("SequenceMap", sequence_map),
    ("Optional", optional),
    ("OptionalHasElement", optional_has_element),
    ("OptionalGetElement", optional_get_element),
];

fn sequence_length(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let s = c.arg(a, 0)?.sequence("SequenceLength input")?;
    Ok(vec![Value::Ints(Ints::scalar(s.len() as i64))])
}

/// Position input `i` (negative counts from the end) in a sequence of `len`, which may equal
/// `len` when `end_ok` (inserting at the back); `default` when the input is absent.
fn position(c: &Ctx<'_>, a: &[Value], i: usize, len: usize, end_ok: bool) -> Result<usize> {
    let Some(v) = c.optional(a, i) else {
        return Ok(if end_ok { len } else { len.saturating_sub(1) });
    };
    let p = scalar_i64(c, v, "sequence position")?;
    let n = len as i64;
    let max = if end_ok { n } else { n - 1 };
    if p < -n || p > max {
        return Err(Error::invalid(
            "onnx",
            format!("position {p} is out of range for a sequence of {len}"),
        ));
    }
    Ok(if p < 0 { (p + n) as usize } else { p as usize })
}

fn sequence_at(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let s = c.arg(a, 0)?.sequence("SequenceAt input")?;
    let p = position(c, a, 1, s.len(), false)?;
    if s.is_empty() {
        return Err(Error::invalid("onnx", "SequenceAt of an empty sequence"));
    }
    Ok(vec![s[p].clone()])
}

fn sequence_insert(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let mut s = c.arg(a, 0)?.sequence("SequenceInsert input")?.to_vec();
    let p = position(c, a, 2, s.len(), true)?;
    s.insert(p, c.arg(a, 1)?.clone());
    Ok(vec![Value::Sequence(s)])
}

fn sequence_erase(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let mut s = c.arg(a, 0)?.sequence("SequenceErase input")?.to_vec();
    if s.is_empty() {
        return Err(Error::invalid("onnx", "SequenceErase of an empty sequence"));
    }
    let p = position(c, a, 1, s.len(), false)?;
    s.remove(p);
    Ok(vec![Value::Sequence(s)])
}

/// SplitToSequence: `split` absent cuts pieces of 1 (squeezed unless `keepdims`), a scalar cuts
/// pieces of that size (the last may be shorter), a vector gives the sizes.
fn split_to_sequence(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    let ax = axis(c.int("axis", 0)?, dims.len())?;
    let d = dims[ax];
    let split = c.optional(a, 1);
    let sizes: Vec<usize> = match split {
        None => vec![1; d],
        Some(v) => {
            let s = v.ints("SplitToSequence split")?;
            let bad = || Error::invalid("onnx", format!("SplitToSequence split {:?}", s.data));
            if s.dims.is_empty() {
                let k = usize::try_from(s.data[0])
                    .ok()
                    .filter(|&k| k > 0)
                    .ok_or_else(bad)?;
                (0..d.div_ceil(k)).map(|i| k.min(d - i * k)).collect()
            } else {
                let v: Vec<usize> = s
                    .data
                    .iter()
                    .map(|&n| usize::try_from(n).map_err(|_| bad()))
                    .collect::<Result<_>>()?;
                if v.iter().sum::<usize>() != d {
                    return Err(Error::shape(
                        "onnx",
                        format!("SplitToSequence sizes {v:?} do not sum to {d}"),
                    ));
                }
                v
            }
        }
    };
    let mut parts = pieces(c, x, ax, &sizes)?;
    if split.is_none() && c.int("keepdims", 1)? == 0 {
        let mut kept = dims.clone();
        kept.remove(ax);
        parts = parts
            .iter()
            .map(|p| super::shape::with_dims(c, p, kept.clone()))
            .collect::<Result<_>>()?;
    }
    Ok(vec![Value::Sequence(parts)])
}

/// ConcatFromSequence: the elements joined along `axis`, or stacked along a new one.
fn concat_from_sequence(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let s = c.arg(a, 0)?.sequence("ConcatFromSequence input")?;
    let first = s
        .first()
        .ok_or_else(|| Error::invalid("onnx", "ConcatFromSequence of an empty sequence"))?;
    let parts: Vec<&Value> = s.iter().collect();
    let rank = first.dims().len();
    if c.int("new_axis", 0)? == 1 {
        Ok(vec![stack(c, &parts, axis(c.int("axis", 0)?, rank + 1)?)?])
    } else {
        Ok(vec![join(c, &parts, axis(c.int("axis", 0)?, rank)?)?])
    }
}

/// SequenceMap: `body` on each element of the input sequences (tensor inputs are passed
/// whole to every call); each body output gathers into a sequence.
fn sequence_map(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let len = c.arg(a, 0)?.sequence("SequenceMap input")?.len();
    if let Some(other) = a
        .iter()
        .filter_map(|v| match v {
            Value::Sequence(s) if s.len() != len => Some(s.len()),
            _ => None,
        })
        .next()
    {
        return Err(Error::shape(
            "onnx",
            format!("SequenceMap input sequences of lengths {len} and {other}"),
        ));
    }
    let mut outs: Vec<Vec<Value>> = vec![Vec::new(); c.node.output.len()];
    for i in 0..len {
        let inputs = a
            .iter()
            .map(|v| match v {
                Value::Sequence(s) => s[i].clone(),
                other => other.clone(),
            })
            .collect();
        for (o, v) in outs.iter_mut().zip(c.run_graph("body", inputs)?) {
            o.push(v);
        }
    }
    Ok(outs.into_iter().map(Value::Sequence).collect())
}

/// Optional: holds its input, or nothing when the input is absent.
fn optional(_: &Ctx<'_>, a: &[Value]) -> Outputs {
    let v = a.first().filter(|v| v.is_present()).cloned();
    Ok(vec![Value::Optional(v.map(Box::new))])
}

/// OptionalHasElement: false for an empty optional or an absent input, true otherwise.
fn optional_has_element(_: &Ctx<'_>, a: &[Value]) -> Outputs {
    let has = match a.first() {
        None | Some(Value::Absent) | Some(Value::Optional(None)) => false,
        Some(_) => true,
    };
    Ok(vec![Value::Ints(Ints {
        dims: Vec::new(),
        data: vec![i64::from(has)],
        bool: true,
    })])
}

/// OptionalGetElement: the held value (a plain tensor or sequence is its own element).
fn optional_get_element(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    match c.arg(a, 0)? {
        Value::Optional(Some(v)) => Ok(vec![(**v).clone()]),
        Value::Optional(None) | Value::Absent => Err(Error::invalid(
            "onnx",
            "OptionalGetElement of an empty optional",
        )),
        other => Ok(vec![other.clone()]),
    }
}
