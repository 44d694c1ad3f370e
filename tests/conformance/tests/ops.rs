//! Every op on the device under test (`KILN_CONFORMANCE_DEVICE`: wgpu by default, or cuda)
//! against the CPU oracle, forward and backward, on random inputs, odd and large shapes and
//! strided views. Skips with a notice when the machine has no such device.

use kiln_conformance::{check, data, same};
use kiln_core::{
    AdamParams, BinaryOp, CmpOp, Conv2dParams, DType, Device, Op, Pool2dParams, Result, Tensor,
    UnaryOp,
};
use std::slice::from_ref;

const F: DType = DType::F32;
const TOL: (f64, f64) = (1e-4, 1e-5);

fn t(i: usize, x: Tensor) -> Result<Tensor> {
    // a non-contiguous view with the same values: the transpose made contiguous, then viewed
    // transposed back (strides (1, rows) instead of (cols, 1))
    let _ = i;
    if x.rank() >= 2 {
        x.transpose(-1, -2)?.contiguous()?.transpose(-1, -2)
    } else {
        Ok(x)
    }
}

fn transposed(_: usize, x: Tensor) -> Result<Tensor> {
    if x.rank() >= 2 {
        x.transpose(-1, -2)
    } else {
        Ok(x)
    }
}

fn dev() -> Option<Device> {
    kiln_conformance::device()
}

#[test]
fn unary_ops_forward_and_backward() {
    let Some(dev) = dev() else { return };
    // every row of the unary table in its test range, and powf of negative bases
    let mut ops: Vec<(UnaryOp, f64, f64)> = UnaryOp::samples()
        .into_iter()
        .map(|u| (u, u.test_range().lo, u.test_range().hi))
        .collect();
    ops.push((UnaryOp::Powf(3.0), -2.0, 2.0));
    for (op, lo, hi) in ops {
        let x = data(&[7, 33], F, 1, lo, hi);
        check(
            &format!("{op:?}"),
            &dev,
            from_ref(&x),
            &same,
            &|v| v[0].unary(op),
            true,
            (2e-4, 2e-5),
        );
        check(
            &format!("{op:?} strided"),
            &dev,
            &[x],
            &transposed,
            &|v| v[0].unary(op),
            false,
            (2e-4, 2e-5),
        );
    }
    for dt in [DType::I32] {
        for op in UnaryOp::samples()
            .into_iter()
            .filter(|u| u.dtypes().contains(&dt))
        {
            let x = data(&[5, 9], dt, 2, -50.0, 50.0);
            check(
                &format!("{op:?} {dt}"),
                &dev,
                &[x],
                &same,
                &|v| v[0].unary(op),
                false,
                (0.0, 0.0),
            );
        }
    }
}

