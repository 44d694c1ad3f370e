//! A GPT-style transformer block (causal attention, LayerNorm, GELU tanh, MLP) on the device
//! under test against the CPU oracle with the same weights: forward, the gradients of the input
//! and of every parameter, and the KV-cached forward pass.

use kiln_conformance::{assert_close, data};
use kiln_core::nn::{Forward, Init, KvCache, Module, TransformerBlock};
use kiln_core::{DType, Device, Result, Tensor, TensorData};
use std::collections::BTreeMap;

const F: DType = DType::F32;
// several f32 matmuls, LayerNorms and a softmax in a row
const TOL: (f64, f64) = (1e-4, 1e-4);

/// The block on `dev` with the weights of `like` (a CPU block).
fn block_on(dev: &Device, like: &TransformerBlock) -> Result<TransformerBlock> {
    let mut block = TransformerBlock::new(&mut Init::new(dev, 0), 12, 3, 0.0, 0)?;
    let weights: BTreeMap<String, Tensor> = like
        .named_tensors()
        .into_iter()
        .map(|(n, t)| Ok((n, Tensor::from_data(&t.to_data()?, dev)?)))
        .collect::<Result<_>>()?;
    block.load_named(&weights)?;
    Ok(block)
}

struct Run {
    y: TensorData,
    cached: TensorData,
    grads: Vec<(String, TensorData)>,
}

fn run(dev: &Device, cpu_block: &TransformerBlock, x: &TensorData) -> Result<Run> {
    let block = block_on(dev, cpu_block)?;
    let x = Tensor::from_data(x, dev)?.require_grad();
    let y = block.forward(&x)?;
    let w = Tensor::from_data(&data(y.dims(), F, 99, -1.0, 1.0), dev)?;
    let g = y.mul(&w)?.sum_all()?.backward()?;
    let mut grads = vec![(
        "x".to_string(),
        g.get(&x).expect("no gradient for x").to_data()?,
    )];
    for (name, p) in block.named_params() {
        let gp = g
            .get(&p)
            .unwrap_or_else(|| panic!("no gradient for {name}"));
        grads.push((name, gp.to_data()?));
    }
    // token by token, then the rest in one piece, through the cache
    let mut cache = KvCache::new(7);
    let mut outs = Vec::new();
    for (start, len) in [(0, 1), (1, 1), (2, 1), (3, 4)] {
        outs.push(block.forward_cached(&x.detach().narrow(1, start, len)?, &mut cache)?);
    }
    Ok(Run {
        y: y.to_data()?,
        cached: Tensor::concat(&outs, 1)?.to_data()?,
        grads,
    })
}

#[test]
fn transformer_block_forward_backward_and_cache() {
    let Some(dev) = kiln_conformance::device() else {
        return;
    };
    let cpu = Device::cpu();
    let block = TransformerBlock::new(&mut Init::new(&cpu, 17), 12, 3, 0.0, 5).unwrap();
    // LayerNorm starts as the identity: other values test its weight and bias on the device
    for (i, ln) in [&block.ln1, &block.ln2].into_iter().enumerate() {
        let d = |seed, lo, hi| Tensor::from_data(&data(&[12], F, seed, lo, hi), &cpu).unwrap();
        ln.weight.set(d(10 + i as u64, 0.5, 1.5));
        ln.bias.set(d(20 + i as u64, -0.5, 0.5));
    }
    let x = data(&[3, 7, 12], F, 1, -2.0, 2.0);
    let want = run(&cpu, &block, &x).unwrap_or_else(|e| panic!("on cpu: {e}"));
    let got = run(&dev, &block, &x).unwrap_or_else(|e| panic!("on {}: {e}", dev.name()));
    assert_close("block forward", &want.y, &got.y, TOL.0, TOL.1);
    assert_close("block cached forward", &want.y, &got.cached, TOL.0, TOL.1);
    assert_close("cpu cached forward", &want.y, &want.cached, 1e-5, 1e-5);
    assert_eq!(want.grads.len(), 13);
    for ((name, w), (_, g)) in want.grads.iter().zip(&got.grads) {
        assert_close(
            &format!("gradient of {name}"),
            w,
            g,
            TOL.0 * 4.0,
            TOL.1 * 4.0,
        );
    }
}
