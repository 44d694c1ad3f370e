//! Shared helpers of kiln-core's integration tests: a seeded RNG, a plain f64 n-d array (`Arr`)
//! that the references compute on, upload/read-back, input layouts (contiguous, permuted,
//! step-sliced, expanded) and tolerance checks. Nothing here calls a kiln op to compute a result.
#![allow(dead_code)] // each test binary uses a different subset

pub mod reference;

use kiln_core::{DType, Device, Result, Shape, SliceRange, Tensor, TensorData};

/// The device under test.
pub fn dev() -> Device {
    Device::cpu()
}

/// splitmix64: small, seeded, good enough for test inputs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
    /// Uniform integer in 0..n.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    /// Uniform integer in lo..=hi, as f64.
    pub fn int(&mut self, lo: i64, hi: i64) -> f64 {
        (lo + (self.next_u64() % (hi - lo + 1) as u64) as i64) as f64
    }
    /// A magnitude in [lo, hi) with a random sign (keeps values away from zero).
    pub fn signed(&mut self, lo: f64, hi: f64) -> f64 {
        let m = self.uniform(lo, hi);
        if self.next_u64() & 1 == 0 { m } else { -m }
    }
}

/// Number of elements of a shape.
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Row-major multi-index of flat position `i`.
pub fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for (k, &d) in shape.iter().enumerate().rev() {
        idx[k] = i % d.max(1);
        i /= d.max(1);
    }
    idx
}

/// Flat row-major position of a multi-index.
pub fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    assert_eq!(idx.len(), shape.len(), "index {idx:?} vs shape {shape:?}");
    idx.iter().zip(shape).fold(0, |acc, (&i, &d)| {
        assert!(i < d, "index {idx:?} out of shape {shape:?}");
        acc * d + i
    })
}

