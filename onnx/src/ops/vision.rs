//! Vision ONNX ops: sampling at computed positions (GridSample, RoiAlign, DeformConv) as
//! interpolation taps whose indices and weights are computed on the device and gathered, the
//! grids and scatter tables that depend only on shapes built on the host (AffineGrid, Col2Im,
//! MaxUnpool), and NonMaxSuppression, whose output size depends on the data, on the host.

use super::shape::{host_numel, index_tensor, numel};
use super::{Ctx, OpFn, Outputs, float_table, host_values, one, one_ints};
use crate::value::{Ints, Value};
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;
use kiln_core::{Error, Result, Tensor};

pub(super) const OPS: &[(&str, OpFn)] = &[
    ("GridSample", grid_sample),
    ("AffineGrid", affine_grid),
    ("Col2Im", col2im),
    ("RoiAlign", roi_align),
    ("MaxUnpool", max_unpool),
    ("NonMaxSuppression", non_max_suppression),
    ("DeformConv", deform_conv),
];

/// How samples between pixels are interpolated.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

/// What a sample outside the image reads.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

/// One interpolation tap along one axis: source index (integer-valued floats) and weight,
/// each `[batch, points]`.
type Tap = (Tensor, Tensor);

/// `x` reflected into `[lo, hi]` (a triangle wave of period `2 (hi - lo)`).
fn reflect(x: &Tensor, lo: f64, hi: f64) -> Result<Tensor> {
    let span = hi - lo;
    if span <= 0.0 {
        return x.zeros_like()?.add_scalar(lo);
    }
    let u = x.sub_scalar(lo)?;
    let period = 2.0 * span;
    let m = u.sub(&u.div_scalar(period)?.floor()?.mul_scalar(period)?)?;
    m.sub_scalar(span)?.abs()?.neg()?.add_scalar(span + lo)
}

/// The taps along an axis of `size` pixels at pixel coordinates `x`, with `padding` applied
/// to each tap's index (zeros: an index outside gets weight 0). `bounds` is the range that
/// reflection folds into.
fn axis_taps(
    x: &Tensor,
    size: usize,
    mode: Mode,
    padding: Padding,
    bounds: (f64, f64),
) -> Result<Vec<Tap>> {
    let last = size as f64 - 1.0;
    let mut taps: Vec<Tap> = match mode {
        Mode::Nearest => vec![(x.clone(), x.ones_like()?)],
        Mode::Linear => {
            let f = x.floor()?;
            let t = x.sub(&f)?;
            vec![
                (f.clone(), t.neg()?.add_scalar(1.0)?),
                (f.add_scalar(1.0)?, t),
            ]
        }
        Mode::Cubic => {
            let f = x.floor()?;
            let t = x.sub(&f)?;
            // Keys' kernel (a = -0.75) at the distances of the four taps
            let a = -0.75;
            let near = |d: &Tensor| -> Result<Tensor> {
                // ((a + 2) d - (a + 3)) d^2 + 1
                d.mul_scalar(a + 2.0)?
                    .sub_scalar(a + 3.0)?
                    .mul(d)?
                    .mul(d)?
                    .add_scalar(1.0)
            };
            let far = |d: &Tensor| -> Result<Tensor> {
                // ((a d - 5 a) d + 8 a) d - 4 a
                d.mul_scalar(a)?
                    .sub_scalar(5.0 * a)?
                    .mul(d)?
                    .add_scalar(8.0 * a)?
                    .mul(d)?
                    .sub_scalar(4.0 * a)
            };
            let one_minus = t.neg()?.add_scalar(1.0)?;
            vec![
                (f.sub_scalar(1.0)?, far(&t.add_scalar(1.0)?)?),
                (f.clone(), near(&t)?),
                (f.add_scalar(1.0)?, near(&one_minus)?),
                (f.add_scalar(2.0)?, far(&one_minus.add_scalar(1.0)?)?),
            ]
        }
    };
    for (i, w) in &mut taps {
        match padding {
            Padding::Zeros => {
                let clamped = i.clamp(0.0, last.max(0.0))?;
                *w = i.ne(&clamped)?.where_cond(&w.zeros_like()?, w)?;
                *i = clamped;
            }
            Padding::Border => *i = i.clamp(0.0, last.max(0.0))?,
            Padding::Reflection => {
                *i = reflect(i, bounds.0, bounds.1)?.clamp(0.0, last.max(0.0))?;
            }
        }
    }
    Ok(taps)
}

/// Integer-valued float indices as i32.
fn index_i32(i: &Tensor) -> Result<Tensor> {
    i.round()?.cast(kiln_core::DType::I32)
}

