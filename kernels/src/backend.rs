//! The wgpu backend: executes [`crate::plan`] plans on WebGPU, Vulkan, Metal, DX12 or GL.
//! [`GpuBackend`] does the backend's part; [`WgpuRuntime`] records and submits the work.

use crate::exec::{GpuBackend, Launch, Runtime};
use crate::plan::KernelKey;
use kiln_core::{Error, Result};
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

/// The wgpu device as a kiln [`Backend`](kiln_core::Backend). Cheap to clone.
pub type WgpuBackend = GpuBackend<WgpuRuntime>;

/// The [`Runtime`] of [`WgpuBackend`]: pipeline cache, buffer pool and batched submissions on
/// one wgpu device and queue. Cheap to clone.
#[derive(Clone)]
pub struct WgpuRuntime {
    inner: Arc<Inner>,
}

struct Inner {
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    limits: wgpu::Limits,
    /// Each kernel's pipeline and its bind group layout (asked of wgpu once, not per dispatch).
    pipelines: Mutex<HashMap<KernelKey, Pipeline>>,
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
/// After a wait the GPU is idle, so batches start at 1 op and double up to this (see
/// [`Batch::recorded`]).
const BATCH_OPS: usize = 8;

type Pipeline = (wgpu::ComputePipeline, wgpu::BindGroupLayout);

/// Bytes of one params buffer: the params of the dispatches recorded into a batch are packed
/// into such buffers and written with one `write_buffer` each, not one per dispatch (wgpu makes
/// and maps a staging buffer for every write).
const PARAMS_CHUNK: u64 = 16 << 10;

#[derive(Default)]
struct Batch {
    encoder: Option<wgpu::CommandEncoder>,
    /// The compute pass open on `encoder`: the batch's launches share it until a copy or the
    /// submission ends it (wgpu orders and fences its dispatches as it does across passes). A
    /// pass per launch cost wgpu 4.8k more host instructions per composed GELU (lavapipe: 97.2k
    /// against 92.4k); the passes lose the ops' names as labels.
    pass: Option<wgpu::ComputePass<'static>>,
    ops: usize,
    /// Batches submitted since the last wait: the next holds `2^ramp` ops, at most
    /// [`BATCH_OPS`].
    ramp: u32,
    /// The params buffer being filled and its bytes so far (written when it is full or the
    /// batch is submitted).
    params: Option<(wgpu::Buffer, Vec<u8>)>,
    /// Params buffers written for the recorded ops, and free ones by size. `write_buffer`
    /// lands before the next submission's commands, so a buffer is only reused once the ops
    /// that read it were submitted. (A buffer created per dispatch cost more host time than a
    /// small kernel takes on the GPU.)
    params_in_use: Vec<wgpu::Buffer>,
    params_free: HashMap<u64, Vec<wgpu::Buffer>>,
    /// Bind groups by what they bind: pooled buffers and params chunks come back, and so do
    /// their bind groups (composed GELU on wgpu: creating one per dispatch cost 7.1k of 111k
    /// host instructions). They hold only pooled buffers, which are never freed.
    groups: HashMap<GroupKey, wgpu::BindGroup>,
}

/// What a bind group binds: the pipeline's layout, the params buffer with the binding's
/// offset and size, then the buffers at bindings 1, 2, ...
type GroupKey = (
    wgpu::BindGroupLayout,
    wgpu::Buffer,
    u64,
    u64,
    Vec<wgpu::Buffer>,
);

/// Bind groups kept at most: past it the cache starts over.
const BIND_GROUPS: usize = 1024;

impl Batch {
    /// Counts an op recorded into the batch and submits the batch when it is full. Right after
    /// a wait the GPU has nothing to do, so the first op goes at once, then 2, 4, ... up to
    /// [`BATCH_OPS`]. Ten composed GELUs (2^24 f32) between waits on an H200 through Vulkan, 4
    /// alternated rounds: 1.02-1.26x a copy's time (unfused 4.1-5.5x slower) against 1.19-1.39x
    /// (3.3-3.7x) when the GPU waited for 8 ops; MNIST training at batch 256 141.0k against
    /// 139.3k images/s.
    fn recorded(&mut self, queue: &wgpu::Queue) {
        self.ops += 1;
        if self.ops >= (1 << self.ramp).min(BATCH_OPS) {
            self.submit(queue);
            self.ramp = (self.ramp + 1).min(BATCH_OPS.ilog2());
        }
    }

