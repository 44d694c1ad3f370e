//! The kiln model file: safetensors encoding, robustness against damaged files, tracing and
//! replay at other batch sizes, and loading a PyTorch state_dict by name.

use kiln_core::model::{
    FORMAT_VERSION, Graph, GraphNode, GraphOutput, Model, Ref, ValueInfo, decode_safetensors,
    encode_safetensors, load_safetensors, save_model, save_safetensors,
};
use kiln_core::nn::{
    BatchNorm2d, Conv2d, Conv2dConfig, Dropout, Flatten, Forward, Init, Linear, MaxPool2d, Module,
    ReLU, Sequential,
};
use kiln_core::{DType, Device, ErrorKind, Op, Result, Tensor, TensorData, UnaryOp};
use std::collections::BTreeMap;

fn dev() -> Device {
    Device::cpu()
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_data().unwrap().to_f64_vec()
}

fn meta(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn safetensors_round_trips_every_dtype() {
    let tensors = vec![
        (
            "f64".to_string(),
            TensorData::new(vec![1.5f64, -2.25e300, 0.0], [3]).unwrap(),
        ),
        (
            "a.f32".into(),
            TensorData::new(vec![0.1f32, -7.0, 3.25, 1e-30, 2.0, 9.0], [2, 3]).unwrap(),
        ),
        (
            "f16".into(),
            TensorData::new(vec![half::f16::from_f32(0.5); 5], [5, 1]).unwrap(),
        ),
        (
            "i32".into(),
            TensorData::new(vec![-3i32, i32::MAX], [2]).unwrap(),
        ),
        ("u32".into(), TensorData::new(vec![7u32], []).unwrap()),
        (
            "bool".into(),
            TensorData::new(vec![true, false, true], [3]).unwrap(),
        ),
        (
            "empty".into(),
            TensorData::new(Vec::<f32>::new(), [0, 4]).unwrap(),
        ),
    ];
    let m = meta(&[("k", "v \"quoted\" ✓")]);
    let bytes = encode_safetensors(&tensors, &m).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    assert_eq!(header_len % 8, 0, "data is 8-byte aligned");
    let back = decode_safetensors(&bytes).unwrap();
    assert_eq!(back.metadata, m);
    assert_eq!(back.tensors.len(), tensors.len());
    for (name, data) in &tensors {
        assert_eq!(&back.tensors[name], data, "{name}");
    }
    let dup = vec![tensors[0].clone(), tensors[0].clone()];
    assert!(encode_safetensors(&dup, &BTreeMap::new()).is_err());
}

/// A file written the way the reference implementation lays it out, with PyTorch's dtypes.
fn handmade(entries: &[(&str, &str, &[usize], Vec<u8>)]) -> Vec<u8> {
    let mut header = String::from("{");
    let mut data = vec![];
    for (i, (name, dtype, shape, bytes)) in entries.iter().enumerate() {
        let start = data.len();
        data.extend_from_slice(bytes);
        header += &format!(
            "{}\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":{shape:?},\"data_offsets\":[{start},{}]}}",
            if i > 0 { "," } else { "" },
            data.len()
        );
    }
    header += "}";
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend(data);
    out
}

#[test]
fn pytorch_dtypes_are_widened() {
    let i64s: Vec<u8> = [5i64, -9].iter().flat_map(|v| v.to_le_bytes()).collect();
    let bf16: Vec<u8> = [1.5f32, -0.375]
        .iter()
        .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
        .collect();
    let bytes = handmade(&[
        ("steps", "I64", &[2], i64s),
        ("w", "BF16", &[2], bf16),
        ("px", "U8", &[3], vec![0, 200, 255]),
        ("s", "I8", &[1], vec![0xff]),
    ]);
    let f = load_safetensors(&bytes).unwrap();
    assert_eq!(f.tensors["steps"].to_vec::<i32>().unwrap(), vec![5, -9]);
    assert_eq!(f.tensors["w"].to_vec::<f32>().unwrap(), vec![1.5, -0.375]);
    assert_eq!(f.tensors["px"].to_vec::<i32>().unwrap(), vec![0, 200, 255]);
    assert_eq!(f.tensors["s"].to_vec::<i32>().unwrap(), vec![-1]);

    let big = handmade(&[("n", "I64", &[1], (1i64 << 40).to_le_bytes().to_vec())]);
    let err = load_safetensors(&big).unwrap_err();
    assert!(err.to_string().contains("does not fit in i32"), "{err}");
    let f8 = handmade(&[("q", "F8_E4M3", &[1], vec![0])]);
    let err = load_safetensors(&f8).unwrap_err();
    assert!(
        err.to_string().contains("q") && err.to_string().contains("F8_E4M3"),
        "{err}"
    );
}

#[test]
fn damaged_files_give_errors_that_say_what_is_wrong() {
    let ok = handmade(&[("w", "F32", &[2, 2], vec![0; 16])]);
    let check = |bytes: &[u8], needle: &str| {
        let e = decode_safetensors(bytes).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Format, "{e}");
        assert!(e.to_string().contains(needle), "{e} lacks {needle:?}");
    };
    check(&ok[..5], "at least 8");
    check(&ok[..20], "truncated");
    check(&ok[..ok.len() - 1], "needs 16 bytes");
    check(
        &handmade(&[("w", "F32", &[3, 2], vec![0; 16])]),
        "needs 24 bytes",
    );
    let mut not_json = ok.clone();
    not_json[8] = b'[';
    check(&not_json, "JSON");
    let mut huge = ok.clone();
    huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    check(&huge, "header length");
    let header = r#"{"__metadata__":{"a":1}}"#;
    let bad_meta = [&(header.len() as u64).to_le_bytes()[..], header.as_bytes()].concat();
    check(&bad_meta, "must be a string");
}

