// One thread of kiln's threaded build, started by index.js on a cross-origin isolated page:
// instantiates the module on the page's shared memory, says so, then runs the thread pool's
// loop for the CPU kernels (web/src/threads.rs), which never returns.
// `webgpu` and `text` say which of the threaded builds the page loaded (the glue must match the
// module): the main one, the CPU-only one or the text module.
self.onmessage = async ({ data: { module, memory, webgpu, text } }) => {
  let glue;
  try {
    glue = text
      ? await import("./dist/kiln_web_threads_text.js")
      : webgpu
        ? await import("./dist/kiln_web_threads.js")
        : await import("./dist/kiln_web_threads_cpu.js");
    await glue.default({ module_or_path: module, memory });
  } catch (e) {
    postMessage({ error: `a thread failed to start: ${e?.message ?? e}` });
    return;
  }
  postMessage({ ready: true });
  glue.threadWorker();
};
