//! The vec4 and broadcast fast paths of the elementwise, softmax and reduction kernels, and the
//! strided kernels they fall back to, against the CPU oracle: aligned and unaligned offsets,
//! sizes that are and are not multiples of 4, scalar and row broadcasts, rows that fit in
//! registers and longer ones, and softmax rows holding -inf, +inf and NaN.

use kiln_conformance::{check, data, same};
use kiln_core::{BinaryOp, DType, Device, Result, Tensor, TensorData, UnaryOp};
use std::slice::from_ref;

const F: DType = DType::F32;
const TOL: (f64, f64) = (1e-4, 1e-5);

fn dev() -> Option<Device> {
    kiln_conformance::device()
}

/// Random data of `dims` preceded by `offset` extra elements, and a view that skips them.
fn shifted(
    dims: &[usize],
    offset: usize,
    seed: u64,
) -> (TensorData, impl Fn(usize, Tensor) -> Result<Tensor>) {
    let n: usize = dims.iter().product();
    let dims = dims.to_vec();
    let view = move |_: usize, x: Tensor| x.narrow(0, offset, n)?.reshape(dims.clone());
    (data(&[offset + n], F, seed, -2.0, 2.0), view)
}

#[test]
fn elementwise_at_aligned_and_unaligned_offsets() {
    let Some(dev) = dev() else { return };
    type Bin = fn(&Tensor, &Tensor) -> Result<Tensor>;
    let ops: [(&str, Bin); 4] = [
        ("add", Tensor::add),
        ("mul", Tensor::mul),
        ("maximum", Tensor::maximum),
        ("lt", Tensor::lt),
    ];
    // offsets 0 and 4 take the vec4 kernels, 1 and 6 the strided ones; [5, 7] is never vec4
    for (dims, offset) in [
        (&[8usize, 12][..], 0),
        (&[8, 12], 4),
        (&[8, 12], 1),
        (&[8, 12], 6),
        (&[5, 7], 0),
        (&[4], 0),
        (&[3], 1),
    ] {
        let (x, view) = shifted(dims, offset, 200 + offset as u64);
        let y = data(
            &[offset + dims.iter().product::<usize>()],
            F,
            201,
            -2.0,
            2.0,
        );
        for (name, f) in ops {
            check(
                &format!("{name} {dims:?} at offset {offset}"),
                &dev,
                &[x.clone(), y.clone()],
                &view,
                &|v| f(&v[0], &v[1]),
                name != "lt",
                TOL,
            );
        }
        for op in [UnaryOp::Exp, UnaryOp::Neg, UnaryOp::Gelu] {
            check(
                &format!("{op:?} {dims:?} at offset {offset}"),
                &dev,
                from_ref(&x),
                &view,
                &|v| v[0].unary(op),
                true,
                (2e-4, 2e-5),
            );
        }
        check(
            &format!("where {dims:?} at offset {offset}"),
            &dev,
            &[x.clone(), y.clone()],
            &view,
            &|v| v[0].gt(&v[1])?.where_cond(&v[1], &v[0]),
            true,
            TOL,
        );
        for to in [DType::I32, DType::Bool] {
            check(
                &format!("cast to {to} {dims:?} at offset {offset}"),
                &dev,
                from_ref(&x),
                &view,
                &|v| v[0].binary_scalar(BinaryOp::Mul, 10.0)?.cast(to),
                false,
                (0.0, 0.0),
            );
        }
        check(
            &format!("contiguous {dims:?} at offset {offset}"),
            &dev,
            from_ref(&x),
            &view,
            &|v| v[0].contiguous(),
            false,
            (0.0, 0.0),
        );
    }
}

/// Copies whose views walk the inner axis contiguously read a vec4 at a time through the
/// strided index (a head split, a pad's interior, a narrowed inner axis); inner lengths or
/// offsets that are not multiples of 4 take the scalar kernel.
#[test]
fn permuted_copies_of_contiguous_rows() {
    let Some(dev) = dev() else { return };
    type View = fn(&Tensor) -> Result<Tensor>;
    let cases: [(&str, &[usize], View); 6] = [
        ("head split, D = 8", &[3, 5, 2, 8], |x| {
            x.permute(&[0, 2, 1, 3])
        }),
        ("head split, D = 6", &[3, 5, 2, 6], |x| {
            x.permute(&[0, 2, 1, 3])
        }),
        ("inner narrowed at 4", &[3, 7, 16], |x| x.narrow(2, 4, 8)),
        ("inner narrowed at 2", &[3, 7, 16], |x| x.narrow(2, 2, 8)),
        ("outer axes swapped", &[5, 3, 12], |x| x.permute(&[1, 0, 2])),
        ("padded rows", &[7, 8], |x| x.pad(&[(0, 0), (4, 8)], 0.5)),
    ];
    for (i, (name, dims, view)) in cases.into_iter().enumerate() {
        check(
            &format!("contiguous of {name} {dims:?}"),
            &dev,
            &[data(dims, F, 300 + i as u64, -2.0, 2.0)],
            &same,
            &|v| view(&v[0])?.contiguous()?.mul_scalar(1.5),
            true,
            TOL,
        );
    }
}

