//! The CUDA backend: the wgpu backend's plans ([`kiln_kernels::plan`]) with their WGSL kernels
//! translated to CUDA C ([`kiln_kernels::cuda`]) and compiled by NVRTC, f32 matmul on cuBLAS,
//! and large f32 convolutions on cuDNN where it is installed.
//!
//! - Libraries are loaded at run time (cudarc's dynamic loading): a build needs no CUDA, and a
//!   machine without the driver, NVRTC or cuBLAS gets an error naming the missing library.
//!   cuDNN is optional: without it, convolutions run the translated WGSL implicit GEMM.
//! - One stream per device; every allocation, copy, launch and free is ordered on it.
//!   Memory comes from the device's stream-ordered pool (`cuMemAllocAsync`) with its release
//!   threshold raised so freed blocks stay cached for reuse instead of returning to the driver.
//! - Kernels are compiled once per variant ([`KernelKey`]) for this device's compute capability.
//! - A dispatch's params header (binding 0) of up to [`INLINE_PARAMS_MAX`] bytes travels with
//!   the launch, by value ([`kiln_kernels::cuda::Inline`]): no device buffer, no copy on the
//!   stream. Longer headers are uploaded to a device buffer, as on ROCm.
//! - Devices hold f32, i32, u32 and bool (as u32 0/1), as the plans require.
//! - [`CudaBackend`] is kiln's one plan executor ([`GpuBackend`]) on [`CudaRuntime`], which
//!   only allocates, copies and launches.
//!
//! ```no_run
//! use kiln_core::{DType, Tensor};
//! let dev = kiln::cuda::device(0)?;
//! let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32, &dev)?.reshape([2, 3])?;
//! println!("{:?}", x.softmax(-1)?.to_vec::<f32>()?);
//! # Ok::<(), kiln_core::Error>(())
//! ```

mod blas;
mod dnn;
#[cfg(feature = "nccl")]
pub mod nccl;

use crate::gpu::{self, KernelCache};
use cudarc::driver::{result as cu, sys};
use kiln_core::{
    Backend, DType, Device, Error, Meta, Op, ReadFuture, Result, Storage, TensorData, View,
};
use kiln_kernels::cuda::{Dialect, Inline, Options, ParamKind};
use kiln_kernels::exec::{GpuBackend, Launch, Runtime};
use kiln_kernels::plan::KernelKey;
use std::ffi::{CString, c_void};
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The arithmetic cuBLAS may use for f32 matmul.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MatmulPrecision {
    /// Strict fp32 (the default): products and sums in f32, as the CPU backend computes.
    #[default]
    Strict,
    /// Inputs rounded to TF32 (10 mantissa bits) on tensor cores, f32 accumulation.
    Tf32,
    /// Inputs rounded to bf16 (7 mantissa bits) on tensor cores, f32 accumulation.
    Bf16,
}

/// How the CUDA backend computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CudaOptions {
    /// The arithmetic of f32 matmul on cuBLAS (and of convolutions on cuDNN);
    /// [`MatmulPrecision::Strict`] by default.
    pub matmul: MatmulPrecision,
    /// Run f32 matmul on cuBLAS (the default). `false` runs every matmul through the translated
    /// WGSL GEMM, the kernel the other backends run (for comparisons).
    pub cublas: bool,
    /// Run large f32 convolutions (forward and input gradient, at least 2^31 flops) on cuDNN 9
    /// where it can be loaded (the default). `false`, or no cuDNN, runs them through the
    /// translated WGSL implicit GEMM, as every smaller one. Under [`MatmulPrecision::Strict`]
    /// cuDNN computes in fp32 FMA arithmetic; any other precision lets it use TF32.
    pub cudnn: bool,
    /// Let cuDNN pick FFT and Winograd convolution algorithms where its heuristics rank one
    /// first (the default, as PyTorch's fp32 convolutions do). They transform the operands,
    /// so they round differently from summing the products directly: the MNIST CNN's conv2
    /// input gradient through FFT was within 1.4e-6 of the terms' magnitude of the CPU's
    /// (2.8e-6 summed directly), and took its training step at batch 256 from 202.8k to
    /// 231.4k images/s on an H200 (medians of 3), with the same test accuracy after 3 epochs. `false` keeps
    /// the algorithms that sum directly, as gemm.wgsl and the CPU do.
    pub conv_transforms: bool,
}

