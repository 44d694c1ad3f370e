//! WGSL generation for a fused expression, and the custom op that runs it.
//!
//! An elementwise kernel computes one output element per invocation. Its params header is
//! `numel, rank`, the constants (as 4-byte words `k0`..), each inner, outer or middle leaf's
//! `m` (and a middle one's `d`), then the tail: the expression's shape and, per input, its
//! strides against the shape's axes (0 where it broadcasts). Constants and `m`, `d` are named
//! fields, not tail words: SwiftShader (the page's WebGPU) bounds-checks each read of the
//! runtime-sized tail per lane, which made the composed GELU 1.3x slower than with literals. A
//! reduction kernel ([`Reduction`]) has five more fields after `rank` (`outer`, `len`, `chunk`,
//! `chunks`, and a mean's `1 / len` as f32 bits).

use super::expr::{Expr, Node, ReadKind, push_number, vectorized};
use crate::plan::{WG, wgsl_type};
use kiln_core::op::custom::{Attrs, CustomOp, Grid, KernelLaunch};
use kiln_core::{DType, Device, Error, Meta, ReduceOp, Result, Shape, Tensor, TensorData};
use std::fmt::Write;

/// A registered fused kernel: the structure of one expression (sizes and constant values come
/// with each call).
pub struct FusedOp {
    pub name: String,
    pub key: String,
    nodes: Vec<(Node, DType)>,
    kinds: Vec<ReadKind>,
    nconsts: usize,
    /// 4 elements per invocation ([`vectorized`])
    vec4: bool,
    /// the expression reduced, not stored
    reduce: Option<Reduction>,
    wgsl: String,
}

/// A fused expression reduced over its trailing axes: its shape seen as `[outer, len]` and the
/// output `[outer, chunks]`, each of `chunks` cuts of a row giving a partial (the final result
/// when `chunks` is 1; a mean's partials are divided by `len` already, so they add up to it).
/// The sizes come with each call (attrs `outer`, `len`, `chunk`, `chunks`). Reductions over
/// leading or middle axes (columns) are not fused: on an H200 fusing the GPT's bias and
/// norm-weight gradients made a step 4% slower than the planner's column reduction of the
/// stored chain.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reduction {
    /// Sum, Mean, Max or Min
    pub op: ReduceOp,
    /// A workgroup of this many invocations per row and chunk, folding through workgroup
    /// memory, or 1: an invocation per (short) row and chunk.
    pub row_wg: u32,
    /// Whole inputs read as vec4s: 4 adjacent elements of a row per load (rows and chunks of
    /// a multiple of 4).
    pub vec4: bool,
}

impl Reduction {
    /// The ops a fused reduction runs.
    pub fn supports(op: ReduceOp) -> bool {
        matches!(
            op,
            ReduceOp::Sum | ReduceOp::Mean | ReduceOp::Max | ReduceOp::Min
        )
    }

    /// What a kernel's structural key adds for this reduction.
    pub fn key(self) -> String {
        format!("reduce:{}:{}:{}", self.op.name(), self.row_wg, self.vec4)
    }
}

impl FusedOp {
    /// The op for `expr` producing `out` (or reducing it), named from `key` (its
    /// [`Expr::key`], and the reduction's).
    pub fn new(
        name: String,
        key: String,
        expr: &Expr,
        out: &Shape,
        reduce: Option<Reduction>,
    ) -> Result<FusedOp> {
        let kinds = expr.kinds(out);
        let vec4 = match reduce {
            Some(r) => r.vec4,
            None => vectorized(&kinds, out),
        };
        let dtypes: Vec<DType> = expr.leaves.iter().map(|l| l.dtype).collect();
        let (nodes, nconsts) = (&expr.nodes, expr.consts.len());
        let mut wgsl = preamble(
            &name,
            nodes,
            &dtypes,
            &kinds,
            nconsts,
            vec4,
            reduce.is_some(),
        )?;
        match reduce {
            Some(r) => reduction_main(&mut wgsl, r, &kinds, nodes)?,
            None => elementwise_main(&mut wgsl, &kinds, vec4),
        }
        let wgsl =
            crate::preprocess::preprocess(&wgsl, &Default::default(), &crate::kernels::source)
                .map_err(|e| e.context(name.clone()))?;
        Ok(FusedOp {
            name,
            key,
            nodes: expr.nodes.clone(),
            kinds,
            nconsts,
            vec4,
            reduce,
            wgsl,
        })
    }
}

