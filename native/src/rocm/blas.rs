//! f32 matmul and batched matmul on rocBLAS (`rocblas_sgemm_strided_batched`), when
//! `librocblas.so` is installed; the views map to a column-major GEMM as [`Gemm::of`] says
//! (shared with cuBLAS). Anything else, or no rocBLAS, falls back to the translated WGSL GEMM.
//! Untested: neither an AMD GPU nor rocBLAS was available when it was written.

use super::hip::{Handle, Rocblas};
use super::{RocmBuffer, RocmRuntime};
use crate::gpu::Gemm;
use kiln_core::{Error, Result, Shape, View};

/// `rocblas_operation_none` and `rocblas_operation_transpose`.
const OP_N: i32 = 111;
const OP_T: i32 = 112;

/// rocBLAS and its handle (on the null stream, where every launch goes).
pub(super) struct Blas {
    api: Rocblas,
    handle: Handle,
}
// SAFETY: the handle is used under the backend's lock, with its device current.
unsafe impl Send for Blas {}

impl Blas {
    /// Releases the handle.
    ///
    /// # Safety
    /// No rocBLAS call is running or follows.
    pub(super) unsafe fn destroy(self) {
        // SAFETY: as the caller promises.
        unsafe { (self.api.destroy_handle)(self.handle) };
    }
}

/// `Some(output)` when rocBLAS took the matmul, `None` to fall back to the planned kernels.
pub(super) fn matmul(
    b: &RocmRuntime,
    inputs: &[View<'_>],
    bufs: &[&RocmBuffer],
    out: &Shape,
) -> Result<Option<RocmBuffer>> {
    // Two batch axes that do not coalesce (pointer-array batches) stay on the planned kernels.
    let Some(g) = Gemm::of(inputs, out).filter(|g| g.outer.is_none()) else {
        return Ok(None);
    };
    let inner = &b.inner;
    let mut guard = inner
        .blas
        .lock()
        .map_err(|_| Error::device("rocm", "the rocBLAS lock was poisoned by a panic"))?;
    if guard.is_none() {
        let blas = match Rocblas::open().transpose()? {
            Some(api) => {
                inner.bind()?;
                let mut handle: Handle = std::ptr::null_mut();
                // SAFETY: a valid out-pointer.
                let status = unsafe { (api.create_handle)(&mut handle) };
                if status != 0 {
                    return Err(Error::device(
                        "matmul",
                        format!("rocblas_create_handle failed ({status})"),
                    ));
                }
                Some(Blas { api, handle })
            }
            None => None,
        };
        *guard = Some(blas);
    }
    let Some(Some(blas)) = guard.as_ref() else {
        return Ok(None);
    };
    let out_buf = b.alloc(g.out_bytes())?;
    let op = |t: bool| if t { OP_T } else { OP_N };
    let (alpha, beta) = (1.0f32, 0.0f32);
    let xp = (bufs[0].ptr + 4 * g.offset_a) as *const f32;
    let yp = (bufs[1].ptr + 4 * g.offset_b) as *const f32;
    inner.bind()?;
    // SAFETY: pointers and extents describe live allocations of this device (Gemm::of checked
    // the views); the scalars live through the call.
    let status = unsafe {
        (blas.api.sgemm_strided_batched)(
            blas.handle,
            op(g.tb),
            op(g.ta),
            g.n,
            g.m,
            g.k,
            &alpha,
            yp,
            g.ldb,
            g.stride_b,
            xp,
            g.lda,
            g.stride_a,
            &beta,
            out_buf.ptr as *mut f32,
            g.n,
            g.stride_c,
            g.batch,
        )
    };
    if status != 0 {
        return Err(Error::device(
            "matmul",
            format!("rocblas_sgemm_strided_batched failed ({status})"),
        ));
    }
    Ok(Some(out_buf))
}
