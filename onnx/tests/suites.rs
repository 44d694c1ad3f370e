//! Every model and tensor of the ONNX suites in `shared/conformance/` decodes, and a few values
//! match what the onnx Python package reads from the same files.

mod common;

use std::path::Path;

use kiln_onnx::proto::{sequence_proto, type_proto};
use kiln_onnx::{
    DataType, ModelProto, NodeAttrs, OnnxError, SequenceProto, TensorElems, decode_optional,
    decode_sequence, opset_version, read_model, read_tensor, tensor_value,
};

#[derive(Default)]
struct Counts {
    models: usize,
    /// Initializers and tensor attributes inside the models.
    model_tensors: usize,
    /// `.pb` files holding a TensorProto.
    tensor_files: usize,
    sequence_files: usize,
    optional_files: usize,
    /// Tensors inside sequences and optionals.
    element_tensors: usize,
    skipped: Vec<String>,
    failures: Vec<String>,
}

impl Counts {
    fn record<T>(&mut self, path: &Path, result: Result<T, OnnxError>) -> Option<T> {
        result
            .map_err(|e| self.failures.push(format!("{}: {e}", path.display())))
            .ok()
    }

    fn model(&mut self, path: &Path) -> Option<ModelProto> {
        let model = self.record(path, read_model(path))?;
        self.models += 1;
        for t in common::graph_tensors(model.graph.as_ref().unwrap()) {
            self.model_tensors += self.record(path, tensor_value(t)).is_some() as usize;
        }
        Some(model)
    }

    /// A case folder: `model.onnx` and `test_data_set_*/{input,output}_K.pb`.
    fn case(&mut self, dir: &Path) {
        let Some(model) = self.model(&dir.join("model.onnx")) else {
            return;
        };
        for set in common::list(dir, |n| n.starts_with("test_data_set_")) {
            for pb in common::list(&set, |n| n.ends_with(".pb")) {
                self.data_file(&model, &pb);
            }
        }
    }

