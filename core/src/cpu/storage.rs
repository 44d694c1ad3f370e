//! CPU buffers: one plain `Vec` per dtype, and typed, bounds-checked read access to views of them.

use crate::backend::View;
use crate::{DType, Element, Error, Layout, Result, Shape, TensorData};
use alloc::borrow::Cow;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};
use half::f16;

/// Bytes held by live CPU buffers (for [`crate::Backend::allocated_bytes`]).
pub(crate) static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

/// A CPU buffer: a vector of one element type, row-major.
#[derive(Debug)]
pub enum CpuStorage {
    /// f64 elements
    F64(Vec<f64>),
    /// f32 elements
    F32(Vec<f32>),
    /// f16 elements (computed in f32)
    F16(Vec<f16>),
    /// i32 elements
    I32(Vec<i32>),
    /// u32 elements
    U32(Vec<u32>),
    /// bool elements
    Bool(Vec<bool>),
}

impl CpuStorage {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            CpuStorage::F64(_) => DType::F64,
            CpuStorage::F32(_) => DType::F32,
            CpuStorage::F16(_) => DType::F16,
            CpuStorage::I32(_) => DType::I32,
            CpuStorage::U32(_) => DType::U32,
            CpuStorage::Bool(_) => DType::Bool,
        }
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            CpuStorage::F64(v) => v.len(),
            CpuStorage::F32(v) => v.len(),
            CpuStorage::F16(v) => v.len(),
            CpuStorage::I32(v) => v.len(),
            CpuStorage::U32(v) => v.len(),
            CpuStorage::Bool(v) => v.len(),
        }
    }
    /// `true` when the buffer holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn bytes(&self) -> usize {
        self.len() * self.dtype().size_in_bytes()
    }
    /// Wraps a vector, counting its bytes as allocated.
    pub(crate) fn new<T: CpuElem>(values: Vec<T>) -> CpuStorage {
        let s = T::wrap(values);
        ALLOCATED.fetch_add(s.bytes(), Ordering::Relaxed);
        s
    }
    /// Parses host data (little-endian bytes) into a typed vector.
    pub(crate) fn from_data(data: &TensorData) -> CpuStorage {
        let b = data.as_bytes();
        fn le<const N: usize, T>(b: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
            b.chunks_exact(N)
                .map(|c| {
                    let mut a = [0u8; N];
                    a.copy_from_slice(c);
                    f(a)
                })
                .collect()
        }
        match data.dtype() {
            DType::F64 => Self::new(le(b, f64::from_le_bytes)),
            DType::F32 => Self::new(le(b, f32::from_le_bytes)),
            DType::F16 => Self::new(le(b, f16::from_le_bytes)),
            DType::I32 => Self::new(le(b, i32::from_le_bytes)),
            DType::U32 => Self::new(le(b, u32::from_le_bytes)),
            DType::Bool => Self::new(b.iter().map(|&x| x != 0).collect::<Vec<bool>>()),
        }
    }
}

impl Drop for CpuStorage {
    fn drop(&mut self) {
        ALLOCATED.fetch_sub(self.bytes(), Ordering::Relaxed);
        match self {
            CpuStorage::F64(v) => recycle(core::mem::take(v)),
            CpuStorage::F32(v) => recycle(core::mem::take(v)),
            CpuStorage::F16(v) => recycle(core::mem::take(v)),
            CpuStorage::I32(v) => recycle(core::mem::take(v)),
            CpuStorage::U32(v) => recycle(core::mem::take(v)),
            CpuStorage::Bool(v) => recycle(core::mem::take(v)),
        }
    }
}

/// Buffers of dropped tensors, kept (under `std`) for the next outputs of about their size:
/// memory fresh from the OS costs a page fault per page on first touch, and a training step
/// allocates the same large sizes again and again.
pub(crate) struct Pool<T> {
    buffers: Vec<Vec<T>>,
    bytes: usize,
    /// The largest [`scratch`] given back.
    scratch: Vec<T>,
}

impl<T> Pool<T> {
    const fn new() -> Self {
        Pool {
            buffers: Vec::new(),
            bytes: 0,
            scratch: Vec::new(),
        }
    }
}

/// At least `n` elements of scratch whose values are whatever an earlier user left (zeros when
/// new), for kernels that write their scratch before reading it: zeroing it on every call cost
/// more than some of those kernels (Winograd's 0.55 MB for the MNIST CNN's conv2 at batch 1).
/// Give it back with [`keep_scratch`].
pub(crate) fn scratch<T: CpuElem>(n: usize) -> Vec<T> {
    let mut s = core::mem::take(&mut T::pool().lock().scratch);
    if s.len() < n {
        s.resize(n, T::default());
    }
    s
}

