//! Automatic kernel fusion: a backend decorator that records elementwise ops lazily and runs
//! each chain of them as one generated WGSL kernel.
//!
//! [`wrap`] returns a device whose `execute` does not run [`Op::Unary`], [`Op::Binary`],
//! [`Op::Compare`], [`Op::Where`], [`Op::Cast`] and [`Op::Full`] but records them: their output
//! is a lazy storage holding the expression (an SSA list of table ops whose leaves are real
//! storages of the inner device, or constants). An elementwise op on a lazy input seen whole
//! (or reshaped) inlines its expression; any other view of it, a read, a non-elementwise op,
//! [`Backend::synchronize`], or 4 newer large lazies made while nothing read it (a result
//! then starts on the device while the host records what follows) materializes it: one kernel
//! generated from the elementwise tables' WGSL, registered once per structure as a custom op
//! (`kiln.fused.<hash>`, naga-checked), and run
//! through the inner device's custom-op path, so it is planned, cached and translated (CUDA,
//! HIP) like any other kernel. A sum, mean, max or min over the trailing axes of a lazy input
//! is generated the same way with the reduction inside: the chain is never stored. A matmul or
//! convolution (conv2d, conv_transpose2d) is deferred too: a chain that reads its output whole, when nothing else holds that
//! output, runs inside the GEMM's store as its [`epilogue`] (a layer's bias and activation, a
//! residual add), so the product is never stored either. Everything else goes to the inner
//! device unchanged, and real storages pass through unwrapped: only elementwise outputs and
//! deferred products are ever lazy.
//!
//! `KILN_FUSION_LOG=1` prints each new fused kernel (name, op chain, inputs, key) to stderr.
//!
//! ```
//! use kiln_core::{DType, Device, Tensor};
//! // any device works; natively `kiln::device::select` wraps the GPU ones
//! let (dev, stats) = kiln_kernels::fusion::wrap_with_stats(&Device::cpu());
//! let x = Tensor::from_vec(vec![-1.0f32, 0.0, 2.0], [3], &dev)?;
//! let y = x.mul(&x.div_scalar(std::f64::consts::SQRT_2)?.erf()?.add_scalar(1.0)?)?.div_scalar(2.0)?;
//! let before = stats.kernels();
//! let v = y.to_vec::<f32>()?; // the whole GELU runs here, as one kernel
//! assert_eq!(stats.kernels() - before, 1);
//! assert!((v[2] - 1.9545).abs() < 1e-3);
//! # Ok::<(), kiln_core::Error>(())
//! ```

mod codegen;
pub mod epilogue;
mod expr;

pub use expr::{MAX_LEAVES, MAX_NODES};

