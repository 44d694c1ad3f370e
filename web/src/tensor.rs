//! `Tensor`: a JS handle on a kiln tensor. Ops are synchronous (they queue work on WebGPU);
//! reads are async (`await t.data()`). `dispose()` frees the data now; forgotten tensors are
//! freed by the FinalizationRegistry wasm-bindgen attaches to every exported class.

use crate::device::{Device, kind_of};
use crate::error::{IntoJs, JsResult, invalid, to_js};
use crate::{js, ledger};
use js_sys::{Array, Float32Array, Float64Array, Int32Array, Uint8Array, Uint32Array};
use kiln_core::{
    BinaryOp, CmpOp, Conv2dParams, DType, Pool2dParams, Shape, SliceRange, Tensor as KTensor,
    TensorData, UnaryOp,
};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

/// An n-dimensional array on a device.
#[wasm_bindgen]
#[derive(Debug)]
pub struct Tensor {
    handle: u32,
}

impl Drop for Tensor {
    fn drop(&mut self) {
        ledger::remove(self.handle);
    }
}

impl Tensor {
    /// Registers a kiln tensor and wraps it for JS.
    pub fn wrap(t: KTensor) -> Tensor {
        Tensor {
            handle: ledger::insert(t),
        }
    }
    /// The kiln tensor (an error when disposed).
    pub fn kiln(&self, op: &'static str) -> JsResult<KTensor> {
        ledger::get(self.handle, op)
    }
    /// The kiln tensor behind a JS value that should be a `Tensor`.
    pub fn from_js(v: &JsValue, op: &'static str) -> JsResult<KTensor> {
        match js::get(v, "__kilnHandle").as_f64() {
            Some(h) => ledger::get(h as u32, op),
            None => Err(invalid(
                op,
                format_args!("expected a Tensor, got {}", js::type_name(v)),
            )),
        }
    }
    /// Kiln tensors from a JS array of `Tensor`s.
    pub fn many_from_js(v: &JsValue, op: &'static str) -> JsResult<Vec<KTensor>> {
        if !Array::is_array(v) {
            return Err(invalid(
                op,
                format_args!("expected an array of Tensors, got {}", js::type_name(v)),
            ));
        }
        Array::from(v)
            .iter()
            .map(|t| Self::from_js(&t, op))
            .collect()
    }
    // `map` and `with_other` take their op as `&dyn Fn` and stay out of line: one copy of the
    // handle lookup, error conversion and wrapping serves every export that calls them, where
    // a generic `f` put a copy in each (issue 18, bytes).
    #[inline(never)]
    fn map(
        &self,
        op: &'static str,
        f: &dyn Fn(&KTensor) -> kiln_core::Result<KTensor>,
    ) -> JsResult<Tensor> {
        Ok(Tensor::wrap(f(&self.kiln(op)?).js()?))
    }
    #[inline(never)]
    fn with_other(
        &self,
        op: &'static str,
        other: &JsValue,
        f: &dyn Fn(&KTensor, &KTensor) -> kiln_core::Result<KTensor>,
    ) -> JsResult<Tensor> {
        let t = self.kiln(op)?;
        let o = match other.as_f64() {
            Some(v) => t.scalar_like(v).js()?,
            None => Self::from_js(other, op)?,
        };
        Ok(Tensor::wrap(f(&t, &o).js()?))
    }
}

fn dtype_arg(v: &JsValue, op: &'static str) -> JsResult<Option<DType>> {
    if v.is_undefined() || v.is_null() {
        return Ok(None);
    }
    v.as_string()
        .as_deref()
        .and_then(DType::parse)
        .map(Some)
        .ok_or_else(|| {
            invalid(
                op,
                format_args!(
                    "dtype must be one of \"f32\", \"f64\", \"f16\", \"i32\", \"u32\", \"bool\", got {}",
                    v.as_string().unwrap_or_else(|| js::type_name(v))
                ),
            )
        })
}

fn axes_arg(v: &JsValue, op: &'static str) -> JsResult<Vec<isize>> {
    if v.is_undefined() || v.is_null() {
        return Ok(Vec::new());
    }
    Ok(js::ints(v, op, "axes")?
        .into_iter()
        .map(|a| a as isize)
        .collect())
}

fn axis_arg(v: Option<i32>) -> isize {
    v.unwrap_or(-1) as isize
}

