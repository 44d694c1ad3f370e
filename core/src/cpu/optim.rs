//! Fused optimizer steps.

use super::num::Float;
use super::storage::{CpuElem, CpuStorage, Src};
use super::unsupported;
use crate::{AdamParams, DType, Result, View};
use alloc::vec;

/// [`crate::Op::AdamStep`] on float `[param, grad, exp_avg, exp_avg_sq]`: `[3, n]` out.
pub(super) fn adam_step(x: &[View<'_>], p: &AdamParams) -> Result<CpuStorage> {
    match x[0].dtype {
        DType::F32 => adam::<f32>(x, p),
        DType::F64 => adam::<f64>(x, p),
        other => Err(unsupported("adam_step", other)),
    }
}

fn adam<T: Float + CpuElem>(x: &[View<'_>], p: &AdamParams) -> Result<CpuStorage> {
    let read = |i: usize| Src::<T>::new("adam_step", &x[i]).map(Src::to_contiguous);
    let (w, g, m, v) = (read(0)?, read(1)?, read(2)?, read(3)?);
    let n = w.len();
    let mut out = vec![T::from_f(0.0); 3 * n];
    let (new_w, moments) = out.split_at_mut(n);
    let (new_m, new_v) = moments.split_at_mut(n);
    let (step_size, inv_sqrt_bc2) = p.corrections();
    let c = |v: f64| T::from_f(v);
    let (step_size, inv_sqrt_bc2) = (c(step_size), c(inv_sqrt_bc2));
    let (b1, b2, eps, wd) = (c(p.beta1), c(p.beta2), c(p.eps), c(p.weight_decay));
    let (one, shrink) = (c(1.0), c(1.0 - p.lr * p.weight_decay));
    for i in 0..n {
        let (mut wi, mut gi) = (w[i], g[i]);
        if p.decoupled {
            wi = wi * shrink;
        } else {
            gi = gi + wd * wi;
        }
        let mi = b1 * m[i] + (one - b1) * gi;
        let vi = b2 * v[i] + (one - b2) * (gi * gi);
        let denom = vi.sqrt() * inv_sqrt_bc2 + eps;
        new_w[i] = wi - mi / denom * step_size;
        new_m[i] = mi;
        new_v[i] = vi;
    }
    Ok(CpuStorage::new(out))
}
