// Fails (exit 1) when the gzipped release .wasm is larger than size-budget.json allows.
// Usage: node npm/check-size.mjs   (after scripts/build-web.sh built npm/dist)
import { readFileSync } from "node:fs";
import { gzipSync } from "node:zlib";

const here = new URL("./", import.meta.url);
const budget = JSON.parse(readFileSync(new URL("size-budget.json", here), "utf8"));
const wasm = readFileSync(new URL(budget.file, here));
const gz = gzipSync(wasm, { level: 9 }).length;
const kb = (n) => `${(n / 1024).toFixed(1)} KiB`;
console.log(`${budget.file}: ${kb(wasm.length)} raw, ${kb(gz)} gzipped (budget ${kb(budget.maxGzipBytes)})`);
if (gz > budget.maxGzipBytes) {
  console.error(`size check failed: ${gz} gzipped bytes > budget ${budget.maxGzipBytes}`);
  process.exit(1);
}