/// A scatter_add with few outputs and a long index axis (an embedding's gradient) sums the
/// axis in chunks, then the chunks: against the CPU's one pass, for f32 and i32, an index axis
/// shorter than src's, and through index_select's gradient.
#[test]
fn scatter_add_over_a_long_index_axis() {
    let Some(dev) = dev() else { return };
    let table = data(&[13, 6], F, 320, -2.0, 2.0);
    let ids = data(&[1000], DType::I32, 321, 0.0, 13.0);
    check(
        "embedding gradient (index_select of 1000 rows of 13)",
        &dev,
        &[table.clone(), ids.clone()],
        &same,
        &|v| v[0].index_select(0, &v[1])?.mul_scalar(0.5),
        true,
        TOL,
    );
    for dt in [F, DType::I32] {
        let x = data(&[13, 6], dt, 322, -20.0, 20.0);
        for rows in [1000, 937] {
            let index = data(&[rows, 6], DType::I32, 323, 0.0, 13.0);
            let src = data(&[1000, 6], dt, 324, -20.0, 20.0);
            check(
                &format!("scatter_add {dt} of {rows} index rows"),
                &dev,
                &[x.clone(), index, src],
                &same,
                &|v| v[0].scatter_add(0, &v[1], &v[2]),
                dt == F,
                TOL,
            );
        }
    }
}

#[test]
fn elementwise_with_broadcast_operands() {
    let Some(dev) = dev() else { return };
    type Bin = fn(&Tensor, &Tensor) -> Result<Tensor>;
    let ops: [(&str, Bin); 5] = [
        ("add", Tensor::add),
        ("sub", Tensor::sub),
        ("div", Tensor::div),
        ("minimum", Tensor::minimum),
        ("ge", Tensor::ge),
    ];
    // (x, b): a bias row of 8 (fast), of 6 (strided), a scalar (fast), a column of rows of 8
    // (fast), the broadcast input first (fast), both inputs broadcast (strided), a channel of
    // NCHW with planes of 24 (fast, either side), of 25 (strided), and a column of rows of 6
    // (strided)
    let cases: [(&[usize], &[usize]); 13] = [
        (&[6, 8], &[8]),
        (&[3, 5, 16], &[16]),
        (&[4, 6], &[6]),
        (&[6, 8], &[]),
        (&[6, 8], &[6, 1]),
        (&[8], &[6, 8]),
        (&[], &[5, 4]),
        (&[16], &[3, 5, 16]),
        (&[1, 8], &[6, 1]),
        (&[3, 5, 4, 6], &[5, 1, 1]),
        (&[5, 1, 1], &[2, 5, 4, 4]),
        (&[2, 3, 5, 5], &[3, 1, 1]),
        (&[4, 6], &[4, 1]),
    ];
    for (i, (xs, bs)) in cases.into_iter().enumerate() {
        let x = data(xs, F, 300 + i as u64, -2.0, 2.0);
        let b = data(bs, F, 310 + i as u64, 0.5, 2.0);
        for (name, f) in ops {
            check(
                &format!("{name} {xs:?} with {bs:?}"),
                &dev,
                &[x.clone(), b.clone()],
                &same,
                &|v| f(&v[0], &v[1]),
                name != "ge",
                TOL,
            );
        }
    }
    // a bias row at an odd offset (read as scalars, still fast) and a scalar of an odd numel
    let (bias, view) = shifted(&[8], 3, 320);
    let x = data(&[6, 8], F, 321, -2.0, 2.0);
    check(
        "add of a bias row at offset 3",
        &dev,
        &[bias, x],
        &|i, t| if i == 0 { view(i, t) } else { Ok(t) },
        &|v| v[1].add(&v[0]),
        true,
        TOL,
    );
    let (bias, view) = shifted(&[12], 1, 325);
    let x = data(&[5, 12], F, 326, -2.0, 2.0);
    check(
        "sub from a row at offset 1",
        &dev,
        &[bias, x],
        &|i, t| if i == 0 { view(i, t) } else { Ok(t) },
        &|v| v[0].sub(&v[1]),
        true,
        TOL,
    );
    let x = data(&[7, 5], F, 322, -2.0, 2.0);
    check(
        "mul by a scalar, 35 elements",
        &dev,
        from_ref(&x),
        &same,
        &|v| v[0].binary_scalar(BinaryOp::Mul, 0.75),
        true,
        TOL,
    );
    let xi = data(&[5, 12], DType::I32, 323, -50.0, 50.0);
    let bi = data(&[12], DType::I32, 324, 1.0, 9.0);
    check(
        "i32 div by a row",
        &dev,
        &[xi, bi],
        &same,
        &|v| v[0].div(&v[1]),
        false,
        (0.0, 0.0),
    );
}

