//! Shapes, strides and views: the metadata that lets one storage back many tensors.

use crate::Result;
use crate::error::{ErrorKind, fail};
use alloc::vec::Vec;
use core::fmt;
use serde::{Deserialize, Serialize};

/// The dimensions of a tensor, outermost first. A scalar has rank 0.
///
/// ```
/// use kiln_core::Shape;
/// let s = Shape::from([2, 3, 4]);
/// assert_eq!(s.numel(), 24);
/// assert_eq!(s.contiguous_strides(), vec![12, 4, 1]);
/// assert_eq!(Shape::broadcast(&Shape::from([3, 1]), &Shape::from([4]), "add").unwrap(), Shape::from([3, 4]));
/// ```
#[derive(Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Shape(Vec<usize>);

impl Shape {
    /// A shape from its dimensions.
    pub fn new(dims: Vec<usize>) -> Self {
        Shape(dims)
    }
    /// The rank-0 shape.
    pub fn scalar() -> Self {
        Shape(Vec::new())
    }
    /// The dimensions.
    pub fn dims(&self) -> &[usize] {
        &self.0
    }
    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.0.len()
    }
    /// Number of elements (1 for a scalar).
    pub fn numel(&self) -> usize {
        self.0.iter().product()
    }
    /// Bytes needed to hold this shape in `dtype`, or an error naming `op` when that overflows
    /// the address space (a corrupt file or a typo can ask for such shapes).
    pub fn byte_len(&self, dtype: crate::DType, op: &'static str) -> Result<usize> {
        self.0
            .iter()
            .try_fold(dtype.size_in_bytes(), |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= isize::MAX as usize)
            .ok_or_else(|| {
                fail(
                    ErrorKind::Shape,
                    op,
                    format_args!("shape {self} of {dtype} does not fit in memory"),
                )
            })
    }
    /// Row-major strides, in elements.
    pub fn contiguous_strides(&self) -> Vec<isize> {
        let mut strides = alloc::vec![0isize; self.0.len()];
        let mut acc = 1isize;
        for (s, &d) in strides.iter_mut().zip(&self.0).rev() {
            *s = acc;
            acc *= d as isize;
        }
        strides
    }
    /// Resolves a possibly negative axis (`-1` is the last) against this rank.
    pub fn axis(&self, axis: isize, op: &'static str) -> Result<usize> {
        resolve_axis(axis, self.rank(), op)
    }
    /// NumPy broadcasting of two shapes; the error names `op` and both shapes.
    pub fn broadcast(a: &Shape, b: &Shape, op: &'static str) -> Result<Shape> {
        let rank = a.rank().max(b.rank());
        let mut out = alloc::vec![0; rank];
        for (i, o) in out.iter_mut().enumerate() {
            let da = if i + a.rank() >= rank {
                a.0[i + a.rank() - rank]
            } else {
                1
            };
            let db = if i + b.rank() >= rank {
                b.0[i + b.rank() - rank]
            } else {
                1
            };
            *o = match (da, db) {
                (x, y) if x == y => x,
                (1, y) => y,
                (x, 1) => x,
                _ => {
                    return Err(fail(
                        ErrorKind::Shape,
                        op,
                        format_args!(
                            "shapes {a} and {b} cannot be broadcast: dimension {i} is {da} vs {db}"
                        ),
                    ));
                }
            };
        }
        Ok(Shape(out))
    }
}

/// Resolves a possibly negative axis against `rank`.
pub fn resolve_axis(axis: isize, rank: usize, op: &'static str) -> Result<usize> {
    let r = rank as isize;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r {
        return Err(fail(
            ErrorKind::Index,
            op,
            format_args!("axis {axis} is out of range for rank {rank}"),
        ));
    }
    Ok(a as usize)
}

/// Like [`resolve_axis`], but a scalar accepts axis 0 / -1, so that ops over "the last axis"
/// (reductions, softmax, cumsum) work at every rank as they do in PyTorch.
pub fn resolve_axis_or_scalar(axis: isize, rank: usize, op: &'static str) -> Result<usize> {
    resolve_axis(axis, rank.max(1), op)
}

impl<const N: usize> From<[usize; N]> for Shape {
    fn from(d: [usize; N]) -> Self {
        Shape(d.to_vec())
    }
}
impl From<&[usize]> for Shape {
    fn from(d: &[usize]) -> Self {
        Shape(d.to_vec())
    }
}
impl From<Vec<usize>> for Shape {
    fn from(d: Vec<usize>) -> Self {
        Shape(d)
    }
}
impl From<&Shape> for Shape {
    fn from(s: &Shape) -> Self {
        s.clone()
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}
impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// One axis of a slice: `start..end` by `step` (step >= 1), in elements of that axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct SliceRange {
    /// First index taken.
    pub start: usize,
    /// One past the last index considered.
    pub end: usize,
    /// Distance between taken indices, at least 1.
    pub step: usize,
}

impl SliceRange {
    /// Number of indices taken.
    pub fn len(&self) -> usize {
        if self.end <= self.start {
            0
        } else {
            (self.end - self.start).div_ceil(self.step)
        }
    }
    /// `true` when nothing is taken.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where the elements of a tensor live inside its storage: shape, strides (in elements, may be 0
/// for broadcast axes) and offset of the first element.
///
/// ```
/// use kiln_core::{Layout, Shape};
/// let l = Layout::contiguous(Shape::from([2, 3]));
/// let t = l.permute(&[1, 0]).unwrap();
/// assert_eq!(t.strides(), &[1, 3]);
/// assert!(!t.is_contiguous());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    shape: Shape,
    strides: Vec<isize>,
    offset: usize,
}

