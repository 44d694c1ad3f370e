//! Compiled programs: a model's WebGPU forward recorded once per set of input shapes, so that a
//! page can replay it with a few kilobytes of JavaScript (`kiln-ml/program`, `npm/program.js`)
//! instead of kiln's WebAssembly module (issue 18, bytes).
//!
//! [`compile`] loads the model on a device that plans exactly as the page's WebGPU device does
//! (the fusion decorator over [`GpuBackend`]) but whose [`Runtime`], the [`Recorder`], launches
//! nothing: it writes down each buffer, upload, copy and dispatch, with the WGSL of every kernel
//! variant used. Planning depends only on shapes, never on values or on the adapter, so the
//! recording holds for any WebGPU adapter with the default limits.
//!
//! What a program cannot do, by construction: run other input shapes than the ones compiled, run
//! ops outside the recorded forward, or serve a model that reads a value back during its forward
//! (compiling such a model fails, naming the read).
//!
//! # File format (version 1; integers little-endian)
//! `KILNPROG`, a u32 header length `H`, `H` bytes of JSON, zero padding to a multiple of 4, then
//! the blob (weights, constants and params words; offsets below are relative to its start).
//! The header: `format` (`"kiln-program"`), `version`, `kernels` (`{label, wgsl}`; entry point
//! `main`, layout from the shader), `buffers` (each slot's bytes), `load` (steps run once), and
//! `variants` (`{inputs, outputs, steps}`; inputs and outputs as `{name, dtype, shape}`). A step
//! is an array: `["write", slot, at, bytes]`, `["input", index, slot]`,
//! `["copy", src, src_offset, dst, dst_offset, bytes]`,
//! `["dispatch", kernel, params_at, params_bytes, [slot, ...], [x, y, z]]` (binding 0 the params,
//! 1.. the slots), `["output", index, slot, offset, bytes]`. Every element takes 4 bytes on the
//! device (bool as a u32).
//!
//! ```no_run
//! let model = std::fs::read("mnist.safetensors")?;
//! let program = kiln::program::compile(&model, &[1, 64])?;
//! std::fs::write("mnist.kilnprog", program.to_bytes())?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{BTreeMap, HashMap};
use std::future::{Ready, ready};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use kiln_core::model::Model;
use kiln_core::{DType, Device, Error, Result, Tensor, TensorData};
use kiln_kernels::plan::KernelKey;
use kiln_kernels::{GpuBackend, Launch, Runtime, fusion};
use serde_json::{Value, json};

/// The file's first bytes.
pub const MAGIC: &[u8; 8] = b"KILNPROG";
/// The format version [`Program::to_bytes`] writes.
pub const VERSION: u32 = 1;
/// WebGPU's default `maxStorageBufferBindingSize`, which every adapter offers: a program binds
/// only buffers up to it, so it runs wherever WebGPU does.
pub const MAX_BINDING_BYTES: u64 = 128 << 20;

/// What the recorder is recording: its uploads mean different things in each.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
enum Phase {
    /// Loading the model: uploads are its weights, written once.
    #[default]
    Load,
    /// Uploading input `i` of a variant: its bytes come from the page at each run.
    Input(usize),
    /// The forward itself.
    Run,
    /// Reading the outputs back: each download is the variant's next output.
    Outputs,
}

/// One recorded step (see the module docs for its JSON form).
#[derive(Clone, Debug)]
enum Step {
    Write {
        slot: u32,
        at: usize,
        bytes: usize,
    },
    Input {
        index: usize,
        slot: u32,
    },
    Copy {
        src: u32,
        src_offset: u64,
        dst: u32,
        dst_offset: u64,
        bytes: u64,
    },
    Dispatch {
        kernel: usize,
        params_at: usize,
        params_bytes: usize,
        slots: Vec<u32>,
        workgroups: [u32; 3],
    },
    Output {
        index: usize,
        slot: u32,
        offset: u64,
        bytes: u64,
    },
}

impl Step {
    fn to_json(&self) -> Value {
        match self {
            Step::Write { slot, at, bytes } => json!(["write", slot, at, bytes]),
            Step::Input { index, slot } => json!(["input", index, slot]),
            Step::Copy {
                src,
                src_offset,
                dst,
                dst_offset,
                bytes,
            } => {
                json!(["copy", src, src_offset, dst, dst_offset, bytes])
            }
            Step::Dispatch {
                kernel,
                params_at,
                params_bytes,
                slots,
                workgroups,
            } => {
                json!([
                    "dispatch",
                    kernel,
                    params_at,
                    params_bytes,
                    slots,
                    workgroups
                ])
            }
            Step::Output {
                index,
                slot,
                offset,
                bytes,
            } => json!(["output", index, slot, offset, bytes]),
        }
    }
}

