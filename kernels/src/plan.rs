//! Backend-neutral planning: an [`Op`] with its input views and output metadata becomes a
//! [`Plan`], a list of kernel [`Dispatch`]es. The wgpu backend executes plans; the CUDA backend
//! executes the same plans with the kernels translated from WGSL.
//!
//! Conventions every executor follows:
//! - Every element is 4 bytes on the device ([`ELEM_BYTES`]): f32, i32, u32, and bool stored as a
//!   u32 0/1. Offsets, shapes and strides in params are in elements.
//! - Binding 0 of every kernel is `params`, filled from [`Dispatch::params`]: u32 words, read as
//!   a typed header ([`crate::header`]); bindings 1.. are
//!   [`Dispatch::buffers`] in order. A kernel's last bindings are its only `read_write` ones
//!   (the outputs it writes; one, except Adam's three).
//! - Dispatches of one plan run in order; each sees the writes of the previous ones.
//! - Workgroups follow [`Dispatch::workgroups`] exactly (x, y, z, each at most [`MAX_GRID`]).
//!
//! ```
//! use kiln_core::{DType, Layout, Op, Shape, UnaryOp};
//! use kiln_kernels::plan::{plan, Buffer, ViewMeta};
//! let x = Layout::contiguous(Shape::from([3, 5]));
//! let p = plan(&Op::Unary(UnaryOp::Exp), &[ViewMeta::new(&x, DType::F32)], &[(DType::F32, Shape::from([3, 5]))]).unwrap();
//! assert_eq!(p.dispatches.len(), 1);
//! assert_eq!(p.dispatches[0].buffers, vec![Buffer::Input(0), Buffer::Output(0)]);
//! assert!(p.dispatches[0].kernel.wgsl().unwrap().contains("exp(v)"));
//! ```

use crate::header::{
    AdamStepParams, ArangeParams, BinaryParams, ColumnsParams, ConvGeometry, ConvParams, EyeParams,
    FullParams, GatherParams, Gemm, Header, MapParams, MatmulParams, OneHotParams, PoolGeometry,
    PoolParams, RandomParams, ReduceParams, RowsParams, ScatterAddParams,
};
use crate::preprocess::{Defines, preprocess};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use kiln_core::{
    AdamParams, BinaryOp, CmpOp, Conv2dParams, DType, Error, Layout, Meta, Op, Pool2d,
    Pool2dParams, ReduceOp, Result, Shape, UnaryOp, View,
};

/// Bytes of one element on the device, for every dtype a plan accepts.
pub const ELEM_BYTES: u64 = 4;
/// The largest workgroup count per grid dimension (WebGPU's guaranteed minimum).
pub const MAX_GRID: u32 = 65535;
/// Invocations per workgroup of the elementwise, index and pooling kernels.
pub const WG: u32 = 256;

/// A kernel variant: the file and the defines that specialise it. Pipelines are cached by it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KernelKey {
    /// The kernel file in `kernels/wgsl/` (`"map.wgsl"`).
    pub file: &'static str,
    /// The defines (dtype, op, tile sizes...).
    pub defines: Defines,
}

impl KernelKey {
    pub(crate) fn new(file: &'static str, defines: &[(&str, &str)]) -> Self {
        // Inserted one by one: `collect` into a map sorts first, a sort's code in the web package
        // (which has a size budget) for a handful of entries.
        let mut map = Defines::new();
        for (k, v) in defines {
            map.insert(k.to_string(), v.to_string());
        }
        KernelKey { file, defines: map }
    }
    /// The preprocessed WGSL source of this variant (entry point `main`); for a custom op's
    /// kernel, the registered source.
    pub fn wgsl(&self) -> Result<String> {
        if self.file == crate::custom::FILE {
            return crate::custom::source(self);
        }
        let src = crate::kernels::source(self.file)
            .ok_or_else(|| Error::invalid("wgsl", format!("no kernel file named {}", self.file)))?;
        let mut wgsl = preprocess(src, &self.defines, &crate::kernels::source)
            .map_err(|e| e.context(self.label()))?;
        // a GEMM's fused epilogue, which its `put_c` calls
        if let Some(name) = self.defines.get("EPILOGUE") {
            wgsl.push_str(&crate::fusion::epilogue::source(name)?);
        }
        Ok(wgsl)
    }
    /// A short readable name (`"map.wgsl OP=exp T=f32"`) for labels and messages.
    pub fn label(&self) -> String {
        let mut s = String::from(self.file);
        for (k, v) in &self.defines {
            s.push_str(&format!(" {k}={v}"));
        }
        s
    }
}

/// Which buffer a binding refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Buffer {
    /// The storage of input `i` of the op (its view's offset and strides are in the params).
    Input(usize),
    /// Output `i` of the op: a fresh, contiguous buffer of [`Plan::output_bytes`]`[i]`.
    Output(usize),
    /// Temporary buffer `i` of [`Plan::scratch_bytes`], alive for the whole plan.
    Scratch(usize),
}

/// One kernel launch.
#[derive(Clone, Debug, PartialEq)]
pub struct Dispatch {
    /// The kernel variant.
    pub kernel: KernelKey,
    /// The words bound at binding 0.
    pub params: Vec<u32>,
    /// The buffers bound at 1, 2, ...
    pub buffers: Vec<Buffer>,
    /// Workgroups along x, y, z.
    pub workgroups: [u32; 3],
}

/// What an op compiles to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Kernel launches, in order.
    pub dispatches: Vec<Dispatch>,
    /// Sizes of the temporary buffers the dispatches use.
    pub scratch_bytes: Vec<u64>,
    /// Size of each output buffer (at least [`ELEM_BYTES`], so empty tensors still get one).
    pub output_bytes: Vec<u64>,
}

/// An input as the planner sees it: where its elements are, and their type.
#[derive(Clone, Debug)]
pub struct ViewMeta {
    /// Shape, strides and offset in elements.
    pub layout: Layout,
    /// Element type.
    pub dtype: DType,
}

impl ViewMeta {
    /// An input with this layout and dtype.
    pub fn new(layout: &Layout, dtype: DType) -> Self {
        ViewMeta {
            layout: layout.clone(),
            dtype,
        }
    }
}

impl ViewMeta {
    /// Its dtype and shape.
    pub fn meta(&self) -> Meta {
        (self.dtype, self.layout.shape().clone())
    }
}

/// The word of gemm.wgsl's params that says where a fused epilogue's words start in the tail
/// ([`Gemm`]'s `epilogue`).
const EPILOGUE_WORD: usize = 7;

/// The words of a gemm.wgsl launch's params before its tail (the mode's header).
fn gemm_header_words(key: &KernelKey) -> usize {
    match key.defines.get("MODE").map(String::as_str) {
        Some("matmul") => MatmulParams::default().to_words().len(),
        _ => ConvParams::default().to_words().len(),
    }
}

impl From<View<'_>> for ViewMeta {
    fn from(v: View<'_>) -> Self {
        ViewMeta::new(v.layout, v.dtype)
    }
}

/// The WGSL element type that stores `dtype` on the device.
pub fn wgsl_type(dtype: DType, op: &str) -> Result<&'static str> {
    match dtype {
        DType::F32 => Ok("f32"),
        DType::I32 => Ok("i32"),
        DType::U32 | DType::Bool => Ok("u32"),
        DType::F16 | DType::F64 => Err(Error::unsupported(
            op.to_string(),
            format!(
                "{dtype} tensors are not supported by the GPU kernels (f32, i32, u32, bool are)"
            ),
        )),
    }
}

/// Compiles `op` on `inputs` (validated by [`Op::infer`], which gave `outputs`: each one's dtype
/// and shape) into kernel launches.
pub fn plan(op: &Op, inputs: &[ViewMeta], outputs: &[Meta]) -> Result<Plan> {
    let name = op.name();
    let Some((out_dtype, out_shape)) = outputs.first() else {
        return Err(Error::invalid(name, "asked for no outputs"));
    };
    let (out_dtype, numel) = (*out_dtype, out_shape.numel());
    let n = u32_len(numel, name)?;
    let bytes = |(_, s): &Meta| (s.numel().max(1) as u64) * ELEM_BYTES;
    let mut p = Planner {
        name,
        plan: Plan {
            output_bytes: outputs.iter().map(bytes).collect(),
            ..Plan::default()
        },
    };
    let ty = wgsl_type(out_dtype, name)?;
    for i in inputs {
        wgsl_type(i.dtype, name)?;
        u32_len(i.layout.shape().numel(), name)?;
    }
    let out = Layout::contiguous(out_shape.clone());
    if n == 0 {
        return Ok(p.plan);
    }
    match op {
        Op::Full { value, .. } => {
            let value = bits(*value, out_dtype);
            p.fill("full", ty, n, FullParams { numel: n, value }.to_words())
        }
        Op::Arange { start, step, .. } => {
            let (start, step) = (bits(*start, out_dtype), bits(*step, out_dtype));
            let h = ArangeParams {
                numel: n,
                start,
                step,
            };
            p.fill("arange", ty, n, h.to_words())
        }
        Op::Eye { m, .. } => {
            let h = EyeParams {
                numel: n,
                columns: *m as u32,
            };
            p.fill("eye", ty, n, h.to_words())
        }
        Op::RandUniform { .. } | Op::RandNormal { .. } => p.random(op, n),
        Op::Unary(u) => {
            let [c0, c1] = u.consts().map(|c| bits(c, out_dtype));
            let key = KernelKey::new(
                "map.wgsl",
                &[
                    ("OP", u.name()),
                    ("EXPR", u.wgsl(out_dtype)),
                    ("TI", ty),
                    ("TO", ty),
                    ("WG", "256"),
                ],
            );
            p.elementwise(
                key,
                &out,
                &[(Buffer::Input(0), &inputs[0].layout)],
                Elementwise::Map([c0, c1]),
            )
        }
        Op::Cast { dtype } => {
            let ti = wgsl_type(inputs[0].dtype, name)?;
            let (op, to_bool) = if inputs[0].dtype == *dtype {
                ("copy", "0")
            } else {
                ("cast", if *dtype == DType::Bool { "1" } else { "0" })
            };
            let key = KernelKey::new(
                "map.wgsl",
                &[
                    ("OP", op),
                    ("TI", ti),
                    ("TO", ty),
                    ("TO_BOOL", to_bool),
                    ("WG", "256"),
                ],
            );
            let x = [(Buffer::Input(0), &inputs[0].layout)];
            p.elementwise(key, &out, &x, Elementwise::Map([0, 0]))
        }
        Op::Contiguous => p.copy(ty, &out, Buffer::Input(0), &inputs[0].layout),
        Op::Binary(b) => p.binary(b.name(), b.wgsl(out_dtype), inputs, ty, ty, &out),
        Op::Compare(c) => {
            let ti = wgsl_type(inputs[0].dtype, name)?;
            let expr = format!("select(0u, 1u, {})", c.wgsl());
            p.binary(c.name(), &expr, inputs, ti, "u32", &out)
        }
        Op::Where => {
            let key = KernelKey::new(
                "binary.wgsl",
                &[("OP", "where"), ("T", ty), ("TO", ty), ("WG", "256")],
            );
            let views: Vec<_> = (0..3)
                .map(|i| (Buffer::Input(i), &inputs[i].layout))
                .collect();
            p.elementwise(key, &out, &views, Elementwise::Binary)
        }
        Op::Reduce {
            op: r,
            axes,
            keepdim: _,
        } => p.reduce(
            *r,
            axes,
            &inputs[0].layout,
            [Buffer::Input(0), Buffer::Output(0)],
            wgsl_type(inputs[0].dtype, name)?,
            ty,
        ),
        Op::Cumsum { axis, reverse } => p.rows(
            RowOp {
                reverse: *reverse,
                ..RowOp::new("cumsum")
            },
            inputs,
            *axis,
            ty,
        ),
        Op::Softmax { axis, causal } => p.rows(
            RowOp {
                causal: *causal,
                ..RowOp::new("softmax")
            },
            inputs,
            *axis,
            ty,
        ),
        Op::LogSoftmax { axis } => p.rows(RowOp::new("log_softmax"), inputs, *axis, ty),
        // the ops' names are rows.wgsl's OPs
        Op::Normalize { eps } | Op::NormalizeBackward { eps } => {
            let last = out_shape.rank() - 1;
            if ty != "f32" {
                return Err(Error::unsupported(
                    name,
                    format!("runs on f32 here, not {ty}"),
                ));
            }
            p.rows(
                RowOp {
                    eps: *eps as f32,
                    ..RowOp::new(name)
                },
                inputs,
                last,
                ty,
            )
        }
        Op::Matmul => p.matmul(&inputs[0], &inputs[1], out_shape, ty),
        Op::Reshape { .. } | Op::Permute { .. } | Op::Slice { .. } | Op::Expand { .. } => {
            Err(Error::invalid(
                name,
                "view ops change only the layout and never reach a backend",
            ))
        }
        Op::Concat { axis } => {
            let mut at = 0;
            for (i, input) in inputs.iter().enumerate() {
                let len = input.layout.shape().dims()[*axis];
                let mut ranges: Vec<_> = out_shape
                    .dims()
                    .iter()
                    .map(|&d| kiln_core::SliceRange {
                        start: 0,
                        end: d,
                        step: 1,
                    })
                    .collect();
                ranges[*axis] = kiln_core::SliceRange {
                    start: at,
                    end: at + len,
                    step: 1,
                };
                at += len;
                let dst = out.slice(&ranges)?;
                p.copy(ty, &dst, Buffer::Input(i), &input.layout)?;
            }
            Ok(())
        }
        Op::Pad { pads, value } => {
            let value = bits(*value, out_dtype);
            p.fill("full", ty, n, FullParams { numel: n, value }.to_words())?;
            let x = &inputs[0].layout;
            let ranges: Vec<_> = out_shape
                .dims()
                .iter()
                .enumerate()
                .map(|(i, _)| {
                    let before = pads.get(i).map_or(0, |p| p.0);
                    kiln_core::SliceRange {
                        start: before,
                        end: before + x.shape().dims()[i],
                        step: 1,
                    }
                })
                .collect();
            let dst = out.slice(&ranges)?;
            p.copy(ty, &dst, Buffer::Input(0), x)
        }
        Op::Gather { axis } | Op::IndexSelect { axis } => {
            let x = &inputs[0].layout;
            let idx = &inputs[1].layout;
            let rank = out_shape.rank();
            let (index_offset, index_strides) = if matches!(op, Op::Gather { .. }) {
                (idx.offset(), strides_u32(idx.strides(), name)?)
            } else {
                let mut s = vec![0; rank];
                s[*axis] = strides_u32(idx.strides(), name)?[0];
                (idx.offset(), s)
            };
            let mut tail: Vec<u32> = out_shape.dims().iter().map(|&d| d as u32).collect();
            push_view(&mut tail, x.offset(), &strides_u32(x.strides(), name)?);
            push_view(&mut tail, index_offset, &index_strides);
            let h = GatherParams {
                numel: n,
                rank: rank as u32,
                axis: *axis as u32,
                axis_len: x.shape().dims()[*axis] as u32,
            };
            let key = KernelKey::new(
                "index.wgsl",
                &[
                    ("MODE", "gather"),
                    ("T", ty),
                    ("IDX", wgsl_type(inputs[1].dtype, name)?),
                    ("WG", "256"),
                ],
            );
            p.launch(
                key,
                h.with_tail(tail),
                vec![Buffer::Input(0), Buffer::Input(1), Buffer::Output(0)],
                n,
            )
        }
        Op::ScatterAdd { axis } => {
            let rank = out_shape.rank();
            let index_dims = inputs[1].layout.shape().dims();
            let mut tail: Vec<u32> = out_shape
                .dims()
                .iter()
                .chain(index_dims)
                .map(|&d| d as u32)
                .collect();
            for input in inputs {
                let l = &input.layout;
                push_view(&mut tail, l.offset(), &strides_u32(l.strides(), name)?);
            }
            // Each output walks the whole index axis: with few outputs (an embedding's gradient:
            // a small table, many tokens) the walk is cut into chunks summed by a column sum.
            let len = index_dims[*axis];
            let want = (SCATTER_THREADS / n.max(1) as usize).min(len / SCATTER_CHUNK_MIN_LEN);
            let (chunk, chunks) = even_chunks(len, want, 1);
            let h = ScatterAddParams {
                numel: n,
                rank: rank as u32,
                axis: *axis as u32,
                chunk: chunk as u32,
            };
            let key = KernelKey::new(
                "index.wgsl",
                &[
                    ("MODE", "scatter_add"),
                    ("T", ty),
                    ("IDX", wgsl_type(inputs[1].dtype, name)?),
                    ("WG", "256"),
                ],
            );
            let sums = match chunks {
                1 => Buffer::Output(0),
                _ => p.scratch(chunks * n as usize),
            };
            let bufs = vec![Buffer::Input(0), Buffer::Input(1), Buffer::Input(2), sums];
            p.launch(
                key,
                h.with_tail(tail),
                bufs,
                u32_len(chunks * n as usize, name)?,
            )?;
            if chunks > 1 {
                let partials = Layout::contiguous(Shape::from([chunks, n as usize]));
                p.reduce(
                    ReduceOp::Sum,
                    &[0],
                    &partials,
                    [sums, Buffer::Output(0)],
                    ty,
                    ty,
                )?;
            }
            Ok(())
        }
        Op::Custom(c) => match crate::fusion::epilogue::lookup(&c.name) {
            Some(ep) => p.epilogue(&ep, c, inputs, &outputs[0]),
            None => p.custom(c, inputs, &outputs[0]),
        },
        Op::AdamStep(a) => {
            if ty != "f32" {
                return Err(Error::unsupported(
                    name,
                    format!("expects f32 tensors on the GPU, got {}", inputs[0].dtype),
                ));
            }
            // param, grad, the two moments and the scale, each contiguous from its offset
            let mut offsets = [0; 5];
            let mut bufs = Vec::with_capacity(7);
            for (i, input) in inputs.iter().enumerate() {
                let (buf, offset) = p.contiguous(i, input, ty)?;
                bufs.push(buf);
                offsets[i] = offset;
            }
            bufs.extend((0..2).map(Buffer::Output));
            let [w_offset, g_offset, m_offset, v_offset, s_offset] = offsets;
            let (step_size, inv_sqrt_bc2) = a.corrections();
            let f = |c: f64| (c as f32).to_bits();
            let h = AdamStepParams {
                numel: n,
                w_offset,
                g_offset,
                m_offset,
                v_offset,
                s_offset,
                beta1: f(a.beta1),
                beta2: f(a.beta2),
                eps: f(a.eps),
                weight_decay: f(a.weight_decay),
                step_size: f(step_size),
                inv_sqrt_bc2: f(inv_sqrt_bc2),
                shrink: f(1.0 - a.lr * a.weight_decay),
                decoupled: u32::from(a.decoupled),
            };
            let scaled = if inputs.len() == 5 { "1" } else { "0" };
            let key = KernelKey::new("adam.wgsl", &[("WG", "256"), ("SCALED", scaled)]);
            p.launch(key, h.to_words(), bufs, n)
        }
        Op::OneHot { classes, .. } => {
            let idt = wgsl_type(inputs[0].dtype, name)?;
            let (buf, offset) = p.contiguous(0, &inputs[0], idt)?;
            let key = KernelKey::new(
                "index.wgsl",
                &[("MODE", "one_hot"), ("T", ty), ("IDX", idt), ("WG", "256")],
            );
            let h = OneHotParams {
                numel: n,
                classes: *classes as u32,
                index_offset: offset,
            };
            p.launch(key, h.to_words(), vec![buf, Buffer::Output(0)], n)
        }
        Op::Conv2d(c) => {
            // conv2d terms: x (N, C, H, W), weight (O, C/g, KH, KW), y (N, O, OH, OW)
            let (x, w) = (dims4(&inputs[0]), dims4(&inputs[1]));
            let y = out_shape.dims();
            let geo = ConvGeometry::new(x, [w[0], w[2], w[3]], [y[2], y[3]], c);
            let m = w[0] / c.groups;
            let (k, cols) = (w[1] * w[2] * w[3], x[0] * y[2] * y[3]);
            p.conv(GemmMode::Conv, inputs, geo, [m, cols, k], ty)
        }
        Op::ConvTranspose2d { params: c, .. } => {
            // the input gradient of conv2d(x: out_shape, weight) at dy = input 0
            let (dy, w) = (dims4(&inputs[0]), dims4(&inputs[1]));
            let x = out_dims4(out_shape);
            let geo = ConvGeometry::new(x, [w[0], w[2], w[3]], [dy[2], dy[3]], c);
            let m = x[1] / c.groups;
            let (k, cols) = ((w[0] / c.groups) * w[2] * w[3], x[0] * x[2] * x[3]);
            p.conv(GemmMode::ConvTranspose, inputs, geo, [m, cols, k], ty)
        }
        Op::Conv2dBackwardWeight { params: c, kernel } => {
            let (x, dy) = (dims4(&inputs[0]), dims4(&inputs[1]));
            let geo = ConvGeometry::new(x, [dy[1], kernel[0], kernel[1]], [dy[2], dy[3]], c);
            let m = dy[1] / c.groups;
            let (k, cols) = (
                dy[0] * dy[2] * dy[3],
                (x[1] / c.groups) * kernel[0] * kernel[1],
            );
            p.conv(GemmMode::ConvWeightGrad, inputs, geo, [m, cols, k], ty)
        }
        Op::Pool2d(pool) => {
            let x = dims4(&inputs[0]);
            p.pool(pool, false, inputs, x, out_dims4(out_shape), ty)
        }
        Op::Pool2dBackward(pool) => {
            let (x, dy) = (dims4(&inputs[0]), dims4(&inputs[1]));
            p.pool(pool, true, inputs, x, dy, ty)
        }
    }?;
    Ok(p.plan)
}

