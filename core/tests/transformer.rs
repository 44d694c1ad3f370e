//! The transformer building blocks (attention, KV cache, multi-head attention, the pre-norm
//! block, RmsNorm, GELU tanh) against plain f64 loops written here, and the cached forward pass
//! against the full one. Gradients are checked in `gradcheck.rs`.

mod common;

use common::{Arr, Rng, assert_close, assert_err, dev, read, tensor};
use kiln_core::cpu::CpuStorage;
use kiln_core::nn::gpt::{Generator, Gpt, GptConfig, Sampling};
use kiln_core::nn::{
    Dropout, Forward, GELUTanh, Init, KvCache, Module, MultiHeadAttention, Param, RmsNorm,
    TransformerBlock, scaled_dot_product_attention,
};
use kiln_core::{DType, ErrorKind, Result, Tensor};

fn random(rng: &mut Rng, shape: &[usize], lo: f64, hi: f64) -> Arr {
    Arr::random(rng, shape, DType::F64, &mut |r| r.uniform(lo, hi))
}

/// A parameter's values as an `Arr`.
fn param(m: &impl Module, name: &str) -> Arr {
    let (_, t) = m
        .named_tensors()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no parameter {name}"));
    read(&t).unwrap()
}

// ---------------------------------------------------------------- f64 references

/// Attention of one head: rows of q over rows of k and v, query `i` seeing keys `0..=limit(i)`.
fn attend(q: &[Vec<f64>], k: &[Vec<f64>], v: &[Vec<f64>], causal: bool) -> Vec<Vec<f64>> {
    let (tq, tk, d) = (q.len(), k.len(), q[0].len());
    (0..tq)
        .map(|i| {
            let last = if causal { tk - tq + i } else { tk - 1 };
            let scores: Vec<f64> = (0..=last)
                .map(|j| (0..d).map(|c| q[i][c] * k[j][c]).sum::<f64>() / (d as f64).sqrt())
                .collect();
            let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
            let total: f64 = e.iter().sum();
            (0..v[0].len())
                .map(|c| (0..=last).map(|j| e[j] / total * v[j][c]).sum())
                .collect()
        })
        .collect()
}

/// Rows `[.., T, D]` of an array, grouped by leading index: `out[n][t][d]`.
fn rows(a: &Arr) -> Vec<Vec<Vec<f64>>> {
    let (t, d) = (a.shape[a.rank() - 2], a.shape[a.rank() - 1]);
    a.data
        .chunks(t * d)
        .map(|m| m.chunks(d).map(<[f64]>::to_vec).collect())
        .collect()
}

/// `x W^T + b` on rows.
fn linear(x: &[Vec<f64>], w: &Arr, b: &Arr) -> Vec<Vec<f64>> {
    let (out, inp) = (w.shape[0], w.shape[1]);
    x.iter()
        .map(|r| {
            (0..out)
                .map(|o| b.data[o] + (0..inp).map(|i| r[i] * w.at(&[o, i])).sum::<f64>())
                .collect()
        })
        .collect()
}

fn layer_norm(x: &[Vec<f64>], w: &Arr, b: &Arr) -> Vec<Vec<f64>> {
    x.iter()
        .map(|r| {
            let n = r.len() as f64;
            let mean = r.iter().sum::<f64>() / n;
            let var = r.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
            r.iter()
                .enumerate()
                .map(|(c, v)| (v - mean) / (var + 1e-5).sqrt() * w.data[c] + b.data[c])
                .collect()
        })
        .collect()
}

fn gelu_tanh(x: f64) -> f64 {
    let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
    0.5 * x * (1.0 + u.tanh())
}

fn add(a: &[Vec<f64>], b: &[Vec<f64>]) -> Vec<Vec<f64>> {
    a.iter()
        .zip(b)
        .map(|(x, y)| x.iter().zip(y).map(|(p, q)| p + q).collect())
        .collect()
}

