//! Recurrent ONNX ops (RNN, GRU, LSTM). The time loop is unrolled on the host: the input
//! projection of every step is one matmul, and each step adds the recurrent matmul and the gate
//! activations on the device.

use super::{Ctx, OpFn, Outputs, host_values, shape::mask_tensor};
use crate::NodeAttrs;
use crate::model::onnx_err;
use crate::value::Value;
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use kiln_core::{Result, Tensor};

pub(super) const OPS: &[(&str, OpFn)] = &[
    ("RNN", |c, a| recurrent(c, a, Cell::Rnn)),
    ("GRU", |c, a| recurrent(c, a, Cell::Gru)),
    ("LSTM", |c, a| recurrent(c, a, Cell::Lstm)),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cell {
    Rnn,
    Gru,
    Lstm,
}

impl Cell {
    /// Gates stacked in W, R and B.
    fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }

    /// The activations of one direction when the node names none (f, g, h in the spec).
    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru => &["Sigmoid", "Tanh"],
            Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// One entry of the `activations` attribute with its alpha and beta.
struct Act {
    name: String,
    alpha: f64,
    beta: f64,
}

/// The activations of every direction. `activation_alpha` / `activation_beta` are consumed in
/// order by the activations that take them; the others keep their ONNX defaults.
fn activations(c: &Ctx<'_>, cell: Cell, dirs: usize) -> Result<Vec<Act>> {
    let per = cell.default_activations();
    let names: Vec<String> = match c.node.attr_strings("activations").map_err(onnx_err)? {
        Some(v) => v.into_iter().map(String::from).collect(),
        None => (0..dirs)
            .flat_map(|_| per.iter().map(|s| String::from(*s)))
            .collect(),
    };
    if names.len() != per.len() * dirs {
        return Err(c.unsupported(format!(
            "activations {names:?}: expects {} names ({} per direction), found {}",
            per.len() * dirs,
            per.len(),
            names.len()
        )));
    }
    let alphas = c.floats_attr("activation_alpha")?.unwrap_or_default();
    let betas = c.floats_attr("activation_beta")?.unwrap_or_default();
    let (mut ai, mut bi) = (alphas.iter(), betas.iter());
    names
        .into_iter()
        .map(|name| {
            // (default alpha, default beta, takes alpha, takes beta)
            let (da, db, ta, tb) = match name.to_ascii_lowercase().as_str() {
                "relu" | "tanh" | "sigmoid" | "softsign" | "softplus" => (0.0, 0.0, false, false),
                "affine" => (1.0, 0.0, true, true),
                "leakyrelu" => (0.01, 0.0, true, false),
                "thresholdedrelu" => (1.0, 0.0, true, false),
                "scaledtanh" => (1.0, 1.0, true, true),
                "hardsigmoid" => (0.2, 0.5, true, true),
                "elu" => (1.0, 0.0, true, false),
                _ => return Err(c.unsupported(format!("activation {name}"))),
            };
            let alpha = if ta {
                ai.next().map_or(da, |&v| f64::from(v))
            } else {
                da
            };
            let beta = if tb {
                bi.next().map_or(db, |&v| f64::from(v))
            } else {
                db
            };
            Ok(Act { name, alpha, beta })
        })
        .collect()
}

/// `act` applied to `x` (names checked by [`activations`]).
fn activate(act: &Act, x: &Tensor) -> Result<Tensor> {
    let (a, b) = (act.alpha, act.beta);
    let zero = x.scalar_like(0.0)?;
    match act.name.to_ascii_lowercase().as_str() {
        "relu" => x.relu(),
        "tanh" => x.tanh(),
        "sigmoid" => x.sigmoid(),
        "softsign" => x.div(&x.abs()?.add_scalar(1.0)?),
        "softplus" => super::elementwise::softplus(x),
        "affine" => x.mul_scalar(a)?.add_scalar(b),
        "leakyrelu" => x.lt(&zero)?.where_cond(&x.mul_scalar(a)?, x),
        "thresholdedrelu" => x.gt(&x.scalar_like(a)?)?.where_cond(x, &zero),
        "scaledtanh" => x.mul_scalar(b)?.tanh()?.mul_scalar(a),
        "hardsigmoid" => x.mul_scalar(a)?.add_scalar(b)?.clamp(0.0, 1.0),
        _ => x
            .lt(&zero)?
            .where_cond(&x.exp()?.sub_scalar(1.0)?.mul_scalar(a)?, x),
    }
}

/// The settings shared by every step.
struct Setup<'a> {
    cell: Cell,
    hidden: usize,
    clip: Option<f64>,
    input_forget: bool,
    linear_before_reset: bool,
    /// The activations of this direction.
    acts: &'a [Act],
}

