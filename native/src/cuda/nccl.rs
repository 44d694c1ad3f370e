//! The NCCL [`Collective`] (feature `nccl`): one communicator per GPU, either one per process
//! ([`unique_id`], [`join`]: what `kiln train --gpus N` uses) or all of this process's made
//! together by `ncclCommInitAll` ([`group`]), each used by its replica's thread.
//!
//! NCCL runs on the device's one stream, so it is ordered with kiln's kernels and allocations
//! without any synchronisation. Each call flattens its tensors into one fresh buffer (a
//! concatenation no other tensor shares), reduces or broadcasts it in place, and returns views
//! of it. libnccl is loaded at run time: the library search of cudarc wants `libnccl.so` (or
//! `libnccl.so.<CUDA major>`) on the library path.

use super::{CudaBackend, CudaBuffer, CudaOptions, Inner};
use crate::dist::{Collective, check_f32, flatten, unflatten};
use cudarc::nccl::{result as nc, sys as ns};
use kiln_core::{Device, Error, Result, Tensor};
use std::ffi::c_void;
use std::sync::Arc;

/// A communicator handle, used only by its replica's thread.
struct Comm(ns::ncclComm_t);
// SAFETY: a communicator may be used from any thread, one call at a time (ours: its replica's).
unsafe impl Send for Comm {}

/// One replica's NCCL communicator on its GPU.
pub struct Nccl {
    comm: Comm,
    rank: usize,
    world: usize,
    inner: Arc<Inner>,
}

/// Whether libnccl can be loaded here.
pub fn present() -> bool {
    // SAFETY: only tries to open the library.
    unsafe { ns::is_culib_present() }
}

fn nccl_err(what: &str) -> impl Fn(nc::NcclError) -> Error + '_ {
    move |e| Error::device("nccl", format!("{what}: {:?}", e.0))
}

/// Checks that `gpus` GPUs and libnccl are here; errors name what is missing: the driver,
/// GPUs (how many were found), or libnccl.
fn check(gpus: usize) -> Result<()> {
    if !super::driver_present() {
        return Err(Error::device(
            "nccl",
            format!(
                "asked for {gpus} GPUs, but the CUDA driver library (libcuda.so) was not found"
            ),
        ));
    }
    let found = cudarc::driver::CudaContext::device_count()
        .map_err(|e| Error::device("nccl", format!("counting devices: {e:?}")))?;
    if gpus == 0 || gpus > found.max(0) as usize {
        return Err(Error::device(
            "nccl",
            format!("asked for {gpus} GPUs, found {found}"),
        ));
    }
    if !present() {
        return Err(Error::device(
            "nccl",
            "NCCL was not found: cudarc loads libnccl.so (or libnccl.so.<CUDA major>) from the \
             library path; PyTorch's wheels ship nvidia/nccl/lib/libnccl.so.2: link libnccl.so to \
             it and add that folder to LD_LIBRARY_PATH",
        ));
    }
    Ok(())
}

/// Kiln devices on CUDA GPUs `0..gpus` with `options`, each with its rank's communicator, for
/// one thread per GPU in this process. (The `kiln` CLI runs one process per GPU instead, with
/// [`unique_id`] and [`join`]: in one process the replicas' launches contend in the driver.)
/// Errors name what is missing: the driver, GPUs (how many were found), or libnccl.
pub fn group(gpus: usize, options: CudaOptions) -> Result<Vec<(Device, Nccl)>> {
    check(gpus)?;
    let backends = (0..gpus)
        .map(|i| CudaBackend::new(i, options))
        .collect::<Result<Vec<_>>>()?;
    let mut comms = vec![std::ptr::null_mut(); gpus];
    let ordinals: Vec<i32> = (0..gpus as i32).collect();
    // SAFETY: `comms` has room for `gpus` handles, `ordinals` names `gpus` devices.
    unsafe { nc::comm_init_all(comms.as_mut_ptr(), gpus as i32, ordinals.as_ptr()) }
        .map_err(nccl_err("creating the communicators (ncclCommInitAll)"))?;
    Ok(backends
        .into_iter()
        .zip(comms)
        .enumerate()
        .map(|(rank, (b, comm))| {
            let nccl = Nccl {
                comm: Comm(comm),
                rank,
                world: gpus,
                inner: b.inner.clone(),
            };
            (Device::new(b), nccl)
        })
        .collect())
}

