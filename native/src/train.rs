//! The MNIST training loop: seeded shuffled batches, forward, cross-entropy, backward, Adam; a
//! progress bar; per-epoch metrics as JSON lines; an atomic checkpoint after every epoch (and on
//! Ctrl-C) from which `--resume` continues exactly.

use crate::checkpoint;
use crate::core::autodiff::no_grad;
use crate::core::nn::{Forward, Init, Module, loss};
use crate::core::optim::{Adam, Constant, Cosine, Optimizer, Schedule};
use crate::core::{DType, Device, Error, Result, Tensor};
use crate::data::mnist::{Mnist, Split, normalize};
use crate::models::MnistCnn;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Images per forward pass when evaluating.
const EVAL_BATCH: usize = 1000;
/// Steps between reads of the running loss and accuracy: a read waits for the GPU to finish
/// everything queued, so reading every step would stall the queue once per step.
const READ_EVERY: usize = 16;

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
    /// Seeds the initial weights, the shuffles and dropout.
    pub seed: u64,
    /// Train on the first `limit` training images only.
    pub limit: Option<usize>,
    /// Evaluate on the first `test_limit` test images only.
    pub test_limit: Option<usize>,
    /// Use PyTorch's example dropout (0.25, 0.5).
    pub dropout: bool,
    /// Where the checkpoint is written after each epoch.
    pub checkpoint: PathBuf,
    /// JSON-lines metrics, one line per epoch (appended when resuming).
    pub log: Option<PathBuf>,
    /// Show a progress bar.
    pub progress: bool,
    /// Stop after this many steps in total (benchmarks and tests), checkpointing as on Ctrl-C.
    pub max_steps: Option<u64>,
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
            checkpoint: PathBuf::from("model.ckpt.safetensors"),
            log: None,
            progress: true,
            max_steps: None,
        }
    }
}

/// One epoch's figures, as written to the log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpochMetrics {
    /// 1-based epoch number.
    pub epoch: usize,
    /// Mean training loss over the epoch.
    pub train_loss: f64,
    /// Training accuracy over the epoch (while the weights were changing).
    pub train_acc: f64,
    /// Test-set accuracy after the epoch.
    pub test_acc: f64,
    /// Training throughput.
    pub images_per_sec: f64,
    /// Wall time of the epoch's training steps.
    pub seconds: f64,
}

/// Where training stands: enough, with the weights and optimizer state, to resume exactly.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// The seed of the run (shuffles and dropout derive from it).
    pub seed: u64,
    /// Completed epochs.
    pub epoch: usize,
    /// Steps done in the current epoch (non-zero after an interruption).
    pub step: usize,
    /// Steps done in total.
    pub total_steps: u64,
    /// Loss summed over the current epoch's images so far.
    pub loss_sum: f64,
    /// Correct predictions in the current epoch so far.
    pub correct: u64,
    /// Images seen in the current epoch so far.
    pub seen: u64,
    /// Seconds spent in the current epoch so far.
    pub seconds: f64,
    /// Forward passes each dropout layer has made (their masks' counters).
    pub dropout_steps: Vec<usize>,
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Every epoch ran.
    Finished,
    /// Stopped early (Ctrl-C or `max_steps`) after writing a checkpoint.
    Stopped,
}

/// The summed loss and number of correct predictions of one or more steps, as f32 scalars
/// on the training device.
pub struct StepStats {
    /// Cross-entropy summed over the images.
    pub loss_sum: Tensor,
    /// Images whose largest logit is their label.
    pub correct: Tensor,
}

impl StepStats {
    /// The stats of both `self`'s and `other`'s steps.
    pub fn add(&self, other: &StepStats) -> Result<StepStats> {
        Ok(StepStats {
            loss_sum: self.loss_sum.add(&other.loss_sum)?,
            correct: self.correct.add(&other.correct)?,
        })
    }

    /// `(summed loss, correct)` on the host, once the steps have run.
    pub fn read(&self) -> Result<(f64, u64)> {
        Ok((self.loss_sum.to_scalar()?, self.correct.to_scalar()? as u64))
    }
}

/// A model, its optimizer and where training stands.
pub struct Trainer {
    /// The network being trained.
    pub model: MnistCnn,
    /// Adam over the model's parameters.
    pub optimizer: Adam,
    /// Where training stands.
    pub progress: Progress,
    /// Metrics of the epochs run by this trainer.
    pub history: Vec<EpochMetrics>,
    device: Device,
}

