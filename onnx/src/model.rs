//! Running an ONNX graph on a kiln device: [`OnnxModel`].

use crate::ops::{self, Ctx};
use crate::value::Value;
use crate::{
    DataType, ModelProto, NodeProto, TensorProto, decode_model, opset_version, tensor_value,
};
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use kiln_core::{DType, Device, Error, Result, Tensor};

/// One dimension of a declared graph input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dim {
    /// A fixed size.
    Fixed(usize),
    /// A named size that any run may choose (`"N"`, `"seq_len"`).
    Symbolic(String),
    /// Not declared.
    Unknown,
}

/// A graph input as the file declares it.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelInput {
    /// The ONNX name.
    pub name: String,
    /// The ONNX element type.
    pub elem_type: DataType,
    /// The declared dimensions, when the file gives a shape.
    pub dims: Option<Vec<Dim>>,
}

/// An ONNX model ready to run on a kiln device. Weights are uploaded once, at load; integer
/// constants stay on the host (see [`crate::value`]). Shapes are computed per run, so
/// symbolic dimensions (batch, sequence length) take any size.
///
/// ```
/// use kiln_onnx::OnnxModel;
/// // A graph of one node, y = Relu(x), built with the generated messages.
/// use kiln_onnx::proto::*;
/// let vi = |n: &str| ValueInfoProto { name: Some(n.into()), ..Default::default() };
/// let graph = GraphProto {
///     node: vec![NodeProto { op_type: Some("Relu".into()), input: vec!["x".into()],
///                            output: vec!["y".into()], ..Default::default() }],
///     input: vec![vi("x")], output: vec![vi("y")], ..Default::default()
/// };
/// let model = ModelProto { graph: Some(graph), opset_import: vec![OperatorSetIdProto {
///     domain: Some(String::new()), version: Some(17) }], ..Default::default() };
/// let dev = kiln_core::Device::cpu();
/// let m = OnnxModel::from_proto(model, &dev)?;
/// let x = kiln_core::Tensor::from_slice(&[-1.0f32, 2.0], [2], &dev)?;
/// assert_eq!(m.run(&[x])?[0].to_vec::<f32>()?, [0.0, 2.0]);
/// # Ok::<(), kiln_core::Error>(())
/// ```
#[derive(Debug)]
pub struct OnnxModel {
    graph: Graph,
    inputs: Vec<ModelInput>,
    opset: i64,
    device: Device,
}

/// A graph prepared to run: the model's, or a control-flow op's branch or body.
#[derive(Debug)]
pub(crate) struct Graph {
    nodes: Vec<Node>,
    /// The declared inputs that are not initializers, in order.
    inputs: Vec<String>,
    outputs: Vec<String>,
    /// Initializers (floats on the device, integers on the host).
    constants: BTreeMap<String, Value>,
    /// For each node, the values whose last use it is (dropped after it runs).
    last_uses: Vec<Vec<String>>,
    /// The element types the graph declares, by value name (see [`declared_types`]).
    types: BTreeMap<String, DataType>,
}

/// A node with its import and its prepared graph attributes (If's branches, Loop's body).
#[derive(Debug)]
struct Node {
    proto: NodeProto,
    run: ops::OpFn,
    graphs: BTreeMap<String, Graph>,
}

/// The values a node can see: its graph's so far, its graph's initializers, and those of the
/// graphs it is nested in (a subgraph reads outer values by name).
pub(crate) struct Scope<'a> {
    env: &'a BTreeMap<&'a str, Value>,
    constants: &'a BTreeMap<String, Value>,
    outer: Option<&'a Scope<'a>>,
}

impl<'a> Scope<'a> {
    /// The scope of a top-level graph: its values so far and its initializers.
    #[cfg(test)]
    pub(crate) fn new(
        env: &'a BTreeMap<&'a str, Value>,
        constants: &'a BTreeMap<String, Value>,
    ) -> Self {
        Scope {
            env,
            constants,
            outer: None,
        }
    }

    fn get(&self, name: &str) -> Option<&Value> {
        self.env
            .get(name)
            .or_else(|| self.constants.get(name))
            .or_else(|| self.outer.and_then(|o| o.get(name)))
    }
}

