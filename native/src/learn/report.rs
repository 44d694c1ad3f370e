//! What a training run reports and where it goes: the [`Event`]s a [`Learner`](super::Learner)
//! emits, the JSON-lines log ([`JsonLines`], read back by [`Log::read`]) and the console
//! ([`Console`]: a progress bar on a terminal, plain lines otherwise). The terminal dashboard
//! is another [`Reporter`] (`super::dashboard`).
//!
//! # The log
//!
//! One JSON object per line, of three kinds told apart by their keys:
//!
//! - a **step line** ([`StepLine`]) at every read of the running figures (every
//!   `read_every` batches and at the end of each epoch), covering the batches since the
//!   previous one: `{"step":320,"epoch":1,"loss":0.1234,"acc":0.9612,"lr":0.00099,
//!   "samples_per_sec":5210.0,"step_ms":12.3,"memory_bytes":1048576}`. `step` counts optimizer
//!   steps in total, `epoch` is 1-based, the metrics are means over the samples of those
//!   batches, `lr` is the last step's learning rate, `memory_bytes` the device memory held
//!   (absent where the backend does not say);
//! - an **evaluation line** ([`EvalLine`]), `step` and `epoch` and the validation metrics
//!   prefixed by the validation set's name: `{"step":938,"epoch":1,"test_loss":0.05,"test_acc":0.98}`,
//!   and `"sample"` (a string) where the learner has a sampler;
//! - an **epoch line** ([`EpochLine`]), no `step`: `{"epoch":1,"train_loss":0.15,
//!   "train_acc":0.95,"test_loss":0.05,"test_acc":0.98,"samples_per_sec":5100.0,"seconds":11.8}`.
//!
//! Step lines have `lr`; evaluation lines do not. A fresh run starts a fresh log; a resumed
//! run appends to it.

use crate::core::{Error, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

/// Metric means by name (`loss`, `acc`, or prefixed: `train_loss`, `test_acc`).
pub type Metrics = BTreeMap<String, f64>;

/// The figures of the batches since the previous step line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepLine {
    /// Optimizer steps done in total.
    pub step: u64,
    /// 1-based epoch.
    pub epoch: usize,
    /// Means over the samples of those batches.
    #[serde(flatten)]
    pub metrics: Metrics,
    /// Learning rate of the last of those steps.
    pub lr: f64,
    /// Training samples per second over those batches.
    pub samples_per_sec: f64,
    /// Mean wall time of one optimizer step over those batches, in milliseconds.
    pub step_ms: f64,
    /// Device memory held by the backend, where it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
}

/// The figures of one evaluation on the validation set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalLine {
    /// Optimizer steps done when it ran.
    pub step: u64,
    /// 1-based epoch it ran in.
    pub epoch: usize,
    /// Means over the validation set, named `<valid name>_<metric>`.
    #[serde(flatten)]
    pub metrics: Metrics,
    /// What the learner's sampler made of the model (a language model's generated text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<String>,
}

/// One epoch's figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpochLine {
    /// 1-based epoch.
    pub epoch: usize,
    /// `train_<metric>` means over the epoch (while the weights changed) and the last
    /// evaluation's `<valid name>_<metric>`.
    #[serde(flatten)]
    pub metrics: Metrics,
    /// Training samples per second over the epoch.
    pub samples_per_sec: f64,
    /// Wall time of the epoch's training batches.
    pub seconds: f64,
}

impl EpochLine {
    /// The metric `name` (`"train_loss"`), if the line has it.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.metrics.get(name).copied()
    }
}

/// One line of the log.
#[derive(Clone, Debug, PartialEq)]
pub enum LogLine {
    /// A read of the running training figures.
    Step(StepLine),
    /// An evaluation.
    Eval(EvalLine),
    /// The end of an epoch.
    Epoch(EpochLine),
}

impl LogLine {
    /// Reads one line of the log, telling the kinds apart by their keys.
    pub fn parse(line: &str) -> Result<LogLine> {
        let bad = |e: String| {
            Error::format(
                "log",
                format!("expected a step, evaluation or epoch line, found {line:?} ({e})"),
            )
        };
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        let has = |k: &str| value.get(k).is_some();
        let parsed = if !has("step") {
            serde_json::from_value(value).map(LogLine::Epoch)
        } else if has("lr") {
            serde_json::from_value(value).map(LogLine::Step)
        } else {
            serde_json::from_value(value).map(LogLine::Eval)
        };
        parsed.map_err(|e| bad(e.to_string()))
    }

    fn to_json(&self) -> Result<String> {
        let r = match self {
            LogLine::Step(l) => serde_json::to_string(l),
            LogLine::Eval(l) => serde_json::to_string(l),
            LogLine::Epoch(l) => serde_json::to_string(l),
        };
        r.map_err(|e| Error::format("log", e.to_string()))
    }
}

/// A training log's lines by kind, each in file order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Log {
    /// The step lines.
    pub steps: Vec<StepLine>,
    /// The evaluation lines.
    pub evals: Vec<EvalLine>,
    /// The epoch lines.
    pub epochs: Vec<EpochLine>,
}

