//! The kiln model file: a safetensors file holding a module's parameters and buffers under their
//! dotted names, and in its metadata the traced forward graph, so that [`Model::load`] runs it
//! with no Rust model code (in the browser too).
//!
//! Metadata keys: `format` = `"kiln"`, `kiln_version` = [`FORMAT_VERSION`], `kiln_graph` = the
//! [`Graph`] as JSON; anything else is the caller's (`extra_metadata`).
//!
//! ```
//! use kiln_core::model::{save_model, Model};
//! use kiln_core::nn::{Forward, Init, Linear};
//! use kiln_core::{Device, DType, Tensor};
//! let dev = Device::cpu();
//! let mut fc = Linear::new(&mut Init::new(&dev, 1), 3, 2)?;
//! let x = Tensor::rand_normal([4, 3], 0.0, 1.0, 9, DType::F32, &dev)?;
//! let bytes = save_model(&mut fc, &x, &Default::default())?;
//! let model = Model::load(&bytes, &dev)?;
//! assert_eq!(model.inputs()[0].shape, vec![None, Some(3)]);
//! let x5 = Tensor::rand_normal([5, 3], 0.0, 1.0, 2, DType::F32, &dev)?; // another batch size
//! assert_eq!(model.forward(&x5)?.to_vec::<f32>()?, fc.forward(&x5)?.to_vec::<f32>()?);
//! # Ok::<(), kiln_core::Error>(())
//! ```

mod graph;
mod safetensors;

use graph::Plan;
pub use graph::{Graph, GraphNode, GraphOutput, Ref, ValueInfo};
pub use safetensors::{
    JsonParser, SafeTensors, decode_safetensors, decode_safetensors_with, encode_safetensors,
    parse_json,
};

use crate::error::{ErrorKind, fail};
use crate::{Device, Result, Tensor};
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;

/// Version of the graph format written by this build; files of a newer version are refused,
/// older ones are upgraded on load. 2: the poolings are one op, `pool2d` with a kind (1 had
/// `max_pool2d`, `avg_pool2d` and `adaptive_avg_pool2d`).
pub const FORMAT_VERSION: u32 = 2;

/// Metadata key holding the format tag `"kiln"`.
pub const KEY_FORMAT: &str = "format";
/// Metadata key holding the format version.
pub const KEY_VERSION: &str = "kiln_version";
/// Metadata key holding the graph JSON.
pub const KEY_GRAPH: &str = "kiln_graph";

/// A loaded model file: its tensors on a device and its graph, ready to run.
#[derive(Clone, Debug)]
pub struct Model {
    graph: Graph,
    tensors: BTreeMap<String, Tensor>,
    metadata: BTreeMap<String, String>,
    device: Device,
    /// the plan of the last run, reused while the input shapes stay the same
    plan: Arc<spin::Mutex<Option<Arc<Plan>>>>,
}

impl Model {
    /// Parses a kiln model file and uploads its tensors to `device`.
    pub fn load(bytes: &[u8], device: &Device) -> Result<Model> {
        Self::load_with(bytes, device, &parse_json)
    }

    /// [`Model::load`] with its JSON (the header and the graph) read by `parse`.
    pub fn load_with(bytes: &[u8], device: &Device, parse: JsonParser<'_>) -> Result<Model> {
        let file = decode_safetensors_with(bytes, parse).map_err(|e| e.context("Model::load"))?;
        let op = "Model::load";
        match file.metadata.get(KEY_FORMAT).map(String::as_str) {
            Some("kiln") => {}
            found => {
                return Err(fail(
                    ErrorKind::Format,
                    op,
                    format_args!(
                        "not a kiln model file: metadata {KEY_FORMAT} is {found:?}, expected \
                         \"kiln\" (a bare state_dict loads with load_safetensors and \
                         Module::load_named)"
                    ),
                ));
            }
        }
        let version = file.metadata.get(KEY_VERSION);
        match version.and_then(|v| v.parse::<u32>().ok()) {
            Some(v) if (1..=FORMAT_VERSION).contains(&v) => {}
            _ => {
                return Err(fail(
                    ErrorKind::Format,
                    op,
                    format_args!(
                        "{KEY_VERSION} is {version:?}; this build reads versions 1 to {FORMAT_VERSION}"
                    ),
                ));
            }
        }
        let json = file.metadata.get(KEY_GRAPH).ok_or_else(|| {
            fail(
                ErrorKind::Format,
                op,
                format_args!("metadata has no {KEY_GRAPH}"),
            )
        })?;
        let invalid = |e: &dyn core::fmt::Display| {
            fail(
                ErrorKind::Format,
                op,
                format_args!("{KEY_GRAPH} is not a valid graph: {e}"),
            )
        };
        let mut graph_json = parse(json).map_err(|e| invalid(&e))?;
        if version == Some(&"1".into()) {
            graph::upgrade_v1(&mut graph_json).map_err(|e| e.context(op))?;
        }
        let graph = graph::graph_from_value(graph_json).map_err(|e| invalid(&e))?;
        graph.validate(&|n| file.tensors.contains_key(n))?;
        let tensors = file.to_device(device).map_err(|e| e.context(op))?;
        Ok(Model {
            graph,
            tensors,
            metadata: file.metadata,
            device: device.clone(),
            plan: Arc::default(),
        })
    }