#[test]
fn softmax_rows_of_every_path() {
    let Some(dev) = dev() else { return };
    // rows of 8 and 40 (one invocation each, vec4), 1000 to 4096 (vec4, in registers), 4100
    // (vec4, read twice), 999, 1030 and unaligned starts (strided; 1024 the longest in registers),
    // 13 rows of 100 (32-wide rows, 8 to a workgroup: the last workgroup's spare rows store nothing)
    for (dims, offset) in [
        (&[5usize, 8][..], 0),
        (&[70, 40], 0),
        (&[3, 1000], 0),
        (&[2, 1024], 4),
        (&[2, 4096], 0),
        (&[2, 1024], 1),
        (&[2, 4100], 0),
        (&[3, 999], 0),
        (&[2, 1030], 0),
        (&[3, 1000], 1),
        (&[3, 12], 2),
        (&[13, 100], 0),
    ] {
        let (x, view) = shifted(dims, offset, 400 + dims[1] as u64);
        check(
            &format!("softmax {dims:?} at offset {offset}"),
            &dev,
            from_ref(&x),
            &view,
            &|v| v[0].binary_scalar(BinaryOp::Mul, 4.0)?.softmax(-1),
            true,
            TOL,
        );
        check(
            &format!("log_softmax {dims:?} at offset {offset}"),
            &dev,
            from_ref(&x),
            &view,
            &|v| v[0].binary_scalar(BinaryOp::Mul, 4.0)?.log_softmax(-1),
            true,
            TOL,
        );
    }
}

#[test]
fn causal_softmax_rows_of_every_path() {
    let Some(dev) = dev() else { return };
    // [.., Tq, Tk]: rows of 7 (one invocation each, scalar), 40 and 256 (vec4; 256 is attention's
    // length), 4100 (vec4, read twice), 999 (strided), Tq < Tk (the last queries of a longer
    // context), an unaligned start (strided), and 15 rows of 200 (8 rows to a workgroup)
    for (dims, offset) in [
        (&[2usize, 5, 7][..], 0),
        (&[3, 40, 40], 0),
        (&[2, 2, 16, 256], 0),
        (&[1, 3, 4100], 0),
        (&[2, 999], 0),
        (&[6, 44], 0),
        (&[2, 9, 12], 3),
        (&[3, 5, 200], 0),
    ] {
        let (x, view) = shifted(dims, offset, 900 + dims[dims.len() - 1] as u64);
        check(
            &format!("causal_softmax {dims:?} at offset {offset}"),
            &dev,
            from_ref(&x),
            &view,
            &|v| v[0].binary_scalar(BinaryOp::Mul, 4.0)?.causal_softmax(),
            true,
            TOL,
        );
    }
}

#[test]
fn normalize_rows_of_every_path() {
    let Some(dev) = dev() else { return };
    // rows of 5 (scalar, mostly idle lanes), 384 (vec4, 32-wide, 8 rows a workgroup; 13 rows
    // leave spares), 1000 (vec4, 256-wide), 999 and unaligned starts (strided)
    for (dims, offset) in [
        (&[3usize, 5][..], 0),
        (&[13, 384], 0),
        (&[2, 3, 384], 4),
        (&[3, 1000], 0),
        (&[2, 999], 0),
        (&[4, 384], 1),
    ] {
        let (x, view) = shifted(dims, offset, 700 + dims[dims.len() - 1] as u64);
        // the gradient (normalize_backward) checked with it, against the CPU's
        check(
            &format!("normalize {dims:?} at offset {offset}"),
            &dev,
            from_ref(&x),
            &view,
            &|v| v[0].binary_scalar(BinaryOp::Mul, 3.0)?.normalize(1e-5),
            true,
            TOL,
        );
    }
}