/// The call's attributes: the expression's shape (`rank`, `d0`..) and the constants' words
/// (`k0`..), each an exact f64; a reduction adds its sizes (`outer`, `len`, `chunk`,
/// `chunks`).
pub fn attrs(expr: &Expr, out: &Shape, sizes: Option<[usize; 4]>) -> Attrs {
    let mut a = Attrs::new();
    for (k, v) in REDUCTION_SIZES.iter().zip(sizes.iter().flatten()) {
        a.insert(k.to_string(), *v as f64);
    }
    a.insert("rank".into(), out.rank() as f64);
    for (i, &d) in out.dims().iter().enumerate() {
        a.insert(numbered('d', i), d as f64);
    }
    for (i, &k) in expr.consts.iter().enumerate() {
        a.insert(numbered('k', i), k as f64);
    }
    a
}

/// The words of an expression's `nconsts` constants, from its call's attributes (`k0`..).
pub fn const_words(attrs: &Attrs, nconsts: usize, op: &str) -> Result<Vec<u32>> {
    (0..nconsts)
        .map(|i| attr(attrs, &numbered('k', i), op).map(|k| k as u32))
        .collect()
}

/// An attribute's name, `prefix` then `i` (`"d0"`, `"k12"`): written by every fused call and
/// read by its launch, where `format!`'s machinery cost about 2k of 117k host instructions per
/// composed GELU on wgpu.
fn numbered(prefix: char, i: usize) -> String {
    let mut s = String::with_capacity(4);
    s.push(prefix);
    push_number(&mut s, i as u64);
    s
}

/// The attrs of a reduction's sizes, in the order of its header's words.
const REDUCTION_SIZES: [&str; 4] = ["outer", "len", "chunk", "chunks"];

fn attr(attrs: &Attrs, key: &str, op: &str) -> Result<f64> {
    kiln_core::op::custom::attr(op, attrs, key)
}

impl FusedOp {
    fn out_shape(&self, attrs: &Attrs) -> Result<Shape> {
        let rank = attr(attrs, "rank", &self.name)? as usize;
        (0..rank)
            .map(|i| attr(attrs, &numbered('d', i), &self.name).map(|d| d as usize))
            .collect::<Result<Vec<_>>>()
            .map(Shape::new)
    }

    /// A reduction's `[outer, len, chunk, chunks]`.
    fn sizes(&self, attrs: &Attrs) -> Result<[usize; 4]> {
        let mut v = [0; 4];
        for (w, k) in v.iter_mut().zip(REDUCTION_SIZES) {
            *w = attr(attrs, k, &self.name)? as usize;
        }
        Ok(v)
    }

    fn consts(&self, attrs: &Attrs) -> Result<Vec<u32>> {
        const_words(attrs, self.nconsts, &self.name)
    }
}

impl CustomOp for FusedOp {
    fn name(&self) -> &str {
        &self.name
    }

    fn infer(&self, attrs: &Attrs, inputs: &[Meta]) -> Result<Meta> {
        if inputs.len() != self.kinds.len() {
            return Err(Error::invalid(
                self.name.clone(),
                format!("takes {} inputs, got {}", self.kinds.len(), inputs.len()),
            ));
        }
        if self.reduce.is_some() {
            let [outer, _, _, chunks] = self.sizes(attrs)?;
            return Ok((self.dtype(), Shape::from([outer, chunks])));
        }
        Ok((self.dtype(), self.out_shape(attrs)?))
    }

