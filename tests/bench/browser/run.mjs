#!/usr/bin/env node
// Side-by-side in-page benchmark (issue 18, deliverable 1): the kiln MNIST CNN in kiln,
// onnxruntime-web and TensorFlow.js, in headless Chromium, same weights, same MNIST test images.
// Not a test and not run in CI: a script whose figures go in notes. See README.md.
//
//   node run.mjs [--runs 200] [--rounds 1] [--warmup 10] [--warmup-ms 2000] [--gpu-runs N] [--gpu-warmup 3] [--gpu-b64-runs 5]
//                [--gpu-b64-warmup 1] [--cold 3] [--batches 1,64] [--only kiln-cpu,kiln-cpu-2t,ort-wasm-2t,...] [--no-webgpu]
//                [--max-seconds 300] [--json FILE] [--kiln DIR] [--chromium PATH]
//   node run.mjs --gelu [--sizes 16,20] [--gelu-runs 30] [--gelu-warmup 3] [--gelu-seconds 30] [--gelu-rounds 1] [--only ...]
//                GELU on 2^p random inputs: kiln fused/unfused vs onnxruntime-web's Gelu (issue 19)
//   node run.mjs --ab DIR [--ab-threads 1,1] [--ab-blocks 40] [--ab-per 20] [--batches 1,64] [--kiln DIR_A]
//                two kiln builds' CPU modules timed in one page, in alternating blocks (issue 18)
//   node run.mjs --dispatches [--batches 1,64] [--gpu-runs 3] [--no-fusion]
//                kiln WebGPU's calls per MNIST forward and each dispatch's own time (issue 18)

import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir, cpus, loadavg } from "node:os";
import { dirname, extname, join, normalize, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import { chromium } from "playwright-core";

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = resolve(HERE, "../../..");

// ---- flags -------------------------------------------------------------------------------------
// kiln as npm installs it: scripts/build-web.sh's packed copy (index.js and thread.js minified, as
// in the tarball) when there is one, else npm/ (whose index.js is the readable source, 2.3 KiB
// more gzipped).
const PACKED = existsSync(join(ROOT, "target/npm-pack/dist")) ? join(ROOT, "target/npm-pack") : join(ROOT, "npm");
const DEFAULTS = {
  runs: 200, warmup: 10, "warmup-ms": 2000, "gpu-runs": null, "gpu-b64-runs": 5, "gpu-warmup": 3, "gpu-b64-warmup": 1, cold: 3,
  batches: "1,64", only: "", "no-webgpu": false, "max-seconds": 300, json: "",
  kiln: PACKED, model: join(ROOT, "demos/mnist/models/mnist.safetensors"),
  chromium: process.env.CHROMIUM || "", python: process.env.PYTHON || "python3",
  data: process.env.KILN_MNIST_DATA || "/work/shared/data/mnist", help: false,
  rounds: 1, gelu: false, sizes: "16,20", "gelu-runs": 30, "gelu-warmup": 3, "gelu-seconds": 30, "gelu-rounds": 1,
  dispatches: false, "no-fusion": false, ab: "", "ab-threads": "1,1", "ab-blocks": 40, "ab-per": 20,
};
const opt = { ...DEFAULTS };
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i];
  const m = /^--([^=]+)(?:=(.*))?$/.exec(a);
  if (!m || !(m[1] in DEFAULTS)) {
    console.error(`unknown argument ${a}; see the head of run.mjs or README.md`);
    process.exit(2);
  }
  const key = m[1];
  if (typeof DEFAULTS[key] === "boolean") opt[key] = true;
  else opt[key] = m[2] ?? process.argv[++i];
}
if (opt.help) {
  console.log(readFileSync(fileURLToPath(import.meta.url), "utf8").split("\n").slice(1, 10).join("\n"));
  process.exit(0);
}
for (const k of ["runs", "rounds", "warmup", "warmup-ms", "gpu-b64-runs", "gpu-warmup", "gpu-b64-warmup", "cold", "max-seconds",
  "gelu-runs", "gelu-warmup", "gelu-seconds", "gelu-rounds", "ab-blocks", "ab-per"]) opt[k] = Number(opt[k]);
opt["gpu-runs"] = opt["gpu-runs"] == null ? opt.runs : Number(opt["gpu-runs"]);
const BATCHES = String(opt.batches).split(",").map(Number);
const JSON_OUT = opt.json || join(tmpdir(), `kiln-browser-bench-${Date.now()}.json`);