impl Graph {
    /// Prepares `graph` on `device`: every node's import is looked up (ops kiln does not
    /// import, in nested graphs too, are added to `unsupported`) and initializers uploaded.
    fn prepare(
        graph: crate::GraphProto,
        device: &Device,
        opset: i64,
        unsupported: &mut Vec<String>,
    ) -> Result<Graph> {
        let mut constants = BTreeMap::new();
        for t in &graph.initializer {
            constants.insert(t.name().to_string(), constant(t, device)?);
        }
        let inputs = graph
            .input
            .iter()
            .map(|v| v.name().to_string())
            .filter(|n| !constants.contains_key(n))
            .collect();
        let outputs: Vec<String> = graph.output.iter().map(|v| v.name().to_string()).collect();
        let types = declared_types(&graph);
        // how many nodes read each value (a value read once may be rewritten in place)
        let mut readers: BTreeMap<String, usize> = BTreeMap::new();
        for n in &graph.node {
            let mut names = Vec::new();
            mentions(n, &mut names);
            for name in names {
                *readers.entry(name.to_string()).or_default() += 1;
            }
        }
        let mut nodes = Vec::with_capacity(graph.node.len());
        // a Gradient node gets the nodes ahead of it that its `y` depends on, as a graph
        let (ahead, infos) = if graph.node.iter().any(ops::is_gradient) {
            let infos = graph
                .input
                .iter()
                .chain(&graph.output)
                .chain(&graph.value_info);
            (graph.node.clone(), infos.cloned().collect())
        } else {
            (Vec::new(), Vec::new())
        };
        for (k, mut proto) in graph.node.into_iter().enumerate() {
            if ops::is_gradient(&proto) {
                ops::attach_forward(&mut proto, &ahead[..k], &infos)
                    .map_err(|e| e.context(node_label(&proto)))?;
            }
            let mut graphs = BTreeMap::new();
            for a in &proto.attribute {
                if let Some(g) = &a.g {
                    graphs.insert(
                        a.name().to_string(),
                        Graph::prepare(g.clone(), device, opset, unsupported)?,
                    );
                }
            }
            let domain = proto.domain();
            let Some(run) = ops::find(domain, proto.op_type()) else {
                let d = if domain.is_empty() {
                    String::new()
                } else {
                    format!("{domain}.")
                };
                unsupported.push(format!("{d}{} (node '{}')", proto.op_type(), proto.name()));
                continue;
            };
            if let Some(conv) = nodes.last_mut()
                && into_conv(conv, &proto, &readers, &outputs, &mut constants)
            {
                continue;
            }
            let node = Node { proto, run, graphs };
            if !fold(&node, &mut constants, &types, device, opset) {
                nodes.push(node);
            }
        }
        // constants that only fed folded nodes are dropped (a converted model file keeps none)
        let mut used: Vec<&str> = outputs.iter().map(String::as_str).collect();
        for n in &nodes {
            mentions(&n.proto, &mut used);
        }
        let used: alloc::collections::BTreeSet<&str> = used.into_iter().collect();
        constants.retain(|name, _| used.contains(name.as_str()));
        let protos: Vec<&NodeProto> = nodes.iter().map(|n| &n.proto).collect();
        let last_uses = last_uses(&protos, &outputs);
        Ok(Graph {
            nodes,
            inputs,
            outputs,
            constants,
            last_uses,
            types,
        })
    }

    /// Runs the graph on `inputs` (one per declared input, in order) inside `outer`.
    pub(crate) fn run(
        &self,
        inputs: Vec<Value>,
        outer: Option<&Scope<'_>>,
        device: &Device,
        opset: i64,
    ) -> Result<Vec<Value>> {
        if inputs.len() != self.inputs.len() {
            return Err(Error::invalid(
                "onnx",
                format!(
                    "the graph takes {} inputs ({}), got {}",
                    self.inputs.len(),
                    self.inputs.join(", "),
                    inputs.len()
                ),
            ));
        }
        let mut env: BTreeMap<&str, Value> =
            self.inputs.iter().map(String::as_str).zip(inputs).collect();
        for (node, dead) in self.nodes.iter().zip(&self.last_uses) {
            let proto = &node.proto;
            let outs = {
                let scope = Scope {
                    env: &env,
                    constants: &self.constants,
                    outer,
                };
                let args = proto
                    .input
                    .iter()
                    .map(|name| lookup(&scope, name, proto))
                    .collect::<Result<Vec<Value>>>()?;
                let ctx = Ctx {
                    device,
                    opset,
                    node: proto,
                    graphs: &node.graphs,
                    scope: &scope,
                    types: &self.types,
                };
                (node.run)(&ctx, &args).map_err(|e| e.context(node_label(proto)))?
            };
            for (name, v) in proto.output.iter().zip(outs) {
                if !name.is_empty() {
                    let v = settle(&self.types, device, name, v)
                        .map_err(|e| e.context(node_label(proto)))?;
                    env.insert(name.as_str(), v);
                }
            }
            for name in dead {
                env.remove(name.as_str());
            }
        }
        let scope = Scope {
            env: &env,
            constants: &self.constants,
            outer,
        };
        self.outputs
            .iter()
            .map(|name| {
                scope.get(name).cloned().ok_or_else(|| {
                    Error::invalid("onnx", format!("graph output '{name}' is never computed"))
                })
            })
            .collect()
    }
}