/// Causal multi-head self-attention of one sequence `x` (`[T][C]`) with the module's weights.
fn mha_ref(m: &impl Module, prefix: &str, x: &[Vec<f64>], heads: usize) -> Vec<Vec<f64>> {
    let p = |n: &str| param(m, &format!("{prefix}{n}"));
    let qkv = linear(x, &p("qkv.weight"), &p("qkv.bias"));
    let c = x[0].len();
    let dh = c / heads;
    let mut joined = vec![vec![0.0; c]; x.len()];
    for h in 0..heads {
        // features [which * C + h * Dh, + Dh) of qkv hold head h's q, k or v
        let part = |which: usize| -> Vec<Vec<f64>> {
            let start = which * c + h * dh;
            qkv.iter().map(|r| r[start..start + dh].to_vec()).collect()
        };
        for (t, r) in attend(&part(0), &part(1), &part(2), true)
            .into_iter()
            .enumerate()
        {
            joined[t][h * dh..(h + 1) * dh].copy_from_slice(&r);
        }
    }
    linear(&joined, &p("proj.weight"), &p("proj.bias"))
}

fn block_ref(b: &TransformerBlock, x: &[Vec<f64>], heads: usize) -> Vec<Vec<f64>> {
    let p = |n: &str| param(b, n);
    let h = layer_norm(x, &p("ln1.weight"), &p("ln1.bias"));
    let x = add(x, &mha_ref(b, "attn.", &h, heads));
    let h = layer_norm(&x, &p("ln2.weight"), &p("ln2.bias"));
    let h: Vec<Vec<f64>> = linear(&h, &p("fc1.weight"), &p("fc1.bias"))
        .into_iter()
        .map(|r| r.into_iter().map(gelu_tanh).collect())
        .collect();
    add(&x, &linear(&h, &p("fc2.weight"), &p("fc2.bias")))
}

/// `[B][T][C]` back to an `Arr`.
fn stack(seqs: Vec<Vec<Vec<f64>>>) -> Arr {
    let shape = [seqs.len(), seqs[0].len(), seqs[0][0].len()];
    Arr::new(&shape, seqs.into_iter().flatten().flatten().collect())
}

// ---------------------------------------------------------------- tests

#[test]
fn attention_matches_reference() -> Result<()> {
    let mut rng = Rng::new(40);
    // (causal, Tq, Tk): square, fewer queries than keys (a cache), a single query
    let cases = [
        (false, 7, 7),
        (true, 7, 7),
        (false, 3, 7),
        (true, 3, 7),
        (true, 1, 5),
        (false, 5, 2),
    ];
    for dt in [DType::F64, DType::F32] {
        for (causal, tq, tk) in cases {
            let (b, h, d) = (3, 2, 5);
            let q = random(&mut rng, &[b, h, tq, d], -2.0, 2.0);
            let k = random(&mut rng, &[b, h, tk, d], -2.0, 2.0);
            let v = random(&mut rng, &[b, h, tk, d], -2.0, 2.0);
            let got = scaled_dot_product_attention(
                &tensor(&q, dt),
                &tensor(&k, dt),
                &tensor(&v, dt),
                causal,
            )?;
            let want: Vec<Vec<Vec<f64>>> = rows(&q)
                .iter()
                .zip(rows(&k).iter().zip(rows(&v)))
                .map(|(q, (k, v))| attend(q, k, &v, causal))
                .collect();
            let want = Arr::new(
                &[b, h, tq, d],
                want.into_iter().flatten().flatten().collect(),
            );
            let what = format!("attention {dt} causal {causal} Tq {tq} Tk {tk}");
            let tol = if dt == DType::F64 { 1e-12 } else { 1e-5 };
            assert_close(&what, &got, &want, dt, tol, tol);
        }
    }
    Ok(())
}

#[test]
fn attention_broadcasts_and_accepts_views() -> Result<()> {
    // one k/v shared by both batch entries, v wider than q/k, q strided in memory
    let mut rng = Rng::new(41);
    let q = random(&mut rng, &[2, 4, 3], -2.0, 2.0);
    let k = random(&mut rng, &[6, 3], -2.0, 2.0);
    let v = random(&mut rng, &[6, 5], -2.0, 2.0);
    let qt = tensor(&q, DType::F64)
        .transpose(-1, -2)?
        .contiguous()?
        .transpose(-1, -2)?;
    assert!(!qt.layout().is_contiguous());
    for causal in [false, true] {
        let got = scaled_dot_product_attention(
            &qt,
            &tensor(&k, DType::F64),
            &tensor(&v, DType::F64),
            causal,
        )?;
        let (k, v) = (&rows(&k)[0], &rows(&v)[0]);
        let want = stack(rows(&q).iter().map(|q| attend(q, k, v, causal)).collect());
        let what = format!("broadcast attention causal {causal}");
        assert_close(&what, &got, &want, DType::F64, 1e-12, 1e-12);
    }
    Ok(())
}

