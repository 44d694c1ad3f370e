//! The MNIST training loop: seeded shuffled batches, optionally augmented
//! ([`TrainConfig::augment`]), forward, cross-entropy, backward, Adam; a progress bar; metrics as
//! JSON lines; an atomic checkpoint after every epoch (and on Ctrl-C) from which `--resume`
//! continues exactly.
//!
//! # The log
//!
//! [`TrainConfig::log`] (`kiln train mnist --log FILE`) is a JSON-lines file of two kinds of
//! lines, told apart by their keys ([`LogLine`] reads either):
//!
//! - a **step line** ([`StepMetrics`]) at every read of the running figures (every
//!   `READ_EVERY` = 16 steps, at the end of each epoch, and when stopping), covering the steps
//!   since the previous step line:
//!   `{"step":320,"epoch":1,"loss":0.1234,"acc":0.9612,"lr":0.00099}` — `step` is the number of
//!   steps done in total, `epoch` 1-based, `loss` the mean cross-entropy and `acc` the accuracy
//!   over those steps' images, `lr` the learning rate of the last of them;
//! - an **epoch line** ([`EpochMetrics`]) after each epoch's evaluation, after that epoch's last
//!   step line: `{"epoch":1,"train_loss":0.15,"train_acc":0.95,"test_acc":0.98,
//!   "images_per_sec":1500.0,"seconds":40.0}`.
//!
//! Step lines always have `step` and never `test_acc`; epoch lines never have `step`. A fresh run
//! starts a fresh log; a resumed run appends to it.

use crate::checkpoint;
use crate::core::autodiff::no_grad;
use crate::core::nn::{Forward, Init, Module, loss};
use crate::core::optim::{Adam, Constant, Cosine, Optimizer, Schedule};
use crate::core::{DType, Device, Error, Result, Tensor};
use crate::data::augment::{Augment, SplitMix64, image_seed};
use crate::data::mnist::{Mnist, Split, normalize};
use crate::models::MnistCnn;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Instant;

/// Images per forward pass when evaluating.
const EVAL_BATCH: usize = 1000;
/// Steps between reads of the running loss and accuracy: a read waits for the GPU to finish
/// everything queued, so reading every step would stall the queue once per step.
const READ_EVERY: usize = 16;
/// Training batches prepared (read, augmented, normalised) ahead of the step using them.
const PREFETCH: usize = 2;

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
    /// JSON-lines metrics: a line per epoch and a line per read of the running figures (see
    /// [the module docs](self)); appended to when resuming.
    pub log: Option<PathBuf>,
    /// Show a progress bar.
    pub progress: bool,
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
            checkpoint: PathBuf::from("model.ckpt.safetensors"),
            log: None,
            progress: true,
            max_steps: None,
            augment: Augment::none(),
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

/// The figures of the steps since the previous step line, as written to the log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepMetrics {
    /// Steps done in total.
    pub step: u64,
    /// 1-based epoch number.
    pub epoch: usize,
    /// Mean training loss over the images of those steps.
    pub loss: f64,
    /// Training accuracy over the images of those steps.
    pub acc: f64,
    /// Learning rate of the last of those steps.
    pub lr: f64,
}

/// One line of the log: a step line or an epoch line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LogLine {
    /// Written at every read of the running figures.
    Step(StepMetrics),
    /// Written after each epoch.
    Epoch(EpochMetrics),
}

/// A training log's step lines and epoch lines, each in file order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Log {
    /// The step lines.
    pub steps: Vec<StepMetrics>,
    /// The epoch lines.
    pub epochs: Vec<EpochMetrics>,
}