/// A small model file built by hand (no backend needed): relu(x @ w) with a dynamic batch.
fn tiny_model_file() -> Vec<u8> {
    let graph = Graph {
        inputs: vec![ValueInfo {
            name: "input".into(),
            dtype: DType::F32,
            shape: vec![None, Some(3)],
        }],
        nodes: vec![
            GraphNode {
                op: Op::Matmul,
                inputs: vec![Ref::Input(0), Ref::Tensor("w".into())],
                batch: vec![],
            },
            GraphNode {
                op: Op::Unary(UnaryOp::Relu),
                inputs: vec![Ref::Node(0)],
                batch: vec![],
            },
        ],
        outputs: vec![GraphOutput {
            info: ValueInfo {
                name: "output".into(),
                dtype: DType::F32,
                shape: vec![None, Some(2)],
            },
            value: Ref::Node(1),
        }],
    };
    let w = TensorData::new(vec![1.0f32, -2.0, 0.5, 3.0, -1.0, 0.25], [3, 2]).unwrap();
    let m = meta(&[
        ("format", "kiln"),
        ("kiln_version", &FORMAT_VERSION.to_string()),
        ("kiln_graph", &serde_json::to_string(&graph).unwrap()),
    ]);
    encode_safetensors(&[("w".into(), w)], &m).unwrap()
}

#[test]
fn fuzzed_and_truncated_files_never_panic() {
    let good = tiny_model_file();
    let model = Model::load(&good, &dev()).unwrap();
    assert_eq!(model.inputs()[0].shape, vec![None, Some(3)]);
    assert_eq!(model.outputs()[0].name, "output");
    for len in 0..good.len() {
        assert!(
            Model::load(&good[..len], &dev()).is_err(),
            "truncated to {len} loads"
        );
    }
    // Deterministic xorshift mutations: flip 1-4 bytes anywhere (header and data).
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut loaded = 0;
    for _ in 0..3000 {
        let mut bytes = good.clone();
        for _ in 0..(next() % 4 + 1) {
            let i = (next() as usize) % bytes.len();
            bytes[i] = next() as u8;
        }
        if let Ok(m) = Model::load(&bytes, &dev()) {
            loaded += 1;
            let _ = m.inputs();
        }
    }
    // Most single-byte changes in the data section still load; the header ones must not panic.
    assert!(loaded > 0);
}

