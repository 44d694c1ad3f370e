//! # kiln-core
//!
//! Tensors, the op set (ops are data), the [`Backend`] trait, autodiff, and the CPU reference
//! backend. `no_std` + `alloc`; the default `std` feature adds threads and blocking reads.
//!
//! ```
//! use kiln_core::{Device, DType, Tensor};
//! let dev = Device::cpu();
//! let x = Tensor::arange(0.0, 6.0, 1.0, DType::F32, &dev)?.reshape([2, 3])?;
//! let y = x.softmax(-1)?.sum(&[-1], false)?;
//! for v in y.to_vec::<f32>()? { assert!((v - 1.0).abs() < 1e-6); }
//! # Ok::<(), kiln_core::Error>(())
//! ```
#![cfg_attr(not(feature = "std"), no_std)]
// The threaded wasm32 build (nightly, `-Z build-std`) waits on memory for its pool's workers.
#![cfg_attr(
    all(target_arch = "wasm32", target_feature = "atomics"),
    feature(stdarch_wasm_atomic_wait)
)]

extern crate alloc;
// Lets `#[derive(Module)]` (which names `::kiln_core`) be used inside this crate.
extern crate self as kiln_core;

pub mod autodiff;
pub mod backend;
pub mod cpu;
pub mod data;
mod display;
pub mod dtype;
pub mod error;
mod infer;
// Used by the CPU kernels, and unused (and unlinked) without them.
#[cfg_attr(not(feature = "cpu-kernels"), allow(dead_code))]
mod math;
pub mod model;
pub mod nn;
pub mod op;
pub mod optim;
pub mod random;
pub mod shape;
pub mod sorted;
pub mod tensor;
pub mod tokenizer;

#[cfg(feature = "std")]
pub use backend::block_on;
pub use backend::{Backend, Device, ReadFuture, Storage, Tail, View};
pub use data::TensorData;
pub use dtype::{DType, Element};
pub use error::{Error, ErrorKind, Result};
pub use infer::{matmul_shape, reduced_shape};
pub use op::{
    AdamParams, BinaryOp, CmpOp, Conv2dParams, Meta, Op, Pool2d, Pool2dParams, ReduceOp, UnaryOp,
};
pub use shape::{Layout, Shape, SliceRange};
pub use sorted::SortedMap;
pub(crate) use sorted::sorted_unique;
pub use tensor::{Tensor, TensorId};
