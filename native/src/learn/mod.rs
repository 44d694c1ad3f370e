//! A training loop for any [`Module`]: the [`Learner`] runs a user's step function over the
//! batches of a [`DataLoader`], with any [`Optimizer`] and [`Schedule`], gradient
//! accumulation and clipping, evaluation every N steps, early stopping, checkpoints that keep
//! the last K and resume exactly, and reporters for the log, the console and the dashboard.
//!
//! The step function takes the model and a host batch and returns an [`Output`]: the mean
//! loss (still recording, the learner runs the backward pass) and metric sums that stay on the
//! device. The learner reads them back every [`LearnerConfig::read_every`] batches only, so
//! steps queue on a GPU without waiting for each other.
//!
//! ```no_run
//! use kiln::core::nn::{Forward, Init, Linear, loss};
//! use kiln::core::optim::Adam;
//! use kiln::core::{Device, Tensor};
//! use kiln::data::loader::{DataLoader, Dataset};
//! use kiln::learn::{Learner, LearnerConfig, Output};
//!
//! /// y = 3x - 1 on 256 points.
//! struct Line;
//! impl Dataset for Line {
//!     type Batch = (Vec<f32>, Vec<f32>);
//!     fn len(&self) -> usize { 256 }
//!     fn batch(&self, idx: &[usize], _: u64) -> kiln::core::Result<Self::Batch> {
//!         let x: Vec<f32> = idx.iter().map(|&i| i as f32 / 256.0).collect();
//!         Ok((x.clone(), x.iter().map(|x| 3.0 * x - 1.0).collect()))
//!     }
//! }
//! let dev = Device::cpu();
//! let model = Linear::new(&mut Init::new(&dev, 0), 1, 1)?;
//! let mut learner = Learner::new(model, Adam::new(0.05), LearnerConfig { epochs: 20, ..Default::default() });
//! let train = DataLoader::new(Line, 32).shuffle(1);
//! learner.fit(&train, None, |model, (x, y)| {
//!     let n = x.len();
//!     let x = Tensor::from_vec(x.clone(), [n, 1], &dev)?;
//!     let y = Tensor::from_vec(y.clone(), [n, 1], &dev)?;
//!     Ok(Output::new(loss::mse(&model.forward(&x)?, &y)?, n))
//! })?;
//! # Ok::<(), kiln::core::Error>(())
//! ```

pub mod dashboard;
pub mod report;

use crate::checkpoint;
use crate::core::autodiff::{Gradients, no_grad};
use crate::core::nn::Module;
use crate::core::optim::{Constant, Optimizer, Schedule, clip_coefficient};
use crate::core::{DType, Error, Result, Tensor};
use crate::data::loader::{DataLoader, Dataset};
use crate::dist::{self, Collective};
use report::{EpochLine, EvalLine, Event, Metrics, Outcome, Reporter, RunInfo, StepLine, Summary};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// What a step function returns for one batch.
#[derive(Clone, Debug)]
pub struct Output {
    /// The batch's mean loss, a scalar still recording gradients.
    pub loss: Tensor,
    /// Samples in the batch: the weight of its figures in the means.
    pub samples: usize,
    /// Other figures as sums over the batch's samples (scalars on the device), reported as
    /// means: `("acc", correct predictions)` is reported as accuracy.
    pub sums: Vec<(String, Tensor)>,
}

impl Output {
    /// The loss of a batch of `samples`, with no other figure.
    pub fn new(loss: Tensor, samples: usize) -> Self {
        Output {
            loss,
            samples,
            sums: Vec::new(),
        }
    }
    /// Adds a figure summed over the batch (reported as its mean per sample).
    pub fn with_sum(mut self, name: impl Into<String>, sum: Tensor) -> Self {
        self.sums.push((name.into(), sum));
        self
    }
    /// The loss of a classifier's batch with its accuracy (`acc`): `logits` `[B, C]`,
    /// `labels` `[B]` integer classes.
    pub fn classification(loss: Tensor, logits: &Tensor, labels: &Tensor) -> Result<Self> {
        let samples = labels.dim(0)?;
        let correct = no_grad(|| {
            logits
                .argmax(-1, false)?
                .eq(&labels.cast(DType::I32)?)?
                .cast(DType::F32)?
                .sum_all()
        })?;
        Ok(Output::new(loss, samples).with_sum("acc", correct))
    }
}