#[test]
fn attention_shape_errors() {
    let t = |s: &[usize]| Tensor::zeros(s, DType::F32, &dev()).unwrap();
    assert_err(
        scaled_dot_product_attention(&t(&[2, 5, 4]), &t(&[2, 3, 4]), &t(&[2, 3, 4]), true),
        ErrorKind::Shape,
        "scaled_dot_product_attention",
        &["no more queries than keys", "[2, 5, 4]"],
    );
    assert_err(
        scaled_dot_product_attention(&t(&[5, 4]), &t(&[3, 5]), &t(&[3, 4]), false),
        ErrorKind::Shape,
        "scaled_dot_product_attention",
        &["[3, 5]"],
    );
    assert_err(
        scaled_dot_product_attention(&t(&[5]), &t(&[3, 5]), &t(&[3, 4]), false),
        ErrorKind::Shape,
        "scaled_dot_product_attention",
        &["rank"],
    );
}

#[test]
fn heads_must_divide_dim() {
    let mut init = Init::new(&dev(), 0);
    assert_err(
        MultiHeadAttention::new(&mut init, 12, 5, 0.0, 0),
        ErrorKind::InvalidArgument,
        "MultiHeadAttention",
        &["dim 12", "heads 5"],
    );
    assert_err(
        TransformerBlock::new(&mut init, 10, 4, 0.0, 0),
        ErrorKind::InvalidArgument,
        "MultiHeadAttention",
        &["dim 10", "heads 4"],
    );
    assert!(MultiHeadAttention::new(&mut init, 12, 0, 0.0, 0).is_err());
    let attn = MultiHeadAttention::new(&mut init, 12, 3, 0.0, 0).unwrap();
    assert_eq!(attn.heads(), 3);
    let x = Tensor::zeros([3, 12], DType::F32, &dev()).unwrap();
    assert_eq!(attn.forward(&x).unwrap_err().kind(), ErrorKind::Shape);
}

#[test]
fn multi_head_attention_and_block_match_reference() -> Result<()> {
    let (b, t, c, heads) = (3, 7, 12, 3);
    let mut init = Init::new(&dev(), 5).with_dtype(DType::F64);
    let attn = MultiHeadAttention::new(&mut init, c, heads, 0.0, 1)?;
    let block = TransformerBlock::new(&mut init, c, heads, 0.0, 2)?;
    // LayerNorm starts as the identity: random scales and shifts test that they are used
    let mut rng = Rng::new(42);
    block.visit(&mut |n, p| {
        if n.starts_with("ln") {
            let v = random(&mut rng, p.tensor().dims(), 0.5, 1.5);
            p.set(tensor(&v, DType::F64));
        }
    });
    let x = random(&mut rng, &[b, t, c], -2.0, 2.0);
    let xt = tensor(&x, DType::F64);
    let seqs = rows(&x);
    let want = stack(seqs.iter().map(|s| mha_ref(&attn, "", s, heads)).collect());
    assert_close(
        "attention",
        &attn.forward(&xt)?,
        &want,
        DType::F64,
        1e-12,
        1e-12,
    );
    let want = stack(seqs.iter().map(|s| block_ref(&block, s, heads)).collect());
    assert_close(
        "block",
        &block.forward(&xt)?,
        &want,
        DType::F64,
        1e-12,
        1e-12,
    );
    Ok(())
}

/// The outputs of `forward_cached` fed `x` in pieces of `sizes`, joined along T.
fn in_pieces(
    sizes: &[usize],
    x: &Tensor,
    f: &dyn Fn(&Tensor, &mut KvCache) -> Result<Tensor>,
) -> Result<Tensor> {
    let mut cache = KvCache::new(x.dims()[1]);
    let mut outs = Vec::new();
    let mut start = 0;
    for &n in sizes {
        outs.push(f(&x.narrow(1, start, n)?, &mut cache)?);
        start += n;
        assert_eq!(cache.len(), start);
        assert_eq!(cache.keys().unwrap().dims()[2], start);
        assert_eq!(cache.values().unwrap().dims()[2], start);
    }
    cache.clear();
    assert!(cache.is_empty() && cache.keys().is_none());
    Tensor::concat(&outs, 1)
}

