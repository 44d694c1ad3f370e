// The module init() picks in the page (issue 18): headless Chromium opens one small page of the
// npm package (npm/index.js) served twice, once cross-origin isolated (COOP/COEP headers) and once
// not, and checks that
//   - the isolated page loads the threaded module (kiln_web_threads_bg.wasm) and reports more
//     than one thread (`Device.cpu().threads`, the cores up to 4, or `init`'s `threads` option);
//   - the page without the headers, and the isolated page with `threads: 1`, load the main
//     module and report 1 thread; so does an isolated page whose policy forbids workers (init
//     falls back to the main module and warns);
//   - `webgpu: false` loads a CPU-only module and nothing else (kiln_web_cpu_bg.wasm, or
//     kiln_web_threads_cpu_bg.wasm with threads), whose WebGPU device is refused with a message
//     naming the module;
//   - `cpu: false` loads the WebGPU-only module and nothing else (kiln_web_gpu_bg.wasm), isolated
//     or not, where WebGPU is the default device (tensors, the model) and Device.auto()'s choice,
//     and an op on a CPU tensor is refused with a message naming the option; the checks below
//     then run on WebGPU (SwiftShader here);
//   - on each, odd-shaped convolutions (Winograd's path and the column-matrix path), two
//     matmuls large enough to be split across threads (by columns, wider than tall, and by rows)
//     and, over more elements than one thread takes, a broadcast elementwise chain, a softmax
//     along rows and a sum across them match float64 loops here, on random inputs;
//   - the MNIST CNN's logits (batch 1 and 64, random images) agree between the builds (bit for
//     bit between the two single-threaded ones);
//   - with `text=1`, TextModel loads the text module of the page's kind (threaded where init()
//     runs threads: kiln_web_threads_text_bg.wasm, its CPU on as many threads) and generates the
//     same greedy text from the text demo's GPT as the single-threaded one;
//   - no console error.
//
//   node tests/web/threads.mjs        (after scripts/build-web.sh)
// Env: KILN_SEED   the inputs' seed (default: a new one per run, printed)
//      CHROMIUM    the browser (default /usr/lib/chromium/chromium)
import { createServer } from "node:http";
import { existsSync, readFileSync } from "node:fs";
import { extname, join, normalize } from "node:path";
import { ROOT, checker, fatal as fatalIn, launchChromium, openPage } from "./e2e/harness.mjs";
import { rand } from "./node/helpers.mjs";

const fatal = (msg) => fatalIn("threads", msg);
const check = checker();
const SEED = Number(process.env.KILN_SEED ?? Math.floor(Math.random() * 1e6));
console.log(`threads: seed ${SEED} (KILN_SEED=${SEED} repeats this run)`);
for (const f of ["kiln_web", "kiln_web_cpu", "kiln_web_threads", "kiln_web_threads_cpu"].map((m) => `npm/dist/${m}_bg.wasm`)) {
  if (!existsSync(join(ROOT, f))) fatal(`missing ${f}: run scripts/build-web.sh`);
}

// Odd shapes, so that partial tiles, channel counts not a multiple of 4 and uneven thread splits
// all occur. conv: Winograd (3x3, stride 1, >= 8 channels); conv2: the column matrix (stride 2);
// conv3: Winograd on one image, threaded within it (23 outputs over 19 inputs).
const SHAPES = {
  x: [3, 9, 13, 11],
  w: [10, 9, 3, 3],
  b: [10],
  w2: [7, 9, 5, 5],
  x3: [1, 19, 21, 17],
  w3: [23, 19, 3, 3],
  b3: [23],
  a: [67, 301],
  m: [301, 133],
  a2: [157, 83],
  m2: [83, 41],
  big: [301, 517],
  row: [517],
  digits1: [1, 1, 28, 28],
  digits64: [64, 1, 28, 28],
};
const size = (s) => s.reduce((p, d) => p * d, 1);
const inputs = Object.fromEntries(
  Object.entries(SHAPES).map(([k, s], i) => [k, Array.from(rand(size(s), SEED * 16 + i))]),
);
for (const k of ["digits1", "digits64"]) inputs[k] = inputs[k].map((v) => (v + 1) / 2); // pixels in [0, 1)

