// Custom ops written in JS (registerOp) in Node on the CPU backend of the main module: a swish activation against
// the composed built-in ops on odd shapes, the errors (a backward included: JS ops run forward
// only), a model file that uses it, and the npm README's example.
//   node --test tests/web/node/custom.test.mjs
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import init, {
  Device,
  Model,
  Tensor,
  customOp,
  registerOp,
  registeredOps,
  unregisterOp,
} from "../../../npm/index.js";
import { close, rand } from "./helpers.mjs";

// The main module, although Node has no WebGPU: registerOp checks a WGSL kernel's includes only
// where kernels can run (the CPU-only module, Node's default, has no WGSL layer).
await init(undefined, { webgpu: true });

// swish(x, beta) = x * sigmoid(beta * x), as the npm README's example defines it.
const SWISH_WGSL = `
#include "common.wgsl"
struct Params { n: u32, beta: f32 }
@group(0) @binding(0) var<storage, read> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
  let i = group_index(wid, nwg) * 64u + lid.x;
  if i >= params.n { return; }
  y[i] = x[i] / (1.0 + exp(-params.beta * x[i]));
}`;

const swishSpec = {
  name: "test_swish",
  wgsl: SWISH_WGSL,
  shape: ([x]) => x.shape,
  cpu: ([x], { beta }) => x.data.map((v) => v / (1 + Math.exp(-beta * v))),
  params: (inputs, out, { beta }) => {
    const words = new Uint32Array(2);
    words[0] = out.shape.reduce((a, b) => a * b, 1);
    new Float32Array(words.buffer, 4, 1)[0] = beta;
    return words;
  },
};
registerOp(swishSpec);

const swish = (x, beta) => customOp("test_swish", [x], { beta });
const composed = (x, beta) => x.mul(x.mul(beta).sigmoid());

test("registerOp: the op runs like a built-in one and matches the composed ops", async () => {
  assert.ok(registeredOps().includes("test_swish"));
  for (const [shape, beta] of [[[3, 7, 5], 1.5], [[1], -0.7], [[13], 2], [[2, 1, 9], 0.25]]) {
    const n = shape.reduce((a, b) => a * b, 1);
    const x = Tensor.from(rand(n, n, 2), shape);
    const y = swish(x, beta);
    assert.deepEqual(y.shape, shape);
    assert.equal(y.dtype, "f32");
    close(await y.data(), await composed(x, beta).data(), 1e-5);
  }
  // a strided view reaches the callback as row-major data
  const t = Tensor.from(rand(35, 3, 2), [5, 7]).transpose();
  close(await swish(t, 1).data(), await composed(t, 1).data(), 1e-5);
});

