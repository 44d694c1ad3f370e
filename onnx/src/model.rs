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
    nodes: Vec<NodeProto>,
    inputs: Vec<ModelInput>,
    outputs: Vec<String>,
    constants: BTreeMap<String, Value>,
    /// For each node, the values whose last use it is (dropped after it runs).
    last_uses: Vec<Vec<String>>,
    opset: i64,
    device: Device,
}

impl OnnxModel {
    /// Decodes an `.onnx` file's bytes and prepares it on `device`.
    pub fn load(bytes: &[u8], device: &Device) -> Result<Self> {
        let model = decode_model(bytes).map_err(onnx_err)?;
        Self::from_proto(model, device)
    }

    /// Prepares a decoded model on `device`: checks that every node's op is supported (an
    /// error names each unsupported one with its node), and uploads the initializers.
    pub fn from_proto(model: ModelProto, device: &Device) -> Result<Self> {
        let opset = opset_version(&model, "").unwrap_or(1);
        let graph = model.graph.unwrap_or_default();
        let mut unsupported = Vec::new();
        for n in &graph.node {
            let domain = n.domain();
            if ops::find(domain, n.op_type()).is_none() {
                let d = if domain.is_empty() {
                    String::new()
                } else {
                    format!("{domain}.")
                };
                unsupported.push(format!("{d}{} (node '{}')", n.op_type(), n.name()));
            }
        }
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
        let mut constants = BTreeMap::new();
        for t in &graph.initializer {
            constants.insert(t.name().to_string(), constant(t, device)?);
        }
        let inputs = graph
            .input
            .iter()
            .filter(|v| !constants.contains_key(v.name()))
            .map(model_input)
            .collect();
        let outputs: Vec<String> = graph.output.iter().map(|v| v.name().to_string()).collect();
        let nodes = graph.node;
        let last_uses = last_uses(&nodes, &outputs);
        Ok(OnnxModel {
            nodes,
            inputs,
            outputs,
            constants,
            last_uses,
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
        &self.outputs
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
            .zip(&self.outputs)
            .map(|(v, name)| v.tensor(&self.device, name))
            .collect()
    }

    /// [`OnnxModel::run`] on [`Value`]s, so int64 inputs may stay on the host.
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
        let mut env: BTreeMap<&str, Value> = BTreeMap::new();
        for (decl, v) in self.inputs.iter().zip(inputs) {
            check_input(decl, &v)?;
            env.insert(decl.name.as_str(), v);
        }
        for (node, dead) in self.nodes.iter().zip(&self.last_uses) {
            let args = node
                .input
                .iter()
                .map(|name| self.lookup(&env, name, node))
                .collect::<Result<Vec<Value>>>()?;
            let ctx = Ctx {
                device: &self.device,
                opset: self.opset,
                node,
            };
            let run = ops::find(node.domain(), node.op_type()).ok_or_else(|| {
                Error::unsupported("onnx", format!("no import for {}", node.op_type()))
            })?;
            let outs = run(&ctx, &args).map_err(|e| e.context(node_label(node)))?;
            for (name, v) in node.output.iter().zip(outs) {
                if !name.is_empty() {
                    env.insert(name.as_str(), v);
                }
            }
            for name in dead {
                env.remove(name.as_str());
            }
        }
        self.outputs
            .iter()
            .map(|name| {
                env.get(name.as_str())
                    .or_else(|| self.constants.get(name))
                    .cloned()
                    .ok_or_else(|| {
                        Error::invalid("onnx", format!("graph output '{name}' is never computed"))
                    })
            })
            .collect()
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
        if self.inputs.len() != 1 || self.outputs.len() != 1 {
            return Err(Error::unsupported(
                "onnx to kiln",
                format!(
                    "models of one input and one output convert; this one has {} inputs and {} outputs",
                    self.inputs.len(),
                    self.outputs.len()
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

    fn lookup(&self, env: &BTreeMap<&str, Value>, name: &str, node: &NodeProto) -> Result<Value> {
        if name.is_empty() {
            return Ok(Value::Absent);
        }
        env.get(name)
            .or_else(|| self.constants.get(name))
            .cloned()
            .ok_or_else(|| {
                Error::invalid(
                    "onnx",
                    format!(
                        "{}: input '{name}' is not produced before it",
                        node_label(node)
                    ),
                )
            })
    }
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

/// For each node, the names whose last reader it is (graph outputs are never dropped).
fn last_uses(nodes: &[NodeProto], outputs: &[String]) -> Vec<Vec<String>> {
    let mut last: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        for name in n.input.iter().filter(|n| !n.is_empty()) {
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
            .constants
            .iter()
            .filter_map(|(name, v)| match v {
                Value::Tensor(t) => Some((name.clone(), t.clone())),
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