// ---- what is measured ---------------------------------------------------------------------------
const CONFIGS = [
  { id: "kiln-cpu", label: "kiln CPU (wasm, 1 thread)", lib: "kiln", backend: "cpu", threads: 1, group: "cpu" },
  { id: "kiln-cpu-2t", label: "kiln CPU (wasm, 2 threads)", lib: "kiln", backend: "cpu", threads: 2, group: "cpu" },
  { id: "ort-wasm-1t", label: "onnxruntime-web wasm, 1 thread", lib: "ort", backend: "wasm", threads: 1, group: "cpu" },
  { id: "ort-wasm-2t", label: "onnxruntime-web wasm, 2 threads", lib: "ort", backend: "wasm", threads: 2, group: "cpu" },
  { id: "tfjs-wasm-1t", label: "tfjs wasm, 1 thread", lib: "tfjs", backend: "wasm", threads: 1, group: "cpu" },
  { id: "tfjs-wasm-2t", label: "tfjs wasm, 2 threads", lib: "tfjs", backend: "wasm", threads: 2, group: "cpu" },
  { id: "kiln-webgpu", label: "kiln WebGPU", lib: "kiln", backend: "webgpu", threads: 1, group: "webgpu" },
  // the same forward recorded by `kiln compile` and replayed by npm/program.js (no WebAssembly)
  { id: "kiln-program", label: "kiln WebGPU, compiled program", lib: "kilnprog", backend: "webgpu", threads: 1, group: "webgpu" },
  { id: "ort-webgpu", label: "onnxruntime-web WebGPU", lib: "ort", backend: "webgpu", threads: 1, group: "webgpu" },
  { id: "tfjs-webgpu", label: "tfjs WebGPU", lib: "tfjs", backend: "webgpu", threads: 1, group: "webgpu" },
];
// --gelu: one elementwise op, GELU, on 2^p random normal inputs (gelu_onnx.py writes them).
const GELU_CONFIGS = [
  { id: "kiln-webgpu-fused", label: "kiln WebGPU, fused", lib: "kiln", backend: "webgpu", fusion: 1 },
  { id: "kiln-webgpu-unfused", label: "kiln WebGPU, fusion off", lib: "kiln", backend: "webgpu", fusion: 0 },
  { id: "ort-webgpu", label: "onnxruntime-web WebGPU, Gelu-20", lib: "ort", backend: "webgpu", model: "gelu20" },
  { id: "ort-webgpu-ms", label: "onnxruntime-web WebGPU, ms Gelu", lib: "ort", backend: "webgpu", model: "gelu_ms" },
  { id: "ort-webgpu-6", label: "onnxruntime-web WebGPU, 5 nodes", lib: "ort", backend: "webgpu", model: "gelu6" },
  { id: "kiln-cpu", label: "kiln CPU (wasm, 1 thread)", lib: "kiln", backend: "cpu", fusion: 1 },
  { id: "ort-wasm-1t", label: "onnxruntime-web wasm, 1 thread", lib: "ort", backend: "wasm", model: "gelu20" },
];
const only = String(opt.only).split(",").filter(Boolean);
const configs = (opt.gelu ? GELU_CONFIGS : CONFIGS).filter((c) => (!only.length || only.includes(c.id)) && !(opt["no-webgpu"] && c.group === "webgpu"));

const pkgVersion = (p) => {
  try { return JSON.parse(readFileSync(join(HERE, "node_modules", p, "package.json"), "utf8")).version; }
  catch { return "?"; }
};

// ---- inputs and the ONNX model (temp folder, nothing committed) ---------------------------------
const work = mkdtempSync(join(tmpdir(), "kiln-browser-bench-"));
const t0 = Date.now();
const upBefore = spawnSync("uptime", { encoding: "utf8" }).stdout.trim();
console.log(`machine: ${cpus().length} cores (${cpus()[0]?.model}); uptime before: ${upBefore}`);
const images = Math.max(64, ...BATCHES);
const SIZES = String(opt.sizes).split(",").map(Number);
const py = opt.gelu
  ? spawnSync(opt.python, [join(HERE, "gelu_onnx.py"), "--out", work, "--sizes", SIZES.join(",")],
    { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] })
  : spawnSync(opt.python, [join(HERE, "export_onnx.py"), "--out", work, "--images", String(images),
    "--weights", opt.model, "--data", opt.data], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
process.stdout.write(py.stdout || "");
if (py.status !== 0) {
  console.error(`${opt.gelu ? "gelu_onnx" : "export_onnx"}.py failed (pip install onnx numpy safetensors onnxruntime)`);
  process.exit(1);
}
const pyMeta = JSON.parse(readFileSync(join(work, "meta.json"), "utf8"));
// The compiled program's row: the model recorded for every batch the pages run (1 for the cold
// start, the timed batches, the logits' batch) by the newest kiln binary, or $KILN_BIN.
const kilnBin = process.env.KILN_BIN ||
  ["target/release/kiln", "target/debug/kiln"].map((p) => join(ROOT, p)).filter((p) => existsSync(p))
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs)[0];
let programSkipped = "no kiln binary (cargo build --release -p kiln, or KILN_BIN)";
if (!opt.gelu && kilnBin) {
  const batches = [...new Set([1, ...BATCHES, images])].join(",");
  const c = spawnSync(kilnBin, ["compile", opt.model, "--batch", batches, "-o", join(work, "mnist.kilnprog")], { encoding: "utf8" });
  programSkipped = c.status === 0 ? null : `kiln compile failed: ${c.stderr.trim()}`;
  if (!programSkipped) console.log(c.stdout.trim());
}
const f32 = (name) => new Float32Array(new Uint8Array(readFileSync(join(work, name))).buffer);
const [refOrt, refNumpy, labels] = opt.gelu ? [] :
  [f32("ref_onnxruntime.f32"), f32("ref_numpy.f32"), [...readFileSync(join(work, "labels.u8"))]];

