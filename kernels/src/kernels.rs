//! The WGSL kernel files, embedded at build time without comments or indentation (`build.rs`).
//! Each file in `kernels/wgsl/` is documented in its header comment (params layout, bindings,
//! defines); the Rust side that fills them lives in [`crate::plan`].

/// Every kernel file by name, including the `#include`-only helpers.
pub const FILES: &[(&str, &str)] = &[
    (
        "common.wgsl",
        include_str!(concat!(env!("OUT_DIR"), "/common.wgsl")),
    ),
    (
        "math.wgsl",
        include_str!(concat!(env!("OUT_DIR"), "/math.wgsl")),
    ),
    (
        "vec.wgsl",
        include_str!(concat!(env!("OUT_DIR"), "/vec.wgsl")),
    ),
    (
        "map.wgsl",
        include_str!(concat!(env!("OUT_DIR"), "/map.wgsl")),
    ),
    (
        "adam.wgsl",
        include_str!(concat!(env!("OUT_DIR"), "/adam.wgsl")),
    ),
    (
        "binary.wgsl",
        include_str!(concat!(env!("OUT_DIR"), "/binary.wgsl")),
    ),
    (
        "reduce.wgsl",
        include_str!(concat!(env!("OUT_DIR"), "/reduce.wgsl")),
    ),
    (
        "rows.wgsl",
        include_str!(concat!(env!("OUT_DIR"), "/rows.wgsl")),
    ),
    (
        "gemm.wgsl",
        include_str!(concat!(env!("OUT_DIR"), "/gemm.wgsl")),
    ),
    (
        "pool.wgsl",
        include_str!(concat!(env!("OUT_DIR"), "/pool.wgsl")),
    ),
    (
        "index.wgsl",
        include_str!(concat!(env!("OUT_DIR"), "/index.wgsl")),
    ),
    (
        "fill.wgsl",
        include_str!(concat!(env!("OUT_DIR"), "/fill.wgsl")),
    ),
    (
        "random.wgsl",
        include_str!(concat!(env!("OUT_DIR"), "/random.wgsl")),
    ),
];

/// The text of kernel file `name` (`"map.wgsl"`).
pub fn source(name: &str) -> Option<&'static str> {
    FILES.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}