impl OnnxModel {
    /// Decodes an `.onnx` file's bytes and prepares it on `device`.
    pub fn load(bytes: &[u8], device: &Device) -> Result<Self> {
        let model = decode_model(bytes).map_err(onnx_err)?;
        Self::from_proto(model, device)
    }

    /// Prepares a decoded model on `device`: checks that every node's op is supported (an
    /// error names each unsupported one with its node, in nested graphs too), and uploads the
    /// initializers.
    pub fn from_proto(model: ModelProto, device: &Device) -> Result<Self> {
        let opset = opset_version(&model, "").unwrap_or(1);
        let graph = model.graph.unwrap_or_default();
        let initializers: Vec<&str> = graph.initializer.iter().map(|t| t.name()).collect();
        let inputs: Vec<ModelInput> = graph
            .input
            .iter()
            .filter(|i| !initializers.contains(&i.name()))
            .map(model_input)
            .collect();
        let mut unsupported = Vec::new();
        let graph = Graph::prepare(graph, device, opset, &mut unsupported)?;
        if !unsupported.is_empty() {
            return Err(Error::unsupported(
                "onnx",
                format!(
                    "{} node(s) use ops kiln does not import: {}",
                    unsupported.len(),
                    unsupported.join(", ")
                ),
            ));
        }
        Ok(OnnxModel {
            graph,
            inputs,
            opset,
            device: device.clone(),
        })
    }

    /// The graph inputs to feed, in order (initializers excluded).
    pub fn inputs(&self) -> &[ModelInput] {
        &self.inputs
    }

    /// The names of the graph outputs, in order.
    pub fn output_names(&self) -> &[String] {
        &self.graph.outputs
    }

    /// The device the model runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The default-domain opset the model imports.
    pub fn opset(&self) -> i64 {
        self.opset
    }

