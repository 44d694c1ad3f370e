//! Focused tests of the trickier CPU kernels against naive loops on random data.

use crate::op::{Conv2dParams, Pool2d, Pool2dParams};
use crate::{DType, Device, ErrorKind, Result, Tensor};
use alloc::vec;
use alloc::vec::Vec;

/// splitmix64 uniform values in [-1, 1).
fn rand(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
        })
        .collect()
}

fn t(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_slice(v, shape, &Device::cpu()).unwrap()
}

fn close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: got {g}, want {w}"
        );
    }
}

fn idx4(d: [usize; 4], a: usize, b: usize, c: usize, e: usize) -> usize {
    ((a * d[1] + b) * d[2] + c) * d[3] + e
}

/// Input coordinate of output position `o`, tap `k`, or `None` in the padding.
fn src(o: usize, k: usize, p: &Conv2dParams, ax: usize, size: usize) -> Option<usize> {
    let v = (o * p.stride[ax] + k * p.dilation[ax]) as isize - p.padding[ax] as isize;
    (v >= 0 && v < size as isize).then_some(v as usize)
}

fn conv_cases() -> Vec<([usize; 4], [usize; 4], Conv2dParams)> {
    vec![
        ([2, 3, 7, 6], [4, 3, 3, 2], Conv2dParams::default()),
        (
            [3, 4, 9, 8],
            [6, 2, 3, 3],
            Conv2dParams {
                stride: [2, 1],
                padding: [1, 2],
                dilation: [1, 2],
                groups: 2,
            },
        ),
        (
            [1, 6, 5, 5],
            [3, 2, 2, 3],
            Conv2dParams {
                stride: [1, 3],
                padding: [0, 1],
                dilation: [2, 1],
                groups: 3,
            },
        ),
        // One input channel (the MNIST CNN's conv1): row updates, 16 outputs at a time and a tail.
        ([1, 1, 28, 28], [32, 1, 3, 3], Conv2dParams::default()),
        // 3x3 at stride 1 over 8+ channels per group: Winograd in f32 (odd sizes, partial tiles).
        ([2, 9, 7, 6], [5, 9, 3, 3], Conv2dParams::default()),
        (
            [3, 20, 8, 9],
            [6, 10, 3, 3],
            Conv2dParams {
                padding: [1, 1],
                groups: 2,
                ..Conv2dParams::default()
            },
        ),
        (
            [1, 11, 4, 5],
            [13, 11, 3, 3],
            Conv2dParams {
                padding: [2, 0],
                ..Conv2dParams::default()
            },
        ),
        (
            [2, 8, 3, 3],
            [3, 8, 3, 3],
            Conv2dParams {
                padding: [0, 1],
                ..Conv2dParams::default()
            },
        ),
        // One image big enough for threaded products (with 2+ threads): the MNIST CNN's
        // conv2, an odd 17x23 output by F(6x6) in two unequal parts (2 and 1 rows of tiles),
        // and groups of 21 outputs over 20 inputs with a padded border.
        ([1, 32, 26, 26], [64, 32, 3, 3], Conv2dParams::default()),
        (
            [1, 16, 17, 23],
            [24, 16, 3, 3],
            Conv2dParams {
                padding: [1, 1],
                ..Conv2dParams::default()
            },
        ),
        (
            [1, 40, 18, 13],
            [42, 20, 3, 3],
            Conv2dParams {
                padding: [1, 0],
                groups: 2,
                ..Conv2dParams::default()
            },
        ),
        // The column matrix of one image with two groups, threaded GEMMs (with 2+ threads).
        (
            [1, 16, 40, 40],
            [12, 8, 3, 3],
            Conv2dParams {
                stride: [2, 2],
                padding: [1, 1],
                groups: 2,
                ..Conv2dParams::default()
            },
        ),
        // the same kernel at stride 2: the column matrix
        (
            [1, 8, 7, 7],
            [4, 8, 3, 3],
            Conv2dParams {
                stride: [2, 2],
                padding: [1, 1],
                ..Conv2dParams::default()
            },
        ),
    ]
}

