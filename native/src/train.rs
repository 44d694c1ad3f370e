//! `kiln train mnist`: the MNIST CNN trained by the generic [`Learner`] — seeded shuffled
//! batches, optionally augmented ([`TrainConfig::augment`]), cross-entropy, Adam on a cosine
//! schedule, the test set evaluated after each epoch, checkpoints after each epoch (and on
//! Ctrl-C) from which `--resume` continues exactly. The log format is
//! [`learn::report`](crate::learn::report)'s, with the test set as the validation set
//! (`test_acc`).

use crate::core::autodiff::no_grad;
use crate::core::nn::{Forward, Init, Module, loss};
use crate::core::optim::{Adam, Constant, Cosine};
use crate::core::{Device, Result, Tensor};
use crate::data::augment::Augment;
use crate::data::loader::DataLoader;
use crate::data::mnist::{DigitBatch, Digits, Mnist, Split, batch};
use crate::learn::{Learner, LearnerConfig, Output};
use crate::models::MnistCnn;
use std::path::PathBuf;

/// Images per forward pass when evaluating.
const EVAL_BATCH: usize = 1000;

/// How to train (the `kiln train mnist` options).
#[derive(Clone, Debug)]
pub struct TrainConfig {
    /// Passes over the training set.
    pub epochs: usize,
    /// Images per step.
    pub batch_size: usize,
    /// Adam's learning rate (the peak of the cosine schedule).
    pub lr: f64,
    /// Anneal the learning rate from `lr` to 0 along a cosine over all steps of all epochs
    /// (worth about 0.2% of MNIST test accuracy at 3 epochs); constant when false.
    pub cosine: bool,
    /// Seeds the initial weights, the shuffles, augmentation and dropout.
    pub seed: u64,
    /// Train on the first `limit` training images only.
    pub limit: Option<usize>,
    /// Evaluate on the first `test_limit` test images only.
    pub test_limit: Option<usize>,
    /// Use PyTorch's example dropout (0.25, 0.5).
    pub dropout: bool,
    /// Where checkpoints are written (`step-<N>.safetensors`), the last `keep_last` kept.
    pub checkpoint_dir: PathBuf,
    /// Checkpoints kept.
    pub keep_last: usize,
    /// Also checkpoint every this many steps (besides each epoch's end and a stop).
    pub checkpoint_every: Option<u64>,
    /// Stop after this many steps in total (benchmarks and tests), checkpointing as on Ctrl-C.
    pub max_steps: Option<u64>,
    /// How training images are augmented (none by default). Each image's draws come from
    /// (`seed`, epoch, image index), so reruns and `--resume` with the same setting see the
    /// same images. Evaluation images are never augmented.
    pub augment: Augment,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            epochs: 3,
            batch_size: 64,
            lr: 1e-3,
            cosine: true,
            seed: 0,
            limit: None,
            test_limit: None,
            dropout: false,
            checkpoint_dir: PathBuf::from("model.ckpt"),
            keep_last: 3,
            checkpoint_every: None,
            max_steps: None,
            augment: Augment::none(),
        }
    }
}

/// The training and test loaders of `data` for `cfg`.
pub fn loaders(data: Mnist, cfg: &TrainConfig) -> Result<(DataLoader<Digits>, DataLoader<Digits>)> {
    cfg.augment.check()?;
    let train = Digits {
        split: data.train.truncated(cfg.limit.unwrap_or(usize::MAX)),
        augment: cfg.augment,
        seed: cfg.seed,
    };
    let test = Digits::plain(data.test.truncated(cfg.test_limit.unwrap_or(usize::MAX)));
    Ok((
        DataLoader::new(train, cfg.batch_size).shuffle(cfg.seed),
        DataLoader::new(test, EVAL_BATCH),
    ))
}

