//! Every kernel variant the planner emits, translated to HIP, compiles with hipcc to code
//! objects for a CDNA (gfx90a) and an RDNA (gfx1100) GPU. No AMD GPU is needed: `--genco`
//! only compiles.
//!
//! All variants go into one translation unit per target (the prelude and `hip_runtime.h` are
//! parsed once, which is what keeps this under a minute on two cores): each variant's body sits
//! in its own namespace and its `extern "C"` kernel gets a unique symbol, which is then looked
//! up in the code object, so the count printed is of kernels the compiler really emitted.
//!
//! Without hipcc the test prints a notice and passes, unless `KILN_REQUIRE_HIPCC=1` (CI) makes
//! that a failure. `KILN_HIPCC` names another compiler driver.

use kiln_kernels::cuda::{Dialect, translate};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// What every translated source starts with; the variants share one copy.
const PRELUDE: &str = include_str!("../src/cuda/prelude.cuh");
const HEADER: &str = "#include <hip/hip_runtime.h>\n";
/// (offload arch, the device library file clang links for it).
const TARGETS: &[(&str, &str)] = &[
    ("gfx90a", "oclc_isa_version_90a.bc"),
    ("gfx1100", "oclc_isa_version_1100.bc"),
];

fn hipcc() -> Option<String> {
    let hipcc = std::env::var("KILN_HIPCC").unwrap_or_else(|_| "hipcc".into());
    // `--version` would ask rocm_agent_enumerator for a GPU; `-print-prog-name` needs none.
    let found = Command::new(&hipcc)
        .arg("-print-prog-name=clang")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some(hipcc);
    }
    let required = std::env::var("KILN_REQUIRE_HIPCC").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "KILN_REQUIRE_HIPCC=1 but `{hipcc}` does not run; install it with `apt-get install --no-install-recommends hipcc`"
    );
    eprintln!("notice: `{hipcc}` not found; skipping the HIP compile of the planned kernels");
    None
}

/// The ROCm device libraries (`ocml.bc`, `oclc_isa_version_*.bc`, ...) clang links.
fn device_lib_dir() -> PathBuf {
    let dirs = [
        "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode",
        "/opt/rocm/amdgcn/bitcode",
        "/opt/rocm/lib/llvm/lib/clang/amdgcn/bitcode",
    ];
    dirs.iter()
        .map(PathBuf::from)
        .find(|d| d.join("ocml.bc").exists())
        .unwrap_or_else(|| panic!("hipcc runs but no ROCm device libraries (ocml.bc) in {dirs:?}"))
}

/// The device library folder for `--rocm-device-lib-path`. Debian's ROCm 5.2 libraries predate
/// gfx11 and lack only its ISA-version constant (`__oclc_ISA_version`, the one thing the per-GPU
/// `oclc_isa_version_*.bc` files hold); a copy of the folder gets one made from gfx1030's.
/// Where the file exists (newer ROCm) the folder is used as it is.
fn device_libs(scratch: &Path, clang_dir: &Path) -> PathBuf {
    let system = device_lib_dir();
    if TARGETS.iter().all(|(_, f)| system.join(f).exists()) {
        return system;
    }
    let dir = scratch.join("bitcode");
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(&system).unwrap() {
        let e = e.unwrap();
        std::os::unix::fs::symlink(e.path(), dir.join(e.file_name())).unwrap();
    }
    let template = system.join("oclc_isa_version_1030.bc");
    let ir = Command::new(clang_dir.join("llvm-dis"))
        .arg(&template)
        .args(["-o", "-"])
        .output()
        .unwrap();
    assert!(ir.status.success(), "llvm-dis {template:?} failed");
    let ir = String::from_utf8(ir.stdout).unwrap();
    for (arch, file) in TARGETS {
        if system.join(file).exists() {
            continue;
        }
        let version = isa_version(arch);
        assert!(ir.contains("i32 10300"), "unexpected {template:?}:\n{ir}");
        let mut llvm_as = Command::new(clang_dir.join("llvm-as"))
            .arg("-o")
            .arg(dir.join(file))
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        llvm_as
            .stdin
            .take()
            .unwrap()
            .write_all(
                ir.replace("i32 10300", &format!("i32 {version}"))
                    .as_bytes(),
            )
            .unwrap();
        assert!(
            llvm_as.wait().unwrap().success(),
            "llvm-as for {arch} failed"
        );
        eprintln!("note: {file} is not in {system:?} (ROCm before 5.5); made it from gfx1030's");
    }
    dir
}