impl Log {
    /// Reads a JSON-lines log; a line of no known kind is an error naming its number.
    pub fn read(path: &Path) -> Result<Log> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io("log", format!("cannot read {}: {e}", path.display())))?;
        let mut log = Log::default();
        for (n, line) in text.lines().enumerate() {
            let line = LogLine::parse(line)
                .map_err(|e| e.context(format!("{} line {}", path.display(), n + 1)))?;
            match line {
                LogLine::Step(l) => log.steps.push(l),
                LogLine::Eval(l) => log.evals.push(l),
                LogLine::Epoch(l) => log.epochs.push(l),
            }
        }
        Ok(log)
    }
}

/// What a run is, told to reporters before its first batch.
#[derive(Clone, Debug, PartialEq)]
pub struct RunInfo {
    /// The device's name.
    pub device: String,
    /// Trainable parameters of the model.
    pub params: usize,
    /// Epochs the run is configured for.
    pub epochs: usize,
    /// Batches per epoch.
    pub batches_per_epoch: usize,
    /// Optimizer steps per epoch (batches / gradient accumulation, rounded up).
    pub steps_per_epoch: u64,
    /// Optimizer steps of the whole run (`max_steps` where it is smaller).
    pub total_steps: u64,
    /// Optimizer steps already done (non-zero when resuming).
    pub start_step: u64,
    /// The validation set's name in metric names (`test` in `test_acc`).
    pub valid_name: String,
}

/// How a run ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every epoch ran.
    Finished,
    /// Stopped by request (Ctrl-C, the dashboard, `max_steps`) after writing a checkpoint.
    Stopped,
    /// The validation metric stopped improving for `patience` evaluations.
    EarlyStopped,
}

/// The end of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// How it ended.
    pub outcome: Outcome,
    /// Optimizer steps done in total.
    pub steps: u64,
    /// Wall time of this process's part of the run.
    pub seconds: f64,
    /// The last epoch line, if an epoch ended.
    pub last_epoch: Option<EpochLine>,
    /// The last evaluation, if one ran.
    pub last_eval: Option<EvalLine>,
    /// The last checkpoint written.
    pub checkpoint: Option<PathBuf>,
}