impl Trainer {
    /// A fresh model and optimizer on `device`, seeded by `cfg.seed`.
    pub fn new(cfg: &TrainConfig, device: &Device) -> Result<Trainer> {
        let mut model = MnistCnn::new(&mut Init::new(device, cfg.seed))?;
        if cfg.dropout {
            model = model.with_dropout(cfg.seed)?;
        }
        Ok(Trainer {
            model,
            optimizer: Adam::new(cfg.lr),
            progress: Progress {
                seed: cfg.seed,
                ..Progress::default()
            },
            history: Vec::new(),
            device: device.clone(),
        })
    }

    /// A trainer restored from a checkpoint written by [`Trainer::save_checkpoint`].
    pub fn resume(path: &Path, cfg: &TrainConfig, device: &Device) -> Result<Trainer> {
        let mut t = Trainer::new(cfg, device)?;
        t.progress = checkpoint::load(path, &mut t.model, &mut t.optimizer, device)?;
        for (d, n) in dropouts(&t.model).zip(&t.progress.dropout_steps) {
            d.set_steps(*n);
        }
        Ok(t)
    }

    /// Writes weights, optimizer state and progress to `path` atomically.
    pub fn save_checkpoint(&mut self, path: &Path) -> Result<()> {
        self.progress.dropout_steps = dropouts(&self.model).map(|d| d.steps()).collect();
        checkpoint::save(path, &self.model, &self.optimizer, &self.progress)
    }

    /// One optimisation step on the images `idx` of `split`. Its loss and accuracy stay on
    /// the device until [`StepStats::read`], so steps queue without waiting for each other.
    pub fn step(&mut self, split: &Split, idx: &[usize]) -> Result<StepStats> {
        let (x, y) = batch(split, idx, &self.device)?;
        let (logits, loss) = self.optimize(&x, &y)?;
        let hits = logits.argmax(-1, false)?.eq(&y)?;
        Ok(StepStats {
            loss_sum: loss.mul_scalar(idx.len() as f64)?,
            correct: hits.cast(DType::F32)?.sum_all()?,
        })
    }

    /// One optimisation step on a batch already on the device, normalised images `x`
    /// `[B, 1, 28, 28]` and their i32 labels `y` `[B]` (as [`batch`] makes them): forward,
    /// cross-entropy, backward and the optimizer's update, without [`Trainer::step`]'s stats, as
    /// a peer's training loop does them. Returns the logits and the mean loss, detached and
    /// still on the device.
    pub fn optimize(&mut self, x: &Tensor, y: &Tensor) -> Result<(Tensor, Tensor)> {
        let logits = self.model.forward(x)?;
        let loss = loss::cross_entropy(&logits, y, 0.0)?;
        let grads = loss.backward()?;
        self.optimizer.step(&mut self.model, &grads)?;
        Ok((logits.detach(), loss.detach()))
    }

