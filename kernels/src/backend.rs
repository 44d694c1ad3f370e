//! The wgpu backend: executes [`crate::plan`] plans on WebGPU, Vulkan, Metal, DX12 or GL.

use crate::plan::{self, Buffer, ELEM_BYTES, KernelKey, ViewMeta};
use kiln_core::{Backend, DType, Error, Op, ReadFuture, Result, Shape, Storage, TensorData, View};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

/// How to pick the GPU.
#[derive(Clone, Debug)]
pub struct WgpuOptions {
    /// Which native APIs to try (all by default; browsers always use WebGPU).
    pub backends: wgpu::Backends,
    /// Prefer the discrete or the integrated GPU.
    pub power_preference: wgpu::PowerPreference,
    /// Use a software adapter (lavapipe, WARP) even when a GPU exists.
    pub force_fallback_adapter: bool,
}

impl Default for WgpuOptions {
    fn default() -> Self {
        WgpuOptions {
            backends: wgpu::Backends::all(),
            power_preference: wgpu::PowerPreference::HighPerformance,
            force_fallback_adapter: false,
        }
    }
}

/// The wgpu device as a kiln [`Backend`]. Cheap to clone.
#[derive(Clone)]
pub struct WgpuBackend {
    inner: Arc<Inner>,
}

struct Inner {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    limits: wgpu::Limits,
    pipelines: Mutex<HashMap<KernelKey, wgpu::ComputePipeline>>,
    /// Free buffers by bucket size, reused by later allocations.
    pool: Mutex<HashMap<u64, Vec<wgpu::Buffer>>>,
    allocated: AtomicU64,
    /// The first error wgpu reported outside a call that could return it.
    error: Arc<Mutex<Option<String>>>,
    /// Ops recorded but not yet submitted: one submission per op costs more than most small
    /// kernels, so ops are batched (see [`BATCH_OPS`]).
    batch: Mutex<Batch>,
}

/// Ops per submission at most. Work is also submitted before anything that must see it:
/// an upload (`write_buffer` runs before the next submission, and could otherwise overwrite
/// a pooled buffer that recorded ops still read), a read and a synchronize. The GPU starts on
/// a batch only once it is submitted, so long batches leave it idle while the host records
/// them: on an H100 through Vulkan, batches of 1, 8, 32, 128 and 1024 ran a 1024 matmul at
/// 18.1, 19.7, 16.9, 16.3 and 16.6 TFLOP/s, and a row sum at 2264, 2521, 2228, 2098 and 2120 GB/s.
const BATCH_OPS: usize = 8;

#[derive(Default)]
struct Batch {
    encoder: Option<wgpu::CommandEncoder>,
    ops: usize,
    /// Params buffers of the recorded ops, and free ones by size. A params buffer is written
    /// with `write_buffer`, which lands before the next submission's commands, so one is only
    /// reused once the ops that read it were submitted. (A buffer created per dispatch cost more
    /// host time than a small kernel takes on the GPU.)
    params_in_use: Vec<wgpu::Buffer>,
    params_free: HashMap<u64, Vec<wgpu::Buffer>>,
}

impl Batch {
    fn submit(&mut self, queue: &wgpu::Queue) {
        self.ops = 0;
        if let Some(e) = self.encoder.take() {
            queue.submit([e.finish()]);
        }
        for b in self.params_in_use.drain(..) {
            self.params_free.entry(b.size()).or_default().push(b);
        }
    }

    /// A storage buffer holding `words`, for an op about to be recorded in this batch.
    fn params(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        words: &[u32],
    ) -> wgpu::Buffer {
        let bytes: &[u8] = bytemuck::cast_slice(words);
        let size = bucket(bytes.len() as u64);
        let buffer = self
            .params_free
            .get_mut(&size)
            .and_then(Vec::pop)
            .unwrap_or_else(|| {
                device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("kiln params"),
                    size,
                    usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            });
        queue.write_buffer(&buffer, 0, bytes);
        self.params_in_use.push(buffer.clone());
        buffer
    }
}

