//! Custom ops: kernels that users add without forking kiln.
//!
//! A custom op is a value implementing [`CustomOp`] (its name, shape/dtype rule, CPU reference,
//! optional WGSL kernel and optional gradient), registered once per process with
//! [`register_op`]. It is then called as [`Op::Custom`] (or [`Tensor::custom`]) and behaves as a
//! built-in op: [`Op::infer`] asks its rule, the CPU backend runs its reference, the GPU
//! backends run its WGSL (translated to CUDA C on CUDA), autodiff calls its backward, and a
//! traced model file records it by name with its attributes. Loading a file (or running an op)
//! that names an op not registered in this process is an error naming it.
//!
//! Natively, register through `kiln_kernels::register_op` (re-exported as `kiln::register_op`),
//! which also validates the WGSL with naga; [`register_op`] here registers without that check.
//!
//! ```
//! use kiln_core::op::custom::{Attrs, CustomOp, register_op};
//! use kiln_core::{Device, Meta, Result, Tensor, TensorData};
//! use std::sync::Arc;
//!
//! /// `y = x * scale` with `scale` an attribute.
//! struct Scale;
//! impl CustomOp for Scale {
//!     fn name(&self) -> &str { "doc_scale" }
//!     fn infer(&self, _: &Attrs, inputs: &[Meta]) -> Result<Meta> { Ok(inputs[0].clone()) }
//!     fn cpu(&self, attrs: &Attrs, inputs: &[TensorData], out: &Meta) -> Result<TensorData> {
//!         let s = attrs["scale"] as f32;
//!         let y = inputs[0].to_vec::<f32>()?.iter().map(|v| v * s).collect();
//!         TensorData::new(y, out.1.clone())
//!     }
//! }
//! register_op(Arc::new(Scale))?;
//! let x = Tensor::from_vec(vec![1.0f32, 2.0], [2], &Device::cpu())?;
//! let y = Tensor::custom("doc_scale", Attrs::from([("scale".into(), 3.0)]), &[&x])?;
//! assert_eq!(y.to_vec::<f32>()?, [3.0, 6.0]);
//! # Ok::<(), kiln_core::Error>(())
//! ```

use crate::error::Num;
use crate::error::{ErrorKind, fail};
use crate::op::{Meta, Op};
use crate::{Error, Result, SortedMap, Tensor, TensorData};
use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use serde::Serialize;

/// A custom op's attributes: named numbers, stored in the model file's graph (finite only, as
/// JSON holds no infinities).
pub type Attrs = BTreeMap<String, f64>;

/// A call of a registered custom op: its name and attributes ([`Op::Custom`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CustomCall {
    /// The name the op was registered under.
    pub name: String,
    /// Its attributes.
    #[serde(default)]
    pub attrs: Attrs,
}

/// How many workgroups a custom kernel runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grid {
    /// `count` invocations in workgroups of `workgroup_size` (the kernel's
    /// `@workgroup_size`): the planner splits the workgroups into an x * y * z grid of at most
    /// 65535 each, so the kernel finds its invocation as
    /// `group_index(wid, nwg) * WG + lid.x` (`#include "common.wgsl"`) and returns past `count`.
    Invocations {
        /// invocations needed (usually the output's element count)
        count: u64,
        /// the kernel's `@workgroup_size` (1-D)
        workgroup_size: u32,
    },
    /// Exactly these workgroups along x, y, z (each at most 65535).
    Workgroups([u32; 3]),
}

/// One launch of a custom op's WGSL kernel: the words of its params header and its grid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelLaunch {
    /// The words bound at binding 0, read by the kernel as its params struct (u32, i32 and f32
    /// fields as 4-byte words: `f.to_bits()` for an f32).
    pub params: Vec<u32>,
    /// The workgroups to run.
    pub grid: Grid,
}

