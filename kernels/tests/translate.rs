//! The WGSL -> CUDA C / HIP translator: every fixture translates for both dialects, the output
//! is well formed, unsupported constructs are refused by name, and — where g++ is installed —
//! the translated kernels compile and run on the host through a small CUDA emulation
//! (`fixtures/cuda_host.h`) and match references computed here on random inputs.

use kiln_kernels::cuda::{
    CudaModule, Dialect, Inline, Kernel, Options, ParamKind, translate, translate_with,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const FIXTURES: &[(&str, &str)] = &[
    ("elementwise", include_str!("fixtures/elementwise.wgsl")),
    ("reduce", include_str!("fixtures/reduce.wgsl")),
    ("matmul", include_str!("fixtures/matmul.wgsl")),
    ("control", include_str!("fixtures/control.wgsl")),
    ("atomics", include_str!("fixtures/atomics.wgsl")),
];

/// Checks that brackets balance outside string literals and comments.
fn assert_balanced(label: &str, src: &str) {
    let mut stack = Vec::new();
    for (n, line) in src.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut in_str = false;
        for c in code.chars() {
            match c {
                '"' => in_str = !in_str,
                _ if in_str => {}
                '(' | '[' | '{' => stack.push(c),
                ')' | ']' | '}' => {
                    let open = stack.pop();
                    let want = match c {
                        ')' => '(',
                        ']' => '[',
                        _ => '{',
                    };
                    assert_eq!(
                        open,
                        Some(want),
                        "{label}: unbalanced `{c}` on line {}",
                        n + 1
                    );
                }
                _ => {}
            }
        }
    }
    assert!(stack.is_empty(), "{label}: unclosed {stack:?}");
}

#[test]
fn every_fixture_translates_for_cuda_and_hip() {
    for (name, wgsl) in FIXTURES {
        let cuda = translate(wgsl, name, Dialect::Cuda).unwrap_or_else(|e| panic!("{e}"));
        let hip = translate(wgsl, name, Dialect::Hip).unwrap_or_else(|e| panic!("{e}"));
        assert!(!cuda.kernels.is_empty(), "{name}: no kernels");
        assert_eq!(
            cuda.kernels, hip.kernels,
            "{name}: dialects disagree on kernels"
        );
        assert!(hip.source.contains("#include <hip/hip_runtime.h>"));
        assert!(!cuda.source.contains("#include"));
        // The dialects differ only in the header.
        let body = |s: &str| s.split_once("\ntemplate").map(|(_, b)| b.to_string());
        assert_eq!(body(&cuda.source), body(&hip.source), "{name}");
        for src in [&cuda.source, &hip.source] {
            assert_balanced(name, src);
            assert!(!src.contains("{:"), "{name}: leftover format text");
            for k in &cuda.kernels {
                let threads: u32 = k.workgroup_size.iter().product();
                let sig = format!(
                    "extern \"C\" __global__ void __launch_bounds__({threads}) {}(",
                    k.name
                );
                assert!(src.contains(&sig), "{name}: no `{sig}`");
            }
        }
    }
}

fn kernel<'m>(m: &'m CudaModule, name: &str) -> &'m Kernel {
    m.kernels
        .iter()
        .find(|k| k.name == name)
        .unwrap_or_else(|| panic!("no kernel {name}"))
}

