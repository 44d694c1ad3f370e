//! kiln's GPT against PyTorch: `tests/fixtures/gpt_torch.json` holds a tiny GPT's random weights,
//! a batch, and PyTorch's float64 logits, loss and parameter gradients
//! (`tests/fixtures/gen_gpt_torch.py`). The same weights in kiln's `Gpt`, in f64 on the CPU,
//! must give the same numbers: embeddings, pre-norm blocks, causal attention, GELU (tanh),
//! weight tying and the sequence cross-entropy, forward and backward.

use kiln::core::nn::{Forward, Init, Module};
use kiln::core::{DType, Device, Tensor};
use kiln::models::gpt::{Gpt, GptConfig};
use serde_json::Value;
use std::collections::BTreeMap;

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn ints(v: &Value) -> Vec<i32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_i64().unwrap() as i32)
        .collect()
}

fn close(name: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    let worst = got
        .iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs() / (1.0 + w.abs()))
        .fold(0.0, f64::max);
    assert!(worst < tol, "{name}: worst relative difference {worst:e}");
}

#[test]
fn gpt_forward_and_backward_match_pytorch_float64() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/gpt_torch.json"
    );
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let dev = Device::cpu();
    let config: GptConfig = serde_json::from_value(fixture["config"].clone()).unwrap();
    let vocab = config.vocab;
    let mut model = Gpt::new(config, &mut Init::new(&dev, 0), 0).unwrap();
    // The fixture's weights, in f64 (set directly: load_named would cast them to f32).
    let params: BTreeMap<String, Tensor> = fixture["params"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, p)| {
            let shape: Vec<usize> = ints(&p["shape"]).iter().map(|&d| d as usize).collect();
            (
                name.clone(),
                Tensor::from_vec(floats(&p["data"]), shape, &dev).unwrap(),
            )
        })
        .collect();
    let mut loaded = 0;
    model.visit_mut(&mut |name, p| {
        let t = &params[name];
        assert_eq!(t.shape(), p.tensor().shape(), "{name}");
        p.set(t.clone());
        loaded += 1;
    });
    assert_eq!(loaded, params.len());

    let bt = ints(&fixture["batch"]);
    let (b, t) = (bt[0] as usize, bt[1] as usize);
    let ids = Tensor::from_vec(ints(&fixture["ids"]), [b, t], &dev).unwrap();
    let targets = Tensor::from_vec(ints(&fixture["targets"]), [b, t], &dev).unwrap();
    let logits = model.forward(&ids).unwrap();
    assert_eq!(logits.dims(), [b, t, vocab]);
    assert_eq!(logits.dtype(), DType::F64);
    close(
        "logits",
        &logits.to_vec::<f64>().unwrap(),
        &floats(&fixture["logits"]),
        1e-10,
    );
    let loss = model.loss(&ids, &targets).unwrap();
    let want = fixture["loss"].as_f64().unwrap();
    close("loss", &[loss.to_scalar().unwrap()], &[want], 1e-12);

    let grads = loss.backward().unwrap();
    let mut checked = 0;
    model.visit(&mut |name, p| {
        let g = grads
            .get(&p.tensor())
            .unwrap_or_else(|| panic!("no gradient for {name}"));
        close(
            name,
            &g.to_vec::<f64>().unwrap(),
            &floats(&fixture["grads"][name]),
            1e-9,
        );
        checked += 1;
    });
    assert_eq!(checked, 28);
}