    /// Runs the graph on `inputs` (one tensor per [`OnnxModel::inputs`], in order) and returns
    /// the outputs as tensors (int64 outputs as i32).
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let values = inputs.iter().cloned().map(Value::Tensor).collect();
        self.run_values(values)?
            .iter()
            .zip(&self.graph.outputs)
            .map(|(v, name)| v.tensor(&self.device, name))
            .collect()
    }

    /// [`OnnxModel::run`] on [`Value`]s, so int64 inputs may stay on the host and sequence or
    /// optional inputs can be given.
    pub fn run_values(&self, inputs: Vec<Value>) -> Result<Vec<Value>> {
        if inputs.len() != self.inputs.len() {
            let names: Vec<&str> = self.inputs.iter().map(|i| i.name.as_str()).collect();
            return Err(Error::invalid(
                "onnx",
                format!(
                    "the model takes {} inputs ({}), got {}",
                    self.inputs.len(),
                    names.join(", "),
                    inputs.len()
                ),
            ));
        }
        for (decl, v) in self.inputs.iter().zip(&inputs) {
            check_input(decl, v)?;
        }
        self.graph.run(inputs, None, &self.device, self.opset)
    }

    /// A random input for the model's single input, to trace it with: `shape`, or else the
    /// declared shape with symbolic dimensions as 1. Float inputs are f32, integer ones i32.
    pub fn sample_input(&self, shape: Option<&[usize]>) -> Result<Tensor> {
        let [input] = self.inputs.as_slice() else {
            return Err(Error::unsupported(
                "onnx to kiln",
                format!(
                    "models of one input convert; this one has {}",
                    self.inputs.len()
                ),
            ));
        };
        let dims: Vec<usize> = match (shape, &input.dims) {
            (Some(s), _) => s.to_vec(),
            (None, Some(d)) => d
                .iter()
                .map(|d| if let Dim::Fixed(n) = d { *n } else { 1 })
                .collect(),
            (None, None) => {
                return Err(Error::invalid(
                    "onnx to kiln",
                    format!("input '{}' declares no shape: give one", input.name),
                ));
            }
        };
        let x = Tensor::rand_normal(dims, 0.0, 1.0, 7, DType::F32, &self.device)?;
        match input.elem_type {
            DataType::Float | DataType::Undefined => Ok(x),
            DataType::Int64 | DataType::Int32 => x.cast(DType::I32),
            other => Err(Error::unsupported(
                "onnx to kiln",
                format!(
                    "input '{}' of type {other:?} (float and integer inputs convert)",
                    input.name
                ),
            )),
        }
    }

    /// The model as a kiln model file (safetensors with kiln's graph), traced on `sample` (the
    /// single input, batch axis first; its values do not matter, its shape does). Initializers
    /// keep their ONNX names; host integer computations fold into the traced ops' parameters.
    /// The batch axis stays dynamic when the file declares the input's first dimension
    /// symbolic, and is fixed at the sample's otherwise. Only models of one input and one
    /// output convert.
    ///
    /// ```
    /// # use kiln_onnx::{OnnxModel, proto::*};
    /// # let vi = |n: &str| ValueInfoProto { name: Some(n.into()), ..Default::default() };
    /// # let graph = GraphProto { node: vec![NodeProto { op_type: Some("Sigmoid".into()),
    /// #     input: vec!["x".into()], output: vec!["y".into()], ..Default::default() }],
    /// #     input: vec![vi("x")], output: vec![vi("y")], ..Default::default() };
    /// # let proto = ModelProto { graph: Some(graph), ..Default::default() };
    /// let dev = kiln_core::Device::cpu();
    /// let onnx = OnnxModel::from_proto(proto, &dev)?; // y = Sigmoid(x)
    /// let x = kiln_core::Tensor::from_slice(&[0.0f32, 1.0, -1.0], [1, 3], &dev)?;
    /// let file = onnx.to_kiln(&x)?;
    /// let kiln = kiln_core::model::Model::load(&file, &dev)?;
    /// assert_eq!(kiln.run(&[x.clone()])?[0].to_vec::<f32>()?, onnx.run(&[x])?[0].to_vec::<f32>()?);
    /// # Ok::<(), kiln_core::Error>(())
    /// ```
    #[cfg(feature = "std")]
    pub fn to_kiln(&self, sample: &Tensor) -> Result<Vec<u8>> {
        if self.inputs.len() != 1 || self.graph.outputs.len() != 1 {
            return Err(Error::unsupported(
                "onnx to kiln",
                format!(
                    "models of one input and one output convert; this one has {} inputs and {} outputs",
                    self.inputs.len(),
                    self.graph.outputs.len()
                ),
            ));
        }
        let mut metadata = BTreeMap::new();
        metadata.insert("source".to_string(), "onnx".to_string());
        metadata.insert("onnx_opset".to_string(), self.opset.to_string());
        // the batch stays dynamic when the file leaves the input's first dimension free
        let free_batch = !matches!(self.inputs[0].dims.as_deref(), Some([Dim::Fixed(_), ..]));
        kiln_core::model::save_model_batch(&mut Traceable(self), sample, &metadata, free_batch)
    }
}

/// The value of input `name` of `node` (`""` is an absent optional input).
fn lookup(scope: &Scope<'_>, name: &str, node: &NodeProto) -> Result<Value> {
    if name.is_empty() {
        return Ok(Value::Absent);
    }
    scope.get(name).cloned().ok_or_else(|| {
        Error::invalid(
            "onnx",
            format!(
                "{}: input '{name}' is not produced before it",
                node_label(node)
            ),
        )
    })
}

/// `node 'conv1' (Conv)`, for messages.
pub(crate) fn node_label(node: &NodeProto) -> String {
    format!("onnx node '{}' ({})", node.name(), node.op_type())
}

/// A parser error as a kiln error.
pub(crate) fn onnx_err(e: crate::OnnxError) -> Error {
    Error::new(kiln_core::ErrorKind::Format, "onnx", e.to_string())
}

