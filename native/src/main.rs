//! The `kiln` command: train, evaluate and run models natively, benchmark, and serve the demo page.

use clap::{Args, Parser, Subcommand};
use kiln::core::{Error, Result};
use kiln::data::augment::Augment;
use kiln::data::mnist::{self, Mnist};
use kiln::dist::Collective;
use kiln::learn::Learner;
use kiln::learn::dashboard::Dashboard;
use kiln::learn::report::{Console, JsonLines, Outcome};
use kiln::train::TrainConfig;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;

#[derive(Parser)]
#[command(
    name = "kiln",
    version,
    about = "kiln: train, evaluate and serve models natively"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a model.
    Train {
        #[command(subcommand)]
        task: TrainTask,
    },
    /// Evaluate a model file on the MNIST test set; the last line is `accuracy: 0.XXXX`.
    Eval {
        /// A kiln model file, or with --arch a bare safetensors state_dict (e.g. from PyTorch).
        file: PathBuf,
        /// Load the tensors by name into this built-in architecture instead of the file's graph.
        #[arg(long, value_parser = [kiln::models::mnist::ARCH])]
        arch: Option<String>,
        #[command(flatten)]
        common: DataArgs,
    },
    /// Classify a PNG digit (any size; grayscale or colour).
    Predict {
        /// A kiln model file (or a state_dict with --arch).
        file: PathBuf,
        /// The image.
        image: PathBuf,
        /// Load the tensors by name into this built-in architecture instead of the file's graph.
        #[arg(long, value_parser = [kiln::models::mnist::ARCH])]
        arch: Option<String>,
        /// Print the digit, probabilities and logits as JSON.
        #[arg(long)]
        json: bool,
        /// Device to run on.
        #[arg(long, default_value = "cpu")]
        device: String,
    },
    /// Generate text with a GPT model file from `kiln train text`, streaming it to stdout.
    Generate {
        /// The model file.
        file: PathBuf,
        /// The text to continue.
        #[arg(long, default_value = "\n")]
        prompt: String,
        /// Tokens (characters) to generate.
        #[arg(long, default_value_t = 500)]
        tokens: usize,
        /// Softmax temperature; 0 is greedy (deterministic).
        #[arg(long, default_value_t = 0.8)]
        temperature: f64,
        /// Sample among the K most likely tokens only.
        #[arg(long)]
        top_k: Option<usize>,
        /// Seed of the draws.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Device: cpu, wgpu, cuda[:N] or rocm[:N].
        #[arg(long, default_value = "cpu")]
        device: String,
    },
    /// Measure throughput.
    Bench {
        #[command(subcommand)]
        task: BenchTask,
    },
    /// Convert an ONNX model to a kiln model file (one input, batch axis first), then check the
    /// file against the ONNX model on a random input.
    Import {
        /// The `.onnx` file.
        onnx: PathBuf,
        /// The kiln model file to write.
        #[arg(short, long)]
        output: PathBuf,
        /// The input shape to trace with, e.g. `1,3,224,224` (default: the declared shape,
        /// symbolic dimensions as 1).
        #[arg(long, value_delimiter = ',')]
        shape: Option<Vec<usize>>,
    },
    /// Record a kiln model's WebGPU forward for fixed batch sizes into a program file, which a
    /// page runs with `kiln-ml/program` (a few KB of JavaScript, no WebAssembly).
    Compile {
        /// The kiln model file.
        model: PathBuf,
        /// The program file to write (`.kilnprog`).
        #[arg(short, long)]
        output: PathBuf,
        /// The batch sizes to compile, e.g. `1,64` (one variant each; the program runs no other).
        #[arg(long, value_delimiter = ',')]
        batch: Vec<usize>,
    },
    /// Run a model (`.onnx` or a kiln model file) on `.npy` inputs and write `.npy` outputs.
    Run {
        /// The model file.
        file: PathBuf,
        /// An input `.npy` file, once per model input, in order.
        #[arg(long = "input", required = true)]
        inputs: Vec<PathBuf>,
        /// An output `.npy` file, once per model output, in order.
        #[arg(long = "output", required = true)]
        outputs: Vec<PathBuf>,
        /// Device: cpu, wgpu, cuda[:N] or rocm[:N].
        #[arg(long, default_value = "cpu")]
        device: String,
    },
    /// Serve a directory over HTTP (for the demo page), printing its URL.
    Serve {
        /// Directory to serve.
        #[arg(default_value = "www")]
        dir: PathBuf,
        /// Port (0 picks a free one).
        #[arg(long, default_value_t = 8080)]
        port: u16,
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1")]
        host: std::net::IpAddr,
    },
}

