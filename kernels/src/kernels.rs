//! The WGSL kernel files, embedded at build time without comments or indentation (`build.rs`).
//! Each file in `kernels/wgsl/` is documented in its header comment (params layout, bindings,
//! defines); the Rust side that fills them lives in [`crate::plan`].

/// A kernel file as `build.rs` writes it, under its name.
macro_rules! kernel {
    ($name:literal) => {
        ($name, include_str!(concat!(env!("OUT_DIR"), "/", $name)))
    };
}

/// Every kernel file by name, including the `#include`-only helpers.
pub const FILES: &[(&str, &str)] = &[
    kernel!("common.wgsl"),
    kernel!("strided.wgsl"),
    kernel!("math.wgsl"),
    kernel!("vec.wgsl"),
    kernel!("map.wgsl"),
    kernel!("adam.wgsl"),
    kernel!("binary.wgsl"),
    kernel!("reduce.wgsl"),
    kernel!("columns.wgsl"),
    kernel!("rows.wgsl"),
    kernel!("gemm.wgsl"),
    kernel!("pool.wgsl"),
    kernel!("index.wgsl"),
    kernel!("fill.wgsl"),
    kernel!("random.wgsl"),
];

/// The text of kernel file `name` (`"map.wgsl"`).
pub fn source(name: &str) -> Option<&'static str> {
    FILES.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}
