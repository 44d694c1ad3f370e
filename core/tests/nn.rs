//! nn modules: parameter naming, PyTorch initialisations, layer outputs against naive f64
//! references, train/eval behaviour, loading by name, and losses.

use kiln_core::nn::{
    AdaptiveAvgPool2d, AvgPool2d, BatchNorm2d, Conv2dConfig, Dropout, Embedding, Flatten, Forward,
    Init, LayerNorm, Linear, MaxPool2d, Module, Param, ReLU, Sequential, Softmax, loss,
};
mod common;

use common::{Arr, reference};
use kiln_core::{DType, Device, ErrorKind, Tensor};
use std::collections::BTreeMap;

fn dev() -> Device {
    Device::cpu()
}

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::rand_normal(shape, 0.0, 1.0, seed, DType::F64, &dev()).unwrap()
}

fn vals(t: &Tensor) -> Vec<f64> {
    t.to_data().unwrap().to_f64_vec()
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: got {g}, want {w}"
        );
    }
}

fn f64_init(seed: u64) -> Init {
    Init::new(&dev(), seed).with_dtype(DType::F64)
}

#[derive(Module)]
struct Block {
    conv: kiln_core::nn::Conv2d,
    norm: Option<BatchNorm2d>,
    #[module(skip)]
    _label: &'static str,
}

#[derive(Module)]
struct Net {
    stem: Block,
    blocks: Vec<Block>,
    head: Sequential,
    scale: Param,
}

#[derive(Module)]
struct Pair(Linear, Linear);

fn net() -> Net {
    let mut init = Init::new(&dev(), 3);
    let mut block = |bn: bool| Block {
        conv: Conv2dConfig::new(2, 2, 3)
            .padding(1)
            .build(&mut init)
            .unwrap(),
        norm: bn.then(|| BatchNorm2d::new(&mut init, 2).unwrap()),
        _label: "x",
    };
    let stem = block(true);
    let blocks = vec![block(false), block(true)];
    let head = Sequential::new()
        .with(Flatten::new())
        .with(ReLU)
        .with(Linear::new(&mut init, 2 * 5 * 5, 3).unwrap());
    let scale = Param::new(Tensor::ones([1], DType::F32, &dev()).unwrap());
    Net {
        stem,
        blocks,
        head,
        scale,
    }
}

#[test]
fn derive_names_follow_pytorch() {
    let n = net();
    let names: Vec<String> = n.named_tensors().into_iter().map(|(n, _)| n).collect();
    let bn = |p: &str| {
        [
            "weight",
            "bias",
            "running_mean",
            "running_var",
            "num_batches_tracked",
        ]
        .map(|s| format!("{p}.norm.{s}"))
    };
    let mut want = vec!["stem.conv.weight".to_string(), "stem.conv.bias".into()];
    want.extend(bn("stem"));
    want.extend(["blocks.0.conv.weight".into(), "blocks.0.conv.bias".into()]);
    want.extend(["blocks.1.conv.weight".into(), "blocks.1.conv.bias".into()]);
    want.extend(bn("blocks.1"));
    want.extend(["head.2.weight".into(), "head.2.bias".into(), "scale".into()]);
    assert_eq!(names, want);
    // Buffers are not trainable; parameters are.
    let trainable: Vec<String> = n.named_params().into_iter().map(|(n, _)| n).collect();
    assert!(!trainable.iter().any(|n| n.contains("running")));
    assert!(trainable.contains(&"stem.norm.weight".to_string()));
    assert_eq!(
        n.num_params(),
        3 * (2 * 2 * 9 + 2) + 2 * 2 * 2 + 50 * 3 + 3 + 1
    );

    let pair = Pair(
        Linear::new(&mut Init::new(&dev(), 0), 2, 3).unwrap(),
        Linear::with_bias(&mut Init::new(&dev(), 0), 3, 1, false).unwrap(),
    );
    let names: Vec<String> = pair.named_tensors().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["0.weight", "0.bias", "1.weight"]);
}