use crate::plan::{MANY_ROWS, SHORT_ROW, even_chunks};
use codegen::{FusedOp, Reduction, word_value};
use expr::{Expr, Leaf, Node};
use kiln_core::op::custom::{CustomCall, KILN_PREFIX};
use kiln_core::{
    Backend, DType, Device, Error, Layout, Meta, Op, ReadFuture, ReduceOp, Result, Shape, Storage,
    TensorData, View,
};
use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Whether fusion is on: unless the environment sets `KILN_FUSION=0` (always on where there is
/// no environment, as in the page).
pub fn enabled() -> bool {
    std::env::var("KILN_FUSION").map_or(true, |v| v.trim() != "0")
}

/// Prints `line()` when the environment sets `KILN_FUSION_LOG=1`. Native only: the page has no
/// environment, and `eprintln!` would bring std's stderr and `io::Error` messages into it.
fn log(line: impl FnOnce() -> String) {
    #[cfg(not(target_arch = "wasm32"))]
    if std::env::var("KILN_FUSION_LOG").is_ok_and(|v| v.trim() == "1") {
        eprintln!("kiln fusion: {}", line());
    }
    #[cfg(target_arch = "wasm32")]
    let _ = line;
}

/// `device` behind the fusion decorator (see the [module docs](self)).
pub fn wrap(device: &Device) -> Device {
    wrap_with_stats(device).0
}

/// [`wrap`] unless fusion is off ([`enabled`]: `KILN_FUSION=0`); then `device` itself.
pub fn wrap_if_enabled(device: Device) -> Device {
    match enabled() {
        true => wrap(&device),
        false => device,
    }
}

/// [`wrap`], with counters of what the decorator did.
pub fn wrap_with_stats(device: &Device) -> (Device, Arc<Stats>) {
    let stats = Arc::new(Stats::default());
    let fusion = Fusion {
        inner: device.clone(),
        stats: stats.clone(),
        pending: Mutex::new(Pending::default()),
        idle: AtomicBool::new(true),
    };
    (Device::new(fusion), stats)
}

/// Counters of one fused device.
#[derive(Debug, Default)]
pub struct Stats {
    recorded: AtomicU64,
    fused: AtomicU64,
    reductions: AtomicU64,
    epilogues: AtomicU64,
    forwarded: AtomicU64,
}

impl Stats {
    /// Elementwise ops recorded instead of run.
    pub fn recorded(&self) -> u64 {
        self.recorded.load(Ordering::Relaxed)
    }
    /// Generated kernels run.
    pub fn fused(&self) -> u64 {
        self.fused.load(Ordering::Relaxed)
    }
    /// Generated kernels run that reduced a chain instead of storing it.
    pub fn reductions(&self) -> u64 {
        self.reductions.load(Ordering::Relaxed)
    }
    /// Generated kernels run that were a chain fused into the GEMM computing its input (a
    /// matmul's or conv2d's output, never stored: see [`epilogue`]).
    pub fn epilogues(&self) -> u64 {
        self.epilogues.load(Ordering::Relaxed)
    }
    /// Every op sent to the inner device: generated kernels, constant fills and the ops that
    /// do not fuse.
    pub fn kernels(&self) -> u64 {
        self.fused() + self.forwarded.load(Ordering::Relaxed)
    }
}

/// The lazy output of a recorded op (the storage the fused device returns for it): its
/// expression until something needs the values, then the inner device's buffer (the
/// expression's inputs are released).
struct Cell {
    state: Mutex<State>,
    /// an expression inlined it or a chain reads it as its product (see [`Fusion::lazy`])
    read: AtomicBool,
}

enum State {
    Pending(Expr),
    /// A matmul or convolution not run yet: a chain on its output may run inside its GEMM.
    Product(Product),
    Done(Storage),
}

/// A deferred product that takes a chain as its epilogue, and where it enters the chain.
type Epilogue = (usize, Product);

/// A deferred matmul, conv2d or conv_transpose2d on real inputs.
#[derive(Clone)]
struct Product {
    op: Op,
    inputs: Vec<Leaf>,
    out: Meta,
}

impl Cell {
    fn lock(&self) -> MutexGuard<'_, State> {
        // a panic mid-materialization leaves a valid state behind (Pending or Done)
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The lazies not yet materialized, for `synchronize`.
#[derive(Default)]
struct Pending {
    cells: Vec<Weak<Cell>>,
    prune_at: usize,
    /// the last [`UNREAD_WINDOW`] large lazies made, oldest first
    recent: VecDeque<Weak<Cell>>,
}

/// A large lazy that nothing has read by the time this many newer ones were made runs then: a
/// result (a model's output, a gradient waiting for the optimizer, one of many independent
/// chains) starts on the device while the host records what follows, instead of at the next
/// wait. A chain's own steps are read by the next op at once. GELU on 2^24 elements, 10 per wait, on
/// an H200 with CUDA: 12.6 µs of recording per GELU that no kernel overlapped took it to 1.41x
/// a copy's time. On an H100, 16 gave 1.11x (the first three GELUs' recording still exposed);
/// 8 and 4 gave 1.03-1.04x. On an H200, whose memory makes each GELU shorter, 4 gave
/// 1.11-1.14x against 8's 1.15-1.17x (3 alternated rounds), with the same kernels per inference
/// of four ONNX models and per MNIST training step, and the same GPT training step. Windows of 1
/// and 2 stream better (H100: 1.00-1.02x against 1.03-1.04x) but split interleaved chains: a GPT
/// training step (context 256, dim 384) took 231 and 223 kernels against 217.
const UNREAD_WINDOW: usize = 4;
/// Only lazies of at least this many elements count for [`UNREAD_WINDOW`]: smaller ones (a
/// model's per-channel constants, read many ops later) cost little to keep, and running them
/// early cut chains: DenseNet-121 took 326 kernels per inference against 267.
const UNREAD_MIN_ELEMENTS: usize = 1 << 16;

struct Fusion {
    inner: Device,
    stats: Arc<Stats>,
    pending: Mutex<Pending>,
    /// Nothing was sent to the inner device since the last wait: its queue is empty, so the
    /// first finished result runs as soon as one newer large lazy is made (a window of 1, not
    /// [`UNREAD_WINDOW`]). Ten composed GELUs per wait on an H200 with CUDA: the first one's
    /// kernel waited for the host to record one GELU and most of the next, which no kernel
    /// overlapped.
    idle: AtomicBool,
}

impl std::fmt::Debug for Fusion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fusion({})", self.inner.name())
    }
}