#[derive(Args)]
struct DataArgs {
    /// MNIST directory (default: $KILN_MNIST_DIR, else shared/data/mnist in a parent directory).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Device: cpu, wgpu, cuda[:N] or rocm[:N].
    #[arg(long, default_value = "cpu")]
    device: String,
}

#[derive(Subcommand)]
enum TrainTask {
    /// The classic MNIST CNN, Adam 1e-3.
    Mnist(Box<TrainArgs>),
    /// A character-level GPT on a text corpus (Shakespeare by default), validated on held-out
    /// works.
    Text(Box<TextArgs>),
}

#[derive(Args)]
struct TrainArgs {
    #[command(flatten)]
    common: DataArgs,
    /// Passes over the training set.
    #[arg(long, default_value_t = 3)]
    epochs: usize,
    /// Images per step.
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Adam's learning rate (the peak of the cosine schedule).
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// Keep the learning rate constant instead of annealing it to 0 along a cosine.
    #[arg(long)]
    constant_lr: bool,
    /// Seed of the weights, shuffles and dropout.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Train on the first N training images only.
    #[arg(long)]
    limit: Option<usize>,
    /// Dropout (0.25 and 0.5, as PyTorch's example): `--dropout true` turns it on. Off by
    /// default: in 3 epochs it costs accuracy (on an H200, seeds 0-2: 99.03-99.05% with it,
    /// 99.12-99.17% without).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    dropout: bool,
    /// Where the trained model file is written.
    #[arg(long, default_value = "model.safetensors")]
    out: PathBuf,
    #[command(flatten)]
    run: RunArgs,
    /// Augment the training images: `none`, `digits` (the preset for hand-drawn digits), or
    /// key=value settings, e.g. `shift=2,rotate=15,scale=0.1,shear=10,thickness=0.5,elastic=8`
    /// (over the preset when they follow `digits,`). Keys: shift (pixels), rotate and shear
    /// (degrees), scale (relative), thickness (probability of a dilation or erosion), elastic
    /// (alpha) and sigma (pixels) of the elastic distortion; 0 turns a transform off. Pass the same
    /// setting with --resume.
    #[arg(long, default_value = "none", value_name = "SPEC")]
    augment: String,
}

/// The options of every training command: checkpoints, resuming, logging, progress.
#[derive(Args)]
struct RunArgs {
    /// Directory of the checkpoints written after each epoch and on Ctrl-C,
    /// `step-<N>.safetensors` (default: the output file with the extension `.ckpt`).
    #[arg(long, value_name = "DIR")]
    checkpoint_dir: Option<PathBuf>,
    /// Checkpoints kept (older ones are deleted).
    #[arg(long, default_value_t = 3)]
    keep: usize,
    /// Also write a checkpoint every N steps.
    #[arg(long, value_name = "N")]
    checkpoint_every: Option<u64>,
    /// Continue from this checkpoint file, or the newest one in this directory.
    #[arg(long)]
    resume: Option<PathBuf>,
    /// Stop after this many steps in total, with a checkpoint (resume to continue).
    #[arg(long)]
    max_steps: Option<u64>,
    /// Metrics as JSON lines: a line per 16 steps (loss, metrics, learning rate, speed,
    /// memory), per evaluation and per epoch (the format is in kiln::learn::report).
    #[arg(long)]
    log: Option<PathBuf>,
    /// No progress output.
    #[arg(long)]
    quiet: bool,
    /// A full-screen dashboard (live curves, history, ETA) instead of the progress bar; `q`
    /// stops after the current step with a checkpoint. Needs a terminal.
    #[arg(long)]
    tui: bool,
    /// Data-parallel replicas: with `--device cuda`, GPUs 0..N, one process each, summing
    /// gradients through NCCL (builds with the `nccl` feature); with `--device cpu`, N CPU
    /// replicas. Each trains and evaluates on its shard of every epoch with `--batch-size`
    /// examples per step (a global batch of N times that); rank 0 reports and writes
    /// checkpoints and the model.
    #[arg(long, default_value_t = 1, value_name = "N")]
    gpus: usize,
}

