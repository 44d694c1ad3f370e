//! `Tensor`: a cheap-to-clone handle on device storage seen through a layout, with every op of
//! kiln as a method. Every method goes through [`Tensor::apply`], the one place where ops are
//! validated, executed and recorded for autodiff and tracing.

use crate::backend::View;
use crate::error::Num;
use crate::op::{BinaryOp, CmpOp, Conv2dParams, Meta, Op, Pool2d, Pool2dParams, ReduceOp, UnaryOp};
use crate::shape::{SliceRange, resolve_axis, resolve_axis_or_scalar};
use crate::{DType, Device, Element, Error, Layout, Result, Shape, Storage, TensorData};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};

/// A unique id per tensor value (clones share it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(usize);

impl TensorId {
    fn fresh() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(1);
        TensorId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
    /// The id as a number (stable for the life of the process).
    pub fn get(self) -> usize {
        self.0
    }
}

/// How a tensor was made, kept when autodiff or tracing records it.
#[derive(Debug)]
pub struct Node {
    /// The op that produced the tensor.
    pub op: Op,
    /// Its inputs, in the op's order. An input whose values the op's backward rule does not
    /// read is kept without its data (same id, shape, dtype and history): the graph then holds
    /// no activation that backward never reads, and a GPU chain on it can run fused.
    pub inputs: Vec<Tensor>,
}

/// Dropping a long recorded chain would recurse once per op (a node owns its inputs, each of
/// which owns its node...) and can overflow the stack: inputs this node holds the last
/// reference to are taken apart in a loop instead.
impl Drop for Node {
    fn drop(&mut self) {
        let mut pending = core::mem::take(&mut self.inputs);
        while let Some(t) = pending.pop() {
            if let Ok(mut inner) = Arc::try_unwrap(t.0)
                && let Some(node) = inner.node.as_mut().and_then(Arc::get_mut)
            {
                pending.append(&mut node.inputs);
            }
        }
    }
}

/// The storage of a tensor the graph keeps without its data ([`Node::inputs`]).
struct Released;

/// An error unless `t` has its data: `op` cannot read a graph's data-less copy.
fn check_data(t: &Tensor, op: &'static str) -> Result<()> {
    if t.0.storage.downcast::<Released>().is_some() {
        return Err(Error::invalid(
            op,
            "this tensor is a recorded graph's copy without data (a Node input that no backward \
             rule reads: autodiff does not keep its values)",
        ));
    }
    Ok(())
}

#[derive(Debug)]
struct Inner {
    id: TensorId,
    storage: Storage,
    layout: Layout,
    dtype: DType,
    device: Device,
    requires_grad: bool,
    /// shared with the data-less copies of this tensor that the graph may hold
    node: Option<Arc<Node>>,
}

/// An n-dimensional array on a [`Device`]. Cloning is cheap and shares the data; tensors are
/// immutable values, and every op returns a new tensor or an error.
///
/// ```
/// use kiln_core::{Device, Tensor};
/// let dev = Device::cpu();
/// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3], &dev)?;
/// let b = Tensor::ones([3, 2], kiln_core::DType::F32, &dev)?;
/// let c = a.matmul(&b)?;
/// assert_eq!(c.to_vec::<f32>()?, vec![6.0, 6.0, 15.0, 15.0]);
/// # Ok::<(), kiln_core::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Tensor(Arc<Inner>);

impl Tensor {
    // ------------------------------------------------------------------ core machinery

    fn wrap(
        storage: Storage,
        layout: Layout,
        dtype: DType,
        device: Device,
        node: Option<Node>,
    ) -> Tensor {
        let requires_grad = node.is_some() && crate::autodiff::is_grad_enabled();
        Tensor(Arc::new(Inner {
            id: TensorId::fresh(),
            storage,
            layout,
            dtype,
            device,
            requires_grad,
            node: node.map(Arc::new),
        }))
    }

    /// This tensor without its data, as a recorded op keeps an input whose values its backward
    /// rule never reads: the same id, layout, dtype, device and history, over a storage that
    /// no backend accepts.
    fn without_data(&self) -> Tensor {
        Tensor(Arc::new(Inner {
            id: self.0.id,
            storage: Storage::new(Released),
            layout: self.0.layout.clone(),
            dtype: self.0.dtype,
            device: self.0.device.clone(),
            requires_grad: self.0.requires_grad,
            node: self.0.node.clone(),
        }))
    }

    /// Runs `op` on `inputs` (all on one device), recording it for autodiff/tracing when needed.
    /// Creation ops take no inputs; use [`Tensor::create`] for them. An op with several outputs
    /// ([`Op::AdamStep`]) is an error here: use [`Tensor::apply_many`].
    pub fn apply(op: Op, inputs: &[&Tensor]) -> Result<Tensor> {
        let mut outputs = Self::apply_many(op, inputs, Some(1))?;
        Ok(outputs.remove(0))
    }

