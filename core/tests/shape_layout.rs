//! Unit tests of the metadata types: Shape, SliceRange, Layout (strides, views, index
//! iteration), TensorData (bytes, conversions, serde), DType and Error.

mod common;

use common::{Rng, numel, unravel};
use kiln_core::{DType, Error, ErrorKind, Layout, Shape, SliceRange, TensorData};

#[test]
fn shape_basics() {
    let s = Shape::from([2, 3, 4]);
    assert_eq!((s.dims(), s.rank(), s.numel()), (&[2, 3, 4][..], 3, 24));
    assert_eq!(s.contiguous_strides(), vec![12, 4, 1]);
    assert_eq!(Shape::scalar().numel(), 1);
    assert_eq!(Shape::scalar().rank(), 0);
    assert_eq!(Shape::scalar().contiguous_strides(), Vec::<isize>::new());
    assert_eq!(Shape::from([3, 0, 2]).numel(), 0);
    assert_eq!(Shape::from([7]).contiguous_strides(), vec![1]);
    assert_eq!(Shape::from([5, 1, 3]).contiguous_strides(), vec![3, 3, 1]);
    assert_eq!(Shape::new(vec![2, 3]), Shape::from(vec![2, 3]));
    assert_eq!(Shape::from(&[2usize, 3][..]), Shape::from([2, 3]));
    assert_eq!(Shape::from(&s), s);
    assert_eq!(format!("{s}"), "[2, 3, 4]");
    assert_eq!(format!("{s:?}"), "[2, 3, 4]");
    assert_eq!(format!("{}", Shape::scalar()), "[]");
    // long shapes behave the same, however they were made
    let long = [2, 1, 3, 1, 2, 1, 2, 3, 1];
    let (a, b) = (Shape::from(long), Shape::new(long.to_vec()));
    assert_eq!(a, b);
    let hash = |s: &Shape| {
        use std::hash::{BuildHasher, RandomState};
        let state = RandomState::new();
        (state.hash_one(s), state.hash_one(long.as_slice()))
    };
    for s in [&a, &b] {
        let (h, want) = hash(s);
        assert_eq!(h, want, "a shape hashes as its dimensions");
    }
    assert_eq!(a.numel(), 72);
    assert_eq!(a.contiguous_strides(), [36, 36, 12, 12, 6, 6, 3, 1, 1]);
    assert_eq!(format!("{b}"), "[2, 1, 3, 1, 2, 1, 2, 3, 1]");
    assert_ne!(a, Shape::from(&long[..6]));
}

#[test]
fn shape_axis_resolution() {
    let s = Shape::from([2, 3, 4]);
    assert_eq!(s.axis(0, "t").unwrap(), 0);
    assert_eq!(s.axis(-1, "t").unwrap(), 2);
    assert_eq!(s.axis(-3, "t").unwrap(), 0);
    for bad in [3, -4, isize::MAX, isize::MIN] {
        let e = s.axis(bad, "myop").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Index);
        assert_eq!(e.op(), "myop");
        assert!(e.message().contains(&bad.to_string()), "{e}");
    }
}

#[test]
fn shape_broadcast_table() {
    let ok: [(&[usize], &[usize], &[usize]); 8] = [
        (&[3, 1], &[4], &[3, 4]),
        (&[], &[2, 3], &[2, 3]),
        (&[2, 3], &[], &[2, 3]),
        (&[1], &[1, 1, 1], &[1, 1, 1]),
        (&[5, 1, 7], &[1, 6, 1], &[5, 6, 7]),
        (&[0, 1], &[1, 4], &[0, 4]),
        (&[8, 1, 6, 1], &[7, 1, 5], &[8, 7, 6, 5]),
        (&[4, 4], &[4, 4], &[4, 4]),
    ];
    for (a, b, want) in ok {
        let got = Shape::broadcast(&Shape::from(a), &Shape::from(b), "add").unwrap();
        assert_eq!(got.dims(), want, "{a:?} with {b:?}");
        // Broadcasting is symmetric.
        let got = Shape::broadcast(&Shape::from(b), &Shape::from(a), "add").unwrap();
        assert_eq!(got.dims(), want, "{b:?} with {a:?}");
    }
    for (a, b) in [(&[3][..], &[4][..]), (&[2, 3], &[3, 2]), (&[0], &[2])] {
        let e = Shape::broadcast(&Shape::from(a), &Shape::from(b), "mul").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Shape);
        assert_eq!(e.op(), "mul");
        let m = e.to_string();
        assert!(
            m.contains(&format!("{a:?}")) && m.contains(&format!("{b:?}")),
            "{m}"
        );
    }
}

