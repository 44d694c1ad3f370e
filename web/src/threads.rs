//! The threaded build's thread pool: rayon's global pool, whose threads are Web Workers sharing
//! this module's memory; kiln-core's CPU kernels spread their loops over it (`cpu/par.rs`).
//!
//! npm/index.js starts it when the page is cross-origin isolated: [`thread_queue`], then
//! `threads - 1` workers (npm/thread.js) that instantiate the module on [`thread_shared`]'s
//! module and memory and call [`thread_worker`], then [`build_thread_pool`] once all are ready.
//! The page's main thread is the pool's first thread: it works on its own loops instead of
//! waiting for them (its waits spin, rayon's `web_spin_lock`: blocking waits trap there).

#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
compile_error!("the `threads` feature needs the wasm32 `+atomics` build (scripts/build-web.sh)");

use rayon::ThreadBuilder;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Mutex, OnceLock};
use wasm_bindgen::prelude::*;

/// The channel that hands rayon's threads to the waiting workers.
struct Queue {
    tx: Sender<ThreadBuilder>,
    rx: Mutex<Receiver<ThreadBuilder>>,
}

/// Set on the main thread before any worker exists, so nobody ever waits for it.
static QUEUE: OnceLock<Queue> = OnceLock::new();

/// Creates the queue the workers wait on (first step of starting the pool).
#[doc(hidden)]
#[wasm_bindgen(js_name = threadQueue)]
pub fn thread_queue() {
    QUEUE.get_or_init(|| {
        let (tx, rx) = channel();
        Queue {
            tx,
            rx: Mutex::new(rx),
        }
    });
}

/// `[module, memory]`: what a worker instantiates to share this module's memory.
#[doc(hidden)]
#[wasm_bindgen(js_name = threadShared)]
pub fn thread_shared() -> js_sys::Array {
    js_sys::Array::of2(&wasm_bindgen::module(), &wasm_bindgen::memory())
}

/// Runs on a worker: waits for one of the pool's threads and runs it (rayon's loop, which never
/// returns). Returns at once when no queue was made.
#[doc(hidden)]
#[wasm_bindgen(js_name = threadWorker)]
pub fn thread_worker() {
    let Some(queue) = QUEUE.get() else { return };
    let thread = queue.rx.lock().ok().and_then(|rx| rx.recv().ok());
    if let Some(thread) = thread {
        thread.run();
    }
}

/// Builds rayon's global pool of `threads` threads: the calling (main) thread and the
/// `threads - 1` workers already waiting in [`thread_worker`]. Returns the pool's size.
#[doc(hidden)]
#[wasm_bindgen(js_name = buildThreadPool)]
pub fn build_thread_pool(threads: usize) -> Result<usize, JsError> {
    let queue = QUEUE
        .get()
        .ok_or_else(|| JsError::new("threadQueue() was not called"))?;
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .use_current_thread()
        .spawn_handler(|thread| {
            queue
                .tx
                .send(thread)
                .map_err(|_| std::io::Error::other("the workers' queue is closed"))
        })
        .build_global()
        .map_err(|e| JsError::new(&e.to_string()))?;
    kiln_core::cpu::set_clock(crate::js::now_ms);
    Ok(rayon::current_num_threads())
}