#[derive(Args)]
struct TextArgs {
    /// Corpus directory: `*.txt[.gz]` files, one per work (default: $KILN_SHAKESPEARE_DIR,
    /// else shared/data/shakespeare in a parent directory).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Device: cpu, wgpu, cuda[:N] or rocm[:N].
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Works held out for validation (file stems, comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "hamlet_gut,macbeth_gut,tempest_gut"
    )]
    held_out: Vec<String>,
    /// Tokens per window (the model's context).
    #[arg(long, default_value_t = 256)]
    context: usize,
    /// Width of the residual stream.
    #[arg(long, default_value_t = 384)]
    dim: usize,
    /// Transformer blocks.
    #[arg(long, default_value_t = 6)]
    layers: usize,
    /// Attention heads.
    #[arg(long, default_value_t = 6)]
    heads: usize,
    /// Dropout probability.
    #[arg(long, default_value_t = 0.2)]
    dropout: f64,
    /// Time every op (on a GPU a wait after each, so training is slower) and print a table of
    /// the time per step by op at the end, from step 2 on (the first steps compile kernels);
    /// `--profile=shape` by op and input shapes.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "op", value_enum)]
    profile: Option<ProfileBy>,
    /// Windows per step.
    #[arg(long, default_value_t = 64)]
    batch_size: usize,
    /// Peak learning rate (AdamW; linear warm-up, then cosine to a tenth).
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// Warm-up steps.
    #[arg(long, default_value_t = 100)]
    warmup: usize,
    /// Passes over the training text.
    #[arg(long, default_value_t = 1)]
    epochs: usize,
    /// Evaluate on the held-out works (and write a sample) every N steps.
    #[arg(long, default_value_t = 250)]
    eval_every: u64,
    /// Validation windows per evaluation.
    #[arg(long, default_value_t = 128)]
    eval_windows: usize,
    /// Seed of the weights, shuffles and dropout.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Where the trained model file is written.
    #[arg(long, default_value = "gpt.safetensors")]
    out: PathBuf,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum BenchTask {
    /// Training throughput of the MNIST CNN (images/s).
    TrainMnist {
        /// Device: cpu, wgpu, cuda[:N] or rocm[:N].
        #[arg(long, default_value = "cpu")]
        device: String,
        /// Images per step.
        #[arg(long, default_value_t = 64)]
        batch_size: usize,
        /// Timed steps (after 2 warm-up steps).
        #[arg(long, default_value_t = 20)]
        steps: usize,
        /// MNIST directory.
        #[arg(long)]
        data: Option<PathBuf>,
    },
    /// Per-token time of GPT generation by position, with the KV cache and without (the whole
    /// sequence recomputed per token), at batch 1.
    Generate {
        /// A model file from `kiln train text` (default: the default GPT shape with random
        /// weights and a 65-character vocabulary: the timing does not depend on the weights).
        #[arg(long)]
        model: Option<PathBuf>,
        /// Device: cpu, wgpu, cuda[:N] or rocm[:N].
        #[arg(long, default_value = "cpu")]
        device: String,
        /// Tokens generated (at most the context less one).
        #[arg(long, default_value_t = 255)]
        tokens: usize,
        /// Positions per printed row.
        #[arg(long, default_value_t = 32)]
        bucket: usize,
    },
    /// GELU composed from tensor ops on n f32 elements, fused (one generated kernel) and
    /// unfused (a kernel per op), and a device copy of the same bytes: medians (min, max) in ms.
    Fusion {
        /// Device: wgpu, cuda[:N] or rocm[:N].
        #[arg(long, default_value = "wgpu")]
        device: String,
        /// Elements.
        #[arg(long, default_value_t = 1 << 24)]
        n: usize,
        /// Timed runs of each (after 3 warm-up runs).
        #[arg(long, default_value_t = 50)]
        runs: usize,
    },
    /// Ops with kernels of their own (softmax, log-softmax, normalize over rows; an Adam step)
    /// against the same computation composed from elementwise ops and reductions, fused and
    /// unfused: medians in ms, to tell whether fusion makes an op's own kernel redundant.
    Composites {
        /// Device: wgpu, cuda[:N] or rocm[:N].
        #[arg(long, default_value = "wgpu")]
        device: String,
        /// Rows of the f32 input (Adam: parameters are rows x cols).
        #[arg(long, default_value_t = 4096)]
        rows: usize,
        /// Columns: the softmax / normalization axis.
        #[arg(long, default_value_t = 1024)]
        cols: usize,
        /// Timed runs of each (after 3 warm-up runs).
        #[arg(long, default_value_t = 50)]
        runs: usize,
    },
    /// Inference time of an ONNX model on a random input of its declared shape (symbolic
    /// dimensions as 1): median and spread of the timed runs, in ms.
    Onnx {
        /// The `.onnx` file.
        file: PathBuf,
        /// Device: cpu, wgpu, cuda[:N] or rocm[:N].
        #[arg(long, default_value = "cpu")]
        device: String,
        /// Timed runs (after 3 warm-up runs).
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// The input shape, e.g. `1,3,224,224` (default: the declared one).
        #[arg(long, value_delimiter = ',')]
        shape: Option<Vec<usize>>,
        /// Then time every op over the same number of runs and print where the time goes, by
        /// op (on a GPU each op is waited for, which serialises the work); `--profile=shape` by
        /// op and input shapes.
        #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "op", value_enum)]
        profile: Option<ProfileBy>,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Train {
            task: TrainTask::Mnist(args),
        } => train_mnist(*args),
        Command::Train {
            task: TrainTask::Text(args),
        } => train_text(*args),
        Command::Generate {
            file,
            prompt,
            tokens,
            temperature,
            top_k,
            seed,
            device,
        } => {
            let device = kiln::device::select(&device)?;
            let (model, tok) = kiln::models::gpt::Gpt::from_file(&read(&file)?, &device)
                .map_err(|e| e.context(file.display()))?;
            let sampling = kiln::models::gpt::Sampling {
                temperature,
                top_k,
                seed,
            };
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let started = std::time::Instant::now();
            print!("{prompt}");
            let ids = kiln::models::gpt::generate(
                &model,
                &tok.encode(&prompt)?,
                tokens,
                &sampling,
                |t| {
                    let text = tok.decode(&[t])?;
                    write!(out, "{text}")
                        .and_then(|_| out.flush())
                        .map_err(|e| Error::io("generate", e.to_string()))
                },
            )?;
            let secs = started.elapsed().as_secs_f64();
            println!();
            eprintln!(
                "{} tokens in {secs:.2}s ({:.1} tokens/s)",
                ids.len(),
                ids.len() as f64 / secs.max(1e-9)
            );
            Ok(())
        }
        Command::Eval { file, arch, common } => {
            let device = kiln::device::select(&common.device)?;
            let data = Mnist::load(&mnist::data_dir(common.data.as_deref())?)?;
            let model = kiln::models::Classifier::load(&file, arch.as_deref(), &device)?;
            let acc = model.accuracy(&data.test, None)?;
            println!("model: {}", file.display());
            println!("test images: {}", data.test.len());
            println!("accuracy: {acc:.4}");
            Ok(())
        }
        Command::Predict {
            file,
            image,
            arch,
            json,
            device,
        } => {
            let device = kiln::device::select(&device)?;
            let model = kiln::models::Classifier::load(&file, arch.as_deref(), &device)?;
            let pixels = kiln::data::image::mnist_input_from_png(&image)?;
            let p = model.predict(&pixels)?;
            if json {
                let v = serde_json::json!({
                    "digit": p.digit, "probabilities": p.probabilities, "logits": p.logits,
                });
                println!("{v}");
            } else {
                for (d, pr) in p.probabilities.iter().enumerate() {
                    println!("{d}: {pr:.4}");
                }
                println!("digit: {}", p.digit);
            }
            Ok(())
        }
        Command::Bench {
            task:
                BenchTask::TrainMnist {
                    device,
                    batch_size,
                    steps,
                    data,
                },
        } => {
            let device = kiln::device::select(&device)?;
            let data = Mnist::load(&mnist::data_dir(data.as_deref())?)?;
            let r = kiln::bench::train_mnist(&data, &device, batch_size, steps)?;
            println!(
                "kiln train-mnist on {}: batch {batch_size}, {steps} steps, {:.3} ms/step, {:.1} images/s, host {:.3} ms/step before the wait",
                device.name(),
                r.seconds_per_step * 1e3,
                r.images_per_sec,
                r.issue_seconds_per_step * 1e3
            );
            Ok(())
        }
        Command::Bench {
            task:
                BenchTask::Generate {
                    model,
                    device,
                    tokens,
                    bucket,
                },
        } => {
            use kiln::models::gpt::{Gpt, GptConfig};
            let device = kiln::device::select(&device)?;
            let gpt = match &model {
                Some(f) => Gpt::from_file(&read(f)?, &device)?.0,
                None => {
                    let config = GptConfig {
                        vocab: 65,
                        context: 256,
                        dim: 384,
                        layers: 6,
                        heads: 6,
                        dropout: 0.0,
                    };
                    let mut m = Gpt::new(config, &mut kiln::core::nn::Init::new(&device, 0), 0)?;
                    kiln::core::nn::Module::set_training(&mut m, false);
                    m
                }
            };
            let c = &gpt.config;
            println!(
                "kiln generate on {}: {} layers x {}, context {}, batch 1, ms per token",
                device.name(),
                c.layers,
                c.dim,
                c.context
            );
            println!("positions    KV cache   recompute");
            for b in kiln::bench::generation(&gpt, tokens, bucket)? {
                println!(
                    "{:>4}-{:<4} {:>10.2} {:>11.2}",
                    b.from,
                    b.to - 1,
                    b.cached_ms,
                    b.recompute_ms
                );
            }
            Ok(())
        }
        Command::Bench {
            task: BenchTask::Fusion { device, n, runs },
        } => {
            let device = kiln::device::select_unfused(&device)?;
            let r = kiln::bench::fusion(&device, n, runs)?;
            println!(
                "kiln fusion on {}: GELU as x * ((x / sqrt 2).erf() + 1) / 2 (5 ops + 3 scalars), \
                 {n} f32, {runs} runs; ms per GELU, one per wait and {} per wait",
                device.name(),
                kiln::bench::STREAMED
            );
            let rows = [
                ("fused (one generated kernel)", &r.fused),
                ("unfused (8 backend ops)", &r.unfused),
                ("device copy (Op::Contiguous of a slice)", &r.copy),
            ];
            for (name, t) in rows {
                for (how, l) in t.modes() {
                    println!(
                        "{name:<42} {how:<8} median {:>9.3} ms  min {:>9.3}  max {:>9.3}",
                        l.median_ms, l.min_ms, l.max_ms
                    );
                }
            }
            for i in 0..2 {
                let [(how, fused), (_, unfused), (_, copy)] = rows.map(|(_, t)| t.modes()[i]);
                println!(
                    "{how:<8} unfused / fused: {:.2}x   fused / copy: {:.2}x",
                    unfused.median_ms / fused.median_ms.max(1e-9),
                    fused.median_ms / copy.median_ms.max(1e-9),
                );
            }
            let [fused, unfused, copy] = rows.map(|(_, t)| t.issue_ms * 1e3);
            println!(
                "host time per run before the wait (streamed): fused {fused:.1} us (recording), \
                 unfused {unfused:.1} us, copy {copy:.1} us (launches)"
            );
            println!("max |fused - unfused|: {:.2e}", r.max_diff);
            Ok(())
        }
        Command::Bench {
            task:
                BenchTask::Composites {
                    device,
                    rows,
                    cols,
                    runs,
                },
        } => {
            let device = kiln::device::select_unfused(&device)?;
            println!(
                "kiln composites on {}: each op's own kernel against its composition, fused \
                 and unfused; {runs} runs, ms per call, {} per wait (streamed)",
                device.name(),
                kiln::bench::STREAMED
            );
            for r in kiln::bench::composites(&device, rows, cols, runs)? {
                let ms = |t: &kiln::bench::Timing| t.streamed.median_ms;
                println!(
                    "{:<22} own kernel {:>8.3}  composed fused {:>8.3} ({:.2}x)  unfused {:>8.3} \
                     ({:.2}x)  max |diff| {:.1e}",
                    r.name,
                    ms(&r.primitive),
                    ms(&r.fused),
                    ms(&r.fused) / ms(&r.primitive).max(1e-9),
                    ms(&r.unfused),
                    ms(&r.unfused) / ms(&r.primitive).max(1e-9),
                    r.max_diff
                );
            }
            Ok(())
        }
        Command::Bench {
            task:
                BenchTask::Onnx {
                    file,
                    device,
                    runs,
                    shape,
                    profile,
                },
        } => {
            // Only a profiled run pays for the profiler (on a GPU, a wait after every op).
            let (device, profiler) = match profile {
                Some(by) => kiln::device::select_profiled(&device, by == ProfileBy::Shape)
                    .map(|(d, p)| (d, Some(p)))?,
                None => (kiln::device::select(&device)?, None),
            };
            let model = kiln::onnx::OnnxModel::load(&read(&file)?, &device)?;
            let x = model.sample_input(shape.as_deref())?;
            let r = kiln::bench::onnx(&model, &x, runs.max(1))?;
            println!(
                "kiln onnx {} on {}: input {}, {runs} runs, median {:.3} ms, min {:.3} ms, max {:.3} ms",
                file.display(),
                device.name(),
                x.shape(),
                r.median_ms,
                r.min_ms,
                r.max_ms
            );
            if let Some(profiler) = profiler {
                profiler.reset();
                for _ in 0..runs.max(1) {
                    for y in model.run(std::slice::from_ref(&x))? {
                        y.to_data()?;
                    }
                }
                println!("\n{}", profiler.table(runs.max(1) as u64));
            }
            Ok(())
        }
        Command::Import {
            onnx,
            output,
            shape,
        } => import_onnx(&onnx, &output, shape),
        Command::Compile {
            model,
            output,
            batch,
        } => {
            let program = kiln::program::compile(&read(&model)?, &batch)
                .map_err(|e| e.context(model.display()))?;
            let bytes = program.to_bytes();
            kiln::checkpoint::write_atomic(&output, &bytes)?;
            println!(
                "{} -> {} ({} bytes)\n{}",
                model.display(),
                output.display(),
                bytes.len(),
                program.summary()
            );
            Ok(())
        }
        Command::Run {
            file,
            inputs,
            outputs,
            device,
        } => run_model(&file, &inputs, &outputs, &kiln::device::select(&device)?),
        Command::Serve { dir, port, host } => {
            let server = kiln::serve::Server::bind(&dir, (host, port).into())?;
            println!("serving {} at {}", dir.display(), server.url()?);
            server.run()
        }
    }
}