/// Sum over every combination of one tap per axis of the gathered values: `xf` is
/// `[batch, channels, pixels]` (row-major over `sizes`), each axis's taps `[batch, points]`;
/// the result is `[batch, channels, points]`.
fn gather_taps(xf: &Tensor, sizes: &[usize], taps: &[Vec<Tap>]) -> Result<Tensor> {
    let (b, ch) = (xf.dims()[0], xf.dims()[1]);
    let mut acc: Option<Tensor> = None;
    let mut pick = vec![0usize; taps.len()];
    loop {
        let mut index: Option<Tensor> = None;
        let mut weight: Option<Tensor> = None;
        let mut stride = 1.0;
        for ax in (0..taps.len()).rev() {
            let (i, w) = &taps[ax][pick[ax]];
            // in i32: a float flat index is inexact past 2^24 pixels
            let term = index_i32(i)?.mul_scalar(stride)?;
            index = Some(match index {
                None => term,
                Some(s) => s.add(&term)?,
            });
            weight = Some(match weight {
                None => w.clone(),
                Some(p) => p.mul(w)?,
            });
            stride *= sizes[ax] as f64;
        }
        let (Some(index), Some(weight)) = (index, weight) else {
            return Err(Error::invalid("onnx", "sampling over no axes"));
        };
        let p = index.dims()[1];
        let index = index.unsqueeze(1)?.expand([b, ch, p])?.contiguous()?;
        let term = xf.gather(2, &index)?.mul(&weight.unsqueeze(1)?)?;
        acc = Some(match acc {
            None => term,
            Some(s) => s.add(&term)?,
        });
        // next combination
        let mut ax = taps.len();
        loop {
            if ax == 0 {
                return acc.ok_or_else(|| Error::invalid("onnx", "no taps"));
            }
            ax -= 1;
            pick[ax] += 1;
            if pick[ax] < taps[ax].len() {
                break;
            }
            pick[ax] = 0;
        }
    }
}

/// GridSample: `X` (`[N, C, spatial...]`) at the normalized positions of `grid`
/// (`[N, out..., rank]`, the last axis's first entry indexing the innermost spatial axis), by
/// nearest, linear or cubic interpolation. Coordinates outside the image are clamped or
/// reflected first under border / reflection padding; each tap outside reads 0, the edge, or
/// its reflection.
fn grid_sample(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let grid = c.tensor(a, 1)?.cast(x.dtype())?;
    let r = x.rank();
    let d = r.saturating_sub(2);
    if d == 0 || grid.rank() != r || grid.dims()[0] != x.dims()[0] || grid.dims()[r - 1] != d {
        return Err(c.unsupported(format!(
            "X {} with grid {} (expects grid [N, out..., {d}])",
            x.shape(),
            grid.shape()
        )));
    }
    let default = if c.opset >= 20 { "linear" } else { "bilinear" };
    let mode = match c.string("mode", default)?.as_str() {
        "nearest" => Mode::Nearest,
        "linear" | "bilinear" => Mode::Linear,
        "cubic" | "bicubic" => Mode::Cubic,
        other => return Err(c.unsupported(format!("mode {other}"))),
    };
    let padding = match c.string("padding_mode", "zeros")?.as_str() {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        other => return Err(c.unsupported(format!("padding_mode {other}"))),
    };
    let align = c.int("align_corners", 0)? != 0;
    let n = x.dims()[0];
    let sizes = x.dims()[2..].to_vec();
    let out = grid.dims()[1..r - 1].to_vec();
    let p: usize = out.iter().product();
    let g = grid.reshape([n, p, d])?;
    let mut taps = Vec::with_capacity(d);
    for (ax, &size) in sizes.iter().enumerate() {
        let s = size as f64;
        let gi = g.narrow(2, d - 1 - ax, 1)?.reshape([n, p])?;
        // pixel coordinates, and the range reflection folds into
        let (mut px, bounds) = if align {
            (
                gi.add_scalar(1.0)?.mul_scalar((s - 1.0) / 2.0)?,
                (0.0, s - 1.0),
            )
        } else {
            (
                gi.add_scalar(1.0)?.mul_scalar(s / 2.0)?.sub_scalar(0.5)?,
                (-0.5, s - 0.5),
            )
        };
        if mode == Mode::Nearest {
            px = px.round()?;
        }
        match padding {
            Padding::Zeros => {}
            Padding::Border => {
                // only coordinates outside the bounds move to the edge
                let outside = px.ne(&px.clamp(bounds.0, bounds.1)?)?;
                px = outside.where_cond(&px.clamp(0.0, (s - 1.0).max(0.0))?, &px)?;
            }
            Padding::Reflection => px = reflect(&px, bounds.0, bounds.1)?,
        }
        taps.push(axis_taps(&px, size, mode, padding, bounds)?);
    }
    let ch = x.dims()[1];
    let xf = x.reshape([n, ch, sizes.iter().product()])?;
    let y = gather_taps(&xf, &sizes, &taps)?;
    let mut dims = vec![n, ch];
    dims.extend(out);
    one(y.reshape(dims)?)
}

