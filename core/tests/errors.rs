//! Every class of bad input returns a kiln `Error` of the right kind whose message names the op
//! and the offending values — never a panic.

mod common;

use common::{Arr, assert_err, tensor};
use kiln_core::{
    BinaryOp, Conv2dParams, DType, Error, ErrorKind, Op, Pool2dParams, ReduceOp, Result, Shape,
    SliceRange, Tensor, TensorData,
};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// A tensor of `shape` and `dt` holding 1, 2, 3, ... (uploaded, so no backend op is needed).
fn t(shape: &[usize], dt: DType) -> Tensor {
    let n: usize = shape.iter().product();
    tensor(
        &Arr::new(shape, (0..n).map(|i| (i % 5) as f64).collect()),
        dt,
    )
}

fn f32t(shape: &[usize]) -> Tensor {
    t(shape, DType::F32)
}

/// Runs `f`, turning a panic into a test failure that says so.
#[track_caller]
fn no_panic<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            panic!("{what}: panicked (`{msg}`) instead of returning an Error");
        }
    }
}

fn conv(stride: usize, padding: usize, dilation: usize, groups: usize) -> Conv2dParams {
    Conv2dParams {
        stride: [stride; 2],
        padding: [padding; 2],
        dilation: [dilation; 2],
        groups,
    }
}

fn pool(kernel: usize, stride: usize, padding: usize) -> Pool2dParams {
    Pool2dParams {
        kernel: [kernel; 2],
        stride: [stride; 2],
        padding: [padding; 2],
        dilation: [1, 1],
        count_include_pad: true,
    }
}

#[test]
fn matmul_inner_dimension_mismatch_has_the_documented_message() {
    let e: Error = f32t(&[2, 3]).matmul(&f32t(&[4, 5])).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Shape);
    assert_eq!(
        e.to_string(),
        "matmul: lhs [2, 3] and rhs [4, 5]: inner dimensions 3 and 4 differ"
    );
    assert_err(
        f32t(&[7]).matmul(&f32t(&[6])),
        ErrorKind::Shape,
        "matmul",
        &["[7]", "[6]", "7 and 6"],
    );
    assert_err(
        f32t(&[2, 3, 4]).matmul(&f32t(&[3, 4, 5])),
        ErrorKind::Shape,
        "matmul",
        &["[2, 3, 4]", "[3, 4, 5]", "batch"],
    );
    let s = Tensor::from_vec(vec![1.0f32], Shape::scalar(), &common::dev()).unwrap();
    assert_err(s.matmul(&f32t(&[1])), ErrorKind::Shape, "matmul", &["rank"]);
}

#[test]
fn non_broadcastable_shapes() {
    let (a, b) = (f32t(&[3, 4]), f32t(&[5]));
    for r in [a.add(&b), a.sub(&b), a.mul(&b), a.div(&b), a.maximum(&b)] {
        assert_err(r, ErrorKind::Shape, "", &["[3, 4]", "[5]", "4 vs 5"]);
    }
    assert_err(a.add(&b), ErrorKind::Shape, "add", &[]);
    assert_err(a.lt(&b), ErrorKind::Shape, "lt", &["[3, 4]", "[5]"]);
    let c = t(&[3, 4], DType::Bool);
    assert_err(
        c.where_cond(&a, &f32t(&[2, 4])),
        ErrorKind::Shape,
        "where",
        &["[2, 4]"],
    );
    assert_err(
        f32t(&[3, 2]).expand([3, 4]),
        ErrorKind::Shape,
        "expand",
        &["[3, 2]", "[3, 4]"],
    );
    assert_err(
        f32t(&[3, 2]).expand([2]),
        ErrorKind::Shape,
        "expand",
        &["[3, 2]", "[2]"],
    );
}