/// An initializer (or a `Constant`'s tensor) as a value: floats on the device, integers and
/// bools on the host.
pub(crate) fn constant(t: &TensorProto, device: &Device) -> Result<Value> {
    Value::from_tensor(tensor_value(t).map_err(onnx_err)?, device)
}

/// The element types a graph declares for its values: graph inputs, outputs and `value_info`
/// entries with a tensor type, initializers, and `Constant` nodes' tensors. Ops that need an
/// integer value's exact ONNX type (a quantization's zero point: int8 or uint8?) look here,
/// since integers are carried without it.
fn declared_types(graph: &crate::GraphProto) -> BTreeMap<String, DataType> {
    use crate::proto::type_proto::Value as T;
    let mut types = BTreeMap::new();
    for v in graph
        .input
        .iter()
        .chain(&graph.output)
        .chain(&graph.value_info)
    {
        if let Some(T::TensorType(tt)) = v.r#type.as_ref().and_then(|t| t.value.as_ref())
            && let Ok(dt) = DataType::try_from(tt.elem_type())
            && dt != DataType::Undefined
        {
            types.insert(v.name().to_string(), dt);
        }
    }
    for t in &graph.initializer {
        if let Ok(dt) = DataType::try_from(t.data_type()) {
            types.insert(t.name().to_string(), dt);
        }
    }
    // what the ops that say their output types give (Cast, the quantizers' uint8 outputs)
    for n in &graph.node {
        let to = n
            .attribute
            .iter()
            .find(|a| a.name() == "to")
            .and_then(|a| a.i);
        let out: &[(usize, Option<i64>)] = match n.op_type() {
            "Cast" => &[(0, to)],
            "DynamicQuantizeLinear" => &[
                (0, Some(DataType::Uint8 as i64)),
                (2, Some(DataType::Uint8 as i64)),
            ],
            _ => &[],
        };
        for &(i, t) in out {
            if let (Some(name), Some(dt)) = (
                n.output.get(i),
                t.and_then(|t| i32::try_from(t).ok())
                    .and_then(|t| DataType::try_from(t).ok()),
            ) {
                types.insert(name.clone(), dt);
            }
        }
    }
    for n in graph.node.iter().filter(|n| n.op_type() == "Constant") {
        let value = n.attribute.iter().find(|a| a.name() == "value");
        if let (Some(t), Some(out)) = (value.and_then(|a| a.t.as_ref()), n.output.first())
            && let Ok(dt) = DataType::try_from(t.data_type())
        {
            types.insert(out.clone(), dt);
        }
    }
    types
}

fn model_input(v: &crate::ValueInfoProto) -> ModelInput {
    use crate::proto::tensor_shape_proto::dimension::Value as D;
    use crate::proto::type_proto::Value as T;
    let tensor = v.r#type.as_ref().and_then(|t| match &t.value {
        Some(T::TensorType(tt)) => Some(tt),
        _ => None,
    });
    let elem_type = tensor
        .and_then(|t| DataType::try_from(t.elem_type()).ok())
        .unwrap_or(DataType::Undefined);
    let dims = tensor.and_then(|t| t.shape.as_ref()).map(|s| {
        s.dim
            .iter()
            .map(|d| match &d.value {
                Some(D::DimValue(n)) if *n >= 0 => Dim::Fixed(*n as usize),
                Some(D::DimParam(p)) => Dim::Symbolic(p.clone()),
                _ => Dim::Unknown,
            })
            .collect()
    });
    ModelInput {
        name: v.name().to_string(),
        elem_type,
        dims,
    }
}

/// An input against its declaration: the rank and every fixed dimension must match.
fn check_input(decl: &ModelInput, v: &Value) -> Result<()> {
    let Some(want) = &decl.dims else {
        return Ok(());
    };
    let got = v.dims();
    let fits = got.len() == want.len()
        && want
            .iter()
            .zip(&got)
            .all(|(w, g)| !matches!(w, Dim::Fixed(n) if n != g));
    if fits {
        return Ok(());
    }
    let want: Vec<String> = want
        .iter()
        .map(|d| match d {
            Dim::Fixed(n) => n.to_string(),
            Dim::Symbolic(s) => s.clone(),
            Dim::Unknown => "?".into(),
        })
        .collect();
    Err(Error::shape(
        "onnx",
        format!(
            "input '{}' must have shape [{}], got {}",
            decl.name,
            want.join(", "),
            v.describe()
        ),
    ))
}

