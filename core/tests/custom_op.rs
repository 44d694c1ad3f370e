//! Custom ops on the CPU: the registered reference against an independent f64 one and the
//! composed built-in version, the gradient (finite differences and the built-in's), a traced
//! model file that uses one, and the errors (not registered, bad arguments, bad rules).

#[allow(dead_code)]
#[path = "../../native/examples/custom_op/scaled_softmax.rs"]
mod scaled_softmax;

use kiln_core::model::{Model, save_model};
use kiln_core::nn::{Forward, Init, Linear};
use kiln_core::op::custom::{
    Attrs, CustomOp, KILN_PREFIX, register_op, registered_ops, unregister_op,
};
use kiln_core::{DType, Device, ErrorKind, Meta, Op, Result, Shape, Tensor, TensorData};
use scaled_softmax::{NAME, ScaledSoftmax, composed, scaled_softmax};
use std::collections::BTreeMap;
use std::sync::Arc;

fn setup() -> Device {
    register_op(Arc::new(ScaledSoftmax)).unwrap();
    Device::cpu()
}

/// Deterministic values in [-2, 2) (an LCG; never all zeros).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(2862933555777941757)
        .wrapping_add(3037000493);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f64 / (1u64 << 24) as f64 * 4.0 - 2.0) as f32
        })
        .collect()
}

fn close(what: &str, want: &[f32], got: &[f32], tol: f32) {
    assert_eq!(want.len(), got.len(), "{what}");
    for (i, (a, b)) in want.iter().zip(got).enumerate() {
        assert!(
            (a - b).abs() <= tol * (1.0 + a.abs()),
            "{what}: element {i}: want {a}, got {b}"
        );
    }
}

#[test]
fn matches_an_f64_reference_and_the_composed_ops_on_odd_and_strided_inputs() {
    let dev = setup();
    for (dims, scale) in [(vec![3, 7, 5], 0.7), (vec![1], -2.0), (vec![11, 13], 3.0)] {
        let n = dims.iter().product();
        let x = Tensor::from_vec(values(n, 1), dims.clone(), &dev).unwrap();
        let got = scaled_softmax(&x, scale).unwrap().to_vec::<f32>().unwrap();
        let cols = *dims.last().unwrap();
        let mut want = Vec::new();
        for row in values(n, 1).chunks(cols) {
            let e: Vec<f64> = row.iter().map(|&v| (scale * v as f64).exp()).collect();
            let s: f64 = e.iter().sum();
            want.extend(e.iter().map(|v| (v / s) as f32));
        }
        close(&format!("{dims:?}"), &want, &got, 1e-5);
        let built_in = composed(&x, scale).unwrap().to_vec::<f32>().unwrap();
        close(&format!("{dims:?} composed"), &built_in, &got, 1e-5);
    }
    // a transposed view reaches the reference as row-major data
    let x = Tensor::from_vec(values(35, 2), [5, 7], &dev)
        .unwrap()
        .t()
        .unwrap();
    let got = scaled_softmax(&x, 1.5).unwrap().to_vec::<f32>().unwrap();
    let want = composed(&x, 1.5).unwrap().to_vec::<f32>().unwrap();
    close("strided", &want, &got, 1e-5);
}

#[test]
fn gradient_matches_finite_differences_and_the_composed_ops() {
    let dev = setup();
    let (dims, scale) = ([4, 5], 1.3);
    let x0 = values(20, 3);
    let w = Tensor::from_vec(values(20, 4), dims, &dev).unwrap();
    let loss = |x: &Tensor, f: &dyn Fn(&Tensor, f64) -> Result<Tensor>| {
        f(x, scale).unwrap().mul(&w).unwrap().sum_all().unwrap()
    };
    let x = Tensor::from_vec(x0.clone(), dims, &dev)
        .unwrap()
        .require_grad();
    let g = loss(&x, &scaled_softmax).backward().unwrap();
    let got = g.get(&x).unwrap().to_vec::<f32>().unwrap();
    let g2 = loss(&x, &composed).backward().unwrap();
    close(
        "vs composed",
        &g2.get(&x).unwrap().to_vec::<f32>().unwrap(),
        &got,
        1e-5,
    );
    // central differences in f64 on the f32 op: eps large enough for f32 rounding
    let eps = 1e-2;
    let at = |v: Vec<f32>| -> f64 {
        let t = Tensor::from_vec(v, dims, &dev).unwrap();
        loss(&t, &scaled_softmax).to_vec::<f32>().unwrap()[0] as f64
    };
    for i in 0..20 {
        let (mut up, mut down) = (x0.clone(), x0.clone());
        up[i] += eps;
        down[i] -= eps;
        let fd = (at(up) - at(down)) / (2.0 * eps as f64);
        assert!(
            (fd - got[i] as f64).abs() < 2e-3,
            "element {i}: fd {fd}, autodiff {}",
            got[i]
        );
    }
}

