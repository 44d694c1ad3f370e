//! The traced graph stored in a model file's metadata: ops as data, wired by references to graph
//! inputs, named tensors and earlier nodes.
//!
//! ## Batch size
//! A graph is traced twice, at the sample's batch size `B` and at `B + 1`. Every integer of an
//! op that describes a shape (the shapes of reshape/expand/full/random, slice bounds, arange
//! lengths) is compared between the two traces: one that
//! changes from `k * B` to `k * (B + 1)` is stored as `k * batch` in the node's `batch` list
//! (`[slot, k]`) and recomputed from the actual batch size when the graph runs. A shape integer
//! that changes in any other way is an error at save time.

use crate::error::{ErrorKind, fail};
use crate::op::json::{Fields, FromJson, Shown, bad, from_value_impls, not_a, op_from_value};
use crate::op::{Meta, Op};
use crate::{DType, Error, Result, Shape, Tensor, TensorId};
use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use serde::Serialize;
use serde_json::Value;

/// Where a node input comes from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ref {
    /// the graph input at this position
    Input(usize),
    /// the stored tensor of this name (a parameter, buffer or traced constant)
    Tensor(String),
    /// the output of the node at this position
    Node(usize),
}

/// One op of the graph.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GraphNode {
    /// the op, with the shape integers of the traced batch size
    pub op: Op,
    /// its inputs, in the op's order
    pub inputs: Vec<Ref>,
    /// `[slot, k]`: shape integer number `slot` of the op is `k * batch`
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batch: Vec<[usize; 2]>,
}

/// The name, dtype and shape of a graph input or output; `None` marks the dynamic batch axis.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ValueInfo {
    /// name (`"input"`, `"output"`)
    pub name: String,
    /// element type
    pub dtype: DType,
    /// dimensions, `null` in JSON for the batch axis
    pub shape: Vec<Option<usize>>,
}

/// A graph output: its description and where its value comes from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GraphOutput {
    /// name, dtype and shape
    #[serde(flatten)]
    pub info: ValueInfo,
    /// the producing value
    pub value: Ref,
}

/// A traced forward pass.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Graph {
    /// graph inputs
    pub inputs: Vec<ValueInfo>,
    /// ops in execution order; each refers only to inputs, tensors and earlier nodes
    pub nodes: Vec<GraphNode>,
    /// graph outputs
    pub outputs: Vec<GraphOutput>,
}

// The graph's `Deserialize` impls are written over `serde_json::Value` like `Op`'s
// (`op/json.rs`): the derived ones, with `GraphOutput`'s flattened fields, were the largest
// model-loading code left in the web package. They read what the derived `Serialize` writes.
from_value_impls!(Ref => reference, GraphNode => node, ValueInfo => value_info,
    GraphOutput => output, Graph => graph_from_value);

type Decoded<T> = core::result::Result<T, crate::op::json::Error>;

/// A model file's graph from its JSON.
pub(crate) fn graph_from_value(v: Value) -> Decoded<Graph> {
    let mut f = Fields::of(v, "graph")?;
    let graph = Graph {
        inputs: f.list("inputs", value_info),
        nodes: f.list("nodes", node),
        outputs: f.list("outputs", output),
    };
    f.finish(graph)
}

fn reference(v: Value) -> Decoded<Ref> {
    let (kind, at) = match v {
        Value::Object(m) if m.len() == 1 => m.into_iter().next().unwrap_or_default(),
        other => {
            return Err(bad(format_args!(
                "expected a reference ({{\"input\": i}}, {{\"tensor\": name}} or {{\"node\": i}}), found {}",
                Shown(&other)
            )));
        }
    };
    let read = match kind.as_str() {
        "input" => usize::from_json(&at).map(Ref::Input),
        "tensor" => String::from_json(&at).map(Ref::Tensor),
        "node" => usize::from_json(&at).map(Ref::Node),
        _ => {
            return Err(bad(format_args!("unknown reference `{kind}`")));
        }
    };
    read.ok_or_else(|| {
        let expected = match kind.as_str() {
            "tensor" => String::expected(),
            _ => usize::expected(),
        };
        not_a(&kind, expected, &at)
    })
}

fn node(v: Value) -> Decoded<GraphNode> {
    let mut f = Fields::of(v, "a node")?;
    let node = GraphNode {
        op: op_from_value(f.value("op")?)?,
        inputs: f.list("inputs", reference),
        batch: f.or_default("batch"),
    };
    f.finish(node)
}