impl Default for CudaOptions {
    fn default() -> Self {
        CudaOptions {
            matmul: MatmulPrecision::Strict,
            cublas: true,
            cudnn: true,
            conv_transforms: true,
        }
    }
}

/// A kiln [`Device`] on CUDA GPU `index` with strict fp32.
pub fn device(index: usize) -> Result<Device> {
    device_with(index, CudaOptions::default())
}

/// A kiln [`Device`] on CUDA GPU `index` with `options`.
pub fn device_with(index: usize, options: CudaOptions) -> Result<Device> {
    Ok(Device::new(CudaBackend::new(index, options)?))
}

/// Whether the CUDA driver library can be loaded here (tests use it to skip without a GPU).
pub fn driver_present() -> bool {
    // SAFETY: only tries to open the library.
    unsafe { sys::is_culib_present() }
}

fn driver_err(what: &str) -> impl Fn(cu::DriverError) -> Error + '_ {
    move |e| Error::device("cuda", format!("{what}: {e:?}"))
}

/// Raw driver handles, used only under the owning context.
struct Raw {
    stream: sys::CUstream,
}
// SAFETY: CUDA handles may be used from any thread once the context is current; every use
// binds the context first.
unsafe impl Send for Raw {}
unsafe impl Sync for Raw {}

struct Compiled {
    module: sys::CUmodule,
    function: sys::CUfunction,
    kernel: kiln_kernels::cuda::Kernel,
}
// SAFETY: as for `Raw`.
unsafe impl Send for Compiled {}
unsafe impl Sync for Compiled {}

struct Inner {
    ctx: Arc<cudarc::driver::CudaContext>,
    raw: Raw,
    name: String,
    arch: String,
    /// Built for each size of by-value params (0: params in a device buffer).
    kernels: KernelCache<Compiled>,
    blas: Mutex<Option<blas::Blas>>,
    dnn: Mutex<dnn::DnnState>,
    /// `None` when pinned memory could not be had; uploads then copy from pageable memory.
    staging: Mutex<Option<Staging>>,
    allocated: AtomicU64,
    options: CudaOptions,
}

/// The largest params header passed by value. The by-value sizes are 256, 1024 and 4096 bytes,
/// so that each variant compiles at most three times.
pub const INLINE_PARAMS_MAX: usize = 4096;

/// The by-value bytes a params header of `words` u32s travels in, or 0 (a device buffer).
fn inline_capacity(words: usize) -> u32 {
    let bytes = 4 * words;
    [256, 1024, INLINE_PARAMS_MAX]
        .into_iter()
        .find(|&c| bytes <= c)
        .map_or(0, |c| c as u32)
}

/// Bytes of pinned host memory for small uploads, in two halves.
const STAGING_BYTES: usize = 4 << 20;

/// Pinned host memory that small uploads (every plan's params, small tensors) are copied
/// through. A copy from pageable memory may wait for the stream to drain before it returns;
/// one from pinned memory is queued like a kernel, so the host keeps running ahead of the GPU.
/// Uploads fill one half while the other half's copies finish; before a half is written again,
/// the event recorded after its last copy is waited for (once per 2 MiB of uploads).
struct Staging {
    ptr: *mut u8,
    half: usize,
    used: usize,
    done: [sys::CUevent; 2],
    pending: [bool; 2],
}
// SAFETY: the pointer and events are only used under the backend's mutex.
unsafe impl Send for Staging {}

impl Staging {
    fn new() -> std::result::Result<Self, cu::DriverError> {
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING;
        let done = [cu::event::create(flags)?, cu::event::create(flags)?];
        // SAFETY: plain bytes, written before they are read.
        let ptr = unsafe { cu::malloc_host(STAGING_BYTES, 0) }?.cast::<u8>();
        Ok(Staging {
            ptr,
            half: 0,
            used: 0,
            done,
            pending: [false; 2],
        })
    }