/// A fresh model, Adam and its schedule for `cfg` on `device`, training on `train`
/// (reporters are the caller's to add).
pub fn learner(
    cfg: &TrainConfig,
    train: &DataLoader<Digits>,
    device: &Device,
) -> Result<Learner<MnistCnn>> {
    let mut model = MnistCnn::new(&mut Init::new(device, cfg.seed))?;
    if cfg.dropout {
        model = model.with_dropout(cfg.seed)?;
    }
    let config = LearnerConfig {
        epochs: cfg.epochs,
        max_steps: cfg.max_steps,
        checkpoint_dir: Some(cfg.checkpoint_dir.clone()),
        keep_last: cfg.keep_last,
        checkpoint_every: cfg.checkpoint_every,
        valid_name: "test".into(),
        ..LearnerConfig::default()
    };
    // Spans every step of every epoch (not `max_steps`), so a run stopped early and resumed
    // follows the same curve.
    let total = config.steps_per_epoch(train) as usize * cfg.epochs;
    let learner = Learner::new(model, Adam::new(cfg.lr), config);
    Ok(if cfg.cosine {
        learner.schedule(Cosine::new(cfg.lr, 0.0, total))
    } else {
        learner.schedule(Constant(cfg.lr))
    })
}

/// The MNIST step: forward, cross-entropy and accuracy on one batch uploaded to `device`.
pub fn step(device: &Device) -> impl FnMut(&mut MnistCnn, &DigitBatch) -> Result<Output> + use<> {
    let device = device.clone();
    move |model, b| {
        let (x, y) = b.to_device(&device)?;
        let logits = model.forward(&x)?;
        let loss = loss::cross_entropy(&logits, &y, 0.0)?;
        Output::classification(loss, &logits, &y)
    }
}

/// Index of the largest value (the first of equal ones; 0 for an empty slice).
pub fn argmax(row: &[f32]) -> usize {
    row.iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |best, (i, &x)| {
            if x > best.1 { (i, x) } else { best }
        })
        .0
}

/// Index of the largest of each row of `[N, C]` logits, read back to the host.
pub fn argmax_rows(logits: &Tensor) -> Result<Vec<usize>> {
    let c = logits.dim(-1)?;
    Ok(logits
        .to_vec::<f32>()?
        .chunks(c.max(1))
        .map(argmax)
        .collect())
}

/// Accuracy of `forward` on the first `limit` images of `split` (all when `None`), without
/// recording gradients.
pub fn accuracy_with(
    split: &Split,
    limit: Option<usize>,
    device: &Device,
    mut forward: impl FnMut(&Tensor) -> Result<Tensor>,
) -> Result<f64> {
    let n = limit.unwrap_or(split.len()).min(split.len());
    let mut correct = 0;
    for start in (0..n).step_by(EVAL_BATCH) {
        let idx: Vec<usize> = (start..(start + EVAL_BATCH).min(n)).collect();
        let (x, _) = batch(split, &idx, device)?;
        let logits = no_grad(|| forward(&x))?;
        let pred = argmax_rows(&logits)?;
        correct += pred
            .iter()
            .zip(&idx)
            .filter(|(p, i)| split.labels.get(**i).is_some_and(|l| **p == *l as usize))
            .count();
    }
    Ok(correct as f64 / n.max(1) as f64)
}

