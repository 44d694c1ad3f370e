//! Data-parallel training: replicas of one model, one per device, each training on its shard of
//! the data ([`DataLoader::shard`](crate::data::loader::DataLoader::shard)) and summing
//! gradients and figures through a [`Collective`] after every step.
//!
//! - On CUDA GPUs, one process per GPU ([`launch`], [`Member`]), as PyTorch's DDP does: the
//!   launcher runs this program once per GPU with the same arguments and its rank in the
//!   environment, and each process joins one NCCL communicator. Threads in one process scaled
//!   badly: on 2 H200s, two replicas in one process with all communication switched off reached
//!   1.35x one GPU's images/s, two separate processes 2.0x (the CUDA driver serialises the
//!   threads' launches; kiln's steps are launch-bound at small batches).
//! - On the CPU ([`Host`]: tests and `--device cpu`), one thread per replica in one process
//!   ([`run_replicas`]), summing through host memory.
//! - Gradients go in flat buckets of at most [`BUCKET_BYTES`] ([`average_gradients`]), one
//!   collective call each, after the backward pass (no overlap with it).
//! - Every replica sums in the same order, so the replicas stay identical to the bit.

use crate::core::autodiff::{Gradients, no_grad};
use crate::core::nn::Module;
use crate::core::{DType, Device, Error, Result, Tensor};
use std::process::{Child, Command};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Gradient bytes per collective call (PyTorch DDP's default bucket is 25 MB).
pub const BUCKET_BYTES: usize = 25 << 20;

/// Sums and broadcasts among the replicas of a data-parallel run. Every rank must make the
/// same calls in the same order with tensors of the same shapes.
pub trait Collective: Send {
    /// This replica's index, `0..world`.
    fn rank(&self) -> usize;
    /// Replicas in the run.
    fn world(&self) -> usize;
    /// The element-wise sums of `tensors` (f32, on this replica's device) over all replicas.
    fn all_reduce_sum(&mut self, tensors: &[Tensor]) -> Result<Vec<Tensor>>;
    /// Replica `root`'s `tensors` (f32), on every replica.
    fn broadcast(&mut self, tensors: &[Tensor], root: usize) -> Result<Vec<Tensor>>;
}

/// Checks that `tensors` are f32 (what the collectives move).
pub fn check_f32(op: &str, tensors: &[Tensor]) -> Result<()> {
    match tensors.iter().find(|t| t.dtype() != DType::F32) {
        Some(t) => Err(Error::unsupported(
            op.to_string(),
            format!("expected f32 tensors, found {} {}", t.dtype(), t.shape()),
        )),
        None => Ok(()),
    }
}

/// `tensors` flattened into one fresh vector on their device (a buffer no other tensor shares).
pub fn flatten(tensors: &[Tensor]) -> Result<Tensor> {
    let flat: Vec<Tensor> = tensors
        .iter()
        .map(|t| t.detach().reshape([t.numel()]))
        .collect::<Result<_>>()?;
    Tensor::concat(&flat, 0)
}

/// The pieces of `flat` shaped as `like`.
pub fn unflatten(flat: &Tensor, like: &[Tensor]) -> Result<Vec<Tensor>> {
    let sizes: Vec<usize> = like.iter().map(Tensor::numel).collect();
    flat.split(&sizes, 0)?
        .into_iter()
        .zip(like)
        .map(|(p, t)| p.reshape(t.shape().clone()))
        .collect()
}

/// Consecutive groups of `bytes` (each of at most `max` bytes, or a single larger item).
pub fn buckets(bytes: &[usize], max: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut used) = (0, 0);
    for (i, &b) in bytes.iter().enumerate() {
        if i > start && used + b > max {
            out.push(start..i);
            (start, used) = (i, 0);
        }
        used += b;
    }
    if start < bytes.len() {
        out.push(start..bytes.len());
    }
    out
}

/// The trainable parameters of `model` that have a gradient in `grads`, in visiting order.
fn graded_params(model: &dyn Module, grads: &Gradients) -> Vec<Tensor> {
    let mut params = Vec::new();
    model.visit(&mut |_, p| {
        let t = p.tensor();
        if p.is_trainable() && grads.get(&t).is_some() {
            params.push(t);
        }
    });
    params
}

