//! f32 matmul and batched matmul on cuBLAS (`cublasGemmStridedBatchedEx`, with the compute type
//! of [`MatmulPrecision`]: strict fp32 unless TF32 or bf16 was asked for).
//!
//! cuBLAS is column-major: a row-major `C[m, n] = A[m, k] B[k, n]` is computed as the
//! column-major `C^T = B^T A^T`. A view whose last two axes are row- or column-contiguous maps to
//! a (possibly transposed) operand with a leading dimension, and batch axes that coalesce to one
//! stride map to the strided batch. Anything else (and integer matmul) falls back to the
//! translated WGSL GEMM.

use super::{CudaBuffer, CudaRuntime, MatmulPrecision};
use cudarc::cublas::{result as blas, sys};
use kiln_core::{Error, Result, Shape, View};
use std::ffi::{c_int, c_void};

pub(super) struct Blas {
    pub(super) handle: sys::cublasHandle_t,
}
// SAFETY: the handle is used under the backend's lock, with its context bound.
unsafe impl Send for Blas {}

/// (transposed, leading dimension) of a `rows x cols` row-major view with strides `(sr, sc)`,
/// seen as the column-major transpose cuBLAS consumes.
fn operand(rows: usize, cols: usize, sr: isize, sc: isize) -> Option<(bool, usize)> {
    let (sr, sc) = (usize::try_from(sr).ok()?, usize::try_from(sc).ok()?);
    if sc == 1 || cols == 1 {
        let ld = if rows == 1 { cols.max(1) } else { sr };
        if ld >= cols.max(1) {
            return Some((false, ld));
        }
    }
    if sr == 1 || rows == 1 {
        let ld = if cols == 1 { rows.max(1) } else { sc };
        if ld >= rows.max(1) {
            return Some((true, ld));
        }
    }
    None
}

