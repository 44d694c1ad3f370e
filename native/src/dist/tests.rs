use super::*;
use crate::core::nn::{Forward, Init, Linear, ReLU, Sequential, loss};
use crate::core::optim::Adam;
use crate::core::{Device, Tensor};
use crate::data::loader::{DataLoader, Dataset};
use crate::learn::report::JsonLines;
use crate::learn::{Learner, LearnerConfig, Output};

const N: usize = 64;
const PER_RANK: usize = 8;

/// Example `i`: 3 inputs and 2 targets.
fn example(i: usize) -> (Vec<f32>, Vec<f32>) {
    let t = i as f32 / N as f32;
    let x = vec![t, (7.0 * t).sin(), 1.0 - t * t];
    let y = vec![2.0 * x[0] - x[1], x[2] * x[1] + 0.5];
    (x, y)
}

/// The examples in index order, or (`union`) in the order a 2-replica run groups them: the
/// reference's batch `b` of 16 is batch `b` of 8 of both shards.
struct Points {
    union: bool,
}

impl Dataset for Points {
    type Batch = (Vec<f32>, Vec<f32>);
    fn len(&self) -> usize {
        N
    }
    fn batch(&self, idx: &[usize], _: u64) -> Result<Self::Batch> {
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for &j in idx {
            let i = if self.union {
                let (b, k) = (j / (2 * PER_RANK), j % (2 * PER_RANK));
                (k / PER_RANK) * (N / 2) + b * PER_RANK + k % PER_RANK
            } else {
                j
            };
            let (a, b) = example(i);
            x.extend(a);
            y.extend(b);
        }
        Ok((x, y))
    }
}

fn model(seed: u64) -> Sequential {
    let mut init = Init::new(&Device::cpu(), seed);
    Sequential::new()
        .with(Linear::new(&mut init, 3, 8).unwrap())
        .with(ReLU)
        .with(Linear::new(&mut init, 8, 2).unwrap())
}

fn step(model: &mut Sequential, (x, y): &(Vec<f32>, Vec<f32>)) -> Result<Output> {
    let dev = Device::cpu();
    let n = x.len() / 3;
    let x = Tensor::from_vec(x.clone(), [n, 3], &dev)?;
    let y = Tensor::from_vec(y.clone(), [n, 2], &dev)?;
    let err = model.forward(&x)?.sub(&y)?;
    // A figure summed over samples: the squared error of the first output.
    let e0 = err.narrow(1, 0, 1)?;
    let first = e0.mul(&e0)?.sum_all()?.detach();
    Ok(Output::new(loss::mse(&err, &err.zeros_like()?)?, n).with_sum("sq0", first))
}

fn config() -> LearnerConfig {
    LearnerConfig {
        epochs: 2,
        read_every: 3,
        ..LearnerConfig::default()
    }
}

fn weights(m: &Sequential) -> Vec<Vec<f32>> {
    m.named_tensors()
        .into_iter()
        .map(|(_, t)| t.to_vec::<f32>().unwrap())
        .collect()
}

#[test]
fn two_replicas_train_like_one_on_the_union_batches() {
    let dir = tempfile::tempdir().unwrap();
    let logs: Vec<_> = (0..2)
        .map(|r| dir.path().join(format!("log{r}.jsonl")))
        .collect();
    let ckpt: Vec<_> = (0..2)
        .map(|r| dir.path().join(format!("ckpt{r}")))
        .collect();
    let (logs2, ckpt2) = (logs.clone(), ckpt.clone());
    let runs = run_replicas(Host::group(2), move |rank, c| {
        // Different initial weights per rank: rank 0's must reach both.
        let loader = DataLoader::new(Points { union: false }, PER_RANK).shard(rank, 2);
        let mut l = Learner::new(
            model(10 + rank as u64),
            Adam::new(0.01),
            LearnerConfig {
                checkpoint_dir: Some(ckpt2[rank].clone()),
                ..config()
            },
        )
        .collective(Box::new(c))
        .reporter(JsonLines::new(&logs2[rank]));
        l.fit(&loader, None, step)?;
        Ok((weights(&l.model), l.history))
    })
    .unwrap();

    let loader = DataLoader::new(Points { union: true }, 2 * PER_RANK);
    let mut one = Learner::new(model(10), Adam::new(0.01), config());
    one.fit(&loader, None, step).unwrap();

    // The replicas are identical to the bit, and match one replica on the union batches.
    assert_eq!(runs[0].0, runs[1].0);
    let before = weights(&model(10));
    let want = weights(&one.model);
    assert_ne!(want, before, "training changed nothing");
    for (a, b) in runs[0].0.iter().flatten().zip(want.iter().flatten()) {
        assert!((a - b).abs() < 1e-5, "{a} vs {b}");
    }
    // Every replica's figures are the sums over both shards: the reference's means.
    for (rank, (_, history)) in runs.iter().enumerate() {
        assert_eq!(history.len(), 2);
        for (got, want) in history.iter().zip(&one.history) {
            for m in ["train_loss", "train_sq0"] {
                let (g, w) = (got.get(m).unwrap(), want.get(m).unwrap());
                assert!(
                    (g - w).abs() < 1e-5 * w.abs().max(1.0),
                    "rank {rank} {m}: {g} vs {w}"
                );
            }
        }
    }
    // Only rank 0 reports and writes checkpoints.
    let read = crate::learn::report::Log::read(&logs[0]).unwrap();
    assert_eq!(read.epochs.len(), 2);
    assert!(!logs[1].exists());
    assert_eq!(crate::learn::checkpoints(&ckpt[0]).unwrap().len(), 2);
    assert!(crate::learn::checkpoints(&ckpt[1]).unwrap().is_empty());
}

