//! Reverse-mode autodiff over recorded tensor ops (works on every backend because it records
//! ops, not backend calls). This file holds the recording switches; backward lives beside it.

use crate::Tensor;

#[cfg(feature = "std")]
std::thread_local! {
    static NO_GRAD_DEPTH: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
    static TRACE_DEPTH: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
}

#[cfg(not(feature = "std"))]
static NO_GRAD_DEPTH: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);
#[cfg(not(feature = "std"))]
static TRACE_DEPTH: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

#[cfg(feature = "std")]
fn depth(which: &'static std::thread::LocalKey<core::cell::Cell<usize>>) -> usize {
    which.with(|c| c.get())
}
#[cfg(feature = "std")]
fn bump(which: &'static std::thread::LocalKey<core::cell::Cell<usize>>, up: bool) {
    which.with(|c| c.set(if up { c.get() + 1 } else { c.get() - 1 }));
}
#[cfg(not(feature = "std"))]
fn depth(which: &'static core::sync::atomic::AtomicUsize) -> usize {
    which.load(core::sync::atomic::Ordering::Relaxed)
}
#[cfg(not(feature = "std"))]
fn bump(which: &'static core::sync::atomic::AtomicUsize, up: bool) {
    use core::sync::atomic::Ordering::Relaxed;
    if up {
        which.fetch_add(1, Relaxed)
    } else {
        which.fetch_sub(1, Relaxed)
    };
}

/// `false` inside [`no_grad`].
pub fn is_grad_enabled() -> bool {
    depth(&NO_GRAD_DEPTH) == 0
}

/// Runs `f` without recording gradients (inference, optimizer updates).
///
/// ```
/// use kiln_core::{autodiff::no_grad, Device, DType, Tensor};
/// let x = Tensor::ones([2], DType::F32, &Device::cpu())?.require_grad();
/// let y = no_grad(|| x.mul_scalar(2.0))?;
/// assert!(!y.requires_grad());
/// # Ok::<(), kiln_core::Error>(())
/// ```
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    struct Guard;
    impl Drop for Guard {
        fn drop(&mut self) {
            bump(&NO_GRAD_DEPTH, false);
        }
    }
    bump(&NO_GRAD_DEPTH, true);
    let _g = Guard;
    f()
}

/// Runs `f` recording every op, gradients or not, so the graph of a forward pass can be saved.
pub fn tracing<R>(f: impl FnOnce() -> R) -> R {
    struct Guard;
    impl Drop for Guard {
        fn drop(&mut self) {
            bump(&TRACE_DEPTH, false);
        }
    }
    bump(&TRACE_DEPTH, true);
    let _g = Guard;
    f()
}

/// `true` inside [`tracing`].
pub fn is_tracing() -> bool {
    depth(&TRACE_DEPTH) > 0
}

/// Whether an op on `inputs` must keep its history.
pub(crate) fn should_record(inputs: &[&Tensor]) -> bool {
    is_tracing() || (is_grad_enabled() && inputs.iter().any(|t| t.requires_grad()))
}
