//! `scaled_softmax`: `softmax(scale * x)` along the last axis as one custom op, with its CPU
//! reference, its WGSL kernel (one invocation per row) and its gradient written with kiln ops.
//! It uses only `kiln_core`, so the tests include this file too.

use kiln_core::op::custom::{Attrs, CustomOp, Grid, KernelLaunch, attr};
use kiln_core::{DType, Error, Meta, Result, Tensor, TensorData};

/// The op's name in calls and model files.
pub const NAME: &str = "scaled_softmax";

/// `softmax(scale * x, -1)` for f32 `x` of rank >= 1; attribute `scale`.
pub struct ScaledSoftmax;

/// Invocations per workgroup of the kernel (its `@workgroup_size`).
const WG: u32 = 64;

/// binding 0: the params header (rows, cols, scale); 1: x; 2: y. One invocation per row: the
/// row's maximum, then the exponentials and their sum, then the division.
const WGSL: &str = r#"
struct Params {
    rows: u32,
    cols: u32,
    scale: f32,
}
@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row = ((wid.z * nwg.y + wid.y) * nwg.x + wid.x) * 64u + lid.x;
    if row >= params.rows {
        return;
    }
    let base = row * params.cols;
    var m = params.scale * x[base];
    for (var j = 1u; j < params.cols; j = j + 1u) {
        m = max(m, params.scale * x[base + j]);
    }
    var sum = 0.0;
    for (var j = 0u; j < params.cols; j = j + 1u) {
        let e = exp(params.scale * x[base + j] - m);
        y[base + j] = e;
        sum = sum + e;
    }
    for (var j = 0u; j < params.cols; j = j + 1u) {
        y[base + j] = y[base + j] / sum;
    }
}
"#;

/// The call of the op on `x`.
pub fn scaled_softmax(x: &Tensor, scale: f64) -> Result<Tensor> {
    Tensor::custom(NAME, Attrs::from([("scale".into(), scale)]), &[x])
}

/// The same computation composed of built-in ops, to check the custom one against.
pub fn composed(x: &Tensor, scale: f64) -> Result<Tensor> {
    x.mul_scalar(scale)?.softmax(-1)
}

/// (rows, cols) of the input, the rows being every axis but the last.
fn rows_cols(meta: &Meta) -> (usize, usize) {
    let dims = meta.1.dims();
    let cols = dims.last().copied().unwrap_or(1);
    (meta.1.numel() / cols.max(1), cols)
}

impl CustomOp for ScaledSoftmax {
    fn name(&self) -> &str {
        NAME
    }

    fn infer(&self, attrs: &Attrs, inputs: &[Meta]) -> Result<Meta> {
        attr(NAME, attrs, "scale")?;
        match inputs {
            [(DType::F32, shape)] if shape.rank() >= 1 => Ok((DType::F32, shape.clone())),
            [(dt, shape)] => Err(Error::dtype(
                NAME,
                format!("expects an f32 tensor of rank >= 1, got {dt} of shape {shape}"),
            )),
            _ => Err(Error::invalid(
                NAME,
                format!("expects 1 input, got {}", inputs.len()),
            )),
        }
    }

    fn cpu(&self, attrs: &Attrs, inputs: &[TensorData], out: &Meta) -> Result<TensorData> {
        let scale = attr(NAME, attrs, "scale")? as f32;
        let (_, cols) = rows_cols(out);
        let mut y = inputs[0].to_vec::<f32>()?;
        for row in y.chunks_mut(cols.max(1)) {
            let m = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(scale * v));
            let mut sum = 0.0;
            for v in row.iter_mut() {
                *v = (scale * *v - m).exp();
                sum += *v;
            }
            row.iter_mut().for_each(|v| *v /= sum);
        }
        TensorData::new(y, out.1.clone())
    }

    fn wgsl(&self) -> Option<&str> {
        Some(WGSL)
    }

    fn launch(&self, attrs: &Attrs, _: &[Meta], out: &Meta) -> Result<KernelLaunch> {
        let scale = attr(NAME, attrs, "scale")? as f32;
        let (rows, cols) = rows_cols(out);
        Ok(KernelLaunch {
            params: vec![rows as u32, cols as u32, scale.to_bits()],
            grid: Grid::Invocations {
                count: rows as u64,
                workgroup_size: WG,
            },
        })
    }

    /// `dx = scale * y * (g - sum(g * y, -1))`.
    fn backward(
        &self,
        attrs: &Attrs,
        _: &[Tensor],
        y: &Tensor,
        g: &Tensor,
    ) -> Result<Vec<Option<Tensor>>> {
        let scale = attr(NAME, attrs, "scale")?;
        let dot = g.mul(y)?.sum(&[-1], true)?;
        let dx = g.sub(&dot)?.mul(y)?.mul_scalar(scale)?;
        Ok(vec![Some(dx)])
    }
}
