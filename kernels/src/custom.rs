//! The GPU side of custom ops ([`kiln_core::op::custom`]): checking a user's WGSL with naga
//! when it is registered, and its kernel key and source for the planner and the runtimes.
//!
//! ```
//! use kiln_core::op::custom::{Attrs, CustomOp, Grid, KernelLaunch};
//! use kiln_core::{Meta, Result, TensorData};
//! use std::sync::Arc;
//!
//! struct Broken;
//! impl CustomOp for Broken {
//!     fn name(&self) -> &str { "doc_broken" }
//!     fn infer(&self, _: &Attrs, inputs: &[Meta]) -> Result<Meta> { Ok(inputs[0].clone()) }
//!     fn cpu(&self, _: &Attrs, inputs: &[TensorData], _: &Meta) -> Result<TensorData> {
//!         Ok(inputs[0].clone())
//!     }
//!     fn wgsl(&self) -> Option<&str> { Some("@compute @workgroup_size(64)\nfn main() {\n  let x: f32 = 1u;\n}") }
//! }
//! let err = kiln_kernels::register_op(Arc::new(Broken)).unwrap_err();
//! assert!(err.to_string().contains("line 3"), "{err}");
//! ```

use crate::plan::KernelKey;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use kiln_core::op::custom::{CustomOp, Registered};
use kiln_core::{Error, Result};

/// The `file` of every custom op's [`KernelKey`] (its defines name the op and registration).
pub const FILE: &str = "custom";

/// Registers `op` (see [`kiln_core::op::custom::register_op`]) after checking its WGSL, if it
/// has one, with [`check_wgsl`]: errors name the op and point at the WGSL line.
pub fn register_op(op: Arc<dyn CustomOp>) -> Result<()> {
    if let Some(src) = op.wgsl() {
        check_wgsl(op.name(), src)?;
    }
    kiln_core::op::custom::register_op(op)
}

/// Parses and validates `source` with naga and checks the custom-kernel convention: a
/// `@compute fn main` and a params header at `@group(0) @binding(0)`. Errors say
/// `WGSL line L, column C` and quote the line.
pub fn check_wgsl(name: &str, source: &str) -> Result<()> {
    let op = format!("register_op({name})");
    let at = |loc: Option<naga::SourceLocation>, what: String| {
        let place = loc.map_or(String::new(), |l| {
            format!("WGSL line {}, column {}: ", l.line_number, l.line_position)
        });
        Error::invalid(op.clone(), format!("{place}{what}"))
    };
    let module = naga::front::wgsl::parse_str(source)
        .map_err(|e| at(e.location(source), e.emit_to_string_with_path(source, name)))?;
    naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::empty(),
    )
    .validate(&module)
    .map_err(|e| at(e.location(source), e.emit_to_string_with_path(source, name)))?;
    let main = module
        .entry_points
        .iter()
        .any(|e| e.name == "main" && e.stage == naga::ShaderStage::Compute);
    if !main {
        return Err(at(
            None,
            "expected an entry point `@compute fn main`".to_string(),
        ));
    }
    let params = module.global_variables.iter().any(|(_, g)| {
        g.binding
            .as_ref()
            .is_some_and(|b| b.group == 0 && b.binding == 0)
    });
    if !params {
        return Err(at(
            None,
            "expected the params header at @group(0) @binding(0) \
             (var<storage, read> params: YourParams), then the inputs and the output"
                .to_string(),
        ));
    }
    Ok(())
}

impl KernelKey {
    /// The kernel of a registered custom op.
    pub fn custom(r: &Registered) -> KernelKey {
        KernelKey {
            file: FILE,
            defines: [
                ("NAME".to_string(), r.name.to_string()),
                ("ID".to_string(), r.id.to_string()),
            ]
            .into_iter()
            .collect(),
        }
    }
}

/// The WGSL of the custom op a [`FILE`] key names, if it is still registered as that key says.
pub(crate) fn source(key: &KernelKey) -> Result<String> {
    let get = |k: &str| key.defines.get(k).map(String::as_str).unwrap_or_default();
    let r = kiln_core::op::custom::lookup(get("NAME"))?;
    if r.id.to_string() != get("ID") {
        return Err(Error::invalid(
            r.name,
            "was registered again after this kernel was planned",
        ));
    }
    r.op.wgsl()
        .map(String::from)
        .ok_or_else(|| Error::unsupported(r.name, "has no WGSL kernel; it runs on the CPU only"))
}