/// Something that happened in a run, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum Event<'a> {
    /// Before the first batch.
    Start(&'a RunInfo),
    /// After every batch (no figures: nothing is read back from the device).
    Batch {
        /// 1-based epoch.
        epoch: usize,
        /// Batches done in this epoch.
        done: usize,
        /// Batches in an epoch.
        of: usize,
        /// Optimizer steps done in total.
        step: u64,
    },
    /// The running figures were read.
    Step(&'a StepLine),
    /// An evaluation ended.
    Eval(&'a EvalLine),
    /// An epoch ended (after its evaluation).
    Epoch(&'a EpochLine),
    /// A checkpoint was written.
    Checkpoint(&'a Path),
    /// The run ended.
    Finish(&'a Summary),
}

/// Receives a run's events.
pub trait Reporter {
    /// Handles one event; an error stops the run (after its checkpoint).
    fn report(&mut self, event: &Event<'_>) -> Result<()>;
}

/// Appends step, evaluation and epoch lines to a JSON-lines file (a fresh run truncates it).
#[derive(Debug)]
pub struct JsonLines {
    path: PathBuf,
}

impl JsonLines {
    /// A log at `path` (its directory is created when missing).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        JsonLines { path: path.into() }
    }

    fn append(&self, line: &LogLine) -> Result<()> {
        let err = |e: std::io::Error| Error::io("log", format!("{}: {e}", self.path.display()));
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(err)?;
        writeln!(f, "{}", line.to_json()?).map_err(err)
    }
}

impl Reporter for JsonLines {
    fn report(&mut self, event: &Event<'_>) -> Result<()> {
        match event {
            Event::Start(info) => {
                let err =
                    |e: std::io::Error| Error::io("log", format!("{}: {e}", self.path.display()));
                if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(err)?;
                }
                if info.start_step == 0 && self.path.exists() {
                    std::fs::remove_file(&self.path).map_err(err)?;
                }
                Ok(())
            }
            Event::Step(l) => self.append(&LogLine::Step((*l).clone())),
            Event::Eval(l) => self.append(&LogLine::Eval((*l).clone())),
            Event::Epoch(l) => self.append(&LogLine::Epoch((*l).clone())),
            _ => Ok(()),
        }
    }
}

/// Progress on stderr: a bar per epoch on a terminal, a plain line per step line otherwise
/// (CI logs, pipes); an epoch line per epoch and a summary at the end either way.
pub struct Console {
    bar: Option<ProgressBar>,
    tty: bool,
    info: Option<RunInfo>,
}

impl Console {
    /// A bar when stderr is a terminal, plain lines otherwise.
    pub fn new() -> Self {
        Console {
            bar: None,
            tty: std::io::stderr().is_terminal(),
            info: None,
        }
    }
    /// Plain lines even on a terminal.
    pub fn plain() -> Self {
        Console {
            tty: false,
            ..Console::new()
        }
    }

    fn line(&self, text: String) {
        match &self.bar {
            Some(bar) => bar.println(text),
            None => eprintln!("{text}"),
        }
    }
}

impl Default for Console {
    fn default() -> Self {
        Console::new()
    }
}

/// `name value` pairs, 4 decimals.
pub fn format_metrics(m: &Metrics) -> String {
    m.iter()
        .map(|(k, v)| format!("{k} {v:.4}"))
        .collect::<Vec<_>>()
        .join("  ")
}

impl Reporter for Console {
    fn report(&mut self, event: &Event<'_>) -> Result<()> {
        match event {
            Event::Start(info) => {
                self.line(format!(
                    "training {} parameters on {}: {} epochs of {} batches ({} steps){}",
                    info.params,
                    info.device,
                    info.epochs,
                    info.batches_per_epoch,
                    info.total_steps,
                    if info.start_step > 0 {
                        format!(", resuming at step {}", info.start_step)
                    } else {
                        String::new()
                    }
                ));
                self.info = Some((*info).clone());
            }
            Event::Batch {
                epoch, done, of, ..
            } if self.tty => {
                let bar = self.bar.get_or_insert_with(|| {
                    let bar = ProgressBar::new(*of as u64);
                    let style = ProgressStyle::with_template(
                        "{prefix} [{bar:30}] {pos}/{len} {elapsed}<{eta} {msg}",
                    )
                    .map(|s| s.progress_chars("=> "))
                    .unwrap_or_else(|_| ProgressStyle::default_bar());
                    bar.set_style(style);
                    bar
                });
                let epochs = self.info.as_ref().map_or(0, |i| i.epochs);
                bar.set_prefix(format!("epoch {epoch}/{epochs}"));
                bar.set_position(*done as u64);
            }
            Event::Step(l) => {
                let text = format!(
                    "{}  lr {:.3e}  {:.0} samples/s",
                    format_metrics(&l.metrics),
                    l.lr,
                    l.samples_per_sec
                );
                match &self.bar {
                    Some(bar) => bar.set_message(text),
                    None => eprintln!("step {} (epoch {}): {text}", l.step, l.epoch),
                }
            }
            Event::Eval(l) => self.line(format!(
                "step {} evaluation: {}",
                l.step,
                format_metrics(&l.metrics)
            )),
            Event::Epoch(l) => {
                if let Some(bar) = self.bar.take() {
                    bar.finish_and_clear();
                }
                let epochs = self.info.as_ref().map_or(0, |i| i.epochs);
                self.line(format!(
                    "epoch {}/{epochs}: {}  {:.0} samples/s  {:.1}s",
                    l.epoch,
                    format_metrics(&l.metrics),
                    l.samples_per_sec,
                    l.seconds
                ));
            }
            Event::Finish(s) => {
                if let Some(bar) = self.bar.take() {
                    bar.abandon();
                }
                let how = match s.outcome {
                    Outcome::Finished => "finished",
                    Outcome::Stopped => "stopped",
                    Outcome::EarlyStopped => "stopped early (no improvement)",
                };
                let mut text = format!("{how} after {} steps in {:.1}s", s.steps, s.seconds);
                if let Some(e) = &s.last_epoch {
                    text += &format!("; epoch {}: {}", e.epoch, format_metrics(&e.metrics));
                }
                if let Some(c) = &s.checkpoint {
                    text += &format!("; checkpoint {}", c.display());
                }
                self.line(text);
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_line_reads_back_as_itself() {
        let m = |pairs: &[(&str, f64)]| -> Metrics {
            pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        let lines = [
            LogLine::Step(StepLine {
                step: 16,
                epoch: 1,
                metrics: m(&[("loss", 0.5), ("acc", 0.875)]),
                lr: 1e-3,
                samples_per_sec: 900.5,
                step_ms: 3.25,
                memory_bytes: Some(4096),
            }),
            LogLine::Eval(EvalLine {
                step: 20,
                epoch: 1,
                metrics: m(&[("test_loss", 0.25)]),
                sample: Some("ROMEO:\nAy".into()),
            }),
            LogLine::Epoch(EpochLine {
                epoch: 1,
                metrics: m(&[("train_loss", 0.5), ("test_acc", 0.75)]),
                samples_per_sec: 800.0,
                seconds: 1.5,
            }),
        ];
        for line in &lines {
            let json = line.to_json().unwrap();
            assert_eq!(&LogLine::parse(&json).unwrap(), line, "{json}");
        }
        assert!(lines[0].to_json().unwrap().starts_with("{\"step\":16,"));
        for bad in [
            "",
            "{",
            "[1]",
            "{\"step\":\"x\"}",
            "{\"epoch\":1,\"x\":\"y\"}",
        ] {
            let e = LogLine::parse(bad).unwrap_err().to_string();
            assert!(
                e.contains("expected a step, evaluation or epoch line"),
                "{e}"
            );
        }
    }
}