    /// Queues the copy of `bytes` (at most half of the staging memory) to `dst` on `stream`.
    ///
    /// # Safety
    /// `dst` holds `bytes.len()` bytes; `stream` is the stream every upload goes to.
    unsafe fn copy(
        &mut self,
        bytes: &[u8],
        dst: sys::CUdeviceptr,
        stream: sys::CUstream,
    ) -> std::result::Result<(), cu::DriverError> {
        const HALF: usize = STAGING_BYTES / 2;
        // SAFETY: the events are live; `at` stays inside the allocation since
        // used + len <= HALF; the copy reads pinned memory that is not written again before
        // the event after it has completed.
        unsafe {
            if self.used + bytes.len() > HALF {
                cu::event::record(self.done[self.half], stream)?;
                self.pending[self.half] = true;
                self.half ^= 1;
                if self.pending[self.half] {
                    cu::event::synchronize(self.done[self.half])?;
                    self.pending[self.half] = false;
                }
                self.used = 0;
            }
            let at = self.ptr.add(self.half * HALF + self.used);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), at, bytes.len());
            cu::memcpy_htod_async(dst, std::slice::from_raw_parts(at, bytes.len()), stream)?;
        }
        self.used += bytes.len().next_multiple_of(16);
        Ok(())
    }
}

impl Drop for Staging {
    /// Runs after the stream was drained (see `Inner`'s drop).
    fn drop(&mut self) {
        // SAFETY: no copy from this memory is pending any more.
        unsafe {
            let _ = cu::free_host(self.ptr.cast());
            for e in self.done {
                let _ = cu::event::destroy(e);
            }
        }
    }
}

impl Inner {
    fn bind(&self) -> Result<()> {
        self.ctx
            .bind_to_thread()
            .map_err(driver_err("binding the context"))
    }
}

impl Drop for Inner {
    /// Runs when the backend and every buffer are gone: waits for the stream, then releases
    /// the cuBLAS handle, the kernel modules and the stream.
    fn drop(&mut self) {
        if self.bind().is_err() {
            return;
        }
        // SAFETY: nothing uses these handles any more; the stream is drained first.
        unsafe {
            let _ = cu::stream::synchronize(self.raw.stream);
            if let Ok(staging) = self.staging.get_mut() {
                drop(staging.take());
            }
            if let Ok(Some(b)) = self.blas.get_mut().map(Option::take) {
                let _ = cudarc::cublas::result::destroy_handle(b.handle);
            }
            if let Ok(dnn::DnnState::Ready(d)) = self
                .dnn
                .get_mut()
                .map(|s| std::mem::replace(s, dnn::DnnState::Missing))
            {
                d.close();
            }
            self.kernels.drain(|k| {
                let _ = cu::module::unload(k.module);
            });
            let _ = cu::stream::destroy(self.raw.stream);
        }
    }
}

/// The CUDA backend: [`GpuBackend`] on [`CudaRuntime`]. Create it with [`device`].
///
/// It dereferences to its runtime (kernel cache, raw allocations) for tests and benchmarks.
pub struct CudaBackend(GpuBackend<CudaRuntime>);

/// The [`Runtime`] of [`CudaBackend`]: NVRTC kernel cache, stream-ordered memory, pinned upload
/// staging, launches on the device's one stream, and f32 matmul on cuBLAS.
pub struct CudaRuntime {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaBackend({})", self.inner.name)
    }
}

impl Deref for CudaBackend {
    type Target = CudaRuntime;
    fn deref(&self) -> &CudaRuntime {
        self.0.runtime()
    }
}