/// Dtypes the generated kernels carry (4-byte device words).
fn on_device(d: DType) -> bool {
    matches!(d, DType::F32 | DType::I32 | DType::U32 | DType::Bool)
}

/// An input of a recorded op: its expression, and whether that is a pending lazy's (inlined).
struct Operand {
    expr: Expr,
    inlined: bool,
}

impl Fusion {
    fn lazy(&self, state: State) -> Storage {
        let large = match &state {
            State::Pending(e) => e.shape.numel() >= UNREAD_MIN_ELEMENTS,
            State::Product(p) => p.out.1.numel() >= UNREAD_MIN_ELEMENTS,
            State::Done(_) => false,
        };
        // the storage is the cell itself (one allocation per recorded op, not two)
        let cell = Arc::new(Cell {
            state: Mutex::new(state),
            read: AtomicBool::new(false),
        });
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        p.cells.push(Arc::downgrade(&cell));
        // prune dropped lazies now and then (amortized O(1) per op)
        if p.cells.len() > p.prune_at.max(64) {
            p.cells.retain(|w| w.strong_count() > 0);
            p.prune_at = 2 * p.cells.len();
        }
        if large {
            p.recent.push_back(Arc::downgrade(&cell));
        }
        let window = match self.idle.load(Ordering::Relaxed) {
            true => 1,
            false => UNREAD_WINDOW,
        };
        let excess = p.recent.len().saturating_sub(window);
        let old: Vec<Weak<Cell>> = p.recent.drain(..excess).collect();
        drop(p);
        for old in old.iter().filter_map(Weak::upgrade) {
            if !old.read.load(Ordering::Relaxed) {
                // not this op's failure: it stays pending, and its own read or the next wait
                // reports it
                let _ = self.force(&old);
            }
        }
        Storage::from_arc(cell)
    }

    /// The inner device's buffer behind `storage` (materializing a lazy).
    fn real(&self, storage: &Storage) -> Result<Storage> {
        match storage.downcast::<Cell>() {
            Some(cell) => self.force(cell),
            None => Ok(storage.clone()),
        }
    }

