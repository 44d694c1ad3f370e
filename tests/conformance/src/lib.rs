//! Helpers of the conformance suite: devices under test, random inputs, and the comparison of
//! every op (forward and backward) against the CPU oracle.

use kiln_core::random::SplitMix64;
use kiln_core::{DType, Device, ErrorKind, Result, Tensor, TensorData};
use std::sync::OnceLock;

/// The environment variable that picks the device under test: `wgpu` (the default), `cuda` or
/// `cuda:N` (with the `cuda` feature), `rocm` or `rocm:N` (with the `rocm` feature), or `cpu`
/// (the oracle against itself).
pub const DEVICE_VAR: &str = "KILN_CONFORMANCE_DEVICE";

/// The device under test (see [`DEVICE_VAR`]), opened once, or `None` (with a printed notice)
/// when this machine has no such device (a [`ErrorKind::Device`] error), so that the suite skips
/// there. Panics with the message when the name is unknown or this build lacks the backend,
/// since such a run would test nothing.
pub fn device() -> Option<Device> {
    static DEV: OnceLock<Option<Device>> = OnceLock::new();
    DEV.get_or_init(|| {
        let name = std::env::var(DEVICE_VAR).unwrap_or_else(|_| "wgpu".to_string());
        match open(name.trim()) {
            Ok(d) => {
                eprintln!("conformance: running on {}", d.name());
                Some(d)
            }
            Err(e) if e.kind() != ErrorKind::Device => panic!("{DEVICE_VAR}={name}: {e}"),
            Err(e) => {
                eprintln!("conformance: SKIPPED, no {name} device on this machine: {e}");
                None
            }
        }
    })
    .clone()
}

/// Opens the device called `name`: `wgpu` and `cpu` always, `cuda` and `rocm` through
/// `kiln::device::select` in builds with their feature. GPU devices come behind the fusion
/// decorator unless `KILN_FUSION=0`, so the suite checks every op fused.
fn open(name: &str) -> Result<Device> {
    let lower = name.to_ascii_lowercase();
    for (backend, built) in [
        ("cuda", cfg!(feature = "cuda")),
        ("rocm", cfg!(feature = "rocm")),
    ] {
        if lower.starts_with(backend) && !built {
            panic!(
                "{DEVICE_VAR}={name}: this build has no {backend} backend; run `cargo test -p kiln-conformance --features {backend}`"
            );
        }
    }
    open_built(&lower)
}

#[cfg(any(feature = "cuda", feature = "rocm"))]
fn open_built(name: &str) -> Result<Device> {
    kiln::device::select(name)
}

#[cfg(not(any(feature = "cuda", feature = "rocm")))]
fn open_built(name: &str) -> Result<Device> {
    match name {
        // behind the fusion decorator as `kiln::device::select` puts it (KILN_FUSION=0: not)
        "wgpu" | "webgpu" => kiln_kernels::wgpu_device().map(kiln_kernels::fusion::wrap_if_enabled),
        "cpu" => Ok(Device::cpu()),
        other => panic!("{DEVICE_VAR}: expected wgpu, cuda[:N], rocm[:N] or cpu, found {other:?}"),
    }
}

/// Deterministic values in `[lo, hi)` (never all zeros).
pub fn values(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    let mut rng = SplitMix64::new(seed);
    (0..n).map(|_| lo + (hi - lo) * rng.next_f64()).collect()
}

/// Random data of `shape` and `dtype` in `[lo, hi)`.
pub fn data(shape: &[usize], dtype: DType, seed: u64, lo: f64, hi: f64) -> TensorData {
    let n = shape.iter().product();
    let v = values(n, seed, lo, hi);
    let v = if dtype.is_float() {
        v
    } else {
        v.into_iter().map(f64::floor).collect()
    };
    TensorData::from_f64_iter(v, dtype, shape.into())
}

/// Asserts `got` matches `want` elementwise within `atol + rtol * |want|` (NaNs must agree).
pub fn assert_close(what: &str, want: &TensorData, got: &TensorData, rtol: f64, atol: f64) {
    assert_eq!(want.shape(), got.shape(), "{what}: shapes differ");
    assert_eq!(want.dtype(), got.dtype(), "{what}: dtypes differ");
    let mut worst = (0.0f64, 0usize);
    for (i, (a, b)) in want.iter_f64().zip(got.iter_f64()).enumerate() {
        if a.is_nan() || b.is_nan() {
            assert!(
                a.is_nan() && b.is_nan(),
                "{what}: element {i}: want {a}, got {b}"
            );
            continue;
        }
        if a == b {
            continue;
        }
        let err = (a - b).abs() / (atol + rtol * a.abs());
        if err > worst.0 {
            worst = (err, i);
        }
    }
    if worst.0 > 1.0 {
        let i = worst.1;
        let (a, b) = (want.to_f64_vec()[i], got.to_f64_vec()[i]);
        panic!(
            "{what}: element {i} of {}: want {a}, got {b} (tolerance {rtol} rel + {atol} abs)",
            want.shape()
        );
    }
}

/// Runs `f` on the CPU and on `dev` with the same inputs and compares the outputs; then, when
/// `grad` is set and the output is float, compares the gradients of `sum(f(x) * w)` for every
/// float input. `prep` turns each uploaded input into the view the op sees (e.g. a transpose).
pub fn check(
    what: &str,
    dev: &Device,
    inputs: &[TensorData],
    prep: &dyn Fn(usize, Tensor) -> Result<Tensor>,
    f: &dyn Fn(&[Tensor]) -> Result<Tensor>,
    grad: bool,
    tol: (f64, f64),
) {
    let run = |device: &Device| -> Result<(TensorData, Vec<Option<TensorData>>)> {
        let xs: Vec<Tensor> = inputs
            .iter()
            .map(|d| {
                let t = Tensor::from_data(d, device)?;
                Ok(if grad && d.dtype().is_float() {
                    t.require_grad()
                } else {
                    t
                })
            })
            .collect::<Result<_>>()?;
        let views: Vec<Tensor> = xs
            .iter()
            .enumerate()
            .map(|(i, t)| prep(i, t.clone()))
            .collect::<Result<_>>()?;
        let y = f(&views)?;
        let out = y.to_data()?;
        let mut grads = Vec::new();
        if grad && y.dtype().is_float() {
            let w = Tensor::from_data(&data(y.dims(), y.dtype(), 99, -1.0, 1.0), device)?;
            let g = y.mul(&w)?.sum_all()?.backward()?;
            for x in &xs {
                grads.push(match g.get(x) {
                    Some(t) => Some(t.to_data()?),
                    None => None,
                });
            }
        }
        Ok((out, grads))
    };
    let cpu = Device::cpu();
    let (want, want_g) = run(&cpu).unwrap_or_else(|e| panic!("{what} on cpu: {e}"));
    let (got, got_g) = run(dev).unwrap_or_else(|e| panic!("{what} on {}: {e}", dev.name()));
    assert_close(what, &want, &got, tol.0, tol.1);
    for (i, (w, g)) in want_g.iter().zip(&got_g).enumerate() {
        match (w, g) {
            (Some(w), Some(g)) => assert_close(
                &format!("{what}: gradient of input {i}"),
                w,
                g,
                tol.0 * 4.0,
                tol.1 * 4.0,
            ),
            (None, None) => {}
            _ => panic!("{what}: gradient of input {i} exists on one device only"),
        }
    }
}

/// No view change.
pub fn same(_: usize, t: Tensor) -> Result<Tensor> {
    Ok(t)
}
