//! The threaded build's thread pool: kiln-core's pool for the page (`cpu/par.rs`), whose
//! threads are Web Workers sharing this module's memory; the CPU kernels spread their loops over
//! it.
//!
//! npm/index.js starts it when the page is cross-origin isolated: `threads - 1` workers
//! (npm/thread.js) instantiate the module on [`thread_shared`]'s module and memory and call
//! [`thread_worker`], then the page's thread calls [`build_thread_pool`]. The page's main thread
//! is the pool's first thread: it works on its own loops instead of waiting for them (its waits
//! spin: blocking waits trap there).

#[cfg(all(target_arch = "wasm32", not(target_feature = "atomics")))]
compile_error!("the `threads` feature needs the wasm32 `+atomics` build (scripts/build-web.sh)");

use wasm_bindgen::prelude::*;

/// `[module, memory]`: what a worker instantiates to share this module's memory.
#[doc(hidden)]
#[wasm_bindgen(js_name = threadShared)]
pub fn thread_shared() -> js_sys::Array {
    js_sys::Array::of2(&wasm_bindgen::module(), &wasm_bindgen::memory())
}

/// Runs on a worker: the pool's loop, which never returns.
#[doc(hidden)]
#[wasm_bindgen(js_name = threadWorker)]
pub fn thread_worker() {
    kiln_core::cpu::worker()
}

/// Makes the pool `threads` threads: the calling (main) thread and `threads - 1` workers, which
/// have called [`thread_worker`] (it waits up to 10 s for them). Returns the pool's size.
#[doc(hidden)]
#[wasm_bindgen(js_name = buildThreadPool)]
pub fn build_thread_pool(threads: usize) -> Result<usize, JsError> {
    kiln_core::cpu::start(threads, crate::js::now_ms, 10_000.0).map_err(|started| {
        JsError::new(&format!(
            "the thread pool wanted {} workers, {started} started within 10 s",
            threads.max(1) - 1
        ))
    })
}
