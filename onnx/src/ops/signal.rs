//! Signal-processing ONNX ops: DFT and STFT as matmuls with cosine and sine tables built on the
//! host (their sizes come from shapes and attributes), and the window and mel-filter generators,
//! computed on the host from their scalar inputs.

use super::shape::{host_numel, index_tensor, onnx_dtype};
use super::{Ctx, OpFn, Outputs, axis, float_table, host_values, one};
use crate::value::{Ints, Value};
use alloc::format;
use alloc::vec;
use alloc::vec::Vec;
use core::f64::consts::PI;
use kiln_core::{Result, Tensor};

pub(super) const OPS: &[(&str, OpFn)] = &[
    ("DFT", dft),
    ("STFT", stft),
    ("HannWindow", |c, a| window(c, a, [0.5, 0.5, 0.0])),
    ("HammingWindow", |c, a| {
        window(c, a, [25.0 / 46.0, 21.0 / 46.0, 0.0])
    }),
    ("BlackmanWindow", |c, a| window(c, a, [0.42, 0.5, 0.08])),
    ("MelWeightMatrix", mel_weight_matrix),
];

/// A one-element input as an integer (a computed tensor is read back: it decides a shape).
fn scalar(v: &Value, what: &str) -> Result<i64> {
    match host_values(v, what)?.as_slice() {
        [x] => Ok(*x as i64),
        other => Err(kiln_core::Error::shape(
            "onnx",
            format!("{what}: expects one value, found {}", other.len()),
        )),
    }
}

/// What a transform computes along its axis.
struct Transform {
    /// Transform length: the signal is cut or zero-padded to it.
    len: usize,
    inverse: bool,
    onesided: bool,
}

/// The transform of `x` (`[..., n, 1 or 2]`: real, or real and imaginary parts) along its
/// second-to-last axis: `[..., bins, 2]`, or `[..., len, 1]` for a one-sided inverse (a real
/// signal from half a spectrum). Each output part is a matmul of each input part with a cosine
/// or sine table.
fn transform(c: &Ctx<'_>, x: &Tensor, t: &Transform) -> Result<Tensor> {
    let rank = x.rank();
    let (n, parts) = (x.dims()[rank - 2], x.dims()[rank - 1]);
    if !(parts == 1 || parts == 2) || t.len == 0 {
        return Err(c.unsupported(format!(
            "a signal of shape {} (last axis 1 for real, 2 for complex) with length {}",
            x.shape(),
            t.len
        )));
    }
    let l = t.len as f64;
    let half = t.len / 2 + 1;
    let real_out = t.inverse && t.onesided;
    // input bins used and output bins
    let (used, bins) = if real_out {
        (n.min(half), t.len)
    } else if t.onesided {
        (n.min(t.len), half)
    } else {
        (n.min(t.len), t.len)
    };
    // e^{s j theta}: s = -1 forward, +1 inverse; the inverse divides by the length, and a
    // one-sided inverse counts each bin strictly inside the half twice (its mirror image)
    host_numel(&[n, bins])?;
    let (sign, scale) = if t.inverse {
        (1.0, 1.0 / l)
    } else {
        (-1.0, 1.0)
    };
    let mut cos = vec![0.0; n * bins];
    let mut sin = vec![0.0; n * bins];
    for i in 0..used {
        let w = if real_out && i != 0 && !(t.len.is_multiple_of(2) && i == t.len / 2) {
            2.0 * scale
        } else {
            scale
        };
        for k in 0..bins {
            let theta = 2.0 * PI * ((i * k) % t.len) as f64 / l;
            cos[i * bins + k] = w * libm::cos(theta);
            sin[i * bins + k] = w * sign * libm::sin(theta);
        }
    }
    let cos = float_table(c.device, cos, vec![n, bins], x.dtype())?;
    let sin = float_table(c.device, sin, vec![n, bins], x.dtype())?;
    let re = x.narrow(-1, 0, 1)?.squeeze(-1)?;
    // (re + j im)(cos + j sin) = re cos - im sin + j (im cos + re sin)
    let mut y_re = re.matmul(&cos)?;
    let mut y_im = re.matmul(&sin)?;
    if parts == 2 {
        let im = x.narrow(-1, 1, 1)?.squeeze(-1)?;
        y_re = y_re.sub(&im.matmul(&sin)?)?;
        y_im = y_im.add(&im.matmul(&cos)?)?;
    }
    if real_out {
        y_re.unsqueeze(-1)
    } else {
        Tensor::stack(&[y_re, y_im], -1)
    }
}