#[test]
fn model_load_rejects_what_it_cannot_run() {
    let w = TensorData::new(vec![1.0f32], [1]).unwrap();
    let plain = encode_safetensors(&[("w".into(), w.clone())], &BTreeMap::new()).unwrap();
    let e = Model::load(&plain, &dev()).unwrap_err();
    assert!(e.to_string().contains("not a kiln model file"), "{e}");

    let newer = meta(&[
        ("format", "kiln"),
        ("kiln_version", "999"),
        ("kiln_graph", "{}"),
    ]);
    let bytes = encode_safetensors(&[("w".into(), w.clone())], &newer).unwrap();
    let e = Model::load(&bytes, &dev()).unwrap_err();
    assert!(e.to_string().contains("999"), "{e}");

    let dangling = r#"{"inputs":[{"name":"input","dtype":"f32","shape":[null,1]}],
        "nodes":[{"op":"matmul","inputs":[{"input":0},{"tensor":"nope"}]}],
        "outputs":[{"name":"output","dtype":"f32","shape":[null,1],"value":{"node":0}}]}"#;
    let m = meta(&[
        ("format", "kiln"),
        ("kiln_version", "1"),
        ("kiln_graph", dangling),
    ]);
    let bytes = encode_safetensors(&[("w".into(), w)], &m).unwrap();
    let e = Model::load(&bytes, &dev()).unwrap_err();
    assert!(e.to_string().contains("nope"), "{e}");
}

#[test]
fn handmade_graph_runs_at_any_batch_size() {
    let model = Model::load(&tiny_model_file(), &dev()).unwrap();
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, -1.0, 0.0, 1.0], [2, 3], &dev()).unwrap();
    let y = model.forward(&x).unwrap();
    // relu(x @ w) by hand: [[-1, 4.75], [-2, 2.25]] -> [[0, 4.75], [0, 2.25]].
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.0, 4.75, 0.0, 2.25]);
    let e = model
        .forward(&Tensor::zeros([2, 4], DType::F32, &dev()).unwrap())
        .unwrap_err();
    assert!(e.to_string().contains("[batch, 3]"), "{e}");
}

#[derive(Module)]
struct Cnn {
    conv1: Conv2d,
    bn1: BatchNorm2d,
    pool: MaxPool2d,
    conv2: Conv2d,
    drop: Dropout,
    head: Sequential,
}

impl Cnn {
    fn new(seed: u64) -> Cnn {
        let mut init = Init::new(&dev(), seed);
        Cnn {
            conv1: Conv2dConfig::new(1, 4, 3)
                .padding(1)
                .build(&mut init)
                .unwrap(),
            bn1: BatchNorm2d::new(&mut init, 4).unwrap(),
            pool: MaxPool2d::new(2),
            conv2: Conv2dConfig::new(4, 6, 3)
                .stride(2)
                .build(&mut init)
                .unwrap(),
            drop: Dropout::new(0.5, 1).unwrap(),
            head: Sequential::new()
                .with(Linear::new(&mut init, 24, 8).unwrap())
                .with(ReLU)
                .with(Linear::new(&mut init, 8, 5).unwrap()),
        }
    }
}

impl Forward for Cnn {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = self
            .pool
            .forward(&self.bn1.forward(&self.conv1.forward(x)?)?.relu()?)?;
        let x = self.conv2.forward(&x)?.relu()?;
        self.head
            .forward(&self.drop.forward(&Flatten::new().forward(&x)?)?)
    }
}