impl Setup<'_> {
    /// `acts[i]` of the cell, its input clipped to `[-clip, clip]` first.
    fn act(&self, i: usize, x: &Tensor) -> Result<Tensor> {
        let x = match self.clip {
            Some(t) => x.clamp(-t, t)?,
            None => x.clone(),
        };
        activate(&self.acts[i], &x)
    }

    /// Gate `g` (of width `hidden`) of a stacked `[batch, gates * hidden]` tensor.
    fn gate(&self, t: &Tensor, g: usize) -> Result<Tensor> {
        t.narrow(1, g * self.hidden, self.hidden)
    }
}

/// One direction's weights.
struct Weights {
    /// R transposed: `[hidden, gates * hidden]`.
    rt: Tensor,
    /// R's bias, `[gates * hidden]`, added to the recurrent product (GRU's linear_before_reset
    /// needs it there for the hidden gate).
    rb: Option<Tensor>,
    /// Peepholes (LSTM): i, o, f, each `[hidden]`.
    peep: Option<[Tensor; 3]>,
}

/// One step: the input projection `xt` (`[batch, gates * hidden]`, W's bias included) and the
/// state `(h, c)` give the new state.
fn step(
    s: &Setup<'_>,
    w: &Weights,
    xt: &Tensor,
    h: &Tensor,
    c: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let mut hr = h.matmul(&w.rt)?;
    if let Some(rb) = &w.rb {
        hr = hr.add(rb)?;
    }
    match s.cell {
        Cell::Rnn => Ok((s.act(0, &xt.add(&hr)?)?, c.clone())),
        Cell::Gru => {
            let z = s.act(0, &s.gate(xt, 0)?.add(&s.gate(&hr, 0)?)?)?;
            let r = s.act(0, &s.gate(xt, 1)?.add(&s.gate(&hr, 1)?)?)?;
            let rec = if s.linear_before_reset {
                r.mul(&s.gate(&hr, 2)?)?
            } else {
                let rh = w.rt.narrow(1, 2 * s.hidden, s.hidden)?;
                let mut v = r.mul(h)?.matmul(&rh)?;
                if let Some(rb) = &w.rb {
                    v = v.add(&rb.narrow(0, 2 * s.hidden, s.hidden)?)?;
                }
                v
            };
            let cand = s.act(1, &s.gate(xt, 2)?.add(&rec)?)?;
            // (1 - z) * cand + z * h
            Ok((cand.add(&z.mul(&h.sub(&cand)?)?)?, c.clone()))
        }
        Cell::Lstm => {
            let g = xt.add(&hr)?;
            let peep = |k: usize, state: &Tensor, pre: Tensor| match &w.peep {
                Some(p) => pre.add(&p[k].mul(state)?),
                None => Ok(pre),
            };
            let i = s.act(0, &peep(0, c, s.gate(&g, 0)?)?)?;
            let f = if s.input_forget {
                i.neg()?.add_scalar(1.0)?
            } else {
                s.act(0, &peep(2, c, s.gate(&g, 2)?)?)?
            };
            let cand = s.act(1, &s.gate(&g, 3)?)?;
            let c_new = f.mul(c)?.add(&i.mul(&cand)?)?;
            let o = s.act(0, &peep(1, &c_new, s.gate(&g, 1)?)?)?;
            let h_new = o.mul(&activate(&s.acts[2], &c_new)?)?;
            Ok((h_new, c_new))
        }
    }
}

/// Direction `d` of a stacked `[dirs, ...]` input.
fn dir(t: &Tensor, d: usize) -> Result<Tensor> {
    t.narrow(0, d, 1)?.squeeze(0)
}

/// Optional input `i` as a tensor whose dimensions must be `dims`.
fn checked(
    c: &Ctx<'_>,
    a: &[Value],
    i: usize,
    what: &str,
    dims: &[usize],
) -> Result<Option<Tensor>> {
    let Some(v) = c.optional(a, i) else {
        return Ok(None);
    };
    let t = v.tensor(c.device, what)?;
    if t.dims() != dims {
        return Err(c.unsupported(format!(
            "{what}: expects shape {dims:?}, found {:?}",
            t.dims()
        )));
    }
    Ok(Some(t))
}