/// A device buffer holding one tensor's elements (4 bytes each); back to the pool on drop.
struct GpuBuffer {
    buffer: wgpu::Buffer,
    owner: Arc<Inner>,
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        // Later submissions on the one queue are ordered after the work that used this buffer,
        // so it can be handed out again at once.
        if let Ok(mut pool) = self.owner.pool.lock() {
            pool.entry(self.buffer.size())
                .or_default()
                .push(self.buffer.clone());
        }
    }
}

impl std::fmt::Debug for WgpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WgpuBackend({})", self.name())
    }
}

/// Size class of an allocation: powers of two split in quarters (at most 25% unused).
fn bucket(bytes: u64) -> u64 {
    if bytes <= 256 {
        return 256;
    }
    let quarter = bytes.next_power_of_two() / 4;
    bytes.div_ceil(quarter) * quarter
}

impl WgpuBackend {
    /// Opens the best adapter for `options`. Fails with a clear error when there is none.
    pub async fn new(options: WgpuOptions) -> Result<Self> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = options.backends;
        let instance = wgpu::Instance::new(desc);
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: options.power_preference,
                force_fallback_adapter: options.force_fallback_adapter,
                compatible_surface: None,
                ..Default::default()
            })
            .await
            .map_err(|e| {
                Error::device(
                    "wgpu",
                    format!(
                        "no GPU adapter found for backends {:?} ({e}); install a Vulkan/Metal/DX12 driver (lavapipe: mesa-vulkan-drivers) or use the cpu device",
                        options.backends
                    ),
                )
            })?;
        let limits = adapter.limits();
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("kiln"),
                required_features: wgpu::Features::empty(),
                required_limits: limits.clone(),
                ..Default::default()
            })
            .await
            .map_err(|e| Error::device("wgpu", format!("could not open the device: {e}")))?;
        let error = Arc::new(Mutex::new(None));
        let sink = error.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            if let Ok(mut slot) = sink.lock() {
                slot.get_or_insert_with(|| e.to_string());
            }
        }));
        Ok(WgpuBackend {
            inner: Arc::new(Inner {
                device,
                queue,
                info: adapter.get_info(),
                limits,
                pipelines: Mutex::default(),
                pool: Mutex::default(),
                allocated: AtomicU64::new(0),
                error,
                batch: Mutex::default(),
            }),
        })
    }

    /// [`WgpuBackend::new`], waiting for the adapter. Native only.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new_blocking(options: WgpuOptions) -> Result<Self> {
        kiln_core::block_on(Self::new(options))
    }

    /// The adapter's description (name, API, driver).
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.inner.info
    }

    /// The wgpu device this backend runs on (benchmarks and interop use it beside the backend).
    pub fn wgpu_device(&self) -> &wgpu::Device {
        &self.inner.device
    }

    /// The queue this backend submits to.
    pub fn wgpu_queue(&self) -> &wgpu::Queue {
        &self.inner.queue
    }

    /// Submits the recorded ops, then runs `then` before any other thread can record or submit
    /// (a `write_buffer` from another thread could otherwise slip ahead of this submission).
    fn flushed<R>(&self, op: &str, then: impl FnOnce() -> R) -> Result<R> {
        let mut batch = self
            .inner
            .batch
            .lock()
            .map_err(|_| Error::device(op.to_string(), "the command batch lock is poisoned"))?;
        batch.submit(&self.inner.queue);
        Ok(then())
    }

    /// Fails with the first error wgpu reported asynchronously, naming `op`.
    fn check(&self, op: &str) -> Result<()> {
        take_gpu_error(&self.inner.error, op)
    }

    fn alloc(&self, bytes: u64, op: &str) -> Result<GpuBuffer> {
        let size = bucket(bytes.max(ELEM_BYTES));
        let max = self
            .inner
            .limits
            .max_storage_buffer_binding_size
            .min(self.inner.limits.max_buffer_size);
        if size > max {
            return Err(Error::device(
                op.to_string(),
                format!(
                    "a tensor of {bytes} bytes does not fit this device's largest storage buffer ({max} bytes)"
                ),
            ));
        }
        let reused = self
            .inner
            .pool
            .lock()
            .ok()
            .and_then(|mut p| p.get_mut(&size).and_then(Vec::pop));
        let buffer = match reused {
            Some(b) => b,
            None => {
                self.inner.allocated.fetch_add(size, Ordering::Relaxed);
                self.inner.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("kiln tensor"),
                    size,
                    usage: wgpu::BufferUsages::STORAGE
                        | wgpu::BufferUsages::COPY_SRC
                        | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                })
            }
        };
        Ok(GpuBuffer {
            buffer,
            owner: self.inner.clone(),
        })
    }

    fn pipeline(&self, key: &KernelKey) -> Result<wgpu::ComputePipeline> {
        if let Some(p) = self
            .inner
            .pipelines
            .lock()
            .ok()
            .and_then(|c| c.get(key).cloned())
        {
            return Ok(p);
        }
        let label = key.label();
        let source = key.wgsl()?;
        let device = &self.inner.device;
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(&label),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        };
        // Natively, without the bounds clamps and loop counters wgpu injects into every access
        // and loop: they keep a matmul's register tiles in local memory (about 10x slower on an
        // NVIDIA GPU through Vulkan). Browsers always check, whatever is asked here.
        // SAFETY: every kernel indexes only inside the buffers its plan sizes (the planner
        // computes each dispatch's extents from the same shapes it allocates), which the
        // conformance suite checks op by op against the CPU oracle, and every loop is bounded by
        // a shape parameter.
        #[cfg(not(target_arch = "wasm32"))]
        let module = unsafe {
            device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
        };
        #[cfg(target_arch = "wasm32")]
        let module = device.create_shader_module(desc);
        let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(&label),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            // Every kernel writes its workgroup memory before a barrier and reads it after, so
            // the zero fill wgpu would otherwise add to the start of every workgroup (a store
            // loop and a barrier) is only overhead. Browsers fill it whatever is asked here.
            compilation_options: wgpu::PipelineCompilationOptions {
                zero_initialize_workgroup_memory: false,
                ..Default::default()
            },
            cache: None,
        });
        self.check(&label)?;
        if let Ok(mut c) = self.inner.pipelines.lock() {
            c.insert(key.clone(), pipeline.clone());
        }
        Ok(pipeline)
    }

    /// Runs `plan` with `inputs`; returns the output buffer.
    fn run(&self, name: &str, plan: &plan::Plan, inputs: &[&wgpu::Buffer]) -> Result<GpuBuffer> {
        let out = self.alloc(plan.output_bytes, name)?;
        let scratch = plan
            .scratch_bytes
            .iter()
            .map(|&b| self.alloc(b, name))
            .collect::<Result<Vec<_>>>()?;
        if plan.dispatches.is_empty() {
            return Ok(out);
        }
        let device = &self.inner.device;
        let pipelines = plan
            .dispatches
            .iter()
            .map(|d| self.pipeline(&d.kernel))
            .collect::<Result<Vec<_>>>()?;
        // Params are written and the op recorded under one hold of the lock, so that no other
        // thread submits the batch (freeing the params buffers for reuse) in between.
        let mut batch =
            self.inner.batch.lock().map_err(|_| {
                Error::device(name.to_string(), "the command batch lock is poisoned")
            })?;
        let mut groups = Vec::with_capacity(plan.dispatches.len());
        for (d, pipeline) in plan.dispatches.iter().zip(pipelines) {
            let mut words = d.params.clone();
            if words.is_empty() {
                words.push(0);
            }
            let params = batch.params(device, &self.inner.queue, &words);
            let mut entries = vec![wgpu::BindGroupEntry {
                binding: 0,
                resource: params.as_entire_binding(),
            }];
            for (i, b) in d.buffers.iter().enumerate() {
                let buf = match *b {
                    Buffer::Input(k) => *inputs.get(k).ok_or_else(|| {
                        Error::invalid(
                            name.to_string(),
                            format!("plan binds input {k} of {}", inputs.len()),
                        )
                    })?,
                    Buffer::Output => &out.buffer,
                    Buffer::Scratch(k) => {
                        &scratch
                            .get(k)
                            .ok_or_else(|| {
                                Error::invalid(name.to_string(), format!("plan binds scratch {k}"))
                            })?
                            .buffer
                    }
                };
                entries.push(wgpu::BindGroupEntry {
                    binding: i as u32 + 1,
                    resource: buf.as_entire_binding(),
                });
            }
            let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipeline.get_bind_group_layout(0),
                entries: &entries,
            });
            groups.push((pipeline, group, d.workgroups));
        }
        let encoder = batch.encoder.get_or_insert_with(|| {
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("kiln batch"),
            })
        });
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some(name),
            timestamp_writes: None,
        });
        for (pipeline, group, [x, y, z]) in &groups {
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, group, &[]);
            pass.dispatch_workgroups(*x, *y, *z);
        }
        drop(pass);
        batch.ops += 1;
        if batch.ops >= BATCH_OPS {
            batch.submit(&self.inner.queue);
        }
        drop(batch);
        self.check(name)?;
        Ok(out)
    }

    fn buffer_of<'a>(&self, v: &View<'a>, op: &str) -> Result<&'a wgpu::Buffer> {
        v.storage
            .downcast::<GpuBuffer>()
            .map(|b| &b.buffer)
            .ok_or_else(|| {
                Error::device(
                    op.to_string(),
                    format!("an input tensor ({}) is not on {}", v.dtype, self.name()),
                )
            })
    }
}