struct Planner {
    name: &'static str,
    plan: Plan,
}

impl ConvGeometry {
    fn new(x: [usize; 4], o_kh_kw: [usize; 3], oh_ow: [usize; 2], c: &Conv2dParams) -> Self {
        let [n, ci, h, w] = x.map(|d| d as u32);
        let [co, kh, kw] = o_kh_kw.map(|d| d as u32);
        let [oh, ow] = oh_ow.map(|d| d as u32);
        let [sh, sw] = c.stride.map(|d| d as u32);
        let [ph, pw] = c.padding.map(|d| d as u32);
        let [dh, dw] = c.dilation.map(|d| d as u32);
        let groups = c.groups as u32;
        #[rustfmt::skip]
        let geo = ConvGeometry { n, ci, h, w, co, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, groups };
        geo
    }

    /// gemm.wgsl's table of the K loop's steps, 4 words per entry (A's offset, B's offset, tap
    /// row and column offsets): for conv one entry per k = (input channel, ky, kx) of group 0,
    /// for conv_t per k = (output channel, ky, kx), for conv_wgrad per output position (oy, ox)
    /// of an image (its k = (n, oy, ox) and the kernel adds the image's offsets).
    fn k_steps(&self, mode: GemmMode, k_len: usize) -> Vec<u32> {
        let ConvGeometry {
            ci,
            h,
            w,
            oh,
            ow,
            kh,
            kw,
            sh,
            sw,
            dh,
            dw,
            groups,
            ..
        } = *self;
        let (kk, ci_g) = (kh * kw, ci / groups.max(1));
        let entry = |k: u32| match mode {
            GemmMode::Conv => [k, (k / kk) * h * w, (k % kk / kw) * dh, (k % kw) * dw],
            GemmMode::ConvTranspose => {
                let (o, tap) = (k / kk, k % kk);
                [
                    o * ci_g * kk + tap,
                    o * oh * ow,
                    (tap / kw) * dh,
                    (tap % kw) * dw,
                ]
            }
            GemmMode::Matmul | GemmMode::ConvWeightGrad => [k, 0, (k / ow) * sh, (k % ow) * sw],
        };
        let entries = match mode {
            GemmMode::Matmul => 0,
            GemmMode::ConvWeightGrad => (oh * ow).min(k_len as u32),
            GemmMode::Conv | GemmMode::ConvTranspose => k_len as u32,
        };
        (0..entries).flat_map(entry).collect()
    }
}

/// The fast paths of map.wgsl and binary.wgsl (described there) an elementwise launch can take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fast {
    /// The strided kernel.
    None,
    /// Every view one contiguous, 4-aligned run: one vec4 per invocation.
    Vec4,
    /// As `Vec4` for out and one input of a binary op, while the other (`"a"` or `"b"`) repeats:
    /// element e of out reads its element (e / inner) % period. A scalar is (1, 1), a row of a
    /// multiple of 4 (period, 1), a channel of NCHW (C, H * W a multiple of 4).
    Bcast(&'static str, u32, u32),
    /// map.wgsl only: every view walks its innermost axis contiguously, in runs of a multiple of
    /// 4 from multiples of 4 (a permuted copy such as a head split, a pad's interior): one vec4
    /// per invocation, the strided index in units of vec4 (so a quarter of the divisions).
    Strided4,
}

impl Fast {
    /// The path for a launch over coalesced `dims` whose views (out first, then the inputs) have
    /// `strides` and `offsets`; `binary` allows `Bcast` (a and b are the second and third views).
    fn of(dims: &[usize], strides: &[Vec<usize>], offsets: &[usize], binary: bool) -> Fast {
        let n: usize = dims.iter().product();
        if !n.is_multiple_of(4) || !offsets[0].is_multiple_of(4) {
            return Fast::None;
        }
        let out = strides[0].as_slice();
        if strides.iter().all(|s| *s == [1]) && x4(offsets) {
            return Fast::Vec4;
        }
        let out_flat = match (dims, out) {
            (_, [1]) => true,
            ([_, c], [s, 1]) => s == c,
            ([_, c, h], [s, t, 1]) => t == h && *s == c * h,
            _ => false,
        };
        if !binary || !out_flat {
            return Fast::None;
        }
        // a view walked as out is (aligned), or one repeating along it
        let like_out = |v: usize| strides[v] == out && offsets[v].is_multiple_of(4);
        let period = |v: usize| match (dims, strides[v].as_slice()) {
            (_, [0]) => Some((1, 1)),
            ([_, c], [0, 1]) if c.is_multiple_of(4) => Some((*c as u32, 1)),
            ([c, h], [1, 0]) | ([_, c, h], [0, 1, 0]) if h.is_multiple_of(4) => {
                Some((*c as u32, *h as u32))
            }
            _ => None,
        };
        match (period(1), period(2)) {
            (None, Some((p, inner))) if like_out(1) => Fast::Bcast("b", p, inner),
            (Some((p, inner)), None) if like_out(2) => Fast::Bcast("a", p, inner),
            _ => Fast::None,
        }
    }

    /// `key` with the defines of this path.
    fn key(self, mut key: KernelKey) -> KernelKey {
        let mut set = |k: &str, v: &str| key.defines.insert(k.to_string(), v.to_string());
        match self {
            Fast::None => {}
            Fast::Vec4 => {
                set("VEC4", "1");
            }
            Fast::Strided4 => {
                set("VEC4", "1");
                set("STRIDED", "1");
            }
            Fast::Bcast(which, ..) => {
                set("VEC4", "1");
                set("BCAST", which);
            }
        }
        key
    }
}

/// The lowest and highest values of WGSL type `ty` (f32 with infinities, i32, u32) as WGSL
/// expressions: the identities of max and min.
pub(crate) fn extremes(ty: &str) -> (&'static str, &'static str) {
    match ty {
        "f32" => ("f32_from_bits(0xff800000u)", "f32_from_bits(0x7f800000u)"),
        "i32" => ("i32(-2147483647 - 1)", "2147483647i"),
        _ => ("0u", "0xffffffffu"),
    }
}

/// Whether a launch over coalesced `dims` (rank >= 2) can take [`Fast::Strided4`]: every view's
/// innermost stride 1, the innermost length, the other strides and the offsets multiples of 4.
fn strided4(dims: &[usize], strides: &[Vec<usize>], offsets: &[usize]) -> bool {
    dims.len() >= 2
        && dims[dims.len() - 1].is_multiple_of(4)
        && x4(offsets)
        && strides.iter().all(|s| {
            let (last, outer) = s.split_last().expect("one stride per axis");
            *last == 1 && x4(outer)
        })
}

/// The header of an elementwise launch, by kernel file.
#[derive(Clone, Copy, Debug)]
enum Elementwise {
    /// map.wgsl (unary, cast, copy) with the op's two constants.
    Map([u32; 2]),
    /// binary.wgsl (binary ops, comparisons, where).
    Binary,
}

/// The modes of gemm.wgsl: a batched matmul, or a convolution as an implicit GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GemmMode {
    Matmul,
    Conv,
    /// conv2d's input gradient
    ConvTranspose,
    /// conv2d's weight gradient
    ConvWeightGrad,
}

impl GemmMode {
    fn define(self) -> &'static str {
        match self {
            GemmMode::Matmul => "matmul",
            GemmMode::Conv => "conv",
            GemmMode::ConvTranspose => "conv_t",
            GemmMode::ConvWeightGrad => "conv_wgrad",
        }
    }
}

/// A tile shape of gemm.wgsl: a workgroup computes BM x BN of C, staging BK-deep slices; each
/// invocation holds TM x TN of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct GemmTile {
    bm: usize,
    bn: usize,
    bk: usize,
    tm: usize,
    tn: usize,
}

impl GemmTile {
    /// Every shape `pick` chooses from. Workgroup memory is 16 * BK * (BM / 4 + 1 + BN / 4)
    /// bytes (8.3, 12.3, 6.3, 8.3 and 2.2 KiB), within WebGPU's guaranteed 16 KiB; each shape stages
    /// whole vec4s per invocation (BK * BM / 4 and BK * BN / 4 are multiples of the workgroup).
    /// Tried and dropped, on the MNIST CNN at batch 256: 64 x 128 tiles of 8 x 8 for conv2
    /// (H200: 419 us against 251 us in 64 x 64), and 32 x 128 tiles of 4 x 8 for the 32-row
    /// convolutions (H100: conv2's input gradient 512 us against 369 us in 32 x 64; the larger
    /// block per invocation holds more registers, so fewer workgroups hide the gathers' latency).
    /// The last, 32 x 32 in 8-deep slices, is for forward convolutions of at most 32 output
    /// channels: it stages one vec4 of each operand per invocation (STAGE_ONE in gemm.wgsl), which
    /// ran the MNIST CNN's conv1 at batch 64 in 80 ms against 181 ms in 32 x 64 on SwiftShader.
    /// Their gradients keep 32 x 64 (measured on GPUs, above); this one was not.
    const ALL: [GemmTile; 5] = [
        GemmTile::new(128, 128, 8, 8, 8),
        GemmTile::new(128, 64, 16, 8, 4),
        GemmTile::new(32, 64, 16, 4, 4),
        GemmTile::new(64, 64, 16, 4, 4),
        GemmTile::new(32, 32, 8, 4, 4),
    ];
    /// Matmuls of at most 4 rows: gemm.wgsl's matrix-vector kernel, an invocation per column
    /// (TN = 1 marks it). In 32- or 64-row tiles a batch-1 linear layer spent 97% of its
    /// multiply-adds on padding rows: MNIST's fc1 in the page (SwiftShader) took 142 ms.
    const SKINNY: GemmTile = GemmTile::new(4, 64, 4, 4, 1);
    /// Workgroups that keep a large GPU busy: a larger tile is only worth it when the output
    /// still has about this many of them (a 1024 x 1024 product in 128 x 128 tiles is 64
    /// workgroups, which leaves most of a 132-multiprocessor GPU idle).
    const BUSY: usize = 192;