/// A linear layer, then the custom op registered as `op`.
#[derive(kiln_core::nn::Module)]
struct Head {
    fc: Linear,
    #[module(skip)]
    op: &'static str,
}

impl Forward for Head {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let attrs = Attrs::from([("scale".into(), 0.5)]);
        Tensor::custom(self.op, attrs, &[&self.fc.forward(x)?])
    }
}

#[test]
fn a_saved_model_names_its_custom_op_and_loads_only_where_it_is_registered() {
    let dev = Device::cpu();
    // a name of its own: other tests run in parallel and keep theirs registered
    struct Renamed;
    impl CustomOp for Renamed {
        fn name(&self) -> &str {
            "test_saved_softmax"
        }
        fn infer(&self, a: &Attrs, i: &[Meta]) -> Result<Meta> {
            ScaledSoftmax.infer(a, i)
        }
        fn cpu(&self, a: &Attrs, i: &[TensorData], o: &Meta) -> Result<TensorData> {
            ScaledSoftmax.cpu(a, i, o)
        }
    }
    register_op(Arc::new(Renamed)).unwrap();
    let mut init = Init::new(&dev, 7);
    let mut m = Head {
        fc: Linear::new(&mut init, 6, 4).unwrap(),
        op: "test_saved_softmax",
    };
    let x = Tensor::from_vec(values(18, 5), [3, 6], &dev).unwrap();
    let want = m.forward(&x).unwrap().to_vec::<f32>().unwrap();
    let bytes = save_model(&mut m, &x, &BTreeMap::new()).unwrap();
    let model = Model::load(&bytes, &dev).unwrap();
    assert_eq!(model.graph().custom_ops(), ["test_saved_softmax"]);
    let node = model
        .graph()
        .nodes
        .iter()
        .find(|n| matches!(n.op, Op::Custom(_)));
    let Some(Op::Custom(call)) = node.map(|n| &n.op) else {
        panic!("no custom node")
    };
    assert_eq!(call.attrs, Attrs::from([("scale".into(), 0.5)]));
    // another batch size through the dynamic batch axis
    close(
        "loaded",
        &want,
        &model.forward(&x).unwrap().to_vec::<f32>().unwrap(),
        0.0,
    );
    let x5 = Tensor::from_vec(values(30, 6), [5, 6], &dev).unwrap();
    close(
        "batch 5",
        &m.forward(&x5).unwrap().to_vec::<f32>().unwrap(),
        &model.forward(&x5).unwrap().to_vec::<f32>().unwrap(),
        0.0,
    );

    assert!(unregister_op("test_saved_softmax"));
    let e = Model::load(&bytes, &dev).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    let msg = e.to_string();
    assert!(
        msg.contains("[test_saved_softmax]") && msg.contains("register"),
        "{msg}"
    );
    // running a model loaded while it was registered fails the same way once it is gone
    let e = model.forward(&x).unwrap_err().to_string();
    assert!(
        e.contains("test_saved_softmax: is a custom op not registered"),
        "{e}"
    );
}