fn train_mnist(a: TrainArgs) -> Result<()> {
    let augment: Augment = a.augment.parse()?;
    let dir = mnist::data_dir(a.common.data.as_deref())?;
    let data = Mnist::load(&dir)?;
    let cfg = TrainConfig {
        epochs: a.epochs,
        batch_size: a.batch_size,
        lr: a.lr,
        cosine: !a.constant_lr,
        seed: a.seed,
        limit: a.limit,
        test_limit: None,
        dropout: a.dropout,
        checkpoint_dir: a.run.checkpoint_dir(&a.out),
        keep_last: a.run.keep,
        checkpoint_every: a.run.checkpoint_every,
        max_steps: a.run.max_steps,
        augment,
    };
    if a.run.gpus != 1 {
        let (device, gpus) = (a.common.device.clone(), a.run.gpus);
        let (a, data) = (Arc::new(a), Arc::new(data));
        return replicated(&device, gpus, move |device, c, rank| {
            mnist_replica(&a, &cfg, (*data).clone(), &dir, device, c, rank)
        });
    }
    let device = kiln::device::select(&a.common.device)?;
    mnist_replica(&a, &cfg, data, &dir, &device, None, 0)
}

/// `--gpus N` (N != 1): `replica(device, collective, rank)` trains one replica. On CUDA this
/// process is either one of the processes `kiln::dist::launch` started (one per GPU) or it
/// launches them; on the CPU the replicas are threads of this process.
fn replicated<F>(device: &str, gpus: usize, replica: F) -> Result<()>
where
    F: Fn(&kiln::core::Device, Option<Box<dyn Collective>>, usize) -> Result<()>
        + Send
        + Sync
        + 'static,
{
    if let Some(member) = kiln::dist::Member::from_env()? {
        // Ctrl-C reaches every process; rank 0's stop flag, summed at the next read, stops
        // them all at the same step, so the others only have to survive the signal.
        if member.rank > 0 {
            ctrlc::set_handler(|| {}).map_err(|e| {
                Error::io("train", format!("cannot install the Ctrl-C handler: {e}"))
            })?;
        }
        let (device, c) = member.join()?;
        return replica(&device, Some(c), member.rank);
    }
    if device.eq_ignore_ascii_case("cuda") {
        // One process per GPU (see kiln::dist): this program again, once per GPU.
        return kiln::dist::launch(gpus);
    }
    let replicas = kiln::dist::replicas(device, gpus)?;
    kiln::dist::run_replicas(replicas, move |rank, (device, c)| {
        replica(&device, Some(c), rank)
    })?;
    Ok(())
}

