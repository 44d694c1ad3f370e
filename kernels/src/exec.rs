//! One plan executor for every GPU backend: [`GpuBackend`] implements kiln's [`Backend`] on any
//! [`Runtime`] (wgpu here, CUDA in the `kiln` crate).
//!
//! The runtime only moves bytes and launches kernels. Everything the backends share is here,
//! once: planning, resolving [`Buffer`]s to the runtime's buffers, allocating outputs and
//! scratch, buffers for empty tensors, the device copy of a strided view before a read, bool
//! stored as u32, the dtypes a GPU holds and the error for a tensor of another device.
//!
//! ```no_run
//! use kiln_core::{Backend, DType, Shape, TensorData};
//! // The wgpu backend is `GpuBackend<WgpuRuntime>`.
//! let gpu: kiln_kernels::WgpuBackend =
//!     kiln_kernels::WgpuBackend::new_blocking(Default::default())?;
//! let x = gpu.upload(&TensorData::from_bytes(vec![0; 8], DType::F32, Shape::from([2]))?)?;
//! # Ok::<(), kiln_core::Error>(())
//! ```

use crate::plan::{self, Buffer, ELEM_BYTES, KernelKey, Plan, ViewMeta};
use kiln_core::{
    Backend, DType, Error, Layout, Meta, Op, ReadFuture, Result, Shape, Storage, TensorData, View,
};
use std::future::Future;

