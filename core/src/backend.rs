//! The `Backend` trait every device implements, the storage handle it hands out, and `Device`.

use crate::op::{Meta, Op};
use crate::{DType, Error, Layout, Result, TensorData};
use alloc::boxed::Box;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::any::Any;
use core::fmt;
use core::future::Future;
use core::pin::Pin;

/// A backend's buffer, type-erased. Backends downcast it to their own type with
/// [`Storage::downcast`]; tensors share it cheaply (views, clones).
#[derive(Clone)]
pub struct Storage(Arc<dyn Any + Send + Sync>);

impl Storage {
    /// Wraps a backend buffer.
    pub fn new<T: Any + Send + Sync>(buffer: T) -> Self {
        Storage(Arc::new(buffer))
    }
    /// Wraps a backend buffer already behind an [`Arc`], which the backend may keep a
    /// [`Weak`](alloc::sync::Weak) reference to.
    ///
    /// ```
    /// let buffer = std::sync::Arc::new(vec![1.0f32, 2.0]);
    /// let weak = std::sync::Arc::downgrade(&buffer);
    /// let s = kiln_core::Storage::from_arc(buffer);
    /// assert_eq!(s.downcast::<Vec<f32>>(), Some(&vec![1.0, 2.0]));
    /// drop(s);
    /// assert!(weak.upgrade().is_none());
    /// ```
    pub fn from_arc<T: Any + Send + Sync>(buffer: Arc<T>) -> Self {
        Storage(buffer)
    }
    /// The backend buffer, if it is a `T`.
    pub fn downcast<T: Any>(&self) -> Option<&T> {
        self.0.downcast_ref::<T>()
    }
    /// `true` when both handles share one buffer.
    pub fn same(&self, other: &Storage) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
    /// The backend buffer for writing, if it is a `T` and no other handle shares it.
    pub fn get_mut<T: Any>(&mut self) -> Option<&mut T> {
        Arc::get_mut(&mut self.0)?.downcast_mut::<T>()
    }
    /// How many handles share this buffer (this one included).
    pub fn handles(&self) -> usize {
        Arc::strong_count(&self.0)
    }
    /// `true` when no other handle shares this buffer (so writing it changes no other tensor).
    pub fn is_unique(&mut self) -> bool {
        Arc::get_mut(&mut self.0).is_some()
    }
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Storage")
    }
}

/// One input of [`Backend::execute`]: a storage seen through a layout (possibly strided,
/// broadcast or offset).
#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    /// The buffer.
    pub storage: &'a Storage,
    /// Where the elements are in it.
    pub layout: &'a Layout,
    /// Element type.
    pub dtype: DType,
}

/// The ops that a product applies to its output as it writes it ([`Backend::execute_with_tail`]):
/// `y + bias`, the bias broadcast along the output channels (a convolution's axis 1, a matmul's
/// last axis), then ReLU when `relu`, then for a convolution with `max_pool` the maxima of 2x2
/// windows at stride 2 (the output is then the pooled one, half the height and width rounded
/// down). These are the ops that follow a layer's product in a model, each a pass over the
/// output when run alone.
///
/// ```
/// use kiln_core::{block_on, DType, Device, Layout, Op, Tail, Tensor, View};
/// let dev = Device::cpu();
/// let x = Tensor::from_vec(vec![1.0f32, -2.0, 3.0, -4.0], [2, 2], &dev)?;
/// let w = Tensor::from_vec(vec![1.0f32, 0.0, 0.0, 1.0], [2, 2], &dev)?;
/// let bias = Tensor::from_vec(vec![0.5f32, 1.0], [2], &dev)?;
/// let (cpu, out) = (dev.backend(), (DType::F32, x.shape().clone()));
/// assert!(cpu.fuses_tail(&Op::Matmul, DType::F32, false));
/// let tail = Tail { bias: bias.view(), relu: true, max_pool: false };
/// let y = cpu.execute_with_tail(&Op::Matmul, &[x.view(), w.view()], tail, &out)?;
/// let layout = Layout::contiguous(out.1.clone());
/// let y = block_on(cpu.read(View { storage: &y, layout: &layout, dtype: DType::F32 }))?;
/// assert_eq!(y.to_vec::<f32>()?, vec![1.5, 0.0, 3.5, 0.0]); // max(x w + bias, 0)
/// # Ok::<(), kiln_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Tail<'a> {
    /// One value per output channel, of the product's dtype (any shape of that many elements).
    pub bias: View<'a>,
    /// Whether ReLU follows the sum.
    pub relu: bool,
    /// Whether a 2x2 max pool at stride 2 follows (convolutions only).
    pub max_pool: bool,
}

/// What reading a tensor back returns: a future, so that browsers never block. Native code can
/// wait on it with [`block_on`].
pub type ReadFuture = Pin<Box<dyn Future<Output = Result<TensorData>>>>;

