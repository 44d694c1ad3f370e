//! Data parallelism: rayon on native `std` builds and in the threaded wasm32 build (`+atomics`,
//! whose pool of Web Workers kiln-web starts); plain loops without `std` and in the default
//! wasm32 build, where a page has one thread and rayon's machinery would only add to the download.

use super::storage::{CpuElem, buffer};
use alloc::vec::Vec;
use core::ops::Range;

/// Elements below which an elementwise loop stays on the calling thread: a task costs a few
/// microseconds to hand over, about what 64K simple element operations take.
pub(crate) const GRAIN: usize = 1 << 16;

/// Whether a loop of `ops` simple operations (element operations; a GEMM's multiply-adds count a
/// quarter each, four to a SIMD instruction) is worth spreading over the threads: handing pieces
/// over and waiting for them costs some microseconds (waking a Web Worker, 20-30), about what
/// [`GRAIN`] operations take. At batch 1 the MNIST CNN's first convolution and its pooling stay
/// on one thread.
pub(crate) fn worth_splitting(ops: usize) -> bool {
    ops >= GRAIN && threads() > 1
}

/// Gives the CPU backend a clock (milliseconds from any origin), which the page's threaded build
/// does: the other threads then spin for up to 0.5 ms after a short parallel loop, ready for the
/// next, instead of parking at once (waking a parked Web Worker takes 10-25 us). Without a clock
/// (natively) they park. The first clock given stays.
///
/// ```
/// kiln_core::cpu::set_clock(|| 0.0);
/// ```
pub fn set_clock(now: fn() -> f64) {
    #[cfg(all(
        feature = "std",
        any(not(target_arch = "wasm32"), target_feature = "atomics")
    ))]
    let _ = pool::CLOCK.set(now);
    #[cfg(not(all(
        feature = "std",
        any(not(target_arch = "wasm32"), target_feature = "atomics")
    )))]
    let _ = now;
}

/// Number of threads the CPU backend's parallel loops spread over: rayon's pool natively and in
/// the threaded wasm32 build (the page's Web Workers), 1 without `std` and in the default wasm32
/// build.
///
/// ```
/// assert!(kiln_core::cpu::threads() >= 1);
/// ```
pub fn threads() -> usize {
    #[cfg(all(
        feature = "std",
        any(not(target_arch = "wasm32"), target_feature = "atomics")
    ))]
    return rayon::current_num_threads();
    #[cfg(not(all(
        feature = "std",
        any(not(target_arch = "wasm32"), target_feature = "atomics")
    )))]
    1
}

/// Calls `f(i, chunk)` for every `size`-element chunk of `data` (the last may be shorter), on
/// all cores under `std`.
pub(crate) fn chunks_mut<T: Send>(
    data: &mut [T],
    size: usize,
    f: impl Fn(usize, &mut [T]) + Send + Sync,
) {
    let size = size.max(1);
    #[cfg(all(
        feature = "std",
        any(not(target_arch = "wasm32"), target_feature = "atomics")
    ))]
    {
        let (len, base) = (data.len(), pool::Shared(data.as_mut_ptr()));
        pool::run(len.div_ceil(size), &|i| {
            let start = i * size;
            // SAFETY: chunk `i`, inside `data` and no other task's.
            let chunk =
                unsafe { core::slice::from_raw_parts_mut(base.at(start), size.min(len - start)) };
            f(i, chunk);
        });
    }
    #[cfg(not(all(
        feature = "std",
        any(not(target_arch = "wasm32"), target_feature = "atomics")
    )))]
    data.chunks_mut(size).enumerate().for_each(|(i, c)| f(i, c));
}