/// Two replicas on `Points`, resuming from `resume` when given; (weights, history) by rank.
fn two_replicas(
    ckpt: &std::path::Path,
    max_steps: Option<u64>,
    resume: bool,
) -> Vec<(Vec<Vec<f32>>, Vec<crate::learn::report::EpochLine>)> {
    let ckpt = ckpt.to_path_buf();
    run_replicas(Host::group(2), move |rank, c| {
        let loader = DataLoader::new(Points { union: false }, PER_RANK)
            .shuffle(4)
            .shard(rank, 2);
        let config = LearnerConfig {
            checkpoint_dir: Some(ckpt.clone()),
            max_steps,
            ..config()
        };
        let mut l = Learner::new(model(3), Adam::new(0.01), config).collective(Box::new(c));
        if resume {
            l.resume(&ckpt)?;
        }
        l.fit(&loader, None, step)?;
        Ok((weights(&l.model), l.history))
    })
    .unwrap()
}

#[test]
fn a_data_parallel_run_resumes_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let whole = two_replicas(&dir.path().join("a"), None, false);
    // Stopped at step 5, between two reads (every 3 batches), then resumed by both replicas.
    let b = dir.path().join("b");
    two_replicas(&b, Some(5), false);
    let resumed = two_replicas(&b, None, true);
    assert_eq!(resumed[0].0, whole[0].0);
    assert_eq!(resumed[1].0, whole[0].0);
    // 4 steps an epoch: the second epoch's figures, its first step's from before the stop
    // (summed over both replicas in the checkpoint), are the same.
    let (g, w) = (resumed[0].1.last().unwrap(), whole[0].1.last().unwrap());
    assert_eq!((g.epoch, w.epoch), (2, 2));
    for m in ["train_loss", "train_sq0"] {
        let (g, w) = (g.get(m).unwrap(), w.get(m).unwrap());
        assert!((g - w).abs() < 1e-5 * w.abs().max(1.0), "{m}: {g} vs {w}");
    }
}