/// A user-defined op. Implement it in your own crate and [`register_op`] it.
///
/// The op has one output. Its inputs reach [`CustomOp::cpu`] as row-major [`TensorData`] and its
/// kernel as contiguous buffers (strided views are copied first).
///
/// # The kernel convention
/// [`CustomOp::wgsl`] is a WGSL module with one `@compute fn main`. Binding 0 (group 0) is
/// `var<storage, read> params: P`, a struct of the words [`CustomOp::launch`] returns (its
/// typed header, as kiln's own kernels have); bindings 1..=n are the n inputs
/// (`var<storage, read>`, arrays of `f32`, `i32` or `u32`; bool is a u32 0/1) and binding n+1 is
/// the output (`var<storage, read_write>`). Every binding must be used. `#include` of kiln's
/// helper files (`"common.wgsl"`, `"math.wgsl"`) works as in kiln's kernels.
pub trait CustomOp: Send + Sync {
    /// The name calls and model files use (letters, digits, `_`, `.`, `:`, `-`).
    fn name(&self) -> &str;
    /// Validates the inputs (dtypes and shapes) and returns the output's dtype and shape. This
    /// is the only check: the other methods may assume it passed.
    fn infer(&self, attrs: &Attrs, inputs: &[Meta]) -> Result<Meta>;
    /// The reference implementation on the host, used by the CPU backend: the output for
    /// `inputs` as data of dtype and shape `output`.
    fn cpu(&self, attrs: &Attrs, inputs: &[TensorData], output: &Meta) -> Result<TensorData>;
    /// The WGSL kernel (see the trait's doc), or `None` for a CPU-only op.
    fn wgsl(&self) -> Option<&str> {
        None
    }
    /// The params words and grid of one kernel launch for these inputs and output.
    fn launch(&self, attrs: &Attrs, inputs: &[Meta], output: &Meta) -> Result<KernelLaunch> {
        let _ = (attrs, inputs, output);
        Err(Error::unsupported(
            String::from(self.name()),
            "has a WGSL kernel but no launch (implement CustomOp::launch)",
        ))
    }
    /// The gradient of each input given the output `y` and the gradient `g` flowing into it,
    /// written with tensor ops (custom ones included); `None` for an input without one. The
    /// default is an error: the op is not differentiable.
    fn backward(
        &self,
        attrs: &Attrs,
        inputs: &[Tensor],
        y: &Tensor,
        g: &Tensor,
    ) -> Result<Vec<Option<Tensor>>> {
        let _ = (attrs, inputs, y, g);
        Err(Error::unsupported(
            String::from(self.name()),
            "has no gradient (implement CustomOp::backward)",
        ))
    }
}

/// A registered op: the op and what identifies this registration.
#[derive(Clone)]
pub struct Registered {
    /// The op.
    pub op: Arc<dyn CustomOp>,
    /// Its name, kept for the process (so [`Op::name`] can return it).
    pub name: &'static str,
    /// Distinct for every registration, so caches of compiled kernels never serve the kernel of
    /// an op registered earlier under the same name.
    pub id: u64,
}

/// The registered ops by name, in name order (a `SortedMap`, not a `BTreeMap`: see
/// [`crate::sorted`]). An unregistered op's entry stays, empty: names are few (each is kept
/// for the process anyway).
type Registry = SortedMap<String, Option<Registered>>;

static REGISTRY: spin::Mutex<Registry> = spin::Mutex::new(SortedMap::new());
// usize: 32-bit targets without 64-bit atomics (thumbv7em) build kiln-core too.
static NEXT_ID: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(1);

/// Registers `op` under its name for this process, replacing an op of that name. Fails for an
/// empty name or one with other characters than letters, digits, `_`, `.`, `:` and `-`.
/// Does not check the WGSL: natively, prefer `kiln_kernels::register_op`, which does.
pub fn register_op(op: Arc<dyn CustomOp>) -> Result<()> {
    let name = op.name();
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-');
    if name.is_empty() || !name.chars().all(ok) {
        return Err(fail(
            ErrorKind::InvalidArgument,
            "register_op",
            format_args!(
                "a custom op's name must be letters, digits, '_', '.', ':' or '-', got {name:?}"
            ),
        ));
    }
    let mut registry = REGISTRY.lock();
    let entry = registry.get_or_insert_with(String::from(name), || None);
    // A re-registration reuses the name kept by the first one.
    let kept = match entry {
        Some(r) => r.name,
        None => Box::leak(String::from(name).into_boxed_str()),
    };
    let id = NEXT_ID.fetch_add(1, core::sync::atomic::Ordering::Relaxed) as u64;
    *entry = Some(Registered { op, name: kept, id });
    Ok(())
}

/// Names starting with this are kiln's own ops (the kernels its fusion generates):
/// [`registered_ops`] leaves them out and [`unregister_op`] keeps them.
pub const KILN_PREFIX: &str = "kiln.";

/// Removes the op registered as `name`; `false` if there was none or it is one of kiln's own
/// ([`KILN_PREFIX`]).
pub fn unregister_op(name: &str) -> bool {
    if name.starts_with(KILN_PREFIX) {
        return false;
    }
    let mut registry = REGISTRY.lock();
    registry.get_mut(name).is_some_and(|r| r.take().is_some())
}

