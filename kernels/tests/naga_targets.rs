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
        let include_only = ["common.wgsl", "math.wgsl", "vec.wgsl"].contains(file);
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