/// A GPU API that can run kiln's plans: memory, copies and kernel launches. [`GpuBackend`]
/// builds a [`Backend`] on it.
///
/// Every buffer the backend asks for holds at least [`ELEM_BYTES`] (plans assume it, even for
/// empty tensors), and every tensor element is 4 bytes on the device (bool as u32 0/1).
pub trait Runtime: Send + Sync + 'static {
    /// A device allocation (a tensor, a plan's scratch), released when dropped.
    type Buffer: Send + Sync + 'static;
    /// What [`Runtime::download`] returns: resolves to the bytes once they reached the host.
    type Download: Future<Output = Result<Vec<u8>>> + 'static;

    /// The device's name, as [`Backend::name`] reports it.
    fn name(&self) -> String;

    /// Prepares the calling thread for the calls that follow (CUDA makes its context current).
    /// Every [`Backend`] method of [`GpuBackend`] calls it first. Does nothing by default.
    fn prepare_thread(&self) -> Result<()> {
        Ok(())
    }

    /// A fresh buffer of at least `bytes` bytes (`bytes >= ELEM_BYTES`); errors name `op`.
    fn allocate(&self, bytes: u64, op: &str) -> Result<Self::Buffer>;

    /// Copies `bytes` to the start of `buffer`, after the work already recorded or launched.
    fn write(&self, buffer: &Self::Buffer, bytes: &[u8]) -> Result<()>;

    /// Copies `bytes` bytes from `src_offset` of `src` to `dst_offset` of `dst`, after the work
    /// already recorded or launched. Returns `false` where the runtime cannot (the default).
    fn copy(
        &self,
        src: &Self::Buffer,
        src_offset: u64,
        dst: &Self::Buffer,
        dst_offset: u64,
        bytes: u64,
    ) -> Result<bool> {
        let _ = (src, src_offset, dst, dst_offset, bytes);
        Ok(false)
    }

    /// Records or launches the dispatches of one plan of `op`, in order.
    fn launch(&self, op: &str, dispatches: &[Launch<'_, Self::Buffer>]) -> Result<()>;

    /// Starts copying `bytes` bytes from `offset` of `buffer` to the host, after the work
    /// already recorded or launched.
    fn download(&self, buffer: &Self::Buffer, offset: u64, bytes: u64) -> Result<Self::Download>;

    /// Bytes of device memory this runtime holds.
    fn allocated_bytes(&self) -> u64;

    /// Waits until all recorded or launched work is done.
    fn synchronize(&self) -> Result<()>;

    /// Runs `op` without a plan when this runtime has a better way (CUDA: f32 matmul on
    /// cuBLAS). `Ok(None)`, the default, runs the op's plan.
    fn execute_without_plan(
        &self,
        op: &Op,
        inputs: &[View<'_>],
        buffers: &[&Self::Buffer],
        outputs: &[Meta],
    ) -> Result<Option<Self::Buffer>> {
        let _ = (op, inputs, buffers, outputs);
        Ok(None)
    }
}

/// One [`plan::Dispatch`] with its buffers resolved, as [`Runtime::launch`] receives it.
pub struct Launch<'a, B> {
    /// The kernel variant.
    pub kernel: &'a KernelKey,
    /// The words bound at binding 0 (may be empty).
    pub params: &'a [u32],
    /// The buffers bound at 1, 2, ..., in order.
    pub buffers: Vec<&'a B>,
    /// Workgroups along x, y, z.
    pub workgroups: [u32; 3],
}

/// kiln's [`Backend`] on a [`Runtime`]: the one implementation every GPU backend shares.
#[derive(Clone)]
pub struct GpuBackend<R> {
    runtime: R,
}

impl<R: Runtime> GpuBackend<R> {
    /// The backend running on `runtime`.
    pub fn from_runtime(runtime: R) -> Self {
        GpuBackend { runtime }
    }

    /// The runtime it runs on.
    pub fn runtime(&self) -> &R {
        &self.runtime
    }

    /// The runtime's buffer behind `view`, or an error naming `op` for another device's tensor.
    fn buffer_of<'a>(&self, view: &View<'a>, op: &str) -> Result<&'a R::Buffer> {
        view.storage.downcast::<R::Buffer>().ok_or_else(|| {
            Error::device(
                op.to_string(),
                format!(
                    "an input tensor ({}) is not on {}",
                    view.dtype,
                    self.runtime.name()
                ),
            )
        })
    }

    /// Runs `plan` on `inputs`; returns the output buffers.
    fn run(&self, op: &str, plan: &Plan, inputs: &[&R::Buffer]) -> Result<Vec<R::Buffer>> {
        let allocate = |bytes: u64| self.runtime.allocate(bytes.max(ELEM_BYTES), op);
        let outs = (plan.output_bytes.iter())
            .map(|&b| allocate(b))
            .collect::<Result<Vec<_>>>()?;
        let scratch = plan
            .scratch_bytes
            .iter()
            .map(|&b| allocate(b))
            .collect::<Result<Vec<_>>>()?;
        if plan.dispatches.is_empty() {
            return Ok(outs);
        }
        let mut launches = Vec::with_capacity(plan.dispatches.len());
        for d in &plan.dispatches {
            let mut buffers = Vec::with_capacity(d.buffers.len());
            for (i, b) in d.buffers.iter().enumerate() {
                let buffer = match *b {
                    Buffer::Input(k) => inputs.get(k).copied(),
                    Buffer::Output(k) => outs.get(k),
                    Buffer::Scratch(k) => scratch.get(k),
                };
                buffers.push(buffer.ok_or_else(|| {
                    Error::invalid(
                        op.to_string(),
                        format!(
                            "{}: binding {} is {b:?}, but the op has {} inputs and {} outputs and the plan {} scratch buffers",
                            d.kernel.label(),
                            i + 1,
                            inputs.len(),
                            outs.len(),
                            scratch.len()
                        ),
                    )
                })?);
            }
            launches.push(Launch {
                kernel: &d.kernel,
                params: &d.params,
                buffers,
                workgroups: d.workgroups,
            });
        }
        self.runtime.launch(op, &launches)?;
        Ok(outs)
    }
}

impl<R: Runtime> std::fmt::Debug for GpuBackend<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuBackend({})", self.runtime.name())
    }
}

impl<R: Runtime> Backend for GpuBackend<R> {
    fn name(&self) -> String {
        self.runtime.name()
    }

    fn upload(&self, data: &TensorData) -> Result<Storage> {
        self.runtime.prepare_thread()?;
        let bytes: Vec<u8> = match data.dtype() {
            DType::F32 | DType::I32 | DType::U32 => data.as_bytes().to_vec(),
            DType::Bool => data
                .as_bytes()
                .iter()
                .flat_map(|&b| u32::from(b != 0).to_le_bytes())
                .collect(),
            other => {
                return Err(Error::unsupported(
                    "upload",
                    format!(
                        "{other} tensors are not supported on {} (f32, i32, u32 and bool are)",
                        self.runtime.name()
                    ),
                ));
            }
        };
        let buffer = self
            .runtime
            .allocate((bytes.len() as u64).max(ELEM_BYTES), "upload")?;
        if !bytes.is_empty() {
            self.runtime.write(&buffer, &bytes)?;
        }
        Ok(Storage::new(buffer))
    }