/// Host data from JS values: a TypedArray, a (nested) array of numbers or booleans, or a number.
pub(crate) fn data_from_js(
    data: &JsValue,
    shape: &JsValue,
    dtype: Option<DType>,
    op: &'static str,
) -> JsResult<TensorData> {
    let (natural, values): (DType, Result<Vec<u8>, Vec<f64>>) =
        if let Some(a) = data.dyn_ref::<Float32Array>() {
            (
                DType::F32,
                Ok(raw_bytes(a.buffer(), a.byte_offset(), a.byte_length())),
            )
        } else if let Some(a) = data.dyn_ref::<Float64Array>() {
            (
                DType::F64,
                Ok(raw_bytes(a.buffer(), a.byte_offset(), a.byte_length())),
            )
        } else if let Some(a) = data.dyn_ref::<Int32Array>() {
            (
                DType::I32,
                Ok(raw_bytes(a.buffer(), a.byte_offset(), a.byte_length())),
            )
        } else if let Some(a) = data.dyn_ref::<Uint32Array>() {
            (
                DType::U32,
                Ok(raw_bytes(a.buffer(), a.byte_offset(), a.byte_length())),
            )
        } else if js_sys::ArrayBuffer::is_view(data) && !data.is_instance_of::<js_sys::DataView>() {
            // Other typed arrays (Uint8Array from canvas pixels, Int16Array...): convert.
            (DType::F32, Err(Float64Array::new(data).to_vec()))
        } else if let Some(v) = data.as_f64() {
            (DType::F32, Err(vec![v]))
        } else if let Some(b) = data.as_bool() {
            (DType::Bool, Err(vec![b as u8 as f64]))
        } else if Array::is_array(data) {
            let dims = nested_dims(data);
            let mut flat = Vec::new();
            let mut bools = false;
            flatten(data, 0, &dims, &mut flat, &mut bools, op)?;
            let d = if bools { DType::Bool } else { DType::F32 };
            if shape.is_undefined() || shape.is_null() {
                let t = TensorData::from_f64_iter(flat, dtype.unwrap_or(d), Shape::new(dims));
                return Ok(t);
            }
            (d, Err(flat))
        } else {
            return Err(invalid(
                op,
                format_args!(
                    "data must be a TypedArray, an array or a number, got {}",
                    js::type_name(data)
                ),
            ));
        };
    let len = match &values {
        Ok(b) => b.len() / natural.size_in_bytes(),
        Err(v) => v.len(),
    };
    let dims = if shape.is_undefined() || shape.is_null() {
        if data.as_f64().is_some() || data.as_bool().is_some() {
            Vec::new()
        } else {
            vec![len]
        }
    } else {
        js::sizes(shape, op, "shape")?
    };
    let shape = Shape::new(dims);
    if shape.numel() != len {
        return Err(to_js(&kiln_core::Error::shape(
            op,
            format!(
                "{len} values given for shape {shape}, which holds {}",
                shape.numel()
            ),
        )));
    }
    let want = dtype.unwrap_or(natural);
    match values {
        Ok(bytes) => {
            let d = TensorData::from_bytes(bytes, natural, shape).js()?;
            Ok(if want == natural { d } else { d.convert(want) })
        }
        Err(v) => Ok(TensorData::from_f64_iter(v, want, shape)),
    }
}

fn raw_bytes(buf: js_sys::ArrayBuffer, offset: u32, len: u32) -> Vec<u8> {
    Uint8Array::new_with_byte_offset_and_length(&buf, offset, len).to_vec()
}

/// The dimensions of a nested array, read along its first elements.
fn nested_dims(v: &JsValue) -> Vec<usize> {
    let mut dims = Vec::new();
    let mut cur = v.clone();
    while Array::is_array(&cur) {
        let a: Array = cur.unchecked_into();
        dims.push(a.length() as usize);
        cur = a.get(0);
    }
    dims
}

/// Flattens a nested array of shape `dims`, checking that it is rectangular.
fn flatten(
    v: &JsValue,
    depth: usize,
    dims: &[usize],
    out: &mut Vec<f64>,
    bools: &mut bool,
    op: &'static str,
) -> JsResult<()> {
    let ragged = || {
        invalid(
            op,
            format_args!("nested arrays must be rectangular (every row the same length)"),
        )
    };
    if Array::is_array(v) {
        let a: &Array = v.unchecked_ref();
        if dims.get(depth) != Some(&(a.length() as usize)) {
            return Err(ragged());
        }
        for x in a.iter() {
            flatten(&x, depth + 1, dims, out, bools, op)?;
        }
        return Ok(());
    }
    if depth != dims.len() {
        return Err(ragged());
    }
    if let Some(x) = v.as_f64() {
        out.push(x);
    } else if let Some(b) = v.as_bool() {
        *bools = true;
        out.push(b as u8 as f64);
    } else {
        return Err(invalid(
            op,
            format_args!(
                "array elements must be numbers or booleans, got {}",
                js::type_name(v)
            ),
        ));
    }
    Ok(())
}