#[test]
fn conv2d_and_its_gradients_match_naive_loops() -> Result<()> {
    for (case, (xd, wd, p)) in conv_cases().into_iter().enumerate() {
        let x = rand(xd.iter().product(), 1 + case as u64);
        let w = rand(wd.iter().product(), 100 + case as u64);
        let y = t(&x, &xd).conv2d(&t(&w, &wd), None, p)?;
        let yd: [usize; 4] = y.dims().try_into().unwrap();
        let (cg, og) = (wd[1], wd[0] / p.groups);
        let mut want = vec![0.0; yd.iter().product()];
        let g = rand(want.len(), 200 + case as u64);
        let mut dx = vec![0.0; x.len()];
        let mut dw = vec![0.0; w.len()];
        let mut mag = vec![0.0; want.len()];
        for n in 0..yd[0] {
            for o in 0..yd[1] {
                let grp = o / og;
                for oy in 0..yd[2] {
                    for ox in 0..yd[3] {
                        let oi = idx4(yd, n, o, oy, ox);
                        for c in 0..cg {
                            let ci = grp * cg + c;
                            for ki in 0..wd[2] {
                                for kj in 0..wd[3] {
                                    let (Some(iy), Some(ix)) =
                                        (src(oy, ki, &p, 0, xd[2]), src(ox, kj, &p, 1, xd[3]))
                                    else {
                                        continue;
                                    };
                                    let (xi, wi) =
                                        (idx4(xd, n, ci, iy, ix), idx4(wd, o, c, ki, kj));
                                    want[oi] += x[xi] * w[wi];
                                    mag[oi] += (x[xi] * w[wi]).abs();
                                    dx[xi] += g[oi] * w[wi];
                                    dw[wi] += g[oi] * x[xi];
                                }
                            }
                        }
                    }
                }
            }
        }
        close(&y.to_vec::<f64>()?, &want, 1e-12);
        // conv_transpose2d is the gradient wrt the input; output padding recovers lost rows.
        let op = [
            (xd[2] + 2 * p.padding[0] - p.dilation[0] * (wd[2] - 1) - 1) % p.stride[0],
            (xd[3] + 2 * p.padding[1] - p.dilation[1] * (wd[3] - 1) - 1) % p.stride[1],
        ];
        let gx = t(&g, &yd).conv_transpose2d(&t(&w, &wd), None, p, op)?;
        assert_eq!(gx.dims(), &xd);
        close(&gx.to_vec::<f64>()?, &dx, 1e-12);
        let gw = Tensor::apply(
            crate::Op::Conv2dBackwardWeight {
                params: p,
                kernel: [wd[2], wd[3]],
            },
            &[&t(&x, &xd), &t(&g, &yd)],
        )?;
        close(&gw.to_vec::<f64>()?, &dw, 1e-12);
        // f32 and a permuted (non-contiguous) input take the same path.
        let xf = t(&x, &[xd[0], xd[2], xd[3], xd[1]]).cast(DType::F32)?;
        let _ = xf.permute(&[0, 3, 1, 2])?;
        let yf = t(&x, &xd)
            .cast(DType::F32)?
            .conv2d(&t(&w, &wd).cast(DType::F32)?, None, p)?;
        // f32 rounds within a few units of the terms' magnitude (Winograd's transforms mix
        // them with constants up to 8, so its error follows that sum, not the result).
        let yf = yf.cast(DType::F64)?.to_vec::<f64>()?;
        for (i, ((g, w), m)) in yf.iter().zip(&want).zip(&mag).enumerate() {
            assert!(
                (g - w).abs() <= 5e-6 * (1.0 + m),
                "case {case}, f32 element {i}: got {g}, want {w} (|terms| {m})"
            );
        }
    }
    Ok(())
}

/// Winograd's transformed filters are kept per weight (`winograd::Filters::cached`): a weight
/// overwritten in place (the same buffer) or changed in one element is transformed again, never
/// served the transform of its old values; odd shapes and groups share the cache.
#[test]
fn winograd_filter_cache_follows_weight_changes() -> Result<()> {
    let f32s = |v: &[f64], d: &[usize]| t(v, d).cast(DType::F32);
    for (case, (xd, wd, groups)) in [
        ([1, 9, 7, 6], [5, 9, 3, 3], 1),
        ([2, 16, 5, 9], [6, 8, 3, 3], 2),
    ]
    .into_iter()
    .enumerate()
    {
        let p = Conv2dParams {
            padding: [1, 1],
            groups,
            ..Conv2dParams::default()
        };
        let x = rand(xd.iter().product(), 30 + case as u64);
        let n: usize = wd.iter().product();
        // f64 takes the column-matrix path: the reference.
        let want =
            |w: &[f64]| -> Result<Vec<f64>> { t(&x, &xd).conv2d(&t(w, &wd), None, p)?.to_vec() };
        let xf = f32s(&x, &xd)?;
        let got =
            |w: &Tensor| -> Result<Vec<f64>> { xf.conv2d(w, None, p)?.cast(DType::F64)?.to_vec() };
        let mut w = rand(n, 40 + case as u64);
        let mut wt = f32s(&w, &wd)?;
        for _ in 0..2 {
            close(&got(&wt)?, &want(&w)?, 2e-4);
        }
        w = rand(n, 50 + case as u64);
        wt.write_at(0, &f32s(&w, &[n])?)?;
        close(&got(&wt)?, &want(&w)?, 2e-4);
        w[n / 2] = 0.75;
        wt.write_at(n / 2, &f32s(&[0.75], &[1])?)?;
        close(&got(&wt)?, &want(&w)?, 2e-4);
        // A second tensor with the first values again.
        let w0 = rand(n, 40 + case as u64);
        close(&got(&f32s(&w0, &wd)?)?, &want(&w0)?, 2e-4);
    }
    Ok(())
}

#[test]
fn conv2d_reads_permuted_input() -> Result<()> {
    let (xd, wd) = ([2, 5, 6, 3], [4, 3, 3, 3]); // stored NHWC, used as NCHW
    let x = t(&rand(180, 7), &xd).permute(&[0, 3, 1, 2])?;
    let w = t(&rand(108, 8), &wd);
    let p = Conv2dParams {
        padding: [1, 1],
        ..Default::default()
    };
    let a = x.conv2d(&w, None, p)?.to_vec::<f64>()?;
    let b = x.contiguous()?.conv2d(&w, None, p)?.to_vec::<f64>()?;
    close(&a, &b, 0.0);
    Ok(())
}

fn pool_params(
    k: [usize; 2],
    s: [usize; 2],
    p: [usize; 2],
    d: [usize; 2],
    cip: bool,
) -> Pool2dParams {
    Pool2dParams {
        kernel: k,
        stride: s,
        padding: p,
        dilation: d,
        count_include_pad: cip,
    }
}

