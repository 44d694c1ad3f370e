//! kiln-kernels: WGSL kernels and the wgpu backend (being built).
pub mod cuda;
