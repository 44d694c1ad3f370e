//! The fusion decorator on wgpu (lavapipe in CI) against the unfused CPU device. Each test
//! skips, with a notice, where the machine has no wgpu adapter.

use kiln_core::random::SplitMix64;
use kiln_core::{
    CmpOp, DType, Device, ErrorKind, ReduceOp, Result, Shape, SliceRange, Tensor, TensorData,
};
use kiln_kernels::cuda::{Dialect, translate};
use kiln_kernels::fusion::{self, Stats};
use std::sync::{Arc, OnceLock};

/// The wgpu device, or `None` (printed) without an adapter.
fn gpu() -> Option<Device> {
    static DEV: OnceLock<Option<Device>> = OnceLock::new();
    DEV.get_or_init(|| match kiln_kernels::wgpu_device() {
        Ok(d) => Some(d),
        Err(e) if e.kind() == ErrorKind::Device => {
            eprintln!("fusion tests: SKIPPED, no wgpu adapter: {e}");
            None
        }
        Err(e) => panic!("{e}"),
    })
    .clone()
}

/// A fresh fused device over wgpu with its counters (one per test: tests run in parallel).
fn fused() -> Option<(Device, Arc<Stats>)> {
    gpu().map(|d| fusion::wrap_with_stats(&d))
}

fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut r = SplitMix64::new(seed);
    (0..n).map(|_| r.symmetric(3.0)).collect()
}

fn tensor(shape: &[usize], seed: u64, dev: &Device) -> Result<Tensor> {
    let n = shape.iter().product();
    Tensor::from_vec(values(n, seed), shape.to_vec(), dev)
}

/// The same data on another device.
fn on(t: &Tensor, dev: &Device) -> Result<Tensor> {
    Tensor::from_data(&t.to_data()?, dev)
}

fn assert_close(got: &Tensor, want: &Tensor, tol: f64) -> Result<()> {
    assert_eq!(got.shape(), want.shape());
    assert_eq!(got.dtype(), want.dtype());
    let (g, w) = (got.to_data()?.to_f64_vec(), want.to_data()?.to_f64_vec());
    for (i, (a, b)) in g.iter().zip(&w).enumerate() {
        let ok = (a - b).abs() <= tol * (1.0 + b.abs()) || (a.is_nan() && b.is_nan());
        assert!(ok, "element {i}: got {a}, expected {b}");
    }
    Ok(())
}

fn range(start: usize, end: usize, step: usize) -> SliceRange {
    SliceRange { start, end, step }
}

fn gelu(x: &Tensor) -> Result<Tensor> {
    x.mul(
        &x.div_scalar(std::f64::consts::SQRT_2)?
            .erf()?
            .add_scalar(1.0)?,
    )?
    .div_scalar(2.0)
}

#[test]
fn composed_gelu_is_one_kernel_and_matches_the_cpu() -> Result<()> {
    let Some((dev, stats)) = fused() else {
        return Ok(());
    };
    let cpu = Device::cpu();
    let x = tensor(&[1000], 1, &cpu)?;
    let xg = on(&x, &dev)?;
    let k0 = stats.kernels();
    let y = gelu(&xg)?;
    assert_eq!(
        stats.kernels(),
        k0,
        "nothing runs before the values are needed"
    );
    let got = y.to_data()?;
    assert_eq!(stats.kernels() - k0, 1, "GELU is one kernel");
    assert_eq!(stats.fused(), 1);
    assert_close(&Tensor::from_data(&got, &cpu)?, &gelu(&x)?, 1e-5)?;
    // read again: the buffer is reused, nothing runs
    y.to_data()?;
    assert_eq!(stats.kernels() - k0, 1);
    Ok(())
}

#[test]
fn broadcasts_of_a_bias_and_a_scalar() -> Result<()> {
    let Some((dev, stats)) = fused() else {
        return Ok(());
    };
    let cpu = Device::cpu();
    let f =
        |x: &Tensor, b: &Tensor| -> Result<Tensor> { x.add(b)?.relu()?.mul_scalar(0.5)?.sub(b) };
    let (x, b) = (tensor(&[9, 7], 2, &cpu)?, tensor(&[7], 3, &cpu)?);
    let y = f(&on(&x, &dev)?, &on(&b, &dev)?)?;
    let k0 = stats.kernels();
    assert_close(&on(&y, &cpu)?, &f(&x, &b)?, 1e-6)?;
    assert_eq!(stats.kernels() - k0, 1);
    // a column [N, 1] and a rank-3 broadcast against [2, N, C]
    let (c, z) = (tensor(&[9, 1], 4, &cpu)?, tensor(&[2, 1, 7], 5, &cpu)?);
    let g = |x: &Tensor, c: &Tensor, z: &Tensor| -> Result<Tensor> { x.mul(c)?.add(z)?.exp() };
    let y = g(&on(&x, &dev)?, &on(&c, &dev)?, &on(&z, &dev)?)?;
    assert_close(&on(&y, &cpu)?, &g(&x, &c, &z)?, 1e-5)?;
    // an expanded view as input, and a lazy broadcast operand ([7] onto [9, 7])
    let bias = on(&b, &dev)?.mul_scalar(2.0)?;
    let y = on(&x, &dev)?
        .add(&bias)?
        .add(&on(&b, &dev)?.expand([9, 7])?)?;
    let want = x.add(&b.mul_scalar(2.0)?)?.add(&b)?;
    assert_close(&on(&y, &cpu)?, &want, 1e-6)
}

#[test]
fn a_causal_mask_reads_rows_and_columns_by_broadcast() -> Result<()> {
    let Some((dev, stats)) = fused() else {
        return Ok(());
    };
    let cpu = Device::cpu();
    // scores [B, H, T, T] masked where column > row: the column index [T] is read `i % T`,
    // the row index [T, 1] `(i / T) % T`; T = 8 takes the vec4 kernel, T = 5 the scalar one
    let mask = |x: &Tensor, col: &Tensor, row: &Tensor| -> Result<Tensor> {
        let keep = col.compare(CmpOp::Le, row)?;
        keep.where_cond(&x.mul_scalar(0.125)?, &x.full_like(-1e9)?)
    };
    for t in [8, 5] {
        let x = tensor(&[2, 3, t, t], 7 + t as u64, &cpu)?;
        let col = Tensor::arange(0.0, t as f64, 1.0, DType::I32, &cpu)?;
        let row = col.reshape([t, 1])?;
        let k0 = stats.kernels();
        let y = mask(&on(&x, &dev)?, &on(&col, &dev)?, &on(&row, &dev)?)?;
        assert_close(&on(&y, &cpu)?, &mask(&x, &col, &row)?, 1e-6)?;
        assert_eq!(stats.kernels() - k0, 1, "T = {t}");
    }
    Ok(())
}