/// Test accuracy of `model` in evaluation mode (restoring training mode afterwards).
pub fn evaluate(model: &mut MnistCnn, split: &Split, limit: Option<usize>) -> Result<f64> {
    model.set_training(false);
    let device = model.conv1.weight.tensor().device().clone();
    let acc = accuracy_with(split, limit, &device, |x| model.forward(x));
    model.set_training(true);
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::mnist;
    use crate::learn::report::{JsonLines, Log, Outcome};
    use std::path::Path;

    fn mnist() -> Option<Mnist> {
        match mnist::data_dir(None).and_then(|d| Mnist::load(&d)) {
            Ok(m) => Some(m),
            Err(e) => {
                eprintln!("skipped: no MNIST data ({e})");
                None
            }
        }
    }

    fn config(dir: &Path) -> TrainConfig {
        // 160 images in batches of 8: 20 steps an epoch.
        TrainConfig {
            epochs: 2,
            batch_size: 8,
            seed: 5,
            limit: Some(160),
            test_limit: Some(100),
            checkpoint_dir: dir.join("ckpt"),
            augment: Augment::digits(),
            dropout: true,
            ..TrainConfig::default()
        }
    }

    /// Trains (resuming from the config's checkpoints when `resume`), logging to `log`.
    fn train(
        data: &Mnist,
        cfg: &TrainConfig,
        log: &Path,
        resume: bool,
    ) -> (Learner<MnistCnn>, Outcome) {
        let (tr, te) = loaders(data.clone(), cfg).unwrap();
        let mut l = learner(cfg, &tr, &Device::cpu())
            .unwrap()
            .reporter(JsonLines::new(log));
        if resume {
            l.resume(&cfg.checkpoint_dir).unwrap();
        }
        let outcome = l.fit(&tr, Some(&te), step(&Device::cpu())).unwrap();
        (l, outcome)
    }

    fn weights(l: &Learner<MnistCnn>) -> Vec<Vec<f32>> {
        l.model
            .named_tensors()
            .into_iter()
            .map(|(_, t)| t.to_vec::<f32>().unwrap())
            .collect()
    }

    #[test]
    fn augmented_training_logs_steps_and_resumes_bit_for_bit() {
        let Some(data) = mnist() else { return };
        let a_dir = tempfile::tempdir().unwrap();
        let cfg = config(a_dir.path());
        let a_log = a_dir.path().join("log.jsonl");
        let (a, outcome) = train(&data, &cfg, &a_log, false);
        assert_eq!(outcome, Outcome::Finished);

        // Step lines at every 16 steps and at each epoch's end, an evaluation, the epoch line.
        let read = Log::read(&a_log).unwrap();
        let steps: Vec<(u64, usize)> = read.steps.iter().map(|s| (s.step, s.epoch)).collect();
        assert_eq!(steps, [(16, 1), (20, 1), (36, 2), (40, 2)]);
        assert_eq!(
            read.evals.iter().map(|e| e.step).collect::<Vec<_>>(),
            [20, 40]
        );
        assert_eq!(read.epochs, a.history);
        // The step lines of an epoch add up to its figures.
        let (s1, s2, e1) = (&read.steps[0], &read.steps[1], &read.epochs[0]);
        for m in ["loss", "acc"] {
            let mean = (s1.metrics[m] * 128.0 + s2.metrics[m] * 32.0) / 160.0;
            let epoch = e1.get(&format!("train_{m}")).unwrap();
            assert!((mean - epoch).abs() < 1e-6, "{m}: {mean} vs {epoch}");
        }
        assert_eq!(
            e1.get("test_acc"),
            read.evals[0].metrics.get("test_acc").copied()
        );
        assert!(s1.lr > s2.lr && s2.lr > 0.0);

        // Stopped after steps 5, 16 (a read) and 25 (epoch 2), resumed each time: the same
        // weights, and every figure of the log the same to the bit.
        let b_dir = tempfile::tempdir().unwrap();
        let b_log = b_dir.path().join("log.jsonl");
        let b_cfg = config(b_dir.path());
        let mut last = None;
        for (i, max) in [Some(5), Some(16), Some(25), None].into_iter().enumerate() {
            let c = TrainConfig {
                max_steps: max,
                ..b_cfg.clone()
            };
            let (b, outcome) = train(&data, &c, &b_log, i > 0);
            let want = if max.is_some() {
                Outcome::Stopped
            } else {
                Outcome::Finished
            };
            assert_eq!(outcome, want, "run {i}");
            last = Some(b);
        }
        assert_eq!(weights(&a), weights(&last.unwrap()));
        let figures = |log: &Log| {
            let steps: Vec<_> = log
                .steps
                .iter()
                .map(|s| (s.step, s.epoch, s.metrics.clone(), s.lr))
                .collect();
            let epochs: Vec<_> = log
                .epochs
                .iter()
                .map(|e| (e.epoch, e.metrics.clone()))
                .collect();
            (steps, log.evals.clone(), epochs)
        };
        assert_eq!(figures(&read), figures(&Log::read(&b_log).unwrap()));
        // Three checkpoints are kept, the newest the end of the run.
        let kept: Vec<u64> = crate::learn::checkpoints(&b_cfg.checkpoint_dir)
            .unwrap()
            .into_iter()
            .map(|(s, _)| s)
            .collect();
        assert_eq!(kept, [20, 25, 40]);

        // Augmentation changes what is learnt.
        let c_dir = tempfile::tempdir().unwrap();
        let c_cfg = TrainConfig {
            augment: Augment::none(),
            epochs: 1,
            ..config(c_dir.path())
        };
        let (c, _) = train(&data, &c_cfg, &c_dir.path().join("log.jsonl"), false);
        assert_ne!(
            c.history[0].get("train_loss"),
            a.history[0].get("train_loss")
        );
    }
}