/// Host integers of input `i` as sizes.
fn sizes(c: &Ctx<'_>, a: &[Value], i: usize, what: &str) -> Result<Vec<usize>> {
    host_values(c.arg(a, i)?, what)?
        .iter()
        .map(|&v| {
            (v >= 0.0 && libm::trunc(v) == v)
                .then_some(v as usize)
                .ok_or_else(|| c.unsupported(format!("{what}: {v} is not a size")))
        })
        .collect()
}

/// AffineGrid: the normalized positions of an output of `size` (`[N, C, spatial...]`)
/// transformed by `theta`: a host grid `[points, rank + 1]` times each `theta` transposed.
fn affine_grid(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let theta = c.tensor(a, 0)?;
    let size = sizes(c, a, 1, "size")?;
    let d = size.len().saturating_sub(2);
    let n = size.first().copied().unwrap_or(0);
    if !(d == 2 || d == 3) || theta.dims() != [n, d, d + 1] {
        return Err(c.unsupported(format!(
            "theta {} for size {size:?} (2-D or 3-D: theta [N, d, d + 1])",
            theta.shape()
        )));
    }
    let align = c.int("align_corners", 0)? != 0;
    let spatial = &size[2..];
    let coord = |i: usize, s: usize| -> f64 {
        let (i, s) = (i as f64, s as f64);
        if align {
            if s > 1.0 {
                -1.0 + 2.0 * i / (s - 1.0)
            } else {
                -1.0
            }
        } else {
            (2.0 * i + 1.0) / s - 1.0
        }
    };
    let p = numel(spatial)?;
    host_numel(&[p, d + 1])?;
    let mut base = Vec::with_capacity(p * (d + 1));
    let mut idx = vec![0usize; d];
    for _ in 0..p {
        // x first: the innermost axis
        for ax in (0..d).rev() {
            base.push(coord(idx[ax], spatial[ax]));
        }
        base.push(1.0);
        for ax in (0..d).rev() {
            idx[ax] += 1;
            if idx[ax] < spatial[ax] {
                break;
            }
            idx[ax] = 0;
        }
    }
    let base = float_table(c.device, base, vec![p, d + 1], theta.dtype())?;
    let grid = base.matmul(&theta.transpose(1, 2)?)?;
    let mut dims = vec![n];
    dims.extend_from_slice(spatial);
    dims.push(d);
    one(grid.reshape(dims)?)
}

/// Spatial attribute `name` with one entry per spatial axis (`per` entries per axis for pads),
/// or `default` everywhere.
fn spatial_attr(
    c: &Ctx<'_>,
    name: &str,
    d: usize,
    per: usize,
    default: usize,
) -> Result<Vec<usize>> {
    match c.ints_attr(name)? {
        None => Ok(vec![default; d * per]),
        Some(v) if v.len() == d * per && v.iter().all(|&x| x >= 0) => {
            Ok(v.iter().map(|&x| x as usize).collect())
        }
        Some(v) => Err(c.unsupported(format!(
            "{name} {v:?} for {d} spatial axes ({} non-negative values)",
            d * per
        ))),
    }
}