/// Everything recorded so far.
#[derive(Default)]
struct Tape {
    phase: Phase,
    /// Each slot's size in bytes.
    buffers: Vec<u64>,
    /// Slots whose tensors were dropped, by size, for the next allocations (as the page's
    /// buffer pool reuses them).
    free: BTreeMap<u64, Vec<u32>>,
    kernels: Vec<(String, String)>,
    kernel_ids: HashMap<KernelKey, usize>,
    blob: Vec<u8>,
    /// The steps of the part being recorded (the load, then each variant in turn).
    steps: Vec<Step>,
    /// Outputs read back in this variant.
    outputs: usize,
}

impl Tape {
    /// Appends `bytes` to the blob (4-byte aligned, as every element is); returns their offset.
    fn stash(&mut self, bytes: &[u8]) -> usize {
        let at = self.blob.len();
        self.blob.extend_from_slice(bytes);
        self.blob.resize(self.blob.len().next_multiple_of(4), 0);
        at
    }

    /// A free slot for `bytes`: the smallest that holds them, else the largest grown to them. A
    /// slot is only a size until the page makes its buffer, so growing one costs nothing, and the
    /// variants share their memory instead of adding it up.
    fn reuse(&mut self, bytes: u64) -> Option<u32> {
        let (&size, _) =
            (self.free.range(bytes..).next()).or_else(|| self.free.iter().next_back())?;
        let ids = self.free.get_mut(&size)?;
        let id = ids.pop()?;
        if ids.is_empty() {
            self.free.remove(&size);
        }
        let slot = self.buffers.get_mut(id as usize)?;
        *slot = (*slot).max(bytes);
        Some(id)
    }

    fn kernel(&mut self, key: &KernelKey) -> Result<usize> {
        if let Some(&id) = self.kernel_ids.get(key) {
            return Ok(id);
        }
        // A custom kernel's `ID` define is its registration number in this process (fused
        // kernels are registered as they are first made): kept out of the label, so that a model
        // compiles to the same bytes in any process. Its WGSL does not depend on it.
        let mut named = key.clone();
        named.defines.remove("ID");
        self.kernels.push((named.label(), key.wgsl()?));
        let id = self.kernels.len() - 1;
        self.kernel_ids.insert(key.clone(), id);
        Ok(id)
    }
}

/// A [`Runtime`] that records instead of running: the device behind [`compile`].
#[derive(Clone, Default)]
pub struct Recorder(Arc<Mutex<Tape>>);

/// A [`Recorder`]'s buffer: a slot of the program, free for reuse once dropped.
pub struct Slot {
    id: u32,
    tape: Arc<Mutex<Tape>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut tape) = self.tape.lock()
            && let Some(&size) = tape.buffers.get(self.id as usize)
        {
            tape.free.entry(size).or_default().push(self.id);
        }
    }
}

impl Recorder {
    fn tape(&self) -> Result<MutexGuard<'_, Tape>> {
        self.0
            .lock()
            .map_err(|_| Error::device("kiln compile", "the recorder's lock is poisoned"))
    }

    fn set_phase(&self, phase: Phase) -> Result<()> {
        self.tape()?.phase = phase;
        Ok(())
    }

    /// The steps recorded since the last call.
    fn take_steps(&self) -> Result<Vec<Step>> {
        let mut tape = self.tape()?;
        tape.outputs = 0;
        Ok(std::mem::take(&mut tape.steps))
    }
}

impl Runtime for Recorder {
    type Buffer = Slot;
    type Download = Ready<Result<Vec<u8>>>;

    fn name(&self) -> String {
        "kiln compile (recording a WebGPU program)".into()
    }

    fn allocate(&self, bytes: u64, op: &str) -> Result<Slot> {
        let bytes = bytes.next_multiple_of(4);
        if bytes > MAX_BINDING_BYTES {
            return Err(Error::device(
                op.to_string(),
                format!(
                    "a tensor of {bytes} bytes is larger than the {MAX_BINDING_BYTES} bytes every \
                     WebGPU adapter binds (maxStorageBufferBindingSize's default)"
                ),
            ));
        }
        let mut tape = self.tape()?;
        let id = match tape.reuse(bytes) {
            Some(id) => id,
            None => {
                tape.buffers.push(bytes);
                (tape.buffers.len() - 1) as u32
            }
        };
        Ok(Slot {
            id,
            tape: self.0.clone(),
        })
    }

    fn write(&self, buffer: &Slot, bytes: &[u8]) -> Result<()> {
        let mut tape = self.tape()?;
        let step = match tape.phase {
            Phase::Input(index) => Step::Input {
                index,
                slot: buffer.id,
            },
            _ => Step::Write {
                slot: buffer.id,
                at: tape.stash(bytes),
                bytes: bytes.len(),
            },
        };
        tape.steps.push(step);
        Ok(())
    }