// ---- http server: cross-origin isolated (COOP/COEP), so SharedArrayBuffer and threads work -----
const MOUNTS = [
  ["/kiln/", opt.kiln],
  ["/ort/", join(HERE, "node_modules/onnxruntime-web/dist")],
  ["/tfjs/", join(HERE, "node_modules/@tensorflow")],
  ["/data/", work],
  ["/kiln-b/", opt.ab || opt.kiln],
];
const FILES = {
  "/bench.html": join(HERE, "bench.html"),
  "/harness.mjs": join(HERE, "harness.mjs"),
  "/gelu.html": join(HERE, "gelu.html"),
  "/gelu.mjs": join(HERE, "gelu.mjs"),
  "/dispatches.html": join(HERE, "dispatches.html"),
  "/dispatches.mjs": join(HERE, "dispatches.mjs"),
  "/page.mjs": join(HERE, "page.mjs"),
  "/ab.html": join(HERE, "ab.html"),
  "/ab.mjs": join(HERE, "ab.mjs"),
  "/data/mnist.safetensors": opt.model,
};
const TYPES = { ".html": "text/html", ".js": "text/javascript", ".mjs": "text/javascript",
  ".wasm": "application/wasm", ".json": "application/json" };
const served = [];
function resolvePath(url) {
  const p = decodeURIComponent(new URL(url, "http://x").pathname);
  if (FILES[p]) return FILES[p];
  for (const [prefix, dir] of MOUNTS) {
    if (!p.startsWith(prefix)) continue;
    const f = normalize(join(dir, p.slice(prefix.length)));
    if (f.startsWith(normalize(dir) + sep) && existsSync(f) && statSync(f).isFile()) return f;
  }
  return null;
}
const server = createServer((req, res) => {
  // --gelu: a page posts its output here (gelu.mjs check()), into the temp folder.
  const out = /^\/out\/([\w.-]+\.f32)$/.exec(new URL(req.url, "http://x").pathname);
  if (req.method === "POST" && out) {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => { writeFileSync(join(work, out[1]), Buffer.concat(chunks)); res.end("ok"); });
    return;
  }
  if (req.url === "/favicon.ico") { res.statusCode = 204; res.end(); return; }
  const f = resolvePath(req.url);
  res.setHeader("Cross-Origin-Opener-Policy", "same-origin");
  res.setHeader("Cross-Origin-Embedder-Policy", "require-corp");
  res.setHeader("Cross-Origin-Resource-Policy", "same-origin");
  res.setHeader("Cache-Control", "no-cache");
  if (!f) { res.statusCode = 404; res.end("not found"); return; }
  served.push(new URL(req.url, "http://x").pathname);
  res.setHeader("Content-Type", TYPES[extname(f)] || "application/octet-stream");
  res.end(readFileSync(f));
});
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const BASE = `http://127.0.0.1:${server.address().port}`;

// ---- browser --------------------------------------------------------------------------------------
const driverCfg = JSON.parse(readFileSync(join(ROOT, "web/webdriver.json"), "utf8"))["goog:chromeOptions"];
const executablePath = opt.chromium || driverCfg.binary || "/usr/lib/chromium/chromium";
const args = driverCfg.args.filter((a) => !a.startsWith("--headless"));
if (!args.includes("--enable-unsafe-webgpu")) args.push("--enable-unsafe-webgpu");
const launch = () => chromium.launch({ executablePath, headless: true, args });
const browserVersion = await (async () => { const b = await launch(); const v = b.version(); await b.close(); return v; })();

const libFile = (pathname) => /^\/(kiln|ort|tfjs)\//.test(pathname) && /\.(m?js|wasm)$/.test(pathname);

/** Opens the page for `c` in a new context of `browser`; resolves when its first result is in. */
async function openPage(browser, c, requests) {
  const context = await browser.newContext();
  if (requests) context.on("request", (r) => requests.add(new URL(r.url()).pathname));
  const page = await context.newPage();
  const consoleErrors = [];
  page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  await page.goto(`${BASE}/bench.html?lib=${c.lib}&backend=${c.backend}&threads=${c.threads}`);
  const limit = c.group === "webgpu" ? 300e3 : 120e3;
  await page.waitForFunction(() => window.__bench && (window.__bench.ready || window.__bench.error),
    null, { timeout: limit, polling: 50 });
  const st = await page.evaluate(() => {
    const { logits, time, ...rest } = window.__bench;
    return rest;
  });
  if (st.error) {
    await context.close();
    const e = new Error(st.error.message + (consoleErrors.length ? ` [console: ${consoleErrors.slice(0, 3).join(" | ")}]` : ""));
    e.unavailable = st.error.unavailable;
    throw e;
  }
  return { context, page, st };
}

const median = (a) => { const s = [...a].sort((x, y) => x - y); const n = s.length; return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2; };
const pct = (a, p) => { const s = [...a].sort((x, y) => x - y); return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]; };
const maxAbs = (a, b) => { let m = 0; for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i])); return m; };
const argmaxRows = (a) => { const r = []; for (let i = 0; i < a.length / 10; i++) { let k = 0; for (let j = 1; j < 10; j++) if (a[i * 10 + j] > a[i * 10 + k]) k = j; r.push(k); } return r; };
const agree = (a, b) => a.filter((v, i) => v === b[i]).length / a.length;

