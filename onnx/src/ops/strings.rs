//! String ops, on the host: no kiln device holds strings ([`Value::Strings`]). Strings are bytes
//! (ONNX does not enforce UTF-8); ops that need characters (case changes, whitespace) check
//! that they are UTF-8 and say which is not.

use super::{Ctx, OpFn, Outputs, broadcast_offsets};
use crate::NodeAttrs;
use crate::value::{Ints, Strings, Value};
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use kiln_core::{Error, Result};

pub(super) const OPS: &[(&str, OpFn)] = &[
    ("StringNormalizer", string_normalizer),
    ("StringConcat", string_concat),
    ("StringSplit", string_split),
];

/// Input `i` as host strings, or an error naming what it is instead.
fn strings<'v>(c: &Ctx<'_>, a: &'v [Value], i: usize) -> Result<&'v Strings> {
    match c.arg(a, i)? {
        Value::Strings(s) => Ok(s),
        other => Err(Error::invalid(
            "onnx",
            format!("input {i}: expects strings, gets {}", other.describe()),
        )),
    }
}

/// `s` as text, for the ops that work on characters.
fn text(s: &[u8]) -> Result<&str> {
    core::str::from_utf8(s).map_err(|_| {
        Error::invalid(
            "onnx",
            format!("string {:?} is not UTF-8", String::from_utf8_lossy(s)),
        )
    })
}

/// `f` of each pair of elements of `x` and `y` broadcast together: the result's dims and values.
fn zip_broadcast<T>(
    x: &Strings,
    y: &Strings,
    f: impl Fn(&[u8], &[u8]) -> T,
) -> Result<(Vec<usize>, Vec<T>)> {
    for s in [x, y] {
        if s.data.len() != s.dims.iter().product::<usize>() {
            return Err(Error::invalid(
                "onnx",
                format!("strings of shape {:?} hold {} values", s.dims, s.data.len()),
            ));
        }
    }
    let (dims, at) = broadcast_offsets(&[&x.dims, &y.dims])?;
    let values = at[0]
        .iter()
        .zip(&at[1])
        .map(|(&i, &j)| f(&x.data[i], &y.data[j]))
        .collect();
    Ok((dims, values))
}

/// `Equal` on strings (broadcasting), as a host bool value.
pub(super) fn equal(x: &Strings, y: &Strings) -> Result<Ints> {
    let (dims, eq) = zip_broadcast(x, y, |p, q| p == q)?;
    Ok(Ints {
        dims,
        data: eq.into_iter().map(i64::from).collect(),
        bool: true,
    })
}

fn string_concat(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let (dims, data) = zip_broadcast(strings(c, a, 0)?, strings(c, a, 1)?, |p, q| [p, q].concat())?;
    Ok(vec![Value::Strings(Strings { dims, data })])
}

/// StringNormalizer: drops the stopwords from a `[C]` or `[1, C]` input (compared in lower
/// case unless `is_case_sensitive`), then changes the case of the rest. An input left with no
/// strings gives one empty string, as the spec asks.
fn string_normalizer(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = strings(c, a, 0)?;
    let row = match x.dims[..] {
        [_] => false,
        [1, _] => true,
        _ => {
            return Err(Error::shape(
                "onnx",
                format!("StringNormalizer takes [C] or [1, C], gets {:?}", x.dims),
            ));
        }
    };
    let action = c.string("case_change_action", "NONE")?;
    let case = |s: &[u8]| -> Result<Vec<u8>> {
        Ok(match action.as_str() {
            "NONE" => s.to_vec(),
            "LOWER" => text(s)?.to_lowercase().into_bytes(),
            "UPPER" => text(s)?.to_uppercase().into_bytes(),
            other => {
                return Err(c.unsupported(format!(
                    "case_change_action '{other}' (expects NONE, LOWER or UPPER)"
                )));
            }
        })
    };
    let sensitive = c.int("is_case_sensitive", 0)? != 0;
    let fold = |s: &[u8]| -> Result<Vec<u8>> {
        if sensitive {
            Ok(s.to_vec())
        } else {
            Ok(text(s)?.to_lowercase().into_bytes())
        }
    };
    let stopwords = c
        .node
        .attr_strings("stopwords")
        .map_err(crate::model::onnx_err)?
        .unwrap_or_default()
        .into_iter()
        .map(|w| fold(w.as_bytes()))
        .collect::<Result<Vec<_>>>()?;
    let mut data = Vec::new();
    for s in &x.data {
        if !stopwords.contains(&fold(s)?) {
            data.push(case(s)?);
        }
    }
    if data.is_empty() {
        data.push(Vec::new());
    }
    let dims = if row {
        vec![1, data.len()]
    } else {
        vec![data.len()]
    };
    Ok(vec![Value::Strings(Strings { dims, data })])
}