impl Backend for WgpuBackend {
    fn name(&self) -> String {
        format!(
            "wgpu: {} ({:?})",
            self.inner.info.name, self.inner.info.backend
        )
    }

    fn upload(&self, data: &TensorData) -> Result<Storage> {
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
                    format!("{other} tensors are not supported on {}", self.name()),
                ));
            }
        };
        let buf = self.alloc(bytes.len() as u64, "upload")?;
        if !bytes.is_empty() {
            self.flushed("upload", || {
                self.inner.queue.write_buffer(&buf.buffer, 0, &bytes)
            })?;
        }
        self.check("upload")?;
        Ok(Storage::new(buf))
    }

    fn execute(
        &self,
        op: &Op,
        inputs: &[View<'_>],
        out_dtype: DType,
        out_shape: &Shape,
    ) -> Result<Storage> {
        let name = op.name();
        let metas: Vec<ViewMeta> = inputs.iter().map(|v| ViewMeta::from(*v)).collect();
        let plan = plan::plan(op, &metas, out_dtype, out_shape)?;
        let bufs = inputs
            .iter()
            .map(|v| self.buffer_of(v, name))
            .collect::<Result<Vec<_>>>()?;
        Ok(Storage::new(self.run(name, &plan, &bufs)?))
    }

    fn read(&self, input: View<'_>) -> ReadFuture {
        let start = || -> Result<Option<Pending>> {
            let shape = input.layout.shape().clone();
            let numel = shape.numel();
            if numel == 0 {
                return Ok(None);
            }
            let bytes = numel as u64 * ELEM_BYTES;
            let src = self.buffer_of(&input, "read")?;
            // strided views are first copied into a contiguous buffer
            let (copy, offset) = if input.layout.is_contiguous() {
                (None, input.layout.offset() as u64 * ELEM_BYTES)
            } else {
                let meta = ViewMeta::from(input);
                let p = plan::plan(&Op::Contiguous, &[meta], input.dtype, &shape)?;
                (Some(self.run("read", &p, &[src])?), 0)
            };
            let from = copy.as_ref().map_or(src, |c| &c.buffer);
            let staging = self.inner.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("kiln readback"),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let mut encoder =
                self.inner
                    .device
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some("read"),
                    });
            encoder.copy_buffer_to_buffer(from, offset, &staging, 0, bytes);
            self.flushed("read", || self.inner.queue.submit([encoder.finish()]))?;
            let state: Arc<Mutex<MapState>> = Arc::default();
            let s = state.clone();
            staging.map_async(wgpu::MapMode::Read, .., move |r| {
                if let Ok(mut st) = s.lock() {
                    st.done = Some(r.map_err(|e| e.to_string()));
                    if let Some(w) = st.waker.take() {
                        w.wake();
                    }
                }
            });
            self.check("read")?;
            Ok(Some(Pending {
                staging,
                state,
                device: self.inner.device.clone(),
                error: self.inner.error.clone(),
            }))
        };
        let (dtype, shape) = (input.dtype, input.layout.shape().clone());
        match start() {
            Err(e) => Box::pin(std::future::ready(Err(e))),
            Ok(None) => Box::pin(std::future::ready(TensorData::from_bytes(
                Vec::new(),
                dtype,
                shape,
            ))),
            Ok(Some(p)) => Box::pin(ReadBack {
                pending: p,
                dtype,
                shape,
            }),
        }
    }

    fn supports(&self, dtype: DType) -> bool {
        matches!(dtype, DType::F32 | DType::I32 | DType::U32 | DType::Bool)
    }

    fn allocated_bytes(&self) -> Option<u64> {
        Some(self.inner.allocated.load(Ordering::Relaxed))
    }

    fn synchronize(&self) -> Result<()> {
        self.flushed("synchronize", || ())?;
        #[cfg(not(target_arch = "wasm32"))]
        self.inner
            .device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::device("synchronize", e.to_string()))?;
        self.check("synchronize")
    }
}