    /// The batch's command encoder.
    fn encoder(&mut self, device: &wgpu::Device) -> &mut wgpu::CommandEncoder {
        self.encoder.get_or_insert_with(|| {
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("kiln batch"),
            })
        })
    }

    /// The batch's open compute pass.
    fn pass(&mut self, device: &wgpu::Device) -> &mut wgpu::ComputePass<'static> {
        if self.pass.is_none() {
            let pass = self
                .encoder(device)
                .begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("kiln batch"),
                    timestamp_writes: None,
                });
            self.pass = Some(pass.forget_lifetime());
        }
        self.pass.as_mut().expect("set just above")
    }

    /// After a wait: the GPU is idle.
    fn waited(&mut self) {
        self.ramp = 0;
    }

    fn submit(&mut self, queue: &wgpu::Queue) {
        self.ops = 0;
        self.write_params(queue);
        self.pass = None;
        if let Some(e) = self.encoder.take() {
            queue.submit([e.finish()]);
        }
        for b in self.params_in_use.drain(..) {
            self.params_free.entry(b.size()).or_default().push(b);
        }
    }

    /// Where `words` are, for an op about to be recorded in this batch: a params buffer, and
    /// the offset (a multiple of `align`) and size of their binding.
    fn params(
        &mut self,
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        words: &[u32],
        align: u64,
    ) -> (wgpu::Buffer, u64, u64) {
        let bytes: &[u8] = bytemuck::cast_slice(words);
        // bound as a whole bucket, as a buffer of its own would be
        let size = bucket(bytes.len() as u64);
        let at = match &self.params {
            Some((b, staged)) => {
                let at = (staged.len() as u64).next_multiple_of(align);
                (at + size <= b.size()).then_some(at)
            }
            None => None,
        };
        let at = at.unwrap_or_else(|| {
            self.write_params(queue);
            let chunk = PARAMS_CHUNK.max(size);
            let buffer =
                (self.params_free.get_mut(&chunk).and_then(Vec::pop)).unwrap_or_else(|| {
                    device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("kiln params"),
                        size: chunk,
                        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                        mapped_at_creation: false,
                    })
                });
            self.params = Some((buffer, Vec::new()));
            0
        });
        let (buffer, staged) = self.params.as_mut().expect("set just above");
        staged.resize(at as usize, 0);
        staged.extend_from_slice(bytes);
        (buffer.clone(), at, size)
    }

    /// Writes the params buffer being filled.
    fn write_params(&mut self, queue: &wgpu::Queue) {
        if let Some((buffer, staged)) = self.params.take() {
            queue.write_buffer(&buffer, 0, &staged);
            self.params_in_use.push(buffer);
        }
    }
}

/// A device buffer holding one tensor's elements (4 bytes each); back to the pool on drop.
pub struct WgpuBuffer {
    buffer: wgpu::Buffer,
    owner: Arc<Inner>,
}

// SAFETY: in kiln-web's threaded build (wasm32 with atomics, where wgpu's
// `fragile-send-sync-non-atomic-wasm` no longer makes WebGPU's JS handles Send + Sync), the other
// threads are Web Workers that run only kiln-core's CPU loops over plain memory
// (web/src/threads.rs): GPU tensors, and so these handles, stay on the page's main thread, as
// that wgpu feature assumes of single-threaded pages.
#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
unsafe impl Send for Inner {}
// SAFETY: as for `Inner`'s `Send` just above.
#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
unsafe impl Sync for Inner {}
// SAFETY: as for `Inner`'s `Send` above.
#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
unsafe impl Send for WgpuBuffer {}
// SAFETY: as for `Inner`'s `Send` above.
#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
unsafe impl Sync for WgpuBuffer {}

