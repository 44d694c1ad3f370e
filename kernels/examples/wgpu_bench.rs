//! Throughput of the wgpu backend on the GPU it finds: f32 matmul in TFLOP/s, an elementwise add,
//! a row-sum reduction, a row softmax and a bias add in GB/s, and a device-to-device buffer copy
//! in GB/s (the bandwidth the others are measured against).
//!
//! ```text
//! cargo run --release -p kiln-kernels --example wgpu_bench -- [SIZES...] [--elems N] [--samples N]
//! cargo run --release -p kiln-kernels --example wgpu_bench -- 1024 4096 8192   # the defaults
//! ```
//!
//! Every figure is the median of `--samples` timed samples (default 9) after a warm-up run
//! (pipelines compiled, buffers pooled). A sample queues `reps` launches, chosen so that it
//! lasts about 20 ms, and waits for the GPU (`device.poll(wait)`), so queueing latency is spread
//! over many launches. The last line is the same figures as JSON (`JSON {...}`) for
//! `tests/bench/wgpu_vs_torch.py`.

use kiln_core::{DType, Device, Error, Result, Tensor};
use kiln_kernels::{WgpuBackend, WgpuOptions};
use std::time::Instant;

struct Args {
    sizes: Vec<usize>,
    elems: usize,
    samples: usize,
}

fn parse_args() -> Result<Args> {
    let bad = |m: String| Error::invalid("wgpu_bench", m);
    let mut args = Args {
        sizes: Vec::new(),
        elems: 1 << 26,
        samples: 9,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |flag: &str| -> Result<usize> {
            let v = it
                .next()
                .ok_or_else(|| bad(format!("expected a number after {flag}, found nothing")))?;
            v.parse()
                .map_err(|_| bad(format!("expected a number after {flag}, found {v:?}")))
        };
        match a.as_str() {
            "--elems" => args.elems = value("--elems")?,
            "--samples" => args.samples = value("--samples")?.max(1),
            _ => args.sizes.push(a.parse().map_err(|_| {
                bad(format!(
                    "expected matrix sizes, --elems N or --samples N, found {a:?}"
                ))
            })?),
        }
    }
    if args.sizes.is_empty() {
        args.sizes = vec![1024, 4096, 8192];
    }
    Ok(args)
}

/// Median seconds per call of `f`, which queues GPU work; `sync` waits for the GPU.
fn median_secs(
    samples: usize,
    sync: &dyn Fn() -> Result<()>,
    f: &mut dyn FnMut() -> Result<()>,
) -> Result<f64> {
    f()?;
    sync()?;
    // a second warm-up call, timed, sizes the samples
    let once = Instant::now();
    f()?;
    sync()?;
    let one = once.elapsed().as_secs_f64().max(1e-7);
    let reps = ((0.02 / one).ceil() as usize).clamp(1, 200);
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        for _ in 0..reps {
            f()?;
        }
        sync()?;
        times.push(start.elapsed().as_secs_f64() / reps as f64);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let backend = WgpuBackend::new_blocking(WgpuOptions::default())?;
    let info = backend.adapter_info().clone();
    let dev = Device::new(backend.clone());
    println!(
        "device: {} ({:?}, driver {} {})",
        info.name, info.backend, info.driver, info.driver_info
    );
    let sync = || dev.backend().synchronize();
    let mut json = Vec::new();
    for &n in &args.sizes {
        let a = Tensor::rand_uniform([n, n], -1.0, 1.0, 1, DType::F32, &dev)?;
        let b = Tensor::rand_uniform([n, n], -1.0, 1.0, 2, DType::F32, &dev)?;
        let s = median_secs(args.samples, &sync, &mut || a.matmul(&b).map(drop))?;
        let tflops = 2.0 * (n as f64).powi(3) / s / 1e12;
        println!(
            "matmul f32 {n}x{n}x{n}: {tflops:.3} TFLOP/s ({:.3} ms)",
            s * 1e3
        );
        json.push(format!("\"matmul_{n}_tflops\": {tflops:.4}"));
    }
    let n = args.elems;
    let x = Tensor::rand_uniform([n], -1.0, 1.0, 3, DType::F32, &dev)?;
    let y = Tensor::rand_uniform([n], -1.0, 1.0, 4, DType::F32, &dev)?;
    let s = median_secs(args.samples, &sync, &mut || x.add(&y).map(drop))?;
    // two reads and one write of 4 bytes per element
    let add = 12.0 * n as f64 / s / 1e9;
    println!("elementwise add f32, {n} elements: {add:.1} GB/s");
    let cols = 4096.min(n);
    let m = x
        .slice_axis(0, 0, n / cols * cols, 1)?
        .reshape([n / cols, cols])?;
    let s = median_secs(args.samples, &sync, &mut || m.sum(&[1], false).map(drop))?;
    let rows_bytes = 4.0 * (n / cols * cols) as f64;
    let sum = rows_bytes / s / 1e9;
    println!("sum over rows [{}, {cols}] f32: {sum:.1} GB/s", n / cols);
    // softmax and bias add: one read and one write per element (the bias row stays in cache)
    let s = median_secs(args.samples, &sync, &mut || m.softmax(-1).map(drop))?;
    let softmax = 2.0 * rows_bytes / s / 1e9;
    println!(
        "softmax over rows [{}, {cols}] f32: {softmax:.1} GB/s",
        n / cols
    );
    let bias = x.slice_axis(0, 0, cols, 1)?;
    let s = median_secs(args.samples, &sync, &mut || m.add(&bias).map(drop))?;
    let bias_add = 2.0 * rows_bytes / s / 1e9;
    println!(
        "bias add [{}, {cols}] + [{cols}] f32: {bias_add:.1} GB/s",
        n / cols
    );
    let copy = copy_gbps(&backend, 4 * n as u64, args.samples)?;
    println!("device-to-device copy, {} bytes: {copy:.1} GB/s", 4 * n);
    println!(
        "ratios to copy: add {:.2}x, sum {:.2}x, softmax {:.2}x, bias add {:.2}x",
        add / copy,
        sum / copy,
        softmax / copy,
        bias_add / copy
    );
    json.extend([
        format!("\"elems\": {n}"),
        format!("\"add_gbps\": {add:.3}"),
        format!("\"sum_gbps\": {sum:.3}"),
        format!("\"softmax_gbps\": {softmax:.3}"),
        format!("\"bias_add_gbps\": {bias_add:.3}"),
        format!("\"copy_gbps\": {copy:.3}"),
        format!("\"device\": {:?}", info.name),
    ]);
    println!("JSON {{{}}}", json.join(", "));
    Ok(())
}

/// Read + write bandwidth of `copy_buffer_to_buffer` between two buffers of `bytes` on the
/// backend's own device and queue.
fn copy_gbps(backend: &WgpuBackend, bytes: u64, samples: usize) -> Result<f64> {
    let device = backend.wgpu_device();
    let queue = backend.wgpu_queue();
    let usage = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let make = || {
        device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("bench copy"),
            size: bytes,
            usage,
            mapped_at_creation: false,
        })
    };
    let (a, b) = (make(), make());
    let sync = || {
        device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(drop)
            .map_err(|e| Error::device("wgpu_bench", e.to_string()))
    };
    let s = median_secs(samples, &sync, &mut || {
        let mut enc = device.create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(&a, 0, &b, 0, bytes);
        queue.submit([enc.finish()]);
        Ok(())
    })?;
    Ok(2.0 * bytes as f64 / s / 1e9)
}