    /// Runs `op` on the inner device.
    fn launch(&self, op: &Op, inputs: &[View<'_>], outputs: &[Meta]) -> Result<Vec<Storage>> {
        self.idle.store(false, Ordering::Relaxed);
        self.inner.backend().execute(op, inputs, outputs)
    }

    fn force(&self, cell: &Cell) -> Result<Storage> {
        let mut state = cell.lock();
        let s = match &*state {
            State::Done(s) => return Ok(s.clone()),
            State::Pending(e) => self.run(e)?,
            State::Product(p) => {
                let views: Vec<View<'_>> = p.inputs.iter().map(Leaf::view).collect();
                self.stats.forwarded.fetch_add(1, Ordering::Relaxed);
                one(self.launch(&p.op, &views, std::slice::from_ref(&p.out))?)?
            }
        };
        *state = State::Done(s.clone());
        Ok(s)
    }

    /// `e` with real leaves, but for a deferred product that can take the rest of `e` as its
    /// epilogue (returned with its leaf's index): one nothing else holds, so that it need
    /// never be stored.
    fn settle<'e>(&self, e: &'e Expr, epilogue: bool) -> Result<(Cow<'e, Expr>, Option<Epilogue>)> {
        // most chains read real buffers only: no copy of the expression then
        if !e
            .leaves
            .iter()
            .any(|l| l.storage.downcast::<Cell>().is_some())
        {
            return Ok((Cow::Borrowed(e), None));
        }
        let mut e = e.clone();
        let mut product = None;
        for j in 0..e.leaves.len() {
            let Some(cell) = e.leaves[j].storage.downcast::<Cell>() else {
                continue;
            };
            {
                let state = cell.lock();
                // `e` and the expression being run hold it, nothing else
                let alone = e.leaves[j].storage.handles() <= 2;
                if let State::Product(p) = &*state
                    && epilogue
                    && product.is_none()
                    && alone
                    && epilogue::fits(&e, j)
                {
                    product = Some((j, p.clone()));
                    continue;
                }
            }
            e.leaves[j].storage = self.force(cell)?;
        }
        Ok((Cow::Owned(e), product))
    }

    /// Runs an expression: one generated kernel (or a fill for a lone constant).
    fn run(&self, e: &Expr) -> Result<Storage> {
        let dtype = e.dtype();
        let out = vec![(dtype, e.shape.clone())];
        let lone_const = matches!(e.nodes.as_slice(), [(Node::Const(_), _)]);
        if lone_const || e.shape.numel() == 0 {
            let value = e.consts.first().map_or(0.0, |&w| word_value(w, dtype));
            self.stats.forwarded.fetch_add(1, Ordering::Relaxed);
            let op = Op::Full {
                shape: e.shape.clone(),
                value,
                dtype,
            };
            return one(self.launch(&op, &[], &out)?);
        }
        let (e, product) = self.settle(e, true)?;
        self.stats.fused.fetch_add(1, Ordering::Relaxed);
        let Some((at, product)) = product else {
            let name = register(&e, None)?;
            let call = CustomCall::new(name, codegen::attrs(&e, &e.shape, None));
            let views: Vec<View<'_>> = e.leaves.iter().map(Leaf::view).collect();
            return one(self.launch(&Op::Custom(call), &views, &out)?);
        };
        // the product's inputs, then the chain's others
        let call = epilogue::call(&e, at, &product.op)?;
        let others = (e.leaves.iter().enumerate()).filter(|&(j, _)| j != at);
        let views: Vec<View<'_>> = (product.inputs.iter())
            .chain(others.map(|(_, l)| l))
            .map(Leaf::view)
            .collect();
        self.stats.epilogues.fetch_add(1, Ordering::Relaxed);
        one(self.launch(&Op::Custom(call), &views, &out)?)
    }

    /// The expression of an input view.
    fn operand(&self, v: &View<'_>) -> Result<Operand> {
        let shape = v.layout.shape();
        let Some(cell) = v.storage.downcast::<Cell>() else {
            let leaf = Leaf::new(v.storage.clone(), v.layout, v.dtype);
            return Ok(Operand {
                expr: Expr::leaf(leaf, shape.clone()),
                inlined: false,
            });
        };
        let state = cell.lock();
        let storage = match &*state {
            State::Done(s) => s.clone(),
            // a product seen whole is a leaf the chain may run in (see `settle`)
            State::Product(p)
                if v.layout.offset() == 0
                    && v.layout.is_contiguous()
                    && shape.numel() == p.out.1.numel() =>
            {
                cell.read.store(true, Ordering::Relaxed);
                let leaf = Leaf::new(v.storage.clone(), v.layout, v.dtype);
                return Ok(Operand {
                    expr: Expr::leaf(leaf, shape.clone()),
                    inlined: false,
                });
            }
            State::Product(_) => {
                drop(state);
                self.force(cell)?
            }
            State::Pending(e) => {
                let whole = v.layout.offset() == 0
                    && v.layout.is_contiguous()
                    && shape.numel() == e.shape.numel();
                let inlined = if e.uniform() {
                    // every element is the same: any view is the same expression
                    let mut e = e.extendable();
                    e.shape = shape.clone();
                    Some(e)
                } else if whole {
                    e.reshaped(shape)
                } else {
                    None
                };
                if let Some(expr) = inlined {
                    cell.read.store(true, Ordering::Relaxed);
                    return Ok(Operand {
                        expr,
                        inlined: true,
                    });
                }
                drop(state);
                self.force(cell)?
            }
        };
        Ok(Operand {
            expr: Expr::leaf(Leaf::new(storage, v.layout, v.dtype), shape.clone()),
            inlined: false,
        })
    }

