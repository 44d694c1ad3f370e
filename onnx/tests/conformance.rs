//! The ONNX backend test suites on kiln's CPU backend: every case of the node, simple,
//! pytorch-converted and pytorch-operator suites is imported, run on its stored inputs and
//! compared with its stored outputs (floats within 1e-3 relative + 1e-5 absolute, the ONNX
//! runner's default relative tolerance; integers and bools exactly).
//!
//! Prints a table (per suite: passed, failed, unsupported; per ONNX op: cases passed) and fails
//! when a case listed in `onnx/conformance/passing.txt` does not pass, or when any case panics.
//! `KILN_ONNX_WRITE=1` rewrites that list and `SUPPORTED-ONNX-OPS.md` from the run; do it when
//! more cases pass.
//!
//! A fixed subset (the CPU-passing cases whose ops are all in [`WGPU_OPS`]: what CNNs and
//! transformers use) also runs on wgpu (lavapipe in CI), against `conformance/passing-wgpu.txt`. `KILN_ONNX_CASES=substring` runs only the matching cases (and prints why
//! each failed).

mod common;

use common::Outcome;
use kiln_core::Device;
use kiln_onnx::{Value, read_model};
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

const SUITES: &[&str] = &[
    "onnx-node",
    "onnx-simple",
    "onnx-pytorch-converted",
    "onnx-pytorch-operator",
];

fn run_case(dir: &Path, dev: &Device) -> Outcome {
    let model = match read_model(dir.join("model.onnx")) {
        Ok(m) => m,
        Err(e) => return Outcome::Fail(e.to_string()),
    };
    let graph = model.graph.clone().unwrap_or_default();
    let model = match common::load(model, dev) {
        Ok(m) => m,
        Err(o) => return o,
    };
    let data = dir.join("test_data_set_0");
    let initializers: BTreeSet<&str> = graph.initializer.iter().map(|t| t.name()).collect();
    let declared: Vec<_> = graph
        .input
        .iter()
        .filter(|i| !initializers.contains(i.name()))
        .collect();
    let read = |prefix: &str, decls: &[&kiln_onnx::ValueInfoProto]| -> Result<Vec<Value>, String> {
        decls
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let path = data.join(format!("{prefix}_{i}.pb"));
                common::read_typed(&path, d.r#type.as_ref(), dev)
            })
            .collect()
    };
    // stored data of a type kiln has no dtype for (float8, strings, ...) makes a case unsupported
    let inputs = match read("input", &declared) {
        Ok(v) => v,
        Err(e) => return Outcome::Unsupported(format!("inputs: {e}")),
    };
    let outputs: Vec<_> = graph.output.iter().collect();
    let want = match read("output", &outputs) {
        Ok(v) => v,
        Err(e) => return Outcome::Unsupported(format!("outputs: {e}")),
    };
    common::check(&model, inputs, &want)
}

/// Each case's suite, outcome and ops, by `suite/case`.
type Results = BTreeMap<String, (String, Outcome, Vec<String>)>;

/// Runs every case that `keep(case, ops)` selects (and `KILN_ONNX_CASES` matches) on `dev`,
/// and returns the outcomes and the panics.
fn run_suites(
    root: &Path,
    dev: &Device,
    keep: impl Fn(&str, &[String]) -> bool,
) -> (Results, Vec<String>) {
    let filter = std::env::var("KILN_ONNX_CASES").ok();
    let mut results = Results::new();
    let mut panics = Vec::new();
    for suite in SUITES {
        for dir in common::list(&root.join(suite), |n| n.starts_with("test_")) {
            let case = dir.file_name().unwrap().to_string_lossy().to_string();
            if filter.as_ref().is_some_and(|f| !case.contains(f.as_str())) {
                continue;
            }
            let ops: Vec<String> = read_model(dir.join("model.onnx"))
                .map(|m| {
                    let mut o: Vec<String> = m
                        .graph
                        .unwrap_or_default()
                        .node
                        .iter()
                        .map(|n| n.op_type().to_string())
                        .collect();
                    o.sort();
                    o.dedup();
                    o
                })
                .unwrap_or_default();
            let key = format!("{suite}/{case}");
            if !keep(&key, &ops) {
                continue;
            }
            let outcome =
                catch_unwind(AssertUnwindSafe(|| run_case(&dir, dev))).unwrap_or_else(|p| {
                    let msg = p
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    panics.push(format!("{case}: {msg}"));
                    Outcome::Fail(format!("panicked: {msg}"))
                });
            results.insert(key, (suite.to_string(), outcome, ops));
        }
    }
    (results, panics)
}

