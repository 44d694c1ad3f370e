//! Walking several strided layouts of one shape together, row by row, and the elementwise
//! loops built on it. Axes of size 1 are dropped and axes contiguous in every layout merged, so
//! that rows are as long as possible and inner loops run over plain slices where they can.

use super::par;
use super::par::zeros;
use super::storage::{CpuElem, Src, buffer};
use crate::{Layout, Shape};
use alloc::vec;
use alloc::vec::Vec;
use core::mem::MaybeUninit;
use core::ops::Range;

/// `K` layouts over one shape, simplified: `dims[i]` with `strides[i][j]` in layout `j`.
pub(crate) struct Walk<const K: usize> {
    dims: Vec<usize>,
    strides: Vec<[isize; K]>,
    offsets: [usize; K],
    numel: usize,
}

impl<const K: usize> Walk<K> {
    /// Walks `dims` with the given strides and offsets for each of the `K` layouts.
    pub fn new(dims: &[usize], strides: [&[isize]; K], offsets: [usize; K]) -> Self {
        let mut d: Vec<usize> = Vec::new();
        let mut s: Vec<[isize; K]> = Vec::new();
        for (ax, &n) in dims.iter().enumerate() {
            if n == 1 {
                continue;
            }
            let st: [isize; K] = core::array::from_fn(|j| strides[j][ax]);
            if let (Some(ld), Some(ls)) = (d.last_mut(), s.last_mut())
                && (0..K).all(|j| ls[j] == st[j] * n as isize)
            {
                *ld *= n;
                *ls = st;
                continue;
            }
            d.push(n);
            s.push(st);
        }
        Walk {
            dims: d,
            strides: s,
            offsets,
            numel: dims.iter().product(),
        }
    }
    /// Length of a row and the strides along it.
    pub fn inner(&self) -> (usize, [isize; K]) {
        match (self.dims.last(), self.strides.last()) {
            (Some(&n), Some(&s)) => (n, s),
            _ => (1, [0; K]),
        }
    }
    /// The strides of the axis before the rows' (`None` for a single row).
    pub fn outer_strides(&self) -> Option<[isize; K]> {
        self.strides.len().checked_sub(2).map(|a| self.strides[a])
    }
    /// Calls `f(offsets)` with the offsets of the first element of every row, in row-major order.
    pub fn for_each_row(&self, mut f: impl FnMut([usize; K])) {
        self.for_each_run(0..self.numel, |_, _, o| f(o));
    }
    /// Splits the row-major positions `range` at row ends and calls `f(i, n, offsets)` for each
    /// run of positions `i..i + n`, whose first element is at `offsets`.
    pub fn for_each_run(&self, range: Range<usize>, mut f: impl FnMut(usize, usize, [usize; K])) {
        self.runs(range, &mut f);
    }
    /// [`Self::for_each_run`] through a `dyn` callback: the walk is compiled once per `K`, not
    /// once per elementwise function and dtype (a call per row is nothing beside the row's work).
    #[inline(never)]
    fn runs(&self, range: Range<usize>, f: &mut dyn FnMut(usize, usize, [usize; K])) {
        if range.start >= range.end.min(self.numel) {
            return;
        }
        let (len, inner) = self.inner();
        let outer = self.dims.len().saturating_sub(1);
        // The row of the first position, as an index per outer axis.
        let mut pos = vec![0usize; outer];
        let mut base: [isize; K] = core::array::from_fn(|j| self.offsets[j] as isize);
        let mut row = range.start / len;
        for ax in (0..outer).rev() {
            pos[ax] = row % self.dims[ax];
            row /= self.dims[ax];
            for (b, s) in base.iter_mut().zip(&self.strides[ax]) {
                *b += s * pos[ax] as isize;
            }
        }
        let (mut i, end) = (range.start, range.end.min(self.numel));
        let mut col = i % len;
        while i < end {
            let n = (len - col).min(end - i);
            f(
                i,
                n,
                core::array::from_fn(|j| (base[j] + col as isize * inner[j]) as usize),
            );
            (i, col) = (i + n, 0);
            for ax in (0..outer).rev() {
                pos[ax] += 1;
                for (b, s) in base.iter_mut().zip(&self.strides[ax]) {
                    *b += s;
                }
                if pos[ax] < self.dims[ax] {
                    break;
                }
                for (b, s) in base.iter_mut().zip(&self.strides[ax]) {
                    *b -= s * self.dims[ax] as isize;
                }
                pos[ax] = 0;
            }
        }
    }
}

