//! Reverse-mode autodiff over recorded tensor ops. It records ops, not backend calls, so it
//! works on every backend.
//!
//! Every op on a tensor that requires grad keeps its [`Node`](crate::tensor::Node) (op and
//! inputs). [`Tensor::backward`] walks that graph from the output back to the leaves made with
//! [`Tensor::require_grad`] and returns their gradients in a [`Gradients`] container; tensors
//! themselves are never mutated.
//!
//! ```
//! use kiln_core::{Device, DType, Tensor};
//! let dev = Device::cpu();
//! let x = Tensor::from_vec(vec![1.0f64, 2.0, 3.0], [3], &dev)?.require_grad();
//! let y = x.mul(&x)?.sum_all()?; // sum(x^2)
//! let grads = y.backward()?;
//! assert_eq!(grads.get(&x).unwrap().to_vec::<f64>()?, vec![2.0, 4.0, 6.0]);
//! # Ok::<(), kiln_core::Error>(())
//! ```
//!
//! This file holds the recording switches; `graph` walks the graph, `rules` holds one backward
//! rule per op and `gradients` the container.

mod gradients;
mod graph;
mod rules;

pub use gradients::Gradients;

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

/// Runs `f` with neither gradient recording nor tracing: backward passes compute plain values
/// that hold no history (so gradients never keep the forward graph alive).
pub(crate) fn untracked<R>(f: impl FnOnce() -> R) -> R {
    struct Guard(usize);
    impl Drop for Guard {
        fn drop(&mut self) {
            for _ in 0..self.0 {
                bump(&TRACE_DEPTH, true);
            }
        }
    }
    let traced = depth(&TRACE_DEPTH);
    for _ in 0..traced {
        bump(&TRACE_DEPTH, false);
    }
    let _g = Guard(traced);
    no_grad(f)
}

/// `true` inside [`tracing`].
pub fn is_tracing() -> bool {
    depth(&TRACE_DEPTH) > 0
}

/// Whether the graph keeps input `i` of a recorded `op` on `inputs` with its values: where
/// `op`'s backward rule reads them, or the input's own rule reads its output (see
/// [`rules::reads`]).
pub(crate) fn reads_value(op: &crate::Op, i: usize, inputs: &[&Tensor]) -> bool {
    rules::reads(op, Some(i), |k| {
        inputs.get(k).is_some_and(|t| t.requires_grad())
    }) || inputs[i].node().is_some_and(|n| {
        rules::reads(&n.op, None, |k| {
            n.inputs.get(k).is_some_and(|t| t.requires_grad())
        })
    })
}

/// Whether an op on `inputs` must keep its history.
pub(crate) fn should_record(inputs: &[&Tensor]) -> bool {
    is_tracing() || (is_grad_enabled() && inputs.iter().any(|t| t.requires_grad()))
}