    /// Trains until `cfg.epochs` epochs are done, `stop` is raised, or `cfg.max_steps` is reached.
    pub fn run(&mut self, data: &Mnist, cfg: &TrainConfig, stop: &AtomicBool) -> Result<Outcome> {
        if cfg.batch_size == 0 {
            return Err(Error::invalid(
                "train",
                "expected a batch size of at least 1, found 0",
            ));
        }
        let train = &data.train;
        let n = cfg.limit.unwrap_or(train.len()).min(train.len());
        if n == 0 {
            return Err(Error::invalid("train", "expected training images, found 0"));
        }
        let steps = n.div_ceil(cfg.batch_size);
        // A pure function of the step count, so `--resume` continues on the same curve.
        let schedule: Box<dyn Schedule> = if cfg.cosine {
            Box::new(Cosine::new(cfg.lr, 0.0, steps * cfg.epochs))
        } else {
            Box::new(Constant(cfg.lr))
        };
        while self.progress.epoch < cfg.epochs {
            let order = permutation(n, self.progress.seed, self.progress.epoch as u64);
            let bar = progress_bar(cfg.progress, steps, self.progress.epoch + 1, cfg.epochs);
            bar.set_position(self.progress.step as u64);
            self.model.set_training(true);
            let mut pending: Option<StepStats> = None;
            while self.progress.step < steps {
                let started = Instant::now();
                let s = self.progress.step;
                let idx = &order[s * cfg.batch_size..((s + 1) * cfg.batch_size).min(n)];
                let lr = schedule.lr(self.progress.total_steps as usize);
                self.optimizer.set_lr(lr);
                let stats = self.step(train, idx)?;
                pending = Some(match pending {
                    Some(sum) => sum.add(&stats)?,
                    None => stats,
                });
                let p = &mut self.progress;
                p.step += 1;
                p.total_steps += 1;
                p.seen += idx.len() as u64;
                let limit_hit = cfg.max_steps.is_some_and(|m| p.total_steps >= m);
                let stopping = stop.load(Ordering::SeqCst) || limit_hit;
                if p.step.is_multiple_of(READ_EVERY) || p.step == steps || stopping {
                    let (loss_sum, correct) = pending.take().map_or(Ok((0.0, 0)), |s| s.read())?;
                    p.loss_sum += loss_sum;
                    p.correct += correct;
                    bar.set_message(format!(
                        "loss {:.4}  acc {:.4}  {:.0} img/s",
                        p.loss_sum / p.seen as f64,
                        p.correct as f64 / p.seen as f64,
                        p.seen as f64 / (p.seconds + started.elapsed().as_secs_f64()).max(1e-9)
                    ));
                }
                p.seconds += started.elapsed().as_secs_f64();
                bar.inc(1);
                if stopping {
                    bar.abandon();
                    self.save_checkpoint(&cfg.checkpoint)?;
                    return Ok(Outcome::Stopped);
                }
            }
            bar.finish_and_clear();
            let test_acc = evaluate(&mut self.model, &data.test, cfg.test_limit)?;
            let p = &mut self.progress;
            let metrics = EpochMetrics {
                epoch: p.epoch + 1,
                train_loss: p.loss_sum / p.seen.max(1) as f64,
                train_acc: p.correct as f64 / p.seen.max(1) as f64,
                test_acc,
                images_per_sec: p.seen as f64 / p.seconds.max(1e-9),
                seconds: p.seconds,
            };
            *p = Progress {
                seed: p.seed,
                epoch: p.epoch + 1,
                total_steps: p.total_steps,
                ..Progress::default()
            };
            if let Some(log) = &cfg.log {
                append_log(log, &metrics)?;
            }
            if cfg.progress {
                eprintln!(
                    "epoch {}/{}: loss {:.4}  train acc {:.4}  test acc {:.4}  {:.0} img/s  {:.1}s",
                    metrics.epoch,
                    cfg.epochs,
                    metrics.train_loss,
                    metrics.train_acc,
                    metrics.test_acc,
                    metrics.images_per_sec,
                    metrics.seconds
                );
            }
            self.history.push(metrics);
            self.save_checkpoint(&cfg.checkpoint)?;
        }
        Ok(Outcome::Finished)
    }
}

fn dropouts(model: &MnistCnn) -> impl Iterator<Item = &crate::core::nn::Dropout> {
    [&model.dropout1, &model.dropout2]
        .into_iter()
        .filter_map(Option::as_ref)
}

fn progress_bar(show: bool, steps: usize, epoch: usize, epochs: usize) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(steps as u64);
    let style = ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {elapsed} {msg}")
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_prefix(format!("epoch {epoch}/{epochs}"));
    bar
}

/// Appends one JSON line to the log, creating it (and its directory) when missing.
fn append_log(path: &Path, metrics: &EpochMetrics) -> Result<()> {
    let err = |e: std::io::Error| Error::io("train", format!("log {}: {e}", path.display()));
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(err)?;
    let line = serde_json::to_string(metrics).map_err(|e| Error::format("train", e.to_string()))?;
    writeln!(f, "{line}").map_err(err)
}

/// The images `idx` of `split` as a normalised `[B, 1, rows, cols]` f32 tensor and their labels
/// as an `[B]` i32 tensor.
pub fn batch(split: &Split, idx: &[usize], device: &Device) -> Result<(Tensor, Tensor)> {
    let size = split.image_size();
    let mut pixels = Vec::with_capacity(idx.len() * size);
    let mut labels = Vec::with_capacity(idx.len());
    for &i in idx {
        let (img, label) = split.image(i).zip(split.labels.get(i)).ok_or_else(|| {
            Error::index(
                "batch",
                format!("image {i} of a split of {} images", split.len()),
            )
        })?;
        pixels.extend(img.iter().map(|&p| normalize(p as f32)));
        labels.push(*label as i32);
    }
    let x = Tensor::from_vec(pixels, [idx.len(), 1, split.rows, split.cols], device)?;
    let y = Tensor::from_vec(labels, [idx.len()], device)?;
    Ok((x, y))
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

fn count_correct(logits: &Tensor, split: &Split, idx: &[usize]) -> Result<u64> {
    let pred = argmax_rows(logits)?;
    Ok(pred
        .iter()
        .zip(idx)
        .filter(|(p, i)| split.labels.get(**i).is_some_and(|l| **p == *l as usize))
        .count() as u64)
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
        correct += count_correct(&logits, split, &idx)?;
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

/// A seeded permutation of `0..n` (Fisher-Yates over splitmix64), one per epoch.
pub fn permutation(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut state = seed ^ epoch.wrapping_mul(0xD1B5_4A32_D192_ED03);
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}