/// Keeps `s` for the next [`scratch`] when it is the largest given back and no larger than
/// [`recycle`] keeps a buffer (a large image's column matrix is not held for ever).
pub(crate) fn keep_scratch<T: CpuElem>(s: Vec<T>) {
    if s.capacity() * size_of::<T>() > POOL_MAX_BYTES / 4 {
        return;
    }
    let mut pool = T::pool().lock();
    if s.len() > pool.scratch.len() {
        pool.scratch = s;
    }
}

/// Smaller buffers come cheaply from the allocator and are not pooled.
const POOL_MIN_BYTES: usize = 1 << 17;
/// Most bytes the pools of each type hold; the oldest buffers go first.
const POOL_MAX_BYTES: usize = 1 << 28;

/// An empty vector with room for `n` elements, from the pool when it has one of up to twice
/// that size.
pub(crate) fn buffer<T: CpuElem>(n: usize) -> Vec<T> {
    if cfg!(feature = "std") && n * size_of::<T>() >= POOL_MIN_BYTES {
        let mut pool = T::pool().lock();
        let best = (pool.buffers.iter().enumerate())
            .filter(|(_, b)| (n..=2 * n).contains(&b.capacity()))
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        if let Some(i) = best {
            let v = pool.buffers.remove(i);
            pool.bytes -= v.capacity() * size_of::<T>();
            return v;
        }
    }
    Vec::with_capacity(n)
}

/// Keeps `v`'s memory for [`buffer`] (or frees it).
pub(crate) fn recycle<T: CpuElem>(mut v: Vec<T>) {
    let bytes = v.capacity() * size_of::<T>();
    if !cfg!(feature = "std") || !(POOL_MIN_BYTES..=POOL_MAX_BYTES / 4).contains(&bytes) {
        return;
    }
    v.clear();
    let mut evicted = Vec::new();
    {
        let mut pool = T::pool().lock();
        while pool.bytes + bytes > POOL_MAX_BYTES && !pool.buffers.is_empty() {
            let old = pool.buffers.remove(0);
            pool.bytes -= old.capacity() * size_of::<T>();
            evicted.push(old);
        }
        pool.bytes += bytes;
        pool.buffers.push(v);
    }
    drop(evicted); // freed outside the lock
}

/// An element type the CPU backend stores.
pub(crate) trait CpuElem: Element {
    /// The vector as a buffer (without counting it; use [`CpuStorage::new`]).
    fn wrap(values: Vec<Self>) -> CpuStorage;
    /// The buffer's elements when it holds this type.
    fn slice(s: &CpuStorage) -> Option<&[Self]>;
    /// Appends the little-endian bytes of this value.
    fn write_le(self, out: &mut Vec<u8>);
    /// The pool of freed buffers of this type.
    fn pool() -> &'static spin::Mutex<Pool<Self>>;
}

macro_rules! cpu_elem {
    ($($t:ty => $v:ident),*) => {$(
        impl CpuElem for $t {
            fn wrap(values: Vec<Self>) -> CpuStorage {
                CpuStorage::$v(values)
            }
            fn slice(s: &CpuStorage) -> Option<&[Self]> {
                match s {
                    CpuStorage::$v(v) => Some(v),
                    _ => None,
                }
            }
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn pool() -> &'static spin::Mutex<Pool<Self>> {
                static POOL: spin::Mutex<Pool<$t>> = spin::Mutex::new(Pool::new());
                &POOL
            }
        }
    )*};
}
cpu_elem!(f64 => F64, f32 => F32, f16 => F16, i32 => I32, u32 => U32);

impl CpuElem for bool {
    fn wrap(values: Vec<Self>) -> CpuStorage {
        CpuStorage::Bool(values)
    }
    fn slice(s: &CpuStorage) -> Option<&[Self]> {
        match s {
            CpuStorage::Bool(v) => Some(v),
            _ => None,
        }
    }
    fn write_le(self, out: &mut Vec<u8>) {
        out.push(self as u8);
    }
    fn pool() -> &'static spin::Mutex<Pool<Self>> {
        static POOL: spin::Mutex<Pool<bool>> = spin::Mutex::new(Pool::new());
        &POOL
    }
}

