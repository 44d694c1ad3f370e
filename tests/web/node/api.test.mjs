// The built npm package (npm/, from scripts/build-web.sh) in Node on the CPU backend, checked
// against plain-JS reference computations on seeded random data.
//   node --test tests/web/node/
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import init, { Device, Tensor, Model, memory, version } from "../../../npm/index.js";
import { close, rand } from "./helpers.mjs";

// An option of the wrong type is refused before anything loads, and init can be called again.
await assert.rejects(init(undefined, { webgpu: "no" }), /init: options\.webgpu must be a boolean, got string/);
await assert.rejects(init(undefined, { cpu: 0 }), /init: options\.cpu must be a boolean, got number/);
// Without the CPU kernels (the WebGPU-only module) there must be WebGPU, and no threads to run.
await assert.rejects(init(undefined, { cpu: false, webgpu: false }), /init: options\.cpu: false loads the WebGPU-only module \(no CPU kernels, no threads\): options\.webgpu must not be false/);
await assert.rejects(init(undefined, { cpu: false, threads: 2 }), /nor options\.threads above 1/);
await init();

test("version and package agree", () => {
  const pkg = JSON.parse(readFileSync(new URL("../../../npm/package.json", import.meta.url)));
  assert.equal(version(), pkg.version);
});

test("Node gets the CPU-only module: Device.auto says so and Device.webgpu is refused", async () => {
  const d = await Device.auto();
  assert.equal(d.kind, "cpu");
  assert.match(d.reason, /WebGPU unavailable: this is kiln's CPU-only module/);
  await assert.rejects(Device.webgpu(), /CPU-only module .* no WebGPU backend; `init\(undefined, \{ webgpu: true \}\)`/);
  assert.equal(Device.cpu().kind, "cpu");
});

test("tensors from typed arrays and nested arrays round-trip", async () => {
  const v = rand(6, 1);
  const a = Tensor.from(v, [2, 3]);
  assert.deepEqual(a.shape, [2, 3]);
  assert.equal(a.dtype, "f32");
  assert.equal(a.size, 6);
  const back = await a.data();
  assert.ok(back instanceof Float32Array);
  assert.deepEqual(Array.from(back), Array.from(v));
  const nested = await a.array();
  assert.deepEqual(nested, [Array.from(v.slice(0, 3)), Array.from(v.slice(3))]);

  const i = Tensor.from(new Int32Array([3, -7, 11]));
  assert.equal(i.dtype, "i32");
  assert.deepEqual(Array.from(await i.data()), [3, -7, 11]);
  const b = Tensor.from([[true, false]]);
  assert.equal(b.dtype, "bool");
  assert.deepEqual(await b.array(), [[true, false]]);
  const c = Tensor.from([1.5, 2.5], null, { dtype: "float64" });
  assert.equal(c.dtype, "f64");
  assert.ok((await c.data()) instanceof Float64Array);
  const s = Tensor.from(4.25);
  assert.deepEqual(s.shape, []);
  assert.equal(await s.array(), 4.25);
  for (const t of [a, i, b, c, s]) t.dispose();
});

test("matmul on odd shapes matches a JS reference", async () => {
  const [m, k, n] = [3, 5, 7];
  const av = rand(m * k, 2);
  const bv = rand(k * n, 3);
  const want = new Float32Array(m * n);
  for (let i = 0; i < m; i++)
    for (let j = 0; j < n; j++) {
      let s = 0;
      for (let p = 0; p < k; p++) s += av[i * k + p] * bv[p * n + j];
      want[i * n + j] = s;
    }
  const a = Tensor.from(av, [m, k]);
  const b = Tensor.from(bv, [k, n]);
  const c = a.matmul(b);
  assert.deepEqual(c.shape, [m, n]);
  close(await c.data(), want, 1e-5);
  [a, b, c].forEach((t) => t.dispose());
});

test("elementwise, broadcasting, scalars, reductions, softmax and argmax", async () => {
  const xv = rand(12, 4);
  const rv = rand(4, 5);
  const x = Tensor.from(xv, [3, 4]);
  const r = Tensor.from(rv, [4]);
  close(await x.add(r).data(), xv.map((v, i) => v + rv[i % 4]));
  close(await x.mul(2).sub(1).data(), xv.map((v) => v * 2 - 1));
  close(await x.exp().data(), xv.map(Math.exp), 1e-5);
  close(await x.relu().data(), xv.map((v) => Math.max(v, 0)));
  close(await x.sum(1).data(), [0, 1, 2].map((i) => xv.slice(i * 4, i * 4 + 4).reduce((s, v) => s + v, 0)));
  close(await x.mean().data(), [xv.reduce((s, v) => s + v, 0) / 12]);
  const sm = await x.softmax(-1).data();
  for (let i = 0; i < 3; i++) {
    const row = Array.from(xv.slice(i * 4, i * 4 + 4));
    const mx = Math.max(...row);
    const e = row.map((v) => Math.exp(v - mx));
    const z = e.reduce((s, v) => s + v, 0);
    close(sm.slice(i * 4, i * 4 + 4), e.map((v) => v / z), 1e-5);
  }
  const am = x.argmax(-1);
  assert.equal(am.dtype, "i32");
  const wantArg = [0, 1, 2].map((i) => {
    const row = Array.from(xv.slice(i * 4, i * 4 + 4));
    return row.indexOf(Math.max(...row));
  });
  assert.deepEqual(Array.from(await am.data()), wantArg);
  const gt = x.gt(0);
  assert.equal(gt.dtype, "bool");
  assert.deepEqual(Array.from(await gt.data()), Array.from(xv, (v) => (v > 0 ? 1 : 0)));
});

test("reshape, permute, transpose and slice", async () => {
  const xv = rand(24, 6);
  const x = Tensor.from(xv, [2, 3, 4]);
  const p = x.permute([2, 0, 1]);
  assert.deepEqual(p.shape, [4, 2, 3]);
  const pd = await p.data();
  for (let a = 0; a < 2; a++)
    for (let b = 0; b < 3; b++)
      for (let c = 0; c < 4; c++) assert.equal(pd[c * 6 + a * 3 + b], xv[a * 12 + b * 4 + c]);
  assert.deepEqual(x.reshape([-1, 4]).shape, [6, 4]);
  assert.deepEqual(x.transpose().shape, [2, 4, 3]);
  const s = x.slice([null, [1, 3], [0, 4, 2]]);
  assert.deepEqual(s.shape, [2, 2, 2]);
  const sd = await s.data();
  let i = 0;
  for (let a = 0; a < 2; a++)
    for (let b = 1; b < 3; b++)
      for (let c = 0; c < 4; c += 2) assert.equal(sd[i++], xv[a * 12 + b * 4 + c]);
});

test("conv2d and pooling match a JS reference", async () => {
  const [N, C, H, W, O, K] = [1, 2, 5, 6, 3, 3];
  const xv = rand(N * C * H * W, 7);
  const wv = rand(O * C * K * K, 8);
  const bv = rand(O, 9);
  const x = Tensor.from(xv, [N, C, H, W]);
  const y = x.conv2d(Tensor.from(wv, [O, C, K, K]), Tensor.from(bv, [O]), { padding: 1 });
  assert.deepEqual(y.shape, [N, O, H, W]);
  const want = [];
  for (let o = 0; o < O; o++)
    for (let i = 0; i < H; i++)
      for (let j = 0; j < W; j++) {
        let s = bv[o];
        for (let c = 0; c < C; c++)
          for (let u = 0; u < K; u++)
            for (let v = 0; v < K; v++) {
              const [yy, xx] = [i + u - 1, j + v - 1];
              if (yy >= 0 && yy < H && xx >= 0 && xx < W) s += xv[(c * H + yy) * W + xx] * wv[((o * C + c) * K + u) * K + v];
            }
        want.push(s);
      }
  close(await y.data(), want, 1e-4);
  const mp = x.maxPool2d({ kernel: 2 });
  assert.deepEqual(mp.shape, [1, 2, 2, 3]);
  const mpd = await mp.data();
  for (let c = 0; c < C; c++)
    for (let i = 0; i < 2; i++)
      for (let j = 0; j < 3; j++) {
        const at = (u, v) => xv[(c * H + 2 * i + u) * W + 2 * j + v];
        assert.equal(mpd[(c * 2 + i) * 3 + j], Math.max(at(0, 0), at(0, 1), at(1, 0), at(1, 1)));
      }
});

// The 2x2 max pool's SIMD rows (four windows per step, the rest one by one): odd sizes leave a
// partial group and an unpooled row and column; ReLU-like zeros of both signs, ties and NaN
// follow the scalar rule (first maximum on ties, NaN wins), checked bit for bit.
test("maxPool2d 2x2 matches the scalar rule in SIMD lanes", () => {
  const [N, C, H, W] = [2, 3, 11, 21];
  const xv = rand(N * C * H * W, 31).map((v, i) => (i % 7 === 0 ? NaN : i % 5 === 0 ? -0 : Math.max(v, 0)));
  const y = Tensor.from(xv, [N, C, H, W]).maxPool2d({ kernel: 2 });
  const [oh, ow] = [5, 10];
  assert.deepEqual(y.shape, [N, C, oh, ow]);
  const max = (a, b) => (Number.isNaN(a) || b <= a ? a : b);
  const show = (v) => (Object.is(v, -0) ? "-0" : String(v));
  return y.data().then((d) => {
    for (let p = 0; p < N * C; p++)
      for (let i = 0; i < oh; i++)
        for (let j = 0; j < ow; j++) {
          const at = (u, v) => xv[(p * H + 2 * i + u) * W + 2 * j + v];
          const want = max(max(at(0, 0), at(0, 1)), max(at(1, 0), at(1, 1)));
          assert.ok(Object.is(d[(p * oh + i) * ow + j], want), `window ${p} ${i} ${j}: ${show(d[(p * oh + i) * ow + j])}, expected ${show(want)}`);
        }
  });
});

test("errors are JS Errors carrying kiln's message", () => {
  const a = Tensor.from(rand(6, 10), [2, 3]);
  const b = Tensor.from(rand(8, 11), [4, 2]);
  assert.throws(
    () => a.matmul(b),
    (e) => e instanceof Error && e.name === "KilnError" && e.kind === "shape" && /matmul/.test(e.message) && /3/.test(e.message) && /4/.test(e.message),
  );
  assert.throws(() => Tensor.from(new Float32Array(5), [2, 3]), /5 values given for shape \[2, 3\]/);
  assert.throws(() => Tensor.from([[1, 2], [3]]), /rectangular/);
  assert.throws(() => Tensor.zeros([2], { dtype: "int8" }), /dtype must be one of/);
  assert.throws(() => a.add("x"), /expected a Tensor, got string/);
  a.dispose();
  assert.equal(a.disposed, true);
  assert.throws(() => a.relu(), /disposed/);
  a.dispose(); // twice is harmless
});

test("memory() counts live tensors and bytes, and dispose returns them", () => {
  const base = memory();
  const t = Tensor.zeros([10, 10]);
  const u = Tensor.ones([3], { dtype: "f64" });
  const m = memory();
  assert.equal(m.tensors, base.tensors + 2);
  assert.equal(m.bytes, base.bytes + 400 + 24);
  assert.equal(m.devices.cpu.tensors, (base.devices.cpu?.tensors ?? 0) + 2);
  t.dispose();
  u.dispose();
  assert.deepEqual(memory(), base);
});

test("Model.load rejects bad input with a readable error", async () => {
  await assert.rejects(Model.load(new Uint8Array([1, 2, 3])), (e) => e.name === "KilnError" && /Model::load/.test(e.message));
  await assert.rejects(Model.load(42), /source must be a URL/);
});

// A kiln model file with its JSON header replaced: the page reads it through JSON.parse.
function withHeader(bytes, edit) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const len = Number(view.getBigUint64(0, true));
  let json = edit(new TextDecoder().decode(bytes.subarray(8, 8 + len)));
  while (json.length % 8) json += " ";
  const head = new TextEncoder().encode(json);
  const out = new Uint8Array(8 + head.length + bytes.length - 8 - len);
  new DataView(out.buffer).setBigUint64(0, BigInt(head.length), true);
  out.set(head, 8);
  out.set(bytes.subarray(8 + len), 8 + head.length);
  return out;
}

