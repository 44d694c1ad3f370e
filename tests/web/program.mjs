// Compiled programs in the page (issue 18, bytes): `kiln compile` records the demo's MNIST CNN for
// batch sizes 1 and 5, and headless Chromium (SwiftShader's WebGPU) replays the file with
// npm/program.js alone. Checks that
//   - the program's page fetches no WebAssembly, and its variants report the compiled shapes;
//   - its logits on random images, at both batch sizes, match the CPU module's forward of the
//     same model (a second page: kiln-ml with `webgpu: false`), and top-1 agrees everywhere;
//   - two runs started together (batch 1 and 5, different images) each get their own result;
//   - ONNX models from shared/conformance, imported by `kiln import` and compiled, give the
//     outputs stored with them (ONNX's reference) for each of their test sets: the Model Zoo's
//     MNIST (mnist-8, three sets), and two node-suite cases, ArgMax (an i32 output, compared
//     exactly) and Softmax (skipped with a notice without that data);
//   - an input shape that was not compiled, a wrong input type and a run after destroy() are
//     Errors naming what was expected;
//   - no console error.
//
//   node tests/web/program.mjs        (after scripts/build-web.sh and a kiln binary)
// Env: KILN_BIN, CHROMIUM (tests/web/e2e/harness.mjs), KILN_SEED (the images' seed).
import { spawnSync } from "node:child_process";
import { createServer } from "node:http";
import { existsSync, mkdirSync, readdirSync, readFileSync } from "node:fs";
import { extname, join, normalize } from "node:path";
import { ROOT, checker, fatal as fatalIn, kilnBin, launchChromium, openPage } from "./e2e/harness.mjs";
import { rand } from "./node/helpers.mjs";
import { suitesDir, tensorProto } from "./onnx-data.mjs";

const fatal = (msg) => fatalIn("program", msg);
const check = checker();
const SEED = Number(process.env.KILN_SEED ?? Math.floor(Math.random() * 1e6));
console.log(`program: seed ${SEED} (KILN_SEED=${SEED} repeats this run)`);
if (!existsSync(join(ROOT, "npm/dist/kiln_web_cpu_bg.wasm"))) fatal("missing npm/dist: run scripts/build-web.sh");

const out = join(ROOT, "target/program-test");
mkdirSync(out, { recursive: true });
const kiln = (...args) => {
  const r = spawnSync(kilnBin("program"), args, { cwd: ROOT, encoding: "utf8" });
  if (r.status !== 0) fatal(`kiln ${args.join(" ")} failed:\n${r.stdout}${r.stderr}`);
  console.log(r.stdout.trim());
};
kiln("compile", "demos/mnist/models/mnist.safetensors", "--batch", "1,5", "-o", join(out, "mnist.kilnprog"));

const digits = (n, seed) => Array.from(rand(n * 784, seed), (v) => (v + 1) / 2); // pixels in [0, 1)
const inputs = { b1: digits(1, SEED), b5: digits(5, SEED + 1), b1b: digits(1, SEED + 2) };

// The ONNX cases: each model compiled here, its test sets' inputs for the page, outputs kept here.
const suites = suitesDir();
const onnxCases = [
  ["mnist-8", "models/mnist/mnist-8"],
  ["argmax", "onnx-node/test_argmax_default_axis_random"],
  ["softmax", "onnx-node/test_softmax_axis_1"],
].filter(([, dir]) => suites && existsSync(join(suites, dir, "model.onnx")));
if (onnxCases.length < 3) console.log(`program: ONNX cases skipped: no ${suites ?? "shared/conformance"} data (KILN_ONNX_SUITES)`);
const expected = {};
inputs.onnx = {};
for (const [name, dir] of onnxCases) {
  kiln("import", join(suites, dir, "model.onnx"), "-o", join(out, `${name}.safetensors`));
  // an import traces one fixed input shape: one variant, no --batch
  kiln("compile", join(out, `${name}.safetensors`), "-o", join(out, `${name}.kilnprog`));
  const sets = readdirSync(join(suites, dir)).filter((f) => f.startsWith("test_data_set_")).sort();
  const read = (set, file) => tensorProto(readFileSync(join(suites, dir, set, file)));
  inputs.onnx[name] = sets.map((set) => Array.from(read(set, "input_0.pb").data));
  expected[name] = sets.map((set) => read(set, "output_0.pb"));
}