impl Log {
    /// Reads a JSON-lines log written by [`Trainer::run`]; a line that is neither kind is an
    /// error naming its number.
    pub fn read(path: &Path) -> Result<Log> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io("train", format!("log {}: {e}", path.display())))?;
        let mut log = Log::default();
        for (n, line) in text.lines().enumerate() {
            match serde_json::from_str(line) {
                Ok(LogLine::Step(s)) => log.steps.push(s),
                Ok(LogLine::Epoch(e)) => log.epochs.push(e),
                Err(e) => {
                    return Err(Error::format(
                        "train",
                        format!(
                            "log {} line {}: expected a step or an epoch line, found {line:?} ({e})",
                            path.display(),
                            n + 1
                        ),
                    ));
                }
            }
        }
        Ok(log)
    }
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

    /// One optimisation step on the images `idx` of `split`, unaugmented. Its loss and accuracy
    /// stay on the device until [`StepStats::read`], so steps queue without waiting for each other.
    pub fn step(&mut self, split: &Split, idx: &[usize]) -> Result<StepStats> {
        let (x, y) = batch(split, idx, &self.device)?;
        self.step_batch(&x, &y)
    }

    /// One optimisation step on a batch already on the device (as [`Trainer::optimize`] takes
    /// it), with its stats as [`Trainer::step`] returns them.
    pub fn step_batch(&mut self, x: &Tensor, y: &Tensor) -> Result<StepStats> {
        let n = y.dim(0)?;
        let (logits, loss) = self.optimize(x, y)?;
        let hits = logits.argmax(-1, false)?.eq(y)?;
        Ok(StepStats {
            loss_sum: loss.mul_scalar(n as f64)?,
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
        cfg.augment.check()?;
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
            let epoch = self.progress.epoch;
            let order = permutation(n, self.progress.seed, epoch as u64);
            let batches: Vec<&[usize]> = order.chunks(cfg.batch_size).collect();
            let first = self.progress.step.min(steps);
            let augment = (!cfg.augment.is_none()).then_some((
                &cfg.augment,
                self.progress.seed,
                epoch as u64,
            ));
            // A thread reads (and augments) the next batches while this one trains: the images of
            // a batch are a pure function of its indices, seed and epoch, so the order of work
            // changes nothing. It stops when the receiver is dropped (end of epoch, stop, error).
            let stopped = std::thread::scope(|scope| {
                let (tx, rx) = mpsc::sync_channel(PREFETCH);
                let todo = &batches[first..];
                scope.spawn(move || {
                    for idx in todo {
                        if tx.send(host_batch(train, idx, augment)).is_err() {
                            break;
                        }
                    }
                });
                self.train_epoch(&rx, cfg, &*schedule, steps, stop)
            })?;
            if stopped {
                self.save_checkpoint(&cfg.checkpoint)?;
                return Ok(Outcome::Stopped);
            }
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

    /// The rest of the current epoch's steps, on the host batches `rx` delivers in order.
    /// Returns `true` when stopped early (`stop` raised or `cfg.max_steps` reached).
    fn train_epoch(
        &mut self,
        rx: &mpsc::Receiver<Result<HostBatch>>,
        cfg: &TrainConfig,
        schedule: &dyn Schedule,
        steps: usize,
        stop: &AtomicBool,
    ) -> Result<bool> {
        let epoch = self.progress.epoch + 1;
        let bar = progress_bar(cfg.progress, steps, epoch, cfg.epochs);
        bar.set_position(self.progress.step as u64);
        self.model.set_training(true);
        let mut pending: Option<StepStats> = None;
        // Images seen at the previous read (the last step line).
        let mut seen_at_read = self.progress.seen;
        while self.progress.step < steps {
            let started = Instant::now();
            let hb = rx
                .recv()
                .map_err(|_| Error::invalid("train", "the batch reader stopped early"))??;
            let images = hb.labels.len() as u64;
            let (x, y) = hb.into_device(&self.device)?;
            let lr = schedule.lr(self.progress.total_steps as usize);
            self.optimizer.set_lr(lr);
            let stats = self.step_batch(&x, &y)?;
            pending = Some(match pending {
                Some(sum) => sum.add(&stats)?,
                None => stats,
            });
            let p = &mut self.progress;
            p.step += 1;
            p.total_steps += 1;
            p.seen += images;
            let limit_hit = cfg.max_steps.is_some_and(|m| p.total_steps >= m);
            let stopping = stop.load(Ordering::SeqCst) || limit_hit;
            if p.step.is_multiple_of(READ_EVERY) || p.step == steps || stopping {
                let (loss_sum, correct) = pending.take().map_or(Ok((0.0, 0)), |s| s.read())?;
                p.loss_sum += loss_sum;
                p.correct += correct;
                let images = (p.seen - seen_at_read).max(1) as f64;
                seen_at_read = p.seen;
                if let Some(log) = &cfg.log {
                    let line = StepMetrics {
                        step: p.total_steps,
                        epoch,
                        loss: loss_sum / images,
                        acc: correct as f64 / images,
                        lr,
                    };
                    append_log(log, &line)?;
                }
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
                return Ok(true);
            }
        }
        bar.finish_and_clear();
        Ok(false)
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
fn append_log(path: &Path, metrics: &impl Serialize) -> Result<()> {
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
    host_batch(split, idx, None)?.into_device(device)
}

/// A batch on the host: normalised pixels and labels.
struct HostBatch {
    pixels: Vec<f32>,
    labels: Vec<i32>,
    rows: usize,
    cols: usize,
}

impl HostBatch {
    /// (`[B, 1, rows, cols]` pixels, `[B]` labels) on `device`.
    fn into_device(self, device: &Device) -> Result<(Tensor, Tensor)> {
        let b = self.labels.len();
        let x = Tensor::from_vec(self.pixels, [b, 1, self.rows, self.cols], device)?;
        let y = Tensor::from_vec(self.labels, [b], device)?;
        Ok((x, y))
    }
}

/// The images `idx` of `split`, augmented when `augment` gives the setting, the run's seed and
/// the epoch (each image's draws seeded by [`image_seed`]).
fn host_batch(
    split: &Split,
    idx: &[usize],
    augment: Option<(&Augment, u64, u64)>,
) -> Result<HostBatch> {
    let size = split.image_size();
    let mut pixels = Vec::with_capacity(idx.len() * size);
    let mut labels = Vec::with_capacity(idx.len());
    let mut scratch = vec![0u8; size];
    for &i in idx {
        let (img, label) = split.image(i).zip(split.labels.get(i)).ok_or_else(|| {
            Error::index(
                "batch",
                format!("image {i} of a split of {} images", split.len()),
            )
        })?;
        let img = match augment {
            Some((aug, seed, epoch)) => {
                let s = image_seed(seed, epoch, i as u64);
                aug.apply(img, split.rows, split.cols, s, &mut scratch)?;
                &scratch[..]
            }
            None => img,
        };
        pixels.extend(img.iter().map(|&p| normalize(p as f32)));
        labels.push(*label as i32);
    }
    Ok(HostBatch {
        pixels,
        labels,
        rows: split.rows,
        cols: split.cols,
    })
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
    let mut rng = SplitMix64::new(seed ^ epoch.wrapping_mul(0xD1B5_4A32_D192_ED03));
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::nn::Module;
    use crate::data::mnist;

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
            checkpoint: dir.join("ckpt.safetensors"),
            log: Some(dir.join("log.jsonl")),
            progress: false,
            augment: Augment::digits(),
            ..TrainConfig::default()
        }
    }

    fn weights(t: &Trainer) -> Vec<Vec<f32>> {
        t.model
            .named_tensors()
            .into_iter()
            .map(|(_, t)| t.to_vec::<f32>().unwrap())
            .collect()
    }

    fn log(cfg: &TrainConfig) -> Vec<LogLine> {
        let text = std::fs::read_to_string(cfg.log.as_ref().unwrap()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn augmented_training_logs_steps_and_resumes_exactly() {
        let Some(data) = mnist() else { return };
        let dev = Device::cpu();
        let stop = AtomicBool::new(false);
        let a_dir = tempfile::tempdir().unwrap();
        let cfg = config(a_dir.path());
        let mut a = Trainer::new(&cfg, &dev).unwrap();
        assert_eq!(a.run(&data, &cfg, &stop).unwrap(), Outcome::Finished);

        // Step lines at every 16 steps and at each epoch's end, then the epoch line.
        let lines = log(&cfg);
        let text = std::fs::read_to_string(cfg.log.as_ref().unwrap()).unwrap();
        for (line, raw) in lines.iter().zip(text.lines()) {
            match line {
                LogLine::Step(_) => assert!(!raw.contains("test_acc"), "{raw}"),
                LogLine::Epoch(_) => assert!(!raw.contains("\"step\""), "{raw}"),
            }
        }
        let read = Log::read(cfg.log.as_ref().unwrap()).unwrap();
        let steps: Vec<(u64, usize)> = read.steps.iter().map(|s| (s.step, s.epoch)).collect();
        assert_eq!(steps, [(16, 1), (20, 1), (36, 2), (40, 2)]);
        assert_eq!(read.epochs, a.history);
        assert!(matches!(lines[2], LogLine::Epoch(_)) && matches!(lines[5], LogLine::Epoch(_)));
        // The step lines of an epoch add up to its figures.
        let (s1, s2, e1) = (&read.steps[0], &read.steps[1], &read.epochs[0]);
        let loss = (s1.loss * 128.0 + s2.loss * 32.0) / 160.0;
        assert!((loss - e1.train_loss).abs() < 1e-9, "{loss} {e1:?}");
        let acc = (s1.acc * 128.0 + s2.acc * 32.0) / 160.0;
        assert!((acc - e1.train_acc).abs() < 1e-9);
        assert!(s1.lr > s2.lr && s2.lr > 0.0);

        // Stopped at step 5 and after 25, resumed each time: the same weights and figures.
        let b_dir = tempfile::tempdir().unwrap();
        let b_cfg = config(b_dir.path());
        for (i, max) in [Some(5), Some(25), None].into_iter().enumerate() {
            let c = TrainConfig {
                max_steps: max,
                ..b_cfg.clone()
            };
            let mut b = if i == 0 {
                Trainer::new(&c, &dev).unwrap()
            } else {
                Trainer::resume(&c.checkpoint, &c, &dev).unwrap()
            };
            let want = if max.is_some() {
                Outcome::Stopped
            } else {
                Outcome::Finished
            };
            assert_eq!(b.run(&data, &c, &stop).unwrap(), want);
            if max.is_none() {
                assert_eq!(weights(&a), weights(&b));
            }
        }
        // The same epoch figures (the loss up to rounding: a stop reads the running sums early,
        // so they are added in other groups).
        let epochs_of = |lines: Vec<LogLine>| -> Vec<EpochMetrics> {
            lines
                .into_iter()
                .filter_map(|l| match l {
                    LogLine::Epoch(m) => Some(m),
                    LogLine::Step(_) => None,
                })
                .collect()
        };
        let (ea, eb) = (epochs_of(log(&cfg)), epochs_of(log(&b_cfg)));
        assert_eq!(ea.len(), 2);
        assert_eq!(eb.len(), 2);
        for (x, y) in ea.iter().zip(&eb) {
            assert_eq!(
                (x.epoch, x.train_acc, x.test_acc),
                (y.epoch, y.train_acc, y.test_acc)
            );
            assert!((x.train_loss - y.train_loss).abs() < 1e-5, "{x:?} {y:?}");
        }
        // Augmentation changes what is learnt.
        let c_dir = tempfile::tempdir().unwrap();
        let c_cfg = TrainConfig {
            augment: Augment::none(),
            epochs: 1,
            ..config(c_dir.path())
        };
        let mut c = Trainer::new(&c_cfg, &dev).unwrap();
        c.run(&data, &c_cfg, &stop).unwrap();
        assert_ne!(c.history[0].train_loss, a.history[0].train_loss);
    }

    #[test]
    fn augmented_batches_depend_on_seed_epoch_and_index_only() {
        let Some(data) = mnist() else { return };
        let aug = Augment::digits();
        let at =
            |idx: &[usize], epoch| host_batch(&data.train, idx, Some((&aug, 1, epoch))).unwrap();
        let ab = at(&[3, 9], 0);
        let ba = at(&[9, 3], 0);
        let n = 28 * 28;
        assert_eq!(ab.pixels[..n], ba.pixels[n..]);
        assert_eq!(ab.labels, [ba.labels[1], ba.labels[0]]);
        assert_ne!(at(&[3], 1).pixels, at(&[3], 0).pixels);
        let plain = host_batch(&data.train, &[3], None).unwrap();
        assert_ne!(plain.pixels, at(&[3], 0).pixels);
        let none = Augment::none();
        assert_eq!(
            host_batch(&data.train, &[3], Some((&none, 1, 0)))
                .unwrap()
                .pixels,
            plain.pixels
        );
    }
}