    /// The expression evaluated with the CPU backend's ops: the reference of the kernel.
    fn cpu(&self, attrs: &Attrs, inputs: &[TensorData], output: &Meta) -> Result<TensorData> {
        let cpu = Device::cpu();
        let consts = self.consts(attrs)?;
        let mut values: Vec<Tensor> = Vec::with_capacity(self.nodes.len());
        for (node, dtype) in &self.nodes {
            let v = match *node {
                Node::Leaf(j) => Tensor::from_data(&inputs[j], &cpu)?,
                Node::Const(k) => Tensor::scalar(word_value(consts[k], *dtype), *dtype, &cpu)?,
                Node::Unary(u, a) => values[a].unary(u)?,
                Node::Binary(b, x, y) => values[x].binary(b, &values[y])?,
                Node::Compare(c, x, y) => values[x].compare(c, &values[y])?,
                Node::Where(c, x, y) => values[c].where_cond(&values[x], &values[y])?,
                Node::Cast(a) => values[a].cast(*dtype)?,
            };
            values.push(v);
        }
        let last = values
            .pop()
            .ok_or_else(|| Error::invalid(self.name.clone(), "has no nodes"))?;
        let Some(r) = self.reduce else {
            return last.expand(output.1.clone())?.to_data();
        };
        let [outer, len, chunk, chunks] = self.sizes(attrs)?;
        let v = last.expand(self.out_shape(attrs)?)?.reshape([outer, len])?;
        let parts = (0..chunks)
            .map(|c| {
                let part = v.narrow(1, c * chunk, chunk.min(len - c * chunk))?;
                match r.op {
                    ReduceOp::Mean => part.sum(&[1], true)?.mul_scalar(1.0 / len as f64),
                    op => part.reduce(op, &[1], true),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Tensor::concat(&parts, 1)?.to_data()
    }

    fn wgsl(&self) -> Option<&str> {
        Some(&self.wgsl)
    }

    fn launch(&self, attrs: &Attrs, inputs: &[Meta], _: &Meta) -> Result<KernelLaunch> {
        // the expression's shape (an elementwise kernel's output)
        let out = &self.out_shape(attrs)?;
        let mut grid = Grid::Invocations {
            count: out.numel() as u64 / if self.vec4 { 4 } else { 1 },
            workgroup_size: WG,
        };
        let numel = u32::try_from(out.numel()).map_err(|_| {
            Error::unsupported(
                self.name.clone(),
                format!("{} elements exceed the GPU kernels' 2^32 - 1", out.numel()),
            )
        })?;
        let rank = out.rank();
        let mut params = vec![numel, rank as u32];
        if let Some(r) = self.reduce {
            let [outer, len, chunk, chunks] = self.sizes(attrs)?;
            params.extend([outer, len, chunk, chunks].map(|v| v as u32));
            params.push((1.0 / len.max(1) as f32).to_bits());
            let rows = (outer * chunks) as u64;
            grid = match r.row_wg {
                1 => Grid::Invocations {
                    count: rows,
                    workgroup_size: WG,
                },
                wg => Grid::Invocations {
                    count: rows * wg as u64,
                    workgroup_size: wg,
                },
            };
        }
        params.extend(self.consts(attrs)?);
        // the fields of the inner, outer and middle leaves, in the order of `index_fields`
        for ((_, shape), &kind) in inputs.iter().zip(&self.kinds) {
            params.extend(index_words(kind, shape, out));
        }
        params.extend(out.dims().iter().map(|&d| d as u32));
        for (_, shape) in inputs {
            params.extend(broadcast_strides(shape, out));
        }
        // the tail is never empty (a zero-length runtime array binds badly on some drivers)
        params.push(0);
        Ok(KernelLaunch { params, grid })
    }
}

impl FusedOp {
    fn dtype(&self) -> DType {
        self.nodes.last().map_or(DType::F32, |n| n.1)
    }
}

/// A device word back to the value it holds in `dtype`.
pub fn word_value(w: u32, dtype: DType) -> f64 {
    match dtype {
        DType::I32 => w as i32 as f64,
        DType::U32 | DType::Bool => w as f64,
        _ => f32::from_bits(w) as f64,
    }
}

/// The params fields of input `j` of `kind`: an inner, outer or middle leaf's `m`, a middle
/// one's `d`.
fn index_fields(kind: ReadKind, j: usize) -> Vec<String> {
    match kind {
        ReadKind::Inner | ReadKind::Outer => vec![format!("m{j}")],
        ReadKind::Middle => vec![format!("m{j}"), format!("d{j}")],
        _ => vec![],
    }
}

/// The WGSL reading input `j`, of `kind`, for output element `e` (a scalar load); `field`
/// gives the WGSL of a params field (`"m0"`).
fn read_with(kind: ReadKind, j: usize, e: &str, field: &dyn Fn(&str) -> String) -> String {
    let [m, d] = [format!("m{j}"), format!("d{j}")].map(|f| field(&f));
    match kind {
        ReadKind::Whole => format!("in{j}[{e}]"),
        ReadKind::One => format!("in{j}[0]"),
        ReadKind::Broadcast => format!("in{j}[at_of({e}, {j}u)]"),
        ReadKind::Inner => format!("in{j}[{e} % {m}]"),
        ReadKind::Outer => format!("in{j}[{e} / {m}]"),
        ReadKind::Middle => format!("in{j}[({e} / {d}) % {m}]"),
    }
}

/// [`read_with`] the fields of a fused kernel's own params.
fn read(kind: ReadKind, j: usize, e: &str) -> String {
    read_with(kind, j, e, &|f| format!("params.{f}"))
}

/// The words of input `j`'s [`index_fields`] for an output of `out`: an inner or outer leaf's
/// `m`, a middle one's `m` and `d`.
fn index_words(kind: ReadKind, shape: &Shape, out: &Shape) -> Vec<u32> {
    let words = match kind {
        ReadKind::Inner => vec![shape.numel()],
        ReadKind::Outer => vec![out.numel() / shape.numel().max(1)],
        ReadKind::Middle => vec![shape.numel(), trailing_broadcast(shape, out)],
        _ => vec![],
    };
    words.into_iter().map(|v| v as u32).collect()
}

/// The output's elements per step of a middle leaf of `shape`: the product of the output's
/// trailing axes that the leaf broadcasts over.
fn trailing_broadcast(shape: &Shape, out: &Shape) -> usize {
    let dims = shape.dims();
    let skip = out.rank() - dims.len().min(out.rank());
    (skip..out.rank())
        .rev()
        .take_while(|&d| dims[d - skip] == 1)
        .map(|d| out.dims()[d])
        .product()
}

/// The strides of a contiguous input of `shape` against the axes of `out`, right-aligned, 0
/// where it broadcasts.
fn broadcast_strides(shape: &Shape, out: &Shape) -> Vec<u32> {
    let dims = shape.dims();
    let skip = out.rank() - dims.len().min(out.rank());
    let strides = shape.contiguous_strides();
    (0..out.rank())
        .map(|d| {
            if d < skip {
                return 0;
            }
            let i = d - skip;
            if dims[i] == 1 { 0 } else { strides[i] as u32 }
        })
        .collect()
}

/// Replaces whole identifiers of `expr` (a table's WGSL expression) by `subs`.
fn substitute(expr: &str, subs: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(expr.len() + 16);
    let b = expr.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphanumeric() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let word = &expr[start..i];
            // numbers (`1.0`, `0x7fu`) are not identifiers
            let ident = !c.is_ascii_digit();
            match subs.iter().find(|(k, _)| ident && *k == word) {
                Some((_, v)) => out.push_str(v),
                None => out.push_str(word),
            }
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    out
}

/// The WGSL of an expression's kernel up to its entry point: the header, the bindings and
/// `value`, which computes one element from its inputs' values.
fn preamble(
    name: &str,
    nodes: &[(Node, DType)],
    leaves: &[DType],
    kinds: &[ReadKind],
    nconsts: usize,
    vec4: bool,
    reduce: bool,
) -> Result<String> {
    let ty = |d: DType| wgsl_type(d, "fusion");
    let mut s = String::new();
    let _ = writeln!(s, "// generated by kiln's fusion: {name}");
    s.push_str("#include \"common.wgsl\"\n#include \"math.wgsl\"\n\n");
    s.push_str("struct FusedParams {\n    numel: u32,\n    rank: u32,\n");
    if reduce {
        for field in ["outer", "len", "chunk", "chunks", "scale"] {
            let _ = writeln!(s, "    {field}: u32,");
        }
    }
    for k in 0..nconsts {
        let _ = writeln!(s, "    k{k}: u32,");
    }
    for (j, &kind) in kinds.iter().enumerate() {
        for field in index_fields(kind, j) {
            let _ = writeln!(s, "    {field}: u32,");
        }
    }
    s.push_str("    tail: array<u32>,\n}\n");
    s.push_str("@group(0) @binding(0) var<storage, read> params: FusedParams;\n");
    for (j, &d) in leaves.iter().enumerate() {
        let t = ty(d)?;
        let elem = if vec4 && kinds[j] == ReadKind::Whole {
            format!("vec4<{t}>")
        } else {
            t.to_string()
        };
        let _ = writeln!(
            s,
            "@group(0) @binding({}) var<storage, read> in{j}: array<{elem}>;",
            j + 1
        );
    }
    let out_ty = ty(nodes.last().map_or(DType::F32, |n| n.1))?;
    let out_elem = if vec4 && !reduce {
        format!("vec4<{out_ty}>")
    } else {
        out_ty.to_string()
    };
    let _ = writeln!(
        s,
        "@group(0) @binding({}) var<storage, read_write> out: array<{out_elem}>;\n",
        leaves.len() + 1
    );
    if kinds.contains(&ReadKind::Broadcast) {
        // element i of the output -> element of input j (its strides follow the shape)
        let _ = write!(
            s,
            "fn at_of(i: u32, j: u32) -> u32 {{\n    let rank = params.rank;\n    \
             let strides = rank * (1u + j);\n    \
             var rem = i;\n    var at = 0u;\n    for (var d = rank; d > 0u; d = d - 1u) {{\n        \
             let n = params.tail[d - 1u];\n        \
             at = at + (rem % n) * params.tail[strides + d - 1u];\n        \
             rem = rem / n;\n    }}\n    return at;\n}}\n\n"
        );
    }
    value_fn(&mut s, nodes, leaves, &|f| format!("params.{f}"))?;
    Ok(s)
}

/// `fn value(l0, l1, ..)`: one element of the expression from its inputs' values; `field`
/// gives the WGSL of a constant's params field (`"k0"`).
fn value_fn(
    s: &mut String,
    nodes: &[(Node, DType)],
    leaves: &[DType],
    field: &dyn Fn(&str) -> String,
) -> Result<()> {
    let ty = |d: DType| wgsl_type(d, "fusion");
    let out_ty = ty(nodes.last().map_or(DType::F32, |n| n.1))?;
    let args: Vec<String> = leaves
        .iter()
        .enumerate()
        .map(|(j, &d)| Ok(format!("l{j}: {}", ty(d)?)))
        .collect::<Result<_>>()?;
    let _ = writeln!(s, "fn value({}) -> {out_ty} {{", args.join(", "));
    for (n, (node, dtype)) in nodes.iter().enumerate() {
        let t = ty(*dtype)?;
        let v = |a: usize| format!("n{a}");
        let expr = match *node {
            Node::Leaf(j) => format!("l{j}"),
            Node::Const(k) => format!("bitcast<{t}>({})", field(&format!("k{k}"))),
            Node::Unary(u, a) => {
                let [c0, c1] = u.consts().map(|c| lit(c, *dtype));
                substitute(
                    u.wgsl(*dtype),
                    &[("v", &v(a)), ("T", t), ("c0", &c0), ("c1", &c1)],
                )
            }
            Node::Binary(b, x, y) => {
                substitute(b.wgsl(*dtype), &[("x", &v(x)), ("y", &v(y)), ("T", t)])
            }
            Node::Compare(c, x, y) => {
                let ti = ty(nodes[x].1)?;
                let e = substitute(c.wgsl(), &[("x", &v(x)), ("y", &v(y)), ("T", ti)]);
                format!("select(0u, 1u, {e})")
            }
            Node::Where(c, x, y) => format!("select({}, {}, {} != 0u)", v(y), v(x), v(c)),
            Node::Cast(a) => cast(&v(a), nodes[a].1, *dtype)?,
        };
        let _ = writeln!(s, "    let n{n}: {t} = {expr};");
    }
    let _ = writeln!(s, "    return n{};\n}}\n", nodes.len().saturating_sub(1));
    Ok(())
}

/// How a GEMM epilogue reads one of its inputs: as a fused kernel would (by its [`ReadKind`]), or
/// at the row or column of the GEMM's C where that is the input's element (a convolution's bias
/// by the output channel, a linear layer's by the column): no division then, and no words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpilogueRead {
    Kind(ReadKind),
    /// element `row`: the row of C counted over the batches or groups before it (a
    /// convolution's output channel)
    Row,
    /// element `col`: the column of C
    Col,
}

impl EpilogueRead {
    /// What the read adds to an epilogue's key.
    pub fn name(self) -> &'static str {
        match self {
            EpilogueRead::Kind(k) => k.name(),
            EpilogueRead::Row => "row",
            EpilogueRead::Col => "col",
        }
    }
}

/// The names of an epilogue's words, in order: the constants, then the index fields of each
/// input but the product (input `at`) read by its kind.
fn epilogue_fields(reads: &[EpilogueRead], nconsts: usize, at: usize) -> Vec<String> {
    let consts = (0..nconsts).map(|k| format!("k{k}"));
    let fields = (reads.iter().enumerate())
        .filter(|&(j, _)| j != at)
        .flat_map(|(j, &read)| match read {
            EpilogueRead::Kind(kind) => index_fields(kind, j),
            _ => vec![],
        });
    consts.chain(fields).collect()
}

/// The words of an epilogue ([`epilogue_fields`]) for an output of `out`, inputs of `shapes`.
pub fn epilogue_words(
    consts: &[u32],
    reads: &[EpilogueRead],
    shapes: &[Shape],
    out: &Shape,
    at: usize,
) -> Vec<u32> {
    let mut words = consts.to_vec();
    for (j, (&read, shape)) in reads.iter().zip(shapes).enumerate() {
        if let (false, EpilogueRead::Kind(kind)) = (j == at, read) {
            words.extend(index_words(kind, shape, out));
        }
    }
    words
}

/// The WGSL a GEMM with a fused epilogue appends to gemm.wgsl: `epilogue(i, row, col, v)`,
/// the expression at output element `i` (at `row` and `col` of C, see [`EpilogueRead`]) where
/// input `at` (the product, read whole) is the GEMM's value `v`. The other inputs are bound
/// from 4 on, in order (after the GEMM's params, A, B and C); the constants and index fields
/// are words of the GEMM's params tail from `params.gemm.epilogue` on. No input may be read by
/// [`ReadKind::Broadcast`].
pub fn epilogue_source(
    name: &str,
    nodes: &[(Node, DType)],
    leaves: &[DType],
    reads: &[EpilogueRead],
    nconsts: usize,
    at: usize,
) -> Result<String> {
    let mut s = format!("\n// the fused epilogue {name}\n");
    let others = (0..leaves.len()).filter(|&j| j != at);
    for (q, j) in others.enumerate() {
        let t = wgsl_type(leaves[j], "fusion")?;
        let _ = writeln!(
            s,
            "@group(0) @binding({}) var<storage, read> in{j}: array<{t}>;",
            4 + q
        );
    }
    let names = epilogue_fields(reads, nconsts, at);
    let field = |f: &str| {
        let w = names.iter().position(|n| n == f).unwrap_or(names.len());
        format!("params.tail[params.gemm.epilogue + {w}u]")
    };
    value_fn(&mut s, nodes, leaves, &field)?;
    let args: Vec<String> = (reads.iter().enumerate())
        .map(|(j, &read)| match (j == at, read) {
            (true, _) => "v".to_string(),
            (_, EpilogueRead::Kind(k)) => read_with(k, j, "i", &field),
            (_, EpilogueRead::Row) => format!("in{j}[row]"),
            (_, EpilogueRead::Col) => format!("in{j}[col]"),
        })
        .collect();
    let t = wgsl_type(nodes.last().map_or(DType::F32, |n| n.1), "fusion")?;
    let _ = writeln!(
        s,
        "fn epilogue(i: u32, row: u32, col: u32, v: {t}) -> {t} {{\n    return value({});\n}}",
        args.join(", ")
    );
    Ok(s)
}

/// The value of element `e` (a WGSL expression) through `value`, each input read by its kind.
fn value_at(kinds: &[ReadKind], e: &str) -> String {
    let a: Vec<String> = (kinds.iter().enumerate())
        .map(|(j, &k)| read(k, j, e))
        .collect();
    format!("value({})", a.join(", "))
}

/// The loads of a vec4 kernel's step at vec4 index `i`: a vec4 of each whole input (`w{j}`)
/// and the one element of each single-element input.
fn vector_loads(kinds: &[ReadKind], i: &str, suffix: &str) -> String {
    let mut s = String::new();
    for (j, k) in kinds.iter().enumerate() {
        match k {
            ReadKind::Whole => _ = writeln!(s, "    let w{j}{suffix} = in{j}[{i}];"),
            ReadKind::One => _ = writeln!(s, "    let w{j}{suffix} = in{j}[0];"),
            _ => {}
        }
    }
    s
}

/// `value` of each of the 4 lanes of a vec4 step whose first element is `e`: the whole inputs
/// from [`vector_loads`], the others read one lane at a time.
fn lanes(kinds: &[ReadKind], e: &str, suffix: &str) -> [String; 4] {
    ["x", "y", "z", "w"].map(|c| {
        let lane = "xyzw".find(c).unwrap_or(0);
        let a: Vec<String> = (kinds.iter().enumerate())
            .map(|(j, &k)| match k {
                ReadKind::Whole => format!("w{j}{suffix}.{c}"),
                ReadKind::One => format!("w{j}{suffix}"),
                _ => read(k, j, &format!("({e} + {lane}u)")),
            })
            .collect();
        format!("value({})", a.join(", "))
    })
}

/// The entry point of an elementwise kernel: reads its inputs (one element, or a vec4 of each
/// whole input) and stores.
fn elementwise_main(s: &mut String, kinds: &[ReadKind], vec4: bool) {
    let count = if vec4 {
        "params.numel / 4u"
    } else {
        "params.numel"
    };
    let _ = write!(
        s,
        "@compute @workgroup_size({WG})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, \
         @builtin(num_workgroups) nwg: vec3<u32>,\n        \
         @builtin(local_invocation_index) lid: u32) {{\n    \
         let i = group_index(wid, nwg) * {WG}u + lid;\n    \
         if (i >= {count}) {{\n        return;\n    }}\n"
    );
    let store = if vec4 {
        s.push_str(&vector_loads(kinds, "i", ""));
        format!("vec4({})", lanes(kinds, "4u * i", "").join(", "))
    } else {
        value_at(kinds, "i")
    };
    let _ = writeln!(s, "    out[i] = {store};\n}}");
}

/// The entry point of a reduction kernel ([`Reduction`]): short rows fold an invocation each
/// (rows side by side), longer rows a strided run per invocation and then through workgroup
/// memory. Every run is folded 4 steps at a time, so that 4 steps' loads are in flight
/// together. Output `(o, c)` of `[outer, chunks]` covers positions `c * chunk ..` of row `o`.
fn reduction_main(
    s: &mut String,
    r: Reduction,
    kinds: &[ReadKind],
    nodes: &[(Node, DType)],
) -> Result<()> {
    let dtype = nodes.last().map_or(DType::F32, |n| n.1);
    let t = wgsl_type(dtype, "fusion")?;
    let (lowest, highest) = crate::plan::extremes(t);
    let (identity, combine) = match r.op {
        ReduceOp::Max => (lowest.to_string(), "max(a, b)"),
        ReduceOp::Min => (highest.to_string(), "min(a, b)"),
        _ => (format!("{t}(0)"), "a + b"),
    };
    let finish = match r.op {
        ReduceOp::Mean => "a * bitcast<f32>(params.scale)",
        _ => "a",
    };
    let _ = writeln!(
        s,
        "fn combine(a: {t}, b: {t}) -> {t} {{\n    return {combine};\n}}\n\n\
         fn finish(a: {t}) -> {t} {{\n    return {finish};\n}}\n"
    );
    // one step's loads (indented for a loop body) and its value, at element `e`
    let step = |e: &str, k: usize| -> (String, String) {
        // parenthesized: a read appends `% m` or `/ m` to it
        let (suffix, e) = (format!("_{k}"), format!("({e})"));
        if !r.vec4 {
            return (String::new(), value_at(kinds, &e));
        }
        let loads =
            vector_loads(kinds, &format!("{e} / 4u"), &suffix).replace("    let", "        let");
        let [a, b, c, d] = lanes(kinds, &e, &suffix);
        (
            loads,
            format!("combine(combine({a}, {b}), combine({c}, {d}))"),
        )
    };
    // folds positions r = `from`, + `stride`, .. below `last` of row o into acc, 4 steps per
    // iteration
    let run = |from: &str, stride: &str| -> String {
        let mut body = String::new();
        let mut vals = Vec::new();
        for k in 0..4 {
            let (loads, v) = step(&format!("e + {k}u * {stride}"), k);
            body.push_str(&loads);
            vals.push(v);
        }
        let (one_loads, one) = step("e", 0);
        format!(
            "    let first = c * params.chunk;\n    \
             let last = min(first + params.chunk, params.len);\n    \
             var acc: {t} = {identity};\n    var r = {from};\n    \
             for (; r + 3u * {stride} < last; r += 4u * {stride}) {{\n        \
             let e = o * params.len + r;\n{body}        \
             acc = combine(acc, combine(combine({}, {}), combine({}, {})));\n    }}\n    \
             for (; r < last; r += {stride}) {{\n        let e = o * params.len + r;\n\
             {one_loads}        acc = combine(acc, {one});\n    }}\n",
            vals[0], vals[1], vals[2], vals[3]
        )
    };
    let entry = |wg: u32| {
        format!(
            "@compute @workgroup_size({wg})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, \
             @builtin(num_workgroups) nwg: vec3<u32>,\n        \
             @builtin(local_invocation_index) lid: u32) {{\n"
        )
    };
    let width = if r.vec4 { 4 } else { 1 };
    if r.row_wg == 1 {
        // short rows: an invocation per row and chunk
        s.push_str(&entry(WG));
        let _ = write!(
            s,
            "    let g = group_index(wid, nwg) * {WG}u + lid;\n    \
             if (g >= params.outer * params.chunks) {{\n        return;\n    }}\n    \
             let o = g / params.chunks;\n    let c = g % params.chunks;\n{}    \
             out[g] = finish(acc);\n}}\n",
            run("first", &format!("{width}u"))
        );
        return Ok(());
    }
    let wg = r.row_wg;
    let _ = writeln!(s, "var<workgroup> folded: array<{t}, {wg}>;\n");
    s.push_str(&entry(wg));
    let _ = write!(
        s,
        "    let g = group_index(wid, nwg);\n    \
         if (g >= params.outer * params.chunks) {{\n        return;\n    }}\n    \
         let o = g / params.chunks;\n    let c = g % params.chunks;\n{}    \
         folded[lid] = acc;\n    workgroupBarrier();\n    \
         for (var half = {half}u; half > 0u; half = half / 2u) {{\n        \
         if (lid < half) {{\n            \
         folded[lid] = combine(folded[lid], folded[lid + half]);\n        }}\n        \
         workgroupBarrier();\n    }}\n    \
         if (lid == 0u) {{\n        out[g] = finish(folded[0]);\n    }}\n}}\n",
        run(
            &format!("first + {width}u * lid"),
            &format!("{}u", width * wg)
        ),
        half = wg / 2
    );
    Ok(())
}

/// A unary op's constant as a WGSL value of `dtype`, exactly as `map.wgsl` receives it
/// (the planner's bits).
fn lit(c: f64, dtype: DType) -> String {
    let w = crate::plan::bits(c, dtype);
    match dtype {
        DType::I32 => format!("bitcast<i32>({w}u)"),
        DType::U32 | DType::Bool => format!("{w}u"),
        // at run time: Tint rejects an infinite value in a constant expression
        _ => format!("f32_from_bits({w}u)"),
    }
}

/// `v` of dtype `from` converted to `to` with `as` semantics (as map.wgsl's cast).
fn cast(v: &str, from: DType, to: DType) -> Result<String> {
    let ti = wgsl_type(from, "cast")?;
    let to_ty = wgsl_type(to, "cast")?;
    Ok(match (ti, to_ty) {
        _ if to == DType::Bool && from == DType::F32 => {
            // on the bits, so that NaN is true even where drivers assume no NaNs
            format!("select(0u, 1u, (bitcast<u32>({v}) & 0x7fffffffu) != 0u)")
        }
        _ if to == DType::Bool => format!("select(0u, 1u, {v} != {ti}(0))"),
        (a, b) if a == b => v.to_string(),
        ("i32", "u32") => format!("bitcast<u32>({v})"),
        ("u32", "i32") => format!("bitcast<i32>({v})"),
        ("f32", "i32") => {
            format!("select(select(i32({v}), 2147483647i, {v} >= 2147483648.0), 0i, is_nan_({v}))")
        }
        ("f32", "u32") => {
            format!("select(select(u32({v}), 4294967295u, {v} >= 4294967296.0), 0u, is_nan_({v}))")
        }
        _ => format!("{to_ty}({v})"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substitutes_whole_identifiers_only() {
        let e = substitute(
            "select(max(x, y), x + y, is_nan_(x) || is_nan_(y))",
            &[("x", "n0"), ("y", "n1")],
        );
        assert_eq!(
            e,
            "select(max(n0, n1), n0 + n1, is_nan_(n0) || is_nan_(n1))"
        );
        assert_eq!(
            substitute("max(v, T(0)) + 1.0e0", &[("v", "n2"), ("T", "i32")]),
            "max(n2, i32(0)) + 1.0e0"
        );
    }

    #[test]
    fn middle_leaves_step_over_the_trailing_broadcast() {
        let out = Shape::from([2, 3, 5, 4]);
        assert_eq!(trailing_broadcast(&Shape::from([5, 1]), &out), 4);
        assert_eq!(trailing_broadcast(&Shape::from([3, 1, 1]), &out), 20);
        assert_eq!(trailing_broadcast(&Shape::from([1, 3, 5, 1]), &out), 4);
    }

    #[test]
    fn broadcast_strides_right_align() {
        let out = Shape::from([2, 3, 4]);
        assert_eq!(broadcast_strides(&Shape::from([4]), &out), [0, 0, 1]);
        assert_eq!(broadcast_strides(&Shape::from([3, 1]), &out), [0, 1, 0]);
        assert_eq!(broadcast_strides(&Shape::from([2, 3, 4]), &out), [12, 4, 1]);
    }
}