#[test]
fn saved_model_runs_without_rust_model_code() {
    let mut cnn = Cnn::new(3);
    // Train-mode passes move BatchNorm's running statistics off their defaults.
    for s in 0..2 {
        let x = Tensor::rand_normal([6, 1, 10, 10], 0.5, 2.0, s, DType::F32, &dev()).unwrap();
        cnn.forward(&x).unwrap();
    }
    let sample = Tensor::rand_normal([2, 1, 10, 10], 0.0, 1.0, 7, DType::F32, &dev()).unwrap();
    let bytes = save_model(&mut cnn, &sample, &meta(&[("accuracy", "0.5")])).unwrap();
    let model = Model::load(&bytes, &dev()).unwrap();
    assert_eq!(model.metadata()["accuracy"], "0.5");
    assert_eq!(model.metadata()["format"], "kiln");
    assert_eq!(
        model.inputs()[0].shape,
        vec![None, Some(1), Some(10), Some(10)]
    );
    assert_eq!(model.outputs()[0].shape, vec![None, Some(5)]);
    assert!(model.tensors().contains_key("bn1.running_var"));
    assert!(model.tensors().contains_key("head.2.weight"));
    for batch in [1, 2, 5] {
        let x = Tensor::rand_normal(
            [batch, 1, 10, 10],
            0.0,
            1.0,
            20 + batch as u64,
            DType::F32,
            &dev(),
        )
        .unwrap();
        let want = cnn.forward(&x).unwrap();
        let got = model.forward(&x).unwrap();
        assert_eq!(got.dims(), &[batch, 5]);
        assert_eq!(vals(&got), vals(&want), "batch {batch}: identical logits");
    }
}

/// Shape-carrying ops whose shapes include the batch size.
#[derive(Module)]
struct BatchShapes {
    fc: Linear,
}

impl Forward for BatchShapes {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let b = x.dim(0)?;
        let rows = x.reshape([b * 2, 3])?; // a batch-multiple dim
        let y = self.fc.forward(&rows)?.reshape([b, 8])?;
        let ones = Tensor::ones([1, 8], DType::F32, x.device())?.expand([b, 8])?;
        let first = y.narrow(0, 0, b)?; // a slice whose bound is the batch size
        first.add(&ones)
    }
}

/// A version-1 file (poolings as `max_pool2d`, `avg_pool2d`, `adaptive_avg_pool2d` nodes, as
/// the models saved before format 2 hold them) loads and runs as its version-2 equivalent.
#[test]
fn version_1_pooling_graphs_are_upgraded() {
    struct Pools(MaxPool2d);
    impl Module for Pools {
        fn visit(&self, _: &mut dyn FnMut(&str, &kiln_core::nn::Param)) {}
        fn visit_mut(&mut self, _: &mut dyn FnMut(&str, &mut kiln_core::nn::Param)) {}
    }
    impl Forward for Pools {
        fn forward(&self, x: &Tensor) -> Result<Tensor> {
            let p = self.0.forward(x)?;
            let a = x.avg_pool2d(self.0.params)?;
            p.add(&a)?.adaptive_avg_pool2d([2, 3])
        }
    }
    let mut m = Pools(MaxPool2d::new(2));
    let x = Tensor::rand_normal([3, 2, 8, 10], 0.0, 1.0, 5, DType::F32, &dev()).unwrap();
    let v2 = save_model(&mut m, &x, &meta(&[])).unwrap();
    let file = decode_safetensors(&v2).unwrap();
    let json = &file.metadata["kiln_graph"];
    assert_eq!(json.matches("\"pool2d\"").count(), 3, "{json}");
    // the same graph as version 1 wrote it
    let mut graph: serde_json::Value = serde_json::from_str(json).unwrap();
    for node in graph["nodes"].as_array_mut().unwrap() {
        let op = node["op"].as_object_mut().unwrap();
        if let Some(pool) = op.remove("pool2d") {
            let (kind, params) = pool.as_object().unwrap().iter().next().unwrap();
            let old = match kind.as_str() {
                "max" => "max_pool2d",
                "avg" => "avg_pool2d",
                _ => "adaptive_avg_pool2d",
            };
            op.insert(old.into(), params.clone());
        }
    }
    let mut metadata = file.metadata.clone();
    metadata.insert("kiln_graph".into(), graph.to_string());
    metadata.insert("kiln_version".into(), "1".into());
    let tensors: Vec<(String, TensorData)> = file.tensors.into_iter().collect();
    let v1 = encode_safetensors(&tensors, &metadata).unwrap();
    let x5 = Tensor::rand_normal([5, 2, 8, 10], 0.0, 1.0, 6, DType::F32, &dev()).unwrap();
    let want = m.forward(&x5).unwrap();
    for bytes in [&v2, &v1] {
        let got = Model::load(bytes, &dev()).unwrap().forward(&x5).unwrap();
        assert_eq!(vals(&got), vals(&want));
    }
    // a version-1 pooling gradient cannot be upgraded (its inputs changed): an error, no panic
    metadata.insert(
        "kiln_graph".into(),
        graph
            .to_string()
            .replacen("\"max_pool2d\"", "\"max_pool2d_backward\"", 1),
    );
    let bad = encode_safetensors(&tensors, &metadata).unwrap();
    let err = Model::load(&bad, &dev()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Format, "{err}");
    assert!(err.to_string().contains("max_pool2d_backward"), "{err}");
}