// ---- --gelu: GELU on 2^p random inputs, each row in its own page (fresh context) ----------------
// With --gelu-rounds N every row's page stays open and the rows take turns, N rounds of each cell,
// so that a change in the machine's load (SwiftShader runs on its cores) falls on every row alike.
async function runGelu() {
  const MODES = [["e2e", "upload -> GELU -> read back"], ["compute", "input on the device, GELU, wait for the result"]];
  const rows = [];
  const browser = await launch();
  for (const c of configs) {
    const r = { ...c, times: {}, warnings: [] };
    rows.push(r);
    r.context = await browser.newContext();
    const page = (r.page = await r.context.newPage());
    // onnxruntime warns when nodes fall back from the preferred EP to the CPU: kept for the report.
    page.on("console", (m) => { if (["warning", "error"].includes(m.type())) r.warnings.push(m.text().slice(0, 300)); });
    page.on("pageerror", (e) => r.warnings.push(String(e)));
    try {
      await page.goto(`${BASE}/gelu.html?lib=${c.lib}&backend=${c.backend}&fusion=${c.fusion ?? 1}&model=${c.model ?? ""}`);
      await page.waitForFunction(() => window.__gelu && (window.__gelu.ready || window.__gelu.error), null, { timeout: 300e3, polling: 50 });
      const st = await page.evaluate(() => ({ ...window.__gelu }));
      if (st.error) throw new Error(st.error.message);
      Object.assign(r, { version: st.version, actualBackend: st.actualBackend, adapter: st.adapter });
      for (const p of SIZES) await page.evaluate(([p, id]) => window.__gelu.check(p, id), [p, c.id]);
      r.kernels = await page.evaluate(() => window.__gelu.kernels());
    } catch (e) {
      r.skipped = String(e.message || e).slice(0, 400);
      console.log(`[${c.id}] skipped: ${r.skipped}`);
    }
  }
  const rounds = Math.max(1, opt["gelu-rounds"]);
  for (let k = 0; k < rounds; k++) {
    for (const p of SIZES) {
      for (const [mode] of MODES) {
        for (const r of rows.filter((r) => !r.skipped)) {
          const times = await r.page.evaluate(([p, m, w, n, ms]) => window.__gelu.time(p, m, w, n, ms),
            [p, mode, opt["gelu-warmup"], opt["gelu-runs"], opt["gelu-seconds"] * 1000]);
          const t = (r.times[`${mode}_${p}`] ||= { times: [], rounds: [] });
          t.times.push(...times);
          t.rounds.push(median(times));
          Object.assign(t, { median: median(t.times), p90: pct(t.times, 90), min: Math.min(...t.times), runs: t.times.length });
          console.log(`[${r.id}] ${rounds > 1 ? `round ${k + 1}: ` : ""}2^${p} ${mode}: median ${median(times).toFixed(3)} ms, ` +
            `p90 ${pct(times, 90).toFixed(3)} ms, n ${times.length}`);
        }
      }
    }
  }
  for (const r of rows) {
    await r.context.close();
    delete r.context;
    delete r.page;
  }
  await browser.close();
  server.close();

  const ok = rows.filter((r) => !r.skipped);
  const base = ok.find((r) => r.id === "kiln-webgpu-fused");
  const fmt = (x) => (x == null ? "-" : x >= 100 ? x.toFixed(1) : x >= 1 ? x.toFixed(2) : x.toFixed(3));
  const pad = (v, n, left) => (left ? String(v).padEnd(n) : String(v).padStart(n));
  console.log(`\nChromium ${browserVersion} (headless), ${cpus().length} cores; onnxruntime-web ${pkgVersion("onnxruntime-web")}, ` +
    `kiln ${ok.find((r) => r.lib === "kiln")?.version ?? "?"}; WebGPU adapter: ${[...new Set(ok.map((r) => r.adapter).filter(Boolean))].join("; ") || "-"}`);
  console.log(`GELU x * (erf(x / sqrt 2) + 1) / 2 on f32 standard-normal inputs; ${opt["gelu-warmup"]} warm-up + up to ` +
    `${opt["gelu-runs"]} runs per cell (stopped after ${opt["gelu-seconds"]} s)${opt["gelu-rounds"] > 1 ? `, ${opt["gelu-rounds"]} rounds, the rows taking turns` : ""}; times in ms; ratio = kiln fused / row (< 1: kiln fused is faster)`);
  for (const p of SIZES) {
    for (const [mode, what] of MODES) {
      console.log(`\n2^${p} elements, ${mode} (${what}):`);
      console.log(`  ${pad("row", 36, true)} ${pad("median", 9)} ${pad("p90", 9)} ${pad("p90/med", 8)} ${pad("n", 4)} ${pad("fused/row", 10)}`);
      for (const r of ok) {
        const t = r.times[`${mode}_${p}`];
        const b = base?.times[`${mode}_${p}`];
        console.log(`  ${pad(r.label, 36, true)} ${pad(fmt(t?.median), 9)} ${pad(fmt(t?.p90), 9)} ${pad(t ? (t.p90 / t.median).toFixed(2) : "-", 8)} ` +
          `${pad(t?.runs ?? "-", 4)} ${pad(t && b && r !== base ? `${(b.median / t.median).toFixed(2)}x` : "", 10)}` +
          (t && b && r !== base && t.rounds.length > 1 ? `  by round: ${t.rounds.map((m, i) => (b.rounds[i] / m).toFixed(2)).join(" ")}` : ""));
      }
    }
    // Agreement: each row's output against float64 GELU (rounded to f32) and against kiln fused.
    const ref = f32(`ref_${p}.f32`);
    const outOf = (r) => (existsSync(join(work, `${r.id}_${p}.f32`)) ? f32(`${r.id}_${p}.f32`) : null);
    const baseOut = base && outOf(base);
    console.log(`  max |diff| at 2^${p}: ` + ok.map((r) => {
      const y = outOf(r);
      if (!y || y.length !== ref.length) return `${r.id} missing`;
      return `${r.id} vs f64 ${maxAbs(y, ref).toExponential(1)}` + (baseOut && r !== base ? `, vs kiln fused ${maxAbs(y, baseOut).toExponential(1)}` : "");
    }).join("; "));
  }
  for (const r of rows.filter((r) => r.skipped)) console.log(`${r.id} skipped: ${r.skipped}`);
  for (const r of ok.filter((r) => r.kernels)) console.log(`${r.id}: fused kernels in the page: ${r.kernels.length ? r.kernels.join(", ") : "none"}`);
  for (const r of ok.filter((r) => r.warnings.length)) console.log(`${r.id} console warnings: ${[...new Set(r.warnings)].slice(0, 4).join(" | ")}`);
  const upAfter = spawnSync("uptime", { encoding: "utf8" }).stdout.trim();
  console.log(`\nuptime before: ${upBefore}\nuptime after:  ${upAfter}\ntotal ${((Date.now() - t0) / 1000).toFixed(0)} s; JSON: ${JSON_OUT}; models and inputs: ${work}`);
  writeFileSync(JSON_OUT, JSON.stringify({ date: new Date().toISOString(), chromium: browserVersion, cores: cpus().length,
    uptimeBefore: upBefore, uptimeAfter: upAfter, options: opt, python: pyMeta,
    onnxruntimeWeb: pkgVersion("onnxruntime-web"), rows }, null, 1));
}
if (opt.gelu) {
  await runGelu();
  process.exit(0);
}