/// Compares a reduction of `x` (f32) with the CPU's within a bound from the sum of the terms'
/// magnitudes (the GPU adds in another order).
fn assert_reduced(got: &Tensor, want: &Tensor, magnitude: &Tensor, what: &str) -> Result<()> {
    assert_eq!(got.shape(), want.shape(), "{what}");
    let (g, w) = (got.to_data()?.to_f64_vec(), want.to_data()?.to_f64_vec());
    let m = magnitude.to_data()?.to_f64_vec();
    for (i, ((a, b), m)) in g.iter().zip(&w).zip(&m).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5 * m + 1e-6,
            "{what}: element {i}: got {a}, expected {b}"
        );
    }
    Ok(())
}

/// A sum, mean, max or min of a pending chain over its trailing axes is one generated kernel
/// (a second one, the inner reduction, combines the partials of few long rows), short rows an
/// invocation each, longer ones a workgroup each; other axes (columns, middle blocks, axes that
/// are not adjacent) store the chain and reduce it. The same reductions through fusion over
/// the CPU check its reference.
#[test]
fn reductions_of_a_chain_fuse_into_it() -> Result<()> {
    let Some((gpu, gpu_stats)) = fused() else {
        return Ok(());
    };
    let cpu = Device::cpu();
    let chain = |x: &Tensor, y: &Tensor| -> Result<Tensor> { x.mul(y)?.add_scalar(0.25)?.tanh() };
    use ReduceOp::{Max, Mean, Min, Sum};
    // (shape, axes, op, keepdim, kernels: 1 fused, 2 with the partials' reduction, 0 not fused)
    type Case<'a> = (&'a [usize], &'a [usize], ReduceOp, bool, u64);
    let cases: [Case; 14] = [
        (&[37, 384], &[1], Mean, true, 1),      // a layer norm's rows
        (&[2, 3, 5, 7], &[3], Sum, true, 1),    // a softmax gradient's rows
        (&[13, 1000], &[1], Max, false, 1),     // longer rows
        (&[1100, 12], &[1], Sum, false, 1),     // many short rows: an invocation per row
        (&[1030, 7], &[1], Max, true, 1),       // the same without vec4 loads
        (&[100_000], &[0], Sum, false, 2),      // a squared norm: one long row in chunks
        (&[200_001], &[], Mean, false, 2),      // odd length, all axes
        (&[6, 7, 8], &[0, 1, 2], Min, true, 1), // every axis
        (&[4, 9, 3], &[1, 2], Mean, false, 1),  // two trailing axes
        (&[64, 6, 5], &[2, 1], Sum, false, 1),  // axes given out of order
        (&[1000, 24], &[0], Sum, false, 0),     // a bias gradient: columns
        (&[3, 50, 7], &[1], Min, false, 0),     // a middle block
        (&[4, 9, 3], &[0, 1], Max, true, 0),    // two leading axes
        (&[4, 5, 6], &[0, 2], Sum, false, 0),   // not adjacent
    ];
    let (wrapped_cpu, _) = fusion::wrap_with_stats(&cpu);
    for (i, (shape, axes, op, keepdim, kernels)) in cases.into_iter().enumerate() {
        let what = format!("{op:?} over {axes:?} of {shape:?}");
        let (x, y) = (
            tensor(shape, 40 + i as u64, &cpu)?,
            tensor(shape, 60 + i as u64, &cpu)?,
        );
        let ax: Vec<isize> = axes.iter().map(|&a| a as isize).collect();
        let want = chain(&x, &y)?.reduce(op, &ax, keepdim)?;
        let bound = if op == Max || op == Min { Max } else { op };
        let magnitude = chain(&x, &y)?.abs()?.reduce(bound, &ax, keepdim)?;
        let (k0, r0) = (gpu_stats.kernels(), gpu_stats.reductions());
        let got = chain(&on(&x, &gpu)?, &on(&y, &gpu)?)?.reduce(op, &ax, keepdim)?;
        let fused = gpu_stats.reductions() - r0;
        assert_eq!(fused, u64::from(kernels > 0), "{what}: fused");
        if kernels > 0 {
            assert_eq!(gpu_stats.kernels() - k0, kernels, "{what}: kernels");
        }
        assert_reduced(&on(&got, &cpu)?, &want, &magnitude, &what)?;
        let got =
            chain(&on(&x, &wrapped_cpu)?, &on(&y, &wrapped_cpu)?)?.reduce(op, &ax, keepdim)?;
        assert_reduced(
            &on(&got, &cpu)?,
            &want,
            &magnitude,
            &format!("{what} (CPU)"),
        )?;
    }
    // integers add exactly (wrapping) in any order
    let xi = tensor(&[7, 300], 80, &cpu)?
        .mul_scalar(100.0)?
        .cast(DType::I32)?;
    let f = |x: &Tensor| -> Result<Tensor> { x.mul(x)?.add_scalar(3.0)?.sum(&[1], false) };
    let r0 = gpu_stats.reductions();
    let got = f(&on(&xi, &gpu)?)?;
    assert_eq!(gpu_stats.reductions() - r0, 1);
    assert_eq!(got.to_data()?.to_f64_vec(), f(&xi)?.to_data()?.to_f64_vec());
    Ok(())
}

#[test]
fn reshape_between_ops_inlines() -> Result<()> {
    let Some((dev, stats)) = fused() else {
        return Ok(());
    };
    let cpu = Device::cpu();
    let f = |x: &Tensor| -> Result<Tensor> { x.exp()?.reshape([5, 21])?.add_scalar(1.0)?.log() };
    let x = tensor(&[3, 5, 7], 6, &cpu)?;
    let k0 = stats.kernels();
    let y = f(&on(&x, &dev)?)?;
    assert_close(&on(&y, &cpu)?, &f(&x)?, 1e-5)?;
    assert_eq!(
        stats.kernels() - k0,
        1,
        "a reshape does not split the chain"
    );
    Ok(())
}

#[test]
fn permuted_and_sliced_lazies_are_materialized() -> Result<()> {
    let Some((dev, _)) = fused() else {
        return Ok(());
    };
    let cpu = Device::cpu();
    let f = |x: &Tensor| -> Result<Tensor> {
        let a = x.sin()?;
        let p = a.permute(&[2, 0, 1])?.mul_scalar(3.0)?; // [7, 3, 5]
        let s = a
            .slice(&[range(1, 3, 1), range(0, 5, 2), range(2, 7, 1)])?
            .cos()?; // [2, 3, 5]
        p.reshape([7, 15])?
            .sum(&[0], false)?
            .add(&s.reshape([2, 15])?)
    };
    let x = tensor(&[3, 5, 7], 7, &cpu)?;
    assert_close(&on(&f(&on(&x, &dev)?)?, &cpu)?, &f(&x)?, 1e-4)
}

