//! The HIP backend for AMD GPUs: the plans every GPU backend runs ([`kiln_kernels::plan`]), with
//! their WGSL kernels translated to HIP ([`kiln_kernels::cuda`] with [`Dialect::Hip`]) and
//! compiled by hipRTC for the device, and f32 matmul on rocBLAS where it is installed.
//!
//! - ROCm is loaded at run time (`libamdhip64.so`, hipRTC, `librocblas.so`): a build needs no
//!   ROCm, and a machine without it, or without an AMD GPU, gets an error naming what is missing.
//! - Everything runs on the device's null stream: uploads and downloads are synchronous copies
//!   ordered after the kernels already launched, and a freed buffer waits for them. Simple and
//!   correct; the CUDA backend's pinned staging and stream-ordered pool are not mirrored yet.
//! - Kernels are compiled once per variant ([`KernelKey`]) for the device's architecture.
//! - [`RocmBackend`] is kiln's one plan executor ([`GpuBackend`]) on [`RocmRuntime`].
//!
//! Untested on a GPU: no AMD GPU was available when it was written. What runs without one is
//! the loading of the libraries, the errors, and hipRTC's compilation of translated kernels.
//!
//! ```no_run
//! use kiln_core::{DType, Tensor};
//! let dev = kiln::rocm::device(0)?;
//! let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32, &dev)?.reshape([2, 3])?;
//! println!("{:?}", x.softmax(-1)?.to_vec::<f32>()?);
//! # Ok::<(), kiln_core::Error>(())
//! ```

mod blas;
mod hip;

use crate::gpu::{self, KernelCache};
use hip::{Handle, Hip, Rtc};
use kiln_core::{
    Backend, DType, Device, Error, Meta, Op, ReadFuture, Result, Storage, TensorData, View,
};
use kiln_kernels::cuda::{Dialect, Options};
use kiln_kernels::exec::{GpuBackend, Launch, Runtime};
use kiln_kernels::plan::KernelKey;
use std::ffi::{CString, c_char, c_int, c_void};
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How the HIP backend computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RocmOptions {
    /// Run f32 matmul on rocBLAS when it is installed (the default). `false` runs every matmul
    /// through the translated WGSL GEMM.
    pub rocblas: bool,
}

impl Default for RocmOptions {
    fn default() -> Self {
        RocmOptions { rocblas: true }
    }
}

/// A kiln [`Device`] on AMD GPU `index`.
pub fn device(index: usize) -> Result<Device> {
    device_with(index, RocmOptions::default())
}

/// A kiln [`Device`] on AMD GPU `index` with `options`.
pub fn device_with(index: usize, options: RocmOptions) -> Result<Device> {
    Ok(Device::new(RocmBackend::new(index, options)?))
}

/// Compiles the HIP translation of variant `key` with hipRTC for `arch` (`gfx90a`; `None`: the
/// current device's) and returns the code object and its kernel's symbol. Needs ROCm's hipRTC
/// but no GPU when `arch` is given.
pub fn compile(key: &KernelKey, arch: Option<&str>) -> Result<(Vec<u8>, String)> {
    let (source, kernel) = gpu::translate(key, Options::new(Dialect::Hip), "rocm")?;
    let code = Rtc::open()?.compile(&source, &key.label(), arch)?;
    Ok((code, kernel.name))
}

struct Compiled {
    module: Handle,
    function: Handle,
    kernel: kiln_kernels::cuda::Kernel,
}
// SAFETY: HIP module and function handles may be used from any thread.
unsafe impl Send for Compiled {}
unsafe impl Sync for Compiled {}

struct Inner {
    hip: Hip,
    rtc: Rtc,
    index: c_int,
    name: String,
    kernels: KernelCache<Compiled>,
    /// rocBLAS once looked for: `Some(None)` when it is not installed.
    blas: Mutex<Option<Option<blas::Blas>>>,
    allocated: AtomicU64,
    options: RocmOptions,
}

impl Inner {
    /// Makes this device current on the calling thread (HIP's current device is per thread).
    fn bind(&self) -> Result<()> {
        // SAFETY: a valid device index, checked when the backend was opened.
        self.hip
            .check(unsafe { (self.hip.set_device)(self.index) }, "hipSetDevice")
    }
}

impl Drop for Inner {
    /// Runs when the backend and every buffer are gone: waits for the device, then releases
    /// rocBLAS and the kernel modules.
    fn drop(&mut self) {
        if self.bind().is_err() {
            return;
        }
        let hip = &self.hip;
        // SAFETY: nothing uses these handles any more; the device is drained first.
        unsafe {
            (hip.device_synchronize)();
            if let Ok(Some(Some(b))) = self.blas.get_mut().map(Option::take) {
                b.destroy();
            }
            self.kernels.drain(|k| {
                (hip.module_unload)(k.module);
            });
        }
    }
}

/// The HIP backend: [`GpuBackend`] on [`RocmRuntime`]. Create it with [`device`].
pub struct RocmBackend(GpuBackend<RocmRuntime>);