#[test]
fn softmax_rows_with_infinities_and_nan() {
    let Some(dev) = dev() else { return };
    let ninf = f64::NEG_INFINITY;
    for len in [8usize, 12, 1000, 999, 4100] {
        let mut v = kiln_conformance::values(6 * len, 500 + len as u64, -3.0, 3.0);
        // row 0: -inf first and in the middle; row 1: only -inf; row 2: a +inf; row 3: a NaN;
        // row 4: -inf everywhere but one element; row 5: untouched
        v[0] = ninf;
        v[len / 2] = ninf;
        v[len..2 * len].fill(ninf);
        v[2 * len + len / 3] = f64::INFINITY;
        v[3 * len + 1] = f64::NAN;
        v[4 * len..5 * len].fill(ninf);
        v[4 * len + len - 1] = 1.5;
        let x = TensorData::from_f64_iter(v, F, [6, len].into());
        for log in [false, true] {
            check(
                &format!(
                    "{} of rows of {len} with infinities",
                    if log { "log_softmax" } else { "softmax" }
                ),
                &dev,
                from_ref(&x),
                &same,
                &|v| {
                    if log {
                        v[0].log_softmax(-1)
                    } else {
                        v[0].softmax(-1)
                    }
                },
                false,
                TOL,
            );
        }
    }
}

#[test]
fn reductions_of_contiguous_and_strided_runs() {
    let Some(dev) = dev() else { return };
    // rows of 8 (one invocation each, vec4), 1000 (workgroups, vec4), 999 and an unaligned
    // start (strided), columns (the batch axis of a bias gradient: columns.wgsl, vec4 or not,
    // in one launch or in chunks of rows and then their partials) and everything
    let cases: [(&[usize], usize, &[isize]); 11] = [
        (&[7, 8], 0, &[1]),
        (&[5, 1000], 0, &[1]),
        (&[5, 1000], 4, &[1]),
        (&[5, 999], 0, &[1]),
        (&[5, 1000], 1, &[1]),
        (&[64, 40], 0, &[0]),
        (&[300, 24], 0, &[0]),
        (&[64, 40], 1, &[0]),
        (&[2100, 12], 0, &[0]),
        (&[64, 8], 0, &[]),
        (&[4, 6, 20], 0, &[1, 2]),
    ];
    for (dims, offset, axes) in cases {
        let (x, view) = shifted(dims, offset, 600 + dims[1] as u64);
        let w = format!("{dims:?} at offset {offset} over {axes:?}");
        check(
            &format!("sum {w}"),
            &dev,
            from_ref(&x),
            &view,
            &|v| v[0].sum(axes, false),
            true,
            TOL,
        );
        check(
            &format!("mean {w}"),
            &dev,
            from_ref(&x),
            &view,
            &|v| v[0].mean(axes, true),
            true,
            TOL,
        );
        check(
            &format!("max {w}"),
            &dev,
            from_ref(&x),
            &view,
            &|v| v[0].max(axes, false),
            true,
            TOL,
        );
        check(
            &format!("min {w}"),
            &dev,
            from_ref(&x),
            &view,
            &|v| v[0].min(axes, false),
            false,
            TOL,
        );
        check(
            &format!("var {w}"),
            &dev,
            from_ref(&x),
            &view,
            &|v| v[0].var(axes, 1, false),
            true,
            (1e-3, 1e-4),
        );
        if axes.len() == 1 {
            check(
                &format!("argmax {w}"),
                &dev,
                from_ref(&x),
                &view,
                &|v| v[0].argmax(axes[0], false),
                false,
                (0.0, 0.0),
            );
            check(
                &format!("argmin {w}"),
                &dev,
                from_ref(&x),
                &view,
                &|v| v[0].argmin(axes[0], false),
                false,
                (0.0, 0.0),
            );
        }
    }
    // ties: argmax and argmin give the first position, across vec4 lanes too
    let mut v = kiln_conformance::values(3 * 16, 700, 0.0, 1.0);
    for row in 0..3 {
        v[row * 16 + 5] = 9.0;
        v[row * 16 + 2 + row] = 9.0;
        v[row * 16 + 13] = -9.0;
        v[row * 16 + 6 + row] = -9.0;
    }
    let x = TensorData::from_f64_iter(v, F, [3, 16].into());
    check(
        "argmax with ties",
        &dev,
        from_ref(&x),
        &same,
        &|v| v[0].argmax(1, false),
        false,
        (0.0, 0.0),
    );
    check(
        "argmin with ties",
        &dev,
        from_ref(&x),
        &same,
        &|v| v[0].argmin(1, false),
        false,
        (0.0, 0.0),
    );
    let xi = data(&[6, 12], DType::I32, 701, -100.0, 100.0);
    check(
        "sum i32 rows of 12",
        &dev,
        from_ref(&xi),
        &same,
        &|v| v[0].sum(&[1], false),
        false,
        (0.0, 0.0),
    );
    check(
        "max i32 rows of 12",
        &dev,
        &[xi],
        &same,
        &|v| v[0].max(&[1], false),
        false,
        (0.0, 0.0),
    );
    // i32 down columns of 3000 (in chunks) and 13 (one launch, scalars): exact
    for dims in [[3000, 12], [13, 9]] {
        let xi = data(&dims, DType::I32, 702, -100.0, 100.0);
        let w = format!("i32 down columns of {dims:?}");
        let sum = |v: &[Tensor]| v[0].sum(&[0], false);
        check(
            &format!("sum {w}"),
            &dev,
            from_ref(&xi),
            &same,
            &sum,
            false,
            (0.0, 0.0),
        );
        let min = |v: &[Tensor]| v[0].min(&[0], false);
        check(
            &format!("min {w}"),
            &dev,
            from_ref(&xi),
            &same,
            &min,
            false,
            (0.0, 0.0),
        );
    }
}

