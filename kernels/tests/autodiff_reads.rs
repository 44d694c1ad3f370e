//! Every backward rule reads only what the autodiff graph keeps (`rules::reads` in kiln-core):
//! each planner sample's op on the CPU, its float inputs made by an add and its output read by
//! one (adds keep no values), runs backward without meeting a data-less copy. A rule that starts
//! reading its output or an input without saying so in `reads` fails here.

use kiln_core::{DType, Device, Result, Tensor};

#[test]
fn backward_rules_read_only_what_the_graph_keeps() -> Result<()> {
    let cpu = Device::cpu();
    let mut checked = 0;
    for (k, (op, metas)) in kiln_kernels::plan::samples().into_iter().enumerate() {
        let float = |d: DType| d == DType::F32;
        if !metas.iter().any(|m| float(m.dtype)) {
            continue;
        }
        let seed = k as u64;
        let mut inputs = Vec::new();
        for m in &metas {
            let shape = m.layout.shape().clone();
            inputs.push(match float(m.dtype) {
                true => Tensor::rand_uniform(shape, 0.5, 1.5, seed, DType::F32, &cpu)?
                    .require_grad()
                    .add_scalar(0.0)?,
                // small integers: valid indices for the gathers and scatters
                false => Tensor::rand_uniform(shape, 0.0, 1.99, seed, DType::F32, &cpu)?
                    .floor()?
                    .cast(m.dtype)?,
            });
        }
        let refs: Vec<&Tensor> = inputs.iter().collect();
        // samples whose random values the op refuses (or several outputs) are not this test's
        let Ok(outputs) = Tensor::apply_many(op.clone(), &refs, None) else {
            continue;
        };
        let [y] = outputs.as_slice() else { continue };
        if !float(y.dtype()) || !y.requires_grad() {
            continue;
        }
        let loss = y.add_scalar(0.0)?.sum_all()?;
        if let Err(e) = loss.backward() {
            let e = e.to_string();
            assert!(
                !e.contains("without data"),
                "backward of {}: {e}",
                op.name()
            );
            continue;
        }
        checked += 1;
    }
    // 179 when written
    assert!(checked >= 150, "only {checked} samples ran backward");
    Ok(())
}
