//! Seeded mutations of real files: decoding and reading tensors return `Ok` or `Err`, never
//! panic, and stay quick.

mod common;

use kiln_core::random::SplitMix64 as Rng;
use kiln_onnx::{NodeAttrs, decode_model, decode_tensor, tensor_value};

/// One to three random edits: bit flips, truncation, byte overwrites, duplicated or removed
/// ranges.
fn mutate(bytes: &mut Vec<u8>, rng: &mut Rng) {
    for _ in 0..1 + rng.below(3) {
        if bytes.is_empty() {
            return;
        }
        let at = rng.below(bytes.len());
        let span = (1 + rng.below(64)).min(bytes.len() - at);
        match rng.below(5) {
            0 => bytes[at] ^= 1 << rng.below(8),
            1 => bytes.truncate(at),
            2 => bytes[at..at + span.min(16)]
                .iter_mut()
                .for_each(|b| *b = rng.next_u64() as u8),
            3 => {
                let copy = bytes[at..at + span].to_vec();
                let to = rng.below(bytes.len() + 1);
                bytes.splice(to..to, copy);
            }
            _ => drop(bytes.drain(at..at + span)),
        }
    }
}

#[derive(Default, Debug)]
struct Outcomes {
    mutations: usize,
    decoded: usize,
    rejected: usize,
    values: usize,
    value_errors: usize,
    imported: usize,
    import_errors: usize,
}

impl Outcomes {
    fn value<T, E>(&mut self, r: Result<T, E>) {
        match r {
            Ok(_) => self.values += 1,
            Err(_) => self.value_errors += 1,
        }
    }

    fn model(&mut self, bytes: &[u8]) {
        let Ok(model) = decode_model(bytes) else {
            return self.rejected += 1;
        };
        self.decoded += 1;
        // the import (op lookup, initializer upload, input declarations) on the CPU; running a
        // mutated model is left out: a mutated size may ask for any amount of memory
        match kiln_onnx::OnnxModel::from_proto(model.clone(), &kiln_core::Device::cpu()) {
            Ok(m) => {
                self.imported += 1;
                let _ = m.sample_input(None);
            }
            Err(_) => self.import_errors += 1,
        }
        let graph = model.graph.as_ref().unwrap();
        for t in common::graph_tensors(graph) {
            self.value(tensor_value(t));
        }
        for node in &graph.node {
            for a in &node.attribute {
                // Any of these may fail on a mutated type; none may panic.
                let name = a.name();
                let _ = (
                    node.attr_int(name),
                    node.attr_ints(name),
                    node.attr_string(name),
                );
                let _ = (
                    node.attr_strings(name),
                    node.attr_tensor(name),
                    node.attr_floats(name),
                );
            }
        }
    }

    fn tensor(&mut self, bytes: &[u8]) {
        let Ok(t) = decode_tensor(bytes) else {
            return self.rejected += 1;
        };
        self.decoded += 1;
        self.value(tensor_value(&t));
    }
}

#[test]
fn mutated_files_never_panic() {
    let Some(root) = common::suites() else { return };
    let start = std::time::Instant::now();
    let node = |case: &str, file: &str| root.join("onnx-node").join(case).join(file);
    // (file, is a model): a Constant node case, a model with raw_data initializers, MNIST
    // (float_data), a light zoo model, and TensorProtos in raw_data and packed int32_data.
    let inputs = [
        (node("test_constant", "model.onnx"), true),
        (
            root.join("onnx-pytorch-converted/test_Conv2d/model.onnx"),
            true,
        ),
        (root.join("models/mnist/mnist-8/model.onnx"), true),
        (root.join("onnx-light/light_squeezenet.onnx"), true),
        (node("test_add", "test_data_set_0/input_0.pb"), false),
        (
            node("test_dequantizelinear_int4", "test_data_set_0/input_0.pb"),
            false,
        ),
    ];
    let mut rng = Rng::new(0x6b69_6c6e_6f6e_6e78);
    let mut out = Outcomes::default();
    for (path, is_model) in &inputs {
        let original = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for _ in 0..5000 {
            let mut bytes = original.clone();
            mutate(&mut bytes, &mut rng);
            out.mutations += 1;
            if *is_model {
                out.model(&bytes)
            } else {
                out.tensor(&bytes)
            }
        }
    }
    println!("{out:?} in {:.1} s", start.elapsed().as_secs_f64());
    assert_eq!(out.mutations, 30_000);
    // Both outcomes occur, so the mutations neither always break nor never touch the files.
    assert!(out.decoded > 1000 && out.rejected > 1000, "{out:?}");
    assert!(out.values > 1000 && out.value_errors > 100, "{out:?}");
    assert!(out.imported > 1000 && out.import_errors > 20, "{out:?}");
}