    /// Runs the graph on `inputs` (one per [`Model::inputs`] entry, on this model's device).
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let op = "Model::run";
        let specs = &self.graph.inputs;
        if inputs.len() != specs.len() {
            return Err(fail(
                ErrorKind::InvalidArgument,
                op,
                format_args!("expects {} inputs, got {}", specs.len(), inputs.len()),
            ));
        }
        let mut batch = None;
        for (x, spec) in inputs.iter().zip(specs) {
            let fits = x.rank() == spec.shape.len()
                && x.dims()
                    .iter()
                    .zip(&spec.shape)
                    .all(|(d, s)| s.is_none_or(|s| s == *d));
            if !fits || x.dtype() != spec.dtype {
                return Err(fail(
                    ErrorKind::Shape,
                    op,
                    format_args!(
                        "input {} expects {} {}, got {} {}",
                        spec.name,
                        spec.dtype,
                        describe(&spec.shape),
                        x.dtype(),
                        x.shape()
                    ),
                ));
            }
            if spec.shape.first() == Some(&None) {
                let b = x.dims()[0];
                if batch.is_some_and(|prev| prev != b) {
                    return Err(fail(
                        ErrorKind::Shape,
                        op,
                        format_args!("inputs disagree on the batch size ({batch:?} and {b})"),
                    ));
                }
                batch = Some(b);
            }
        }
        if let Some(x) = inputs.iter().find(|x| !x.device().same(&self.device)) {
            return Err(fail(
                ErrorKind::Device,
                op,
                format_args!(
                    "an input is on another device than the model ({}; the model is on {})",
                    x.device().name(),
                    self.device.name()
                ),
            ));
        }
        let inputs: Vec<Tensor> = inputs.iter().map(Tensor::detach).collect();
        crate::autodiff::no_grad(|| {
            let cached = self.plan.lock().clone();
            let plan = match cached {
                Some(plan) if plan.fits(&inputs) => plan,
                _ => {
                    let batch = batch.unwrap_or(1);
                    let plan = self
                        .graph
                        .plan(&inputs, &self.tensors, batch, &self.device)?;
                    let plan = Arc::new(plan);
                    *self.plan.lock() = Some(plan.clone());
                    plan
                }
            };
            plan.execute(&inputs, &self.device)
        })
    }

    /// Runs a model of one input and one output.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut out = self.run(core::slice::from_ref(x))?;
        match (out.pop(), out.is_empty()) {
            (Some(y), true) => Ok(y),
            _ => Err(fail(
                ErrorKind::InvalidArgument,
                "Model::forward",
                format_args!(
                    "the model has {} outputs; use run",
                    self.graph.outputs.len()
                ),
            )),
        }
    }

    /// The graph inputs (name, dtype, shape with `None` for the batch axis).
    pub fn inputs(&self) -> &[ValueInfo] {
        &self.graph.inputs
    }
    /// The graph outputs' descriptions.
    pub fn outputs(&self) -> Vec<&ValueInfo> {
        self.graph.outputs.iter().map(|o| &o.info).collect()
    }
    /// The file's metadata (including the format keys).
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }
    /// The traced graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }
    /// The stored tensors by name.
    pub fn tensors(&self) -> &BTreeMap<String, Tensor> {
        &self.tensors
    }
    /// The device the model runs on.
    pub fn device(&self) -> &Device {
        &self.device
    }
}

fn describe(shape: &[Option<usize>]) -> String {
    let dims: Vec<String> = shape
        .iter()
        .map(|d| d.map_or_else(|| "batch".to_string(), |d| d.to_string()))
        .collect();
    format!("[{}]", dims.join(", "))
}

/// Decodes a safetensors file (a kiln checkpoint, or a PyTorch `state_dict` saved with
/// `safetensors.torch.save_file`); load it into a module with
/// `module.load_named(&file.to_device(&device)?)`.
pub fn load_safetensors(bytes: &[u8]) -> Result<SafeTensors> {
    decode_safetensors(bytes)
}

mod save;
pub use save::{load_checkpoint, trace};
#[cfg(feature = "std")]
pub use save::{save_checkpoint, save_model, save_model_batch, save_safetensors};