/// Stop when a validation metric stops improving.
#[derive(Clone, Debug, PartialEq)]
pub struct EarlyStop {
    /// The metric, without the validation prefix (`loss`, `acc`).
    pub metric: String,
    /// Evaluations without improvement before stopping.
    pub patience: usize,
    /// Smallest change that counts as an improvement.
    pub min_delta: f64,
    /// Larger is better (accuracy) rather than smaller (loss).
    pub maximize: bool,
}

/// How a [`Learner`] trains.
#[derive(Clone, Debug)]
pub struct LearnerConfig {
    /// Passes over the training loader.
    pub epochs: usize,
    /// Stop (with a checkpoint, as on Ctrl-C) after this many optimizer steps in total.
    pub max_steps: Option<u64>,
    /// Batches whose gradients are summed into one optimizer step (each batch's loss is
    /// divided by the group's size, so the step sees their mean).
    pub accumulate: usize,
    /// Clip the gradients' joint L2 norm to this before each step.
    pub clip_grad_norm: Option<f64>,
    /// Evaluate every this many optimizer steps (besides the end of each epoch).
    pub eval_every: Option<u64>,
    /// Stop when validation stops improving (needs a validation loader).
    pub early_stop: Option<EarlyStop>,
    /// Batches between reads of the running figures (a read waits for the device).
    pub read_every: usize,
    /// Where checkpoints go (`step-<N>.safetensors`); none are written when `None`.
    pub checkpoint_dir: Option<PathBuf>,
    /// Checkpoints kept: older ones are deleted after a newer one is written.
    pub keep_last: usize,
    /// Also checkpoint every this many optimizer steps (always: each epoch's end and a stop).
    pub checkpoint_every: Option<u64>,
    /// The validation set's name in metric names (`test` gives `test_acc`).
    pub valid_name: String,
}

impl Default for LearnerConfig {
    fn default() -> Self {
        LearnerConfig {
            epochs: 1,
            max_steps: None,
            accumulate: 1,
            clip_grad_norm: None,
            eval_every: None,
            early_stop: None,
            read_every: 16,
            checkpoint_dir: None,
            keep_last: 3,
            checkpoint_every: None,
            valid_name: "valid".into(),
        }
    }
}

impl LearnerConfig {
    /// Optimizer steps in one epoch of `loader`.
    pub fn steps_per_epoch<D: Dataset>(&self, loader: &DataLoader<D>) -> u64 {
        loader.batches().div_ceil(self.accumulate.max(1)) as u64
    }
    /// Optimizer steps of the whole run on `loader` (what a schedule spans).
    pub fn total_steps<D: Dataset>(&self, loader: &DataLoader<D>) -> u64 {
        let all = self.steps_per_epoch(loader) * self.epochs as u64;
        self.max_steps.map_or(all, |m| m.min(all))
    }

    fn check(&self) -> Result<()> {
        let bad = |what: String| Err(Error::invalid("learner", what));
        if self.accumulate == 0 {
            return bad("expected accumulate of at least 1 batch, found 0".into());
        }
        if self.read_every == 0 {
            return bad("expected read_every of at least 1 batch, found 0".into());
        }
        if self.eval_every == Some(0) || self.checkpoint_every == Some(0) {
            return bad("expected eval_every and checkpoint_every of at least 1 step".into());
        }
        if self.keep_last == 0 {
            return bad("expected keep_last of at least 1 checkpoint, found 0".into());
        }
        if let Some(c) = self.clip_grad_norm.filter(|c| c.is_nan() || *c <= 0.0) {
            return bad(format!("expected a positive clip_grad_norm, found {c}"));
        }
        Ok(())
    }
}

