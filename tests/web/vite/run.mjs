// The packed npm tarball in a fresh Vite project: `npm install ./kiln-ml-*.tgz`, `vite build`,
// then headless Chromium (playwright-core, Debian's chromium) opens the built page and checks
// that kiln ran in it (a matmul and a softmax computed on the device Device.auto() chose, and on
// the CPU when that was WebGPU), with every tensor disposed and no console error. With the ONNX
// conformance data (../onnx-data.mjs), the page also loads the zoo's mnist-8.onnx from a URL
// through Model.load, which must fetch the converter module's .wasm (a chunk of its own) and
// give test_data_set_0's stored output. The page then loads the text demo's GPT through
// TextModel.load, which must fetch the text module's .wasm (another chunk), and generates with it.
// Last, `kiln-ml/program` (the package's second entry) loads a small program written here (an i32
// input copied to the output on the GPU) and runs it.
//   node tests/web/vite/run.mjs   (after scripts/build-web.sh made npm/kiln-ml-*.tgz)
import { chromium } from "playwright-core";
import { execFileSync } from "node:child_process";
import { createServer } from "node:http";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, extname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { floatTensor, mnistOnnxDir } from "../onnx-data.mjs";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const tarball = readdirSync(join(ROOT, "npm")).find((f) => /^kiln-ml-.*\.tgz$/.test(f));
if (!tarball) throw new Error("no npm/kiln-ml-*.tgz: run scripts/build-web.sh first");
const viteVersion = JSON.parse(readFileSync(join(ROOT, "tests/web/node_modules/vite/package.json"), "utf8")).version;

const app = mkdtempSync(join(tmpdir(), "kiln-vite-"));
mkdirSync(join(app, "public"));
copyFileSync(join(ROOT, "demos/text/models/shakespeare.safetensors"), join(app, "public", "gpt.safetensors"));
// The ONNX case: mnist-8.onnx served from public/ (copied as is by vite build), its stored input.
const onnxDir = mnistOnnxDir() && join(mnistOnnxDir(), "mnist-8");
let onnxCase = null;
if (onnxDir) {
  copyFileSync(join(onnxDir, "model.onnx"), join(app, "public", "mnist-8.onnx"));
  const set = join(onnxDir, "test_data_set_0");
  onnxCase = {
    input: floatTensor(readFileSync(join(set, "input_0.pb"))),
    output: floatTensor(readFileSync(join(set, "output_0.pb"))),
  };
} else console.log("notice: no shared/conformance/models/mnist (set KILN_ONNX_SUITES): the ONNX case is skipped");
// A program with no kernels: its input to slot 0, copied to slot 1, read back (npm/program.js's format).
{
  const header = new TextEncoder().encode(JSON.stringify({ format: "kiln-program", version: 1, kernels: [], buffers: [12, 12], load: [],
    variants: [{ inputs: [{ name: "x", dtype: "i32", shape: [3] }], outputs: [{ name: "y", dtype: "i32", shape: [3] }],
      steps: [["input", 0, 0], ["copy", 0, 0, 1, 0, 12], ["output", 0, 1, 0, 12]] }] }));
  const file = new Uint8Array(Math.ceil((12 + header.length) / 4) * 4);
  file.set(new TextEncoder().encode("KILNPROG"));
  new DataView(file.buffer).setUint32(8, header.length, true);
  file.set(header, 12);
  writeFileSync(join(app, "public", "copy.kilnprog"), file);
}
writeFileSync(join(app, "package.json"), JSON.stringify({ name: "kiln-vite-check", private: true, type: "module" }));
writeFileSync(
  join(app, "index.html"),
  `<!doctype html><html><head><link rel="icon" href="data:,"></head><body><pre id="out">running</pre><script type="module" src="/main.js"></script></body></html>`,
);
writeFileSync(
  join(app, "main.js"),
  `import init, { Device, Tensor, Model, TextModel, memory, version } from "kiln-ml";
const out = document.getElementById("out");
async function compute(device) {
  const a = Tensor.from([[1, 2], [3, 4]], null, { device });
  const p = a.matmul(a);
  const s = p.softmax(-1);
  const r = { kind: device.kind, reason: device.reason, product: await p.array(), softmax: Array.from(await s.data()) };
  a.dispose(); p.dispose(); s.dispose();
  return r;
}
const results = [];
try {
  await init();
  const auto = await Device.auto();
  for (const device of auto.kind === "cpu" ? [auto] : [auto, Device.cpu()]) {
    try {
      results.push(await compute(device));
    } catch (e) {
      results.push({ kind: device.kind, error: e.name + ": " + e.message });
    }
  }
  let onnx = null;
  const onnxInput = ${JSON.stringify(onnxCase && { data: Array.from(onnxCase.input.data), dims: onnxCase.input.dims })};
  if (onnxInput) {
    try {
      const model = await Model.load("./mnist-8.onnx", { device: auto });
      const x = Tensor.from(Float32Array.from(onnxInput.data), onnxInput.dims, { device: model.device });
      const y = model.forward(x);
      onnx = { kind: model.device.kind, logits: Array.from(await y.data()) };
      x.dispose(); y.dispose(); model.dispose();
    } catch (e) {
      onnx = { error: e.name + ": " + e.message };
    }
  }
  let text = null;
  try {
    const before = performance.getEntriesByType("resource").filter((e) => e.name.includes("kiln_web_text")).length;
    const lm = await TextModel.load("./gpt.safetensors", { device: "cpu" });
    const pieces = [];
    const generated = await lm.generate("ROMEO:\\n", { tokens: 8, temperature: 0, onToken: (p) => pieces.push(p) });
    text = { before, generated, pieces: pieces.length, isModel: lm instanceof TextModel, vocab: lm.vocab };
    lm.dispose();
  } catch (e) {
    text = { error: e.name + ": " + e.message };
  }
  let program = null;
  try {
    const { Program } = await import("kiln-ml/program");
    const p = await Program.load("./copy.kilnprog");
    program = Array.from((await p.run([Int32Array.of(-5, 7, 2147483647)]))[0].data);
    p.destroy();
  } catch (e) {
    program = { error: e.name + ": " + e.message };
  }
  out.textContent = JSON.stringify({ version: version(), results, onnx, text, program, live: memory().tensors });
} catch (e) {
  out.textContent = JSON.stringify({ error: e.name + ": " + e.message });
}
`,
);
const npm = (args) => execFileSync("npm", args, { cwd: app, stdio: ["ignore", "inherit", "inherit"] });
npm(["install", "--no-audit", "--no-fund", "--prefer-offline", join(ROOT, "npm", tarball), `vite@${viteVersion}`]);
execFileSync(join(app, "node_modules/.bin/vite"), ["build"], { cwd: app, stdio: "inherit" });

