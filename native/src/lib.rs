//! # kiln
//!
//! kiln natively: the MNIST data loader, the training loop with progress, metrics and atomic
//! checkpoints, device selection, a static file server for the demo page, and the `kiln`
//! command that drives them. The tensor library itself is [`kiln_core`], re-exported as
//! [`kiln::core`](crate::core).
//!
//! ```no_run
//! use kiln::data::mnist::{Mnist, data_dir};
//! let mnist = Mnist::load(&data_dir(None)?)?;
//! assert_eq!(mnist.test.len(), 10_000);
//! # Ok::<(), kiln::core::Error>(())
//! ```

pub use kiln_core as core;
/// Registers a custom op (see [`kiln_core::op::custom`]) after checking its WGSL with naga.
pub use kiln_kernels::register_op;
pub use kiln_onnx as onnx;

pub mod bench;
pub mod checkpoint;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod data;
pub mod device;
pub mod dist;
#[cfg(any(feature = "cuda", feature = "rocm"))]
mod gpu;
pub mod learn;
pub mod lm;
pub mod models;
pub mod npy;
pub mod profile;
pub mod program;
#[cfg(feature = "rocm")]
pub mod rocm;
pub mod serve;
pub mod train;