#[test]
fn dtype_mismatches_and_unsupported_dtypes() {
    let (f, i) = (f32t(&[2, 2]), t(&[2, 2], DType::I32));
    assert_err(f.add(&i), ErrorKind::DType, "add", &["f32", "i32"]);
    assert_err(f.matmul(&i), ErrorKind::DType, "matmul", &["f32", "i32"]);
    assert_err(
        Tensor::concat(&[f.clone(), i.clone()], 0),
        ErrorKind::DType,
        "concat",
        &["f32", "i32"],
    );
    assert_err(i.exp(), ErrorKind::DType, "exp", &["i32"]);
    assert_err(i.sigmoid(), ErrorKind::DType, "sigmoid", &["i32"]);
    assert_err(t(&[2], DType::U32).neg(), ErrorKind::DType, "neg", &["u32"]);
    assert_err(
        t(&[2], DType::Bool).abs(),
        ErrorKind::DType,
        "abs",
        &["bool"],
    );
    assert_err(i.mean(&[0], false), ErrorKind::DType, "mean", &["i32"]);
    assert_err(i.var(&[0], 1, false), ErrorKind::DType, "var", &["i32"]);
    assert_err(i.pow(&i), ErrorKind::DType, "pow", &["i32"]);
    assert_err(i.softmax(0), ErrorKind::DType, "softmax", &["i32"]);
    let b = t(&[2, 2], DType::Bool);
    assert_err(b.add(&b), ErrorKind::DType, "add", &["bool"]);
    assert_err(b.sum(&[0], false), ErrorKind::DType, "sum", &["bool"]);
    assert_err(b.cumsum(0), ErrorKind::DType, "cumsum", &["bool"]);
    assert_err(
        f.where_cond(&f, &f),
        ErrorKind::DType,
        "where",
        &["condition", "f32"],
    );
    assert_err(
        b.where_cond(&f, &i),
        ErrorKind::DType,
        "where",
        &["f32", "i32"],
    );
    assert_err(
        f.gather(0, &f32t(&[2, 2])),
        ErrorKind::DType,
        "gather",
        &["index", "f32"],
    );
    assert_err(
        f.index_select(0, &f32t(&[2])),
        ErrorKind::DType,
        "index_select",
        &["f32"],
    );
    assert_err(
        f.one_hot(3, DType::F32),
        ErrorKind::DType,
        "one_hot",
        &["f32"],
    );
    assert_err(
        f.scatter_add(0, &t(&[2, 2], DType::I32), &i),
        ErrorKind::DType,
        "scatter_add",
        &["f32", "i32"],
    );
    let d = common::dev();
    assert_err(
        Tensor::rand_uniform([3], 0.0, 1.0, 1, DType::I32, &d),
        ErrorKind::DType,
        "rand_uniform",
        &["i32"],
    );
    assert_err(
        Tensor::rand_normal([3], 0.0, 1.0, 1, DType::Bool, &d),
        ErrorKind::DType,
        "rand_normal",
        &["bool"],
    );
    let xi = t(&[1, 1, 4, 4], DType::I32);
    assert_err(
        xi.conv2d(&t(&[1, 1, 2, 2], DType::I32), None, conv(1, 0, 1, 1)),
        ErrorKind::DType,
        "conv2d",
        &["i32"],
    );
    assert_err(
        xi.max_pool2d(pool(2, 2, 0)),
        ErrorKind::DType,
        "max_pool2d",
        &["i32"],
    );
    // Reading back as the wrong element type.
    assert_err(
        f.to_vec::<i32>(),
        ErrorKind::DType,
        "to_vec",
        &["i32", "f32"],
    );
}

