//! Tracing, model files and checkpoints. Writing reads tensors back, which blocks, so it is
//! native only (`std`); tracing and loading work everywhere.

use super::graph::{Trace, collect, mark_batch};
#[cfg(feature = "std")]
use super::{FORMAT_VERSION, KEY_FORMAT, KEY_GRAPH, KEY_VERSION, encode_safetensors};
use super::{Graph, GraphOutput, ValueInfo, decode_safetensors};
use crate::autodiff::{no_grad, tracing};
use crate::error::{ErrorKind, fail};
use crate::nn::{Forward, Module};
use crate::optim::{Optimizer, OptimizerState};
use crate::{Device, Error, Result, Tensor, TensorId};
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

/// Prefix of optimizer state tensors in a checkpoint.
const OPTIM_PREFIX: &str = "optim.";
/// Metadata key of the optimizer config in a checkpoint.
const KEY_OPTIM: &str = "optim";

#[cfg(feature = "std")]
/// Encodes named tensors and metadata as safetensors bytes (reads the tensors back to the host).
pub fn save_safetensors(
    tensors: &[(String, Tensor)],
    metadata: &BTreeMap<String, String>,
) -> Result<Vec<u8>> {
    let host = tensors
        .iter()
        .map(|(n, t)| Ok((n.clone(), t.to_data().map_err(|e| e.context(n))?)))
        .collect::<Result<Vec<(String, crate::TensorData)>>>()?;
    encode_safetensors(&host, metadata)
}

/// Traces `module`'s forward pass on `sample` (batch axis first) into a [`Graph`] whose batch
/// axis is dynamic, plus the constants it met. The module should be in evaluation mode.
pub fn trace<M: Module + Forward + ?Sized>(
    module: &M,
    sample: &Tensor,
) -> Result<(Graph, Vec<(String, Tensor)>)> {
    trace_batch(module, sample, true)
}

/// [`trace`], with the batch axis dynamic or, for a model that only runs at one batch size,
/// fixed at the sample's.
fn trace_batch<M: Module + Forward + ?Sized>(
    module: &M,
    sample: &Tensor,
    dynamic_batch: bool,
) -> Result<(Graph, Vec<(String, Tensor)>)> {
    let op = "trace";
    let batch = match sample.dims().first() {
        Some(&b) if b > 0 => b,
        _ => {
            return Err(fail(
                ErrorKind::Shape,
                op,
                format_args!(
                    "the sample input needs a non-empty batch axis first, got shape {}",
                    sample.shape()
                ),
            ));
        }
    };
    let params: BTreeMap<TensorId, String> = module
        .named_tensors()
        .into_iter()
        .map(|(n, t)| (t.id(), n))
        .collect();
    let run = |x: &Tensor| -> Result<Trace> {
        let x = x.detach();
        let y = no_grad(|| tracing(|| module.forward(&x)))?;
        collect(&[y], &[x], &params)
    };
    let mut first = run(sample)?;
    let second = if dynamic_batch {
        let bigger = no_grad(|| Tensor::concat(&[sample.clone(), sample.narrow(0, 0, 1)?], 0))?;
        let second = run(&bigger)?;
        mark_batch(&mut first, &second, batch)?;
        second
    } else {
        run(sample)?
    };
    let mut input_shape: Vec<Option<usize>> = sample.dims().iter().map(|&d| Some(d)).collect();
    if dynamic_batch {
        input_shape[0] = None;
    }
    let outputs = first
        .outputs
        .iter()
        .zip(&second.outputs)
        .enumerate()
        .map(|(i, ((r, a), (_, b)))| GraphOutput {
            info: ValueInfo {
                name: if i == 0 {
                    "output".into()
                } else {
                    format!("output{i}")
                },
                dtype: a.dtype(),
                shape: a
                    .dims()
                    .iter()
                    .zip(b.dims().iter().chain(core::iter::repeat(&usize::MAX)))
                    .map(|(p, q)| (p == q).then_some(*p))
                    .collect(),
            },
            value: r.clone(),
        })
        .collect();
    let graph = Graph {
        inputs: alloc::vec![ValueInfo {
            name: "input".into(),
            dtype: sample.dtype(),
            shape: input_shape,
        }],
        nodes: first.nodes,
        outputs,
    };
    Ok((graph, first.consts))
}

