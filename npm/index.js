// kiln-ml: the entry point. The API itself lives in the WebAssembly module (dist/, built by
// cargo and wasm-bindgen from kiln's web/ crate); this file only loads it the same way in browsers,
// bundlers (Vite, webpack) and Node. It comes in five builds of web/, of which init() loads one:
//   - dist/kiln_web*: the main module, WebGPU and the CPU backend;
//   - dist/kiln_web_threads*: the same built with wasm atomics, for cross-origin isolated pages:
//     its CPU kernels run on a pool of Web Workers (thread.js) sharing its memory;
//   - dist/kiln_web_cpu*, dist/kiln_web_threads_cpu*: each of those without WebGPU and fusion
//     (about a third smaller), for pages that ask for it (`webgpu: false`) and where there is no
//     WebGPU (Node, browsers without navigator.gpu);
//   - dist/kiln_web_gpu*: WebGPU without the CPU kernels (about a third smaller than the main
//     module), for pages that ask for it (`cpu: false`); its CPU device holds tensors only.
// Two more modules are imported on first use only: the ONNX converter (dist/kiln_web_onnx*, from
// web-onnx/) when the first ONNX file is met, and the main module built with text generation
// (dist/kiln_web_text*) on the first TextModel.load. Every module is a dynamic import of a
// literal path, so bundlers split each into its own chunk and a page fetches only what it loads.

// The API is the loaded module's (ES module exports are live, so importers see it once init()
// has bound it); before init() they are undefined.
export let Device, Tensor, Model, version;
export let registerOp, unregisterOp, registeredOps, customOp, fusedKernels;
let main; // the glue init() bound

/** Points the exports at a module's API (`glue`: wasm-bindgen's JS for it). */
function bind(glue) {
  main = glue;
  ({ Device, Tensor, Model, version } = glue);
  ({ registerOp, unregisterOp, registeredOps, customOp, fusedKernels } = glue);
  acceptOnnx(Model);
}

let ready;
let pageThreads; // the threads init() runs the CPU kernels on
let text; // the text module's glue, once loaded

/**
 * Loads and instantiates kiln's WebAssembly module (once; later calls return the same promise).
 * `source` may be a URL, a Response, bytes or a WebAssembly.Module; by default the .wasm file
 * next to this package is used.
 *
 * On a cross-origin isolated page (served with `Cross-Origin-Opener-Policy: same-origin` and
 * `Cross-Origin-Embedder-Policy: require-corp`), the threaded build is loaded and the CPU
 * kernels spread over `options.threads` threads (default: the cores, at most 4); `threads: 1`
 * keeps a single-threaded module. `options.webgpu: false` loads the CPU-only build of either
 * (`kiln_web_cpu_bg.wasm`, `kiln_web_threads_cpu_bg.wasm`), which is also the default where
 * there is no `navigator.gpu` (Node, browsers without WebGPU); `webgpu: true` loads a module
 * with WebGPU everywhere. With a `source`, the main module is assumed unless `options.threads`
 * > 1 (then `source` must be the threaded one, `kiln_web_threads_bg.wasm`) or `options.webgpu`
 * is false (then the CPU-only one of the two). `Device.cpu().threads` says how many threads run.
 *
 * `options.cpu: false` loads the WebGPU-only module (`kiln_web_gpu_bg.wasm`, about a third
 * smaller than the main one): every op runs on WebGPU, which becomes the default device (and
 * `Device.auto()`'s choice, even on a software adapter); CPU tensors only hold data (made with
 * `Tensor.from`, read back, moved with `.to(device)`), and an op on one is an error. With a
 * `source`, it must be that module.
 */
export function init(source, options) {
  ready ??= instantiate(source, options).catch((e) => {
    ready = undefined;
    throw e;
  });
  return ready;
}

/** How many threads `init` runs the CPU kernels on: 1 unless the page can share memory. */
function threadsWanted(source, options) {
  const asked = options?.threads;
  if (asked != null && !(Number.isInteger(asked) && asked >= 1)) {
    throw kilnError("invalid_argument", "init", `options.threads must be a positive integer, got ${asked}`);
  }
  const isolated = globalThis.crossOriginIsolated === true && typeof SharedArrayBuffer === "function"
    && typeof Worker === "function";
  if (!isolated) return 1;
  if (asked != null) return asked;
  return source === undefined ? Math.min(globalThis.navigator?.hardwareConcurrency || 1, 4) : 1;
}

