//! Figures for the GPU machine (printed, never asserted; `#[ignore]`d so that only an explicit
//! `--ignored` run takes the time):
//!
//! ```text
//! <kiln lib test binary> cuda::bench --ignored --nocapture --test-threads 1
//! ```
//!
//! matmul 4096 through cuBLAS (strict fp32) and through the translated WGSL GEMM, an
//! elementwise add, a row sum, column sums and a row softmax in GB/s, and a device-to-device copy
//! (`cuMemcpyDtoDAsync`) of the same bytes as the reference.

use super::tests::gpu;
use super::{CudaBackend, CudaOptions, cu, driver_err};
use kiln_core::{Backend, BinaryOp, DType, Result, Tensor};
use std::time::Instant;

/// Seconds per call of `f`, after one warm-up call, synchronised on `dev`.
fn timed<T>(dev: &dyn Backend, iters: usize, mut f: impl FnMut() -> Result<T>) -> Result<f64> {
    f()?;
    dev.synchronize()?;
    let start = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    dev.synchronize()?;
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
    let s = timed(dev.backend(), 10, || a.matmul(&b))?;
    println!(
        "kiln matmul f32 {n} cublas: {:.2} TFLOP/s ({:.3} ms)",
        flops / s / 1e12,
        s * 1e3
    );
    // The same product through the translated WGSL GEMM (cuBLAS switched off).
    let wgsl = super::device_with(
        0,
        CudaOptions {
            cublas: false,
            ..CudaOptions::default()
        },
    )?;
    let (aw, bw) = (super::tests::on(&a, &wgsl)?, super::tests::on(&b, &wgsl)?);
    let s = timed(wgsl.backend(), 3, || aw.matmul(&bw))?;
    println!(
        "kiln matmul f32 {n} translated-wgsl: {:.2} TFLOP/s ({:.3} ms)",
        flops / s / 1e12,
        s * 1e3
    );

    let len = 1usize << 26;
    let x = Tensor::rand_uniform(vec![len], 0.0, 1.0, 4, DType::F32, &dev)?;
    let y = Tensor::rand_uniform(vec![len], 0.0, 1.0, 5, DType::F32, &dev)?;
    let s = timed(dev.backend(), 20, || x.binary(BinaryOp::Add, &y))?;
    println!(
        "kiln add f32, {len} elements: {:.1} GB/s",
        12.0 * len as f64 / s / 1e9
    );
    let rows = x.reshape([1 << 14, 1 << 12])?;
    let s = timed(dev.backend(), 20, || rows.sum(&[1], false))?;
    println!(
        "kiln sum over rows [16384, 4096] f32: {:.1} GB/s",
        4.0 * len as f64 / s / 1e9
    );
    // Short rows: layer norm over 384 features, attention softmax over 256 positions.
    for (n, width) in [(16384, 384), (98304, 256)] {
        let short = Tensor::rand_uniform(vec![n, width], -1.0, 1.0, 7, DType::F32, &dev)?;
        let s = timed(dev.backend(), 20, || short.sum(&[1], false))?;
        println!(
            "kiln sum over rows [{n}, {width}] f32: {:.1} GB/s",
            4.0 * (n * width) as f64 / s / 1e9
        );
        let s = timed(dev.backend(), 20, || short.softmax(-1))?;
        println!(
            "kiln softmax rows [{n}, {width}] f32: {:.1} GB/s",
            8.0 * (n * width) as f64 / s / 1e9
        );
    }
    // Column sums: the bias gradients of the GPT's linear layers (batch 64 x context 256 rows).
    for width in [384, 1536] {
        let cols = Tensor::rand_uniform(vec![16384, width], -1.0, 1.0, 6, DType::F32, &dev)?;
        let s = timed(dev.backend(), 20, || cols.sum(&[0], false))?;
        println!(
            "kiln sum over columns [16384, {width}] f32: {:.1} GB/s",
            4.0 * (16384 * width) as f64 / s / 1e9
        );
    }
    let s = timed(dev.backend(), 20, || rows.softmax(-1))?;
    println!(
        "kiln softmax rows [16384, 4096] f32: {:.1} GB/s",
        8.0 * len as f64 / s / 1e9
    );
    // The reference: a device-to-device copy of the same bytes.
    let backend = CudaBackend::new(0, CudaOptions::default())?;
    let bytes = 4 * len as u64;
    let (src, dst) = (backend.alloc(bytes)?, backend.alloc(bytes)?);
    let s = timed(&backend, 20, || {
        // SAFETY: both allocations hold `bytes` bytes on this backend's stream.
        unsafe { cu::memcpy_dtod_async(dst.ptr, src.ptr, bytes as usize, backend.inner.raw.stream) }
            .map_err(driver_err("copying on the device"))
    })?;
    println!(
        "kiln device copy f32, {len} elements: {:.1} GB/s",
        8.0 * len as f64 / s / 1e9
    );
    Ok(())
}