/// `gfx1100` -> 11000, `gfx90a` -> 9010: major * 1000 + minor * 10 + stepping.
fn isa_version(arch: &str) -> u32 {
    let digits = arch.trim_start_matches("gfx");
    let (major, rest) = digits.split_at(digits.len() - 2);
    let hex = |c: char| c.to_digit(16).unwrap();
    let mut rest = rest.chars();
    major.parse::<u32>().unwrap() * 1000
        + hex(rest.next().unwrap()) * 10
        + hex(rest.next().unwrap())
}

/// One variant in the combined translation unit.
struct Variant {
    label: String,
    symbol: String,
    /// Lines `first..=last` of the translation unit.
    lines: (usize, usize),
}

/// Every planned variant's HIP translation in one translation unit.
fn combined_source() -> (String, Vec<Variant>) {
    let mut src = format!("{HEADER}{PRELUDE}\n");
    let mut variants = Vec::new();
    for (i, key) in kiln_kernels::plan::variants().iter().enumerate() {
        let label = key.label();
        let wgsl = key.wgsl().unwrap_or_else(|e| panic!("{label}: {e}"));
        let m = translate(&wgsl, &label, Dialect::Hip).unwrap_or_else(|e| panic!("{e}"));
        let body = m
            .source
            .split_once(PRELUDE)
            .unwrap_or_else(|| panic!("{label}: the translation does not hold the prelude"))
            .1;
        let k = &m.kernels[0];
        let threads: u32 = k.workgroup_size.iter().product();
        let signature = format!(
            "extern \"C\" __global__ void __launch_bounds__({threads}) {}(",
            k.name
        );
        assert_eq!(body.matches(&signature).count(), 1, "{label}: {signature}");
        let symbol = format!("kiln_v{i}_{}", k.name);
        let body = body.replace(
            &signature,
            &format!("extern \"C\" __global__ void __launch_bounds__({threads}) {symbol}("),
        );
        let first = src.lines().count() + 1;
        src += &format!("namespace kiln_v{i} {{\n{body}\n}}\n");
        variants.push(Variant {
            label,
            symbol,
            lines: (first, src.lines().count()),
        });
    }
    (src, variants)
}

/// The `arch` code object (an ELF file) in hipcc's output, which is that ELF or a clang offload
/// bundle holding it: "__CLANG_OFFLOAD_BUNDLE__", an entry count, then per entry its offset,
/// size and target triple (`hipv4-amdgcn-amd-amdhsa--gfx90a`), all little-endian u64.
fn code_object<'a>(bytes: &'a [u8], arch: &str) -> Option<&'a [u8]> {
    if bytes.starts_with(b"\x7fELF") {
        return Some(bytes);
    }
    if !bytes.starts_with(b"__CLANG_OFFLOAD_BUNDLE__") {
        return None;
    }
    let word = |at: usize| -> Option<usize> {
        let b = bytes.get(at..at + 8)?;
        usize::try_from(u64::from_le_bytes(b.try_into().ok()?)).ok()
    };
    let mut at = 32;
    for _ in 0..word(24)? {
        let (offset, size, triple_len) = (word(at)?, word(at + 8)?, word(at + 16)?);
        let triple = bytes.get(at + 24..at + 24 + triple_len)?;
        at += 24 + triple_len;
        if triple.starts_with(b"hip") && triple.ends_with(format!("--{arch}").as_bytes()) {
            return bytes
                .get(offset..offset + size)
                .filter(|o| o.starts_with(b"\x7fELF"));
        }
    }
    None
}