impl Drop for WgpuBuffer {
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
        Ok(GpuBackend::from_runtime(WgpuRuntime {
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
        }))
    }

    /// [`WgpuBackend::new`], waiting for the adapter. Native only.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new_blocking(options: WgpuOptions) -> Result<Self> {
        kiln_core::block_on(Self::new(options))
    }

    /// The adapter's description (name, API, driver).
    pub fn adapter_info(&self) -> &wgpu::AdapterInfo {
        &self.runtime().inner.info
    }

    /// The wgpu device this backend runs on (benchmarks and interop use it beside the backend).
    pub fn wgpu_device(&self) -> &wgpu::Device {
        &self.runtime().inner.device
    }

    /// The queue this backend submits to.
    pub fn wgpu_queue(&self) -> &wgpu::Queue {
        &self.runtime().inner.queue
    }
}

impl WgpuRuntime {
    /// Submits the recorded ops, then runs `then` before any other thread can record or submit
    /// (a `write_buffer` from another thread could otherwise slip ahead of this submission).
    /// `waits`: the caller waits for the GPU next (a read, a synchronize), which is then idle.
    fn flushed<R>(&self, op: &str, waits: bool, then: impl FnOnce() -> R) -> Result<R> {
        let mut batch = self
            .inner
            .batch
            .lock()
            .map_err(|_| Error::device(op.to_string(), "the command batch lock is poisoned"))?;
        batch.submit(&self.inner.queue);
        if waits {
            batch.waited();
        }
        Ok(then())
    }

    /// Fails with the first error wgpu reported asynchronously, naming `op`.
    fn check(&self, op: &str) -> Result<()> {
        take_gpu_error(&self.inner.error, op)
    }

    fn pipeline(&self, key: &KernelKey) -> Result<Pipeline> {
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
        let layout = pipeline.get_bind_group_layout(0);
        let entry = (pipeline, layout);
        if let Ok(mut c) = self.inner.pipelines.lock() {
            c.insert(key.clone(), entry.clone());
        }
        Ok(entry)
    }
}

impl Runtime for WgpuRuntime {
    type Buffer = WgpuBuffer;
    type Download = ReadBack;

    fn name(&self) -> String {
        format!(
            "wgpu: {} ({:?})",
            self.inner.info.name, self.inner.info.backend
        )
    }

    fn allocate(&self, bytes: u64, op: &str) -> Result<WgpuBuffer> {
        let size = bucket(bytes);
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
        Ok(WgpuBuffer {
            buffer,
            owner: self.inner.clone(),
        })
    }

    fn write(&self, buffer: &WgpuBuffer, bytes: &[u8]) -> Result<()> {
        self.flushed("upload", false, || {
            self.inner.queue.write_buffer(&buffer.buffer, 0, bytes)
        })?;
        self.check("upload")
    }

