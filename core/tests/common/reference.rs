//! Naive references in plain f64 loops, one per op family. They never call kiln.

use super::{Arr, numel, ravel, unravel};
use std::f64::consts::PI;

// ---------------------------------------------------------------- scalar functions

/// erf by its Maclaurin series near zero and the continued fraction of erfc further out.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return f64::NAN;
    }
    if x < 0.0 {
        return -erf(-x);
    }
    if x < 2.5 {
        // erf(x) = 2/sqrt(pi) * sum_n (-1)^n x^(2n+1) / (n! (2n+1))
        let (x2, mut term, mut sum) = (x * x, x, 0.0);
        for n in 0..200 {
            let t = term / (2 * n + 1) as f64;
            sum += t;
            if t.abs() < 1e-18 * sum.abs().max(1e-300) {
                break;
            }
            term *= -x2 / (n + 1) as f64;
        }
        2.0 / PI.sqrt() * sum
    } else {
        // erfc(x) = e^{-x^2}/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))
        let mut t = x;
        for n in (1..=120).rev() {
            t = x + (n as f64 * 0.5) / t;
        }
        1.0 - (-x * x).exp() / (PI.sqrt() * t)
    }
}

/// GELU, exact form: `x * (1 + erf(x / sqrt 2)) / 2`.
pub fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x / std::f64::consts::SQRT_2))
}

/// Round half to even.
pub fn round_half_even(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 {
        2.0 * (x / 2.0).round()
    } else {
        r
    }
}

/// -1, 0 or 1 (NaN stays NaN).
pub fn sign(x: f64) -> f64 {
    if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        x
    }
}

/// Max that propagates NaN.
pub fn max_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Min that propagates NaN.
pub fn min_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

// ---------------------------------------------------------------- broadcasting, elementwise

/// NumPy's broadcast rule, or None.
pub fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let da = if i + a.len() >= r {
                a[i + a.len() - r]
            } else {
                1
            };
            let db = if i + b.len() >= r {
                b[i + b.len() - r]
            } else {
                1
            };
            match (da, db) {
                _ if da == db => Some(da),
                (1, _) => Some(db),
                (_, 1) => Some(da),
                _ => None,
            }
        })
        .collect()
}

/// `f(a, b)` elementwise after broadcasting.
pub fn binary(a: &Arr, b: &Arr, f: impl Fn(f64, f64) -> f64) -> Arr {
    let s = broadcast_shape(&a.shape, &b.shape).expect("test shapes broadcast");
    let (a, b) = (a.broadcast_to(&s), b.broadcast_to(&s));
    Arr::new(
        &s,
        a.data.iter().zip(&b.data).map(|(&x, &y)| f(x, y)).collect(),
    )
}

// ---------------------------------------------------------------- reductions and scans

/// The shape left after reducing `axes` (empty = all).
pub fn reduced_shape(shape: &[usize], axes: &[usize], keepdim: bool) -> Vec<usize> {
    let all: Vec<usize> = if axes.is_empty() {
        (0..shape.len()).collect()
    } else {
        axes.to_vec()
    };
    shape
        .iter()
        .enumerate()
        .filter_map(|(i, &d)| {
            if all.contains(&i) {
                keepdim.then_some(1)
            } else {
                Some(d)
            }
        })
        .collect()
}

/// `f` of the values over `axes` (empty = all), visited in row-major order.
pub fn reduce(a: &Arr, axes: &[usize], keepdim: bool, f: impl Fn(&[f64]) -> f64) -> Arr {
    let axes: Vec<usize> = if axes.is_empty() {
        (0..a.rank()).collect()
    } else {
        axes.to_vec()
    };
    let kept: Vec<usize> = reduced_shape(&a.shape, &axes, true);
    let red: Vec<usize> = axes.iter().map(|&i| a.shape[i]).collect();
    let out = Arr::from_fn(&kept, |o| {
        let mut idx = o.to_vec();
        let vals: Vec<f64> = (0..numel(&red))
            .map(|r| {
                for (k, &ax) in axes.iter().zip(unravel(r, &red).iter()) {
                    idx[*k] = ax;
                }
                a.at(&idx)
            })
            .collect();
        f(&vals)
    });
    out.reshape(&reduced_shape(&a.shape, &axes, keepdim))
}