/// DFT: along `axis` (an attribute before opset 20, then input 2, default -2), of length
/// `dft_length` (input 1; default the axis size, or twice the size less one for a one-sided
/// inverse).
fn dft(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    let rank = x.rank();
    if rank < 2 {
        return Err(c.unsupported(format!(
            "input of shape {} (rank 2 or more: the signal axes then real/imaginary)",
            x.shape()
        )));
    }
    let ax = if c.opset >= 20 {
        match c.optional(a, 2) {
            Some(v) => scalar(v, "axis")?,
            None => -2,
        }
    } else {
        c.int("axis", 1)?
    };
    let ax = axis(ax, rank)?;
    if ax == rank - 1 {
        return Err(c.unsupported(format!(
            "axis {ax}: the last axis holds the real and imaginary parts"
        )));
    }
    let inverse = c.int("inverse", 0)? != 0;
    let onesided = c.int("onesided", 0)? != 0;
    let n = x.dims()[ax];
    let len = match c.optional(a, 1) {
        Some(v) => {
            let l = scalar(v, "dft_length")?;
            usize::try_from(l)
                .ok()
                .filter(|&l| l > 0)
                .ok_or_else(|| c.unsupported(format!("dft_length {l} (positive is)")))?
        }
        None if inverse && onesided => 2 * n.saturating_sub(1),
        None => n,
    };
    let t = Transform {
        len,
        inverse,
        onesided,
    };
    let moved = x.transpose(ax as isize, (rank - 2) as isize)?;
    one(transform(c, &moved, &t)?.transpose((rank - 2) as isize, ax as isize)?)
}

/// STFT: frames of `frame_length` (input 3, else the window's length) every `frame_step`
/// samples, gathered with one index table, windowed and transformed: `[batch, frames, bins, 2]`.
fn stft(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let x = c.tensor(a, 0)?;
    // a real signal may come without its real/imaginary axis
    let x = if x.rank() == 2 { x.unsqueeze(-1)? } else { x };
    if x.rank() != 3 {
        return Err(c.unsupported(format!(
            "signal of shape {} ([batch, length, 1 or 2] is)",
            x.shape()
        )));
    }
    let step = scalar(c.arg(a, 1)?, "frame_step")?;
    let window = match c.optional(a, 2) {
        Some(v) => Some(v.tensor(c.device, "window")?),
        None => None,
    };
    let frame = match (c.optional(a, 3), &window) {
        (Some(v), _) => scalar(v, "frame_length")?,
        (None, Some(w)) => w.numel() as i64,
        (None, None) => {
            return Err(c.unsupported("STFT without a window or frame_length"));
        }
    };
    let len = x.dims()[1];
    let (step, frame) = match (usize::try_from(step), usize::try_from(frame)) {
        (Ok(s), Ok(f)) if s > 0 && f > 0 && f <= len => (s, f),
        _ => {
            return Err(c.unsupported(format!(
                "frame_step {step} and frame_length {frame} for a signal of length {len}"
            )));
        }
    };
    if let Some(w) = &window
        && w.dims() != [frame]
    {
        return Err(c.unsupported(format!(
            "window of shape {} for frame_length {frame}",
            w.shape()
        )));
    }
    let frames = (len - frame) / step + 1;
    host_numel(&[frames, frame])?;
    let idx: Vec<usize> = (0..frames)
        .flat_map(|f| (0..frame).map(move |i| f * step + i))
        .collect();
    let parts = x.dims()[2];
    let mut y =
        x.index_select(1, &index_tensor(c, &idx)?)?
            .reshape([x.dims()[0], frames, frame, parts])?;
    if let Some(w) = window {
        y = y.mul(&w.cast(y.dtype())?.reshape([1, 1, frame, 1])?)?;
    }
    let t = Transform {
        len: frame,
        inverse: false,
        onesided: c.int("onesided", 1)? != 0,
    };
    one(transform(c, &y, &t)?)
}

/// A host-computed table as the type `output_datatype` names: a float tensor, or host integers
/// (truncated) for an integer type.
fn typed_table(c: &Ctx<'_>, data: Vec<f64>, dims: Vec<usize>) -> Outputs {
    match onnx_dtype(c, c.int("output_datatype", 1)?)? {
        Ok(dt) => one(float_table(c.device, data, dims, dt)?),
        Err(bool) => Ok(vec![Value::Ints(Ints {
            dims,
            data: data.iter().map(|&v| v as i64).collect(),
            bool,
        })]),
    }
}