const inNode = () => typeof process !== "undefined" && Boolean(process.versions?.node);

// Node cannot fetch file: URLs: a .wasm file of dist/, read from disk. The name is in a variable
// so that bundlers leave this Node-only import alone.
async function readDist(file) {
  const fsName = "node:fs/promises";
  const fs = await import(/* @vite-ignore */ /* webpackIgnore: true */ fsName);
  return fs.readFile(new URL(`./dist/${file}`, import.meta.url));
}

/** `options[name]`, which must be a boolean where given. */
function flag(options, name) {
  const asked = options?.[name];
  if (asked != null && typeof asked !== "boolean") {
    throw kilnError("invalid_argument", "init", `options.${name} must be a boolean, got ${typeof asked}`);
  }
  return asked;
}

/** Whether `init` loads a module with WebGPU: `options.webgpu`, else whether the page has it. */
function webgpuWanted(source, options) {
  return flag(options, "webgpu") ?? (source !== undefined || globalThis.navigator?.gpu != null);
}

/** Whether `init` loads a module with the CPU kernels: `options.cpu`, by default `true`. */
function cpuWanted(options) {
  const cpu = flag(options, "cpu") ?? true;
  if (!cpu && (flag(options, "webgpu") === false || options.threads > 1)) {
    throw kilnError("invalid_argument", "init",
      "options.cpu: false loads the WebGPU-only module (no CPU kernels, no threads): options.webgpu must not be false, nor options.threads above 1");
  }
  return cpu;
}

async function instantiate(source, options) {
  const cpu = cpuWanted(options);
  const threads = cpu ? threadsWanted(source, options) : 1;
  const webgpu = !cpu || webgpuWanted(source, options);
  if (threads > 1) {
    // Literal paths: bundlers split each threaded build into its own chunk, fetched only here.
    const glue = await (webgpu ? import("./dist/kiln_web_threads.js") : import("./dist/kiln_web_threads_cpu.js"))
      .catch(() => undefined);
    try {
      if (glue) {
        await glue.default(source === undefined ? undefined : { module_or_path: source });
        await startThreads(glue, threads, { webgpu });
        pageThreads = threads;
        bind(glue);
        return;
      }
    } catch (e) {
      // Workers refused (a Content-Security-Policy, say): the page still runs, on one thread.
      console.warn(`kiln: the threaded module did not start (${e.message}); using one thread`);
    }
    // Also for a package built without the threaded module (KILN_WEB_THREADS=0).
  }
  const glue = await (!cpu ? import("./dist/kiln_web_gpu.js")
    : webgpu ? import("./dist/kiln_web.js") : import("./dist/kiln_web_cpu.js"));
  if (source === undefined && inNode()) source = await readDist(`kiln_web${!cpu ? "_gpu" : webgpu ? "" : "_cpu"}_bg.wasm`);
  await glue.default(source === undefined ? undefined : { module_or_path: source });
  pageThreads = 1;
  bind(glue);
}

/**
 * Starts a threaded module's pool: `threads - 1` workers instantiate it on its memory and wait,
 * then the pool is built with this thread as its first (web/src/threads.rs). `build` tells
 * thread.js which threaded module `glue` is: `{ webgpu, text }`.
 */
async function startThreads(glue, threads, build) {
  const [module, memory] = glue.threadShared();
  const workers = [];
  const started = Array.from({ length: threads - 1 }, () => new Promise((resolve, reject) => {
    const worker = new Worker(new URL("./thread.js", import.meta.url), { type: "module", name: "kiln" });
    workers.push(worker);
    worker.onmessage = ({ data }) => (data?.error ? reject(new Error(data.error)) : resolve());
    worker.onerror = (e) => reject(new Error(`a worker failed to start: ${e.message ?? "its script did not load"}`));
    worker.postMessage({ module, memory, ...build });
  }));
  try {
    await Promise.all(started);
  } catch (e) {
    for (const w of workers) w.terminate();
    throw e;
  }
  glue.buildThreadPool(threads);
}

