//! Batched matrix multiplication with broadcast batch dims and NumPy's rank-1 promotion.
//! Floats go to `Float::gemm` (multi-threaded under `std`), reading strided inputs in place;
//! integers use a plain wrapping loop.

use super::num::{Float, Num, sum_into_first};
use super::par;
use super::par::zeros;
use super::storage::{CpuStorage, Src};
use super::unsupported;
use crate::backend::View;
use crate::{DType, Error, Layout, Result, Shape};
use alloc::vec;
use alloc::vec::Vec;

/// The operands as a batch of `m x k` by `k x n` products.
struct Plan {
    m: usize,
    k: usize,
    n: usize,
    /// Offset of each batch's matrix in `a` and `b`.
    a_offsets: Vec<usize>,
    b_offsets: Vec<usize>,
    /// (row, column) strides of the matrices.
    a_strides: [isize; 2],
    b_strides: [isize; 2],
}

fn plan(a: &Layout, b: &Layout) -> Result<Plan> {
    let promote = |l: &Layout, row: bool| -> (Vec<usize>, Vec<isize>) {
        let (d, s) = (l.shape().dims(), l.strides());
        match (d, row) {
            ([k], true) => (vec![1, *k], vec![0, s[0]]),
            ([k], false) => (vec![*k, 1], vec![s[0], 0]),
            _ => (d.to_vec(), s.to_vec()),
        }
    };
    let (ad, as_) = promote(a, true);
    let (bd, bs) = promote(b, false);
    let (ra, rb) = (ad.len(), bd.len());
    if ra < 2 || rb < 2 || ad[ra - 1] != bd[rb - 2] {
        return Err(Error::shape(
            "matmul",
            alloc::format!(
                "lhs {} and rhs {} cannot be multiplied",
                a.shape(),
                b.shape()
            ),
        ));
    }
    let batch = Shape::broadcast(
        &Shape::from(&ad[..ra - 2]),
        &Shape::from(&bd[..rb - 2]),
        "matmul",
    )?;
    let offsets = |d: &[usize], s: &[isize], off: usize| -> Result<Vec<usize>> {
        let r = d.len() - 2;
        let l = Layout::from_parts(Shape::from(&d[..r]), s[..r].to_vec(), off);
        Ok(l.broadcast_to(&batch)?.indices().collect())
    };
    Ok(Plan {
        m: ad[ra - 2],
        k: ad[ra - 1],
        n: bd[rb - 1],
        a_offsets: offsets(&ad, &as_, a.offset())?,
        b_offsets: offsets(&bd, &bs, b.offset())?,
        a_strides: [as_[ra - 2], as_[ra - 1]],
        b_strides: [bs[rb - 2], bs[rb - 1]],
    })
}

/// `a @ b` into a fresh row-major buffer.
pub(crate) fn matmul(a: &View<'_>, b: &View<'_>) -> Result<CpuStorage> {
    match a.dtype {
        DType::F64 => float::<f64>(a, b),
        DType::F32 => float::<f32>(a, b),
        DType::I32 => int::<i32>(a, b),
        DType::U32 => int::<u32>(a, b),
        dt => Err(unsupported("matmul", dt)),
    }
}

fn float<T: Float>(a: &View<'_>, b: &View<'_>) -> Result<CpuStorage> {
    let (x, y) = (Src::<T>::new("matmul", a)?, Src::<T>::new("matmul", b)?);
    let p = plan(x.layout, y.layout)?;
    let (m, k, n) = (p.m, p.k, p.n);
    if k == 0 || m * n == 0 {
        return Ok(CpuStorage::new(zeros::<T>(p.a_offsets.len() * m * n)));
    }
    let parts = k_parts(m, k, n);
    if parts > 1 && p.a_offsets.len() == 1 {
        let (oa, ob) = (p.a_offsets[0] as isize, p.b_offsets[0] as isize);
        let len = k.div_ceil(parts);
        // Each thread multiplies one slice of the reduction into its own `m x n` block.
        let mut partial = zeros::<T>(parts * m * n);
        par::chunks_mut(&mut partial, m * n, |i, c| {
            let k0 = (i * len).min(k);
            let kk = len.min(k - k0);
            // SAFETY: as below, for the columns `k0..k0 + kk` of `a` and rows of `b`, which lie
            // inside the full operands; `c` is this part's own block.
            unsafe {
                T::gemm(
                    m,
                    kk,
                    n,
                    x.data.as_ptr().offset(oa + k0 as isize * p.a_strides[1]),
                    p.a_strides[0],
                    p.a_strides[1],
                    y.data.as_ptr().offset(ob + k0 as isize * p.b_strides[0]),
                    p.b_strides[0],
                    p.b_strides[1],
                    T::ZERO,
                    c.as_mut_ptr(),
                    n as isize,
                    1,
                    false,
                );
            }
        });
        sum_into_first(&mut partial, m * n);
        partial.truncate(m * n);
        return Ok(CpuStorage::new(partial));
    }
    let mut out = zeros(p.a_offsets.len() * m * n);
    for (c, (&oa, &ob)) in out
        .chunks_exact_mut(m * n)
        .zip(p.a_offsets.iter().zip(&p.b_offsets))
    {
        // SAFETY: every element of both layouts lies inside its buffer (checked by `Src::new`),
        // and the promoted/broadcast layouts address only those elements; `c` is a fresh
        // `m x n` block.
        unsafe {
            T::gemm(
                m,
                k,
                n,
                x.data.as_ptr().add(oa),
                p.a_strides[0],
                p.a_strides[1],
                y.data.as_ptr().add(ob),
                p.b_strides[0],
                p.b_strides[1],
                T::ZERO,
                c.as_mut_ptr(),
                n as isize,
                1,
                true,
            );
        }
    }
    Ok(CpuStorage::new(out))
}

/// Into how many slices of the reduction a product is split across threads: a GEMM spreads only
/// its output blocks over them, and a small output with a long `k` (a wide layer's forward pass,
/// 64x128 outputs from 9216 inputs) has too few blocks to keep the threads busy.
fn k_parts(m: usize, k: usize, n: usize) -> usize {
    let long = m * n <= 1 << 15 && k >= 1024 && k >= 8 * m.max(n);
    if long && par::worth_splitting(m * k * n / 4) {
        par::threads().min(k / 512)
    } else {
        1
    }
}

fn int<T: Num>(a: &View<'_>, b: &View<'_>) -> Result<CpuStorage> {
    let (x, y) = (Src::<T>::new("matmul", a)?, Src::<T>::new("matmul", b)?);
    let p = plan(x.layout, y.layout)?;
    let (m, k, n) = (p.m, p.k, p.n);
    let at = |base: usize, i: usize, j: usize, s: [isize; 2]| {
        (base as isize + i as isize * s[0] + j as isize * s[1]) as usize
    };
    let mut out = vec![T::ZERO; p.a_offsets.len() * m * n];
    for (c, (&oa, &ob)) in out
        .chunks_exact_mut((m * n).max(1))
        .zip(p.a_offsets.iter().zip(&p.b_offsets))
    {
        for i in 0..m {
            for kk in 0..k {
                let av = x.data[at(oa, i, kk, p.a_strides)];
                for (j, r) in c[i * n..(i + 1) * n].iter_mut().enumerate() {
                    *r = r.add(av.mul(y.data[at(ob, kk, j, p.b_strides)]));
                }
            }
        }
    }
    Ok(CpuStorage::new(out))
}
