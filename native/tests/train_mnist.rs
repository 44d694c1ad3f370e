//! Training end to end on real MNIST subsets: the loss falls, accuracy beats a floor, the saved
//! model file reproduces the logits without the Rust model, and a damaged checkpoint is an
//! error. (Exact resuming is tested in `train.rs`; the generic learner in `learner.rs`.)

use kiln::core::Device;
use kiln::core::model::Model;
use kiln::core::nn::Forward;
use kiln::data::mnist::{self, Mnist, batch};
use kiln::learn::Learner;
use kiln::learn::report::{JsonLines, Log, LogLine, Outcome};
use kiln::models::{MnistCnn, save_classifier};
use kiln::train::{TrainConfig, learner, loaders, step};
use std::path::Path;

fn mnist() -> Mnist {
    Mnist::load(&mnist::data_dir(None).unwrap()).unwrap()
}

fn config(dir: &Path, epochs: usize, limit: usize) -> TrainConfig {
    TrainConfig {
        epochs,
        batch_size: 64,
        seed: 7,
        limit: Some(limit),
        test_limit: Some(1000),
        checkpoint_dir: dir.join("ckpt"),
        ..TrainConfig::default()
    }
}

/// Trains `cfg` on the CPU, logging to `dir/log.jsonl`.
fn train(data: &Mnist, cfg: &TrainConfig, dir: &Path) -> (Learner<MnistCnn>, Outcome) {
    let dev = Device::cpu();
    let (tr, te) = loaders(data.clone(), cfg).unwrap();
    let mut l = learner(cfg, &tr, &dev)
        .unwrap()
        .reporter(JsonLines::new(dir.join("log.jsonl")));
    let outcome = l.fit(&tr, Some(&te), step(&dev)).unwrap();
    (l, outcome)
}

#[test]
fn two_thousand_images_train_to_a_useful_model() {
    let data = mnist();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 2, 2000);
    let dev = Device::cpu();
    let (tr, _) = loaders(data.clone(), &cfg).unwrap();
    let mut untrained = learner(&cfg, &tr, &dev).unwrap();
    let untrained = kiln::train::evaluate(&mut untrained.model, &data.test, Some(1000)).unwrap();
    let (t, outcome) = train(&data, &cfg, dir.path());
    assert_eq!(outcome, Outcome::Finished);
    let h = &t.history;
    assert_eq!(h.len(), 2);
    let (l0, l1) = (
        h[0].get("train_loss").unwrap(),
        h[1].get("train_loss").unwrap(),
    );
    assert!(l0 < 2.3 && l1 < l0, "{h:?}");
    let acc = h[1].get("test_acc").unwrap();
    assert!(acc > 0.85, "{h:?} (untrained {untrained})");
    assert!(untrained < 0.3, "untrained accuracy {untrained}");
    // The learner's test accuracy is the same figure as evaluating the model directly.
    let mut model = t.model;
    let direct = kiln::train::evaluate(&mut model, &data.test, Some(1000)).unwrap();
    assert!((direct - acc).abs() < 1e-12, "{direct} vs {acc}");
    // The log holds the epoch lines, after step lines every 16 steps and at each epoch's end
    // (2,000 images: 32 steps an epoch).
    let log = Log::read(&dir.path().join("log.jsonl")).unwrap();
    assert_eq!(&log.epochs, h);
    let steps: Vec<(u64, usize)> = log.steps.iter().map(|s| (s.step, s.epoch)).collect();
    assert_eq!(steps, [(16, 1), (32, 1), (48, 2), (64, 2)]);
    let text = std::fs::read_to_string(dir.path().join("log.jsonl")).unwrap();
    let last = LogLine::parse(text.lines().last().unwrap()).unwrap();
    assert!(matches!(last, LogLine::Epoch(_)));
}

#[test]
fn saved_model_file_runs_without_the_rust_model() {
    let data = mnist();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 1, 256);
    let dev = Device::cpu();
    let (mut t, _) = train(&data, &cfg, dir.path());
    let path = dir.path().join("model.safetensors");
    save_classifier(&mut t.model, &path, &Default::default()).unwrap();
    let loaded = Model::load(&std::fs::read(&path).unwrap(), &dev).unwrap();
    // A batch size other than the traced one, odd on purpose.
    let idx: Vec<usize> = (0..37).map(|i| i * 13).collect();
    let (x, _) = batch(&data.test, &idx, &dev).unwrap();
    let a = t.model.forward(&x).unwrap().to_vec::<f32>().unwrap();
    let b = loaded.forward(&x).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(a.len(), 37 * 10);
    assert_eq!(a, b);
}

#[test]
fn a_damaged_checkpoint_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.safetensors");
    std::fs::write(&path, b"\x10\0\0\0\0\0\0\0{\"a\":").unwrap();
    let cfg = config(dir.path(), 1, 10);
    let (tr, _) = loaders(mnist(), &cfg).unwrap();
    let mut l = learner(&cfg, &tr, &Device::cpu()).unwrap();
    let e = l.resume(&path).err().unwrap();
    assert!(e.to_string().contains("bad.safetensors"), "{e}");
    let empty = dir.path().join("none");
    std::fs::create_dir(&empty).unwrap();
    let e = l.resume(&empty).err().unwrap().to_string();
    assert!(
        e.contains("expected a step-<N>.safetensors checkpoint"),
        "{e}"
    );
}