pub fn sum(v: &[f64]) -> f64 {
    v.iter().sum()
}
pub fn mean(v: &[f64]) -> f64 {
    sum(v) / v.len() as f64
}
pub fn prod(v: &[f64]) -> f64 {
    v.iter().product()
}
pub fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NEG_INFINITY, max_nan)
}
pub fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, min_nan)
}
pub fn var(v: &[f64], correction: usize) -> f64 {
    let m = mean(v);
    v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (v.len() as f64 - correction as f64)
}
/// Index of the first maximum.
pub fn argmax(v: &[f64]) -> f64 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x > v[best] {
            best = i;
        }
    }
    best as f64
}
/// Index of the first minimum.
pub fn argmin(v: &[f64]) -> f64 {
    let mut best = 0;
    for (i, &x) in v.iter().enumerate() {
        if x < v[best] {
            best = i;
        }
    }
    best as f64
}

/// Replaces every lane along `axis` by `f(lane)`.
pub fn along_axis(a: &Arr, axis: usize, f: impl Fn(&[f64]) -> Vec<f64>) -> Arr {
    let mut out = a.clone();
    let n = a.shape[axis];
    let mut outer = a.shape.clone();
    outer[axis] = 1;
    for o in 0..numel(&outer) {
        let mut idx = unravel(o, &outer);
        let lane: Vec<f64> = (0..n)
            .map(|k| {
                idx[axis] = k;
                a.at(&idx)
            })
            .collect();
        for (k, v) in f(&lane).into_iter().enumerate() {
            idx[axis] = k;
            out.set(&idx, v);
        }
    }
    out
}

pub fn cumsum(lane: &[f64], reverse: bool) -> Vec<f64> {
    let mut acc = 0.0;
    let mut out = vec![0.0; lane.len()];
    let order: Vec<usize> = if reverse {
        (0..lane.len()).rev().collect()
    } else {
        (0..lane.len()).collect()
    };
    for i in order {
        acc += lane[i];
        out[i] = acc;
    }
    out
}

pub fn softmax(lane: &[f64]) -> Vec<f64> {
    let m = max(lane);
    let e: Vec<f64> = lane.iter().map(|x| (x - m).exp()).collect();
    let s = sum(&e);
    e.iter().map(|x| x / s).collect()
}

pub fn log_softmax(lane: &[f64]) -> Vec<f64> {
    let m = max(lane);
    let lse = m + lane.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
    lane.iter().map(|x| x - lse).collect()
}

// ---------------------------------------------------------------- matmul

/// NumPy matmul: batch dims broadcast, rank-1 operands promoted and their axis dropped.
pub fn matmul(a: &Arr, b: &Arr) -> Arr {
    let ash = if a.rank() == 1 {
        vec![1, a.shape[0]]
    } else {
        a.shape.clone()
    };
    let bsh = if b.rank() == 1 {
        vec![b.shape[0], 1]
    } else {
        b.shape.clone()
    };
    let (m, k) = (ash[ash.len() - 2], ash[ash.len() - 1]);
    let (k2, n) = (bsh[bsh.len() - 2], bsh[bsh.len() - 1]);
    assert_eq!(k, k2, "test matmul shapes");
    let batch = broadcast_shape(&ash[..ash.len() - 2], &bsh[..bsh.len() - 2]).expect("batch");
    let with = |tail: [usize; 2]| [batch.clone(), tail.to_vec()].concat();
    let a2 = a.reshape(&ash).broadcast_to(&with([m, k]));
    let b2 = b.reshape(&bsh).broadcast_to(&with([k, n]));
    let out = Arr::from_fn(&with([m, n]), |o| {
        let r = o.len();
        let (i, j) = (o[r - 2], o[r - 1]);
        let mut ai = o.to_vec();
        let mut bi = o.to_vec();
        (0..k)
            .map(|p| {
                (ai[r - 2], ai[r - 1]) = (i, p);
                (bi[r - 2], bi[r - 1]) = (p, j);
                a2.at(&ai) * b2.at(&bi)
            })
            .sum()
    });
    let mut dims = batch.clone();
    if a.rank() > 1 {
        dims.push(m);
    }
    if b.rank() > 1 {
        dims.push(n);
    }
    out.reshape(&dims)
}

// ---------------------------------------------------------------- views and data movement

/// Output axis `i` is input axis `dims[i]`.
pub fn permute(a: &Arr, dims: &[usize]) -> Arr {
    let shape: Vec<usize> = dims.iter().map(|&d| a.shape[d]).collect();
    Arr::from_fn(&shape, |o| {
        let mut src = vec![0; a.rank()];
        for (i, &d) in dims.iter().enumerate() {
            src[d] = o[i];
        }
        a.at(&src)
    })
}