#[test]
fn pools_and_gradients_match_naive_loops() -> Result<()> {
    let xd = [2, 3, 7, 8];
    let mut x = rand(xd.iter().product(), 11);
    x[5] = x[4]; // a tie: the gradient must go to the first maximum
    for (pi, p) in [
        pool_params([2, 2], [2, 2], [0, 0], [1, 1], true),
        pool_params([3, 2], [2, 1], [1, 1], [1, 2], false),
        pool_params([3, 3], [1, 2], [1, 0], [1, 1], true),
    ]
    .into_iter()
    .enumerate()
    {
        let xt = t(&x, &xd);
        let mx = xt.max_pool2d(p)?;
        let yd: [usize; 4] = mx.dims().try_into().unwrap();
        let g = rand(yd.iter().product(), 50 + pi as u64);
        let (mut want_max, mut want_avg) = (vec![0.0; g.len()], vec![0.0; g.len()]);
        let (mut gmax, mut gavg) = (vec![0.0; x.len()], vec![0.0; x.len()]);
        let cp = Conv2dParams {
            stride: p.stride,
            padding: p.padding,
            dilation: p.dilation,
            groups: 1,
        };
        for n in 0..xd[0] {
            for c in 0..xd[1] {
                for oy in 0..yd[2] {
                    for ox in 0..yd[3] {
                        let oi = idx4(yd, n, c, oy, ox);
                        let (mut best, mut at, mut sum, mut cnt) =
                            (f64::NEG_INFINITY, None, 0.0, 0);
                        for ki in 0..p.kernel[0] {
                            for kj in 0..p.kernel[1] {
                                let (Some(iy), Some(ix)) =
                                    (src(oy, ki, &cp, 0, xd[2]), src(ox, kj, &cp, 1, xd[3]))
                                else {
                                    continue;
                                };
                                let xi = idx4(xd, n, c, iy, ix);
                                if x[xi] > best {
                                    (best, at) = (x[xi], Some(xi));
                                }
                                sum += x[xi];
                                cnt += 1;
                            }
                        }
                        let div = if p.count_include_pad {
                            p.kernel[0] * p.kernel[1]
                        } else {
                            cnt
                        } as f64;
                        want_max[oi] = best;
                        want_avg[oi] = sum / div;
                        gmax[at.unwrap()] += g[oi];
                        for ki in 0..p.kernel[0] {
                            for kj in 0..p.kernel[1] {
                                if let (Some(iy), Some(ix)) =
                                    (src(oy, ki, &cp, 0, xd[2]), src(ox, kj, &cp, 1, xd[3]))
                                {
                                    gavg[idx4(xd, n, c, iy, ix)] += g[oi] / div;
                                }
                            }
                        }
                    }
                }
            }
        }
        close(&mx.to_vec::<f64>()?, &want_max, 0.0);
        let gt = t(&g, &yd);
        let gm = Tensor::apply(crate::Op::Pool2dBackward(Pool2d::Max(p)), &[&xt, &gt])?;
        close(&gm.to_vec::<f64>()?, &gmax, 1e-12);
        if p.dilation == [1, 1] {
            close(&xt.avg_pool2d(p)?.to_vec::<f64>()?, &want_avg, 1e-12);
            let ga = Tensor::apply(crate::Op::Pool2dBackward(Pool2d::Avg(p)), &[&xt, &gt])?;
            close(&ga.to_vec::<f64>()?, &gavg, 1e-12);
        }
    }
    // A wrong grad_out shape is an error, not a panic.
    let p = pool_params([2, 2], [2, 2], [0, 0], [1, 1], true);
    let bad = Tensor::apply(
        crate::Op::Pool2dBackward(Pool2d::Max(p)),
        &[&t(&x, &xd), &t(&[0.5; 6], &[1, 1, 2, 3])],
    );
    assert_eq!(bad.unwrap_err().kind(), ErrorKind::Shape);
    Ok(())
}

#[test]
fn adaptive_avg_pool_uses_pytorch_windows() -> Result<()> {
    let xd = [1, 2, 7, 5];
    let x = rand(70, 3);
    let out = [3, 4];
    let y = t(&x, &xd).adaptive_avg_pool2d(out)?;
    let g = rand(24, 4);
    let mut want = vec![0.0; 24];
    let mut gx = vec![0.0; 70];
    for c in 0..2 {
        for i in 0..3usize {
            let (y0, y1) = (i * 7 / 3, ((i + 1) * 7).div_ceil(3));
            for j in 0..4usize {
                let (x0, x1) = (j * 5 / 4, ((j + 1) * 5).div_ceil(4));
                let cnt = ((y1 - y0) * (x1 - x0)) as f64;
                let oi = (c * 3 + i) * 4 + j;
                for yy in y0..y1 {
                    for xx in x0..x1 {
                        want[oi] += x[(c * 7 + yy) * 5 + xx] / cnt;
                        gx[(c * 7 + yy) * 5 + xx] += g[oi] / cnt;
                    }
                }
            }
        }
    }
    close(&y.to_vec::<f64>()?, &want, 1e-12);
    let gt = Tensor::apply(
        crate::Op::Pool2dBackward(Pool2d::AdaptiveAvg { output: out }),
        &[&t(&x, &xd), &t(&g, &[1, 2, 3, 4])],
    )?;
    close(&gt.to_vec::<f64>()?, &gx, 1e-12);
    Ok(())
}