// ---- --ab DIR: two kiln builds (--kiln = A, DIR = B) timed in one page, in alternating blocks ----
if (opt.ab) {
  const [ta, tb] = String(opt["ab-threads"]).split(",");
  const browser = await launch();
  for (const batch of BATCHES) {
    const page = await (await browser.newContext()).newPage();
    await page.goto(`${BASE}/ab.html?ta=${ta}&tb=${tb ?? ta}&batch=${batch}&blocks=${opt["ab-blocks"]}&per=${opt["ab-per"]}`);
    await page.waitForFunction(() => window.__ab, null, { timeout: 30 * 60e3, polling: 200 });
    const r = await page.evaluate(() => window.__ab);
    if (r.error) { console.error(r.error); process.exit(1); }
    console.log(`batch ${batch}: A (${ta}) ${r.a.toFixed(3)} ms, B (${tb ?? ta}) ${r.b.toFixed(3)} ms; B/A, median of ` +
      `${opt["ab-blocks"]} blocks of ${opt["ab-per"]} forwards each: ${r.ratio.toFixed(3)} (10-90%: ` +
      `${r.p10.toFixed(3)}-${r.p90.toFixed(3)}); logits max |A - B| ${r.diff.toExponential(2)}; ` +
      `host (the forward call alone), medians: A ${r.hostA.toFixed(3)} ms, B ${r.hostB.toFixed(3)} ms`);
    await page.context().close();
  }
  await browser.close();
  console.log(`uptime after: ${spawnSync("uptime", { encoding: "utf8" }).stdout.trim()}`);
  process.exit(0);
}

// ---- --dispatches: one kiln WebGPU forward's calls, and each dispatch replayed alone ------------
if (opt.dispatches) {
  const runs = opt["gpu-runs"] === opt.runs ? 3 : opt["gpu-runs"];
  const browser = await launch();
  const page = await (await browser.newContext()).newPage();
  const fusion = opt["no-fusion"] ? "&fusion=0" : "";
  await page.goto(`${BASE}/dispatches.html?batches=${BATCHES.join(",")}&runs=${runs}${fusion}`);
  await page.waitForFunction(() => window.__dispatches, null, { timeout: 20 * 60e3, polling: 200 });
  const res = await page.evaluate(() => window.__dispatches);
  await browser.close();
  if (res.error) { console.error(res.error); process.exit(1); }
  for (const { batch, calls, forwardMs, hostMs, kernels } of res) {
    console.log(`\nbatch ${batch}: forward ${forwardMs.toFixed(1)} ms (median of ${runs}; ` +
      `${hostMs.toFixed(2)} ms to upload and record); WebGPU calls in one forward:`);
    console.log("  " + Object.entries(calls).map(([k, v]) => `${k} ${v}`).join(", "));
    const sum = kernels.reduce((a, d) => a + d.ms, 0);
    console.log(`  each dispatch alone (median of ${runs}; sum ${sum.toFixed(1)} ms):`);
    for (const d of kernels) console.log(`    ${d.op.padEnd(34)} ${d.grid.padEnd(10)} ${d.ms.toFixed(1).padStart(9)} ms`);
  }
  console.log(`\nuptime after: ${spawnSync("uptime", { encoding: "utf8" }).stdout.trim()}`);
  process.exit(0);
}

const results = [];
if (!existsSync(join(opt.kiln, "dist/kiln_web_bg.wasm")))
  console.log(`note: ${opt.kiln}/dist/kiln_web_bg.wasm is missing: build it with 'bash scripts/build-web.sh'; kiln rows are skipped`);