/// `(start, end, step)` per leading axis; missing trailing axes are whole.
pub fn slice(a: &Arr, ranges: &[(usize, usize, usize)]) -> Arr {
    let shape: Vec<usize> = a
        .shape
        .iter()
        .enumerate()
        .map(|(i, &d)| match ranges.get(i) {
            Some(&(s, e, st)) => (s..e).step_by(st).count(),
            None => d,
        })
        .collect();
    Arr::from_fn(&shape, |o| {
        let src: Vec<usize> = o
            .iter()
            .enumerate()
            .map(|(i, &k)| ranges.get(i).map_or(k, |&(s, _, st)| s + k * st))
            .collect();
        a.at(&src)
    })
}

pub fn concat(parts: &[Arr], axis: usize) -> Arr {
    let mut shape = parts[0].shape.clone();
    shape[axis] = parts.iter().map(|p| p.shape[axis]).sum();
    Arr::from_fn(&shape, |o| {
        let mut idx = o.to_vec();
        for p in parts {
            if idx[axis] < p.shape[axis] {
                return p.at(&idx);
            }
            idx[axis] -= p.shape[axis];
        }
        unreachable!()
    })
}

/// `torch.gather`: `out[i] = x[i with axis replaced by index[i]]`.
pub fn gather(x: &Arr, axis: usize, index: &Arr) -> Arr {
    Arr::from_fn(&index.shape, |o| {
        let mut src = o.to_vec();
        src[axis] = index.at(o) as usize;
        x.at(&src)
    })
}

pub fn index_select(x: &Arr, axis: usize, index: &[usize]) -> Arr {
    let mut shape = x.shape.clone();
    shape[axis] = index.len();
    Arr::from_fn(&shape, |o| {
        let mut src = o.to_vec();
        src[axis] = index[o[axis]];
        x.at(&src)
    })
}

pub fn scatter_add(x: &Arr, axis: usize, index: &Arr, src: &Arr) -> Arr {
    let mut out = x.clone();
    for i in 0..index.numel() {
        let idx = unravel(i, &index.shape);
        let mut dst = idx.clone();
        dst[axis] = index.at(&idx) as usize;
        let v = out.at(&dst) + src.at(&idx);
        out.set(&dst, v);
    }
    out
}

pub fn pad(x: &Arr, pads: &[(usize, usize)], value: f64) -> Arr {
    let shape: Vec<usize> = x
        .shape
        .iter()
        .enumerate()
        .map(|(i, &d)| pads.get(i).map_or(d, |&(b, a)| b + d + a))
        .collect();
    Arr::from_fn(&shape, |o| {
        let mut src = Vec::with_capacity(o.len());
        for (i, &k) in o.iter().enumerate() {
            let before = pads.get(i).map_or(0, |p| p.0);
            if k < before || k - before >= x.shape[i] {
                return value;
            }
            src.push(k - before);
        }
        x.at(&src)
    })
}

pub fn one_hot(index: &Arr, classes: usize) -> Arr {
    let shape = [index.shape.clone(), vec![classes]].concat();
    Arr::from_fn(&shape, |o| {
        let (c, rest) = o.split_last().expect("rank >= 1");
        (index.at(rest) as usize == *c) as u8 as f64
    })
}

// ---------------------------------------------------------------- convolution and pooling

/// Conv parameters in the reference's own terms.
#[derive(Clone, Copy, Debug)]
pub struct Conv {
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
}

/// Input position of output `o` and tap `k` along one axis, when inside the input.
fn tap(o: usize, k: usize, stride: usize, pad: usize, dil: usize, size: usize) -> Option<usize> {
    let p = (o * stride + k * dil) as isize - pad as isize;
    (p >= 0 && (p as usize) < size).then_some(p as usize)
}

fn dims4(a: &Arr) -> [usize; 4] {
    a.shape[..].try_into().expect("4-D")
}

/// Cross-correlation of NCHW `x` with OIHW `w`.
pub fn conv2d(x: &Arr, w: &Arr, c: Conv) -> Arr {
    let [n, ci, h, wd] = dims4(x);
    let [o, cg, kh, kw] = dims4(w);
    assert_eq!(cg * c.groups, ci);
    let opg = o / c.groups;
    let out_size = |s: usize, k: usize, i: usize| {
        (s + 2 * c.padding[i] - c.dilation[i] * (k - 1) - 1) / c.stride[i] + 1
    };
    let (oh, ow) = (out_size(h, kh, 0), out_size(wd, kw, 1));
    Arr::from_fn(&[n, o, oh, ow], |i| {
        let (b, oc, y, xx) = (i[0], i[1], i[2], i[3]);
        let g = oc / opg;
        let mut acc = 0.0;
        for cc in 0..cg {
            for ky in 0..kh {
                let Some(iy) = tap(y, ky, c.stride[0], c.padding[0], c.dilation[0], h) else {
                    continue;
                };
                for kx in 0..kw {
                    let Some(ix) = tap(xx, kx, c.stride[1], c.padding[1], c.dilation[1], wd) else {
                        continue;
                    };
                    acc += x.at(&[b, g * cg + cc, iy, ix]) * w.at(&[oc, cc, ky, kx]);
                }
            }
        }
        acc
    })
}