/// Col2Im: the columns `[N, C * block, L]` added back into the image at their block
/// positions: one scatter-add with a host table of targets (positions in the padding go to a
/// spare slot that is dropped).
fn col2im(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let image = sizes(c, a, 1, "image_shape")?;
    let block = sizes(c, a, 2, "block_shape")?;
    let d = image.len();
    let dil = spatial_attr(c, "dilations", d, 1, 1)?;
    let pads = spatial_attr(c, "pads", d, 2, 0)?;
    let strides = spatial_attr(c, "strides", d, 1, 1)?;
    let k = numel(&block)?;
    let bad = || {
        c.unsupported(format!(
            "input {} for image {image:?}, block {block:?}",
            x.shape()
        ))
    };
    if x.rank() != 3
        || block.len() != d
        || k == 0
        || x.dims()[1] % k != 0
        || dil.contains(&0)
        || strides.contains(&0)
    {
        return Err(bad());
    }
    // block positions along each axis
    let mut counts = Vec::with_capacity(d);
    for i in 0..d {
        let span = dil[i].saturating_mul(block[i] - 1).saturating_add(1);
        let padded = image[i].saturating_add(pads[i]).saturating_add(pads[d + i]);
        if padded < span {
            return Err(bad());
        }
        counts.push((padded - span) / strides[i] + 1);
    }
    let l: usize = counts.iter().product();
    if x.dims()[2] != l {
        return Err(bad());
    }
    let pixels = numel(&image)?;
    numel(&[x.dims()[0], x.dims()[1], pixels + 1])?;
    let mut table = Vec::with_capacity(k * l);
    for kk in 0..k {
        for ll in 0..l {
            let (mut kr, mut lr, mut flat, mut inside) = (kk, ll, 0usize, true);
            let mut stride = 1;
            for i in (0..d).rev() {
                let (ki, li) = (kr % block[i], lr % counts[i]);
                kr /= block[i];
                lr /= counts[i];
                let pos = (li * strides[i] + ki * dil[i]) as i64 - pads[i] as i64;
                inside &= pos >= 0 && pos < image[i] as i64;
                flat += pos.max(0) as usize * stride;
                stride *= image[i];
            }
            table.push(if inside { flat } else { pixels });
        }
    }
    let (n, ch) = (x.dims()[0], x.dims()[1] / k);
    let src = x.reshape([n, ch, k * l])?;
    let index = index_tensor(c, &table)?
        .reshape([1, 1, k * l])?
        .expand([n, ch, k * l])?
        .contiguous()?;
    let y = Tensor::zeros([n, ch, pixels + 1], x.dtype(), c.device)?
        .scatter_add(2, &index, &src)?
        .narrow(2, 0, pixels)?;
    let mut dims = vec![n, ch];
    dims.extend(image);
    one(y.reshape(dims)?)
}

/// RoiAlign's settings.
struct Roi {
    max: bool,
    bins: [usize; 2],
    scale: f64,
    half_pixel: bool,
}

impl Roi {
    /// A region's start and length along the axis whose corners are columns `k` and `k + 2`
    /// of `rois` (device tensors `[R, 1]`), in input pixels.
    fn span(&self, rois: &Tensor, k: usize) -> Result<(Tensor, Tensor)> {
        let offset = if self.half_pixel { 0.5 } else { 0.0 };
        let corner = |k: usize| -> Result<Tensor> {
            rois.narrow(1, k, 1)?
                .mul_scalar(self.scale)?
                .sub_scalar(offset)
        };
        let start = corner(k)?;
        let mut len = corner(k + 2)?.sub(&start)?;
        if !self.half_pixel {
            len = len.maximum_scalar(1.0)?;
        }
        Ok((start, len))
    }
}

/// The bilinear taps `[R, bins * grid]` of the samples along one axis of `size` pixels: a
/// sample more than a pixel outside gets weight 0, one past the last pixel reads the edge.
fn roi_taps(
    c: &Ctx<'_>,
    (start, len): (Tensor, Tensor),
    bins: usize,
    grid: usize,
    size: usize,
) -> Result<[Tap; 2]> {
    let frac: Vec<f64> = (0..bins * grid)
        .map(|i| (i / grid) as f64 + ((i % grid) as f64 + 0.5) / grid as f64)
        .collect();
    let frac = float_table(c.device, frac, vec![1, bins * grid], start.dtype())?;
    let v = start.add(&len.div_scalar(bins as f64)?.mul(&frac)?)?;
    let outside = v.ne(&v.clamp(-1.0, size as f64)?)?;
    let valid = outside.where_cond(&v.zeros_like()?, &v.ones_like()?)?;
    let v = v.maximum_scalar(0.0)?;
    let last = size as f64 - 1.0;
    let lo = v.floor()?;
    let at_end = lo.ge(&lo.scalar_like(last)?)?;
    let lo = at_end.where_cond(&lo.scalar_like(last)?, &lo)?;
    let hi = at_end.where_cond(&lo, &lo.add_scalar(1.0)?)?;
    let v = at_end.where_cond(&lo, &v)?;
    let l = v.sub(&lo)?;
    let hw = l.neg()?.add_scalar(1.0)?.mul(&valid)?;
    Ok([(lo, hw), (hi, l.mul(&valid)?)])
}