/// A typed array holding `d`'s values (f16 widens to Float32Array, bool is Uint8Array).
pub(crate) fn typed_array(d: &TensorData) -> JsValue {
    let bytes = d.as_bytes();
    let copy = || {
        let u8s = Uint8Array::new_with_length(bytes.len() as u32);
        u8s.copy_from(bytes);
        u8s.buffer()
    };
    match d.dtype() {
        DType::F32 => Float32Array::new(&copy()).into(),
        DType::F64 => Float64Array::new(&copy()).into(),
        DType::I32 => Int32Array::new(&copy()).into(),
        DType::U32 => Uint32Array::new(&copy()).into(),
        DType::Bool => Uint8Array::new(&copy()).into(),
        DType::F16 => {
            let v: Vec<f32> = d.iter_f64().map(|x| x as f32).collect();
            Float32Array::from(v.as_slice()).into()
        }
    }
}

/// Nested JS arrays of `d`'s values (a plain number or boolean for rank 0).
fn nested(d: &TensorData) -> JsValue {
    let vals: Vec<JsValue> = if d.dtype() == DType::Bool {
        d.iter_f64().map(|x| JsValue::from_bool(x != 0.0)).collect()
    } else {
        d.iter_f64().map(JsValue::from_f64).collect()
    };
    fn build(vals: &[JsValue], dims: &[usize]) -> JsValue {
        match dims.split_first() {
            None => vals.first().cloned().unwrap_or(JsValue::UNDEFINED),
            Some((&n, rest)) => {
                let step: usize = rest.iter().product();
                let a = Array::new_with_length(n as u32);
                for i in 0..n {
                    let part = vals.get(i * step..(i + 1) * step).unwrap_or(&[]);
                    a.set(i as u32, build(part, rest));
                }
                a.into()
            }
        }
    }
    build(&vals, d.shape().dims())
}

fn conv_params(options: &JsValue, op: &'static str) -> JsResult<Conv2dParams> {
    let groups = match js::get(options, "groups") {
        g if g.is_undefined() => 1,
        g => *js::sizes(&g, op, "groups")?.first().unwrap_or(&1),
    };
    Ok(Conv2dParams {
        stride: js::pair(&js::get(options, "stride"), [1, 1], op, "stride")?,
        padding: js::pair(&js::get(options, "padding"), [0, 0], op, "padding")?,
        dilation: js::pair(&js::get(options, "dilation"), [1, 1], op, "dilation")?,
        groups,
    })
}

fn pool_params(options: &JsValue, op: &'static str) -> JsResult<Pool2dParams> {
    let kernel = js::get(options, "kernel");
    if kernel.is_undefined() {
        return Err(invalid(
            op,
            format_args!("options.kernel (a number or [h, w]) is required"),
        ));
    }
    let kernel = js::pair(&kernel, [1, 1], op, "kernel")?;
    Ok(Pool2dParams {
        kernel,
        stride: js::pair(&js::get(options, "stride"), kernel, op, "stride")?,
        padding: js::pair(&js::get(options, "padding"), [0, 0], op, "padding")?,
        dilation: js::pair(&js::get(options, "dilation"), [1, 1], op, "dilation")?,
        count_include_pad: js::get(options, "countIncludePad")
            .as_bool()
            .unwrap_or(true),
    })
}

fn options_dtype(options: &JsValue, op: &'static str) -> JsResult<DType> {
    Ok(dtype_arg(&js::get(options, "dtype"), op)?.unwrap_or(DType::F32))
}