/// Transposed convolution (the scatter form) with a (C, O/groups, kh, kw) weight.
pub fn conv_transpose2d(x: &Arr, w: &Arr, c: Conv, output_padding: [usize; 2]) -> Arr {
    let [n, ci, h, wd] = dims4(x);
    let [cw, opg, kh, kw] = dims4(w);
    assert_eq!(cw, ci);
    let cpg = ci / c.groups;
    let size = |s: usize, k: usize, i: usize| {
        (s - 1) * c.stride[i] + c.dilation[i] * (k - 1) + 1 + output_padding[i] - 2 * c.padding[i]
    };
    let (oh, ow) = (size(h, kh, 0), size(wd, kw, 1));
    let mut out = Arr::full(&[n, opg * c.groups, oh, ow], 0.0);
    for b in 0..n {
        for cc in 0..ci {
            let g = cc / cpg;
            for iy in 0..h {
                for ix in 0..wd {
                    let v = x.at(&[b, cc, iy, ix]);
                    for oj in 0..opg {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let y = (iy * c.stride[0] + ky * c.dilation[0]) as isize
                                    - c.padding[0] as isize;
                                let xx = (ix * c.stride[1] + kx * c.dilation[1]) as isize
                                    - c.padding[1] as isize;
                                if y < 0 || xx < 0 || y as usize >= oh || xx as usize >= ow {
                                    continue;
                                }
                                let dst = [b, g * opg + oj, y as usize, xx as usize];
                                let p = ravel(&dst, &out.shape);
                                out.data[p] += v * w.at(&[cc, oj, ky, kx]);
                            }
                        }
                    }
                }
            }
        }
    }
    out
}

/// Gradient of conv2d with respect to its weight.
pub fn conv2d_backward_weight(x: &Arr, gy: &Arr, c: Conv, kernel: [usize; 2]) -> Arr {
    let [n, ci, h, wd] = dims4(x);
    let [_, o, oh, ow] = dims4(gy);
    let (cpg, opg) = (ci / c.groups, o / c.groups);
    Arr::from_fn(&[o, cpg, kernel[0], kernel[1]], |i| {
        let (oc, cc, ky, kx) = (i[0], i[1], i[2], i[3]);
        let g = oc / opg;
        let mut acc = 0.0;
        for b in 0..n {
            for y in 0..oh {
                let Some(iy) = tap(y, ky, c.stride[0], c.padding[0], c.dilation[0], h) else {
                    continue;
                };
                for xx in 0..ow {
                    let Some(ix) = tap(xx, kx, c.stride[1], c.padding[1], c.dilation[1], wd) else {
                        continue;
                    };
                    acc += gy.at(&[b, oc, y, xx]) * x.at(&[b, g * cpg + cc, iy, ix]);
                }
            }
        }
        acc
    })
}

/// Pool parameters in the reference's own terms.
#[derive(Clone, Copy, Debug)]
pub struct Pool {
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub count_include_pad: bool,
}

impl Pool {
    fn out(&self, h: usize, w: usize) -> (usize, usize) {
        let o = |s: usize, i: usize| {
            (s + 2 * self.padding[i] - self.dilation[i] * (self.kernel[i] - 1) - 1) / self.stride[i]
                + 1
        };
        (o(h, 0), o(w, 1))
    }
    /// Input positions of the window of output (y, x), in row-major tap order.
    fn window(&self, y: usize, x: usize, h: usize, w: usize) -> Vec<(usize, usize)> {
        let mut v = Vec::new();
        for ky in 0..self.kernel[0] {
            for kx in 0..self.kernel[1] {
                let iy = tap(y, ky, self.stride[0], self.padding[0], self.dilation[0], h);
                let ix = tap(x, kx, self.stride[1], self.padding[1], self.dilation[1], w);
                if let (Some(iy), Some(ix)) = (iy, ix) {
                    v.push((iy, ix));
                }
            }
        }
        v
    }
    fn divisor(&self, taps: usize) -> f64 {
        if self.count_include_pad {
            (self.kernel[0] * self.kernel[1]) as f64
        } else {
            taps as f64
        }
    }
}