#[test]
fn parameters_follow_bindings_then_lengths() {
    let m = translate(FIXTURES[0].1, "elementwise", Dialect::Cuda).unwrap();
    let k = kernel(&m, "unary");
    assert_eq!(k.workgroup_size, [256, 1, 1]);
    let kinds: Vec<ParamKind> = k.params.iter().map(|p| p.kind).collect();
    assert_eq!(
        kinds,
        vec![
            ParamKind::Storage {
                group: 0,
                binding: 0,
                read_only: true
            },
            ParamKind::Storage {
                group: 0,
                binding: 1,
                read_only: true
            },
            ParamKind::Storage {
                group: 0,
                binding: 2,
                read_only: false
            },
            ParamKind::Uniform {
                group: 0,
                binding: 3,
                size: 80
            },
            ParamKind::ArrayLength {
                group: 0,
                binding: 1,
                offset: 0,
                stride: 4
            },
        ]
    );
    assert!(m.source.contains("const float* __restrict__ a"));
    assert!(m.source.contains("static_assert(sizeof(Params) == 80"));
    // binary_vec4 does not use arrayLength and gets no length parameter.
    let k = kernel(&m, "binary_vec4");
    assert_eq!(k.workgroup_size, [64, 2, 1]);
    // b has arrayLength applied somewhere in the module, so its length travels with it.
    assert_eq!(k.params.len(), 5);

    let m = translate(FIXTURES[4].1, "atomics", Dialect::Cuda).unwrap();
    let k = kernel(&m, "histogram");
    let lens: Vec<ParamKind> = k
        .params
        .iter()
        .map(|p| p.kind)
        .filter(|k| matches!(k, ParamKind::ArrayLength { .. }))
        .collect();
    assert_eq!(
        lens,
        vec![
            ParamKind::ArrayLength {
                group: 0,
                binding: 0,
                offset: 0,
                stride: 4
            },
            ParamKind::ArrayLength {
                group: 0,
                binding: 1,
                offset: 8,
                stride: 4
            },
        ]
    );
}

#[test]
fn constructs_map_to_cuda() {
    let src = |i: usize| {
        translate(FIXTURES[i].1, FIXTURES[i].0, Dialect::Cuda)
            .unwrap()
            .source
    };
    let reduce = src(1);
    for needle in [
        "__shared__ karr_",
        "__syncthreads();",
        "k_zero_shared(partial",
        "if (!loop_init) {",
    ] {
        assert!(reduce.contains(needle), "reduce lacks {needle}");
    }
    let ew = src(0);
    for needle in [
        "switch (",
        "case 1: {",
        "default: {",
        "k_round(",
        "k_inverse_sqrt(",
        "k_bitcast_u32(",
        "k_to_i32(",
        "kvec<float, 4>{",
    ] {
        assert!(ew.contains(needle), "elementwise lacks {needle}");
    }
    let atomics = src(4);
    for needle in [
        "atomicAdd(&",
        "k_atomic_cas<",
        "k_atomic_load(&",
        "atomicExch(&",
        "atomicMax(&",
        "atomicMin(&",
    ] {
        assert!(atomics.contains(needle), "atomics lacks {needle}");
    }
    let control = src(3);
    for needle in [
        "k_div(",
        "k_mod(",
        "k_shr(",
        "k_shl(",
        "static __device__ inline void bump(int* p",
    ] {
        assert!(control.contains(needle), "control lacks {needle}");
    }
}

#[test]
fn unsupported_constructs_are_named() {
    let cases = [
        (
            "@group(0) @binding(0) var t: texture_2d<f32>;
             @group(0) @binding(1) var<storage, read_write> o: array<vec4<f32>>;
             @compute @workgroup_size(1) fn tex() { o[0] = textureLoad(t, vec2<i32>(0), 0); }",
            "ImageLoad",
        ),
        (
            "@group(0) @binding(0) var<storage, read_write> o: array<f32>;
             @compute @workgroup_size(1) fn mat() { let m = mat2x2<f32>(1.0, 2.0, 3.0, 4.0); o[0] = m[0].x; }",
            "matrix",
        ),
        (
            "override n: u32 = 4u;
             @group(0) @binding(0) var<storage, read_write> o: array<u32>;
             @compute @workgroup_size(1) fn ov() { o[0] = n; }",
            "override",
        ),
        (
            "@vertex fn vs() -> @builtin(position) vec4<f32> { return vec4<f32>(0.0); }",
            "Vertex entry point",
        ),
        (
            "@group(0) @binding(0) var<storage, read_write> o: array<f32>;
             @compute @workgroup_size(1) fn main_kernel() { o[0] = 1.0; }
             @compute @workgroup_size(1) fn main() { o[0] = 2.0; }",
            "entry point name `main`",
        ),
    ];
    for (wgsl, what) in cases {
        let err = translate(wgsl, "case", Dialect::Cuda).expect_err(what);
        let msg = err.to_string();
        assert!(msg.starts_with("translate case:"), "{msg}");
        assert!(msg.contains(what), "`{msg}` does not name {what}");
    }
    let err = translate("fn oops( {", "broken", Dialect::Hip).unwrap_err();
    assert!(err.to_string().contains("does not parse"), "{err}");
}

