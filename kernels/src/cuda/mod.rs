//! WGSL -> CUDA C / HIP: the same kernels the wgpu backend runs, printed for NVRTC or hipRTC.
//!
//! [`translate`] parses WGSL with naga, validates it, and prints one `extern "C" __global__`
//! function per compute entry point (named as the entry point; a name C++ reserves, such as
//! `main`, gets a `_kernel` suffix — [`Kernel::name`] is the symbol), preceded by a small
//! prelude (`prelude.cuh`) that gives WGSL's vector types and built-ins their WGSL semantics
//! (non-trapping integer division, masked shifts, saturating float-to-int conversion, ...).
//!
//! Resources become kernel parameters, listed for each kernel in [`Kernel::params`] in the
//! order the launch must pass them:
//! - storage buffers: pointers (`const T* __restrict__` when read-only), ordered by
//!   (group, binding). Like WebGPU, a dispatch must not bind one buffer twice when either
//!   binding is writable (the pointers are declared non-aliasing);
//! - uniform buffers: passed **by value** as a struct whose layout matches WGSL's byte for byte
//!   (checked by `static_assert`s in the output), so a launch copies the uniform bytes as the
//!   parameter and no device buffer is needed;
//! - the one read-only storage buffer [`Options::inline`] names (CUDA only): passed by value
//!   too, as a fixed number of bytes the kernel reads through a pointer to the parameter
//!   (`__grid_constant__`), so a small header needs no device buffer either;
//! - `arrayLength(&buf)`: one extra `unsigned` parameter per runtime-sized buffer it is
//!   applied to, after the buffers.
//!
//! ```
//! use kiln_kernels::cuda::{translate, Dialect, ParamKind};
//! let wgsl = "
//! @group(0) @binding(0) var<storage, read> x: array<f32>;
//! @group(0) @binding(1) var<storage, read_write> y: array<f32>;
//! @compute @workgroup_size(64)
//! fn twice(@builtin(global_invocation_id) id: vec3<u32>) {
//!     if id.x < arrayLength(&x) { y[id.x] = 2.0 * x[id.x]; }
//! }";
//! let m = translate(wgsl, "twice", Dialect::Cuda)?;
//! assert!(m.source.contains("extern \"C\" __global__"));
//! let k = &m.kernels[0];
//! assert_eq!((k.name.as_str(), k.workgroup_size), ("twice", [64, 1, 1]));
//! assert!(matches!(k.params[2].kind, ParamKind::ArrayLength { binding: 0, .. }));
//! # Ok::<(), kiln_core::Error>(())
//! ```

mod names;
mod writer;

use kiln_core::{Error, Result};

/// Which compiler the source is for. The kernels are identical; only the prelude differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// NVIDIA CUDA C++ (NVRTC or nvcc).
    Cuda,
    /// AMD HIP (hipRTC or hipcc).
    Hip,
}

/// Options of [`translate_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Options {
    /// Target compiler.
    pub dialect: Dialect,
    /// Clear workgroup (`__shared__`) memory at kernel start, as WGSL specifies. Kernels that
    /// write before they read can skip it.
    pub zero_workgroup_memory: bool,
    /// A read-only storage buffer to pass by value ([`ParamKind::Inline`]); CUDA only.
    pub inline: Option<Inline>,
}

/// Which read-only storage buffer a CUDA kernel takes by value, and in how many bytes: its
/// contents (at most `capacity` bytes, zero-padded) travel with the launch, as a uniform's do.
///
/// ```
/// use kiln_kernels::cuda::{translate_with, Dialect, Inline, Options, ParamKind};
/// let wgsl = "
/// @group(0) @binding(0) var<storage, read> scale: array<f32>;
/// @group(0) @binding(1) var<storage, read_write> y: array<f32>;
/// @compute @workgroup_size(64)
/// fn main(@builtin(global_invocation_id) id: vec3<u32>) {
///     if id.x < arrayLength(&y) { y[id.x] = scale[id.x % 4u]; }
/// }";
/// let inline = Inline { group: 0, binding: 0, capacity: 256 };
/// let options = Options { inline: Some(inline), ..Options::new(Dialect::Cuda) };
/// let k = &translate_with(wgsl, "scale", options)?.kernels[0];
/// assert!(matches!(k.params[0].kind, ParamKind::Inline { capacity: 256, .. }));
/// # Ok::<(), kiln_core::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Inline {
    /// `@group`
    pub group: u32,
    /// `@binding`
    pub binding: u32,
    /// Bytes of the parameter: a non-zero multiple of 16.
    pub capacity: u32,
}

impl Options {
    /// WGSL semantics for `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        Options {
            dialect,
            zero_workgroup_memory: true,
            inline: None,
        }
    }
}

/// The translation of one WGSL module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CudaModule {
    /// Complete CUDA C++ / HIP source, ready for NVRTC / hipRTC.
    pub source: String,
    /// One entry per compute entry point, in module order.
    pub kernels: Vec<Kernel>,
}

/// One `__global__` function and how to launch it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// The symbol (the WGSL entry point's name, unmangled).
    pub name: String,
    /// `@workgroup_size`, which is the CUDA block size.
    pub workgroup_size: [u32; 3],
    /// The kernel parameters, in launch order.
    pub params: Vec<Param>,
}

/// One kernel parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    /// Its name in the source.
    pub name: String,
    /// What the launch passes.
    pub kind: ParamKind,
}

/// What a kernel parameter carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A device pointer to the storage buffer bound at (group, binding).
    Storage {
        /// `@group`
        group: u32,
        /// `@binding`
        binding: u32,
        /// `var<storage, read>`: the kernel never writes it.
        read_only: bool,
    },
    /// The bytes of the uniform buffer bound at (group, binding), passed by value.
    Uniform {
        /// `@group`
        group: u32,
        /// `@binding`
        binding: u32,
        /// Bytes the parameter takes (the WGSL size of the uniform's type).
        size: u32,
    },
    /// The first `capacity` bytes of the read-only storage buffer bound at (group, binding),
    /// passed by value ([`Options::inline`]): the launch passes a pointer to that many host
    /// bytes, zero-padded past the buffer's contents.
    Inline {
        /// `@group`
        group: u32,
        /// `@binding`
        binding: u32,
        /// Bytes the parameter takes.
        capacity: u32,
    },
    /// `u32`: the element count of the runtime-sized array of the storage buffer at
    /// (group, binding), that is `(buffer bytes - offset) / stride`.
    ArrayLength {
        /// `@group`
        group: u32,
        /// `@binding`
        binding: u32,
        /// Byte offset of the runtime-sized array in the buffer's type.
        offset: u32,
        /// Byte stride of its elements.
        stride: u32,
    },
}

/// Translates the compute entry points of `wgsl` with WGSL semantics. `label` names the kernel
/// in errors (`"translate matmul_tiled: ..."`).
pub fn translate(wgsl: &str, label: &str, dialect: Dialect) -> Result<CudaModule> {
    translate_with(wgsl, label, Options::new(dialect))
}

/// [`translate`] with explicit [`Options`].
pub fn translate_with(wgsl: &str, label: &str, options: Options) -> Result<CudaModule> {
    let op = format!("translate {label}");
    let module = naga::front::wgsl::parse_str(wgsl).map_err(|e| {
        Error::format(
            op.clone(),
            format!("WGSL does not parse: {}", e.emit_to_string(wgsl)),
        )
    })?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| {
        Error::format(
            op.clone(),
            format!("WGSL does not validate: {}", e.emit_to_string(wgsl)),
        )
    })?;
    writer::Writer::new(&module, &info, options, op).write()
}