fn info(f: &mut Fields) -> ValueInfo {
    ValueInfo {
        name: f.get("name"),
        dtype: f.get("dtype"),
        shape: f.get("shape"),
    }
}

fn value_info(v: Value) -> Decoded<ValueInfo> {
    let mut f = Fields::of(v, "an input")?;
    let info = info(&mut f);
    f.finish(info)
}

fn output(v: Value) -> Decoded<GraphOutput> {
    let mut f = Fields::of(v, "an output")?;
    let output = GraphOutput {
        info: info(&mut f),
        value: f.with("value", reference, || Ref::Input(0)),
    };
    f.finish(output)
}

/// Every shape-describing integer of an op, in a fixed order (see the module docs).
pub(crate) fn slot_values(op: &Op) -> Vec<usize> {
    match op {
        Op::Full { shape, .. }
        | Op::RandUniform { shape, .. }
        | Op::RandNormal { shape, .. }
        | Op::Reshape { shape }
        | Op::Expand { shape } => shape.dims().to_vec(),
        Op::Arange { len, .. } => alloc::vec![*len],
        Op::Eye { n, m, .. } => alloc::vec![*n, *m],
        Op::Slice { ranges } => ranges.iter().flat_map(|r| [r.start, r.end]).collect(),
        _ => Vec::new(),
    }
}

/// `op` with its shape integers replaced by `values` (in [`slot_values`] order).
pub(crate) fn with_slots(op: &Op, values: &[usize]) -> Op {
    let mut op = op.clone();
    match &mut op {
        Op::Full { shape, .. }
        | Op::RandUniform { shape, .. }
        | Op::RandNormal { shape, .. }
        | Op::Reshape { shape }
        | Op::Expand { shape } => *shape = Shape::new(values.to_vec()),
        Op::Arange { len, .. } => {
            for (slot, v) in [len].into_iter().zip(values) {
                *slot = *v;
            }
        }
        Op::Eye { n, m, .. } => {
            for (slot, v) in [n, m].into_iter().zip(values) {
                *slot = *v;
            }
        }
        Op::Slice { ranges } => {
            let slots = ranges.iter_mut().flat_map(|r| [&mut r.start, &mut r.end]);
            for (slot, v) in slots.zip(values) {
                *slot = *v;
            }
        }
        _ => {}
    }
    op
}

/// One trace: the nodes, the constants met as leaves, and the output tensors.
pub(crate) struct Trace {
    pub nodes: Vec<GraphNode>,
    pub consts: Vec<(String, Tensor)>,
    pub outputs: Vec<(Ref, Tensor)>,
}