/// StringSplit: each string split at `delimiter` (at runs of whitespace, dropping empty parts,
/// when it is empty or unset), at most `maxsplit` times. The parts go along a new last axis,
/// padded with empty strings to the longest split; `length` counts each string's parts.
fn string_split(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = strings(c, a, 0)?;
    let delimiter = c.string("delimiter", "")?;
    let maxsplit = match c.int("maxsplit", -1)? {
        m if m < 0 => usize::MAX,
        m => usize::try_from(m).unwrap_or(usize::MAX),
    };
    let parts = x
        .data
        .iter()
        .map(|s| {
            if delimiter.is_empty() {
                Ok(split_whitespace(text(s)?, maxsplit))
            } else {
                Ok(split_at(s, delimiter.as_bytes(), maxsplit))
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let width = parts.iter().map(Vec::len).max().unwrap_or(0);
    let mut data = Vec::with_capacity(parts.len() * width);
    let mut lengths = Vec::with_capacity(parts.len());
    for mut p in parts {
        lengths.push(p.len() as i64);
        p.resize(width, Vec::new());
        data.extend(p);
    }
    let mut dims = x.dims.clone();
    dims.push(width);
    Ok(vec![
        Value::Strings(Strings { dims, data }),
        Value::Ints(Ints {
            dims: x.dims.clone(),
            data: lengths,
            bool: false,
        }),
    ])
}

/// `s` split at each `delimiter` (left to right), at most `maxsplit` times.
fn split_at(s: &[u8], delimiter: &[u8], maxsplit: usize) -> Vec<Vec<u8>> {
    let mut parts = Vec::new();
    let mut rest = s;
    while parts.len() < maxsplit {
        let Some(at) = rest.windows(delimiter.len()).position(|w| w == delimiter) else {
            break;
        };
        parts.push(rest[..at].to_vec());
        rest = &rest[at + delimiter.len()..];
    }
    parts.push(rest.to_vec());
    parts
}

/// `s` split at runs of whitespace, at most `maxsplit` times, without empty parts: after the
/// last split, the rest is one part from its first non-space character on.
fn split_whitespace(s: &str, maxsplit: usize) -> Vec<Vec<u8>> {
    let mut parts = Vec::new();
    let mut rest = s.trim_start();
    while !rest.is_empty() {
        if parts.len() == maxsplit {
            parts.push(rest.as_bytes().to_vec());
            break;
        }
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        parts.push(rest.as_bytes()[..end].to_vec());
        rest = rest[end..].trim_start();
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(parts: &[Vec<u8>]) -> Vec<&str> {
        parts.iter().map(|p| text(p).unwrap()).collect()
    }

    #[test]
    fn maxsplit_keeps_the_rest_whole() {
        // as Python's str.split: the rest starts at its first non-space character
        assert_eq!(texts(&split_whitespace("  a b  c ", 1)), ["a", "b  c "]);
        assert_eq!(texts(&split_whitespace(" a  ", 1)), ["a"]);
        assert!(split_whitespace("   ", usize::MAX).is_empty());
        assert_eq!(texts(&split_at(b"a..b", b".", 1)), ["a", ".b"]);
        assert_eq!(texts(&split_at(b"", b".", usize::MAX)), [""]);
    }
}
