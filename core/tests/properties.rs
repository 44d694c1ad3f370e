//! Property tests: broadcasting, chains of views, reductions and concat/split on random shapes,
//! each checked against the plain reference in `common`.

mod common;

use common::reference as r;
use common::{Arr, Rng, numel, read, tensor};
use kiln_core::{DType, Shape, SliceRange, Tensor};
use proptest::prelude::*;

/// Small shapes: rank 0..=3 with dims 1..=3, so that many random pairs broadcast and many don't.
fn small_shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..=3, 0..=3)
}

/// Shapes for reductions and views: rank 1..=4, dims 1..=5.
fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(1usize..=5, 1..=4)
}

/// Integer-valued data (exact in every float dtype and under summation).
fn ints(rng: &mut Rng, shape: &[usize]) -> Arr {
    Arr::random(rng, shape, DType::F64, &mut |r| r.int(-9, 9))
}

/// One random view step applied to both the tensor and its reference.
fn view_step(rng: &mut Rng, t: &Tensor, a: &Arr) -> kiln_core::Result<(Tensor, Arr, String)> {
    let rank = a.rank();
    Ok(match rng.below(6) {
        0 if rank >= 2 => {
            let mut dims: Vec<usize> = (0..rank).collect();
            for i in (1..rank).rev() {
                dims.swap(i, rng.below(i + 1));
            }
            (
                t.permute(&dims)?,
                r::permute(a, &dims),
                format!("permute {dims:?}"),
            )
        }
        1 if rank >= 1 => {
            let ranges: Vec<(usize, usize, usize)> = a
                .shape
                .iter()
                .map(|&d| {
                    let start = rng.below(d);
                    let end = start + 1 + rng.below(d - start);
                    (start, end, 1 + rng.below(3))
                })
                .collect();
            let sr: Vec<SliceRange> = ranges
                .iter()
                .map(|&(start, end, step)| SliceRange { start, end, step })
                .collect();
            (
                t.slice(&sr)?,
                r::slice(a, &ranges),
                format!("slice {ranges:?}"),
            )
        }
        2 if rank >= 2 => {
            // Merge two neighbouring axes.
            let i = rng.below(rank - 1);
            let mut s = a.shape.clone();
            let merged = s[i] * s[i + 1];
            s.splice(i..i + 2, [merged]);
            (
                t.reshape(s.clone())?,
                a.reshape(&s),
                format!("reshape {s:?}"),
            )
        }
        3 if rank >= 1 => {
            // Split an axis by one of its divisors, or insert a unit axis.
            let i = rng.below(rank);
            let d = a.shape[i];
            let f = (1..=d)
                .filter(|f| d.is_multiple_of(*f))
                .nth(rng.below(2))
                .unwrap_or(1);
            let mut s = a.shape.clone();
            s.splice(i..i + 1, [f, d / f]);
            (
                t.reshape(s.clone())?,
                a.reshape(&s),
                format!("reshape {s:?}"),
            )
        }
        4 if numel(&a.shape) <= 64 && rank < 5 => {
            // Broadcast every unit axis and add a leading one.
            let mut s: Vec<usize> = a
                .shape
                .iter()
                .map(|&d| if d == 1 { 1 + rng.below(3) } else { d })
                .collect();
            s.insert(0, 1 + rng.below(2));
            (
                t.expand(s.clone())?,
                a.broadcast_to(&s),
                format!("expand {s:?}"),
            )
        }
        5 if rank >= 2 => (t.t()?, r::permute(a, &t_dims(rank)), "t".into()),
        _ => (
            t.unsqueeze(0)?,
            a.reshape(&[&[1], &a.shape[..]].concat()),
            "unsqueeze 0".into(),
        ),
    })
}

fn t_dims(rank: usize) -> Vec<usize> {
    let mut d: Vec<usize> = (0..rank).collect();
    d.swap(rank - 2, rank - 1);
    d
}

