// `node run.mjs --dispatches` (issue 18): where one kiln WebGPU forward of the MNIST CNN goes.
// Wraps the page's GPUDevice, GPUQueue and encoders to count the WebGPU calls of one forward and
// capture each dispatch (WGSL, params words, buffer sizes, grid), then replays every dispatch
// alone on a second device of the same adapter, with random inputs: its own time, submit to
// onSubmittedWorkDone. Query: ?batches=1,64&runs=3. Result in window.__dispatches.

import { kilnOn } from "./page.mjs";

const q = new URLSearchParams(location.search);
const counts = {};
let capture = null;
const wgsl = new Map(), written = new Map(), groups = new Map();
let pipeline = null, group = null, label = "";

/** Counts calls of `proto[name]` and runs `after(args, result)` on each. */
function watch(proto, name, after = () => {}) {
  const orig = proto[name];
  proto[name] = function (...args) {
    counts[name] = (counts[name] || 0) + 1;
    const r = orig.apply(this, args);
    after(args, r);
    return r;
  };
}
watch(GPUDevice.prototype, "createShaderModule", (a, r) => wgsl.set(r, a[0].code));
watch(GPUDevice.prototype, "createComputePipeline", (a, r) => wgsl.set(r, wgsl.get(a[0].compute.module)));
watch(GPUDevice.prototype, "createBindGroup", (a, r) => groups.set(r, a[0].entries.map((e) => e.resource.buffer)));
watch(GPUDevice.prototype, "createBuffer");
watch(GPUDevice.prototype, "createCommandEncoder");
watch(GPUQueue.prototype, "submit");
watch(GPUQueue.prototype, "writeBuffer", (a) => {
  const d = a[2];
  const bytes = ArrayBuffer.isView(d) ? new Uint8Array(d.buffer, d.byteOffset, d.byteLength) : new Uint8Array(d);
  written.set(a[0], bytes.slice());
});
watch(GPUBuffer.prototype, "mapAsync");
watch(GPUCommandEncoder.prototype, "beginComputePass", (a) => { label = a[0]?.label || ""; });
watch(GPUCommandEncoder.prototype, "copyBufferToBuffer");
watch(GPUComputePassEncoder.prototype, "setPipeline", (a) => { pipeline = a[0]; });
watch(GPUComputePassEncoder.prototype, "setBindGroup", (a) => { group = a[1]; });
watch(GPUComputePassEncoder.prototype, "dispatchWorkgroups", (a) => {
  const buffers = groups.get(group) || [];
  capture?.push({ op: label, code: wgsl.get(pipeline), params: written.get(buffers[0]),
    sizes: buffers.map((b) => b.size), grid: [a[0], a[1] ?? 1, a[2] ?? 1] });
});

const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[s.length >> 1]; };

/** Median time of `runs` submissions of dispatch `d` alone on `dev` (random inputs). */
async function replay(dev, d, runs) {
  const module = dev.createShaderModule({ code: d.code });
  const pipe = await dev.createComputePipelineAsync({ layout: "auto", compute: { module, entryPoint: "main" } });
  const buffers = d.sizes.map((size, i) => {
    const b = dev.createBuffer({ size, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
    const data = new Uint8Array(size);
    if (i === 0) data.set(d.params.subarray(0, size));
    else data.set(new Uint8Array(new Float32Array(size / 4).map(() => Math.random() - 0.5).buffer));
    dev.queue.writeBuffer(b, 0, data);
    return b;
  });
  const bind = dev.createBindGroup({ layout: pipe.getBindGroupLayout(0),
    entries: buffers.map((buffer, binding) => ({ binding, resource: { buffer } })) });
  const times = [];
  for (let r = 0; r <= runs; r++) {
    const e = dev.createCommandEncoder();
    const p = e.beginComputePass();
    p.setPipeline(pipe);
    p.setBindGroup(0, bind);
    p.dispatchWorkgroups(...d.grid);
    p.end();
    const t0 = performance.now();
    dev.queue.submit([e.finish()]);
    await dev.queue.onSubmittedWorkDone();
    if (r) times.push(performance.now() - t0); // the first run compiles
  }
  buffers.forEach((b) => b.destroy());
  return median(times);
}

async function main() {
  // fusion=0: the plain device (a product and its bias-ReLU pass as two dispatches)
  const { k, device } = await kilnOn("webgpu", { fusion: q.get("fusion") !== "0" });
  const model = await k.Model.load("/data/mnist.safetensors", { device });
  const dev = await (await navigator.gpu.requestAdapter()).requestDevice();
  const runs = Number(q.get("runs") || 3);
  const out = [];
  for (const batch of (q.get("batches") || "1,64").split(",").map(Number)) {
    const x = new Float32Array(batch * 784).map(() => Math.random());
    const forward = async () => {
      const t0 = performance.now();
      const t = k.Tensor.from(x, [batch, 1, 28, 28], { device });
      const y = model.forward(t);
      const host = performance.now() - t0;
      await y.data();
      t.dispose();
      y.dispose();
      return [performance.now() - t0, host];
    };
    await forward();
    for (const key of Object.keys(counts)) delete counts[key];
    capture = [];
    await forward();
    const dispatches = capture;
    const calls = { ...counts };
    capture = null;
    const timed = [];
    for (let r = 0; r < runs; r++) timed.push(await forward());
    const kernels = [];
    for (const d of dispatches) kernels.push({ op: d.op, grid: d.grid.join("x"), ms: await replay(dev, d, runs) });
    out.push({ batch, calls, forwardMs: median(timed.map((t) => t[0])), hostMs: median(timed.map((t) => t[1])), kernels });
  }
  window.__dispatches = out;
}
main().catch((e) => { window.__dispatches = { error: String(e.stack || e) }; });