/// The [`Runtime`] of [`RocmBackend`]: hipRTC kernel cache, memory, copies and launches.
pub struct RocmRuntime {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RocmBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RocmBackend({})", self.0.runtime().inner.name)
    }
}

impl Deref for RocmBackend {
    type Target = RocmRuntime;
    fn deref(&self) -> &RocmRuntime {
        self.0.runtime()
    }
}

/// A device allocation, freed when the last tensor using it goes.
pub struct RocmBuffer {
    ptr: u64,
    bytes: u64,
    inner: Arc<Inner>,
}

impl Drop for RocmBuffer {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        let _ = self.inner.bind();
        // SAFETY: `ptr` came from hipMalloc and is no longer referenced; hipFree waits for the
        // kernels that may still use it.
        unsafe { (self.inner.hip.free)(self.ptr as Handle) };
        self.inner
            .allocated
            .fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

impl RocmBackend {
    /// Opens AMD GPU `index`. Errors name the missing library, the missing GPU or the failing
    /// call.
    pub fn new(index: usize, options: RocmOptions) -> Result<Self> {
        let hip = Hip::open()?;
        // SAFETY: plain calls with valid out-pointers.
        let count = unsafe {
            // hipInit fails with "no device" on machines without an AMD GPU: the count says so.
            (hip.init)(0);
            let mut count: c_int = 0;
            let status = (hip.get_device_count)(&mut count);
            if status != 0 {
                count = 0;
            }
            count
        };
        if count == 0 {
            return Err(Error::device(
                "rocm",
                "no AMD GPU found: the HIP runtime loaded but reports no device (is the amdgpu \
                 driver loaded and /dev/kfd accessible?)",
            ));
        }
        if index >= count as usize {
            return Err(Error::device(
                "rocm",
                format!("no AMD GPU {index}: this machine has {count}"),
            ));
        }
        let rtc = Rtc::open()?;
        let ordinal = index as c_int;
        let mut name = [0 as c_char; 256];
        // SAFETY: a valid ordinal and a buffer of the length passed.
        unsafe {
            hip.check((hip.set_device)(ordinal), "hipSetDevice")?;
            let mut dev: c_int = 0;
            hip.check((hip.device_get)(&mut dev, ordinal), "hipDeviceGet")?;
            hip.check(
                (hip.device_get_name)(name.as_mut_ptr(), name.len() as c_int, dev),
                "hipDeviceGetName",
            )?;
        }
        // SAFETY: NUL-terminated by HIP within the buffer (the last byte stays 0).
        let device_name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_string_lossy();
        Ok(RocmBackend(GpuBackend::from_runtime(RocmRuntime {
            inner: Arc::new(Inner {
                hip,
                rtc,
                index: ordinal,
                name: format!("rocm:{index}: {device_name}"),
                kernels: KernelCache::new("rocm"),
                blas: Mutex::new(None),
                allocated: AtomicU64::new(0),
                options,
            }),
        })))
    }
}

impl RocmRuntime {
    fn alloc(&self, bytes: u64) -> Result<RocmBuffer> {
        let mut ptr: Handle = std::ptr::null_mut();
        if bytes > 0 {
            self.inner.bind()?;
            // SAFETY: a fresh allocation into a valid out-pointer.
            let status = unsafe { (self.inner.hip.malloc)(&mut ptr, bytes as usize) };
            self.inner.hip.check(
                status,
                &format!("allocating {bytes} bytes (out of memory?)"),
            )?;
        }
        self.inner.allocated.fetch_add(bytes, Ordering::Relaxed);
        Ok(RocmBuffer {
            ptr: ptr as u64,
            bytes,
            inner: self.inner.clone(),
        })
    }

    /// Copies `bytes` to the start of `buf`, after the kernels already launched.
    fn write_bytes(&self, buf: &RocmBuffer, bytes: &[u8]) -> Result<()> {
        if bytes.len() as u64 > buf.bytes {
            return Err(Error::invalid(
                "rocm",
                format!("{} bytes do not fit a buffer of {}", bytes.len(), buf.bytes),
            ));
        }
        if bytes.is_empty() {
            return Ok(());
        }
        self.inner.bind()?;
        // SAFETY: `buf` holds at least `bytes.len()` bytes (checked above).
        let status = unsafe {
            (self.inner.hip.memcpy_htod)(buf.ptr as Handle, bytes.as_ptr().cast(), bytes.len())
        };
        self.inner.hip.check(status, "copying to the device")
    }

    /// The compiled kernel of `key`, translating and compiling it on first use.
    fn kernel(&self, key: &KernelKey) -> Result<Arc<Compiled>> {
        let hip = &self.inner.hip;
        self.inner.kernels.get_or_compile(
            key,
            0,
            || self.compile(key),
            // SAFETY: this module was never launched or shared.
            |k| unsafe {
                (hip.module_unload)(k.module);
            },
        )
    }

