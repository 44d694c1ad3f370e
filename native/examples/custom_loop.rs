//! A training loop written by hand, without the `Learner`: a data loader over MNIST, a small MLP
//! derived with `#[derive(Module)]`, the forward pass, `loss::cross_entropy`, `backward` and
//! `Adam::step`, the loss read back every few steps only (a read waits for the device), and the
//! test accuracy at the end. Everything the `Learner` automates, in about 60 lines.
//!
//! ```sh
//! cargo run --release -p kiln --example custom_loop                    # 1,000 steps
//! cargo run --release -p kiln --example custom_loop -- --steps 200 --device wgpu
//! ```
//!
//! MNIST is read from `--data DIR`, `$KILN_MNIST_DIR` or `shared/data/mnist` in a parent
//! directory. `--steps N` (or `KILN_EXAMPLE_STEPS`) sets the number of optimizer steps.

use kiln::core::autodiff::no_grad;
use kiln::core::nn::{Forward, Init, Linear, loss};
use kiln::core::optim::{Adam, Optimizer};
use kiln::core::{DType, Error, Result, Tensor};
use kiln::data::loader::DataLoader;
use kiln::data::mnist::{Digits, Mnist, data_dir};
use std::path::Path;

/// 784 -> 128 -> 10 with a ReLU.
#[derive(kiln::core::nn::Module)]
pub struct Mlp {
    fc1: Linear,
    fc2: Linear,
}

impl Forward for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.fc1.forward(&x.flatten(1, -1)?)?.relu()?;
        self.fc2.forward(&h)
    }
}

/// What a run measured.
#[derive(Debug)]
pub struct Report {
    /// `(step, mean training loss since the previous read)` at each read.
    pub losses: Vec<(u64, f64)>,
    /// Accuracy on the MNIST test set (or its first `--test-limit` images).
    pub test_accuracy: f64,
}

/// Trains and evaluates with the options in `args` (see the file's documentation).
pub fn run(args: &[String]) -> Result<Report> {
    let opt = |name: &str| arg(args, name);
    let steps = steps(args)?.unwrap_or(1000);
    let device = kiln::device::select(opt("--device").unwrap_or("cpu"))?;
    let data = Mnist::load(&data_dir(opt("--data").map(Path::new))?)?;
    let test_limit =
        opt("--test-limit").map_or(Ok(data.test.len()), |s| parse("--test-limit", s))?;
    let train = DataLoader::new(Digits::plain(data.train), 64).shuffle(0);
    let test = DataLoader::new(Digits::plain(data.test.truncated(test_limit)), 500);

    let mut init = Init::new(&device, 0);
    let mut model = Mlp {
        fc1: Linear::new(&mut init, 784, 128)?,
        fc2: Linear::new(&mut init, 128, 10)?,
    };
    let mut adam = Adam::new(1e-3);
    // Losses are summed on the device and read every `read_every` steps, so steps queue on a
    // GPU instead of waiting for each other.
    let read_every = (steps / 10).clamp(1, 100);
    let (mut step, mut running, mut losses) = (0u64, None::<Tensor>, Vec::new());
    'train: for epoch in 0.. {
        for batch in train.epoch(epoch, 0) {
            let (x, y) = batch?.to_device(&device)?;
            let loss = loss::cross_entropy(&model.forward(&x)?, &y, 0.0)?;
            let grads = loss.backward()?;
            adam.step(&mut model, &grads)?;
            let l = loss.detach();
            running = Some(match running {
                Some(sum) => sum.add(&l)?,
                None => l,
            });
            step += 1;
            if step % read_every == 0 || step == steps {
                let n = (step - 1) % read_every + 1;
                let mean = running.take().map_or(Ok(0.0), |s| s.to_scalar())? / n as f64;
                println!(
                    "step {step:>5}/{steps}  epoch {}  loss {mean:.4}",
                    epoch + 1
                );
                losses.push((step, mean));
            }
            if step >= steps {
                break 'train;
            }
        }
    }

    // Evaluation: no graph is recorded, the correct predictions are counted on the device.
    let mut correct = 0.0;
    for batch in test.epoch(0, 0) {
        let (x, y) = batch?.to_device(&device)?;
        correct += no_grad(|| {
            let hits = model.forward(&x)?.argmax(-1, false)?.eq(&y)?;
            hits.cast(DType::F32)?.sum_all()?.to_scalar()
        })?;
    }
    let test_accuracy = correct / test_limit.max(1) as f64;
    println!("test accuracy {test_accuracy:.4} on {test_limit} images after {steps} steps");
    Ok(Report {
        losses,
        test_accuracy,
    })
}

/// The value after `name` in `args`.
fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).map(String::as_str)
}

fn parse<T: std::str::FromStr>(name: &str, value: &str) -> Result<T> {
    value.parse().map_err(|_| {
        Error::invalid(
            "custom_loop",
            format!("{name}: expected a number, found {value:?}"),
        )
    })
}

/// `--steps N`, else `$KILN_EXAMPLE_STEPS`.
fn steps(args: &[String]) -> Result<Option<u64>> {
    let env = std::env::var("KILN_EXAMPLE_STEPS").ok();
    arg(args, "--steps")
        .or(env.as_deref())
        .map(|s| parse("--steps", s))
        .transpose()
}

#[allow(dead_code)] // a module of the examples test, which calls `run`
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