/// NUL-separated strings of a code object (its symbol table's names among them).
fn strings(bytes: &[u8]) -> HashSet<&[u8]> {
    bytes.split(|&b| b == 0).collect()
}

#[test]
fn every_planned_variant_compiles_as_hip_for_amd_gpus() {
    let Some(hipcc) = hipcc() else {
        return;
    };
    let clang = Command::new(&hipcc)
        .arg("-print-prog-name=clang")
        .output()
        .unwrap();
    let clang = PathBuf::from(String::from_utf8(clang.stdout).unwrap().trim());
    let clang_dir = clang
        .canonicalize()
        .ok()
        .and_then(|c| c.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| panic!("hipcc's clang {clang:?} is not a file"));

    let dir = std::env::temp_dir().join(format!("kiln-hip-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let libs = device_libs(&dir, &clang_dir);
    let (src, variants) = combined_source();
    let file = dir.join("variants.hip");
    std::fs::write(&file, &src).unwrap();

    // One hipcc per target, both at once (CI has two cores).
    let started = std::time::Instant::now();
    let jobs: Vec<(&str, PathBuf, Child)> = TARGETS
        .iter()
        .map(|&(arch, _)| {
            let out = dir.join(format!("variants-{arch}.co"));
            let child = Command::new(&hipcc)
                .args(["--genco", "-O3", "-std=c++17", "-Werror"])
                .arg(format!("--offload-arch={arch}"))
                .arg(format!("--rocm-device-lib-path={}", libs.display()))
                .arg(&file)
                .arg("-o")
                .arg(&out)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("starting {hipcc}: {e}"));
            (arch, out, child)
        })
        .collect();
    let mut failures = Vec::new();
    let mut compiled = Vec::new();
    for (arch, out, child) in jobs {
        let result = child.wait_with_output().unwrap();
        let log = String::from_utf8_lossy(&result.stderr).into_owned();
        if !result.status.success() {
            // Name the variants the errors point into.
            let mut bad = Vec::new();
            for line in log.lines().filter(|l| l.contains("error:")) {
                let at = line
                    .split(':')
                    .nth(1)
                    .and_then(|n| n.trim().parse::<usize>().ok());
                if let Some(v) =
                    at.and_then(|n| variants.iter().find(|v| v.lines.0 <= n && n <= v.lines.1))
                    && !bad.contains(&v.label)
                {
                    bad.push(v.label.clone());
                }
            }
            let head: String = log.lines().take(40).collect::<Vec<_>>().join("\n");
            failures.push(format!(
                "{arch}: hipcc rejects {} variant(s): {bad:?}\n{head}\n(source: {})",
                bad.len(),
                file.display()
            ));
            continue;
        }
        let output = std::fs::read(&out).unwrap();
        let object = code_object(&output, arch)
            .unwrap_or_else(|| panic!("{arch}: no {arch} code object in {out:?}"));
        let names = strings(object);
        let missing: Vec<&str> = variants
            .iter()
            .filter(|v| !names.contains(format!("{}.kd", v.symbol).as_bytes()))
            .map(|v| v.label.as_str())
            .collect();
        assert!(
            missing.is_empty(),
            "{arch}: no kernel descriptor for {missing:?}"
        );
        compiled.push((arch, variants.len() - missing.len(), object.len()));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    let arches: Vec<&str> = compiled.iter().map(|c| c.0).collect();
    let n = compiled.iter().map(|c| c.1).min().unwrap_or(0);
    eprintln!(
        "hipcc: {n} of {} variants compiled for {} in {:.1}s ({})",
        variants.len(),
        arches.join(", "),
        started.elapsed().as_secs_f64(),
        compiled
            .iter()
            .map(|(a, _, bytes)| format!("{a}: {} KiB", bytes / 1024))
            .collect::<Vec<_>>()
            .join(", ")
    );
    assert_eq!(n, variants.len());
    let _ = std::fs::remove_dir_all(&dir);
}