#[test]
fn bad_axes() {
    let x = f32t(&[3, 4, 5]);
    assert_err(
        x.sum(&[3], false),
        ErrorKind::Index,
        "sum",
        &["axis 3", "rank 3"],
    );
    assert_err(x.max(&[-4], false), ErrorKind::Index, "max", &["-4"]);
    assert_err(x.softmax(5), ErrorKind::Index, "softmax", &["5"]);
    assert_err(x.log_softmax(-4), ErrorKind::Index, "log_softmax", &["-4"]);
    assert_err(x.cumsum(3), ErrorKind::Index, "cumsum", &["3"]);
    assert_err(x.argmax(3, false), ErrorKind::Index, "argmax", &["3"]);
    assert_err(
        Tensor::concat(&[x.clone(), x.clone()], 3),
        ErrorKind::Index,
        "concat",
        &["3"],
    );
    assert_err(x.transpose(0, 3), ErrorKind::Index, "transpose", &["3"]);
    assert_err(x.squeeze(3), ErrorKind::Index, "squeeze", &["3"]);
    assert_err(x.unsqueeze(4), ErrorKind::Index, "unsqueeze", &["4"]);
    assert_err(x.flatten(0, 3), ErrorKind::Index, "flatten", &["3"]);
    assert_err(x.dim(3), ErrorKind::Index, "dim", &["3"]);
    assert_err(
        x.gather(3, &t(&[3, 4, 5], DType::I32)),
        ErrorKind::Index,
        "gather",
        &["3"],
    );
    assert_err(
        x.sum(&[0, -3], false),
        ErrorKind::InvalidArgument,
        "sum",
        &["repeat"],
    );
    // argmax reduces exactly one axis; axes given straight to the op must be sorted and unique.
    let argmax2 = Op::Reduce {
        op: ReduceOp::ArgMax,
        axes: vec![0, 1],
        keepdim: false,
    };
    assert_err(
        Tensor::apply(argmax2, &[&x]),
        ErrorKind::InvalidArgument,
        "argmax",
        &["[0, 1]"],
    );
    let unsorted = Op::Reduce {
        op: ReduceOp::Sum,
        axes: vec![2, 0],
        keepdim: false,
    };
    assert_err(
        Tensor::apply(unsorted, &[&x]),
        ErrorKind::InvalidArgument,
        "sum",
        &["[2, 0]"],
    );
    assert_err(x.squeeze(1), ErrorKind::Shape, "squeeze", &["[3, 4, 5]"]);
    assert_err(
        x.flatten(2, 1),
        ErrorKind::InvalidArgument,
        "flatten",
        &["2", "1"],
    );
}

