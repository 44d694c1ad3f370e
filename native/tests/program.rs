//! `kiln::program::compile` on the demo's MNIST model: what the recorded program holds (its
//! numbers are checked in the page, against the CPU, by tests/web/program.mjs).

use kiln::core::model::Model;
use kiln::core::{Device, ErrorKind};
use kiln::program::{MAGIC, MAX_BINDING_BYTES, VERSION, compile};
use serde_json::Value;

fn mnist() -> Vec<u8> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../demos/mnist/models/mnist.safetensors"
    );
    std::fs::read(path).expect("the demo's model (demos/mnist/models/mnist.safetensors)")
}

fn n(v: &Value) -> usize {
    v.as_u64().expect("a non-negative integer") as usize
}

/// Checks one list of steps against the program's tables; returns the steps' kinds in order.
fn check_steps(
    steps: &Value,
    header: &Value,
    blob: &[u8],
    inputs: usize,
    outputs: usize,
) -> Vec<String> {
    let slots = header["buffers"].as_array().unwrap();
    let kernels = header["kernels"].as_array().unwrap().len();
    let in_blob = |at: usize, bytes: usize| {
        assert!(
            at.is_multiple_of(4) && bytes.is_multiple_of(4) && at + bytes <= blob.len(),
            "blob range {at}+{bytes}"
        )
    };
    let slot = |s: &Value| {
        assert!(n(s) < slots.len(), "slot {s} of {}", slots.len());
        n(&slots[n(s)])
    };
    let mut kinds = Vec::new();
    for step in steps.as_array().unwrap() {
        let s = step.as_array().unwrap();
        let kind = s[0].as_str().unwrap().to_string();
        match kind.as_str() {
            "write" => {
                in_blob(n(&s[2]), n(&s[3]));
                assert!(n(&s[3]) <= slot(&s[1]));
            }
            "input" => {
                assert!(n(&s[1]) < inputs);
                slot(&s[2]);
            }
            "copy" => {
                assert!(n(&s[2]) + n(&s[5]) <= slot(&s[1]));
                assert!(n(&s[4]) + n(&s[5]) <= slot(&s[3]));
            }
            "dispatch" => {
                assert!(n(&s[1]) < kernels);
                in_blob(n(&s[2]), n(&s[3]));
                assert!(n(&s[3]) >= 4);
                s[4].as_array().unwrap().iter().for_each(|b| {
                    slot(b);
                });
                let grid: Vec<usize> = s[5].as_array().unwrap().iter().map(n).collect();
                assert!(
                    grid.len() == 3 && grid.iter().all(|&g| (1..=65535).contains(&g)),
                    "{grid:?}"
                );
            }
            "output" => {
                assert!(n(&s[1]) < outputs);
                assert!(n(&s[3]) + n(&s[4]) <= slot(&s[2]));
            }
            other => panic!("unknown step {other}"),
        }
        kinds.push(kind);
    }
    kinds
}