/// Constant folding at load: a node whose inputs are all constants (initializers or folded
/// results) runs once here and its outputs become constants, so weights a graph computes
/// (`ConstantOfShape`, a transposed or reshaped initializer, `Constant`) cost nothing per run.
/// Random ops and nodes with graphs stay; a node that fails here stays too, so its error
/// comes when (and if) it runs. Returns whether `node` was folded.
fn fold(
    node: &Node,
    constants: &mut BTreeMap<String, Value>,
    types: &BTreeMap<String, DataType>,
    device: &Device,
    opset: i64,
) -> bool {
    let p = &node.proto;
    let random = ["Random", "Bernoulli", "Multinomial"]
        .iter()
        .any(|r| p.op_type().starts_with(r));
    if random || !node.graphs.is_empty() {
        return false;
    }
    let args: Option<Vec<Value>> = p
        .input
        .iter()
        .map(|n| {
            if n.is_empty() {
                Some(Value::Absent)
            } else {
                constants.get(n).cloned()
            }
        })
        .collect();
    let Some(args) = args else { return false };
    let env = BTreeMap::new();
    let outs = {
        let scope = Scope {
            env: &env,
            constants,
            outer: None,
        };
        let ctx = Ctx {
            device,
            opset,
            node: p,
            graphs: &node.graphs,
            scope: &scope,
            types,
        };
        (node.run)(&ctx, &args)
    };
    let Ok(outs) = outs else { return false };
    let named: Vec<(&String, Value)> = p
        .output
        .iter()
        .zip(outs)
        .filter(|(name, _)| !name.is_empty())
        .collect();
    if named.len() < p.output.iter().filter(|o| !o.is_empty()).count() {
        return false;
    }
    let settled: Result<Vec<(String, Value)>> = named
        .into_iter()
        .map(|(name, v)| Ok((name.clone(), settle(types, device, name, v)?)))
        .collect();
    match settled {
        Ok(values) => {
            constants.extend(values);
            true
        }
        Err(_) => false,
    }
}

/// Folds an inference `BatchNormalization` (`bn`) into the `Conv` just before it (`conv`),
/// when the convolution's output feeds only `bn` and the weights and statistics are constants:
/// the weight is scaled per output channel by `scale / sqrt(var + eps)` and the bias becomes
/// `(bias - mean) * that + B`, so the normalization costs nothing per run. Returns whether it
/// folded (anything unusual leaves both nodes as they are).
fn into_conv(
    conv: &mut Node,
    bn: &NodeProto,
    readers: &BTreeMap<String, usize>,
    outputs: &[String],
    constants: &mut BTreeMap<String, Value>,
) -> bool {
    let c = &conv.proto;
    let Some(y) = c.output.first() else {
        return false;
    };
    let plain = |n: &NodeProto, op: &str| {
        n.op_type() == op && (n.domain().is_empty() || n.domain() == "ai.onnx")
    };
    let simple = plain(c, "Conv")
        && plain(bn, "BatchNormalization")
        && c.output.len() == 1
        && bn.input.len() == 5
        && bn.input[0] == *y
        && bn.output.iter().skip(1).all(String::is_empty)
        && readers.get(y) == Some(&1)
        && !outputs.contains(y)
        && bn.attribute.iter().all(|a| match a.name() {
            "epsilon" | "momentum" => true,
            "spatial" => a.i() == 1,
            "training_mode" => a.i() == 0,
            _ => false,
        });
    if !simple {
        return false;
    }
    let eps = bn
        .attribute
        .iter()
        .find(|a| a.name() == "epsilon")
        .map_or(1e-5, |a| f64::from(a.f()));
    let tensor = |name: Option<&String>| match name.and_then(|n| constants.get(n)) {
        Some(Value::Tensor(t)) if t.dtype().is_float() => Some(t.clone()),
        _ => None,
    };
    let (Some(w), Some(scale), Some(shift), Some(mean), Some(var)) = (
        tensor(c.input.get(1)),
        tensor(bn.input.get(1)),
        tensor(bn.input.get(2)),
        tensor(bn.input.get(3)),
        tensor(bn.input.get(4)),
    ) else {
        return false;
    };
    let bias = match c.input.get(2).filter(|n| !n.is_empty()) {
        Some(_) => match tensor(c.input.get(2)) {
            Some(b) => Some(b),
            None => return false,
        },
        None => None,
    };
    let folded = (|| -> Result<(Tensor, Tensor)> {
        use kiln_core::{BinaryOp, UnaryOp};
        let k = var
            .binary_scalar(BinaryOp::Add, eps)?
            .unary(UnaryOp::Rsqrt)?
            .binary(BinaryOp::Mul, &scale)?;
        let mut per_out = alloc::vec![1; w.rank()];
        per_out[0] = w.dims()[0];
        let w = w.binary(BinaryOp::Mul, &k.reshape(per_out)?)?;
        let centred = match bias {
            Some(b) => b.binary(BinaryOp::Sub, &mean)?,
            None => mean.unary(UnaryOp::Neg)?,
        };
        let b = centred
            .binary(BinaryOp::Mul, &k)?
            .binary(BinaryOp::Add, &shift)?;
        Ok((w, b))
    })();
    let Ok((w, b)) = folded else { return false };
    if w.dims().first() != b.dims().first() {
        return false;
    }
    let out = bn.output[0].clone();
    let (wn, bname) = (format!("{out}.weight"), format!("{out}.bias"));
    constants.insert(wn.clone(), Value::Tensor(w));
    constants.insert(bname.clone(), Value::Tensor(b));
    let p = &mut conv.proto;
    p.input.truncate(1);
    p.input.push(wn);
    p.input.push(bname);
    p.output[0] = out;
    true
}