#[test]
fn init_is_seeded_and_follows_pytorch_bounds() {
    let a = Linear::new(&mut Init::new(&dev(), 11), 400, 300).unwrap();
    let b = Linear::new(&mut Init::new(&dev(), 11), 400, 300).unwrap();
    let c = Linear::new(&mut Init::new(&dev(), 12), 400, 300).unwrap();
    let (wa, wb, wc) = (
        vals(&a.weight.tensor()),
        vals(&b.weight.tensor()),
        vals(&c.weight.tensor()),
    );
    assert_eq!(wa, wb, "same seed, same weights");
    assert_ne!(wa, wc, "another seed, other weights");
    assert_ne!(
        wa[..300],
        vals(&a.bias.as_ref().unwrap().tensor())[..],
        "weight and bias differ"
    );
    // kaiming_uniform(a = sqrt 5) on fan_in 400: U(-0.05, 0.05), std 0.05 / sqrt 3.
    let bound = 1.0 / 20.0;
    assert!(wa.iter().all(|w| w.abs() <= bound));
    let mean = wa.iter().sum::<f64>() / wa.len() as f64;
    let std = (wa.iter().map(|w| (w - mean).powi(2)).sum::<f64>() / wa.len() as f64).sqrt();
    assert!(mean.abs() < 2e-3, "mean {mean}");
    assert!((std - bound / 3f64.sqrt()).abs() < 1e-3, "std {std}");
    let bias = vals(&a.bias.as_ref().unwrap().tensor());
    assert!(bias.iter().all(|v| v.abs() <= bound) && bias.iter().any(|v| v.abs() > bound / 2.0));

    // Conv fan_in = in/groups * kh * kw = 8/2 * 3 * 5 = 60.
    let conv = Conv2dConfig::new(8, 4, 3)
        .kernel([3, 5])
        .groups(2)
        .build(&mut Init::new(&dev(), 1))
        .unwrap();
    assert_eq!(conv.weight.tensor().dims(), &[4, 4, 3, 5]);
    let w = vals(&conv.weight.tensor());
    let b60 = 1.0 / 60f64.sqrt();
    assert!(w.iter().all(|v| v.abs() <= b60) && w.iter().any(|v| v.abs() > 0.8 * b60));
    assert_eq!(conv.weight.tensor().dtype(), DType::F32);
}

#[test]
fn linear_matches_naive_reference() {
    let fc = Linear::new(&mut f64_init(5), 7, 3).unwrap();
    let x = randn(&[2, 5, 7], 8); // extra leading axes broadcast
    let y = fc.forward(&x).unwrap();
    assert_eq!(y.dims(), &[2, 5, 3]);
    let (w, b, xv) = (
        vals(&fc.weight.tensor()),
        vals(&fc.bias.as_ref().unwrap().tensor()),
        vals(&x),
    );
    let mut want = vec![];
    for r in 0..10 {
        for o in 0..3 {
            want.push(b[o] + (0..7).map(|i| xv[r * 7 + i] * w[o * 7 + i]).sum::<f64>());
        }
    }
    assert_close(&vals(&y), &want, 1e-12, "linear");
    let err = fc.forward(&randn(&[4, 6], 1)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Shape);
    assert!(err.to_string().contains("7 features"), "{err}");
}

#[test]
fn conv2d_matches_naive_reference() {
    let conv = Conv2dConfig::new(4, 6, 3)
        .stride(2)
        .padding(1)
        .groups(2)
        .build(&mut f64_init(2))
        .unwrap();
    let x = randn(&[2, 4, 7, 6], 3);
    let y = conv.forward(&x).unwrap();
    let bias = vals(&conv.bias.as_ref().unwrap().tensor());
    let plain = reference::conv2d(
        &Arr::new(&[2, 4, 7, 6], vals(&x)),
        &Arr::new(&[6, 2, 3, 3], vals(&conv.weight.tensor())),
        reference::Conv {
            stride: [2, 2],
            padding: [1, 1],
            dilation: [1, 1],
            groups: 2,
        },
    );
    let want: Vec<f64> = plain
        .data
        .iter()
        .enumerate()
        .map(|(i, v)| v + bias[(i / (plain.shape[2] * plain.shape[3])) % 6])
        .collect();
    assert_eq!(y.dims(), &plain.shape[..]);
    assert_close(&vals(&y), &want, 1e-12, "conv2d");
    assert!(
        Conv2dConfig::new(3, 4, 3)
            .groups(2)
            .build(&mut f64_init(0))
            .is_err()
    );
    assert!(conv.forward(&randn(&[4, 7, 6], 1)).is_err());
}

