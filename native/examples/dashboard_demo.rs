//! A demo of the terminal dashboard widget ([`kiln::learn::dashboard::Dashboard`]), not of
//! training: it feeds the dashboard about five seconds of synthetic events — three epochs of a
//! made-up run whose loss decays and accuracy rises — then the end of the run, and waits for a
//! key. `q` stops the "run" after the current step, as it would a real one.
//!
//! ```sh
//! cargo run -p kiln --example dashboard_demo
//! ```
//!
//! Without a terminal (stdout piped) it falls back to the console reporter.

use kiln::core::Result;
use kiln::learn::dashboard::Dashboard;
use kiln::learn::report::{
    Console, EpochLine, EvalLine, Event, Metrics, Outcome, Reporter, RunInfo, StepLine, Summary,
};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const EPOCHS: usize = 3;
const BATCHES: usize = 50;
const READ_EVERY: usize = 5;
const BATCH_SIZE: f64 = 64.0;
const BATCH_TIME: Duration = Duration::from_millis(33);

fn metrics(pairs: &[(&str, f64)]) -> Metrics {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// The made-up loss after `step` steps, with a little deterministic wobble.
fn loss(step: u64) -> f64 {
    let s = step as f64;
    2.3 * (-s / 35.0).exp() + 0.08 + 0.04 * (s * 1.7).sin() * (-s / 80.0).exp()
}

fn accuracy(loss: f64) -> f64 {
    (1.0 - loss / 2.5).clamp(0.0, 1.0)
}

/// Emits the synthetic run's events to `r`.
fn run(r: &mut dyn Reporter, stop: &AtomicBool) -> Result<()> {
    let info = RunInfo {
        device: "demo (synthetic events)".into(),
        params: 421_642,
        epochs: EPOCHS,
        batches_per_epoch: BATCHES,
        steps_per_epoch: BATCHES as u64,
        total_steps: (EPOCHS * BATCHES) as u64,
        start_step: 0,
        valid_name: "test".into(),
    };
    r.report(&Event::Start(&info))?;
    let started = Instant::now();
    let mut step = 0u64;
    let mut last_epoch = None;
    let mut last_eval = None;
    let mut checkpoint = None;
    let mut outcome = Outcome::Finished;
    'epochs: for epoch in 1..=EPOCHS {
        let epoch_start = Instant::now();
        let mut epoch_loss = 0.0;
        for done in 1..=BATCHES {
            std::thread::sleep(BATCH_TIME);
            step += 1;
            epoch_loss += loss(step);
            r.report(&Event::Batch {
                epoch,
                done,
                of: BATCHES,
                step,
            })?;
            if done % READ_EVERY == 0 {
                let l = loss(step);
                let lr = 1e-3 * 0.5 * (1.0 + (std::f64::consts::PI * step as f64 / 150.0).cos());
                r.report(&Event::Step(&StepLine {
                    step,
                    epoch,
                    metrics: metrics(&[("loss", l), ("acc", accuracy(l))]),
                    lr,
                    samples_per_sec: BATCH_SIZE / BATCH_TIME.as_secs_f64(),
                    step_ms: BATCH_TIME.as_secs_f64() * 1000.0,
                    memory_bytes: Some(48 * 1024 * 1024 + step * 4096),
                }))?;
            }
            if stop.load(Ordering::SeqCst) {
                // As the learner does: a checkpoint of this step, then the end.
                let path = PathBuf::from(format!("demo-checkpoints/step-{step}.safetensors"));
                r.report(&Event::Checkpoint(&path))?;
                checkpoint = Some(path);
                outcome = Outcome::Stopped;
                break 'epochs;
            }
        }
        let valid = loss(step) * 1.15 + 0.02;
        let eval = EvalLine {
            step,
            epoch,
            metrics: metrics(&[("test_loss", valid), ("test_acc", accuracy(valid))]),
            sample: None,
        };
        r.report(&Event::Eval(&eval))?;
        let train = epoch_loss / BATCHES as f64;
        let line = EpochLine {
            epoch,
            metrics: metrics(&[
                ("train_loss", train),
                ("train_acc", accuracy(train)),
                ("test_loss", valid),
                ("test_acc", accuracy(valid)),
            ]),
            samples_per_sec: BATCH_SIZE * BATCHES as f64 / epoch_start.elapsed().as_secs_f64(),
            seconds: epoch_start.elapsed().as_secs_f64(),
        };
        r.report(&Event::Epoch(&line))?;
        let path = PathBuf::from(format!("demo-checkpoints/step-{step}.safetensors"));
        r.report(&Event::Checkpoint(&path))?;
        checkpoint = Some(path);
        last_epoch = Some(line);
        last_eval = Some(eval);
    }
    r.report(&Event::Finish(&Summary {
        outcome,
        steps: step,
        seconds: started.elapsed().as_secs_f64(),
        last_epoch,
        last_eval,
        checkpoint,
    }))
}

fn main() -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    match Dashboard::new(stop.clone()) {
        Ok(mut dashboard) => {
            let r = run(&mut dashboard, &stop);
            // Shows the summary until a key is pressed, then restores the terminal.
            dashboard.wait()?;
            r
        }
        Err(e) => {
            eprintln!("{e}; falling back to the console");
            run(&mut Console::new(), &stop)
        }
    }
}
