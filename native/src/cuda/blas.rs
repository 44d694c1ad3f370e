//! f32 matmul and batched matmul on cuBLAS (`cublasGemmStridedBatchedEx`, or
//! `cublasGemmBatchedEx` with arrays of matrix pointers when two batch axes do not coalesce;
//! with the compute type of [`MatmulPrecision`]: strict fp32 unless TF32 or bf16 was asked for).
//!
//! The views map to a column-major GEMM as [`Gemm::of`] says (shared with rocBLAS); anything
//! else (and integer matmul) falls back to the translated WGSL GEMM.

use super::{CudaBuffer, CudaRuntime, MatmulPrecision};
use crate::gpu::Gemm;
use cudarc::cublas::{result as blas, sys};
use kiln_core::{Error, Result, Shape, View};
use std::ffi::c_void;

pub(super) struct Blas {
    pub(super) handle: sys::cublasHandle_t,
}
// SAFETY: the handle is used under the backend's lock, with its context bound.
unsafe impl Send for Blas {}

/// `Some(output)` when cuBLAS took the matmul, `None` to fall back to the planned kernels.
pub(super) fn matmul(
    b: &CudaRuntime,
    inputs: &[View<'_>],
    bufs: &[&CudaBuffer],
    out: &Shape,
) -> Result<Option<CudaBuffer>> {
    let Some(g) = Gemm::of(inputs, out) else {
        return Ok(None);
    };
    let inner = &b.inner;
    let out_buf = b.alloc(g.out_bytes())?;
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
    if g.outer.is_some() {
        // The device arrays of A, B and C pointers, uploaded like a kernel's params (queued
        // on the stream; freed in stream order after the call).
        let (mut a, mut bs, mut c) = (Vec::new(), Vec::new(), Vec::new());
        for [oa, ob, oc] in g.offsets() {
            a.extend_from_slice(&(bufs[0].ptr + 4 * oa).to_le_bytes());
            bs.extend_from_slice(&(bufs[1].ptr + 4 * ob).to_le_bytes());
            c.extend_from_slice(&(out_buf.ptr + 4 * oc).to_le_bytes());
        }
        let count = a.len() / 8;
        let arrays = b.upload_bytes(&[a, bs, c].concat())?;
        let array = |i: usize| arrays.ptr + (8 * count * i) as u64;
        // SAFETY: every pointer is inside a live allocation of this context (Gemm::of's
        // extents), and the arrays hold `count` pointers each.
        return unsafe {
            sys::cublasGemmBatchedEx(
                handle,
                op(g.tb),
                op(g.ta),
                g.n,
                g.m,
                g.k,
                (&alpha as *const f32).cast(),
                array(1) as *const *const c_void,
                f32_type,
                g.ldb,
                array(0) as *const *const c_void,
                f32_type,
                g.lda,
                (&beta as *const f32).cast(),
                array(2) as *const *mut c_void,
                f32_type,
                g.n,
                count as i32,
                compute,
                sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
            .result()
        }
        .map_err(|e| Error::device("matmul", format!("cublasGemmBatchedEx: {e:?}")))
        .map(|()| Some(out_buf));
    }
    let xp = (bufs[0].ptr + 4 * g.offset_a) as *const c_void;
    let yp = (bufs[1].ptr + 4 * g.offset_b) as *const c_void;
    // SAFETY: pointers and extents describe live allocations of this context, checked above.
    unsafe {
        blas::gemm_strided_batched_ex(
            handle,
            op(g.tb),
            op(g.ta),
            g.n,
            g.m,
            g.k,
            (&alpha as *const f32).cast(),
            yp,
            f32_type,
            g.ldb,
            g.stride_b,
            xp,
            f32_type,
            g.lda,
            g.stride_a,
            (&beta as *const f32).cast(),
            out_buf.ptr as *mut c_void,
            f32_type,
            g.n,
            g.stride_c,
            g.batch,
            compute,
            sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
        )
    }
    .map_err(|e| Error::device("matmul", format!("cublasGemmStridedBatchedEx: {e:?}")))?;
    Ok(Some(out_buf))
}
