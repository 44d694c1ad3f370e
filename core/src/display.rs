//! `Display` for tensors and tensor data, in the style of PyTorch: aligned columns, 4 decimals
//! (or scientific notation for wide ranges), and `...` past 1000 elements.
//!
//! ```
//! use kiln_core::{Device, Tensor, TensorData};
//! let d = TensorData::new(vec![1.0f32, 2.5, -3.0, 4.0], [2, 2]).unwrap();
//! assert_eq!(d.to_string(), "tensor([[ 1.0000,  2.5000],\n        [-3.0000,  4.0000]], dtype=f32)");
//! let t = Tensor::from_vec(vec![1i32, 20, 3], [3], &Device::cpu()).unwrap();
//! assert_eq!(t.to_string(), "tensor([ 1, 20,  3], dtype=i32)");
//! ```

use crate::{DType, Tensor, TensorData};
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt::{self, Write};
use core::future::Future;
use core::task::{Context, Poll, Waker};

/// Elements beyond which the output is summarised.
const THRESHOLD: usize = 1000;
/// Items kept at each end of a summarised axis.
const EDGE: usize = 3;

impl fmt::Display for TensorData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        render(f, self, "")
    }
}

impl fmt::Display for Tensor {
    /// Never blocks: the read is polled once; a device that is not ready (a GPU) prints only
    /// the tensor's metadata.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let device = self.device().name();
        let extra = if device == "cpu" {
            String::new()
        } else {
            alloc::format!(", device={device}")
        };
        let read = self.data();
        let mut read = core::pin::pin!(read);
        match read.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(Ok(data)) => render(f, &data, &extra),
            Poll::Ready(Err(e)) => write!(
                f,
                "tensor(<unreadable: {e}>, shape={}, dtype={}{extra})",
                self.shape(),
                self.dtype()
            ),
            Poll::Pending => write!(
                f,
                "tensor(<on device; await data() to read>, shape={}, dtype={}{extra})",
                self.shape(),
                self.dtype()
            ),
        }
    }
}

fn render(f: &mut fmt::Formatter<'_>, data: &TensorData, extra: &str) -> fmt::Result {
    let dims = data.shape().dims();
    let dtype = data.dtype();
    if data.shape().numel() == 0 {
        return write!(
            f,
            "tensor([], shape={}, dtype={dtype}{extra})",
            data.shape()
        );
    }
    let values = data.to_f64_vec();
    let summarise = values.len() > THRESHOLD;
    // Per axis, the indices shown (`None` marks the elided middle).
    let axes: Vec<Vec<Option<usize>>> = dims
        .iter()
        .map(|&d| {
            if summarise && d > 2 * EDGE {
                (0..EDGE)
                    .map(Some)
                    .chain([None])
                    .chain((d - EDGE..d).map(Some))
                    .collect()
            } else {
                (0..d).map(Some).collect()
            }
        })
        .collect();
    let strides = data.shape().contiguous_strides();
    let mut shown = Vec::new();
    collect(&values, &axes, &strides, 0, 0, &mut shown);
    let style = Style::new(dtype, &shown);
    let width = shown
        .iter()
        .map(|&v| style.format(v).len())
        .max()
        .unwrap_or(0);
    let mut out = String::from("tensor(");
    let block = Block {
        values: &values,
        axes: &axes,
        strides: &strides,
        style,
        width,
    };
    block.write(&mut out, 0, 0)?;
    write!(out, ", dtype={dtype}{extra})")?;
    f.write_str(&out)
}

fn collect(
    values: &[f64],
    axes: &[Vec<Option<usize>>],
    strides: &[isize],
    depth: usize,
    base: usize,
    out: &mut Vec<f64>,
) {
    if depth == axes.len() {
        out.push(values[base]);
        return;
    }
    for k in axes[depth].iter().flatten() {
        collect(
            values,
            axes,
            strides,
            depth + 1,
            base + k * strides[depth] as usize,
            out,
        );
    }
}

struct Block<'a> {
    values: &'a [f64],
    axes: &'a [Vec<Option<usize>>],
    strides: &'a [isize],
    style: Style,
    width: usize,
}

impl Block<'_> {
    fn write(&self, out: &mut String, depth: usize, base: usize) -> fmt::Result {
        if depth == self.axes.len() {
            return write!(
                out,
                "{:>w$}",
                self.style.format(self.values[base]),
                w = self.width
            );
        }
        out.push('[');
        for (i, entry) in self.axes[depth].iter().enumerate() {
            if i > 0 {
                out.push(',');
                if depth + 1 == self.axes.len() {
                    out.push(' ');
                } else {
                    for _ in 0..self.axes.len() - depth - 1 {
                        out.push('\n');
                    }
                    for _ in 0.."tensor(".len() + depth + 1 {
                        out.push(' ');
                    }
                }
            }
            match entry {
                Some(k) => self.write(out, depth + 1, base + k * self.strides[depth] as usize)?,
                None => out.push_str("..."),
            }
        }
        out.push(']');
        Ok(())
    }
}

