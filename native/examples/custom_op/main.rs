//! A custom op in a user's crate: `scaled_softmax` (in `scaled_softmax.rs`: its shape rule, CPU
//! reference, WGSL kernel and gradient) registered with `kiln::register_op`, then trained in a
//! few steps and checked against the same model written with built-in ops: both runs start
//! from the same weights and must give the same losses at every step.
//!
//! ```sh
//! cargo run -p kiln --example custom_op                         # on the CPU
//! cargo run -p kiln --example custom_op -- --device wgpu --steps 50
//! cargo run -p kiln --features cuda --example custom_op -- --device cuda
//! ```
//!
//! The model: `p = scaled_softmax(x W, scale)` fitted to target distributions `t` by the
//! cross-entropy `-sum(t log p)`, with plain gradient descent.

#[path = "scaled_softmax.rs"]
mod scaled_softmax;

use kiln::core::{Device, Error, Result, Tensor};
use scaled_softmax::{ScaledSoftmax, composed};
use std::sync::Arc;

/// What a run measured.
#[derive(Debug)]
pub struct Report {
    /// The loss at each step with the custom op.
    pub custom: Vec<f32>,
    /// The loss at each step with the built-in ops.
    pub built_in: Vec<f32>,
}

const SCALE: f64 = 0.5;

/// Trains `steps` steps of gradient descent with `op` as the model's softmax.
fn train(
    device: &Device,
    steps: usize,
    op: &dyn Fn(&Tensor, f64) -> Result<Tensor>,
) -> Result<Vec<f32>> {
    let (n, d, k) = (32, 8, 5);
    let x = Tensor::rand_normal([n, d], 0.0, 1.0, 1, kiln::core::DType::F32, device)?;
    // targets: a softmax of a hidden linear map, so the model can fit them
    let hidden = Tensor::rand_normal([d, k], 0.0, 1.0, 2, kiln::core::DType::F32, device)?;
    let t = x.matmul(&hidden)?.softmax(-1)?;
    let mut w = Tensor::rand_normal([d, k], 0.0, 0.1, 3, kiln::core::DType::F32, device)?;
    let mut losses = Vec::with_capacity(steps);
    for _ in 0..steps {
        let wg = w.require_grad();
        let p = op(&x.matmul(&wg)?, SCALE)?;
        let loss = t.mul(&p.log()?)?.sum_all()?.mul_scalar(-1.0 / n as f64)?;
        let grads = loss.backward()?;
        let g = grads
            .get(&wg)
            .ok_or_else(|| Error::invalid("custom_op", "no gradient reached W"))?;
        w = w.sub(&g.mul_scalar(2.0)?)?;
        losses.push(loss.to_vec::<f32>()?[0]);
    }
    Ok(losses)
}

/// Registers the op and trains with it and with the built-in ops (see the file's doc).
pub fn run(args: &[String]) -> Result<Report> {
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(String::as_str)
    };
    let steps = match opt("--steps") {
        Some(s) => s
            .parse()
            .map_err(|_| Error::invalid("--steps", format!("expected a count, got {s:?}")))?,
        None => 20,
    };
    let device = kiln::device::select(opt("--device").unwrap_or("cpu"))?;
    kiln::register_op(Arc::new(ScaledSoftmax))?;
    let custom = train(&device, steps, &scaled_softmax::scaled_softmax)?;
    let built_in = train(&device, steps, &composed)?;
    for (i, (c, b)) in custom.iter().zip(&built_in).enumerate() {
        if (c - b).abs() > 1e-4 * (1.0 + b.abs()) {
            return Err(Error::invalid(
                "custom_op",
                format!("step {i}: loss {c} with the custom op, {b} with the built-in ops"),
            ));
        }
    }
    Ok(Report { custom, built_in })
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(r) => {
            let (first, last) = (r.custom[0], r.custom[r.custom.len() - 1]);
            println!(
                "scaled_softmax: loss {first:.4} -> {last:.4} in {} steps, equal to the built-in ops at every step",
                r.custom.len()
            );
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