#[test]
fn conv_transpose_is_the_adjoint_of_conv() {
    // <conv(x), y> == <x, conv_transpose(y)> for the same weight, without biases.
    let mut init = f64_init(4);
    let conv = Conv2dConfig::new(3, 5, 3)
        .stride(2)
        .padding(1)
        .bias(false)
        .build(&mut init)
        .unwrap();
    let tconv = Conv2dConfig::new(5, 3, 3)
        .stride(2)
        .padding(1)
        .bias(false)
        .build_transpose(&mut init, 0)
        .unwrap();
    assert_eq!(tconv.weight.tensor().dims(), &[5, 3, 3, 3]);
    tconv.weight.set(conv.weight.tensor());
    let x = randn(&[2, 3, 7, 7], 5);
    let cx = conv.forward(&x).unwrap();
    let y = randn(cx.dims(), 6);
    let ty = tconv.forward(&y).unwrap();
    assert_eq!(ty.dims(), x.dims());
    let lhs: f64 = vals(&cx).iter().zip(vals(&y)).map(|(a, b)| a * b).sum();
    let rhs: f64 = vals(&x).iter().zip(vals(&ty)).map(|(a, b)| a * b).sum();
    assert!(
        (lhs - rhs).abs() < 1e-9 * lhs.abs().max(1.0),
        "{lhs} vs {rhs}"
    );
}

#[test]
fn pooling_layers_match_naive_reference() {
    let x = randn(&[2, 3, 6, 5], 9);
    let xv = vals(&x);
    let at = |b: usize, c: usize, i: usize, j: usize| xv[((b * 3 + c) * 6 + i) * 5 + j];
    let mut max = vec![];
    let mut avg = vec![];
    for b in 0..2 {
        for c in 0..3 {
            for i in 0..3 {
                for j in 0..2 {
                    let w = [at(b, c, 2 * i, 2 * j), at(b, c, 2 * i, 2 * j + 1)];
                    let w2 = [at(b, c, 2 * i + 1, 2 * j), at(b, c, 2 * i + 1, 2 * j + 1)];
                    let all = [w[0], w[1], w2[0], w2[1]];
                    max.push(all.iter().cloned().fold(f64::MIN, f64::max));
                    avg.push(all.iter().sum::<f64>() / 4.0);
                }
            }
        }
    }
    assert_close(
        &vals(&MaxPool2d::new(2).forward(&x).unwrap()),
        &max,
        1e-12,
        "maxpool",
    );
    assert_close(
        &vals(&AvgPool2d::new(2).forward(&x).unwrap()),
        &avg,
        1e-12,
        "avgpool",
    );
    let gap = AdaptiveAvgPool2d::new([1, 1]).forward(&x).unwrap();
    assert_eq!(gap.dims(), &[2, 3, 1, 1]);
    let want: Vec<f64> = xv
        .chunks(30)
        .map(|c| c.iter().sum::<f64>() / 30.0)
        .collect();
    assert_close(&vals(&gap), &want, 1e-12, "adaptive");
    assert_eq!(Flatten::new().forward(&x).unwrap().dims(), &[2, 90]);
}

