//! Optimizers against naive f64 reference updates, state save/restore, schedules, clipping and
//! checkpoints.

use kiln_core::autodiff::Gradients;
use kiln_core::model::{load_checkpoint, save_checkpoint};
use kiln_core::nn::{Module, Param};
use kiln_core::optim::{
    Adam, Constant, Cosine, Optimizer, Schedule, Sgd, StepDecay, Warmup, clip_coefficient,
    clip_grad_norm,
};
use kiln_core::{Device, Tensor};
use std::collections::BTreeMap;

fn dev() -> Device {
    Device::cpu()
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_data().unwrap().to_f64_vec()
}

#[derive(Module)]
struct Two {
    a: Param,
    b: Param,
    stats: Param,
}

const A0: [f64; 5] = [0.5, -1.25, 2.0, 0.03, -0.7];
const B0: [f64; 3] = [1.5, -0.2, 0.9];
const CA: [f64; 5] = [0.3, -0.1, 0.8, -2.0, 0.05];
const CB: [f64; 3] = [-1.0, 0.4, 0.25];

fn model() -> Two {
    let t = |v: &[f64]| Tensor::from_slice(v, [v.len()], &dev()).unwrap();
    Two {
        a: Param::new(t(&A0)),
        b: Param::new(t(&B0)),
        stats: Param::buffer(t(&[1.0, 2.0])),
    }
}

/// loss = sum(c * w) + sum(w^3) / 3, so grad = c + w^2 (changes every step).
fn grads(m: &Two) -> Gradients {
    let part = |p: &Param, c: &[f64]| {
        let w = p.tensor();
        let c = Tensor::from_slice(c, [c.len()], &dev()).unwrap();
        w.mul(&c)
            .unwrap()
            .sum_all()
            .unwrap()
            .add(
                &w.powf(3.0)
                    .unwrap()
                    .sum_all()
                    .unwrap()
                    .div_scalar(3.0)
                    .unwrap(),
            )
            .unwrap()
    };
    part(&m.a, &CA)
        .add(&part(&m.b, &CB))
        .unwrap()
        .backward()
        .unwrap()
}

fn naive_grad(w: &[f64], c: &[f64]) -> Vec<f64> {
    w.iter().zip(c).map(|(w, c)| c + w * w).collect()
}

/// Runs `steps` optimizer steps and the naive reference `update(w, g, state, t)` side by side.
fn compare(
    mut opt: impl Optimizer,
    steps: usize,
    mut update: impl FnMut(&mut [f64], &[f64], &mut Vec<Vec<f64>>, usize),
) {
    let mut m = model();
    let (mut a, mut b) = (A0.to_vec(), B0.to_vec());
    let (mut sa, mut sb) = (vec![], vec![]);
    for t in 1..=steps {
        let g = grads(&m);
        opt.step(&mut m, &g).unwrap();
        let (ga, gb) = (naive_grad(&a, &CA), naive_grad(&b, &CB));
        update(&mut a, &ga, &mut sa, t);
        update(&mut b, &gb, &mut sb, t);
        for (got, want) in [(vals(&m.a.tensor()), &a), (vals(&m.b.tensor()), &b)] {
            for (x, y) in got.iter().zip(want.iter()) {
                assert!((x - y).abs() < 1e-12, "step {t}: {got:?} vs {want:?}");
            }
        }
    }
    assert_eq!(
        vals(&m.stats.tensor()),
        vec![1.0, 2.0],
        "buffers are not optimized"
    );
}

#[test]
fn sgd_plain_momentum_nesterov_weight_decay() {
    let (lr, mu, wd) = (0.1, 0.9, 0.01);
    compare(Sgd::new(lr), 4, |w, g, _, _| {
        for (w, g) in w.iter_mut().zip(g) {
            *w -= lr * g;
        }
    });
    for nesterov in [false, true] {
        compare(
            Sgd::new(lr).momentum(mu, nesterov).weight_decay(wd),
            4,
            |w, g, s, t| {
                let g: Vec<f64> = g.iter().zip(w.iter()).map(|(g, w)| g + wd * w).collect();
                if t == 1 {
                    *s = vec![g.clone()];
                } else {
                    s[0] = s[0].iter().zip(&g).map(|(b, g)| mu * b + g).collect();
                }
                for i in 0..w.len() {
                    let d = if nesterov {
                        g[i] + mu * s[0][i]
                    } else {
                        s[0][i]
                    };
                    w[i] -= lr * d;
                }
            },
        );
    }
}