/// The first error the device reported since the last check (validation errors in browsers
/// arrive asynchronously, after the work that caused them was submitted).
fn take_gpu_error(slot: &Mutex<Option<String>>, op: &str) -> Result<()> {
    match slot.lock().ok().and_then(|mut e| e.take()) {
        Some(e) => Err(Error::device(
            op.to_string(),
            format!("the GPU rejected the work: {e}"),
        )),
        None => Ok(()),
    }
}

#[derive(Default)]
struct MapState {
    done: Option<std::result::Result<(), String>>,
    waker: Option<Waker>,
}

struct Pending {
    staging: wgpu::Buffer,
    state: Arc<Mutex<MapState>>,
    /// Polled natively; browsers drive mapping from their event loop.
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    device: wgpu::Device,
    /// The device's error slot: a shader that failed to build must not read back as numbers.
    error: Arc<Mutex<Option<String>>>,
}

/// The future of [`Backend::read`]: resolves once the staging buffer is mapped. Natively its
/// `poll` drives `device.poll`; in browsers the map callback wakes it.
struct ReadBack {
    pending: Pending,
    dtype: DType,
    shape: Shape,
}

impl Future for ReadBack {
    type Output = Result<TensorData>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        #[cfg(not(target_arch = "wasm32"))]
        let _ = this.pending.device.poll(wgpu::PollType::Poll);
        let done = {
            let Ok(mut st) = this.pending.state.lock() else {
                return Poll::Ready(Err(Error::device("read", "readback state poisoned")));
            };
            match st.done.take() {
                Some(r) => r,
                None => {
                    st.waker = Some(cx.waker().clone());
                    #[cfg(not(target_arch = "wasm32"))]
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
            }
        };
        if let Err(e) = done {
            return Poll::Ready(Err(Error::device(
                "read",
                format!("mapping the readback buffer failed: {e}"),
            )));
        }
        let bytes = {
            let view = match this.pending.staging.get_mapped_range(..) {
                Ok(v) => v,
                Err(e) => {
                    return Poll::Ready(Err(Error::device(
                        "read",
                        format!("the readback buffer is not readable: {e}"),
                    )));
                }
            };
            match this.dtype {
                DType::Bool => view
                    .chunks_exact(4)
                    .map(|c| u8::from(c != [0, 0, 0, 0]))
                    .collect(),
                _ => view.to_vec(),
            }
        };
        this.pending.staging.unmap();
        if let Err(e) = take_gpu_error(&this.pending.error, "read") {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(TensorData::from_bytes(
            bytes,
            this.dtype,
            this.shape.clone(),
        ))
    }
}