#[test]
fn mnist_program_holds_the_weights_valid_kernels_and_one_forward_per_batch() {
    let file = mnist();
    let program = compile(&file, &[1, 3]).unwrap();
    let (header, blob) = (program.header(), program.blob());
    assert_eq!(header["format"], "kiln-program");
    assert_eq!(header["version"], VERSION);

    // the file: magic, header length, the header, padding to 4, the blob
    let bytes = program.to_bytes();
    assert_eq!(&bytes[..8], MAGIC);
    let h = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let parsed: Value = serde_json::from_slice(&bytes[12..12 + h]).unwrap();
    assert_eq!(&parsed, header);
    let start = (12 + h).next_multiple_of(4);
    assert_eq!(&bytes[start..], blob);

    // every kernel is WGSL that naga accepts, with `main` and params at binding 0
    let kernels = header["kernels"].as_array().unwrap();
    assert!(kernels.len() >= 4, "{} kernels", kernels.len());
    for k in kernels {
        let label = k["label"].as_str().unwrap();
        kiln_kernels::custom::check_wgsl(label, k["wgsl"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("{label}: {e}"));
    }

    // the load writes every weight, byte for byte (f32 little-endian, as uploaded)
    let load = check_steps(&header["load"], header, blob, 0, 0);
    assert!(load.iter().all(|k| k == "write"), "{load:?}");
    let writes: Vec<&[u8]> = (header["load"].as_array().unwrap().iter())
        .map(|s| &blob[n(&s[2])..n(&s[2]) + n(&s[3])])
        .collect();
    let model = Model::load(&file, &Device::cpu()).unwrap();
    assert_eq!(writes.len(), model.tensors().len());
    for (name, t) in model.tensors() {
        let data = t.to_data().unwrap();
        assert!(
            writes.contains(&data.as_bytes()),
            "weight {name} is not among the load's writes"
        );
    }

    // one variant per batch size: the input first, dispatches, then the one output
    let variants = header["variants"].as_array().unwrap();
    assert_eq!(variants.len(), 2);
    for (v, batch) in variants.iter().zip([1, 3]) {
        assert_eq!(
            v["inputs"][0]["shape"],
            serde_json::json!([batch, 1, 28, 28])
        );
        assert_eq!(v["inputs"][0]["dtype"], "f32");
        assert_eq!(v["outputs"][0]["shape"], serde_json::json!([batch, 10]));
        let kinds = check_steps(&v["steps"], header, blob, 1, 1);
        assert_eq!(kinds.first().map(String::as_str), Some("input"));
        assert_eq!(kinds.last().map(String::as_str), Some("output"));
        assert!(
            kinds.iter().filter(|k| *k == "dispatch").count() >= 4,
            "{kinds:?}"
        );
        let out = v["steps"].as_array().unwrap().last().unwrap();
        assert_eq!(n(&out[4]), batch * 10 * 4);
    }
    assert!(
        program.summary().contains("f32 [3,1,28,28] -> f32 [3,10]"),
        "{}",
        program.summary()
    );
}

#[test]
fn compile_errors_name_what_was_expected() {
    let file = mnist();
    let e = compile(&file, &[]).unwrap_err();
    assert!(e.to_string().contains("batch size"), "{e}");
    let e = compile(&file, &[2, 0]).unwrap_err();
    assert!(e.to_string().contains("batch size is 0"), "{e}");
    // conv1's output at this batch is far past what WebGPU binds by default
    let e = compile(&file, &[2_000]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Device, "{e}");
    assert!(
        e.to_string().contains(&MAX_BINDING_BYTES.to_string()),
        "{e}"
    );
    let e = compile(b"not a model", &[1]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Format, "{e}");
}

#[test]
fn kiln_compile_writes_the_program_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("mnist.kilnprog");
    let model = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../demos/mnist/models/mnist.safetensors"
    );
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args([
            "compile",
            model,
            "--batch",
            "2,7",
            "-o",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout.contains("f32 [7,1,28,28] -> f32 [7,10]"), "{stdout}");
    // the same bytes as the library's in this process, where other fused kernels were
    // registered first (so their registration numbers differ from the CLI's)
    compile(&mnist(), &[1, 3]).unwrap();
    let written = std::fs::read(&out).unwrap();
    assert_eq!(written, compile(&mnist(), &[2, 7]).unwrap().to_bytes());
}

#[test]
fn variants_share_their_buffers() {
    let file = mnist();
    let total = |batches: &[usize]| -> u64 {
        let p = compile(&file, batches).unwrap();
        p.header()["buffers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap())
            .sum()
    };
    let (both, large) = (total(&[1, 64]), total(&[64]));
    // the weights and batch 64's values: batch 1's slots grow to hold batch 64's
    assert!(
        both <= large,
        "batch 1 and 64: {both} bytes, 64 alone {large}"
    );
}