/// A plain row-major n-d array of f64: what every reference computes on.
#[derive(Clone, Debug, PartialEq)]
pub struct Arr {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl Arr {
    pub fn new(shape: &[usize], data: Vec<f64>) -> Arr {
        assert_eq!(numel(shape), data.len(), "Arr::new shape {shape:?}");
        Arr {
            shape: shape.to_vec(),
            data,
        }
    }
    pub fn from_fn(shape: &[usize], mut f: impl FnMut(&[usize]) -> f64) -> Arr {
        let data = (0..numel(shape)).map(|i| f(&unravel(i, shape))).collect();
        Arr::new(shape, data)
    }
    pub fn full(shape: &[usize], v: f64) -> Arr {
        Arr::new(shape, vec![v; numel(shape)])
    }
    /// Random values from `values`, rounded to what `dt` can hold.
    pub fn random(
        rng: &mut Rng,
        shape: &[usize],
        dt: DType,
        values: &mut dyn FnMut(&mut Rng) -> f64,
    ) -> Arr {
        let data = (0..numel(shape))
            .map(|_| quantize(values(rng), dt))
            .collect();
        Arr::new(shape, data)
    }
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    pub fn numel(&self) -> usize {
        self.data.len()
    }
    pub fn at(&self, idx: &[usize]) -> f64 {
        self.data[ravel(idx, &self.shape)]
    }
    pub fn set(&mut self, idx: &[usize], v: f64) {
        let p = ravel(idx, &self.shape);
        self.data[p] = v;
    }
    pub fn map(&self, f: impl Fn(f64) -> f64) -> Arr {
        Arr::new(&self.shape, self.data.iter().map(|&v| f(v)).collect())
    }
    pub fn abs(&self) -> Arr {
        self.map(f64::abs)
    }
    pub fn reshape(&self, shape: &[usize]) -> Arr {
        Arr::new(shape, self.data.clone())
    }
    /// NumPy broadcasting to a larger shape (panics when not broadcastable: a test bug).
    pub fn broadcast_to(&self, shape: &[usize]) -> Arr {
        let lead = shape.len() - self.rank();
        Arr::from_fn(shape, |o| {
            let src: Vec<usize> = self
                .shape
                .iter()
                .enumerate()
                .map(|(k, &d)| {
                    let od = shape[lead + k];
                    assert!(
                        d == od || d == 1,
                        "{:?} cannot broadcast to {shape:?}",
                        self.shape
                    );
                    if d == 1 { 0 } else { o[lead + k] }
                })
                .collect();
            self.at(&src)
        })
    }
}

/// `v` as the nearest value `dt` holds (Rust `as` semantics for ints, round-to-nearest for floats).
pub fn quantize(v: f64, dt: DType) -> f64 {
    match dt {
        DType::F64 => v,
        DType::F32 => v as f32 as f64,
        DType::F16 => half::f16::from_f64(v).to_f64(),
        DType::I32 => v as i32 as f64,
        DType::U32 => v as u32 as f64,
        DType::Bool => (v != 0.0) as u8 as f64,
    }
}

/// Uploads `a` as a contiguous tensor of `dt`.
pub fn tensor(a: &Arr, dt: DType) -> Tensor {
    let data = TensorData::from_f64_iter(a.data.iter().copied(), dt, Shape::new(a.shape.clone()));
    Tensor::from_data(&data, &dev()).expect("uploading test data")
}

/// Reads a tensor back as an `Arr`.
pub fn read(t: &Tensor) -> Result<Arr> {
    let d = t.to_data()?;
    assert_eq!(
        d.shape(),
        t.shape(),
        "read-back shape differs from the tensor's"
    );
    assert_eq!(
        d.dtype(),
        t.dtype(),
        "read-back dtype differs from the tensor's"
    );
    Ok(Arr::new(d.shape().dims(), d.to_f64_vec()))
}

/// One input: a tensor whose logical values are `want`, stored in a layout named by `label`.
pub struct Input {
    pub label: &'static str,
    pub want: Arr,
    pub t: Tensor,
}

/// The same kind of random input in several layouts: contiguous, permuted (axes reversed in
/// storage), step-sliced (every other element of a larger tensor, at an offset) and expanded
/// (a size-1 axis broadcast with stride 0). Rank 0/1 inputs get the layouts that make sense.
pub fn layouts(
    rng: &mut Rng,
    shape: &[usize],
    dt: DType,
    values: &mut dyn FnMut(&mut Rng) -> f64,
) -> Result<Vec<Input>> {
    let mut out = Vec::new();
    let a = Arr::random(rng, shape, dt, values);
    out.push(Input {
        label: "contiguous",
        t: tensor(&a, dt),
        want: a,
    });
    if shape.len() >= 2 {
        let want = Arr::random(rng, shape, dt, values);
        let rev: Vec<usize> = (0..shape.len()).rev().collect();
        let stored = reference::permute(&want, &rev);
        let t = tensor(&stored, dt).permute(&rev)?;
        out.push(Input {
            label: "permuted",
            want,
            t,
        });
    }
    if !shape.is_empty() {
        let big_shape: Vec<usize> = shape.iter().map(|&d| 2 * d + 1).collect();
        let big = Arr::random(rng, &big_shape, dt, values);
        let ranges: Vec<SliceRange> = big_shape
            .iter()
            .map(|&d| SliceRange {
                start: 1,
                end: d,
                step: 2,
            })
            .collect();
        let t = tensor(&big, dt).slice(&ranges)?;
        let want = Arr::from_fn(shape, |i| {
            let j: Vec<usize> = i.iter().map(|&k| 2 * k + 1).collect();
            big.at(&j)
        });
        out.push(Input {
            label: "step-sliced",
            want,
            t,
        });
    }
    if let Some(axis) = shape.iter().position(|&d| d > 1) {
        let mut small_shape = shape.to_vec();
        small_shape[axis] = 1;
        let small = Arr::random(rng, &small_shape, dt, values);
        let t = tensor(&small, dt).expand(shape.to_vec())?;
        out.push(Input {
            label: "expanded",
            want: small.broadcast_to(shape),
            t,
        });
    }
    Ok(out)
}

/// Relative and absolute tolerance for results of `dt` computed from exact inputs.
pub fn tol(dt: DType) -> (f64, f64) {
    match dt {
        DType::F64 => (1e-12, 1e-12),
        DType::F32 => (2e-6, 1e-6),
        DType::F16 => (2e-3, 1e-3),
        DType::I32 | DType::U32 | DType::Bool => (0.0, 0.0),
    }
}

/// Asserts `got` has `dt`, `want`'s shape, and values within `atol + rtol * |want|`
/// (NaN matches NaN, infinities must match exactly).
#[track_caller]
pub fn assert_close(what: &str, got: &Tensor, want: &Arr, dt: DType, rtol: f64, atol: f64) {
    let scale = want.abs();
    assert_close_scaled(what, got, want, &scale, dt, rtol, atol);
}

/// [`assert_close`] with the dtype's default tolerance.
#[track_caller]
pub fn assert_ref(what: &str, got: &Tensor, want: &Arr, dt: DType) {
    let (r, a) = tol(dt);
    assert_close(what, got, want, dt, r, a);
}

/// Like [`assert_close`] but the relative bound is taken against `scale` (for sums with
/// cancellation, scale is the same sum of absolute values).
#[track_caller]
pub fn assert_close_scaled(
    what: &str,
    got: &Tensor,
    want: &Arr,
    scale: &Arr,
    dt: DType,
    rtol: f64,
    atol: f64,
) {
    assert_eq!(got.dtype(), dt, "{what}: dtype");
    assert_eq!(got.dims(), &want.shape[..], "{what}: shape");
    let g = read(got).unwrap_or_else(|e| panic!("{what}: reading back failed: {e}"));
    let mut bad = Vec::new();
    for (i, ((&x, &w), &s)) in g.data.iter().zip(&want.data).zip(&scale.data).enumerate() {
        let ok = if w.is_nan() {
            x.is_nan()
        } else if w.is_infinite() {
            x == w
        } else {
            (x - w).abs() <= atol + rtol * s
        };
        if !ok {
            bad.push((unravel(i, &want.shape), x, w));
        }
    }
    if let Some((idx, x, w)) = bad.first() {
        panic!(
            "{what}: {} of {} elements differ; first at {idx:?}: got {x}, want {w} (rtol {rtol}, atol {atol})",
            bad.len(),
            want.numel()
        );
    }
}

/// Asserts `r` is an error of `kind` whose message contains every string in `needles`.
#[track_caller]
pub fn assert_err<T: std::fmt::Debug>(
    r: Result<T>,
    kind: kiln_core::ErrorKind,
    op: &str,
    needles: &[&str],
) {
    let e = match r {
        Ok(v) => panic!("expected a {kind:?} error from {op}, got Ok({v:?})"),
        Err(e) => e,
    };
    let text = e.to_string();
    assert_eq!(e.kind(), kind, "kind of `{text}`");
    assert!(
        e.op().contains(op),
        "error `{text}` should name the op `{op}`"
    );
    for n in needles {
        assert!(text.contains(n), "error `{text}` should mention `{n}`");
    }
}