/// Replaces every gradient in `grads` by its mean over the replicas, in buckets of at most
/// [`BUCKET_BYTES`].
pub fn average_gradients(
    c: &mut dyn Collective,
    model: &dyn Module,
    grads: &mut Gradients,
) -> Result<()> {
    let params = graded_params(model, grads);
    let g: Vec<Tensor> = params
        .iter()
        .filter_map(|p| grads.get(p).cloned())
        .collect();
    let bytes: Vec<usize> = g.iter().map(|t| 4 * t.numel()).collect();
    let scale = 1.0 / c.world() as f64;
    no_grad(|| {
        for range in buckets(&bytes, BUCKET_BYTES) {
            // Scaled once per bucket rather than once per gradient.
            let flat = flatten(&g[range.clone()])?;
            let sum = c.all_reduce_sum(&[flat])?;
            let mean = sum
                .first()
                .ok_or_else(|| Error::invalid("all_reduce", "expected one sum, found none"))?
                .mul_scalar(scale)?;
            for (p, m) in params[range.clone()]
                .iter()
                .zip(unflatten(&mean, &g[range])?)
            {
                grads.insert(p, m);
            }
        }
        Ok(())
    })
}

/// Gives every replica rank 0's parameters and buffers (identical starting weights).
pub fn broadcast_model(c: &mut dyn Collective, model: &dyn Module) -> Result<()> {
    let mut params = Vec::new();
    model.visit(&mut |_, p| params.push((p.tensor(), p.is_trainable())));
    let f32s: Vec<usize> = (0..params.len())
        .filter(|&i| params[i].0.dtype() == DType::F32)
        .collect();
    let tensors: Vec<Tensor> = f32s.iter().map(|&i| params[i].0.clone()).collect();
    let got = no_grad(|| c.broadcast(&tensors, 0))?;
    let mut i = 0;
    let mut got = got.into_iter();
    model.visit(&mut |_, p| {
        if f32s.contains(&i)
            && let Some(t) = got.next()
        {
            p.set(t);
        }
        i += 1;
    });
    Ok(())
}

/// `values` summed over the replicas (figures read back to the host: sample counts, metric
/// sums). Every replica gets the same sums.
pub fn sum_values(c: &mut dyn Collective, values: &[f64], device: &Device) -> Result<Vec<f64>> {
    let v: Vec<f32> = values.iter().map(|&x| x as f32).collect();
    let t = Tensor::from_vec(v, [values.len()], device)?;
    let s = no_grad(|| c.all_reduce_sum(&[t]))?;
    let s = s
        .first()
        .ok_or_else(|| Error::invalid("all_reduce", "expected one sum, found none"))?;
    Ok(s.to_vec::<f32>()?.into_iter().map(f64::from).collect())
}

/// What the [`Host`] replicas share: their slots and a barrier that fails, rather than
/// waiting forever, once a replica has left (ended or failed).
struct Exchange {
    state: Mutex<Round>,
    turn: Condvar,
}

struct Round {
    slots: Vec<Vec<f32>>,
    arrived: usize,
    generation: u64,
    gone: Option<usize>,
}

/// A [`Collective`] through host memory among threads of one process: each replica copies its
/// tensors to the host, waits for the others, and sums them in rank order.
pub struct Host {
    rank: usize,
    world: usize,
    shared: Arc<Exchange>,
}

impl Host {
    /// The `world` replicas of one group, by rank.
    pub fn group(world: usize) -> Vec<Host> {
        let shared = Arc::new(Exchange {
            state: Mutex::new(Round {
                slots: vec![Vec::new(); world],
                arrived: 0,
                generation: 0,
                gone: None,
            }),
            turn: Condvar::new(),
        });
        (0..world)
            .map(|rank| Host {
                rank,
                world,
                shared: shared.clone(),
            })
            .collect()
    }

    fn lock(&self) -> Result<MutexGuard<'_, Round>> {
        self.shared
            .state
            .lock()
            .map_err(|_| Error::device("host collective", "another replica panicked"))
    }

    /// Waits until every rank has arrived (an error if one has left instead).
    fn wait<'a>(&'a self, mut s: MutexGuard<'a, Round>) -> Result<MutexGuard<'a, Round>> {
        let round = s.generation;
        s.arrived += 1;
        if s.arrived == self.world {
            s.arrived = 0;
            s.generation += 1;
            self.shared.turn.notify_all();
            return Ok(s);
        }
        while s.generation == round {
            if let Some(r) = s.gone {
                return Err(Error::device(
                    "host collective",
                    format!(
                        "replica {} waited for replica {r}, which ended first (the replicas made different calls, or one failed)",
                        self.rank
                    ),
                ));
            }
            s = self
                .shared
                .turn
                .wait(s)
                .map_err(|_| Error::device("host collective", "another replica panicked"))?;
        }
        Ok(s)
    }

    /// Puts `mine` in this rank's slot, waits for every rank, and returns what `f` makes of
    /// all slots (waiting again so no slot is overwritten before all have read).
    fn exchange<T>(&self, mine: Vec<f32>, f: impl FnOnce(&[Vec<f32>]) -> T) -> Result<T> {
        let mut s = self.lock()?;
        s.slots[self.rank] = mine;
        let s = self.wait(s)?;
        let out = f(&s.slots);
        drop(self.wait(s)?);
        Ok(out)
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Ok(mut s) = self.shared.state.lock() {
            s.gone.get_or_insert(self.rank);
            self.shared.turn.notify_all();
        }
    }
}