/// Threads: rayon's pool, under `std` natively and in the threaded wasm32 build.
#[cfg(all(
    feature = "std",
    any(not(target_arch = "wasm32"), target_feature = "atomics")
))]
mod pool {
    /// Runs `f(0)`, ..., `f(n - 1)` on rayon's pool. The parallel loops all go through this one
    /// function, which is not generic: rayon's machinery is compiled once, not once per loop (per
    /// loop, it had made the threaded wasm32 build's code 0.8 MB larger before wasm-opt).
    pub(super) fn run(n: usize, f: &(dyn Fn(usize) + Sync)) {
        use rayon::prelude::*;
        if n == 1 {
            // Not a region: no task to hand over, and a lingering thread keeps lingering.
            return f(0);
        }
        let region = REGION.fetch_add(1, Ordering::Relaxed) + 1;
        ACTIVE.fetch_add(1, Ordering::Relaxed);
        let now = CLOCK.get().copied();
        let start = now.map(|now| now());
        (0..n).into_par_iter().for_each(f);
        // Not after a region inside another, whose remaining work the spinners would hold up.
        let outer = ACTIVE.fetch_sub(1, Ordering::Relaxed) == 1;
        if let (true, Some(now), Some(start)) = (outer, now, start)
            && now() - start < SHORT_MS
        {
            for _ in 1..rayon::current_num_threads() {
                rayon::spawn(move || linger(region, now));
            }
        }
    }

    use core::sync::atomic::{AtomicUsize, Ordering};

    /// Parallel regions begun: a [`linger`]ing thread stops when it changes.
    static REGION: AtomicUsize = AtomicUsize::new(0);
    /// Parallel regions under way.
    static ACTIVE: AtomicUsize = AtomicUsize::new(0);
    /// The clock of [`super::set_clock`] (ms): with one, the other threads [`linger`] after a
    /// short region.
    pub(super) static CLOCK: std::sync::OnceLock<fn() -> f64> = std::sync::OnceLock::new();

    /// Regions shorter than this (ms) are followed by a [`linger`]: rayon parks an idle thread
    /// within microseconds, and waking a parked Web Worker cost 10-25 us per region (the MNIST
    /// CNN at batch 1: conv2's products 124 -> 107 us, fc1 75 -> 54 us with lingering). After
    /// longer regions (batch 64's, milliseconds) a wake is cheap in proportion, and spinning
    /// after every region looked 3-8% slower at batch 64 under load (noisy runs).
    const SHORT_MS: f64 = 0.25;
    /// How long a [`linger`] lasts at most (ms): longer than the gaps between a forward's
    /// regions and between back-to-back batch-1 forwards, short enough that an idle page leaves
    /// the cores alone.
    const LINGER_MS: f64 = 0.5;

    /// Spins (a task on another thread) until a region after `region` begins, whose work that
    /// thread then steals at once, or for [`LINGER_MS`] by `now`.
    fn linger(region: usize, now: fn() -> f64) {
        let start = now();
        // The clock is read every few microseconds.
        let spin = || {
            (0..1 << 12).all(|_| {
                core::hint::spin_loop();
                REGION.load(Ordering::Relaxed) == region
            })
        };
        while spin() && now() - start < LINGER_MS {}
    }

    /// The start of a slice whose disjoint parts the tasks of [`run`] write, one part each.
    pub(super) struct Shared<T>(pub(super) *mut T);

    // SAFETY: each task reaches only its own part of the slice, and its elements may move between
    // threads (`T: Send`).
    unsafe impl<T: Send> Sync for Shared<T> {}

    impl<T> Shared<T> {
        /// The address of element `i` (a method, so that closures capture the `Sync` wrapper).
        pub(super) fn at(&self, i: usize) -> *mut T {
            self.0.wrapping_add(i)
        }
    }
}

/// Calls `f` on every item, on all cores under `std`.
pub(crate) fn for_each<I: Send>(items: Vec<I>, f: impl Fn(I) + Send + Sync) {
    #[cfg(all(
        feature = "std",
        any(not(target_arch = "wasm32"), target_feature = "atomics")
    ))]
    {
        let mut slots: Vec<Option<I>> = items.into_iter().map(Some).collect();
        chunks_mut(&mut slots, 1, |_, slot| {
            if let Some(item) = slot[0].take() {
                f(item);
            }
        });
    }
    #[cfg(not(all(
        feature = "std",
        any(not(target_arch = "wasm32"), target_feature = "atomics")
    )))]
    items.into_iter().for_each(f);
}

