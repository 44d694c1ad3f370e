// What both benchmark pages (harness.mjs, gelu.mjs) need: the error that marks a row as
// unavailable on this browser (not failed), the WebGPU adapter's description, kiln on a backend.

export class Unavailable extends Error {}

export async function adapterInfo() {
  if (!("gpu" in navigator)) throw new Unavailable("navigator.gpu is missing (WebGPU not exposed)");
  const a = await navigator.gpu.requestAdapter();
  if (!a) throw new Unavailable("navigator.gpu.requestAdapter() returned null (no WebGPU adapter)");
  const i = a.info || {};
  return `${i.vendor || "?"} ${i.architecture || ""} ${i.description || ""}`.replace(/\s+/g, " ").trim() +
    (i.isFallbackAdapter || a.isFallbackAdapter ? " (fallback adapter)" : "");
}

/**
 * The kiln package `k`, initialised with `threads` CPU threads (more than 1: the threaded build,
 * the page being cross-origin isolated), and its device for `backend`: WebGPU with `options`,
 * else the CPU. Each page loads the module of its one backend, as a page that uses only it
 * would, and as tfjs's pages load their wasm or WebGPU backend alone: the CPU-only module
 * (`webgpu: false`) or the WebGPU-only one (`cpu: false`, single-threaded).
 */
export async function kilnOn(backend, options, threads = 1) {
  const k = await import("/kiln/index.js");
  await k.init(undefined, backend === "webgpu" ? { cpu: false } : { threads, webgpu: false });
  if (backend !== "webgpu") return { k, device: k.Device.cpu() };
  await adapterInfo();
  try {
    return { k, device: await k.Device.webgpu(options) };
  } catch (e) {
    throw new Unavailable(`kiln Device.webgpu(): ${e.message}`);
  }
}
