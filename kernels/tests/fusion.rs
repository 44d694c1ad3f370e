//! The fusion decorator on wgpu (lavapipe in CI) against the unfused CPU device. Each test
//! skips, with a notice, where the machine has no wgpu adapter.

use kiln_core::{CmpOp, DType, Device, ErrorKind, Result, SliceRange, Tensor, TensorData};
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
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 6.0 - 3.0
        })
        .collect()
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
            Ok(u.cast(DType::F32)?.add(&x)?.sqrt()?)
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