    fn execute(&self, op: &Op, inputs: &[View<'_>], outputs: &[Meta]) -> Result<Vec<Storage>> {
        self.runtime.prepare_thread()?;
        let name = op.name();
        let buffers = inputs
            .iter()
            .map(|v| self.buffer_of(v, name))
            .collect::<Result<Vec<_>>>()?;
        if let Some(out) = self
            .runtime
            .execute_without_plan(op, inputs, &buffers, outputs)?
        {
            return Ok(vec![Storage::new(out)]);
        }
        // a fused epilogue whose product the runtime's library computes (cuBLAS, cuDNN): the
        // product is stored, then the chain runs as its own kernel
        if let Op::Custom(call) = op
            && let Some(ep) = crate::fusion::epilogue::lookup(&call.name)
            && inputs.len() >= 2
        {
            let metas: Vec<Meta> = (inputs.iter())
                .map(|v| (v.dtype, v.layout.shape().clone()))
                .collect();
            let product = ep.product_meta(&metas)?;
            if let Some(p) = self.runtime.execute_without_plan(
                ep.product(),
                &inputs[..2],
                &buffers[..2],
                std::slice::from_ref(&product),
            )? {
                let p = Storage::new(p);
                let layout = Layout::contiguous(outputs[0].1.clone());
                let views = ep.chain_inputs(&p, &layout, &inputs[2..]);
                return self.execute(&Op::Custom(ep.chain_call(call)), &views, outputs);
            }
        }
        let metas: Vec<ViewMeta> = inputs.iter().map(|v| ViewMeta::from(*v)).collect();
        let plan = plan::plan(op, &metas, outputs)?;
        let outs = self.run(name, &plan, &buffers)?;
        Ok(outs.into_iter().map(Storage::new).collect())
    }

    fn read(&self, input: View<'_>) -> ReadFuture {
        let (dtype, shape) = (input.dtype, input.layout.shape().clone());
        let start = || -> Result<Option<R::Download>> {
            self.runtime.prepare_thread()?;
            let src = self.buffer_of(&input, "read")?;
            let bytes = shape.numel() as u64 * ELEM_BYTES;
            if bytes == 0 {
                return Ok(None);
            }
            if input.layout.is_contiguous() {
                let offset = input.layout.offset() as u64 * ELEM_BYTES;
                return self.runtime.download(src, offset, bytes).map(Some);
            }
            // A strided view is first copied into a contiguous buffer on the device.
            let outputs = [(dtype, shape.clone())];
            let p = plan::plan(&Op::Contiguous, &[ViewMeta::from(input)], &outputs)?;
            let copy = self.run("read", &p, &[src])?;
            self.runtime.download(&copy[0], 0, bytes).map(Some)
        };
        let started = start();
        Box::pin(async move {
            let bytes = match started? {
                Some(download) => download.await?,
                None => Vec::new(),
            };
            from_device_bytes(bytes, dtype, shape)
        })
    }

    fn write(&self, dst: &mut Storage, offset: usize, src: View<'_>) -> Result<bool> {
        self.runtime.prepare_thread()?;
        if !src.layout.is_contiguous() {
            return Ok(false);
        }
        let from = self.buffer_of(&src, "write")?;
        let name = self.runtime.name();
        let to = dst.downcast::<R::Buffer>().ok_or_else(|| {
            Error::device("write", format!("the tensor written is not on {name}"))
        })?;
        let at = |elements: usize| elements as u64 * ELEM_BYTES;
        let bytes = at(src.layout.shape().numel());
        self.runtime
            .copy(from, at(src.layout.offset()), to, at(offset), bytes)
    }

    fn supports(&self, dtype: DType) -> bool {
        matches!(dtype, DType::F32 | DType::I32 | DType::U32 | DType::Bool)
    }

    fn allocated_bytes(&self) -> Option<u64> {
        Some(self.runtime.allocated_bytes())
    }

    fn synchronize(&self) -> Result<()> {
        self.runtime.prepare_thread()?;
        self.runtime.synchronize()
    }
}

/// Device bytes of a contiguous tensor -> host data (bool narrowed from u32 to one byte).
fn from_device_bytes(bytes: Vec<u8>, dtype: DType, shape: Shape) -> Result<TensorData> {
    let bytes = match dtype {
        DType::Bool => bytes
            .chunks_exact(4)
            .map(|c| u8::from(c != [0, 0, 0, 0]))
            .collect(),
        _ => bytes,
    };
    TensorData::from_bytes(bytes, dtype, shape)
}
