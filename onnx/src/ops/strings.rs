//! String ops, on the host: no kiln device holds strings ([`Value::Strings`]). Strings are bytes
//! (ONNX does not enforce UTF-8); ops that need characters (case changes, whitespace) check
//! that they are UTF-8 and say which is not. `TfIdfVectorizer` counts n-grams of strings or
//! integers, on the host too.

use super::shape::host_numel;
use super::{Ctx, OpFn, Outputs, broadcast_offsets, float_table, host_values, one};
use crate::NodeAttrs;
use crate::model::onnx_err;
use crate::value::{Ints, Strings, Value};
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use kiln_core::{DType, Error, Result};

pub(super) const OPS: &[(&str, OpFn)] = &[
    ("StringNormalizer", string_normalizer),
    ("StringConcat", string_concat),
    ("StringSplit", string_split),
    ("TfIdfVectorizer", tfidf_vectorizer),
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

/// TfIdfVectorizer's n-grams and how to count them.
struct Grams<'p, K> {
    /// Each n-gram of the pool, of a length counted, with its output index.
    table: BTreeMap<Vec<&'p K>, usize>,
    /// The n-gram lengths counted.
    lengths: core::ops::RangeInclusive<usize>,
    max_skip: usize,
    /// The number of output columns.
    width: usize,
}

impl<'p, K: Ord> Grams<'p, K> {
    /// The n-grams of `pool`: the `n`-grams from `levels[n - 1]` to the next level's start, the
    /// `k`-th of them counted in output column `indexes[k]`.
    fn new(c: &Ctx<'_>, pool: &'p [K], levels: &[i64], indexes: &[i64]) -> Result<Self> {
        let invalid = |m: String| Error::invalid("onnx", m);
        let min = c.int("min_gram_length", 0)?;
        let max = c.int("max_gram_length", 0)?;
        let skip = c.int("max_skip_count", 0)?;
        if min < 1 || max < min || skip < 0 {
            return Err(invalid(format!(
                "TfIdfVectorizer gram lengths {min}..={max} and max_skip_count {skip} (expects 1 <= min <= max, skips >= 0)"
            )));
        }
        // longer n-grams than the pool holds are never found, nor skips past a row's end
        let (min, max) = (min as usize, (max as usize).min(levels.len()));
        let width = match indexes.iter().max() {
            Some(&m) => usize::try_from(m).ok().and_then(|m| m.checked_add(1)),
            None => Some(0),
        };
        let width = width
            .filter(|_| indexes.iter().all(|&i| i >= 0))
            .ok_or_else(|| invalid(format!("ngram_indexes {indexes:?} (expects indices >= 0)")))?;
        let mut table = BTreeMap::new();
        let mut grams = indexes.iter();
        for (level, &start) in levels.iter().enumerate() {
            let n = level + 1;
            let end = levels.get(n).map_or(pool.len() as i64, |&e| e);
            let run = usize::try_from(start)
                .ok()
                .zip(usize::try_from(end).ok())
                .and_then(|(s, e)| pool.get(s..e))
                .filter(|run| run.len() % n == 0)
                .ok_or_else(|| {
                    invalid(format!(
                        "ngram_counts {levels:?}: the {n}-grams {start}..{end} of a pool of {}",
                        pool.len()
                    ))
                })?;
            for gram in run.chunks(n) {
                let &at = grams.next().ok_or_else(|| {
                    invalid(format!(
                        "the pool holds more n-grams than ngram_indexes' {}",
                        indexes.len()
                    ))
                })?;
                if (min..=max).contains(&n) {
                    table.insert(gram.iter().collect(), at as usize);
                }
            }
        }
        if grams.next().is_some() {
            return Err(invalid(format!(
                "ngram_indexes has {} values for fewer n-grams in the pool",
                indexes.len()
            )));
        }
        Ok(Grams {
            table,
            lengths: min..=max,
            max_skip: skip as usize,
            width,
        })
    }