    fn compile(&self, key: &KernelKey) -> Result<Compiled> {
        let (source, kernel) = gpu::translate(key, Options::new(Dialect::Hip), "rocm")?;
        self.inner.bind()?;
        // hipRTC compiles for the current device's architecture.
        let code = self.inner.rtc.compile(&source, &key.label(), None)?;
        let hip = &self.inner.hip;
        let name = CString::new(kernel.name.clone())
            .map_err(|_| Error::device("rocm", "kernel name with a NUL byte"))?;
        let mut module: Handle = std::ptr::null_mut();
        let mut function: Handle = std::ptr::null_mut();
        // SAFETY: `code` is a code object for this device; the module is unloaded when the
        // backend goes, or here when the kernel is not in it.
        unsafe {
            hip.check(
                (hip.module_load_data)(&mut module, code.as_ptr().cast()),
                "loading a compiled kernel",
            )?;
            let found = (hip.module_get_function)(&mut function, module, name.as_ptr());
            if let Err(e) = hip.check(found, &format!("finding kernel {}", kernel.name)) {
                (hip.module_unload)(module);
                return Err(e);
            }
        }
        Ok(Compiled {
            module,
            function,
            kernel,
        })
    }
}

impl Runtime for RocmRuntime {
    type Buffer = RocmBuffer;
    /// Reads finish before [`Runtime::download`] returns.
    type Download = std::future::Ready<Result<Vec<u8>>>;

    fn name(&self) -> String {
        self.inner.name.clone()
    }

    fn prepare_thread(&self) -> Result<()> {
        self.inner.bind()
    }

    fn allocate(&self, bytes: u64, _op: &str) -> Result<RocmBuffer> {
        self.alloc(bytes)
    }

    fn write(&self, buffer: &RocmBuffer, bytes: &[u8]) -> Result<()> {
        self.write_bytes(buffer, bytes)
    }

    /// Uploads every dispatch's params at once, then launches the kernels.
    fn launch(&self, name: &str, dispatches: &[Launch<'_, RocmBuffer>]) -> Result<()> {
        let (words, at) = gpu::pack_params(dispatches);
        let params = self.alloc(words.len() as u64)?;
        self.write_bytes(&params, &words)?;
        for (d, &(offset, len)) in dispatches.iter().zip(&at) {
            let k = self.kernel(d.kernel)?;
            let mut values =
                gpu::kernel_args(name, d, &k.kernel, (params.ptr + offset, len), |b| {
                    (b.ptr, b.bytes)
                })?;
            let mut args: Vec<*mut c_void> = values
                .iter_mut()
                .map(|v| (v as *mut u64).cast::<c_void>())
                .collect();
            let [x, y, z] = d.workgroups;
            let [bx, by, bz] = k.kernel.workgroup_size;
            self.inner.bind()?;
            // SAFETY: every pointer parameter is a live allocation of this device bound as the
            // plan says; `u32` lengths are read from the low bytes of a little-endian u64.
            let status = unsafe {
                (self.inner.hip.module_launch_kernel)(
                    k.function,
                    x,
                    y,
                    z,
                    bx,
                    by,
                    bz,
                    0,
                    std::ptr::null_mut(),
                    args.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            };
            self.inner
                .hip
                .check(status, &format!("{name}: launching {}", d.kernel.label()))?;
        }
        Ok(())
    }

    /// Copies synchronously, after the kernels already launched.
    fn download(&self, buffer: &RocmBuffer, offset: u64, bytes: u64) -> Result<Self::Download> {
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
        if bytes > 0 {
            self.inner.bind()?;
            // SAFETY: `buffer` holds `offset + bytes` bytes (checked above).
            let status = unsafe {
                (self.inner.hip.memcpy_dtoh)(
                    host.as_mut_ptr().cast(),
                    (buffer.ptr + offset) as Handle,
                    bytes as usize,
                )
            };
            self.inner.hip.check(status, "copying to the host")?;
        }
        Ok(std::future::ready(Ok(host)))
    }

    fn allocated_bytes(&self) -> u64 {
        self.inner.allocated.load(Ordering::Relaxed)
    }

    fn synchronize(&self) -> Result<()> {
        self.inner.bind()?;
        // SAFETY: a plain call.
        let status = unsafe { (self.inner.hip.device_synchronize)() };
        self.inner.hip.check(status, "waiting for the GPU")
    }

    /// f32 matmul on rocBLAS when [`RocmOptions::rocblas`] is on, rocBLAS is installed and the
    /// views map to it.
    fn execute_without_plan(
        &self,
        op: &Op,
        inputs: &[View<'_>],
        buffers: &[&RocmBuffer],
        outputs: &[Meta],
    ) -> Result<Option<RocmBuffer>> {
        if let (Op::Matmul, [(DType::F32, out_shape)]) = (op, outputs)
            && self.inner.options.rocblas
        {
            blas::matmul(self, inputs, buffers, out_shape)
        } else {
            Ok(None)
        }
    }
}

/// Every method is [`GpuBackend`]'s, the executor the other GPU backends share.
impl Backend for RocmBackend {
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
mod tests;