/// RNN, GRU and LSTM: `Y` (`[seq, dirs, batch, hidden]`), `Y_h` and (LSTM) `Y_c`
/// (`[dirs, batch, hidden]`), batch-first under `layout = 1`. Steps past a batch entry's
/// `sequence_lens` leave its state alone and output zeros. `clip` bounds the gate inputs.
fn recurrent(c: &Ctx<'_>, a: &[Value], cell: Cell) -> Outputs {
    let x = c.tensor(a, 0)?;
    let (w, r) = (c.tensor(a, 1)?, c.tensor(a, 2)?);
    let layout = c.int("layout", 0)?;
    if !(layout == 0 || layout == 1) {
        return Err(c.unsupported(format!("layout {layout} (0 or 1 are)")));
    }
    if x.rank() != 3 || w.rank() != 3 || r.rank() != 3 {
        return Err(c.unsupported(format!(
            "X, W and R of rank 3, found {}, {} and {}",
            x.shape(),
            w.shape(),
            r.shape()
        )));
    }
    let batch_first = layout == 1;
    let x = if batch_first { x.transpose(0, 1)? } else { x };
    let (steps, batch, input) = (x.dims()[0], x.dims()[1], x.dims()[2]);
    let reverse: &[bool] = match c.string("direction", "forward")?.as_str() {
        "forward" => &[false],
        "reverse" => &[true],
        "bidirectional" => &[false, true],
        other => return Err(c.unsupported(format!("direction {other}"))),
    };
    let nd = reverse.len();
    let hidden = r.dims()[2];
    let hs = c.int("hidden_size", hidden as i64)?;
    let gh = cell.gates() * hidden;
    if hs != hidden as i64 || w.dims() != [nd, gh, input] || r.dims() != [nd, gh, hidden] {
        return Err(c.unsupported(format!(
            "W {} and R {} for hidden_size {hs}, {nd} direction(s), input size {input}",
            w.shape(),
            r.shape()
        )));
    }
    let b = checked(c, a, 3, "B", &[nd, 2 * gh])?;
    let lens = match c.optional(a, 4) {
        Some(v) => {
            let l = host_values(v, "sequence_lens")?;
            if l.len() != batch || l.iter().any(|&n| n < 0.0 || n > steps as f64) {
                return Err(c.unsupported(format!(
                    "sequence_lens {l:?}: expects {batch} lengths in 0..={steps}"
                )));
            }
            // only needed where some sequence is shorter than the input
            l.iter()
                .any(|&n| (n as usize) < steps)
                .then(|| l.iter().map(|&n| n as usize).collect::<Vec<_>>())
        }
        None => None,
    };
    let state_dims = if batch_first {
        [batch, nd, hidden]
    } else {
        [nd, batch, hidden]
    };
    let initial = |i: usize, what: &str| -> Result<Option<Tensor>> {
        let t = checked(c, a, i, what, &state_dims)?;
        t.map(|t| {
            if batch_first {
                t.transpose(0, 1)
            } else {
                Ok(t)
            }
        })
        .transpose()
    };
    let h0 = initial(5, "initial_h")?;
    let c0 = if cell == Cell::Lstm {
        initial(6, "initial_c")?
    } else {
        None
    };
    let p = if cell == Cell::Lstm {
        checked(c, a, 7, "P", &[nd, 3 * hidden])?
    } else {
        None
    };
    let acts = activations(c, cell, nd)?;
    let per = cell.default_activations().len();
    let clip = c.node.attr_float("clip").map_err(onnx_err)?.map(f64::from);
    let zeros = Tensor::zeros([batch, hidden], x.dtype(), c.device)?;
    // per step, which batch entries are still inside their sequence
    let valid = match &lens {
        Some(l) => (0..steps)
            .map(|t| {
                let m: Vec<bool> = l.iter().map(|&n| t < n).collect();
                mask_tensor(c, vec![batch, 1], &m)
            })
            .collect::<Result<Vec<_>>>()?,
        None => Vec::new(),
    };
    let (mut ys, mut hs_out, mut cs_out) = (Vec::new(), Vec::new(), Vec::new());
    for (d, &rev) in reverse.iter().enumerate() {
        let setup = Setup {
            cell,
            hidden,
            clip,
            input_forget: c.int("input_forget", 0)? != 0,
            linear_before_reset: c.int("linear_before_reset", 0)? != 0,
            acts: &acts[d * per..(d + 1) * per],
        };
        // every step's input projection at once: [steps, batch, gates * hidden]
        let mut xw = x.matmul(&dir(&w, d)?.t()?)?;
        let mut rb = None;
        if let Some(b) = &b {
            let bd = dir(b, d)?;
            xw = xw.add(&bd.narrow(0, 0, gh)?)?;
            rb = Some(bd.narrow(0, gh, gh)?);
        }
        let peep = match &p {
            Some(p) => {
                let pd = dir(p, d)?;
                Some([
                    pd.narrow(0, 0, hidden)?,
                    pd.narrow(0, hidden, hidden)?,
                    pd.narrow(0, 2 * hidden, hidden)?,
                ])
            }
            None => None,
        };
        let weights = Weights {
            rt: dir(&r, d)?.t()?,
            rb,
            peep,
        };
        let mut h = h0.as_ref().map_or(Ok(zeros.clone()), |t| dir(t, d))?;
        let mut cs = c0.as_ref().map_or(Ok(zeros.clone()), |t| dir(t, d))?;
        let mut out: Vec<Option<Tensor>> = vec![None; steps];
        for k in 0..steps {
            let t = if rev { steps - 1 - k } else { k };
            let xt = xw.narrow(0, t, 1)?.squeeze(0)?;
            let (h_new, c_new) = step(&setup, &weights, &xt, &h, &cs)?;
            match valid.get(t) {
                Some(m) => {
                    h = m.where_cond(&h_new, &h)?;
                    cs = m.where_cond(&c_new, &cs)?;
                    out[t] = Some(m.where_cond(&h_new, &zeros)?);
                }
                None => {
                    h = h_new;
                    cs = c_new;
                    out[t] = Some(h.clone());
                }
            }
        }
        let out: Vec<Tensor> = out.into_iter().flatten().collect();
        ys.push(if out.is_empty() {
            Tensor::zeros([0, batch, hidden], x.dtype(), c.device)?
        } else {
            Tensor::stack(&out, 0)?
        });
        hs_out.push(h);
        cs_out.push(cs);
    }
    // Y: [steps, dirs, batch, hidden]; Y_h, Y_c: [dirs, batch, hidden]
    let mut y = Tensor::stack(&ys, 1)?;
    let mut yh = Tensor::stack(&hs_out, 0)?;
    let mut yc = Tensor::stack(&cs_out, 0)?;
    if batch_first {
        y = y.permute(&[2, 0, 1, 3])?;
        yh = yh.transpose(0, 1)?;
        yc = yc.transpose(0, 1)?;
    }
    let mut outs = vec![Value::Tensor(y), Value::Tensor(yh)];
    if cell == Cell::Lstm {
        outs.push(Value::Tensor(yc));
    }
    Ok(outs)
}