/// Fills `out` (row-major over `walk`'s shape) on all cores: `run(dst, offsets)` writes `dst`, a
/// run of one row whose first element is at `offsets` in the walked layouts.
fn fill<const K: usize, O: Send>(
    walk: &Walk<K>,
    out: &mut [O],
    run: impl Fn(&mut [O], [usize; K]) + Send + Sync,
) {
    let size = par::piece(out.len(), par::GRAIN);
    par::chunks_mut(out, size, |t, chunk| {
        let start = t * size;
        walk.for_each_run(start..start + chunk.len(), |i, n, o| {
            run(&mut chunk[i - start..][..n], o)
        });
    });
}

/// The walk of `layouts` broadcast to `shape` (not generic over the element types, so that it
/// is compiled once rather than in every elementwise function).
#[inline(never)]
fn broadcast_walk<const K: usize>(layouts: [&Layout; K], shape: &Shape) -> Walk<K> {
    let strides = layouts.map(|l| broadcast_strides(l, shape));
    Walk::new(
        shape.dims(),
        core::array::from_fn(|j| &strides[j][..]),
        layouts.map(Layout::offset),
    )
}

/// Strides of `layout` broadcast to `shape` (stride 0 on broadcast axes). The shapes were
/// validated by `Op::infer`, so a failure here is a bug; it falls back to the layout's own strides.
pub(crate) fn broadcast_strides(layout: &Layout, shape: &Shape) -> Vec<isize> {
    layout
        .broadcast_to(shape)
        .map(|l| l.strides().to_vec())
        .unwrap_or_else(|_| layout.strides().to_vec())
}

#[inline(always)]
fn at<T: Copy>(data: &[T], base: usize, i: usize, stride: isize) -> T {
    data[(base as isize + i as isize * stride) as usize]
}

/// `f` of every element, in row-major order. A strided `x` is copied row-major first: then
/// each function has one loop (the contiguous one), not three. A strided map costs one more pass
/// over its data; every elementwise function costs a third of the code (the web package has a
/// size budget, and there is a map per unary op, cast and dtype).
pub(crate) fn map1<T: CpuElem, O: CpuElem>(x: &Src<'_, T>, f: impl Fn(T) -> O + Sync) -> Vec<O> {
    if !inlined::<T>() {
        return map1_loop(x, &f as &(dyn Fn(T) -> O + Sync));
    }
    map1_loop(x, f)
}

/// Whether elementwise functions on `T` get a loop each, their function inlined (f32 in the
/// page, every dtype natively). In the page the other dtypes are cold: each of their functions
/// calls through one `dyn` loop per dtype, [`map1`]'s, [`map2`]'s or [`map3`]'s, instead of
/// owning a copy of it (about 40 copies, and the web package has a size budget).
#[inline(always)]
fn inlined<T: CpuElem>() -> bool {
    T::DTYPE == crate::DType::F32 || !cfg!(target_family = "wasm")
}

fn map1_loop<T: CpuElem, O: CpuElem>(x: &Src<'_, T>, f: impl Fn(T) -> O + Sync) -> Vec<O> {
    let copy;
    let s = match x.contiguous() {
        Some(s) => s,
        None => {
            copy = row_major_copy(x);
            &copy
        }
    };
    par::collect(s.len(), par::GRAIN, |r| s[r].iter().map(|&v| f(v)))
}