/// WGSL's accuracy for the f32 built-ins the unary ops call (the spec's floating-point accuracy
/// table), over each bound's whole domain: every backend's translation must meet it, whatever
/// faster forms of a function it picks (CUDA's `__expf`, a driver's approximations).
#[test]
fn float_functions_meet_wgsl_accuracy() {
    let Some(dev) = dev() else { return };
    // the bound on |got - want| at input x, for the f32 result `want`
    type Bound = fn(f64, f64) -> f64;
    fn ulp(want: f64) -> f64 {
        let w = (want as f32).abs();
        f64::from(f32::from_bits(w.to_bits() + 1) - w)
    }
    fn log_bound(x: f64, want: f64) -> f64 {
        if (0.5..=2.0).contains(&x) {
            2f64.powi(-21)
        } else {
            3.0 * ulp(want)
        }
    }
    // the distance from `want` to the end of WGSL's interval on the side of `below`, the
    // interval rounded outward to f32 values as the WebGPU CTS checks it (NVIDIA's log, through
    // Vulkan and CUDA alike, is 3.02 ULP off at 0.4477)
    fn allowed(want: f64, bound: f64, below: bool) -> f64 {
        // rounding down below `want` is rounding up above `-want`
        let w = if below { -want } else { want };
        let end = (w + bound) as f32;
        let end = if f64::from(end) < w + bound {
            end.next_up()
        } else {
            end
        };
        f64::from(end) - w
    }
    const LOG_BOUND: &str = "2^-21 absolute in [0.5, 2], else 3 ULP";
    let pi = std::f64::consts::PI;
    // (op, inputs from lo to hi, spread over the exponents (log) or evenly, bound, what WGSL says)
    let cases: [(UnaryOp, f64, f64, bool, Bound, &str); 8] = [
        (
            UnaryOp::Exp,
            -87.0,
            88.0,
            false,
            |x, w| (3.0 + 2.0 * x.abs()) * ulp(w),
            "3 + 2|x| ULP",
        ),
        (UnaryOp::Log, 0.5, 2.0, false, log_bound, LOG_BOUND),
        (UnaryOp::Log, -126.0, 127.0, true, log_bound, LOG_BOUND),
        (
            UnaryOp::Sqrt,
            -126.0,
            127.0,
            true,
            |_, w| 4.5 * ulp(w),
            "1 / inverseSqrt: 2 + 2.5 ULP",
        ),
        (
            UnaryOp::Rsqrt,
            -126.0,
            127.0,
            true,
            |_, w| 2.0 * ulp(w),
            "2 ULP",
        ),
        (
            UnaryOp::Recip,
            -126.0,
            126.0,
            true,
            |_, w| 2.5 * ulp(w),
            "2.5 ULP for |y| in [2^-126, 2^126]",
        ),
        (
            UnaryOp::Sin,
            -pi,
            pi,
            false,
            |_, _| 2f64.powi(-11),
            "2^-11 absolute in [-pi, pi]",
        ),
        (
            UnaryOp::Cos,
            -pi,
            pi,
            false,
            |_, _| 2f64.powi(-11),
            "2^-11 absolute in [-pi, pi]",
        ),
    ];
    for (i, (op, lo, hi, log, bound, wgsl)) in cases.into_iter().enumerate() {
        let mut xs: Vec<f32> = kiln_conformance::values(1 << 14, 40 + i as u64, lo, hi)
            .into_iter()
            .map(|v| if log { 2f64.powf(v) } else { v } as f32)
            .collect();
        let ends = [lo, hi].map(|v| if log { 2f64.powf(v) } else { v } as f32);
        xs.extend(ends);
        if log && op == UnaryOp::Recip {
            // both signs of the divisor
            xs.iter_mut().step_by(2).for_each(|x| *x = -*x);
        }
        let n = xs.len();
        let got = Tensor::from_vec(xs.clone(), [n], &dev)
            .and_then(|x| x.unary(op))
            .and_then(|y| y.to_data())
            .unwrap_or_else(|e| panic!("{op:?}: {e}"))
            .to_f64_vec();
        let reference = |x: f64| match op {
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => 1.0 / x.sqrt(),
            UnaryOp::Recip => 1.0 / x,
            UnaryOp::Sin => x.sin(),
            _ => x.cos(),
        };
        let (mut worst, mut at) = (0.0, 0);
        for (j, (&x, &g)) in xs.iter().zip(&got).enumerate() {
            let (x, want) = (f64::from(x), reference(f64::from(x)));
            let excess = (g - want).abs() / allowed(want, bound(x, want), g < want);
            // a NaN (a wrong special case) fails
            let excess = if excess.is_nan() {
                f64::INFINITY
            } else {
                excess
            };
            if excess > worst {
                (worst, at) = (excess, j);
            }
        }
        let (x, g) = (f64::from(xs[at]), got[at]);
        let want = reference(x);
        assert!(
            worst <= 1.0,
            "{op:?}: at x = {x:e} WGSL allows {wgsl} ({:e} rounded out to f32), found {g:e} against {want:e} (error {:e})",
            bound(x, want),
            (g - want).abs()
        );
        eprintln!("{op:?} ({wgsl}): worst error {worst:.3} of the allowed over {n} inputs");
    }
}

