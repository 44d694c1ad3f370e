//! The generic learner on models written here: a user's MLP trains on real MNIST images on the
//! CPU and on wgpu, gradient accumulation equals a bigger batch, clipping bounds the update,
//! early stopping stops, and a training process killed with SIGKILL while it writes
//! checkpoints always leaves a loadable one.

use kiln::core::nn::{Dropout, Forward, Init, Linear, Module, loss};
use kiln::core::optim::Sgd;
use kiln::core::{Device, Result, Tensor};
use kiln::data::loader::{DataLoader, Dataset};
use kiln::data::mnist::{self, DigitBatch, Digits, Mnist};
use kiln::learn::report::Outcome;
use kiln::learn::{EarlyStop, Learner, LearnerConfig, Output, checkpoints, latest_checkpoint};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A user's model: 784 -> 64 -> 10 with dropout.
#[derive(kiln::core::nn::Module)]
struct Mlp {
    fc1: Linear,
    drop: Dropout,
    fc2: Linear,
}

impl Mlp {
    fn new(device: &Device, seed: u64) -> Result<Mlp> {
        let mut init = Init::new(device, seed);
        Ok(Mlp {
            fc1: Linear::new(&mut init, 784, 64)?,
            drop: Dropout::new(0.1, seed)?,
            fc2: Linear::new(&mut init, 64, 10)?,
        })
    }
}

impl Forward for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = x.flatten(1, -1)?;
        self.fc2
            .forward(&self.drop.forward(&self.fc1.forward(&x)?.relu()?)?)
    }
}

fn mlp_step(device: &Device) -> impl FnMut(&mut Mlp, &DigitBatch) -> Result<Output> + use<> {
    let device = device.clone();
    move |model, b| {
        let (x, y) = b.to_device(&device)?;
        let logits = model.forward(&x)?;
        Output::classification(loss::cross_entropy(&logits, &y, 0.0)?, &logits, &y)
    }
}

fn mnist() -> Option<Mnist> {
    match mnist::data_dir(None).and_then(|d| Mnist::load(&d)) {
        Ok(m) => Some(m),
        Err(e) => {
            eprintln!("skipped: no MNIST data ({e})");
            None
        }
    }
}

/// Trains the MLP for 5 epochs on 1,200 training images; returns the last epoch's train loss
/// and held-out accuracy (on 500 test images).
fn train_mlp(data: &Mnist, device: &Device) -> (f64, f64) {
    let train = DataLoader::new(Digits::plain(data.train.clone().truncated(1200)), 50).shuffle(2);
    let test = DataLoader::new(Digits::plain(data.test.clone().truncated(500)), 250);
    let config = LearnerConfig {
        epochs: 5,
        valid_name: "test".into(),
        ..LearnerConfig::default()
    };
    let mut l = Learner::new(
        Mlp::new(device, 1).unwrap(),
        Sgd::new(0.1).momentum(0.9, false),
        config,
    );
    let outcome = l.fit(&train, Some(&test), mlp_step(device)).unwrap();
    assert_eq!(outcome, Outcome::Finished);
    let last = l.history.last().unwrap();
    (
        last.get("train_loss").unwrap(),
        last.get("test_acc").unwrap(),
    )
}

#[test]
fn a_users_mlp_trains_on_the_cpu_and_on_wgpu() {
    let Some(data) = mnist() else { return };
    let (loss, acc) = train_mlp(&data, &Device::cpu());
    assert!(loss < 0.4 && acc > 0.8, "cpu: loss {loss}, acc {acc}");
    match kiln::device::select("wgpu") {
        Ok(gpu) => {
            let (gloss, gacc) = train_mlp(&data, &gpu);
            assert!(gloss < 0.4 && gacc > 0.8, "wgpu: loss {gloss}, acc {gacc}");
            // Same seed, same data: the same run up to f32 reordering.
            assert!((gloss - loss).abs() < 0.02, "wgpu {gloss} vs cpu {loss}");
        }
        Err(e) => eprintln!("wgpu part SKIPPED, no adapter: {e}"),
    }
}