    fn copy(
        &self,
        src: &Slot,
        src_offset: u64,
        dst: &Slot,
        dst_offset: u64,
        bytes: u64,
    ) -> Result<bool> {
        let step = Step::Copy {
            src: src.id,
            src_offset,
            dst: dst.id,
            dst_offset,
            bytes,
        };
        self.tape()?.steps.push(step);
        Ok(true)
    }

    fn launch(&self, _op: &str, dispatches: &[Launch<'_, Slot>]) -> Result<()> {
        let mut tape = self.tape()?;
        for d in dispatches {
            let kernel = tape.kernel(d.kernel)?;
            // WebGPU rejects an empty binding: a kernel without params still gets one word
            let words = if d.params.is_empty() {
                &[0][..]
            } else {
                d.params
            };
            let params_at = tape.stash(&le_bytes(words));
            tape.steps.push(Step::Dispatch {
                kernel,
                params_at,
                params_bytes: words.len() * 4,
                slots: d.buffers.iter().map(|b| b.id).collect(),
                workgroups: d.workgroups,
            });
        }
        Ok(())
    }

    fn download(&self, buffer: &Slot, offset: u64, bytes: u64) -> Result<Self::Download> {
        let mut tape = self.tape()?;
        if tape.phase != Phase::Outputs {
            return Err(Error::unsupported(
                "kiln compile",
                format!(
                    "the model reads a value back ({bytes} bytes) during its forward; a compiled \
                     program replays a forward without the host, so it cannot depend on values"
                ),
            ));
        }
        let index = tape.outputs;
        tape.outputs += 1;
        tape.steps.push(Step::Output {
            index,
            slot: buffer.id,
            offset,
            bytes,
        });
        Ok(ready(Err(Error::unsupported(
            "read",
            "a recorded program is not run",
        ))))
    }

    fn allocated_bytes(&self) -> u64 {
        self.tape().map_or(0, |t| t.buffers.iter().sum())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}

fn le_bytes(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// A compiled program: the header and the blob of the file [`Program::to_bytes`] writes.
#[derive(Clone, Debug)]
pub struct Program {
    header: Value,
    blob: Vec<u8>,
}

impl Program {
    /// The file: magic, header length, JSON header, padding, blob.
    pub fn to_bytes(&self) -> Vec<u8> {
        let header = self.header.to_string();
        let mut out = Vec::with_capacity(16 + header.len() + self.blob.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.resize(out.len().next_multiple_of(4), 0);
        out.extend_from_slice(&self.blob);
        out
    }

    /// The header (format, kernels, buffers, load steps, variants).
    pub fn header(&self) -> &Value {
        &self.header
    }

    /// The blob: the uploaded weights and constants, and every dispatch's params words.
    pub fn blob(&self) -> &[u8] {
        &self.blob
    }

    /// One line per part: kernels, buffers, and each variant's shapes and dispatches.
    pub fn summary(&self) -> String {
        let count = |steps: &Value, kind: &str| {
            steps
                .as_array()
                .map_or(0, |s| s.iter().filter(|s| s[0] == kind).count())
        };
        let h = &self.header;
        let mut lines = vec![format!(
            "{} kernels, {} buffers ({} bytes), load: {} writes ({} bytes of blob)",
            h["kernels"].as_array().map_or(0, Vec::len),
            h["buffers"].as_array().map_or(0, Vec::len),
            h["buffers"]
                .as_array()
                .map_or(0, |b| b.iter().filter_map(Value::as_u64).sum::<u64>()),
            count(&h["load"], "write"),
            self.blob.len()
        )];
        for v in h["variants"].as_array().into_iter().flatten() {
            let shapes = |list: &Value| {
                (list.as_array().into_iter().flatten())
                    .map(|t| format!("{} {}", t["dtype"].as_str().unwrap_or("?"), t["shape"]))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            lines.push(format!(
                "  {} -> {}: {} dispatches",
                shapes(&v["inputs"]),
                shapes(&v["outputs"]),
                count(&v["steps"], "dispatch")
            ));
        }
        lines.join("\n")
    }
}

/// Records the forward of the kiln model file `model` for each batch size in `batches` (which
/// fills each input's batch axis; a model without one is compiled once, at its declared shapes,
/// and takes no batch sizes beyond one).
pub fn compile(model: &[u8], batches: &[usize]) -> Result<Program> {
    let op = "kiln compile";
    let recorder = Recorder::default();
    // as the page's WebGPU device: the fusion decorator over the plan executor
    let device = fusion::wrap(&Device::new(GpuBackend::from_runtime(recorder.clone())));
    let model = Model::load(model, &device)?;
    let load = recorder.take_steps()?;
    let specs = model.inputs().to_vec();
    let batched = specs.iter().any(|s| s.shape.contains(&None));
    let batches = match (batched, batches) {
        (true, []) => return Err(Error::invalid(op, "give at least one batch size (--batch)")),
        (true, b) => b.to_vec(),
        (false, [] | [_]) => vec![1],
        (false, b) => {
            return Err(Error::invalid(
                op,
                format!(
                    "the model's inputs have fixed shapes (no batch axis), so one variant; got batch sizes {b:?}"
                ),
            ));
        }
    };
    let mut variants = Vec::new();
    for &batch in &batches {
        if batch == 0 {
            return Err(Error::invalid(op, "a batch size is 0; expected 1 or more"));
        }
        let mut inputs = Vec::new();
        let mut input_info = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            let dims: Vec<usize> = spec.shape.iter().map(|d| d.unwrap_or(batch)).collect();
            let numel: usize = dims.iter().product();
            // the values are never used: the recorder turns this upload into an input step
            let data = TensorData::from_bytes(
                vec![0; numel * spec.dtype.size_in_bytes()],
                spec.dtype,
                dims.clone(),
            )?;
            recorder.set_phase(Phase::Input(i))?;
            inputs.push(Tensor::from_data(&data, &device)?);
            input_info.push(
                json!({"name": spec.name, "dtype": device_dtype(spec.dtype, op)?, "shape": dims}),
            );
        }
        recorder.set_phase(Phase::Run)?;
        let outputs = model
            .run(&inputs)
            .map_err(|e| e.context(format!("{op}, batch {batch}")))?;
        recorder.set_phase(Phase::Outputs)?;
        let mut output_info = Vec::new();
        for (y, spec) in outputs.iter().zip(model.outputs()) {
            // starts the download the recorder writes down; the future never resolves to data
            let mut read = device.backend().read(y.view());
            if let Poll::Ready(Ok(_)) = read.as_mut().poll(&mut Context::from_waker(Waker::noop()))
            {
                return Err(Error::device(op, "a read on the recorder returned data"));
            }
            output_info.push(json!({"name": spec.name, "dtype": device_dtype(y.dtype(), op)?, "shape": y.dims()}));
        }
        let steps = recorder.take_steps()?;
        let produced = steps
            .iter()
            .filter(|s| matches!(s, Step::Output { .. }))
            .count();
        if produced != outputs.len() {
            return Err(Error::device(
                op,
                format!(
                    "recorded {produced} output reads for {} outputs",
                    outputs.len()
                ),
            ));
        }
        variants.push(json!({
            "inputs": input_info,
            "outputs": output_info,
            "steps": steps.iter().map(Step::to_json).collect::<Vec<_>>(),
        }));
    }
    drop(model);
    let mut tape = recorder.tape()?;
    let header = json!({
        "format": "kiln-program",
        "version": VERSION,
        "kernels": tape.kernels.iter().map(|(label, wgsl)| json!({"label": label, "wgsl": wgsl})).collect::<Vec<_>>(),
        "buffers": tape.buffers,
        "load": load.iter().map(Step::to_json).collect::<Vec<_>>(),
        "variants": variants,
    });
    Ok(Program {
        header,
        blob: std::mem::take(&mut tape.blob),
    })
}

/// The dtype's name in a program; WebGPU holds f32, i32, u32 and bool only.
fn device_dtype(dtype: DType, op: &str) -> Result<&'static str> {
    match dtype {
        DType::F32 => Ok("f32"),
        DType::I32 => Ok("i32"),
        DType::U32 => Ok("u32"),
        DType::Bool => Ok("bool"),
        other => Err(Error::unsupported(
            op.to_string(),
            format!("a {other} input or output; WebGPU programs hold f32, i32, u32 and bool"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_during_the_forward_is_an_error_naming_it() {
        let recorder = Recorder::default();
        let device = Device::new(GpuBackend::from_runtime(recorder.clone()));
        let x = Tensor::from_vec(vec![1.5f32, -2.0, 3.25], [3], &device).unwrap();
        recorder.set_phase(Phase::Run).unwrap();
        let e = x.exp().unwrap().to_data().unwrap_err();
        assert!(
            e.to_string()
                .contains("reads a value back (12 bytes) during its forward"),
            "{e}"
        );
        // the upload and the op were recorded; the read was not
        let steps = recorder.take_steps().unwrap();
        assert!(
            matches!(
                steps[..],
                [Step::Write { bytes: 12, .. }, Step::Dispatch { .. }]
            ),
            "{steps:?}"
        );
    }
}