/// Size of the pieces `n` items are split into for [`chunks_mut`]: a few per thread (so that a
/// busy core does not hold the rest up), but no fewer than `grain` items each.
pub(crate) fn piece(n: usize, grain: usize) -> usize {
    n.div_ceil(threads() * 4).max(grain).max(1)
}

/// The `n` values `f(0..n)` yields, built in pieces of at least `grain` elements on all cores
/// under `std`; `f(range)` must yield exactly the values of the positions in `range`.
pub(crate) fn collect<O, I>(n: usize, grain: usize, f: impl Fn(Range<usize>) -> I + Sync) -> Vec<O>
where
    O: CpuElem,
    I: Iterator<Item = O>,
{
    let mut out = buffer(n);
    #[cfg(all(
        feature = "std",
        any(not(target_arch = "wasm32"), target_feature = "atomics")
    ))]
    if n >= 2 * grain && threads() > 1 {
        let size = piece(n, grain);
        chunks_mut(&mut out.spare_capacity_mut()[..n], size, |i, dst| {
            let (start, len) = (i * size, dst.len());
            let mut written = 0;
            for (slot, v) in dst.iter_mut().zip(f(start..start + len)) {
                slot.write(v);
                written += 1;
            }
            assert_eq!(written, len, "par::collect: a piece yielded too few values");
        });
        // SAFETY: the capacity is at least `n`, and each piece of the first `n` slots was
        // written in full (checked above; a panic in any piece propagates before this line).
        unsafe { out.set_len(n) };
        return out;
    }
    #[cfg(not(all(
        feature = "std",
        any(not(target_arch = "wasm32"), target_feature = "atomics")
    )))]
    let _ = grain;
    out.extend(f(0..n));
    out
}

/// `n` zeros (`false`) handed to `f(i, chunk)` in `size`-element chunks, each right after it is
/// zeroed, on all cores under `std`: kernels that overwrite most of their output then find it in
/// cache instead of paying a separate pass of zeros over memory.
pub(crate) fn zeros_with<T: CpuElem>(
    n: usize,
    size: usize,
    f: impl Fn(usize, &mut [T]) + Send + Sync,
) -> Vec<T> {
    let mut out = buffer(n);
    let size = size.max(1);
    #[cfg(all(
        feature = "std",
        any(not(target_arch = "wasm32"), target_feature = "atomics")
    ))]
    {
        let zero = core::mem::MaybeUninit::new(T::default());
        chunks_mut(&mut out.spare_capacity_mut()[..n], size, |i, c| {
            c.fill(zero);
            // SAFETY: every slot of `c` was just written, and `MaybeUninit<T>` has `T`'s layout.
            let c = unsafe { &mut *(c as *mut [core::mem::MaybeUninit<T>] as *mut [T]) };
            f(i, c);
        });
        // SAFETY: the capacity is at least `n`, and all of the first `n` slots were written (a
        // panic in `f` propagates before this line).
        unsafe { out.set_len(n) };
        out
    }
    #[cfg(not(all(
        feature = "std",
        any(not(target_arch = "wasm32"), target_feature = "atomics")
    )))]
    {
        out.resize(n, T::default());
        out.chunks_mut(size).enumerate().for_each(|(i, c)| f(i, c));
        out
    }
}

/// `n` zeros (`false`), written on all cores under `std`.
pub(crate) fn zeros<T: CpuElem>(n: usize) -> Vec<T> {
    if n >= 2 * GRAIN && threads() > 1 {
        return zeros_with(n, piece(n, GRAIN), |_, _| {});
    }
    let mut out = buffer(n);
    out.resize(n, T::default());
    out
}