/// `y = x . w + 0.5` with noise, 64 examples of 5 features (deterministic).
struct Regression;
impl Dataset for Regression {
    type Batch = (Vec<f32>, Vec<f32>);
    fn len(&self) -> usize {
        64
    }
    fn batch(&self, idx: &[usize], _: u64) -> Result<Self::Batch> {
        let w = [0.3f32, -1.2, 2.0, 0.7, -0.4];
        let mut x = Vec::new();
        let mut y = Vec::new();
        for &i in idx {
            let row: Vec<f32> = (0..5)
                .map(|j| ((i * 7 + j * 13) % 17) as f32 / 8.5 - 1.0)
                .collect();
            let noise = ((i * 31) % 11) as f32 / 50.0 - 0.1;
            y.push(row.iter().zip(w).map(|(a, b)| a * b).sum::<f32>() + 0.5 + noise);
            x.extend(row);
        }
        Ok((x, y))
    }
}

fn regression_step(
    device: &Device,
) -> impl FnMut(&mut Linear, &(Vec<f32>, Vec<f32>)) -> Result<Output> + use<> {
    let device = device.clone();
    move |model, (x, y)| {
        let n = y.len();
        let x = Tensor::from_vec(x.clone(), [n, 5], &device)?;
        let y = Tensor::from_vec(y.clone(), [n, 1], &device)?;
        Ok(Output::new(loss::mse(&model.forward(&x)?, &y)?, n))
    }
}

fn linear_learner(config: LearnerConfig, lr: f64) -> Learner<Linear> {
    let model = Linear::new(&mut Init::new(&Device::cpu(), 4), 5, 1).unwrap();
    Learner::new(model, Sgd::new(lr), config)
}

fn params(model: &impl Module) -> Vec<f32> {
    model
        .named_tensors()
        .into_iter()
        .flat_map(|(_, t)| t.to_vec::<f32>().unwrap())
        .collect()
}

#[test]
fn accumulating_two_batches_equals_one_batch_twice_the_size() {
    let dev = Device::cpu();
    let run = |batch: usize, accumulate: usize| {
        let config = LearnerConfig {
            epochs: 2,
            accumulate,
            ..LearnerConfig::default()
        };
        let mut l = linear_learner(config, 0.05);
        let loader = DataLoader::new(Regression, batch).shuffle(3);
        l.fit(&loader, None, regression_step(&dev)).unwrap();
        (params(&l.model), l.state.step)
    };
    let (big, steps_big) = run(16, 1);
    let (acc, steps_acc) = run(8, 2);
    assert_eq!((steps_big, steps_acc), (8, 8));
    for (a, b) in big.iter().zip(&acc) {
        assert!((a - b).abs() < 1e-5, "{big:?} vs {acc:?}");
    }
    // And it trained: not the initial weights.
    assert_ne!(
        big,
        params(&linear_learner(LearnerConfig::default(), 0.05).model)
    );
}

#[test]
fn clipping_bounds_each_update() {
    let dev = Device::cpu();
    let config = LearnerConfig {
        max_steps: Some(1),
        clip_grad_norm: Some(1e-3),
        ..LearnerConfig::default()
    };
    let mut l = linear_learner(config, 1.0);
    let before = params(&l.model);
    let loader = DataLoader::new(Regression, 64);
    assert_eq!(
        l.fit(&loader, None, regression_step(&dev)).unwrap(),
        Outcome::Stopped
    );
    let after = params(&l.model);
    let moved: f32 = before
        .iter()
        .zip(&after)
        .map(|(a, b)| (a - b).powi(2))
        .sum::<f32>()
        .sqrt();
    assert!(moved > 1e-4 && moved <= 1.001e-3, "update norm {moved}");
}

#[test]
fn early_stopping_stops_after_patience_evaluations() {
    let dev = Device::cpu();
    // A learning rate of 0: the validation loss never improves after the first evaluation.
    let config = LearnerConfig {
        epochs: 10,
        eval_every: Some(2),
        early_stop: Some(EarlyStop {
            metric: "loss".into(),
            patience: 3,
            min_delta: 0.0,
            maximize: false,
        }),
        ..LearnerConfig::default()
    };
    let mut l = linear_learner(config, 0.0);
    let train = DataLoader::new(Regression, 16);
    let valid = DataLoader::new(Regression, 32);
    let outcome = l.fit(&train, Some(&valid), regression_step(&dev)).unwrap();
    assert_eq!(outcome, Outcome::EarlyStopped);
    // Evaluations at steps 2 (best), 4, 6, 8 (third without improvement).
    assert_eq!(l.state.step, 8);
    assert_eq!(l.state.stale, 3);
    let e = linear_learner(
        LearnerConfig {
            early_stop: Some(EarlyStop {
                metric: "acc".into(),
                patience: 1,
                min_delta: 0.0,
                maximize: true,
            }),
            eval_every: Some(1),
            ..LearnerConfig::default()
        },
        0.1,
    )
    .fit(&train, Some(&valid), regression_step(&dev))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("expected the metric valid_acc, found valid_loss"),
        "{e}"
    );
}