#[test]
fn binary_compare_where_cast() {
    let Some(dev) = dev() else { return };
    let a = data(&[5, 1, 7], F, 3, -2.0, 2.0);
    let b = data(&[3, 7], F, 4, 0.5, 2.0);
    type Bin = fn(&Tensor, &Tensor) -> Result<Tensor>;
    let ops: [(&str, Bin); 7] = [
        ("add", Tensor::add),
        ("sub", Tensor::sub),
        ("mul", Tensor::mul),
        ("div", Tensor::div),
        ("maximum", Tensor::maximum),
        ("minimum", Tensor::minimum),
        ("pow", |x, y| x.abs()?.add_scalar(0.1)?.pow(y)),
    ];
    for (name, f) in ops {
        check(
            name,
            &dev,
            &[a.clone(), b.clone()],
            &same,
            &|v| f(&v[0], &v[1]),
            true,
            TOL,
        );
        check(
            &format!("{name} strided"),
            &dev,
            &[b.clone(), b.clone()],
            &transposed,
            &|v| f(&v[0], &v[1]),
            false,
            TOL,
        );
    }
    // NaN (the square root of a's negatives) propagates through maximum and minimum
    for (name, f) in &ops[4..6] {
        check(
            &format!("{name} with NaN"),
            &dev,
            &[a.clone(), b.clone()],
            &same,
            &|v| f(&v[0].sqrt()?, &v[1]),
            false,
            // WGSL lets sqrt be 2.5 ULP off (NVIDIA's Vulkan driver uses that); NaNs must match.
            TOL,
        );
    }
    for dt in [DType::I32, DType::U32] {
        let x = data(&[4, 6], dt, 5, 0.0, 40.0);
        let y = data(&[6], dt, 6, 0.0, 7.0);
        for (name, f) in &ops[..6] {
            check(
                &format!("{name} {dt}"),
                &dev,
                &[x.clone(), y.clone()],
                &same,
                &|v| f(&v[0], &v[1]),
                false,
                (0.0, 0.0),
            );
        }
    }
    type Cmp = fn(&Tensor, &Tensor) -> Result<Tensor>;
    let cmps: [(&str, Cmp); 6] = [
        ("eq", Tensor::eq),
        ("ne", Tensor::ne),
        ("lt", Tensor::lt),
        ("le", Tensor::le),
        ("gt", Tensor::gt),
        ("ge", Tensor::ge),
    ];
    let ai = data(&[6, 5], DType::I32, 7, -3.0, 3.0);
    let bi = data(&[5], DType::I32, 8, -3.0, 3.0);
    for (name, f) in cmps {
        check(
            name,
            &dev,
            &[ai.clone(), bi.clone()],
            &same,
            &|v| f(&v[0], &v[1]),
            false,
            (0.0, 0.0),
        );
        check(
            &format!("{name} f32 with NaN"),
            &dev,
            &[a.clone(), b.clone()],
            &same,
            &|v| f(&v[0].sqrt()?, &v[1].sub(&v[1])?.sqrt()?),
            false,
            (0.0, 0.0),
        );
        check(
            &format!("{name} f32"),
            &dev,
            &[a.clone(), b.clone()],
            &same,
            &|v| f(&v[0], &v[1]),
            false,
            (0.0, 0.0),
        );
    }
    check(
        "where",
        &dev,
        &[a.clone(), b.clone()],
        &same,
        &|v| v[0].gt(&v[1])?.where_cond(&v[0], &v[1]),
        true,
        TOL,
    );
    let x = data(&[3, 11], F, 9, -300.0, 300.0);
    for to in [DType::I32, DType::U32, DType::Bool, DType::F32] {
        check(
            &format!("cast f32->{to}"),
            &dev,
            from_ref(&x),
            &transposed,
            &|v| v[0].cast(to),
            false,
            (0.0, 0.0),
        );
        // beyond i32's range (saturates) and NaN (gives 0, or true). The NaNs replace the
        // negatives exactly (sqrt of a negative); the other values pass unchanged, so the
        // comparison stays exact whatever rounding the GPU's sqrt has.
        check(
            &format!("cast of huge and NaN f32->{to}"),
            &dev,
            from_ref(&x),
            &same,
            &|v| {
                let huge = v[0].binary_scalar(BinaryOp::Mul, 1e8)?;
                let negative = v[0].compare(CmpOp::Lt, &v[0].scalar_like(0.0)?)?;
                let nans = negative.where_cond(&v[0].sqrt()?, &v[0])?;
                Tensor::concat(&[huge, nans], 0)?.cast(to)
            },
            false,
            (0.0, 0.0),
        );
        check(
            &format!("cast i32->{to}"),
            &dev,
            from_ref(&ai),
            &same,
            &|v| v[0].cast(to),
            false,
            (0.0, 0.0),
        );
        check(
            &format!("cast bool->{to}"),
            &dev,
            from_ref(&ai),
            &same,
            &|v| v[0].gt(&v[0].zeros_like()?)?.cast(to),
            false,
            (0.0, 0.0),
        );
    }
}

