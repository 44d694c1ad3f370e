//! Large f32 convolutions on cuDNN: conv2d forward (`Op::Conv2d`) and its input gradient
//! (`Op::ConvTranspose2d`), when cuDNN 9 can be loaded, the views are contiguous and the
//! product has at least [`MIN_FLOPS`]. Anything else, and every weight gradient, runs
//! gemm.wgsl's implicit GEMM, the kernel every other backend runs.
//!
//! Measured on an H100 with the MNIST CNN at batch 256 (conv2: 32 -> 64 channels, 3 x 3, on
//! 26 x 26): gemm.wgsl's forward took 270 µs and its input gradient 498 µs (13 TFLOP/s);
//! cuDNN's 198 and 279 µs. Its deterministic weight gradient (ALGO_1) took 515 µs against
//! gemm.wgsl's 320, so weight gradients stay on gemm.wgsl. Each cuDNN call costs 60-130 µs of
//! host time (cuDNN 9 runs its legacy API through its graph API), which only a large product
//! hides: at batch 1 and 64 the MNIST step was slower with cuDNN than without.
//!
//! Algorithms come from cuDNN's heuristics (`cudnnGet*Algorithm_v7`), once per geometry: the
//! first that is deterministic, in FMA arithmetic under strict fp32
//! ([`MatmulPrecision::Strict`]), so results do not change from run to run and no TF32
//! rounding creeps in. FFT and Winograd algorithms qualify unless
//! [`CudaOptions::conv_transforms`](super::CudaOptions::conv_transforms) is off; then only
//! algorithms that sum the products directly, as accurate as gemm.wgsl's, do. The FFT input
//! gradient is what PyTorch's fp32 default runs for the MNIST CNN's conv2: about 118 µs
//! against 279 for the direct one (H200), +14% images/s for the training step at batch 256.

use super::{CudaBuffer, CudaRuntime, MatmulPrecision};
use cudarc::cudnn::{result as dnn, sys};
use kiln_core::{DType, Error, Op, Result, Shape, View};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};

/// The two convolution ops cuDNN runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Pass {
    Forward,
    InputGrad,
}

/// What a plan depends on: the pass, the conv2d geometry (x, weight and y in conv2d's own
/// terms) and its settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Geometry {
    pass: Pass,
    x: [c_int; 4],
    w: [c_int; 4],
    y: [c_int; 4],
    /// padding, stride, dilation (h, w each) and groups
    settings: [c_int; 7],
}

enum Algo {
    Forward(sys::cudnnConvolutionFwdAlgo_t),
    InputGrad(sys::cudnnConvolutionBwdDataAlgo_t),
}

impl Algo {
    /// Whether the algorithm adds the products themselves, in f32, as gemm.wgsl and the CPU
    /// do. FFT and Winograd algorithms transform the operands first and lose accuracy: an FFT
    /// weight gradient over 6 x 64 x 64 positions was off by 2e-3 relative to the CPU's.
    fn sums_directly(&self) -> bool {
        use sys::cudnnConvolutionBwdDataAlgo_t as D;
        use sys::cudnnConvolutionFwdAlgo_t as F;
        match self {
            Algo::Forward(a) => matches!(
                a,
                F::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM
                    | F::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM
                    | F::CUDNN_CONVOLUTION_FWD_ALGO_GEMM
                    | F::CUDNN_CONVOLUTION_FWD_ALGO_DIRECT
            ),
            Algo::InputGrad(a) => matches!(
                a,
                D::CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 | D::CUDNN_CONVOLUTION_BWD_DATA_ALGO_1
            ),
        }
    }
}

/// What the heuristics say of one algorithm for a geometry.
struct Fit {
    status: sys::cudnnStatus_t,
    determinism: sys::cudnnDeterminism_t,
    math: sys::cudnnMathType_t,
    memory: usize,
}

impl Fit {
    /// Usable here, deterministic, in FMA arithmetic under strict fp32, and with a workspace
    /// of at most [`MAX_WORKSPACE`].
    fn qualifies(&self, strict: bool) -> bool {
        self.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS
            && self.determinism == sys::cudnnDeterminism_t::CUDNN_DETERMINISTIC
            && (!strict || self.math == sys::cudnnMathType_t::CUDNN_FMA_MATH)
            && self.memory <= MAX_WORKSPACE
    }
}

