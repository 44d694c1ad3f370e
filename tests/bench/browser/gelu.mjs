// The in-page half of the GELU benchmark (run.mjs --gelu drives it; see README.md). One page runs
// one library on one backend: gelu.html?lib=kiln|ort&backend=cpu|webgpu|wasm&fusion=0|1&model=NAME.
// kiln: GELU composed from 5 tensor ops, x * (erf(x / sqrt 2) + 1) / 2 (fused into one kernel on
// WebGPU unless fusion=0). onnxruntime-web: the one-node ONNX model NAME.onnx (gelu_onnx.py).
// run.mjs calls window.__gelu.time(p, mode, warmup, runs, maxMs) and .check(p):
//   mode "e2e":     Float32Array -> library tensor (upload) -> GELU -> Float32Array (read back)
//   mode "compute": the input already on the device; GELU, then wait for the result on the device
//                   (kiln: read back one element of it; onnxruntime-web WebGPU: output kept as a
//                   GPU buffer, then GPUQueue.onSubmittedWorkDone(); on the CPU backends the
//                   library's run with the input tensor made beforehand)
// check(p) posts the output of 2^p inputs to the server (/out/<row>_<p>.f32) for the comparisons.

import { Unavailable, adapterInfo, kilnOn } from "./page.mjs";

const q = new URLSearchParams(location.search);
const lib = q.get("lib");
const backend = q.get("backend");
const fusion = q.get("fusion") !== "0";
const modelName = q.get("model") || "gelu20";

const state = { lib, backend, fusion, model: modelName, warnings: [] };
window.__gelu = state;
// Each loader returns { version, backend, upload(x) -> handle, e2e(x) -> Float32Array,
// compute(handle) -> Promise<void>, free(handle) }.
const loaders = {
  async kiln() {
    const { k, device } = await kilnOn(backend, { fusion });
    const gelu = (x) => {
      const a = x.div(Math.SQRT2);
      const e = a.erf();
      const e1 = e.add(1);
      const p = x.mul(e1);
      const y = p.div(2);
      for (const t of [a, e, e1, p]) t.dispose();
      return y;
    };
    return {
      version: k.version(),
      backend: `${device.kind}${device.kind === "webgpu" ? ` (fusion ${device.fusion ? "on" : "off"})` : ""}`,
      kernels: () => k.fusedKernels().map((f) => f.name),
      upload: (x) => k.Tensor.from(x, [x.length], { device }),
      async e2e(x) {
        const t = k.Tensor.from(x, [x.length], { device });
        const y = gelu(t);
        const d = await y.data();
        t.dispose();
        y.dispose();
        return d;
      },
      async compute(t) {
        const y = gelu(t);
        const one = y.slice([[0, 1]]);
        await one.data();
        one.dispose();
        y.dispose();
      },
      free: (t) => t.dispose(),
    };
  },

  async ort() {
    if (backend === "webgpu") await adapterInfo();
    const ort = await import(backend === "webgpu" ? "/ort/ort.webgpu.min.mjs" : "/ort/ort.wasm.min.mjs");
    ort.env.wasm.wasmPaths = "/ort/";
    ort.env.wasm.numThreads = 1;
    ort.env.wasm.proxy = false;
    const gpu = backend === "webgpu";
    let session;
    try {
      session = await ort.InferenceSession.create(`/data/${modelName}.onnx`, {
        executionProviders: [gpu ? "webgpu" : "wasm"],
        graphOptimizationLevel: "all",
        ...(gpu ? { preferredOutputLocation: "gpu-buffer" } : {}),
      });
    } catch (e) {
      throw new Unavailable(`onnxruntime-web ${backend} session for ${modelName}.onnx: ${e.message}`);
    }
    const device = gpu ? await ort.env.webgpu.device : null;
    const read = async (y) => {
      const d = y.location === "cpu" ? y.data : await y.getData(true);
      y.dispose?.();
      return d;
    };
    return {
      version: ort.env.versions?.web || ort.env.versions?.common || "?",
      backend: gpu ? "webgpu EP" : "wasm EP, 1 thread",
      upload(x) {
        if (!gpu) return new ort.Tensor("float32", x, [x.length]);
        // GPUBufferUsage.STORAGE | COPY_SRC | COPY_DST
        const buffer = device.createBuffer({ size: x.byteLength, usage: 0x80 | 0x04 | 0x08 });
        device.queue.writeBuffer(buffer, 0, x);
        const t = ort.Tensor.fromGpuBuffer(buffer, { dataType: "float32", dims: [x.length] });
        t.buffer = buffer;
        return t;
      },
      async e2e(x) {
        const r = await session.run({ x: new ort.Tensor("float32", x, [x.length]) });
        return read(r.y);
      },
      async compute(t) {
        const r = await session.run({ x: t });
        if (gpu) await device.queue.onSubmittedWorkDone();
        r.y.dispose?.();
      },
      free(t) {
        t.dispose?.();
        t.buffer?.destroy();
      },
    };
  },
};

const inputs = new Map();
async function input(p) {
  if (!inputs.has(p)) inputs.set(p, new Float32Array(await (await fetch(`/data/x_${p}.f32`)).arrayBuffer()));
  return inputs.get(p);
}

async function main() {
  const impl = await loaders[lib]();
  Object.assign(state, { version: impl.version, actualBackend: impl.backend });
  if (backend === "webgpu") state.adapter = await adapterInfo().catch((e) => e.message);
  state.kernels = () => impl.kernels?.() ?? null;
  state.time = async (p, mode, warmup, runs, maxMs) => {
    const x = await input(p);
    const handle = mode === "compute" ? impl.upload(x) : null;
    const once = () => (mode === "compute" ? impl.compute(handle) : impl.e2e(x));
    for (let i = 0; i < warmup; i++) await once();
    const times = [];
    const start = performance.now();
    while (times.length < runs) {
      const t0 = performance.now();
      await once();
      times.push(performance.now() - t0);
      if (performance.now() - start > maxMs) break;
    }
    if (handle) impl.free(handle);
    return times;
  };
  state.check = async (p, row) => {
    const y = await impl.e2e(await input(p));
    const r = await fetch(`/out/${row}_${p}.f32`, { method: "POST", body: y });
    if (!r.ok) throw new Error(`posting the output: ${r.status}`);
    return y.length;
  };
  state.ready = true;
}

main().catch((e) => {
  state.error = { unavailable: e instanceof Unavailable, message: String(e?.message || e), stack: e?.stack };
});