/// A JS method per row of kiln's unary table without fields (`powf` and `clamp` take
/// arguments and are written out below). One `#[wasm_bindgen] impl` each: the attribute must
/// see the method itself, not a macro call.
macro_rules! unary_exports {
    (@one $var:ident [] [] $method:ident) => {
        #[wasm_bindgen]
        impl Tensor {
            #[doc = concat!("Elementwise `", stringify!($method), "`.")]
            pub fn $method(&self) -> JsResult<Tensor> {
                self.map(stringify!($method), &|t| t.unary(UnaryOp::$var))
            }
        }
    };
    (@one $($with_fields:tt)*) => {};
    ($(
        $(#[$doc:meta])*
        $var:ident $(($($arg:ident: $ty:ty),*))? $({$($fields:tt)*})? $method:ident { $($row:tt)* }
    )*) => {
        $(unary_exports!(@one $var [$($($arg)*)?] [$($($fields)*)?] $method);)*
    };
}
kiln_core::unary_table!(unary_exports);

/// A JS method per row of kiln's binary table, taking a Tensor or a number.
macro_rules! binary_exports {
    ($(
        $(#[$doc:meta])*
        $var:ident $method:ident $scalar:ident $js:literal { $($row:tt)* }
    )*) => {
        #[wasm_bindgen]
        impl Tensor {
            $(
                #[doc = concat!("Elementwise `", $js, "` with a Tensor or a number, broadcasting.")]
                #[wasm_bindgen(js_name = $js)]
                pub fn $method(&self, other: &JsValue) -> JsResult<Tensor> {
                    self.with_other($js, other, &|a, b| a.binary(BinaryOp::$var, b))
                }
            )*
        }
    };
}
kiln_core::binary_table!(binary_exports);

/// A JS method per row of kiln's comparison table, taking a Tensor or a number.
macro_rules! compare_exports {
    ($(
        $(#[$doc:meta])*
        $var:ident $method:ident { $($row:tt)* }
    )*) => {
        #[wasm_bindgen]
        impl Tensor {
            $(
                #[doc = concat!("Elementwise `", stringify!($method), "` with a Tensor or a number, broadcasting.")]
                pub fn $method(&self, other: &JsValue) -> JsResult<Tensor> {
                    self.with_other(stringify!($method), other, &|a, b| a.compare(CmpOp::$var, b))
                }
            )*
        }
    };
}
kiln_core::compare_table!(compare_exports);

#[wasm_bindgen]
impl Tensor {
    // ------------------------------------------------------------------ creation

    /// A tensor from a TypedArray, a (nested) array or a number. `shape` defaults to the nesting
    /// (or the array's length); `options.dtype` defaults to the TypedArray's type, else `"f32"`;
    /// `options.device` defaults to the CPU.
    pub fn from(data: &JsValue, shape: &JsValue, options: &JsValue) -> JsResult<Tensor> {
        let op = "Tensor.from";
        let dtype = dtype_arg(&js::get(options, "dtype"), op)?;
        let device = Device::from_options(options, op)?;
        let d = data_from_js(data, shape, dtype, op)?;
        Ok(Tensor::wrap(KTensor::from_data(&d, &device).js()?))
    }
    /// Every element `value`.
    pub fn full(shape: &JsValue, value: f64, options: &JsValue) -> JsResult<Tensor> {
        let op = "Tensor.full";
        let dims = js::sizes(shape, op, "shape")?;
        let (dtype, dev) = (
            options_dtype(options, op)?,
            Device::from_options(options, op)?,
        );
        Ok(Tensor::wrap(KTensor::full(dims, value, dtype, &dev).js()?))
    }
    /// Zeros.
    pub fn zeros(shape: &JsValue, options: &JsValue) -> JsResult<Tensor> {
        Self::full(shape, 0.0, options)
    }
    /// Ones.
    pub fn ones(shape: &JsValue, options: &JsValue) -> JsResult<Tensor> {
        Self::full(shape, 1.0, options)
    }
    /// `start, start + step, ...` up to but excluding `end`.
    pub fn arange(start: f64, end: f64, step: Option<f64>, options: &JsValue) -> JsResult<Tensor> {
        let op = "Tensor.arange";
        let (dtype, dev) = (
            options_dtype(options, op)?,
            Device::from_options(options, op)?,
        );
        Ok(Tensor::wrap(
            KTensor::arange(start, end, step.unwrap_or(1.0), dtype, &dev).js()?,
        ))
    }
    /// The `n x n` identity.
    pub fn eye(n: usize, options: &JsValue) -> JsResult<Tensor> {
        let op = "Tensor.eye";
        let (dtype, dev) = (
            options_dtype(options, op)?,
            Device::from_options(options, op)?,
        );
        Ok(Tensor::wrap(KTensor::eye(n, dtype, &dev).js()?))
    }
    /// Uniform random values in `[options.low ?? 0, options.high ?? 1)`, reproducible by `options.seed`.
    #[wasm_bindgen(js_name = randUniform)]
    pub fn rand_uniform(shape: &JsValue, options: &JsValue) -> JsResult<Tensor> {
        let op = "Tensor.randUniform";
        let dims = js::sizes(shape, op, "shape")?;
        let (dtype, dev) = (
            options_dtype(options, op)?,
            Device::from_options(options, op)?,
        );
        let (lo, hi) = (
            js::num(options, "low").unwrap_or(0.0),
            js::num(options, "high").unwrap_or(1.0),
        );
        let seed = js::num(options, "seed").unwrap_or(0.0) as u64;
        Ok(Tensor::wrap(
            KTensor::rand_uniform(dims, lo, hi, seed, dtype, &dev).js()?,
        ))
    }
    /// Normal random values with `options.mean ?? 0` and `options.std ?? 1`, reproducible by `options.seed`.
    #[wasm_bindgen(js_name = randNormal)]
    pub fn rand_normal(shape: &JsValue, options: &JsValue) -> JsResult<Tensor> {
        let op = "Tensor.randNormal";
        let dims = js::sizes(shape, op, "shape")?;
        let (dtype, dev) = (
            options_dtype(options, op)?,
            Device::from_options(options, op)?,
        );
        let (mean, std) = (
            js::num(options, "mean").unwrap_or(0.0),
            js::num(options, "std").unwrap_or(1.0),
        );
        let seed = js::num(options, "seed").unwrap_or(0.0) as u64;
        Ok(Tensor::wrap(
            KTensor::rand_normal(dims, mean, std, seed, dtype, &dev).js()?,
        ))
    }
    /// Joins tensors along an existing axis.
    pub fn concat(tensors: &JsValue, axis: Option<i32>) -> JsResult<Tensor> {
        let ts = Self::many_from_js(tensors, "Tensor.concat")?;
        Ok(Tensor::wrap(
            KTensor::concat(&ts, axis.unwrap_or(0) as isize).js()?,
        ))
    }
    /// Joins tensors along a new axis.
    pub fn stack(tensors: &JsValue, axis: Option<i32>) -> JsResult<Tensor> {
        let ts = Self::many_from_js(tensors, "Tensor.stack")?;
        Ok(Tensor::wrap(
            KTensor::stack(&ts, axis.unwrap_or(0) as isize).js()?,
        ))
    }

    // ------------------------------------------------------------------ properties

    /// The dimensions.
    #[wasm_bindgen(getter)]
    pub fn shape(&self) -> JsResult<Array> {
        let t = self.kiln("shape")?;
        Ok(t.dims()
            .iter()
            .map(|&d| JsValue::from_f64(d as f64))
            .collect())
    }
    /// The element type: `"f32"`, `"f64"`, `"f16"`, `"i32"`, `"u32"` or `"bool"`.
    #[wasm_bindgen(getter)]
    pub fn dtype(&self) -> JsResult<String> {
        Ok(self.kiln("dtype")?.dtype().name().into())
    }
    /// Number of dimensions.
    #[wasm_bindgen(getter)]
    pub fn rank(&self) -> JsResult<usize> {
        Ok(self.kiln("rank")?.rank())
    }
    /// Number of elements.
    #[wasm_bindgen(getter)]
    pub fn size(&self) -> JsResult<usize> {
        Ok(self.kiln("size")?.numel())
    }
    /// The device holding the data.
    #[wasm_bindgen(getter)]
    pub fn device(&self) -> JsResult<Device> {
        let t = self.kiln("device")?;
        Ok(Device::from_kiln(t.device().clone(), "holds this tensor"))
    }
    /// `true` after `dispose()`.
    #[wasm_bindgen(getter)]
    pub fn disposed(&self) -> bool {
        !ledger::contains(self.handle)
    }
    /// Internal: lets kiln find the tensor behind a JS value.
    #[wasm_bindgen(getter, js_name = __kilnHandle)]
    pub fn kiln_handle(&self) -> u32 {
        self.handle
    }

    // ------------------------------------------------------------------ reading and lifetime

    /// The values as a TypedArray (Float32Array for f32 and f16, Float64Array, Int32Array,
    /// Uint32Array, Uint8Array for bool), in row-major order.
    pub fn data(&self) -> js_sys::Promise {
        let t = self.kiln("data");
        js::promise(async move {
            let d = t?.data().await.js()?;
            Ok(typed_array(&d))
        })
    }
    /// The values as nested arrays (a number for a rank-0 tensor).
    pub fn array(&self) -> js_sys::Promise {
        let t = self.kiln("array");
        js::promise(async move {
            let d = t?.data().await.js()?;
            Ok(nested(&d))
        })
    }
    /// A copy on `device` (the same data, a new handle, when already there).
    pub fn to(&self, device: &JsValue) -> js_sys::Promise {
        let t = self.kiln("to");
        let dev = Device::from_options(&js::object(&[("device", device.clone())]).into(), "to");
        js::promise(async move {
            let moved = t?.to_device(&dev?).await.js()?;
            Ok(Tensor::wrap(moved).into())
        })
    }
    /// Frees the data now. Using the tensor afterwards is an error; disposing twice is harmless.
    pub fn dispose(&self) {
        ledger::remove(self.handle);
    }
    /// A second handle on the same data (dispose each separately).
    #[wasm_bindgen(js_name = clone)]
    pub fn clone_handle(&self) -> JsResult<Tensor> {
        self.map("clone", &|t| Ok(t.clone()))
    }
    /// `Tensor(f32 [2, 3] on cpu)`.
    #[wasm_bindgen(js_name = toString)]
    pub fn to_string_js(&self) -> String {
        match self.kiln("toString") {
            Ok(t) => format!(
                "Tensor({} {} on {})",
                t.dtype(),
                t.shape(),
                kind_of(t.device())
            ),
            Err(_) => "Tensor(disposed)".into(),
        }
    }

    // ------------------------------------------------------------------ elementwise extras

    /// `min(max(x, min), max)`.
    pub fn clamp(&self, min: f64, max: f64) -> JsResult<Tensor> {
        self.map("clamp", &|t| t.clamp(min, max))
    }
    /// `cond ? a : b` elementwise, with this bool tensor as `cond`; `a`, `b` Tensors or numbers.
    #[wasm_bindgen(js_name = "where")]
    pub fn where_(&self, a: &JsValue, b: &JsValue) -> JsResult<Tensor> {
        let op = "where";
        let c = self.kiln(op)?;
        let tensor = |v: &JsValue| match v.as_f64() {
            Some(_) => Ok(None),
            None => Tensor::from_js(v, op).map(Some),
        };
        let (ta, tb) = (tensor(a)?, tensor(b)?);
        // A number takes the dtype of the other operand, or f32 when both are numbers.
        let like = ta.clone().or_else(|| tb.clone());
        let scalar = |v: &JsValue| match &like {
            Some(l) => l.scalar_like(v.as_f64().unwrap_or(0.0)).js(),
            None => KTensor::scalar(v.as_f64().unwrap_or(0.0), DType::F32, c.device()).js(),
        };
        let a2 = match ta {
            Some(t) => t,
            None => scalar(a)?,
        };
        let b2 = match tb {
            Some(t) => t,
            None => scalar(b)?,
        };
        Ok(Tensor::wrap(c.where_cond(&a2, &b2).js()?))
    }
    /// Converts to another dtype.
    pub fn cast(&self, dtype: &JsValue) -> JsResult<Tensor> {
        let d = dtype_arg(dtype, "cast")?
            .ok_or_else(|| invalid("cast", format_args!("a dtype is required")))?;
        self.map("cast", &|t| t.cast(d))
    }

    // ------------------------------------------------------------------ reductions

    /// Sum over `axes` (a number or an array; all axes when omitted).
    pub fn sum(&self, axes: &JsValue, keepdim: Option<bool>) -> JsResult<Tensor> {
        let a = axes_arg(axes, "sum")?;
        self.map("sum", &|t| t.sum(&a, keepdim.unwrap_or(false)))
    }
    /// Mean over `axes` (all when omitted).
    pub fn mean(&self, axes: &JsValue, keepdim: Option<bool>) -> JsResult<Tensor> {
        let a = axes_arg(axes, "mean")?;
        self.map("mean", &|t| t.mean(&a, keepdim.unwrap_or(false)))
    }
    /// Maximum over `axes` (all when omitted).
    pub fn max(&self, axes: &JsValue, keepdim: Option<bool>) -> JsResult<Tensor> {
        let a = axes_arg(axes, "max")?;
        self.map("max", &|t| t.max(&a, keepdim.unwrap_or(false)))
    }
    /// Minimum over `axes` (all when omitted).
    pub fn min(&self, axes: &JsValue, keepdim: Option<bool>) -> JsResult<Tensor> {
        let a = axes_arg(axes, "min")?;
        self.map("min", &|t| t.min(&a, keepdim.unwrap_or(false)))
    }
    /// Product over `axes` (all when omitted).
    pub fn prod(&self, axes: &JsValue, keepdim: Option<bool>) -> JsResult<Tensor> {
        let a = axes_arg(axes, "prod")?;
        self.map("prod", &|t| t.prod(&a, keepdim.unwrap_or(false)))
    }
    /// Variance over `axes` with `correction` (default 1, unbiased).
    pub fn var(
        &self,
        axes: &JsValue,
        correction: Option<usize>,
        keepdim: Option<bool>,
    ) -> JsResult<Tensor> {
        let a = axes_arg(axes, "var")?;
        self.map("var", &|t| {
            t.var(&a, correction.unwrap_or(1), keepdim.unwrap_or(false))
        })
    }
    /// Index of the maximum along `axis` (default -1), as i32.
    pub fn argmax(&self, axis: Option<i32>, keepdim: Option<bool>) -> JsResult<Tensor> {
        self.map("argmax", &|t| {
            t.argmax(axis_arg(axis), keepdim.unwrap_or(false))
        })
    }
    /// Index of the minimum along `axis` (default -1), as i32.
    pub fn argmin(&self, axis: Option<i32>, keepdim: Option<bool>) -> JsResult<Tensor> {
        self.map("argmin", &|t| {
            t.argmin(axis_arg(axis), keepdim.unwrap_or(false))
        })
    }
    /// Softmax along `axis` (default -1).
    pub fn softmax(&self, axis: Option<i32>) -> JsResult<Tensor> {
        self.map("softmax", &|t| t.softmax(axis_arg(axis)))
    }
    /// Log-softmax along `axis` (default -1).
    #[wasm_bindgen(js_name = logSoftmax)]
    pub fn log_softmax(&self, axis: Option<i32>) -> JsResult<Tensor> {
        self.map("logSoftmax", &|t| t.log_softmax(axis_arg(axis)))
    }
    /// Inclusive running sum along `axis` (default -1).
    pub fn cumsum(&self, axis: Option<i32>) -> JsResult<Tensor> {
        self.map("cumsum", &|t| t.cumsum(axis_arg(axis)))
    }

    // ------------------------------------------------------------------ linear algebra

    /// Matrix product with NumPy semantics (batched, broadcast).
    pub fn matmul(&self, other: &JsValue) -> JsResult<Tensor> {
        let o = Self::from_js(other, "matmul")?;
        self.map("matmul", &|t| t.matmul(&o))
    }

    // ------------------------------------------------------------------ views

    /// The same elements under a new shape; one dimension may be -1.
    pub fn reshape(&self, shape: &JsValue) -> JsResult<Tensor> {
        let dims: Vec<isize> = js::ints(shape, "reshape", "shape")?
            .into_iter()
            .map(|d| d as isize)
            .collect();
        self.map("reshape", &|t| t.reshape_infer(&dims))
    }
    /// Reorders axes: output axis `i` is input axis `dims[i]`.
    pub fn permute(&self, dims: &JsValue) -> JsResult<Tensor> {
        let d = js::sizes(dims, "permute", "dims")?;
        self.map("permute", &|t| t.permute(&d))
    }
    /// Swaps two axes (the last two by default).
    pub fn transpose(&self, a: Option<i32>, b: Option<i32>) -> JsResult<Tensor> {
        self.map("transpose", &|t| {
            t.transpose(a.unwrap_or(-2) as isize, b.unwrap_or(-1) as isize)
        })
    }
    /// Takes a range along each leading axis: each entry is `[start, end]`, `[start, end, step]`
    /// or `null` (the whole axis); negative start/end count from the end.
    pub fn slice(&self, ranges: &JsValue) -> JsResult<Tensor> {
        let op = "slice";
        let t = self.kiln(op)?;
        if !Array::is_array(ranges) {
            return Err(invalid(
                op,
                format_args!("ranges must be an array of [start, end, step?] or null"),
            ));
        }
        let ranges = Array::from(ranges);
        if ranges.length() as usize > t.rank() {
            return Err(to_js(&kiln_core::Error::index(
                op,
                format!(
                    "{} ranges given for a tensor of rank {}",
                    ranges.length(),
                    t.rank()
                ),
            )));
        }
        let mut out = Vec::new();
        for (axis, &n) in t.dims().iter().enumerate() {
            let r = ranges.get(axis as u32);
            let full = SliceRange {
                start: 0,
                end: n,
                step: 1,
            };
            if r.is_undefined() || r.is_null() {
                out.push(full);
                continue;
            }
            let v = js::ints(&r, op, "a range")?;
            let at = |i: i64| {
                if i < 0 {
                    (n as i64 + i).max(0) as usize
                } else {
                    (i as usize).min(n)
                }
            };
            let (start, end, step) = match v.as_slice() {
                [s, e] => (at(*s), at(*e), 1),
                [s, e, st] if *st > 0 => (at(*s), at(*e), *st as usize),
                _ => {
                    return Err(invalid(
                        op,
                        format_args!(
                            "range for axis {axis} must be [start, end] or [start, end, step > 0], got {v:?}"
                        ),
                    ));
                }
            };
            out.push(SliceRange { start, end, step });
        }
        Ok(Tensor::wrap(t.slice(&out).js()?))
    }
    /// Merges axes `start..=end` (defaults: all) into one.
    pub fn flatten(&self, start: Option<i32>, end: Option<i32>) -> JsResult<Tensor> {
        self.map("flatten", &|t| {
            t.flatten(start.unwrap_or(0) as isize, end.unwrap_or(-1) as isize)
        })
    }
    /// Removes an axis of size 1.
    pub fn squeeze(&self, axis: i32) -> JsResult<Tensor> {
        self.map("squeeze", &|t| t.squeeze(axis as isize))
    }
    /// Inserts an axis of size 1.
    pub fn unsqueeze(&self, axis: i32) -> JsResult<Tensor> {
        self.map("unsqueeze", &|t| t.unsqueeze(axis as isize))
    }
    /// Broadcasts to `shape` without copying.
    pub fn expand(&self, shape: &JsValue) -> JsResult<Tensor> {
        let s = js::sizes(shape, "expand", "shape")?;
        self.map("expand", &|t| t.expand(&s[..]))
    }
    /// Constant padding: `[before, after]` pairs for the leading axes.
    pub fn pad(&self, pads: &JsValue, value: Option<f64>) -> JsResult<Tensor> {
        let flat = js::sizes(&Array::from(pads).flat(1).into(), "pad", "pads")?;
        if flat.len() % 2 != 0 {
            return Err(invalid(
                "pad",
                format_args!("pads must be [before, after] pairs"),
            ));
        }
        let pairs: Vec<(usize, usize)> = flat.chunks_exact(2).map(|c| (c[0], c[1])).collect();
        self.map("pad", &|t| t.pad(&pairs, value.unwrap_or(0.0)))
    }
    /// One-hot encoding of an integer tensor: a new last axis of `classes`.
    #[wasm_bindgen(js_name = oneHot)]
    pub fn one_hot(&self, classes: usize, dtype: &JsValue) -> JsResult<Tensor> {
        let d = dtype_arg(dtype, "oneHot")?.unwrap_or(DType::F32);
        self.map("oneHot", &|t| t.one_hot(classes, d))
    }
    /// Rows along `axis` picked by a rank-1 integer tensor.
    #[wasm_bindgen(js_name = indexSelect)]
    pub fn index_select(&self, axis: i32, index: &JsValue) -> JsResult<Tensor> {
        let i = Self::from_js(index, "indexSelect")?;
        self.map("indexSelect", &|t| t.index_select(axis as isize, &i))
    }

    // ------------------------------------------------------------------ convolution and pooling

    /// 2-D convolution of NCHW input with an OIHW weight and optional bias;
    /// `options`: `{stride, padding, dilation, groups}` (numbers or `[h, w]`).
    pub fn conv2d(&self, weight: &JsValue, bias: &JsValue, options: &JsValue) -> JsResult<Tensor> {
        let op = "conv2d";
        let w = Self::from_js(weight, op)?;
        let b = if bias.is_undefined() || bias.is_null() {
            None
        } else {
            Some(Self::from_js(bias, op)?)
        };
        let p = conv_params(options, op)?;
        self.map(op, &|t| t.conv2d(&w, b.as_ref(), p))
    }
    /// 2-D max pooling; `options`: `{kernel, stride = kernel, padding, dilation}`.
    #[wasm_bindgen(js_name = maxPool2d)]
    pub fn max_pool2d(&self, options: &JsValue) -> JsResult<Tensor> {
        let p = pool_params(options, "maxPool2d")?;
        self.map("maxPool2d", &|t| t.max_pool2d(p))
    }
    /// 2-D average pooling; `options`: `{kernel, stride = kernel, padding, countIncludePad = true}`.
    #[wasm_bindgen(js_name = avgPool2d)]
    pub fn avg_pool2d(&self, options: &JsValue) -> JsResult<Tensor> {
        let p = pool_params(options, "avgPool2d")?;
        self.map("avgPool2d", &|t| t.avg_pool2d(p))
    }
    /// Adaptive average pooling to `output` (`[h, w]` or a number).
    #[wasm_bindgen(js_name = adaptiveAvgPool2d)]
    pub fn adaptive_avg_pool2d(&self, output: &JsValue) -> JsResult<Tensor> {
        let o = js::pair(output, [1, 1], "adaptiveAvgPool2d", "output")?;
        self.map("adaptiveAvgPool2d", &|t| t.adaptive_avg_pool2d(o))
    }
}