#[test]
fn batchnorm_trains_running_stats_like_pytorch() {
    let mut bn = BatchNorm2d::new(&mut f64_init(0), 3).unwrap();
    bn.weight
        .set(Tensor::from_vec(vec![0.5f64, 2.0, -1.0], [3], &dev()).unwrap());
    bn.bias
        .set(Tensor::from_vec(vec![0.1f64, 0.0, 0.3], [3], &dev()).unwrap());
    let (mut rm, mut rv) = (vec![0.0; 3], vec![1.0; 3]);
    for step in 0..2u64 {
        let x = Tensor::rand_normal([4, 3, 2, 5], 1.5, 2.0, 40 + step, DType::F64, &dev()).unwrap();
        let y = vals(&bn.forward(&x).unwrap());
        let xv = vals(&x);
        for c in 0..3 {
            let idx: Vec<usize> = (0..4)
                .flat_map(|b| (0..10).map(move |k| (b * 3 + c) * 10 + k))
                .collect();
            let n = idx.len() as f64;
            let mean = idx.iter().map(|&i| xv[i]).sum::<f64>() / n;
            let var = idx.iter().map(|&i| (xv[i] - mean).powi(2)).sum::<f64>() / n;
            let (w, b) = ([0.5, 2.0, -1.0][c], [0.1, 0.0, 0.3][c]);
            for &i in &idx {
                let want = (xv[i] - mean) / (var + 1e-5).sqrt() * w + b;
                assert!((y[i] - want).abs() < 1e-10, "train output c{c}");
            }
            rm[c] = 0.9 * rm[c] + 0.1 * mean;
            rv[c] = 0.9 * rv[c] + 0.1 * var * n / (n - 1.0);
        }
    }
    assert_close(&vals(&bn.running_mean.tensor()), &rm, 1e-12, "running_mean");
    assert_close(&vals(&bn.running_var.tensor()), &rv, 1e-12, "running_var");
    assert_eq!(vals(&bn.num_batches_tracked.tensor()), vec![2.0]);

    // Evaluation uses the running statistics and leaves them alone.
    bn.set_training(false);
    let x = randn(&[2, 3, 1, 2], 77);
    let y = vals(&bn.forward(&x).unwrap());
    for (i, (xi, yi)) in vals(&x).iter().zip(&y).enumerate() {
        let c = (i / 2) % 3;
        let want = (xi - rm[c]) / (rv[c] + 1e-5).sqrt() * [0.5, 2.0, -1.0][c] + [0.1, 0.0, 0.3][c];
        assert!((yi - want).abs() < 1e-10);
    }
    assert_eq!(vals(&bn.num_batches_tracked.tensor()), vec![2.0]);
    assert!(
        bn.forward(&randn(&[2, 4, 3, 3], 1)).is_err(),
        "wrong channel count"
    );
}

#[test]
fn layernorm_and_embedding_match_reference() {
    let ln = LayerNorm::new(&mut f64_init(0), &[4]).unwrap();
    ln.weight.set(randn(&[4], 3));
    ln.bias.set(randn(&[4], 4));
    let x = randn(&[3, 2, 4], 5);
    let (xv, w, b) = (vals(&x), vals(&ln.weight.tensor()), vals(&ln.bias.tensor()));
    let mut want = vec![];
    for row in xv.chunks(4) {
        let m = row.iter().sum::<f64>() / 4.0;
        let v = row.iter().map(|a| (a - m).powi(2)).sum::<f64>() / 4.0;
        want.extend(
            row.iter()
                .enumerate()
                .map(|(i, a)| (a - m) / (v + 1e-5).sqrt() * w[i] + b[i]),
        );
    }
    assert_close(&vals(&ln.forward(&x).unwrap()), &want, 1e-10, "layernorm");
    assert!(ln.forward(&randn(&[3, 5], 1)).is_err());

    let emb = Embedding::new(&mut f64_init(1), 10, 3).unwrap();
    let ids = Tensor::from_vec(vec![7i32, 0, 9, 7, 2, 3], [2, 3], &dev()).unwrap();
    let y = emb.forward(&ids).unwrap();
    assert_eq!(y.dims(), &[2, 3, 3]);
    let table = vals(&emb.weight.tensor());
    let want: Vec<f64> = [7, 0, 9, 7, 2, 3]
        .iter()
        .flat_map(|&i| table[i * 3..i * 3 + 3].to_vec())
        .collect();
    assert_eq!(vals(&y), want);
    assert!(
        emb.forward(&randn(&[2], 0)).is_err(),
        "float ids are rejected"
    );
}

#[test]
fn dropout_is_seeded_scaled_and_off_in_eval() {
    let x = Tensor::rand_uniform([64, 50], 1.0, 2.0, 3, DType::F32, &dev()).unwrap();
    let (mut a, b) = (
        Dropout::new(0.3, 42).unwrap(),
        Dropout::new(0.3, 42).unwrap(),
    );
    let (a1, a2) = (vals(&a.forward(&x).unwrap()), vals(&a.forward(&x).unwrap()));
    let b1 = vals(&b.forward(&x).unwrap());
    assert_eq!(a1, b1, "same seed and step, same mask");
    assert_ne!(a1, a2, "each step draws a new mask");
    let xv = vals(&x);
    let dropped = a1.iter().filter(|v| **v == 0.0).count() as f64 / a1.len() as f64;
    assert!((dropped - 0.3).abs() < 0.03, "dropped fraction {dropped}");
    for (y, x) in a1.iter().zip(&xv) {
        assert!(*y == 0.0 || (y - x / 0.7).abs() < 1e-5);
    }
    a.set_training(false);
    assert_eq!(vals(&a.forward(&x).unwrap()), xv);
    assert!(Dropout::new(1.5, 0).is_err());
}