#[test]
fn reductions() {
    let Some(dev) = dev() else { return };
    let x = data(&[6, 5, 130], F, 10, -2.0, 2.0);
    let axes: [&[isize]; 5] = [&[], &[0], &[2], &[0, 2], &[1, 2]];
    for ax in axes {
        for keep in [false, true] {
            let w = format!("axes {ax:?} keepdim {keep}");
            check(
                &format!("sum {w}"),
                &dev,
                from_ref(&x),
                &t,
                &|v| v[0].sum(ax, keep),
                true,
                TOL,
            );
            check(
                &format!("mean {w}"),
                &dev,
                from_ref(&x),
                &same,
                &|v| v[0].mean(ax, keep),
                true,
                TOL,
            );
            check(
                &format!("max {w}"),
                &dev,
                from_ref(&x),
                &transposed,
                &|v| v[0].max(ax, keep),
                true,
                TOL,
            );
            check(
                &format!("min {w}"),
                &dev,
                from_ref(&x),
                &same,
                &|v| v[0].min(ax, keep),
                true,
                TOL,
            );
            check(
                &format!("var {w}"),
                &dev,
                from_ref(&x),
                &same,
                &|v| v[0].var(ax, 1, keep),
                true,
                (1e-3, 1e-4),
            );
        }
    }
    let small = data(&[3, 4, 5], F, 11, 0.5, 1.5);
    check(
        "prod",
        &dev,
        from_ref(&small),
        &same,
        &|v| v[0].prod(&[1], false),
        true,
        TOL,
    );
    for axis in [0isize, 1, 2] {
        check(
            &format!("argmax {axis}"),
            &dev,
            from_ref(&x),
            &transposed,
            &|v| v[0].argmax(axis, false),
            false,
            (0.0, 0.0),
        );
        check(
            &format!("argmin {axis}"),
            &dev,
            from_ref(&x),
            &same,
            &|v| v[0].argmin(axis, true),
            false,
            (0.0, 0.0),
        );
    }
    let xi = data(&[7, 300], DType::I32, 12, -100.0, 100.0);
    check(
        "sum i32",
        &dev,
        from_ref(&xi),
        &same,
        &|v| v[0].sum(&[1], false),
        false,
        (0.0, 0.0),
    );
    check(
        "max i32",
        &dev,
        &[xi],
        &same,
        &|v| v[0].max(&[0], false),
        false,
        (0.0, 0.0),
    );
}

