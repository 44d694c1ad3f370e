//! Throughput of the wgpu backend: matmul f32 in TFLOP/s, an elementwise op and a reduction in
//! GB/s, and a raw device-to-device buffer copy in GB/s for the ratio.
//!
//! `cargo run --release -p kiln-kernels --example wgpu_bench`

use kiln_core::{DType, Device, Result, Tensor};
use kiln_kernels::{WgpuBackend, WgpuOptions};
use std::time::Instant;

fn time(dev: &Device, iters: usize, mut f: impl FnMut() -> Result<Tensor>) -> Result<f64> {
    f()?; // warm up: pipelines compiled, buffers pooled
    dev.backend().synchronize()?;
    let start = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    dev.backend().synchronize()?;
    Ok(start.elapsed().as_secs_f64() / iters as f64)
}

fn main() -> Result<()> {
    let backend = WgpuBackend::new_blocking(WgpuOptions::default())?;
    let info = backend.adapter_info().clone();
    let dev = Device::new(backend);
    println!("device: {}", dev.name());
    for n in [1024usize, 4096, 8192] {
        let a = Tensor::rand_uniform([n, n], -1.0, 1.0, 1, DType::F32, &dev)?;
        let b = Tensor::rand_uniform([n, n], -1.0, 1.0, 2, DType::F32, &dev)?;
        let iters = if n >= 8192 { 3 } else { 10 };
        let s = time(&dev, iters, || a.matmul(&b))?;
        println!(
            "matmul f32 {n}x{n}x{n}: {:.2} TFLOP/s ({:.3} ms)",
            2.0 * (n as f64).powi(3) / s / 1e12,
            s * 1e3
        );
    }
    let n = 1 << 26;
    let x = Tensor::rand_uniform([n], -1.0, 1.0, 3, DType::F32, &dev)?;
    let y = Tensor::rand_uniform([n], -1.0, 1.0, 4, DType::F32, &dev)?;
    let s = time(&dev, 20, || x.add(&y))?;
    let add = 3.0 * 4.0 * n as f64 / s / 1e9;
    println!("elementwise add f32, {n} elements: {add:.1} GB/s");
    let m = x.reshape([1 << 14, 1 << 12])?;
    let s = time(&dev, 20, || m.sum(&[1], false))?;
    let sum = 4.0 * n as f64 / s / 1e9;
    println!("sum over rows [16384, 4096] f32: {sum:.1} GB/s");
    let copy = raw_copy_gbps(&info, 4 * n as u64)?;
    println!("device-to-device copy: {copy:.1} GB/s");
    println!(
        "ratios to copy: add {:.2}x, sum {:.2}x",
        add / copy,
        sum / copy
    );
    Ok(())
}

/// Read + write bandwidth of `copy_buffer_to_buffer` on a device opened like the backend's.
fn raw_copy_gbps(info: &wgpu::AdapterInfo, bytes: u64) -> Result<f64> {
    let err = |e: String| kiln_core::Error::device("wgpu_bench", e);
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let adapter = kiln_core::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    }))
    .map_err(|e| err(e.to_string()))?;
    if adapter.get_info().name != info.name {
        eprintln!(
            "note: copy measured on {} (backend uses {})",
            adapter.get_info().name,
            info.name
        );
    }
    let (device, queue) = kiln_core::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        required_limits: adapter.limits(),
        ..Default::default()
    }))
    .map_err(|e| err(e.to_string()))?;
    let usage = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
    let a = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: bytes,
        usage,
        mapped_at_creation: false,
    });
    let b = device.create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: bytes,
        usage,
        mapped_at_creation: false,
    });
    let run = |iters: usize| -> Result<f64> {
        let start = Instant::now();
        let mut enc = device.create_command_encoder(&Default::default());
        for _ in 0..iters {
            enc.copy_buffer_to_buffer(&a, 0, &b, 0, bytes);
        }
        queue.submit([enc.finish()]);
        device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| err(e.to_string()))?;
        Ok(start.elapsed().as_secs_f64())
    };
    run(1)?;
    let iters = 20;
    let s = run(iters)? / iters as f64;
    Ok(2.0 * bytes as f64 / s / 1e9)
}