#[test]
fn cached_forward_matches_full_forward() -> Result<()> {
    let (b, t, c, heads) = (3, 7, 12, 3);
    let mut init = Init::new(&dev(), 9);
    let attn = MultiHeadAttention::new(&mut init, c, heads, 0.0, 1)?;
    // dropout in evaluation mode must be the identity too
    let mut block = TransformerBlock::new(&mut init, c, heads, 0.3, 2)?;
    block.set_training(false);
    let x = Tensor::rand_normal([b, t, c], 0.0, 1.0, 11, DType::F32, &dev())?;
    let full_attn = read(&attn.forward(&x)?)?;
    let full_block = read(&block.forward(&x)?)?;
    for sizes in [&[1; 7][..], &[2, 3, 2], &[3, 3, 1], &[7]] {
        let what = format!("pieces {sizes:?}");
        let got = in_pieces(sizes, &x, &|x, c| attn.forward_cached(x, c))?;
        assert_close(
            &format!("attention {what}"),
            &got,
            &full_attn,
            DType::F32,
            1e-5,
            1e-5,
        );
        let got = in_pieces(sizes, &x, &|x, c| block.forward_cached(x, c))?;
        assert_close(
            &format!("block {what}"),
            &got,
            &full_block,
            DType::F32,
            1e-5,
            1e-5,
        );
    }
    Ok(())
}

/// The address of a CPU tensor's f32 elements (to tell a write in place from a copy).
fn f32_buffer(t: &Tensor) -> *const f32 {
    match t.storage().downcast::<CpuStorage>() {
        Some(CpuStorage::F32(v)) => v.as_ptr(),
        other => panic!("expected an f32 cpu buffer, found {other:?}"),
    }
}

#[test]
fn write_at_writes_in_place_only_where_no_other_tensor_sees_it() -> Result<()> {
    let mut rng = Rng::new(5);
    let a = random(&mut rng, &[4, 6], -1.0, 1.0);
    let src = tensor(&random(&mut rng, &[2, 5], -1.0, 1.0), DType::F32);
    let orig = read(&tensor(&a, DType::F32))?.data;
    let mut want = orig.clone();
    want[7..17].copy_from_slice(&read(&src)?.data);
    // alone: the same buffer, written
    let mut t = tensor(&a, DType::F32);
    let before = f32_buffer(&t);
    t.write_at(7, &src)?;
    assert_eq!(f32_buffer(&t), before);
    assert_eq!(t.dims(), [4, 6]);
    assert_close(
        "in place",
        &t,
        &Arr::new(&[4, 6], want.clone()),
        DType::F32,
        0.0,
        0.0,
    );
    // shared with a view: a new buffer, the view unchanged
    let mut t = tensor(&a, DType::F32);
    let view = t.narrow(0, 1, 2)?;
    t.write_at(7, &src)?;
    assert_ne!(f32_buffer(&t), f32_buffer(&view));
    assert_close("copy", &t, &Arr::new(&[4, 6], want), DType::F32, 0.0, 0.0);
    assert_eq!(read(&view)?.data, orig[6..18]);
    // too long, another dtype
    assert_err(
        t.write_at(20, &src),
        ErrorKind::InvalidArgument,
        "write_at",
        &["10", "24", "20"],
    );
    let ints = Tensor::zeros([2], DType::I32, &dev())?;
    assert_err(
        t.write_at(0, &ints),
        ErrorKind::InvalidArgument,
        "write_at",
        &["i32"],
    );
    Ok(())
}

#[test]
fn kv_cache_refuses_more_than_its_capacity() -> Result<()> {
    let mut cache = KvCache::new(4);
    let k = Tensor::rand_normal([1, 2, 3, 5], 0.0, 1.0, 1, DType::F32, &dev())?;
    cache.append(&k, &k)?;
    assert_err(
        cache.append(&k, &k),
        ErrorKind::Shape,
        "KvCache",
        &["at most 4", "found 6"],
    );
    assert_eq!(cache.len(), 3);
    // after a clear, the same room is reused
    cache.clear();
    let (keys, _) = cache.append(&k, &k)?;
    assert_eq!(read(&keys)?.data, read(&k)?.data);
    let other = Tensor::rand_normal([2, 2, 1, 5], 0.0, 1.0, 1, DType::F32, &dev())?;
    assert_err(
        cache.append(&other, &other),
        ErrorKind::Shape,
        "KvCache",
        &["[2, 2, 1, 5]"],
    );
    Ok(())
}