#[test]
fn few_long_runs_reduced_in_chunks() {
    let Some(dev) = dev() else { return };
    // runs of 40000 (8 chunks of 5000), along rows and down columns, everything at once
    // (50 chunks of 4200), and a prime run (one pass); columns of over 2^20 elements (an
    // invocation per output and chunk: 256 chunks of 16, and a middle axis in 128 of 16)
    let cases: [(&[usize], &[isize]); 6] = [
        (&[3, 40000], &[1]),
        (&[40000, 3], &[0]),
        (&[300, 700], &[]),
        (&[2, 40009], &[1]),
        (&[4096, 300], &[0]),
        (&[3, 2048, 171], &[1]),
    ];
    for (dims, axes) in cases {
        let x = data(dims, F, 800 + dims[1] as u64, -2.0, 2.0);
        let w = format!("{dims:?} over {axes:?}");
        // sums of tens of thousands of terms: a relative tolerance on a cancelling sum is loose
        check(
            &format!("sum {w}"),
            &dev,
            from_ref(&x),
            &same,
            &|v| v[0].sum(axes, false),
            true,
            (1e-4, 1e-3),
        );
        check(
            &format!("mean {w}"),
            &dev,
            from_ref(&x),
            &same,
            &|v| v[0].mean(axes, true),
            true,
            (1e-4, 1e-6),
        );
        check(
            &format!("max {w}"),
            &dev,
            from_ref(&x),
            &same,
            &|v| v[0].max(axes, false),
            true,
            TOL,
        );
        check(
            &format!("min {w}"),
            &dev,
            from_ref(&x),
            &same,
            &|v| v[0].min(axes, false),
            false,
            TOL,
        );
        // a product of values near 1 stays finite; f32 rounding of 40000 factors adds up
        let near_one = data(dims, F, 810, 0.9995, 1.0005);
        check(
            &format!("prod {w}"),
            &dev,
            from_ref(&near_one),
            &same,
            &|v| v[0].prod(axes, false),
            false,
            (1e-3, 1e-6),
        );
    }
}

#[test]
fn many_columns_reduced_an_invocation_each() {
    let Some(dev) = dev() else { return };
    // 9000 outputs adjacent in memory, each down a column of 37 (ops that do not combine in
    // chunks; an invocation per output) and a column of 2 (a workgroup per output before)
    for dims in [[37, 9000], [2, 9000]] {
        let x = data(&dims, F, 830 + dims[0] as u64, -2.0, 2.0);
        let w = format!("{dims:?} down columns");
        check(
            &format!("var {w}"),
            &dev,
            from_ref(&x),
            &same,
            &|v| v[0].var(&[0], 1, false),
            true,
            (1e-4, 1e-5),
        );
        check(
            &format!("argmax {w}"),
            &dev,
            from_ref(&x),
            &same,
            &|v| v[0].argmax(0, false),
            false,
            (0.0, 0.0),
        );
        check(
            &format!("sum {w}"),
            &dev,
            from_ref(&x),
            &same,
            &|v| v[0].sum(&[0], false),
            true,
            TOL,
        );
    }
}