#[test]
fn softmax_log_softmax_cumsum() {
    let Some(dev) = dev() else { return };
    for shape in [[3usize, 7, 10], [2, 3, 1000]] {
        let x = data(&shape, F, 13, -5.0, 5.0);
        for axis in [-1isize, 1] {
            check(
                &format!("softmax {shape:?} {axis}"),
                &dev,
                from_ref(&x),
                &transposed,
                &|v| v[0].softmax(axis),
                true,
                TOL,
            );
            check(
                &format!("log_softmax {shape:?} {axis}"),
                &dev,
                from_ref(&x),
                &same,
                &|v| v[0].log_softmax(axis),
                true,
                TOL,
            );
            check(
                &format!("cumsum {shape:?} {axis}"),
                &dev,
                from_ref(&x),
                &transposed,
                &|v| v[0].cumsum(axis),
                true,
                (1e-4, 1e-3),
            );
        }
    }
}

#[test]
fn reductions_of_few_outputs_in_chunks() {
    let Some(dev) = dev() else { return };
    // few outputs over long runs are reduced in two passes (a bias gradient's shape, and the
    // odd sizes where the chunks must divide the outer reduced axis)
    let x = data(&[48, 5, 21, 19], F, 13, -2.0, 2.0);
    let y = data(&[35, 3, 1100], F, 14, -2.0, 2.0);
    for (name, v) in [("[48, 5, 21, 19]", &x), ("[35, 3, 1100]", &y)] {
        let axes: &[isize] = if v.shape().rank() == 4 {
            &[0, 2, 3]
        } else {
            &[0, 2]
        };
        check(
            &format!("chunked sum {name}"),
            &dev,
            from_ref(v),
            &same,
            &|v| v[0].sum(axes, false),
            true,
            TOL,
        );
        check(
            &format!("chunked mean {name}"),
            &dev,
            from_ref(v),
            &same,
            &|v| v[0].mean(axes, true),
            true,
            TOL,
        );
        check(
            &format!("chunked max {name}"),
            &dev,
            from_ref(v),
            &same,
            &|v| v[0].max(axes, false),
            true,
            TOL,
        );
    }
    check(
        "chunked sum of a transposed view",
        &dev,
        from_ref(&y),
        &transposed,
        &|v| v[0].sum(&[0, 1], false),
        true,
        TOL,
    );
}

#[test]
fn matmul_shapes_batches_and_views() {
    let Some(dev) = dev() else { return };
    // odd sizes for each gemm tile shape (64x64, 128x64, 128x128 blocks), edges included; the
    // last four have few output tiles and a long K, so K is split (a ragged last chunk,
    // batches); those of at most 4 rows (here and above) take the matrix-vector kernel
    let cases: [(&[usize], &[usize]); 13] = [
        (&[1, 1], &[1, 1]),
        (&[521, 67], &[67, 530]),
        (&[17, 33], &[33, 29]),
        (&[130, 70], &[70, 150]),
        (&[2, 1, 5, 7], &[3, 7, 4]),
        (&[9], &[9, 4]),
        (&[3, 9], &[9]),
        (&[4, 65, 3], &[3, 200]),
        (&[257, 129], &[129, 300]),
        (&[6, 3000], &[3000, 5]),
        (&[3, 5, 1100], &[1100, 7]),
        (&[3, 2, 3001], &[3001, 70]),
        (&[1, 4, 9], &[2, 9, 131]),
    ];
    for (i, (a, b)) in cases.iter().enumerate() {
        let x = data(a, F, 20 + i as u64, -1.0, 1.0);
        let y = data(b, F, 40 + i as u64, -1.0, 1.0);
        check(
            &format!("matmul {a:?} x {b:?}"),
            &dev,
            &[x.clone(), y.clone()],
            &same,
            &|v| v[0].matmul(&v[1]),
            true,
            (1e-4, 1e-4),
        );
    }
    let x = data(&[31, 19], F, 60, -1.0, 1.0);
    check(
        "matmul of transposed views",
        &dev,
        &[x.clone(), x.clone()],
        &transposed,
        &|v| v[0].matmul(&v[1].t()?),
        true,
        (1e-4, 1e-4),
    );
    let x = data(&[3, 1200], F, 63, -1.0, 1.0);
    let y = data(&[70, 1200], F, 64, -1.0, 1.0);
    check(
        "matrix-vector product with a transposed view (a linear layer)",
        &dev,
        &[x, y],
        &same,
        &|v| v[0].matmul(&v[1].t()?),
        true,
        (1e-4, 1e-4),
    );
    for (rows, seed) in [(5, 61), (3, 65)] {
        let xi = data(&[rows, 6], DType::I32, seed, -5.0, 5.0);
        let yi = data(&[6, 7], DType::I32, seed + 1, -5.0, 5.0);
        check(
            &format!("matmul i32, {rows} rows"),
            &dev,
            &[xi, yi],
            &same,
            &|v| v[0].matmul(&v[1]),
            false,
            (0.0, 0.0),
        );
    }
}

