//! The WGSL kernel files, embedded at build time. Each is documented in its header comment
//! (params layout, bindings, defines); the Rust side that fills them lives in [`crate::plan`].
//! What is embedded is the files without comments (see `build.rs`).

/// The text of `kernels/wgsl/<name>` as build.rs left it.
macro_rules! wgsl {
    ($name:literal) => {
        (
            $name,
            include_str!(concat!(env!("OUT_DIR"), "/wgsl/", $name)),
        )
    };
}

/// Every kernel file by name, including the `#include`-only helpers.
pub const FILES: &[(&str, &str)] = &[
    wgsl!("common.wgsl"),
    wgsl!("math.wgsl"),
    wgsl!("map.wgsl"),
    wgsl!("adam.wgsl"),
    wgsl!("binary.wgsl"),
    wgsl!("reduce.wgsl"),
    wgsl!("rows.wgsl"),
    wgsl!("gemm.wgsl"),
    wgsl!("pool.wgsl"),
    wgsl!("index.wgsl"),
    wgsl!("fill.wgsl"),
    wgsl!("random.wgsl"),
];

/// The text of kernel file `name` (`"map.wgsl"`).
pub fn source(name: &str) -> Option<&'static str> {
    FILES.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}