    /// Records an elementwise op; its output is lazy.
    fn record(&self, op: &Op, inputs: &[View<'_>], out: &Meta) -> Result<Storage> {
        let mut operands = inputs
            .iter()
            .map(|v| self.operand(v))
            .collect::<Result<Vec<_>>>()?;
        let node = |at: &[usize]| match (op, at) {
            (Op::Unary(u), &[a]) => Ok(Node::Unary(*u, a)),
            (Op::Binary(b), &[x, y]) => Ok(Node::Binary(*b, x, y)),
            (Op::Compare(c), &[x, y]) => Ok(Node::Compare(*c, x, y)),
            (Op::Where, &[c, x, y]) => Ok(Node::Where(c, x, y)),
            (Op::Cast { .. }, &[a]) => Ok(Node::Cast(a)),
            _ => Err(Error::invalid(
                op.name(),
                format!("fusion: unexpected {} inputs", inputs.len()),
            )),
        };
        let total = |size: fn(&Expr) -> usize| operands.iter().map(|o| size(&o.expr)).sum();
        let (nodes, leaves): (usize, usize) = (total(|e| e.nodes.len()), total(|e| e.leaves.len()));
        if !operands.is_empty() && nodes < MAX_NODES && leaves <= MAX_LEAVES {
            // within the limits even if nothing is shared (nearly always): the first operand's
            // expression grows into the result, so a long chain is not copied once more per op
            // (composed GELU recorded and run on 256 elements of the CPU device: 6% fewer
            // instructions)
            let mut exprs = operands.into_iter().map(|o| o.expr);
            let mut e = exprs.next().expect("checked: not empty");
            if e.shape != out.1 {
                e.shape = out.1.clone();
            }
            let mut at = Vec::with_capacity(inputs.len());
            at.push(e.nodes.len() - 1);
            at.extend(exprs.map(|o| e.append(&o)));
            e.nodes.push((node(&at)?, out.0));
            self.stats.recorded.fetch_add(1, Ordering::Relaxed);
            return Ok(self.lazy(State::Pending(e)));
        }
        loop {
            let mut e = Expr {
                nodes: vec![],
                leaves: vec![],
                consts: vec![],
                shape: out.1.clone(),
            };
            let at: Vec<usize> = operands.iter().map(|o| e.append(&o.expr)).collect();
            e.nodes.push((node(&at)?, out.0));
            if e.fits() {
                self.stats.recorded.fetch_add(1, Ordering::Relaxed);
                return Ok(self.lazy(State::Pending(e)));
            }
            // too big for one kernel: the largest inlined input runs on its own first
            let i = (operands.iter().enumerate())
                .filter(|(_, o)| o.inlined)
                .max_by_key(|(_, o)| o.expr.nodes.len())
                .map(|(i, _)| i)
                .ok_or_else(|| Error::invalid(op.name(), "fusion: inputs exceed the limits"))?;
            operands[i].inlined = false;
            let v = &inputs[i];
            let storage = self.real(v.storage)?;
            let layout = v.layout;
            operands[i].expr =
                Expr::leaf(Leaf::new(storage, layout, v.dtype), layout.shape().clone());
        }
    }

    /// A sum, mean, max or min over the trailing axes of a pending expression (a layer norm's
    /// statistics, a softmax gradient's row sums, a squared norm): one generated kernel reads
    /// the expression's inputs and reduces them without storing the expression. Few long rows
    /// leave a partial per chunk, which the inner device's reduction combines. `None` where the
    /// plain path runs (a real input; axes that are not trailing: see [`Reduction`]).
    fn reduce(
        &self,
        op: ReduceOp,
        axes: &[usize],
        v: &View<'_>,
        out: &Meta,
    ) -> Result<Option<Storage>> {
        let dtype = v.dtype;
        let shape = v.layout.shape();
        let rank = shape.rank();
        let floats = dtype == DType::F32 || op != ReduceOp::Mean;
        let plain = !Reduction::supports(op) || out.0 != dtype || dtype == DType::Bool;
        if plain || !floats || rank == 0 {
            return Ok(None);
        }
        // a pending chain seen whole (`operand` inlines it); a real input, or another view of
        // a chain (materialized there, as the plain path would), reduces as it is
        let Operand {
            expr,
            inlined: true,
        } = self.operand(v)?
        else {
            return Ok(None);
        };
        if expr.ops() == 0 {
            return Ok(None);
        }
        let (expr, _) = self.settle(&expr, false)?;
        let axes = if axes.is_empty() {
            (0..rank).collect()
        } else {
            kiln_core::sorted::sorted_unique(axes.iter().copied())
        };
        let dims = shape.dims();
        let trailing = axes.iter().rev().zip((0..rank).rev()).all(|(a, d)| *a == d);
        let (outer, len) = (
            dims[..rank - axes.len()].iter().product::<usize>(),
            dims[rank - axes.len()..].iter().product::<usize>(),
        );
        if !trailing || outer * len == 0 || u32::try_from(shape.numel()).is_err() {
            return Ok(None);
        }
        // 4 adjacent elements per load where an input is read whole
        let vec4 = expr.kinds(shape).contains(&expr::ReadKind::Whole) && len % 4 == 0;
        let loads = if vec4 { len / 4 } else { len };
        let (row_wg, chunks) = if loads <= FUSED_ROW_PER_THREAD && outer >= MANY_ROWS {
            (1, 1)
        } else {
            let wg = if len <= SHORT_ROW { 32 } else { 256 };
            (wg, MANY_ROWS.div_ceil(outer).min(len / (16 * wg as usize)))
        };
        // chunks start at multiples of 4 for the vec4 loads
        let (chunk, chunks) = even_chunks(len, chunks, if vec4 { 4 } else { 1 });
        let r = Reduction { op, row_wg, vec4 };
        let name = register(&expr, Some(r))?;
        let attrs = codegen::attrs(&expr, &expr.shape, Some([outer, len, chunk, chunks]));
        let views: Vec<View<'_>> = expr.leaves.iter().map(Leaf::view).collect();
        let partials = Shape::from([outer, chunks]);
        self.stats.fused.fetch_add(1, Ordering::Relaxed);
        self.stats.reductions.fetch_add(1, Ordering::Relaxed);
        let call = Op::Custom(CustomCall::new(name, attrs));
        let first = one(self.launch(&call, &views, &[(dtype, partials.clone())])?)?;
        if chunks == 1 {
            return Ok(Some(first));
        }
        // a mean's partials are divided by len already: they add up to it
        let op = if op == ReduceOp::Mean {
            ReduceOp::Sum
        } else {
            op
        };
        let layout = Layout::contiguous(partials);
        let view = View {
            storage: &first,
            layout: &layout,
            dtype,
        };
        let rest = Op::Reduce {
            op,
            axes: vec![1],
            keepdim: false,
        };
        self.stats.forwarded.fetch_add(1, Ordering::Relaxed);
        let out = (dtype, Shape::from([outer]));
        Ok(Some(one(self.launch(&rest, &[view], &[out])?)?))
    }

    /// Materializes every lazy still alive.
    fn flush(&self) -> Result<()> {
        let cells = {
            let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            // all of them run below; the next list starts at this one's size (regrown from
            // empty after each wait, it cost 1.1k host instructions per composed GELU on wgpu)
            p.recent.clear();
            let size = p.cells.len();
            std::mem::replace(&mut p.cells, Vec::with_capacity(size))
        };
        // chains first: a product only they read then runs inside one of them
        let mut products = Vec::new();
        for cell in cells.iter().filter_map(Weak::upgrade) {
            if matches!(*cell.lock(), State::Product(_)) {
                products.push(Arc::downgrade(&cell));
            } else {
                self.force(&cell)?;
            }
        }
        for cell in products.iter().filter_map(Weak::upgrade) {
            self.force(&cell)?;
        }
        Ok(())
    }
}

fn one(mut v: Vec<Storage>) -> Result<Storage> {
    v.pop()
        .ok_or_else(|| Error::invalid("fusion", "the inner device returned no output"))
}

/// Rows of at most this many loads (vec4s or elements), when there are enough of them, fold
/// an invocation each. Longer ones take a 32-wide workgroup: on an H100 the softmax gradient's
/// row sums over [98304, 256] took ~68 µs that way against 109 µs an invocation per row.
const FUSED_ROW_PER_THREAD: usize = 16;

/// The generated kernels of this process by structural key: their custom ops' names.
static KNOWN: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

/// The kernels fusion has generated in this process: each one's name (`kiln.fused.<hash>`, as
/// profiles and errors show it) and WGSL, in the order of their names; then each GEMM
/// epilogue's (`kiln.epilogue.<hash>`: the part appended to gemm.wgsl).
pub fn kernels() -> Vec<(String, String)> {
    let names: Vec<String> = (KNOWN.lock().unwrap_or_else(|x| x.into_inner()).values())
        .cloned()
        .collect();
    // Ordered by inserting into a map of KNOWN's type rather than by a sort: a sort of its own
    // cost the page's module 7 KiB (0.9 KiB gzipped) for this debugging aid.
    let mut by_name = BTreeMap::new();
    for n in names {
        if let Some(wgsl) = kiln_core::op::custom::lookup(&n)
            .ok()
            .and_then(|r| Some(r.op.wgsl()?.to_string()))
        {
            by_name.insert(n, wgsl);
        }
    }
    for n in epilogue::names() {
        if let Ok(wgsl) = epilogue::source(&n) {
            by_name.insert(n, wgsl);
        }
    }
    by_name.into_iter().collect()
}

/// The custom op running `e` or reducing it (registered, and its WGSL checked by naga, on first
/// use of its structure in this process).
fn register(e: &Expr, reduce: Option<Reduction>) -> Result<String> {
    let mut key = e.key(&e.shape);
    if let Some(r) = reduce {
        key.push_str(&r.key());
    }
    let mut known = KNOWN.lock().unwrap_or_else(|x| x.into_inner());
    if let Some(name) = known.get(&key) {
        return Ok(name.clone());
    }
    let name = format!("{KILN_PREFIX}fused.{:016x}", hash(&key));
    let op = FusedOp::new(name.clone(), key.clone(), e, &e.shape, reduce)?;
    log(|| {
        format!(
            "{name}: {} ops, {} inputs: {} [{}]",
            e.ops(),
            e.leaves.len(),
            e.chain(),
            op.key
        )
    });
    register_checked(Arc::new(op))?;
    known.insert(key, name.clone());
    Ok(name)
}

/// Registers a generated kernel, natively after naga's check. In the page the browser checks
/// it when the pipeline is made: naga's WGSL front end and validator would add about 300 KiB
/// (gzipped) to the wasm module. The tests check every kernel the fuzzer makes with naga.
#[cfg(not(target_arch = "wasm32"))]
fn register_checked(op: Arc<dyn kiln_core::op::custom::CustomOp>) -> Result<()> {
    crate::custom::register_op(op)
}

#[cfg(target_arch = "wasm32")]
fn register_checked(op: Arc<dyn kiln_core::op::custom::CustomOp>) -> Result<()> {
    kiln_core::op::custom::register_op(op)
}

/// A stable 64-bit hash (std's SipHash with fixed keys).
fn hash(s: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new();
    s.hash(&mut h);
    h.finish()
}

impl Backend for Fusion {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn upload(&self, data: &TensorData) -> Result<Storage> {
        self.inner.backend().upload(data)
    }