#[test]
fn convolutions_forward_and_backward() {
    let Some(dev) = dev() else { return };
    let cases = [
        ([2, 3, 9, 8], [4, 3, 3, 3], Conv2dParams::default()),
        (
            [1, 4, 11, 10],
            [6, 2, 3, 2],
            Conv2dParams {
                stride: [2, 1],
                padding: [1, 2],
                dilation: [1, 2],
                groups: 2,
            },
        ),
        (
            [3, 2, 7, 7],
            [5, 2, 1, 1],
            Conv2dParams {
                stride: [2, 2],
                padding: [0, 0],
                dilation: [1, 1],
                groups: 1,
            },
        ),
    ];
    let cases = cases.into_iter().chain([
        // 520 output channels: the conv and its weight gradient use the largest gemm tiles
        ([1, 60, 25, 25], [520, 60, 3, 3], Conv2dParams::default()),
        // 3 input channels over 26136 positions: the input gradient in 32-row tiles
        ([6, 3, 66, 66], [40, 3, 3, 3], Conv2dParams::default()),
        // weight gradients with K = N * OH * OW long enough to be split, one and two groups
        ([4, 3, 20, 20], [5, 3, 3, 3], Conv2dParams::default()),
        (
            [2, 4, 24, 24],
            [6, 2, 3, 3],
            Conv2dParams {
                groups: 2,
                ..Conv2dParams::default()
            },
        ),
    ]);
    for (xs, ws, p) in cases {
        let x = data(&xs, F, 70, -1.0, 1.0);
        let w = data(&ws, F, 71, -1.0, 1.0);
        check(
            &format!("conv2d {xs:?} {ws:?} {p:?}"),
            &dev,
            &[x, w],
            &same,
            &|v| v[0].conv2d(&v[1], None, p),
            true,
            (1e-4, 1e-4),
        );
    }
    let x = data(&[2, 4, 5, 6], F, 72, -1.0, 1.0);
    let w = data(&[4, 3, 3, 3], F, 73, -1.0, 1.0);
    let p = Conv2dParams {
        stride: [2, 2],
        padding: [1, 1],
        dilation: [1, 1],
        groups: 1,
    };
    check(
        "conv_transpose2d",
        &dev,
        &[x, w],
        &same,
        &|v| v[0].conv_transpose2d(&v[1], None, p, [1, 0]),
        true,
        (1e-4, 1e-4),
    );
}