/// Copies the elements of `src` (row-major, of `dst`'s dtype) over `dst`'s from `offset` on.
pub(crate) fn write(dst: &mut CpuStorage, offset: usize, src: &View<'_>) -> Result<()> {
    fn put<T: CpuElem>(dst: &mut [T], offset: usize, src: &View<'_>) -> Result<()> {
        let s = Src::<T>::new("write", src)?.to_contiguous();
        let len = dst.len();
        let to = dst.get_mut(offset..offset + s.len()).ok_or_else(|| {
            Error::shape(
                "write",
                alloc::format!(
                    "expected {} elements from {offset} to fit in {len}, found they do not",
                    s.len()
                ),
            )
        })?;
        to.copy_from_slice(&s);
        Ok(())
    }
    match dst {
        CpuStorage::F64(v) => put(v, offset, src),
        CpuStorage::F32(v) => put(v, offset, src),
        CpuStorage::F16(v) => put(v, offset, src),
        CpuStorage::I32(v) => put(v, offset, src),
        CpuStorage::U32(v) => put(v, offset, src),
        CpuStorage::Bool(v) => put(v, offset, src),
    }
}

/// The CPU buffer behind a view, or an error naming `op` when it belongs to another device.
pub(crate) fn cpu_storage<'a>(op: &'static str, v: &View<'a>) -> Result<&'a CpuStorage> {
    v.storage
        .downcast::<CpuStorage>()
        .ok_or_else(|| Error::device(op, "an input tensor is not stored on the cpu device"))
}

/// A typed input: a buffer seen through a layout whose every element lies inside it.
#[derive(Clone, Copy)]
pub(crate) struct Src<'a, T> {
    pub data: &'a [T],
    pub layout: &'a Layout,
}

impl<'a, T: CpuElem> Src<'a, T> {
    /// The view as `T`, checking that the layout stays inside the buffer.
    pub fn new(op: &'static str, v: &View<'a>) -> Result<Self> {
        let s = cpu_storage(op, v)?;
        let data = T::slice(s).ok_or_else(|| {
            Error::dtype(
                op,
                alloc::format!("expected a {} buffer, found {}", T::DTYPE, s.dtype()),
            )
        })?;
        check_bounds(op, data.len(), v.layout)?;
        Ok(Src {
            data,
            layout: v.layout,
        })
    }
    /// The logical shape.
    pub fn shape(&self) -> &'a Shape {
        self.layout.shape()
    }
    /// The dimensions.
    pub fn dims(&self) -> &'a [usize] {
        self.layout.shape().dims()
    }
    /// The elements as one slice, when they are already row-major and gap-free.
    pub fn contiguous(&self) -> Option<&'a [T]> {
        let n = self.layout.shape().numel();
        let o = self.layout.offset();
        (self.layout.is_contiguous() && o + n <= self.data.len()).then(|| &self.data[o..o + n])
    }
    /// The elements in row-major order, copied only when the layout requires it.
    pub fn to_contiguous(self) -> Cow<'a, [T]> {
        match self.contiguous() {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(super::strided::row_major_copy(&self)),
        }
    }
}

/// Checks that every element of `layout` lies inside a buffer of `len` elements, so that kernels
/// may index without further checks.
fn check_bounds(op: &'static str, len: usize, layout: &Layout) -> Result<()> {
    let dims = layout.shape().dims();
    if dims.contains(&0) {
        return Ok(());
    }
    let (mut lo, mut hi) = (layout.offset() as isize, layout.offset() as isize);
    for (&d, &s) in dims.iter().zip(layout.strides()) {
        let span = s * (d as isize - 1);
        if span < 0 {
            lo += span;
        } else {
            hi += span;
        }
    }
    if lo < 0 || hi >= len as isize {
        return Err(Error::invalid(
            op,
            alloc::format!(
                "layout {:?} (offset {}, strides {:?}) reaches outside its buffer of {len} elements",
                layout.shape(),
                layout.offset(),
                layout.strides()
            ),
        ));
    }
    Ok(())
}

/// Reads a view back as host data in row-major order.
pub(crate) fn read_view(v: &View<'_>) -> Result<TensorData> {
    fn bytes<T: CpuElem>(v: &View<'_>) -> Result<Vec<u8>> {
        let src = Src::<T>::new("read", v)?;
        let values = src.to_contiguous();
        let mut out = Vec::with_capacity(values.len() * T::DTYPE.size_in_bytes());
        for &x in values.iter() {
            x.write_le(&mut out);
        }
        Ok(out)
    }
    let b = match cpu_storage("read", v)?.dtype() {
        DType::F64 => bytes::<f64>(v)?,
        DType::F32 => bytes::<f32>(v)?,
        DType::F16 => bytes::<f16>(v)?,
        DType::I32 => bytes::<i32>(v)?,
        DType::U32 => bytes::<u32>(v)?,
        DType::Bool => bytes::<bool>(v)?,
    };
    let dtype = cpu_storage("read", v)?.dtype();
    TensorData::from_bytes(b, dtype, v.layout.shape().clone())
}