/// Runs `f`, reporting `Some(problem)` when it panics or succeeds instead of returning an Error.
fn must_fail<T: std::fmt::Debug>(f: impl FnOnce() -> Result<T>) -> Option<String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Some(format!("returned Ok({v:?})")),
        Ok(Err(_)) => None,
        Err(p) => Some(format!(
            "panicked: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

#[test]
fn axis_methods_on_a_scalar_return_errors_not_panics() {
    let s = Tensor::from_vec(vec![2.0f32], Shape::scalar(), &common::dev()).unwrap();
    let problems: Vec<String> = [
        ("dim(0)", must_fail(|| s.dim(0))),
        ("split(&[1], 0)", must_fail(|| s.split(&[1], 0))),
        ("chunk(1, 0)", must_fail(|| s.chunk(1, 0))),
        ("narrow(0, 0, 1)", must_fail(|| s.narrow(0, 0, 1))),
        (
            "slice_axis(0, 0, 1, 1)",
            must_fail(|| s.slice_axis(0, 0, 1, 1)),
        ),
        ("squeeze(0)", must_fail(|| s.squeeze(0))),
    ]
    .into_iter()
    // PyTorch allows transposing a 0-d tensor with itself; either answer is fine, a panic is not.
    .chain([(
        "transpose(0, -1)",
        must_fail(|| s.transpose(0, -1)).filter(|p| p.starts_with("panicked")),
    )])
    .filter_map(|(what, p)| p.map(|p| format!("{what}: {p}")))
    .collect();
    assert!(
        problems.is_empty(),
        "on a rank-0 tensor these must return an Error: {problems:#?}"
    );
}

#[test]
fn bad_permutations() {
    let x = f32t(&[2, 3, 4]);
    for dims in [&[0, 0, 1][..], &[0, 1], &[0, 1, 3], &[2, 1, 0, 3]] {
        assert_err(
            x.permute(dims),
            ErrorKind::Shape,
            "permute",
            &[&format!("{dims:?}"), "[2, 3, 4]"],
        );
    }
}

#[test]
fn bad_slice_ranges() {
    let x = f32t(&[3, 4]);
    let r = |start, end, step| SliceRange { start, end, step };
    assert_err(
        x.slice(&[r(0, 4, 1)]),
        ErrorKind::Index,
        "slice",
        &["0..4", "size 3"],
    );
    assert_err(x.slice(&[r(2, 1, 1)]), ErrorKind::Index, "slice", &["2..1"]);
    assert_err(
        x.slice(&[r(0, 3, 0)]),
        ErrorKind::Index,
        "slice",
        &["step 0"],
    );
    assert_err(
        x.slice(&[r(0, 3, 1), r(0, 4, 1), r(0, 1, 1)]),
        ErrorKind::Shape,
        "slice",
        &["3 ranges", "[3, 4]"],
    );
    assert_err(x.narrow(1, 2, 3), ErrorKind::Index, "slice", &["2..5"]);
    assert_err(x.narrow(1, usize::MAX, 2), ErrorKind::Index, "slice", &[]);
    assert_err(
        x.split(&[1, 1], 0),
        ErrorKind::Shape,
        "split",
        &["[1, 1]", "2", "3"],
    );
    assert_err(x.chunk(0, 0), ErrorKind::InvalidArgument, "chunk", &[]);
}

#[test]
fn out_of_range_indices_are_errors() {
    let x = f32t(&[3, 4]);
    for it in [DType::I32, DType::U32] {
        let idx = tensor(&Arr::new(&[3, 2], vec![0., 1., 2., 4., 1., 0.]), it);
        assert_err(
            no_panic("gather", || x.gather(1, &idx)),
            ErrorKind::Index,
            "gather",
            &["4"],
        );
        let idx = tensor(&Arr::new(&[3], vec![0., 3., 1.]), it);
        assert_err(
            no_panic("index_select", || x.index_select(0, &idx)),
            ErrorKind::Index,
            "index_select",
            &["3"],
        );
        let idx = tensor(&Arr::new(&[4], vec![0., 1., 5., 2.]), it);
        assert_err(
            no_panic("one_hot", || idx.one_hot(5, DType::F32)),
            ErrorKind::Index,
            "one_hot",
            &["5"],
        );
        let idx = tensor(&Arr::new(&[1, 4], vec![0., 1., 3., 2.]), it);
        assert_err(
            no_panic("scatter_add", || x.scatter_add(0, &idx, &f32t(&[1, 4]))),
            ErrorKind::Index,
            "scatter_add",
            &["3"],
        );
    }
    // Negative i32 indices are out of range too.
    let neg = tensor(&Arr::new(&[2], vec![0., -1.]), DType::I32);
    assert_err(
        no_panic("index_select -1", || x.index_select(1, &neg)),
        ErrorKind::Index,
        "index_select",
        &["-1"],
    );
    assert_err(
        no_panic("one_hot -1", || neg.one_hot(3, DType::F32)),
        ErrorKind::Index,
        "one_hot",
        &["-1"],
    );
    let neg = tensor(&Arr::new(&[3, 1], vec![0., -2., 1.]), DType::I32);
    assert_err(
        no_panic("gather -2", || x.gather(1, &neg)),
        ErrorKind::Index,
        "gather",
        &["-2"],
    );
}

#[test]
fn index_shape_errors() {
    let x = f32t(&[3, 4]);
    assert_err(
        x.gather(1, &t(&[3], DType::I32)),
        ErrorKind::Shape,
        "gather",
        &["[3]", "[3, 4]"],
    );
    assert_err(
        x.gather(1, &t(&[4, 2], DType::I32)),
        ErrorKind::Shape,
        "gather",
        &["[4, 2]", "[3, 4]"],
    );
    assert_err(
        x.index_select(0, &t(&[2, 1], DType::I32)),
        ErrorKind::Shape,
        "index_select",
        &["[2, 1]"],
    );
    assert_err(
        x.scatter_add(0, &t(&[2, 4], DType::I32), &f32t(&[1, 4])),
        ErrorKind::Shape,
        "scatter_add",
        &["[2, 4]", "[1, 4]"],
    );
    assert_err(
        x.pad(&[(1, 1), (1, 1), (1, 1)], 0.0),
        ErrorKind::Shape,
        "pad",
        &["3", "[3, 4]"],
    );
    assert_err(
        Tensor::concat(&[x.clone(), f32t(&[3, 5])], 0),
        ErrorKind::Shape,
        "concat",
        &["[3, 5]", "[3, 4]"],
    );
    assert_err(
        Tensor::concat(&[x.clone(), f32t(&[3])], 0),
        ErrorKind::Shape,
        "concat",
        &["[3]"],
    );
    assert_err(
        Tensor::concat(&[], 0),
        ErrorKind::InvalidArgument,
        "concat",
        &[],
    );
    assert_err(
        Tensor::stack(&[], 0),
        ErrorKind::InvalidArgument,
        "stack",
        &[],
    );
    assert_err(
        Tensor::stack(&[x.clone(), f32t(&[4, 3])], 0),
        ErrorKind::Shape,
        "concat",
        &["[1, 4, 3]", "[1, 3, 4]"],
    );
}

#[test]
fn convolution_and_pooling_shape_errors() {
    // Channels: input 3, weight expects 4.
    assert_err(
        f32t(&[1, 3, 5, 5]).conv2d(&f32t(&[2, 4, 3, 3]), None, conv(1, 0, 1, 1)),
        ErrorKind::Shape,
        "conv2d",
        &["3 channels", "[2, 4, 3, 3]", "4"],
    );
    // Groups must divide both channel counts.
    assert_err(
        f32t(&[1, 4, 5, 5]).conv2d(&f32t(&[3, 2, 3, 3]), None, conv(1, 0, 1, 2)),
        ErrorKind::InvalidArgument,
        "conv2d",
        &["groups 2", "4", "3"],
    );
    assert_err(
        f32t(&[1, 4, 5, 5]).conv2d(&f32t(&[4, 4, 3, 3]), None, conv(1, 0, 1, 0)),
        ErrorKind::InvalidArgument,
        "conv2d",
        &["groups 0"],
    );
    // Kernel (with dilation) larger than the padded input.
    assert_err(
        f32t(&[1, 1, 3, 3]).conv2d(&f32t(&[1, 1, 5, 5]), None, conv(1, 0, 1, 1)),
        ErrorKind::Shape,
        "conv2d",
        &["kernel 5", "size 3"],
    );
    assert_err(
        f32t(&[1, 1, 5, 5]).conv2d(&f32t(&[1, 1, 3, 3]), None, conv(1, 0, 3, 1)),
        ErrorKind::Shape,
        "conv2d",
        &["kernel 3", "dilation 3", "size 5"],
    );
    assert_err(
        f32t(&[1, 1, 5, 5]).conv2d(&f32t(&[1, 1, 3, 3]), None, conv(0, 0, 1, 1)),
        ErrorKind::InvalidArgument,
        "conv2d",
        &["stride"],
    );
    assert_err(
        f32t(&[3, 5, 5]).conv2d(&f32t(&[1, 3, 3, 3]), None, conv(1, 0, 1, 1)),
        ErrorKind::Shape,
        "conv2d",
        &["4-D", "[3, 5, 5]"],
    );
    assert_err(
        f32t(&[1, 3, 5, 5]).conv2d(&f32t(&[2, 3, 3, 3]), Some(&f32t(&[3])), conv(1, 0, 1, 1)),
        ErrorKind::Shape,
        "conv2d",
        &["bias", "[2]", "[3]"],
    );
    assert_err(
        f32t(&[1, 3, 5, 5]).conv_transpose2d(&f32t(&[2, 3, 3, 3]), None, conv(1, 0, 1, 1), [0, 0]),
        ErrorKind::Shape,
        "conv_transpose2d",
        &["3 channels", "[2, 3, 3, 3]"],
    );
    assert_err(
        f32t(&[1, 2, 5, 5]).conv_transpose2d(&f32t(&[2, 3, 3, 3]), None, conv(2, 0, 1, 1), [2, 0]),
        ErrorKind::Shape,
        "conv_transpose2d",
        &["[2, 0]"],
    );
    assert_err(
        f32t(&[1, 1, 3, 3]).max_pool2d(pool(4, 1, 0)),
        ErrorKind::Shape,
        "max_pool2d",
        &["kernel 4", "size 3"],
    );
    assert_err(
        f32t(&[1, 1, 6, 6]).avg_pool2d(pool(2, 2, 2)),
        ErrorKind::InvalidArgument,
        "avg_pool2d",
        &["padding", "kernel"],
    );
    assert_err(
        f32t(&[1, 1, 6, 6]).adaptive_avg_pool2d([0, 3]),
        ErrorKind::InvalidArgument,
        "adaptive_avg_pool2d",
        &["[0, 3]"],
    );
    assert_err(
        f32t(&[6, 6]).adaptive_avg_pool2d([2, 2]),
        ErrorKind::Shape,
        "adaptive_avg_pool2d",
        &["[6, 6]"],
    );
}

#[test]
fn reshape_element_count_mismatch() {
    let x = f32t(&[3, 5]);
    let e = x.reshape([4, 4]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Shape);
    assert_eq!(
        e.to_string(),
        "reshape: cannot reshape [3, 5] (15 elements) to [4, 4] (16 elements)"
    );
    assert_err(
        x.permute(&[1, 0]).unwrap().reshape([16]),
        ErrorKind::Shape,
        "reshape",
        &["15", "16"],
    );
    for dims in [&[-1, -1][..], &[4, -1], &[-2, 15], &[0, -1]] {
        assert_err(
            x.reshape_infer(dims),
            ErrorKind::Shape,
            "reshape",
            &["[3, 5]", &format!("{dims:?}")],
        );
    }
}

#[test]
fn tensor_data_length_mismatch() {
    assert_err(
        TensorData::new(vec![1.0f32; 3], [2, 2]),
        ErrorKind::Shape,
        "TensorData::new",
        &["3 values", "[2, 2]", "4"],
    );
    assert_err(
        TensorData::from_bytes(vec![0u8; 7], DType::F32, [2]),
        ErrorKind::Shape,
        "TensorData::from_bytes",
        &["7 bytes", "f32", "8"],
    );
    assert_err(
        TensorData::new(vec![1i32; 6], [2, 3])
            .unwrap()
            .reshape([4, 2]),
        ErrorKind::Shape,
        "TensorData::reshape",
        &["[2, 3]", "[4, 2]"],
    );
    assert_err(
        Tensor::from_vec(vec![1u32, 2, 3], [2, 2], &common::dev()),
        ErrorKind::Shape,
        "TensorData::new",
        &["3 values", "[2, 2]"],
    );
    assert_err(
        TensorData::new(vec![1.0f64], [1]).unwrap().to_vec::<f32>(),
        ErrorKind::DType,
        "to_vec",
        &["f32", "f64"],
    );
}

#[test]
fn overflowing_shapes_are_errors_not_panics() {
    // A shape whose element count overflows usize (e.g. read from a corrupt file).
    let huge = [1usize << 40, 1 << 40, 1 << 40];
    let problems: Vec<String> = [
        (
            "TensorData::from_bytes",
            must_fail(|| TensorData::from_bytes(Vec::new(), DType::F32, huge)),
        ),
        (
            "TensorData::new",
            must_fail(|| TensorData::new(Vec::<f32>::new(), huge)),
        ),
        (
            "Tensor::zeros",
            must_fail(|| Tensor::zeros(huge, DType::F32, &common::dev())),
        ),
    ]
    .into_iter()
    .filter_map(|(what, p)| p.map(|p| format!("{what}: {p}")))
    .collect();
    assert!(
        problems.is_empty(),
        "a shape of {huge:?} must be an Error: {problems:#?}"
    );
}

#[test]
fn invalid_arguments() {
    let d = common::dev();
    let x = f32t(&[2, 3]);
    assert_err(
        x.clamp(1.0, -1.0),
        ErrorKind::InvalidArgument,
        "clamp",
        &["1", "-1"],
    );
    assert_err(
        Tensor::arange(0.0, 5.0, 0.0, DType::F32, &d),
        ErrorKind::InvalidArgument,
        "arange",
        &["step 0"],
    );
    assert_err(
        Tensor::arange(0.0, f64::INFINITY, 1.0, DType::F32, &d),
        ErrorKind::InvalidArgument,
        "arange",
        &["inf"],
    );
    assert_err(f32t(&[3]).t(), ErrorKind::Shape, "t", &["[3]"]);
    // Wrong number of inputs to an op given straight to `apply`.
    assert_err(
        Tensor::apply(Op::Binary(BinaryOp::Add), &[&x]),
        ErrorKind::InvalidArgument,
        "add",
        &["2 inputs", "got 1"],
    );
    assert_err(
        Tensor::apply(Op::Matmul, &[]),
        ErrorKind::InvalidArgument,
        "matmul",
        &[],
    );
    assert_err(
        Tensor::apply(Op::Binary(BinaryOp::Add), &[&x, &x, &x]),
        ErrorKind::InvalidArgument,
        "add",
        &["got 3"],
    );
    assert_err(x.to_scalar(), ErrorKind::Shape, "to_scalar", &["[2, 3]"]);
}

/// Adam's step has two outputs: `apply` says to use `apply_many`, a wrong expected count is
/// named, and recording it for autodiff is refused (it has no gradient rule).
#[test]
fn several_outputs_need_apply_many_and_no_recording() -> Result<()> {
    let adam = Op::AdamStep(kiln_core::AdamParams {
        lr: 0.1,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
        decoupled: false,
        step: 1,
    });
    let xs: Vec<Tensor> = (0..4).map(|_| f32t(&[3, 2])).collect();
    let ins: Vec<&Tensor> = xs.iter().collect();
    assert_err(
        Tensor::apply(adam.clone(), &ins),
        ErrorKind::InvalidArgument,
        "adam_step",
        &["2 outputs, 1 expected", "apply_many"],
    );
    assert_err(
        Tensor::apply_many(adam.clone(), &ins, Some(3)),
        ErrorKind::InvalidArgument,
        "adam_step",
        &["2 outputs, 3 expected"],
    );
    let out = Tensor::apply_many(adam.clone(), &ins, None)?;
    assert_eq!(out.len(), 2);
    assert_eq!(
        (out[0].dims(), out[1].dims()),
        (&[3, 2][..], &[2, 3, 2][..])
    );
    // a gradient scale is rank 0
    let bad = f32t(&[2]);
    let with_bad: Vec<&Tensor> = ins.iter().copied().chain([&bad]).collect();
    assert_err(
        Tensor::apply_many(adam.clone(), &with_bad, None),
        ErrorKind::Shape,
        "adam_step",
        &["rank-0 gradient scale", "[2]"],
    );
    let tracked = xs[0].clone().require_grad();
    let ins = [&tracked, &xs[1], &xs[2], &xs[3]];
    assert_err(
        Tensor::apply_many(adam, &ins, Some(2)),
        ErrorKind::Unsupported,
        "adam_step",
        &["several outputs", "no_grad"],
    );
    Ok(())
}