/// Where training stands: with the weights and the optimizer's state, enough to resume
/// exactly (saved in every checkpoint).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    /// Completed epochs.
    pub epoch: usize,
    /// Batches done in the current epoch.
    pub batch: usize,
    /// Optimizer steps done in total.
    pub step: u64,
    /// Samples, metric sums and seconds of the current epoch so far.
    pub epoch_sums: Sums,
    /// Figures of the batches since the last read, as f32 bits (what the device held), so a
    /// resumed run adds the next batches to exactly the same partial sums.
    pub unread: Option<Unread>,
    /// Each random layer's counter (dropout masks), by name.
    pub counters: BTreeMap<String, usize>,
    /// The best value of the early-stopping metric so far.
    pub best: Option<f64>,
    /// Evaluations since the best one.
    pub stale: usize,
    /// Optimizer steps at the last evaluation.
    pub last_eval_step: Option<u64>,
    /// The last evaluation's figures (`<valid>_<metric>`).
    pub last_eval: Metrics,
}

/// Running sums over samples.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Sums {
    /// Samples summed.
    pub samples: u64,
    /// Per metric (including `loss`), the sum over samples.
    pub sums: Metrics,
    /// Wall time of those batches.
    pub seconds: f64,
}

impl Sums {
    fn means(&self, prefix: &str) -> Metrics {
        let n = self.samples.max(1) as f64;
        self.sums
            .iter()
            .map(|(k, v)| (format!("{prefix}{k}"), v / n))
            .collect()
    }
    fn add(&mut self, other: &Sums) {
        self.samples += other.samples;
        self.seconds += other.seconds;
        for (k, v) in &other.sums {
            *self.sums.entry(k.clone()).or_default() += v;
        }
    }
}

/// Unread figures of a read group (see [`TrainState::unread`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Unread {
    /// Samples in those batches.
    pub samples: u64,
    /// Optimizer steps in those batches.
    pub steps: u64,
    /// Wall time of those batches.
    pub seconds: f64,
    /// Metric name and the f32 bits of its sum.
    pub bits: Vec<(String, u32)>,
}

/// Figures accumulating on the device until the next read.
struct Pending {
    samples: u64,
    steps: u64,
    seconds: f64,
    sums: Vec<(String, Tensor)>,
}

impl Pending {
    fn new() -> Self {
        Pending {
            samples: 0,
            steps: 0,
            seconds: 0.0,
            sums: Vec::new(),
        }
    }

    fn add(&mut self, out: &Output) -> Result<()> {
        let loss_sum = no_grad(|| out.loss.detach().mul_scalar(out.samples as f64))?;
        let new = std::iter::once(("loss".to_string(), loss_sum)).chain(out.sums.iter().cloned());
        for (name, t) in new {
            let t = t.detach().cast(DType::F32)?;
            match self.sums.iter_mut().find(|(n, _)| *n == name) {
                Some((_, sum)) => *sum = sum.add(&t)?,
                None => self.sums.push((name, t)),
            }
        }
        self.samples += out.samples as u64;
        Ok(())
    }

    /// The sums on the host, in f32 as the device held them.
    fn read(&self) -> Result<Vec<(String, f32)>> {
        self.sums
            .iter()
            .map(|(n, t)| {
                Ok((
                    n.clone(),
                    t.to_vec::<f32>()?.first().copied().unwrap_or(0.0),
                ))
            })
            .collect()
    }

    fn freeze(&self) -> Result<Unread> {
        Ok(Unread {
            samples: self.samples,
            steps: self.steps,
            seconds: self.seconds,
            bits: self
                .read()?
                .into_iter()
                .map(|(n, v)| (n, v.to_bits()))
                .collect(),
        })
    }

    fn thaw(u: &Unread, device: &crate::core::Device) -> Result<Pending> {
        let sums = u
            .bits
            .iter()
            .map(|(n, b)| {
                // f32 -> f64 -> f32 is exact.
                let t = Tensor::scalar(f32::from_bits(*b) as f64, DType::F32, device)?;
                Ok((n.clone(), t))
            })
            .collect::<Result<_>>()?;
        Ok(Pending {
            samples: u.samples,
            steps: u.steps,
            seconds: u.seconds,
            sums,
        })
    }
}

/// Makes a text of the model after each evaluation (see [`Learner::sampler`]).
type Sampler<M> = Box<dyn FnMut(&mut M) -> Result<String>>;