const dist = join(app, "dist");
const types = { ".html": "text/html", ".js": "text/javascript", ".wasm": "application/wasm", ".css": "text/css" };
const server = createServer((req, res) => {
  let file = join(dist, new URL(req.url, "http://x").pathname);
  if (file.endsWith("/")) file = join(file, "index.html");
  if (!file.startsWith(dist) || !existsSync(file) || !statSync(file).isFile()) return res.writeHead(404).end();
  res.writeHead(200, { "content-type": types[extname(file)] ?? "application/octet-stream" }).end(readFileSync(file));
});
await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? "/usr/lib/chromium/chromium",
  args: ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--enable-unsafe-webgpu"],
});
let ok = false;
try {
  const page = await browser.newPage();
  const errors = [];
  const wasmRequests = [];
  page.on("request", (r) => r.url().endsWith(".wasm") && wasmRequests.push(new URL(r.url()).pathname));
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  await page.goto(`http://127.0.0.1:${server.address().port}/`);
  await page.waitForFunction(() => document.getElementById("out").textContent !== "running", null, { timeout: 60_000 });
  const text = await page.textContent("#out");
  console.log(`vite page says: ${text}`);
  const r = JSON.parse(text);
  const e0 = Math.exp(7 - 10), e1 = Math.exp(15 - 22);
  const good = (x) =>
    !x.error &&
    JSON.stringify(x.product) === "[[7,10],[15,22]]" &&
    Math.abs(x.softmax[0] - e0 / (1 + e0)) < 1e-6 &&
    Math.abs(x.softmax[2] - e1 / (1 + e1)) < 1e-6;
  for (const x of r.results ?? []) console.log(`${good(x) ? "ok  " : "FAIL"} ${x.kind}${x.error ? `: ${x.error}` : ""}`);
  ok = !r.error && r.results.length > 0 && r.results.every(good) && r.live === 0 && errors.length === 0;
  if (onnxCase) {
    const want = onnxCase.output.data;
    const got = r.onnx?.logits ?? [];
    const close = got.length === want.length && got.every((v, i) => Math.abs(v - want[i]) <= 1e-3 * Math.abs(want[i]) + 1e-5);
    // The converter is its own .wasm file, fetched by the page (only when it met the ONNX file).
    const converter = wasmRequests.some((p) => /kiln_web_onnx_bg.*\.wasm$/.test(p));
    console.log(`${close && converter ? "ok  " : "FAIL"} mnist-8.onnx from a URL on ${r.onnx?.kind}` +
      `${r.onnx?.error ? `: ${r.onnx.error}` : close ? "" : `: logits ${got} vs ${Array.from(want)}`}` +
      ` (wasm fetched: ${wasmRequests.join(", ")})`);
    ok &&= close && converter;
  }
  // The text module is a chunk of its own, fetched by TextModel.load only (not by init()).
  const t = r.text ?? {};
  const textWasm = wasmRequests.some((p) => /kiln_web_text_bg.*\.wasm$/.test(p));
  const generated = !t.error && t.before === 0 && textWasm && t.isModel && t.pieces === 8 && [...t.generated].length === 8;
  console.log(`${generated ? "ok  " : "FAIL"} TextModel.load of the demo GPT through the text module` +
    `${t.error ? `: ${t.error}` : `: ${JSON.stringify(t.generated)} (vocabulary ${t.vocab})`} (wasm fetched: ${wasmRequests.join(", ")})`);
  ok &&= generated;
  const copied = JSON.stringify(r.program) === "[-5,7,2147483647]";
  console.log(`${copied ? "ok  " : "FAIL"} kiln-ml/program's Program ran a small program: ${JSON.stringify(r.program)}`);
  ok &&= copied;
  if (errors.length) console.log(`console errors: ${errors.join(" | ")}`);
} catch (e) {
  console.log(`FAIL: ${e.message}`);
} finally {
  await browser.close();
  server.close();
  if (!process.env.KILN_KEEP_TMP) rmSync(app, { recursive: true, force: true });
}
console.log(ok ? "ok   kiln-ml from the packed tarball runs in a fresh Vite project" : "FAIL kiln-ml in a fresh Vite project");
process.exit(ok ? 0 : 1);