    /// Runs an op with several outputs ([`Op::AdamStep`]) and returns them in order. Such ops
    /// are not recorded: running one where autodiff or tracing would record it is an error (run
    /// it under [`crate::autodiff::no_grad`]). `expect` is the number of outputs the caller handles, if
    /// it knows; another count is an error naming both.
    ///
    /// ```
    /// use kiln_core::{AdamParams, Device, Op, Tensor};
    /// let dev = Device::cpu();
    /// let p = Tensor::from_slice(&[1.0f32, -2.0], [2], &dev)?;
    /// let g = Tensor::from_slice(&[0.5f32, 0.25], [2], &dev)?;
    /// let (m, v) = (p.zeros_like()?, p.zeros_like()?);
    /// let adam = AdamParams { lr: 0.1, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0,
    ///     decoupled: false, step: 1 };
    /// let out = Tensor::apply_many(Op::AdamStep(adam), &[&p, &g, &m, &v], Some(2))?;
    /// // the first step moves each param by about lr, against its gradient's sign
    /// let new: Vec<f32> = out[0].to_vec()?;
    /// assert!((new[0] - 0.9).abs() < 1e-5 && (new[1] + 2.1).abs() < 1e-5);
    /// # Ok::<(), kiln_core::Error>(())
    /// ```
    pub fn apply_many(op: Op, inputs: &[&Tensor], expect: Option<usize>) -> Result<Vec<Tensor>> {
        let first = inputs
            .first()
            .ok_or_else(|| Error::invalid(op.name(), "no input tensors; use Tensor::create"))?;
        let device = first.device().clone();
        if let Some(other) = inputs.iter().find(|t| !t.device().same(&device)) {
            return Err(Error::device(
                op.name(),
                alloc::format!(
                    "inputs are on different devices: {} and {}",
                    device.name(),
                    other.device().name()
                ),
            ));
        }
        for t in inputs {
            check_data(t, op.name())?;
        }
        Self::run(op, inputs, device, expect)
    }

    /// Runs a creation op (no inputs) on `device`.
    pub fn create(op: Op, device: &Device) -> Result<Tensor> {
        Ok(Self::run(op, &[], device.clone(), Some(1))?.remove(0))
    }

    fn run(
        op: Op,
        inputs: &[&Tensor],
        device: Device,
        expect: Option<usize>,
    ) -> Result<Vec<Tensor>> {
        let metas: Vec<_> = inputs
            .iter()
            .map(|t| (t.dtype(), t.shape().clone()))
            .collect();
        let mut outputs = op.infer(&metas)?;
        if let Some(want) = expect.filter(|&n| n != outputs.len()) {
            let hint = if want == 1 {
                "; use Tensor::apply_many"
            } else {
                ""
            };
            return Err(Error::invalid(
                op.name(),
                alloc::format!("has {} outputs, {want} expected{hint}", outputs.len()),
            ));
        }
        Self::check_supported(&op, &outputs, &device)?;
        let record = crate::autodiff::should_record(inputs);
        if record && outputs.len() > 1 {
            return Err(Error::unsupported(
                op.name(),
                "an op with several outputs cannot be recorded for autodiff or tracing; \
                 run it under no_grad",
            ));
        }
        if outputs.len() > 1 {
            let views: Vec<View<'_>> = inputs.iter().map(|t| t.view()).collect();
            let storages = device.backend().execute(&op, &views, &outputs)?;
            return Ok(storages
                .into_iter()
                .zip(outputs)
                .map(|(s, (dtype, shape))| {
                    Self::wrap(s, Layout::contiguous(shape), dtype, device.clone(), None)
                })
                .collect());
        }
        let (dtype, shape) = outputs.remove(0);
        let (storage, layout) = Self::produce(&op, inputs, &device, dtype, shape)?;
        let node = record.then(|| {
            // tracing exports the graph, values included
            let all = crate::autodiff::is_tracing();
            let inputs = (inputs.iter().enumerate())
                .map(|(i, t)| {
                    let kept = all || crate::autodiff::reads_value(&op, i, inputs);
                    if kept { (*t).clone() } else { t.without_data() }
                })
                .collect();
            Node { op, inputs }
        });
        Ok(alloc::vec![Self::wrap(
            storage, layout, dtype, device, node
        )])
    }

    /// Fails when `device` cannot hold one of `op`'s outputs (f16 on a WebGPU adapter without
    /// `shader-f16`).
    pub(crate) fn check_supported(op: &Op, outputs: &[Meta], device: &Device) -> Result<()> {
        match outputs.iter().find(|(d, _)| !device.backend().supports(*d)) {
            Some((dtype, _)) => Err(Error::unsupported(
                op.name(),
                alloc::format!("device {} does not support {dtype}", device.name()),
            )),
            None => Ok(()),
        }
    }

    /// A one-output op's result, given the dtype and shape [`Op::infer`] returned for it: a view
    /// op's new layout over its input's storage (a reshape the layout cannot express is copied
    /// first), else the backend's new buffer.
    fn produce(
        op: &Op,
        inputs: &[&Tensor],
        device: &Device,
        dtype: DType,
        shape: Shape,
    ) -> Result<(Storage, Layout)> {
        Ok(match (op, inputs.first()) {
            (Op::Permute { dims }, Some(x)) => (x.0.storage.clone(), x.0.layout.permute(dims)?),
            (Op::Slice { ranges }, Some(x)) => (x.0.storage.clone(), x.0.layout.slice(ranges)?),
            (Op::Expand { shape }, Some(x)) => {
                (x.0.storage.clone(), x.0.layout.broadcast_to(shape)?)
            }
            (Op::Reshape { shape }, Some(x)) => match x.0.layout.reshape(shape) {
                Some(l) => (x.0.storage.clone(), l),
                None => {
                    let meta = [(x.dtype(), x.shape().clone())];
                    let s = one(device
                        .backend()
                        .execute(&Op::Contiguous, &[x.view()], &meta))?;
                    (s, Layout::contiguous(shape.clone()))
                }
            },
            _ => {
                let views: Vec<View<'_>> = inputs.iter().map(|t| t.view()).collect();
                let meta = [(dtype, shape)];
                let s = one(device.backend().execute(op, &views, &meta))?;
                let [(_, shape)] = meta;
                (s, Layout::contiguous(shape))
            }
        })
    }

