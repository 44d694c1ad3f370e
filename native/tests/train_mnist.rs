//! Training end to end on real MNIST subsets: the loss falls, accuracy beats a floor, the saved
//! model file reproduces the logits without the Rust model, and resuming is exact.

use kiln::core::Device;
use kiln::core::model::Model;
use kiln::core::nn::{Forward, Module};
use kiln::core::optim::Optimizer;
use kiln::data::mnist::{self, Mnist};
use kiln::models::save_classifier;
use kiln::train::{Log, LogLine, Outcome, TrainConfig, Trainer, batch};
use std::path::Path;
use std::sync::atomic::AtomicBool;

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
        // Dropout slows learning on a 2,000-image subset; the resume test turns it on.
        dropout: false,
        checkpoint: dir.join("ckpt.safetensors"),
        log: Some(dir.join("log.jsonl")),
        progress: false,
        ..TrainConfig::default()
    }
}

fn weights(t: &Trainer) -> Vec<(String, Vec<f32>)> {
    t.model
        .named_tensors()
        .into_iter()
        .map(|(n, t)| (n, t.to_vec::<f32>().unwrap()))
        .collect()
}

fn optim(t: &Trainer) -> (String, Vec<(String, Vec<f32>)>) {
    let s = t.optimizer.state();
    let tensors = s
        .tensors
        .iter()
        .map(|(n, t)| (n.clone(), t.to_vec::<f32>().unwrap()))
        .collect();
    (s.config, tensors)
}

#[test]
fn two_thousand_images_train_to_a_useful_model() {
    let data = mnist();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 2, 2000);
    let dev = Device::cpu();
    let mut t = Trainer::new(&cfg, &dev).unwrap();
    let untrained = kiln::train::evaluate(&mut t.model, &data.test, Some(1000)).unwrap();
    let stop = AtomicBool::new(false);
    assert_eq!(t.run(&data, &cfg, &stop).unwrap(), Outcome::Finished);
    let h = &t.history;
    assert_eq!(h.len(), 2);
    assert!(
        h[0].train_loss < 2.3 && h[1].train_loss < h[0].train_loss,
        "{h:?}"
    );
    assert!(h[1].test_acc > 0.85, "{h:?} (untrained {untrained})");
    assert!(untrained < 0.3, "untrained accuracy {untrained}");
    // The log holds one JSON line per epoch, with the same figures, after step lines every 16
    // steps and at each epoch's end (2,000 images: 32 steps an epoch).
    let log = Log::read(&dir.path().join("log.jsonl")).unwrap();
    assert_eq!(&log.epochs, h);
    let steps: Vec<(u64, usize)> = log.steps.iter().map(|s| (s.step, s.epoch)).collect();
    assert_eq!(steps, [(16, 1), (32, 1), (48, 2), (64, 2)]);
    let text = std::fs::read_to_string(dir.path().join("log.jsonl")).unwrap();
    let last: LogLine = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert!(matches!(last, LogLine::Epoch(_)));
}

#[test]
fn saved_model_file_runs_without_the_rust_model() {
    let data = mnist();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), 1, 256);
    let dev = Device::cpu();
    let mut t = Trainer::new(&cfg, &dev).unwrap();
    t.run(&data, &cfg, &AtomicBool::new(false)).unwrap();
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
fn resuming_after_interruptions_ends_with_the_same_weights() {
    let data = mnist();
    let dev = Device::cpu();
    let stop = AtomicBool::new(false);
    // Uninterrupted: 2 epochs over 320 images (5 steps each), with dropout so its mask counters
    // must be restored too.
    let a_dir = tempfile::tempdir().unwrap();
    let mut cfg = config(a_dir.path(), 2, 320);
    cfg.dropout = true;
    cfg.test_limit = Some(200);
    let mut a = Trainer::new(&cfg, &dev).unwrap();
    assert_eq!(a.run(&data, &cfg, &stop).unwrap(), Outcome::Finished);

    // Interrupted mid-epoch 1 (as Ctrl-C does), resumed, interrupted again just after epoch 1's
    // checkpoint, resumed to the end. Every run is configured for the same 2 epochs, as a user
    // resumes, so the learning-rate schedule is the same curve.
    let b_dir = tempfile::tempdir().unwrap();
    let b_cfg = TrainConfig {
        checkpoint: b_dir.path().join("ckpt.safetensors"),
        log: Some(b_dir.path().join("log.jsonl")),
        ..cfg.clone()
    };
    let ckpt = b_cfg.checkpoint.clone();
    let stop_after = |steps: u64| TrainConfig {
        max_steps: Some(steps),
        ..b_cfg.clone()
    };
    let first = stop_after(3);
    let mut b = Trainer::new(&first, &dev).unwrap();
    assert_eq!(b.run(&data, &first, &stop).unwrap(), Outcome::Stopped);
    assert_eq!((b.progress.epoch, b.progress.step), (0, 3));
    drop(b);
    let second = stop_after(6);
    let mut b = Trainer::resume(&ckpt, &second, &dev).unwrap();
    assert_eq!(b.run(&data, &second, &stop).unwrap(), Outcome::Stopped);
    assert_eq!((b.progress.epoch, b.progress.step), (1, 1));
    drop(b);
    let mut b = Trainer::resume(&ckpt, &b_cfg, &dev).unwrap();
    assert_eq!(b.progress.epoch, 1);
    assert_eq!(b.run(&data, &b_cfg, &stop).unwrap(), Outcome::Finished);

    assert_eq!(weights(&a), weights(&b));
    assert_eq!(optim(&a), optim(&b));
    let log_a = std::fs::read_to_string(a_dir.path().join("log.jsonl")).unwrap();
    let log_b = std::fs::read_to_string(b_dir.path().join("log.jsonl")).unwrap();
    let strip = |s: &str| -> Vec<(usize, String, String, String)> {
        s.lines()
            .filter_map(|l| match serde_json::from_str(l).unwrap() {
                LogLine::Epoch(m) => Some(m),
                LogLine::Step(_) => None,
            })
            .map(|m| {
                (
                    m.epoch,
                    format!("{:.6}", m.train_loss),
                    format!("{:.6}", m.train_acc),
                    format!("{:.6}", m.test_acc),
                )
            })
            .collect()
    };
    assert_eq!(strip(&log_a), strip(&log_b));
}

#[test]
fn a_damaged_checkpoint_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.safetensors");
    std::fs::write(&path, b"\x10\0\0\0\0\0\0\0{\"a\":").unwrap();
    let cfg = config(dir.path(), 1, 10);
    let e = Trainer::resume(&path, &cfg, &Device::cpu()).err().unwrap();
    assert!(e.to_string().contains("bad.safetensors"), "{e}");
}