/// RoiAlign of the regions `rois` (`[R, 4]`, x's dtype) of images `batch` (`[R]`, i32) with a
/// `grid` of samples per bin: `[R, C, bins...]`.
fn roi_bins(
    c: &Ctx<'_>,
    x: &Tensor,
    rois: &Tensor,
    batch: &Tensor,
    p: &Roi,
    [gy, gx]: [usize; 2],
) -> Result<Tensor> {
    let [n, ch, h, w] = [x.dims()[0], x.dims()[1], x.dims()[2], x.dims()[3]];
    let [oh, ow] = p.bins;
    let r = rois.dims()[0];
    host_numel(&[oh, gy])?;
    host_numel(&[ow, gx])?;
    let ys = roi_taps(c, p.span(rois, 1)?, oh, gy, h)?;
    let xs = roi_taps(c, p.span(rois, 0)?, ow, gx, w)?;
    let (sy, sx) = (oh * gy, ow * gx);
    let rows = x.permute(&[0, 2, 3, 1])?.reshape([n * h * w, ch])?;
    let base = batch.mul_scalar((h * w) as f64)?.reshape([r, 1, 1])?;
    let mut acc: Option<Tensor> = None;
    for (yi, wy) in &ys {
        for (xi, wx) in &xs {
            let idx = base
                .add(&index_i32(yi)?.mul_scalar(w as f64)?.reshape([r, sy, 1])?)?
                .add(&index_i32(xi)?.reshape([r, 1, sx])?)?
                .reshape([r * sy * sx])?;
            let wt = wy
                .reshape([r, sy, 1, 1])?
                .mul(&wx.reshape([r, 1, sx, 1])?)?;
            let term = rows
                .index_select(0, &idx)?
                .reshape([r, sy, sx, ch])?
                .mul(&wt)?;
            acc = Some(match acc {
                None => term,
                Some(s) if p.max => s.maximum(&term)?,
                Some(s) => s.add(&term)?,
            });
        }
    }
    let acc = acc.ok_or_else(|| Error::invalid("onnx", "no taps"))?;
    let bins = acc.reshape([r, oh, gy, ow, gx, ch])?;
    let y = if p.max {
        bins.max(&[2, 4], false)?
    } else {
        bins.mean(&[2, 4], false)?
    };
    y.permute(&[0, 3, 1, 2])
}

/// RoiAlign: each region's `output_height x output_width` bins, each the average (or the
/// maximum) of a grid of bilinear samples, following the ONNX reference (for max, the largest
/// weighted tap of any sample). The sample positions are computed on the device from the
/// regions. The adaptive grid (`sampling_ratio` 0: `ceil(region size / bins)` samples per
/// bin) depends on each region's size, so the regions are then read back (std only) and
/// aligned one at a time.
fn roi_align(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let rois = c.tensor(a, 1)?.cast(x.dtype())?;
    let batch = c.tensor(a, 2)?.cast(kiln_core::DType::I32)?;
    if x.rank() != 4 || rois.rank() != 2 || rois.dims()[1] != 4 || batch.dims() != [rois.dims()[0]]
    {
        return Err(c.unsupported(format!(
            "X {}, rois {}, batch_indices {} (expects [N, C, H, W], [R, 4], [R])",
            x.shape(),
            rois.shape(),
            batch.shape()
        )));
    }
    let max = match c.string("mode", "avg")?.as_str() {
        "avg" => false,
        "max" => true,
        other => return Err(c.unsupported(format!("mode {other}"))),
    };
    let (oh, ow, sr) = (
        c.int("output_height", 1)?,
        c.int("output_width", 1)?,
        c.int("sampling_ratio", 0)?,
    );
    if oh <= 0 || ow <= 0 || sr < 0 {
        return Err(c.unsupported(format!(
            "output {oh}x{ow} with sampling_ratio {sr} (positive sizes and a ratio of 0 or more)"
        )));
    }
    let default = if c.opset >= 16 {
        "half_pixel"
    } else {
        "output_half_pixel"
    };
    let half_pixel = match c
        .string("coordinate_transformation_mode", default)?
        .as_str()
    {
        "half_pixel" => true,
        "output_half_pixel" => false,
        other => return Err(c.unsupported(format!("coordinate_transformation_mode {other}"))),
    };
    let p = Roi {
        max,
        bins: [oh as usize, ow as usize],
        scale: f64::from(c.float("spatial_scale", 1.0)?),
        half_pixel,
    };
    let r = rois.dims()[0];
    if r == 0 {
        return one(Tensor::zeros(
            [0, x.dims()[1], p.bins[0], p.bins[1]],
            x.dtype(),
            c.device,
        )?);
    }
    if sr > 0 {
        let g = sr as usize;
        return one(roi_bins(c, &x, &rois, &batch, &p, [g, g])?);
    }
    let host = host_values(&Value::Tensor(rois.clone()), "rois")?;
    let mut parts = Vec::with_capacity(r);
    for i in 0..r {
        let b = &host[i * 4..i * 4 + 4];
        let grid = |k: usize, bins: usize| {
            let mut len = (b[k + 2] - b[k]) * p.scale;
            if !half_pixel {
                len = len.max(1.0);
            }
            (libm::ceil(len / bins as f64).max(1.0)) as usize
        };
        let g = [grid(1, p.bins[0]), grid(0, p.bins[1])];
        parts.push(roi_bins(
            c,
            &x,
            &rois.narrow(0, i, 1)?,
            &batch.narrow(0, i, 1)?,
            &p,
            g,
        )?);
    }
    one(Tensor::concat(&parts, 0)?)
}

