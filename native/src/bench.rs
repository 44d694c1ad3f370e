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

impl Latency {
    /// The median, fastest and slowest of `ms` (sorted in place; at least one sample).
    fn of(ms: &mut [f64]) -> Latency {
        ms.sort_by(f64::total_cmp);
        Latency {
            median_ms: ms[ms.len() / 2],
            min_ms: ms[0],
            max_ms: ms[ms.len() - 1],
        }
    }
}

/// Runs `model` on `x` 3 times to warm up, then `runs` times (at least once), each until its
/// outputs are read back to the host (so a GPU's queue is drained).
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
    let mut ms = (0..runs.max(1))
        .map(|_| once())
        .collect::<Result<Vec<f64>>>()?;
    Ok(Latency::of(&mut ms))
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
    let x = Tensor::rand_uniform([n], -3.0, 3.0, 0, DType::F32, device)?;
    // the same buffer seen by the fused device (uploads and real buffers pass through)
    let xf = Tensor::from_data(&x.to_data()?, &fused_device)?;
    let fused = time(&fused_device, runs, &|| Ok(vec![composed_gelu(&xf)?]))?;
    let unfused = time(device, runs, &|| Ok(vec![composed_gelu(&x)?]))?;
    let long = Tensor::rand_uniform([n + 4], -3.0, 3.0, 1, DType::F32, device)?;
    let slice = long.narrow(0, 4, n)?;
    let copy = time(device, runs, &|| {
        Ok(vec![Tensor::apply(Op::Contiguous, &[&slice])?])
    })?;
    Ok(FusionBench {
        fused,
        unfused,
        copy,
        max_diff: max_diff(&[composed_gelu(&xf)?], &[composed_gelu(&x)?])?,
    })
}

/// Times `f` (whose outputs are all kept until the wait: a dropped lazy never runs) on `dev`:
/// 3 warm-up runs then `runs` timed ones, each waited for with `synchronize`, alone and
/// [`STREAMED`] at a time.
fn time(dev: &Device, runs: usize, f: &dyn Fn() -> Result<Vec<Tensor>>) -> Result<Timing> {
    // ms per run: in all, and before the wait
    let once = |reps: usize| -> Result<(f64, f64)> {
        dev.backend().synchronize()?;
        let start = Instant::now();
        let ys = (0..reps).map(|_| f()).collect::<Result<Vec<_>>>()?;
        let issued = start.elapsed();
        dev.backend().synchronize()?;
        let per_run = |d: std::time::Duration| d.as_secs_f64() * 1e3 / reps as f64;
        let ms = (per_run(start.elapsed()), per_run(issued));
        drop(ys);
        Ok(ms)
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
        Ok((Latency::of(&mut ms), Latency::of(&mut issue).median_ms))
    };
    let (streamed, issue_ms) = latency(STREAMED)?;
    Ok(Timing {
        alone: latency(1)?.0,
        streamed,
        issue_ms,
    })
}

/// One row of [`composites`]: an op that has a kernel of its own, against the same computation
/// written with elementwise ops and reductions (which the fusion decorator turns into generated
/// kernels), on the same inputs.
#[derive(Clone, Debug)]
pub struct CompositeBench {
    /// The op and its input shape.
    pub name: String,
    /// The op's own kernel, through the fusion decorator (which passes it through).
    pub primitive: Timing,
    /// The composition through the fusion decorator.
    pub fused: Timing,
    /// The composition on the device unwrapped: one kernel per op.
    pub unfused: Timing,
    /// The largest difference between the primitive's and the fused composition's outputs.
    pub max_diff: f64,
}