#[test]
fn bad_settings_are_errors_naming_them() {
    let dev = Device::cpu();
    let loader = DataLoader::new(Regression, 16);
    for (config, want) in [
        (
            LearnerConfig {
                accumulate: 0,
                ..Default::default()
            },
            "accumulate of at least 1",
        ),
        (
            LearnerConfig {
                keep_last: 0,
                ..Default::default()
            },
            "keep_last of at least 1",
        ),
        (
            LearnerConfig {
                clip_grad_norm: Some(-1.0),
                ..Default::default()
            },
            "positive clip_grad_norm, found -1",
        ),
        (
            LearnerConfig {
                early_stop: Some(EarlyStop {
                    metric: "loss".into(),
                    patience: 1,
                    min_delta: 0.0,
                    maximize: false,
                }),
                ..Default::default()
            },
            "validation loader for early stopping",
        ),
    ] {
        let e = linear_learner(config, 0.1)
            .fit(&loader, None, regression_step(&dev))
            .unwrap_err();
        assert!(e.to_string().contains(want), "{e} (wanted {want})");
    }
    // A step returning a loss that is not a scalar.
    let e = linear_learner(LearnerConfig::default(), 0.1)
        .fit(
            &loader,
            None,
            |m: &mut Linear, (x, _): &(Vec<f32>, Vec<f32>)| {
                let x = Tensor::from_vec(x.clone(), [x.len() / 5, 5], &dev)?;
                Ok(Output::new(m.forward(&x)?, 16))
            },
        )
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("loss to be a scalar, found shape [16, 1]"),
        "{e}"
    );
}

/// Starts `kiln train mnist` writing a checkpoint every step into `dir`.
fn spawn_training(dir: &Path, resume: bool) -> std::process::Child {
    let mut args = vec![
        "train",
        "mnist",
        "--limit",
        "512",
        "--batch-size",
        "8",
        "--epochs",
        "100",
        "--quiet",
        "--checkpoint-every",
        "1",
        "--keep",
        "2",
    ];
    let ckpt = dir.join("ckpt").to_string_lossy().into_owned();
    let out = dir.join("m.safetensors").to_string_lossy().into_owned();
    args.extend(["--checkpoint-dir", &ckpt, "--out", &out]);
    if resume {
        args.extend(["--resume", &ckpt]);
    }
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn sigkill_while_checkpointing_leaves_a_loadable_checkpoint() {
    if mnist().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ckpt");
    let mut last_step = 0;
    // Kill at times spread over the write cycle; each time the newest checkpoint loads and
    // the next run resumes from it, further along.
    for (round, ms) in [1500u64, 1730, 1910, 2270].into_iter().enumerate() {
        let mut child = spawn_training(dir.path(), round > 0);
        // Wait for this run's first new checkpoint, then a little longer.
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        while checkpoints(&ckpt)
            .unwrap()
            .last()
            .is_none_or(|(s, _)| *s <= last_step)
        {
            assert!(
                std::time::Instant::now() < deadline,
                "no checkpoint after 120 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(ms % 700));
        child.kill().unwrap(); // SIGKILL on Unix
        child.wait().unwrap();
        let path = latest_checkpoint(&ckpt).unwrap().unwrap();
        let (tr, _) = kiln::train::loaders(
            mnist().unwrap(),
            &kiln::train::TrainConfig {
                limit: Some(512),
                batch_size: 8,
                ..Default::default()
            },
        )
        .unwrap();
        let cfg = kiln::train::TrainConfig {
            checkpoint_dir: ckpt.clone(),
            ..Default::default()
        };
        let mut l = kiln::train::learner(&cfg, &tr, &Device::cpu()).unwrap();
        l.resume(&ckpt)
            .unwrap_or_else(|e| panic!("round {round}: {} unreadable: {e}", path.display()));
        assert!(
            l.state.step > last_step,
            "round {round}: step {} after {last_step}",
            l.state.step
        );
        last_step = l.state.step;
        assert!(
            checkpoints(&ckpt).unwrap().len() <= 3,
            "keep 2 (+1 being replaced)"
        );
    }
}
