//! Fused optimizer steps.

use super::num::Float;
use super::par;
use super::storage::{CpuElem, CpuStorage, Src, buffer};
use super::unsupported;
use crate::{AdamParams, DType, Error, Result, View};
use alloc::vec::Vec;

/// [`crate::Op::AdamStep`] on float `[param, grad, exp_avg, exp_avg_sq (, scale)]`: the new
/// param, and exp_avg then exp_avg_sq in one `[2, ..]` buffer.
pub(super) fn adam_step(x: &[View<'_>], p: &AdamParams) -> Result<Vec<CpuStorage>> {
    match x[0].dtype {
        DType::F32 => adam::<f32>(x, p),
        DType::F64 => adam::<f64>(x, p),
        other => Err(unsupported("adam_step", other)),
    }
}

fn adam<T: Float + CpuElem>(x: &[View<'_>], p: &AdamParams) -> Result<Vec<CpuStorage>> {
    let read = |i: usize| Src::<T>::new("adam_step", &x[i]).map(Src::to_contiguous);
    let (w, g, m, v) = (read(0)?, read(1)?, read(2)?, read(3)?);
    // the gradient's scale (clipping), read once
    let scale = match x.get(4) {
        Some(_) => read(4)?.first().copied(),
        None => None,
    };
    let n = w.len();
    let (step_size, inv_sqrt_bc2) = p.corrections();
    let c = |v: f64| T::from_f(v);
    let (step_size, inv_sqrt_bc2) = (c(step_size), c(inv_sqrt_bc2));
    let (b1, b2, eps, wd) = (c(p.beta1), c(p.beta2), c(p.eps), c(p.weight_decay));
    let (one, shrink) = (c(1.0), c(1.0 - p.lr * p.weight_decay));
    if [g.len(), m.len(), v.len()] != [n; 3] {
        return Err(Error::shape(
            "adam_step",
            "param, grad and moments must have one shape",
        ));
    }
    let mut outs = [buffer::<T>(n), buffer::<T>(2 * n)];
    let [new_w, new_mv] = outs.each_mut().map(|o| o.spare_capacity_mut());
    let (new_m, new_v) = new_mv[..2 * n].split_at_mut(n);
    // Pieces of the three outputs side by side, updated on all cores.
    let size = par::piece(n, par::GRAIN);
    let pieces: Vec<_> = (new_w[..n].chunks_mut(size).zip(new_m.chunks_mut(size)))
        .zip(new_v.chunks_mut(size))
        .enumerate()
        .collect();
    par::for_each(pieces, |(i, ((nw, nm), nv))| {
        let at = i * size;
        let src = w[at..].iter().zip(&g[at..]).zip(&m[at..]).zip(&v[at..]);
        for (((nw, nm), nv), (((&wi, &gi), &mi), &vi)) in nw.iter_mut().zip(nm).zip(nv).zip(src) {
            let (mut wi, mut gi) = (wi, scale.map_or(gi, |s| gi * s));
            if p.decoupled {
                wi = wi * shrink;
            } else {
                gi = gi + wd * wi;
            }
            let mi = b1 * mi + (one - b1) * gi;
            let vi = b2 * vi + (one - b2) * (gi * gi);
            let denom = vi.sqrt() * inv_sqrt_bc2 + eps;
            nw.write(wi - mi / denom * step_size);
            nm.write(mi);
            nv.write(vi);
        }
    });
    Ok(outs
        .into_iter()
        .zip([n, 2 * n])
        .map(|(mut out, len)| {
            // SAFETY: the capacities are n and 2n, and every piece of the three runs (the param,
            // then the two halves of the moments) was written in full: every input has n
            // elements (checked above), so each zip runs to the end of its piece (a panic
            // propagates before this line).
            unsafe { out.set_len(len) };
            CpuStorage::new(out)
        })
        .collect())
}
