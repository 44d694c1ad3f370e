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