#[test]
fn gather_scatter_and_errors() -> Result<()> {
    let dev = Device::cpu();
    let x = t(&rand(12, 5), &[3, 4]);
    let idx = Tensor::from_vec(vec![3i32, 0, 1, 1, 2, 0], [3, 2], &dev)?;
    let g = x.gather(1, &idx)?.to_vec::<f64>()?;
    let xv = x.to_vec::<f64>()?;
    let want: Vec<f64> = (0..6)
        .map(|i| xv[(i / 2) * 4 + [3, 0, 1, 1, 2, 0][i]])
        .collect();
    close(&g, &want, 0.0);
    // scatter_add with repeated indices accumulates; src may be larger than index.
    let src = t(&rand(9, 6), &[3, 3]);
    let s = x.scatter_add(1, &idx, &src)?.to_vec::<f64>()?;
    let sv = src.to_vec::<f64>()?;
    let mut want = xv.clone();
    for r in 0..3 {
        for c in 0..2 {
            want[r * 4 + [3, 0, 1, 1, 2, 0][r * 2 + c] as usize] += sv[r * 3 + c];
        }
    }
    close(&s, &want, 1e-15);
    let bad = Tensor::from_vec(vec![0i32, 4], [1, 2], &dev)?;
    let e = x.gather(1, &bad).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Index);
    assert!(e.to_string().contains("index 4"), "{e}");
    let neg = Tensor::from_vec(vec![-1i32], [1], &dev)?;
    assert!(
        x.index_select(0, &neg)
            .unwrap_err()
            .to_string()
            .contains("-1")
    );
    assert!(neg.one_hot(3, DType::F32).is_err());
    Ok(())
}

#[test]
fn matmul_broadcasts_batches_and_promotes_vectors() -> Result<()> {
    let (a, b) = (rand(2 * 3 * 4, 21), rand(3 * 4 * 5, 22));
    // a: [2, 1, 3, 4] (transposed storage), b: [3, 4, 5] -> [2, 3, 3, 5]
    let at = t(&a, &[2, 1, 4, 3]).transpose(-1, -2)?;
    let y = at.matmul(&t(&b, &[3, 4, 5]))?;
    assert_eq!(y.dims(), &[2, 3, 3, 5]);
    let yv = y.to_vec::<f64>()?;
    for i in 0..2 {
        for j in 0..3 {
            for m in 0..3 {
                for n in 0..5 {
                    let want: f64 = (0..4)
                        .map(|k| a[(i * 4 + k) * 3 + m] * b[(j * 4 + k) * 5 + n])
                        .sum();
                    let got = yv[((i * 3 + j) * 3 + m) * 5 + n];
                    assert!((got - want).abs() < 1e-12);
                }
            }
        }
    }
    let v = t(&b[..4], &[4]);
    assert_eq!(t(&b[..20], &[5, 4]).matmul(&v)?.dims(), &[5]);
    assert_eq!(v.matmul(&v)?.dims(), &[] as &[usize]);
    let ints = Tensor::from_vec(vec![1i32, 2, 3, 4], [2, 2], &Device::cpu())?;
    assert_eq!(ints.matmul(&ints)?.to_vec::<i32>()?, vec![7, 10, 15, 22]);
    Ok(())
}

#[test]
fn reductions_over_inner_axes_of_strided_views() -> Result<()> {
    let x = rand(2 * 3 * 4 * 5, 31);
    let v = t(&x, &[2, 3, 4, 5]).permute(&[3, 1, 0, 2])?; // [5, 3, 2, 4]
    let s = v.sum(&[1, 3], true)?;
    assert_eq!(s.dims(), &[5, 1, 2, 1]);
    let got = s.to_vec::<f64>()?;
    for a in 0..5 {
        for c in 0..2 {
            let want: f64 = (0..3)
                .flat_map(|b| (0..4).map(move |d| (b, d)))
                .map(|(b, d)| x[((c * 3 + b) * 4 + d) * 5 + a])
                .sum();
            assert!((got[a * 2 + c] - want).abs() < 1e-12);
        }
    }
    let am = Tensor::from_vec(
        vec![1.0f32, 3.0, 3.0, f32::NAN, 0.0, 2.0],
        [2, 3],
        &Device::cpu(),
    )?;
    assert_eq!(am.argmax(1, false)?.to_vec::<i32>()?, vec![1, 0]);
    assert!(am.max(&[1], false)?.to_vec::<f32>()?[1].is_nan());
    Ok(())
}