    const fn new(bm: usize, bn: usize, bk: usize, tm: usize, tn: usize) -> Self {
        GemmTile { bm, bn, bk, tm, tn }
    }

    /// The larger the block of C per invocation, the more multiply-adds per value read from
    /// workgroup memory: the largest tile that still gives BUSY workgroups, a 32-row tile for
    /// outputs of at most 32 rows (convolutions with few channels: 32 x 32 for forward ones,
    /// 32 x 64 for the rest), else 64 x 64; matmuls of at most 4 rows take SKINNY. A 32-row
    /// output takes 32 x 64 even when it has fewer than 64 columns: MNIST's conv1 weight
    /// gradient ([32, 9], K = 173,056, split 492 ways) took 51.8 us in it against 82.7 us in
    /// 64 x 64 (H100, batch 256), and 32 x 32 was no faster.
    fn pick(mode: GemmMode, m: usize, n: usize, batches: usize) -> Self {
        if mode == GemmMode::Matmul && m <= Self::SKINNY.bm {
            return Self::SKINNY;
        }
        let [big, tall, short, small, thin] = Self::ALL;
        let tiles = |t: GemmTile| m.div_ceil(t.bm) * n.div_ceil(t.bn) * batches;
        if m >= 512 && n >= 512 && tiles(big) >= Self::BUSY {
            big
        } else if m >= 128 && n >= 64 && tiles(tall) >= Self::BUSY {
            tall
        } else if m <= thin.bm && n >= thin.bn && mode == GemmMode::Conv {
            thin
        } else if m <= short.bm {
            short
        } else {
            small
        }
    }

    fn key(self, mode: GemmMode, ty: &str) -> KernelKey {
        let wg = (self.bm / self.tm) * (self.bn / self.tn);
        // gemm.wgsl holds a single staged vec4 by name rather than in arrays (faster where
        // private arrays live in memory: SwiftShader).
        let stage_one = self.bk * self.bm / 4 == wg && self.bk * self.bn / 4 == wg;
        let [bm, bn, bk, tm, tn, wg] =
            [self.bm, self.bn, self.bk, self.tm, self.tn, wg].map(|v| v.to_string());
        KernelKey::new(
            "gemm.wgsl",
            &[
                ("MODE", mode.define()),
                ("T", ty),
                ("BM", &bm),
                ("BN", &bn),
                ("BK", &bk),
                ("TM", &tm),
                ("TN", &tn),
                ("WG", &wg),
                ("STAGE_ONE", if stage_one { "1" } else { "0" }),
                ("SKINNY", if self.tn == 1 { "1" } else { "0" }),
            ],
        )
    }
}

/// Workgroups a chunked reduction aims for (see `reduce_in_chunks`).
const REDUCE_WORKGROUPS: usize = 512;
/// Elements below which a reduction is left in one pass.
const REDUCE_CHUNK_MIN_LEN: usize = 16 << 10;

/// Into how many chunks to cut a reduction of `n_out` outputs over the (coalesced) reduced
/// dims `rd`: only where few outputs would leave the GPU idle, each chunk long enough to be
/// worth a workgroup (see [`chunks`]).
fn reduction_chunks(op: ReduceOp, n_out: u32, rd: &[usize], same_type: bool) -> Option<usize> {
    let (n_out, len) = (n_out as usize, rd.iter().product::<usize>());
    if n_out * 2 >= REDUCE_WORKGROUPS || len < REDUCE_CHUNK_MIN_LEN {
        return None;
    }
    chunks(op, same_type, rd, REDUCE_WORKGROUPS / n_out.max(1), 1024)
}

/// Whether reducing parts and then the parts' results gives the op's result (the mean of
/// equal parts' means is the mean).
fn combines(op: ReduceOp) -> bool {
    matches!(
        op,
        ReduceOp::Sum | ReduceOp::Mean | ReduceOp::Max | ReduceOp::Min | ReduceOp::Prod
    )
}

/// The shortest innermost run that `reduce` reduces first, as rows: shorter runs would leave
/// partials nearly as large as the input.
const SPLIT_MIN_RUN: usize = 32;

/// The largest number of chunks, 2 to `want`, that the reduced dims `rd` cut into with at
/// least `min_len` elements each: only for ops whose chunks combine with the op itself (the
/// mean of equal chunks' means is the mean), and only a divisor of the outermost reduced dim,
/// so that the chunks are a plain view.
fn chunks(
    op: ReduceOp,
    same_type: bool,
    rd: &[usize],
    want: usize,
    min_len: usize,
) -> Option<usize> {
    if !combines(op) || !same_type {
        return None;
    }
    let (outer, len) = (*rd.first()?, rd.iter().product::<usize>());
    (2..=want.min(outer))
        .rev()
        .find(|c| outer % c == 0 && len / c >= min_len)
}

/// Row lengths that take every path and workgroup size of reduce.wgsl and rows.wgsl.
const ROW_SAMPLES: [usize; 6] = [7, 8, 101, 100, 999, 1000];

/// The workgroup size for rows of `units` loads (vec4s or elements) reduced by one workgroup
/// each: 32 up to 128 loads (4 per invocation, which rows.wgsl keeps in registers), else 256.
/// A 256-wide workgroup on rows of 384 or 256 floats (layer norm, attention softmax) left most
/// invocations idle through the tree's barriers: on an H100, 32-wide ones took softmax over
/// [98304, 256] from 490 to 2,161 GB/s and a sum over [16384, 384] from 689 to 1,331 GB/s
/// (64-wide: 1,233 and 1,363).
fn row_workgroup(units: u32) -> &'static str {
    if units <= 128 { "32" } else { "256" }
}

/// Rows of at most this many elements, when there are [`MANY_ROWS`] of them, are reduced by
/// 32-wide workgroups (reduce.wgsl and fused reductions): a wider one leaves most invocations
/// idle through its tree. On an H100 a conv bias gradient's 16384 rows of 576 took 49.7 µs
/// in 256-wide workgroups.
pub(crate) const SHORT_ROW: usize = 2048;
/// Enough rows to fill a GPU with 32-wide workgroups; fewer long rows are cut into chunks.
pub(crate) const MANY_ROWS: usize = 1024;

/// What rows.wgsl does to each row: its OP and that op's settings.
#[derive(Clone, Copy)]
struct RowOp {
    name: &'static str,
    /// cumsum from the row's end
    reverse: bool,
    /// softmax over causal rows (see [`Op::Softmax`])
    causal: bool,
    /// normalize's epsilon
    eps: f32,
}

impl RowOp {
    fn new(name: &'static str) -> Self {
        RowOp {
            name,
            reverse: false,
            causal: false,
            eps: 0.0,
        }
    }
}

/// Where a chunked reduction's first pass puts the chunk axis among its outputs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Chunks {
    /// After the kept axes: the partials of one output are adjacent (a workgroup per output).
    Inner,
    /// Before them: one chunk's outputs are adjacent, as a column reduction reads them.
    Outer,
}

/// Workgroups (of 32 columns by a chunk of rows) a column reduction's first launch aims for.
const COLUMN_WORKGROUPS: usize = 512;
/// Rows up to which a column reduction is one launch.
const COLUMN_ONE_PASS_ROWS: usize = 2048;

/// Invocations a column reduction that columns.wgsl does not take aims for: enough loads in
/// flight to keep memory busy. On an H200, 2^18 took a sum over the columns of [16384, 1536] from 870 GB/s (2^17) to 1,422; before
/// the column path (a workgroup per output) it was 550 GB/s on an H100.
const COLUMN_THREADS: usize = 1 << 18;
/// Outputs from which a column reduction runs an invocation per output in one pass; with
/// fewer, each would walk a long column alone unless the column is cut into chunks.
const COLUMN_MIN_OUTPUTS: usize = 8 << 10;
/// Elements below which a column reduction is not cut into chunks.
const COLUMN_CHUNK_MIN_LEN: usize = 1 << 20;

/// Into how many chunks to cut a column reduction (outputs adjacent in memory, the reduced
/// axes strided) of `n_out` outputs over the coalesced reduced dims `rd`, so that about
/// [`COLUMN_THREADS`] invocations each fold at least 16 elements (see [`chunks`]).
fn column_chunks(op: ReduceOp, n_out: u32, rd: &[usize], same_type: bool) -> Option<usize> {
    let (n_out, len) = (n_out as usize, rd.iter().product::<usize>());
    if n_out >= COLUMN_THREADS / 2 || n_out * len < COLUMN_CHUNK_MIN_LEN {
        return None;
    }
    chunks(op, same_type, rd, COLUMN_THREADS / n_out.max(1), 16)
}

/// Whether every value is a multiple of 4: sizes, offsets and strides that keep vec4 accesses
/// whole and aligned.
fn x4(values: &[usize]) -> bool {
    values.iter().all(|v| v.is_multiple_of(4))
}

/// Split-K aims at about this many workgroups for GEMMs whose output has fewer tiles than
/// that... A linear layer's weight gradient over all of a batch's rows ([384, 16384] x
/// [16384, 1152]: 108 tiles, K = 16384) ran unsplit under the former rule (no split from 64
/// tiles up): the GPT trained at 209.9k tokens/s on Vulkan (H200); aiming at 256 workgroups
/// gave 232.4k, at 512 240.8k, with MNIST at batch 256 unchanged. At 768, MNIST's conv2 weight
/// gradient at batch 256 ([64, 288] in 5 tiles, K = 147,456) took 254 us against 320 (H100,
/// CUDA; 1024 and 2048 were no better), the GPT's step unchanged.
const SPLIT_K_WORKGROUPS: usize = 768;
/// ...in at most this many splits (their partial sums are added one after another per output:
/// MNIST's conv1 weight gradient, a single [32, 9] tile over K = 173,056, took 66 + 20 us in
/// 676 splits against 52 + 15 us in 492, H100)...
const SPLIT_K_MAX_SPLITS: usize = 512;
/// ...giving each split at least this much of K...
const SPLIT_K_MIN_DEPTH: usize = 256;
/// ...and keeping the partial products within this many elements (64 MiB).
const SPLIT_K_MAX_PARTIALS: usize = 16 << 20;

/// How many chunks to cut K into for a GEMM of `tiles` output tiles and `outputs` elements:
/// 1 when the tiles alone keep the GPU busy.
fn split_k(tiles: usize, k: usize, outputs: usize) -> usize {
    if tiles >= SPLIT_K_WORKGROUPS {
        return 1;
    }
    SPLIT_K_WORKGROUPS
        .div_ceil(tiles.max(1))
        .min(SPLIT_K_MAX_SPLITS)
        .min(k / SPLIT_K_MIN_DEPTH)
        .min(SPLIT_K_MAX_PARTIALS / outputs.max(1))
        .max(1)
}

/// A scatter_add with fewer outputs than this many invocations cuts its index axis into chunks
/// of at least `SCATTER_CHUNK_MIN_LEN`: the token embedding's gradient ([65, 384] from 16,384
/// rows) walked all rows per output.
const SCATTER_THREADS: usize = 1 << 20;
const SCATTER_CHUNK_MIN_LEN: usize = 64;

/// `len` cut into at most `want` chunks of one length, a multiple of `align` (the last chunk
/// shorter): that length and the number of chunks, each at least 1.
pub(crate) fn even_chunks(len: usize, want: usize, align: usize) -> (usize, usize) {
    let chunk = len.div_ceil(want.max(1)).next_multiple_of(align).max(1);
    (chunk, len.div_ceil(chunk).max(1))
}

impl Planner {
    fn push(
        &mut self,
        kernel: KernelKey,
        params: Vec<u32>,
        buffers: Vec<Buffer>,
        workgroups: [u32; 3],
    ) {
        self.plan.dispatches.push(Dispatch {
            kernel,
            params,
            buffers,
            workgroups,
        });
    }

    /// A 1-D launch of `threads` invocations in workgroups of [`WG`].
    fn launch(
        &mut self,
        key: KernelKey,
        params: Vec<u32>,
        buffers: Vec<Buffer>,
        threads: u32,
    ) -> Result<()> {
        let grid = grid(threads.div_ceil(WG) as u64, self.name)?;
        self.push(key, params, buffers, grid);
        Ok(())
    }

    fn scratch(&mut self, elements: usize) -> Buffer {
        self.plan
            .scratch_bytes
            .push(elements.max(1) as u64 * ELEM_BYTES);
        Buffer::Scratch(self.plan.scratch_bytes.len() - 1)
    }

    /// Input `i` as a contiguous buffer and the element offset where it starts, copying it into
    /// scratch first when its view is strided.
    fn contiguous(
        &mut self,
        i: usize,
        input: &ViewMeta,
        ty: &'static str,
    ) -> Result<(Buffer, u32)> {
        if input.layout.is_contiguous() {
            return Ok((Buffer::Input(i), input.layout.offset() as u32));
        }
        Ok((self.copied(i, input, ty)?, 0))
    }

    /// Input `i` copied into a scratch buffer, contiguous from element 0.
    fn copied(&mut self, i: usize, input: &ViewMeta, ty: &'static str) -> Result<Buffer> {
        let shape = input.layout.shape().clone();
        let buf = self.scratch(shape.numel());
        let dst = Layout::contiguous(shape);
        self.copy_to(ty, &dst, buf, Buffer::Input(i), &input.layout)?;
        Ok(buf)
    }

    /// A custom op's one dispatch: its params header, its inputs packed (contiguous from
    /// element 0, copied to scratch when not), its output last.
    fn custom(
        &mut self,
        call: &kiln_core::op::custom::CustomCall,
        inputs: &[ViewMeta],
        output: &Meta,
    ) -> Result<()> {
        let r = call.resolve()?;
        if r.op.wgsl().is_none() {
            return Err(Error::unsupported(
                r.name,
                "has no WGSL kernel; it runs on the CPU only",
            ));
        }
        let metas: Vec<Meta> = inputs.iter().map(ViewMeta::meta).collect();
        let buffers = (inputs.iter().enumerate())
            .map(|(i, input)| self.packed(i, input))
            .collect::<Result<Vec<_>>>()?;
        self.custom_launch(&r, &call.attrs, &metas, buffers, output)
    }

    /// Input `i` contiguous from element 0, as custom kernels read their inputs: the input
    /// itself, or a scratch copy.
    fn packed(&mut self, i: usize, input: &ViewMeta) -> Result<Buffer> {
        if input.layout.is_contiguous() && input.layout.offset() == 0 {
            return Ok(Buffer::Input(i));
        }
        let ty = wgsl_type(input.dtype, self.name)?;
        self.copied(i, input, ty)
    }