/// A model, its optimizer and schedule, and where training stands.
pub struct Learner<M: Module> {
    /// The model being trained.
    pub model: M,
    /// Updates the model's parameters.
    pub optimizer: Box<dyn Optimizer>,
    /// Learning rate per optimizer step.
    pub schedule: Box<dyn Schedule>,
    /// How to train.
    pub config: LearnerConfig,
    /// Where training stands.
    pub state: TrainState,
    /// The epoch lines of this learner's run.
    pub history: Vec<EpochLine>,
    reporters: Vec<Box<dyn Reporter>>,
    sampler: Option<Sampler<M>>,
    stop: Arc<AtomicBool>,
    last_checkpoint: Option<PathBuf>,
    collective: Option<Box<dyn Collective>>,
    /// Whether any replica's stop flag was up at the last read (data-parallel runs stop
    /// together, so they stop on this rather than on their own flag).
    stop_seen: bool,
}

impl<M: Module> Learner<M> {
    /// A learner at step 0 with the optimizer's learning rate held constant.
    pub fn new(model: M, optimizer: impl Optimizer + 'static, config: LearnerConfig) -> Self {
        let lr = optimizer.lr();
        Learner {
            model,
            optimizer: Box::new(optimizer),
            schedule: Box::new(Constant(lr)),
            config,
            state: TrainState::default(),
            history: Vec::new(),
            reporters: Vec::new(),
            sampler: None,
            stop: Arc::new(AtomicBool::new(false)),
            last_checkpoint: None,
            collective: None,
            stop_seen: false,
        }
    }
    /// Sets the learning-rate schedule (a function of the optimizer step).
    pub fn schedule(mut self, schedule: impl Schedule + 'static) -> Self {
        self.schedule = Box::new(schedule);
        self
    }
    /// Adds a reporter ([`report::JsonLines`], [`report::Console`], the dashboard...).
    pub fn reporter(mut self, reporter: impl Reporter + 'static) -> Self {
        self.reporters.push(Box::new(reporter));
        self
    }
    /// Makes this learner one replica of a data-parallel run (see [`crate::dist`]): the
    /// model starts from rank 0's weights, each step uses the gradients averaged over the
    /// replicas, the figures are summed over them, and only rank 0 reports and writes
    /// checkpoints. Give each replica its shard of the data
    /// ([`DataLoader::shard`]) and the same seed and settings.
    pub fn collective(mut self, c: Box<dyn Collective>) -> Self {
        self.collective = Some(c);
        self
    }
    /// This replica's rank (0 without a collective).
    pub fn rank(&self) -> usize {
        self.collective.as_ref().map_or(0, |c| c.rank())
    }
    /// Runs `f` on the model after each evaluation and reports its text with the evaluation
    /// (a language model's generated sample in the log).
    pub fn sampler(mut self, f: impl FnMut(&mut M) -> Result<String> + 'static) -> Self {
        self.sampler = Some(Box::new(f));
        self
    }
    /// Drops the reporters, which ends them: the dashboard waits for a key after the run's
    /// summary and gives the terminal back. Call it after [`Learner::fit`] before printing.
    pub fn close_reporters(&mut self) {
        self.reporters.clear();
    }
    /// The flag that stops the run after the current optimizer step (with a checkpoint):
    /// set it from a Ctrl-C handler or another thread.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Restores the model, optimizer and [`TrainState`] from a checkpoint file, or from the
    /// newest one in a checkpoint directory.
    pub fn resume(&mut self, from: &Path) -> Result<PathBuf> {
        let path = if from.is_dir() {
            latest_checkpoint(from)?.ok_or_else(|| {
                Error::io(
                    "resume",
                    format!(
                        "expected a step-<N>.safetensors checkpoint in {}, found none",
                        from.display()
                    ),
                )
            })?
        } else {
            from.to_path_buf()
        };
        let device = self.device()?;
        self.state = checkpoint::load(&path, &mut self.model, &mut *self.optimizer, &device)?;
        let counters = &self.state.counters;
        self.model.visit_counters(&mut |name, c| {
            if let Some(n) = counters.get(name) {
                c.store(*n, Ordering::Relaxed);
            }
        });
        Ok(path)
    }