/// The axes of `mask` within `rank`.
fn axes_of(mask: u8, rank: usize) -> Vec<usize> {
    (0..rank).filter(|i| mask >> i & 1 == 1).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// `Shape::broadcast` and the result of `add` follow NumPy's rule, values included.
    #[test]
    fn broadcasting_matches_the_reference_rule(sa in small_shape(), sb in small_shape(), seed in any::<u64>()) {
        let want = r::broadcast_shape(&sa, &sb);
        let got = Shape::broadcast(&Shape::from(sa.clone()), &Shape::from(sb.clone()), "add");
        prop_assert_eq!(got.as_ref().ok().map(|s| s.dims().to_vec()), want.clone());
        let mut rng = Rng::new(seed);
        let (a, b) = (ints(&mut rng, &sa), ints(&mut rng, &sb));
        let sum = tensor(&a, DType::F32).add(&tensor(&b, DType::F32));
        match want {
            Some(_) => {
                let got = read(&sum?)?;
                prop_assert_eq!(got, r::binary(&a, &b, |x, y| x + y));
            }
            None => {
                let e = sum.expect_err("non-broadcastable shapes must fail");
                prop_assert_eq!(e.kind(), kiln_core::ErrorKind::Shape);
            }
        }
    }

    /// Any chain of permute / slice / reshape / expand / t / unsqueeze reads back the elements
    /// the naive index computation picks.
    #[test]
    fn view_chains_read_back_the_indexed_elements(shape in shape(), seed in any::<u64>(), steps in 1usize..6) {
        let mut rng = Rng::new(seed);
        let a = ints(&mut rng, &shape);
        let (mut t, mut a) = (tensor(&a, DType::I32), a);
        let mut trail = Vec::new();
        for _ in 0..steps {
            let (nt, na, what) = view_step(&mut rng, &t, &a)?;
            trail.push(what);
            t = nt;
            a = na;
            prop_assert_eq!(t.dims(), &a.shape[..], "after {:?}", trail);
        }
        prop_assert_eq!(read(&t)?, a.clone(), "after {:?}", trail);
        // An op on the final view sees the same elements.
        let doubled = read(&t.add(&t)?)?;
        prop_assert_eq!(doubled, a.map(|v| 2.0 * v), "add after {:?}", trail);
    }

    /// Reducing A then B is reducing A ∪ B; keepdim keeps unit axes; mean * count = sum.
    #[test]
    fn reductions_compose_over_axis_sets(shape in shape(), ma in 1u8..16, mb in 0u8..16, seed in any::<u64>()) {
        let rank = shape.len();
        let a_axes = axes_of(ma, rank);
        let b_axes: Vec<usize> = axes_of(mb & !ma, rank);
        prop_assume!(!a_axes.is_empty());
        let mut rng = Rng::new(seed);
        let x = ints(&mut rng, &shape);
        let t = tensor(&x, DType::F64);
        let signed = |v: &[usize]| v.iter().map(|&i| i as isize).collect::<Vec<_>>();
        let union: Vec<usize> = (0..rank).filter(|i| a_axes.contains(i) || b_axes.contains(i)).collect();

        // keepdim: axis numbers stay valid between the two steps.
        let a_keep = t.sum(&signed(&a_axes), true)?;
        prop_assert_eq!(a_keep.dims(), &r::reduced_shape(&shape, &a_axes, true)[..]);
        let both = if b_axes.is_empty() { a_keep.clone() } else { a_keep.sum(&signed(&b_axes), true)? };
        let direct = t.sum(&signed(&union), true)?;
        prop_assert_eq!(read(&both)?, read(&direct)?);
        prop_assert_eq!(read(&direct)?, r::reduce(&x, &union, true, r::sum));

        // Without keepdim: B's axes shift left past the removed axes of A.
        let a_drop = t.sum(&signed(&a_axes), false)?;
        let b_shifted: Vec<usize> = b_axes.iter().map(|&b| b - a_axes.iter().filter(|&&a| a < b).count()).collect();
        let both = if b_shifted.is_empty() || a_drop.rank() == 0 { a_drop } else { a_drop.sum(&signed(&b_shifted), false)? };
        prop_assert_eq!(read(&both)?, r::reduce(&x, &union, false, r::sum));

        // max composes the same way.
        let m = t.max(&signed(&a_axes), true)?;
        let m = if b_axes.is_empty() { m } else { m.max(&signed(&b_axes), true)? };
        prop_assert_eq!(read(&m)?, r::reduce(&x, &union, true, r::max));

        // mean * count == sum.
        let count: usize = a_axes.iter().map(|&i| shape[i]).product();
        let mean = read(&t.mean(&signed(&a_axes), false)?)?;
        let sum = r::reduce(&x, &a_axes, false, r::sum);
        for (m, s) in mean.data.iter().zip(&sum.data) {
            prop_assert!((m * count as f64 - s).abs() <= 1e-12 * s.abs().max(1.0), "mean {} * {} vs sum {}", m, count, s);
        }
    }

    /// concat of parts, then split with the same sizes, gives the parts back.
    #[test]
    fn concat_then_split_round_trips(shape in shape(), axis_pick in 0usize..4, sizes in prop::collection::vec(0usize..4, 1..4), seed in any::<u64>()) {
        let axis = axis_pick % shape.len();
        prop_assume!(sizes.iter().sum::<usize>() > 0);
        let mut rng = Rng::new(seed);
        let parts: Vec<Arr> = sizes.iter().map(|&n| {
            let mut s = shape.clone();
            s[axis] = n;
            ints(&mut rng, &s)
        }).collect();
        let ts: Vec<Tensor> = parts.iter().map(|p| tensor(p, DType::F32)).collect();
        let joined = Tensor::concat(&ts, axis as isize)?;
        prop_assert_eq!(read(&joined)?, r::concat(&parts, axis));
        let back = joined.split(&sizes, axis as isize)?;
        prop_assert_eq!(back.len(), parts.len());
        for (b, p) in back.iter().zip(&parts) {
            prop_assert_eq!(&read(b)?, p);
        }
    }
}
