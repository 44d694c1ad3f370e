//! `kiln bench`: throughput figures (printed, never asserted).

use crate::core::Device;
use crate::core::Result;
use crate::data::mnist::Mnist;
use crate::train::{TrainConfig, Trainer, batch};
use std::time::Instant;

/// Warm-up steps not counted (first-touch allocations, thread pools).
const WARMUP: usize = 2;

/// Training throughput.
#[derive(Clone, Copy, Debug)]
pub struct BenchResult {
    /// Mean wall time of one training step.
    pub seconds_per_step: f64,
    /// Training images per second.
    pub images_per_sec: f64,
}

/// Times `steps` full training steps (forward, loss, backward, Adam: [`Trainer::optimize`],
/// without the accuracy and loss bookkeeping that the peers' loops leave out too) of the MNIST CNN on
/// consecutive training batches of `batch_size`, after a short warm-up. The batches are on the
/// device before the clock starts, as in the peer scripts (PyTorch indexes a dataset already
/// on the GPU): a host-to-device copy of pageable memory would wait for the GPU each step.
pub fn train_mnist(
    data: &Mnist,
    device: &Device,
    batch_size: usize,
    steps: usize,
) -> Result<BenchResult> {
    // The peer scripts in tests/bench/ time the same net without dropout.
    let cfg = TrainConfig {
        batch_size,
        dropout: false,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(&cfg, device)?;
    let n = data.train.len().max(1);
    let batches = (0..WARMUP + steps)
        .map(|s| {
            let idx: Vec<usize> = (0..batch_size).map(|i| (s * batch_size + i) % n).collect();
            batch(&data.train, &idx, device)
        })
        .collect::<Result<Vec<_>>>()?;
    let (warmup, timed) = batches.split_at(WARMUP);
    for (x, y) in warmup {
        trainer.optimize(x, y)?;
    }
    device.backend().synchronize()?;
    let start = Instant::now();
    for (x, y) in timed {
        trainer.optimize(x, y)?;
    }
    device.backend().synchronize()?;
    let secs = start.elapsed().as_secs_f64();
    Ok(BenchResult {
        seconds_per_step: secs / steps.max(1) as f64,
        images_per_sec: (steps * batch_size) as f64 / secs.max(1e-9),
    })
}
