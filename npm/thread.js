// One thread of kiln's threaded build, started by index.js on a cross-origin isolated page:
// instantiates the module on the page's shared memory, says so, then runs the thread pool's
// loop for the CPU kernels (web/src/threads.rs), which never returns.
import init, { threadWorker } from "./dist/kiln_web_threads.js";

self.onmessage = async ({ data: { module, memory } }) => {
  try {
    await init({ module_or_path: module, memory });
  } catch (e) {
    postMessage({ error: `a thread failed to start: ${e?.message ?? e}` });
    return;
  }
  postMessage({ ready: true });
  threadWorker();
};