/// Trains the MNIST CNN on `device`: alone, or as replica `rank` of a data-parallel run on
/// its shard of the training set (then only rank 0 reports and writes the model).
fn mnist_replica(
    a: &TrainArgs,
    cfg: &TrainConfig,
    data: Mnist,
    dir: &Path,
    device: &kiln::core::Device,
    collective: Option<Box<dyn Collective>>,
    rank: usize,
) -> Result<()> {
    let world = collective.as_ref().map_or(1, |c| c.world());
    let (train, test) = kiln::train::loaders(data, cfg)?;
    // Each replica trains and evaluates on its own part; the learner sums the figures.
    let (train, test) = (train.shard(rank, world), test.shard(rank, world));
    let learner = kiln::train::learner(cfg, &train, device)?;
    let mut learner = a.run.attach_replica(learner, collective, rank)?;
    if rank == 0 && !a.run.quiet && !a.run.tui {
        eprintln!(
            "MNIST CNN: {} training images from {}, batch {}{}, augment {}",
            train.dataset().split.len(),
            dir.display(),
            cfg.batch_size,
            if world > 1 {
                format!(" on each of {world} replicas")
            } else {
                String::new()
            },
            cfg.augment
        );
    }
    let outcome = learner.fit(&train, Some(&test), kiln::train::step(device));
    learner.close_reporters();
    if rank != 0 {
        return outcome.map(|_| ());
    }
    match outcome? {
        Outcome::Stopped | Outcome::EarlyStopped => {
            eprintln!(
                "stopped; resume with --resume {}",
                cfg.checkpoint_dir.display()
            );
            Ok(())
        }
        Outcome::Finished => {
            let test_acc = learner.history.last().and_then(|m| m.get("test_acc"));
            let mut meta = std::collections::BTreeMap::from([
                (
                    "train_command".to_string(),
                    std::iter::once("kiln".to_string())
                        .chain(std::env::args().skip(1))
                        .collect::<Vec<_>>()
                        .join(" "),
                ),
                ("epochs".to_string(), cfg.epochs.to_string()),
                ("augment".to_string(), cfg.augment.to_string()),
            ]);
            if let Some(acc) = test_acc {
                meta.insert("test_accuracy".to_string(), format!("{acc:.4}"));
            }
            kiln::models::save_classifier(&mut learner.model, &a.out, &meta)?;
            if let Some(acc) = test_acc {
                println!("test accuracy: {acc:.4}");
            }
            println!("model written to {}", a.out.display());
            Ok(())
        }
    }
}

