//! The `kiln` command end to end: train a small model, evaluate it (model file and bare
//! state_dict), predict a PNG, and report bad input as errors.

use kiln::core::Device;
use kiln::core::model::save_safetensors;
use kiln::core::nn::{Init, Module};
use kiln::data::mnist::{self, Mnist};
use kiln::models::{Classifier, MnistCnn};
use std::path::Path;
use std::process::{Command, Output};

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    assert!(
        o.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn accuracy_line(o: &Output) -> f64 {
    let out = stdout(o);
    let last = out.lines().last().unwrap();
    let v = last
        .strip_prefix("accuracy: ")
        .unwrap_or_else(|| panic!("last line: {last}"));
    assert_eq!(v.len(), 6, "{last}");
    v.parse().unwrap()
}

/// Writes test image `i` as an RGB PNG scaled to 56x56, dark ink on white (as a drawing would be).
fn write_png(data: &Mnist, i: usize, path: &Path) {
    let img = data.test.image(i).unwrap();
    let mut rgb = Vec::new();
    for y in 0..56 {
        for x in 0..56 {
            let v = 255 - img[(y / 2) * 28 + x / 2];
            rgb.extend([v, v, v]);
        }
    }
    let f = std::fs::File::create(path).unwrap();
    let mut enc = png::Encoder::new(f, 56, 56);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.write_header().unwrap().write_image_data(&rgb).unwrap();
}

#[test]
fn train_eval_predict() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_string_lossy().into_owned();
    let (model, log) = (p("m.safetensors"), p("log.jsonl"));
    let o = kiln(&[
        "train", "mnist", "--limit", "640", "--epochs", "1", "--quiet", "--out", &model, "--log",
        &log,
    ]);
    let out = stdout(&o);
    assert!(out.contains("test accuracy: 0."), "{out}");
    // 640 images, 10 steps: one step line (at the epoch's end), the evaluation, the epoch line.
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines[0].starts_with("{\"step\":10,") && lines[2].contains("\"test_acc\""),
        "{lines:?}"
    );
    assert!(Path::new(&p("m.ckpt/step-000000010.safetensors")).is_file());

    let graph_acc = accuracy_line(&kiln(&["eval", &model]));
    assert!(graph_acc > 0.6, "{graph_acc}");

    // The same weights as a bare state_dict, loaded by name into the Rust architecture.
    let dev = Device::cpu();
    let trained = match Classifier::load(Path::new(&model), None, &dev).unwrap() {
        Classifier::Graph(m) => m,
        other => panic!("{other:?}"),
    };
    let mut cnn = MnistCnn::new(&mut Init::new(&dev, 0)).unwrap();
    let names: Vec<String> = cnn.named_tensors().into_iter().map(|(n, _)| n).collect();
    let state: Vec<_> = names
        .iter()
        .map(|n| (n.clone(), trained.tensors()[n].clone()))
        .collect();
    std::fs::write(
        p("state.safetensors"),
        save_safetensors(&state, &Default::default()).unwrap(),
    )
    .unwrap();
    let arch_acc = accuracy_line(&kiln(&[
        "eval",
        &p("state.safetensors"),
        "--arch",
        "mnist-cnn",
    ]));
    assert_eq!(graph_acc, arch_acc);
    cnn.load_named(
        &trained
            .tensors()
            .iter()
            .filter(|(n, _)| names.contains(n))
            .map(|(n, t)| (n.clone(), t.clone()))
            .collect(),
    )
    .unwrap();

    // Predict a PNG: the JSON agrees with the library on the same preprocessed input.
    let data = Mnist::load(&mnist::data_dir(None).unwrap()).unwrap();
    let png = p("digit.png");
    write_png(&data, 3, Path::new(&png));
    let json: serde_json::Value =
        serde_json::from_str(stdout(&kiln(&["predict", &model, &png, "--json"])).trim()).unwrap();
    let probs: Vec<f64> = json["probabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(probs.len(), 10);
    assert!((probs.iter().sum::<f64>() - 1.0).abs() < 1e-4);
    let pixels = kiln::data::image::mnist_input_from_png(Path::new(&png)).unwrap();
    // The 2x upscale then area downscale returns the original pixels.
    let orig: Vec<f32> = data
        .test
        .image(3)
        .unwrap()
        .iter()
        .map(|&v| v as f32)
        .collect();
    assert_eq!(pixels, orig);
    let lib = Classifier::load(Path::new(&model), None, &dev)
        .unwrap()
        .predict(&pixels)
        .unwrap();
    assert_eq!(json["digit"].as_u64().unwrap() as usize, lib.digit);
    let logits: Vec<f32> = json["logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    assert_eq!(logits, lib.logits);
    let text = stdout(&kiln(&["predict", &model, &png]));
    assert_eq!(
        text.lines().last().unwrap(),
        format!("digit: {}", lib.digit)
    );
}

/// `--gpus 2` on the CPU: two replicas on halves of the data, one log, checkpoint and model.
#[test]
fn data_parallel_replicas_write_one_model() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_string_lossy().into_owned();
    let (model, log) = (p("m.safetensors"), p("log.jsonl"));
    let o = kiln(&[
        "train",
        "mnist",
        "--device",
        "cpu",
        "--gpus",
        "2",
        "--limit",
        "640",
        "--epochs",
        "1",
        "--batch-size",
        "32",
        "--quiet",
        "--out",
        &model,
        "--log",
        &log,
    ]);
    let out = stdout(&o);
    assert!(out.contains("test accuracy: 0."), "{out}");
    // 320 images a replica in batches of 32: 10 steps, 640 images in the figures.
    let read = kiln::learn::report::Log::read(Path::new(&log)).unwrap();
    assert_eq!(read.steps.iter().map(|s| s.step).collect::<Vec<_>>(), [10]);
    assert_eq!(read.epochs.len(), 1);
    let ckpts = kiln::learn::checkpoints(&dir.path().join("m.ckpt")).unwrap();
    assert_eq!(ckpts.iter().map(|c| c.0).collect::<Vec<_>>(), [10]);
    assert!(Path::new(&model).exists());
}