/// MaxUnpool: the values scattered (added) into zeros at their flat indices, which count over
/// the output that the kernel, strides and pads imply (as MaxPool's do). A larger
/// `output_shape` (input 2) pads that output at the end of each spatial axis.
fn max_unpool(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let idx = c.arg(a, 1)?;
    let r = x.rank();
    if r < 3 || idx.dims() != x.dims() {
        return Err(c.unsupported(format!(
            "X {} with indices {:?} (same shapes, rank 3 or more)",
            x.shape(),
            idx.dims()
        )));
    }
    let d = r - 2;
    let kernel = c.ints_attr("kernel_shape")?.unwrap_or_default();
    if kernel.len() != d || kernel.iter().any(|&k| k <= 0) {
        return Err(c.unsupported(format!("kernel_shape {kernel:?} for {d} spatial axes")));
    }
    let strides = spatial_attr(c, "strides", d, 1, 1)?;
    let pads = spatial_attr(c, "pads", d, 2, 0)?;
    let mut inferred = x.dims()[..2].to_vec();
    for i in 0..d {
        let full = x.dims()[2 + i].saturating_sub(1) * strides[i] + kernel[i] as usize;
        inferred.push(
            full.checked_sub(pads[i] + pads[d + i])
                .ok_or_else(|| c.unsupported(format!("pads {pads:?} larger than the output")))?,
        );
    }
    let dims = match c.optional(a, 2) {
        Some(_) => sizes(c, a, 2, "output_shape")?,
        None => inferred.clone(),
    };
    if dims.len() != r
        || dims.iter().zip(&inferred).any(|(o, i)| o < i)
        || dims[..2] != x.dims()[..2]
    {
        return Err(c.unsupported(format!(
            "output_shape {dims:?} for X {} (at least {inferred:?})",
            x.shape()
        )));
    }
    numel(&dims)?;
    let total = numel(&inferred)?;
    if let Value::Ints(i) = idx
        && let Some(bad) = i.data.iter().find(|&&v| v < 0 || v as usize >= total)
    {
        return Err(Error::index(
            "onnx",
            format!("index {bad} is outside the output of {total} elements"),
        ));
    }
    let index = idx.tensor(c.device, "I")?.reshape([x.numel()])?;
    let y = Tensor::zeros([total], x.dtype(), c.device)?
        .scatter_add(0, &index, &x.reshape([x.numel()])?)?
        .reshape(inferred.clone())?;
    if dims == inferred {
        return one(y);
    }
    let pads: Vec<(usize, usize)> = dims
        .iter()
        .zip(&inferred)
        .map(|(o, i)| (0, o - i))
        .collect();
    one(y.pad(&pads, 0.0)?)
}