impl RunArgs {
    /// `--checkpoint-dir`, else `out` with the extension `.ckpt`.
    fn checkpoint_dir(&self, out: &Path) -> PathBuf {
        self.checkpoint_dir
            .clone()
            .unwrap_or_else(|| out.with_extension("ckpt"))
    }

    /// `learner` as replica `rank` summing through `collective` (alone without one): rank 0
    /// [`RunArgs::attach`]es, the other ranks only resume if asked (rank 0 reports).
    fn attach_replica<M: kiln::core::nn::Module>(
        &self,
        mut learner: Learner<M>,
        collective: Option<Box<dyn Collective>>,
        rank: usize,
    ) -> Result<Learner<M>> {
        if let Some(c) = collective {
            learner = learner.collective(c);
        }
        if rank == 0 {
            return self.attach(learner);
        }
        if let Some(from) = &self.resume {
            learner.resume(from)?;
        }
        Ok(learner)
    }

    /// Resumes `learner` if asked, adds the log, console or dashboard, and points Ctrl-C at its
    /// stop flag.
    fn attach<M: kiln::core::nn::Module>(&self, mut learner: Learner<M>) -> Result<Learner<M>> {
        if let Some(from) = &self.resume {
            let path = learner.resume(from)?;
            eprintln!("resuming from {}", path.display());
        }
        if let Some(log) = &self.log {
            learner = learner.reporter(JsonLines::new(log));
        }
        let stop = learner.stop_flag();
        if self.tui {
            learner = learner.reporter(Dashboard::new(stop.clone())?);
        } else if !self.quiet {
            learner = learner.reporter(Console::new());
        }
        ctrlc::set_handler(move || {
            eprintln!("\ninterrupted: finishing this step and writing a checkpoint");
            stop.store(true, Ordering::SeqCst);
        })
        .map_err(|e| Error::io("train", format!("cannot install the Ctrl-C handler: {e}")))?;
        Ok(learner)
    }
}