/// A device allocation, freed on the stream when the last tensor using it goes.
pub struct CudaBuffer {
    ptr: sys::CUdeviceptr,
    bytes: u64,
    inner: Arc<Inner>,
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        let _ = self.inner.bind();
        // SAFETY: `ptr` came from `malloc_async` on this stream and is no longer referenced.
        let _ = unsafe { cu::free_async(self.ptr, self.inner.raw.stream) };
        self.inner
            .allocated
            .fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

impl CudaBackend {
    /// Opens GPU `index`. Errors name the missing library or the failing call.
    pub fn new(index: usize, options: CudaOptions) -> Result<Self> {
        if !driver_present() {
            return Err(Error::device(
                "cuda",
                "the CUDA driver library (libcuda.so / nvcuda.dll) was not found; install the NVIDIA driver",
            ));
        }
        let count =
            cudarc::driver::CudaContext::device_count().map_err(driver_err("counting devices"))?;
        if index >= count.max(0) as usize {
            return Err(Error::device(
                "cuda",
                format!("no CUDA device {index}: this machine has {count}"),
            ));
        }
        let ctx =
            cudarc::driver::CudaContext::new(index).map_err(driver_err("creating the context"))?;
        ctx.bind_to_thread()
            .map_err(driver_err("binding the context"))?;
        let name = ctx.name().map_err(driver_err("reading the device name"))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(driver_err("reading the compute capability"))?;
        let stream = cu::stream::create(cu::stream::StreamKind::NonBlocking)
            .map_err(driver_err("creating a stream"))?;
        // SAFETY: the device's default pool exists once the context does.
        unsafe {
            let pool = cu::device::get_default_mem_pool(ctx.cu_device())
                .map_err(driver_err("getting the memory pool"))?;
            let mut threshold = u64::MAX;
            cu::mem_pool::set_attribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut threshold as *mut u64).cast(),
            )
            .map_err(driver_err("configuring the memory pool"))?;
        }
        Ok(CudaBackend(GpuBackend::from_runtime(CudaRuntime {
            inner: Arc::new(Inner {
                ctx,
                raw: Raw { stream },
                name: format!("cuda:{index}: {name} (sm_{major}{minor})"),
                arch: format!("compute_{major}{minor}"),
                kernels: KernelCache::new("cuda"),
                blas: Mutex::new(None),
                dnn: Mutex::new(dnn::DnnState::Unknown),
                staging: Mutex::new(Staging::new().ok()),
                allocated: AtomicU64::new(0),
                options,
            }),
        })))
    }
}

impl CudaRuntime {
    fn alloc(&self, bytes: u64) -> Result<CudaBuffer> {
        let ptr = if bytes == 0 {
            0
        } else {
            // SAFETY: a fresh stream-ordered allocation.
            unsafe { cu::malloc_async(self.inner.raw.stream, bytes as usize) }.map_err(|e| {
                Error::device(
                    "cuda",
                    format!("allocating {bytes} bytes failed (out of memory?): {e:?}"),
                )
            })?
        };
        self.inner.allocated.fetch_add(bytes, Ordering::Relaxed);
        Ok(CudaBuffer {
            ptr,
            bytes,
            inner: self.inner.clone(),
        })
    }

    fn upload_bytes(&self, bytes: &[u8]) -> Result<CudaBuffer> {
        let buf = self.alloc(bytes.len() as u64)?;
        if !bytes.is_empty() {
            self.write_bytes(&buf, bytes)?;
        }
        Ok(buf)
    }

    /// Queues the copy of `bytes` to the start of `buf` (through pinned memory when small).
    fn write_bytes(&self, buf: &CudaBuffer, bytes: &[u8]) -> Result<()> {
        if bytes.len() as u64 > buf.bytes {
            return Err(Error::invalid(
                "cuda",
                format!("{} bytes do not fit a buffer of {}", bytes.len(), buf.bytes),
            ));
        }
        let stream = self.inner.raw.stream;
        let mut staging = self.inner.staging.lock().map_err(poisoned)?;
        // SAFETY: `buf` holds at least `bytes.len()` bytes (checked above); pageable sources
        // are copied before return.
        unsafe {
            match staging.as_mut() {
                Some(st) if bytes.len() <= STAGING_BYTES / 2 => st.copy(bytes, buf.ptr, stream),
                _ => cu::memcpy_htod_async(buf.ptr, bytes, stream),
            }
        }
        .map_err(driver_err("copying to the device"))
    }

    /// The compiled kernel of `key` taking `inline` bytes of params by value (0: by pointer),
    /// translating and compiling it on first use.
    fn kernel(&self, key: &KernelKey, inline: u32) -> Result<Arc<Compiled>> {
        self.inner.kernels.get_or_compile(
            key,
            inline,
            || self.compile(key, inline),
            // SAFETY: this module was never launched or shared.
            |k| unsafe {
                let _ = cu::module::unload(k.module);
            },
        )
    }

