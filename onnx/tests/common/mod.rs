//! Shared by the tests that read the ONNX suites in `shared/conformance/`.
#![allow(dead_code)] // each test binary uses a different part

use std::path::{Path, PathBuf};

use kiln_onnx::{GraphProto, TensorProto};

/// The conformance data: `$KILN_ONNX_SUITES`, or the first `shared/conformance` found walking up
/// from this crate. `None` (after a notice) when neither exists, so the tests pass without it.
pub fn suites() -> Option<PathBuf> {
    let dir = match std::env::var_os("KILN_ONNX_SUITES") {
        Some(dir) => Some(PathBuf::from(dir)),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .map(|a| a.join("shared/conformance"))
            .find(|d| d.is_dir()),
    };
    if dir.is_none() {
        eprintln!("notice: no shared/conformance found (set KILN_ONNX_SUITES); skipping");
    }
    dir
}

/// The entries of `dir` whose file name satisfies `keep`, sorted so that runs are repeatable.
pub fn list(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(&keep))
        .collect();
    paths.sort();
    paths
}

/// Every tensor stored in a graph: initializers and tensor attributes (e.g. `Constant` values),
/// in subgraphs too.
pub fn graph_tensors(graph: &GraphProto) -> Vec<&TensorProto> {
    let mut out: Vec<&TensorProto> = graph.initializer.iter().collect();
    for node in &graph.node {
        for a in &node.attribute {
            out.extend(a.t.iter().chain(&a.tensors));
            for g in a.g.iter().chain(&a.graphs) {
                out.extend(graph_tensors(g));
            }
        }
    }
    out
}

/// What running one suite case or model gave.
pub enum Outcome {
    Pass,
    Fail(String),
    Unsupported(String),
    /// The device cannot run it (a tensor larger than its biggest buffer, out of memory).
    BeyondDevice(String),
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Pass => f.write_str("passed"),
            Outcome::Fail(why) => write!(f, "FAILED: {why}"),
            Outcome::Unsupported(why) => write!(f, "unsupported: {why}"),
            Outcome::BeyondDevice(why) => write!(f, "beyond this device: {why}"),
        }
    }
}

/// Float outputs match within this relative tolerance (the ONNX runner's default) plus
/// [`ATOL`]; integers and bools exactly.
pub const RTOL: f64 = 1e-3;
/// See [`RTOL`].
pub const ATOL: f64 = 1e-5;

/// A stored TensorProto file as a run-time value.
pub fn read_value(path: &Path, dev: &kiln_core::Device) -> Result<kiln_onnx::Value, String> {
    let t = kiln_onnx::read_tensor(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v = kiln_onnx::tensor_value(&t).map_err(|e| e.to_string())?;
    kiln_onnx::Value::from_tensor(v, dev).map_err(|e| e.to_string())
}

/// A stored test value of declared type `ty`: a TensorProto file, or a SequenceProto /
/// OptionalProto file where the graph declares a sequence or an optional.
pub fn read_typed(
    path: &Path,
    ty: Option<&kiln_onnx::TypeProto>,
    dev: &kiln_core::Device,
) -> Result<kiln_onnx::Value, String> {
    use kiln_onnx::proto::type_proto::Value as T;
    let bytes = || std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()));
    match ty.and_then(|t| t.value.as_ref()) {
        Some(T::SequenceType(_)) => {
            let s = kiln_onnx::decode_sequence(&bytes()?).map_err(|e| e.to_string())?;
            sequence_value(&s, dev)
        }
        Some(T::OptionalType(_)) => {
            let o = kiln_onnx::decode_optional(&bytes()?).map_err(|e| e.to_string())?;
            let inner = if let Some(t) = &o.tensor_value {
                Some(tensor(t, dev)?)
            } else if let Some(s) = &o.sequence_value {
                Some(sequence_value(s, dev)?)
            } else {
                None
            };
            Ok(kiln_onnx::Value::Optional(inner.map(Box::new)))
        }
        _ => read_value(path, dev),
    }
}

fn tensor(t: &TensorProto, dev: &kiln_core::Device) -> Result<kiln_onnx::Value, String> {
    let v = kiln_onnx::tensor_value(t).map_err(|e| e.to_string())?;
    kiln_onnx::Value::from_tensor(v, dev).map_err(|e| e.to_string())
}

fn sequence_value(
    s: &kiln_onnx::SequenceProto,
    dev: &kiln_core::Device,
) -> Result<kiln_onnx::Value, String> {
    let mut items: Vec<kiln_onnx::Value> = s
        .tensor_values
        .iter()
        .map(|t| tensor(t, dev))
        .collect::<Result<_, _>>()?;
    for inner in &s.sequence_values {
        items.push(sequence_value(inner, dev)?);
    }
    Ok(kiln_onnx::Value::Sequence(items))
}