#[test]
fn elementwise_semantics() -> Result<()> {
    let dev = Device::cpu();
    let r = Tensor::from_vec(vec![0.5f32, 1.5, 2.5, -0.5, -2.5], [5], &dev)?;
    assert_eq!(r.round()?.to_vec::<f32>()?, vec![0.0, 2.0, 2.0, -0.0, -2.0]);
    let a = Tensor::from_vec(vec![7i32, -7, 5, i32::MIN], [4], &dev)?;
    let b = Tensor::from_vec(vec![2i32, 2, 0, -1], [4], &dev)?;
    assert_eq!(a.div(&b)?.to_vec::<i32>()?, vec![3, -3, 0, i32::MIN]);
    let f = Tensor::from_vec(vec![1.0f32, f32::NAN], [2], &dev)?;
    let m = f.maximum(&Tensor::from_vec(vec![f32::NAN, 0.0f32], [2], &dev)?)?;
    assert!(m.to_vec::<f32>()?.iter().all(|v| v.is_nan()));
    let c = Tensor::from_vec(vec![-1.5f32, 3.9e9, f32::NAN, 0.2], [4], &dev)?;
    assert_eq!(
        c.cast(DType::I32)?.to_vec::<i32>()?,
        vec![-1, i32::MAX, 0, 0]
    );
    assert_eq!(
        c.cast(DType::Bool)?.to_vec::<bool>()?,
        vec![true, true, true, true]
    );
    let h = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], [3], &dev)?.cast(DType::F16)?;
    assert_eq!(h.exp()?.dtype(), DType::F16);
    let hs = h.sum_all()?.cast(DType::F32)?.to_vec::<f32>()?;
    assert_eq!(hs, vec![6.0]);
    let g = Tensor::from_vec(vec![1.0f64], [1], &dev)?
        .gelu()?
        .to_vec::<f64>()?[0];
    assert!((g - 0.841_344_746_068_542_9).abs() < 1e-15);
    Ok(())
}

/// Tensors big enough to be split between threads (and rows split between pieces) give what the
/// element-by-element definitions give.
#[test]
fn large_views_split_across_threads_match_loops() -> Result<()> {
    let d = [3, 301, 257];
    let n: usize = d.iter().product();
    let (xv, yv) = (rand(n, 41), rand(d[1], 42));
    let x = t(&xv, &d);
    let at = |a: usize, b: usize, c: usize| xv[(a * d[1] + b) * d[2] + c];
    // [257, 3, 301], read in place through strides.
    let p = x.permute(&[2, 0, 1])?;
    let mut want = Vec::with_capacity(n);
    for c in 0..d[2] {
        for a in 0..d[0] {
            for b in 0..d[1] {
                want.push(at(a, b, c));
            }
        }
    }
    close(&p.neg()?.neg()?.to_vec::<f64>()?, &want, 0.0);
    let e: Vec<f64> = want.iter().map(|v| libm::exp(*v)).collect();
    close(&p.exp()?.to_vec::<f64>()?, &e, 1e-15);
    // A transposed matrix (read in tiles), alone and with itself.
    let (r, c) = (d[0] * d[1], d[2]);
    let tr = t(&xv, &[r, c]).t()?;
    let want_t: Vec<f64> = (0..r * c).map(|i| xv[i % r * c + i / r]).collect();
    close(&tr.neg()?.neg()?.to_vec::<f64>()?, &want_t, 0.0);
    let sq: Vec<f64> = want_t.iter().map(|v| v * v + 1.0).collect();
    let one = t(&[1.0], &[]);
    close(&tr.mul(&tr)?.add(&one)?.to_vec::<f64>()?, &sq, 0.0);
    // Broadcast along rows, a scalar, and `where` with a scalar branch.
    let y = t(&yv, &[1, d[1], 1]);
    let sum: Vec<f64> = (0..n).map(|i| xv[i] + yv[i / d[2] % d[1]]).collect();
    close(&x.add(&y)?.to_vec::<f64>()?, &sum, 0.0);
    let twice: Vec<f64> = xv.iter().map(|v| v * 2.0).collect();
    close(&x.mul_scalar(2.0)?.to_vec::<f64>()?, &twice, 0.0);
    let relu: Vec<f64> = xv.iter().map(|v| v.max(0.0)).collect();
    let zero = t(&[0.0], &[]);
    let mask = x.compare(crate::op::CmpOp::Gt, &zero)?;
    close(&mask.where_cond(&x, &zero)?.to_vec::<f64>()?, &relu, 0.0);
    // Sums over strided axes, over all, and a mean.
    let s = p.sum(&[0, 2], false)?.to_vec::<f64>()?;
    let want_s: Vec<f64> = (0..d[0])
        .map(|a| (0..d[1] * d[2]).map(|i| xv[a * d[1] * d[2] + i]).sum())
        .collect();
    close(&s, &want_s, 1e-12);
    let all: f64 = xv.iter().sum();
    close(&x.sum_all()?.to_vec::<f64>()?, &[all], 1e-12);
    close(&p.mean_all()?.to_vec::<f64>()?, &[all / n as f64], 1e-12);
    Ok(())
}