/// Which algorithms a backend's options admit.
#[derive(Clone, Copy)]
struct Rules {
    /// Strict fp32: FMA arithmetic only, no TF32.
    strict: bool,
    /// FFT and Winograd algorithms too.
    transforms: bool,
}

/// One geometry's descriptors and algorithm.
struct Plan {
    x: sys::cudnnTensorDescriptor_t,
    w: sys::cudnnFilterDescriptor_t,
    y: sys::cudnnTensorDescriptor_t,
    conv: sys::cudnnConvolutionDescriptor_t,
    /// `None` where no algorithm qualified: the op falls back to gemm.wgsl.
    algo: Option<Algo>,
    workspace: usize,
}

impl Plan {
    /// Destroys the descriptors that were made (null ones are skipped).
    ///
    /// # Safety
    /// Nothing uses them any more.
    unsafe fn destroy(&self) {
        // SAFETY: per the caller.
        unsafe {
            if !self.x.is_null() {
                let _ = dnn::destroy_tensor_descriptor(self.x);
            }
            if !self.w.is_null() {
                let _ = dnn::destroy_filter_descriptor(self.w);
            }
            if !self.y.is_null() {
                let _ = dnn::destroy_tensor_descriptor(self.y);
            }
            if !self.conv.is_null() {
                let _ = dnn::destroy_convolution_descriptor(self.conv);
            }
        }
    }
}

/// The cuDNN handle and the plans made so far.
pub(super) struct Dnn {
    handle: sys::cudnnHandle_t,
    plans: HashMap<Geometry, Plan>,
}
// SAFETY: the handle and descriptors are used under the backend's lock, with its context bound.
unsafe impl Send for Dnn {}

/// Whether cuDNN was looked for, and what was found.
pub(super) enum DnnState {
    Unknown,
    /// Not installed (or not version 9): convolutions run gemm.wgsl.
    Missing,
    Ready(Dnn),
}