/// The dims and values of `v` as f64, and whether they compare exactly.
fn values(v: &kiln_onnx::Value) -> Result<(Vec<usize>, Vec<f64>, bool), String> {
    match v {
        kiln_onnx::Value::Ints(i) => Ok((
            i.dims.clone(),
            i.data.iter().map(|&x| x as f64).collect(),
            true,
        )),
        // a narrow type's values (exactly the type's values on both sides) compare as floats
        // or integers, as ONNX's runner compares them once widened
        kiln_onnx::Value::Tensor(t) | kiln_onnx::Value::Narrow { tensor: t, .. } => {
            let d = t.to_data().map_err(|e| e.to_string())?;
            Ok((t.dims().to_vec(), d.to_f64_vec(), !t.dtype().is_float()))
        }
        other => Err(format!("expects a tensor, gets {}", other.describe())),
    }
}

/// `got` against the stored `want` for output `name`: the first differing element, if any.
pub fn compare(name: &str, want: &kiln_onnx::Value, got: &kiln_onnx::Value) -> Result<(), String> {
    use kiln_onnx::Value as V;
    match (want, got) {
        (V::Sequence(w), V::Sequence(g)) => {
            if w.len() != g.len() {
                return Err(format!(
                    "output {name}: a sequence of {}, expected {}",
                    g.len(),
                    w.len()
                ));
            }
            return w
                .iter()
                .zip(g)
                .enumerate()
                .try_for_each(|(i, (w, g))| compare(&format!("{name}[{i}]"), w, g));
        }
        (V::Optional(None), V::Optional(None)) => return Ok(()),
        (V::Optional(Some(w)), V::Optional(Some(g))) => return compare(name, w, g),
        // an optional holding a value matches that value given plainly, and the reverse
        (V::Optional(Some(w)), g) => return compare(name, w, g),
        (w, V::Optional(Some(g))) => return compare(name, w, g),
        (V::Sequence(_) | V::Optional(_), _) | (_, V::Sequence(_) | V::Optional(_)) => {
            return Err(format!(
                "output {name}: {}, expected {}",
                got.describe(),
                want.describe()
            ));
        }
        _ => {}
    }
    if let kiln_onnx::Value::Narrow { ty, .. } = want {
        let got_ty = match got {
            kiln_onnx::Value::Narrow { ty, .. } => Some(*ty),
            _ => None,
        };
        if got_ty != Some(*ty) {
            return Err(format!(
                "output {name}: {}, expected type {}",
                got.describe(),
                ty.as_str_name()
            ));
        }
    }
    if let kiln_onnx::Value::Strings(w) = want {
        let kiln_onnx::Value::Strings(g) = got else {
            return Err(format!(
                "output {name}: {}, expected strings",
                got.describe()
            ));
        };
        if w.dims != g.dims {
            return Err(format!(
                "output {name}: shape {:?}, expected {:?}",
                g.dims, w.dims
            ));
        }
        return match w.data.iter().zip(&g.data).position(|(a, b)| a != b) {
            Some(i) => Err(format!(
                "output {name}: element {i} is {:?}, expected {:?}",
                String::from_utf8_lossy(&g.data[i]),
                String::from_utf8_lossy(&w.data[i])
            )),
            None => Ok(()),
        };
    }
    let (wd, w, exact) = values(want)?;
    let (gd, g, _) = values(got)?;
    if wd != gd {
        return Err(format!("output {name}: shape {gd:?}, expected {wd:?}"));
    }
    for (i, (a, b)) in w.iter().zip(&g).enumerate() {
        let ok = if exact || a.is_infinite() {
            a == b
        } else if a.is_nan() {
            b.is_nan()
        } else {
            (a - b).abs() <= ATOL + RTOL * a.abs()
        };
        if !ok {
            return Err(format!("output {name}: element {i} is {b}, expected {a}"));
        }
    }
    Ok(())
}

/// Runs `model` on `inputs` and compares every output with `want` (unsupported ops or
/// attributes met while running make it `Unsupported`).
pub fn check(
    model: &kiln_onnx::OnnxModel,
    inputs: Vec<kiln_onnx::Value>,
    want: &[kiln_onnx::Value],
) -> Outcome {
    let got = match model.run_values(inputs) {
        Ok(v) => v,
        Err(e) if e.kind() == kiln_core::ErrorKind::Unsupported => {
            return Outcome::Unsupported(e.to_string());
        }
        Err(e) if e.kind() == kiln_core::ErrorKind::Device => {
            return Outcome::BeyondDevice(e.to_string());
        }
        Err(e) => return Outcome::Fail(e.to_string()),
    };
    if got.len() < want.len() {
        return Outcome::Fail(format!("{} outputs, expected {}", got.len(), want.len()));
    }
    let names = model.output_names();
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        let name = names.get(i).map_or_else(|| i.to_string(), Clone::clone);
        if let Err(e) = compare(&name, w, g) {
            return Outcome::Fail(e);
        }
    }
    Outcome::Pass
}

/// Loads a model: ops kiln does not import make it `Unsupported` (the error names them).
pub fn load(
    model: kiln_onnx::ModelProto,
    dev: &kiln_core::Device,
) -> Result<kiln_onnx::OnnxModel, Outcome> {
    kiln_onnx::OnnxModel::from_proto(model, dev).map_err(|e| {
        if e.kind() == kiln_core::ErrorKind::Unsupported {
            Outcome::Unsupported(e.to_string())
        } else {
            Outcome::Fail(e.to_string())
        }
    })
}