/// A fresh NCCL id (as hex) for a group of `gpus` processes, after checking that the GPUs and
/// libnccl are here. Every process passes it to [`join`].
pub fn unique_id(gpus: usize) -> Result<String> {
    check(gpus)?;
    let id = nc::get_uniqueid().map_err(nccl_err("ncclGetUniqueId"))?;
    Ok(id
        .internal
        .iter()
        .map(|&b| format!("{:02x}", b as u8))
        .collect())
}

/// GPU `rank` with `options` and its communicator, as rank `rank` of `world` processes that
/// share the NCCL id `id` ([`unique_id`]). Waits until every rank has joined.
pub fn join(rank: usize, world: usize, id: &str, options: CudaOptions) -> Result<(Device, Nccl)> {
    let bad = || {
        Error::invalid(
            "nccl",
            format!(
                "expected an NCCL id of 256 hex digits, found {} characters",
                id.len()
            ),
        )
    };
    if id.len() != 256 || !id.is_ascii() {
        return Err(bad());
    }
    let mut unique = ns::ncclUniqueId { internal: [0; 128] };
    for (b, pair) in unique.internal.iter_mut().zip(id.as_bytes().chunks(2)) {
        let hex = std::str::from_utf8(pair).map_err(|_| bad())?;
        *b = u8::from_str_radix(hex, 16).map_err(|_| bad())? as std::ffi::c_char;
    }
    check(world.max(rank + 1))?;
    let backend = CudaBackend::new(rank, options)?;
    backend.inner.bind()?;
    let mut comm = std::ptr::null_mut();
    // SAFETY: `comm` receives one handle; NCCL uses the device whose context is current.
    unsafe { nc::comm_init_rank(&mut comm, world as i32, unique, rank as i32) }
        .map_err(nccl_err("joining the communicator (ncclCommInitRank)"))?;
    let nccl = Nccl {
        comm: Comm(comm),
        rank,
        world,
        inner: backend.inner.clone(),
    };
    Ok((Device::new(backend), nccl))
}

impl Nccl {
    /// `tensors` in one fresh buffer on this communicator's GPU, its pointer and length.
    fn flat(&self, op: &str, tensors: &[Tensor]) -> Result<(Tensor, u64, usize)> {
        check_f32(op, tensors)?;
        let flat = flatten(tensors)?;
        let buf = flat
            .storage()
            .downcast::<CudaBuffer>()
            .filter(|b| Arc::ptr_eq(&b.inner, &self.inner))
            .ok_or_else(|| {
                Error::device(
                    op.to_string(),
                    format!(
                        "expected tensors on {}, found them on {}",
                        self.inner.name,
                        flat.device().name()
                    ),
                )
            })?;
        let ptr = buf.ptr + 4 * flat.layout().offset() as u64;
        self.inner.bind()?;
        Ok((flat, ptr, tensors.iter().map(Tensor::numel).sum()))
    }
}

impl Collective for Nccl {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.world
    }

    fn all_reduce_sum(&mut self, tensors: &[Tensor]) -> Result<Vec<Tensor>> {
        if tensors.is_empty() {
            return Ok(Vec::new());
        }
        let (flat, ptr, n) = self.flat("all_reduce", tensors)?;
        // SAFETY: `flat` is a fresh buffer of `n` f32 that only this function holds, written
        // in place on the stream every use of it is ordered on.
        unsafe {
            nc::all_reduce(
                ptr as *const c_void,
                ptr as *mut c_void,
                n,
                ns::ncclDataType_t::ncclFloat32,
                ns::ncclRedOp_t::ncclSum,
                self.comm.0,
                self.inner.raw.stream.cast(),
            )
        }
        .map_err(nccl_err("ncclAllReduce"))?;
        unflatten(&flat, tensors)
    }

    fn broadcast(&mut self, tensors: &[Tensor], root: usize) -> Result<Vec<Tensor>> {
        if root >= self.world {
            return Err(Error::invalid(
                "broadcast",
                format!("expected a root rank below {}, found {root}", self.world),
            ));
        }
        if tensors.is_empty() {
            return Ok(Vec::new());
        }
        let (flat, ptr, n) = self.flat("broadcast", tensors)?;
        // SAFETY: as in `all_reduce_sum`.
        unsafe {
            nc::broadcast(
                ptr as *const c_void,
                ptr as *mut c_void,
                n,
                ns::ncclDataType_t::ncclFloat32,
                root as i32,
                self.comm.0,
                self.inner.raw.stream.cast(),
            )
        }
        .map_err(nccl_err("ncclBroadcast"))?;
        unflatten(&flat, tensors)
    }
}