// The page: init with the `threads` of the query string, then every product; posts the results.
const PAGE = `<!doctype html><meta charset="utf-8"><body><script type="module">
import init, { Device, Tensor, Model, TextModel } from "./npm/index.js";
const q = new URLSearchParams(location.search);
const out = { isolated: globalThis.crossOriginIsolated === true };
try {
  const options = {};
  if (q.has("threads")) options.threads = Number(q.get("threads"));
  if (q.has("webgpu")) options.webgpu = q.get("webgpu") === "true";
  if (q.has("cpu")) options.cpu = q.get("cpu") === "true";
  await init(undefined, options);
  out.threads = Device.cpu().threads;
  out.webgpuError = await Device.webgpu().then(() => null, (e) => String(e?.message ?? e));
  out.auto = (await Device.auto()).kind;
  // Without CPU kernels: WebGPU (set up above) is the default device, and the CPU only holds data.
  const onCpu = options.cpu === false ? {} : { device: Device.cpu() };
  try {
    out.cpuOp = Array.from(await Tensor.from(Float32Array.of(1, 2), [2], { device: Device.cpu() }).exp().data());
  } catch (e) {
    out.cpuOpError = String(e?.message ?? e);
  }
  const { shapes, inputs } = await (await fetch("./inputs.json")).json();
  const t = (k) => Tensor.from(Float32Array.from(inputs[k]), shapes[k]);
  out.device = t("row").device.kind;
  const read = async (y) => Array.from(await y.data());
  out.conv = await read(t("x").conv2d(t("w"), t("b"), { padding: 1 }));
  out.conv2 = await read(t("x").conv2d(t("w2"), null, { stride: 2, padding: 2 }));
  out.conv3 = await read(t("x3").conv2d(t("w3"), t("b3"), { padding: 1 }));
  out.matmul = await read(t("a").matmul(t("m")));
  out.matmul2 = await read(t("a2").matmul(t("m2")));
  out.chain = await read(t("big").exp().mul(t("row")).add(0.5));
  out.softmax = await read(t("big").mul(3).softmax(-1));
  out.sum = await read(t("big").sum([0]));
  const model = await Model.load("./demos/mnist/models/mnist.safetensors", onCpu);
  out.modelDevice = model.device.kind;
  out.mnist1 = await read(model.forward(t("digits1")));
  out.mnist64 = await read(model.forward(t("digits64")));
  if (q.has("text")) {
    const lm = await TextModel.load("./demos/text/models/shakespeare.safetensors", { device: "cpu" });
    out.textThreads = lm.device.threads;
    out.text = await lm.generate("ROMEO:\\n", { tokens: 24, temperature: 0 });
    lm.dispose();
  }
} catch (e) {
  out.error = String(e?.stack ?? e);
}
out.wasm = performance.getEntriesByType("resource").map((r) => r.name.split("/").pop()).filter((n) => n.endsWith(".wasm"));
window.result = out;
document.body.dataset.ready = "1";
</script>`;

const TYPES = { ".js": "text/javascript", ".wasm": "application/wasm", ".json": "application/json", ".html": "text/html" };
// /iso/... is served cross-origin isolated, /plain/... without the headers; both map to the repo.
const server = createServer((req, res) => {
  const url = new URL(req.url, "http://x");
  const [, mode, ...rest] = url.pathname.split("/");
  const path = rest.join("/");
  if (mode === "iso" || mode === "iso-noworkers") {
    res.setHeader("Cross-Origin-Opener-Policy", "same-origin");
    res.setHeader("Cross-Origin-Embedder-Policy", "require-corp");
  }
  // A page whose policy forbids workers: init must fall back to the main module.
  if (mode === "iso-noworkers") res.setHeader("Content-Security-Policy", "worker-src 'none'");
  let body;
  if (url.pathname === "/favicon.ico") {
    res.writeHead(204).end();
    return;
  }
  if (path === "page.html") body = PAGE;
  else if (path === "inputs.json") body = JSON.stringify({ shapes: SHAPES, inputs });
  else if (/^(npm|demos\/(mnist|text)\/models)\//.test(path) && !normalize(path).startsWith("..")) {
    const file = join(ROOT, normalize(path));
    if (existsSync(file)) body = readFileSync(file);
  }
  if (body === undefined || !["iso", "iso-noworkers", "plain"].includes(mode)) {
    res.writeHead(404).end();
    return;
  }
  res.writeHead(200, { "Content-Type": TYPES[extname(path)] ?? "application/octet-stream" }).end(body);
});
await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
const base = `http://127.0.0.1:${server.address().port}`;