    fn compile(&self, key: &KernelKey, inline: u32) -> Result<Compiled> {
        let options = Options {
            inline: (inline > 0).then_some(Inline {
                group: 0,
                binding: 0,
                capacity: inline,
            }),
            ..Options::new(Dialect::Cuda)
        };
        let (source, kernel) = gpu::translate(key, options, "cuda")?;
        let label = key.label();
        // SAFETY: only tries to open the library.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(Error::device(
                "cuda",
                "NVRTC (libnvrtc.so) was not found; install the CUDA toolkit or add its lib64 to LD_LIBRARY_PATH",
            ));
        }
        let opts = cudarc::nvrtc::CompileOptions {
            options: vec![
                format!("--gpu-architecture={}", self.inner.arch),
                "-std=c++17".into(),
                // WGSL allows 2.5 ULP for `/`, so the translated kernels need not pay for
                // correctly rounded division: composed GELU (three divisions) ran 1.44x a
                // copy's time with it and 1.28x without, on an H200.
                "--prec-div=false".into(),
                // WGSL lets f32 subnormals flush to zero (Metal and most Vulkan drivers do), and
                // division, `exp` and friends then take their short paths: composed GELU's
                // kernel took 1.106x a copy's time without it and 1.036x with it (H200, ncu),
                // whose streamed time 1.11x became 1.04-1.09x a copy's.
                "-ftz=true".into(),
            ],
            ..Default::default()
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(&source, opts)
            .map_err(|e| Error::device("cuda", format!("NVRTC rejected {label}: {e:?}")))?;
        let image = CString::new(ptx.to_src())
            .map_err(|_| Error::device("cuda", format!("{label}: PTX with a NUL byte")))?;
        self.inner.bind()?;
        let name = CString::new(kernel.name.clone())
            .map_err(|_| Error::device("cuda", "kernel name with a NUL byte"))?;
        // SAFETY: `image` is NUL-terminated PTX; the module is unloaded when the backend goes.
        let module = unsafe { cu::module::load_data(image.as_ptr().cast()) }
            .map_err(driver_err("loading a compiled kernel"))?;
        // SAFETY: `module` was just loaded.
        let function = match unsafe { cu::module::get_function(module, name) } {
            Ok(f) => f,
            Err(e) => {
                // SAFETY: nothing refers to the module.
                let _ = unsafe { cu::module::unload(module) };
                return Err(driver_err("finding a kernel")(e));
            }
        };
        Ok(Compiled {
            module,
            function,
            kernel,
        })
    }
}

impl Runtime for CudaRuntime {
    type Buffer = CudaBuffer;
    /// Reads finish before [`Runtime::download`] returns.
    type Download = std::future::Ready<Result<Vec<u8>>>;

    fn name(&self) -> String {
        self.inner.name.clone()
    }

    fn prepare_thread(&self) -> Result<()> {
        self.inner.bind()
    }

    fn allocate(&self, bytes: u64, _op: &str) -> Result<CudaBuffer> {
        self.alloc(bytes)
    }

    fn write(&self, buffer: &CudaBuffer, bytes: &[u8]) -> Result<()> {
        self.write_bytes(buffer, bytes)
    }