#[test]
fn odd_shapes_and_integer_chains() -> Result<()> {
    let Some((dev, _)) = fused() else {
        return Ok(());
    };
    let cpu = Device::cpu();
    for shape in [&[3usize, 5, 7][..], &[1], &[], &[257, 3]] {
        let x = tensor(shape, 8, &cpu)?;
        let f = |x: &Tensor| -> Result<Tensor> {
            let i = x.mul_scalar(10.0)?.cast(DType::I32)?;
            let m = i.compare(CmpOp::Gt, &i.scalar_like(3.0)?)?;
            let j = m.where_cond(&i.mul_scalar(2.0)?, &i.neg()?)?.abs()?;
            let u = j.cast(DType::U32)?.add_scalar(1.0)?;
            u.cast(DType::F32)?.add(x)?.sqrt()
        };
        assert_close(&on(&f(&on(&x, &dev)?)?, &cpu)?, &f(&x)?, 1e-5)?;
    }
    Ok(())
}

#[test]
fn a_read_in_the_middle_of_a_chain() -> Result<()> {
    let Some((dev, stats)) = fused() else {
        return Ok(());
    };
    let cpu = Device::cpu();
    let x = tensor(&[33], 9, &cpu)?;
    let a = on(&x, &dev)?.tanh()?.mul_scalar(2.0)?;
    let k0 = stats.kernels();
    assert_close(&on(&a, &cpu)?, &x.tanh()?.mul_scalar(2.0)?, 1e-5)?;
    assert_eq!(stats.kernels() - k0, 1);
    // `a` is now a buffer: the rest is one more kernel reading it
    let b = a.add_scalar(1.0)?.exp()?;
    assert_close(
        &on(&b, &cpu)?,
        &x.tanh()?.mul_scalar(2.0)?.add_scalar(1.0)?.exp()?,
        1e-5,
    )?;
    assert_eq!(stats.kernels() - k0, 2);
    Ok(())
}

#[test]
fn autodiff_through_a_fused_chain() -> Result<()> {
    let Some((dev, _)) = fused() else {
        return Ok(());
    };
    let cpu = Device::cpu();
    let grad = |x: Tensor| -> Result<TensorData> {
        let x = x.require_grad();
        let y = gelu(&x)?.mul(&x.sigmoid()?)?.sum_all()?;
        y.backward()?.get(&x).expect("a gradient").to_data()
    };
    let x = tensor(&[4, 6], 10, &cpu)?;
    let got = Tensor::from_data(&grad(on(&x, &dev)?)?, &cpu)?;
    let want = Tensor::from_data(&grad(x)?, &cpu)?;
    assert_close(&got, &want, 1e-4)
}

#[test]
fn synchronize_runs_pending_work_and_dropped_work_never_runs() -> Result<()> {
    let Some((dev, stats)) = fused() else {
        return Ok(());
    };
    let x = tensor(&[64], 11, &dev)?;
    let k0 = stats.kernels();
    drop(x.exp()?.add_scalar(1.0)?);
    dev.backend().synchronize()?;
    assert_eq!(stats.kernels(), k0, "a dropped lazy runs nothing");
    let y = x.exp()?.add_scalar(1.0)?;
    dev.backend().synchronize()?;
    assert_eq!(stats.kernels() - k0, 1);
    y.to_data()?;
    assert_eq!(stats.kernels() - k0, 1);
    Ok(())
}

#[test]
fn constants_fold_and_long_chains_split() -> Result<()> {
    let Some((dev, stats)) = fused() else {
        return Ok(());
    };
    let cpu = Device::cpu();
    // a lone constant is a fill; a constant expression a kernel without inputs
    let c = Tensor::full([3, 4], 2.5, DType::F32, &dev)?;
    assert_eq!(c.to_vec::<f32>()?, vec![2.5; 12]);
    let e = Tensor::full([5], 1.0, DType::F32, &dev)?
        .exp()?
        .mul_scalar(f64::INFINITY)?;
    assert_eq!(e.to_vec::<f32>()?, vec![f32::INFINITY; 5]);
    // more ops than one kernel takes
    let f = |x: &Tensor| -> Result<Tensor> {
        let mut y = x.clone();
        for i in 0..100 {
            y = y.mul_scalar(0.99)?.add_scalar(i as f64 * 1e-3)?;
        }
        Ok(y)
    };
    let x = tensor(&[50], 12, &cpu)?;
    let k0 = stats.kernels();
    let y = f(&on(&x, &dev)?)?;
    assert_close(&on(&y, &cpu)?, &f(&x)?, 1e-4)?;
    let runs = stats.kernels() - k0;
    assert!((2..=10).contains(&runs), "{runs} kernels");
    // more inputs than one kernel takes
    let xs: Vec<Tensor> = (0..9)
        .map(|i| tensor(&[20], 20 + i, &cpu))
        .collect::<Result<_>>()?;
    let sum = |xs: &[Tensor]| -> Result<Tensor> {
        xs[1..].iter().try_fold(xs[0].clone(), |acc, x| acc.add(x))
    };
    let xg: Vec<Tensor> = xs.iter().map(|x| on(x, &dev)).collect::<Result<_>>()?;
    assert_close(&on(&sum(&xg)?, &cpu)?, &sum(&xs)?, 1e-5)
}

/// A tensor on both devices: the fused GPU one and the CPU oracle.
#[derive(Clone)]
struct Pair {
    g: Tensor,
    c: Tensor,
}