    /// The launch of registered custom op `r` on packed `inputs` (of `metas`) into `output`.
    fn custom_launch(
        &mut self,
        r: &kiln_core::op::custom::Registered,
        attrs: &kiln_core::op::custom::Attrs,
        metas: &[Meta],
        inputs: Vec<Buffer>,
        output: &Meta,
    ) -> Result<()> {
        use kiln_core::op::custom::Grid;
        let launch = r.op.launch(attrs, metas, output)?;
        let mut buffers = inputs;
        buffers.push(Buffer::Output(0));
        let workgroups = match launch.grid {
            Grid::Invocations {
                count,
                workgroup_size,
            } => grid(count.div_ceil(workgroup_size.max(1) as u64), self.name)?,
            Grid::Workgroups(w) if w.iter().all(|&n| n <= MAX_GRID) => w,
            Grid::Workgroups(w) => {
                return Err(Error::invalid(
                    r.name,
                    format!("asked for workgroups {w:?}; each dimension is at most {MAX_GRID}"),
                ));
            }
        };
        self.push(KernelKey::custom(r), launch.params, buffers, workgroups);
        Ok(())
    }

    /// A product (matmul, conv2d) with a fused chain on its output (see
    /// [`crate::fusion::epilogue`]): inputs 0 and 1 are the product's, the rest the chain's
    /// others. The chain goes into the product's last launch when that is the GEMM writing the
    /// output; else the product goes to scratch and the chain's own kernel runs after it.
    fn epilogue(
        &mut self,
        ep: &crate::fusion::epilogue::EpilogueOp,
        call: &kiln_core::op::custom::CustomCall,
        inputs: &[ViewMeta],
        output: &Meta,
    ) -> Result<()> {
        let (ab, others) = inputs.split_at(2.min(inputs.len()));
        let metas: Vec<Meta> = inputs.iter().map(ViewMeta::meta).collect();
        // planned in its own shape; the chain may see it reshaped (same elements)
        let product = ep.product_meta(&metas)?;
        let alone = plan(ep.product(), ab, std::slice::from_ref(&product))?;
        let mut bufs = (others.iter().enumerate())
            .map(|(j, v)| self.packed(2 + j, v))
            .collect::<Result<Vec<_>>>()?;
        let last = alone.dispatches.len().saturating_sub(1);
        let writes_out = |d: &Dispatch| d.buffers.contains(&Buffer::Output(0));
        let in_store = alone.dispatches.iter().position(writes_out) == Some(last)
            && alone.dispatches[last].kernel.file == "gemm.wgsl"
            && ep.reads_hold(&metas, &product, output);
        let product_at = match in_store {
            true => Buffer::Output(0),
            false => self.scratch(output.1.numel()),
        };
        let mut d = self.append(alone, product_at).ok_or_else(|| {
            Error::invalid(
                ep.product().name(),
                "planned no launch for a fused epilogue",
            )
        })?;
        if in_store {
            let words = ep.words(&call.attrs, &metas[2..], output)?;
            // the epilogue's words follow the mode's header and tail
            d.params[EPILOGUE_WORD] = (d.params.len() - gemm_header_words(&d.kernel)) as u32;
            d.params.extend(words);
            d.kernel
                .defines
                .insert("EPILOGUE".into(), call.name.clone());
            d.buffers.extend(bufs);
            self.plan.dispatches.push(d);
            return Ok(());
        }
        self.plan.dispatches.push(d);
        let chain = ep.chain_call(call);
        let mut chain_metas = metas[2..].to_vec();
        chain_metas.insert(ep.at(), (product.0, output.1.clone()));
        bufs.insert(ep.at(), product_at);
        self.custom_launch(&chain.resolve()?, &chain.attrs, &chain_metas, bufs, output)
    }

    /// Appends the launches of a plan of its own but its last, which it returns (`None` for no
    /// launch), with the plan's output in `out` and its scratch buffers after this plan's.
    fn append(&mut self, sub: Plan, out: Buffer) -> Option<Dispatch> {
        let base = self.plan.scratch_bytes.len();
        self.plan.scratch_bytes.extend(&sub.scratch_bytes);
        let mut launches: Vec<Dispatch> = (sub.dispatches.into_iter())
            .map(|mut d| {
                for b in &mut d.buffers {
                    *b = match *b {
                        Buffer::Output(_) => out,
                        Buffer::Scratch(k) => Buffer::Scratch(base + k),
                        input => input,
                    };
                }
                d
            })
            .collect();
        let last = launches.pop();
        self.plan.dispatches.extend(launches);
        last
    }

    /// fill.wgsl in `mode` over `n` elements; `params` is the mode's header.
    fn fill(&mut self, mode: &str, ty: &'static str, n: u32, params: Vec<u32>) -> Result<()> {
        let key = KernelKey::new("fill.wgsl", &[("MODE", mode), ("T", ty), ("WG", "256")]);
        self.launch(key, params, vec![Buffer::Output(0)], n)
    }

    fn random(&mut self, op: &Op, n: u32) -> Result<()> {
        let (mode, seed, a, b) = match op {
            Op::RandUniform {
                low, high, seed, ..
            } => ("uniform", *seed, *low, *high),
            Op::RandNormal {
                mean, std, seed, ..
            } => ("normal", *seed, *mean, *std),
            _ => unreachable_op(self.name)?,
        };
        let key = KernelKey::new("random.wgsl", &[("MODE", mode), ("WG", "256")]);
        let h = RandomParams {
            numel: n,
            seed_lo: seed as u32,
            seed_hi: (seed >> 32) as u32,
            a: (a as f32).to_bits(),
            b: (b as f32).to_bits(),
        };
        self.launch(key, h.to_words(), vec![Buffer::Output(0)], n)
    }

    /// Copies the view `src` of `from` into the view `dst` of the output.
    fn copy(&mut self, ty: &'static str, dst: &Layout, from: Buffer, src: &Layout) -> Result<()> {
        self.copy_to(ty, dst, Buffer::Output(0), from, src)
    }

    fn copy_to(
        &mut self,
        ty: &'static str,
        dst: &Layout,
        to: Buffer,
        from: Buffer,
        src: &Layout,
    ) -> Result<()> {
        let key = KernelKey::new(
            "map.wgsl",
            &[("OP", "copy"), ("TI", ty), ("TO", ty), ("WG", "256")],
        );
        self.elementwise_to(key, dst, to, &[(from, src)], Elementwise::Map([0, 0]))
    }

    /// A binary op or comparison: `expr` is its WGSL of `x` and `y`.
    fn binary(
        &mut self,
        op: &str,
        expr: &str,
        inputs: &[ViewMeta],
        t: &'static str,
        to: &'static str,
        out: &Layout,
    ) -> Result<()> {
        let key = KernelKey::new(
            "binary.wgsl",
            &[
                ("OP", op),
                ("EXPR", expr),
                ("T", t),
                ("TO", to),
                ("WG", "256"),
            ],
        );
        let views = [
            (Buffer::Input(0), &inputs[0].layout),
            (Buffer::Input(1), &inputs[1].layout),
        ];
        self.elementwise_to(key, out, Buffer::Output(0), &views, Elementwise::Binary)
    }

    fn elementwise(
        &mut self,
        key: KernelKey,
        out: &Layout,
        inputs: &[(Buffer, &Layout)],
        kind: Elementwise,
    ) -> Result<()> {
        self.elementwise_to(key, out, Buffer::Output(0), inputs, kind)
    }

    /// An elementwise launch over the shape of `out`: inputs are broadcast to it, and adjacent
    /// axes that every view walks contiguously are merged so that index math stays short.
    fn elementwise_to(
        &mut self,
        key: KernelKey,
        out: &Layout,
        to: Buffer,
        inputs: &[(Buffer, &Layout)],
        kind: Elementwise,
    ) -> Result<()> {
        let shape = out.shape();
        let n = u32_len(shape.numel(), self.name)?;
        let mut views = vec![(out.offset(), strides_u32(out.strides(), self.name)?)];
        for (_, l) in inputs {
            let b = l.broadcast_to(shape)?;
            views.push((b.offset(), strides_u32(b.strides(), self.name)?));
        }
        let (dims, strides) = coalesce(shape.dims(), views.iter().map(|v| v.1.clone()).collect());
        let mut tail: Vec<u32> = dims.iter().map(|&d| d as u32).collect();
        for ((offset, _), s) in views.iter().zip(&strides) {
            push_view(&mut tail, *offset, s);
        }
        let offsets: Vec<usize> = views.iter().map(|v| v.0).collect();
        // binary.wgsl can read one of two inputs as a repeating run (BCAST); where has three
        let bcast = matches!(kind, Elementwise::Binary) && inputs.len() == 2;
        let mut fast = Fast::of(&dims, &strides, &offsets, bcast);
        if fast == Fast::None
            && matches!(kind, Elementwise::Map(_))
            && strided4(&dims, &strides, &offsets)
        {
            // the tail in units of vec4: the inner axis a quarter as long, strides and offsets / 4
            fast = Fast::Strided4;
            tail = dims.iter().map(|&d| d as u32).collect();
            *tail.last_mut().expect("rank >= 2") /= 4;
            for (offset, s) in offsets.iter().zip(&strides) {
                let quarter: Vec<usize> = s.iter().map(|&s| s / 4).collect();
                push_view(
                    &mut tail,
                    offset / 4,
                    &[&quarter[..quarter.len() - 1], &[1]].concat(),
                );
            }
        }
        let (numel, rank) = (n, dims.len() as u32);
        let params = match kind {
            Elementwise::Map([c0, c1]) => MapParams {
                numel,
                rank,
                c0,
                c1,
            }
            .with_tail(tail),
            Elementwise::Binary => {
                // only a BCAST launch reads them
                let (period, inner) = match fast {
                    Fast::Bcast(_, period, inner) => (period, inner),
                    _ => (0, 0),
                };
                let h = BinaryParams {
                    numel,
                    rank,
                    period,
                    inner,
                };
                h.with_tail(tail)
            }
        };
        let threads = if fast == Fast::None { n } else { n / 4 };
        let mut buffers: Vec<Buffer> = inputs.iter().map(|(b, _)| *b).collect();
        buffers.push(to);
        self.launch(fast.key(key), params, buffers, threads)
    }

    fn reduce(
        &mut self,
        op: ReduceOp,
        axes: &[usize],
        x: &Layout,
        bufs: [Buffer; 2],
        ty: &'static str,
        to: &'static str,
    ) -> Result<()> {
        let dims = x.shape().dims();
        let rank = dims.len();
        let reduced: Vec<usize> = if axes.is_empty() {
            (0..rank).collect()
        } else {
            axes.to_vec()
        };
        let kept: Vec<usize> = (0..rank).filter(|a| !reduced.contains(a)).collect();
        let strides = strides_u32(x.strides(), self.name)?;
        let pick = |ax: &[usize], v: &[usize]| -> Vec<usize> { ax.iter().map(|&a| v[a]).collect() };
        let (kd, ks) = (pick(&kept, dims), pick(&kept, &strides));
        let (rd, rs) = (pick(&reduced, dims), pick(&reduced, &strides));
        let (kd, ks) = coalesce(&kd, vec![ks]);
        let (rd, rs) = coalesce(&rd, vec![rs]);
        let n_out = u32_len(kd.iter().product(), self.name)?;
        let len = u32_len(rd.iter().product(), self.name)?;
        // Outputs adjacent in memory and reduced axes strided (a column sum: the bias gradient
        // of a linear layer): a workgroup per output would read one element per row. One kept
        // and one reduced axis go to columns.wgsl; what it does not run (variance, arg ops,
        // several axes after coalescing) gets an invocation per output, so a warp's loads are
        // still adjacent.
        let column = ks[0].last() == Some(&1) && !rs[0].contains(&1);
        if column && kd.len() == 1 && rd.len() == 1 {
            let view = (kd[0], rd[0], rs[0][0], x.offset());
            if self.columns(op, view, bufs, ty, to)? {
                return Ok(());
            }
        }
        // Several reduced axes, the innermost contiguous (a convolution's bias gradient: [N, C,
        // H*W] over N and H*W): the strided walk costs integer divisions per element, so the
        // contiguous runs are reduced first, as rows, and then their partials.
        let run = rd.last().copied().unwrap_or(0);
        if rd.len() >= 2
            && rs[0].last() == Some(&1)
            && run >= SPLIT_MIN_RUN
            && combines(op)
            && ty == to
        {
            let (keep, red) = ((&kd[..], &ks[0][..]), (&rd[..], &rs[0][..]));
            return self.reduce_runs_first(op, keep, red, x, bufs, ty);
        }
        let chunked = column
            .then(|| column_chunks(op, n_out, &rd, ty == to))
            .flatten()
            .map(|c| (c, Chunks::Outer))
            .or_else(|| reduction_chunks(op, n_out, &rd, ty == to).map(|c| (c, Chunks::Inner)));
        if let Some((chunks, at)) = chunked {
            let (keep, red) = ((&kd[..], &ks[0][..]), (&rd[..], &rs[0][..]));
            return self.reduce_in_chunks(op, chunks, at, keep, red, x, bufs, ty);
        }
        let correction = match op {
            ReduceOp::Var { correction } => correction as u32,
            _ => 0,
        };
        let mut tail: Vec<u32> = kd.iter().chain(&rd).map(|&d| d as u32).collect();
        push_view(&mut tail, x.offset() as u32, &ks[0]);
        push_view(&mut tail, 0, &rs[0]);
        let h = ReduceParams {
            n_out,
            rank_keep: kd.len() as u32,
            rank_red: rd.len() as u32,
            len,
            correction,
        };
        let params = h.with_tail(tail);
        let per_thread = if column {
            n_out as usize >= COLUMN_MIN_OUTPUTS
        } else {
            len <= 64
        };
        // each output's elements one contiguous, 4-aligned run: read as vec4
        let vec4 = rs[0] == [1] && x4(&[len as usize, x.offset()]) && x4(&ks[0]);
        let (lowest, highest) = extremes(ty);
        let key = KernelKey::new(
            "reduce.wgsl",
            &[
                ("OP", op.name()),
                ("T", ty),
                ("TO", to),
                ("LOWEST", lowest),
                ("HIGHEST", highest),
                ("PER_THREAD", if per_thread { "1" } else { "0" }),
                (
                    "WG",
                    if per_thread {
                        "256"
                    } else if n_out as usize >= MANY_ROWS && len as usize <= SHORT_ROW {
                        "32"
                    } else {
                        row_workgroup(len / if vec4 { 4 } else { 1 })
                    },
                ),
            ],
        );
        let key = if vec4 { Fast::Vec4.key(key) } else { key };
        let bufs = bufs.to_vec();
        if per_thread {
            self.launch(key, params, bufs, n_out)
        } else {
            let g = grid(n_out as u64, self.name)?;
            self.push(key, params, bufs, g);
            Ok(())
        }
    }