/**
 * A module imported on first use: the returned `load(source)` instantiates it once (later calls
 * return the same promise; a failed load is tried again next time). `glue` imports its JS by a
 * literal path, so that bundlers split it into a chunk of its own, fetched on first use, and emit
 * its .wasm next to it (wasm-bindgen's loader finds it through import.meta.url); `file` is that
 * .wasm in dist/, which Node reads from disk. `start(glue, threads)`, if given, runs once it is
 * instantiated (a threaded module's workers).
 */
function lazyModule(glue, file, start) {
  let ready;
  const instantiate = async (source, threads) => {
    const g = await glue();
    if (source === undefined && inNode()) source = await readDist(file);
    await g.default(source === undefined ? undefined : { module_or_path: source });
    await start?.(g, threads);
    return g;
  };
  return (source, threads) => {
    ready ??= instantiate(source, threads).catch((e) => {
      ready = undefined;
      throw e;
    });
    return ready;
  };
}

const loadOnnx = lazyModule(() => import("./dist/kiln_web_onnx.js"), "kiln_web_onnx_bg.wasm");
const loadText = lazyModule(() => import("./dist/kiln_web_text.js"), "kiln_web_text_bg.wasm");
const loadThreadedText = lazyModule(() => import("./dist/kiln_web_threads_text.js"), "kiln_web_threads_text_bg.wasm",
  (g, threads) => startThreads(g, threads, { webgpu: true, text: true }));

/**
 * Loads and instantiates the ONNX converter module (once; later calls return the same promise).
 * `convertOnnx` and `Model.load` of an ONNX file call it themselves; call it only to load the
 * module from elsewhere (`source` as for `init`) or ahead of time.
 */
export function initOnnx(source) {
  return loadOnnx(source);
}

/**
 * Loads and instantiates the text-generation module (once; later calls return the same promise).
 * `TextModel.load` calls it itself; call it only to load the module from elsewhere (`source` as
 * for `init`) or ahead of time. On as many threads as `init()` runs (or would run, before it):
 * where that is more than one, its threaded build, with a pool of workers of its own.
 */
export async function initText(source) {
  const threads = source === undefined ? (pageThreads ?? threadsWanted(undefined, undefined)) : 1;
  if (threads > 1 && text === undefined) {
    try {
      text = await loadThreadedText(source, threads);
    } catch (e) {
      console.warn(`kiln: the threaded text module did not start (${e.message}); using one thread`);
    }
  }
  text ??= await loadText(source);
  return text;
}

/**
 * A GPT model generating text. Its code (the GPT, the tokenizer, generation) is a module of its
 * own, loaded on the first `TextModel.load`: the main module is about a tenth smaller without it.
 * That module holds the model's weights and runs it on its own CPU backend or WebGPU device, so
 * a `TextModel`'s `device` is that module's `Device` (same members, another class).
 */
export class TextModel {
  /** Loads a GPT model file onto `options.device` (see index.d.ts). */
  static async load(source, options) {
    const glue = await initText();
    // A device names its kind (`device.kind`): the text module makes its own of that kind;
    // WebGPU has to be set up there first, as `Device.webgpu()` did in the main module.
    const d = options?.device;
    if (d === "webgpu" || (d?.kind === "webgpu" && typeof d === "object")) {
      await glue.Device.webgpu({ fusion: options?.fusion ?? d?.fusion });
    }
    return glue.TextModel.load(source, options);
  }

  static [Symbol.hasInstance](value) {
    return text !== undefined && value instanceof text.TextModel;
  }
}

/**
 * Live tensors and bytes, in total and per device: the main module's, and the text module's
 * once a `TextModel` loaded it (its weights).
 */
export function memory() {
  const reports = [main, text].filter(Boolean).map((glue) => glue.memoryReport());
  if (reports.length === 1) return reports[0];
  const sum = { tensors: 0, bytes: 0, devices: {} };
  for (const r of reports) {
    sum.tensors += r.tensors;
    sum.bytes += r.bytes;
    for (const [name, d] of Object.entries(r.devices)) {
      const into = (sum.devices[name] ??= { tensors: 0, bytes: 0 });
      into.tensors += d.tensors;
      into.bytes += d.bytes;
      // Each module's backend holds its own buffers.
      if (d.allocatedBytes !== undefined) into.allocatedBytes = (into.allocatedBytes ?? 0) + d.allocatedBytes;
    }
  }
  return sum;
}