/// How elements print, chosen from the shown values as PyTorch does.
#[derive(Clone, Copy)]
enum Style {
    Bool,
    Int,
    /// Floats that are all integral: `3.`
    Integral,
    Fixed,
    Scientific,
}

impl Style {
    fn new(dtype: DType, shown: &[f64]) -> Style {
        match dtype {
            DType::Bool => return Style::Bool,
            DType::I32 | DType::U32 => return Style::Int,
            _ => {}
        }
        let finite: Vec<f64> = shown
            .iter()
            .filter(|v| v.is_finite() && **v != 0.0)
            .map(|v| v.abs())
            .collect();
        let integral = shown
            .iter()
            .filter(|v| v.is_finite())
            .all(|v| crate::math::ceil(*v) == *v);
        if finite.is_empty() {
            return if integral {
                Style::Integral
            } else {
                Style::Fixed
            };
        }
        let max = finite.iter().fold(0.0f64, |a, &b| a.max(b));
        let min = finite.iter().fold(f64::INFINITY, |a, &b| a.min(b));
        let wide = max / min > 1000.0 || max > 1e8;
        match (integral, wide || (!integral && min < 1e-4)) {
            (_, true) => Style::Scientific,
            (true, false) => Style::Integral,
            (false, false) => Style::Fixed,
        }
    }

    fn format(self, v: f64) -> String {
        match self {
            Style::Bool => (if v != 0.0 { "True" } else { "False" }).into(),
            Style::Int => alloc::format!("{v}"),
            _ if v.is_nan() => "nan".into(),
            _ if v.is_infinite() => (if v > 0.0 { "inf" } else { "-inf" }).into(),
            Style::Integral => alloc::format!("{v:.0}."),
            Style::Fixed => alloc::format!("{v:.4}"),
            Style::Scientific => {
                // Rust writes `1.2346e3`; PyTorch writes `1.2346e+03`.
                let s = alloc::format!("{v:.4e}");
                match s.split_once('e') {
                    Some((m, e)) => {
                        let (sign, digits) = match e.strip_prefix('-') {
                            Some(d) => ('-', d),
                            None => ('+', e),
                        };
                        alloc::format!("{m}e{sign}{digits:0>2}")
                    }
                    None => s.to_string(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Device, Tensor, TensorData};

    #[test]
    fn prints_like_pytorch() {
        let d = TensorData::new(vec![1.0f64, 2.0, 3.0], [3]).unwrap();
        assert_eq!(d.to_string(), "tensor([1., 2., 3.], dtype=f64)");
        let d = TensorData::new(vec![1e-5f32, 1.0], [2]).unwrap();
        assert_eq!(d.to_string(), "tensor([1.0000e-05, 1.0000e+00], dtype=f32)");
        let d = TensorData::new(vec![true, false], [2]).unwrap();
        assert_eq!(d.to_string(), "tensor([ True, False], dtype=bool)");
        let d = TensorData::new(vec![2.5f32], []).unwrap();
        assert_eq!(d.to_string(), "tensor(2.5000, dtype=f32)");
        let d = TensorData::new(vec![f32::NAN, 1.5], [2]).unwrap();
        assert_eq!(d.to_string(), "tensor([   nan, 1.5000], dtype=f32)");
        let d = TensorData::new(Vec::<f32>::new(), [0, 3]).unwrap();
        assert_eq!(d.to_string(), "tensor([], shape=[0, 3], dtype=f32)");
        let d = TensorData::new((0..8).collect::<Vec<i32>>(), [2, 2, 2]).unwrap();
        assert_eq!(
            d.to_string(),
            "tensor([[[0, 1],\n         [2, 3]],\n\n        [[4, 5],\n         [6, 7]]], dtype=i32)"
        );
    }

    #[test]
    fn summarises_large_tensors() {
        let t = Tensor::arange(0.0, 2000.0, 1.0, DType::I32, &Device::cpu())
            .unwrap()
            .reshape([40, 50])
            .unwrap();
        let s = t.to_string();
        let first = s.lines().next().unwrap();
        assert_eq!(first, "tensor([[   0,    1,    2, ...,   47,   48,   49],");
        assert_eq!(s.lines().nth(3).unwrap(), "        ...,");
        assert_eq!(s.lines().count(), 7, "{s}");
        assert!(s.ends_with("1998, 1999]], dtype=i32)"), "{s}");
    }
}
