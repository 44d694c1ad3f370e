// The WebGPU-only module (`init({ cpu: false })`, dist/kiln_web_gpu_bg.wasm) in Node, which has no
// WebGPU: the module loads, its CPU device holds tensors (data in, the same data out, moved and
// viewed), and every op, Model.run included, is refused with a message that names the option.
// tests/web/threads.mjs runs the module on WebGPU in the page.
//   node --test tests/web/node/
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import init, { Device, Tensor, Model } from "../../../npm/index.js";
import { rand } from "./helpers.mjs";

await init(undefined, { cpu: false });

const refused = /cannot run on the cpu: this build has no cpu kernels .*init\(\{ cpu: false \}\)/;

test("the CPU holds data: what goes in comes out, through views too", async () => {
  const x = rand(3 * 5 * 7, 11);
  const t = Tensor.from(x, [3, 5, 7]);
  assert.equal(t.device.kind, "cpu");
  assert.equal(Device.cpu().threads, 1);
  assert.deepEqual(await t.data(), x);
  // A permuted view is read through its strides (no op runs).
  const p = t.permute([2, 0, 1]);
  const got = await p.data();
  for (let k = 0; k < 7; k++) for (let i = 0; i < 3; i++) for (let j = 0; j < 5; j++) {
    assert.equal(got[(k * 3 + i) * 5 + j], x[(i * 5 + j) * 7 + k]);
  }
});

test("every op on the CPU is refused, naming the option", () => {
  const a = Tensor.from(rand(6, 12), [2, 3]);
  assert.throws(() => a.exp(), refused);
  assert.throws(() => a.add(a), refused);
  assert.throws(() => a.matmul(Tensor.from(rand(6, 13), [3, 2])), refused);
  assert.throws(() => Tensor.zeros([4]), refused);
});

test("without WebGPU, Device.auto() says why, and a model loads but does not run", async () => {
  const auto = await Device.auto();
  assert.equal(auto.kind, "cpu");
  assert.match(auto.reason, /WebGPU unavailable/);
  const bytes = readFileSync(new URL("../../../demos/mnist/models/mnist.safetensors", import.meta.url));
  const model = await Model.load(bytes);
  assert.equal(model.device.kind, "cpu");
  assert.throws(() => model.forward(Tensor.from(rand(784, 14), [1, 1, 28, 28])), refused);
  model.dispose();
});