/// NonMaxSuppression, on the host (its output size depends on the data): per batch and
/// class, boxes above `score_threshold` by falling score (the lower index first among equals),
/// each kept unless it overlaps a kept one by more than `iou_threshold`, at most
/// `max_output_boxes_per_class`. Rows `[batch, class, box]`.
fn non_max_suppression(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let boxes_v = c.arg(a, 0)?;
    let scores_v = c.arg(a, 1)?;
    let (bd, sd) = (boxes_v.dims(), scores_v.dims());
    if bd.len() != 3 || bd[2] != 4 || sd.len() != 3 || sd[0] != bd[0] || sd[2] != bd[1] {
        return Err(c.unsupported(format!(
            "boxes {bd:?} and scores {sd:?} (expects [B, n, 4] and [B, classes, n])"
        )));
    }
    let boxes = host_values(boxes_v, "boxes")?;
    let scores = host_values(scores_v, "scores")?;
    let first = |i: usize, what: &str| -> Result<Option<f64>> {
        match c.optional(a, i) {
            Some(v) => Ok(host_values(v, what)?.first().copied()),
            None => Ok(None),
        }
    };
    let max_out = first(2, "max_output_boxes_per_class")?
        .unwrap_or(0.0)
        .max(0.0) as usize;
    let iou_limit = first(3, "iou_threshold")?.unwrap_or(0.0);
    let score_min = first(4, "score_threshold")?;
    let center = c.int("center_point_box", 0)? != 0;
    let (nb, nc, n) = (sd[0], sd[1], sd[2]);
    // (y1, x1, y2, x2) with y1 <= y2 and x1 <= x2
    let corners = |b: usize, i: usize| -> [f64; 4] {
        let v = &boxes[(b * n + i) * 4..(b * n + i) * 4 + 4];
        if center {
            let (xc, yc, bw, bh) = (v[0], v[1], v[2], v[3]);
            [yc - bh / 2.0, xc - bw / 2.0, yc + bh / 2.0, xc + bw / 2.0]
        } else {
            [
                v[0].min(v[2]),
                v[1].min(v[3]),
                v[0].max(v[2]),
                v[1].max(v[3]),
            ]
        }
    };
    let iou = |p: [f64; 4], q: [f64; 4]| -> f64 {
        let area = |b: [f64; 4]| (b[2] - b[0]) * (b[3] - b[1]);
        let (ap, aq) = (area(p), area(q));
        if ap <= 0.0 || aq <= 0.0 {
            return 0.0;
        }
        let ih = (p[2].min(q[2]) - p[0].max(q[0])).max(0.0);
        let iw = (p[3].min(q[3]) - p[1].max(q[1])).max(0.0);
        let inter = ih * iw;
        inter / (ap + aq - inter)
    };
    let mut rows = Vec::new();
    for b in 0..nb {
        for cl in 0..nc {
            let s = &scores[(b * nc + cl) * n..(b * nc + cl + 1) * n];
            let mut order: Vec<usize> = (0..n)
                .filter(|&i| score_min.is_none_or(|m| s[i] > m))
                .collect();
            order.sort_by(|&i, &j| {
                s[j].partial_cmp(&s[i])
                    .unwrap_or(core::cmp::Ordering::Equal)
            });
            let mut kept: Vec<usize> = Vec::new();
            for i in order {
                if kept.len() >= max_out {
                    break;
                }
                if kept
                    .iter()
                    .all(|&k| iou(corners(b, k), corners(b, i)) <= iou_limit)
                {
                    kept.push(i);
                }
            }
            rows.extend(kept.iter().flat_map(|&i| [b as i64, cl as i64, i as i64]));
        }
    }
    one_ints(Ints {
        dims: vec![rows.len() / 3, 3],
        data: rows,
        bool: false,
    })
}

