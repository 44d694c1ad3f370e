//! Figures for the GPU machine (printed, never asserted; `#[ignore]`d so that only an explicit
//! `--ignored` run takes the time):
//!
//! ```text
//! <kiln lib test binary> cuda::bench --ignored --nocapture --test-threads 1
//! ```
//!
//! matmul 4096 through cuBLAS and through the translated WGSL GEMM, an elementwise add and a
//! softmax in GB/s, and a device-to-device copy (a contiguous copy kernel) as the reference.

use super::tests::gpu;
use kiln_core::{BinaryOp, DType, Device, Op, Result, Tensor, View};
use std::time::Instant;

/// Seconds per call of `f`, after one warm-up call, synchronised on `dev`.
fn timed<T>(dev: &Device, iters: usize, mut f: impl FnMut() -> Result<T>) -> Result<f64> {
    f()?;
    dev.backend().synchronize()?;
    let start = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    dev.backend().synchronize()?;
    Ok(start.elapsed().as_secs_f64() / iters as f64)
}

#[test]
#[ignore = "benchmark for the GPU machine"]
fn bench() -> Result<()> {
    let Some(dev) = gpu() else { return Ok(()) };
    println!("kiln cuda bench on {}", dev.name());
    let n = 4096;
    let a = Tensor::rand_uniform(vec![n, n], -1.0, 1.0, 1, DType::F32, &dev)?;
    let b = Tensor::rand_uniform(vec![n, n], -1.0, 1.0, 2, DType::F32, &dev)?;
    let flops = 2.0 * (n as f64).powi(3);
    let s = timed(&dev, 10, || a.matmul(&b))?;
    println!("kiln matmul f32 {n} cublas: {:.2} TFLOP/s ({:.3} ms)", flops / s / 1e12, s * 1e3);
    // The same product through the translated WGSL GEMM: a [n, n] view with a non-unit column
    // stride has no BLAS layout, so the backend runs the planned kernel.
    let wide = Tensor::rand_uniform(vec![n, 2 * n], -1.0, 1.0, 3, DType::F32, &dev)?;
    let strided = wide.slice_axis(1, 0, 2 * n, 2)?;
    let s = timed(&dev, 3, || strided.matmul(&b))?;
    println!("kiln matmul f32 {n} translated-wgsl: {:.2} TFLOP/s ({:.3} ms)", flops / s / 1e12, s * 1e3);

    let len = 1usize << 26;
    let x = Tensor::rand_uniform(vec![len], 0.0, 1.0, 4, DType::F32, &dev)?;
    let y = Tensor::rand_uniform(vec![len], 0.0, 1.0, 5, DType::F32, &dev)?;
    let s = timed(&dev, 20, || x.binary(BinaryOp::Add, &y))?;
    println!("kiln add f32, {len} elements: {:.1} GB/s", 12.0 * len as f64 / s / 1e9);
    let rows = x.reshape([1 << 14, 1 << 12])?;
    let s = timed(&dev, 20, || rows.softmax(-1))?;
    println!("kiln softmax rows [16384, 4096] f32: {:.1} GB/s", 8.0 * len as f64 / s / 1e9);
    // The reference: a device-to-device copy of the same bytes (the plan's contiguous copy).
    let view = View { storage: x.storage(), layout: x.layout(), dtype: DType::F32 };
    let shape = x.shape().clone();
    let s = timed(&dev, 20, || dev.backend().execute(&Op::Contiguous, &[view], DType::F32, &shape).map(|_| ()))?;
    println!("kiln device copy f32, {len} elements: {:.1} GB/s", 8.0 * len as f64 / s / 1e9);
    Ok(())
}