#[test]
fn sequential_and_softmax_forward() {
    let mut init = f64_init(8);
    let net = Sequential::new()
        .with(Linear::new(&mut init, 5, 4).unwrap())
        .with(ReLU)
        .with(Linear::new(&mut init, 4, 3).unwrap())
        .with(Softmax::new(-1));
    let x = randn(&[6, 5], 1);
    let y = vals(&net.forward(&x).unwrap());
    for row in y.chunks(3) {
        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!(row.iter().all(|p| *p > 0.0));
    }
    assert_eq!(net.len(), 4);
}

#[test]
fn load_named_replaces_by_name_and_lists_every_problem() {
    let mut a = net();
    let b = net_with_seed(99);
    let map: BTreeMap<String, Tensor> = b.named_tensors().into_iter().collect();
    a.load_named(&map).unwrap();
    for ((n1, t1), (n2, t2)) in a.named_tensors().iter().zip(b.named_tensors().iter()) {
        assert_eq!(n1, n2);
        assert_eq!(vals(t1), vals(t2), "{n1}");
    }
    // Loaded trainable parameters are fresh gradient leaves; buffers are not.
    assert!(a.stem.conv.weight.tensor().requires_grad());
    assert!(
        !a.stem
            .norm
            .as_ref()
            .unwrap()
            .running_mean
            .tensor()
            .requires_grad()
    );

    let before = vals(&a.scale.tensor());
    let mut bad = map.clone();
    bad.remove("head.2.bias");
    bad.insert(
        "head.2.weight".into(),
        Tensor::zeros([3, 49], DType::F32, &dev()).unwrap(),
    );
    bad.insert(
        "head.9.weight".into(),
        Tensor::zeros([1], DType::F32, &dev()).unwrap(),
    );
    bad.insert(
        "scale".into(),
        Tensor::full([1], 5.0, DType::F32, &dev()).unwrap(),
    );
    let err = a.load_named(&bad).unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.kind(), ErrorKind::Format);
    assert!(msg.contains("missing head.2.bias"), "{msg}");
    assert!(
        msg.contains("head.2.weight: expected shape [3, 50], found [3, 49]"),
        "{msg}"
    );
    assert!(msg.contains("unexpected head.9.weight"), "{msg}");
    assert!(msg.contains("3 problem(s)"), "{msg}");
    assert_eq!(vals(&a.scale.tensor()), before, "nothing changes on error");
}

fn net_with_seed(seed: u64) -> Net {
    let n = net();
    let mut init = Init::new(&dev(), seed);
    n.visit(&mut |_, p| {
        let t = p.tensor();
        if t.dtype() == DType::F32 {
            p.set(init.uniform(t.shape(), 1.0).unwrap());
        }
    });
    n
}

fn naive_log_softmax(row: &[f64]) -> Vec<f64> {
    let m = row.iter().cloned().fold(f64::MIN, f64::max);
    let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
    row.iter().map(|v| v - lse).collect()
}