fn adam_ref(
    lr: f64,
    wd: f64,
    decoupled: bool,
) -> impl FnMut(&mut [f64], &[f64], &mut Vec<Vec<f64>>, usize) {
    let (b1, b2, eps) = (0.9, 0.999, 1e-8);
    move |w, g, s, t| {
        if s.is_empty() {
            *s = vec![vec![0.0; w.len()], vec![0.0; w.len()]];
        }
        for i in 0..w.len() {
            let mut gi = g[i];
            if decoupled {
                w[i] *= 1.0 - lr * wd;
            } else {
                gi += wd * w[i];
            }
            s[0][i] = b1 * s[0][i] + (1.0 - b1) * gi;
            s[1][i] = b2 * s[1][i] + (1.0 - b2) * gi * gi;
            let mhat = s[0][i] / (1.0 - b1.powi(t as i32));
            let vhat = s[1][i] / (1.0 - b2.powi(t as i32));
            w[i] -= lr * mhat / (vhat.sqrt() + eps);
        }
    }
}

#[test]
fn adam_and_adamw_match_pytorch_rules() {
    compare(Adam::new(0.05), 5, adam_ref(0.05, 0.0, false));
    compare(
        Adam::new(0.05).weight_decay(0.1),
        5,
        adam_ref(0.05, 0.1, false),
    );
    compare(Adam::adamw(0.05, 0.1), 5, adam_ref(0.05, 0.1, true));
}

#[test]
fn state_round_trip_resumes_exactly() {
    for make in [
        || Box::new(Adam::new(0.05)) as Box<dyn Optimizer>,
        || Box::new(Adam::adamw(0.02, 0.1)) as Box<dyn Optimizer>,
        || Box::new(Sgd::new(0.05).momentum(0.9, true)) as Box<dyn Optimizer>,
    ] {
        let mut straight = model();
        let mut opt = make();
        for _ in 0..4 {
            let g = grads(&straight);
            opt.step(&mut straight, &g).unwrap();
        }
        let mut resumed = model();
        let mut first = make();
        for _ in 0..2 {
            let g = grads(&resumed);
            first.step(&mut resumed, &g).unwrap();
        }
        // Through a checkpoint file: model + optimizer state in one safetensors file.
        let meta = BTreeMap::from([("epoch".to_string(), "2".to_string())]);
        let bytes = save_checkpoint(&resumed, Some(&*first), &meta).unwrap();
        let mut fresh = model();
        let mut second = make();
        let back = load_checkpoint(&bytes, &mut fresh, Some(&mut *second), &dev()).unwrap();
        assert_eq!(back["epoch"], "2");
        for _ in 0..2 {
            let g = grads(&fresh);
            second.step(&mut fresh, &g).unwrap();
        }
        assert_eq!(vals(&fresh.a.tensor()), vals(&straight.a.tensor()));
        assert_eq!(vals(&fresh.b.tensor()), vals(&straight.b.tensor()));
    }
    // A state of another kind is refused with a clear message.
    let mut sgd = Sgd::new(0.1);
    let err = sgd.load_state(&Adam::new(0.1).state()).unwrap_err();
    assert!(err.to_string().contains("sgd"), "{err}");
    let mut m = model();
    let bytes = save_checkpoint(&m, None, &BTreeMap::new()).unwrap();
    let mut adam = Adam::new(0.1);
    let err = load_checkpoint(&bytes, &mut m, Some(&mut adam), &dev()).unwrap_err();
    assert!(err.to_string().contains("no optimizer state"), "{err}");
}

