// The in-page half of the browser benchmark (run.mjs drives it). One page runs one library on
// one backend: bench.html?lib=kiln|ort|tfjs&backend=cpu|wasm|webgpu&threads=N.
// On load it loads the library and the model, runs the first batch-1 image and stores the time
// from navigation start to that first result in window.__bench.cold (cold start). run.mjs then
// calls window.__bench.logits() and window.__bench.time(batch, warmup, runs, maxMs, warmMs).
// Every timed run is "input upload to logits read back in JS": a library tensor is made from the
// Float32Array, the model runs, the logits are read back into a Float32Array, tensors are freed.

import { Unavailable, adapterInfo, kilnOn } from "./page.mjs";

const q = new URLSearchParams(location.search);
const lib = q.get("lib");
const backend = q.get("backend");
const threads = Number(q.get("threads") || 1);

function loadScript(src) {
  return new Promise((resolve, reject) => {
    const s = document.createElement("script");
    s.src = src;
    s.onload = resolve;
    s.onerror = () => reject(new Error(`failed to load ${src}`));
    document.head.appendChild(s);
  });
}

/** Parses a safetensors file (8-byte header length, JSON header, raw little-endian data). */
function safetensors(buf) {
  const n = Number(new DataView(buf).getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 8, n)));
  const out = {};
  for (const [name, t] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    if (t.dtype !== "F32") throw new Error(`${name}: dtype ${t.dtype}, expected F32`);
    const [a, b] = t.data_offsets;
    out[name] = { shape: t.shape, data: new Float32Array(buf.slice(8 + n + a, 8 + n + b)) };
  }
  return out;
}

// Each loader returns { version, backend, threads, run(x: Float32Array, batch) -> Promise<Float32Array> }.
const loaders = {
  async kiln() {
    const { k, device } = await kilnOn(backend, undefined, threads);
    const model = await k.Model.load("/data/mnist.safetensors", { device });
    return {
      version: k.version(),
      backend: `${device.kind}${device.name ? ` (${device.name})` : ""}`,
      threads: device.threads,
      async run(x, b) {
        const t = k.Tensor.from(x, [b, 1, 28, 28], { device });
        const y = model.forward(t);
        const d = await y.data();
        t.dispose();
        y.dispose();
        return d;
      },
    };
  },

  // the forward that `kiln compile` recorded (run.mjs), replayed by kiln's program runner alone
  async kilnprog() {
    await adapterInfo();
    const { Program } = await import("/kiln/program.js");
    const program = await Program.load("/data/mnist.kilnprog");
    return {
      version: "compiled program",
      backend: "webgpu (program)",
      threads: 1,
      async run(x, b) {
        const [y] = await program.run([{ data: x, shape: [b, 1, 28, 28] }]);
        return y.data;
      },
    };
  },

  async ort() {
    if (backend === "webgpu") await adapterInfo();
    const ort = await import(backend === "webgpu" ? "/ort/ort.webgpu.min.mjs" : "/ort/ort.wasm.min.mjs");
    ort.env.wasm.wasmPaths = "/ort/";
    ort.env.wasm.numThreads = threads;
    ort.env.wasm.proxy = false;
    let session;
    try {
      session = await ort.InferenceSession.create("/data/mnist.onnx", {
        executionProviders: [backend === "webgpu" ? "webgpu" : "wasm"],
        graphOptimizationLevel: "all",
      });
    } catch (e) {
      if (backend === "webgpu") throw new Unavailable(`onnxruntime-web WebGPU session: ${e.message}`);
      throw e;
    }
    return {
      version: ort.env.versions?.web || ort.env.versions?.common || "?",
      backend: backend === "webgpu" ? "webgpu EP" : "wasm EP",
      threads: ort.env.wasm.numThreads,
      async run(x, b) {
        const t = new ort.Tensor("float32", x, [b, 1, 28, 28]);
        const r = await session.run({ input: t });
        const y = r.output;
        const d = y.location === "cpu" ? y.data : await y.getData(true);
        y.dispose?.();
        return d;
      },
    };
  },

  async tfjs() {
    if (backend === "webgpu") await adapterInfo();
    await loadScript("/tfjs/tfjs-core/dist/tf-core.min.js");
    const tf = self.tf;
    if (backend === "webgpu") {
      await loadScript("/tfjs/tfjs-backend-webgpu/dist/tf-backend-webgpu.min.js");
      if (!(await tf.setBackend("webgpu"))) throw new Unavailable("tf.setBackend('webgpu') returned false");
    } else {
      // tfjs-backend-wasm caps its thread pool at navigator.hardwareConcurrency / 2 (backend.cc:
      // num_cores), i.e. 1 on a 2-core machine. For an N-thread row the page reports 2N cores to
      // it (before the module is instantiated); getThreadsCount() below shows what it really uses.
      if (threads > navigator.hardwareConcurrency / 2) {
        state.hardwareConcurrencyOverride = 2 * threads;
        Object.defineProperty(navigator, "hardwareConcurrency", { get: () => 2 * threads, configurable: true });
      }
      await loadScript("/tfjs/tfjs-backend-wasm/dist/tf-backend-wasm.min.js");
      tf.wasm.setWasmPaths("/tfjs/tfjs-backend-wasm/dist/");
      tf.wasm.setThreadsCount(threads);
      if (!(await tf.setBackend("wasm"))) throw new Error("tf.setBackend('wasm') returned false");
    }
    await tf.ready();
    const w = safetensors(await (await fetch("/data/mnist.safetensors")).arrayBuffer());
    // kiln: conv weights OIHW, linear weights [out, in], flatten in (c, h, w) order, NCHW.
    // tfjs: NHWC activations, conv filters HWIO, matMul weights [in, out]; fc1's rows are permuted
    // from (c, h, w) to (h, w, c) so that flattening the NHWC pool output gives the same logits.
    const hwio = (t) => tf.tidy(() => tf.transpose(tf.tensor4d(t.data, t.shape), [2, 3, 1, 0]));
    const conv1 = hwio(w["conv1.weight"]);
    const conv2 = hwio(w["conv2.weight"]);
    const fc1 = tf.tidy(() =>
      tf.reshape(tf.transpose(tf.tensor4d(w["fc1.weight"].data, [128, 64, 12, 12]), [2, 3, 1, 0]), [9216, 128]));
    const fc2 = tf.tidy(() => tf.transpose(tf.tensor2d(w["fc2.weight"].data, [10, 128])));
    const b = (name) => tf.tensor1d(w[name].data);
    const [b1, b2, bf1, bf2] = ["conv1.bias", "conv2.bias", "fc1.bias", "fc2.bias"].map(b);
    // tf-core.min.js has no chained ops (x.reshape()): tf.* functions only.
    const forward = (x) => {
      let y = tf.fused.conv2d({ x, filter: conv1, strides: 1, pad: "valid", bias: b1, activation: "relu" });
      y = tf.fused.conv2d({ x: y, filter: conv2, strides: 1, pad: "valid", bias: b2, activation: "relu" });
      y = tf.reshape(tf.maxPool(y, 2, 2, "valid"), [x.shape[0], 9216]);
      y = tf.fused.matMul({ a: y, b: fc1, bias: bf1, activation: "relu" });
      return tf.fused.matMul({ a: y, b: fc2, bias: bf2 });
    };
    return {
      version: tf.version_core,
      backend: tf.getBackend(),
      threads: backend === "webgpu" ? 1 : tf.wasm.getThreadsCount?.() ?? threads,
      async run(x, n) {
        // [N, 1, 28, 28] and [N, 28, 28, 1] have the same memory layout.
        const y = tf.tidy(() => forward(tf.tensor4d(x, [n, 28, 28, 1])));
        const d = await y.data();
        y.dispose();
        return d;
      },
    };
  },
};