#[cfg(feature = "std")]
/// Writes a kiln model file: `module`'s parameters and buffers, the graph traced on `sample`,
/// and `extra_metadata`. The module is switched to evaluation mode for the trace and left there.
pub fn save_model<M: Module + Forward + ?Sized>(
    module: &mut M,
    sample: &Tensor,
    extra_metadata: &BTreeMap<String, String>,
) -> Result<Vec<u8>> {
    save_model_batch(module, sample, extra_metadata, true)
}

#[cfg(feature = "std")]
/// [`save_model`] for a model that runs at one batch size only (e.g. an imported model whose
/// shapes are fixed): the file's input shape is exactly the sample's when `dynamic_batch` is
/// false.
pub fn save_model_batch<M: Module + Forward + ?Sized>(
    module: &mut M,
    sample: &Tensor,
    extra_metadata: &BTreeMap<String, String>,
    dynamic_batch: bool,
) -> Result<Vec<u8>> {
    module.set_training(false);
    let (graph, consts) = trace_batch(&*module, sample, dynamic_batch)?;
    let mut metadata = extra_metadata.clone();
    for key in [KEY_FORMAT, KEY_VERSION, KEY_GRAPH] {
        if metadata.contains_key(key) {
            return Err(fail(
                ErrorKind::InvalidArgument,
                "save_model",
                format_args!("metadata key {key} is reserved for the model file format"),
            ));
        }
    }
    let json = serde_json::to_string(&graph).map_err(|e| {
        fail(
            ErrorKind::InvalidArgument,
            "save_model",
            format_args!("graph JSON: {e}"),
        )
    })?;
    metadata.insert(KEY_FORMAT.into(), "kiln".into());
    metadata.insert(KEY_VERSION.into(), FORMAT_VERSION.to_string());
    metadata.insert(KEY_GRAPH.into(), json);
    let mut tensors = module.named_tensors();
    tensors.extend(consts);
    save_safetensors(&tensors, &metadata)
}

#[cfg(feature = "std")]
/// Writes a training checkpoint: `module`'s tensors, the optimizer's state tensors under
/// `optim.` and its config under the `optim` metadata key, and `metadata`.
pub fn save_checkpoint(
    module: &dyn Module,
    optimizer: Option<&dyn Optimizer>,
    metadata: &BTreeMap<String, String>,
) -> Result<Vec<u8>> {
    let mut tensors = module.named_tensors();
    let mut metadata = metadata.clone();
    if let Some(opt) = optimizer {
        let state = opt.state();
        tensors.extend(
            state
                .tensors
                .into_iter()
                .map(|(n, t)| (format!("{OPTIM_PREFIX}{n}"), t)),
        );
        metadata.insert(KEY_OPTIM.into(), state.config);
    }
    save_safetensors(&tensors, &metadata)
}

/// Restores a checkpoint written by [`save_checkpoint`] into `module` (and `optimizer`),
/// returning its metadata.
pub fn load_checkpoint(
    bytes: &[u8],
    module: &mut dyn Module,
    optimizer: Option<&mut dyn Optimizer>,
    device: &Device,
) -> Result<BTreeMap<String, String>> {
    let op = "load_checkpoint";
    let file = decode_safetensors(bytes).map_err(|e| e.context(op))?;
    let all = file.to_device(device).map_err(|e| e.context(op))?;
    let (optim, params): (BTreeMap<_, _>, BTreeMap<_, _>) = all
        .into_iter()
        .partition(|(n, _)| n.starts_with(OPTIM_PREFIX));
    if let Some(opt) = optimizer {
        let config = file.metadata.get(KEY_OPTIM).ok_or_else(|| {
            Error::format(
                op,
                "the checkpoint holds no optimizer state (metadata key optim)",
            )
        })?;
        let state = OptimizerState {
            tensors: optim
                .into_iter()
                .map(|(n, t)| (n[OPTIM_PREFIX.len()..].to_string(), t))
                .collect(),
            config: config.clone(),
        };
        opt.load_state(&state).map_err(|e| e.context(op))?;
    }
    module.load_named(&params).map_err(|e| e.context(op))?;
    Ok(file.metadata)
}