/// The elements of `x` in row-major order.
pub(crate) fn row_major_copy<T: CpuElem>(x: &Src<'_, T>) -> Vec<T> {
    if let Some(s) = x.contiguous() {
        return s.to_vec();
    }
    let shape = x.shape();
    let walk = Walk::new(shape.dims(), [x.layout.strides()], [x.layout.offset()]);
    let (len, [sx]) = walk.inner();
    let mut out = zeros(shape.numel());
    if sx != 1 && walk.outer_strides() == Some([1]) {
        // A transposed view: read it in tiles of TILE rows, so that each cache line fetched
        // along a row serves the next rows too.
        const TILE: usize = 16;
        par::chunks_mut(&mut out, TILE * len, |t, block| {
            let mut rows = [0usize; TILE];
            let mut k = 0;
            walk.for_each_run(t * TILE * len..t * TILE * len + block.len(), |_, _, [p]| {
                rows[k] = p;
                k += 1;
            });
            for j0 in (0..len).step_by(4 * TILE) {
                let j1 = (j0 + 4 * TILE).min(len);
                for (r, &p) in rows[..k].iter().enumerate() {
                    for (j, d) in (j0..j1).zip(&mut block[r * len + j0..r * len + j1]) {
                        *d = at(x.data, p, j, sx);
                    }
                }
            }
        });
        return out;
    }
    fill(&walk, &mut out, |row, [px]| {
        if sx == 1 {
            row.copy_from_slice(&x.data[px..px + row.len()]);
        } else {
            for (i, r) in row.iter_mut().enumerate() {
                *r = at(x.data, px, i, sx);
            }
        }
    });
    out
}

/// A row-major copy of `x` and its layout. Elementwise loops read inputs that step through
/// memory along rows (transposed views) from one: a tiled copy costs less than a cache line per
/// element.
fn row_major<T: CpuElem>(x: &Src<'_, T>) -> (Vec<T>, Layout) {
    (row_major_copy(x), Layout::contiguous(x.shape().clone()))
}

/// `f(a, b)` of every element of `shape`, with both inputs broadcast to it. Every case goes
/// through one loop, [`zip_rows`], writing the output once (no zero fill first). The walk over
/// the broadcast layouts, [`map2_rows`], takes `f`'s loop as a row function: it is compiled once
/// per element types, not once per binary op and comparison (30 in the web package, which has a
/// size budget); the indirect call per row or run of [`SPLAT`] is nothing beside the run's work.
pub(crate) fn map2<A: CpuElem, B: CpuElem, O: CpuElem>(
    a: &Src<'_, A>,
    b: &Src<'_, B>,
    shape: &Shape,
    f: impl Fn(A, B) -> O + Sync,
) -> Vec<O> {
    if !inlined::<A>() {
        let f = &f as &(dyn Fn(A, B) -> O + Sync);
        return map2_rows(a, b, shape, &|row, x, y| zip_rows(row, x, y, f));
    }
    map2_rows(a, b, shape, &|row, x, y| zip_rows(row, x, y, &f))
}

/// A row function of [`map2_rows`]: `row[i] = f(x[i], y[i])` over `row`.
type Rows<'f, A, B, O> = dyn Fn(&mut [MaybeUninit<O>], &[A], &[B]) + Sync + 'f;

fn map2_rows<A: CpuElem, B: CpuElem, O: CpuElem>(
    a: &Src<'_, A>,
    b: &Src<'_, B>,
    shape: &Shape,
    rows: &Rows<'_, A, B, O>,
) -> Vec<O> {
    let n = shape.numel();
    if a.shape() == shape
        && b.shape() == shape
        && let (Some(x), Some(y)) = (a.contiguous(), b.contiguous())
    {
        return written(n, |dst| {
            if n < 2 * par::GRAIN {
                return rows(dst, x, y);
            }
            let size = par::piece(n, par::GRAIN);
            par::chunks_mut(dst, size, |t, d| rows(d, &x[t * size..], &y[t * size..]));
        });
    }
    let walk = broadcast_walk([a.layout, b.layout], shape);
    let (_, [ia, ib]) = walk.inner();
    if !matches!(ia, 0 | 1) {
        let (v, l) = row_major(a);
        return map2_rows(
            &Src {
                data: &v,
                layout: &l,
            },
            b,
            shape,
            rows,
        );
    }
    if !matches!(ib, 0 | 1) {
        let (v, l) = row_major(b);
        return map2_rows(
            a,
            &Src {
                data: &v,
                layout: &l,
            },
            shape,
            rows,
        );
    }
    written(n, |dst| {
        fill(&walk, dst, |row, [pa, pb]| {
            let len = row.len();
            // A broadcast side (step 0) is one value along the row: copies of it are paired
            // with the other side a run at a time.
            let (sx, sy);
            let xs: &[A] = if ia == 1 {
                &a.data[pa..pa + len]
            } else {
                sx = [a.data[pa]; SPLAT];
                &sx
            };
            let ys: &[B] = if ib == 1 {
                &b.data[pb..pb + len]
            } else {
                sy = [b.data[pb]; SPLAT];
                &sy
            };
            let run = if ia == 1 && ib == 1 { len } else { SPLAT };
            for (c, r) in (0..len).step_by(run).zip(row.chunks_mut(run)) {
                rows(r, &xs[c * ia as usize..], &ys[c * ib as usize..]);
            }
        });
    })
}

