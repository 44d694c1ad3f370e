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
        check_wgsl(op.name(), &expand_includes(op.name(), src)?)?;
    }
    kiln_core::op::custom::register_op(op)
}

/// The helper files a custom kernel may `#include`.
pub const INCLUDABLE: [&str; 2] = ["common.wgsl", "math.wgsl"];

/// `src` with each `#include "file"` line of kiln's helper files ([`INCLUDABLE`]) commented
/// out and the file appended at the end instead (WGSL declarations may come in any order), so
/// that line numbers in naga's and the browser's errors stay those of the op's own source.
/// Errors name op `name` and the line of an unknown file.
///
/// ```
/// let src = "#include \"common.wgsl\"\n@compute @workgroup_size(1) fn main() {}\n";
/// let out = kiln_kernels::custom::expand_includes("doc_op", src)?;
/// assert!(out.starts_with("// #include \"common.wgsl\"\n@compute"));
/// assert!(kiln_kernels::custom::expand_includes("doc_op", "#include \"x.wgsl\"").is_err());
/// # Ok::<(), kiln_core::Error>(())
/// ```
pub fn expand_includes(name: &str, src: &str) -> Result<String> {
    let mut out = String::with_capacity(src.len());
    let mut appended: Vec<&str> = Vec::new();
    for (n, line) in src.lines().enumerate() {
        let Some(file) = line.trim().strip_prefix("#include") else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let file = file.trim().trim_matches('"');
        let Some(&known) = INCLUDABLE.iter().find(|&&f| f == file) else {
            return Err(Error::invalid(
                format!("register_op({name})"),
                format!(
                    "WGSL line {}: unknown #include {file:?}; a custom kernel may include {INCLUDABLE:?}",
                    n + 1
                ),
            ));
        };
        out.push_str("// ");
        out.push_str(line);
        out.push('\n');
        if !appended.contains(&known) {
            appended.push(known);
        }
    }
    for file in appended {
        let text = crate::kernels::source(file).unwrap_or_default();
        out.push_str(&crate::preprocess::preprocess(
            text,
            &Default::default(),
            &crate::kernels::source,
        )?);
    }
    Ok(out)
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
        KernelKey::new(FILE, &[("NAME", r.name), ("ID", &r.id.to_string())])
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
    let src = (r.op.wgsl())
        .ok_or_else(|| Error::unsupported(r.name, "has no WGSL kernel; it runs on the CPU only"))?;
    expand_includes(r.name, src)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_core::op::custom::{Attrs, CustomOp};
    use kiln_core::{Meta, TensorData};

    struct Kernel(&'static str);
    impl CustomOp for Kernel {
        fn name(&self) -> &str {
            "test_include"
        }
        fn infer(&self, _: &Attrs, inputs: &[Meta]) -> Result<Meta> {
            Ok(inputs[0].clone())
        }
        fn cpu(&self, _: &Attrs, inputs: &[TensorData], _: &Meta) -> Result<TensorData> {
            Ok(inputs[0].clone())
        }
        fn wgsl(&self) -> Option<&str> {
            Some(self.0)
        }
    }

    const HEAD: &str = "#include \"common.wgsl\"\n\
        @group(0) @binding(0) var<storage, read> params: array<u32>;\n\
        @group(0) @binding(1) var<storage, read> x: array<f32>;\n\
        @group(0) @binding(2) var<storage, read_write> y: array<f32>;\n";

    #[test]
    fn a_kernel_may_include_the_helpers_and_errors_keep_its_line_numbers() {
        let ok = format!(
            "{HEAD}@compute @workgroup_size(64)\n\
             fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,\n\
             @builtin(local_invocation_id) lid: vec3<u32>) {{\n\
             let i = group_index(wid, nwg) * 64u + lid.x;\n\
             if i < params[0] {{ y[i] = x[i]; }}\n}}\n"
        );
        register_op(Arc::new(Kernel(Box::leak(ok.into_boxed_str())))).unwrap();
        // line 7 of the op's own source, whatever the helper file's length
        let bad =
            format!("{HEAD}@compute @workgroup_size(1)\nfn main() {{\n  let v: f32 = 1u;\n}}\n");
        let e = register_op(Arc::new(Kernel(Box::leak(bad.into_boxed_str()))))
            .unwrap_err()
            .to_string();
        assert!(e.contains("WGSL line 7"), "{e}");
        let e = expand_includes("op", "\n#include \"strided.wgsl\"").unwrap_err();
        assert!(
            e.to_string().contains("WGSL line 2: unknown #include"),
            "{e}"
        );
    }
}