#[test]
fn clip_grad_norm_scales_to_max_norm() {
    let m = model();
    let mut g = grads(&m);
    let ga = naive_grad(&A0, &CA);
    let gb = naive_grad(&B0, &CB);
    let norm: f64 = ga.iter().chain(&gb).map(|v| v * v).sum::<f64>().sqrt();
    let total = clip_grad_norm(&m, &mut g, 1.0)
        .unwrap()
        .to_scalar()
        .unwrap();
    assert!((total - norm).abs() < 1e-5 * norm, "{total} vs {norm}");
    let scale = 1.0 / (norm + 1e-6);
    let got_a = vals(g.get(&m.a.tensor()).unwrap());
    for (x, y) in got_a.iter().zip(&ga) {
        assert!((x - y * scale).abs() < 1e-6);
    }
    // Under the limit nothing changes.
    let mut g = grads(&m);
    clip_grad_norm(&m, &mut g, norm * 2.0).unwrap();
    let got_b = vals(g.get(&m.b.tensor()).unwrap());
    for (x, y) in got_b.iter().zip(&gb) {
        assert!((x - y).abs() < 1e-12);
    }
    assert!(clip_grad_norm(&m, &mut g, 0.0).is_err());
}

/// Clipping's coefficient folded into Adam's step (`step_scaled`) updates exactly as clipping the
/// gradients first, for AdamW and Adam, clipped or not; so does SGD's default `step_scaled`.
#[test]
fn step_scaled_matches_clipping_then_stepping() {
    type Make = fn() -> Box<dyn Optimizer>;
    let makes: [Make; 3] = [
        || Box::new(Adam::adamw(0.05, 0.1)),
        || Box::new(Adam::new(0.05).weight_decay(0.01)),
        || Box::new(Sgd::new(0.1)),
    ];
    for make in makes {
        for max in [0.5, 100.0] {
            let (mut clipped, mut folded) = (model(), model());
            let (mut a, mut b) = (make(), make());
            for _ in 0..3 {
                let mut g = grads(&clipped);
                clip_grad_norm(&clipped, &mut g, max).unwrap();
                a.step(&mut clipped, &g).unwrap();
                let g = grads(&folded);
                let (_, coef) = clip_coefficient(&folded, &g, max).unwrap();
                b.step_scaled(&mut folded, &g, &coef).unwrap();
            }
            for (x, y) in [(&clipped.a, &folded.a), (&clipped.b, &folded.b)] {
                let (x, y) = (vals(&x.tensor()), vals(&y.tensor()));
                assert!(
                    x.iter().zip(&y).all(|(p, q)| (p - q).abs() <= 1e-12),
                    "{x:?} {y:?}"
                );
                assert_ne!(x, vals(&model().a.tensor()));
            }
        }
    }
}

#[test]
fn schedules_follow_their_formulas() {
    let s = StepDecay::new(0.1, 3, 0.5);
    assert_eq!(
        [0, 2, 3, 6, 7].map(|i| s.lr(i)),
        [0.1, 0.1, 0.05, 0.025, 0.025]
    );
    let c = Cosine::new(1.0, 0.1, 10);
    assert!((c.lr(0) - 1.0).abs() < 1e-12);
    assert!((c.lr(5) - 0.55).abs() < 1e-12);
    assert!((c.lr(10) - 0.1).abs() < 1e-12 && (c.lr(50) - 0.1).abs() < 1e-12);
    let w = Warmup::new(4, StepDecay::new(0.2, 2, 0.1));
    let lrs: Vec<f64> = (0..8).map(|i| w.lr(i)).collect();
    let want = [0.05, 0.1, 0.15, 0.2, 0.2, 0.2, 0.02, 0.02];
    for (a, b) in lrs.iter().zip(want) {
        assert!((a - b).abs() < 1e-12, "{lrs:?}");
    }
    assert_eq!(Constant(0.3).lr(1000), 0.3);
    let mut opt = Sgd::new(1.0);
    opt.set_lr(w.lr(0));
    assert_eq!(opt.lr(), 0.05);
}