impl Collective for Host {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.world
    }

    fn all_reduce_sum(&mut self, tensors: &[Tensor]) -> Result<Vec<Tensor>> {
        check_f32("all_reduce", tensors)?;
        let Some(first) = tensors.first() else {
            return Ok(Vec::new());
        };
        let flat = flatten(tensors)?;
        let sum = self.exchange(flat.to_vec::<f32>()?, |slots| {
            let mut sum = vec![0.0f32; slots[0].len()];
            for s in slots {
                sum.iter_mut().zip(s).for_each(|(a, b)| *a += b);
            }
            sum
        })?;
        let n = sum.len();
        unflatten(&Tensor::from_vec(sum, [n], first.device())?, tensors)
    }

    fn broadcast(&mut self, tensors: &[Tensor], root: usize) -> Result<Vec<Tensor>> {
        check_f32("broadcast", tensors)?;
        if root >= self.world {
            return Err(Error::invalid(
                "broadcast",
                format!("expected a root rank below {}, found {root}", self.world),
            ));
        }
        let Some(first) = tensors.first() else {
            return Ok(Vec::new());
        };
        let flat = flatten(tensors)?;
        let got = self.exchange(flat.to_vec::<f32>()?, |slots| slots[root].clone())?;
        let n = got.len();
        unflatten(&Tensor::from_vec(got, [n], first.device())?, tensors)
    }
}

/// The devices and collectives of a run of `n` replicas on `device`: `cuda` gives CUDA GPUs
/// `0..n` with NCCL (feature `nccl`), `cpu` gives `n` CPU replicas summing through host memory.
/// Errors say what is missing: the feature, GPUs, libnccl.
pub fn replicas(device: &str, n: usize) -> Result<Vec<(Device, Box<dyn Collective>)>> {
    if n == 0 {
        return Err(Error::invalid(
            "replicas",
            "expected at least 1 replica, found 0",
        ));
    }
    match device.to_ascii_lowercase().as_str() {
        "cpu" => Ok(Host::group(n)
            .into_iter()
            .map(|h| (Device::cpu(), Box::new(h) as Box<dyn Collective>))
            .collect()),
        "cuda" => nccl_replicas(n),
        other => Err(Error::invalid(
            "replicas",
            format!(
                "expected --device cuda (GPUs 0..{n} through NCCL) or cpu with several replicas, found {other:?}"
            ),
        )),
    }
}

#[cfg(feature = "nccl")]
fn nccl_replicas(n: usize) -> Result<Vec<(Device, Box<dyn Collective>)>> {
    Ok(
        crate::cuda::nccl::group(n, crate::cuda::CudaOptions::default())?
            .into_iter()
            .map(|(d, c)| (d, Box::new(c) as Box<dyn Collective>))
            .collect(),
    )
}

#[cfg(not(feature = "nccl"))]
fn nccl_replicas(n: usize) -> Result<Vec<(Device, Box<dyn Collective>)>> {
    Err(no_nccl(n))
}

/// Runs `work(rank, item)` for every item of `group` (a replica's collective, with its device
/// where it has one), each on its own thread, and returns their results by rank (the first
/// error, naming its rank, if any failed).
pub fn run_replicas<C: Send + 'static, T: Send + 'static>(
    group: Vec<C>,
    work: impl Fn(usize, C) -> Result<T> + Send + Sync + 'static,
) -> Result<Vec<T>> {
    let work = Arc::new(work);
    let handles: Vec<_> = group
        .into_iter()
        .enumerate()
        .map(|(rank, c)| {
            let work = work.clone();
            std::thread::spawn(move || work(rank, c))
        })
        .collect();
    let mut out = Vec::new();
    for (rank, h) in handles.into_iter().enumerate() {
        let r = h
            .join()
            .map_err(|_| Error::device("replica", format!("replica {rank} panicked")))?;
        out.push(r.map_err(|e| Error::device("replica", format!("replica {rank}: {e}")))?);
    }
    Ok(out)
}

/// The environment variables through which [`launch`] gives each process its place.
const RANK_VAR: &str = "KILN_DIST_RANK";
const WORLD_VAR: &str = "KILN_DIST_WORLD";
const ID_VAR: &str = "KILN_DIST_ID";

/// This process's place in a run of one process per GPU started by [`launch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// This process's rank (and GPU index).
    pub rank: usize,
    /// How many processes the run has.
    pub world: usize,
    /// The communicator's id, shared by every process of the run.
    pub id: String,
}