/// Max pooling by windows that tile the input (kernel == stride), on f32 read through a
/// permuted view, with ties and NaN: values and gradients against plain loops.
#[test]
fn tiling_max_pool_matches_loops() -> Result<()> {
    // Stored as [n, h, c, w], seen as [n, c, h, w]; odd sizes leave rows/columns out of windows.
    let (n, c, h, w) = (2, 3, 9, 11);
    let mut v: Vec<f32> = rand(n * c * h * w, 61).iter().map(|&x| x as f32).collect();
    v[1] = v[0]; // a tie in the first window
    v[40] = f32::NAN;
    let x = Tensor::from_vec(v.clone(), [n, h, c, w], &Device::cpu())?.permute(&[0, 2, 1, 3])?;
    let at = |b: usize, ch: usize, y: usize, xx: usize| v[((b * h + y) * c + ch) * w + xx];
    for k in [[2, 2], [3, 2], [1, 3]] {
        let p = pool_params(k, k, [0, 0], [1, 1], true);
        let (oh, ow) = (h / k[0], w / k[1]);
        let g: Vec<f32> = rand(n * c * oh * ow, 62)
            .iter()
            .map(|&x| x as f32)
            .collect();
        let (mut want, mut want_g) = (vec![0f32; g.len()], vec![0f32; n * c * h * w]);
        for b in 0..n {
            for ch in 0..c {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut best: Option<(f32, usize)> = None;
                        for y in oy * k[0]..(oy + 1) * k[0] {
                            for xx in ox * k[1]..(ox + 1) * k[1] {
                                let val = at(b, ch, y, xx);
                                let i = ((b * c + ch) * h + y) * w + xx;
                                best = match best {
                                    Some((bv, _)) if bv.is_nan() || !(val > bv || val.is_nan()) => {
                                        best
                                    }
                                    _ => Some((val, i)),
                                };
                            }
                        }
                        let (bv, i) = best.unwrap();
                        let o = ((b * c + ch) * oh + oy) * ow + ox;
                        want[o] = bv;
                        want_g[i] += g[o];
                    }
                }
            }
        }
        let got = x.max_pool2d(p)?.to_vec::<f32>()?;
        let same = |a: f32, b: f32| a == b || (a.is_nan() && b.is_nan());
        assert!(got.iter().zip(&want).all(|(&a, &b)| same(a, b)), "{k:?}");
        let gt = Tensor::from_vec(g, [n, c, oh, ow], &Device::cpu())?;
        let got_g = Tensor::apply(crate::Op::Pool2dBackward(Pool2d::Max(p)), &[&x, &gt])?;
        assert_eq!(got_g.to_vec::<f32>()?, want_g, "{k:?}");
    }
    Ok(())
}

/// The fused Adam step over a tensor split into pieces across threads, with a transposed
/// gradient, against a plain loop of the same f32 arithmetic.
#[test]
fn adam_step_in_pieces_matches_loop() -> Result<()> {
    let (r, c) = (1031, 263); // more elements than one piece holds
    let n = r * c;
    let f = |seed| -> Vec<f32> { rand(n, seed).iter().map(|&x| x as f32).collect() };
    let (w, g, m) = (f(71), f(72), f(73));
    let v: Vec<f32> = f(74).iter().map(|x| x * x).collect();
    let dev = Device::cpu();
    let tw = Tensor::from_vec(w.clone(), [r, c], &dev)?;
    let tg = Tensor::from_vec(g.clone(), [c, r], &dev)?.t()?; // element (i, j) is g[j * r + i]
    let tm = Tensor::from_vec(m.clone(), [r, c], &dev)?;
    let tv = Tensor::from_vec(v.clone(), [r, c], &dev)?;
    // without a gradient scale, and with clipping's (0.37)
    for (decoupled, scale) in [(false, None), (true, None), (false, Some(0.37f32))] {
        let p = crate::AdamParams {
            lr: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.1,
            decoupled,
            step: 3,
        };
        let ts = scale
            .map(|s| Tensor::scalar(f64::from(s), DType::F32, &dev))
            .transpose()?;
        let mut ins = vec![&tw, &tg, &tm, &tv];
        ins.extend(&ts);
        let out = Tensor::apply_many(crate::Op::AdamStep(p), &ins, Some(2))?;
        assert_eq!(
            (out[0].dims(), out[1].dims()),
            (&[r, c][..], &[2, r, c][..])
        );
        let (new_w, mv) = (out[0].to_vec::<f32>()?, out[1].to_vec::<f32>()?);
        let got = [&new_w[..], &mv[..n], &mv[n..]];
        let (ss, ib) = p.corrections();
        let (ss, ib, b1, b2) = (ss as f32, ib as f32, p.beta1 as f32, p.beta2 as f32);
        let (eps, wd, shrink) = (
            p.eps as f32,
            p.weight_decay as f32,
            (1.0 - 0.01 * 0.1) as f32,
        );
        for i in 0..n {
            let (mut wi, mut gi) = (w[i], g[(i % c) * r + i / c] * scale.unwrap_or(1.0));
            if decoupled {
                wi *= shrink;
            } else {
                gi += wd * wi;
            }
            let mi = b1 * m[i] + (1.0 - b1) * gi;
            let vi = b2 * v[i] + (1.0 - b2) * (gi * gi);
            let nw = wi - mi / (vi.sqrt() * ib + eps) * ss;
            assert_eq!(
                [got[0][i], got[1][i], got[2][i]],
                [nw, mi, vi],
                "element {i}"
            );
        }
    }
    Ok(())
}

/// `x @ w.t()` (as in Linear) hands `w` a gradient in `w`'s own memory order, equal to `g^T x`.
#[test]
fn transposed_weight_gets_a_row_major_gradient() -> Result<()> {
    let (b, i, o) = (5, 7, 3);
    let (xv, wv) = (rand(b * i, 81), rand(o * i, 82));
    let x = t(&xv, &[b, i]);
    let w = t(&wv, &[o, i]).require_grad();
    let y = x.matmul(&w.t()?)?;
    let grads = y.sum_all()?.backward()?;
    let gw = grads.get(&w).expect("w has a gradient");
    assert!(gw.layout().is_contiguous());
    // d sum(x w^T) / d w[p, q] = sum over rows of x[:, q].
    let want: Vec<f64> = (0..o * i)
        .map(|k| (0..b).map(|r| xv[r * i + k % i]).sum())
        .collect();
    close(&gw.to_vec::<f64>()?, &want, 1e-12);
    Ok(())
}