#[test]
fn shape_serializes_as_a_plain_list() {
    let s = Shape::from([2, 3]);
    let j = serde_json::to_string(&s).unwrap();
    assert_eq!(j, "[2,3]");
    assert_eq!(serde_json::from_str::<Shape>(&j).unwrap(), s);
}

#[test]
fn slice_range_lengths() {
    let r = |start, end, step| SliceRange { start, end, step };
    for (range, len) in [
        (r(0, 10, 3), 4),
        (r(0, 9, 3), 3),
        (r(2, 2, 1), 0),
        (r(1, 2, 5), 1),
        (r(5, 3, 1), 0),
        (r(0, 7, 1), 7),
        (r(3, 8, 2), 3),
    ] {
        assert_eq!(range.len(), len, "{range:?}");
        assert_eq!(range.is_empty(), len == 0, "{range:?}");
        assert_eq!(
            range.len(),
            (range.start..range.end).step_by(range.step).count()
        );
    }
}

/// Naive storage index of every element, in row-major logical order.
fn naive_indices(l: &Layout) -> Vec<usize> {
    let dims = l.shape().dims();
    (0..numel(dims))
        .map(|i| {
            let idx = unravel(i, dims);
            let off = l.offset() as isize
                + idx
                    .iter()
                    .zip(l.strides())
                    .map(|(&k, &s)| k as isize * s)
                    .sum::<isize>();
            off as usize
        })
        .collect()
}