    /// Runs a one-output op whose output [`Op::infer`] already gave for these inputs' dtypes
    /// and shapes, unrecorded: a planned graph's node ([`crate::model::Model::run`]). With
    /// `tail`, the op is a product that the device applies it to as it writes its output
    /// ([`crate::Backend::execute_with_tail`]), and `out` is the tail's output.
    pub(crate) fn run_inferred(
        op: &Op,
        inputs: &[&Tensor],
        device: &Device,
        out: &Meta,
        tail: Option<crate::backend::Tail<'_>>,
    ) -> Result<Tensor> {
        let (dtype, shape) = out;
        let (storage, layout) = match tail {
            None => Self::produce(op, inputs, device, *dtype, shape.clone())?,
            Some(tail) => {
                let views: Vec<View<'_>> = inputs.iter().map(|t| t.view()).collect();
                let s = device.backend().execute_with_tail(op, &views, tail, out)?;
                (s, Layout::contiguous(shape.clone()))
            }
        };
        Ok(Self::wrap(storage, layout, *dtype, device.clone(), None))
    }

    /// This tensor as a backend input.
    pub fn view(&self) -> View<'_> {
        View {
            storage: &self.0.storage,
            layout: &self.0.layout,
            dtype: self.0.dtype,
        }
    }

    // ------------------------------------------------------------------ accessors

    /// Unique id of this value.
    pub fn id(&self) -> TensorId {
        self.0.id
    }
    /// The shape.
    pub fn shape(&self) -> &Shape {
        self.0.layout.shape()
    }
    /// The dimensions.
    pub fn dims(&self) -> &[usize] {
        self.shape().dims()
    }
    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape().rank()
    }
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape().numel()
    }
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.0.dtype
    }
    /// The device holding the data.
    pub fn device(&self) -> &Device {
        &self.0.device
    }
    /// Where the elements are inside the storage.
    pub fn layout(&self) -> &Layout {
        &self.0.layout
    }
    /// The backend storage (shared with views of this tensor).
    pub fn storage(&self) -> &Storage {
        &self.0.storage
    }
    /// How this tensor was made, when autodiff or tracing recorded it.
    pub fn node(&self) -> Option<&Node> {
        self.0.node.as_deref()
    }
    /// `true` when gradients flow to or through this tensor.
    pub fn requires_grad(&self) -> bool {
        self.0.requires_grad
    }
    /// Size of one axis (negative counts from the end).
    pub fn dim(&self, axis: isize) -> Result<usize> {
        Ok(self.dims()[resolve_axis(axis, self.rank(), "dim")?])
    }

    // ------------------------------------------------------------------ autodiff leaves

    /// A leaf that gradients are computed for (same data, no history).
    pub fn require_grad(&self) -> Tensor {
        Tensor(Arc::new(Inner {
            id: TensorId::fresh(),
            storage: self.0.storage.clone(),
            layout: self.0.layout.clone(),
            dtype: self.0.dtype,
            device: self.0.device.clone(),
            requires_grad: true,
            node: None,
        }))
    }
    /// The same data cut from the graph: no history, no gradient.
    pub fn detach(&self) -> Tensor {
        Tensor::wrap(
            self.0.storage.clone(),
            self.0.layout.clone(),
            self.0.dtype,
            self.0.device.clone(),
            None,
        )
    }

    // ------------------------------------------------------------------ creation

    /// Uploads host data to `device`.
    pub fn from_data(data: &TensorData, device: &Device) -> Result<Tensor> {
        let storage = device.backend().upload(data)?;
        Ok(Self::wrap(
            storage,
            Layout::contiguous(data.shape().clone()),
            data.dtype(),
            device.clone(),
            None,
        ))
    }
    /// A tensor from values and a shape.
    pub fn from_vec<T: Element>(
        values: Vec<T>,
        shape: impl Into<Shape>,
        device: &Device,
    ) -> Result<Tensor> {
        Self::from_data(&TensorData::new(values, shape)?, device)
    }
    /// A tensor from a slice and a shape.
    pub fn from_slice<T: Element>(
        values: &[T],
        shape: impl Into<Shape>,
        device: &Device,
    ) -> Result<Tensor> {
        Self::from_vec(values.to_vec(), shape, device)
    }
    /// A rank-0 tensor.
    pub fn scalar(value: f64, dtype: DType, device: &Device) -> Result<Tensor> {
        Self::full(Shape::scalar(), value, dtype, device)
    }
    /// Every element `value`.
    pub fn full(
        shape: impl Into<Shape>,
        value: f64,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        Self::create(
            Op::Full {
                shape: shape.into(),
                value,
                dtype,
            },
            device,
        )
    }
    /// Zeros.
    pub fn zeros(shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        Self::full(shape, 0.0, dtype, device)
    }
    /// Ones.
    pub fn ones(shape: impl Into<Shape>, dtype: DType, device: &Device) -> Result<Tensor> {
        Self::full(shape, 1.0, dtype, device)
    }
    /// Zeros shaped, typed and placed like `self`.
    pub fn zeros_like(&self) -> Result<Tensor> {
        Self::zeros(self.shape(), self.dtype(), self.device())
    }
    /// Ones shaped, typed and placed like `self`.
    pub fn ones_like(&self) -> Result<Tensor> {
        Self::ones(self.shape(), self.dtype(), self.device())
    }
    /// `value` shaped, typed and placed like `self`.
    pub fn full_like(&self, value: f64) -> Result<Tensor> {
        Self::full(self.shape(), value, self.dtype(), self.device())
    }
    /// `start, start+step, ...` up to but excluding `end` (as `torch.arange`).
    pub fn arange(
        start: f64,
        end: f64,
        step: f64,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        if step == 0.0 || !step.is_finite() || !start.is_finite() || !end.is_finite() {
            return Err(Error::invalid(
                "arange",
                alloc::format!(
                    "start {}, end {} and step {} must be finite with step != 0",
                    Num(start),
                    Num(end),
                    Num(step)
                ),
            ));
        }
        let len = crate::math::ceil((end - start) / step).max(0.0) as usize;
        Self::create(
            Op::Arange {
                start,
                step,
                len,
                dtype,
            },
            device,
        )
    }
    /// `steps` evenly spaced values from `start` to `end` inclusive (as `torch.linspace`).
    pub fn linspace(
        start: f64,
        end: f64,
        steps: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        let step = if steps > 1 {
            (end - start) / (steps - 1) as f64
        } else {
            0.0
        };
        Self::create(
            Op::Arange {
                start,
                step,
                len: steps,
                dtype,
            },
            device,
        )
    }
    /// The `n x n` identity.
    pub fn eye(n: usize, dtype: DType, device: &Device) -> Result<Tensor> {
        Self::create(Op::Eye { n, m: n, dtype }, device)
    }
    /// Uniform random values in `[low, high)`, the same for the same `seed` on every backend.
    pub fn rand_uniform(
        shape: impl Into<Shape>,
        low: f64,
        high: f64,
        seed: u64,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        Self::create(
            Op::RandUniform {
                shape: shape.into(),
                low,
                high,
                seed,
                dtype,
            },
            device,
        )
    }
    /// Normal random values, the same for the same `seed` on every backend.
    pub fn rand_normal(
        shape: impl Into<Shape>,
        mean: f64,
        std: f64,
        seed: u64,
        dtype: DType,
        device: &Device,
    ) -> Result<Tensor> {
        Self::create(
            Op::RandNormal {
                shape: shape.into(),
                mean,
                std,
                seed,
                dtype,
            },
            device,
        )
    }

    // ------------------------------------------------------------------ reading back

    /// Reads the values back to the host. Never blocks: await it (in browsers too).
    pub async fn data(&self) -> Result<TensorData> {
        check_data(self, "read")?;
        self.0.device.backend().read(self.view()).await
    }
    /// Reads the values back, waiting for the device. Native only.
    #[cfg(feature = "std")]
    pub fn to_data(&self) -> Result<TensorData> {
        crate::block_on(self.data())
    }
    /// Reads the values back as `T` (which must be the dtype), waiting for the device. Native only.
    #[cfg(feature = "std")]
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.to_data()?.to_vec()
    }
    /// Reads a one-element tensor as f64, waiting for the device. Native only.
    #[cfg(feature = "std")]
    pub fn to_scalar(&self) -> Result<f64> {
        if self.numel() != 1 {
            return Err(Error::shape(
                "to_scalar",
                alloc::format!("expects one element, got shape {}", self.shape()),
            ));
        }
        Ok(self.to_data()?.to_f64_vec()[0])
    }
    /// A copy on another device (the same tensor when already there).
    pub async fn to_device(&self, device: &Device) -> Result<Tensor> {
        if self.device().same(device) {
            return Ok(self.clone());
        }
        Tensor::from_data(&self.data().await?, device)
    }

    // ------------------------------------------------------------------ elementwise

    /// Applies an elementwise function.
    pub fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        Tensor::apply(Op::Unary(op), &[self])
    }
    /// Combines with `rhs` elementwise, broadcasting.
    pub fn binary(&self, op: BinaryOp, rhs: &Tensor) -> Result<Tensor> {
        Tensor::apply(Op::Binary(op), &[self, rhs])
    }
    /// Compares with `rhs` elementwise, broadcasting; bool result.
    pub fn compare(&self, op: CmpOp, rhs: &Tensor) -> Result<Tensor> {
        Tensor::apply(Op::Compare(op), &[self, rhs])
    }
    /// A rank-0 tensor of `value` with this tensor's dtype and device.
    pub fn scalar_like(&self, value: f64) -> Result<Tensor> {
        Tensor::scalar(value, self.dtype(), self.device())
    }
    /// Combines with a scalar of this tensor's dtype.
    pub fn binary_scalar(&self, op: BinaryOp, value: f64) -> Result<Tensor> {
        self.binary(op, &self.scalar_like(value)?)
    }
    /// `where(self, a, b)`: `a` where this bool tensor is true, else `b`, all broadcast.
    pub fn where_cond(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        Tensor::apply(Op::Where, &[self, a, b])
    }
    /// Converts to another dtype.
    pub fn cast(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        Tensor::apply(Op::Cast { dtype }, &[self])
    }
    /// `x^p`
    pub fn powf(&self, p: f64) -> Result<Tensor> {
        self.unary(UnaryOp::Powf(p))
    }
    /// `min(max(x, min), max)`
    pub fn clamp(&self, min: f64, max: f64) -> Result<Tensor> {
        if min > max {
            return Err(Error::invalid(
                "clamp",
                alloc::format!("min {} is greater than max {}", Num(min), Num(max)),
            ));
        }
        self.unary(UnaryOp::Clamp { min, max })
    }

    // ------------------------------------------------------------------ reductions

    /// Reduces `axes` (negative allowed; empty means all) with `op`.
    pub fn reduce(&self, op: ReduceOp, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        let given = axes
            .iter()
            .map(|&a| resolve_axis_or_scalar(a, self.rank(), op.name()))
            .collect::<Result<Vec<_>>>()?;
        let mut resolved = crate::sorted_unique(given.iter().copied());
        if resolved.len() != given.len() {
            return Err(Error::invalid(
                op.name(),
                alloc::format!("axes {axes:?} repeat an axis"),
            ));
        }
        if self.rank() == 0 {
            resolved.clear();
        }
        Tensor::apply(
            Op::Reduce {
                op,
                axes: resolved,
                keepdim,
            },
            &[self],
        )
    }
    /// Sum over `axes`.
    pub fn sum(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Sum, axes, keepdim)
    }
    /// Sum of all elements (rank 0).
    pub fn sum_all(&self) -> Result<Tensor> {
        self.reduce(ReduceOp::Sum, &[], false)
    }
    /// Mean over `axes`.
    pub fn mean(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Mean, axes, keepdim)
    }
    /// Mean of all elements (rank 0).
    pub fn mean_all(&self) -> Result<Tensor> {
        self.reduce(ReduceOp::Mean, &[], false)
    }
    /// Maximum over `axes`.
    pub fn max(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Max, axes, keepdim)
    }
    /// Minimum over `axes`.
    pub fn min(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Min, axes, keepdim)
    }
    /// Product over `axes`.
    pub fn prod(&self, axes: &[isize], keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Prod, axes, keepdim)
    }
    /// Variance over `axes` with `correction` (1 = unbiased, as `torch.var`).
    pub fn var(&self, axes: &[isize], correction: usize, keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Var { correction }, axes, keepdim)
    }
    /// Index of the maximum along `axis` (i32).
    pub fn argmax(&self, axis: isize, keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::ArgMax, &[axis], keepdim)
    }
    /// Index of the minimum along `axis` (i32).
    pub fn argmin(&self, axis: isize, keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::ArgMin, &[axis], keepdim)
    }
    /// Inclusive running sum along `axis`.
    pub fn cumsum(&self, axis: isize) -> Result<Tensor> {
        let axis = resolve_axis_or_scalar(axis, self.rank(), "cumsum")?;
        Tensor::apply(
            Op::Cumsum {
                axis,
                reverse: false,
            },
            &[self],
        )
    }
    /// Softmax along `axis`.
    pub fn softmax(&self, axis: isize) -> Result<Tensor> {
        let axis = resolve_axis_or_scalar(axis, self.rank(), "softmax")?;
        Tensor::apply(
            Op::Softmax {
                axis,
                causal: false,
            },
            &[self],
        )
    }
    /// Softmax along the last axis of `[.., Tq, Tk]` (`Tq <= Tk`) where row `i` sees only the
    /// first `Tk - Tq + i + 1` entries, as causal attention's queries see the keys up to their
    /// own position: the entries after them become 0. One pass, with no mask tensor.
    ///
    /// ```
    /// use kiln_core::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 5.0, 2.0, 2.0], [2, 2], &Device::cpu())?;
    /// let p = x.causal_softmax()?.to_vec::<f32>()?;
    /// assert_eq!(p, [1.0, 0.0, 0.5, 0.5]);
    /// # Ok::<(), kiln_core::Error>(())
    /// ```
    pub fn causal_softmax(&self) -> Result<Tensor> {
        let axis = self.rank().max(1) - 1;
        Tensor::apply(Op::Softmax { axis, causal: true }, &[self])
    }
    /// Each row along the last axis brought to zero mean and unit variance,
    /// `(x - mean) / sqrt(var + eps)` with the biased variance: [`crate::nn::LayerNorm`] before
    /// its weight and bias, in one pass.
    ///
    /// ```
    /// use kiln_core::{Device, Tensor};
    /// let x = Tensor::from_vec(vec![1.0f32, 3.0], [1, 2], &Device::cpu())?;
    /// let y = x.normalize(0.0)?.to_vec::<f32>()?;
    /// assert_eq!(y, [-1.0, 1.0]);
    /// # Ok::<(), kiln_core::Error>(())
    /// ```
    pub fn normalize(&self, eps: f64) -> Result<Tensor> {
        Tensor::apply(Op::Normalize { eps }, &[self])
    }
    /// Log-softmax along `axis`.
    pub fn log_softmax(&self, axis: isize) -> Result<Tensor> {
        let axis = resolve_axis_or_scalar(axis, self.rank(), "log_softmax")?;
        Tensor::apply(Op::LogSoftmax { axis }, &[self])
    }

    // ------------------------------------------------------------------ linear algebra

    /// Matrix product with NumPy semantics (batched, broadcast, rank-1 promotion).
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        Tensor::apply(Op::Matmul, &[self, rhs])
    }

    // ------------------------------------------------------------------ views

    /// The same elements under a new shape (copies only when the layout requires it).
    pub fn reshape(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        if &shape == self.shape() {
            return Ok(self.clone());
        }
        Tensor::apply(Op::Reshape { shape }, &[self])
    }
    /// Reshape where one dimension may be `-1` (inferred), as `torch.reshape`.
    pub fn reshape_infer(&self, dims: &[isize]) -> Result<Tensor> {
        let known: usize = dims
            .iter()
            .filter(|&&d| d >= 0)
            .map(|&d| d as usize)
            .product();
        let unknown = dims.iter().filter(|&&d| d < 0).count();
        let bad = || {
            Error::shape(
                "reshape",
                alloc::format!("cannot reshape {} into {dims:?}", self.shape()),
            )
        };
        if unknown > 1
            || dims.iter().any(|&d| d < -1)
            || (unknown == 1 && (known == 0 || !self.numel().is_multiple_of(known)))
        {
            return Err(bad());
        }
        let shape: Vec<usize> = dims
            .iter()
            .map(|&d| {
                if d < 0 {
                    self.numel() / known
                } else {
                    d as usize
                }
            })
            .collect();
        self.reshape(shape)
    }
    /// Reorders axes: output axis `i` is input axis `dims[i]`.
    pub fn permute(&self, dims: &[usize]) -> Result<Tensor> {
        Tensor::apply(
            Op::Permute {
                dims: dims.to_vec(),
            },
            &[self],
        )
    }
    /// Swaps two axes.
    pub fn transpose(&self, a: isize, b: isize) -> Result<Tensor> {
        if self.rank() == 0 {
            // PyTorch allows transposing a 0-d tensor with itself (axes 0 / -1).
            resolve_axis_or_scalar(a, 0, "transpose")?;
            resolve_axis_or_scalar(b, 0, "transpose")?;
            return Ok(self.clone());
        }
        let (a, b) = (
            resolve_axis(a, self.rank(), "transpose")?,
            resolve_axis(b, self.rank(), "transpose")?,
        );
        let mut dims: Vec<usize> = (0..self.rank()).collect();
        dims.swap(a, b);
        self.permute(&dims)
    }
    /// Transpose of the last two axes.
    pub fn t(&self) -> Result<Tensor> {
        if self.rank() < 2 {
            return Err(Error::shape(
                "t",
                alloc::format!("expects rank >= 2, got shape {}", self.shape()),
            ));
        }
        self.transpose(-2, -1)
    }
    /// Takes `ranges[i]` along axis `i`.
    pub fn slice(&self, ranges: &[SliceRange]) -> Result<Tensor> {
        Tensor::apply(
            Op::Slice {
                ranges: ranges.to_vec(),
            },
            &[self],
        )
    }
    /// `start..end` by `step` along one axis.
    pub fn slice_axis(&self, axis: isize, start: usize, end: usize, step: usize) -> Result<Tensor> {
        let axis = resolve_axis(axis, self.rank(), "slice")?;
        let mut ranges: Vec<SliceRange> = self.dims()[..=axis]
            .iter()
            .map(|&d| SliceRange {
                start: 0,
                end: d,
                step: 1,
            })
            .collect();
        ranges[axis] = SliceRange { start, end, step };
        self.slice(&ranges)
    }
    /// `len` elements from `start` along `axis`.
    pub fn narrow(&self, axis: isize, start: usize, len: usize) -> Result<Tensor> {
        self.slice_axis(axis, start, start.saturating_add(len), 1)
    }
    /// Broadcasts to `shape` without copying.
    pub fn expand(&self, shape: impl Into<Shape>) -> Result<Tensor> {
        let shape = shape.into();
        if &shape == self.shape() {
            return Ok(self.clone());
        }
        Tensor::apply(Op::Expand { shape }, &[self])
    }
    /// Removes an axis of size 1.
    pub fn squeeze(&self, axis: isize) -> Result<Tensor> {
        let a = resolve_axis(axis, self.rank(), "squeeze")?;
        if self.rank() == 0 || self.dims()[a] != 1 {
            return Err(Error::shape(
                "squeeze",
                alloc::format!("axis {axis} of shape {} is not of size 1", self.shape()),
            ));
        }
        let mut dims = self.dims().to_vec();
        dims.remove(a);
        self.reshape(dims)
    }
    /// Inserts an axis of size 1 at `axis` (`-1` appends).
    pub fn unsqueeze(&self, axis: isize) -> Result<Tensor> {
        let a = resolve_axis(axis, self.rank() + 1, "unsqueeze")?;
        let mut dims = self.dims().to_vec();
        dims.insert(a, 1);
        self.reshape(dims)
    }
    /// Merges axes `start..=end` into one.
    pub fn flatten(&self, start: isize, end: isize) -> Result<Tensor> {
        if self.rank() == 0 {
            return self.reshape([1]);
        }
        let (s, e) = (
            resolve_axis(start, self.rank(), "flatten")?,
            resolve_axis(end, self.rank(), "flatten")?,
        );
        if s > e {
            return Err(Error::invalid(
                "flatten",
                alloc::format!("start axis {start} comes after end axis {end}"),
            ));
        }
        let d = self.dims();
        let mut dims = d[..s].to_vec();
        dims.push(d[s..=e].iter().product());
        dims.extend_from_slice(&d[e + 1..]);
        self.reshape(dims)
    }
    /// A row-major copy (the same tensor when already contiguous).
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.layout().is_contiguous() {
            return Ok(self.clone());
        }
        Tensor::apply(Op::Contiguous, &[self])
    }

    // ------------------------------------------------------------------ data movement

    /// Overwrites this tensor's elements from `offset` on (row-major) with those of `src` (same
    /// dtype and device), keeping its shape. In place when this handle alone holds its
    /// contiguous buffer and the device can write one (the CPU, WebGPU), otherwise into a new
    /// buffer: no other tensor ever sees the change. Not recorded by autodiff (`src` is
    /// detached): it is for state such as a KV cache.
    ///
    /// ```
    /// use kiln_core::{Device, Tensor};
    /// let dev = Device::cpu();
    /// let mut t = Tensor::zeros([2, 3], kiln_core::DType::F32, &dev)?;
    /// t.write_at(2, &Tensor::from_vec(vec![1.0f32, 2.0], [2], &dev)?)?;
    /// assert_eq!(t.to_vec::<f32>()?, [0.0, 0.0, 1.0, 2.0, 0.0, 0.0]);
    /// # Ok::<(), kiln_core::Error>(())
    /// ```
    pub fn write_at(&mut self, offset: usize, src: &Tensor) -> Result<()> {
        let (n, m) = (self.numel(), src.numel());
        if src.dtype() != self.dtype() || !src.device().same(self.device()) || offset + m > n {
            return Err(Error::invalid(
                "write_at",
                alloc::format!(
                    "expected {m} {} elements on {} to fit in {n} from {offset}, found {} on {}",
                    self.dtype(),
                    self.device().name(),
                    src.dtype(),
                    src.device().name()
                ),
            ));
        }
        if m == 0 {
            return Ok(());
        }
        let src = src.detach().contiguous()?;
        if let Some(inner) = Arc::get_mut(&mut self.0)
            && inner.node.is_none()
            && inner.layout.is_contiguous()
            && inner.storage.is_unique()
        {
            let at = inner.layout.offset() + offset;
            if inner
                .device
                .backend()
                .write(&mut inner.storage, at, src.view())?
            {
                return Ok(());
            }
        }
        // A copy: the elements before, `src`, the elements after.
        let flat = self.detach().reshape([n])?;
        let parts: Vec<Tensor> = [
            flat.narrow(0, 0, offset)?,
            src.reshape([m])?,
            flat.narrow(0, offset + m, n - offset - m)?,
        ]
        .into_iter()
        .filter(|t| t.numel() > 0)
        .collect();
        *self = Tensor::concat(&parts, 0)?.reshape(self.shape().clone())?;
        Ok(())
    }

    /// Joins tensors along an existing axis.
    pub fn concat(tensors: &[Tensor], axis: isize) -> Result<Tensor> {
        let first = tensors
            .first()
            .ok_or_else(|| Error::invalid("concat", "needs at least one tensor"))?;
        let axis = resolve_axis(axis, first.rank(), "concat")?;
        let refs: Vec<&Tensor> = tensors.iter().collect();
        Tensor::apply(Op::Concat { axis }, &refs)
    }
    /// Joins tensors along a new axis.
    pub fn stack(tensors: &[Tensor], axis: isize) -> Result<Tensor> {
        let first = tensors
            .first()
            .ok_or_else(|| Error::invalid("stack", "needs at least one tensor"))?;
        let a = resolve_axis(axis, first.rank() + 1, "stack")?;
        let parts = tensors
            .iter()
            .map(|t| t.unsqueeze(a as isize))
            .collect::<Result<Vec<_>>>()?;
        Tensor::concat(&parts, a as isize)
    }
    /// Splits along `axis` into pieces of the given sizes (which must sum to the axis size).
    pub fn split(&self, sizes: &[usize], axis: isize) -> Result<Vec<Tensor>> {
        let a = resolve_axis(axis, self.rank(), "split")?;
        let total: usize = sizes.iter().sum();
        if total != self.dims()[a] {
            return Err(Error::shape(
                "split",
                alloc::format!(
                    "sizes {sizes:?} sum to {total} but axis {axis} of {} has {}",
                    self.shape(),
                    self.dims()[a]
                ),
            ));
        }
        let mut start = 0;
        sizes
            .iter()
            .map(|&n| {
                let part = self.narrow(a as isize, start, n);
                start += n;
                part
            })
            .collect()
    }
    /// Splits along `axis` into `n` nearly equal pieces (the last may be smaller), as `torch.chunk`.
    pub fn chunk(&self, n: usize, axis: isize) -> Result<Vec<Tensor>> {
        let a = resolve_axis(axis, self.rank(), "chunk")?;
        if n == 0 {
            return Err(Error::invalid("chunk", "number of chunks must be positive"));
        }
        let size = self.dims()[a].div_ceil(n).max(1);
        let mut sizes = Vec::new();
        let mut left = self.dims()[a];
        while left > 0 {
            sizes.push(size.min(left));
            left -= size.min(left);
        }
        self.split(&sizes, axis)
    }
    /// `torch.gather` along `axis`.
    pub fn gather(&self, axis: isize, index: &Tensor) -> Result<Tensor> {
        let axis = resolve_axis(axis, self.rank(), "gather")?;
        Tensor::apply(Op::Gather { axis }, &[self, index])
    }
    /// Rows (along `axis`) picked by a rank-1 index.
    pub fn index_select(&self, axis: isize, index: &Tensor) -> Result<Tensor> {
        let axis = resolve_axis(axis, self.rank(), "index_select")?;
        Tensor::apply(Op::IndexSelect { axis }, &[self, index])
    }
    /// `torch.scatter_add` along `axis`: a copy of self with `src` added at `index`.
    pub fn scatter_add(&self, axis: isize, index: &Tensor, src: &Tensor) -> Result<Tensor> {
        let axis = resolve_axis(axis, self.rank(), "scatter_add")?;
        Tensor::apply(Op::ScatterAdd { axis }, &[self, index, src])
    }
    /// Constant padding: `(before, after)` for each leading axis.
    pub fn pad(&self, pads: &[(usize, usize)], value: f64) -> Result<Tensor> {
        Tensor::apply(
            Op::Pad {
                pads: pads.to_vec(),
                value,
            },
            &[self],
        )
    }
    /// One-hot encoding of an integer tensor: a new last axis of `classes`.
    pub fn one_hot(&self, classes: usize, dtype: DType) -> Result<Tensor> {
        Tensor::apply(Op::OneHot { classes, dtype }, &[self])
    }

    // ------------------------------------------------------------------ convolution and pooling

    /// 2-D convolution of NCHW input with an OIHW weight and optional bias of O.
    pub fn conv2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        params: Conv2dParams,
    ) -> Result<Tensor> {
        let y = Tensor::apply(Op::Conv2d(params), &[self, weight])?;
        add_channel_bias(y, bias, "conv2d")
    }
    /// Transposed 2-D convolution with an (I, O/groups, kh, kw) weight and optional bias.
    pub fn conv_transpose2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        params: Conv2dParams,
        output_padding: [usize; 2],
    ) -> Result<Tensor> {
        let y = Tensor::apply(
            Op::ConvTranspose2d {
                params,
                output_padding,
            },
            &[self, weight],
        )?;
        add_channel_bias(y, bias, "conv_transpose2d")
    }
    /// 2-D max pooling.
    pub fn max_pool2d(&self, params: Pool2dParams) -> Result<Tensor> {
        Tensor::apply(Op::Pool2d(Pool2d::Max(params)), &[self])
    }
    /// 2-D average pooling.
    pub fn avg_pool2d(&self, params: Pool2dParams) -> Result<Tensor> {
        Tensor::apply(Op::Pool2d(Pool2d::Avg(params)), &[self])
    }
    /// Adaptive average pooling to `output` (h, w).
    pub fn adaptive_avg_pool2d(&self, output: [usize; 2]) -> Result<Tensor> {
        Tensor::apply(Op::Pool2d(Pool2d::AdaptiveAvg { output }), &[self])
    }
}