/// The cases that pass; `KILN_ONNX_WRITE` (on an unfiltered run) rewrites the baseline
/// `conformance/<baseline>` with them. Fails on panics and on baseline cases that no longer pass.
fn check_baseline(results: &Results, panics: &[String], baseline: &str) -> BTreeSet<String> {
    let passing: BTreeSet<String> = results
        .iter()
        .filter(|(_, (_, o, _))| matches!(o, Outcome::Pass))
        .map(|(k, _)| k.clone())
        .collect();
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("conformance")
        .join(baseline);
    let unfiltered = std::env::var_os("KILN_ONNX_CASES").is_none();
    if std::env::var_os("KILN_ONNX_WRITE").is_some() && unfiltered {
        let text: String = passing.iter().map(|c| format!("{c}\n")).collect();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
    }
    assert!(
        panics.is_empty(),
        "{} cases panicked:\n{}",
        panics.len(),
        panics.join("\n")
    );
    let before = std::fs::read_to_string(&path).unwrap_or_default();
    let regressed: Vec<String> = before
        .lines()
        .filter(|c| results.contains_key(*c) && !passing.contains(*c))
        .map(|c| format!("{c}: {}", results[c].1))
        .collect();
    assert!(
        regressed.is_empty(),
        "{} previously passing cases fail:\n{}",
        regressed.len(),
        regressed.join("\n")
    );
    passing
}

#[test]
fn onnx_backend_suites_on_the_cpu() {
    let Some(root) = common::suites() else { return };
    let (results, panics) = run_suites(&root, &Device::cpu(), |_, _| true);
    let verbose = std::env::var_os("KILN_ONNX_CASES").is_some();
    report(&results, verbose);
    if std::env::var_os("KILN_ONNX_WRITE").is_some() && !verbose {
        write_supported_ops(&results);
    }
    check_baseline(&results, &panics, "passing.txt");
}

/// The ops of the fixed subset run on wgpu: those of the CNNs and transformers users bring.
const WGPU_OPS: &[&str] = &[
    "Add",
    "AveragePool",
    "BatchNormalization",
    "Cast",
    "Clip",
    "Concat",
    "Constant",
    "Conv",
    "ConvTranspose",
    "Div",
    "Dropout",
    "Erf",
    "Exp",
    "Expand",
    "Flatten",
    "Gather",
    "Gelu",
    "Gemm",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "InstanceNormalization",
    "LayerNormalization",
    "LeakyRelu",
    "Log",
    "LogSoftmax",
    "LRN",
    "MatMul",
    "Max",
    "MaxPool",
    "Mean",
    "Min",
    "Mul",
    "Neg",
    "Pad",
    "Pow",
    "PRelu",
    "Reciprocal",
    "ReduceMax",
    "ReduceMean",
    "ReduceSum",
    "Relu",
    "Reshape",
    "Shape",
    "Sigmoid",
    "Slice",
    "Softmax",
    "Softplus",
    "Split",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Sum",
    "Tanh",
    "Transpose",
    "Unsqueeze",
    "Where",
];

