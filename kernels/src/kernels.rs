//! The WGSL kernel files, embedded at build time. Each is documented in its header comment
//! (params layout, bindings, defines); the Rust side that fills them lives in [`crate::plan`].

/// Every kernel file by name, including the `#include`-only helpers.
pub const FILES: &[(&str, &str)] = &[
    ("common.wgsl", include_str!("../wgsl/common.wgsl")),
    ("math.wgsl", include_str!("../wgsl/math.wgsl")),
    ("map.wgsl", include_str!("../wgsl/map.wgsl")),
    ("adam.wgsl", include_str!("../wgsl/adam.wgsl")),
    ("binary.wgsl", include_str!("../wgsl/binary.wgsl")),
    ("reduce.wgsl", include_str!("../wgsl/reduce.wgsl")),
    ("rows.wgsl", include_str!("../wgsl/rows.wgsl")),
    ("gemm.wgsl", include_str!("../wgsl/gemm.wgsl")),
    ("pool.wgsl", include_str!("../wgsl/pool.wgsl")),
    ("index.wgsl", include_str!("../wgsl/index.wgsl")),
    ("fill.wgsl", include_str!("../wgsl/fill.wgsl")),
    ("random.wgsl", include_str!("../wgsl/random.wgsl")),
];

/// The text of kernel file `name` (`"map.wgsl"`).
pub fn source(name: &str) -> Option<&'static str> {
    FILES.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}
