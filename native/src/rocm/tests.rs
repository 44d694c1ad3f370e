//! The HIP backend. Without an AMD GPU (every machine here so far) the GPU tests print a notice
//! and pass; what runs anyway is the loading of ROCm, its errors, and hipRTC compiling
//! translated kernels to code objects where ROCm's hipRTC is installed (it needs no GPU).

use super::hip::{Hip, Rtc, open};
use kiln_core::{DType, Device, ErrorKind, Result, Tensor, block_on};

/// The GPU, or `None` with a notice.
fn gpu() -> Option<Device> {
    match super::device(0) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("notice: no usable AMD GPU ({e}); skipping the HIP backend test");
            None
        }
    }
}

#[test]
fn opening_a_device_names_what_is_missing() {
    let runtime = Hip::open();
    match super::device(0) {
        Ok(d) => assert!(d.name().starts_with("rocm:0: "), "{}", d.name()),
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Device, "{e}");
            let msg = e.to_string();
            let want = if runtime.is_ok() {
                "no AMD GPU found"
            } else {
                "could not load libamdhip64.so (is ROCm installed?"
            };
            assert!(msg.contains(want), "`{msg}` does not say `{want}`");
            eprintln!("notice: {msg}");
        }
    }
    let e = super::device(usize::MAX).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Device, "{e}");
    // `--device rocm` goes through select, and reports the same.
    if let Err(e) = super::device(0) {
        let selected = crate::device::select("rocm").unwrap_err();
        assert_eq!(selected.to_string(), e.to_string());
    }
}

#[test]
fn a_missing_runtime_or_symbol_is_named() {
    let msg = Hip::open_from(&["libkiln-no-such-library.so"])
        .err()
        .expect("a library that does not exist loaded")
        .to_string();
    assert!(
        msg.contains("could not load libamdhip64.so (is ROCm installed?")
            && msg.contains("libkiln-no-such-library.so"),
        "{msg}"
    );
    // The C library loads but has none of HIP's functions: the first one is named.
    let (libc, file) = open(&["libc.so.6"]).expect("libc loads");
    let msg = Hip::load(libc, &file)
        .err()
        .expect("libc is no HIP")
        .to_string();
    assert!(msg.contains("libc.so.6 has no hipInit"), "{msg}");
}

#[test]
fn hiprtc_compiles_translated_kernels_without_a_gpu() {
    let rtc = match Rtc::open() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("notice: {e}; skipping the hipRTC compile test");
            return;
        }
    };
    // A map, a reduction and the tiled GEMM: the prelude, shared memory and barriers.
    let variants = kiln_kernels::plan::variants();
    let mut picked = Vec::new();
    for file in ["map.wgsl", "reduce.wgsl", "gemm.wgsl"] {
        let key = variants
            .iter()
            .find(|k| k.file == file)
            .unwrap_or_else(|| panic!("no planned variant of {file}"));
        picked.push(key);
    }
    for key in picked {
        let (code, symbol) = super::compile(key, Some("gfx90a")).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            code.starts_with(b"\x7fELF"),
            "{}: not a code object",
            key.label()
        );
        let descriptor = format!("{symbol}.kd");
        assert!(
            code.windows(descriptor.len() + 2).any(|w| w[0] == 0
                && &w[1..=descriptor.len()] == descriptor.as_bytes()
                && w[descriptor.len() + 1] == 0),
            "{}: no {descriptor} in the code object",
            key.label()
        );
    }
    // A rejected source is an error carrying the compiler's log.
    let msg = rtc
        .compile(
            "extern \"C\" __global__ void broken() { undeclared = 1; }",
            "broken",
            Some("gfx90a"),
        )
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("hipRTC rejected") && msg.contains("undeclared"),
        "{msg}"
    );
}

#[test]
fn ops_match_the_cpu() -> Result<()> {
    let Some(dev) = gpu() else { return Ok(()) };
    let cpu = Device::cpu();
    let a = Tensor::rand_uniform(vec![2, 65, 300], -2.0, 2.0, 8, DType::F32, &cpu)?;
    let b = Tensor::rand_uniform(vec![300, 70], -2.0, 2.0, 9, DType::F32, &cpu)?;
    let close = |label: &str, got: &Tensor, want: &Tensor| -> Result<()> {
        let (g, w) = (got.to_vec::<f32>()?, want.to_vec::<f32>()?);
        assert_eq!(g.len(), w.len(), "{label}");
        for (i, (x, y)) in g.iter().zip(&w).enumerate() {
            assert!(
                (x - y).abs() <= 1e-4 * (1.0 + y.abs()),
                "{label}[{i}]: rocm {x}, cpu {y}"
            );
        }
        Ok(())
    };
    let on = |t: &Tensor, d: &Device| block_on(t.to_device(d));
    close("softmax", &on(&a, &dev)?.softmax(-1)?, &a.softmax(-1)?)?;
    for rocblas in [true, false] {
        let d = super::device_with(0, super::RocmOptions { rocblas })?;
        let got = on(&a, &d)?.matmul(&on(&b, &d)?)?;
        close(&format!("matmul, rocblas {rocblas}"), &got, &a.matmul(&b)?)?;
    }
    Ok(())
}

#[test]
fn every_planned_variant_compiles_and_loads() -> Result<()> {
    if gpu().is_none() {
        return Ok(());
    }
    let backend = super::RocmBackend::new(0, super::RocmOptions::default())?;
    let variants = kiln_kernels::plan::variants();
    let failures: Vec<String> = variants
        .iter()
        .filter_map(|key| {
            backend
                .kernel(key)
                .err()
                .map(|e| format!("{}: {e}", key.label()))
        })
        .collect();
    eprintln!(
        "hiprtc: {} of {} planned kernel variants compiled and loaded on {}",
        variants.len() - failures.len(),
        variants.len(),
        backend.inner.name
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    Ok(())
}