/// Node output `name` as the graph declares it: a value the graph declares narrow (bfloat16,
/// float8, ...) that an op computed in f32 (or i32) is rounded into its type.
fn settle(
    types: &BTreeMap<String, DataType>,
    device: &Device,
    name: &str,
    v: Value,
) -> Result<Value> {
    match (&v, types.get(name)) {
        (Value::Tensor(_), Some(&ty)) if crate::narrow::is_narrow(ty) => {
            ops::to_narrow(device, &v, ty, true, crate::narrow::RoundMode::Up)
        }
        _ => Ok(v),
    }
}

/// For each node, the names whose last reader it is (graph outputs are never dropped). A node
/// reads its inputs and every name its nested graphs mention (outer values they may capture).
fn last_uses(nodes: &[&NodeProto], outputs: &[String]) -> Vec<Vec<String>> {
    let mut last: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, &n) in nodes.iter().enumerate() {
        let mut names = Vec::new();
        mentions(n, &mut names);
        for name in names.into_iter().filter(|n| !n.is_empty()) {
            last.insert(name, i);
        }
    }
    let mut dead = alloc::vec![Vec::new(); nodes.len()];
    for (name, i) in last {
        if !outputs.iter().any(|o| o == name) {
            dead[i].push(name.to_string());
        }
    }
    dead
}

/// The names `node` reads: its inputs, and the inputs and outputs of nodes in its graphs.
pub(crate) fn mentions<'a>(node: &'a NodeProto, names: &mut Vec<&'a str>) {
    names.extend(node.input.iter().map(String::as_str));
    for a in &node.attribute {
        for g in a.g.iter().chain(&a.graphs) {
            names.extend(g.output.iter().map(|o| o.name()));
            for n in &g.node {
                mentions(n, names);
            }
        }
    }
}

/// An [`OnnxModel`] as a kiln module, for tracing: its float initializers are the module's
/// tensors (so the model file keeps their ONNX names) and its forward pass is [`OnnxModel::run`].
#[cfg(feature = "std")]
struct Traceable<'a>(&'a OnnxModel);

#[cfg(feature = "std")]
impl kiln_core::nn::Module for Traceable<'_> {
    fn visit(&self, _: &mut dyn FnMut(&str, &kiln_core::nn::Param)) {}
    fn visit_mut(&mut self, _: &mut dyn FnMut(&str, &mut kiln_core::nn::Param)) {}
    fn named_tensors(&self) -> Vec<(String, Tensor)> {
        self.0
            .graph
            .constants
            .iter()
            .filter_map(|(name, v)| match v {
                // narrow ones (bfloat16, float8 weights) as the f32 values they hold
                Value::Tensor(t) | Value::Narrow { tensor: t, .. } => {
                    Some((name.clone(), t.clone()))
                }
                _ => None,
            })
            .collect()
    }
}

#[cfg(feature = "std")]
impl kiln_core::nn::Forward for Traceable<'_> {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut outs = self.0.run(core::slice::from_ref(x))?;
        Ok(outs.remove(0))
    }
}