// ?ref=1: the CPU module's forward (the oracle); otherwise the program alone.
const PAGE = `<!doctype html><meta charset="utf-8"><body><script type="module">
const q = new URLSearchParams(location.search);
const result = {};
try {
  const inputs = await (await fetch("./inputs.json")).json();
  const f32 = (k) => Float32Array.from(inputs[k]);
  if (q.has("ref")) {
    const kiln = await import("./npm/index.js"); // its classes are set by init()
    await kiln.default(undefined, { webgpu: false, threads: 1 });
    const model = await kiln.Model.load("./demos/mnist/models/mnist.safetensors");
    for (const [k, n] of [["b1", 1], ["b5", 5], ["b1b", 1]]) {
      result[k] = Array.from(await model.forward(kiln.Tensor.from(f32(k), [n, 1, 28, 28])).data());
    }
  } else {
    const { Program } = await import("./npm/program.js");
    const program = await Program.load("./target/program-test/mnist.kilnprog");
    result.variants = program.variants.map((v) => [v.inputs.map((t) => t.shape), v.outputs.map((t) => t.shape)]);
    const [one] = await program.run([{ data: f32("b1"), shape: [1, 1, 28, 28] }]);
    result.b1 = Array.from(one.data);
    result.b1Meta = [one.name, one.dtype, one.shape];
    // bare typed arrays pick the variant by length; two runs at once
    const [five, again] = await Promise.all([program.run([f32("b5")]), program.run([f32("b1b")])]);
    result.b5 = Array.from(five[0].data);
    result.b5Shape = five[0].shape;
    result.b1b = Array.from(again[0].data);
    const error = (p) => p.then(() => "no error", (e) => (e instanceof Error ? "" : "not an Error: ") + e.message);
    result.badShape = await error(program.run([{ data: new Float32Array(2 * 784), shape: [2, 1, 28, 28] }]));
    result.badType = await error(program.run([new Int32Array(784)]));
    program.destroy();
    result.destroyed = await error(program.run([f32("b1")]));
    result.onnx = {};
    for (const [name, sets] of Object.entries(inputs.onnx)) {
      const p = await Program.load(\`./target/program-test/\${name}.kilnprog\`);
      result.onnx[name] = [];
      for (const x of sets) {
        const [y] = await p.run([Float32Array.from(x)]);
        result.onnx[name].push({ dtype: y.dtype, shape: y.shape, data: Array.from(y.data) });
      }
    }
  }
} catch (e) {
  result.error = String(e?.stack ?? e);
}
result.wasm = performance.getEntriesByType("resource").map((r) => r.name.split("/").pop()).filter((n) => n.endsWith(".wasm"));
window.result = result;
document.body.dataset.ready = "1";
</script>`;

const TYPES = { ".html": "text/html", ".js": "text/javascript", ".wasm": "application/wasm", ".json": "application/json" };
const server = createServer((req, res) => {
  const path = new URL(req.url, "http://x").pathname.slice(1);
  let body;
  if (path === "page.html") body = PAGE;
  else if (path === "inputs.json") body = JSON.stringify(inputs);
  else if (/^(npm|demos\/mnist\/models|target\/program-test)\//.test(path) && !normalize(path).startsWith("..")) {
    const file = join(ROOT, normalize(path));
    if (existsSync(file)) body = readFileSync(file);
  }
  if (path === "favicon.ico") res.writeHead(204).end();
  else if (body === undefined) {
    console.log(`program: 404 for ${path}`);
    res.writeHead(404).end();
  }
  else res.writeHead(200, { "Content-Type": TYPES[extname(path)] ?? "application/octet-stream" }).end(body);
});
await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
const base = `http://127.0.0.1:${server.address().port}`;