/// The single storage a backend returned for a one-output op.
fn one(storages: Result<Vec<Storage>>) -> Result<Storage> {
    storages?
        .pop()
        .ok_or_else(|| Error::invalid("execute", "the backend returned no output"))
}

fn add_channel_bias(y: Tensor, bias: Option<&Tensor>, op: &'static str) -> Result<Tensor> {
    let Some(b) = bias else { return Ok(y) };
    if b.dims() != [y.dims()[1]] {
        return Err(Error::shape(
            op,
            alloc::format!("bias must have shape [{}], got {}", y.dims()[1], b.shape()),
        ));
    }
    y.add(&b.reshape([1, y.dims()[1], 1, 1])?)
}

/// A method per row of the unary table (`op/elementwise.rs`) without fields (`powf` and
/// `clamp` take arguments and are written out above).
macro_rules! unary_methods {
    (@one [$($doc:tt)*] $var:ident [] [] $method:ident) => {
        impl Tensor {
            $($doc)* pub fn $method(&self) -> Result<Tensor> { self.unary(UnaryOp::$var) }
        }
    };
    (@one $($with_fields:tt)*) => {};
    ($(
        $(#[$doc:meta])*
        $var:ident $(($($arg:ident: $ty:ty),*))? $({$($fields:tt)*})? $method:ident { $($row:tt)* }
    )*) => {
        $(unary_methods!(@one [$(#[$doc])*] $var [$($($arg)*)?] [$($($fields)*)?] $method);)*
    };
}
crate::unary_table!(unary_methods);

/// Two methods per row of the binary table: with a tensor and with a scalar, broadcasting.
macro_rules! binary_methods {
    ($(
        $(#[$doc:meta])*
        $var:ident $method:ident $scalar:ident $name:literal { $($row:tt)* }
    )*) => {
        impl Tensor {
            $(
                $(#[$doc])* #[doc = ", broadcasting"]
                pub fn $method(&self, rhs: &Tensor) -> Result<Tensor> { self.binary(BinaryOp::$var, rhs) }
                $(#[$doc])* #[doc = "with a scalar"]
                pub fn $scalar(&self, rhs: f64) -> Result<Tensor> { self.binary_scalar(BinaryOp::$var, rhs) }
            )*
        }
    };
}
crate::binary_table!(binary_methods);

/// A method per row of the comparison table.
macro_rules! compare_methods {
    ($(
        $(#[$doc:meta])*
        $var:ident $method:ident { $($row:tt)* }
    )*) => {
        impl Tensor {
            $(
                $(#[$doc])* #[doc = "(bool), broadcasting"]
                pub fn $method(&self, rhs: &Tensor) -> Result<Tensor> { self.compare(CmpOp::$var, rhs) }
            )*
        }
    };
}
crate::compare_table!(compare_methods);
