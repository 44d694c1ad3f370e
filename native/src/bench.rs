//! `kiln bench`: throughput figures (printed, never asserted).

use crate::core::Result;
use crate::core::nn::{Forward, Init, loss};
use crate::core::optim::{Adam, Optimizer};
use crate::core::{Device, Tensor};
use crate::data::mnist::Mnist;
use crate::data::mnist::batch;
use crate::models::MnistCnn;
use crate::models::gpt::{Gpt, Sampling, choose, generate};
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
    /// Of [`BenchResult::seconds_per_step`], the host's time to issue one step (the recording,
    /// launches and library calls before the final wait). Near the whole step, the host bounds
    /// the rate; well under it, the device does.
    pub issue_seconds_per_step: f64,
}

/// Times `steps` full training steps (forward, cross-entropy, backward, Adam,
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
    let mut model = MnistCnn::new(&mut Init::new(device, 0))?;
    let mut adam = Adam::new(1e-3);
    let mut optimize = |x: &Tensor, y: &Tensor| -> Result<()> {
        let loss = loss::cross_entropy(&model.forward(x)?, y, 0.0)?;
        let grads = loss.backward()?;
        adam.step(&mut model, &grads)
    };
    let n = data.train.len().max(1);
    let batches = (0..WARMUP + steps)
        .map(|s| {
            let idx: Vec<usize> = (0..batch_size).map(|i| (s * batch_size + i) % n).collect();
            batch(&data.train, &idx, device)
        })
        .collect::<Result<Vec<_>>>()?;
    let (warmup, timed) = batches.split_at(WARMUP);
    for (x, y) in warmup {
        optimize(x, y)?;
    }
    device.backend().synchronize()?;
    let start = Instant::now();
    for (x, y) in timed {
        optimize(x, y)?;
    }
    let issued = start.elapsed().as_secs_f64();
    device.backend().synchronize()?;
    let secs = start.elapsed().as_secs_f64();
    Ok(BenchResult {
        seconds_per_step: secs / steps.max(1) as f64,
        images_per_sec: (steps * batch_size) as f64 / secs.max(1e-9),
        issue_seconds_per_step: issued / steps.max(1) as f64,
    })
}

/// Timings of [`onnx`], in milliseconds per run.
#[derive(Clone, Copy, Debug)]
pub struct Latency {
    /// Median of the timed runs.
    pub median_ms: f64,
    /// Fastest run.
    pub min_ms: f64,
    /// Slowest run.
    pub max_ms: f64,
}

/// Runs `model` on `x` 3 times to warm up, then `runs` times, each until its outputs are read
/// back to the host (so a GPU's queue is drained).
pub fn onnx(
    model: &crate::onnx::OnnxModel,
    x: &crate::core::Tensor,
    runs: usize,
) -> Result<Latency> {
    let once = || -> Result<f64> {
        let start = Instant::now();
        for y in model.run(std::slice::from_ref(x))? {
            y.to_data()?;
        }
        Ok(start.elapsed().as_secs_f64() * 1e3)
    };
    for _ in 0..3 {
        once()?;
    }
    let mut ms = (0..runs).map(|_| once()).collect::<Result<Vec<f64>>>()?;
    ms.sort_by(f64::total_cmp);
    Ok(Latency {
        median_ms: ms[ms.len() / 2],
        min_ms: ms[0],
        max_ms: ms[ms.len() - 1],
    })
}

/// Mean per-token generation time over positions `from..to`, in ms.
#[derive(Clone, Copy, Debug)]
pub struct GenerationBucket {
    /// First position of the bucket.
    pub from: usize,
    /// One past its last position.
    pub to: usize,
    /// With the KV cache: one position through the model per token.
    pub cached_ms: f64,
    /// Without a cache: the whole sequence through the model for every token.
    pub recompute_ms: f64,
}

/// Per-token time of greedy generation at batch 1, by position (buckets of `bucket`), with
/// the KV cache and by recomputing the whole sequence each token; `tokens` stays within the
/// context, so the cache is never rebuilt.
pub fn generation(model: &Gpt, tokens: usize, bucket: usize) -> Result<Vec<GenerationBucket>> {
    let tokens = tokens.min(model.config.context - 1);
    let greedy = Sampling {
        temperature: 0.0,
        top_k: None,
        seed: 0,
    };
    // Warm-up: kernels compiled, buffers pooled.
    generate(model, &[0], 4.min(tokens), &greedy, |_| Ok(()))?;
    let mut cached = Vec::with_capacity(tokens);
    let mut last = Instant::now();
    generate(model, &[0], tokens, &greedy, |_| {
        cached.push(last.elapsed().as_secs_f64());
        last = Instant::now();
        Ok(())
    })?;
    let device = model.tok.weight.tensor().device().clone();
    let mut seq = vec![0i32];
    let mut recompute = Vec::with_capacity(tokens);
    for _ in 0..tokens {
        let start = Instant::now();
        let n = seq.len();
        let ids = Tensor::from_vec(seq.clone(), [1, n], &device)?;
        let logits = crate::core::autodiff::no_grad(|| model.forward(&ids))?;
        let last = logits.narrow(1, n - 1, 1)?.to_vec::<f32>()?;
        seq.push(choose(&last, &greedy, 0.0) as i32);
        recompute.push(start.elapsed().as_secs_f64());
    }
    let bucket = bucket.max(1);
    Ok((0..tokens)
        .step_by(bucket)
        .map(|from| {
            let to = (from + bucket).min(tokens);
            let mean = |v: &[f64]| 1e3 * v[from..to].iter().sum::<f64>() / (to - from) as f64;
            GenerationBucket {
                from: from + 1,
                to: to + 1,
                cached_ms: mean(&cached),
                recompute_ms: mean(&recompute),
            }
        })
        .collect())
}