/// What `--profile` adds the time up by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ProfileBy {
    /// The op's name.
    Op,
    /// The op's name and its inputs' shapes.
    Shape,
}

/// The step after which `train text --profile` times the ops (the first compile kernels).
const PROFILE_FROM: u64 = 2;

fn train_text(a: TextArgs) -> Result<()> {
    if a.run.gpus != 1 {
        if a.profile.is_some() {
            return Err(Error::invalid(
                "train text",
                format!(
                    "--profile times one device: expected --gpus 1 with it, found --gpus {}",
                    a.run.gpus
                ),
            ));
        }
        let (device, gpus) = (a.device.clone(), a.run.gpus);
        let a = Arc::new(a);
        return replicated(&device, gpus, move |device, c, rank| {
            text_replica(&a, device, c, rank, None)
        });
    }
    let (device, profiler) = match a.profile {
        Some(by) => kiln::device::select_profiled(&a.device, by == ProfileBy::Shape)
            .map(|(d, p)| (d, Some(p)))?,
        None => (kiln::device::select(&a.device)?, None),
    };
    text_replica(&a, &device, None, 0, profiler)
}

/// Trains the GPT on `device`: alone (with `profiler` timing its ops, if given), or as replica
/// `rank` of a data-parallel run on its shard of the windows (then only rank 0 reports and
/// writes the model).
fn text_replica(
    a: &TextArgs,
    device: &kiln::core::Device,
    collective: Option<Box<dyn Collective>>,
    rank: usize,
    profiler: Option<Arc<kiln::profile::Profiler>>,
) -> Result<()> {
    let world = collective.as_ref().map_or(1, |c| c.world());
    let dir = kiln::data::text::data_dir(a.data.as_deref())?;
    let held: Vec<&str> = a.held_out.iter().map(String::as_str).collect();
    let corpus = kiln::data::text::Corpus::load(&dir, &held)?;
    let cfg = kiln::lm::TextConfig {
        context: a.context,
        dim: a.dim,
        layers: a.layers,
        heads: a.heads,
        dropout: a.dropout,
        batch_size: a.batch_size,
        lr: a.lr,
        warmup: a.warmup,
        epochs: a.epochs,
        max_steps: a.run.max_steps,
        eval_every: a.eval_every,
        eval_windows: a.eval_windows,
        seed: a.seed,
        checkpoint_dir: a.run.checkpoint_dir(&a.out),
        keep_last: a.run.keep,
        ..kiln::lm::TextConfig::default()
    };
    let (tok, train, valid) = kiln::lm::prepare(&corpus, &cfg)?;
    let (train, valid) = (train.shard(rank, world), valid.shard(rank, world));
    if rank == 0 && !a.run.quiet && !a.run.tui {
        eprintln!(
            "GPT on {}: {} training characters, {} held out ({}), vocabulary {}",
            dir.display(),
            corpus.train.len(),
            corpus.valid.len(),
            corpus.held_out.join(", "),
            tok.vocab_size()
        );
    }
    let learner = kiln::lm::learner(&cfg, &tok, &train, device)?;
    let mut learner = a.run.attach_replica(learner, collective, rank)?;
    if let Some(p) = &profiler {
        learner = learner.reporter(kiln::profile::FromStep::new(p.clone(), PROFILE_FROM));
    }
    let outcome = learner.fit(&train, Some(&valid), kiln::lm::step(device));
    learner.close_reporters();
    if rank != 0 {
        return outcome.map(|_| ());
    }
    let outcome = outcome?;
    if let Some(p) = profiler {
        let steps = learner.state.step.saturating_sub(PROFILE_FROM);
        println!(
            "per step, over steps {PROFILE_FROM}..{}:\n{}",
            learner.state.step,
            p.table(steps)
        );
    }
    let bytes = learner.model.to_file(&tok, &Default::default())?;
    kiln::checkpoint::write_atomic(&a.out, &bytes)?;
    if let Some(loss) = learner.state.last_eval.get("valid_loss") {
        println!("validation loss: {loss:.4} nats per character");
    }
    println!("model written to {} ({outcome:?})", a.out.display());
    Ok(())
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io("read", format!("{}: {e}", path.display())))
}