impl Layout {
    /// Row-major layout starting at element 0.
    pub fn contiguous(shape: Shape) -> Self {
        let strides = shape.contiguous_strides();
        Layout {
            shape,
            strides,
            offset: 0,
        }
    }
    /// A layout from its parts; the caller guarantees every element lies inside the storage.
    pub fn from_parts(shape: Shape, strides: Vec<isize>, offset: usize) -> Self {
        Layout {
            shape,
            strides,
            offset,
        }
    }
    /// The logical shape.
    pub fn shape(&self) -> &Shape {
        &self.shape
    }
    /// Strides in elements.
    pub fn strides(&self) -> &[isize] {
        &self.strides
    }
    /// Storage index of the first element.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// `true` when elements are in row-major order with no gaps (offset may be non-zero).
    pub fn is_contiguous(&self) -> bool {
        let mut acc = 1isize;
        for (&d, &s) in self.shape.dims().iter().zip(&self.strides).rev() {
            if d != 1 && s != acc {
                return false;
            }
            acc *= d as isize;
        }
        true
    }
    /// Storage index of every element in row-major logical order.
    pub fn indices(&self) -> StridedIndex<'_> {
        StridedIndex::new(self)
    }
    /// Reorders axes: output axis `i` is input axis `dims[i]`.
    pub fn permute(&self, dims: &[usize]) -> Result<Layout> {
        let rank = self.shape.rank();
        let mut seen = alloc::vec![false; rank];
        if dims.len() != rank
            || dims
                .iter()
                .any(|&d| d >= rank || core::mem::replace(&mut seen[d], true))
        {
            return Err(fail(
                ErrorKind::Shape,
                "permute",
                format_args!(
                    "dims {dims:?} are not a permutation of 0..{rank} for shape {}",
                    self.shape
                ),
            ));
        }
        Ok(Layout {
            shape: Shape(dims.iter().map(|&d| self.shape.0[d]).collect()),
            strides: dims.iter().map(|&d| self.strides[d]).collect(),
            offset: self.offset,
        })
    }
    /// Broadcasts to `shape` by giving new or size-1 axes stride 0.
    pub fn broadcast_to(&self, shape: &Shape) -> Result<Layout> {
        let (r, n) = (self.shape.rank(), shape.rank());
        let err = || {
            fail(
                ErrorKind::Shape,
                "expand",
                format_args!("shape {} cannot be expanded to {shape}", self.shape),
            )
        };
        if n < r {
            return Err(err());
        }
        let mut strides = alloc::vec![0isize; n];
        for (i, stride) in strides.iter_mut().enumerate().skip(n - r) {
            let (d, s) = (self.shape.0[i - (n - r)], self.strides[i - (n - r)]);
            *stride = if d == shape.0[i] {
                s
            } else if d == 1 {
                0
            } else {
                return Err(err());
            };
        }
        Ok(Layout {
            shape: shape.clone(),
            strides,
            offset: self.offset,
        })
    }
    /// Takes `ranges[i]` along axis `i` (missing trailing axes are taken whole).
    pub fn slice(&self, ranges: &[SliceRange]) -> Result<Layout> {
        if ranges.len() > self.shape.rank() {
            return Err(fail(
                ErrorKind::Shape,
                "slice",
                format_args!("{} ranges given for shape {}", ranges.len(), self.shape),
            ));
        }
        let mut shape = self.shape.0.clone();
        let mut strides = self.strides.clone();
        let mut offset = self.offset as isize;
        for (i, r) in ranges.iter().enumerate() {
            if r.step == 0 || r.start > r.end || r.end > shape[i] {
                return Err(fail(
                    ErrorKind::Index,
                    "slice",
                    format_args!(
                        "range {}..{} step {} is invalid for axis {i} of size {} (shape {})",
                        r.start, r.end, r.step, shape[i], self.shape
                    ),
                ));
            }
            if !r.is_empty() {
                offset += r.start as isize * strides[i];
            }
            shape[i] = r.len();
            strides[i] *= r.step as isize;
        }
        Ok(Layout {
            shape: Shape(shape),
            strides,
            offset: offset as usize,
        })
    }
    /// The same elements under a new shape, when possible without copying (contiguous layouts).
    pub fn reshape(&self, shape: &Shape) -> Option<Layout> {
        if shape.numel() != self.shape.numel() || !self.is_contiguous() {
            return None;
        }
        Some(Layout {
            shape: shape.clone(),
            strides: shape.contiguous_strides(),
            offset: self.offset,
        })
    }
}

/// Iterator over storage indices of a [`Layout`] in logical row-major order.
pub struct StridedIndex<'a> {
    layout: &'a Layout,
    pos: Vec<usize>,
    next: Option<isize>,
    remaining: usize,
}

impl<'a> StridedIndex<'a> {
    fn new(layout: &'a Layout) -> Self {
        let remaining = layout.shape.numel();
        StridedIndex {
            layout,
            pos: alloc::vec![0; layout.shape.rank()],
            next: (remaining > 0).then_some(layout.offset as isize),
            remaining,
        }
    }
}

impl Iterator for StridedIndex<'_> {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        let cur = self.next?;
        self.remaining -= 1;
        let dims = self.layout.shape.dims();
        let mut idx = cur;
        let mut axis = dims.len();
        loop {
            if axis == 0 {
                self.next = None;
                break;
            }
            axis -= 1;
            self.pos[axis] += 1;
            idx += self.layout.strides[axis];
            if self.pos[axis] < dims[axis] {
                self.next = Some(idx);
                break;
            }
            idx -= self.layout.strides[axis] * dims[axis] as isize;
            self.pos[axis] = 0;
        }
        Some(cur as usize)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for StridedIndex<'_> {}