// float64 references.
function conv2d(x, [n, c, h, w], wt, [o, , kh, kw], bias, stride, pad) {
  const oh = Math.floor((h + 2 * pad - kh) / stride) + 1;
  const ow = Math.floor((w + 2 * pad - kw) / stride) + 1;
  const y = new Float64Array(n * o * oh * ow);
  for (let b = 0; b < n; b++) for (let oc = 0; oc < o; oc++) for (let i = 0; i < oh; i++) for (let j = 0; j < ow; j++) {
    let s = bias ? bias[oc] : 0;
    for (let ic = 0; ic < c; ic++) for (let u = 0; u < kh; u++) for (let v = 0; v < kw; v++) {
      const yy = i * stride - pad + u;
      const xx = j * stride - pad + v;
      if (yy >= 0 && yy < h && xx >= 0 && xx < w) s += x[((b * c + ic) * h + yy) * w + xx] * wt[((oc * c + ic) * kh + u) * kw + v];
    }
    y[((b * o + oc) * oh + i) * ow + j] = s;
  }
  return y;
}
function matmul(a, [m, k], b, [, n]) {
  const y = new Float64Array(m * n);
  for (let i = 0; i < m; i++) for (let p = 0; p < k; p++) for (let j = 0; j < n; j++) y[i * n + j] += a[i * k + p] * b[p * n + j];
  return y;
}
const [rows, cols] = SHAPES.big;
const big = (i, j) => inputs.big[i * cols + j];
const softmaxRows = new Float64Array(rows * cols);
for (let i = 0; i < rows; i++) {
  let max = -Infinity;
  let total = 0;
  for (let j = 0; j < cols; j++) max = Math.max(max, 3 * big(i, j));
  for (let j = 0; j < cols; j++) total += Math.exp(3 * big(i, j) - max);
  for (let j = 0; j < cols; j++) softmaxRows[i * cols + j] = Math.exp(3 * big(i, j) - max) / total;
}
const reference = {
  chain: Float64Array.from(inputs.big, (v, k) => Math.exp(v) * inputs.row[k % cols] + 0.5),
  softmax: softmaxRows,
  sum: Float64Array.from({ length: cols }, (_, j) => {
    let s = 0;
    for (let i = 0; i < rows; i++) s += big(i, j);
    return s;
  }),
  conv: conv2d(inputs.x, SHAPES.x, inputs.w, SHAPES.w, inputs.b, 1, 1),
  conv2: conv2d(inputs.x, SHAPES.x, inputs.w2, SHAPES.w2, null, 2, 2),
  conv3: conv2d(inputs.x3, SHAPES.x3, inputs.w3, SHAPES.w3, inputs.b3, 1, 1),
  matmul: matmul(inputs.a, SHAPES.a, inputs.m, SHAPES.m),
  matmul2: matmul(inputs.a2, SHAPES.a2, inputs.m2, SHAPES.m2),
};

/** max |a - b| / max |b| (0 for equal arrays), Infinity when the lengths differ. */
function relErr(a, b) {
  if (!a || a.length !== b.length) return Infinity;
  let err = 0;
  let scale = 0;
  for (let i = 0; i < b.length; i++) {
    err = Math.max(err, Math.abs(a[i] - b[i]));
    scale = Math.max(scale, Math.abs(b[i]));
  }
  return err / (scale || 1);
}