#[test]
fn batch_dependent_shapes_replay_symbolically() {
    let mut m = BatchShapes {
        fc: Linear::new(&mut Init::new(&dev(), 2), 3, 4).unwrap(),
    };
    let sample = Tensor::rand_normal([3, 6], 0.0, 1.0, 1, DType::F32, &dev()).unwrap();
    let model = Model::load(
        &save_model(&mut m, &sample, &BTreeMap::new()).unwrap(),
        &dev(),
    )
    .unwrap();
    let batched: Vec<&GraphNode> = model
        .graph()
        .nodes
        .iter()
        .filter(|n| !n.batch.is_empty())
        .collect();
    assert!(batched.len() >= 3, "{:#?}", model.graph().nodes);
    for batch in [1, 4, 7] {
        let x =
            Tensor::rand_normal([batch, 6], 0.0, 1.0, batch as u64, DType::F32, &dev()).unwrap();
        assert_eq!(
            vals(&model.forward(&x).unwrap()),
            vals(&m.forward(&x).unwrap())
        );
    }
    let x = Tensor::zeros([2, 6], DType::F32, &dev()).unwrap();
    let two = model.run(&[x.clone(), x]).unwrap_err();
    assert!(two.to_string().contains("expects 1 inputs"), "{two}");
}

#[derive(Module)]
struct TinyCnn {
    conv1: Conv2d,
    bn1: BatchNorm2d,
    pool: MaxPool2d,
    conv2: Conv2d,
    head: Sequential,
}

impl Forward for TinyCnn {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let x = self
            .pool
            .forward(&self.bn1.forward(&self.conv1.forward(x)?)?.relu()?)?;
        let x = self.conv2.forward(&x)?.relu()?;
        self.head.forward(&x.flatten(1, -1)?)
    }
}