#[test]
fn pooling_forward_and_backward() {
    let Some(dev) = dev() else { return };
    let x = data(&[2, 3, 9, 10], F, 80, -2.0, 2.0);
    let pools = [
        Pool2dParams {
            kernel: [2, 2],
            stride: [2, 2],
            padding: [0, 0],
            dilation: [1, 1],
            count_include_pad: true,
        },
        Pool2dParams {
            kernel: [3, 3],
            stride: [2, 1],
            padding: [1, 1],
            dilation: [1, 1],
            count_include_pad: false,
        },
        Pool2dParams {
            kernel: [3, 2],
            stride: [1, 2],
            padding: [1, 0],
            dilation: [1, 1],
            count_include_pad: true,
        },
    ];
    for p in pools {
        check(
            &format!("max_pool2d {p:?}"),
            &dev,
            from_ref(&x),
            &same,
            &|v| v[0].max_pool2d(p),
            true,
            TOL,
        );
        check(
            &format!("avg_pool2d {p:?}"),
            &dev,
            from_ref(&x),
            &t,
            &|v| v[0].avg_pool2d(p),
            true,
            TOL,
        );
    }
    let dil = Pool2dParams {
        kernel: [2, 2],
        stride: [1, 1],
        padding: [0, 0],
        dilation: [2, 2],
        count_include_pad: true,
    };
    check(
        "max_pool2d dilated",
        &dev,
        from_ref(&x),
        &same,
        &|v| v[0].max_pool2d(dil),
        true,
        TOL,
    );
    // windows that tile the input exactly: the gradient is written window by window
    let tiled = data(&[3, 5, 8, 6], F, 81, -2.0, 2.0);
    let tiles = Pool2dParams {
        kernel: [2, 3],
        stride: [2, 3],
        padding: [0, 0],
        dilation: [1, 1],
        count_include_pad: true,
    };
    check(
        "max_pool2d of exact tiles",
        &dev,
        from_ref(&tiled),
        &t,
        &|v| v[0].max_pool2d(tiles),
        true,
        TOL,
    );
    for out in [[3, 4], [1, 1], [9, 10], [4, 7]] {
        check(
            &format!("adaptive_avg_pool2d {out:?}"),
            &dev,
            from_ref(&x),
            &same,
            &|v| v[0].adaptive_avg_pool2d(out),
            true,
            TOL,
        );
    }
}

#[test]
fn indexing_and_data_movement() {
    let Some(dev) = dev() else { return };
    let x = data(&[5, 7], F, 90, -2.0, 2.0);
    let idx = data(&[5, 4], DType::I32, 91, 0.0, 7.0);
    check(
        "gather",
        &dev,
        &[x.clone(), idx.clone()],
        &same,
        &|v| v[0].gather(1, &v[1]),
        true,
        TOL,
    );
    let rows = data(&[6], DType::U32, 92, 0.0, 5.0);
    check(
        "index_select",
        &dev,
        &[x.clone(), rows],
        &transposed,
        &|v| v[0].index_select(0, &v[1]),
        true,
        TOL,
    );
    let src = data(&[5, 4], F, 93, -1.0, 1.0);
    check(
        "scatter_add",
        &dev,
        &[x.clone(), idx.clone(), src],
        &same,
        &|v| v[0].scatter_add(1, &v[1], &v[2]),
        true,
        TOL,
    );
    check(
        "pad",
        &dev,
        from_ref(&x),
        &transposed,
        &|v| v[0].pad(&[(1, 2), (0, 3)], 0.5),
        true,
        TOL,
    );
    let y = data(&[5, 3], F, 94, -1.0, 1.0);
    check(
        "concat",
        &dev,
        &[x.clone(), y],
        &same,
        &|v| Tensor::concat(&[v[0].clone(), v[1].clone(), v[0].clone()], 1),
        true,
        TOL,
    );
    let labels = data(&[9], DType::I32, 95, 0.0, 10.0);
    check(
        "one_hot",
        &dev,
        &[labels],
        &same,
        &|v| v[0].one_hot(10, F),
        false,
        (0.0, 0.0),
    );
    check(
        "contiguous of a slice",
        &dev,
        &[x],
        &same,
        &|v| v[0].slice_axis(1, 1, 7, 2)?.contiguous(),
        true,
        (0.0, 0.0),
    );
}