    /// How often each n-gram occurs in each of the `rows` rows of `data`, by output column:
    /// the n-grams of every length counted whose items are `skip + 1` apart, for every skip up
    /// to `max_skip` (a 1-gram once).
    fn counts(&self, data: &[K], rows: usize) -> Result<Vec<f64>> {
        let mut out = vec![0.0; host_numel(&[rows, self.width])?];
        if rows == 0 || self.width == 0 {
            return Ok(out);
        }
        let cols = data.len() / rows;
        for (row, out) in data.chunks(cols.max(1)).zip(out.chunks_mut(self.width)) {
            for n in self.lengths.clone() {
                let skips = if n == 1 { 0 } else { self.max_skip.min(cols) };
                for step in 1..=skips + 1 {
                    let span = (n - 1).saturating_mul(step);
                    for start in 0..cols.saturating_sub(span) {
                        let gram: Vec<&K> = (0..n).map(|j| &row[start + j * step]).collect();
                        if let Some(&at) = self.table.get(&gram) {
                            out[at] += 1.0;
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}

/// TfIdfVectorizer: for each row of `X` (1-D, or 2-D of rows), how often each n-gram of the
/// pool occurs (`TF`), its weight where it occurs (`IDF`), or both multiplied (`TFIDF`).
/// The weights (1 without `weights`) go by output column.
fn tfidf_vectorizer(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let invalid = |m: String| Error::invalid("onnx", m);
    let x = c.arg(a, 0)?;
    let dims = x.dims();
    let (rows, cols) = match dims[..] {
        [n] => (1, n),
        [b, n] => (b, n),
        _ => {
            return Err(invalid(format!(
                "TfIdfVectorizer expects a 1-D or 2-D input, gets {}",
                x.describe()
            )));
        }
    };
    let (idf, tf) = match c.string("mode", "")?.as_str() {
        "TF" => (false, true),
        "IDF" => (true, false),
        "TFIDF" => (true, true),
        m => return Err(c.unsupported(format!("TfIdfVectorizer mode '{m}'"))),
    };
    let levels = c.ints_attr("ngram_counts")?.unwrap_or_default();
    let indexes = c.ints_attr("ngram_indexes")?.unwrap_or_default();
    let weights = c.floats_attr("weights")?;
    let len = rows * cols;
    let (mut out, width) = match x {
        Value::Strings(s) => {
            let pool: Vec<&[u8]> = c
                .node
                .attr_strings("pool_strings")
                .map_err(onnx_err)?
                .ok_or_else(|| invalid("TfIdfVectorizer of strings sets no pool_strings".into()))?
                .into_iter()
                .map(str::as_bytes)
                .collect();
            let data: Vec<&[u8]> = s.data.iter().map(Vec::as_slice).collect();
            if data.len() != len {
                return Err(invalid(format!(
                    "strings of shape {dims:?} hold {}",
                    data.len()
                )));
            }
            let g = Grams::new(c, &pool, &levels, &indexes)?;
            (g.counts(&data, rows)?, g.width)
        }
        _ => {
            let pool = c.ints_attr("pool_int64s")?.ok_or_else(|| {
                invalid(format!(
                    "TfIdfVectorizer of {} sets no pool_int64s",
                    x.describe()
                ))
            })?;
            let data: Vec<i64> = match x {
                Value::Ints(i) if !i.bool => i.data.clone(),
                Value::Tensor(t) if !t.dtype().is_float() && t.dtype() != DType::Bool => {
                    host_values(x, "TfIdfVectorizer's input")?
                        .into_iter()
                        .map(|v| v as i64)
                        .collect()
                }
                _ => {
                    return Err(invalid(format!(
                        "TfIdfVectorizer expects strings or integers, gets {}",
                        x.describe()
                    )));
                }
            };
            if data.len() != len {
                return Err(invalid(format!(
                    "integers of shape {dims:?} hold {}",
                    data.len()
                )));
            }
            let g = Grams::new(c, &pool, &levels, &indexes)?;
            (g.counts(&data, rows)?, g.width)
        }
    };
    if let Some(w) = &weights
        && w.len() < width
    {
        return Err(invalid(format!(
            "TfIdfVectorizer has {} weights for {width} output columns",
            w.len()
        )));
    }
    if idf && width > 0 {
        for o in out.chunks_mut(width) {
            for (v, k) in o.iter_mut().zip(0..) {
                let w = weights.as_ref().map_or(1.0, |w| f64::from(w[k]));
                *v = if tf {
                    *v * w
                } else if *v > 0.0 {
                    w
                } else {
                    0.0
                };
            }
        }
    }
    let out_dims = if dims.len() == 1 {
        vec![width]
    } else {
        vec![rows, width]
    };
    one(float_table(c.device, out, out_dims, DType::F32)?)
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