#[test]
fn torch_state_dict_loads_by_name() {
    // tests/fixtures/torch_cnn/generate.py: safetensors.torch.save_file(model.state_dict()).
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/torch_cnn/");
    let state = std::fs::read(format!("{dir}model.safetensors")).unwrap();
    let io = load_safetensors(&std::fs::read(format!("{dir}io.safetensors")).unwrap()).unwrap();
    let mut init = Init::new(&dev(), 0);
    let mut net = TinyCnn {
        conv1: Conv2dConfig::new(1, 4, 3)
            .padding(1)
            .build(&mut init)
            .unwrap(),
        bn1: BatchNorm2d::new(&mut init, 4).unwrap(),
        pool: MaxPool2d::new(2),
        conv2: Conv2dConfig::new(4, 6, 3)
            .stride(2)
            .build(&mut init)
            .unwrap(),
        head: Sequential::new()
            .with(Linear::new(&mut init, 24, 8).unwrap())
            .with(ReLU)
            .with(Linear::new(&mut init, 8, 5).unwrap()),
    };
    let tensors = load_safetensors(&state).unwrap().to_device(&dev()).unwrap();
    net.load_named(&tensors).unwrap();
    assert_eq!(vals(&net.bn1.num_batches_tracked.tensor()), vec![3.0]);
    net.set_training(false);
    let x = Tensor::from_data(&io.tensors["input"], &dev()).unwrap();
    let got = vals(&net.forward(&x).unwrap());
    let want = io.tensors["output"].to_f64_vec();
    assert_eq!(got.len(), 15);
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-5, "{got:?} vs {want:?}");
    }

    // A mismatched architecture names every problem at once.
    let mut wrong = TinyCnn {
        conv1: Conv2dConfig::new(1, 4, 3)
            .padding(1)
            .build(&mut init)
            .unwrap(),
        bn1: BatchNorm2d::new(&mut init, 4).unwrap(),
        pool: MaxPool2d::new(2),
        conv2: Conv2dConfig::new(4, 6, 3)
            .stride(2)
            .bias(false)
            .build(&mut init)
            .unwrap(),
        head: Sequential::new().with(Linear::new(&mut init, 24, 5).unwrap()),
    };
    let msg = wrong.load_named(&tensors).unwrap_err().to_string();
    for needle in [
        "unexpected conv2.bias",
        "unexpected head.2.weight",
        "head.0.weight: expected shape [5, 24], found [8, 24]",
    ] {
        assert!(msg.contains(needle), "{msg} lacks {needle}");
    }

    // And the kiln side writes a file PyTorch's names can be read back from.
    let again = save_safetensors(&net.named_tensors(), &BTreeMap::new()).unwrap();
    let back = load_safetensors(&again).unwrap();
    assert_eq!(
        back.tensors.keys().collect::<Vec<_>>(),
        load_safetensors(&state)
            .unwrap()
            .tensors
            .keys()
            .collect::<Vec<_>>()
    );
}

/// The CPU backend, counting which ops it runs alone and which with a fused tail; with
/// `fuse` false it fuses nothing, so a plan runs every node as its own op.
#[derive(Debug)]
struct Counting {
    fuse: bool,
    ops: std::sync::Mutex<Vec<String>>,
}