/// Convolutions cuDNN ran (tests check that it did).
#[cfg(test)]
pub(super) static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The smallest product cuDNN takes: 2^31 flops (about 50 µs of an H100 at cuDNN's fp32 rate),
/// enough to hide a call's host time while the GPU works. The MNIST CNN's conv2 at batch 256 is
/// 5.4 GFLOP; at batch 64 (1.4), where cuDNN made the training step slower, it stays on
/// gemm.wgsl.
const MIN_FLOPS: f64 = (1u64 << 31) as f64;

/// Workspaces larger than this are not asked for (the next algorithm is taken).
const MAX_WORKSPACE: usize = 1 << 30;

fn dnn_err(what: &'static str) -> impl Fn(dnn::CudnnError) -> Error {
    move |e| Error::device("cuda", format!("cuDNN {what}: {e:?}"))
}

impl Dnn {
    /// A handle on `stream`, or `None` where cuDNN 9 cannot be loaded.
    fn open(stream: sys::cudaStream_t) -> Result<Option<Dnn>> {
        // SAFETY: only tries to open the library.
        if !unsafe { sys::is_culib_present() } || dnn::get_version() / 10000 != 9 {
            return Ok(None);
        }
        let handle = dnn::create_handle().map_err(dnn_err("handle"))?;
        // SAFETY: a fresh handle; the stream outlives it (both live as long as the backend).
        if let Err(e) = unsafe { dnn::set_stream(handle, stream) } {
            // SAFETY: nothing else has the handle.
            let _ = unsafe { dnn::destroy_handle(handle) };
            return Err(dnn_err("stream")(e));
        }
        Ok(Some(Dnn {
            handle,
            plans: HashMap::new(),
        }))
    }

    /// Destroys the plans' descriptors and the handle (the context must be bound).
    pub(super) fn close(mut self) {
        // SAFETY: nothing uses them any more.
        unsafe {
            for (_, p) in self.plans.drain() {
                p.destroy();
            }
            let _ = dnn::destroy_handle(self.handle);
        }
    }

    fn plan(&mut self, g: Geometry, rules: Rules) -> Result<&Plan> {
        if !self.plans.contains_key(&g) {
            let p = self.make_plan(&g, rules)?;
            self.plans.insert(g, p);
        }
        Ok(&self.plans[&g])
    }

    fn make_plan(&self, g: &Geometry, rules: Rules) -> Result<Plan> {
        let f32_ = sys::cudnnDataType_t::CUDNN_DATA_FLOAT;
        let nchw = sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW;
        let mut p = Plan {
            x: std::ptr::null_mut(),
            w: std::ptr::null_mut(),
            y: std::ptr::null_mut(),
            conv: std::ptr::null_mut(),
            algo: None,
            workspace: 0,
        };
        let created = (|| {
            p.x = dnn::create_tensor_descriptor()?;
            p.w = dnn::create_filter_descriptor()?;
            p.y = dnn::create_tensor_descriptor()?;
            p.conv = dnn::create_convolution_descriptor()?;
            Ok(())
        })();
        if let Err(e) = created {
            // SAFETY: the descriptors made before the failure are this plan's alone.
            unsafe { p.destroy() };
            return Err(dnn_err("descriptor")(e));
        }
        let math = if rules.strict {
            sys::cudnnMathType_t::CUDNN_FMA_MATH
        } else {
            sys::cudnnMathType_t::CUDNN_DEFAULT_MATH
        };
        let [ph, pw, sh, sw, dh, dw, groups] = g.settings;
        // SAFETY: fresh descriptors of this handle; the counts are what the arrays hold.
        let described = unsafe {
            dnn::set_tensor4d_descriptor(p.x, nchw, f32_, g.x)
                .and_then(|()| dnn::set_filter4d_descriptor(p.w, f32_, nchw, g.w))
                .and_then(|()| dnn::set_tensor4d_descriptor(p.y, nchw, f32_, g.y))
                .and_then(|()| {
                    dnn::set_convolution2d_descriptor(
                        p.conv,
                        ph,
                        pw,
                        sh,
                        sw,
                        dh,
                        dw,
                        sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                        f32_,
                    )
                })
                .and_then(|()| dnn::set_convolution_group_count(p.conv, groups))
                .and_then(|()| dnn::set_convolution_math_type(p.conv, math))
        };
        // A geometry cuDNN rejects (BAD_PARAM, NOT_SUPPORTED) keeps gemm.wgsl.
        if described.is_err() {
            return Ok(p);
        }
        // The heuristics' ranking for one pass, with what they say of each algorithm.
        macro_rules! ranked {
            ($get:path, $perf:ty, $count:literal, $algo:path, $($desc:expr),+) => {{
                let mut r = [std::mem::zeroed::<$perf>(); $count];
                let mut found: c_int = 0;
                let ok = $get(self.handle, $($desc),+, $count, &mut found, r.as_mut_ptr());
                let n = if ok.is_ok() { found.clamp(0, $count) as usize } else { 0 };
                r[..n]
                    .iter()
                    .map(|r| {
                        let fit = Fit {
                            status: r.status,
                            determinism: r.determinism,
                            math: r.mathType,
                            memory: r.memory,
                        };
                        ($algo(r.algo), fit)
                    })
                    .collect::<Vec<_>>()
            }};
        }
        // SAFETY: the descriptors were set above; each array holds the count asked for.
        let candidates = unsafe {
            match g.pass {
                Pass::Forward => ranked!(
                    dnn::get_convolution_forward_algorithm,
                    sys::cudnnConvolutionFwdAlgoPerf_t,
                    8,
                    Algo::Forward,
                    p.x,
                    p.w,
                    p.conv,
                    p.y
                ),
                Pass::InputGrad => ranked!(
                    dnn::get_convolution_backward_data_algorithm,
                    sys::cudnnConvolutionBwdDataAlgoPerf_t,
                    6,
                    Algo::InputGrad,
                    p.w,
                    p.y,
                    p.conv,
                    p.x
                ),
            }
        };
        if let Some((algo, fit)) = candidates
            .into_iter()
            .find(|(a, f)| (rules.transforms || a.sums_directly()) && f.qualifies(rules.strict))
        {
            p.algo = Some(algo);
            p.workspace = fit.memory;
        }
        Ok(p)
    }
}

/// Dims as cuDNN's ints, `None` past `c_int` or for an empty tensor.
fn dims4(s: &Shape) -> Option<[c_int; 4]> {
    let d = s.dims();
    if d.len() != 4 || d.contains(&0) {
        return None;
    }
    let mut out = [0; 4];
    for (o, &v) in out.iter_mut().zip(d) {
        *o = c_int::try_from(v).ok()?;
    }
    Some(out)
}

/// The address of a contiguous f32 view, 16-byte aligned (as cuDNN's vector loads want), or
/// `None`.
fn address(v: &View<'_>, buf: &CudaBuffer) -> Option<u64> {
    let offset = v.layout.offset();
    (v.layout.is_contiguous() && offset.is_multiple_of(4)).then(|| buf.ptr + 4 * offset as u64)
}

/// `Some(output)` when cuDNN ran the convolution `op`, `None` to fall back to the planned
/// kernels.
pub(super) fn conv(
    b: &CudaRuntime,
    op: &Op,
    inputs: &[View<'_>],
    bufs: &[&CudaBuffer],
    out: &Shape,
) -> Result<Option<CudaBuffer>> {
    let (pass, c) = match op {
        Op::Conv2d(c) => (Pass::Forward, c),
        Op::ConvTranspose2d { params, .. } => (Pass::InputGrad, params),
        _ => return Ok(None),
    };
    if inputs.iter().any(|v| v.dtype != DType::F32) {
        return Ok(None);
    }
    let (Some(pa), Some(pb)) = (address(&inputs[0], bufs[0]), address(&inputs[1], bufs[1])) else {
        return Ok(None);
    };
    let (Some(a), Some(bb), Some(o)) = (
        dims4(inputs[0].layout.shape()),
        dims4(inputs[1].layout.shape()),
        dims4(out),
    ) else {
        return Ok(None);
    };
    let settings = [
        c.padding[0],
        c.padding[1],
        c.stride[0],
        c.stride[1],
        c.dilation[0],
        c.dilation[1],
        c.groups,
    ]
    .map(|v| c_int::try_from(v).unwrap_or(c_int::MAX));
    // in conv2d's terms: x, weight, y
    let (x, w, y) = match pass {
        Pass::Forward => (a, bb, o),
        Pass::InputGrad => (o, bb, a),
    };
    // multiply-adds times 2: y's elements times the taps each sums over
    let flops = 2.0
        * y.iter().map(|&d| d as f64).product::<f64>()
        * w[1..].iter().map(|&d| d as f64).product::<f64>();
    if flops < MIN_FLOPS {
        return Ok(None);
    }
    let geometry = Geometry {
        pass,
        x,
        w,
        y,
        settings,
    };
    let inner = &b.inner;
    let mut guard = inner
        .dnn
        .lock()
        .map_err(|_| Error::device("cuda", "the cuDNN lock was poisoned by a panic"))?;
    if matches!(*guard, DnnState::Unknown) {
        *guard = match Dnn::open(inner.raw.stream.cast())? {
            Some(d) => DnnState::Ready(d),
            None => DnnState::Missing,
        };
    }
    let DnnState::Ready(d) = &mut *guard else {
        return Ok(None);
    };
    let handle = d.handle;
    let rules = Rules {
        strict: inner.options.matmul == MatmulPrecision::Strict,
        transforms: inner.options.conv_transforms,
    };
    let plan = d.plan(geometry, rules)?;
    let Some(algo) = &plan.algo else {
        return Ok(None);
    };
    let out_buf = b.alloc(4 * out.numel() as u64)?;
    let workspace = b.alloc(plan.workspace as u64)?;
    let (ws, ws_bytes) = (workspace.ptr as *mut c_void, plan.workspace);
    let (alpha, beta) = (1.0f32, 0.0f32);
    let (alpha, beta) = (
        (&alpha as *const f32).cast::<c_void>(),
        (&beta as *const f32).cast::<c_void>(),
    );
    let (pa, pb, po) = (
        pa as *const c_void,
        pb as *const c_void,
        out_buf.ptr as *mut c_void,
    );
    // SAFETY: the descriptors match the views' shapes (the plan's key), every pointer is a
    // live allocation of this context holding them, and the workspace has the plan's size.
    unsafe {
        match *algo {
            Algo::Forward(al) => dnn::convolution_forward(
                handle, alpha, plan.x, pa, plan.w, pb, plan.conv, al, ws, ws_bytes, beta, plan.y,
                po,
            ),
            Algo::InputGrad(al) => dnn::convolution_backward_data(
                handle, alpha, plan.w, pb, plan.y, pa, plan.conv, al, ws, ws_bytes, beta, plan.x,
                po,
            ),
        }
    }
    .map_err(|e| Error::device(op.name(), format!("cuDNN: {e:?}")))?;
    #[cfg(test)]
    CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(Some(out_buf))
}
