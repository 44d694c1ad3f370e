//! Where the time goes: [`Profiler`] wraps any device in a backend that times every op it runs
//! and adds the time up by op name, or by op name and input shapes (a decorator, so no backend
//! knows about it).
//!
//! ```
//! use kiln::core::{DType, Device, Tensor};
//! use kiln::profile::Profiler;
//! let (device, profiler) = Profiler::wrap(&Device::cpu());
//! let x = Tensor::rand_uniform([64, 64], -1.0, 1.0, 7, DType::F32, &device)?;
//! let y = x.matmul(&x)?.relu()?;
//! y.to_data()?;
//! let ops = profiler.report();
//! assert!(ops.iter().any(|o| o.op == "matmul" && o.calls == 1));
//! println!("{}", profiler.table(1));
//! # Ok::<(), kiln::core::Error>(())
//! ```

use crate::core::op::Meta;
use crate::core::{Backend, ReadFuture, Storage, View};
use crate::core::{DType, Device, Op, Result, TensorData};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The time spent in one kind of op.
#[derive(Clone, Debug, PartialEq)]
pub struct OpTime {
    /// The op's name (`Op::name`: `conv2d`, `matmul`, `add`, ...), followed by its inputs'
    /// shapes when timed [`Profiler::wrap_by_shape`]: `matmul [64, 256, 384]·[384, 1536]~`,
    /// `~` marking a view that is not contiguous (a transpose, a slice).
    pub op: String,
    /// How many times it ran.
    pub calls: u64,
    /// Total time in it.
    pub total: Duration,
}

/// Per-op timings of everything run on the device [`Profiler::wrap`] returned.
pub struct Profiler {
    inner: Device,
    by_shape: bool,
    times: Mutex<BTreeMap<String, (u64, Duration)>>,
}

impl Profiler {
    /// A device that runs on `device` and times each op into the returned profiler.
    ///
    /// On an asynchronous backend (a GPU) it waits for the queue before and after every op, so
    /// each op's time is its own; that serialises the work, so the total is higher than an
    /// unprofiled run's.
    pub fn wrap(device: &Device) -> (Device, Arc<Profiler>) {
        Self::wrap_keyed(device, false)
    }

    /// [`Profiler::wrap`], adding the time up by op and input shapes: which of the matmuls is
    /// the slow one.
    ///
    /// ```
    /// use kiln::core::{DType, Device, Tensor};
    /// let (device, profiler) = kiln::profile::Profiler::wrap_by_shape(&Device::cpu());
    /// let x = Tensor::rand_uniform([3, 5], -1.0, 1.0, 7, DType::F32, &device)?;
    /// x.matmul(&x.t()?)?.to_data()?;
    /// assert_eq!(profiler.report()[0].op, "matmul [3, 5]·[5, 3]~");
    /// # Ok::<(), kiln::core::Error>(())
    /// ```
    pub fn wrap_by_shape(device: &Device) -> (Device, Arc<Profiler>) {
        Self::wrap_keyed(device, true)
    }

    /// [`Profiler::wrap_by_shape`] when `by_shape`, else [`Profiler::wrap`].
    pub(crate) fn wrap_keyed(device: &Device, by_shape: bool) -> (Device, Arc<Profiler>) {
        let p = Arc::new(Profiler {
            inner: device.clone(),
            by_shape,
            times: Mutex::new(BTreeMap::new()),
        });
        (Device::new(Timed(p.clone())), p)
    }

    /// Forgets the timings so far (e.g. after warm-up runs).
    pub fn reset(&self) {
        self.lock().clear();
    }

    /// The timings so far, the most expensive op first.
    pub fn report(&self) -> Vec<OpTime> {
        let mut ops: Vec<OpTime> = self
            .lock()
            .iter()
            .map(|(op, &(calls, total))| OpTime {
                op: op.clone(),
                calls,
                total,
            })
            .collect();
        ops.sort_by(|a, b| b.total.cmp(&a.total).then(a.op.cmp(&b.op)));
        ops
    }

    /// [`Profiler::report`] as a Markdown table, per run of `runs` (the runs timed since the
    /// last reset): op, calls, ms, share of the ops' time, µs per call.
    pub fn table(&self, runs: u64) -> String {
        let ops = self.report();
        let all: f64 = ops.iter().map(|o| o.total.as_secs_f64()).sum();
        let runs = runs.max(1);
        let mut s = String::from(
            "| op | calls per run | ms per run | share | µs per call |\n| --- | ---: | ---: | ---: | ---: |\n",
        );
        for o in &ops {
            let t = o.total.as_secs_f64();
            s += &format!(
                "| {} | {} | {:.3} | {:.1}% | {:.1} |\n",
                o.op,
                o.calls as f64 / runs as f64,
                t * 1e3 / runs as f64,
                100.0 * t / all.max(1e-12),
                t * 1e6 / o.calls.max(1) as f64
            );
        }
        s
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (u64, Duration)>> {
        // A panic while holding the lock leaves only plain counters behind: still usable.
        self.times.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The backend [`Profiler::wrap`] hands out.
struct Timed(Arc<Profiler>);

impl std::fmt::Debug for Timed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Timed({})", self.0.inner.name())
    }
}

impl Backend for Timed {
    fn name(&self) -> String {
        self.0.inner.name()
    }