#[test]
fn creation_ops_match_the_cpu() {
    let Some(dev) = dev() else { return };
    let cpu = Device::cpu();
    let make = |d: &Device| -> Result<Vec<kiln_core::TensorData>> {
        Ok(vec![
            Tensor::full([3, 5], 2.5, F, d)?.to_data()?,
            Tensor::full([4], -7.0, DType::I32, d)?.to_data()?,
            Tensor::arange(-3.0, 40.0, 0.5, F, d)?.to_data()?,
            Tensor::arange(0.0, 17.0, 3.0, DType::I32, d)?.to_data()?,
            Tensor::eye(5, F, d)?.to_data()?,
            Tensor::rand_uniform([1000], -2.0, 3.0, 77, F, d)?.to_data()?,
            Tensor::rand_normal([1000], 1.0, 2.0, 78, F, d)?.to_data()?,
        ])
    };
    let (want, got) = (make(&cpu).unwrap(), make(&dev).unwrap());
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        kiln_conformance::assert_close(&format!("creation op {i}"), w, g, 1e-5, 1e-5);
    }
}

#[test]
fn large_dispatches_over_65535_workgroups() {
    let Some(dev) = dev() else { return };
    // 4100 * 4200 elements / 256 per workgroup = 67266 workgroups: a 2-D grid
    let a = data(&[4100, 4200], F, 100, -1.0, 1.0);
    let b = data(&[4200], F, 101, -1.0, 1.0);
    check(
        "add over 67266 workgroups",
        &dev,
        &[a, b],
        &same,
        &|v| v[0].add(&v[1]),
        false,
        (0.0, 0.0),
    );
    // 70000 one-row matmuls: 70000 row tiles, a grid of 65535 x 2 along y and z
    let a = data(&[70000, 1, 3], F, 103, -1.0, 1.0);
    let b = data(&[70000, 3, 2], F, 104, -1.0, 1.0);
    check(
        "matmul over 70000 batches",
        &dev,
        &[a, b],
        &same,
        &|v| v[0].matmul(&v[1]),
        false,
        (1e-5, 1e-6),
    );
    // 70000 rows, one workgroup each
    let x = data(&[70000, 70], F, 102, -1.0, 1.0);
    check(
        "sum over 70000 workgroups",
        &dev,
        from_ref(&x),
        &same,
        &|v| v[0].sum(&[1], false),
        false,
        TOL,
    );
    check(
        "softmax over 70000 rows",
        &dev,
        &[x],
        &same,
        &|v| v[0].softmax(-1),
        false,
        TOL,
    );
}

#[test]
fn fused_adam_step() {
    let Some(dev) = dev() else { return };
    // param, grad, exp_avg and exp_avg_sq (non-negative), odd sizes, and strided views
    let mut inputs = vec![
        data(&[37, 29], F, 900, -1.0, 1.0),
        data(&[37, 29], F, 901, -0.1, 0.1),
        data(&[37, 29], F, 902, -0.05, 0.05),
        data(&[37, 29], F, 903, 0.0, 0.01),
    ];
    // the last case with a gradient scale (clipping's coefficient)
    for (decoupled, step, scaled) in [(false, 1, false), (false, 7, false), (true, 3, true)] {
        if scaled {
            inputs.push(data(&[], F, 904, 0.2, 0.9));
        }
        let params = AdamParams {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            decoupled,
            step,
        };
        for (views, prep) in [
            ("", same as fn(usize, Tensor) -> Result<Tensor>),
            (" of strided views", t),
        ] {
            check(
                &format!("adam_step decoupled {decoupled} step {step}{views}"),
                &dev,
                &inputs,
                &prep,
                &|v| {
                    let ins: Vec<&Tensor> = v.iter().collect();
                    // the new param and the stacked moments, compared together
                    let out = Tensor::apply_many(Op::AdamStep(params), &ins, Some(2))?;
                    Tensor::concat(&[out[0].unsqueeze(0)?, out[1].clone()], 0)
                },
                false,
                TOL,
            );
        }
    }
}