impl Member {
    /// The place [`launch`] gave this process, or `None` when [`launch`] did not start it.
    pub fn from_env() -> Result<Option<Member>> {
        Member::from_vars(|k| std::env::var(k).ok())
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Member>> {
        let Some(rank) = var(RANK_VAR) else {
            return Ok(None);
        };
        let number = |name: &str, v: Option<String>| -> Result<usize> {
            let v = v.unwrap_or_default();
            v.parse().map_err(|_| {
                Error::invalid(
                    "launch",
                    format!("expected {name} to be a number, found {v:?}"),
                )
            })
        };
        let rank = number(RANK_VAR, Some(rank))?;
        let world = number(WORLD_VAR, var(WORLD_VAR))?;
        if rank >= world {
            return Err(Error::invalid(
                "launch",
                format!("expected {RANK_VAR} below {WORLD_VAR} = {world}, found {rank}"),
            ));
        }
        let id = var(ID_VAR).ok_or_else(|| {
            Error::invalid("launch", format!("{RANK_VAR} is set but {ID_VAR} is not"))
        })?;
        Ok(Some(Member { rank, world, id }))
    }

    /// This member's GPU (CUDA device `rank`) and its collective; waits for every member.
    pub fn join(&self) -> Result<(Device, Box<dyn Collective>)> {
        join_nccl(self)
    }
}

/// Runs this program `n` times with the same arguments, process `r` on CUDA GPU `r` as
/// [`Member`] `r`, and waits for all of them. Checks first that the GPUs and NCCL are here.
/// When a process fails the others are stopped (they would wait for it forever) and the error
/// names its rank. Ctrl-C reaches every process, which each stop after their step; the
/// launcher keeps waiting for them.
pub fn launch(n: usize) -> Result<()> {
    let id = nccl_id(n)?;
    let exe = std::env::current_exe()
        .map_err(|e| Error::io("launch", format!("cannot find this program's path: {e}")))?;
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    // The processes handle Ctrl-C themselves; the launcher must outlive them.
    let _ = ctrlc::set_handler(|| {});
    let mut children = Vec::with_capacity(n);
    for rank in 0..n {
        let child = Command::new(&exe)
            .args(&args)
            .env(RANK_VAR, rank.to_string())
            .env(WORLD_VAR, n.to_string())
            .env(ID_VAR, &id)
            .spawn()
            .map_err(|e| Error::io("launch", format!("starting process {rank}: {e}")));
        match child {
            Ok(c) => children.push(c),
            Err(e) => {
                stop_all(&mut children);
                return Err(e);
            }
        }
    }
    supervise(children)
}

/// Waits for every child (child `r` is rank `r`). The first to fail stops the others, and its
/// exit status is the error.
pub fn supervise(mut children: Vec<Child>) -> Result<()> {
    let mut done = vec![false; children.len()];
    while done.iter().any(|d| !d) {
        for (rank, child) in children.iter_mut().enumerate() {
            if done[rank] {
                continue;
            }
            let status = child
                .try_wait()
                .map_err(|e| Error::io("launch", format!("waiting for process {rank}: {e}")));
            match status {
                Ok(Some(s)) if s.success() => done[rank] = true,
                Ok(None) => {}
                Ok(Some(s)) => {
                    stop_all(&mut children);
                    return Err(Error::device(
                        "replica",
                        format!("process {rank} of {} failed ({s})", done.len()),
                    ));
                }
                Err(e) => {
                    stop_all(&mut children);
                    return Err(e);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn stop_all(children: &mut [Child]) {
    for c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[cfg(feature = "nccl")]
fn nccl_id(n: usize) -> Result<String> {
    crate::cuda::nccl::unique_id(n)
}

#[cfg(feature = "nccl")]
fn join_nccl(m: &Member) -> Result<(Device, Box<dyn Collective>)> {
    let options = crate::cuda::CudaOptions::default();
    let (device, c) = crate::cuda::nccl::join(m.rank, m.world, &m.id, options)?;
    Ok((kiln_kernels::fusion::wrap_if_enabled(device), Box::new(c)))
}

#[cfg(not(feature = "nccl"))]
fn nccl_id(n: usize) -> Result<String> {
    Err(no_nccl(n))
}

#[cfg(not(feature = "nccl"))]
fn join_nccl(m: &Member) -> Result<(Device, Box<dyn Collective>)> {
    Err(no_nccl(m.world))
}

#[cfg(not(feature = "nccl"))]
fn no_nccl(n: usize) -> Error {
    Error::device(
        "replicas",
        format!(
            "{n} CUDA replicas need NCCL: this build of kiln has no `nccl` feature; rebuild with `--features nccl`"
        ),
    )
}

#[cfg(test)]
mod tests;
