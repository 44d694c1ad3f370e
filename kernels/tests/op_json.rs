//! Every op survives the model file's JSON: `Op`'s `Deserialize` is written by hand
//! (`core/src/op/json.rs`), so a variant missing there fails here, for the sample of each
//! variant that `plan::samples` holds (its own test makes sure there is one per variant).

use kiln_core::Op;

#[test]
fn every_op_sample_round_trips_through_json() {
    let mut ops: Vec<Op> = kiln_kernels::plan::samples()
        .into_iter()
        .map(|(op, _)| op)
        .collect();
    ops.extend([Op::Softmax {
        axis: 0,
        causal: true,
    }]);
    for op in ops {
        let json = serde_json::to_string(&op).unwrap();
        let back: Op = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{json}: {e}"));
        assert_eq!(back, op, "{json}");
    }
}