    /// Launches the kernels on the stream, each with its params by value where they fit
    /// ([`INLINE_PARAMS_MAX`]); longer params are uploaded first, all in one copy.
    fn launch(&self, name: &str, dispatches: &[Launch<'_, CudaBuffer>]) -> Result<()> {
        let inline: Vec<u32> = dispatches
            .iter()
            .map(|d| inline_capacity(d.params.len()))
            .collect();
        let uploaded = match inline.contains(&0) {
            true => {
                let (words, at) = gpu::pack_params(dispatches);
                Some((self.upload_bytes(&words)?, at))
            }
            false => None,
        };
        self.inner.bind()?;
        let mut bytes = Vec::new();
        for (i, (d, &capacity)) in dispatches.iter().zip(&inline).enumerate() {
            let k = self.kernel(d.kernel, capacity)?;
            let params = match &uploaded {
                Some((buf, at)) if capacity == 0 => (buf.ptr + at[i].0, at[i].1),
                _ => (0, 4 * d.params.len() as u64),
            };
            let mut values = gpu::kernel_args(name, d, &k.kernel, params, |b| (b.ptr, b.bytes))?;
            bytes.clear();
            if capacity > 0 {
                bytes.extend(d.params.iter().flat_map(|w| w.to_le_bytes()));
                bytes.resize(capacity as usize, 0);
            }
            let mut args: Vec<*mut c_void> = values
                .iter_mut()
                .zip(&k.kernel.params)
                .map(|(v, p)| match p.kind {
                    ParamKind::Inline { .. } => bytes.as_mut_ptr().cast::<c_void>(),
                    _ => (v as *mut u64).cast::<c_void>(),
                })
                .collect();
            let [x, y, z] = d.workgroups;
            let [bx, by, bz] = k.kernel.workgroup_size;
            // SAFETY: every pointer parameter is a live allocation of this context bound as the
            // plan says; `u32` lengths are read from the low bytes of a little-endian u64; the
            // by-value params are `capacity` bytes, the size the kernel was compiled for.
            unsafe {
                cu::launch_kernel(
                    k.function,
                    (x, y, z),
                    (bx, by, bz),
                    0,
                    self.inner.raw.stream,
                    &mut args,
                )
            }
            .map_err(|e| {
                Error::device(
                    name.to_string(),
                    format!("launching {}: {e:?}", d.kernel.label()),
                )
            })?;
        }
        Ok(())
    }

    /// Copies synchronously: the stream is drained before the bytes are returned.
    fn download(&self, buffer: &CudaBuffer, offset: u64, bytes: u64) -> Result<Self::Download> {
        if offset + bytes > buffer.bytes {
            return Err(Error::invalid(
                "read",
                format!(
                    "bytes {offset}..{} are outside a buffer of {}",
                    offset + bytes,
                    buffer.bytes
                ),
            ));
        }
        let mut host = vec![0u8; bytes as usize];
        // SAFETY: `buffer` holds `offset + bytes` bytes (checked above); the stream is
        // synchronised before `host` is used.
        unsafe {
            cu::memcpy_dtoh_async(&mut host[..], buffer.ptr + offset, self.inner.raw.stream)
                .map_err(driver_err("copying to the host"))?;
            cu::stream::synchronize(self.inner.raw.stream)
                .map_err(driver_err("waiting for the GPU"))?;
        }
        Ok(std::future::ready(Ok(host)))
    }

    fn allocated_bytes(&self) -> u64 {
        self.inner.allocated.load(Ordering::Relaxed)
    }

    fn synchronize(&self) -> Result<()> {
        // SAFETY: the stream belongs to this backend.
        unsafe { cu::stream::synchronize(self.inner.raw.stream) }
            .map_err(driver_err("waiting for the GPU"))
    }

    /// f32 matmul on cuBLAS and large f32 convolutions on cuDNN, when their options are on and
    /// the views map to them.
    fn execute_without_plan(
        &self,
        op: &Op,
        inputs: &[View<'_>],
        buffers: &[&CudaBuffer],
        outputs: &[Meta],
    ) -> Result<Option<CudaBuffer>> {
        let options = &self.inner.options;
        match (op, outputs) {
            (Op::Matmul, [(DType::F32, out_shape)]) if options.cublas => {
                blas::matmul(self, inputs, buffers, out_shape)
            }
            (Op::Conv2d(_) | Op::ConvTranspose2d { .. }, [(DType::F32, out_shape)])
                if options.cudnn =>
            {
                dnn::conv(self, op, inputs, buffers, out_shape)
            }
            _ => Ok(None),
        }
    }
}

fn poisoned<T>(_: T) -> Error {
    Error::device("cuda", "a lock was poisoned by a panic")
}

/// Every method is [`GpuBackend`]'s, the executor the wgpu backend shares.
impl Backend for CudaBackend {
    fn name(&self) -> String {
        self.0.name()
    }

    fn upload(&self, data: &TensorData) -> Result<Storage> {
        self.0.upload(data)
    }

    fn execute(&self, op: &Op, inputs: &[View<'_>], outputs: &[Meta]) -> Result<Vec<Storage>> {
        self.0.execute(op, inputs, outputs)
    }

    fn read(&self, input: View<'_>) -> ReadFuture {
        self.0.read(input)
    }

    fn supports(&self, dtype: DType) -> bool {
        self.0.supports(dtype)
    }

    fn allocated_bytes(&self) -> Option<u64> {
        self.0.allocated_bytes()
    }

    fn synchronize(&self) -> Result<()> {
        self.0.synchronize()
    }
}

#[cfg(test)]
mod bench;
#[cfg(test)]
mod tests;