pub fn max_pool2d(x: &Arr, p: Pool) -> Arr {
    let [n, c, h, w] = dims4(x);
    let (oh, ow) = p.out(h, w);
    Arr::from_fn(&[n, c, oh, ow], |i| {
        p.window(i[2], i[3], h, w)
            .iter()
            .map(|&(iy, ix)| x.at(&[i[0], i[1], iy, ix]))
            .fold(f64::NEG_INFINITY, max_nan)
    })
}

/// Each output gradient goes to the first maximum of its window.
pub fn max_pool2d_backward(x: &Arr, gy: &Arr, p: Pool) -> Arr {
    let [n, c, h, w] = dims4(x);
    let (oh, ow) = p.out(h, w);
    let mut gx = Arr::full(&x.shape, 0.0);
    for b in 0..n {
        for ch in 0..c {
            for y in 0..oh {
                for xx in 0..ow {
                    let win = p.window(y, xx, h, w);
                    let mut best = win[0];
                    for &(iy, ix) in &win {
                        if x.at(&[b, ch, iy, ix]) > x.at(&[b, ch, best.0, best.1]) {
                            best = (iy, ix);
                        }
                    }
                    let q = ravel(&[b, ch, best.0, best.1], &gx.shape);
                    gx.data[q] += gy.at(&[b, ch, y, xx]);
                }
            }
        }
    }
    gx
}

pub fn avg_pool2d(x: &Arr, p: Pool) -> Arr {
    let [n, c, h, w] = dims4(x);
    let (oh, ow) = p.out(h, w);
    Arr::from_fn(&[n, c, oh, ow], |i| {
        let win = p.window(i[2], i[3], h, w);
        let s: f64 = win
            .iter()
            .map(|&(iy, ix)| x.at(&[i[0], i[1], iy, ix]))
            .sum();
        s / p.divisor(win.len())
    })
}

pub fn avg_pool2d_backward(gy: &Arr, p: Pool, input: [usize; 4]) -> Arr {
    let [n, c, h, w] = input;
    let (oh, ow) = p.out(h, w);
    let mut gx = Arr::full(&input, 0.0);
    for b in 0..n {
        for ch in 0..c {
            for y in 0..oh {
                for xx in 0..ow {
                    let win = p.window(y, xx, h, w);
                    let g = gy.at(&[b, ch, y, xx]) / p.divisor(win.len());
                    for (iy, ix) in win {
                        let q = ravel(&[b, ch, iy, ix], &gx.shape);
                        gx.data[q] += g;
                    }
                }
            }
        }
    }
    gx
}

/// PyTorch's adaptive window along one axis: `floor(i*in/out) .. ceil((i+1)*in/out)`.
pub fn adaptive_window(i: usize, input: usize, output: usize) -> std::ops::Range<usize> {
    (i * input / output)..((i + 1) * input).div_ceil(output)
}

pub fn adaptive_avg_pool2d(x: &Arr, out: [usize; 2]) -> Arr {
    let [n, c, h, w] = dims4(x);
    Arr::from_fn(&[n, c, out[0], out[1]], |i| {
        let (ry, rx) = (
            adaptive_window(i[2], h, out[0]),
            adaptive_window(i[3], w, out[1]),
        );
        let cnt = (ry.len() * rx.len()) as f64;
        let mut s = 0.0;
        for iy in ry {
            for ix in rx.clone() {
                s += x.at(&[i[0], i[1], iy, ix]);
            }
        }
        s / cnt
    })
}

pub fn adaptive_avg_pool2d_backward(gy: &Arr, input: [usize; 4]) -> Arr {
    let [n, c, h, w] = input;
    let [_, _, oh, ow] = dims4(gy);
    let mut gx = Arr::full(&input, 0.0);
    for b in 0..n {
        for ch in 0..c {
            for y in 0..oh {
                for xx in 0..ow {
                    let (ry, rx) = (adaptive_window(y, h, oh), adaptive_window(xx, w, ow));
                    let g = gy.at(&[b, ch, y, xx]) / (ry.len() * rx.len()) as f64;
                    for iy in ry {
                        for ix in rx.clone() {
                            let q = ravel(&[b, ch, iy, ix], &gx.shape);
                            gx.data[q] += g;
                        }
                    }
                }
            }
        }
    }
    gx
}