    /// columns.wgsl for `view` = (cols, rows, row stride, offset), a `[rows, cols]` view reduced
    /// down its columns: one launch for up to [`COLUMN_ONE_PASS_ROWS`] rows, else chunks of
    /// rows into partials (about [`COLUMN_WORKGROUPS`] workgroups) and a launch reducing them.
    /// `false` (nothing planned) for ops and types it does not run.
    fn columns(
        &mut self,
        op: ReduceOp,
        (cols, rows, stride, offset): (usize, usize, usize, usize),
        bufs: [Buffer; 2],
        ty: &'static str,
        to: &'static str,
    ) -> Result<bool> {
        let runs = match op {
            ReduceOp::Mean => ty == "f32",
            ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Max | ReduceOp::Min => true,
            _ => false,
        };
        let vec4 = x4(&[cols, stride, offset]);
        let w = if vec4 { 4 } else { 1 };
        let blocks = (cols / w).div_ceil(32);
        if !runs || ty != to || rows == 0 || blocks > MAX_GRID as usize {
            return Ok(false);
        }
        let chunk_rows = match rows <= COLUMN_ONE_PASS_ROWS {
            true => rows,
            false => rows.div_ceil(COLUMN_WORKGROUPS.div_ceil(blocks).clamp(2, rows / 64)),
        };
        let chunks = rows.div_ceil(chunk_rows);
        let (lowest, highest) = extremes(ty);
        let key = |op: ReduceOp| {
            let key = KernelKey::new(
                "columns.wgsl",
                &[
                    ("OP", op.name()),
                    ("T", ty),
                    ("LOWEST", lowest),
                    ("HIGHEST", highest),
                ],
            );
            if vec4 { Fast::Vec4.key(key) } else { key }
        };
        let scale = (1.0 / rows as f32).to_bits();
        let pass = |rows: usize, row_stride: usize, offset: usize, chunk_rows: usize| {
            let p = ColumnsParams {
                cols: (cols / w) as u32,
                rows: rows as u32,
                row_stride: (row_stride / w) as u32,
                offset: (offset / w) as u32,
                chunk_rows: chunk_rows as u32,
                scale,
            };
            p.to_words()
        };
        let grid = |chunks: usize| [blocks as u32, chunks as u32, 1];
        if chunks == 1 {
            self.push(
                key(op),
                pass(rows, stride, offset, rows),
                bufs.to_vec(),
                grid(1),
            );
            return Ok(true);
        }
        // a mean's chunks are summed; its last launch scales by 1 / rows
        let first = if op == ReduceOp::Mean {
            ReduceOp::Sum
        } else {
            op
        };
        let partials = self.scratch(chunks * cols);
        let params = pass(rows, stride, offset, chunk_rows);
        self.push(key(first), params, vec![bufs[0], partials], grid(chunks));
        let params = pass(chunks, cols, 0, chunks);
        self.push(key(op), params, vec![partials, bufs[1]], grid(1));
        Ok(true)
    }

    /// A reduction of few outputs over long runs, in two passes: the outermost reduced axis is
    /// cut into `chunks` equal pieces, each output's pieces are reduced separately into a
    /// scratch of partials, which the second pass reduces: 64 rows of 147456 elements would be
    /// 64 workgroups in one pass. `at` says where the chunk axis goes among the outputs of the
    /// first pass.
    #[allow(clippy::too_many_arguments)]
    fn reduce_in_chunks(
        &mut self,
        op: ReduceOp,
        chunks: usize,
        at: Chunks,
        (kd, ks): (&[usize], &[usize]),
        (rd, rs): (&[usize], &[usize]),
        x: &Layout,
        bufs: [Buffer; 2],
        ty: &'static str,
    ) -> Result<()> {
        let piece = rd[0] / chunks;
        let chunk_stride = (rs[0] * piece) as isize;
        let (mut dims, mut strides) = (vec![], vec![]);
        if at == Chunks::Outer {
            (dims, strides) = (vec![chunks], vec![chunk_stride]);
        }
        dims.extend(kd);
        strides.extend(ks.iter().map(|&s| s as isize));
        if at == Chunks::Inner {
            dims.push(chunks);
            strides.push(chunk_stride);
        }
        dims.push(piece);
        dims.extend(&rd[1..]);
        strides.push(rs[0] as isize);
        strides.extend(rs[1..].iter().map(|&s| s as isize));
        let pieces = Layout::from_parts(Shape::new(dims), strides, x.offset());
        let axes: Vec<usize> = (kd.len() + 1..kd.len() + 1 + rd.len()).collect();
        let outputs: usize = kd.iter().product();
        let (partials, axis) = match at {
            Chunks::Outer => ([chunks, outputs], 0),
            Chunks::Inner => ([outputs, chunks], 1),
        };
        self.reduce_twice(op, (&pieces, &axes), &partials, &[axis], bufs, ty)
    }

    /// Reduces the innermost (contiguous) reduced axis of `x` into scratch as rows, then the
    /// other reduced axes of those partials (see `reduce`).
    fn reduce_runs_first(
        &mut self,
        op: ReduceOp,
        (kd, ks): (&[usize], &[usize]),
        (rd, rs): (&[usize], &[usize]),
        x: &Layout,
        bufs: [Buffer; 2],
        ty: &'static str,
    ) -> Result<()> {
        let outer = &rd[..rd.len() - 1];
        let dims: Vec<usize> = kd.iter().chain(rd).copied().collect();
        let strides: Vec<isize> = ks.iter().chain(rs).map(|&s| s as isize).collect();
        let runs = Layout::from_parts(Shape::new(dims), strides, x.offset());
        let partials: Vec<usize> = kd.iter().chain(outer).copied().collect();
        let axes: Vec<usize> = (kd.len()..kd.len() + outer.len()).collect();
        let first = [kd.len() + outer.len()];
        self.reduce_twice(op, (&runs, &first), &partials, &axes, bufs, ty)
    }

    /// The two passes of [`Self::reduce_in_chunks`] and [`Self::reduce_runs_first`]: `x` over
    /// `axes` into a contiguous scratch of `partials` dims, then that over `partial_axes`.
    fn reduce_twice(
        &mut self,
        op: ReduceOp,
        (x, axes): (&Layout, &[usize]),
        partials: &[usize],
        partial_axes: &[usize],
        bufs: [Buffer; 2],
        ty: &'static str,
    ) -> Result<()> {
        let partial = self.scratch(partials.iter().product());
        self.reduce(op, axes, x, [bufs[0], partial], ty, ty)?;
        let partials = Layout::contiguous(Shape::from(partials));
        self.reduce(op, partial_axes, &partials, [partial, bufs[1]], ty, ty)
    }

    fn rows(
        &mut self,
        op: RowOp,
        inputs: &[ViewMeta],
        axis: usize,
        ty: &'static str,
    ) -> Result<()> {
        let x = &inputs[0];
        let dims = x.layout.shape().dims();
        let kept: Vec<usize> = (0..dims.len()).filter(|&a| a != axis).collect();
        // the inputs' strides, then the (contiguous) output's
        let mut strides = inputs
            .iter()
            .map(|v| strides_u32(v.layout.strides(), self.name))
            .collect::<Result<Vec<_>>>()?;
        strides.insert(
            1,
            Shape::from(dims)
                .contiguous_strides()
                .iter()
                .map(|&s| s as usize)
                .collect(),
        );
        let kd: Vec<usize> = kept.iter().map(|&a| dims[a]).collect();
        let (kd, ks) = coalesce(
            &kd,
            strides
                .iter()
                .map(|st| kept.iter().map(|&a| st[a]).collect())
                .collect(),
        );
        let offsets: Vec<usize> = inputs.iter().map(|v| v.layout.offset()).collect();
        let offsets = [&offsets[..1], &[0], &offsets[1..]].concat();
        let n_rows = u32_len(kd.iter().product(), self.name)?;
        let len = dims[axis] as u32;
        let mut tail: Vec<u32> = kd.iter().map(|&d| d as u32).collect();
        for ((st, k), &offset) in strides.iter().zip(&ks).zip(&offsets) {
            push_view(&mut tail, offset as u32, k);
            tail.push(st[axis] as u32);
        }
        let h = RowsParams {
            n_rows,
            rank_keep: kd.len() as u32,
            len,
            reverse: op.reverse as u32,
            // infer checked that a causal axis is the last of at least two
            causal: if op.causal {
                dims[dims.len() - 2] as u32
            } else {
                0
            },
            eps: op.eps.to_bits(),
        };
        let params = h.with_tail(tail);
        let normalize = op.name.starts_with("normalize");
        let per_thread = op.name == "cumsum" || (len <= 64 && !normalize);
        // rows read and written as vec4 when all are contiguous and 4-aligned
        let vec4 = op.name != "cumsum"
            && strides.iter().all(|st| st[axis] == 1)
            && x4(&[len as usize])
            && x4(&offsets)
            && ks.iter().all(|k| x4(k));
        let wg = if per_thread {
            "256"
        } else {
            row_workgroup(len / if vec4 { 4 } else { 1 })
        };
        let mut key = KernelKey::new(
            "rows.wgsl",
            &[
                ("OP", op.name),
                ("T", ty),
                ("PER_THREAD", if per_thread { "1" } else { "0" }),
                ("WG", wg),
            ],
        );
        if vec4 {
            key = Fast::Vec4.key(key);
        }
        let mut bufs: Vec<Buffer> = (0..inputs.len()).map(Buffer::Input).collect();
        bufs.push(Buffer::Output(0));
        if per_thread {
            self.launch(key, params, bufs, n_rows)
        } else {
            let g = grid(n_rows as u64, self.name)?;
            self.push(key, params, bufs, g);
            Ok(())
        }
    }

    fn matmul(
        &mut self,
        a: &ViewMeta,
        b: &ViewMeta,
        out_shape: &Shape,
        ty: &'static str,
    ) -> Result<()> {
        // NumPy promotion of rank-1 operands: [k] is [1, k] on the left and [k, 1] on the right.
        let promote = |v: &ViewMeta, left: bool| -> Result<(Vec<usize>, Vec<usize>)> {
            let d = v.layout.shape().dims().to_vec();
            let s = strides_u32(v.layout.strides(), self.name)?;
            Ok(if d.len() == 1 {
                if left {
                    (vec![1, d[0]], vec![0, s[0]])
                } else {
                    (vec![d[0], 1], vec![s[0], 0])
                }
            } else {
                (d, s)
            })
        };
        let (ad, as_) = promote(a, true)?;
        let (bd, bs) = promote(b, false)?;
        let (m, k, nn) = (ad[ad.len() - 2], ad[ad.len() - 1], bd[bd.len() - 1]);
        let batch_rank = out_shape
            .rank()
            .saturating_sub(2)
            .max(ad.len() - 2)
            .max(bd.len() - 2);
        let batch: Vec<usize> = (0..batch_rank)
            .map(|i| {
                let pick = |d: &[usize]| {
                    let nb = d.len() - 2;
                    if i + nb >= batch_rank {
                        d[i + nb - batch_rank]
                    } else {
                        1
                    }
                };
                pick(&ad).max(pick(&bd))
            })
            .collect();
        let batch_strides = |d: &[usize], s: &[usize]| -> Vec<usize> {
            let nb = d.len() - 2;
            (0..batch_rank)
                .map(|i| {
                    if i + nb >= batch_rank {
                        let j = i + nb - batch_rank;
                        if d[j] == 1 { 0 } else { s[j] }
                    } else {
                        0
                    }
                })
                .collect()
        };
        let (abs, bbs) = (batch_strides(&ad, &as_), batch_strides(&bd, &bs));
        let (batch, bstr) = coalesce(&batch, vec![abs, bbs]);
        let batches: usize = batch.iter().product();
        let mut tail: Vec<u32> = batch.iter().map(|&d| d as u32).collect();
        push_view(&mut tail, 0, &bstr[0]);
        push_view(&mut tail, 0, &bstr[1]);
        let [a_row_stride, a_col_stride] =
            [as_[as_.len() - 2], as_[as_.len() - 1]].map(|v| v as u32);
        let [b_row_stride, b_col_stride] = [bs[bs.len() - 2], bs[bs.len() - 1]].map(|v| v as u32);
        let (a_offset, b_offset) = (a.layout.offset() as u32, b.layout.offset() as u32);
        let batch_rank = batch.len() as u32;
        self.gemm(
            GemmMode::Matmul,
            false,
            [m, nn, k, batches],
            [Buffer::Input(0), Buffer::Input(1)],
            ty,
            |gemm| {
                #[rustfmt::skip]
                let h = MatmulParams {
                    gemm, batch_rank, a_offset, a_row_stride, a_col_stride,
                    b_offset, b_row_stride, b_col_stride,
                };
                h.with_tail(tail)
            },
        )
    }

    /// The three convolutions as implicit GEMMs: A is input 1 (weight, or dy for the weight
    /// gradient), B is input 0; both are read as contiguous NCHW / OIHW.
    fn conv(
        &mut self,
        mode: GemmMode,
        inputs: &[ViewMeta],
        geo: ConvGeometry,
        mnk: [usize; 3],
        ty: &'static str,
    ) -> Result<()> {
        let (abuf, a_offset) = self.contiguous(1, &inputs[1], ty)?;
        let (bbuf, b_offset) = self.contiguous(0, &inputs[0], ty)?;
        let steps = geo.k_steps(mode, mnk[2]);
        let groups = geo.groups as usize;
        self.gemm(
            mode,
            geo.n == 1,
            [mnk[0], mnk[1], mnk[2], groups],
            [abuf, bbuf],
            ty,
            |gemm| {
                let h = ConvParams {
                    gemm,
                    conv: geo,
                    a_offset,
                    b_offset,
                };
                h.with_tail(steps)
            },
        )
    }

    /// Launches gemm.wgsl: picks the tile shape and, for outputs of few tiles, the split of K,
    /// and hands the resulting [`Gemm`] to `params`, which writes the mode's whole header.
    /// `single_image`: a convolution of one image (its output is a plain matrix).
    fn gemm(
        &mut self,
        mode: GemmMode,
        single_image: bool,
        mnkb: [usize; 4],
        ab: [Buffer; 2],
        ty: &'static str,
        params: impl FnOnce(Gemm) -> Vec<u32>,
    ) -> Result<()> {
        let [m, n, k, batches] = mnkb;
        let tile = GemmTile::pick(mode, m, n, batches);
        let GemmTile { bm, bn, bk, .. } = tile;
        let tiles_m = m.div_ceil(bm);
        let tiles_n = n.div_ceil(bn);
        let outputs = batches * m * n;
        // split-K's scratch is [splits, batches, M, N]: for modes that store C so (matmul, the
        // weight gradient), and the other convolutions of a single image, whose
        // [1, groups * M, N] output is laid out the same way (a batch-1 inference's convs)
        let plain = match mode {
            GemmMode::Matmul | GemmMode::ConvWeightGrad => true,
            GemmMode::Conv | GemmMode::ConvTranspose => single_image,
        };
        let splits = match plain {
            true => split_k(tiles_m * tiles_n * batches, k, outputs),
            false => 1,
        };
        let k_chunk = k.div_ceil(splits).next_multiple_of(bk);
        let splits = if k_chunk == 0 { 1 } else { k.div_ceil(k_chunk) };
        #[rustfmt::skip]
        let params = params(Gemm {
            m: m as u32, n: n as u32, k: k as u32, tiles_m: tiles_m as u32,
            batches: batches as u32, k_chunk: k_chunk as u32, splits: splits as u32,
            epilogue: 0,
        });
        let rows = (tiles_m * batches) as u64 * splits as u64;
        let (y, z) = if rows <= MAX_GRID as u64 {
            (rows, 1)
        } else {
            (MAX_GRID as u64, rows.div_ceil(MAX_GRID as u64))
        };
        if tiles_n > MAX_GRID as usize || z > MAX_GRID as u64 {
            return Err(Error::unsupported(
                self.name,
                format!(
                    "output of {m} x {n} in {batches} batches needs more workgroups than a dispatch allows"
                ),
            ));
        }
        let key = tile.key(mode, ty);
        let c = if splits > 1 {
            self.scratch(splits * outputs)
        } else {
            Buffer::Output(0)
        };
        self.push(
            key,
            params,
            vec![ab[0], ab[1], c],
            [tiles_n as u32, y as u32, z as u32],
        );
        if splits == 1 {
            return Ok(());
        }
        // the partial products, [splits, outputs], summed over the splits
        let partial = Layout::contiguous(Shape::from([splits, outputs]));
        self.reduce(
            ReduceOp::Sum,
            &[0],
            &partial,
            [c, Buffer::Output(0)],
            ty,
            ty,
        )
    }