/** An Error shaped as the wasm module's: kiln's `op: message`, name KilnError, kind and op. */
function kilnError(kind, op, message) {
  const e = new Error(`${op}: ${message}`);
  e.name = "KilnError";
  e.kind = kind;
  e.op = op;
  return e;
}

/** The bytes of a URL, Response, ArrayBuffer or typed array; undefined for anything else. */
async function bytesOf(source, op) {
  if (source instanceof ArrayBuffer) return new Uint8Array(source);
  if (ArrayBuffer.isView(source)) return new Uint8Array(source.buffer, source.byteOffset, source.byteLength);
  let response = source;
  if (typeof source === "string" || source instanceof URL) {
    const url = String(source);
    try {
      response = await fetch(url);
    } catch (e) {
      throw kilnError("io", op, `fetching ${url} failed: ${e?.message ?? e}`);
    }
    if (!response.ok) throw kilnError("io", op, `fetching ${url}: HTTP ${response.status} ${response.statusText}`);
  } else if (typeof Response === "undefined" || !(source instanceof Response)) {
    return undefined;
  }
  return new Uint8Array(await response.arrayBuffer());
}

// A kiln model file is safetensors: a little-endian u64 header length, then that many bytes of
// JSON starting with `{`.
function isKilnFile(b) {
  if (b.length < 9 || b[8] !== 0x7b) return false;
  const v = new DataView(b.buffer, b.byteOffset, 8);
  return v.getUint32(0, true) + v.getUint32(4, true) * 2 ** 32 + 8 <= b.length;
}

// An ONNX file is a protobuf ModelProto, whose first field's tag is one of ModelProto's fields
// 1..8 (exporters write ir_version, field 1, first: byte 0x08).
const MODEL_PROTO_TAGS = new Set([0x08, 0x12, 0x1a, 0x22, 0x28, 0x32, 0x3a, 0x42]);
const isOnnxFile = (b) => b.length > 0 && !isKilnFile(b) && MODEL_PROTO_TAGS.has(b[0]);

/**
 * Converts an ONNX file (a URL, a Response or bytes) into a kiln model file: resolves to its
 * bytes (a Uint8Array), which `Model.load` takes and which can be cached (e.g. in IndexedDB) so
 * that a page converts once. Loads the ONNX converter module on first use. `options.inputShape`
 * (batch axis first) is the shape the graph is traced on; by default the model's declared input
 * shape with every symbolic dimension 1.
 */
export async function convertOnnx(source, options) {
  const op = "convertOnnx";
  const bytes = await bytesOf(source, op);
  if (bytes === undefined) {
    const what = source === null ? "null" : (source?.constructor?.name ?? typeof source);
    throw kilnError("invalid_argument", op, `source must be a URL, a Response, an ArrayBuffer or a Uint8Array, got ${what}`);
  }
  const shape = options?.inputShape;
  if (shape != null && !Array.isArray(shape) && !ArrayBuffer.isView(shape)) {
    throw kilnError("invalid_argument", op, `options.inputShape must be an array of numbers, got ${typeof shape}`);
  }
  const onnx = await initOnnx();
  return onnx.convertOnnx(bytes, shape == null ? undefined : Float64Array.from(shape, Number));
}

// Model.load takes ONNX files too: the bytes are looked at here, and an ONNX file goes through
// convertOnnx before the wasm module's own Model.load (kiln files only) sees it. The class stays
// the wasm module's (only its static `load` is replaced), so `instanceof Model` still holds.
// (This is why package.json lists index.js under sideEffects: a bundler must not skip it.)
function acceptOnnx(model) {
  const loadKilnFile = model.load;
  Object.defineProperty(model, "load", {
    configurable: true,
    writable: true,
    value: async function load(source, options) {
      const bytes = await bytesOf(source, "Model.load");
      if (bytes === undefined || !isOnnxFile(bytes)) return loadKilnFile.call(model, bytes ?? source, options);
      return loadKilnFile.call(model, await convertOnnx(bytes, options), options);
    },
  });
}

export default init;