    fn device(&self) -> Result<crate::core::Device> {
        let mut dev = None;
        self.model.visit(&mut |_, p| {
            dev.get_or_insert_with(|| p.tensor().device().clone());
        });
        dev.ok_or_else(|| Error::invalid("learner", "expected a model with parameters, found none"))
    }

    fn emit(&mut self, event: Event<'_>) -> Result<()> {
        if self.rank() != 0 {
            return Ok(());
        }
        for r in &mut self.reporters {
            r.report(&event)?;
        }
        Ok(())
    }

    /// Writes a checkpoint of the current state to the checkpoint directory (when one is
    /// configured) and deletes the ones beyond `keep_last`.
    pub fn save_checkpoint(&mut self) -> Result<Option<PathBuf>> {
        let Some(dir) = self.config.checkpoint_dir.clone() else {
            return Ok(None);
        };
        if self.rank() != 0 {
            return Ok(None);
        }
        let mut counters = BTreeMap::new();
        self.model.visit_counters(&mut |name, c| {
            counters.insert(name.to_string(), c.load(Ordering::Relaxed));
        });
        self.state.counters = counters;
        let path = dir.join(format!("step-{:09}.safetensors", self.state.step));
        checkpoint::save(&path, &self.model, &*self.optimizer, &self.state)?;
        for old in checkpoints(&dir)?
            .into_iter()
            .rev()
            .skip(self.config.keep_last)
        {
            std::fs::remove_file(&old.1).map_err(|e| {
                Error::io(
                    "checkpoint",
                    format!("cannot delete {}: {e}", old.1.display()),
                )
            })?;
        }
        self.emit(Event::Checkpoint(&path))?;
        self.last_checkpoint = Some(path.clone());
        Ok(Some(path))
    }

    /// Trains on `train` until every epoch is done, the stop flag is raised, `max_steps` is
    /// reached or early stopping triggers. `step` computes one batch's [`Output`] in training
    /// mode; on `valid` it runs in evaluation mode without recording gradients.
    pub fn fit<D: Dataset>(
        &mut self,
        train: &DataLoader<D>,
        valid: Option<&DataLoader<D>>,
        mut step: impl FnMut(&mut M, &D::Batch) -> Result<Output>,
    ) -> Result<Outcome> {
        self.config.check()?;
        train.check()?;
        if let Some(v) = valid {
            v.check()?;
        }
        if self.config.early_stop.is_some() && valid.is_none() {
            return Err(Error::invalid(
                "learner",
                "expected a validation loader for early stopping, found none",
            ));
        }
        let device = self.device()?;
        if let Some(c) = &mut self.collective {
            dist::broadcast_model(&mut **c, &self.model)?;
        }
        let started = Instant::now();
        let per_epoch = train.batches();
        let info = RunInfo {
            device: device.name(),
            params: self.model.num_params(),
            epochs: self.config.epochs,
            batches_per_epoch: per_epoch,
            steps_per_epoch: self.config.steps_per_epoch(train),
            total_steps: self.config.total_steps(train),
            start_step: self.state.step,
            valid_name: self.config.valid_name.clone(),
        };
        self.emit(Event::Start(&info))?;
        let outcome = self.train_epochs(train, valid, &mut step, &device)?;
        let summary = Summary {
            outcome,
            steps: self.state.step,
            seconds: started.elapsed().as_secs_f64(),
            last_epoch: self.history.last().cloned(),
            last_eval: self.state.last_eval_step.map(|s| EvalLine {
                step: s,
                epoch: self.state.epoch.max(1),
                metrics: self.state.last_eval.clone(),
                sample: None,
            }),
            checkpoint: self.last_checkpoint.clone(),
        };
        self.emit(Event::Finish(&summary))?;
        Ok(outcome)
    }