#[cfg(test)]
mod tests {
    //! The attributes the suites leave out (directions, sequence lengths, layout,
    //! linear_before_reset, clip, input_forget, activations with alpha and beta): each against
    //! an equivalent simpler run, or against the spec's equations for one step.
    use super::super::testing::{A, close, fill, node, outputs, t};
    use super::*;
    use crate::proto::NodeProto;
    use crate::value::Ints;

    fn run(node: &NodeProto, args: &[Value]) -> Vec<Vec<f64>> {
        let f = OPS.iter().find(|(n, _)| *n == node.op_type()).unwrap().1;
        outputs(f, 22, node, args)
    }

    /// Rows `[t, d, ...]` of a `[steps, dirs, rest]` output for direction `d`.
    fn direction(y: &[f64], steps: usize, dirs: usize, rest: usize, d: usize) -> Vec<f64> {
        (0..steps)
            .flat_map(|t| y[(t * dirs + d) * rest..(t * dirs + d + 1) * rest].to_vec())
            .collect()
    }

    const CELLS: [(&str, usize); 3] = [("RNN", 1), ("GRU", 3), ("LSTM", 4)];

    #[test]
    fn bidirectional_is_forward_then_reverse_and_layout_transposes() {
        let (steps, batch, input, hidden) = (3, 2, 2, 3);
        for (op, g) in CELLS {
            let x = fill(steps * batch * input, 1);
            let w = fill(2 * g * hidden * input, 2);
            let r = fill(2 * g * hidden * hidden, 3);
            let b = fill(2 * 2 * g * hidden, 4);
            let h0 = fill(2 * batch * hidden, 5);
            let half = |v: &[f64], d: usize| v[d * v.len() / 2..(d + 1) * v.len() / 2].to_vec();
            let args = |d: Option<usize>| {
                let n = if d.is_some() { 1 } else { 2 };
                let pick = |v: &[f64]| d.map_or(v.to_vec(), |d| half(v, d));
                vec![
                    t(&x, &[steps, batch, input]),
                    t(&pick(&w), &[n, g * hidden, input]),
                    t(&pick(&r), &[n, g * hidden, hidden]),
                    t(&pick(&b), &[n, 2 * g * hidden]),
                    Value::Absent,
                    t(&pick(&h0), &[n, batch, hidden]),
                ]
            };
            let hs = ("hidden_size", A::I(hidden as i64));
            let bi = run(
                &node(op, vec![hs, ("direction", A::S("bidirectional"))]),
                &args(None),
            );
            let hs = || ("hidden_size", A::I(hidden as i64));
            let fw = run(&node(op, vec![hs()]), &args(Some(0)));
            let rv = run(
                &node(op, vec![hs(), ("direction", A::S("reverse"))]),
                &args(Some(1)),
            );
            let rest = batch * hidden;
            close(&direction(&bi[0], steps, 2, rest, 0), &fw[0], op);
            close(&direction(&bi[0], steps, 2, rest, 1), &rv[0], op);
            close(&half(&bi[1], 0), &fw[1], op);
            close(&half(&bi[1], 1), &rv[1], op);
            // the reverse direction is the forward one on the time-reversed input
            let mut xr = Vec::new();
            for s in (0..steps).rev() {
                xr.extend_from_slice(&x[s * batch * input..(s + 1) * batch * input]);
            }
            let mut a = args(Some(1));
            a[0] = t(&xr, &[steps, batch, input]);
            let fr = run(&node(op, vec![hs()]), &a);
            for s in 0..steps {
                let back = steps - 1 - s;
                close(
                    &rv[0][s * rest..(s + 1) * rest],
                    &fr[0][back * rest..(back + 1) * rest],
                    op,
                );
            }
            // batch-first: X [batch, steps, input], states [batch, dirs, hidden]
            let swap = |v: &[f64], a: usize, b: usize, inner: usize| {
                let mut o = Vec::with_capacity(v.len());
                for j in 0..b {
                    for i in 0..a {
                        o.extend_from_slice(&v[(i * b + j) * inner..(i * b + j + 1) * inner]);
                    }
                }
                o
            };
            let mut a = args(None);
            a[0] = t(&swap(&x, steps, batch, input), &[batch, steps, input]);
            a[5] = t(&swap(&h0, 2, batch, hidden), &[batch, 2, hidden]);
            let bf = run(
                &node(
                    op,
                    vec![
                        hs(),
                        ("direction", A::S("bidirectional")),
                        ("layout", A::I(1)),
                    ],
                ),
                &a,
            );
            // Y [batch, steps, dirs, hidden] against [steps, dirs, batch, hidden]
            let mut y = Vec::new();
            for bi_ in 0..batch {
                for s in 0..steps {
                    for d in 0..2 {
                        let at = ((s * 2 + d) * batch + bi_) * hidden;
                        y.extend_from_slice(&bi[0][at..at + hidden]);
                    }
                }
            }
            close(&bf[0], &y, op);
            close(&bf[1], &swap(&bi[1], 2, batch, hidden), op);
        }
    }