/// The cases of [`WGPU_OPS`] that pass on the CPU, on wgpu (lavapipe in CI, any Vulkan GPU
/// natively): fails when a case of `conformance/passing-wgpu.txt` does not pass. Skips with a
/// notice when no adapter exists.
#[test]
fn onnx_backend_subset_on_wgpu() {
    let Some(root) = common::suites() else { return };
    let dev = match kiln_kernels::wgpu_device() {
        Ok(d) => d,
        Err(e) => return eprintln!("notice: no wgpu adapter ({e}); skipping"),
    };
    let cpu_pass = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance/passing.txt"),
    )
    .unwrap_or_default();
    let cpu_pass: BTreeSet<&str> = cpu_pass.lines().collect();
    let (results, panics) = run_suites(&root, &dev, |case, ops| {
        cpu_pass.contains(case) && ops.iter().all(|o| WGPU_OPS.contains(&o.as_str()))
    });
    let passing = check_baseline(&results, &panics, "passing-wgpu.txt");
    println!(
        "wgpu: {} of {} cases of the subset pass",
        passing.len(),
        results.len()
    );
    for (case, (_, o, _)) in &results {
        if !matches!(o, Outcome::Pass) {
            println!("{case}: {o}");
        }
    }
}

fn report(results: &BTreeMap<String, (String, Outcome, Vec<String>)>, verbose: bool) {
    let supported: BTreeSet<&str> = kiln_onnx::supported_ops().into_iter().collect();
    println!(
        "\n| suite | cases | passed | failed | unsupported | passed of cases with supported ops |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for suite in SUITES {
        let rows: Vec<_> = results.values().filter(|(s, _, _)| s == suite).collect();
        let count = |f: fn(&Outcome) -> bool| rows.iter().filter(|(_, o, _)| f(o)).count();
        let pass = count(|o| matches!(o, Outcome::Pass));
        let fail = count(|o| matches!(o, Outcome::Fail(_)));
        let unsup = count(|o| matches!(o, Outcome::Unsupported(_)));
        let declared: Vec<_> = rows
            .iter()
            .filter(|(_, _, ops)| {
                !ops.is_empty() && ops.iter().all(|o| supported.contains(o.as_str()))
            })
            .collect();
        let declared_pass = declared
            .iter()
            .filter(|(_, o, _)| matches!(o, Outcome::Pass))
            .count();
        println!(
            "| {suite} | {} | {pass} | {fail} | {unsup} | {declared_pass} of {} |",
            rows.len(),
            declared.len()
        );
    }
    println!("{} ONNX ops supported", supported.len());
    if verbose {
        for (case, (_, o, _)) in results {
            if !matches!(o, Outcome::Pass) {
                println!("{case}: {o}");
            }
        }
    }
}

/// SUPPORTED-ONNX-OPS.md: every op kiln imports with the node-suite cases it passes.
fn write_supported_ops(results: &BTreeMap<String, (String, Outcome, Vec<String>)>) {
    let mut per_op: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for (_, o, ops) in results.values() {
        for op in ops {
            let e = per_op.entry(op.as_str()).or_default();
            e.1 += 1;
            if matches!(o, Outcome::Pass) {
                e.0 += 1;
            }
        }
    }
    let mut text = String::from(
        "# ONNX operators kiln imports\n\nGenerated by `KILN_ONNX_WRITE=1 cargo test -p kiln-onnx --test conformance`\n\
         from a run of the ONNX backend suites (node, simple, pytorch-converted, pytorch-operator)\n\
         on the CPU backend. \"Cases\" counts the suite cases that use the op; a case passes when\n\
         all its outputs match (floats within 1e-3 relative + 1e-5 absolute).\n\n\
         | op | cases passed |\n| --- | ---: |\n",
    );
    for op in kiln_onnx::supported_ops() {
        let (p, n) = per_op.get(op).copied().unwrap_or_default();
        text.push_str(&format!("| {op} | {p} of {n} |\n"));
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../SUPPORTED-ONNX-OPS.md");
    std::fs::write(path, text).unwrap();
}
