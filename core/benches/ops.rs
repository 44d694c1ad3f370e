//! CPU backend micro-benchmarks: f32 matmul, conv2d, a large elementwise add and a sum, and one
//! training step of the MNIST CNN (the workload of `kiln bench train-mnist`, without the loader).
//!
//! `cargo bench -p kiln-core --bench ops` runs them under divan; for matmul and conv2d one
//! "item" is one floating-point operation, so `Gitem/s` reads as GFLOP/s.
//!
//! `KILN_BENCH_JSON=1 cargo bench -p kiln-core --bench ops` instead prints one JSON object per
//! workload (median seconds, FLOPs, bytes moved); `tests/bench/cpu_vs_onnxruntime.py` uses it.

use divan::counter::{BytesCount, ItemsCount};
use divan::{Bencher, black_box};
use kiln_core::nn::loss::cross_entropy;
use kiln_core::nn::{Conv2d, Flatten, Init, Linear, MaxPool2d, ReLU, Sequential};
use kiln_core::optim::{Adam, Optimizer};
use kiln_core::{Conv2dParams, DType, Device, Tensor};
use std::time::Instant;

/// Elements of the elementwise and reduction workloads.
const BIG: usize = 16 << 20;

fn rand(shape: &[usize], seed: u64) -> Tensor {
    Tensor::rand_uniform(shape, -1.0, 1.0, seed, DType::F32, &Device::cpu()).unwrap()
}

/// A conv2d case: input shape, weight shape, padding.
struct Conv {
    name: &'static str,
    x: [usize; 4],
    w: [usize; 4],
    pad: usize,
}

const CONVS: [Conv; 3] = [
    Conv {
        name: "mnist_conv1",
        x: [64, 1, 28, 28],
        w: [32, 1, 3, 3],
        pad: 0,
    },
    Conv {
        name: "mnist_conv2",
        x: [64, 32, 26, 26],
        w: [64, 32, 3, 3],
        pad: 0,
    },
    Conv {
        name: "resnet_64c_56x56",
        x: [8, 64, 56, 56],
        w: [64, 64, 3, 3],
        pad: 1,
    },
];

impl Conv {
    fn params(&self) -> Conv2dParams {
        Conv2dParams {
            padding: [self.pad, self.pad],
            ..Default::default()
        }
    }
    fn flops(&self) -> usize {
        let oh = self.x[2] + 2 * self.pad - self.w[2] + 1;
        let ow = self.x[3] + 2 * self.pad - self.w[3] + 1;
        2 * self.x[0] * self.w[0] * oh * ow * self.w[1] * self.w[2] * self.w[3]
    }
}

#[divan::bench(args = [256, 512, 1024])]
fn matmul(b: Bencher, n: usize) {
    let (x, y) = (rand(&[n, n], 1), rand(&[n, n], 2));
    b.counter(ItemsCount::new(2 * n * n * n))
        .bench(|| x.matmul(black_box(&y)).unwrap());
}

#[divan::bench(args = ["mnist_conv1", "mnist_conv2", "resnet_64c_56x56"])]
fn conv2d(b: Bencher, name: &str) {
    let c = CONVS.iter().find(|c| c.name == name).unwrap();
    let (x, w) = (rand(&c.x, 3), rand(&c.w, 4));
    b.counter(ItemsCount::new(c.flops()))
        .bench(|| x.conv2d(black_box(&w), None, c.params()).unwrap());
}

/// `a + b` over 16M f32: bytes counted are two reads and one write.
#[divan::bench]
fn add_16m(b: Bencher) {
    let (x, y) = (rand(&[BIG], 5), rand(&[BIG], 6));
    b.counter(BytesCount::new(3 * 4 * BIG))
        .bench(|| x.add(black_box(&y)).unwrap());
}

/// Sum of 16M f32: bytes counted are the reads.
#[divan::bench]
fn sum_16m(b: Bencher) {
    let x = rand(&[BIG], 7);
    b.counter(BytesCount::new(4 * BIG))
        .bench(|| black_box(&x).sum_all().unwrap());
}

/// The MNIST CNN of `kiln bench train-mnist` (no dropout), Adam and one batch of 64 images.
struct TrainStep {
    net: Sequential,
    opt: Adam,
    x: Tensor,
    y: Tensor,
}

impl TrainStep {
    fn new() -> Self {
        let dev = Device::cpu();
        let mut init = Init::new(&dev, 0);
        let net = Sequential::new()
            .with(Conv2d::new(&mut init, 1, 32, 3).unwrap())
            .with(ReLU)
            .with(Conv2d::new(&mut init, 32, 64, 3).unwrap())
            .with(ReLU)
            .with(MaxPool2d::new(2))
            .with(Flatten::new())
            .with(Linear::new(&mut init, 9216, 128).unwrap())
            .with(ReLU)
            .with(Linear::new(&mut init, 128, 10).unwrap());
        let labels: Vec<i32> = (0..64).map(|i| i % 10).collect();
        TrainStep {
            net,
            opt: Adam::new(1e-3),
            x: rand(&[64, 1, 28, 28], 8),
            y: Tensor::from_vec(labels, [64], &dev).unwrap(),
        }
    }
    /// Forward, loss, backward and the Adam update; returns the loss.
    fn step(&mut self) -> Tensor {
        use kiln_core::nn::Forward;
        let loss = cross_entropy(&self.net.forward(&self.x).unwrap(), &self.y, 0.0).unwrap();
        let grads = loss.backward().unwrap();
        self.opt.step(&mut self.net, &grads).unwrap();
        loss
    }
}

/// One training step of the MNIST CNN at batch 64; one item is one image.
#[divan::bench(sample_count = 20)]
fn mnist_train_step(b: Bencher) {
    let mut t = TrainStep::new();
    b.counter(ItemsCount::new(64usize)).bench_local(|| t.step());
}

/// Median wall time of `f` over enough runs to fill about a second (at least 5).
fn median_seconds(f: impl Fn() -> Tensor) -> f64 {
    drop(f()); // warm-up: thread pools, page faults
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < 5 || (start.elapsed().as_secs_f64() < 1.0 && times.len() < 200) {
        let t = Instant::now();
        drop(black_box(f()));
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn json() {
    let line = |name: &str, secs: f64, flops: usize, bytes: usize| {
        println!(
            r#"{{"name": "{name}", "seconds": {secs:.6e}, "flops": {flops}, "bytes": {bytes}}}"#
        );
    };
    for n in [256, 512, 1024] {
        let (x, y) = (rand(&[n, n], 1), rand(&[n, n], 2));
        let s = median_seconds(|| x.matmul(&y).unwrap());
        line(&format!("matmul_{n}"), s, 2 * n * n * n, 0);
    }
    for c in &CONVS {
        let (x, w) = (rand(&c.x, 3), rand(&c.w, 4));
        let s = median_seconds(|| x.conv2d(&w, None, c.params()).unwrap());
        line(&format!("conv2d_{}", c.name), s, c.flops(), 0);
    }
    let (x, y) = (rand(&[BIG], 5), rand(&[BIG], 6));
    line(
        "add_16m",
        median_seconds(|| x.add(&y).unwrap()),
        0,
        3 * 4 * BIG,
    );
    line(
        "sum_16m",
        median_seconds(|| x.sum_all().unwrap()),
        0,
        4 * BIG,
    );
}

fn main() {
    if std::env::var_os("KILN_BENCH_JSON").is_some() {
        json();
    } else {
        divan::main();
    }
}