/// The names of the registered ops, sorted, but for kiln's own ([`KILN_PREFIX`]).
pub fn registered_ops() -> Vec<String> {
    REGISTRY
        .lock()
        .iter()
        .filter(|(k, r)| r.is_some() && !k.starts_with(KILN_PREFIX))
        .map(|(k, _)| k.clone())
        .collect()
}

/// The op registered as `name`, or an error naming it and saying how to register it.
pub fn lookup(name: &str) -> Result<Registered> {
    // the lock is released before the error lists the registered names (it is not reentrant)
    let found = REGISTRY.lock().get(name).cloned().flatten();
    found.ok_or_else(|| not_registered(name))
}

/// The error for a call of an op that is not registered.
fn not_registered(name: &str) -> Error {
    Error::unsupported(
        String::from(name),
        format!(
            "is a custom op not registered in this process; register it before use with \
             kiln::register_op (Rust) or registerOp (JS) (registered: [{}])",
            registered_ops().join(", ")
        ),
    )
}

impl CustomCall {
    /// A call of `name` with `attrs`.
    pub fn new(name: impl Into<String>, attrs: Attrs) -> Self {
        CustomCall {
            name: name.into(),
            attrs,
        }
    }
    /// Attribute `key`, or an error naming the op and the attributes it has.
    pub fn attr(&self, key: &str) -> Result<f64> {
        attr(&self.name, &self.attrs, key)
    }
    /// The registered op, after checking the attributes can be stored.
    pub fn resolve(&self) -> Result<Registered> {
        let r = lookup(&self.name)?;
        if let Some((k, v)) = self.attrs.iter().find(|(_, v)| !v.is_finite()) {
            return Err(Error::invalid(
                r.name,
                format!(
                    "attribute {k:?} is {}; attributes must be finite numbers",
                    Num(*v)
                ),
            ));
        }
        Ok(r)
    }
}

/// Attribute `key` of `attrs` of op `op`, or an error naming what exists.
pub fn attr(op: &str, attrs: &Attrs, key: &str) -> Result<f64> {
    attrs.get(key).copied().ok_or_else(|| {
        Error::invalid(
            String::from(op),
            format!(
                "needs attribute {key:?}, got [{}]",
                attrs.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        )
    })
}

impl Op {
    /// A call of the registered custom op `name` (see [`CustomOp`]).
    pub fn custom(name: impl Into<String>, attrs: Attrs) -> Op {
        Op::Custom(CustomCall::new(name, attrs))
    }
}

impl Tensor {
    /// Runs the registered custom op `name` with `attrs` on `inputs` (at least one; an op
    /// without inputs runs through [`Tensor::create`] with [`Op::custom`]).
    pub fn custom(name: &str, attrs: Attrs, inputs: &[&Tensor]) -> Result<Tensor> {
        Tensor::apply(Op::custom(name, attrs), inputs)
    }
}

/// [`Op::infer`] for a custom op.
pub(crate) fn infer(call: &CustomCall, inputs: &[Meta]) -> Result<Meta> {
    call.resolve()?.op.infer(&call.attrs, inputs)
}

/// The op's name for messages: the registered one, or `"custom"` for an unknown name (whose
/// use fails with [`lookup`]'s error).
pub(crate) fn name(call: &CustomCall) -> &'static str {
    REGISTRY
        .lock()
        .get(&call.name)
        .and_then(Option::as_ref)
        .map_or("custom", |r| r.name)
}

/// The autodiff rule: the op's backward, checked to give one entry per input.
pub(crate) fn backward(
    call: &CustomCall,
    inputs: &[Tensor],
    y: &Tensor,
    g: &Tensor,
) -> Result<Vec<Option<Tensor>>> {
    let r = call.resolve()?;
    let grads = r.op.backward(&call.attrs, inputs, y, g)?;
    if grads.len() != inputs.len() {
        return Err(Error::invalid(
            r.name,
            format!(
                "backward returned {} gradients for {} inputs",
                grads.len(),
                inputs.len()
            ),
        ));
    }
    for (i, (gi, x)) in grads.iter().zip(inputs).enumerate() {
        if let Some(gi) = gi
            && (gi.shape() != x.shape() || gi.dtype() != x.dtype())
        {
            return Err(Error::shape(
                r.name,
                format!(
                    "backward gave input {i} a {} gradient of shape {}, expected {} of shape {}",
                    gi.dtype(),
                    gi.shape(),
                    x.dtype(),
                    x.shape()
                ),
            ));
        }
    }
    Ok(grads)
}
