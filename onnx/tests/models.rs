//! Whole models on kiln's CPU backend and on wgpu: the two pretrained MNIST classifiers of the ONNX Model
//! Zoo (`shared/conformance/models/mnist/{mnist-7,mnist-8}`, each with its `test_data_set_N`
//! folders of stored inputs and outputs) and the nine "light" zoo architectures of onnx's
//! backend tests (`shared/conformance/onnx-light`: alexnet, densenet121, inception v1 and v2,
//! resnet50, shufflenet, squeezenet, vgg19, zfnet512), whose float initializers were replaced by
//! `ConstantOfShape` nodes.
//!
//! The light models come without stored inputs, and their `light_<name>_output_0.pb` (from
//! onnx's C reference evaluator, per the folder's README) do not depend on the input: every
//! weight of a light model is one constant, and every expected output is a constant vector
//! (0.001 everywhere, the softmax of equal logits, for eight of them; 0.46095502 everywhere for
//! densenet121). Any input of the declared shape gives these outputs (zeros and 0.7 were both
//! tried), so an all-zero input of the declared shape is fed (see `light_input`). These models
//! therefore check that every op of the architecture imports and runs, shapes included, and
//! little about the numbers; the MNIST models check the numbers.
//!
//! Outputs are compared as in `tests/conformance.rs` (floats within 1e-3 relative + 1e-5
//! absolute). Prints per model: passed, failed or unsupported (naming the missing ops), and the
//! time the run took. Fails when a model of `EXPECTED_PASS` does not pass, or when any panics.

mod common;

use common::{Outcome, check, list, read_value};
use kiln_core::{DType, Device, Tensor};
use kiln_onnx::{Dim, OnnxModel, Value, read_model};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The models that pass today; each must keep passing.
const EXPECTED_PASS: &[&str] = &[
    "mnist-7",
    "mnist-8",
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    "vgg19",
    "zfnet512",
];

/// Loads a model file (ops kiln does not import make it `Unsupported`).
fn load(path: &Path, dev: &Device) -> Result<OnnxModel, Outcome> {
    let proto = read_model(path).map_err(|e| Outcome::Fail(e.to_string()))?;
    common::load(proto, dev)
}

/// An MNIST model folder: every `test_data_set_N` (inputs and outputs bound by position).
fn run_mnist(dir: &Path, dev: &Device) -> Outcome {
    let model = match load(&dir.join("model.onnx"), dev) {
        Ok(m) => m,
        Err(o) => return o,
    };
    let sets = list(dir, |n| n.starts_with("test_data_set_"));
    if sets.is_empty() {
        return Outcome::Fail("no test_data_set_N folders".into());
    }
    for set in sets {
        let read = |prefix: &str| -> Result<Vec<Value>, String> {
            list(&set, |n| n.starts_with(prefix) && n.ends_with(".pb"))
                .iter()
                .map(|p| read_value(p, dev))
                .collect()
        };
        let (inputs, want) = match (read("input_"), read("output_")) {
            (Ok(i), Ok(o)) => (i, o),
            (Err(e), _) | (_, Err(e)) => return Outcome::Fail(e),
        };
        match check(&model, inputs, &want) {
            Outcome::Pass => {}
            Outcome::Fail(e) => {
                let name = set.file_name().unwrap_or_default().to_string_lossy();
                return Outcome::Fail(format!("{name}: {e}"));
            }
            other => return other,
        }
    }
    Outcome::Pass
}

/// An input for a light model: zeros of the declared shape (f32); its outputs do not depend on
/// it (see the module docs).
fn light_input(model: &OnnxModel, dev: &Device) -> Result<Vec<Value>, String> {
    model
        .inputs()
        .iter()
        .map(|i| {
            let dims: Vec<usize> = i
                .dims
                .as_ref()
                .ok_or_else(|| format!("input {} has no declared shape", i.name))?
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => Ok(*n),
                    other => Err(format!("input {} has dimension {other:?}", i.name)),
                })
                .collect::<Result<_, String>>()?;
            Tensor::zeros(dims, DType::F32, dev)
                .map(Value::Tensor)
                .map_err(|e| e.to_string())
        })
        .collect()
}

/// A light model: `light_<name>.onnx` with `light_<name>_output_0.pb`.
fn run_light(path: &Path, dev: &Device) -> Outcome {
    let model = match load(path, dev) {
        Ok(m) => m,
        Err(o) => return o,
    };
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let want = match read_value(&path.with_file_name(format!("{stem}_output_0.pb")), dev) {
        Ok(v) => v,
        Err(e) => return Outcome::Fail(e),
    };
    match light_input(&model, dev) {
        Ok(inputs) => check(&model, inputs, &[want]),
        Err(e) => Outcome::Fail(e),
    }
}

#[test]
fn zoo_models_on_the_cpu() {
    let Some(root) = common::suites() else { return };
    run_zoo(&root, &Device::cpu());
}

/// The same models on wgpu (lavapipe in CI, any Vulkan GPU natively); skips with a notice
/// when no adapter exists.
#[test]
fn zoo_models_on_wgpu() {
    let Some(root) = common::suites() else { return };
    match kiln_kernels::wgpu_device() {
        Ok(dev) => run_zoo(&root, &dev),
        Err(e) => eprintln!("notice: no wgpu adapter ({e}); skipping"),
    }
}

/// Runs every zoo model on `dev`, prints a table, and fails when one of [`EXPECTED_PASS`]
/// does not pass or any panics.
fn run_zoo(root: &Path, dev: &Device) {
    let mut cases: Vec<(String, PathBuf, bool)> = Vec::new();
    for name in ["mnist-7", "mnist-8"] {
        cases.push((name.into(), root.join("models/mnist").join(name), true));
    }
    for p in list(&root.join("onnx-light"), |n| {
        n.starts_with("light_") && n.ends_with(".onnx")
    }) {
        let name = p.file_stem().unwrap_or_default().to_string_lossy();
        let name = name.trim_start_matches("light_").to_string();
        cases.push((name, p, false));
    }
    let mut passed = Vec::new();
    let mut panics = Vec::new();
    println!(
        "\n{}\n| model | outcome | time |\n| --- | --- | ---: |",
        dev.name()
    );
    for (name, path, mnist) in &cases {
        let start = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            if *mnist {
                run_mnist(path, dev)
            } else {
                run_light(path, dev)
            }
        }))
        .unwrap_or_else(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panics.push(format!("{name}: {msg}"));
            Outcome::Fail(format!("panicked: {msg}"))
        });
        let secs = start.elapsed().as_secs_f64();
        // a GPU whose buffers are too small for a weight (lavapipe's 128 MiB and VGG-19's
        // 392 MiB fc6) is excused; the CPU never is
        let excused = matches!(outcome, Outcome::BeyondDevice(_)) && !dev.same(&Device::cpu());
        if matches!(outcome, Outcome::Pass) || excused {
            passed.push(name.clone());
        }
        println!("| {name} | {outcome} | {secs:.2} s |");
    }
    assert!(panics.is_empty(), "models panicked:\n{}", panics.join("\n"));
    let missing: Vec<&&str> = EXPECTED_PASS
        .iter()
        .filter(|m| !passed.iter().any(|p| p == *m))
        .collect();
    assert!(
        missing.is_empty(),
        "models expected to pass do not: {missing:?}"
    );
}