    /// `input_K.pb` / `output_K.pb` (or `*_output_K.pb`): its kind is the type of the model's
    /// K-th input (not counting initializers) or output.
    fn data_file(&mut self, model: &ModelProto, pb: &Path) {
        let name = pb.file_stem().unwrap().to_str().unwrap();
        let (io, index) = name.rsplit_once('_').unwrap();
        let index: usize = index.parse().unwrap();
        let graph = model.graph.as_ref().unwrap();
        let value_info = if io.ends_with("input") {
            let init: Vec<&str> = graph.initializer.iter().map(|t| t.name()).collect();
            graph
                .input
                .iter()
                .filter(|v| !init.contains(&v.name()))
                .nth(index)
        } else {
            graph.output.get(index)
        };
        let kind = value_info
            .and_then(|v| v.r#type.as_ref())
            .and_then(|t| t.value.as_ref());
        let bytes = std::fs::read(pb).unwrap();
        match kind {
            Some(type_proto::Value::TensorType(_)) => {
                let value = kiln_onnx::decode_tensor(&bytes).and_then(|t| tensor_value(&t));
                self.tensor_files += self.record(pb, value).is_some() as usize;
            }
            Some(type_proto::Value::SequenceType(_)) => {
                if let Some(s) = self.record(pb, decode_sequence(&bytes)) {
                    self.sequence_files += 1;
                    self.sequence(pb, &s);
                }
            }
            Some(type_proto::Value::OptionalType(_)) => {
                if let Some(o) = self.record(pb, decode_optional(&bytes)) {
                    self.optional_files += 1;
                    if let Some(t) = &o.tensor_value {
                        self.element_tensors += self.record(pb, tensor_value(t)).is_some() as usize;
                    }
                    if let Some(s) = &o.sequence_value {
                        self.sequence(pb, s);
                    }
                }
            }
            other => self
                .skipped
                .push(format!("{}: value type {other:?}", pb.display())),
        }
    }

    fn sequence(&mut self, pb: &Path, s: &SequenceProto) {
        for t in &s.tensor_values {
            self.element_tensors += self.record(pb, tensor_value(t)).is_some() as usize;
        }
        for inner in &s.sequence_values {
            self.sequence(pb, inner);
        }
        if !s.map_values.is_empty() || !s.sparse_tensor_values.is_empty() {
            let elem = sequence_proto::DataType::try_from(s.elem_type());
            self.skipped
                .push(format!("{}: sequence of {elem:?}", pb.display()));
        }
    }
}

#[test]
fn every_model_and_tensor_in_the_suites_decodes() {
    let Some(root) = common::suites() else { return };
    let start = std::time::Instant::now();
    let mut c = Counts::default();
    for suite in [
        "onnx-node",
        "onnx-simple",
        "onnx-pytorch-converted",
        "onnx-pytorch-operator",
    ] {
        for case in common::list(&root.join(suite), |_| true) {
            c.case(&case);
        }
    }
    for case in common::list(&root.join("models/mnist"), |n| n.starts_with("mnist-")) {
        c.case(&case);
    }
    // The light zoo is flat: `light_X.onnx` next to `light_X_output_0.pb`.
    let light = root.join("onnx-light");
    for path in common::list(&light, |n| n.ends_with(".onnx")) {
        let Some(model) = c.model(&path) else {
            continue;
        };
        let stem = path.file_stem().unwrap().to_str().unwrap();
        for pb in common::list(&light, |n| n.starts_with(&format!("{stem}_output_"))) {
            c.data_file(&model, &pb);
        }
    }

    let tensors = c.model_tensors + c.tensor_files + c.element_tensors;
    println!(
        "decoded {} models, {tensors} tensors, {} skipped ({})",
        c.models,
        c.skipped.len(),
        if c.skipped.is_empty() {
            "none"
        } else {
            "map or sparse values"
        },
    );
    println!(
        "  tensors: {} initializers and tensor attributes, {} TensorProto files, {} elements of \
         {} SequenceProto and {} OptionalProto files; {:.1} s",
        c.model_tensors,
        c.tensor_files,
        c.element_tensors,
        c.sequence_files,
        c.optional_files,
        start.elapsed().as_secs_f64()
    );
    for s in &c.skipped {
        println!("  skipped {s}");
    }
    assert!(
        c.failures.is_empty(),
        "{} failures:\n{}",
        c.failures.len(),
        c.failures.join("\n")
    );
    // 1802 + 23 + 82 + 35 cases, 2 MNIST models, 9 light models (README of shared/conformance).
    assert_eq!(c.models, 1953);
    assert!(
        c.tensor_files > 6000 && c.model_tensors > 1000,
        "too few tensors"
    );
    assert!(
        c.sequence_files > 0 && c.optional_files > 0,
        "sequence/optional data not seen"
    );
}

/// Reference values from the onnx 1.23.2 Python package:
/// `onnx.numpy_helper.to_array(TensorProto.FromString(open(path, "rb").read()))` (narrow types
/// via `.view(np.uint8)` masked to their width), and `onnx.load(path)` for models.
#[test]
fn values_match_onnx_python() {
    let Some(root) = common::suites() else { return };
    let node = |case: &str, file: &str| {
        let path = root
            .join("onnx-node")
            .join(case)
            .join("test_data_set_0")
            .join(file);
        tensor_value(&read_tensor(path).unwrap()).unwrap()
    };

    let x = node("test_add", "input_0.pb"); // raw_data FLOAT
    assert_eq!((x.name.as_str(), &x.dims[..]), ("x", &[3, 4, 5][..]));
    let TensorElems::F32(v) = &x.data else {
        panic!("{:?}", x.data.dtype())
    };
    assert_eq!(v[..4], [1.764_052_4, 0.400_157_2, 0.978_738, 2.240_893_1]);
    assert!((v.iter().map(|&x| f64::from(x)).sum::<f64>() - 4.600_037_792_697_549).abs() < 1e-9);

    let shape = node("test_reshape_reordered_all_dims", "input_1.pb"); // raw_data INT64
    assert_eq!(
        (shape.dims, shape.data),
        (vec![3], TensorElems::I64(vec![4, 2, 3]))
    );

    let b = node("test_and2d", "input_0.pb"); // raw_data BOOL
    assert_eq!(b.dims, [3, 4]);
    let TensorElems::Bool(v) = &b.data else {
        panic!()
    };
    assert_eq!(
        (v[..6].to_vec(), v.iter().filter(|&&b| b).count()),
        (vec![true, true, true, true, true, false], 9)
    );

    let h = node("test_cast_FLOAT16_to_FLOAT", "input_0.pb"); // raw_data FLOAT16
    let TensorElems::F16(v) = &h.data else {
        panic!()
    };
    assert_eq!(
        (&h.dims[..], &v[..6]),
        (&[3, 4][..], &[14250, 14255, 14335, 14990, 14214, 14984][..])
    );

    let s = node("test_string_concat", "input_0.pb"); // string_data
    assert_eq!(
        s.data,
        TensorElems::String(vec![b"abc".to_vec(), b"def".to_vec()])
    );

    // int32_data: one FLOAT8 code per entry, INT4 two and INT2 four per entry.
    let codes = |case, dtype, codes: &[u8]| {
        let t = node(case, "input_0.pb");
        assert_eq!(
            t.data,
            TensorElems::Codes {
                dtype,
                codes: codes.to_vec()
            },
            "{case}"
        );
    };
    codes(
        "test_dequantizelinear_e4m3fn",
        DataType::Float8e4m3fn,
        &[0, 48, 56, 126, 237],
    );
    codes(
        "test_dequantizelinear_int4",
        DataType::Int4,
        &[0, 1, 7, 12, 8],
    ); // 0, 1, 7, -4, -8
    codes(
        "test_dequantizelinear_uint2",
        DataType::Uint2,
        &[0, 1, 2, 3],
    );
    codes("test_dequantizelinear_int2", DataType::Int2, &[0, 1, 3, 2]); // 0, 1, -1, -2

    let light = read_tensor(root.join("onnx-light/light_squeezenet_output_0.pb")).unwrap();
    let light = tensor_value(&light).unwrap();
    let TensorElems::F32(v) = &light.data else {
        panic!()
    };
    assert_eq!((&light.dims[..], v[0]), (&[1, 1000, 1, 1][..], 0.001));
}

#[test]
fn mnist_matches_onnx_python() {
    let Some(root) = common::suites() else { return };
    let model = read_model(root.join("models/mnist/mnist-8/model.onnx")).unwrap();
    assert_eq!(
        (model.ir_version(), opset_version(&model, "ai.onnx")),
        (3, Some(8))
    );
    let graph = model.graph.as_ref().unwrap();
    assert_eq!((graph.initializer.len(), graph.node.len()), (8, 12));

    // float_data, not raw_data, in this model.
    let w = tensor_value(&graph.initializer[0]).unwrap();
    assert_eq!(
        (w.name.as_str(), &w.dims[..]),
        ("Parameter193", &[16, 4, 4, 10][..])
    );
    let TensorElems::F32(v) = &w.data else {
        panic!()
    };
    assert_eq!(
        v[..4],
        [0.091_632_88, 0.121_435_9, 0.085_350_65, 0.122_606_86]
    );
    assert!((v.iter().map(|&x| f64::from(x)).sum::<f64>() + 4.553_017_074_729_723).abs() < 1e-9);

    let conv = &graph.node[1];
    assert_eq!((conv.name(), conv.op_type()), ("Convolution28", "Conv"));
    assert_eq!(conv.attr_ints("kernel_shape").unwrap(), Some(&[5, 5][..]));
    assert_eq!(conv.attr_string("auto_pad").unwrap(), Some("SAME_UPPER"));
    assert_eq!(conv.attr_int("group").unwrap(), Some(1));
    assert_eq!(conv.attr_float("alpha").unwrap(), None);
    assert_eq!(
        conv.attr_int("kernel_shape").unwrap_err().to_string(),
        "node 'Convolution28' (Conv): attribute 'kernel_shape' is INTS, expected INT"
    );
}