    /// Pooling of `x` into `y` (both N, C, H, W), or its gradient (inputs x and dy).
    fn pool(
        &mut self,
        pool: &Pool2d,
        backward: bool,
        inputs: &[ViewMeta],
        x: [usize; 4],
        y: [usize; 4],
        ty: &'static str,
    ) -> Result<()> {
        let pp = match pool {
            Pool2d::Max(p) | Pool2d::Avg(p) => *p,
            // pool.wgsl computes the adaptive windows itself
            Pool2d::AdaptiveAvg { .. } => Pool2dParams {
                kernel: [1, 1],
                stride: [1, 1],
                padding: [0, 0],
                dilation: [1, 1],
                count_include_pad: true,
            },
        };
        let tiles = pp.stride == pp.kernel
            && pp.padding == [0, 0]
            && pp.dilation == [1, 1]
            && y[2] * pp.kernel[0] == x[2]
            && y[3] * pp.kernel[1] == x[3];
        let mode = PoolMode::of(pool, backward, tiles);
        // x is binding 1 where the kernel reads it, then dy
        let mut bufs = Vec::new();
        let mut offsets = [0u32; 2];
        for i in mode.reads() {
            let (b, off) = self.contiguous(i, &inputs[i], ty)?;
            bufs.push(b);
            offsets[i] = off;
        }
        bufs.push(Buffer::Output(0));
        // one invocation per output element, or per window for the tiled max gradient
        let numel = if !backward || mode == PoolMode::MaxBackTiles {
            y.iter().product::<usize>()
        } else {
            x.iter().product()
        };
        let n = u32_len(numel, self.name)?;
        let u32s = |pair: [usize; 2]| pair.map(|d| d as u32);
        let ([kh, kw], [sh, sw]) = (u32s(pp.kernel), u32s(pp.stride));
        let ([ph, pw], [dh, dw]) = (u32s(pp.padding), u32s(pp.dilation));
        let [nb, c, h, w] = x.map(|d| d as u32);
        let [oh, ow] = u32s([y[2], y[3]]);
        #[rustfmt::skip]
        let pool = PoolGeometry {
            n: nb, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw,
            include_pad: pp.count_include_pad as u32,
        };
        let [x_offset, dy_offset] = offsets;
        let params = PoolParams {
            numel: n,
            pool,
            x_offset,
            dy_offset,
        }
        .to_words();
        let key = KernelKey::new(
            "pool.wgsl",
            &[("MODE", mode.define()), ("T", ty), ("WG", "256")],
        );
        self.launch(key, params, bufs, n)
    }
}

/// The modes of pool.wgsl.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PoolMode {
    Max,
    Avg,
    Adaptive,
    MaxBack,
    /// max's gradient where the windows tile the input: one invocation per window
    MaxBackTiles,
    AvgBack,
    AdaptiveBack,
}

impl PoolMode {
    fn of(pool: &Pool2d, backward: bool, tiles: bool) -> PoolMode {
        match (pool, backward) {
            (Pool2d::Max(_), false) => PoolMode::Max,
            (Pool2d::Avg(_), false) => PoolMode::Avg,
            (Pool2d::AdaptiveAvg { .. }, false) => PoolMode::Adaptive,
            (Pool2d::Max(_), true) if tiles => PoolMode::MaxBackTiles,
            (Pool2d::Max(_), true) => PoolMode::MaxBack,
            (Pool2d::Avg(_), true) => PoolMode::AvgBack,
            (Pool2d::AdaptiveAvg { .. }, true) => PoolMode::AdaptiveBack,
        }
    }

    /// The op's inputs the kernel binds: x (0) and or dy (1).
    fn reads(self) -> core::ops::RangeInclusive<usize> {
        match self {
            PoolMode::Max | PoolMode::Avg | PoolMode::Adaptive => 0..=0,
            PoolMode::MaxBack | PoolMode::MaxBackTiles => 0..=1,
            PoolMode::AvgBack | PoolMode::AdaptiveBack => 1..=1,
        }
    }

    fn define(self) -> &'static str {
        match self {
            PoolMode::Max => "max",
            PoolMode::Avg => "avg",
            PoolMode::Adaptive => "adaptive",
            PoolMode::MaxBack => "max_back",
            PoolMode::MaxBackTiles => "max_back_tiles",
            PoolMode::AvgBack => "avg_back",
            PoolMode::AdaptiveBack => "adaptive_back",
        }
    }
}

fn unreachable_op(name: &'static str) -> Result<(&'static str, u64, f64, f64)> {
    Err(Error::invalid(name, "not a random op"))
}

fn dims4(v: &ViewMeta) -> [usize; 4] {
    out_dims4(v.layout.shape())
}

fn out_dims4(s: &Shape) -> [usize; 4] {
    let d = s.dims();
    [0, 1, 2, 3].map(|i| d.get(i).copied().unwrap_or(1))
}

/// Appends a strided view to a header's tail: its offset, then its strides.
fn push_view(tail: &mut Vec<u32>, offset: impl TryInto<u32>, strides: &[usize]) {
    tail.push(offset.try_into().unwrap_or(u32::MAX));
    tail.extend(strides.iter().map(|&s| s as u32));
}

/// The op's constant as the device bits of `dtype` (`as` semantics for integers).
pub(crate) fn bits(v: f64, dtype: DType) -> u32 {
    match dtype {
        DType::I32 => (v as i32) as u32,
        DType::U32 => v as u32,
        DType::Bool => (v != 0.0) as u32,
        _ => (v as f32).to_bits(),
    }
}

fn u32_len(n: usize, op: &'static str) -> Result<u32> {
    u32::try_from(n).map_err(|_| {
        Error::unsupported(
            op,
            format!("{n} elements exceed the GPU kernels' 2^32 - 1 element limit"),
        )
    })
}

fn strides_u32(s: &[isize], op: &'static str) -> Result<Vec<usize>> {
    s.iter()
        .map(|&v| {
            usize::try_from(v)
                .ok()
                .filter(|&v| v <= u32::MAX as usize)
                .ok_or_else(|| {
                    Error::unsupported(
                        op,
                        format!("stride {v} is negative or too large for the GPU kernels"),
                    )
                })
        })
        .collect()
}

/// A grid of `groups` workgroups, split over x, y (and z) so that none exceeds [`MAX_GRID`],
/// with as few spare workgroups as the split allows: 65536 workgroups as 32768 x 2, not as
/// 65535 x 2 (half of them spare, each redoing a row of a reduction).
pub fn grid(groups: u64, op: &'static str) -> Result<[u32; 3]> {
    let max = MAX_GRID as u64;
    let groups = groups.max(1);
    let z = groups.div_ceil(max * max);
    let y = groups.div_ceil(z).div_ceil(max);
    let x = groups.div_ceil(z * y);
    if z > max {
        return Err(Error::unsupported(
            op,
            format!("{groups} workgroups exceed the dispatch limit"),
        ));
    }
    Ok([x as u32, y as u32, z as u32])
}

/// Drops size-1 axes and merges neighbours that every view walks contiguously (the outer stride
/// equals inner stride times inner size), keeping at least one axis.
pub fn coalesce(dims: &[usize], views: Vec<Vec<usize>>) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut out_dims: Vec<usize> = Vec::new();
    let mut out_strides: Vec<Vec<usize>> = vec![Vec::new(); views.len()];
    for (axis, &d) in dims.iter().enumerate() {
        if d == 1 {
            continue;
        }
        let merge = out_dims.last().is_some_and(|_| {
            views.iter().zip(&out_strides).all(|(v, o)| {
                let prev = *o.last().unwrap_or(&0);
                prev == v[axis] * d
            })
        });
        if merge {
            if let Some(last) = out_dims.last_mut() {
                *last *= d;
            }
            for (v, o) in views.iter().zip(out_strides.iter_mut()) {
                if let Some(last) = o.last_mut() {
                    *last = v[axis];
                }
            }
        } else {
            out_dims.push(d);
            for (v, o) in views.iter().zip(out_strides.iter_mut()) {
                o.push(v[axis]);
            }
        }
    }
    if out_dims.is_empty() {
        out_dims.push(1);
        for o in &mut out_strides {
            o.push(0);
        }
    }
    (out_dims, out_strides)
}