const browser = await launch();
// Warm figures and logits. --rounds R: each row's runs in R turns, the rows taking turns (in a
// rotating order), so that a machine whose speed drifts over minutes (this VM's did by up to 1.8x
// for one build) slows every row alike. Only the row being timed has a page open: with all six CPU
// rows' pages open at once, the idle ones took cores from it (the 2-thread peers' batch 1 went
// from ~1.2 to 5.7-8.2 ms, stop 44). Each turn opens a fresh page (its own context) and warms it
// up with the full count.
for (const c of configs) {
  const r = { ...c, batches: {}, cold: null, bytes: null };
  results.push(r);
  if (c.lib === "kiln" && !existsSync(join(opt.kiln, "dist/kiln_web_bg.wasm")))
    r.skipped = "kiln package not built (bash scripts/build-web.sh)";
  if (c.lib === "kilnprog") r.skipped = existsSync(join(opt.kiln, "program.js")) ? programSkipped : `no ${opt.kiln}/program.js`;
}
const live = results.filter((r) => !r.skipped);
for (let round = 0; round < opt.rounds; round++) {
  for (let i = 0; i < live.length; i++) {
    const r = live[(i + round) % live.length];
    if (r.error || r.skipped) continue;
    let p;
    try {
      p = await openPage(browser, r, null);
    } catch (e) {
      r.skipped = e.message;
      console.log(`[${r.id}] skipped: ${e.message}`);
      continue;
    }
    try {
      if (!r.logits) {
        Object.assign(r, { version: p.st.version, actualBackend: p.st.actualBackend, actualThreads: p.st.actualThreads,
          adapter: p.st.adapter, crossOriginIsolated: p.st.crossOriginIsolated,
          hardwareConcurrencyOverride: p.st.hardwareConcurrencyOverride, first: p.st.first });
        r.logits = Array.from(Float32Array.from(await p.page.evaluate((n) => window.__bench.logits(n), images)));
      }
      for (const b of BATCHES) {
        const gpu = r.group === "webgpu";
        const runs = Math.ceil((gpu ? (b > 1 ? opt["gpu-b64-runs"] : opt["gpu-runs"]) : opt.runs) / opt.rounds);
        const warmup = gpu ? (b > 1 ? opt["gpu-b64-warmup"] : opt["gpu-warmup"]) : opt.warmup;
        const times = await p.page.evaluate(([n, w, k, ms, wms]) => window.__bench.time(n, w, k, ms, wms),
          [b, warmup, runs, (opt["max-seconds"] * 1000) / opt.rounds, opt["warmup-ms"]]);
        const x = (r.batches[b] ??= { times: [], roundMedians: [], requestedRuns: 0, warmup });
        x.times.push(...times);
        x.roundMedians.push(median(times));
        x.requestedRuns += runs;
      }
    } catch (e) {
      r.error = String(e.message || e);
      console.log(`[${r.id}] failed: ${r.error}`);
    }
    await p.context.close();
  }
}
for (const r of live) {
  for (const [b, x] of Object.entries(r.batches)) {
    Object.assign(x, { median: median(x.times), p90: pct(x.times, 90), min: Math.min(...x.times), runs: x.times.length });
    const turns = opt.rounds > 1 ? `; turns' medians ${x.roundMedians.map((m) => m.toFixed(2)).join(", ")}` : "";
    console.log(`[${r.id}] batch ${b}: median ${x.median.toFixed(2)} ms, p90 ${x.p90.toFixed(2)} ms over ${x.runs} runs (${x.warmup} warm-up)${turns}`);
  }
}
for (const r of results.filter((r) => !r.skipped)) {
  const tc = Date.now();
  // Cold start: a fresh browser (so a fresh context, page and caches) per sample.
  const colds = [];
  let bytes = null;
  for (let s = 0; s < opt.cold; s++) {
    const b = await launch();
    const requests = new Set();
    served.length = 0;
    try {
      const q = await openPage(b, r, requests);
      colds.push(q.st.cold);
      const seenByServer = served.filter(libFile);
      const files = [...new Set([...requests].filter(libFile))];
      const missed = [...new Set(seenByServer)].filter((f) => !files.includes(f));
      const list = files.map((f) => {
        const buf = readFileSync(resolvePath(f));
        return { path: f, raw: buf.length, gzip9: gzipSync(buf, { level: 9 }).length };
      });
      bytes = { files: list, gzip9: list.reduce((a, x) => a + x.gzip9, 0), raw: list.reduce((a, x) => a + x.raw, 0),
        servedButNotSeenByPage: missed };
      await q.context.close();
    } catch (e) {
      console.log(`[${r.id}] cold sample ${s + 1} failed: ${e.message}`);
    }
    await b.close();
  }
  if (colds.length) r.cold = { median: median(colds), samples: colds };
  r.bytes = bytes;
  r.seconds = (Date.now() - tc) / 1000;
  console.log(`[${r.id}] cold start ${colds.map((x) => x.toFixed(0)).join(", ")} ms; library ${bytes ? (bytes.gzip9 / 1024).toFixed(0) : "?"} KiB gzip -9; ${r.seconds.toFixed(0)} s`);
}
await browser.close();
server.close();
const upAfter = spawnSync("uptime", { encoding: "utf8" }).stdout.trim();

// ---- report ---------------------------------------------------------------------------------------
const ms = (x) => (x == null ? "-" : x >= 1000 ? `${(x / 1000).toFixed(2)} s` : `${x.toFixed(x < 10 ? 2 : 1)} ms`);
const ratio = (k, p) => (k == null || p == null ? "-" : `${(k / p).toFixed(2)}x`);
const pad = (s, n, left) => (left ? String(s).padEnd(n) : String(s).padStart(n));
const ok = results.filter((r) => !r.skipped && !r.error);
const kilnOf = (g) => ok.find((r) => r.lib === "kiln" && r.group === g);