#[test]
fn generation_past_the_context_rebuilds_the_cache_from_its_last_half() -> Result<()> {
    let config = GptConfig {
        vocab: 11,
        context: 8,
        dim: 16,
        layers: 2,
        heads: 4,
        dropout: 0.0,
    };
    let mut model = Gpt::new(config, &mut Init::new(&dev(), 4), 0)?;
    model.set_training(false);
    // Embeddings of N(0, 1) rather than 0.02, so that every position changes the logits.
    for e in [&mut model.tok, &mut model.pos] {
        let d = e.weight.tensor().dims().to_vec();
        e.weight = Param::new(Tensor::rand_normal(d, 0.0, 1.0, 3, DType::F32, &dev())?);
    }
    let prompt = [1u32, 5, 2];
    let sampling = Sampling {
        temperature: 1.0,
        top_k: None,
        seed: 7,
    };
    let mut g = Generator::new(&model, &prompt, sampling)?;
    let mut seq = prompt.to_vec();
    let mut window_start = 0;
    // 3 + 20 tokens through a context of 8: rebuilt at 9, 13, 17, 21 tokens
    for step in 0..20 {
        if seq.len() - window_start > 8 {
            window_start = seq.len() - 4;
        }
        let ids: Vec<i32> = seq[window_start..].iter().map(|&t| t as i32).collect();
        let n = ids.len();
        let full = kiln_core::autodiff::no_grad(|| {
            model.forward(&Tensor::from_vec(ids, [1, n], &dev())?)
        })?;
        let want = read(&full.narrow(1, n - 1, 1)?)?;
        let got = g.logits()?;
        assert_close(
            &format!("step {step}"),
            &got,
            &Arr::new(&[11], want.data),
            DType::F32,
            1e-4,
            1e-5,
        );
        seq.push(g.choose(&got.to_vec::<f32>()?));
    }
    assert!(seq[3..].windows(2).any(|w| w[0] != w[1]), "{seq:?}");
    Ok(())
}

#[test]
fn attention_dropout_drops_probabilities_in_training_only() -> Result<()> {
    let (b, c, heads) = (4, 12, 3);
    let dh = c / heads;
    let mut init = Init::new(&dev(), 5).with_dtype(DType::F64);
    let mut attn = MultiHeadAttention::new(&mut init, c, heads, 0.5, 8)?;
    // only the attention probabilities dropped
    attn.dropout = Dropout::new(0.0, 0)?;
    let mut rng = Rng::new(9);
    // One position: each head's one weight (1) is dropped (0) or kept and doubled (2).
    let x1 = random(&mut rng, &[b, 1, c], -1.0, 1.0);
    let probe = attn.attn_dropout.clone(); // the same seed and step: the same mask
    let y = attn.forward(&tensor(&x1, DType::F64))?;
    let ones = Tensor::ones([b, heads, 1, 1], DType::F64, &dev())?;
    let mask = read(&probe.forward(&ones)?)?.data;
    assert!(mask.iter().all(|&m| m == 0.0 || m == 2.0), "{mask:?}");
    assert!(mask.contains(&0.0) && mask.contains(&2.0), "{mask:?}");
    let p = |n: &str| param(&attn, n);
    let mut want = Vec::new();
    for (i, seq) in rows(&x1).into_iter().enumerate() {
        let qkv = linear(&seq, &p("qkv.weight"), &p("qkv.bias"));
        let mut v = qkv[0][2 * c..].to_vec();
        for (h, head) in v.chunks_mut(dh).enumerate() {
            head.iter_mut().for_each(|e| *e *= mask[i * heads + h]);
        }
        want.push(linear(&[v], &p("proj.weight"), &p("proj.bias")));
    }
    assert_close("one position", &y, &stack(want), DType::F64, 1e-12, 1e-12);
    assert_eq!(attn.attn_dropout.steps(), 1);
    // a new mask per training pass
    let x = random(&mut rng, &[2, 6, c], -1.0, 1.0);
    let xt = tensor(&x, DType::F64);
    assert_ne!(
        read(&attn.forward(&xt)?)?.data,
        read(&attn.forward(&xt)?)?.data
    );
    assert_eq!(attn.attn_dropout.steps(), 3);
    // evaluation: none, and no mask drawn
    attn.set_training(false);
    let want = stack(
        rows(&x)
            .iter()
            .map(|s| mha_ref(&attn, "", s, heads))
            .collect(),
    );
    assert_close(
        "evaluation",
        &attn.forward(&xt)?,
        &want,
        DType::F64,
        1e-12,
        1e-12,
    );
    assert_eq!(attn.attn_dropout.steps(), 3);
    Ok(())
}