#[test]
fn bad_input_is_reported_not_panicked() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.safetensors");
    std::fs::write(&junk, b"not a model").unwrap();
    let out = dir.path().join("out.kilnprog");
    let cases: [(&[&str], &str); 6] = [
        (&["eval", junk.to_str().unwrap()], "junk.safetensors"),
        (
            &["train", "mnist", "--device", "wgpu", "--gpus", "2"],
            "expected --device cuda",
        ),
        (&["train", "mnist", "--device", "tpu"], "expected one of"),
        (
            &["train", "mnist", "--data", dir.path().to_str().unwrap()],
            "never downloaded",
        ),
        (
            &["predict", junk.to_str().unwrap(), junk.to_str().unwrap()],
            "junk.safetensors",
        ),
        (
            &[
                "compile",
                junk.to_str().unwrap(),
                "-o",
                out.to_str().unwrap(),
                "--batch",
                "1",
            ],
            "junk.safetensors",
        ),
    ];
    for (args, needle) in cases {
        let o = kiln(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?}");
        assert!(
            err.starts_with("error: ") && err.contains(needle),
            "{args:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// `--device rocm` without the `rocm` feature, without ROCm or without an AMD GPU is an error
/// saying which of them is missing.
#[test]
fn rocm_device_names_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.safetensors");
    std::fs::write(&junk, b"not a model").unwrap();
    let junk = junk.to_str().unwrap();
    let o = kiln(&["predict", junk, junk, "--device", "rocm"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    let wanted: &[&str] = if cfg!(feature = "rocm") {
        // (with an AMD GPU the device opens and the junk model is what fails)
        &[
            "no AMD GPU found",
            "could not load libamdhip64.so",
            "junk.safetensors",
        ]
    } else {
        &["no ROCm (HIP) backend; rebuild with `--features rocm`"]
    };
    assert!(
        err.starts_with("error: ") && wanted.iter().any(|w| err.contains(w)),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}
