//! Data movement: copies of views, concat, gather, index_select, scatter_add, pad, one_hot.

use super::dispatch_any;
use super::num::Num;
use super::reduce::around;
use super::storage::{CpuElem, CpuStorage, Src};
use super::strided::copy_into;
use super::unsupported;
use crate::backend::View;
use crate::{DType, Error, Layout, Result, Shape};
use alloc::vec;
use alloc::vec::Vec;

/// A row-major copy of `x` seen through `layout` (its own layout, or a view op's result).
pub(crate) fn copy(x: &View<'_>, layout: &Layout) -> Result<CpuStorage> {
    fn run<T: CpuElem>(x: &View<'_>, layout: &Layout) -> Result<CpuStorage> {
        let s = Src::<T>::new("contiguous", &View { layout, ..*x })?;
        Ok(CpuStorage::new(s.to_contiguous().into_owned()))
    }
    dispatch_any!(x.dtype, T => run::<T>(x, layout))
}

/// Concatenation along `axis`: each input is copied into its slab of the output.
pub(crate) fn concat(xs: &[View<'_>], axis: usize, shape: &Shape) -> Result<CpuStorage> {
    fn run<T: CpuElem>(xs: &[View<'_>], axis: usize, shape: &Shape) -> Result<CpuStorage> {
        let strides = shape.contiguous_strides();
        let mut out = vec![T::default(); shape.numel()];
        let mut at = 0usize;
        for x in xs {
            let s = Src::<T>::new("concat", x)?;
            copy_into(&mut out, &strides, at * strides[axis] as usize, &s);
            at += s.dims()[axis];
        }
        Ok(CpuStorage::new(out))
    }
    let dt = xs.first().map_or(DType::F32, |x| x.dtype);
    dispatch_any!(dt, T => run::<T>(xs, axis, shape))
}

/// Index values as i64, each checked against `size`; the error names the first bad index.
fn indices(op: &'static str, index: &View<'_>, what: &str, size: usize) -> Result<Vec<usize>> {
    let raw: Vec<i64> = match index.dtype {
        DType::I32 => Src::<i32>::new(op, index)?
            .to_contiguous()
            .iter()
            .map(|&i| i as i64)
            .collect(),
        DType::U32 => Src::<u32>::new(op, index)?
            .to_contiguous()
            .iter()
            .map(|&i| i as i64)
            .collect(),
        dt => {
            return Err(Error::dtype(
                op,
                alloc::format!("index must be i32 or u32, got {dt}"),
            ));
        }
    };
    raw.into_iter()
        .map(|i| {
            usize::try_from(i)
                .ok()
                .filter(|&u| u < size)
                .ok_or_else(|| {
                    Error::index(
                        op,
                        alloc::format!("index {i} is out of range for {what} of size {size}"),
                    )
                })
        })
        .collect()
}

/// Checks that `inner` lies within `outer` on every axis but `skip` (guards direct backend calls).
fn fits(op: &'static str, inner: &Shape, outer: &Shape, skip: Option<usize>) -> Result<()> {
    let ok = inner.rank() == outer.rank()
        && (0..inner.rank()).all(|a| Some(a) == skip || inner.dims()[a] <= outer.dims()[a]);
    if ok {
        Ok(())
    } else {
        Err(Error::shape(
            op,
            alloc::format!("index shape {inner} does not fit within {outer}"),
        ))
    }
}

/// `torch.gather`: `out[p] = x[p with axis replaced by index[p]]`.
pub(crate) fn gather(x: &View<'_>, index: &View<'_>, axis: usize) -> Result<CpuStorage> {
    fn run<T: CpuElem>(x: &View<'_>, index: &View<'_>, axis: usize) -> Result<CpuStorage> {
        let s = Src::<T>::new("gather", x)?;
        let idx = indices(
            "gather",
            index,
            &alloc::format!("axis {axis}"),
            s.dims()[axis],
        )?;
        fits("gather", index.layout.shape(), s.shape(), Some(axis))?;
        // Offsets of x at every index position with the gathered axis at 0.
        let mut strides = s.layout.strides().to_vec();
        let step = strides[axis];
        strides[axis] = 0;
        let base = Layout::from_parts(index.layout.shape().clone(), strides, s.layout.offset());
        let out: Vec<T> = base
            .indices()
            .zip(&idx)
            .map(|(b, &i)| s.data[(b as isize + i as isize * step) as usize])
            .collect();
        Ok(CpuStorage::new(out))
    }
    dispatch_any!(x.dtype, T => run::<T>(x, index, axis))
}

/// Rows of `x` along `axis`, in the order of the rank-1 `index`.
pub(crate) fn index_select(x: &View<'_>, index: &View<'_>, axis: usize) -> Result<CpuStorage> {
    fn run<T: CpuElem>(x: &View<'_>, index: &View<'_>, axis: usize) -> Result<CpuStorage> {
        let s = Src::<T>::new("index_select", x)?;
        let idx = indices(
            "index_select",
            index,
            &alloc::format!("axis {axis}"),
            s.dims()[axis],
        )?;
        let v = s.to_contiguous();
        let (outer, len, inner) = around(s.dims(), axis);
        let mut out = Vec::with_capacity(outer * idx.len() * inner);
        for o in 0..outer {
            for &i in &idx {
                let start = (o * len + i) * inner;
                out.extend_from_slice(&v[start..start + inner]);
            }
        }
        Ok(CpuStorage::new(out))
    }
    dispatch_any!(x.dtype, T => run::<T>(x, index, axis))
}

/// `torch.scatter_add`: a copy of `x` with `src[p]` added at `p` with axis replaced by `index[p]`,
/// in row-major order of `p`.
pub(crate) fn scatter_add(
    x: &View<'_>,
    index: &View<'_>,
    src: &View<'_>,
    axis: usize,
) -> Result<CpuStorage> {
    fn run<T: Num>(
        x: &View<'_>,
        index: &View<'_>,
        src: &View<'_>,
        axis: usize,
    ) -> Result<CpuStorage> {
        let s = Src::<T>::new("scatter_add", x)?;
        let mut out = s.to_contiguous().into_owned();
        let idx = indices(
            "scatter_add",
            index,
            &alloc::format!("axis {axis}"),
            s.dims()[axis],
        )?;
        let shape = index.layout.shape().clone();
        let src = Src::<T>::new("scatter_add", src)?;
        fits("scatter_add", &shape, src.shape(), None)?;
        fits("scatter_add", &shape, s.shape(), Some(axis))?;
        // src is read over the index's extent (it may be larger).
        let src_pos = Layout::from_parts(
            shape.clone(),
            src.layout.strides().to_vec(),
            src.layout.offset(),
        );
        let mut strides = s.shape().contiguous_strides();
        let step = strides[axis];
        strides[axis] = 0;
        let dst_pos = Layout::from_parts(shape, strides, 0);
        for ((d, p), &i) in dst_pos.indices().zip(src_pos.indices()).zip(&idx) {
            let at = (d as isize + i as isize * step) as usize;
            out[at] = out[at].add(src.data[p]);
        }
        Ok(CpuStorage::new(out))
    }
    match x.dtype {
        DType::F64 => run::<f64>(x, index, src, axis),
        DType::F32 => run::<f32>(x, index, src, axis),
        DType::I32 => run::<i32>(x, index, src, axis),
        DType::U32 => run::<u32>(x, index, src, axis),
        dt => Err(unsupported("scatter_add", dt)),
    }
}

/// Constant padding: the output filled with `value`, then `x` copied into its interior.
pub(crate) fn pad(
    x: &View<'_>,
    pads: &[(usize, usize)],
    value: f64,
    shape: &Shape,
) -> Result<CpuStorage> {
    fn run<T: CpuElem>(
        x: &View<'_>,
        pads: &[(usize, usize)],
        value: f64,
        shape: &Shape,
    ) -> Result<CpuStorage> {
        let s = Src::<T>::new("pad", x)?;
        let strides = shape.contiguous_strides();
        let mut out = vec![T::from_f64(value); shape.numel()];
        let offset: isize = pads
            .iter()
            .zip(&strides)
            .map(|(p, st)| p.0 as isize * st)
            .sum();
        copy_into(&mut out, &strides, offset as usize, &s);
        Ok(CpuStorage::new(out))
    }
    dispatch_any!(x.dtype, T => run::<T>(x, pads, value, shape))
}

/// One-hot encoding: a new last axis of `classes`, 1 at each index.
pub(crate) fn one_hot(index: &View<'_>, classes: usize, dtype: DType) -> Result<CpuStorage> {
    fn run<T: CpuElem>(idx: &[usize], classes: usize) -> CpuStorage {
        let mut out = vec![T::from_f64(0.0); idx.len() * classes];
        for (row, &i) in idx.iter().enumerate() {
            out[row * classes + i] = T::from_f64(1.0);
        }
        CpuStorage::new(out)
    }
    let idx = indices("one_hot", index, "classes", classes)?;
    dispatch_any!(dtype, T => Ok(run::<T>(&idx, classes)))
}