#[test]
fn block_layout_and_dropout() -> Result<()> {
    let mut init = Init::new(&dev(), 3);
    let block = TransformerBlock::new(&mut init, 12, 3, 0.0, 0)?;
    let names: Vec<String> = block.named_params().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "ln1.weight",
            "ln1.bias",
            "attn.qkv.weight",
            "attn.qkv.bias",
            "attn.proj.weight",
            "attn.proj.bias",
            "ln2.weight",
            "ln2.bias",
            "fc1.weight",
            "fc1.bias",
            "fc2.weight",
            "fc2.bias",
        ]
    );
    assert_eq!(block.attn.qkv.weight.tensor().dims(), [36, 12]);
    assert_eq!(block.fc1.weight.tensor().dims(), [48, 12]);
    let mut counters = Vec::new();
    block.visit_counters(&mut |n, _| counters.push(n.to_string()));
    assert_eq!(
        counters,
        [
            "attn.dropout.step",
            "attn.attn_dropout.step",
            "dropout.step"
        ]
    );
    // p = 0 in training: deterministic, no mask drawn
    let x = Tensor::rand_normal([2, 5, 12], 0.0, 1.0, 1, DType::F32, &dev())?;
    let (a, b) = (read(&block.forward(&x)?)?, read(&block.forward(&x)?)?);
    assert_eq!(a, b);
    assert_eq!(block.dropout.steps(), 0);
    // p > 0 in training draws new masks per pass
    let drop = TransformerBlock::new(&mut init, 12, 3, 0.5, 0)?;
    let (a, b) = (read(&drop.forward(&x)?)?, read(&drop.forward(&x)?)?);
    assert_ne!(a, b);
    assert_eq!(drop.dropout.steps(), 2);
    Ok(())
}

#[test]
fn rms_norm_matches_reference() -> Result<()> {
    let mut rng = Rng::new(43);
    for dt in [DType::F64, DType::F32] {
        let mut init = Init::new(&dev(), 0).with_dtype(dt);
        let norm = RmsNorm::new(&mut init, 12)?;
        assert_eq!(norm.eps, 1e-6);
        let w = random(&mut rng, &[12], 0.5, 1.5);
        norm.weight.set(tensor(&w, dt));
        let x = random(&mut rng, &[3, 7, 12], -3.0, 3.0);
        let want = Arr::new(
            &x.shape,
            x.data
                .chunks(12)
                .flat_map(|r| {
                    let ms = r.iter().map(|v| v * v).sum::<f64>() / 12.0;
                    let w = &w;
                    r.iter()
                        .enumerate()
                        .map(move |(c, v)| v / (ms + 1e-6).sqrt() * w.data[c])
                })
                .collect(),
        );
        let tol = if dt == DType::F64 { 1e-12 } else { 2e-6 };
        let got = norm.forward(&tensor(&x, dt))?;
        assert_close(&format!("rms_norm {dt}"), &got, &want, dt, tol, tol);
    }
    let mut init = Init::new(&dev(), 0);
    let norm = RmsNorm::new(&mut init, 12)?;
    assert_eq!(norm.named_params().len(), 1);
    assert_err(
        norm.forward(&Tensor::zeros([3, 10], DType::F32, &dev())?),
        ErrorKind::Shape,
        "RmsNorm",
        &["[12]", "[3, 10]"],
    );
    Ok(())
}

#[test]
fn gelu_tanh_module() -> Result<()> {
    let x = Arr::new(&[5], vec![-3.0, -1.0, 0.0, 0.5, 2.0]);
    let got = GELUTanh.forward(&tensor(&x, DType::F64))?;
    assert_close(
        "GELUTanh",
        &got,
        &x.map(gelu_tanh),
        DType::F64,
        1e-15,
        1e-15,
    );
    // PyTorch's F.gelu(1.0, approximate="tanh")
    let one = GELUTanh.forward(&Tensor::scalar(1.0, DType::F64, &dev())?)?;
    assert!((one.to_scalar()? - 0.841_191_990_608_276_8).abs() < 1e-12);
    Ok(())
}
