//! Data parallelism: rayon on native `std` builds; in the threaded wasm32 build (`+atomics`) a
//! small pool of its own on the Web Workers kiln-web starts ([`worker`], [`start`]); plain loops
//! without `std` and in the default wasm32 build, where a page has one thread.

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

/// Number of threads the CPU backend's parallel loops spread over: rayon's pool natively, the
/// page's pool in the threaded wasm32 build, 1 without `std` and in the default wasm32 build.
///
/// ```
/// assert!(kiln_core::cpu::threads() >= 1);
/// ```
pub fn threads() -> usize {
    #[cfg(all(threaded, not(target_arch = "wasm32")))]
    return rayon::current_num_threads();
    #[cfg(all(threaded, target_arch = "wasm32"))]
    return web::threads();
    #[cfg(not(threaded))]
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
    #[cfg(threaded)]
    {
        let (len, base) = (data.len(), Shared(data.as_mut_ptr()));
        run(len.div_ceil(size), &|i| {
            let start = i * size;
            // SAFETY: chunk `i`, inside `data` and no other task's.
            let chunk =
                unsafe { core::slice::from_raw_parts_mut(base.at(start), size.min(len - start)) };
            f(i, chunk);
        });
    }
    #[cfg(not(threaded))]
    data.chunks_mut(size).enumerate().for_each(|(i, c)| f(i, c));
}

/// Runs `f(0)`, ..., `f(n - 1)` on the threads. The parallel loops all go through this one
/// function, which is not generic: the pool's machinery is compiled once, not once per loop (per
/// loop, rayon's had made the threaded wasm32 build's code 0.8 MB larger before wasm-opt).
#[cfg(all(threaded, not(target_arch = "wasm32")))]
fn run(n: usize, f: &(dyn Fn(usize) + Sync)) {
    use rayon::prelude::*;
    if n == 1 {
        return f(0);
    }
    (0..n).into_par_iter().for_each(f);
}

#[cfg(all(threaded, target_arch = "wasm32"))]
use web::run;
#[cfg(all(threaded, target_arch = "wasm32"))]
pub use web::{panicked, set_clock, start, worker};

/// Takes the page's clock; only the threaded wasm32 build's pool has use for one.
///
/// ```
/// kiln_core::cpu::set_clock(|| 0.0);
/// ```
#[cfg(not(all(threaded, target_arch = "wasm32")))]
pub fn set_clock(now: fn() -> f64) {
    let _ = now;
}

/// The start of a slice whose disjoint parts the tasks of [`run`] write, one part each.
#[cfg(threaded)]
struct Shared<T>(*mut T);

// SAFETY: each task reaches only its own part of the slice, and its elements may move between
// threads (`T: Send`).
#[cfg(threaded)]
unsafe impl<T: Send> Sync for Shared<T> {}

#[cfg(threaded)]
impl<T> Shared<T> {
    /// The address of element `i` (a method, so that closures capture the `Sync` wrapper).
    fn at(&self, i: usize) -> *mut T {
        self.0.wrapping_add(i)
    }
}