/// Turns the recorded history of `outputs` into graph nodes. Leaves are matched by id to
/// `params` (by name) or to `inputs` (by position); any other leaf becomes `const.N`.
pub(crate) fn collect(
    outputs: &[Tensor],
    inputs: &[Tensor],
    params: &BTreeMap<TensorId, String>,
) -> Result<Trace> {
    let mut refs: BTreeMap<TensorId, Ref> = BTreeMap::new();
    for (i, x) in inputs.iter().enumerate() {
        refs.insert(x.id(), Ref::Input(i));
    }
    let mut trace = Trace {
        nodes: Vec::new(),
        consts: Vec::new(),
        outputs: Vec::new(),
    };
    for out in outputs {
        // Iterative post-order walk (deep graphs must not overflow the stack).
        let mut stack: Vec<(Tensor, bool)> = alloc::vec![(out.clone(), false)];
        while let Some((t, expanded)) = stack.pop() {
            if refs.contains_key(&t.id()) {
                continue;
            }
            if let Some(name) = params.get(&t.id()) {
                refs.insert(t.id(), Ref::Tensor(name.clone()));
                continue;
            }
            let Some(node) = t.node() else {
                let name = format!("const.{}", trace.consts.len());
                trace.consts.push((name.clone(), t.clone()));
                refs.insert(t.id(), Ref::Tensor(name));
                continue;
            };
            if !expanded {
                stack.push((t.clone(), true));
                for x in node.inputs.iter().rev() {
                    stack.push((x.clone(), false));
                }
                continue;
            }
            let inputs = node
                .inputs
                .iter()
                .map(|x| {
                    refs.get(&x.id()).cloned().ok_or_else(|| {
                        Error::invalid("trace", "internal: input visited after its user")
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            trace.nodes.push(GraphNode {
                op: node.op.clone(),
                inputs,
                batch: Vec::new(),
            });
            refs.insert(t.id(), Ref::Node(trace.nodes.len() - 1));
        }
        let r = refs
            .get(&out.id())
            .cloned()
            .ok_or_else(|| Error::invalid("trace", "internal: output not reached"))?;
        trace.outputs.push((r, out.clone()));
    }
    Ok(trace)
}

/// Finds the batch-dependent shape integers by comparing a trace at batch `b` with one at
/// `b + 1`, recording them in `a`'s nodes.
pub(crate) fn mark_batch(a: &mut Trace, b: &Trace, batch: usize) -> Result<()> {
    let op = "save_model";
    let differ = |what: String| {
        fail(
            ErrorKind::InvalidArgument,
            op,
            format_args!(
                "the forward pass differs between batch sizes {batch} and {}: {what}; models \
                 must run the same ops for every batch size (is dropout or batch norm still in \
                 training mode?)",
                batch + 1
            ),
        )
    };
    if a.nodes.len() != b.nodes.len() {
        return Err(differ(format!(
            "{} ops vs {}",
            a.nodes.len(),
            b.nodes.len()
        )));
    }
    for (i, (x, y)) in a.consts.iter().zip(&b.consts).enumerate() {
        if x.1.shape() != y.1.shape() {
            return Err(differ(format!(
                "constant const.{i} has shape {} vs {}; build batch-sized constants with \
                 tensor ops such as zeros_like",
                x.1.shape(),
                y.1.shape()
            )));
        }
    }
    for (i, (x, y)) in a.nodes.iter_mut().zip(&b.nodes).enumerate() {
        let (vx, vy) = (slot_values(&x.op), slot_values(&y.op));
        let zeros = alloc::vec![0; vx.len()];
        if vx.len() != vy.len()
            || with_slots(&x.op, &zeros) != with_slots(&y.op, &zeros)
            || x.inputs != y.inputs
        {
            return Err(differ(format!("node {i} is {:?} vs {:?}", x.op, y.op)));
        }
        for (slot, (&p, &q)) in vx.iter().zip(&vy).enumerate() {
            if p == q {
                continue;
            }
            let k = q.checked_sub(p).filter(|k| k * batch == p).ok_or_else(|| {
                differ(format!(
                    "node {i} ({}) has shape value {p} vs {q}, not a multiple of the batch size",
                    x.op.name()
                ))
            })?;
            x.batch.push([slot, k]);
        }
    }
    Ok(())
}

impl Graph {
    /// The names of the custom ops the graph calls, sorted and unique: what a process must
    /// register before running it.
    pub fn custom_ops(&self) -> Vec<&str> {
        crate::sorted_unique(self.nodes.iter().filter_map(|n| match &n.op {
            Op::Custom(c) => Some(c.name.as_str()),
            _ => None,
        }))
    }

    /// Checks that every reference points at an input, a tensor in `names` or an earlier node,
    /// every batch slot exists and every custom op is registered, so that running never meets a
    /// dangling reference.
    pub fn validate(&self, has_tensor: &dyn Fn(&str) -> bool) -> Result<()> {
        let op = "Model::load";
        let missing: Vec<&str> = self
            .custom_ops()
            .into_iter()
            .filter(|n| crate::op::custom::lookup(n).is_err())
            .collect();
        if !missing.is_empty() {
            return Err(fail(
                ErrorKind::Unsupported,
                op,
                format_args!(
                    "the model uses custom ops that are not registered in this process: [{}]; \
                     register them before loading (kiln::register_op in Rust, registerOp in JS)",
                    missing.join(", ")
                ),
            ));
        }
        let check = |r: &Ref, before: usize, at: &str| -> Result<()> {
            let ok = match r {
                Ref::Input(i) => *i < self.inputs.len(),
                Ref::Tensor(n) => has_tensor(n),
                Ref::Node(j) => *j < before,
            };
            if ok {
                Ok(())
            } else {
                Err(fail(
                    ErrorKind::Format,
                    op,
                    format_args!(
                        "{at} refers to {r:?}, which does not exist (graph has {} inputs, \
                         {before} nodes before it)",
                        self.inputs.len()
                    ),
                ))
            }
        };
        for (i, n) in self.nodes.iter().enumerate() {
            for r in &n.inputs {
                check(r, i, &format!("node {i} ({})", n.op.name()))?;
            }
            let slots = slot_values(&n.op).len();
            if let Some([s, _]) = n.batch.iter().find(|[s, _]| *s >= slots) {
                return Err(fail(
                    ErrorKind::Format,
                    op,
                    format_args!(
                        "node {i} ({}) marks shape slot {s} as batch-sized but has {slots} slots",
                        n.op.name()
                    ),
                ));
            }
        }
        for o in &self.outputs {
            check(
                &o.value,
                self.nodes.len(),
                &format!("output {}", o.info.name),
            )?;
        }
        Ok(())
    }

    /// Prepares the graph for `inputs` (already checked against the input descriptions) with
    /// the stored tensors `tensors`, at batch size `batch`: each node's op with its batch slots
    /// filled in and its output inferred once, and the views of stored tensors (a transposed
    /// weight, a reshaped bias) taken once.
    pub(crate) fn plan(
        &self,
        inputs: &[Tensor],
        tensors: &BTreeMap<String, Tensor>,
        batch: usize,
        device: &crate::Device,
    ) -> Result<Plan> {
        let missing = |r: &Ref| {
            fail(
                ErrorKind::Format,
                "Model::run",
                format_args!("missing value {r:?}"),
            )
        };
        let mut outs: Vec<(Source, Meta)> = Vec::with_capacity(self.nodes.len());
        let source = |r: &Ref, outs: &[(Source, Meta)]| -> Result<(Source, Meta)> {
            let of = |t: &Tensor| (t.dtype(), t.shape().clone());
            match r {
                Ref::Input(k) => inputs.get(*k).map(|t| (Source::Input(*k), of(t))),
                Ref::Tensor(name) => tensors.get(name).map(|t| (Source::Const(t.clone()), of(t))),
                Ref::Node(j) => outs.get(*j).cloned(),
            }
            .ok_or_else(|| missing(r))
        };
        let mut steps = Vec::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let context = |e: Error| e.context(format!("Model::run: node {i}"));
            let op = if n.batch.is_empty() {
                n.op.clone()
            } else {
                let mut v = slot_values(&n.op);
                for &[s, k] in &n.batch {
                    if let Some(slot) = v.get_mut(s) {
                        *slot = k * batch;
                    }
                }
                with_slots(&n.op, &v)
            };
            let (sources, metas): (Vec<Source>, Vec<Meta>) = (n.inputs.iter())
                .map(|r| source(r, &outs))
                .collect::<Result<Vec<_>>>()?
                .into_iter()
                .unzip();
            let mut inferred = op.infer(&metas).map_err(context)?;
            let out = match (inferred.pop(), inferred.is_empty()) {
                (Some(out), true) => out,
                _ => {
                    return Err(context(fail(
                        ErrorKind::Format,
                        op.name(),
                        format_args!("has {} outputs; a graph node has one", inferred.len() + 1),
                    )));
                }
            };
            Tensor::check_supported(&op, core::slice::from_ref(&out), device).map_err(context)?;
            let consts: Option<Vec<&Tensor>> = (sources.iter())
                .map(|s| match s {
                    Source::Const(t) => Some(t),
                    _ => None,
                })
                .collect();
            if let (true, Some(consts)) = (op.is_view(), consts) {
                let t = Tensor::run_inferred(&op, &consts, device, &out, None).map_err(context)?;
                outs.push((Source::Const(t), out));
                continue;
            }
            outs.push((Source::Node(i), out.clone()));
            steps.push(Step {
                node: i,
                op,
                inputs: sources,
                out,
                tail: None,
            });
        }
        let outputs = (self.outputs.iter())
            .map(|o| source(&o.value, &outs).map(|(s, _)| s))
            .collect::<Result<Vec<_>>>()?;
        let steps = fuse_tails(steps, &outputs, device);
        // Free each intermediate after its last use.
        let mut last_use = alloc::vec![usize::MAX; self.nodes.len()];
        for step in &steps {
            for s in &step.inputs {
                if let Source::Node(j) = s {
                    last_use[*j] = step.node;
                }
            }
        }
        for s in &outputs {
            if let Source::Node(j) = s {
                last_use[*j] = usize::MAX;
            }
        }
        Ok(Plan {
            shapes: inputs.iter().map(|t| t.shape().clone()).collect(),
            steps,
            outputs,
            last_use,
        })
    }
}

/// A graph made ready to run on inputs of one set of shapes ([`Graph::plan`]): inferring each
/// node's output, filling in its batch slots and looking up stored tensors by name on every run
/// cost more than a small model's kernels at batch 1.
#[derive(Debug)]
pub(crate) struct Plan {
    /// the input shapes it was made for
    shapes: Vec<Shape>,
    /// the nodes that run, in order
    steps: Vec<Step>,
    /// where the graph outputs come from
    outputs: Vec<Source>,
    /// by node, the node after whose step its value is dropped (`usize::MAX`: kept)
    last_use: Vec<usize>,
}

/// One node to run: its op, ready for the planned batch size.
#[derive(Debug)]
struct Step {
    /// the node whose value the step gives (with a tail, the tail's last node)
    node: usize,
    op: Op,
    inputs: Vec<Source>,
    out: Meta,
    /// the ops applied as the product writes its output
    tail: Option<StepTail>,
}

/// A step's [`crate::backend::Tail`], its bias held.
#[derive(Debug)]
struct StepTail {
    bias: Tensor,
    relu: bool,
    max_pool: bool,
}

/// Folds the bias add and the ReLU that follow a convolution or a matmul into its step, and a
/// 2x2 max pool at stride 2 after a convolution's, where the device applies them as the product
/// writes its output ([`crate::Backend::fuses_tail`]): each would be a pass over the output of
/// its own. Only values that nothing else reads are folded; the bias must be a stored tensor
/// with one value per output channel (a convolution's axis 1, a matmul's last axis). Same
/// results: the same sums in the same order, the same maxima.
fn fuse_tails(mut steps: Vec<Step>, outputs: &[Source], device: &crate::Device) -> Vec<Step> {
    // By node: how many times its value is read, and the step that reads it (the last one).
    let nodes = steps.iter().map(|s| s.node + 1).max().unwrap_or(0);
    let (mut reads, mut reader) = (alloc::vec![0usize; nodes], alloc::vec![usize::MAX; nodes]);
    for (k, s) in steps.iter().enumerate() {
        for x in &s.inputs {
            if let Source::Node(j) = x {
                reads[*j] += 1;
                reader[*j] = k;
            }
        }
    }
    for x in outputs {
        if let Source::Node(j) = x {
            reads[*j] += 2;
        }
    }
    // The step that alone reads step `k`'s value, when it keeps that value's dtype and shape.
    let only_reader = |steps: &[Step], k: usize| {
        let s = &steps[k];
        let next = steps.get(reader[s.node]).filter(|n| n.out == s.out);
        next.filter(|_| reads[s.node] == 1).map(|_| reader[s.node])
    };
    let mut gone = alloc::vec![false; steps.len()];
    for k in 0..steps.len() {
        let (dtype, shape) = &steps[k].out;
        let (rank, dims) = (shape.rank(), shape.dims());
        // The channel axis, and how many channels.
        let (axis, c) = match steps[k].op {
            Op::Conv2d(_) if rank == 4 => (1, dims[1]),
            Op::Matmul if rank > 0 => (rank - 1, dims[rank - 1]),
            _ => continue,
        };
        let Some(add) = only_reader(&steps, k)
            .filter(|&a| matches!(steps[a].op, Op::Binary(crate::op::BinaryOp::Add)))
        else {
            continue;
        };
        // A stored tensor of one value per channel, on the channel axis once broadcast.
        let bias = steps[add].inputs.iter().find_map(|x| match x {
            Source::Const(b) => Some(b),
            _ => None,
        });
        let fits = |b: &&Tensor| {
            let d = b.dims();
            let at = |i: usize| rank + i - d.len();
            b.dtype() == *dtype
                && b.numel() == c
                && d.len() <= rank
                && (0..d.len()).all(|i| d[i] == 1 || at(i) == axis)
        };
        let Some(bias) = bias.filter(fits).cloned() else {
            continue;
        };
        let backend = device.backend();
        if !backend.fuses_tail(&steps[k].op, *dtype, false) {
            continue;
        }
        let relu = only_reader(&steps, add)
            .filter(|&r| matches!(steps[r].op, Op::Unary(crate::op::UnaryOp::Relu)));
        let mut last = relu.unwrap_or(add);
        // The pool alone reads the tail's value (its output has another shape).
        let pool = Some(reader[steps[last].node])
            .filter(|_| reads[steps[last].node] == 1 && matches!(steps[k].op, Op::Conv2d(_)))
            .filter(|&p| steps.get(p).is_some_and(|p| is_max_pool_2x2(&p.op)))
            .filter(|_| backend.fuses_tail(&steps[k].op, *dtype, true));
        for s in [Some(add), relu, pool].into_iter().flatten() {
            gone[s] = true;
        }
        if let Some(p) = pool {
            steps[k].out = steps[p].out.clone();
            last = p;
        }
        steps[k].node = steps[last].node;
        steps[k].tail = Some(StepTail {
            bias,
            relu: relu.is_some(),
            max_pool: pool.is_some(),
        });
    }
    (steps.into_iter().zip(gone))
        .filter_map(|(s, gone)| (!gone).then_some(s))
        .collect()
}

/// A max pool of 2x2 windows at stride 2, the one a product's tail can take.
fn is_max_pool_2x2(op: &Op) -> bool {
    matches!(op, Op::Pool2d(crate::op::Pool2d::Max(p))
        if p.kernel == [2, 2] && p.stride == [2, 2] && p.padding == [0, 0] && p.dilation == [1, 1])
}

/// Where a step's input comes from once planned.
#[derive(Clone, Debug)]
enum Source {
    /// the graph input at this position
    Input(usize),
    /// a stored tensor, or a view of stored tensors taken when planning
    Const(Tensor),
    /// the output of the node at this position
    Node(usize),
}

impl Source {
    /// The value this source names while a plan runs.
    fn value<'a>(
        &'a self,
        inputs: &'a [Tensor],
        values: &'a [Option<Tensor>],
    ) -> Result<&'a Tensor> {
        let (found, what, at) = match self {
            Source::Input(k) => (inputs.get(*k), "input", k),
            Source::Const(t) => return Ok(t),
            Source::Node(j) => (values.get(*j).and_then(Option::as_ref), "node", j),
        };
        // Not `{self:?}`: a tensor's Debug would bring Rust's float formatting into the page.
        found.ok_or_else(|| {
            fail(
                ErrorKind::Format,
                "Model::run",
                format_args!("missing value of {what} {at}"),
            )
        })
    }
}

impl Plan {
    /// Whether the plan was made for inputs of these shapes.
    pub(crate) fn fits(&self, inputs: &[Tensor]) -> bool {
        self.shapes.iter().eq(inputs.iter().map(Tensor::shape))
    }

    /// Runs the planned graph on `inputs`, of the shapes it was made for.
    pub(crate) fn execute(&self, inputs: &[Tensor], device: &crate::Device) -> Result<Vec<Tensor>> {
        let mut values: Vec<Option<Tensor>> = alloc::vec![None; self.last_use.len()];
        for step in &self.steps {
            let out = {
                let args = (step.inputs.iter())
                    .map(|s| s.value(inputs, &values))
                    .collect::<Result<Vec<_>>>()?;
                let tail = step.tail.as_ref().map(|t| crate::backend::Tail {
                    bias: t.bias.view(),
                    relu: t.relu,
                    max_pool: t.max_pool,
                });
                Tensor::run_inferred(&step.op, &args, device, &step.out, tail)
                    .map_err(|e| e.context(format!("Model::run: node {}", step.node)))?
            };
            values[step.node] = Some(out);
            for s in &step.inputs {
                if let Source::Node(j) = s
                    && self.last_use[*j] == step.node
                {
                    values[*j] = None;
                }
            }
        }
        (self.outputs.iter())
            .map(|s| s.value(inputs, &values).cloned())
            .collect()
    }
}

/// Rewrites a version-1 graph (as JSON) into version 2: each `max_pool2d`, `avg_pool2d` and
/// `adaptive_avg_pool2d` node becomes `pool2d` with that kind. Version 1 had pooling gradients
/// of another arity; a graph holding one is refused.
pub(crate) fn upgrade_v1(graph: &mut serde_json::Value) -> Result<()> {
    let nodes = graph.get_mut("nodes").and_then(|n| n.as_array_mut());
    for node in nodes.into_iter().flatten() {
        let Some(op) = node.get_mut("op").and_then(|o| o.as_object_mut()) else {
            continue;
        };
        let Some((name, params)) = op.iter().next().map(|(k, v)| (k.clone(), v.clone())) else {
            continue;
        };
        let kind = match name.as_str() {
            "max_pool2d" => "max",
            "avg_pool2d" => "avg",
            "adaptive_avg_pool2d" => "adaptive_avg",
            n if n.ends_with("pool2d_backward") => {
                return Err(fail(
                    ErrorKind::Format,
                    "graph",
                    format_args!("version 1 node {n} cannot be upgraded; save the model again"),
                ));
            }
            _ => continue,
        };
        op.clear();
        // Built by hand: `json!` would serialize `params` into a new `Value` (serde_json's
        // serializer, in the web package for this alone).
        let mut pool = serde_json::Map::new();
        pool.insert(kind.into(), params);
        op.insert("pool2d".into(), serde_json::Value::Object(pool));
    }
    Ok(())
}