/// Names the prelude's prefixes would claim when suffixed (`k` -> `k_1`) still get unique,
/// legal names: two loops over `k` in one kernel used to search for a free name forever.
#[test]
fn repeated_names_near_reserved_prefixes_translate() {
    let wgsl = "
        @group(0) @binding(0) var<storage, read_write> o: array<u32>;
        @compute @workgroup_size(1) fn twice() {
            for (var k = 0u; k < 2u; k++) { o[k] = k; }
            for (var k = 0u; k < 3u; k++) { o[k] += k; }
            let karr = o[0]; let karr_ = o[1];
            o[2] = karr + karr_;
        }";
    for dialect in [Dialect::Cuda, Dialect::Hip] {
        let m = translate(wgsl, "twice", dialect).unwrap_or_else(|e| panic!("{e}"));
        assert_balanced("twice", &m.source);
        assert!(m.source.contains("k1"), "{}", m.source);
    }
}

// ---- running translated kernels on the host

fn gxx() -> Option<&'static str> {
    let ok = Command::new("g++")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("notice: g++ not found; skipping host compilation of translated kernels");
    }
    ok.then_some("g++")
}

/// A translated module compiled for the host with the CUDA emulation.
struct HostKernel {
    dir: PathBuf,
    exe: PathBuf,
    kernel: Kernel,
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-translate-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn compile_host(wgsl: &str, label: &str, entry: &str) -> Option<HostKernel> {
    compile_host_with(wgsl, label, entry, Options::new(Dialect::Cuda))
}

fn compile_host_with(wgsl: &str, label: &str, entry: &str, options: Options) -> Option<HostKernel> {
    let cxx = gxx()?;
    let m = translate_with(wgsl, label, options).unwrap_or_else(|e| panic!("{e}"));
    let kernel = kernel(&m, entry).clone();
    let inline = if options.inline.is_some() {
        "-inline"
    } else {
        ""
    };
    let dir = scratch(&format!("{label}-{entry}{inline}"));
    std::fs::write(dir.join("kernel.cu"), &m.source).unwrap();
    let mut main = String::from(
        "#include \"kernel.cu\"\n#include <string>\nint main(int argc, char **argv) {\n  std::string d = argv[1];\n",
    );
    let mut args = Vec::new();
    for (i, p) in kernel.params.iter().enumerate() {
        match p.kind {
            ParamKind::Storage { .. } => {
                main += &format!(
                    "  auto b{i} = k_read((d + \"/p{i}.bin\").c_str());\n  void *v{i} = b{i}.data();\n"
                );
                args.push(format!("&v{i}"));
            }
            ParamKind::Uniform { .. }
            | ParamKind::Inline { .. }
            | ParamKind::ArrayLength { .. } => {
                main += &format!("  auto b{i} = k_read((d + \"/p{i}.bin\").c_str());\n");
                args.push(format!("b{i}.data()"));
            }
        }
    }
    main += &format!(
        "  void *args[] = {{{}}};\n  k_launch({{(unsigned)atoi(argv[2]), (unsigned)atoi(argv[3]), (unsigned)atoi(argv[4])}}, {{{}u, {}u, {}u}}, [&] {{ k_call({entry}, args); }});\n",
        args.join(", "),
        kernel.workgroup_size[0],
        kernel.workgroup_size[1],
        kernel.workgroup_size[2]
    );
    for (i, p) in kernel.params.iter().enumerate() {
        if let ParamKind::Storage {
            read_only: false, ..
        } = p.kind
        {
            main += &format!("  k_write((d + \"/p{i}.out\").c_str(), b{i});\n");
        }
    }
    main += "}\n";
    std::fs::write(dir.join("main.cpp"), main).unwrap();
    let shim = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cuda_host.h");
    let exe = dir.join("main");
    let out = Command::new(cxx)
        .args(["-std=c++20", "-O1", "-pthread", "-w", "-include"])
        .arg(&shim)
        .arg(dir.join("main.cpp"))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{label}/{entry}: g++ rejects the translation:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(HostKernel { dir, exe, kernel })
}

impl HostKernel {
    /// Runs on `grid` with buffers by binding; returns the writable buffers after the run.
    fn run(&self, grid: [u32; 3], buffers: &BTreeMap<u32, Vec<u8>>) -> BTreeMap<u32, Vec<u8>> {
        let mut outputs = Vec::new();
        for (i, p) in self.kernel.params.iter().enumerate() {
            let bytes = match p.kind {
                ParamKind::Storage {
                    binding, read_only, ..
                } => {
                    if !read_only {
                        outputs.push((i, binding));
                    }
                    buffers[&binding].clone()
                }
                ParamKind::Uniform { binding, size, .. } => {
                    assert_eq!(buffers[&binding].len(), size as usize, "uniform size");
                    buffers[&binding].clone()
                }
                ParamKind::Inline {
                    binding, capacity, ..
                } => {
                    let mut b = buffers[&binding].clone();
                    assert!(b.len() <= capacity as usize, "by-value buffer too long");
                    b.resize(capacity as usize, 0);
                    b
                }
                ParamKind::ArrayLength {
                    binding,
                    offset,
                    stride,
                    ..
                } => {
                    let n = (buffers[&binding].len() as u32 - offset) / stride;
                    n.to_le_bytes().to_vec()
                }
            };
            std::fs::write(self.dir.join(format!("p{i}.bin")), bytes).unwrap();
        }
        let status = Command::new(&self.exe)
            .arg(&self.dir)
            .args(grid.map(|g| g.to_string()))
            .status()
            .unwrap();
        assert!(status.success(), "{} crashed", self.kernel.name);
        outputs
            .into_iter()
            .map(|(i, b)| {
                (
                    b,
                    std::fs::read(self.dir.join(format!("p{i}.out"))).unwrap(),
                )
            })
            .collect()
    }
}

/// Deterministic xorshift values in `[lo, hi)`.
fn random(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            lo + (hi - lo) * ((s >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

fn bytes<T: Copy>(v: &[T]) -> Vec<u8> {
    let n = std::mem::size_of_val(v);
    // SAFETY: plain-old-data slices of f32/u32/i32 viewed as bytes.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), n) }.to_vec()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn i32s(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn u32s(b: &[u8]) -> Vec<u32> {
    b.chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn assert_close(label: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{label}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()) || (g.is_nan() && w.is_nan()),
            "{label}[{i}]: got {g}, want {w}"
        );
    }
}

#[test]
fn strided_elementwise_runs_like_wgsl() {
    // Once as written, once with `b` (binding 1, 40 bytes) passed by value in 48 zero-padded
    // bytes: `arrayLength(&b)` must still count 10.
    for options in pointer_and_by_value(1, 48) {
        let Some(k) = compile_host_with(FIXTURES[0].1, "elementwise", "unary", options) else {
            return;
        };
        unary_modes_match(&k);
    }
}

/// CUDA options that pass the buffer at (0, `binding`) as a pointer, then by value.
fn pointer_and_by_value(binding: u32, capacity: u32) -> [Options; 2] {
    let by_value = Options {
        inline: Some(Inline {
            group: 0,
            binding,
            capacity,
        }),
        ..Options::new(Dialect::Cuda)
    };
    [Options::new(Dialect::Cuda), by_value]
}

fn unary_modes_match(k: &HostKernel) {
    // Logical [3, 5, 7] stored as its transpose [7, 5, 3].
    let (d0, d1, d2) = (3usize, 5usize, 7usize);
    let numel = d0 * d1 * d2;
    let a = random(numel, 1, -3.0, 3.0);
    let b = random(10, 2, -1.0, 1.0);
    let alpha = 1.7f32;
    for mode in 0..11i32 {
        let mut p = Vec::new();
        let shape = [1u32, 1, 1, 1, 1, d0 as u32, d1 as u32, d2 as u32];
        let strides = [0u32, 0, 0, 0, 0, 1, d0 as u32, (d0 * d1) as u32];
        p.extend(bytes(&shape));
        p.extend(bytes(&strides));
        p.extend(bytes(&[0u32, numel as u32]));
        p.extend(bytes(&[alpha]));
        p.extend(bytes(&[mode]));
        let bufs = BTreeMap::from([
            (0, bytes(&a)),
            (1, bytes(&b)),
            (2, vec![0u8; numel * 4]),
            (3, p),
        ]);
        let out = f32s(&k.run([1, 1, 1], &bufs)[&2]);
        let want: Vec<f32> = (0..numel)
            .map(|i| {
                let (i0, i1, i2) = (i / (d1 * d2), (i / d2) % d1, i % d2);
                let x = a[i0 + i1 * d0 + i2 * d0 * d1];
                let gelu = 0.5 * x * (1.0 + (0.797_884_6 * (x + 0.044715 * x * x * x)).tanh());
                let sign = if x > 0.0 {
                    1.0
                } else if x < 0.0 {
                    -1.0
                } else {
                    0.0
                };
                let y = match mode {
                    0 => x.exp() + (x.abs() + 1.0).ln(),
                    1 | 2 => x.abs().sqrt() * (1.0 / (x.abs() + 1.0).sqrt()),
                    3 => x.clamp(-1.0, 1.0) + x.min(0.5) - x.max(-0.5),
                    4 => {
                        x.floor()
                            + x.ceil()
                            + x.round_ties_even()
                            + x.trunc()
                            + (x - x.floor())
                            + sign
                    }
                    5 => x.sin() * x.cos() + x.tanh() + gelu,
                    6 => {
                        x.abs().powf(alpha)
                            + x.mul_add(2.0, 1.0)
                            + x.exp2()
                            + (x.abs() + 1.0).log2()
                    }
                    7 => {
                        if x > 0.0 {
                            x
                        } else {
                            0.0
                        }
                    }
                    8 => x.abs(),
                    9 => {
                        (x as i32) as f32
                            + (x.abs() as u32) as f32
                            + if x > 0.0 { 1.0 } else { 0.0 }
                    }
                    _ => x * alpha,
                };
                y + b[i % b.len()]
            })
            .collect();
        assert_close(&format!("unary mode {mode}"), &out, &want, 1e-5);
    }
}

#[test]
fn vector_arithmetic_runs_like_wgsl() {
    let Some(k) = compile_host(FIXTURES[0].1, "elementwise", "binary_vec4") else {
        return;
    };
    let n = 4 * 64 * 2;
    let a = random(n, 3, -2.0, 2.0);
    let b = random(n, 4, -2.0, 2.0);
    let alpha = 0.75f32;
    let mut p = vec![0u8; 64];
    p.extend(bytes(&[0u32, n as u32]));
    p.extend(bytes(&[alpha]));
    p.extend(bytes(&[0i32]));
    let bufs = BTreeMap::from([
        (0, bytes(&a)),
        (1, bytes(&b)),
        (2, vec![0u8; n * 4]),
        (3, p),
    ]);
    let out = f32s(&k.run([1, 1, 1], &bufs)[&2]);
    let mut want = vec![0.0f32; n];
    for i in 0..n / 4 {
        let va: [f32; 4] = std::array::from_fn(|c| a[i * 4 + c]);
        let vb: [f32; 4] = std::array::from_fn(|c| b[i * 4 + c]);
        let mut r: [f32; 4] =
            std::array::from_fn(|c| va[c].max(vb[c]) * alpha + va[c].min(vb[c]) / 2.0);
        for c in 0..4 {
            if va[c] < vb[c] {
                r[c] = -r[c];
            }
        }
        r[0] = va[0] * vb[0] + va[1] * vb[1] + va[2] * vb[2] + va[3] * vb[3];
        let s = [r[3], r[2], r[1], r[0]];
        let base = [s[0], s[1], 1.0, 0.0];
        let any_gt = (0..4).any(|c| va[c] > vb[c]);
        for c in 0..4 {
            let m = base[c] + va[c].exp() - vb[c].abs().sqrt();
            let t = m.clamp(-3.0, 3.0);
            let kk = (t as i32) % 3;
            let u = ((t + 4.0) as u32) >> 1;
            want[i * 4 + c] = t + kk as f32 + u as f32 + 1.0 + if any_gt { 1.0 } else { 0.0 };
        }
    }
    assert_close("binary_vec4", &out, &want, 1e-5);
}

#[test]
fn reductions_and_softmax_run_like_wgsl() {
    let (rows, cols) = (5usize, 300usize);
    let x = random(rows * cols, 5, -4.0, 4.0);
    let shape = bytes(&[rows as u32, cols as u32]);
    let bufs = BTreeMap::from([(0, bytes(&x)), (1, vec![0u8; rows * cols * 4]), (2, shape)]);
    if let Some(k) = compile_host(FIXTURES[1].1, "reduce", "sum_rows") {
        let out = f32s(&k.run([rows as u32, 1, 1], &bufs)[&1]);
        let want: Vec<f32> = (0..rows)
            .map(|r| x[r * cols..(r + 1) * cols].iter().sum())
            .collect();
        assert_close("sum_rows", &out[..rows], &want, 1e-4);
    }
    if let Some(k) = compile_host(FIXTURES[1].1, "reduce", "softmax") {
        let out = f32s(&k.run([rows as u32, 1, 1], &bufs)[&1]);
        let mut want = Vec::new();
        for r in 0..rows {
            let row = &x[r * cols..(r + 1) * cols];
            let m = row.iter().cloned().fold(f32::MIN, f32::max);
            let s: f32 = row.iter().map(|v| (v - m).exp()).sum();
            want.extend(row.iter().map(|v| (v - m).exp() / s));
        }
        assert_close("softmax", &out, &want, 1e-5);
    }
}

#[test]
fn tiled_batched_matmul_runs_like_wgsl() {
    let Some(k) = compile_host(FIXTURES[2].1, "matmul", "matmul") else {
        return;
    };
    let (batch, m, kk, n) = (2usize, 19usize, 23usize, 16usize);
    let a = random(batch * m * kk, 6, -1.0, 1.0);
    let b = random(batch * kk * n, 7, -1.0, 1.0);
    let dims = bytes(&[
        m as u32,
        n as u32,
        kk as u32,
        (m * kk) as u32,
        (kk * n) as u32,
        (m * n) as u32,
    ]);
    let bufs = BTreeMap::from([
        (0, bytes(&a)),
        (1, bytes(&b)),
        (2, vec![0u8; batch * m * n * 4]),
        (3, dims),
    ]);
    let out = f32s(&k.run([1, m.div_ceil(16) as u32, batch as u32], &bufs)[&2]);
    let mut want = vec![0.0f32; batch * m * n];
    for z in 0..batch {
        for i in 0..m {
            for j in 0..n {
                want[z * m * n + i * n + j] = (0..kk)
                    .map(|t| a[z * m * kk + i * kk + t] * b[z * kk * n + t * n + j])
                    .sum();
            }
        }
    }
    assert_close("matmul", &out, &want, 1e-5);
}

/// WGSL semantics of `control.wgsl`, written out in Rust.
fn control_reference(v: i32) -> i32 {
    let wdiv = |a: i32, b: i32| {
        if b == 0 || (a == i32::MIN && b == -1) {
            a
        } else {
            a / b
        }
    };
    let wmod = |a: i32, b: i32| {
        if b == 0 || (a == i32::MIN && b == -1) {
            0
        } else {
            a % b
        }
    };
    let mut acc = v;
    let (lo, mut hi_y, flag) = (v, v as f32, (v as u32) << 3);
    hi_y += 1.0;
    acc += v + wdiv(v, 0) + wmod(v, 0);
    acc = acc
        .wrapping_add(v >> (33 % 32))
        .wrapping_add(v << 1)
        .wrapping_add(wdiv(-v, 3))
        .wrapping_add(wmod(v, -7))
        .wrapping_add(!v & 0xff)
        .wrapping_add(v ^ 5)
        .wrapping_add(v | 1);
    let rev = ((v as u32).reverse_bits() >> 28) as i32;
    acc += v.count_ones() as i32
        + v.leading_zeros() as i32
        + (if v == 0 {
            32
        } else {
            v.trailing_zeros() as i32
        })
        + rev;
    let fl = {
        let u = if v < 0 { !(v as u32) } else { v as u32 };
        if u == 0 {
            -1
        } else {
            31 - u.leading_zeros() as i32
        }
    };
    let ft = if v == 0 {
        -1
    } else {
        v.trailing_zeros() as i32
    };
    let eb = (v << (32 - 2 - 5)) >> (32 - 5);
    let ib = ((v as u32 & !(0b11 << 4)) | (3u32 << 4)) as i32;
    acc += fl + ft + eb + ib;
    acc += v.wrapping_abs() + v.min(3) + v.max(-3) + v.clamp(-10, 10) + v.signum();
    if lo > 0 && flag != 0 {
        acc += hi_y as i32;
    } else if lo < -5 || flag != 0 {
        acc -= 1;
    } else {
        acc *= 2;
    }
    let mut k = 0;
    loop {
        k += 1;
        if k % 2 == 0 {
            continue;
        }
        acc += k;
        if k > 6 {
            break;
        }
    }
    let q = (v as u32, 7u32 / 2);
    acc += (q.0.wrapping_add(q.1)) as i32;
    acc
}

#[test]
fn integer_semantics_and_control_flow_run_like_wgsl() {
    let Some(k) = compile_host(FIXTURES[3].1, "control", "control") else {
        return;
    };
    let mut src: Vec<i32> = random(61, 8, -5000.0, 5000.0)
        .iter()
        .map(|v| *v as i32)
        .collect();
    src.extend([0, 1, -1, -6, 1 << 20, 7]);
    let bufs = BTreeMap::from([(0, bytes(&src)), (1, vec![0u8; (src.len() + 3) * 4])]);
    let out = i32s(&k.run([3, 1, 1], &bufs)[&1]);
    for (i, &v) in src.iter().enumerate() {
        assert_eq!(out[i], control_reference(v), "control({v})");
    }
    // Invocations past arrayLength(&src) return early and leave the rest untouched.
    assert_eq!(&out[src.len()..], &[0, 0, 0]);
}

#[test]
fn atomics_run_like_wgsl() {
    let Some(k) = compile_host(FIXTURES[4].1, "atomics", "histogram") else {
        return;
    };
    let n = 150usize;
    let bins = 6usize;
    let values = random(n, 9, -0.2, 1.2);
    let counts = vec![0u8; 8 + bins * 4];
    let bufs = BTreeMap::from([
        (0, bytes(&values)),
        (1, counts),
        (2, vec![0u8; 4]),
        (3, vec![0u8; n * 4]),
    ]);
    let out = k.run([n.div_ceil(64) as u32, 1, 1], &bufs);
    let c = u32s(&out[&1]);
    assert_eq!(c[0], n as u32, "total");
    let low = values.iter().filter(|v| **v < 0.5).count() as i32;
    assert_eq!(c[1] as i32, low.clamp(0, 1_000_000), "low");
    let mut want = vec![0u32; bins];
    for v in &values {
        let b = (((v.max(0.0)) * bins as f32) as u32).min(bins as u32 - 1);
        want[b as usize] += 1;
    }
    assert_eq!(&c[2..], &want[..], "bins");
    let sum = f32::from_bits(u32s(&out[&2])[0]);
    let want_sum: f32 = values.iter().sum();
    assert!(
        (sum - want_sum).abs() < 1e-3 * want_sum.abs(),
        "sum {sum} vs {want_sum}"
    );
}

/// Every kernel variant the planner can produce translates for both dialects. With
/// `KILN_CUDA_DUMP=<dir>` the CUDA sources are written there (one `.cu` per variant) for
/// `tests/device/cuda_compile.sh`, which compiles them with nvcc on the GPU machine.
#[test]
fn every_planned_variant_translates() {
    let dump = std::env::var_os("KILN_CUDA_DUMP").map(PathBuf::from);
    if let Some(d) = &dump {
        std::fs::create_dir_all(d).unwrap();
    }
    let variants = kiln_kernels::plan::variants();
    assert!(variants.len() > 100, "only {} variants", variants.len());
    let mut host_checked = 0;
    for (i, key) in variants.iter().enumerate() {
        let label = key.label();
        let wgsl = key.wgsl().unwrap_or_else(|e| panic!("{label}: {e}"));
        let cuda = translate(&wgsl, &label, Dialect::Cuda).unwrap_or_else(|e| panic!("{e}"));
        let hip = translate(&wgsl, &label, Dialect::Hip).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cuda.kernels.len(), 1, "{label}");
        assert_eq!(cuda.kernels, hip.kernels, "{label}");
        assert_balanced(&label, &cuda.source);
        // Binding 0 is the params words and the last binding the only writable buffer.
        let k = &cuda.kernels[0];
        let storage: Vec<_> = k
            .params
            .iter()
            .filter_map(|p| match p.kind {
                ParamKind::Storage {
                    binding, read_only, ..
                } => Some((binding, read_only)),
                _ => None,
            })
            .collect();
        assert!(
            storage.iter().any(|&(b, _)| b == 0),
            "{label}: no params binding"
        );
        if let Some(d) = &dump {
            // labels hold WGSL expressions (`x / y`): keep only what every file system allows
            let safe: String = label
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .take(120)
                .collect();
            let name = format!("{i:03}_{safe}.cu");
            std::fs::write(d.join(name), &cuda.source).unwrap();
        }
        // Syntax-check a spread of variants with g++ (all of them take minutes).
        if i % 16 == 0
            && let Some(cxx) = gxx()
        {
            let dir = scratch("variants");
            let file = dir.join(format!("v{i}.cpp"));
            std::fs::write(&file, &cuda.source).unwrap();
            let shim = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cuda_host.h");
            let out = Command::new(cxx)
                .args(["-std=c++20", "-fsyntax-only", "-w", "-include"])
                .arg(&shim)
                .arg(&file)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{label}: g++ rejects the translation:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            host_checked += 1;
        }
    }
    eprintln!(
        "{} variants translated, {host_checked} syntax-checked with g++",
        variants.len()
    );
}

#[test]
fn buffers_by_value_are_declared_and_checked() {
    let wgsl = FIXTURES[0].1;
    let by_value = |dialect, binding, capacity| Options {
        inline: Some(Inline {
            group: 0,
            binding,
            capacity,
        }),
        ..Options::new(dialect)
    };
    let m = translate_with(wgsl, "elementwise", by_value(Dialect::Cuda, 1, 48)).unwrap();
    assert!(
        m.source
            .contains("const __grid_constant__ k_bytes<48> b_bytes"),
        "{}",
        m.source
    );
    let unary = kernel(&m, "unary");
    assert!(unary.params.iter().any(|p| p.kind
        == ParamKind::Inline {
            group: 0,
            binding: 1,
            capacity: 48
        }));
    for (dialect, binding, capacity, want) in [
        (Dialect::Cuda, 2, 48, "writable"),
        (Dialect::Hip, 1, 48, "outside CUDA"),
        (Dialect::Cuda, 1, 40, "multiple of 16"),
    ] {
        let err = translate_with(wgsl, "elementwise", by_value(dialect, binding, capacity))
            .unwrap_err()
            .to_string();
        assert!(err.contains(want), "{want}: {err}");
    }
}

#[test]
fn a_buffer_by_value_reads_as_one_in_memory() {
    // a header with a runtime-sized tail, read in the kernel and in a helper function
    let wgsl = "
struct Header { n: u32, scale: f32, table: array<f32> }
@group(0) @binding(0) var<storage, read> header: Header;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
fn lookup(i: u32) -> f32 { return header.scale * header.table[i % header.n]; }
@compute @workgroup_size(32)
fn scale(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&y) {
        y[id.x] = x[id.x] * lookup(id.x) + f32(arrayLength(&header.table));
    }
}";
    let table = random(5, 3, -2.0, 2.0);
    let x = random(77, 4, -1.0, 1.0);
    let mut header = bytes(&[table.len() as u32]);
    header.extend(bytes(&[0.5f32]));
    header.extend(bytes(&table));
    let want: Vec<f32> = (0..x.len())
        .map(|i| x[i] * (0.5 * table[i % table.len()]) + table.len() as f32)
        .collect();
    for options in pointer_and_by_value(0, 64) {
        let Some(k) = compile_host_with(wgsl, "header", "scale", options) else {
            return;
        };
        let bufs = BTreeMap::from([
            (0, header.clone()),
            (1, bytes(&x)),
            (2, vec![0u8; x.len() * 4]),
        ]);
        let got = f32s(&k.run([3, 1, 1], &bufs)[&2]);
        assert_close("by value", &got, &want, 1e-6);
    }
}