/// Copies of a broadcast value that [`map2`] pairs with a row, a run at a time.
const SPLAT: usize = 64;

/// `row[i] = f(x[i], y[i])` over `row`, which `x` and `y` are at least as long as.
#[inline(always)]
fn zip_rows<A: Copy, B: Copy, O>(
    row: &mut [MaybeUninit<O>],
    x: &[A],
    y: &[B],
    f: &(impl Fn(A, B) -> O + ?Sized),
) {
    for ((r, &p), &q) in row.iter_mut().zip(x).zip(y) {
        r.write(f(p, q));
    }
}

/// A vector of `n` elements that `init` writes every one of.
fn written<O: CpuElem>(n: usize, init: impl FnOnce(&mut [MaybeUninit<O>])) -> Vec<O> {
    let mut out = buffer(n);
    init(&mut out.spare_capacity_mut()[..n]);
    // SAFETY: the capacity is at least `n`, and `init` wrote each of the first `n` slots (its
    // callers cover the output's rows or chunks in full).
    unsafe { out.set_len(n) };
    out
}

/// `f(a, b, c)` of every element of `shape`, with the inputs broadcast to it.
pub(crate) fn map3<A: CpuElem, B: CpuElem, C: CpuElem, O: CpuElem>(
    a: &Src<'_, A>,
    b: &Src<'_, B>,
    c: &Src<'_, C>,
    shape: &Shape,
    f: impl Fn(A, B, C) -> O + Sync,
) -> Vec<O> {
    if !inlined::<B>() {
        return map3_loop(a, b, c, shape, &f as &(dyn Fn(A, B, C) -> O + Sync));
    }
    map3_loop(a, b, c, shape, f)
}

fn map3_loop<A: CpuElem, B: CpuElem, C: CpuElem, O: CpuElem>(
    a: &Src<'_, A>,
    b: &Src<'_, B>,
    c: &Src<'_, C>,
    shape: &Shape,
    f: impl Fn(A, B, C) -> O + Sync,
) -> Vec<O> {
    let walk = broadcast_walk([a.layout, b.layout, c.layout], shape);
    let (_, [ia, ib, ic]) = walk.inner();
    let mut out = zeros(shape.numel());
    fill(&walk, &mut out, |row, [pa, pb, pc]| {
        let len = row.len();
        let (xa, xb) = (&a.data[pa..], &b.data[pb..]);
        match (ia, ib, ic) {
            // `where(mask, x, scalar)`, as in the ReLU gradient.
            (1, 1, 0) => {
                let z = c.data[pc];
                for ((r, &p), &q) in row.iter_mut().zip(&xa[..len]).zip(&xb[..len]) {
                    *r = f(p, q, z);
                }
            }
            (1, 1, 1) => {
                let xc = &c.data[pc..pc + len];
                for (((r, &p), &q), &s) in row.iter_mut().zip(&xa[..len]).zip(&xb[..len]).zip(xc) {
                    *r = f(p, q, s);
                }
            }
            _ => {
                for (i, r) in row.iter_mut().enumerate() {
                    *r = f(
                        at(a.data, pa, i, ia),
                        at(b.data, pb, i, ib),
                        at(c.data, pc, i, ic),
                    );
                }
            }
        }
    });
    out
}

/// Copies `src` into the region of `dst` described by `dst_strides`/`dst_offset` (same shape).
pub(crate) fn copy_into<T: CpuElem>(
    dst: &mut [T],
    dst_strides: &[isize],
    dst_offset: usize,
    src: &Src<'_, T>,
) {
    let walk = Walk::new(
        src.dims(),
        [dst_strides, src.layout.strides()],
        [dst_offset, src.layout.offset()],
    );
    let (len, [sd, ss]) = walk.inner();
    walk.for_each_row(|[pd, ps]| {
        if sd == 1 && ss == 1 {
            dst[pd..pd + len].copy_from_slice(&src.data[ps..ps + len]);
        } else {
            for i in 0..len {
                dst[(pd as isize + i as isize * sd) as usize] = at(src.data, ps, i, ss);
            }
        }
    });
}
