//! # kiln-web
//!
//! kiln's JavaScript API, built with wasm-bindgen and published on npm as `kiln-ml`.
//! Tensors live on a [`Device`] (`Device.auto()`: WebGPU on a hardware adapter, else the CPU);
//! reading them back is always async (`await t.data()`); a [`Model`] loads the kiln model file
//! that `kiln train` writes, with `{ device: "auto" }` on whichever backend runs it faster.
//! Every failure reaches JavaScript as an `Error` carrying kiln's message.
//!
//! ```js
//! import init, { Device, Tensor, Model } from "kiln-ml";
//! await init();
//! const device = await Device.auto();
//! const x = Tensor.from([[1, 2], [3, 4]], null, { device });
//! console.log(await x.matmul(x).softmax(-1).array());
//! const model = await Model.load("mnist.safetensors", { device: "auto" });
//! console.log(model.device.kind, model.device.reason);
//! ```

mod custom;
mod device;
mod error;
mod js;
mod ledger;
mod model;
mod panic;
mod tensor;
#[cfg(feature = "text")]
mod text;
#[cfg(feature = "threads")]
mod threads;
mod webgpu;

pub use custom::{custom_op, register_op, registered_ops, unregister_op};
pub use device::{Device, fused_kernels};
pub use ledger::memory_report;
pub use model::Model;
pub use tensor::Tensor;
#[cfg(feature = "text")]
pub use text::TextModel;

use wasm_bindgen::prelude::*;

/// Runs once when the module is instantiated: panics become readable JS errors.
#[wasm_bindgen(start)]
pub fn start() {
    panic::install_hook();
}

/// The version of the kiln-web crate (and of the npm package built from it).
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").into()
}