    #[test]
    fn sequence_lens_stop_each_batch_entry() {
        let (steps, batch, input, hidden) = (3, 2, 2, 2);
        for (op, g) in CELLS {
            for dir in ["forward", "reverse"] {
                let x = fill(steps * batch * input, 7);
                let w = t(&fill(g * hidden * input, 8), &[1, g * hidden, input]);
                let r = t(&fill(g * hidden * hidden, 9), &[1, g * hidden, hidden]);
                let n = || {
                    node(
                        op,
                        vec![
                            ("hidden_size", A::I(hidden as i64)),
                            ("direction", A::S(dir)),
                        ],
                    )
                };
                let lens = Value::Ints(Ints::vector(vec![2, 3]));
                let full = run(
                    &n(),
                    &[
                        t(&x, &[steps, batch, input]),
                        w.clone(),
                        r.clone(),
                        Value::Absent,
                        lens,
                    ],
                );
                // entry 0 alone, cut to its length
                let x0: Vec<f64> = (0..2)
                    .flat_map(|s| x[(s * batch) * input..(s * batch + 1) * input].to_vec())
                    .collect();
                let alone = run(&n(), &[t(&x0, &[2, 1, input]), w.clone(), r.clone()]);
                let what = format!("{op} {dir}");
                close(&full[1][..hidden], &alone[1], &what);
                for s in 0..steps {
                    let at = s * batch * hidden;
                    let want = if s < 2 {
                        alone[0][s * hidden..(s + 1) * hidden].to_vec()
                    } else {
                        vec![0.0; hidden]
                    };
                    close(&full[0][at..at + hidden], &want, &what);
                }
            }
        }
    }