test("Model.load reads a model file's JSON through JSON.parse, with clear errors", async () => {
  const bytes = readFileSync(new URL("../../../demos/mnist/models/mnist.safetensors", import.meta.url));
  const x = Tensor.from(rand(2 * 784, 11), [2, 1, 28, 28]);
  const logits = async (b) => {
    const m = await Model.load(b);
    const y = m.forward(x);
    const out = Array.from(await y.data());
    y.dispose();
    m.dispose();
    return out;
  };
  const want = await logits(bytes);
  // Reformatted JSON (spaces, the graph's keys and numbers written otherwise) reads the same.
  const spaced = withHeader(bytes, (h) => JSON.stringify(JSON.parse(h), null, 2));
  assert.deepEqual(await logits(spaced), want);
  const graph = (h, edit) => {
    const o = JSON.parse(h);
    o.__metadata__.kiln_graph = edit(o.__metadata__.kiln_graph);
    return JSON.stringify(o);
  };
  const bad = (b, re) => assert.rejects(Model.load(b), (e) => e.name === "KilnError" && /^Model::load/.test(e.message) && re.test(e.message));
  // Its closing brace gone (the header ends in padding spaces).
  await bad(withHeader(bytes, (h) => h.trimEnd().slice(0, -1)), /header is not valid JSON/);
  await bad(withHeader(bytes, (h) => graph(h, (g) => g.slice(0, -1))), /kiln_graph is not a valid graph/);
  await bad(withHeader(bytes, (h) => h.replace(/"data_offsets":\[(\d+),\d+\]/, (_, a) => `"data_offsets":[${a},1152921504606846976]`)), /beyond 2\^53/);
  await bad(withHeader(bytes, (h) => graph(h, () => "[".repeat(300) + "]".repeat(300))), /nested more than 128 levels/);
  // Fuzz-style: 300 headers with a byte changed (seeded); each loads or is refused with a
  // KilnError, never another kind of failure.
  const header = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
  const r = rand(600, 5);
  let refused = 0;
  for (let k = 0; k < 300; k++) {
    const b = Uint8Array.from(bytes);
    b[8 + Math.floor(((r[2 * k] + 1) / 2) * header)] = 32 + Math.floor(((r[2 * k + 1] + 1) / 2) * 95);
    try {
      (await Model.load(b)).dispose();
    } catch (e) {
      assert.equal(e.name, "KilnError", `${e.name}: ${e.message}`);
      refused++;
    }
  }
  assert.ok(refused > 0, `${refused} of 300 refused`);
  x.dispose();
});

test("the committed demo model runs and classifies real MNIST test digits", async () => {
  const bytes = readFileSync(new URL("../../../demos/mnist/models/mnist.safetensors", import.meta.url));
  const { testImages } = await import("../mnist.mjs");
  const { images, labels } = testImages(100);
  const model = await Model.load(bytes, { device: Device.cpu() });
  assert.equal(model.inputs.length, 1);
  assert.deepEqual(model.inputs[0].shape.slice(1), [1, 28, 28]);
  const x = Tensor.from(images.map((v) => (v / 255 - 0.1307) / 0.3081), [100, 1, 28, 28]);
  const pred = await model.forward(x).argmax(-1).data();
  const correct = labels.filter((l, i) => pred[i] === l).length;
  assert.ok(correct >= 95, `${correct}/100 correct`);
  model.dispose();
});