    fn upload(&self, data: &TensorData) -> Result<Storage> {
        self.0.inner.backend().upload(data)
    }

    fn execute(&self, op: &Op, inputs: &[View<'_>], outputs: &[Meta]) -> Result<Vec<Storage>> {
        let inner = self.0.inner.backend();
        inner.synchronize()?;
        let start = Instant::now();
        let out = inner.execute(op, inputs, outputs)?;
        inner.synchronize()?;
        let took = start.elapsed();
        let key = match self.0.by_shape && !inputs.is_empty() {
            // a view that is not contiguous (a transpose, a slice) is marked: its kernel differs
            true => {
                let shapes: Vec<String> = (inputs.iter())
                    .map(|v| {
                        let mark = if v.layout.is_contiguous() { "" } else { "~" };
                        format!("{:?}{mark}", v.layout.shape().dims())
                    })
                    .collect();
                format!("{} {}", op.name(), shapes.join("·"))
            }
            false => op.name().to_string(),
        };
        let mut times = self.0.lock();
        let entry = times.entry(key).or_default();
        entry.0 += 1;
        entry.1 += took;
        Ok(out)
    }

    fn read(&self, input: View<'_>) -> ReadFuture {
        self.0.inner.backend().read(input)
    }

    fn supports(&self, dtype: DType) -> bool {
        self.0.inner.backend().supports(dtype)
    }

    fn allocated_bytes(&self) -> Option<u64> {
        self.0.inner.backend().allocated_bytes()
    }

    fn synchronize(&self) -> Result<()> {
        self.0.inner.backend().synchronize()
    }
}

/// A training reporter that restarts a [`Profiler`]'s timings once `step` optimizer steps are
/// done, so that the table leaves out the first steps (kernel compilation, warm-up).
pub struct FromStep {
    profiler: Arc<Profiler>,
    step: u64,
}

impl FromStep {
    /// Restarts `profiler` after step `step`.
    pub fn new(profiler: Arc<Profiler>, step: u64) -> Self {
        FromStep { profiler, step }
    }
}

impl crate::learn::report::Reporter for FromStep {
    fn report(&mut self, event: &crate::learn::report::Event<'_>) -> Result<()> {
        if let crate::learn::report::Event::Batch { step, .. } = event
            && *step == self.step
        {
            self.profiler.reset();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Tensor;

    #[test]
    fn ops_are_counted_by_name_and_results_are_unchanged() {
        let (dev, prof) = Profiler::wrap(&Device::cpu());
        let cpu = Device::cpu();
        let run = |d: &Device| -> TensorData {
            let a = Tensor::rand_uniform([5, 7], -1.0, 1.0, 3, DType::F32, d).unwrap();
            let b = Tensor::rand_uniform([7, 3], -1.0, 1.0, 4, DType::F32, d).unwrap();
            let y = a
                .matmul(&b)
                .unwrap()
                .relu()
                .unwrap()
                .add(&a.matmul(&b).unwrap());
            y.unwrap().to_data().unwrap()
        };
        assert_eq!(run(&dev), run(&cpu));
        let ops = prof.report();
        let calls = |name: &str| ops.iter().find(|o| o.op == name).map(|o| o.calls);
        assert_eq!(calls("matmul"), Some(2));
        assert_eq!(calls("relu"), Some(1));
        assert_eq!(calls("add"), Some(1));
        assert_eq!(calls("rand_uniform"), Some(2));
        let table = prof.table(1);
        assert!(table.lines().count() == 2 + ops.len(), "{table}");
        prof.reset();
        assert!(prof.report().is_empty());
    }

    #[test]
    fn ops_by_shape_keep_shapes_apart_and_mark_views() -> Result<()> {
        let (dev, prof) = Profiler::wrap_by_shape(&Device::cpu());
        let a = Tensor::rand_uniform([5, 7], -1.0, 1.0, 3, DType::F32, &dev)?;
        let b = Tensor::rand_uniform([3, 7], -1.0, 1.0, 4, DType::F32, &dev)?;
        a.matmul(&b.t()?)?.to_data()?;
        a.matmul(&b.t()?)?.to_data()?;
        b.matmul(&a.t()?)?.to_data()?;
        let ops = prof.report();
        let calls = |name: &str| ops.iter().find(|o| o.op == name).map(|o| o.calls);
        assert_eq!(calls("matmul [5, 7]·[7, 3]~"), Some(2), "{ops:?}");
        assert_eq!(calls("matmul [3, 7]·[7, 5]~"), Some(1), "{ops:?}");
        assert_eq!(calls("rand_uniform"), Some(2), "{ops:?}");
        Ok(())
    }
}
