// ONNX files in the built npm package (Node, CPU backend): Model.load converts them through the
// lazily loaded converter module (dist/kiln_web_onnx_bg.wasm). The reference is independent of
// kiln: the ONNX Model Zoo's MNIST classifiers (shared/conformance/models/mnist) with the outputs
// stored next to them in test_data_set_N/output_0.pb (TensorProtos, parsed by ../onnx-data.mjs).
// Skips without the conformance data ($KILN_ONNX_SUITES, else shared/conformance in the working
// directory or a parent, as onnx/tests/common does).
//   node --test tests/web/node/
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { join } from "node:path";
import init, { Model, Tensor, convertOnnx, memory } from "../../../npm/index.js";
import { floatTensor, mnistOnnxDir } from "../onnx-data.mjs";

await init();

const mnistDir = mnistOnnxDir();
const skip = !mnistDir && "no shared/conformance/models/mnist found (set KILN_ONNX_SUITES)";

/** Within onnx's backend-test tolerances, as onnx/tests/conformance.rs compares. */
function close(actual, expected, what) {
  assert.equal(actual.length, expected.length, `${what}: length`);
  for (let i = 0; i < expected.length; i++) {
    const err = Math.abs(actual[i] - expected[i]);
    assert.ok(err <= 1e-3 * Math.abs(expected[i]) + 1e-5, `${what}: element ${i}: ${actual[i]} vs ${expected[i]}`);
  }
}

const argmax = (v) => v.indexOf(Math.max(...v));

/** Runs every test_data_set_N of an MNIST model folder through `model` and checks the outputs. */
async function checkSets(model, dir) {
  const sets = readdirSync(dir).filter((n) => n.startsWith("test_data_set_")).sort();
  assert.ok(sets.length > 0, `${dir}: no test sets`);
  for (const set of sets) {
    const input = floatTensor(readFileSync(join(dir, set, "input_0.pb")));
    const want = floatTensor(readFileSync(join(dir, set, "output_0.pb")));
    const x = Tensor.from(input.data, input.dims);
    const y = model.forward(x);
    assert.deepEqual(y.shape, want.dims);
    const got = await y.data();
    close(got, want.data, `${dir} ${set}`);
    assert.equal(argmax(got), argmax(want.data));
    x.dispose();
    y.dispose();
  }
}

test("Model.load runs the ONNX zoo's MNIST models as their stored outputs say", { skip }, async () => {
  for (const name of ["mnist-8", "mnist-7"]) {
    const dir = join(mnistDir, name);
    const model = await Model.load(readFileSync(join(dir, "model.onnx")));
    assert.ok(model instanceof Model);
    assert.equal(model.device.kind, "cpu");
    // The file declares the batch as 1, so it stays fixed (the kiln file names its input "input").
    assert.deepEqual(model.inputs.map((i) => [i.shape, i.dtype]), [[[1, 1, 28, 28], "f32"]]);
    assert.deepEqual(model.outputs.map((o) => o.shape), [[1, 10]]);
    await checkSets(model, dir);
    model.dispose();
  }
  assert.equal(memory().tensors, 0);
});

test("convertOnnx gives a kiln file that loads as such; Model.load takes a URL", { skip }, async () => {
  const dir = join(mnistDir, "mnist-8");
  const onnx = readFileSync(join(dir, "model.onnx"));
  const file = await convertOnnx(onnx, { inputShape: [1, 1, 28, 28] });
  assert.ok(file instanceof Uint8Array);
  assert.equal(file[8], "{".charCodeAt(0), "a safetensors file");
  const meta = JSON.parse(new TextDecoder().decode(file.subarray(8, 8 + Number(new DataView(file.buffer, file.byteOffset).getBigUint64(0, true))))).__metadata__;
  assert.equal(meta.source, "onnx");
  assert.equal(meta.format, "kiln");
  const fromFile = await Model.load(file);
  await checkSets(fromFile, dir);
  fromFile.dispose();

  // The same through fetch: the bytes are only known to be ONNX once downloaded.
  const server = createServer((req, res) => {
    if (req.url === "/mnist-8.onnx") res.writeHead(200, { "content-type": "application/octet-stream" }).end(onnx);
    else res.writeHead(404).end();
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  try {
    const base = `http://127.0.0.1:${server.address().port}`;
    const fromUrl = await Model.load(`${base}/mnist-8.onnx`, { device: "cpu" });
    await checkSets(fromUrl, dir);
    fromUrl.dispose();
    await assert.rejects(Model.load(`${base}/missing.onnx`), (e) => e.name === "KilnError" && e.kind === "io" && /HTTP 404/.test(e.message));
  } finally {
    server.close();
  }
});

test("malformed ONNX files and bad options give errors naming what was wrong", { skip }, async () => {
  const onnx = readFileSync(join(mnistDir, "mnist-8", "model.onnx"));
  const rejects = (promise, kind, pattern) =>
    assert.rejects(promise, (e) => {
      assert.equal(e.name, "KilnError", e.stack);
      if (kind) assert.equal(e.kind, kind, e.message);
      assert.match(e.message, pattern);
      return true;
    });

  // Cut short: the protobuf ends inside a field.
  await rejects(Model.load(onnx.subarray(0, onnx.length >> 1)), "format", /ONNX/);
  // An op kiln does not import: Relu renamed (same length, so the protobuf stays valid).
  const renamed = Buffer.from(onnx);
  const at = renamed.indexOf(Buffer.from("\x22\x04Relu", "latin1"));
  assert.ok(at >= 0);
  renamed.write("Rulu", at + 2, "latin1");
  await rejects(Model.load(renamed), "unsupported", /Rulu/);
  await rejects(convertOnnx(renamed), "unsupported", /Rulu/);
  // A shape the graph cannot take, and shapes that are no shapes.
  await rejects(convertOnnx(onnx, { inputShape: [1, 1, 28, 29] }), null, /28|29/);
  await rejects(convertOnnx(onnx, { inputShape: [1, 0.5] }), "invalid_argument", /inputShape.*0\.5/);
  await rejects(convertOnnx(onnx, { inputShape: 3 }), "invalid_argument", /inputShape/);
  await rejects(convertOnnx(42), "invalid_argument", /source must be/);
  // Not ONNX, not kiln: the kiln loader's error, as before.
  await rejects(Model.load(new Uint8Array([1, 2, 3])), null, /Model::load/);

  // The converter is still usable after all that.
  const model = await Model.load(onnx);
  model.dispose();
});