/// DeformConv (2-D): each kernel tap samples the input bilinearly (zeros outside) at its
/// position plus the learned offset, scaled by the mask; the sampled columns then meet the
/// weights in one matmul per group.
fn deform_conv(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let wt = c.tensor(a, 1)?;
    let off = c.tensor(a, 2)?.cast(x.dtype())?;
    if x.rank() != 4 || wt.rank() != 4 || off.rank() != 4 {
        return Err(c.unsupported(format!(
            "X {}, W {}, offset {} (2-D DeformConv: rank 4 each)",
            x.shape(),
            wt.shape(),
            off.shape()
        )));
    }
    let [n, ch, h, w] = [x.dims()[0], x.dims()[1], x.dims()[2], x.dims()[3]];
    let [oc, cg, kh, kw] = [wt.dims()[0], wt.dims()[1], wt.dims()[2], wt.dims()[3]];
    let group = c.int("group", 1)?;
    let og = c.int("offset_group", 1)?;
    let dil = spatial_attr(c, "dilations", 2, 1, 1)?;
    let pads = spatial_attr(c, "pads", 2, 2, 0)?;
    let strides = spatial_attr(c, "strides", 2, 1, 1)?;
    let k = kh * kw;
    let bad = |why: &str| {
        c.unsupported(format!(
            "X {}, W {}, offset {}: {why}",
            x.shape(),
            wt.shape(),
            off.shape()
        ))
    };
    if group <= 0 || og <= 0 || k == 0 || strides.contains(&0) || dil.contains(&0) {
        return Err(bad(
            "group, offset_group, kernel, strides and dilations must be positive",
        ));
    }
    let (group, og) = (group as usize, og as usize);
    if ch % group != 0 || cg * group != ch || oc % group != 0 || ch % og != 0 {
        return Err(bad("channels do not divide into the groups"));
    }
    let span = |size: usize, p0: usize, p1: usize, kk: usize, d: usize, s: usize| {
        let padded = size.saturating_add(p0).saturating_add(p1);
        padded
            .checked_sub(d.saturating_mul(kk - 1).saturating_add(1))
            .map(|v| v / s + 1)
    };
    let (Some(oh), Some(ow)) = (
        span(h, pads[0], pads[2], kh, dil[0], strides[0]),
        span(w, pads[1], pads[3], kw, dil[1], strides[1]),
    ) else {
        return Err(bad("the kernel is larger than the padded input"));
    };
    let l = oh * ow;
    if off.dims() != [n, og * 2 * k, oh, ow] {
        return Err(bad(&format!(
            "offset must be [{n}, {}, {oh}, {ow}]",
            og * 2 * k
        )));
    }
    // each tap's undisplaced position, [k, l]
    let mut by = Vec::with_capacity(k * l);
    let mut bx = Vec::with_capacity(k * l);
    for i in 0..kh {
        for j in 0..kw {
            for oy in 0..oh {
                for ox in 0..ow {
                    by.push((oy * strides[0] + i * dil[0]) as f64 - pads[0] as f64);
                    bx.push((ox * strides[1] + j * dil[1]) as f64 - pads[1] as f64);
                }
            }
        }
    }
    let by = float_table(c.device, by, vec![k, l], x.dtype())?;
    let bx = float_table(c.device, bx, vec![k, l], x.dtype())?;
    let off = off.reshape([n * og, k, 2, l])?;
    let py = off
        .narrow(2, 0, 1)?
        .squeeze(2)?
        .add(&by)?
        .reshape([n * og, k * l])?;
    let px = off
        .narrow(2, 1, 1)?
        .squeeze(2)?
        .add(&bx)?
        .reshape([n * og, k * l])?;
    let taps = [
        axis_taps(&py, h, Mode::Linear, Padding::Zeros, (0.0, 0.0))?,
        axis_taps(&px, w, Mode::Linear, Padding::Zeros, (0.0, 0.0))?,
    ];
    let xf = x.reshape([n * og, ch / og, h * w])?;
    let mut cols = gather_taps(&xf, &[h, w], &taps)?.reshape([n, og, ch / og, k, l])?;
    if let Some(m) = c.optional(a, 4) {
        let m = m.tensor(c.device, "mask")?.cast(x.dtype())?;
        if m.dims() != [n, og * k, oh, ow] {
            return Err(bad(&format!("mask must be [{n}, {}, {oh}, {ow}]", og * k)));
        }
        cols = cols.mul(&m.reshape([n, og, 1, k, l])?)?;
    }
    let cols = cols.reshape([n, ch * k, l])?;
    let ocg = oc / group;
    let mut outs = Vec::with_capacity(group);
    for gi in 0..group {
        let wg = wt.narrow(0, gi * ocg, ocg)?.reshape([ocg, cg * k])?;
        outs.push(wg.matmul(&cols.narrow(1, gi * cg * k, cg * k)?)?);
    }
    let mut y = Tensor::concat(&outs, 1)?;
    if let Some(b) = c.optional(a, 3) {
        let b = b.tensor(c.device, "B")?.cast(x.dtype())?;
        if b.dims() != [oc] {
            return Err(bad(&format!("B must be [{oc}]")));
        }
        y = y.add(&b.reshape([1, oc, 1])?)?;
    }
    one(y.reshape([n, oc, oh, ow])?)
}

#[cfg(test)]
mod tests {
    //! The attribute the suites leave out: RoiAlign's adaptive sampling grid.
    use super::super::testing::{A, close, fill, node, outputs, t};
    use super::*;

    #[test]
    fn adaptive_roi_grid_is_the_region_size_over_the_bins() {
        let x = t(&fill(2 * 10 * 10, 11), &[1, 2, 10, 10]);
        // regions of 5.5 x 4 and 8 x 5 pixels into 3 x 2 bins: grids of 2 and 3 samples
        let rois = t(&[1.0, 2.0, 6.5, 6.0, 0.5, 1.0, 8.5, 6.0], &[2, 4]);
        let batch = Value::Ints(Ints::vector(vec![0, 0]));
        let run = |ratio: i64| {
            let n = node(
                "RoiAlign",
                vec![
                    ("output_height", A::I(2)),
                    ("output_width", A::I(3)),
                    ("sampling_ratio", A::I(ratio)),
                ],
            );
            outputs(roi_align, 22, &n, &[x.clone(), rois.clone(), batch.clone()]).remove(0)
        };
        let (adaptive, two, three) = (run(0), run(2), run(3));
        let per = 2 * 2 * 3;
        close(&adaptive[..per], &two[..per], "region 0");
        close(&adaptive[per..], &three[per..], "region 1");
        assert!((two[per] - three[per]).abs() > 1e-4, "the grids differ");
    }
}