#[test]
fn layout_contiguous_and_views() {
    let l = Layout::contiguous(Shape::from([4, 5]));
    assert_eq!((l.strides(), l.offset()), (&[5isize, 1][..], 0));
    assert!(l.is_contiguous());
    assert_eq!(l.indices().collect::<Vec<_>>(), (0..20).collect::<Vec<_>>());

    let p = l.permute(&[1, 0]).unwrap();
    assert_eq!(
        (p.shape().dims(), p.strides()),
        (&[5, 4][..], &[1isize, 5][..])
    );
    assert!(!p.is_contiguous());
    assert_eq!(
        p.indices().take(6).collect::<Vec<_>>(),
        vec![0, 5, 10, 15, 1, 6]
    );

    let r = |start, end, step| SliceRange { start, end, step };
    // Rows 1..3: still contiguous, at an offset.
    let rows = l.slice(&[r(1, 3, 1)]).unwrap();
    assert_eq!((rows.shape().dims(), rows.offset()), (&[2, 5][..], 5));
    assert!(rows.is_contiguous());
    assert_eq!(rows.reshape(&Shape::from([10])).unwrap().offset(), 5);
    // Columns 1..5 by 2: strided.
    let cols = l.slice(&[r(0, 4, 1), r(1, 5, 2)]).unwrap();
    assert_eq!(
        (cols.shape().dims(), cols.strides(), cols.offset()),
        (&[4, 2][..], &[5isize, 2][..], 1)
    );
    assert!(!cols.is_contiguous());
    assert!(cols.reshape(&Shape::from([8])).is_none());
    assert_eq!(
        cols.indices().collect::<Vec<_>>(),
        vec![1, 3, 6, 8, 11, 13, 16, 18]
    );
    // An empty slice has no elements.
    let empty = l.slice(&[r(2, 2, 1)]).unwrap();
    assert_eq!(empty.shape().dims(), &[0, 5]);
    assert_eq!(empty.indices().count(), 0);

    // Broadcasting gives new and unit axes stride 0.
    let col = Layout::contiguous(Shape::from([4, 1]));
    let b = col.broadcast_to(&Shape::from([2, 4, 3])).unwrap();
    assert_eq!(b.strides(), &[0, 1, 0]);
    assert!(!b.is_contiguous());
    assert_eq!(
        b.indices().collect::<Vec<_>>(),
        [[0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]; 2].concat()
    );
    assert!(col.broadcast_to(&Shape::from([4, 2, 3])).is_err());
    assert!(col.broadcast_to(&Shape::from([1])).is_err());

    // Unit axes may have any stride and still be contiguous.
    let u = Layout::from_parts(Shape::from([3, 1, 4]), vec![4, 99, 1], 2);
    assert!(u.is_contiguous());
    assert_eq!(u.indices().collect::<Vec<_>>(), (2..14).collect::<Vec<_>>());

    // reshape keeps only contiguous layouts with the same element count.
    assert!(l.reshape(&Shape::from([21])).is_none());
    assert!(p.reshape(&Shape::from([20])).is_none());
    let re = l.reshape(&Shape::from([2, 10])).unwrap();
    assert_eq!(re.strides(), &[10, 1]);

    // A scalar has one index: its offset.
    let s = Layout::from_parts(Shape::scalar(), vec![], 7);
    assert_eq!(s.indices().collect::<Vec<_>>(), vec![7]);
    assert!(s.is_contiguous());
}

#[test]
fn layout_errors_name_the_values() {
    let l = Layout::contiguous(Shape::from([2, 3]));
    let e = l.permute(&[0, 0]).unwrap_err();
    assert_eq!((e.kind(), e.op()), (ErrorKind::Shape, "permute"));
    assert!(
        e.message().contains("[0, 0]") && e.message().contains("[2, 3]"),
        "{e}"
    );
    let r = |start, end, step| SliceRange { start, end, step };
    let e = l.slice(&[r(0, 3, 1)]).unwrap_err();
    assert_eq!((e.kind(), e.op()), (ErrorKind::Index, "slice"));
    assert!(e.message().contains("0..3"), "{e}");
    assert!(l.slice(&[r(0, 2, 0)]).is_err());
    assert!(l.slice(&[r(0, 2, 1), r(0, 3, 1), r(0, 1, 1)]).is_err());
    let e = l.broadcast_to(&Shape::from([2, 4])).unwrap_err();
    assert_eq!((e.kind(), e.op()), (ErrorKind::Shape, "expand"));
    assert!(
        e.message().contains("[2, 3]") && e.message().contains("[2, 4]"),
        "{e}"
    );
}

#[test]
fn layout_indices_match_naive_offsets_on_random_view_chains() {
    let mut rng = Rng::new(99);
    for _ in 0..200 {
        // ranks up to 9 (a broadcast adds one)
        let rank = 1 + rng.below(6);
        let dims: Vec<usize> = (0..rank).map(|_| 1 + rng.below(4)).collect();
        let mut l = Layout::contiguous(Shape::from(dims));
        for _ in 0..4 {
            let rank = l.shape().rank();
            l = match rng.below(3) {
                0 => {
                    let mut p: Vec<usize> = (0..rank).collect();
                    for i in (1..rank).rev() {
                        p.swap(i, rng.below(i + 1));
                    }
                    l.permute(&p).unwrap()
                }
                1 => {
                    let ranges: Vec<SliceRange> = l
                        .shape()
                        .dims()
                        .iter()
                        .map(|&d| {
                            let start = rng.below(d.max(1));
                            let end = (start + 1 + rng.below(d.max(1))).min(d);
                            SliceRange {
                                start: start.min(end),
                                end,
                                step: 1 + rng.below(3),
                            }
                        })
                        .collect();
                    l.slice(&ranges).unwrap()
                }
                _ => {
                    let mut s: Vec<usize> = l
                        .shape()
                        .dims()
                        .iter()
                        .map(|&d| if d == 1 { 1 + rng.below(3) } else { d })
                        .collect();
                    s.insert(0, 1 + rng.below(2));
                    l.broadcast_to(&Shape::from(s)).unwrap()
                }
            };
            let it = l.indices();
            assert_eq!(it.len(), l.shape().numel(), "{l:?}");
            assert_eq!(it.collect::<Vec<_>>(), naive_indices(&l), "{l:?}");
        }
    }
}

