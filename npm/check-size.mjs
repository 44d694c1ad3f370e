// Fails (exit 1) when a gzipped release .wasm of the package is larger than size-budget.json
// allows: each module (the main one, its CPU-only and threaded builds, the ONNX converter that
// npm/index.js loads lazily) has its own entry.
// It also reports what a page that runs on the CPU downloads (issue 18): index.js as packed
// (minified), the CPU-only glue and module.
// Usage: node npm/check-size.mjs   (after scripts/build-web.sh built npm/dist)
import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";

const here = new URL("./", import.meta.url);
const { modules } = JSON.parse(readFileSync(new URL("size-budget.json", here), "utf8"));
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
const page = [index, readFileSync(new URL("dist/kiln_web_cpu.js", here)), readFileSync(new URL("dist/kiln_web_cpu_bg.wasm", here))]
  .map((bytes) => gzipSync(bytes, { level: 9 }).length);
console.log(`the CPU page (index.js packed + kiln_web_cpu.js + its .wasm): ${page.join(" + ")} = ${kb(page[0] + page[1] + page[2])} gzipped`);
if (failed) process.exit(1);
