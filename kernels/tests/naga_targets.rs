//! Every kernel variant the planner can produce goes through naga's WGSL front end and validator,
//! and through the SPIR-V (Vulkan), MSL (Metal) and HLSL (DX12) back ends, so each target is known
//! to accept every kernel even where no such GPU is at hand.

use naga::back::{hlsl, msl, spv};
use naga::valid::{Capabilities, ValidationFlags, Validator};

#[test]
fn every_kernel_variant_compiles_for_every_target() {
    let keys = kiln_kernels::plan::variants();
    assert!(keys.len() > 150, "only {} variants enumerated", keys.len());
    let files: std::collections::BTreeSet<_> = keys.iter().map(|k| k.file).collect();
    for (file, _) in kiln_kernels::kernels::FILES {
        let include_only = ["common.wgsl", "strided.wgsl", "math.wgsl", "vec.wgsl"].contains(file);
        assert!(
            include_only || files.contains(file),
            "no variant of {file} enumerated"
        );
    }
    let mut failures = Vec::new();
    for key in &keys {
        if let Err(e) = compile(key) {
            failures.push(format!("{}: {e}", key.label()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} variants failed:\n{}",
        failures.len(),
        keys.len(),
        failures.join("\n")
    );
}

/// Binding 0 of every variant is a struct that mirrors the Rust header of the same name
/// (`kiln_kernels::header`): the same fields in the same order, each a u32 at the next 4-byte
/// offset (nested structs flattened), then at most a `tail: array<u32>`.
#[test]
fn typed_headers_match_rust() {
    use naga::{ArraySize, Scalar, TypeInner};
    let mut typed = std::collections::BTreeSet::new();
    for key in kiln_kernels::plan::variants() {
        let src = key.wgsl().unwrap();
        let module = naga::front::wgsl::parse_str(&src).unwrap();
        let label = key.label();
        let params = module
            .global_variables
            .iter()
            .find(|(_, g)| {
                g.binding
                    .as_ref()
                    .is_some_and(|b| b.group == 0 && b.binding == 0)
            })
            .unwrap_or_else(|| panic!("{label}: no binding 0"))
            .1;
        let ty = &module.types[params.ty];
        let members = match &ty.inner {
            TypeInner::Struct { members, .. } => members,
            other => panic!("{label}: binding 0 is {other:?}"),
        };
        let name = ty.name.clone().unwrap_or_default();
        let want = kiln_kernels::header::wgsl_struct_fields(&name)
            .unwrap_or_else(|| panic!("{label}: binding 0 is struct {name}, no Rust header"));
        // (path, byte offset) of every u32 word, and whether a runtime tail ends the struct
        fn flatten(
            module: &naga::Module,
            members: &[naga::StructMember],
            prefix: &str,
            base: u32,
            out: &mut Vec<(String, u32)>,
        ) -> bool {
            let mut tail = false;
            for (i, m) in members.iter().enumerate() {
                let name = m.name.clone().unwrap_or_default();
                let path = if prefix.is_empty() {
                    name.clone()
                } else {
                    format!("{prefix}.{name}")
                };
                match &module.types[m.ty].inner {
                    TypeInner::Scalar(Scalar::U32) => out.push((path, base + m.offset)),
                    TypeInner::Struct { members, .. } => {
                        assert!(!flatten(module, members, &path, base + m.offset, out));
                    }
                    TypeInner::Array {
                        size: ArraySize::Dynamic,
                        ..
                    } if i + 1 == members.len() && name == "tail" => tail = true,
                    other => panic!("{path}: {other:?} is neither u32, a header nor the tail"),
                }
            }
            tail
        }
        let mut words = Vec::new();
        flatten(&module, members, "", 0, &mut words);
        let found: Vec<&str> = words.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            found, want,
            "{label}: WGSL struct {name} differs from the Rust header"
        );
        for (i, (path, offset)) in words.iter().enumerate() {
            assert_eq!(
                *offset,
                4 * i as u32,
                "{label}: {name}.{path} is not word {i}"
            );
        }
        typed.insert(name);
    }
    // one header per kernel layout (15 today); a test that checked nothing would pass too
    assert!(typed.len() >= 15, "typed headers found: {typed:?}");
}

fn compile(key: &kiln_kernels::plan::KernelKey) -> Result<(), String> {
    let src = key.wgsl().map_err(|e| e.to_string())?;
    let module = naga::front::wgsl::parse_str(&src).map_err(|e| e.emit_to_string(&src))?;
    let info = Validator::new(ValidationFlags::all(), Capabilities::empty())
        .validate(&module)
        .map_err(|e| format!("validation: {}", e.emit_to_string(&src)))?;
    let stage = naga::ShaderStage::Compute;
    spv::write_vec(
        &module,
        &info,
        &spv::Options::default(),
        Some(&spv::PipelineOptions {
            shader_stage: stage,
            entry_point: "main".into(),
        }),
    )
    .map_err(|e| format!("spir-v: {e}"))?;
    msl::write_string(
        &module,
        &info,
        &msl::Options::default(),
        &msl::PipelineOptions::default(),
    )
    .map_err(|e| format!("msl: {e}"))?;
    let mut out = String::new();
    let pipeline = hlsl::PipelineOptions {
        entry_point: Some((stage, "main".into())),
    };
    hlsl::Writer::new(&mut out, &hlsl::Options::default(), &pipeline)
        .write(&module, &info, None)
        .map_err(|e| format!("hlsl: {e}"))?;
    Ok(())
}