test("errors name the op and what was expected; unregisterOp", async () => {
  const x = Tensor.from([1, 2, 3]);
  const kiln = (re) => (e) => e.name === "KilnError" && re.test(e.message);
  assert.throws(() => customOp("no_such_op", [x]), kiln(/^no_such_op: is a custom op not registered.*registerOp/));

  registerOp({ name: "test_throws", cpu: () => { throw new Error("boom"); } });
  assert.throws(() => customOp("test_throws", [x]), kiln(/^test_throws: its cpu function threw: boom/));

  registerOp({ name: "test_short", cpu: ([x]) => x.data.slice(1) });
  assert.throws(() => customOp("test_short", [x]), kiln(/^test_short: its cpu function must return the 3 values of the f32 output of shape \[3\].*2 values/));

  registerOp({ name: "test_bad_shape", cpu: ([x]) => x.data, shape: () => "wide" });
  assert.throws(() => customOp("test_bad_shape", [x]), kiln(/^test_bad_shape: its shape function must return a shape/));

  registerOp({ name: "test_rule", cpu: ([x]) => x.data, shape: ([x]) => { throw new Error(`expects rank 2, got ${x.shape}`); } });
  assert.throws(() => customOp("test_rule", [x]), kiln(/^test_rule: its shape function threw: expects rank 2, got 3/));

  // JS ops run forward only: a backward is rejected, not ignored, and nothing is registered
  for (const backward of [(xs, y, g) => [g], 3]) {
    assert.throws(
      () => registerOp({ name: "test_backward", cpu: ([x]) => x.data, backward }),
      kiln(/^registerOp: test_backward: spec.backward is not supported: JS ops have no gradient in the page yet/),
    );
  }
  assert.ok(!registeredOps().includes("test_backward"));

  assert.throws(() => registerOp({ name: "bad name!", cpu: () => [] }), kiln(/must be letters, digits/));
  assert.throws(() => registerOp({ name: "test_nocpu" }), kiln(/test_nocpu: spec.cpu .* is required/));
  assert.throws(() => registerOp({ name: "x", cpu: () => [], shape: 3 }), kiln(/shape must be a function, got number/));
  assert.throws(() => customOp("test_swish", [x], { beta: "big" }), kiln(/attribute "beta" must be a number/));
  assert.throws(
    () => registerOp({ name: "test_include", cpu: ([x]) => x.data, wgsl: 'struct P { n: u32 }\n#include "nope.wgsl"' }),
    kiln(/register_op\(test_include\): WGSL line 2: unknown #include "nope.wgsl"/),
  );

  for (const n of ["test_throws", "test_short", "test_bad_shape", "test_rule"]) {
    assert.ok(unregisterOp(n));
  }
  assert.equal(unregisterOp("test_throws"), false);
  assert.ok(!registeredOps().includes("test_throws"));
  // an op registered again after unregisterOp runs
  registerOp({ name: "test_throws", cpu: ([x]) => x.data.map((v) => v + 1) });
  assert.deepEqual([...(await customOp("test_throws", [x]).data())], [2, 3, 4]);
  assert.ok(unregisterOp("test_throws"));
});

/** A kiln model file: `y = swish(x, beta) * w` with `w` of shape [5], x of shape [batch, 5]. */
function swishModelFile(op, beta, w) {
  const graph = {
    inputs: [{ name: "x", dtype: "f32", shape: [null, 5] }],
    nodes: [
      { op: { custom: { name: op, attrs: { beta } } }, inputs: [{ input: 0 }] },
      { op: { binary: "mul" }, inputs: [{ node: 0 }, { tensor: "w" }] },
    ],
    outputs: [{ name: "y", dtype: "f32", shape: [null, 5], value: { node: 1 } }],
  };
  const header = {
    __metadata__: { format: "kiln", kiln_version: "1", kiln_graph: JSON.stringify(graph) },
    w: { dtype: "F32", shape: [5], data_offsets: [0, 20] },
  };
  let json = JSON.stringify(header);
  json += " ".repeat((8 - (json.length % 8)) % 8);
  const bytes = new Uint8Array(8 + json.length + 20);
  new DataView(bytes.buffer).setBigUint64(0, BigInt(json.length), true);
  bytes.set(new TextEncoder().encode(json), 8);
  bytes.set(new Uint8Array(w.buffer), 8 + json.length);
  return bytes;
}

test("a model file using a JS op loads only while the op is registered, and names it", async () => {
  registerOp({ ...swishSpec, name: "test_saved_swish" });
  const w = rand(5, 21, 2);
  const file = swishModelFile("test_saved_swish", 0.8, w);
  const model = await Model.load(file, { device: Device.cpu() });
  const x = Tensor.from(rand(15, 22, 2), [3, 5]);
  const [y] = model.run([x]);
  close(await y.data(), await composed(x, 0.8).mul(Tensor.from(w)).data(), 1e-5);

  assert.ok(unregisterOp("test_saved_swish"));
  await assert.rejects(
    Model.load(file, { device: Device.cpu() }),
    (e) => e.name === "KilnError" && /not registered in this process: \[test_saved_swish\]/.test(e.message) && /register/.test(e.message),
  );
  // the model loaded before fails the same way once the op is gone
  assert.throws(() => model.run([x]), (e) => /test_saved_swish: is a custom op not registered/.test(e.message));
});

test("the npm README's custom-op example runs: it matches the built-in version", async () => {
  const readme = readFileSync(new URL("../../../npm/README.md", import.meta.url), "utf8");
  const section = readme.slice(readme.indexOf("## Custom ops"));
  const code = section.match(/```js\n([\s\S]*?)```/)[1];
  const entry = new URL("../../../npm/index.js", import.meta.url).href;
  const dir = mkdtempSync(join(tmpdir(), "kiln-readme-"));
  try {
    const file = join(dir, "example.mjs");
    writeFileSync(file, code.replace('from "kiln-ml"', `from ${JSON.stringify(entry)}`));
    await import(pathToFileURL(file).href); // throws if the custom op differs from the built-in
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  assert.ok(registeredOps().includes("swish"));
});