/// A product with a small output and a long reduction (split across threads) on strided views
/// against a plain loop.
#[test]
fn long_reduction_matmul_matches_loop() -> Result<()> {
    // over `par::GRAIN` multiply-adds / 4, so that it splits
    let (m, k, n) = (6, 4099, 13);
    // `a`: columns 1.. of a [m, k + 1] matrix; `b`: the transpose of an [n, k] matrix.
    let (av, bv) = (rand(m * (k + 1), 91), rand(n * k, 92));
    let a = t(&av, &[m, k + 1]).narrow(1, 1, k)?;
    let b = t(&bv, &[n, k]).t()?;
    let want: Vec<f64> = (0..m * n)
        .map(|i| {
            let (r, c) = (i / n, i % n);
            (0..k)
                .map(|j| av[r * (k + 1) + 1 + j] * bv[c * k + j])
                .sum()
        })
        .collect();
    close(&a.matmul(&b)?.to_vec::<f64>()?, &want, 1e-12);
    Ok(())
}

#[test]
fn causal_softmax_matches_masked_loops() -> Result<()> {
    // [.., Tq, Tk]: square, fewer queries than keys (the last positions of a longer context), a
    // single query (sees every key) and batch axes
    for dims in [[1usize, 5, 5], [2, 3, 7], [3, 1, 4], [2, 6, 6]] {
        let (rows, tq, tk) = (dims[0] * dims[1], dims[1], dims[2]);
        let x = rand(rows * tk, (tq * 10 + tk) as u64);
        let got: Vec<f64> = t(&x, &dims).causal_softmax()?.to_vec::<f64>()?;
        let mut want = vec![0.0; rows * tk];
        for r in 0..rows {
            let seen = tk - tq + r % tq + 1;
            let row = &x[r * tk..r * tk + seen];
            let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = row.iter().map(|v| libm::exp(v - max)).sum();
            for (j, v) in row.iter().enumerate() {
                want[r * tk + j] = libm::exp(v - max) / sum;
            }
        }
        close(&got, &want, 1e-12);
    }
    // more queries than keys, and a rank-1 tensor, have no causal rows
    for dims in [&[4usize, 3][..], &[5]] {
        let n = dims.iter().product();
        let e = t(&rand(n, 1), dims).causal_softmax().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Shape, "{e}");
    }
    Ok(())
}

#[test]
fn normalize_and_its_gradient_match_the_composition() -> Result<()> {
    // rows of 1 (all zero after), 7 and 384, a batch axis, and eps large enough to matter
    for (dims, eps) in [
        (&[3usize, 7][..], 1e-5),
        (&[2, 3, 384], 1e-5),
        (&[4, 1], 0.1),
    ] {
        let n: usize = dims.iter().product();
        let x = t(&rand(n, dims[dims.len() - 1] as u64), dims).require_grad();
        let g = t(&rand(n, 77), dims);
        let composed = |x: &Tensor| -> Result<Tensor> {
            let mean = x.mean(&[-1], true)?;
            let var = x.var(&[-1], 0, true)?;
            x.sub(&mean)?.div(&var.add_scalar(eps)?.sqrt()?)
        };
        let (y, want) = (x.normalize(eps)?, composed(&x)?);
        close(&y.to_vec::<f64>()?, &want.to_vec::<f64>()?, 1e-12);
        let got = y.mul(&g)?.sum_all()?.backward()?;
        let exp = want.mul(&g)?.sum_all()?.backward()?;
        let (got, exp) = (got.get(&x).unwrap(), exp.get(&x).unwrap());
        close(&got.to_vec::<f64>()?, &exp.to_vec::<f64>()?, 1e-9);
    }
    let (a, b) = (t(&rand(6, 1), &[2, 3]), t(&rand(4, 2), &[2, 2]));
    let e = Tensor::apply(crate::Op::NormalizeBackward { eps: 1e-5 }, &[&a, &b]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Shape, "{e}");
    Ok(())
}

#[test]
fn scratch_larger_than_the_pool_keeps_is_not_held() {
    use super::storage::{keep_scratch, scratch};
    // 80 MiB: above the 64 MiB a pooled buffer may have (other tests' scratch stays below it)
    let huge = 20 << 20;
    let mut s = scratch::<f32>(huge);
    assert!(s.len() >= huge);
    s[huge - 1] = 1.0;
    keep_scratch(s);
    assert!(scratch::<f32>(1).capacity() < huge);
}