impl Pair {
    fn map(&self, f: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Pair> {
        Ok(Pair {
            g: f(&self.g)?,
            c: f(&self.c)?,
        })
    }
    fn zip(&self, o: &Pair, f: impl Fn(&Tensor, &Tensor) -> Result<Tensor>) -> Result<Pair> {
        Ok(Pair {
            g: f(&self.g, &o.g)?,
            c: f(&self.c, &o.c)?,
        })
    }
}

/// xorshift64*: the fuzz test's seeded choices.
struct Rng(SplitMix64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0.below(n.max(1))
    }
    fn chance(&mut self, p: f64) -> bool {
        self.0.next_f64() <= p
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

/// Compares a fused result with the CPU's; `inexact` chains (transcendental f32 math feeding a
/// discontinuous op) may differ in a few elements that sit on a step.
fn check(p: &Pair, inexact: bool, what: &str) -> Result<()> {
    let (g, c) = (p.g.to_data()?, p.c.to_data()?);
    assert_eq!((g.dtype(), g.shape()), (c.dtype(), c.shape()), "{what}");
    let (g, c) = (g.to_f64_vec(), c.to_f64_vec());
    let tol = if p.c.dtype() == DType::F32 { 2e-3 } else { 0.0 };
    // where the oracle has NaN (inf - inf, ...) drivers may give anything: WGSL lets them
    // assume no NaNs
    let bad: Vec<(usize, f64, f64)> = g
        .iter()
        .zip(&c)
        .enumerate()
        .filter(|&(_, (&a, &b))| !(a == b || b.is_nan() || (a - b).abs() <= tol * (1.0 + b.abs())))
        .map(|(i, (&a, &b))| (i, a, b))
        .collect();
    let allowed = if inexact { c.len().div_ceil(50) } else { 0 };
    assert!(
        bad.len() <= allowed,
        "{what}: {} of {} elements differ (index, got, expected): {:?}",
        bad.len(),
        c.len(),
        &bad[..bad.len().min(8)]
    );
    Ok(())
}

/// Random chains of table ops (unary incl. clamp/powf, binary, compare, where, cast,
/// constants), on f32, i32, u32 and bool, with broadcast inputs, odd shapes, reshapes,
/// expanded and strided views, reads in the middle, some starting from a matmul's output (a
/// GEMM epilogue), run fused on wgpu and on the CPU.
#[test]
fn fuzz_random_chains_match_the_cpu() -> Result<()> {
    let Some((dev, stats)) = fused() else {
        return Ok(());
    };
    let cpu = Device::cpu();
    let chains: u64 = std::env::var("KILN_FUSION_FUZZ")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let start = std::time::Instant::now();
    for seed in 0..chains {
        let mut r = Rng(SplitMix64::new(seed));
        // rank 4 and sizes of 4 reach the middle read kind and vec4 kernels with broadcasts
        let rank = r.below(5);
        let out: Vec<usize> = (0..rank)
            .map(|_| *r.pick(&[1, 2, 3, 4, 5, 7, 13]))
            .collect();
        let base = if r.chance(0.5) {
            DType::F32
        } else {
            DType::I32
        };
        // an input shape that broadcasts to `out`: leading axes dropped, some axes 1
        let shape_of = |r: &mut Rng| -> Vec<usize> {
            let skip = r.below(rank + 1).min(if r.chance(0.6) { 0 } else { rank });
            out[skip..]
                .iter()
                .map(|&d| if r.chance(0.25) { 1 } else { d })
                .collect()
        };
        let mut pool: Vec<Pair> = Vec::new();
        let mut log = Vec::new();
        for k in 0..1 + r.below(3) {
            let shape = if k == 0 {
                out.clone()
            } else {
                shape_of(&mut r)
            };
            let n: usize = shape.iter().product();
            let data = match base {
                DType::F32 => TensorData::new(values(n, seed * 7 + k as u64), shape.clone())?,
                _ => {
                    let v = values(n, seed * 7 + k as u64);
                    TensorData::new(v.iter().map(|x| (x * 7.0) as i32).collect(), shape.clone())?
                }
            };
            let mut pair = Pair {
                g: Tensor::from_data(&data, &dev)?,
                c: Tensor::from_data(&data, &cpu)?,
            };
            if k == 0 && base == DType::F32 && rank >= 2 && r.chance(0.3) {
                // the output of a matmul: chains on it may run in its GEMM's store
                let kk = 1 + r.below(9);
                let rhs = TensorData::new(
                    values(kk * out[rank - 1], seed * 7 + 5),
                    [kk, out[rank - 1]],
                )?;
                let mut lhs_shape = out.clone();
                lhs_shape[rank - 1] = kk;
                let n = lhs_shape.iter().product();
                let lhs = TensorData::new(values(n, seed * 7 + 6), lhs_shape)?;
                let mm = |d: &Device| -> Result<Tensor> {
                    Tensor::from_data(&lhs, d)?.matmul(&Tensor::from_data(&rhs, d)?)
                };
                log.push(format!("matmul K={kk}"));
                pair = Pair {
                    g: mm(&dev)?,
                    c: mm(&cpu)?,
                };
            }
            pool.push(pair);
        }
        let mut inexact = false;
        for _ in 0..2 + r.below(10) {
            let a = r.pick(&pool).clone();
            let dt = a.c.dtype();
            let same: Vec<Pair> = pool.iter().filter(|p| p.c.dtype() == dt).cloned().collect();
            let b = r.pick(&same).clone();
            let numeric = dt != DType::Bool;
            let next = match r.below(11) {
                0..=2 if numeric => {
                    let ops: Vec<_> = kiln_core::UnaryOp::samples()
                        .into_iter()
                        .filter(|u| u.dtypes().contains(&dt))
                        .collect();
                    let u = *r.pick(&ops);
                    if dt == DType::F32 && !matches!(u.name(), "neg" | "abs" | "relu" | "clamp") {
                        inexact = true;
                    }
                    log.push(u.name().to_string());
                    if dt == DType::F32 && u.test_range().lo > 0.0 {
                        // inside the domain: drivers may fold exp(log(x)) to x, NaN or not
                        a.map(|t| t.abs()?.add_scalar(0.5)?.unary(u))?
                    } else {
                        a.map(|t| t.unary(u))?
                    }
                }
                3..=4 if numeric => {
                    let mut ops: Vec<_> = kiln_core::BinaryOp::ALL.to_vec();
                    ops.retain(|o| dt == DType::F32 || !o.float_only());
                    let o = *r.pick(&ops);
                    inexact |= dt == DType::F32 && matches!(o.name(), "div" | "pow");
                    log.push(o.name().to_string());
                    if o.name() == "pow" {
                        a.zip(&b, |x, y| x.abs()?.add_scalar(0.5)?.pow(&y.tanh()?))?
                    } else if o.name() == "div" && dt == DType::F32 {
                        // no 0/0: NaN handling is the driver's (WGSL lets it assume none)
                        a.zip(&b, |x, y| x.div(&y.abs()?.add_scalar(0.5)?))?
                    } else if r.chance(0.3) {
                        let v = *r.pick(&[0.5, 2.0, -1.5, 3.0]);
                        a.map(|t| t.binary_scalar(o, v))?
                    } else {
                        a.zip(&b, |x, y| x.binary(o, y))?
                    }
                }
                5 if numeric => {
                    let c = *r.pick(CmpOp::ALL);
                    log.push(c.name().to_string());
                    a.zip(&b, |x, y| x.compare(c, y))?
                }
                6 => {
                    let conds: Vec<Pair> = pool
                        .iter()
                        .filter(|p| p.c.dtype() == DType::Bool)
                        .cloned()
                        .collect();
                    if conds.is_empty() {
                        continue;
                    }
                    let c = r.pick(&conds).clone();
                    log.push("where".into());
                    Pair {
                        g: c.g.where_cond(&a.g, &b.g)?,
                        c: c.c.where_cond(&a.c, &b.c)?,
                    }
                }
                7 => {
                    let to = *r.pick(&[DType::F32, DType::I32, DType::U32, DType::Bool]);
                    if inexact && dt == DType::F32 && to != DType::F32 {
                        // a float on a step may round either way: only the kernels are tested
                        continue;
                    }
                    log.push(format!("cast {to}"));
                    a.map(|t| t.cast(to))?
                }
                8 => {
                    // a reshape there and back (inlined), or an expanded view (a leaf)
                    log.push("view".into());
                    if r.chance(0.5) {
                        a.map(|t| t.reshape([t.numel()])?.reshape(t.shape().clone()))?
                    } else {
                        let full = Shape::new(out.clone());
                        let s = Shape::broadcast(a.c.shape(), &full, "fuzz")?;
                        a.map(|t| t.expand(s.clone()))?
                    }
                }
                9 if a.c.rank() >= 2 => {
                    // a strided (transposed) real buffer as an input
                    log.push("transpose".into());
                    let rk = a.c.rank();
                    let mut p: Vec<usize> = (0..rk).collect();
                    p.swap(rk - 1, rk - 2);
                    a.map(|t| t.permute(&p)?.contiguous()?.permute(&p))?
                }
                10 => {
                    // a read in the middle of the chain
                    check(
                        &a,
                        inexact,
                        &format!("seed {seed}: middle read after {log:?}"),
                    )?;
                    continue;
                }
                _ => continue,
            };
            pool.push(next);
        }
        let mut last = pool.last().expect("a value").clone();
        // nothing else holds the chain's inputs now: a matmul's output may take it as its
        // epilogue
        drop(pool);
        let dt = last.c.dtype();
        if !inexact && dt != DType::Bool && last.c.rank() > 0 && r.chance(0.4) {
            // the chain reduced over an adjacent block of axes (fused) or any set (not)
            let rk = last.c.rank();
            let a0 = r.below(rk);
            let axes: Vec<isize> = if r.chance(0.7) {
                (a0..a0 + 1 + r.below(rk - a0))
                    .map(|a| a as isize)
                    .collect()
            } else {
                (0..rk)
                    .filter(|_| r.chance(0.5))
                    .map(|a| a as isize)
                    .collect()
            };
            let mut ops = vec![ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min];
            if dt == DType::F32 {
                ops.push(ReduceOp::Mean);
            }
            let op = *r.pick(&ops);
            let keepdim = r.chance(0.5);
            log.push(format!("{op:?} over {axes:?}"));
            let reduced = last.map(|t| t.reduce(op, &axes, keepdim))?;
            if dt == DType::F32 && matches!(op, ReduceOp::Sum | ReduceOp::Mean) {
                // the GPU adds in another order
                let m = last.c.abs()?.reduce(op, &axes, keepdim)?;
                let what = format!("seed {seed}: {log:?} on {out:?}");
                assert_reduced(&on(&reduced.g, &cpu)?, &reduced.c, &m, &what)?;
                continue;
            }
            last = reduced;
        }
        if start.elapsed().as_secs() > 240 {
            panic!("fuzz: too slow ({seed} chains in 240 s)");
        }
        check(
            &last,
            inexact,
            &format!("seed {seed}: {log:?} on {out:?} {base}"),
        )?;
    }
    // every generated kernel also goes through the CUDA C and HIP translator
    let mut kernels = 0;
    // (an epilogue's WGSL is the part appended to a GEMM: `epilogue_kernels_pass_naga_...`)
    let generated = fusion::kernels().into_iter();
    for (name, wgsl) in generated.filter(|(n, _)| !n.starts_with("kiln.epilogue.")) {
        for dialect in [Dialect::Cuda, Dialect::Hip] {
            translate(&wgsl, &name, dialect).unwrap_or_else(|e| panic!("{name}: {e}\n{wgsl}"));
        }
        kernels += 1;
    }
    eprintln!(
        "fusion fuzz: {chains} chains, {} fused kernels run ({} in a GEMM), {kernels} distinct \
         kernels (naga-checked, translated to CUDA C and HIP), {} ops recorded, {:.1} s",
        stats.fused(),
        stats.epilogues(),
        stats.recorded(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

#[test]
fn chains_on_a_gemm_output_run_in_its_store() -> Result<()> {
    let Some((dev, stats)) = fused() else {
        return Ok(());
    };
    let cpu = Device::cpu();
    // a conv layer: bias and ReLU, odd sizes, stride and padding
    let p = kiln_core::Conv2dParams {
        stride: [2, 1],
        padding: [1, 0],
        ..Default::default()
    };
    let conv = |x: &Tensor, w: &Tensor, b: &Tensor| -> Result<Tensor> {
        x.conv2d(w, Some(b), p)?.relu()?.mul_scalar(1.5)
    };
    let x = tensor(&[3, 5, 11, 9], 20, &cpu)?;
    let (w, b) = (tensor(&[7, 5, 3, 3], 21, &cpu)?, tensor(&[7], 22, &cpu)?);
    let (e0, k0) = (stats.epilogues(), stats.kernels());
    let y = conv(&on(&x, &dev)?, &on(&w, &dev)?, &on(&b, &dev)?)?;
    assert_close(&on(&y, &cpu)?, &conv(&x, &w, &b)?, 1e-4)?;
    assert_eq!(stats.epilogues() - e0, 1);
    assert_eq!(stats.kernels() - k0, 1, "conv, bias and ReLU as one kernel");

    // a linear layer on a transposed weight view, a composed GELU and a residual
    let linear = |x: &Tensor, w: &Tensor, b: &Tensor, r: &Tensor| -> Result<Tensor> {
        gelu(&x.matmul(&w.t()?)?.add(b)?)?.add(r)
    };
    let x = tensor(&[13, 19], 23, &cpu)?;
    let (w, b, r) = (
        tensor(&[10, 19], 24, &cpu)?,
        tensor(&[10], 25, &cpu)?,
        tensor(&[13, 10], 26, &cpu)?,
    );
    let args = [&x, &w, &b, &r].map(|t| on(t, &dev));
    let [gx, gw, gb, gr] = args;
    let (e0, k0) = (stats.epilogues(), stats.kernels());
    let y = linear(&gx?, &gw?, &gb?, &gr?)?;
    assert_close(&on(&y, &cpu)?, &linear(&x, &w, &b, &r)?, 1e-5)?;
    assert_eq!((stats.epilogues() - e0, stats.kernels() - k0), (1, 1));

    // attention's scores: a batched matmul, scaled and masked by a broadcast row index
    let scores = |q: &Tensor, k: &Tensor, m: &Tensor| -> Result<Tensor> {
        let s = q.matmul(&k.transpose(-2, -1)?)?.mul_scalar(0.25)?;
        m.where_cond(&s, &s.scalar_like(-1e9)?)
    };
    let (q, k) = (
        tensor(&[2, 3, 6, 5], 27, &cpu)?,
        tensor(&[2, 3, 6, 5], 28, &cpu)?,
    );
    let m = tensor(&[6, 6], 29, &cpu)?.gt(&Tensor::scalar(0.0, DType::F32, &cpu)?)?;
    let e0 = stats.epilogues();
    let y = scores(&on(&q, &dev)?, &on(&k, &dev)?, &on(&m, &dev)?)?;
    assert_close(&on(&y, &cpu)?, &scores(&q, &k, &m)?, 1e-5)?;
    assert_eq!(stats.epilogues() - e0, 1);

    // few outputs over a long K: split-K's reduction writes the product, then the chain runs
    let (a, c) = (tensor(&[2, 3001], 30, &cpu)?, tensor(&[3001, 3], 31, &cpu)?);
    let f = |a: &Tensor, c: &Tensor| -> Result<Tensor> { a.matmul(c)?.tanh()?.add_scalar(1.0) };
    let y = f(&on(&a, &dev)?, &on(&c, &dev)?)?;
    assert_close(&on(&y, &cpu)?, &f(&a, &c)?, 1e-4)?;

    // a single image's conv over a long K: split-K, then the chain after the reduction
    let (x1, w1) = (
        tensor(&[1, 64, 9, 8], 32, &cpu)?,
        tensor(&[5, 64, 3, 3], 33, &cpu)?,
    );
    let b1 = tensor(&[5], 34, &cpu)?;
    let y = conv(&on(&x1, &dev)?, &on(&w1, &dev)?, &on(&b1, &dev)?)?;
    assert_close(&on(&y, &cpu)?, &conv(&x1, &w1, &b1)?, 1e-4)?;

    // a transposed conv (a decoder's upsampling) with its bias and a sigmoid
    let up = |x: &Tensor, w: &Tensor, b: &Tensor| -> Result<Tensor> {
        x.conv_transpose2d(w, Some(b), p, [1, 0])?.sigmoid()
    };
    let (xt, wt) = (
        tensor(&[2, 6, 5, 4], 38, &cpu)?,
        tensor(&[6, 3, 3, 3], 39, &cpu)?,
    );
    let bt = tensor(&[3], 40, &cpu)?;
    let e0 = stats.epilogues();
    let y = up(&on(&xt, &dev)?, &on(&wt, &dev)?, &on(&bt, &dev)?)?;
    assert_close(&on(&y, &cpu)?, &up(&xt, &wt, &bt)?, 1e-5)?;
    assert_eq!(stats.epilogues() - e0, 1);

    // a conv's output flattened before its chain (planned in its own shape)
    let flat = |x: &Tensor, w: &Tensor, b: &Tensor| -> Result<Tensor> {
        x.conv2d(w, None, p)?.reshape([3, 7 * 6 * 7])?.sub(b)?.abs()
    };
    let (xc, wc) = (
        tensor(&[3, 5, 11, 9], 36, &cpu)?,
        tensor(&[7, 5, 3, 3], 37, &cpu)?,
    );
    let b2 = tensor(&[7 * 6 * 7], 35, &cpu)?;
    let e0 = stats.epilogues();
    let y = flat(&on(&xc, &dev)?, &on(&wc, &dev)?, &on(&b2, &dev)?)?;
    assert_close(&on(&y, &cpu)?, &flat(&xc, &wc, &b2)?, 1e-4)?;
    assert_eq!(stats.epilogues() - e0, 1);

    // a product still held elsewhere is stored once: the chain reads it
    let (ga, gc) = (on(&a, &dev)?, on(&c, &dev)?);
    let (e0, k0) = (stats.epilogues(), stats.kernels());
    let h = ga.matmul(&gc)?;
    let y = h.sin()?;
    assert_close(&on(&y, &cpu)?, &a.matmul(&c)?.sin()?, 1e-4)?;
    assert_close(&on(&h, &cpu)?, &a.matmul(&c)?, 1e-4)?;
    assert_eq!((stats.epilogues() - e0, stats.kernels() - k0), (0, 2));

    // a product read through a view other than whole runs alone first
    let g = |x: &Tensor, w: &Tensor| -> Result<Tensor> { x.matmul(&w.t()?)?.t()?.relu() };
    let y = g(&on(&x, &dev)?, &on(&w, &dev)?)?;
    assert_close(&on(&y, &cpu)?, &g(&x, &w)?, 1e-5)
}

/// Biases an epilogue reads at the GEMM's row (a convolution's channel) or column (a matmul's),
/// with no division, beside inputs read by their kind, on odd shapes; and the views where the
/// output's axes are not the GEMM's (a reshaped product, a matmul by a vector), where the
/// chain runs after the product.
#[test]
fn epilogue_biases_read_at_the_gemms_row_or_column() -> Result<()> {
    let Some((dev, stats)) = fused() else {
        return Ok(());
    };
    let cpu = Device::cpu();
    let gpu = |ts: &[&Tensor]| -> Result<Vec<Tensor>> { ts.iter().map(|t| on(t, &dev)).collect() };
    let sources = || -> Vec<String> {
        let names = fusion::epilogue::names();
        names
            .iter()
            .filter_map(|n| fusion::epilogue::source(n).ok())
            .collect()
    };

    // depthwise conv, 5 channels on 7 x 3 planes: the channel bias, a per-channel scale of
    // another rank, a residual (whole) and a bias along the rows of the plane (middle)
    let p = kiln_core::Conv2dParams {
        groups: 5,
        ..Default::default()
    };
    let f = |t: &[Tensor]| -> Result<Tensor> {
        let y = t[0].conv2d(&t[1], Some(&t[2]), p)?.relu()?;
        y.mul(&t[3])?.add(&t[4])?.sub(&t[5])
    };
    let args = [
        tensor(&[2, 5, 9, 5], 50, &cpu)?,
        tensor(&[5, 1, 3, 3], 51, &cpu)?,
        tensor(&[5], 52, &cpu)?,
        tensor(&[1, 5, 1, 1], 53, &cpu)?,
        tensor(&[2, 5, 7, 3], 54, &cpu)?,
        tensor(&[7, 1], 55, &cpu)?,
    ];
    let e0 = stats.epilogues();
    let y = f(&gpu(&args.iter().collect::<Vec<_>>())?)?;
    assert_close(&on(&y, &cpu)?, &f(&args)?, 1e-5)?;
    assert_eq!(stats.epilogues() - e0, 1);

    // a grouped transposed conv (6 channels of 7 x 5) with its bias, and one along the plane's
    // columns (inner)
    let p = kiln_core::Conv2dParams {
        groups: 2,
        ..Default::default()
    };
    let f = |t: &[Tensor]| -> Result<Tensor> {
        t[0].conv_transpose2d(&t[1], Some(&t[2]), p, [0, 0])?
            .add(&t[3])?
            .tanh()
    };
    let args = [
        tensor(&[2, 4, 5, 3], 56, &cpu)?,
        tensor(&[4, 3, 3, 3], 57, &cpu)?,
        tensor(&[6], 58, &cpu)?,
        tensor(&[5], 59, &cpu)?,
    ];
    let e0 = stats.epilogues();
    let y = f(&gpu(&args.iter().collect::<Vec<_>>())?)?;
    assert_close(&on(&y, &cpu)?, &f(&args)?, 1e-5)?;
    assert_eq!(stats.epilogues() - e0, 1);

    // matmuls: the column bias, a bias per row (outer, middle) beside it
    let f = |t: &[Tensor]| -> Result<Tensor> { t[0].matmul(&t[1])?.add(&t[2])?.relu()?.mul(&t[3]) };
    for (a, b, col, row) in [
        (
            &[3usize, 5, 7][..],
            &[7usize, 9][..],
            &[9usize][..],
            &[5usize, 1][..],
        ),
        (&[2, 3, 5, 7], &[2, 3, 7, 9], &[1, 1, 1, 9], &[3, 5, 1]),
        // at most 4 rows: the matrix-vector kernel
        (&[3, 7], &[7, 9], &[9], &[3, 1]),
    ] {
        let args = [
            tensor(a, 60, &cpu)?,
            tensor(b, 61, &cpu)?,
            tensor(col, 62, &cpu)?,
            tensor(row, 63, &cpu)?,
        ];
        let e0 = stats.epilogues();
        let y = f(&gpu(&args.iter().collect::<Vec<_>>())?)?;
        assert_close(&on(&y, &cpu)?, &f(&args)?, 1e-5)?;
        assert_eq!(stats.epilogues() - e0, 1);
    }
    let all = sources().join("");
    assert!(all.contains("[row]") && all.contains("[col]"), "{all}");

    // a conv's output seen as [4, 3, 3, 3] (not its own [2, 6, 3, 3]): axis 1 is no channel
    let f = |t: &[Tensor]| -> Result<Tensor> {
        let y = t[0].conv2d(&t[1], None, Default::default())?;
        y.reshape([4, 3, 3, 3])?.add(&t[2])
    };
    let args = [
        tensor(&[2, 3, 5, 5], 64, &cpu)?,
        tensor(&[6, 3, 3, 3], 65, &cpu)?,
        tensor(&[1, 3, 1, 1], 66, &cpu)?,
    ];
    let y = f(&gpu(&args.iter().collect::<Vec<_>>())?)?;
    assert_close(&on(&y, &cpu)?, &f(&args)?, 1e-5)?;

    // a matmul by a vector: the output's last axis is the rows
    let f = |t: &[Tensor]| -> Result<Tensor> { t[0].matmul(&t[1])?.add(&t[2])?.relu() };
    let args = [
        tensor(&[3, 5, 7], 67, &cpu)?,
        tensor(&[7], 68, &cpu)?,
        tensor(&[5], 69, &cpu)?,
    ];
    let y = f(&gpu(&args.iter().collect::<Vec<_>>())?)?;
    assert_close(&on(&y, &cpu)?, &f(&args)?, 1e-5)
}

#[test]
fn a_result_nothing_reads_runs_while_the_host_records_more() -> Result<()> {
    // any inner device: this is the decorator's own bookkeeping
    let (dev, stats) = fusion::wrap_with_stats(&Device::cpu());
    // large enough to count (small chains wait to be read: see the window's threshold)
    let n = (1 << 16) + 3;
    let x = tensor(&[n], 60, &dev)?;
    let k0 = stats.kernels();
    let first = gelu(&x)?;
    assert_eq!(stats.kernels(), k0, "recorded, not run");
    let rest = (0..5).map(|_| gelu(&x)).collect::<Result<Vec<_>>>()?;
    // each GELU makes 5 large lazies, each read by the next op but the result: the oldest
    // results ran as newer ones were recorded, before any read or wait
    let early = stats.kernels() - k0;
    assert!((1..6).contains(&early), "{early} of 6 ran early");
    dev.backend().synchronize()?;
    assert_eq!(stats.kernels() - k0, 6, "still one kernel per GELU");
    let want = gelu(&tensor(&[n], 60, &Device::cpu())?)?;
    for y in std::iter::once(&first).chain(&rest) {
        assert_close(y, &want, 1e-6)?;
    }
    Ok(())
}

#[test]
fn after_a_wait_the_first_result_runs_at_the_next_op() -> Result<()> {
    let (dev, stats) = fusion::wrap_with_stats(&Device::cpu());
    let n = (1 << 16) + 3;
    let x = tensor(&[n], 61, &dev)?;
    dev.backend().synchronize()?;
    let k0 = stats.kernels();
    let first = gelu(&x)?;
    assert_eq!(stats.kernels(), k0, "recorded, not run");
    // nothing runs on the inner device since the wait: one newer large op starts the result
    let newer = [x.exp()?];
    assert_eq!(
        stats.kernels() - k0,
        1,
        "the idle device got the first result at once"
    );
    // busy now: unread results wait for 4 newer large ones
    let more = [x.neg()?, x.abs()?, x.exp()?];
    assert_eq!(stats.kernels() - k0, 1, "within the window");
    let last = x.neg()?;
    assert_eq!(stats.kernels() - k0, 2, "the oldest unread result ran");
    dev.backend().synchronize()?;
    assert_eq!(stats.kernels() - k0, 6);
    let cpu = tensor(&[n], 61, &Device::cpu())?;
    assert_close(&first, &gelu(&cpu)?, 1e-6)?;
    let want = [cpu.exp()?, cpu.neg()?, cpu.abs()?, cpu.exp()?, cpu.neg()?];
    for (y, want) in newer.iter().chain(&more).chain([&last]).zip(&want) {
        assert_close(y, want, 1e-6)?;
    }
    Ok(())
}

#[test]
fn training_layers_run_their_bias_and_activation_in_the_gemm() -> Result<()> {
    let Some((dev, stats)) = fused() else {
        return Ok(());
    };
    let cpu = Device::cpu();
    let p = kiln_core::Conv2dParams {
        stride: [1, 2],
        padding: [1, 1],
        ..Default::default()
    };
    // the graph keeps neither the product nor the biased sum (their rules read no values), so
    // the chain still runs in the GEMM's store while autodiff records
    let layer =
        |x: &Tensor, w: &Tensor, b: &Tensor| -> Result<Tensor> { x.conv2d(w, Some(b), p)?.relu() };
    let x = tensor(&[2, 3, 9, 10], 50, &cpu)?;
    let (w, b) = (tensor(&[5, 3, 3, 3], 51, &cpu)?, tensor(&[5], 52, &cpu)?);
    let [gx, gw, gb] = [&x, &w, &b].map(|t| on(t, &dev).map(|t| t.require_grad()));
    let (gx, gw, gb) = (gx?, gw?, gb?);
    let (e0, k0) = (stats.epilogues(), stats.kernels());
    let y = layer(&gx, &gw, &gb)?;
    let forward = on(&y, &cpu)?;
    assert_eq!((stats.epilogues() - e0, stats.kernels() - k0), (1, 1));
    let (cx, cw, cb) = (x.require_grad(), w.require_grad(), b.require_grad());
    let want = layer(&cx, &cw, &cb)?;
    assert_close(&forward, &want, 1e-4)?;
    // the gradients are the CPU's, through ReLU's rule on its output
    let grads = y.mul(&y)?.sum_all()?.backward()?;
    let cpu_grads = want.mul(&want)?.sum_all()?.backward()?;
    for (g, c) in [(&gx, &cx), (&gw, &cw), (&gb, &cb)] {
        let got = grads.get(g).expect("a gradient for each parameter");
        assert_close(
            &on(got, &cpu)?,
            cpu_grads.get(c).expect("cpu gradient"),
            1e-3,
        )?;
    }

    // attention's scores: the graph keeps neither the product, its scaling nor the masked
    // scores (softmax's rule reads its output), so they run in the GEMM
    let scores = |q: &Tensor, k: &Tensor, m: &Tensor| -> Result<Tensor> {
        let s = q.matmul(&k.transpose(-2, -1)?)?.mul_scalar(0.25)?;
        m.where_cond(&s, &s.scalar_like(-1e9)?)
    };
    let (q, k) = (
        tensor(&[2, 3, 7, 5], 53, &cpu)?,
        tensor(&[2, 3, 7, 5], 54, &cpu)?,
    );
    let m = tensor(&[7, 7], 55, &cpu)?.gt(&Tensor::scalar(0.0, DType::F32, &cpu)?)?;
    let [gq, gk] = [&q, &k].map(|t| on(t, &dev).map(|t| t.require_grad()));
    let (gq, gk) = (gq?, gk?);
    let e0 = stats.epilogues();
    let p = scores(&gq, &gk, &on(&m, &dev)?)?.softmax(-1)?;
    assert_eq!(stats.epilogues() - e0, 1);
    let (cq, ck) = (q.require_grad(), k.require_grad());
    let want = scores(&cq, &ck, &m)?.softmax(-1)?;
    assert_close(&on(&p, &cpu)?, &want, 1e-5)?;
    let seed = tensor(&[2, 3, 7, 7], 56, &cpu)?;
    let grads = p.backward_with(&on(&seed, &dev)?)?;
    let cpu_grads = want.backward_with(&seed)?;
    for (g, c) in [(&gq, &cq), (&gk, &ck)] {
        let got = grads.get(g).expect("a gradient for q and k");
        assert_close(
            &on(got, &cpu)?,
            cpu_grads.get(c).expect("cpu gradient"),
            1e-4,
        )?;
    }
    Ok(())
}

#[test]
fn epilogue_kernels_pass_naga_and_translate() -> Result<()> {
    let Some((dev, _)) = fused() else {
        return Ok(());
    };
    let cpu = Device::cpu();
    let (x, w, b) = (
        tensor(&[2, 4, 7, 7], 40, &cpu)?,
        tensor(&[6, 4, 3, 3], 41, &cpu)?,
        tensor(&[6], 42, &cpu)?,
    );
    let y = on(&x, &dev)?
        .conv2d(&on(&w, &dev)?, Some(&on(&b, &dev)?), Default::default())?
        .sigmoid()?;
    assert_close(
        &on(&y, &cpu)?,
        &x.conv2d(&w, Some(&b), Default::default())?.sigmoid()?,
        1e-5,
    )?;
    // a linear layer's bias, read at the column (the conv's at the row)
    let (a, c, bc) = (
        tensor(&[5, 6], 43, &cpu)?,
        tensor(&[6, 3], 44, &cpu)?,
        tensor(&[3], 45, &cpu)?,
    );
    let linear = |a: &Tensor, c: &Tensor, b: &Tensor| a.matmul(c)?.add(b);
    let y = linear(&on(&a, &dev)?, &on(&c, &dev)?, &on(&bc, &dev)?)?;
    assert_close(&on(&y, &cpu)?, &linear(&a, &c, &bc)?, 1e-5)?;
    // every f32 GEMM variant the planner makes, with each epilogue of this process, through
    // naga and the CUDA C and HIP translator
    let names = fusion::epilogue::names();
    let sources: Vec<String> = (names.iter())
        .filter_map(|n| fusion::epilogue::source(n).ok())
        .collect();
    assert!(
        ["[row]", "[col]"]
            .iter()
            .all(|r| sources.iter().any(|s| s.contains(r)))
    );
    let gemms = (kiln_kernels::plan::variants().into_iter())
        .filter(|k| k.file == "gemm.wgsl" && k.defines.get("T").is_some_and(|t| t == "f32"));
    let mut checked = 0;
    for (mut key, name) in gemms.flat_map(|k| names.iter().map(move |n| (k.clone(), n))) {
        key.defines.insert("EPILOGUE".into(), name.clone());
        let (label, wgsl) = (key.label(), key.wgsl()?);
        let module = naga::front::wgsl::parse_str(&wgsl)
            .unwrap_or_else(|e| panic!("{label}: {}", e.emit_to_string(&wgsl)));
        naga::valid::Validator::new(Default::default(), naga::valid::Capabilities::all())
            .validate(&module)
            .unwrap_or_else(|e| panic!("{label}: {e:?}"));
        for dialect in [Dialect::Cuda, Dialect::Hip] {
            translate(&wgsl, &label, dialect).unwrap_or_else(|e| panic!("{label}: {e}"));
        }
        checked += 1;
    }
    assert!(checked >= names.len());
    Ok(())
}