    /// Records the plan as one compute pass into the open batch.
    fn launch(&self, name: &str, dispatches: &[Launch<'_, WgpuBuffer>]) -> Result<()> {
        let device = &self.inner.device;
        let pipelines = dispatches
            .iter()
            .map(|d| self.pipeline(d.kernel))
            .collect::<Result<Vec<_>>>()?;
        // Params are written and the op recorded under one hold of the lock, so that no other
        // thread submits the batch (freeing the params buffers for reuse) in between.
        let mut batch =
            self.inner.batch.lock().map_err(|_| {
                Error::device(name.to_string(), "the command batch lock is poisoned")
            })?;
        let align = u64::from(self.inner.limits.min_storage_buffer_offset_alignment);
        let mut groups = Vec::with_capacity(dispatches.len());
        for (d, pipeline) in dispatches.iter().zip(pipelines) {
            // wgpu rejects an empty binding: a kernel without params still gets one word.
            let words = if d.params.is_empty() {
                &[0][..]
            } else {
                d.params
            };
            let (params, offset, size) = batch.params(device, &self.inner.queue, words, align);
            let (pipeline, layout) = pipeline;
            let buffers = d.buffers.iter().map(|b| b.buffer.clone()).collect();
            let key = (layout, params, offset, size, buffers);
            let group = match batch.groups.get(&key) {
                Some(group) => group.clone(),
                None => {
                    let (layout, params, offset, size, buffers) = &key;
                    let mut entries = vec![wgpu::BindGroupEntry {
                        binding: 0,
                        resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                            buffer: params,
                            offset: *offset,
                            size: wgpu::BufferSize::new(*size),
                        }),
                    }];
                    for (i, b) in buffers.iter().enumerate() {
                        entries.push(wgpu::BindGroupEntry {
                            binding: i as u32 + 1,
                            resource: b.as_entire_binding(),
                        });
                    }
                    let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                        label: None,
                        layout,
                        entries: &entries,
                    });
                    if batch.groups.len() >= BIND_GROUPS {
                        batch.groups.clear();
                    }
                    batch.groups.insert(key, group.clone());
                    group
                }
            };
            groups.push((pipeline, group, d.workgroups));
        }
        let pass = batch.pass(device);
        for (pipeline, group, [x, y, z]) in &groups {
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, group, &[]);
            pass.dispatch_workgroups(*x, *y, *z);
        }
        batch.recorded(&self.inner.queue);
        drop(batch);
        self.check(name)
    }

    /// Recorded into the open batch, so ordered after the ops before it.
    fn copy(
        &self,
        src: &WgpuBuffer,
        src_offset: u64,
        dst: &WgpuBuffer,
        dst_offset: u64,
        bytes: u64,
    ) -> Result<bool> {
        let device = &self.inner.device;
        let mut batch = (self.inner.batch.lock())
            .map_err(|_| Error::device("write", "the command batch lock is poisoned"))?;
        batch.pass = None;
        let encoder = batch.encoder(device);
        encoder.copy_buffer_to_buffer(&src.buffer, src_offset, &dst.buffer, dst_offset, bytes);
        batch.recorded(&self.inner.queue);
        drop(batch);
        self.check("write")?;
        Ok(true)
    }

    /// Copies into a staging buffer, submits, and maps it; the [`ReadBack`] resolves once the
    /// mapping is done.
    fn download(&self, buffer: &WgpuBuffer, offset: u64, bytes: u64) -> Result<ReadBack> {
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
        encoder.copy_buffer_to_buffer(&buffer.buffer, offset, &staging, 0, bytes);
        self.flushed("read", true, || self.inner.queue.submit([encoder.finish()]))?;
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
        Ok(ReadBack {
            staging,
            state,
            device: self.inner.device.clone(),
            error: self.inner.error.clone(),
        })
    }

    fn allocated_bytes(&self) -> u64 {
        self.inner.allocated.load(Ordering::Relaxed)
    }

    fn synchronize(&self) -> Result<()> {
        self.flushed("synchronize", true, || ())?;
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

/// The future of [`WgpuRuntime::download`]: resolves to the bytes once the staging buffer is
/// mapped. Natively its `poll` drives `device.poll`; in browsers the map callback wakes it.
pub struct ReadBack {
    staging: wgpu::Buffer,
    state: Arc<Mutex<MapState>>,
    /// Polled natively; browsers drive mapping from their event loop.
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    device: wgpu::Device,
    /// The device's error slot: a shader that failed to build must not read back as numbers.
    error: Arc<Mutex<Option<String>>>,
}

impl Future for ReadBack {
    type Output = Result<Vec<u8>>;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        #[cfg(not(target_arch = "wasm32"))]
        let _ = this.device.poll(wgpu::PollType::Poll);
        let done = {
            let Ok(mut st) = this.state.lock() else {
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
            let view = match this.staging.get_mapped_range(..) {
                Ok(v) => v,
                Err(e) => {
                    return Poll::Ready(Err(Error::device(
                        "read",
                        format!("the readback buffer is not readable: {e}"),
                    )));
                }
            };
            view.to_vec()
        };
        this.staging.unmap();
        if let Err(e) = take_gpu_error(&this.error, "read") {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(bytes))
    }
}