/// A product's fused tail (`Backend::execute_with_tail`: bias, then ReLU, then for convolutions
/// a 2x2 max pool) gives the same bits as the add, the ReLU and the pool run after it, on every
/// convolution path (Winograd F(4x4) and F(6x6), row updates, the column matrix; threaded
/// products at batch 1, groups; odd output sizes, whose last row or column the pool leaves) and
/// every matmul path (batched, a vector, the split reduction), with and without the ReLU. Only
/// f32 products take a tail, and only convolutions a pool.
#[test]
fn fused_tails_match_the_ops_they_replace() -> Result<()> {
    use crate::backend::{Tail, View};
    let dev = Device::cpu();
    let fused = |op: crate::Op,
                 x: &[&Tensor],
                 bias: &Tensor,
                 relu: bool,
                 max_pool: bool|
     -> Result<Tensor> {
        let views: Vec<View<'_>> = x.iter().map(|t| t.view()).collect();
        let mut out = op.infer(
            &x.iter()
                .map(|t| (t.dtype(), t.shape().clone()))
                .collect::<Vec<_>>(),
        )?;
        // A convolution's pooled output (a matmul's is refused).
        if let (true, &[n, c, h, w]) = (max_pool, out[0].1.dims()) {
            out[0].1 = crate::Shape::from(&[n, c, h / 2, w / 2][..]);
        }
        let tail = Tail {
            bias: bias.view(),
            relu,
            max_pool,
        };
        let s = dev
            .backend()
            .execute_with_tail(&op, &views, tail, &out[0])?;
        let (dtype, shape) = out[0].clone();
        let data = dev.backend().read(View {
            storage: &s,
            layout: &crate::Layout::contiguous(shape.clone()),
            dtype,
        });
        Tensor::from_data(&crate::block_on(data)?, &dev)
    };
    let same = |got: &Tensor, want: &Tensor, what: &str| -> Result<()> {
        let wide = |t: &Tensor| t.cast(DType::F64)?.to_vec::<f64>();
        let (g, w) = (wide(got)?, wide(want)?);
        assert_eq!(got.dims(), want.dims(), "{what}");
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            assert!(
                a.to_bits() == b.to_bits(),
                "{what}, element {i}: fused {a}, unfused {b}"
            );
        }
        // Random inputs: the ReLU cuts some values and keeps others.
        assert!(w.iter().any(|&v| v > 0.0), "{what}: no positive output");
        Ok(())
    };
    {
        let dtype = DType::F32;
        for (case, (xd, wd, p)) in conv_cases().into_iter().enumerate() {
            let x = t(&rand(xd.iter().product(), 1 + case as u64), &xd).cast(dtype)?;
            let w = t(&rand(wd.iter().product(), 50 + case as u64), &wd).cast(dtype)?;
            let b = t(&rand(wd[0], 90 + case as u64), &[wd[0]]).cast(dtype)?;
            let y = x.conv2d(&w, None, p)?.add(&b.reshape([1, wd[0], 1, 1])?)?;
            let two = Pool2dParams {
                kernel: [2, 2],
                stride: [2, 2],
                padding: [0, 0],
                dilation: [1, 1],
                count_include_pad: false,
            };
            // Outputs of one row or column pool to nothing.
            let pools: &[bool] = if y.dims()[2] > 1 && y.dims()[3] > 1 {
                &[false, true]
            } else {
                &[false]
            };
            for (relu, &max_pool) in [false, true]
                .into_iter()
                .flat_map(|r| pools.iter().map(move |m| (r, m)))
            {
                let mut want = if relu { y.relu()? } else { y.clone() };
                if max_pool {
                    want = want.max_pool2d(two)?;
                }
                let got = fused(crate::Op::Conv2d(p), &[&x, &w], &b, relu, max_pool)?;
                same(
                    &got,
                    &want,
                    &format!("{dtype} conv case {case}, relu {relu}, max pool {max_pool}"),
                )?;
            }
        }
        let matmuls: [(&[usize], &[usize]); 4] = [
            (&[3, 5], &[5, 7]),
            (&[2, 3, 9], &[9, 4]),
            (&[4, 6], &[6]),
            // a long reduction split over the threads
            (&[2, 4096], &[4096, 5]),
        ];
        for (case, (ad, bd)) in matmuls.into_iter().enumerate() {
            let a = t(&rand(ad.iter().product(), 7 + case as u64), ad).cast(dtype)?;
            let m = t(&rand(bd.iter().product(), 70 + case as u64), bd).cast(dtype)?;
            let y = a.matmul(&m)?;
            let c = *y.dims().last().unwrap();
            let b = t(&rand(c, 80 + case as u64), &[c]).cast(dtype)?;
            let y = y.add(&b)?;
            for relu in [false, true] {
                let want = if relu { y.relu()? } else { y.clone() };
                let got = fused(crate::Op::Matmul, &[&a, &m], &b, relu, false)?;
                same(
                    &got,
                    &want,
                    &format!("{dtype} matmul case {case}, relu {relu}"),
                )?;
            }
        }
    }
    // A bias of the wrong length is an error, not a read past its end; f64 is not taken.
    let x = t(&rand(2 * 3 * 4 * 4, 5), &[2, 3, 4, 4]);
    let w = t(&rand(6 * 3 * 9, 6), &[6, 3, 3, 3]);
    let conv = crate::Op::Conv2d(Conv2dParams::default());
    let err = fused(conv.clone(), &[&x, &w], &t(&rand(6, 7), &[6]), true, false).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    assert!(!dev.backend().fuses_tail(&conv, DType::F64, false));
    // A matmul takes no pool.
    assert!(
        !dev.backend()
            .fuses_tail(&crate::Op::Matmul, DType::F32, true)
    );
    let (a, m) = (
        t(&rand(6, 8), &[2, 3]).cast(DType::F32)?,
        t(&rand(6, 9), &[3, 2]).cast(DType::F32)?,
    );
    let bias = t(&rand(2, 10), &[2]).cast(DType::F32)?;
    let err = fused(crate::Op::Matmul, &[&a, &m], &bias, true, true).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    let (x, w) = (x.cast(DType::F32)?, w.cast(DType::F32)?);
    let err = fused(
        crate::Op::Conv2d(Conv2dParams::default()),
        &[&x, &w],
        &t(&rand(5, 7), &[5]).cast(DType::F32)?,
        true,
        false,
    )
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Shape, "{err}");
    assert!(
        err.to_string()
            .contains("one value per output channel (6), got 5"),
        "{err}"
    );
    Ok(())
}