/// `Some(output)` when cuBLAS took the matmul, `None` to fall back to the planned kernels.
pub(super) fn matmul(
    b: &CudaRuntime,
    inputs: &[View<'_>],
    bufs: &[&CudaBuffer],
    out: &Shape,
) -> Result<Option<CudaBuffer>> {
    let (Some(x), Some(y)) = (inputs.first(), inputs.get(1)) else {
        return Ok(None);
    };
    let (xd, yd) = (x.layout.shape().dims(), y.layout.shape().dims());
    if xd.len() < 2 || yd.len() < 2 || x.dtype != kiln_core::DType::F32 {
        return Ok(None);
    }
    let (xs, ys) = (x.layout.strides(), y.layout.strides());
    let (m, k, n) = (xd[xd.len() - 2], xd[xd.len() - 1], yd[yd.len() - 1]);
    if m == 0 || n == 0 || k == 0 {
        return Ok(None);
    }
    let (Some((ta, lda)), Some((tb, ldb))) = (
        operand(m, k, xs[xs.len() - 2], xs[xs.len() - 1]),
        operand(k, n, ys[ys.len() - 2], ys[ys.len() - 1]),
    ) else {
        return Ok(None);
    };
    // Batch axes: broadcast strides of each operand against the output's batch shape.
    let od = out.dims();
    let nb = od.len() - 2;
    let batch_strides = |d: &[usize], s: &[isize]| -> Option<Vec<usize>> {
        let off = nb + 2 - d.len();
        (0..nb)
            .map(|i| {
                if i < off || d[i - off] == 1 {
                    Some(0)
                } else {
                    usize::try_from(s[i - off]).ok()
                }
            })
            .collect()
    };
    let (Some(xb), Some(yb)) = (batch_strides(xd, xs), batch_strides(yd, ys)) else {
        return Ok(None);
    };
    let ob: Vec<usize> = {
        let mut acc = m * n;
        let mut v = vec![0; nb];
        for i in (0..nb).rev() {
            v[i] = acc;
            acc *= od[i];
        }
        v
    };
    let (dims, strides) = kiln_kernels::plan::coalesce(&od[..nb], vec![xb, yb, ob]);
    if dims.len() > 1 {
        return Ok(None);
    }
    let batch = dims.first().copied().unwrap_or(1);
    let pick = |i: usize| strides.get(i).and_then(|s| s.first()).copied().unwrap_or(0);
    let (sx, sy, so) = if batch == 1 {
        (0, 0, m * n)
    } else {
        (pick(0), pick(1), pick(2))
    };
    let to_int = |v: usize| c_int::try_from(v).ok();
    let (Some(mi), Some(ni), Some(ki), Some(ldai), Some(ldbi), Some(bi)) = (
        to_int(m),
        to_int(n),
        to_int(k),
        to_int(lda),
        to_int(ldb),
        to_int(batch),
    ) else {
        return Ok(None);
    };

    let inner = &b.inner;
    let out_buf = b.alloc((batch * m * n * 4) as u64)?;
    let mut guard = inner
        .blas
        .lock()
        .map_err(|_| Error::device("cuda", "the cuBLAS lock was poisoned by a panic"))?;
    if guard.is_none() {
        // SAFETY: only tries to open the library.
        if !unsafe { sys::is_culib_present() } {
            return Err(Error::device(
                "matmul",
                "cuBLAS (libcublas.so) was not found; install the CUDA toolkit or add its lib64 to LD_LIBRARY_PATH",
            ));
        }
        let handle = blas::create_handle()
            .map_err(|e| Error::device("matmul", format!("creating a cuBLAS handle: {e:?}")))?;
        // SAFETY: a fresh handle; the stream outlives it (both live as long as the backend).
        unsafe {
            blas::set_stream(handle, inner.raw.stream.cast())
                .map_err(|e| Error::device("matmul", format!("cuBLAS stream: {e:?}")))?;
            // The default math mode allows no TF32; reduced precision comes only from the
            // compute type asked for below.
            sys::cublasSetMathMode(handle, sys::cublasMath_t::CUBLAS_DEFAULT_MATH)
                .result()
                .map_err(|e| Error::device("matmul", format!("cuBLAS math mode: {e:?}")))?;
        }
        *guard = Some(Blas { handle });
    }
    let handle = guard
        .as_ref()
        .map(|g| g.handle)
        .ok_or_else(|| Error::device("matmul", "no cuBLAS handle"))?;
    let op = |t: bool| {
        if t {
            sys::cublasOperation_t::CUBLAS_OP_T
        } else {
            sys::cublasOperation_t::CUBLAS_OP_N
        }
    };
    let (alpha, beta) = (1.0f32, 0.0f32);
    let compute = match inner.options.matmul {
        MatmulPrecision::Strict => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        MatmulPrecision::Tf32 => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
        MatmulPrecision::Bf16 => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_16BF,
    };
    let f32_type = sys::cudaDataType::CUDA_R_32F;
    let xp = (bufs[0].ptr + 4 * x.layout.offset() as u64) as *const c_void;
    let yp = (bufs[1].ptr + 4 * y.layout.offset() as u64) as *const c_void;
    // SAFETY: pointers and extents describe live allocations of this context, checked above.
    unsafe {
        blas::gemm_strided_batched_ex(
            handle,
            op(tb),
            op(ta),
            ni,
            mi,
            ki,
            (&alpha as *const f32).cast(),
            yp,
            f32_type,
            ldbi,
            sy as i64,
            xp,
            f32_type,
            ldai,
            sx as i64,
            (&beta as *const f32).cast(),
            out_buf.ptr as *mut c_void,
            f32_type,
            ni,
            so as i64,
            bi,
            compute,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| Error::device("matmul", format!("cublasGemmStridedBatchedEx: {e:?}")))?;
    Ok(Some(out_buf))
}

#[cfg(test)]
mod tests {
    use super::operand;

    #[test]
    fn operands_map_to_blas_layouts() {
        assert_eq!(operand(3, 4, 4, 1), Some((false, 4))); // row-major
        assert_eq!(operand(3, 4, 1, 3), Some((true, 3))); // column-major (a transposed view)
        assert_eq!(operand(3, 4, 8, 1), Some((false, 8))); // a slice of wider rows
        assert_eq!(operand(1, 4, 0, 1), Some((false, 4))); // a broadcast single row
        assert_eq!(operand(3, 4, 2, 2), None); // neither axis contiguous
        assert_eq!(operand(3, 4, -4, 1), None);
    }
}