    fn train_epochs<D: Dataset>(
        &mut self,
        train: &DataLoader<D>,
        valid: Option<&DataLoader<D>>,
        step: &mut impl FnMut(&mut M, &D::Batch) -> Result<Output>,
        device: &crate::core::Device,
    ) -> Result<Outcome> {
        let per_epoch = train.batches();
        let k = self.config.accumulate;
        self.model.set_training(true);
        while self.state.epoch < self.config.epochs {
            let epoch = self.state.epoch + 1;
            let mut batches = train.epoch(self.state.epoch as u64, self.state.batch);
            // A data-parallel run's unread figures are its replicas' sums: rank 0 takes them.
            let mut pending = match self.state.unread.take() {
                Some(u) if self.rank() == 0 => Pending::thaw(&u, device)?,
                _ => Pending::new(),
            };
            let mut grads: Option<Gradients> = None;
            while self.state.batch < per_epoch {
                let t0 = Instant::now();
                let batch = batches.next().ok_or_else(|| {
                    Error::invalid("learner", "the data loader ended before the epoch did")
                })??;
                // The group of batches summed into one step; the last of an epoch may be short.
                let group_start = self.state.batch - self.state.batch % k;
                let group = k.min(per_epoch - group_start);
                let out = step(&mut self.model, &batch)?;
                if out.loss.numel() != 1 {
                    return Err(Error::shape(
                        "learner",
                        format!(
                            "expected the step's loss to be a scalar, found shape {}",
                            out.loss.shape()
                        ),
                    ));
                }
                let loss = if group > 1 {
                    out.loss.mul_scalar(1.0 / group as f64)?
                } else {
                    out.loss.clone()
                };
                let g = loss.backward()?;
                grads = Some(match grads.take() {
                    Some(sum) => add_grads(&self.model, sum, g)?,
                    None => g,
                });
                pending.add(&out)?;
                self.state.batch += 1;
                let boundary = self.state.batch.is_multiple_of(k) || self.state.batch == per_epoch;
                let mut lr = self.optimizer.lr();
                if boundary {
                    let mut g = grads.take().unwrap_or_default();
                    lr = self.schedule.lr(self.state.step as usize);
                    self.optimizer.set_lr(lr);
                    if let Some(c) = &mut self.collective {
                        dist::average_gradients(&mut **c, &self.model, &mut g)?;
                    }
                    match self.config.clip_grad_norm {
                        // the clipping coefficient goes into the optimizer's update
                        Some(max) => {
                            let (_, coef) = clip_coefficient(&self.model, &g, max)?;
                            self.optimizer.step_scaled(&mut self.model, &g, &coef)?;
                        }
                        None => self.optimizer.step(&mut self.model, &g)?,
                    }
                    self.state.step += 1;
                    pending.steps += 1;
                }
                pending.seconds += t0.elapsed().as_secs_f64();
                self.emit(Event::Batch {
                    epoch,
                    done: self.state.batch,
                    of: per_epoch,
                    step: self.state.step,
                })?;
                if self.state.batch.is_multiple_of(self.config.read_every)
                    || self.state.batch == per_epoch
                {
                    self.read(&mut pending, epoch, lr, device)?;
                }
                if !boundary {
                    continue;
                }
                let s = self.state.step;
                if let Some(v) = valid
                    && self.config.eval_every.is_some_and(|e| s.is_multiple_of(e))
                {
                    self.evaluate(v, step, epoch, device)?;
                    if self.stale_too_long() {
                        self.state.unread = Some(self.freeze(&pending, device)?);
                        self.save_checkpoint()?;
                        return Ok(Outcome::EarlyStopped);
                    }
                }
                let limit = self.config.max_steps.is_some_and(|m| s >= m);
                if self.stopping() || limit {
                    self.state.unread = Some(self.freeze(&pending, device)?);
                    self.save_checkpoint()?;
                    return Ok(Outcome::Stopped);
                }
                if self
                    .config
                    .checkpoint_every
                    .is_some_and(|e| s.is_multiple_of(e))
                    && self.state.batch < per_epoch
                {
                    self.state.unread = Some(self.freeze(&pending, device)?);
                    self.save_checkpoint()?;
                    self.state.unread = None;
                }
            }
            drop(batches);
            if let Some(v) = valid
                && self.state.last_eval_step != Some(self.state.step)
            {
                self.evaluate(v, step, epoch, device)?;
            }
            let sums = std::mem::take(&mut self.state.epoch_sums);
            let mut metrics = sums.means("train_");
            metrics.extend(self.state.last_eval.clone());
            let line = EpochLine {
                epoch,
                metrics,
                samples_per_sec: sums.samples as f64 / sums.seconds.max(1e-9),
                seconds: sums.seconds,
            };
            self.emit(Event::Epoch(&line))?;
            self.history.push(line);
            self.state.epoch += 1;
            self.state.batch = 0;
            let early = self.stale_too_long();
            self.save_checkpoint()?;
            if early {
                return Ok(Outcome::EarlyStopped);
            }
            let limit = self.config.max_steps.is_some_and(|m| self.state.step >= m);
            if self.state.epoch < self.config.epochs && (self.stopping() || limit) {
                return Ok(Outcome::Stopped);
            }
        }
        Ok(Outcome::Finished)
    }

