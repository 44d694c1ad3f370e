//! Linear algebra beyond products: `Det`.

use super::{Ctx, OpFn, Outputs, one, work_dtype};
use crate::value::Value;
use alloc::format;
use alloc::vec::Vec;
use kiln_core::{DType, Error, Tensor};

pub(super) const OPS: &[(&str, OpFn)] = &[("Det", det)];

/// Det of (..., n, n): Gaussian elimination with partial pivoting, all matrices of the batch
/// at once, one step per column. Each step brings the row with the largest entry of the
/// column to the pivot position (a gather, flipping the sign when it moves), multiplies the
/// pivot into the result and eliminates below it. A zero column gives a zero pivot, so a zero
/// determinant; dividing by 1 instead keeps the rest finite.
fn det(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let r = x.rank();
    let n = if r >= 2 { x.dims()[r - 1] } else { 0 };
    if r < 2 || x.dims()[r - 2] != n {
        return Err(Error::shape(
            "onnx",
            format!("Det takes square matrices (..., n, n), gets {}", x.shape()),
        ));
    }
    let batch: Vec<usize> = x.dims()[..r - 2].to_vec();
    let nb: usize = batch.iter().product();
    let dt = x.dtype();
    let wd = work_dtype(dt);
    let mut m = x.cast(wd)?.reshape([nb, n, n])?;
    let mut det = Tensor::ones([nb, 1, 1], wd, c.device)?;
    let rows = Tensor::arange(0.0, n as f64, 1.0, DType::I32, c.device)?.reshape([1, n])?;
    for k in 0..n {
        let below = m.narrow(1, k, n - k)?;
        let p = below
            .narrow(2, k, 1)?
            .abs()?
            .argmax(1, false)?
            .cast(DType::I32)?
            .add_scalar(k as f64)?
            .reshape([nb, 1])?;
        // row order with rows k and p exchanged
        let kk = rows.scalar_like(k as f64)?;
        let order = rows
            .eq(&kk)?
            .where_cond(&p, &rows.eq(&p)?.where_cond(&kk, &rows)?)?;
        m = m.gather(1, &order.reshape([nb, n, 1])?.expand([nb, n, n])?)?;
        let moved = p.ne(&kk)?.cast(wd)?.reshape([nb, 1, 1])?;
        let pivot = m.narrow(1, k, 1)?.narrow(2, k, 1)?;
        det = det
            .mul(&pivot)?
            .mul(&moved.mul_scalar(-2.0)?.add_scalar(1.0)?)?;
        if k + 1 < n {
            let zero = pivot.eq(&pivot.scalar_like(0.0)?)?;
            let pivot = zero.where_cond(&pivot.scalar_like(1.0)?, &pivot)?;
            let rest = m.narrow(1, k + 1, n - k - 1)?;
            let factor = rest.narrow(2, k, 1)?.div(&pivot)?;
            let rest = rest.sub(&factor.mul(&m.narrow(1, k, 1)?)?)?;
            m = Tensor::concat(&[m.narrow(1, 0, k + 1)?, rest], 1)?;
        }
    }
    one(det.reshape(batch)?.cast(dt)?)
}

#[cfg(test)]
mod tests {
    //! Pivoting and singular matrices, which the suites' random matrices do not reach.
    use super::*;
    use kiln_core::Device;

    fn det_of(m: &[f32], dims: &[usize]) -> Vec<f32> {
        let device = Device::cpu();
        let node = crate::NodeProto::default();
        let x = Tensor::from_slice(m, dims, &device).unwrap();
        let out = super::super::run_alone(det, &device, 22, &node, &[Value::Tensor(x)]);
        match out.unwrap().remove(0) {
            Value::Tensor(t) => t.to_vec::<f32>().unwrap(),
            other => panic!("{}", other.describe()),
        }
    }

    #[test]
    fn row_swaps_and_singular_matrices() {
        // a swap flips the sign; a zero column or dependent rows give 0
        let got = det_of(
            &[
                0.0, 1.0, 1.0, 0.0, // swap: -1
                1.0, 2.0, 2.0, 4.0, // dependent rows: 0
                0.0, 1.0, 0.0, 2.0, // zero column: 0
            ],
            &[3, 2, 2],
        );
        assert_eq!(got, [-1.0, 0.0, 0.0]);
        let got = det_of(&[0.0, 2.0, 1.0, 1.0, 0.0, 3.0, 2.0, 1.0, 0.0], &[3, 3]);
        assert!((got[0] - 13.0).abs() < 1e-5, "{got:?}");
    }
}