    fn execute(&self, op: &Op, inputs: &[View<'_>], outputs: &[Meta]) -> Result<Vec<Storage>> {
        let elementwise = matches!(
            op,
            Op::Unary(_) | Op::Binary(_) | Op::Compare(_) | Op::Where | Op::Cast { .. }
        );
        let fusable = outputs.len() == 1
            && outputs.iter().all(|o| on_device(o.0))
            && inputs.iter().all(|v| on_device(v.dtype));
        match op {
            Op::Full {
                shape,
                value,
                dtype,
            } if fusable => {
                let e = Expr::constant(*value, *dtype, shape.clone());
                self.stats.recorded.fetch_add(1, Ordering::Relaxed);
                return Ok(vec![self.lazy(State::Pending(e))]);
            }
            _ if elementwise && fusable => {
                return Ok(vec![self.record(op, inputs, &outputs[0])?]);
            }
            Op::Reduce { op, axes, .. } if fusable => {
                if let Some(s) = self.reduce(*op, axes, &inputs[0], &outputs[0])? {
                    return Ok(vec![s]);
                }
            }
            // deferred: a chain on the output may run in its GEMM
            Op::Matmul | Op::Conv2d(_) | Op::ConvTranspose2d { .. }
                if fusable && outputs[0].0 == DType::F32 =>
            {
                let inputs = inputs
                    .iter()
                    .map(|v| {
                        // the view as it is (`Leaf::new` would undo an expanded batch axis)
                        let storage = self.real(v.storage)?;
                        let (layout, dtype) = (v.layout.clone(), v.dtype);
                        Ok(Leaf {
                            storage,
                            layout,
                            dtype,
                        })
                    })
                    .collect::<Result<Vec<_>>>()?;
                let out = outputs[0].clone();
                return Ok(vec![self.lazy(State::Product(Product {
                    op: op.clone(),
                    inputs,
                    out,
                }))]);
            }
            _ => {}
        }
        let held = inputs
            .iter()
            .map(|v| self.real(v.storage))
            .collect::<Result<Vec<_>>>()?;
        let views: Vec<View<'_>> = inputs
            .iter()
            .zip(&held)
            .map(|(v, s)| View {
                storage: s,
                layout: v.layout,
                dtype: v.dtype,
            })
            .collect();
        self.stats.forwarded.fetch_add(1, Ordering::Relaxed);
        self.launch(op, &views, outputs)
    }

    fn read(&self, input: View<'_>) -> ReadFuture {
        let read = match self.real(input.storage) {
            Ok(s) => self.inner.backend().read(View {
                storage: &s,
                layout: input.layout,
                dtype: input.dtype,
            }),
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        // the caller waits for it (nearly always) before recording more
        self.idle.store(true, Ordering::Relaxed);
        read
    }

    fn write(&self, dst: &mut Storage, offset: usize, src: View<'_>) -> Result<bool> {
        if dst.downcast::<Cell>().is_some() {
            // a lazy has no buffer of its own to write: the caller copies instead
            return Ok(false);
        }
        let s = self.real(src.storage)?;
        let src = View {
            storage: &s,
            layout: src.layout,
            dtype: src.dtype,
        };
        self.inner.backend().write(dst, offset, src)
    }

    fn supports(&self, dtype: DType) -> bool {
        self.inner.backend().supports(dtype)
    }

    fn allocated_bytes(&self) -> Option<u64> {
        self.inner.backend().allocated_bytes()
    }

    fn synchronize(&self) -> Result<()> {
        self.flush()?;
        self.inner.backend().synchronize()?;
        self.idle.store(true, Ordering::Relaxed);
        Ok(())
    }
}