const browser = await launchChromium();
const results = {};
try {
  // [name, page, threads wanted, the .wasm files it must fetch (in order)]
  for (const [name, path, wantThreads, wantModules] of [
    ["isolated", "/iso/page.html", (t) => t > 1, ["kiln_web_threads_bg.wasm"]],
    ["isolated, threads: 3", "/iso/page.html?threads=3", (t) => t === 3, ["kiln_web_threads_bg.wasm"]],
    ["isolated, threads: 1", "/iso/page.html?threads=1", (t) => t === 1, ["kiln_web_bg.wasm"]],
    ["not isolated", "/plain/page.html", (t) => t === 1, ["kiln_web_bg.wasm"]],
    ["isolated, workers forbidden", "/iso-noworkers/page.html", (t) => t === 1, ["kiln_web_threads_bg.wasm", "kiln_web_bg.wasm"]],
    ["not isolated, webgpu: false", "/plain/page.html?webgpu=false", (t) => t === 1, ["kiln_web_cpu_bg.wasm"]],
    ["not isolated, cpu: false", "/plain/page.html?cpu=false", (t) => t === 1, ["kiln_web_gpu_bg.wasm"]],
    ["isolated, cpu: false", "/iso/page.html?cpu=false", (t) => t === 1, ["kiln_web_gpu_bg.wasm"]],
    ["isolated, threads: 1, webgpu: false", "/iso/page.html?threads=1&webgpu=false", (t) => t === 1, ["kiln_web_cpu_bg.wasm"]],
    ["isolated, webgpu: false", "/iso/page.html?webgpu=false", (t) => t > 1, ["kiln_web_threads_cpu_bg.wasm"]],
    ["not isolated, text", "/plain/page.html?text=1", (t) => t === 1, ["kiln_web_bg.wasm", "kiln_web_text_bg.wasm"]],
    ["isolated, text", "/iso/page.html?text=1", (t) => t > 1, ["kiln_web_threads_bg.wasm", "kiln_web_threads_text_bg.wasm"]],
  ]) {
    const p = await openPage(browser, base + path);
    const r = await p.page.evaluate(() => window.result);
    await p.close();
    results[name] = r;
    if (!check(!r.error, `${name}: the page ran${r.error ? `: ${r.error}` : ""}`)) continue;
    check(r.isolated === path.startsWith("/iso"), `${name}: crossOriginIsolated is ${r.isolated}`);
    check(wantThreads(r.threads), `${name}: Device.cpu().threads = ${r.threads}`);
    check(r.wasm.join() === wantModules.join(), `${name}: loaded ${r.wasm.join(", ")} (want ${wantModules.join(", ")})`);
    if (path.includes("webgpu=false")) {
      check(/CPU-only module/.test(r.webgpuError), `${name}: Device.webgpu() refused: ${r.webgpuError}`);
    }
    const gpuOnly = path.includes("cpu=false");
    if (gpuOnly) {
      // Everything below ran on WebGPU: the default device once set up, and Device.auto()'s
      // choice even on a software adapter; an op on a CPU tensor is refused, naming the option.
      check(r.webgpuError === null, `${name}: Device.webgpu(): ${r.webgpuError}`);
      check(r.device === "webgpu" && r.modelDevice === "webgpu" && r.auto === "webgpu",
        `${name}: tensors, the model and Device.auto() on WebGPU: ${r.device}, ${r.modelDevice}, ${r.auto}`);
      check(/no cpu kernels.*cpu: false/.test(r.cpuOpError), `${name}: an op on the CPU refused: ${r.cpuOpError}`);
    } else {
      check(r.device === "cpu" && Math.abs(r.cpuOp?.[1] - Math.exp(2)) <= 1e-6 * Math.exp(2), `${name}: tensors on the CPU (${r.device}), which runs ops (${r.cpuOpError ?? r.cpuOp})`);
    }
    if (path.startsWith("/iso-noworkers/")) {
      // The browser reports the refused worker as a console error; kiln warns that it fell back.
      p.errors = p.errors.filter((e) => !/Content Security Policy/i.test(e));
      check(p.warnings.some((w) => w.includes("threaded module did not start")), `${name}: init warned: ${p.warnings.join(" | ")}`);
    }
    for (const k of Object.keys(reference)) {
      const e = relErr(r[k], reference[k]);
      check(e <= 1e-5, `${name}: ${k} against float64 loops: max |diff| / max |ref| = ${e.toExponential(2)}`);
    }
    check(p.errors.length === 0, `${name}: no console errors${p.errors.length ? `: ${p.errors.join(" | ")}` : ""}`);
  }
  const single = results["not isolated"];
  // The text modules: the threaded one's CPU runs on the page's threads, and both generate alike.
  const [plainText, isoText] = [results["not isolated, text"], results["isolated, text"]];
  check(plainText?.textThreads === 1 && isoText?.textThreads === isoText?.threads,
    `TextModel's CPU threads: ${plainText?.textThreads} (not isolated), ${isoText?.textThreads} (isolated, page ${isoText?.threads})`);
  check(typeof plainText?.text === "string" && [...plainText.text].length === 24 && isoText?.text === plainText.text,
    `TextModel: the threaded text module generates what the single-threaded one does: ${JSON.stringify(isoText?.text)} vs ${JSON.stringify(plainText?.text)}`);
  for (const name of ["isolated", "isolated, threads: 3", "isolated, webgpu: false", "not isolated, cpu: false"]) {
    for (const k of ["mnist1", "mnist64"]) {
      const e = relErr(results[name]?.[k], single?.[k] ?? []);
      check(e <= 1e-5, `${name}: ${k} logits against the single-threaded build: ${e.toExponential(2)}`);
    }
  }
  // The CPU-only module runs the same CPU kernels as the main one.
  for (const k of ["mnist1", "mnist64", ...Object.keys(reference)]) {
    const cpu = results["not isolated, webgpu: false"]?.[k];
    check(cpu?.length > 0 && cpu.every((v, i) => Object.is(v, single?.[k]?.[i])), `CPU-only module: ${k} equals the main module's bit for bit`);
  }
} finally {
  await browser.close();
  server.close();
}
if (check.failures) {
  console.error(`threads: ${check.failures} check(s) failed`);
  process.exit(1);
}
console.log("threads: all checks passed");