/// A device that executes kiln's op set. Object-safe: devices are chosen at run time.
///
/// Backends receive ops already validated by [`Op::infer`] together with each output's dtype
/// and shape, and return a fresh, contiguous storage for each output.
pub trait Backend: Send + Sync + fmt::Debug {
    /// Human-readable device name (`"cpu"`, `"wgpu: NVIDIA H100 (Vulkan)"`).
    fn name(&self) -> String;
    /// Copies host data into a new storage.
    fn upload(&self, data: &TensorData) -> Result<Storage>;
    /// Runs one op. View ops never reach here. Returns one contiguous storage per entry of
    /// `outputs` (as [`Op::infer`] gave them), in order.
    fn execute(&self, op: &Op, inputs: &[View<'_>], outputs: &[Meta]) -> Result<Vec<Storage>>;
    /// Whether [`Backend::execute_with_tail`] runs `op` with outputs of `dtype`, and with a max
    /// pool in its tail when `max_pool`. A model's plan asks once; where it is `false`, the
    /// tail's ops run one by one.
    fn fuses_tail(&self, op: &Op, dtype: DType, max_pool: bool) -> bool {
        let _ = (op, dtype, max_pool);
        false
    }
    /// Runs `op`, one that [`Backend::fuses_tail`] accepts, with `tail` applied to its output
    /// as it is written. `output` is the tail's dtype and shape: the product's, as [`Op::infer`]
    /// gave it, or with a max pool the pooled one.
    fn execute_with_tail(
        &self,
        op: &Op,
        inputs: &[View<'_>],
        tail: Tail<'_>,
        output: &Meta,
    ) -> Result<Storage> {
        let _ = (inputs, tail, output);
        Err(Error::unsupported(
            op.name(),
            "this device does not apply a tail (bias, ReLU) to a product's output",
        ))
    }
    /// Reads the elements of a view back to the host, in row-major order.
    fn read(&self, input: View<'_>) -> ReadFuture;
    /// Overwrites `dst`'s elements from `offset` on with those of `src` (same dtype), in place,
    /// after the work already queued. `dst` is no other tensor's ([`Storage::is_unique`]) and
    /// contiguous. Returns `false` where the backend cannot, and the caller copies instead
    /// ([`crate::Tensor::write_at`]).
    fn write(&self, dst: &mut Storage, offset: usize, src: View<'_>) -> Result<bool> {
        let _ = (dst, offset, src);
        Ok(false)
    }
    /// Whether this device can hold and compute with `dtype` (f16 needs `shader-f16` on WebGPU).
    fn supports(&self, dtype: DType) -> bool {
        let _ = dtype;
        true
    }
    /// Bytes currently allocated by this device, when it tracks them.
    fn allocated_bytes(&self) -> Option<u64> {
        None
    }
    /// Waits until queued work is done (a no-op on synchronous backends).
    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}

/// A handle on a backend, cheap to clone, chosen at run time.
///
/// ```
/// use kiln_core::Device;
/// let cpu = Device::cpu();
/// assert_eq!(cpu.name(), "cpu");
/// assert!(cpu.same(&cpu.clone()));
/// ```
#[derive(Clone, Debug)]
pub struct Device(Arc<dyn Backend>);

impl Device {
    /// A device from any backend.
    pub fn new(backend: impl Backend + 'static) -> Self {
        Device(Arc::new(backend))
    }
    /// A device from a shared backend.
    pub fn from_arc(backend: Arc<dyn Backend>) -> Self {
        Device(backend)
    }
    /// The CPU reference backend (one shared instance).
    pub fn cpu() -> Self {
        crate::cpu::device()
    }
    /// The backend.
    pub fn backend(&self) -> &dyn Backend {
        &*self.0
    }
    /// The backend's name.
    pub fn name(&self) -> String {
        self.0.name()
    }
    /// `true` when both handles are the same device.
    pub fn same(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Drives a future to completion on the current thread. Native only; browsers must `await`.
///
/// ```
/// assert_eq!(kiln_core::block_on(async { 7 }), 7);
/// ```
#[cfg(feature = "std")]
pub fn block_on<F: Future>(fut: F) -> F::Output {
    use std::sync::Arc as SArc;
    use std::task::{Context, Poll, Wake, Waker};
    struct ThreadWaker(std::thread::Thread);
    impl Wake for ThreadWaker {
        fn wake(self: SArc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(SArc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = core::pin::pin!(fut);
    loop {
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            // Backends whose futures need driving (wgpu's device poll) do it inside `poll`,
            // so a short park keeps this loop from spinning while still making progress.
            Poll::Pending => std::thread::park_timeout(std::time::Duration::from_millis(1)),
        }
    }
}