#[test]
fn tensor_data_bytes_are_little_endian_row_major() {
    let d = TensorData::new(vec![1.0f32, -2.0], [2]).unwrap();
    assert_eq!(d.as_bytes(), &[0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0]);
    let d = TensorData::new(vec![-1i32, 258], [2]).unwrap();
    assert_eq!(d.as_bytes(), &[0xff, 0xff, 0xff, 0xff, 2, 1, 0, 0]);
    let d = TensorData::new(vec![7u32], [1]).unwrap();
    assert_eq!(d.as_bytes(), &[7, 0, 0, 0]);
    let d = TensorData::new(vec![half::f16::from_f32(1.0)], [1]).unwrap();
    assert_eq!(d.as_bytes(), &[0x00, 0x3c]);
    let d = TensorData::new(vec![true, false, true], [3]).unwrap();
    assert_eq!(d.as_bytes(), &[1, 0, 1]);
    let d = TensorData::new(vec![1.5f64], Shape::scalar()).unwrap();
    assert_eq!(d.as_bytes(), &1.5f64.to_le_bytes());
    assert_eq!(d.clone().into_bytes(), 1.5f64.to_le_bytes().to_vec());
    assert_eq!((d.dtype(), d.shape()), (DType::F64, &Shape::scalar()));
}

#[test]
fn tensor_data_round_trips_every_dtype() {
    fn check<T: kiln_core::Element>(values: Vec<T>) {
        let n = values.len();
        let d = TensorData::new(values.clone(), [n]).unwrap();
        assert_eq!(d.dtype(), T::DTYPE);
        assert_eq!(d.to_vec::<T>().unwrap(), values);
        assert_eq!(d.as_bytes().len(), n * T::DTYPE.size_in_bytes());
        let again = TensorData::from_bytes(d.as_bytes().to_vec(), T::DTYPE, [n]).unwrap();
        assert_eq!(again, d);
        let f: Vec<f64> = values.iter().map(|v| v.to_f64()).collect();
        assert_eq!(d.to_f64_vec(), f);
        assert_eq!(d.iter_f64().collect::<Vec<_>>(), f);
    }
    check(vec![0.1f64, -1e300, f64::MAX, 5e-324]);
    check(vec![0.1f32, -3.4e38, f32::MIN_POSITIVE]);
    check(
        [0.1, -65504.0, 6e-8]
            .iter()
            .map(|&v| half::f16::from_f64(v))
            .collect(),
    );
    check(vec![i32::MIN, -1, 0, i32::MAX]);
    check(vec![0u32, 1, u32::MAX]);
    check(vec![true, false]);
}

