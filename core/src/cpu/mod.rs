//! The CPU reference backend: correct for every op, the oracle other backends are tested against.
//!
//! Buffers are plain vectors ([`CpuStorage`]); inputs are read through their layouts in place
//! (strided, broadcast, offset) and every output is a fresh row-major buffer (under `std`, large
//! ones reuse the memory of dropped tensors). f16 is computed in f32. Matmul and convolution run
//! on a GEMM (the `gemm` crate natively; elsewhere kiln's SIMD128 `gemm::sgemm` for f32 and
//! matrixmultiply for f64); under `std`, these and the large elementwise, reduction and pooling
//! loops use all cores. The kernels come with the `cpu-kernels` feature (on by default); without
//! it the CPU device still holds tensors (upload, read, write) and refuses every op with an error
//! naming the feature, as in the page's WebGPU-only module.
//!
//! ```
//! use kiln_core::{DType, Device, Tensor};
//! let dev = Device::cpu();
//! let x = Tensor::from_vec(vec![1.0f32, -2.0, 3.0, -4.0], [2, 2], &dev)?;
//! assert_eq!(x.t()?.relu()?.to_vec::<f32>()?, vec![1.0, 3.0, 0.0, 0.0]);
//! # Ok::<(), kiln_core::Error>(())
//! ```

// The kernels, built with the `cpu-kernels` feature only: without it (the page's WebGPU-only
// module) the CPU holds tensors, uploads and reads them, but runs no op (`run` below).
macro_rules! kernel_modules {
    ($($name:ident)*) => { $(#[cfg(feature = "cpu-kernels")] mod $name;)* };
}
kernel_modules!(conv elementwise gemm lanes matmul movement num optim pool reduce run tail winograd);
// What the kernels share with reading and writing tensors; without the kernels some of it
// goes unused (and the linker drops it).
#[cfg_attr(not(feature = "cpu-kernels"), allow(dead_code))]
mod par;
#[cfg_attr(not(feature = "cpu-kernels"), allow(dead_code))]
mod storage;
#[cfg_attr(not(feature = "cpu-kernels"), allow(dead_code))]
mod strided;
#[cfg(test)]
mod tests;

#[cfg(all(threaded, target_arch = "wasm32"))]
pub use par::{panicked, start, worker};
pub use par::{set_clock, threads};
pub use storage::CpuStorage;

use crate::backend::{Backend, ReadFuture, View};
use crate::op::{Meta, Op};
use crate::{DType, Device, Error, Result, Storage, TensorData};
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

/// The CPU backend.
#[derive(Debug, Default)]
pub struct CpuBackend;

/// The shared CPU device.
pub(crate) fn device() -> Device {
    static CPU: spin::Once<Device> = spin::Once::new();
    CPU.call_once(|| Device::new(CpuBackend)).clone()
}

/// The error for a dtype an op does not take.
#[cfg(feature = "cpu-kernels")]
pub(crate) fn unsupported(op: &'static str, dt: DType) -> Error {
    Error::unsupported(
        op,
        alloc::format!("is not defined for {dt} tensors on the cpu"),
    )
}

/// Runs `$body` with `$T` bound to the Rust element type of `$dt`.
#[cfg(feature = "cpu-kernels")]
macro_rules! dispatch_any {
    ($dt:expr, $T:ident => $body:expr) => {
        match $dt {
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F16 => {
                type $T = half::f16;
                $body
            }
            $crate::DType::I32 => {
                type $T = i32;
                $body
            }
            $crate::DType::U32 => {
                type $T = u32;
                $body
            }
            $crate::DType::Bool => {
                type $T = bool;
                $body
            }
        }
    };
}
#[cfg(feature = "cpu-kernels")]
pub(crate) use dispatch_any;

impl Backend for CpuBackend {
    fn name(&self) -> String {
        "cpu".into()
    }
    fn upload(&self, data: &TensorData) -> Result<Storage> {
        Ok(Storage::new(CpuStorage::from_data(data)))
    }
    fn execute(&self, op: &Op, inputs: &[View<'_>], outputs: &[Meta]) -> Result<Vec<Storage>> {
        run::execute(op, inputs, outputs)
    }
    fn fuses_tail(&self, op: &Op, dtype: DType, max_pool: bool) -> bool {
        run::fuses_tail(op, dtype, max_pool)
    }
    fn execute_with_tail(
        &self,
        op: &Op,
        x: &[View<'_>],
        tail: crate::backend::Tail<'_>,
        output: &Meta,
    ) -> Result<Storage> {
        run::execute_with_tail(op, x, tail, output)
    }
    fn read(&self, input: View<'_>) -> ReadFuture {
        alloc::boxed::Box::pin(core::future::ready(storage::read_view(&input)))
    }
    fn write(&self, dst: &mut Storage, offset: usize, src: View<'_>) -> Result<bool> {
        let dst = dst
            .get_mut::<CpuStorage>()
            .ok_or_else(|| Error::device("write", "the tensor written is not a cpu tensor"))?;
        storage::write(dst, offset, &src)?;
        Ok(true)
    }
    fn allocated_bytes(&self) -> Option<u64> {
        Some(storage::ALLOCATED.load(Ordering::Relaxed) as u64)
    }
}

/// The CPU without its kernels: every op is an error naming the missing feature.
#[cfg(not(feature = "cpu-kernels"))]
mod run {
    use super::*;

    fn no_kernels(op: &Op) -> Error {
        Error::unsupported(
            op.name(),
            "cannot run on the cpu: this build has no cpu kernels (kiln-core without its \
             `cpu-kernels` feature, as in the page's WebGPU-only module, `init({ cpu: false })`); \
             run it on a GPU device",
        )
    }
    pub(super) fn execute(op: &Op, _: &[View<'_>], _: &[Meta]) -> Result<Vec<Storage>> {
        Err(no_kernels(op))
    }
    pub(super) fn fuses_tail(_: &Op, _: DType, _: bool) -> bool {
        false
    }
    pub(super) fn execute_with_tail(
        op: &Op,
        _: &[View<'_>],
        _: crate::backend::Tail<'_>,
        _: &Meta,
    ) -> Result<Storage> {
        Err(no_kernels(op))
    }
}