#[test]
fn the_derived_module_traces_too() {
    let dev = setup();
    let mut init = Init::new(&dev, 1);
    let mut m = Head {
        fc: Linear::new(&mut init, 3, 5).unwrap(),
        op: NAME,
    };
    let x = Tensor::from_vec(values(6, 8), [2, 3], &dev).unwrap();
    let bytes = save_model(&mut m, &x, &BTreeMap::new()).unwrap();
    let model = Model::load(&bytes, &dev).unwrap();
    assert_eq!(model.graph().custom_ops(), [NAME]);
    close(
        "traced",
        &m.forward(&x).unwrap().to_vec::<f32>().unwrap(),
        &model.forward(&x).unwrap().to_vec::<f32>().unwrap(),
        0.0,
    );
}

#[test]
fn errors_name_the_op_and_what_was_expected() {
    let dev = setup();
    let x = Tensor::from_vec(values(6, 9), [2, 3], &dev).unwrap();
    let e = Tensor::custom("no_such_op", Attrs::new(), &[&x]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    let msg = e.to_string();
    assert!(
        msg.starts_with("no_such_op: is a custom op not registered") && msg.contains("register_op"),
        "{msg}"
    );
    assert!(registered_ops().contains(&NAME.to_string()));

    // the op's own rule: a missing attribute, a wrong dtype, a wrong arity
    let e = Tensor::custom(NAME, Attrs::new(), &[&x])
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs attribute \"scale\""), "{e}");
    let i = x.cast(DType::I32).unwrap();
    let e = scaled_softmax(&i, 1.0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DType);
    assert!(
        e.to_string().starts_with("scaled_softmax: expects an f32"),
        "{e}"
    );
    let attrs = Attrs::from([("scale".into(), 1.0)]);
    let e = Tensor::custom(NAME, attrs, &[&x, &x])
        .unwrap_err()
        .to_string();
    assert!(e.contains("expects 1 input, got 2"), "{e}");
    let inf = Attrs::from([("scale".into(), f64::INFINITY)]);
    let e = Tensor::custom(NAME, inf, &[&x]).unwrap_err().to_string();
    assert!(e.contains("must be finite"), "{e}");

    // names that could not be stored or called
    struct Named(&'static str);
    impl CustomOp for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn infer(&self, _: &Attrs, i: &[Meta]) -> Result<Meta> {
            Ok(i[0].clone())
        }
        fn cpu(&self, a: &Attrs, i: &[TensorData], _: &Meta) -> Result<TensorData> {
            match a.contains_key("flat") {
                // the wrong shape: the backend names it
                true => TensorData::new(i[0].to_vec::<f32>()?, [i[0].shape().numel()]),
                false => Ok(i[0].clone()),
            }
        }
    }
    for bad in ["", "has space", "semi;colon"] {
        let e = register_op(Arc::new(Named(bad))).unwrap_err().to_string();
        assert!(e.contains("letters, digits"), "{bad:?}: {e}");
    }
    register_op(Arc::new(Named("test_flat"))).unwrap();
    // kiln's own ops (fusion's kernels) run like any other but are not listed or removable
    register_op(Arc::new(Named("kiln.test_own"))).unwrap();
    assert!(!registered_ops().iter().any(|n| n.starts_with(KILN_PREFIX)));
    assert!(!unregister_op("kiln.test_own"));
    let own = Tensor::custom("kiln.test_own", Attrs::new(), &[&x]).unwrap();
    assert_eq!(own.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    let flat = Attrs::from([("flat".into(), 1.0)]);
    let e = Tensor::custom("test_flat", flat, &[&x])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("returned a f32 tensor of shape [6], expected f32 of shape [2, 3]"),
        "{e}"
    );
    // and no backward: the gradient says so
    let xg = x.require_grad();
    let y = Tensor::custom("test_flat", Attrs::new(), &[&xg]);
    let e = y
        .and_then(|y| y.sum_all()?.backward())
        .unwrap_err()
        .to_string();
    assert!(e.contains("has no gradient"), "{e}");
    // the op's name reaches messages of kiln's own checks too
    assert_eq!(Op::custom("test_flat", Attrs::new()).name(), "test_flat");
    assert_eq!(
        Op::custom("test_flat", Attrs::new())
            .infer(&[(DType::F32, Shape::from([2]))])
            .unwrap(),
        [(DType::F32, Shape::from([2]))]
    );
}