#[test]
fn tensor_data_conversions_use_as_semantics() {
    let d = TensorData::from_f64_iter([-2.7, -0.5, 0.0, 0.4, 3.9], DType::I32, Shape::from([5]));
    assert_eq!(d.to_vec::<i32>().unwrap(), vec![-2, 0, 0, 0, 3]);
    let b = d.convert(DType::Bool);
    assert_eq!(
        b.to_vec::<bool>().unwrap(),
        vec![true, false, false, false, true]
    );
    let u = TensorData::from_f64_iter([-3.0, 4.5, 1e12], DType::U32, Shape::from([3]));
    assert_eq!(u.to_vec::<u32>().unwrap(), vec![0, 4, u32::MAX]);
    let h = TensorData::from_f64_iter([1.0 / 3.0], DType::F16, Shape::from([1]));
    assert_eq!(
        h.to_f64_vec(),
        vec![half::f16::from_f64(1.0 / 3.0).to_f64()]
    );
    let full = TensorData::full([2, 3], 2.5, DType::F32);
    assert_eq!(
        (full.shape().dims(), full.to_vec::<f32>().unwrap()),
        (&[2, 3][..], vec![2.5; 6])
    );
    let r = full.clone().reshape([3, 2]).unwrap();
    assert_eq!(
        (r.shape().dims(), r.as_bytes()),
        (&[3, 2][..], full.as_bytes())
    );
    let c = TensorData::new(vec![1u32, 2, 3], [3])
        .unwrap()
        .convert(DType::F16);
    assert_eq!(c.dtype(), DType::F16);
    assert_eq!(c.to_f64_vec(), vec![1.0, 2.0, 3.0]);
}

#[test]
fn tensor_data_serde_round_trip() {
    for d in [
        TensorData::new(vec![1.5f32, -2.0, 3.25, 4.0, 5.0, 6.0], [2, 3]).unwrap(),
        TensorData::new(vec![true, false], [2, 1]).unwrap(),
        TensorData::new(vec![-7i32], Shape::scalar()).unwrap(),
    ] {
        let j = serde_json::to_string(&d).unwrap();
        assert_eq!(serde_json::from_str::<TensorData>(&j).unwrap(), d, "{j}");
    }
}

#[test]
fn dtype_properties_and_names() {
    let sizes = [8, 4, 2, 4, 4, 1];
    for (dt, size) in DType::ALL.into_iter().zip(sizes) {
        assert_eq!(dt.size_in_bytes(), size, "{dt}");
        assert_eq!(DType::parse(dt.name()), Some(dt));
        assert_eq!(dt.to_string(), dt.name());
        assert!(!(dt.is_float() && dt.is_int()));
        let j = serde_json::to_string(&dt).unwrap();
        assert_eq!(j, format!("\"{}\"", dt.name()));
    }
    assert!(DType::F16.is_float() && DType::U32.is_int() && !DType::Bool.is_int());
    assert_eq!(DType::parse("float32"), Some(DType::F32));
    assert_eq!(DType::parse("int32"), Some(DType::I32));
    assert_eq!(DType::parse("f8"), None);
}

#[test]
fn error_display_and_context() {
    let e = Error::shape(
        "matmul",
        "lhs [2, 3] and rhs [4, 5]: inner dimensions 3 and 4 differ",
    );
    assert_eq!(
        e.to_string(),
        "matmul: lhs [2, 3] and rhs [4, 5]: inner dimensions 3 and 4 differ"
    );
    let c = e.clone().context("Model::load: fc1");
    assert_eq!(c.op(), "Model::load: fc1: matmul");
    assert_eq!((c.kind(), c.message()), (ErrorKind::Shape, e.message()));
    let kinds = [
        (Error::dtype("a", "m"), ErrorKind::DType),
        (Error::index("a", "m"), ErrorKind::Index),
        (Error::unsupported("a", "m"), ErrorKind::Unsupported),
        (Error::device("a", "m"), ErrorKind::Device),
        (Error::format("a", "m"), ErrorKind::Format),
        (Error::io("a", "m"), ErrorKind::Io),
        (Error::invalid("a", "m"), ErrorKind::InvalidArgument),
    ];
    for (e, k) in kinds {
        assert_eq!(e.kind(), k);
        assert_eq!(e.to_string(), "a: m");
    }
}
