//! `kiln import` and `kiln run` on the real MNIST ONNX models of the conformance data: the ONNX
//! file and the kiln file converted from it both reproduce the stored outputs, and bad input is
//! an error naming what was expected.

use kiln::core::{Device, Tensor, TensorData};
use kiln::onnx::{TensorElems, read_tensor, tensor_value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .output()
        .unwrap()
}

/// `shared/conformance` in a parent directory, or `None` after a notice.
fn suites() -> Option<PathBuf> {
    let found = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|a| a.join("shared/conformance"))
        .find(|d| d.is_dir());
    if found.is_none() {
        eprintln!("notice: no shared/conformance in a parent directory; skipping");
    }
    found
}

/// A stored float TensorProto as a CPU tensor.
fn stored(path: &Path) -> Tensor {
    let v = tensor_value(&read_tensor(path).unwrap()).unwrap();
    let TensorElems::F32(data) = v.data else {
        panic!("{}: not float", path.display())
    };
    Tensor::from_data(&TensorData::new(data, v.dims).unwrap(), &Device::cpu()).unwrap()
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.dims(), b.dims());
    let (a, b) = (
        a.to_data().unwrap().to_f64_vec(),
        b.to_data().unwrap().to_f64_vec(),
    );
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

#[test]
fn import_and_run_mnist_onnx_models() {
    let Some(root) = suites() else { return };
    let dir = tempfile::tempdir().unwrap();
    let path = |n: &str| dir.path().join(n).to_string_lossy().to_string();
    for name in ["mnist-7", "mnist-8"] {
        let case = root.join("models/mnist").join(name);
        let onnx = case.join("model.onnx").to_string_lossy().to_string();
        let kiln_file = path(&format!("{name}.safetensors"));
        let out = kiln(&["import", &onnx, "-o", &kiln_file]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.contains("matches the ONNX model"), "{said}");
        for set in ["test_data_set_0", "test_data_set_1"] {
            let x = stored(&case.join(set).join("input_0.pb"));
            let want = stored(&case.join(set).join("output_0.pb"));
            std::fs::write(path("x.npy"), kiln::npy::encode(&x).unwrap()).unwrap();
            for model in [&onnx, &kiln_file] {
                let out = kiln(&[
                    "run",
                    model,
                    "--input",
                    &path("x.npy"),
                    "--output",
                    &path("y.npy"),
                ]);
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let y = std::fs::read(path("y.npy")).unwrap();
                let y = kiln::npy::decode(&y, "y.npy", &Device::cpu()).unwrap();
                // logits of size ~1e2-1e3: the stored outputs' 1e-3 relative tolerance
                let scale = want
                    .to_data()
                    .unwrap()
                    .to_f64_vec()
                    .iter()
                    .fold(1.0f64, |m, v| m.max(v.abs()));
                let diff = max_abs_diff(&y, &want);
                assert!(
                    diff <= 1e-3 * scale,
                    "{name} {set} via {model}: off by {diff} (scale {scale})"
                );
            }
        }
    }
}

#[test]
fn bad_onnx_input_is_an_error() {
    let Some(root) = suites() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir
        .path()
        .join("m.safetensors")
        .to_string_lossy()
        .to_string();
    // two inputs: conversion needs one
    let add = root
        .join("onnx-node/test_add/model.onnx")
        .to_string_lossy()
        .to_string();
    let out = kiln(&["import", &add, "-o", &out_file]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("one input") && err.contains("2"),
        "{err}"
    );
    // not an ONNX file
    let junk = dir.path().join("junk.onnx");
    std::fs::write(&junk, b"\x0a\x05hello").unwrap();
    let out = kiln(&["import", &junk.to_string_lossy(), "-o", &out_file]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("not an ONNX model"),
        "{err}"
    );
    assert!(
        !Path::new(&out_file).exists(),
        "no file is written on failure"
    );
    // a model input of the wrong shape
    let mnist = root
        .join("models/mnist/mnist-8/model.onnx")
        .to_string_lossy()
        .to_string();
    let x = Tensor::from_slice(&[0.5f32; 28 * 28], [28, 28], &Device::cpu()).unwrap();
    let xp = dir.path().join("x.npy");
    std::fs::write(&xp, kiln::npy::encode(&x).unwrap()).unwrap();
    let yp = dir.path().join("y.npy").to_string_lossy().to_string();
    let out = kiln(&[
        "run",
        &mnist,
        "--input",
        &xp.to_string_lossy(),
        "--output",
        &yp,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("[1, 1, 28, 28]") && err.contains("[28, 28]"),
        "{err}"
    );
}
