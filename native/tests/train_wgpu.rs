//! Training the MNIST CNN on wgpu: a few Adam steps on real MNIST batches from the same seed as
//! on the CPU oracle give the same losses (within f32 reordering error) and the loss falls.
//! Skips with a notice when this machine has no wgpu adapter.

use kiln::core::Device;
use kiln::core::nn::{Forward, Init, loss};
use kiln::core::optim::{Adam, Optimizer};
use kiln::data::mnist::{self, Mnist, batch};
use kiln::models::MnistCnn;

/// Images per step and steps per run: small, so that lavapipe (Vulkan on the CPU) runs it fast.
const BATCH: usize = 32;
const STEPS: usize = 8;

/// The mean loss of each of `STEPS` steps over consecutive training batches, from seed 3.
fn losses(data: &Mnist, device: &Device) -> Vec<f64> {
    let mut model = MnistCnn::new(&mut Init::new(device, 3)).unwrap();
    let mut adam = Adam::new(1e-3);
    (0..STEPS)
        .map(|s| {
            let idx: Vec<usize> = (s * BATCH..(s + 1) * BATCH).collect();
            let mut step = || -> kiln::core::Result<f64> {
                let (x, y) = batch(&data.train, &idx, device)?;
                let loss = loss::cross_entropy(&model.forward(&x)?, &y, 0.0)?;
                adam.step(&mut model, &loss.backward()?)?;
                loss.to_scalar()
            };
            step().unwrap_or_else(|e| panic!("step {s} on {}: {e}", device.name()))
        })
        .collect()
}

#[test]
fn wgpu_training_steps_match_the_cpu_and_the_loss_falls() {
    let gpu = match kiln::device::select("wgpu") {
        Ok(d) => d,
        Err(e) => {
            eprintln!("train_wgpu: SKIPPED, no wgpu adapter: {e}");
            return;
        }
    };
    eprintln!("train_wgpu: running on {}", gpu.name());
    let data = Mnist::load(&mnist::data_dir(None).unwrap()).unwrap();
    let want = losses(&data, &Device::cpu());
    let got = losses(&data, &gpu);
    eprintln!("cpu  losses {want:?}\nwgpu losses {got:?}");
    // The first loss depends only on the initial weights (drawn by the same Philox generator on
    // both devices) and the forward pass: f32 sums in another order, about 1e-6 relative. Every
    // later step adds Adam updates computed from gradients with such errors; Adam divides by
    // sqrt(v), so a weight whose gradient is near zero can move by up to lr = 1e-3 differently
    // on the two devices. 2e-3 relative on a loss near 2 covers that over 8 steps and is still
    // far below a real error (a wrong kernel changes the loss in the first or second digit).
    assert!(
        (want[0] - got[0]).abs() <= 1e-4 * want[0].abs(),
        "step 0: cpu {} vs wgpu {}",
        want[0],
        got[0]
    );
    for (s, (w, g)) in want.iter().zip(&got).enumerate() {
        assert!(
            (w - g).abs() <= 2e-3 * w.abs(),
            "step {s}: cpu loss {w} vs wgpu {g}"
        );
    }
    // Eight steps of Adam at lr 1e-3 take the untrained network (loss near ln 10 = 2.30) well
    // down on MNIST.
    let first = got[0];
    let last2 = (got[STEPS - 1] + got[STEPS - 2]) / 2.0;
    assert!(first > 2.0, "untrained loss {first}");
    assert!(
        last2 < first - 0.3,
        "loss did not fall: first {first}, last two steps {last2} ({got:?})"
    );
}