/// A cosine-sum window `a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N)` of `size` points, where
/// N is the size (periodic, the default) or the size less one (symmetric).
fn window(c: &Ctx<'_>, a: &[Value], [a0, a1, a2]: [f64; 3]) -> Outputs {
    let size = scalar(c.arg(a, 0)?, "size")?;
    let size = usize::try_from(size).map_err(|_| c.unsupported(format!("window size {size}")))?;
    host_numel(&[size])?;
    let periodic = c.int("periodic", 1)? != 0;
    let n = if periodic {
        size
    } else {
        size.saturating_sub(1)
    } as f64;
    let data = (0..size)
        .map(|i| {
            if n == 0.0 {
                // a symmetric window of one point is its peak, 1 (as NumPy's and PyTorch's)
                return 1.0;
            }
            let t = 2.0 * PI * i as f64 / n;
            a0 - a1 * libm::cos(t) + a2 * libm::cos(2.0 * t)
        })
        .collect();
    typed_table(c, data, vec![size])
}

/// MelWeightMatrix: `[dft_length / 2 + 1, num_mel_bins]` triangles of peak 1. The band edges
/// are `num_mel_bins + 2` points spaced evenly on the mel scale `2595 log10(1 + f / 700)`
/// from the lower edge, each mapped to the DFT bin `floor((dft_length + 1) f / sample_rate)`;
/// triangle `m` rises from edge `m` to edge `m + 1` and falls to edge `m + 2`.
fn mel_weight_matrix(c: &Ctx<'_>, a: &[Value]) -> Outputs {
    let mels = scalar(c.arg(a, 0)?, "num_mel_bins")?;
    let dft_len = scalar(c.arg(a, 1)?, "dft_length")?;
    let rate = scalar(c.arg(a, 2)?, "sample_rate")?;
    let one_value = |i: usize, what: &str| -> Result<f64> {
        match host_values(c.arg(a, i)?, what)?.as_slice() {
            [v] => Ok(*v),
            other => Err(c.unsupported(format!("{what}: {} values (one is)", other.len()))),
        }
    };
    let (low, high) = (
        one_value(3, "lower_edge_hertz")?,
        one_value(4, "upper_edge_hertz")?,
    );
    if mels <= 0 || dft_len <= 0 || rate <= 0 || !(0.0 <= low && low <= high) {
        return Err(c.unsupported(format!(
            "num_mel_bins {mels}, dft_length {dft_len}, sample_rate {rate}, edges {low}..{high}"
        )));
    }
    let (mels, bins) = (mels as usize, dft_len as usize / 2 + 1);
    host_numel(&[bins, mels])?;
    let mel = |f: f64| 2595.0 * libm::log10(1.0 + f / 700.0);
    let (lo, hi) = (mel(low), mel(high));
    let step = (hi - lo) / (mels + 2) as f64;
    let edges: Vec<i64> = (0..mels + 2)
        .map(|i| {
            let hz = 700.0 * (libm::pow(10.0, (lo + i as f64 * step) / 2595.0) - 1.0);
            libm::floor((dft_len + 1) as f64 * hz / rate as f64) as i64
        })
        .collect();
    let mut out = vec![0.0; bins * mels];
    let mut set = |j: i64, m: usize, v: f64| {
        if (0..bins as i64).contains(&j) {
            out[j as usize * mels + m] = v;
        }
    };
    // edges past the last bin (an upper edge above the Nyquist frequency) shape the slopes
    // but are not visited
    let end = bins as i64;
    for m in 0..mels {
        let (l, ce, r) = (edges[m], edges[m + 1], edges[m + 2]);
        if ce == l {
            set(ce, m, 1.0);
        } else {
            for j in l..=ce.min(end - 1) {
                set(j, m, (j - l) as f64 / (ce - l) as f64);
            }
        }
        for j in ce..r.min(end) {
            set(j, m, (r - j) as f64 / (r - ce) as f64);
        }
    }
    typed_table(c, out, vec![bins, mels])
}

#[cfg(test)]
mod tests {
    //! The input the suites leave out: DFT's `dft_length`, which zero-pads or cuts the signal.
    use super::super::testing::{A, close, node, outputs, t};
    use super::*;

    #[test]
    fn dft_length_pads_or_cuts_the_signal() {
        let x = [0.5, -1.0, 2.0, 0.25, 1.5];
        let n = node("DFT", vec![("axis", A::I(1))]);
        let run = |v: &[f64], len: Option<i64>| {
            let mut args = vec![t(v, &[1, v.len(), 1])];
            if let Some(l) = len {
                args.push(Value::Ints(Ints::scalar(l)));
            }
            outputs(dft, 19, &n, &args).remove(0)
        };
        let mut padded = x.to_vec();
        padded.extend([0.0; 3]);
        close(&run(&x, Some(8)), &run(&padded, None), "padded");
        close(&run(&x, Some(3)), &run(&x[..3], None), "cut");
    }
}