fn is_onnx(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
}

fn import_onnx(onnx: &Path, output: &Path, shape: Option<Vec<usize>>) -> Result<()> {
    use kiln::onnx::OnnxModel;
    let dev = kiln::core::Device::cpu();
    let model = OnnxModel::load(&read(onnx)?, &dev).map_err(|e| e.context(onnx.display()))?;
    let x = model.sample_input(shape.as_deref())?;
    let bytes = model.to_kiln(&x)?;
    kiln::checkpoint::write_atomic(output, &bytes)?;
    // the written file against the ONNX model on the traced input
    let kiln_model = kiln::core::model::Model::load(&bytes, &dev)?;
    let (want, got) = (model.run(std::slice::from_ref(&x))?, kiln_model.run(&[x])?);
    let diff = want[0]
        .to_data()?
        .to_f64_vec()
        .iter()
        .zip(got[0].to_data()?.to_f64_vec())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f64, f64::max);
    println!(
        "{} -> {} ({} bytes): {} graph nodes; output {} matches the ONNX model within {diff:.2e}",
        onnx.display(),
        output.display(),
        bytes.len(),
        kiln_model.graph().nodes.len(),
        got[0].shape()
    );
    Ok(())
}

fn run_model(
    file: &Path,
    inputs: &[PathBuf],
    outputs: &[PathBuf],
    dev: &kiln::core::Device,
) -> Result<()> {
    let xs = inputs
        .iter()
        .map(|p| kiln::npy::decode(&read(p)?, &p.display().to_string(), dev))
        .collect::<Result<Vec<_>>>()?;
    let bytes = read(file)?;
    let ys = if is_onnx(file) {
        kiln::onnx::OnnxModel::load(&bytes, dev)?.run(&xs)?
    } else {
        kiln::core::model::Model::load(&bytes, dev)?.run(&xs)?
    };
    if ys.len() != outputs.len() {
        return Err(Error::invalid(
            "run",
            format!(
                "the model has {} outputs, {} --output files given",
                ys.len(),
                outputs.len()
            ),
        ));
    }
    for (y, path) in ys.iter().zip(outputs) {
        kiln::checkpoint::write_atomic(path, &kiln::npy::encode(y)?)?;
        println!("{}: {} {}", path.display(), y.dtype(), y.shape());
    }
    Ok(())
}