/// Every kernel variant the planner can produce, for validation and ahead-of-time compilation:
/// the kernels of planning every op of [`samples`], plus every GEMM tile in every mode (which
/// tile a GEMM gets depends on sizes the samples keep small).
pub fn variants() -> Vec<KernelKey> {
    let mut keys: Vec<KernelKey> = Vec::new();
    for (op, inputs) in samples() {
        let metas: Vec<_> = inputs
            .iter()
            .map(|v| (v.dtype, v.layout.shape().clone()))
            .collect();
        if let Ok(outputs) = op.infer(&metas)
            && let Ok(p) = plan(&op, &inputs, &outputs)
        {
            keys.extend(p.dispatches.into_iter().map(|d| d.kernel));
        }
    }
    for ty in ["f32", "i32", "u32"] {
        keys.push(GemmTile::SKINNY.key(GemmMode::Matmul, ty));
    }
    for tile in GemmTile::ALL {
        for ty in ["f32", "i32", "u32"] {
            keys.push(tile.key(GemmMode::Matmul, ty));
        }
        for mode in [
            GemmMode::Conv,
            GemmMode::ConvTranspose,
            GemmMode::ConvWeightGrad,
        ] {
            keys.push(tile.key(mode, "f32"));
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

/// A sample of every op the planner takes, on every device dtype, in each layout that takes its
/// own kernel path: contiguous and 4-aligned (vec4), strided, and for binary ops a broadcast
/// `a` or `b`. The elementwise families come from their tables; a test checks that every `Op`
/// variant but the views has a sample here.
pub fn samples() -> Vec<(Op, Vec<ViewMeta>)> {
    use DType::{Bool, F32, I32, U32};
    let view = |d: &[usize], dt: DType| ViewMeta::new(&Layout::contiguous(Shape::from(d)), dt);
    // [3, 5] read through a transpose of [5, 3]: the strided kernels
    let strided = |dt: DType| {
        let l = Layout::contiguous(Shape::from([5, 3]));
        ViewMeta::new(&l.permute(&[1, 0]).unwrap_or(l), dt)
    };
    let one_input = |dt: DType| [vec![view(&[2, 4], dt)], vec![strided(dt)]];
    let two_inputs = |dt: DType| {
        [
            vec![view(&[2, 8], dt), view(&[2, 8], dt)],
            vec![strided(dt), strided(dt)],
            vec![view(&[2, 8], dt), view(&[8], dt)],
            vec![view(&[8], dt), view(&[2, 8], dt)],
        ]
    };
    let mut s: Vec<(Op, Vec<ViewMeta>)> = Vec::new();
    let mut add = |op: Op, cases: &[Vec<ViewMeta>]| {
        s.extend(cases.iter().map(|ins| (op.clone(), ins.clone())));
    };
    for dt in [F32, I32, U32] {
        for u in UnaryOp::samples() {
            add(Op::Unary(u), &one_input(dt));
        }
        for &b in BinaryOp::ALL {
            add(Op::Binary(b), &two_inputs(dt));
        }
        for &c in CmpOp::ALL {
            add(Op::Compare(c), &two_inputs(dt));
        }
        let c = |ins: [ViewMeta; 2]| [vec![view(&[2, 4], Bool), ins[0].clone(), ins[1].clone()]];
        add(Op::Where, &c([view(&[2, 4], dt), view(&[2, 4], dt)]));
        add(Op::Where, &[vec![strided(Bool), strided(dt), strided(dt)]]);
        add(Op::Contiguous, &one_input(dt));
        // [3, 2, 4] read through a permute of [2, 3, 4]: map.wgsl's strided vec4 copy
        let rows = Layout::contiguous(Shape::from([2, 3, 4]));
        let rows = ViewMeta::new(&rows.permute(&[1, 0, 2]).unwrap_or(rows), dt);
        add(Op::Contiguous, &[vec![rows]]);
        add(
            Op::Concat { axis: 0 },
            &[vec![strided(dt), view(&[1, 5], dt)]],
        );
        let pads = vec![(1, 0), (0, 2)];
        add(Op::Pad { pads, value: 1.5 }, &[vec![view(&[2, 3], dt)]]);
        let shape = Shape::from([5]);
        add(
            Op::Full {
                shape,
                value: 2.0,
                dtype: dt,
            },
            &[vec![]],
        );
        add(
            Op::Arange {
                start: 1.0,
                step: 2.0,
                len: 5,
                dtype: dt,
            },
            &[vec![]],
        );
        add(
            Op::Eye {
                n: 3,
                m: 4,
                dtype: dt,
            },
            &[vec![]],
        );
        for to in [F32, I32, U32, Bool] {
            add(Op::Cast { dtype: to }, &one_input(dt));
            add(Op::Cast { dtype: dt }, &one_input(to));
        }
        for idx in [I32, U32] {
            let (x, i) = (view(&[3, 4], dt), view(&[3, 2], idx));
            add(Op::Gather { axis: 1 }, &[vec![x.clone(), i.clone()]]);
            add(
                Op::IndexSelect { axis: 0 },
                &[vec![x.clone(), view(&[2], idx)]],
            );
            add(Op::ScatterAdd { axis: 1 }, &[vec![x, i, view(&[3, 2], dt)]]);
            add(
                Op::OneHot {
                    classes: 4,
                    dtype: dt,
                },
                &[vec![view(&[3], idx)]],
            );
        }
    }
    for dt in [F32, I32, U32, Bool] {
        for r in ReduceOp::samples() {
            // rows of 7 and 8 take an invocation each (strided, vec4); 101 and 100 a workgroup
            // of 32 (strided, vec4), 999 and 1000 one of 256
            for len in ROW_SAMPLES {
                let op = Op::Reduce {
                    op: r,
                    axes: vec![1],
                    keepdim: false,
                };
                add(op, &[vec![view(&[3, len], dt)]]);
            }
            // down the columns: columns.wgsl (vec4 and scalar) where the op runs there
            for cols in [8, 7] {
                let op = Op::Reduce {
                    op: r,
                    axes: vec![0],
                    keepdim: false,
                };
                add(op, &[vec![view(&[5, cols], dt)]]);
            }
        }
        add(
            Op::Cumsum {
                axis: 0,
                reverse: false,
            },
            &[vec![view(&[5], dt)]],
        );
        add(Op::Matmul, &[vec![view(&[4, 5], dt), view(&[5, 6], dt)]]);
    }
    for len in ROW_SAMPLES {
        add(
            Op::Softmax {
                axis: 1,
                causal: false,
            },
            &[vec![view(&[3, len], F32)]],
        );
        add(Op::LogSoftmax { axis: 1 }, &[vec![view(&[3, len], F32)]]);
        add(Op::Normalize { eps: 1e-5 }, &[vec![view(&[3, len], F32)]]);
        add(
            Op::NormalizeBackward { eps: 1e-5 },
            &[vec![view(&[3, len], F32), view(&[3, len], F32)]],
        );
    }
    let adam = AdamParams {
        lr: 1e-3,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
        decoupled: false,
        step: 1,
    };
    add(Op::AdamStep(adam), &[vec![view(&[7], F32); 4]]);
    let scaled = [vec![view(&[7], F32); 4], vec![view(&[], F32)]].concat();
    add(Op::AdamStep(adam), &[scaled]);
    for seed in [1, 2] {
        let shape = Shape::from([3]);
        let (low, high) = (0.0, 1.0);
        add(
            Op::RandUniform {
                shape: shape.clone(),
                low,
                high,
                seed,
                dtype: F32,
            },
            &[vec![]],
        );
        add(
            Op::RandNormal {
                shape,
                mean: 0.0,
                std: 1.0,
                seed,
                dtype: F32,
            },
            &[vec![]],
        );
    }
    let c = Conv2dParams::default();
    for (n, ch) in [(1, 2), (8, 128)] {
        let (x, w) = (view(&[n, ch, 6, 6], F32), view(&[ch, ch, 3, 3], F32));
        let dy = view(&[n, ch, 4, 4], F32);
        add(Op::Conv2d(c), &[vec![x.clone(), w.clone()]]);
        let t = Op::ConvTranspose2d {
            params: c,
            output_padding: [0, 0],
        };
        add(t, &[vec![dy.clone(), w]]);
        add(
            Op::Conv2dBackwardWeight {
                params: c,
                kernel: [3, 3],
            },
            &[vec![x, dy]],
        );
    }
    // 2 x 2 windows tile a 4 x 4 input (the max gradient has its own kernel for that), not 5 x 5
    let (x4, x5, y) = (
        view(&[1, 1, 4, 4], F32),
        view(&[1, 1, 5, 5], F32),
        view(&[1, 1, 2, 2], F32),
    );
    for pool in Pool2d::samples() {
        add(Op::Pool2d(pool), &[vec![x4.clone()], vec![x5.clone()]]);
        add(
            Op::Pool2dBackward(pool),
            &[vec![x4.clone(), y.clone()], vec![x5.clone(), y.clone()]],
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::slice::from_ref;
    use serde::de::{self, Visitor};

    /// The variant names of an enum as its derived `Deserialize` knows them: it hands the list
    /// to `deserialize_enum`, which this deserializer records before failing.
    fn serde_variants<T: for<'de> serde::Deserialize<'de>>() -> &'static [&'static str] {
        struct Probe<'a>(&'a mut &'static [&'static str]);
        impl<'de> de::Deserializer<'de> for Probe<'_> {
            type Error = de::value::Error;
            fn deserialize_any<V: Visitor<'de>>(
                self,
                _: V,
            ) -> core::result::Result<V::Value, Self::Error> {
                Err(de::Error::custom("not an enum"))
            }
            fn deserialize_enum<V: Visitor<'de>>(
                self,
                _: &'static str,
                variants: &'static [&'static str],
                _: V,
            ) -> core::result::Result<V::Value, Self::Error> {
                *self.0 = variants;
                Err(de::Error::custom("recorded"))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map struct
                identifier ignored_any
            }
        }
        let mut names: &'static [&'static str] = &[];
        let _ = T::deserialize(Probe(&mut names));
        names
    }

    /// The serde (snake_case) name of a value's variant.
    fn variant_of<T: serde::Serialize>(v: &T) -> String {
        match serde_json::to_value(v) {
            Ok(serde_json::Value::String(s)) => s,
            Ok(serde_json::Value::Object(m)) if m.len() == 1 => m.keys().next().unwrap().clone(),
            other => panic!("not an enum variant: {other:?}"),
        }
    }

    /// A match without a wildcard: `Op`'s hand-written `Deserialize` (core/src/op/json.rs) no
    /// longer tells serde its variants, so a new variant stops this from compiling until it is
    /// added here and to [`OP_VARIANTS`] (and then the test below fails until it has a sample).
    #[allow(dead_code)]
    fn every_variant_is_in_op_variants(op: &Op) {
        match op {
            Op::Full { .. }
            | Op::Arange { .. }
            | Op::Eye { .. }
            | Op::RandUniform { .. }
            | Op::RandNormal { .. }
            | Op::Unary(_)
            | Op::Binary(_)
            | Op::Compare(_)
            | Op::Where
            | Op::Cast { .. }
            | Op::Reduce { .. }
            | Op::Cumsum { .. }
            | Op::Softmax { .. }
            | Op::LogSoftmax { .. }
            | Op::Normalize { .. }
            | Op::NormalizeBackward { .. }
            | Op::Matmul
            | Op::Reshape { .. }
            | Op::Permute { .. }
            | Op::Slice { .. }
            | Op::Expand { .. }
            | Op::Contiguous
            | Op::Concat { .. }
            | Op::Gather { .. }
            | Op::IndexSelect { .. }
            | Op::ScatterAdd { .. }
            | Op::Pad { .. }
            | Op::OneHot { .. }
            | Op::Conv2d(_)
            | Op::ConvTranspose2d { .. }
            | Op::Conv2dBackwardWeight { .. }
            | Op::Pool2d(_)
            | Op::Pool2dBackward(_)
            | Op::AdamStep(_)
            | Op::Custom(_) => {}
        }
    }

    /// Every `Op` variant's serde name (snake_case), in declaration order.
    const OP_VARIANTS: [&str; 35] = [
        "full",
        "arange",
        "eye",
        "rand_uniform",
        "rand_normal",
        "unary",
        "binary",
        "compare",
        "where",
        "cast",
        "reduce",
        "cumsum",
        "softmax",
        "log_softmax",
        "normalize",
        "normalize_backward",
        "matmul",
        "reshape",
        "permute",
        "slice",
        "expand",
        "contiguous",
        "concat",
        "gather",
        "index_select",
        "scatter_add",
        "pad",
        "one_hot",
        "conv2d",
        "conv_transpose2d",
        "conv2d_backward_weight",
        "pool2d",
        "pool2d_backward",
        "adam_step",
        "custom",
    ];

    #[test]
    fn every_op_variant_has_a_sample_whose_kernels_are_variants() {
        let samples = samples();
        let names: Vec<&str> = samples.iter().map(|(op, _)| op.name()).collect();
        // each sample's serde name is a listed one
        for (op, _) in &samples {
            assert!(OP_VARIANTS.contains(&variant_of(op).as_str()), "{op:?}");
        }
        for variant in OP_VARIANTS.iter() {
            // views never reach a backend; the families are named by their inner op (checked below)
            // custom ops have no kernel of kiln's own (tests/conformance runs one)
            let families = [
                "custom",
                "unary",
                "binary",
                "compare",
                "reduce",
                "pool2d",
                "pool2d_backward",
            ];
            if ["reshape", "permute", "slice", "expand"].contains(variant)
                || families.contains(variant)
            {
                continue;
            }
            assert!(
                names.contains(variant),
                "no sample of Op::{variant} in samples()"
            );
        }
        for (family, all, sampled) in [
            (
                "UnaryOp",
                serde_variants::<UnaryOp>(),
                UnaryOp::samples()
                    .iter()
                    .map(variant_of)
                    .collect::<Vec<_>>(),
            ),
            (
                "BinaryOp",
                serde_variants::<BinaryOp>(),
                BinaryOp::ALL.iter().map(variant_of).collect(),
            ),
            (
                "CmpOp",
                serde_variants::<CmpOp>(),
                CmpOp::ALL.iter().map(variant_of).collect(),
            ),
            (
                "ReduceOp",
                serde_variants::<ReduceOp>(),
                ReduceOp::samples().iter().map(variant_of).collect(),
            ),
            (
                "Pool2d",
                serde_variants::<Pool2d>(),
                Pool2d::samples().iter().map(variant_of).collect(),
            ),
        ] {
            assert_eq!(all.len(), sampled.len(), "{family}: {all:?} vs {sampled:?}");
            for v in all {
                assert!(
                    sampled.iter().any(|s| s == v),
                    "{family}::{v} has no sample"
                );
            }
        }
        // every sample plans (an op that stops planning would silently drop its kernels)
        for (op, inputs) in &samples {
            let metas: Vec<_> = inputs
                .iter()
                .map(|v| (v.dtype, v.layout.shape().clone()))
                .collect();
            let Ok(outputs) = op.infer(&metas) else {
                continue;
            };
            plan(op, inputs, &outputs).unwrap_or_else(|e| panic!("{op:?}: {e}"));
        }
    }

    fn matmul_plan(m: usize, k: usize, n: usize) -> Plan {
        let a = Layout::contiguous(Shape::from([m, k]));
        let b = Layout::contiguous(Shape::from([k, n]));
        let metas = [ViewMeta::new(&a, DType::F32), ViewMeta::new(&b, DType::F32)];
        plan(&Op::Matmul, &metas, &[(DType::F32, Shape::from([m, n]))]).unwrap()
    }

    fn view(dims: &[usize], strides: &[isize], offset: usize) -> ViewMeta {
        let l = Layout::from_parts(Shape::from(dims), strides.to_vec(), offset);
        ViewMeta::new(&l, DType::F32)
    }

    /// The one dispatch of `op` on `inputs`, after checking its kernel is a listed variant.
    fn single(op: Op, inputs: &[ViewMeta]) -> Dispatch {
        let metas: Vec<_> = inputs
            .iter()
            .map(|v| (v.dtype, v.layout.shape().clone()))
            .collect();
        let outputs = op.infer(&metas).unwrap();
        let mut p = plan(&op, inputs, &outputs).unwrap();
        assert_eq!(p.dispatches.len(), 1);
        let d = p.dispatches.remove(0);
        assert!(
            variants().contains(&d.kernel),
            "{} is not in variants()",
            d.kernel.label()
        );
        d
    }

    /// Whether `d` takes the vec4 kernel, and which input it broadcasts ("" for none).
    fn path(d: &Dispatch) -> (bool, &str) {
        let get = |k: &str| d.kernel.defines.get(k).map_or("", String::as_str);
        (get("VEC4") == "1", get("BCAST"))
    }

    fn threads(d: &Dispatch) -> u32 {
        d.workgroups.iter().product::<u32>() * WG
    }

    #[test]
    fn contiguous_aligned_elementwise_ops_use_vec4() {
        let add = Op::Binary(BinaryOp::Add);
        let x = view(&[6, 8], &[8, 1], 0);
        let d = single(add.clone(), &[x.clone(), x.clone()]);
        assert_eq!(path(&d), (true, ""));
        // one invocation per 4 elements
        let big = view(&[64, 64], &[64, 1], 0);
        let d = single(add.clone(), &[big.clone(), big]);
        assert_eq!(threads(&d), 1024);
        let d = single(Op::Unary(UnaryOp::Exp), from_ref(&x));
        assert_eq!(path(&d), (true, ""));
        let cond = ViewMeta::new(&x.layout, DType::Bool);
        let d = single(Op::Where, &[cond, x.clone(), x.clone()]);
        assert_eq!(path(&d), (true, ""));
        // offsets that are multiples of 4
        let d = single(add.clone(), &[view(&[8], &[1], 4), view(&[8], &[1], 12)]);
        assert_eq!(path(&d), (true, ""));
    }

    #[test]
    fn unaligned_odd_or_strided_views_take_the_strided_kernel() {
        let add = Op::Binary(BinaryOp::Add);
        let x = view(&[6, 8], &[8, 1], 0);
        for other in [
            view(&[6, 8], &[8, 1], 1),  // starts at element 1
            view(&[6, 8], &[1, 6], 0),  // transposed
            view(&[6, 8], &[16, 2], 0), // every other element
        ] {
            let d = single(add.clone(), &[x.clone(), other.clone()]);
            assert_eq!(path(&d), (false, ""), "{:?}", other.layout);
            assert_eq!(d.params[2], 0);
        }
        let odd = view(&[5, 3], &[3, 1], 0);
        let d = single(add.clone(), &[odd.clone(), odd.clone()]);
        assert_eq!(path(&d), (false, ""));
        // a column broadcast is fast when its rows are whole vec4s (a channel of NCHW)
        let d = single(add.clone(), &[x.clone(), view(&[6, 8], &[1, 0], 0)]);
        assert_eq!((path(&d), d.params[2], d.params[3]), ((true, "b"), 6, 8));
        let (x6, col6) = (view(&[4, 6], &[6, 1], 0), view(&[4, 6], &[1, 0], 0));
        assert_eq!(path(&single(add.clone(), &[x6, col6])), (false, ""));
        // a row of 6, both inputs broadcast, and a broadcast a with b unaligned are not fast
        let (y, row6) = (view(&[4, 6], &[6, 1], 0), view(&[6], &[1], 0));
        assert_eq!(path(&single(add.clone(), &[y, row6])), (false, ""));
        let (row, column) = (view(&[8], &[1], 0), view(&[6, 1], &[1, 1], 0));
        assert_eq!(path(&single(add.clone(), &[row, column])), (false, ""));
        let (one, shifted) = (view(&[1], &[1], 0), view(&[6, 8], &[8, 1], 1));
        assert_eq!(path(&single(add, &[one, shifted])), (false, ""));
    }

    #[test]
    fn scalar_and_row_broadcasts_use_vec4() {
        let x = view(&[6, 8], &[8, 1], 0);
        let mul = Op::Binary(BinaryOp::Mul);
        // a bias row at an odd offset: b is read as scalars
        let d = single(mul.clone(), &[x.clone(), view(&[8], &[1], 3)]);
        assert_eq!((path(&d), d.params[2]), ((true, "b"), 8));
        let d = single(mul.clone(), &[x.clone(), view(&[], &[], 5)]);
        assert_eq!((path(&d), d.params[2]), ((true, "b"), 1));
        let lt = Op::Compare(kiln_core::CmpOp::Lt);
        let d = single(lt.clone(), &[x.clone(), view(&[1, 8], &[0, 1], 0)]);
        assert_eq!((path(&d), d.params[2]), ((true, "b"), 8));
        // the same with the broadcast input first (1 - x, bias + x)
        let d = single(lt, &[view(&[], &[], 2), x.clone()]);
        assert_eq!((path(&d), d.params[2]), ((true, "a"), 1));
        let d = single(Op::Binary(BinaryOp::Sub), &[view(&[8], &[1], 0), x]);
        assert_eq!((path(&d), d.params[2]), ((true, "a"), 8));
    }

    #[test]
    fn contiguous_rows_of_softmax_and_reductions_use_vec4() {
        let sum = |axes: Vec<usize>| Op::Reduce {
            op: ReduceOp::Sum,
            axes,
            keepdim: false,
        };
        let cases = [
            (
                Op::Softmax {
                    axis: 1,
                    causal: false,
                },
                view(&[3, 1000], &[1000, 1], 0),
                true,
            ),
            (Op::LogSoftmax { axis: 1 }, view(&[3, 8], &[8, 1], 4), true),
            (
                Op::Softmax {
                    axis: 1,
                    causal: false,
                },
                view(&[3, 8], &[8, 1], 1),
                false,
            ),
            (
                Op::Softmax {
                    axis: 1,
                    causal: false,
                },
                view(&[3, 7], &[7, 1], 0),
                false,
            ),
            (
                Op::Softmax {
                    axis: 0,
                    causal: false,
                },
                view(&[8, 8], &[8, 1], 0),
                false,
            ),
            (
                Op::Softmax {
                    axis: 1,
                    causal: false,
                },
                view(&[8, 8], &[1, 8], 0),
                false,
            ),
            (sum(vec![1]), view(&[3, 1000], &[1000, 1], 0), true),
            (sum(vec![1]), view(&[3, 8], &[10, 1], 0), false),
            (sum(vec![1]), view(&[3, 8], &[8, 1], 2), false),
            (sum(vec![0]), view(&[64, 8], &[8, 1], 0), true),
            (sum(vec![0]), view(&[64, 7], &[7, 1], 0), false),
            (sum(vec![]), view(&[64, 8], &[8, 1], 0), true),
        ];
        for (op, x, vec4) in cases {
            let d = single(op.clone(), from_ref(&x));
            assert_eq!(path(&d).0, vec4, "{op:?} of {:?}", x.layout);
        }
    }

    #[test]
    fn few_long_runs_are_reduced_in_chunks_first() {
        let x = view(&[3, 40000], &[40000, 1], 0);
        for op in [ReduceOp::Mean, ReduceOp::Max] {
            let r = Op::Reduce {
                op,
                axes: vec![1],
                keepdim: false,
            };
            let p = plan(&r, from_ref(&x), &[(DType::F32, Shape::from([3]))]).unwrap();
            assert_eq!(p.dispatches.len(), 2, "{op:?}");
            let (first, second) = (&p.dispatches[0], &p.dispatches[1]);
            // 32 chunks of 1250 per output, then the 32 results of each
            assert_eq!(&first.params[..4], &[96, 1, 1, 1250]);
            assert_eq!(&second.params[..4], &[3, 1, 1, 32]);
            assert_eq!(first.buffers, vec![Buffer::Input(0), Buffer::Scratch(0)]);
            assert_eq!(second.buffers, vec![Buffer::Scratch(0), Buffer::Output(0)]);
            assert_eq!(p.scratch_bytes, vec![96 * ELEM_BYTES]);
            assert!(p.dispatches.iter().all(|d| variants().contains(&d.kernel)));
        }
        // many outputs, short or prime runs, and ops that do not combine stay in one pass
        let one_pass = [
            (ReduceOp::Sum, view(&[300, 40000], &[40000, 1], 0)),
            (ReduceOp::Sum, view(&[3, 8000], &[8000, 1], 0)),
            (ReduceOp::Sum, view(&[3, 40009], &[40009, 1], 0)),
            (ReduceOp::ArgMax, view(&[3, 40000], &[40000, 1], 0)),
            (
                ReduceOp::Var { correction: 1 },
                view(&[3, 40000], &[40000, 1], 0),
            ),
        ];
        for (op, x) in one_pass {
            let r = Op::Reduce {
                op,
                axes: vec![1],
                keepdim: false,
            };
            let metas = [(DType::F32, x.layout.shape().clone())];
            let p = plan(&r, from_ref(&x), &r.infer(&metas).unwrap()).unwrap();
            assert_eq!(p.dispatches.len(), 1, "{op:?} of {:?}", x.layout);
        }
    }

    #[test]
    fn columns_fold_in_workgroups_of_32_columns_by_a_chunk_of_rows() {
        let reduce0 = |op| Op::Reduce {
            op,
            axes: vec![0],
            keepdim: false,
        };
        // a linear layer's bias gradient: [16384, 384] down the columns as 96 vec4 columns,
        // chunks of 96 rows (3 x 171 workgroups), then the [171, 384] partials in one chunk
        let x = view(&[16384, 384], &[384, 1], 0);
        let out = [(DType::F32, Shape::from([384]))];
        let p = plan(&reduce0(ReduceOp::Mean), from_ref(&x), &out).unwrap();
        assert_eq!(p.dispatches.len(), 2);
        let (first, second) = (&p.dispatches[0], &p.dispatches[1]);
        let scale = (1.0f32 / 16384.0).to_bits();
        assert_eq!(first.params, [96, 16384, 96, 0, 96, scale]);
        assert_eq!(first.workgroups, [3, 171, 1]);
        assert_eq!(first.kernel.file, "columns.wgsl");
        assert_eq!(first.kernel.defines["OP"], "sum");
        assert!(first.kernel.defines.contains_key("VEC4"));
        assert_eq!(second.params, [96, 171, 96, 0, 171, scale]);
        assert_eq!(
            (second.workgroups, &*second.kernel.defines["OP"]),
            ([3, 1, 1], "mean")
        );
        assert_eq!(second.buffers, [Buffer::Scratch(0), Buffer::Output(0)]);
        assert_eq!(p.scratch_bytes, vec![171 * 384 * ELEM_BYTES]);
        // up to 2048 rows in one launch; columns that are not whole vec4s read scalars
        for (dims, offset, groups, vec4) in [
            ([8, 70000], 0, 547, true),
            ([64, 8], 0, 1, true),
            ([2048, 10], 0, 1, false),
            ([64, 8], 2, 1, false),
        ] {
            let x = view(&dims, &[dims[1] as isize, 1], offset);
            let out = [(DType::F32, Shape::from([dims[1]]))];
            let p = plan(&reduce0(ReduceOp::Max), from_ref(&x), &out).unwrap();
            assert_eq!(p.dispatches.len(), 1, "{dims:?}");
            let d = &p.dispatches[0];
            assert_eq!(d.workgroups, [groups, 1, 1], "{dims:?}");
            assert_eq!(d.kernel.defines.contains_key("VEC4"), vec4, "{dims:?}");
        }
        // columns over more than one kept axis, and variance, take the general path
        let x = view(&[64, 3, 8], &[24, 8, 1], 0);
        let r = Op::Reduce {
            op: ReduceOp::Sum,
            axes: vec![0],
            keepdim: false,
        };
        let p = plan(&r, from_ref(&x), &[(DType::F32, Shape::from([3, 8]))]).unwrap();
        assert_eq!(p.dispatches[0].kernel.file, "columns.wgsl");
        let x = view(&[64, 3, 8], &[24, 1, 3], 0);
        let p = plan(&r, from_ref(&x), &[(DType::F32, Shape::from([3, 8]))]).unwrap();
        assert_eq!(p.dispatches[0].kernel.file, "reduce.wgsl");
        let var = Op::Reduce {
            op: ReduceOp::Var { correction: 1 },
            axes: vec![0],
            keepdim: false,
        };
        let x = view(&[64, 8], &[8, 1], 0);
        let p = plan(&var, from_ref(&x), &[(DType::F32, Shape::from([8]))]).unwrap();
        assert_eq!(p.dispatches[0].kernel.file, "reduce.wgsl");
    }

    #[test]
    fn long_k_with_few_output_tiles_is_split_and_summed() {
        let p = matmul_plan(6, 3000, 5);
        assert_eq!(p.dispatches.len(), 2);
        let (gemm, sum) = (&p.dispatches[0], &p.dispatches[1]);
        let (k_chunk, splits) = (gemm.params[5] as usize, gemm.params[6] as usize);
        assert!(splits > 1 && k_chunk % 16 == 0);
        assert!(k_chunk * (splits - 1) < 3000 && k_chunk * splits >= 3000);
        assert_eq!(gemm.buffers[2], Buffer::Scratch(0));
        assert_eq!(p.scratch_bytes, vec![(splits * 6 * 5) as u64 * ELEM_BYTES]);
        assert_eq!(sum.kernel.file, "columns.wgsl");
        assert_eq!(sum.buffers, vec![Buffer::Scratch(0), Buffer::Output(0)]);
    }

    #[test]
    fn splits_aim_at_busy_workgroups_within_their_limits() {
        // MNIST's conv2 weight gradient at batch 256: 5 tiles
        assert_eq!(
            split_k(5, 147_456, 64 * 288),
            SPLIT_K_WORKGROUPS.div_ceil(5)
        );
        // conv1's: a single tile, at most SPLIT_K_MAX_SPLITS partial sums
        assert_eq!(split_k(1, 173_056, 32 * 9), SPLIT_K_MAX_SPLITS);
        assert_eq!(split_k(1, 3000, 30), 3000 / SPLIT_K_MIN_DEPTH);
        assert_eq!(split_k(2, 1 << 30, 1 << 20), SPLIT_K_MAX_PARTIALS >> 20);
        assert_eq!(split_k(SPLIT_K_WORKGROUPS, 1 << 20, 1 << 10), 1);
    }

    #[test]
    fn a_single_images_convolution_splits_k_and_a_batch_does_not() {
        // resnet50's 3x3 convolution of 256 channels at 14 x 14: 16 tiles over K = 2304
        let conv = |n: usize| {
            let x = Layout::contiguous(Shape::from([n, 256, 14, 14]));
            let w = Layout::contiguous(Shape::from([256, 256, 3, 3]));
            let metas = [ViewMeta::new(&x, DType::F32), ViewMeta::new(&w, DType::F32)];
            let p = Conv2dParams {
                padding: [1, 1],
                ..Default::default()
            };
            let out = (DType::F32, Shape::from([n, 256, 14, 14]));
            plan(&Op::Conv2d(p), &metas, &[out]).unwrap()
        };
        let one = conv(1);
        assert_eq!(one.dispatches[0].params[6], 2304 / SPLIT_K_MIN_DEPTH as u32);
        assert_eq!(one.dispatches.len(), 2, "the splits, then their sum");
        let two = conv(2);
        assert_eq!((two.dispatches.len(), two.dispatches[0].params[6]), (1, 1));
    }

    #[test]
    fn outputs_of_many_tiles_or_short_k_are_not_split() {
        for (m, k, n) in [(4096, 4096, 4096), (6, 200, 5), (3, 0, 4)] {
            let p = matmul_plan(m, k, n);
            assert_eq!(p.dispatches.len(), 1, "{m}x{k}x{n}");
            assert_eq!(p.dispatches[0].params[6], 1);
        }
    }

    #[test]
    fn tiles_are_as_large_as_keeps_the_gpu_busy() {
        let [big, tall, short, small, thin] = GemmTile::ALL;
        let pick = |m, n| GemmTile::pick(GemmMode::ConvTranspose, m, n, 1);
        assert_eq!(pick(4096, 4096), big);
        assert_eq!(pick(1024, 1024), small);
        assert_eq!(pick(4096, 400), tall);
        assert_eq!(pick(64, 256 * 24 * 24), small);
        assert_eq!(pick(32, 256 * 26 * 26), short);
        assert_eq!(pick(64, 288), small);
        // a 32-row output wastes half of a 64 x 64 tile whatever its columns
        let wgrad = |m, n| GemmTile::pick(GemmMode::ConvWeightGrad, m, n, 1);
        assert_eq!(wgrad(32, 9), short);
        assert_eq!(wgrad(64, 288), small);
        // a matmul of at most 4 rows is a matrix-vector product, whatever the rest
        let matmul = |m, n| GemmTile::pick(GemmMode::Matmul, m, n, 8);
        assert_eq!(matmul(1, 128), GemmTile::SKINNY);
        assert_eq!(matmul(4, 4096), GemmTile::SKINNY);
        assert_eq!(matmul(5, 4096), short);
        assert_eq!(pick(4, 4096), short);
        assert_eq!(GemmTile::pick(GemmMode::Conv, 32, 676, 1), thin);
        assert_eq!(GemmTile::pick(GemmMode::Conv, 64, 576, 1), small);
        for t in GemmTile::ALL {
            let wg = (t.bm / t.tm) * (t.bn / t.tn);
            assert_eq!((t.bk * t.bm / 4) % wg, 0);
            assert_eq!((t.bk * t.bn / 4) % wg, 0);
            assert!(16 * t.bk * (t.bm / 4 + 1 + t.bn / 4) <= 16 << 10);
        }
    }

    fn sum_plan(dims: &[usize], axes: Vec<usize>) -> Plan {
        let x = Layout::contiguous(Shape::from(dims));
        let out: Vec<usize> = (0..dims.len())
            .filter(|a| !axes.contains(a))
            .map(|a| dims[a])
            .collect();
        let op = Op::Reduce {
            op: ReduceOp::Sum,
            axes,
            keepdim: false,
        };
        let outputs = [(DType::F32, Shape::from(out))];
        plan(&op, &[ViewMeta::new(&x, DType::F32)], &outputs).unwrap()
    }

    #[test]
    fn grids_cover_every_workgroup_with_little_to_spare() {
        let max = MAX_GRID as u64;
        for groups in [
            1,
            7,
            max,
            max + 1,
            65536,
            3 * max + 5,
            max * max,
            max * max + 1,
        ] {
            let [x, y, z] = grid(groups, "test").unwrap().map(u64::from);
            assert!(x <= max && y <= max && z <= max, "{groups}: {x} {y} {z}");
            assert!(x * y * z >= groups, "{groups}: {x} {y} {z}");
            // less than one row of x spare per plane
            assert!(x * y * z - groups < y * z, "{groups}: {x} {y} {z}");
        }
        assert_eq!(grid(65536, "test").unwrap(), [32768, 2, 1]);
        assert!(grid(max * max * max + 1, "test").is_err());
    }

    #[test]
    fn few_long_reductions_run_in_chunks() {
        // 64 outputs of 147456 elements, as 64 x 8 chunks
        let p = sum_plan(&[64, 147456], vec![1]);
        assert_eq!(p.dispatches.len(), 2);
        assert_eq!(
            (p.dispatches[0].params[0], p.dispatches[0].params[3]),
            (512, 18432)
        );
        assert_eq!(
            p.dispatches[0].buffers,
            vec![Buffer::Input(0), Buffer::Scratch(0)]
        );
        assert_eq!(
            p.dispatches[1].buffers,
            vec![Buffer::Scratch(0), Buffer::Output(0)]
        );
        for (dims, axes) in [(&[4096, 4096][..], vec![1]), (&[64, 100][..], vec![0])] {
            assert_eq!(sum_plan(dims, axes).dispatches.len(), 1, "{dims:?}");
        }
    }

    #[test]
    fn contiguous_runs_are_reduced_first() {
        // a conv bias gradient: the 256 x 64 runs of 576 as rows, then 64 rows of 256 partials
        let p = sum_plan(&[256, 64, 24, 24], vec![0, 2, 3]);
        assert_eq!(p.dispatches.len(), 2);
        let (first, second) = (&p.dispatches[0].params, &p.dispatches[1].params);
        assert_eq!((first[0], first[3]), (64 * 256, 576));
        assert_eq!((second[0], second[3]), (64, 256));
        assert_eq!(
            p.dispatches[0].buffers,
            vec![Buffer::Input(0), Buffer::Scratch(0)]
        );
        assert_eq!(
            p.dispatches[1].buffers,
            vec![Buffer::Scratch(0), Buffer::Output(0)]
        );
        // runs shorter than SPLIT_MIN_RUN keep the strided walk
        let p = sum_plan(&[256, 64, 4, 4], vec![0, 2, 3]);
        assert_eq!(p.dispatches.len(), 1);
        assert_eq!(p.dispatches[0].params[3], 256 * 16);
    }
}