/// Times softmax, log-softmax and normalization over the rows of a `[rows, cols]` f32 tensor,
/// and an Adam step of `rows * cols` parameters, each as its own op and composed from
/// elementwise ops and reductions, fused and unfused (see [`CompositeBench`]): whether fusion
/// makes the op's own kernel redundant.
pub fn composites(
    device: &Device,
    rows: usize,
    cols: usize,
    runs: usize,
) -> Result<Vec<CompositeBench>> {
    use crate::core::{AdamParams, DType, Op};
    let fused_device = kiln_kernels::fusion::wrap(device);
    let adam = AdamParams {
        lr: 1e-3,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
        decoupled: false,
        step: 3,
    };
    // `(primitive, composed)` of inputs on one device
    type Pair = (
        fn(&[Tensor], &AdamParams) -> Result<Vec<Tensor>>,
        fn(&[Tensor], &AdamParams) -> Result<Vec<Tensor>>,
    );
    let softmax: Pair = (
        |x, _| Ok(vec![x[0].softmax(-1)?]),
        |x, _| {
            let e = x[0].sub(&x[0].max(&[-1], true)?)?.exp()?;
            Ok(vec![e.div(&e.sum(&[-1], true)?)?])
        },
    );
    let log_softmax: Pair = (
        |x, _| Ok(vec![x[0].log_softmax(-1)?]),
        |x, _| {
            let shifted = x[0].sub(&x[0].max(&[-1], true)?)?;
            Ok(vec![shifted.sub(&shifted.exp()?.sum(&[-1], true)?.log()?)?])
        },
    );
    let normalize: Pair = (
        |x, _| Ok(vec![x[0].normalize(1e-5)?]),
        |x, _| {
            let centred = x[0].sub(&x[0].mean(&[-1], true)?)?;
            let var = centred.mul(&centred)?.mean(&[-1], true)?;
            Ok(vec![centred.div(&var.add_scalar(1e-5)?.sqrt()?)?])
        },
    );
    let adam_step: Pair = (
        |x, p| {
            let ins: Vec<&Tensor> = x.iter().collect();
            Tensor::apply_many(Op::AdamStep(*p), &ins, Some(2))
        },
        |x, p| {
            let (step_size, inv_sqrt_bc2) = p.corrections();
            let [w, g, m, v] = [&x[0], &x[1], &x[2], &x[3]];
            let m = m.mul_scalar(p.beta1)?.add(&g.mul_scalar(1.0 - p.beta1)?)?;
            let v = v
                .mul_scalar(p.beta2)?
                .add(&g.mul(g)?.mul_scalar(1.0 - p.beta2)?)?;
            let denom = v.sqrt()?.mul_scalar(inv_sqrt_bc2)?.add_scalar(p.eps)?;
            let w = w.sub(&m.div(&denom)?.mul_scalar(step_size)?)?;
            Ok(vec![w, m, v])
        },
    );
    let shape = [rows, cols];
    let rand = |seed: u64, low: f64, high: f64| {
        Tensor::rand_uniform(shape, low, high, seed, DType::F32, device)
    };
    let rows_in = vec![rand(0, -4.0, 4.0)?];
    let adam_in = vec![
        rand(1, -1.0, 1.0)?,
        rand(2, -1.0, 1.0)?,
        rand(3, -0.1, 0.1)?,
        rand(4, 0.0, 0.01)?,
    ];
    let cases: [(&str, Pair, &Vec<Tensor>); 4] = [
        ("softmax", softmax, &rows_in),
        ("log_softmax", log_softmax, &rows_in),
        ("normalize", normalize, &rows_in),
        ("adam_step", adam_step, &adam_in),
    ];
    let mut out = Vec::new();
    for (name, (primitive, composed), inputs) in cases {
        // the same buffers seen by the fused device (uploads and real buffers pass through)
        let on_fused = (inputs.iter())
            .map(|t| Tensor::from_data(&t.to_data()?, &fused_device))
            .collect::<Result<Vec<_>>>()?;
        let p = &adam;
        let row = CompositeBench {
            name: format!("{name} {rows}x{cols}"),
            primitive: time(&fused_device, runs, &|| primitive(&on_fused, p))?,
            fused: time(&fused_device, runs, &|| composed(&on_fused, p))?,
            unfused: time(device, runs, &|| composed(inputs, p))?,
            max_diff: max_diff(&primitive(&on_fused, p)?, &composed(&on_fused, p)?)?,
        };
        out.push(row);
    }
    Ok(out)
}

/// The largest elementwise difference between two lists of outputs (Adam's moments come
/// stacked from its op, one after the other from the composition: both are compared flat).
fn max_diff(a: &[Tensor], b: &[Tensor]) -> Result<f64> {
    let flat = |ts: &[Tensor]| -> Result<Vec<f32>> {
        let mut v = Vec::new();
        for t in ts {
            v.extend(t.to_vec::<f32>()?);
        }
        Ok(v)
    };
    let (a, b) = (flat(a)?, flat(b)?);
    if a.len() != b.len() {
        return Err(crate::core::Error::shape(
            "bench",
            format!("outputs of {} and {} elements compared", a.len(), b.len()),
        ));
    }
    Ok(a.iter()
        .zip(&b)
        .map(|(a, b)| f64::from((a - b).abs()))
        .fold(0.0, f64::max))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each composition computes what its op does (odd shapes, through the fusion decorator over
    /// the CPU): a wrong formula in the bench would compare unlike things.
    #[test]
    fn compositions_match_the_ops_they_stand_for() {
        let rows = composites(&Device::cpu(), 37, 29, 1).unwrap();
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "softmax 37x29",
                "log_softmax 37x29",
                "normalize 37x29",
                "adam_step 37x29"
            ]
        );
        for r in rows {
            assert!(r.max_diff < 1e-5, "{}: max |diff| {}", r.name, r.max_diff);
        }
    }
}
