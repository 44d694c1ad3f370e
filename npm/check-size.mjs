// Fails (exit 1) when a gzipped release .wasm of the package is larger than size-budget.json
// allows: each module (the main one, its CPU-only, WebGPU-only and threaded builds, the ONNX
// converter that npm/index.js loads lazily) has its own entry.
// It also reports what a page that runs on the CPU, or on WebGPU alone, downloads (issue 18):
// index.js as packed (minified), the module's glue and the module; and what a compiled program's
// page downloads (program.js as packed), which has a budget of its own.
// Usage: node npm/check-size.mjs   (after scripts/build-web.sh built npm/dist)
import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";

const here = new URL("./", import.meta.url);
const { modules, program } = JSON.parse(readFileSync(new URL("size-budget.json", here), "utf8"));
const kb = (n) => `${(n / 1024).toFixed(1)} KiB`;
let failed = false;
// `KILN_WEB_THREADS=0 scripts/build-web.sh` builds no threaded module.
const threads = process.env.KILN_WEB_THREADS !== "0";
for (const budget of modules) {
  if (!threads && budget.file.includes("_threads")) {
    console.log(`${budget.file}: not built (KILN_WEB_THREADS=0)`);
    continue;
  }
  const wasm = readFileSync(new URL(budget.file, here));
  const gz = gzipSync(wasm, { level: 9 }).length;
  console.log(`${budget.file}: ${kb(wasm.length)} raw, ${kb(gz)} gzipped (budget ${kb(budget.maxGzipBytes)})`);
  if (gz > budget.maxGzipBytes) {
    console.error(`size check failed: ${budget.file}: ${gz} gzipped bytes > budget ${budget.maxGzipBytes}`);
    failed = true;
  }
}
const { minifyEntry } = await import(new URL("../scripts/lib/minify-glue.mjs", here).href);
const index = await minifyEntry(readFileSync(new URL("index.js", here), "utf8"));
// What a page downloads (index.js packed + a module's glue + its .wasm), for the two kinds the
// benchmarks compare with their peers' (tests/bench/browser): the CPU page and the WebGPU-only one.
for (const [what, name] of [["the CPU page", "kiln_web_cpu"], ["the WebGPU page (cpu: false)", "kiln_web_gpu"]]) {
  const page = [index, readFileSync(new URL(`dist/${name}.js`, here)), readFileSync(new URL(`dist/${name}_bg.wasm`, here))]
    .map((bytes) => gzipSync(bytes, { level: 9 }).length);
  console.log(`${what} (index.js packed + ${name}.js + its .wasm): ${page.join(" + ")} = ${kb(page[0] + page[1] + page[2])} gzipped`);
}
// A compiled program's page (kiln-ml/program) downloads program.js alone, minified as packed.
const runner = await minifyEntry(readFileSync(new URL(program.file, here), "utf8"), program.file);
const runnerGz = gzipSync(runner, { level: 9 }).length;
console.log(`the compiled-program page (${program.file} packed): ${runnerGz} bytes gzipped (budget ${program.maxGzipBytes})`);
if (runnerGz > program.maxGzipBytes) {
  console.error(`size check failed: ${program.file}: ${runnerGz} gzipped bytes > budget ${program.maxGzipBytes}`);
  failed = true;
}
if (failed) process.exit(1);