const state = { lib, backend, threads };
window.__bench = state;

async function main() {
  const inputsP = fetch("/data/inputs.f32").then((r) => r.arrayBuffer());
  const impl = await loaders[lib]();
  const inputs = new Float32Array(await inputsP);
  const first = await impl.run(inputs.slice(0, 784), 1);
  state.cold = performance.now();
  state.first = Array.from(first);
  state.version = impl.version;
  state.actualBackend = impl.backend;
  state.actualThreads = impl.threads;
  state.crossOriginIsolated = self.crossOriginIsolated;
  if (backend === "webgpu") state.adapter = await adapterInfo().catch((e) => e.message);
  state.logits = async (n) => Array.from(await impl.run(inputs.slice(0, n * 784), n));
  // Warm-up: `warmup` runs and at least `warmMs` of them, time for the engine to finish compiling
  // the hot wasm functions with its optimising tier (fresh pages start on the baseline compiler).
  state.time = async (n, warmup, runs, maxMs, warmMs = 0) => {
    const x = inputs.slice(0, n * 784);
    const w0 = performance.now();
    for (let i = 0; i < warmup || performance.now() - w0 < warmMs; i++) await impl.run(x, n);
    const times = [];
    const start = performance.now();
    while (times.length < runs) {
      const t0 = performance.now();
      await impl.run(x, n);
      times.push(performance.now() - t0);
      if (maxMs && performance.now() - start > maxMs) break;
    }
    return times;
  };
  state.ready = true;
}

main().catch((e) => {
  state.error = { unavailable: e instanceof Unavailable, message: String(e?.message || e), stack: e?.stack };
});