    /// The pending figures for a checkpoint: in a data-parallel run, summed over the replicas
    /// (every replica freezes at the same step).
    fn freeze(&mut self, pending: &Pending, device: &crate::core::Device) -> Result<Unread> {
        let mut u = pending.freeze()?;
        if self.collective.is_some() {
            let mut values: Vec<f64> = (u.bits.iter())
                .map(|(_, b)| f64::from(f32::from_bits(*b)))
                .collect();
            self.sum_replicas(&mut u.samples, &mut values, device)?;
            for ((_, b), s) in u.bits.iter_mut().zip(values) {
                *b = (s as f32).to_bits();
            }
        }
        Ok(u)
    }

    /// In a data-parallel run, replaces `samples` and `values` by their sums over the
    /// replicas (one collective call); alone, leaves them as they are.
    fn sum_replicas(
        &mut self,
        samples: &mut u64,
        values: &mut [f64],
        device: &crate::core::Device,
    ) -> Result<()> {
        let Some(c) = &mut self.collective else {
            return Ok(());
        };
        let mine: Vec<f64> = std::iter::once(*samples as f64)
            .chain(values.iter().copied())
            .collect();
        let all = dist::sum_values(&mut **c, &mine, device)?;
        *samples = all[0] as u64;
        values.copy_from_slice(&all[1..]);
        Ok(())
    }

    /// Reads the pending figures, adds them to the epoch's and reports a step line.
    fn read(
        &mut self,
        pending: &mut Pending,
        epoch: usize,
        lr: f64,
        device: &crate::core::Device,
    ) -> Result<()> {
        // The steps only queued work on an asynchronous device: the wait for it (and for the
        // other replicas) happens here, so it counts in the figures' time too.
        let started = Instant::now();
        let mut values: Vec<(String, f64)> = pending
            .read()?
            .into_iter()
            .map(|(n, v)| (n, v as f64))
            .collect();
        let mut samples = pending.samples;
        if self.collective.is_some() {
            // One sum for the samples, the stop flags and every figure.
            let stop = self.stop.load(Ordering::SeqCst);
            let mut sums: Vec<f64> = std::iter::once(f64::from(u8::from(stop)))
                .chain(values.iter().map(|v| v.1))
                .collect();
            self.sum_replicas(&mut samples, &mut sums, device)?;
            self.stop_seen = sums[0] > 0.0;
            for (v, s) in values.iter_mut().zip(&sums[1..]) {
                v.1 = *s;
            }
        }
        let group = Sums {
            samples,
            sums: values.into_iter().collect(),
            seconds: pending.seconds + started.elapsed().as_secs_f64(),
        };
        self.state.epoch_sums.add(&group);
        let line = StepLine {
            step: self.state.step,
            epoch,
            metrics: group.means(""),
            lr,
            samples_per_sec: group.samples as f64 / group.seconds.max(1e-9),
            step_ms: 1e3 * group.seconds / pending.steps.max(1) as f64,
            memory_bytes: device.backend().allocated_bytes(),
        };
        *pending = Pending::new();
        self.emit(Event::Step(&line))
    }