impl kiln_core::Backend for Counting {
    fn name(&self) -> String {
        "counting cpu".into()
    }
    fn upload(&self, data: &TensorData) -> Result<kiln_core::Storage> {
        dev().backend().upload(data)
    }
    fn execute(
        &self,
        op: &Op,
        inputs: &[kiln_core::View<'_>],
        outputs: &[kiln_core::op::Meta],
    ) -> Result<Vec<kiln_core::Storage>> {
        self.ops.lock().unwrap().push(op.name().to_string());
        dev().backend().execute(op, inputs, outputs)
    }
    fn fuses_tail(&self, op: &Op, dtype: DType, max_pool: bool) -> bool {
        self.fuse && dev().backend().fuses_tail(op, dtype, max_pool)
    }
    fn execute_with_tail(
        &self,
        op: &Op,
        inputs: &[kiln_core::View<'_>],
        tail: kiln_core::Tail<'_>,
        output: &kiln_core::op::Meta,
    ) -> Result<kiln_core::Storage> {
        let relu = if tail.relu { "+relu" } else { "" };
        let pool = if tail.max_pool { "+max_pool" } else { "" };
        self.ops
            .lock()
            .unwrap()
            .push(format!("{}+bias{relu}{pool}", op.name()));
        dev().backend().execute_with_tail(op, inputs, tail, output)
    }
    fn read(&self, input: kiln_core::View<'_>) -> kiln_core::ReadFuture {
        dev().backend().read(input)
    }
}

/// Random normal f32 values of `shape`.
fn random(shape: &[usize], seed: u64) -> TensorData {
    let t = Tensor::rand_normal(shape, 0.0, 1.0, seed, DType::F32, &dev()).unwrap();
    t.to_data().unwrap()
}

/// `graph` with `tensors` loaded twice: on a [`Counting`] backend that fuses tails and on one
/// that fuses nothing; each with its device and backend.
fn counted_models(
    graph: &Graph,
    tensors: &[(&str, TensorData)],
) -> [(Model, Device, std::sync::Arc<Counting>); 2] {
    let m = meta(&[
        ("format", "kiln"),
        ("kiln_version", &FORMAT_VERSION.to_string()),
        ("kiln_graph", &serde_json::to_string(graph).unwrap()),
    ]);
    let entries: Vec<(String, TensorData)> = (tensors.iter())
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let file = encode_safetensors(&entries, &m).unwrap();
    [true, false].map(|fuse| {
        let backend = std::sync::Arc::new(Counting {
            fuse,
            ops: Default::default(),
        });
        let device = Device::from_arc(backend.clone());
        (Model::load(&file, &device).unwrap(), device, backend)
    })
}

/// Runs both of [`counted_models`]' models on `x`: checks that their outputs have the same bits
/// and returns them with the ops each backend ran (fused, then unfused).
fn run_both(
    models: &[(Model, Device, std::sync::Arc<Counting>); 2],
    x: &TensorData,
) -> (Vec<Vec<f64>>, [String; 2]) {
    let [got, want] = models.each_ref().map(|(model, device, _)| {
        let outs = model.run(&[Tensor::from_data(x, device).unwrap()]).unwrap();
        outs.iter().map(vals).collect::<Vec<_>>()
    });
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(&want) {
        assert!(
            g.len() == w.len() && g.iter().zip(w).all(|(a, b)| a.to_bits() == b.to_bits()),
            "{g:?} != {w:?}"
        );
    }
    let ops = models
        .each_ref()
        .map(|(_, _, b)| std::mem::take(&mut *b.ops.lock().unwrap()).join(" "));
    (got, ops)
}

/// A model's plan folds a bias add and a ReLU into the convolution or matmul before them, and a
/// 2x2 max pool after a convolution's, when nothing else reads the values in between (the bias
/// on either side of the add), keeps them apart where something does, and gives the same bits
/// as running every node alone, at two batch sizes (the plan is made again for the second).
#[test]
fn plans_fold_bias_and_relu_into_products() {
    let node = |op: Op, inputs: Vec<Ref>, batch: Vec<[usize; 2]>| GraphNode { op, inputs, batch };
    let (t, n) = (|s: &str| Ref::Tensor(s.into()), Ref::Node);
    let add = || Op::Binary(kiln_core::BinaryOp::Add);
    let nodes = vec![
        node(
            Op::Conv2d(Default::default()),
            vec![Ref::Input(0), t("cw")],
            vec![],
        ),
        node(
            Op::Reshape {
                shape: [1, 4, 1, 1].into(),
            },
            vec![t("cb")],
            vec![],
        ),
        node(add(), vec![n(1), n(0)], vec![]),
        node(Op::Unary(UnaryOp::Relu), vec![n(2)], vec![]),
        node(
            Op::Pool2d(kiln_core::op::Pool2d::Max(kiln_core::op::Pool2dParams {
                kernel: [2, 2],
                stride: [2, 2],
                padding: [0, 0],
                dilation: [1, 1],
                count_include_pad: false,
            })),
            vec![n(3)],
            vec![],
        ),
        node(
            Op::Reshape {
                shape: [2, 16].into(),
            },
            vec![n(4)],
            vec![[0, 1]],
        ),
        node(Op::Matmul, vec![n(5), t("fw")], vec![]),
        node(add(), vec![n(6), t("fb")], vec![]),
        // read by the add and as an output: stays a value of its own
        node(Op::Matmul, vec![n(7), t("gw")], vec![]),
        node(add(), vec![n(8), t("gb")], vec![]),
    ];
    let info = |name: &str, shape: Vec<Option<usize>>| ValueInfo {
        name: name.into(),
        dtype: DType::F32,
        shape,
    };
    let graph = Graph {
        inputs: vec![info("input", vec![None, Some(2), Some(6), Some(6)])],
        nodes,
        outputs: vec![
            GraphOutput {
                info: info("output", vec![None, Some(3)]),
                value: n(9),
            },
            GraphOutput {
                info: info("product", vec![None, Some(3)]),
                value: n(8),
            },
        ],
    };
    let tensors = [
        ("cw", random(&[4, 2, 3, 3], 1)),
        ("cb", random(&[4], 2)),
        ("fw", random(&[16, 5], 3)),
        ("fb", random(&[5], 4)),
        ("gw", random(&[5, 3], 5)),
        ("gb", random(&[3], 6)),
    ];
    let models = counted_models(&graph, &tensors);
    for (batch, seed) in [(2, 10), (3, 11), (2, 12)] {
        let (got, [fused, plain]) = run_both(&models, &random(&[batch, 2, 6, 6], seed));
        assert_eq!(got.len(), 2);
        assert!(got.iter().all(|g| g.len() == batch * 3));
        assert_eq!(fused, "conv2d+bias+relu+max_pool matmul+bias matmul add");
        assert_eq!(plain, "conv2d add relu max_pool2d matmul add matmul add");
    }
    let [(fused_model, _, fused), (_, plain_dev, _)] = &models;
    // An input on another device is refused before anything runs.
    let x = Tensor::from_data(&random(&[2, 2, 6, 6], 13), plain_dev).unwrap();
    let err = fused_model.run(&[x]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Device, "{err}");
    assert!(
        err.to_string()
            .contains("an input is on another device than the model"),
        "{err}"
    );
    assert!(fused.ops.lock().unwrap().is_empty());
}

/// A max pool stays a step of its own where the plan cannot fold it: its input is also a graph
/// output (the bias and ReLU are still folded), or its windows are not 2x2 at stride 2. Same
/// bits as running every node alone.
#[test]
fn plans_keep_pools_apart_where_they_cannot_fold() {
    let node = |op: Op, inputs: Vec<Ref>| GraphNode {
        op,
        inputs,
        batch: vec![],
    };
    let (t, n) = (|s: &str| Ref::Tensor(s.into()), Ref::Node);
    let pool = |stride: usize| {
        Op::Pool2d(kiln_core::op::Pool2d::Max(kiln_core::op::Pool2dParams {
            kernel: [2, 2],
            stride: [stride, stride],
            padding: [0, 0],
            dilation: [1, 1],
            count_include_pad: false,
        }))
    };
    let add = Op::Binary(kiln_core::BinaryOp::Add);
    let nodes = vec![
        node(Op::Conv2d(Default::default()), vec![Ref::Input(0), t("cw")]),
        node(
            Op::Reshape {
                shape: [1, 4, 1, 1].into(),
            },
            vec![t("cb")],
        ),
        node(add.clone(), vec![n(0), n(1)]),
        node(Op::Unary(UnaryOp::Relu), vec![n(2)]),
        // the ReLU's value is an output too
        node(pool(2), vec![n(3)]),
        node(Op::Conv2d(Default::default()), vec![Ref::Input(0), t("cw")]),
        node(add, vec![n(5), n(1)]),
        node(Op::Unary(UnaryOp::Relu), vec![n(6)]),
        // windows at stride 1
        node(pool(1), vec![n(7)]),
    ];
    let info = |name: &str, shape: Vec<Option<usize>>| ValueInfo {
        name: name.into(),
        dtype: DType::F32,
        shape,
    };
    let output = |name: &str, side: usize, value: usize| GraphOutput {
        info: info(name, vec![None, Some(4), Some(side), Some(side)]),
        value: n(value),
    };
    let graph = Graph {
        inputs: vec![info("input", vec![None, Some(2), Some(6), Some(6)])],
        nodes,
        outputs: vec![
            output("pooled", 2, 4),
            output("relu", 4, 3),
            output("slid", 3, 8),
        ],
    };
    let tensors = [("cw", random(&[4, 2, 3, 3], 21)), ("cb", random(&[4], 22))];
    let models = counted_models(&graph, &tensors);
    let (got, [fused, plain]) = run_both(&models, &random(&[3, 2, 6, 6], 23));
    assert_eq!(got.len(), 3);
    assert!(got.iter().all(|g| !g.is_empty()));
    assert_eq!(
        fused,
        "conv2d+bias+relu max_pool2d conv2d+bias+relu max_pool2d"
    );
    assert_eq!(
        plain,
        "conv2d add relu max_pool2d conv2d add relu max_pool2d"
    );
}