console.log(`\nChromium ${browserVersion} (headless), ${cpus().length} cores; kiln ${ok.find((r) => r.lib === "kiln")?.version ?? "?"}, ` +
  `onnxruntime-web ${pkgVersion("onnxruntime-web")}, @tensorflow/tfjs-core ${pkgVersion("@tensorflow/tfjs-core")} ` +
  `(+ backend-wasm ${pkgVersion("@tensorflow/tfjs-backend-wasm")}, backend-webgpu ${pkgVersion("@tensorflow/tfjs-backend-webgpu")})`);
const adapters = [...new Set(ok.filter((r) => r.adapter).map((r) => r.adapter))];
if (adapters.length) console.log(`WebGPU adapter: ${adapters.join("; ")}`);
console.log(`Per run: input upload to logits read back in JS. CPU rows: ${opt.warmup} warm-up (and at least ${opt["warmup-ms"]} ms of them per turn) + ${opt.runs} timed runs. ` +
  `WebGPU rows: ${opt["gpu-warmup"]} warm-up + ${opt["gpu-runs"]} runs at batch 1, ${opt["gpu-b64-warmup"]} + ${opt["gpu-b64-runs"]} at batch > 1 ` +
  `(fewer: SwiftShader is slow; --gpu-runs / --gpu-b64-runs). Runs stop early after ${opt["max-seconds"]} s per cell (n shows the count).`);
console.log(`Cold start: navigation to first batch-1 result, fresh browser per sample, median of ${opt.cold}. ` +
  `Bytes: gzip -9 of the .js/.mjs/.wasm files the page requested from the library.\n`);

const hdr = ["library / backend", ...BATCHES.flatMap((b) => [`b${b} median`, "p90", "p90/med", "n"]), "cold start", "lib KiB gz", ...BATCHES.map((b) => `kiln/this b${b}`), "kiln/this cold", "kiln/this bytes"];
const W = [34, ...BATCHES.flatMap(() => [11, 10, 8, 5]), 11, 11, ...BATCHES.map(() => 14), 15, 16];
const line = (cells) => cells.map((c, i) => pad(c, W[i], i === 0)).join(" ");
console.log(line(hdr));
console.log("-".repeat(W.reduce((a, b) => a + b + 1, 0)));
for (const r of results) {
  if (r.skipped || r.error) {
    console.log(`${pad(r.label, W[0], true)} skipped: ${r.skipped || r.error}`);
    continue;
  }
  const k = kilnOf(r.group);
  const cells = [r.label + (r.actualThreads !== r.threads ? ` [threads=${r.actualThreads}]` : "") +
    (r.hardwareConcurrencyOverride ? " +" : "")];
  for (const b of BATCHES) {
    const x = r.batches[b];
    cells.push(ms(x?.median), ms(x?.p90), x ? (x.p90 / x.median).toFixed(2) : "-", x ? (x.runs < x.requestedRuns ? `${x.runs}*` : x.runs) : "-");
  }
  cells.push(ms(r.cold?.median), r.bytes ? (r.bytes.gzip9 / 1024).toFixed(0) : "-");
  const self = r.lib.startsWith("kiln");
  for (const b of BATCHES) cells.push(self || !k ? "" : ratio(k.batches[b]?.median, r.batches[b]?.median));
  cells.push(self || !k ? "" : ratio(k.cold?.median, r.cold?.median), self || !k ? "" : ratio(k.bytes?.gzip9, r.bytes?.gzip9));
  console.log(line(cells));
}
for (const r of ok.filter((r) => r.hardwareConcurrencyOverride))
  console.log(`+ ${r.id}: tfjs-backend-wasm caps threads at navigator.hardwareConcurrency / 2 (1 here), so this page reports ` +
    `hardwareConcurrency = ${r.hardwareConcurrencyOverride}; tf.wasm.getThreadsCount() = ${r.actualThreads}`);
for (const r of ok.filter((r) => !r.crossOriginIsolated)) console.log(`! ${r.id}: the page was not cross-origin isolated`);
if (ok.some((r) => Object.values(r.batches).some((x) => x.runs < x.requestedRuns)))
  console.log("* fewer runs than asked: the --max-seconds cap was reached");

// kiln / best peer
console.log("\nkiln / best peer (median; < 1 means kiln is faster or smaller):");
const summary = [];
// kiln's row for each comparison: its threaded row against every peer, its 1-thread row against
// the 1-thread peers (the first kiln row of the group when that one was not run).
for (const [g, name, filter, kilnId] of [
  ["cpu", "CPU, any thread count", () => true, "kiln-cpu-2t"],
  ["cpu", "CPU, 1-thread peers", (r) => r.threads === 1, "kiln-cpu"],
  ["webgpu", "WebGPU, same adapter", () => true, "kiln-webgpu"],
  ["webgpu", "WebGPU, compiled program", () => true, "kiln-program"],
]) {
  const k = ok.find((r) => r.id === kilnId) ?? kilnOf(g);
  const peers = ok.filter((r) => r.group === g && !r.lib.startsWith("kiln") && filter(r));
  if (!k || !peers.length) { console.log(`  ${name}: not available`); continue; }
  const parts = [];
  const best = (f) => peers.filter((r) => f(r) != null).sort((a, b) => f(a) - f(b))[0];
  const entry = { group: name };
  for (const b of BATCHES) {
    const p = best((r) => r.batches[b]?.median);
    if (!p || !k.batches[b]) continue;
    const v = k.batches[b].median / p.batches[b].median;
    entry[`batch${b}`] = { ratio: v, peer: p.id };
    parts.push(`batch ${b} ${v.toFixed(2)}x (vs ${p.id} ${ms(p.batches[b].median)})`);
  }
  const pc = best((r) => r.cold?.median);
  if (pc && k.cold) { entry.cold = { ratio: k.cold.median / pc.cold.median, peer: pc.id }; parts.push(`cold ${entry.cold.ratio.toFixed(2)}x (vs ${pc.id})`); }
  const pb = best((r) => r.bytes?.gzip9);
  if (pb && k.bytes) { entry.bytes = { ratio: k.bytes.gzip9 / pb.bytes.gzip9, peer: pb.id }; parts.push(`bytes ${entry.bytes.ratio.toFixed(2)}x (vs ${pb.id})`); }
  summary.push(entry);
  console.log(`  ${name}: ${parts.join("; ")}`);
}

