// run.mjs --ab: two kiln builds (/kiln/ = A, /kiln-b/ = B) in one page, the MNIST CNN with the
// same weights and input in each, timed in alternating blocks of forwards (A first in even
// blocks, B first in odd ones). Per block, the median of each; the result is the median of the
// blocks' B/A ratios, which a machine whose speed drifts between blocks leaves alone.
// Query: ta, tb (each build's module: "1" its single-threaded CPU module, "T1" its threaded
// CPU module with a pool of 1, "2" the threaded one with 2 threads, "G" its WebGPU-only module
// on WebGPU), batch, blocks, per. Besides whole forwards, each build's host time (the
// `model.forward` call alone: on WebGPU, recording and submitting the forward) is reported.
const q = new URLSearchParams(location.search);
const [batch, blocks, per] = ["batch", "blocks", "per"].map((k) => Number(q.get(k)));

// One build's forward: its CPU-only (or WebGPU-only) glue loaded directly (not through index.js,
// whose module is one per page), its thread pool started as index.js does.
async function load(dir, mode) {
  const gpu = mode === "G";
  const file = gpu ? "kiln_web_gpu" : mode === "1" ? "kiln_web_cpu" : "kiln_web_threads_cpu";
  const glue = await import(`${dir}dist/${file}.js`);
  await glue.default({ module_or_path: `${dir}dist/${file}_bg.wasm` });
  if (mode !== "1" && !gpu) {
    const threads = mode === "2" ? 2 : 1;
    glue.threadQueue?.(); // builds before the pool of their own (rayon) had this step
    const [module, memory] = glue.threadShared();
    await Promise.all(Array.from({ length: threads - 1 }, () => new Promise((resolve, reject) => {
      const w = new Worker(`${dir}thread.js`, { type: "module" });
      w.onmessage = ({ data }) => (data?.error ? reject(new Error(data.error)) : resolve());
      w.onerror = (e) => reject(new Error(`worker: ${e.message}`));
      w.postMessage({ module, memory, webgpu: false });
    })));
    glue.buildThreadPool(threads);
  }
  const bytes = new Uint8Array(await (await fetch("/data/mnist.safetensors")).arrayBuffer());
  const device = gpu ? await glue.Device.webgpu() : undefined;
  const model = await glue.Model.load(bytes, { device });
  const x = Float32Array.from({ length: batch * 784 }, (_, i) => ((i * 2654435761) % 1000) / 1000);
  const host = [];
  const forward = async () => {
    const t = glue.Tensor.from(x, [batch, 1, 28, 28], { device });
    const t0 = performance.now();
    const y = model.forward(t);
    host.push(performance.now() - t0);
    const d = await y.data();
    t.free();
    y.free();
    return d;
  };
  forward.host = host;
  return forward;
}

const median = (v) => { const s = [...v].sort((a, b) => a - b); return s[s.length >> 1]; };
try {
  const a = await load("/kiln/", q.get("ta")), b = await load("/kiln-b/", q.get("tb"));
  const [ya, yb] = [await a(), await b()];
  const diff = ya.reduce((m, v, i) => Math.max(m, Math.abs(v - yb[i])), 0);
  for (let i = 0; i < 3 * per; i++) { await a(); await b(); }
  const blockA = [], blockB = [], ratios = [];
  for (let k = 0; k < blocks; k++) {
    const ta = [], tb = [];
    for (const [f, ts] of k % 2 ? [[b, tb], [a, ta]] : [[a, ta], [b, tb]]) {
      for (let i = 0; i < per; i++) {
        const t0 = performance.now();
        await f();
        ts.push(performance.now() - t0);
      }
    }
    blockA.push(median(ta));
    blockB.push(median(tb));
    ratios.push(median(tb) / median(ta));
  }
  const sorted = [...ratios].sort((x, y) => x - y);
  const at = (p) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
  window.__ab = { a: median(blockA), b: median(blockB), ratio: median(ratios), p10: at(0.1), p90: at(0.9), diff,
    hostA: median(a.host), hostB: median(b.host) };
} catch (e) {
  window.__ab = { error: String(e?.stack ?? e) };
}