/// [`fusion`]'s figures: GELU composed from tensor ops, fused and not, and a device copy of
/// the same bytes, each in ms per GELU (or copy).
#[derive(Clone, Copy, Debug)]
pub struct FusionBench {
    /// Through the fusion decorator: one generated kernel.
    pub fused: Timing,
    /// On the same device unwrapped: one kernel per op.
    pub unfused: Timing,
    /// `Op::Contiguous` of an `n`-element slice at offset 4 of a longer buffer: a plain copy
    /// kernel reading and writing the same bytes as GELU (unfused device).
    pub copy: Timing,
    /// The largest difference between the fused and the unfused result.
    pub max_diff: f64,
}

/// One row of [`FusionBench`].
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// One run between two waits for the device: the host's work before the launch counts.
    pub alone: Latency,
    /// [`STREAMED`] runs between two waits, per run: the host works while the device does,
    /// so this is nearer the kernels' own time.
    pub streamed: Latency,
    /// Of [`Timing::streamed`], the host's time per run before the wait (median, ms): the
    /// launches, or for fused runs the recording, which no kernel overlaps until the wait.
    pub issue_ms: f64,
}

impl Timing {
    /// Both ways of timing, each with its name: `alone` then `streamed`.
    pub fn modes(&self) -> [(&'static str, Latency); 2] {
        [("alone", self.alone), ("streamed", self.streamed)]
    }
}

/// Runs per wait in [`Timing::streamed`].
pub const STREAMED: usize = 10;

/// GELU written as `x * ((x / sqrt 2).erf() + 1) / 2`: 5 elementwise tensor ops and 3 scalar
/// constants (8 backend ops unfused).
pub fn composed_gelu(x: &Tensor) -> Result<Tensor> {
    x.mul(
        &x.div_scalar(std::f64::consts::SQRT_2)?
            .erf()?
            .add_scalar(1.0)?,
    )?
    .div_scalar(2.0)
}

/// Times composed GELU on `n` f32 elements on `device` (a device from
/// [`crate::device::select_unfused`]) fused and unfused, and a device copy of the same bytes:
/// 3 warm-up runs then `runs` timed ones, each waited for with `synchronize`, alone and
/// [`STREAMED`] at a time.
pub fn fusion(device: &Device, n: usize, runs: usize) -> Result<FusionBench> {
    use crate::core::{DType, Op};
    let fused_device = kiln_kernels::fusion::wrap(device);
    let time = |dev: &Device, f: &dyn Fn() -> Result<Tensor>| -> Result<Timing> {
        // ms per run: in all, and before the wait
        let once = |reps: usize| -> Result<(f64, f64)> {
            dev.backend().synchronize()?;
            let start = Instant::now();
            // the outputs stay alive until the work is done (a dropped lazy never runs)
            let ys = (0..reps).map(|_| f()).collect::<Result<Vec<Tensor>>>()?;
            let issued = start.elapsed();
            dev.backend().synchronize()?;
            let per_run = |d: std::time::Duration| d.as_secs_f64() * 1e3 / reps as f64;
            let ms = (per_run(start.elapsed()), per_run(issued));
            drop(ys);
            Ok(ms)
        };
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let latency = |reps: usize| -> Result<(Latency, f64)> {
            for _ in 0..3 {
                once(reps)?;
            }
            let (mut ms, mut issue): (Vec<f64>, Vec<f64>) = (0..runs.max(1))
                .map(|_| once(reps))
                .collect::<Result<Vec<_>>>()?
                .into_iter()
                .unzip();
            let latency = Latency {
                median_ms: median(&mut ms),
                min_ms: ms[0],
                max_ms: ms[ms.len() - 1],
            };
            Ok((latency, median(&mut issue)))
        };
        let (streamed, issue_ms) = latency(STREAMED)?;
        Ok(Timing {
            alone: latency(1)?.0,
            streamed,
            issue_ms,
        })
    };
    let x = Tensor::rand_uniform([n], -3.0, 3.0, 0, DType::F32, device)?;
    // the same buffer seen by the fused device (uploads and real buffers pass through)
    let xf = Tensor::from_data(&x.to_data()?, &fused_device)?;
    let fused = time(&fused_device, &|| composed_gelu(&xf))?;
    let unfused = time(device, &|| composed_gelu(&x))?;
    let long = Tensor::rand_uniform([n + 4], -3.0, 3.0, 1, DType::F32, device)?;
    let slice = long.narrow(0, 4, n)?;
    let copy = time(device, &|| Tensor::apply(Op::Contiguous, &[&slice]))?;
    let a = composed_gelu(&xf)?.to_vec::<f32>()?;
    let b = composed_gelu(&x)?.to_vec::<f32>()?;
    let max_diff = a
        .iter()
        .zip(&b)
        .map(|(a, b)| f64::from((a - b).abs()))
        .fold(0.0, f64::max);
    Ok(FusionBench {
        fused,
        unfused,
        copy,
        max_diff,
    })
}