#[test]
fn losses_match_naive_f64() {
    let logits = Tensor::rand_normal([5, 7], 0.0, 3.0, 4, DType::F64, &dev()).unwrap();
    let targets = Tensor::from_vec(vec![3i32, 0, 6, 6, 2], [5], &dev()).unwrap();
    let lv = vals(&logits);
    let t = [3usize, 0, 6, 6, 2];
    let logp: Vec<Vec<f64>> = lv.chunks(7).map(naive_log_softmax).collect();
    let nll_want = -t.iter().enumerate().map(|(i, &c)| logp[i][c]).sum::<f64>() / 5.0;
    let ce = loss::cross_entropy(&logits, &targets, 0.0)
        .unwrap()
        .to_scalar()
        .unwrap();
    assert!((ce - nll_want).abs() < 1e-12, "{ce} vs {nll_want}");
    let eps = 0.1;
    let smooth_want: f64 = (0..5)
        .map(|i| (1.0 - eps) * -logp[i][t[i]] + eps * -logp[i].iter().sum::<f64>() / 7.0)
        .sum::<f64>()
        / 5.0;
    let ces = loss::cross_entropy(&logits, &targets, eps)
        .unwrap()
        .to_scalar()
        .unwrap();
    assert!((ces - smooth_want).abs() < 1e-12, "{ces} vs {smooth_want}");
    let lp = logits.log_softmax(-1).unwrap();
    let nll = loss::nll(&lp, &targets).unwrap().to_scalar().unwrap();
    assert!((nll - nll_want).abs() < 1e-12);

    let pred = randn(&[3, 4], 1);
    let target = randn(&[3, 4], 2);
    let mse_want = vals(&pred)
        .iter()
        .zip(vals(&target))
        .map(|(a, b)| (a - b).powi(2))
        .sum::<f64>()
        / 12.0;
    let mse = loss::mse(&pred, &target).unwrap().to_scalar().unwrap();
    assert!((mse - mse_want).abs() < 1e-12);

    // bce_with_logits stays finite for huge logits where the naive form overflows.
    let x = Tensor::from_vec(vec![-800.0f64, -3.0, 0.0, 2.5, 800.0, 40.0], [2, 3], &dev()).unwrap();
    let y = Tensor::from_vec(vec![0.0f64, 1.0, 0.5, 0.0, 1.0, 0.2], [2, 3], &dev()).unwrap();
    let bce = loss::bce_with_logits(&x, &y).unwrap().to_scalar().unwrap();
    let want: f64 = vals(&x)
        .iter()
        .zip(vals(&y))
        .map(|(x, y)| {
            // -[y log s(x) + (1-y) log(1-s(x))], with log s(x) = -softplus(-x).
            let softplus = |z: f64| z.max(0.0) + (-z.abs()).exp().ln_1p();
            y * softplus(-x) + (1.0 - y) * softplus(*x)
        })
        .sum::<f64>()
        / 6.0;
    assert!(
        bce.is_finite() && (bce - want).abs() < 1e-12,
        "{bce} vs {want}"
    );

    let bad = Tensor::from_vec(vec![1i32, 2], [2], &dev()).unwrap();
    let e = loss::cross_entropy(&logits, &bad, 0.0).unwrap_err();
    assert!(e.to_string().contains("[5]"), "{e}");
    assert!(loss::cross_entropy(&logits, &targets, 1.0).is_err());
    assert!(loss::mse(&pred, &randn(&[4, 3], 0)).is_err());
}

#[test]
fn gradients_reach_every_parameter() {
    let mut init = Init::new(&dev(), 5);
    let mut net = Sequential::new()
        .with(
            Conv2dConfig::new(1, 3, 3)
                .padding(1)
                .build(&mut init)
                .unwrap(),
        )
        .with(BatchNorm2d::new(&mut init, 3).unwrap())
        .with(ReLU)
        .with(MaxPool2d::new(2))
        .with(Flatten::new())
        .with(Linear::new(&mut init, 3 * 3 * 3, 4).unwrap());
    net.set_training(true);
    let x = Tensor::rand_normal([5, 1, 6, 7], 0.0, 1.0, 2, DType::F32, &dev()).unwrap();
    let targets = Tensor::from_vec(vec![0i32, 1, 2, 3, 1], [5], &dev()).unwrap();
    let loss = loss::cross_entropy(&net.forward(&x).unwrap(), &targets, 0.05).unwrap();
    let grads = loss.backward().unwrap();
    net.visit(&mut |name, p| {
        let g = grads.get(&p.tensor());
        if p.is_trainable() {
            let g = g.unwrap_or_else(|| panic!("no gradient for {name}"));
            assert_eq!(g.shape(), p.tensor().shape(), "{name}");
            assert!(
                vals(g).iter().any(|v| *v != 0.0),
                "{name} gradient is all zeros"
            );
        } else {
            assert!(g.is_none(), "buffer {name} got a gradient");
        }
    });
}