/// The threaded wasm32 build's pool: the page's thread and `threads - 1` Web Workers sharing the
/// module's memory (kiln-web starts them). Not rayon: its work stealing, sleep states and
/// channels were about 21 KB of the gzipped module (the CPU-only threaded build without them:
/// 286.6 -> 266.0 KB), where kiln needs one kind of region, `n` tasks handed out in order.
///
/// A region publishes its task and `n` with a ticket counter, bumps [`EPOCH`] and wakes the
/// workers; every thread, the caller's included, takes tickets until they run out, and the
/// caller waits for the tasks to be done. The page's thread cannot block (a wait traps there), so
/// it spins; workers spin for a while after a short region (waking a parked Web Worker costs
/// 10-25 us, the MNIST CNN at batch 1 has regions every ~50 us), then wait on [`EPOCH`].
#[cfg(all(threaded, target_arch = "wasm32"))]
mod web {
    use core::arch::wasm32::{memory_atomic_notify, memory_atomic_wait32};
    use core::cell::UnsafeCell;
    use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::SeqCst};
    use std::sync::OnceLock;

    /// Threads of the pool, the caller's included (1 until [`start`]).
    static THREADS: AtomicUsize = AtomicUsize::new(1);
    /// Workers inside [`worker`].
    static WORKERS: AtomicUsize = AtomicUsize::new(0);
    /// Regions begun: workers wait for it to change.
    static EPOCH: AtomicU32 = AtomicU32::new(0);
    /// The region's tickets: its task count in the high half, the next task in the low half, so
    /// that one read says whether a ticket belongs to the region whose task is published.
    static TICKETS: AtomicU64 = AtomicU64::new(0);
    /// Tasks of the region done.
    static DONE: AtomicUsize = AtomicUsize::new(0);
    /// A region is under way: a region begun inside one (a task's own loop) runs on its thread.
    static BUSY: AtomicBool = AtomicBool::new(false);
    /// A thread of the pool panicked: the region's caller would wait for its task forever.
    static PANICKED: AtomicBool = AtomicBool::new(false);
    /// The clock of [`set_clock`] (ms).
    static CLOCK: OnceLock<fn() -> f64> = OnceLock::new();

    /// The region's task, written by the region's caller before its tickets are published and
    /// read by a thread only once it holds one of them.
    struct Task(UnsafeCell<Option<&'static (dyn Fn(usize) + Sync)>>);
    // SAFETY: see [`run`]: the cell is written only while no ticket of any region is left, and
    // read only by a thread holding a ticket of the current region.
    unsafe impl Sync for Task {}
    static TASK: Task = Task(UnsafeCell::new(None));

    /// Regions shorter than this (ms) are followed by workers spinning for [`LINGER_MS`] before
    /// waiting (the MNIST CNN at batch 1: conv2's products 124 -> 107 us, fc1 75 -> 54 us with
    /// rayon's threads lingering so); after longer regions (batch 64's, milliseconds) waking is
    /// cheap in proportion, and spinning after every region looked 3-8% slower at batch 64
    /// under load.
    const SHORT_MS: f64 = 0.25;
    /// How long workers spin after a short region (ms): longer than the gaps between a
    /// forward's regions and between back-to-back batch-1 forwards, short enough that an idle
    /// page leaves the cores alone.
    const LINGER_MS: f64 = 0.5;

    pub(super) fn threads() -> usize {
        THREADS.load(SeqCst)
    }

    /// Gives the pool a clock (milliseconds from any origin), so that workers can spin after a
    /// short region instead of waiting at once. The first clock given stays.
    ///
    /// ```
    /// kiln_core::cpu::set_clock(|| 0.0);
    /// ```
    pub fn set_clock(now: fn() -> f64) {
        let _ = CLOCK.set(now);
    }

    /// Makes the pool `threads` threads, the calling one first, once `threads - 1` workers are
    /// in [`worker`]; waits up to `timeout_ms` by `now` for them. Returns the pool's size.
    pub fn start(threads: usize, now: fn() -> f64, timeout_ms: f64) -> Result<usize, usize> {
        let want = threads.max(1) - 1;
        let t0 = now();
        while WORKERS.load(SeqCst) < want {
            if now() - t0 > timeout_ms {
                return Err(WORKERS.load(SeqCst));
            }
            core::hint::spin_loop();
        }
        set_clock(now);
        THREADS.store(want + 1, SeqCst);
        Ok(want + 1)
    }

    /// Called by a panic hook: a region waiting for a task of the panicking thread stops
    /// waiting and panics on its own thread, where the hook reports it (a panic aborts its
    /// thread, so the task would never be done).
    pub fn panicked() {
        PANICKED.store(true, SeqCst);
    }

    /// A worker's loop (never returns): takes the tickets of every region.
    pub fn worker() -> ! {
        WORKERS.fetch_add(1, SeqCst);
        let mut seen = EPOCH.load(SeqCst);
        let mut short = false;
        loop {
            if let (true, Some(now)) = (short, CLOCK.get()) {
                let start = now();
                // The clock is read every few microseconds.
                while EPOCH.load(SeqCst) == seen && now() - start < LINGER_MS {
                    for _ in 0..1 << 10 {
                        core::hint::spin_loop();
                    }
                }
            }
            while EPOCH.load(SeqCst) == seen {
                // SAFETY: EPOCH is a live, aligned i32-sized atomic; waiting is allowed on a
                // worker. A wake or a changed value ends the wait.
                unsafe { memory_atomic_wait32(EPOCH.as_ptr().cast(), seen as i32, -1) };
            }
            seen = EPOCH.load(SeqCst);
            // The region as this thread saw it, from its wake to its last task.
            let start = CLOCK.get().map(|now| now());
            take_tickets();
            short = matches!((CLOCK.get(), start), (Some(now), Some(t)) if now() - t < SHORT_MS);
        }
    }

    /// Runs tasks of the current region until its tickets run out.
    fn take_tickets() {
        loop {
            let t = TICKETS.fetch_add(1, SeqCst);
            let (n, i) = ((t >> 32) as usize, (t & u32::MAX as u64) as usize);
            if i >= n {
                return;
            }
            // SAFETY: the ticket is the current region's, whose task was written before its
            // tickets were published (both SeqCst) and stays until all its tasks are done.
            let task = unsafe { *TASK.0.get() };
            if let Some(f) = task {
                f(i);
            }
            DONE.fetch_add(1, SeqCst);
        }
    }

    /// Runs `f(0)`, ..., `f(n - 1)` on the pool and returns once all are done.
    pub(super) fn run(n: usize, f: &(dyn Fn(usize) + Sync)) {
        let workers = THREADS.load(SeqCst) > 1;
        if n <= 1 || !workers || n > u32::MAX as usize || BUSY.swap(true, SeqCst) {
            return (0..n).for_each(f);
        }
        // SAFETY: no ticket of an earlier region is left (each `run` waits for all its tasks),
        // so no thread reads the cell now; the borrow of `f` outlives its use, since this
        // function returns only once every task is done.
        unsafe {
            *TASK.0.get() = Some(core::mem::transmute::<
                &(dyn Fn(usize) + Sync),
                &'static (dyn Fn(usize) + Sync),
            >(f));
        }
        DONE.store(0, SeqCst);
        TICKETS.store((n as u64) << 32, SeqCst);
        EPOCH.fetch_add(1, SeqCst);
        // SAFETY: EPOCH is a live, aligned i32-sized atomic; notifying never blocks.
        unsafe { memory_atomic_notify(EPOCH.as_ptr().cast(), u32::MAX) };
        take_tickets();
        while DONE.load(SeqCst) < n {
            assert!(!PANICKED.load(SeqCst), "a thread of the CPU pool panicked");
            core::hint::spin_loop();
        }
        // SAFETY: every task is done and no ticket is left: nobody reads the cell.
        unsafe { *TASK.0.get() = None };
        BUSY.store(false, SeqCst);
    }
}

/// Calls `f` on every item, on all cores under `std`.
pub(crate) fn for_each<I: Send>(items: Vec<I>, f: impl Fn(I) + Send + Sync) {
    #[cfg(threaded)]
    {
        let mut slots: Vec<Option<I>> = items.into_iter().map(Some).collect();
        chunks_mut(&mut slots, 1, |_, slot| {
            if let Some(item) = slot[0].take() {
                f(item);
            }
        });
    }
    #[cfg(not(threaded))]
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
    #[cfg(threaded)]
    {
        // One piece when the loop stays on this thread: through `chunks_mut` all the same, so
        // that `f`'s loop is compiled once, not also as a serial loop beside it (one per unary
        // op and dtype in the threaded web module, issue 18, bytes).
        let size = if n >= 2 * grain && threads() > 1 {
            piece(n, grain)
        } else {
            n
        };
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
    }
    #[cfg(not(threaded))]
    {
        let _ = grain;
        out.extend(f(0..n));
    }
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
    #[cfg(threaded)]
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
    #[cfg(not(threaded))]
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