/** max |a - b| / max |b|, Infinity when the lengths differ. */
function relErr(a, b) {
  if (!a || !b || a.length !== b.length) return Infinity;
  let err = 0;
  let scale = 0;
  for (let i = 0; i < a.length; i++) {
    err = Math.max(err, Math.abs(a[i] - b[i]));
    scale = Math.max(scale, Math.abs(b[i]));
  }
  return err / scale;
}
const argmax = (row) => row.indexOf(Math.max(...row));
const top1 = (logits) => Array.from({ length: logits.length / 10 }, (_, i) => argmax(logits.slice(i * 10, i * 10 + 10)));

const browser = await launchChromium();
try {
  const run = async (query) => {
    const p = await openPage(browser, `${base}/page.html${query}`);
    const r = await p.page.evaluate(() => window.result);
    check(p.errors.length === 0, `${query || "program page"}: no console error${p.errors.length ? `: ${p.errors.join(" | ")}` : ""}`);
    await p.close();
    if (r.error) fatal(`${query || "program page"}: ${r.error}`);
    return r;
  };
  const ref = await run("?ref=1");
  const got = await run("");
  check(got.wasm.length === 0, `the program's page fetches no WebAssembly (${got.wasm.join(", ") || "none"})`);
  check(
    JSON.stringify(got.variants) === JSON.stringify([[[[1, 1, 28, 28]], [[1, 10]]], [[[5, 1, 28, 28]], [[5, 10]]]]),
    `variants: ${JSON.stringify(got.variants)}`,
  );
  check(JSON.stringify(got.b1Meta) === JSON.stringify(["output", "f32", [1, 10]]), `output: ${JSON.stringify(got.b1Meta)}`);
  check(JSON.stringify(got.b5Shape) === "[5,10]", `batch 5's output shape ${JSON.stringify(got.b5Shape)}`);
  for (const k of ["b1", "b5", "b1b"]) {
    const e = relErr(got[k], ref[k]);
    check(e <= 1e-5, `${k}: program logits vs the CPU module's: max error ${e.toExponential(2)} of the largest (<= 1e-5)`);
    check(JSON.stringify(top1(got[k])) === JSON.stringify(top1(ref[k])), `${k}: top-1 agrees (${top1(got[k]).join(",")})`);
  }
  check(relErr(got.b1, ref.b1b) > 1e-3, "different images give different logits");
  for (const [name, sets] of Object.entries(expected)) {
    sets.forEach((want, i) => {
      const y = got.onnx[name][i];
      const shape = JSON.stringify(y.shape) === JSON.stringify(want.dims);
      if (want.dataType === 7) {
        const same = y.dtype === "i32" && JSON.stringify(y.data) === JSON.stringify(want.data);
        check(shape && same, `${name} test set ${i}: ${y.dtype} ${JSON.stringify(y.shape)} equal to ONNX's int64 output`);
      } else {
        const e = relErr(y.data, want.data);
        check(shape && e <= 1e-5, `${name} test set ${i}: max error ${e.toExponential(2)} of the largest against ONNX's output (<= 1e-5)`);
      }
    });
  }
  check(/no compiled variant/.test(got.badShape) && /\[2,1,28,28\]/.test(got.badShape) && /\[5,1,28,28\]/.test(got.badShape),
    `an uncompiled shape: ${got.badShape}`);
  check(/^Program\.run:/.test(got.badType), `an Int32Array for an f32 input: ${got.badType}`);
  check(/^Program\.run:/.test(got.destroyed) && /destroy/.test(got.destroyed), `a run after destroy(): ${got.destroyed}`);
} finally {
  await browser.close();
  server.close();
}
if (check.failures) {
  console.error(`program: ${check.failures} check(s) failed (KILN_SEED=${SEED})`);
  process.exit(1);
}
console.log("program: all checks passed");