// Agreement of the logits
console.log(`\nLogits on the first ${images} MNIST test images (batch ${images}; one call per library):`);
console.log(`  onnxruntime ${pyMeta.onnxruntime} (native, Python) vs numpy float64 forward: max abs diff ${pyMeta.max_abs_diff_onnxruntime_vs_numpy.toExponential(2)}`);
const kc = ok.find((r) => r.id === "kiln-cpu" && r.logits) || ok.find((r) => r.logits);
const top1Labels = (a) => agree(argmaxRows(a), labels.slice(0, a.length / 10));
console.log(`  ${pad("library / backend", 34, true)} ${pad(`vs ${kc ? kc.id : "kiln"}`, 16)} ${pad("vs ORT native", 14)} ${pad("vs numpy f64", 13)} ${pad(`top-1 = ${kc ? kc.id : "kiln"}`, 18)} ${pad("accuracy", 9)} ${pad("b1 vs b64 row 0", 16)}`);
const accuracy = [];
for (const r of ok.filter((r) => r.logits)) {
  const a = Float32Array.from(r.logits);
  const e = {
    id: r.id,
    maxAbsDiffVsKiln: kc ? maxAbs(a, Float32Array.from(kc.logits)) : null,
    maxAbsDiffVsOnnxruntimeNative: maxAbs(a, refOrt),
    maxAbsDiffVsNumpy: maxAbs(a, refNumpy),
    top1AgreementWithKiln: kc ? agree(argmaxRows(a), argmaxRows(Float32Array.from(kc.logits))) : null,
    accuracyVsLabels: top1Labels(a),
    batch1VsBatchRow0: maxAbs(Float32Array.from(r.first), a.subarray(0, 10)),
  };
  accuracy.push(e);
  const ex = (v) => (v == null ? "-" : v.toExponential(2));
  console.log(`  ${pad(r.label, 34, true)} ${pad(ex(e.maxAbsDiffVsKiln), 16)} ${pad(ex(e.maxAbsDiffVsOnnxruntimeNative), 14)} ${pad(ex(e.maxAbsDiffVsNumpy), 13)} ${pad(e.top1AgreementWithKiln == null ? "-" : e.top1AgreementWithKiln.toFixed(3), 18)} ${pad(e.accuracyVsLabels.toFixed(3), 9)} ${pad(ex(e.batch1VsBatchRow0), 16)}`);
}

{
  const tops = ok.filter((r) => r.logits).map((r) => argmaxRows(Float32Array.from(r.logits)));
  if (tops.length > 1) {
    const all = tops[0].filter((v, i) => tops.every((t) => t[i] === v)).length;
    console.log(`  top-1: all ${tops.length} library/backend rows agree on ${all} of ${tops[0].length} images`);
  }
}
for (const r of ok) {
  if (r.bytes) console.log(`  bytes ${r.id}: ${r.bytes.files.map((f) => `${f.path} ${(f.gzip9 / 1024).toFixed(0)} KiB`).join(", ")}` +
    (r.bytes.servedButNotSeenByPage.length ? ` (served but not seen as page requests: ${r.bytes.servedButNotSeenByPage.join(", ")})` : ""));
}
const total = (Date.now() - t0) / 1000;
console.log(`\nuptime before: ${upBefore}\nuptime after:  ${upAfter}\n(load from other processes on this machine makes the figures noisier; compare within one run)`);
console.log(`total ${total.toFixed(0)} s; JSON: ${JSON_OUT}; ONNX model and inputs: ${work}`);

writeFileSync(JSON_OUT, JSON.stringify({
  date: new Date().toISOString(), chromium: browserVersion, cores: cpus().length, cpu: cpus()[0]?.model,
  loadavgAfter: loadavg(), uptimeBefore: upBefore, uptimeAfter: upAfter, options: opt, totalSeconds: total,
  versions: { onnxruntimeWeb: pkgVersion("onnxruntime-web"), tfjsCore: pkgVersion("@tensorflow/tfjs-core"),
    tfjsBackendWasm: pkgVersion("@tensorflow/tfjs-backend-wasm"), tfjsBackendWebgpu: pkgVersion("@tensorflow/tfjs-backend-webgpu"),
    playwrightCore: pkgVersion("playwright-core"), python: pyMeta },
  results: results.map(({ logits, first, ...r }) => r), summary, accuracy,
}, null, 1));