impl Drop for Nccl {
    /// Waits for this GPU's work, then frees the communicator.
    fn drop(&mut self) {
        if self.inner.bind().is_ok() {
            // SAFETY: the stream is this device's; nothing uses the communicator afterwards.
            unsafe {
                let _ = cudarc::driver::result::stream::synchronize(self.inner.raw.stream);
                let _ = nc::comm_destroy(self.comm.0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::run_replicas;

    /// The GPUs to test on, or `None` (with a notice) without CUDA, NCCL or enough GPUs.
    fn gpus(want: usize) -> Option<usize> {
        let found = if super::super::driver_present() {
            cudarc::driver::CudaContext::device_count().unwrap_or(0) as usize
        } else {
            0
        };
        if found < want || !present() {
            eprintln!(
                "skipped: needs {want} CUDA GPUs and libnccl, found {found} GPUs, NCCL {}",
                if present() { "present" } else { "missing" }
            );
            return None;
        }
        Some(found)
    }

    #[test]
    fn all_reduce_and_broadcast_match_the_host() {
        for world in [1, 2] {
            let Some(_) = gpus(world) else { return };
            let out = run_replicas(
                group(world, CudaOptions::default())
                    .unwrap()
                    .into_iter()
                    .collect(),
                move |rank, (dev, mut c): (Device, Nccl)| {
                    let vals = |r: usize, n: usize| -> Vec<f32> {
                        (0..n)
                            .map(|i| ((i * 7 + r * 13) % 17) as f32 - 8.0)
                            .collect()
                    };
                    let a = Tensor::from_vec(vals(rank, 6), [2, 3], &dev)?;
                    let b = Tensor::from_vec(vals(rank + 5, 1000), [1000], &dev)?;
                    let sum = c.all_reduce_sum(&[a.clone(), b])?;
                    let got = c.broadcast(&[a], world - 1)?;
                    let want_a: Vec<f32> = (0..6)
                        .map(|i| (0..world).map(|r| vals(r, 6)[i]).sum())
                        .collect();
                    let want_b: Vec<f32> = (0..1000)
                        .map(|i| (0..world).map(|r| vals(r + 5, 1000)[i]).sum())
                        .collect();
                    assert_eq!(sum[0].dims(), [2, 3]);
                    assert_eq!(sum[0].to_vec::<f32>()?, want_a);
                    assert_eq!(sum[1].to_vec::<f32>()?, want_b);
                    assert_eq!(got[0].to_vec::<f32>()?, vals(world - 1, 6));
                    Ok(())
                },
            );
            out.unwrap();
        }
    }

    #[test]
    fn without_a_driver_the_error_names_it() {
        if super::super::driver_present() {
            eprintln!("skipped: the CUDA driver is present");
            return;
        }
        let e = group(2, CudaOptions::default()).err().unwrap().to_string();
        assert!(
            e.contains("asked for 2 GPUs") && e.contains("libcuda.so"),
            "{e}"
        );
    }

    #[test]
    fn asking_for_more_gpus_than_found_names_both() {
        let Some(found) = gpus(1) else { return };
        let e = group(found + 1, CudaOptions::default())
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains(&format!("asked for {} GPUs, found {found}", found + 1)),
            "{e}"
        );
    }

    #[test]
    fn a_member_with_a_bad_id_is_told_what_an_id_is() {
        for id in ["", "zz".repeat(128).as_str(), &"a".repeat(255)] {
            let e = join(0, 2, id, CudaOptions::default())
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains("expected an NCCL id of 256 hex digits"), "{e}");
        }
    }

    #[test]
    fn an_id_travels_as_hex_and_comes_back() {
        let Some(_) = gpus(1) else { return };
        let id = unique_id(1).unwrap();
        assert_eq!(id.len(), 256);
        // one process, world 1: joining returns at once
        let (dev, mut c) = join(0, 1, &id, CudaOptions::default()).unwrap();
        let x = Tensor::from_vec(vec![1.5f32, -2.0], [2], &dev).unwrap();
        let s = c.all_reduce_sum(&[x]).unwrap();
        assert_eq!(s[0].to_vec::<f32>().unwrap(), [1.5, -2.0]);
    }
}
