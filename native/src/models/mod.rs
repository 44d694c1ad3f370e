//! Model architectures the `kiln` command trains and evaluates by name (`--arch`).

pub mod mnist;

pub use mnist::MnistCnn;