#[test]
fn a_stop_on_one_replica_stops_all_at_the_same_step() {
    let runs = run_replicas(Host::group(2), |rank, c| {
        let loader = DataLoader::new(Points { union: false }, 2).shard(rank, 2);
        let mut l = Learner::new(model(1), Adam::new(0.01), config()).collective(Box::new(c));
        if rank == 1 {
            l.stop_flag()
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let outcome = l.fit(&loader, None, step)?;
        Ok((outcome, l.state.step))
    })
    .unwrap();
    // The flag is seen at the first read (every 3 batches), by both.
    assert_eq!(runs[0], (crate::learn::report::Outcome::Stopped, 3));
    assert_eq!(runs[0], runs[1]);
}

#[test]
fn host_sums_and_broadcasts_in_rank_order() {
    let out = run_replicas(Host::group(3), |rank, mut c| {
        let dev = Device::cpu();
        let r = rank as f32;
        let a = Tensor::from_vec(vec![r, 10.0 * r, 1.0, 2.0], [2, 2], &dev)?;
        let b = Tensor::from_vec(vec![r + 0.5], [1], &dev)?;
        let sum = c.all_reduce_sum(&[a.clone(), b])?;
        let got = c.broadcast(&[a], 2)?;
        assert_eq!(sum[0].dims(), [2, 2]);
        Ok((
            sum[0].to_vec::<f32>()?,
            sum[1].to_vec::<f32>()?,
            got[0].to_vec::<f32>()?,
        ))
    })
    .unwrap();
    for o in &out {
        assert_eq!(o.0, [3.0, 30.0, 3.0, 6.0]);
        assert_eq!(o.1, [4.5]);
        assert_eq!(o.2, [2.0, 20.0, 1.0, 2.0]);
    }
}

#[test]
fn failures_are_errors_naming_the_replicas() {
    // Rank 1 fails before the collective rank 0 waits in: rank 0 gets an error, not a hang.
    let err = run_replicas(Host::group(2), |rank, mut c| {
        if rank == 1 {
            return Err(Error::invalid("test", "rank 1 gave up"));
        }
        let t = Tensor::from_vec(vec![1.0f32], [1], &Device::cpu())?;
        c.all_reduce_sum(&[t]).map(|_| ())
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("replica 0") && err.contains("waited for replica 1"),
        "{err}"
    );

    let e = replicas("wgpu", 2).err().unwrap().to_string();
    assert!(
        e.contains("expected --device cuda") && e.contains("\"wgpu\""),
        "{e}"
    );
    let e = replicas("cpu", 0).err().unwrap().to_string();
    assert!(e.contains("found 0"), "{e}");
    #[cfg(not(feature = "nccl"))]
    {
        let e = replicas("cuda", 2).err().unwrap().to_string();
        assert!(e.contains("rebuild with `--features nccl`"), "{e}");
    }
    assert_eq!(replicas("cpu", 3).unwrap()[2].1.rank(), 2);

    let mut g = Host::group(1);
    let t = Tensor::from_vec(vec![1i32], [1], &Device::cpu()).unwrap();
    let e = g[0]
        .all_reduce_sum(std::slice::from_ref(&t))
        .unwrap_err()
        .to_string();
    assert!(e.contains("expected f32") && e.contains("i32"), "{e}");
    let t = t.cast(DType::F32).unwrap();
    let e = g[0].broadcast(&[t], 1).unwrap_err().to_string();
    assert!(e.contains("below 1, found 1"), "{e}");
}

#[test]
fn buckets_hold_at_most_the_limit_or_one_large_item() {
    assert_eq!(buckets(&[4, 4, 4, 10, 2], 8), [0..2, 2..3, 3..4, 4..5]);
    assert_eq!(buckets(&[1, 1, 1], 8), vec![0..3usize]);
    assert!(buckets(&[], 8).is_empty());
}

#[test]
fn shards_are_disjoint_and_cover_the_epoch() {
    let plans: Vec<Vec<usize>> = (0..2)
        .map(|r| {
            let l = DataLoader::new(Points { union: false }, 5)
                .shuffle(3)
                .shard(r, 2);
            l.plan(1).concat()
        })
        .collect();
    let mut all = plans.concat();
    all.sort();
    assert_eq!(all, (0..N).collect::<Vec<_>>());
}

/// The environment of `pairs`, as `Member::from_vars` reads it.
fn env<'a>(pairs: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |k| (pairs.iter().find(|(name, _)| *name == k)).map(|(_, v)| v.to_string())
}

#[test]
fn a_member_reads_its_place_from_the_launchers_variables() {
    assert_eq!(Member::from_vars(env(&[])).unwrap(), None);
    let m = Member::from_vars(env(&[(RANK_VAR, "1"), (WORLD_VAR, "3"), (ID_VAR, "ab")]));
    let want = Member {
        rank: 1,
        world: 3,
        id: "ab".into(),
    };
    assert_eq!(m.unwrap(), Some(want));
    for (pairs, expect) in [
        (
            &[(RANK_VAR, "x"), (WORLD_VAR, "2"), (ID_VAR, "ab")][..],
            "KILN_DIST_RANK to be a number, found \"x\"",
        ),
        (
            &[(RANK_VAR, "2"), (WORLD_VAR, "2"), (ID_VAR, "ab")][..],
            "below KILN_DIST_WORLD = 2, found 2",
        ),
        (
            &[(RANK_VAR, "0"), (ID_VAR, "ab")][..],
            "KILN_DIST_WORLD to be a number, found \"\"",
        ),
        (
            &[(RANK_VAR, "0"), (WORLD_VAR, "2")][..],
            "KILN_DIST_ID is not",
        ),
    ] {
        let e = Member::from_vars(env(pairs)).unwrap_err().to_string();
        assert!(e.contains(expect), "{e}");
    }
}

#[test]
fn a_failing_process_stops_the_others_and_names_its_rank() {
    let sh = |script: &str| Command::new("sh").args(["-c", script]).spawn().unwrap();
    let started = std::time::Instant::now();
    // Rank 1 would run for a minute: it must be stopped once rank 2 fails.
    let e = supervise(vec![sh("exit 0"), sh("sleep 60"), sh("sleep 0.2; exit 3")])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("process 2 of 3 failed") && e.contains('3'),
        "{e}"
    );
    assert!(started.elapsed().as_secs() < 30, "{:?}", started.elapsed());
    supervise(vec![sh("exit 0"), sh("sleep 0.1")]).unwrap();
}