    fn sigmoid(v: f64) -> f64 {
        1.0 / (1.0 + (-v).exp())
    }

    #[test]
    fn one_step_equations() {
        let one = |v: f64| t(&[v], &[1, 1, 1]);
        let (x, h0, c0) = (0.7, -0.4, 0.3);
        // GRU: z, r, h gates
        let w = [0.5, -0.3, 0.8];
        let r = [0.2, 0.9, -0.6];
        let b = [0.1, -0.2, 0.3, -0.1, 0.05, 0.4];
        let z = sigmoid(x * w[0] + h0 * r[0] + b[0] + b[3]);
        let rg = sigmoid(x * w[1] + h0 * r[1] + b[1] + b[4]);
        for lbr in [0, 1] {
            let hh = if lbr == 0 {
                (x * w[2] + rg * h0 * r[2] + b[5] + b[2]).tanh()
            } else {
                (x * w[2] + rg * (h0 * r[2] + b[5]) + b[2]).tanh()
            };
            let want = (1.0 - z) * hh + z * h0;
            let got = run(
                &node(
                    "GRU",
                    vec![("hidden_size", A::I(1)), ("linear_before_reset", A::I(lbr))],
                ),
                &[
                    one(x),
                    t(&w, &[1, 3, 1]),
                    t(&r, &[1, 3, 1]),
                    t(&b, &[1, 6]),
                    Value::Absent,
                    one(h0),
                ],
            );
            close(&got[1], &[want], &format!("GRU linear_before_reset {lbr}"));
        }
        // LSTM: i, o, f, c gates; peepholes i, o, f; clip 0.5 and coupled input and forget
        let w = [0.5, -0.3, 0.8, 1.5];
        let r = [0.2, 0.9, -0.6, 0.7];
        let b = [0.1, -0.2, 0.3, 0.6, -0.1, 0.05, 0.4, 0.2];
        let p = [0.3, -0.5, 0.25];
        let clip = |v: f64| v.clamp(-0.5, 0.5);
        let pre = |k: usize| x * w[k] + h0 * r[k] + b[k] + b[4 + k];
        let i = sigmoid(clip(pre(0) + p[0] * c0));
        let f = 1.0 - i;
        let cc = clip(pre(3)).tanh();
        let c = f * c0 + i * cc;
        let o = sigmoid(clip(pre(1) + p[1] * c));
        let h = o * c.tanh();
        let got = run(
            &node(
                "LSTM",
                vec![
                    ("hidden_size", A::I(1)),
                    ("clip", A::F(0.5)),
                    ("input_forget", A::I(1)),
                ],
            ),
            &[
                one(x),
                t(&w, &[1, 4, 1]),
                t(&r, &[1, 4, 1]),
                t(&b, &[1, 8]),
                Value::Absent,
                one(h0),
                one(c0),
                t(&p, &[1, 3]),
            ],
        );
        close(&got[1], &[h], "LSTM h");
        close(&got[2], &[c], "LSTM c");
        // RNN activations with alpha and beta: Affine, then LeakyRelu in reverse
        let (w, r, b) = (0.5, -0.3, [0.1, -0.2]);
        let pre = x * w + h0 * r + b[0] + b[1];
        let got = run(
            &node(
                "RNN",
                vec![
                    ("hidden_size", A::I(1)),
                    ("direction", A::S("bidirectional")),
                    ("activations", A::Ss(vec!["Affine", "LeakyRelu"])),
                    ("activation_alpha", A::Fs(vec![2.0, 0.1])),
                    ("activation_beta", A::Fs(vec![1.0])),
                ],
            ),
            &[
                one(x),
                t(&[w, -w], &[2, 1, 1]),
                t(&[r, r], &[2, 1, 1]),
                t(&[b[0], b[1], b[0], b[1]], &[2, 2]),
                Value::Absent,
                t(&[h0, h0], &[2, 1, 1]),
            ],
        );
        let neg = -x * w + h0 * r + b[0] + b[1];
        let leaky = if neg < 0.0 { 0.1 * neg } else { neg };
        close(&got[1], &[2.0 * pre + 1.0, leaky], "RNN activations");
    }
}