    /// Runs `step` over `valid` in evaluation mode and records the means. In a data-parallel
    /// run each replica evaluates its own shard of `valid` and the sums are summed.
    fn evaluate<D: Dataset>(
        &mut self,
        valid: &DataLoader<D>,
        step: &mut impl FnMut(&mut M, &D::Batch) -> Result<Output>,
        epoch: usize,
        device: &crate::core::Device,
    ) -> Result<()> {
        self.model.set_training(false);
        let result = (|| {
            let mut pending = Pending::new();
            for batch in valid.epoch(0, 0) {
                let batch = batch?;
                let out = no_grad(|| step(&mut self.model, &batch))?;
                pending.add(&out)?;
            }
            let (names, mut sums): (Vec<String>, Vec<f64>) = (pending.read()?.into_iter())
                .map(|(n, v)| (n, v as f64))
                .unzip();
            let mut samples = pending.samples;
            self.sum_replicas(&mut samples, &mut sums, device)?;
            let sums = Sums {
                samples,
                sums: names.into_iter().zip(sums).collect(),
                seconds: 0.0,
            };
            Ok::<_, Error>(sums.means(&format!("{}_", self.config.valid_name)))
        })();
        self.model.set_training(true);
        let metrics = result?;
        self.track_best(&metrics)?;
        self.state.last_eval_step = Some(self.state.step);
        self.state.last_eval = metrics.clone();
        let sample = match &mut self.sampler {
            Some(f) => Some(f(&mut self.model)?),
            None => None,
        };
        let line = EvalLine {
            step: self.state.step,
            epoch,
            metrics,
            sample,
        };
        self.emit(Event::Eval(&line))
    }

    fn track_best(&mut self, metrics: &Metrics) -> Result<()> {
        let Some(es) = &self.config.early_stop else {
            return Ok(());
        };
        let name = format!("{}_{}", self.config.valid_name, es.metric);
        let value = *metrics.get(&name).ok_or_else(|| {
            Error::invalid(
                "early stop",
                format!(
                    "expected the metric {name}, found {}",
                    metrics.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            )
        })?;
        let better = match self.state.best {
            None => true,
            Some(b) if es.maximize => value > b + es.min_delta,
            Some(b) => value < b - es.min_delta,
        };
        if better {
            self.state.best = Some(value);
            self.state.stale = 0;
        } else {
            self.state.stale += 1;
        }
        Ok(())
    }

    /// Whether to stop at this step: this learner's flag, or in a data-parallel run any
    /// replica's flag as of the last read (so that all stop at the same step).
    fn stopping(&self) -> bool {
        match self.collective {
            Some(_) => self.stop_seen,
            None => self.stop.load(Ordering::SeqCst),
        }
    }

    fn stale_too_long(&self) -> bool {
        self.config
            .early_stop
            .as_ref()
            .is_some_and(|es| self.state.stale >= es.patience.max(1))
    }
}

/// `a + b` for every trainable parameter of `model` with a gradient in either.
fn add_grads(model: &dyn Module, mut a: Gradients, b: Gradients) -> Result<Gradients> {
    let mut params = Vec::new();
    model.visit(&mut |_, p| {
        if p.is_trainable() {
            params.push(p.tensor());
        }
    });
    no_grad(|| {
        for p in &params {
            let sum = match (a.get(p), b.get(p)) {
                (Some(x), Some(y)) => x.add(y)?,
                (None, Some(y)) => y.clone(),
                _ => continue,
            };
            a.insert(p, sum);
        }
        Ok(a)
    })
}

/// The checkpoints in `dir` by step, oldest first (temporary files of unfinished writes are
/// left out).
pub fn checkpoints(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(Error::io(
                "checkpoint",
                format!("cannot list {}: {e}", dir.display()),
            ));
        }
    };
    let mut found: Vec<(u64, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let step = name
                .strip_prefix("step-")?
                .strip_suffix(".safetensors")?
                .parse()
                .ok()?;
            Some((step, e.path()))
        })
        .collect();
    found.sort();
    Ok(found)
}

/// The newest checkpoint in `dir`, if any.
pub fn latest_checkpoint(dir: &Path) -> Result<Option<PathBuf>> {
    Ok(checkpoints(dir)?.pop().map(|(_, p)| p))
}
