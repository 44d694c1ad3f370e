// npm/program.js (kiln-ml/program, the compiled-program runner) in Node, without WebGPU: files
// made here by a small encoder parse back to their header and blob; each kind of malformed file
// is refused with an Error naming the problem; a seeded fuzz (truncations, one-byte corruptions,
// random bytes, random header values) gives a parse or an Error, nothing else. The steps are
// replayed on a mock GPU device whose kernels are JS functions and whose queue runs commands at
// submit (so a write that lands too early is caught); Program.load without navigator.gpu says so.
//   node --test tests/web/node/program.test.mjs
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { Program, parseProgram } from "../../../npm/program.js";
import { close, rand } from "./helpers.mjs";

/** A program's bytes: "KILNPROG", the header's length, the header (an object, a string or bytes), the 4-aligned blob. */
function encode(header, blob = new Uint8Array(0)) {
  const json = header instanceof Uint8Array ? header : new TextEncoder().encode(typeof header === "string" ? header : JSON.stringify(header));
  const start = Math.ceil((12 + json.length) / 4) * 4;
  const out = new Uint8Array(start + blob.length);
  out.set(new TextEncoder().encode("KILNPROG"));
  new DataView(out.buffer).setUint32(8, json.length, true);
  out.set(json, 12);
  out.set(blob, start);
  return out;
}

const bytesOf = (a) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
const IN = 5, OUT = 3;

// y = relu(x w + bias + 2 shift), mask[r] = y[r, 0] > 0, at batch 1 and 4; the load steps write w
// and bias. Slot 2 holds the shift (copied to slot 3), then the input, then the shift again: each
// write lands after the commands before it.
const w = rand(IN * OUT, 7), bias = rand(OUT, 8), shift = rand(4 * OUT, 9);
const parts = [w, bias, shift];
for (const b of [1, 4]) parts.push(new Uint32Array([b, IN, OUT, 0x5eed]), new Uint32Array([b * OUT]), new Uint32Array([b, OUT]));
const at = [];
let blobLength = 0;
for (const p of parts) at.push(blobLength), blobLength += p.byteLength;
const blob = new Uint8Array(blobLength);
parts.forEach((p, i) => blob.set(bytesOf(p), at[i]));

const variant = (b, v) => ({
  inputs: [{ name: "x", dtype: "f32", shape: [b, IN] }],
  outputs: [{ name: "y", dtype: "f32", shape: [b, OUT] }, { name: "mask", dtype: "bool", shape: [b] }],
  steps: [
    ["write", 2, at[2], b * OUT * 4],
    ["copy", 2, 0, 3, 0, b * OUT * 4],
    ["input", 0, 2],
    ["dispatch", 0, at[3 + 3 * v], 16, [2, 0, 1, 4], [b, 1, 1]],
    ["write", 2, at[2], b * OUT * 4],
    ["dispatch", 1, at[4 + 3 * v], 4, [4, 2], [1, 1, 1]],
    ["dispatch", 1, at[4 + 3 * v], 4, [4, 3], [1, 1, 1]],
    ["dispatch", 2, at[4 + 3 * v], 4, [4], [1, 1, 1]],
    ["dispatch", 3, at[5 + 3 * v], 8, [4, 5], [1, 1, 1]],
    ["output", 1, 5, 0, b * 4],
    ["output", 0, 4, 0, b * OUT * 4],
  ],
});
const header = {
  format: "kiln-program",
  version: 1,
  kernels: ["affine", "add", "relu", "mask"].map((k) => ({ label: `${k}.wgsl MODE=test`, wgsl: k })),
  buffers: [IN * OUT * 4, OUT * 4, 4 * IN * 4, 4 * OUT * 4, 4 * OUT * 4, 16],
  load: [["write", 0, at[0], IN * OUT * 4], ["write", 1, at[1], OUT * 4]],
  variants: [variant(1, 0), variant(4, 1)],
};
// A header length that is not a multiple of 4, so the blob starts after padding.
while ((12 + JSON.stringify(header).length) % 4 === 0) header.kernels[0].label += "+";
const valid = encode(header, blob);

function expected(x, b) {
  const y = new Float32Array(b * OUT), mask = new Uint8Array(b);
  for (let r = 0; r < b; r++) {
    for (let j = 0; j < OUT; j++) {
      let s = bias[j] + 2 * shift[r * OUT + j];
      for (let i = 0; i < IN; i++) s += x[r * IN + i] * w[i * OUT + j];
      y[r * OUT + j] = Math.max(0, s);
    }
    mask[r] = y[r * OUT] > 0 ? 1 : 0;
  }
  return { y, mask };
}

/** Checks that `f()` throws an Error (not a subclass) whose message starts with "Program.load: " and matches `re`. */
function refused(f, re) {
  assert.throws(f, (e) => {
    assert.equal(e.constructor, Error, `${e.constructor.name}: ${e.message}`);
    assert.match(e.message, /^Program\.load: /);
    assert.match(e.message, re);
    return true;
  });
}
const clone = (x) => JSON.parse(JSON.stringify(x));
/** The valid program with `change` applied to a copy of its header. */
const changed = (change, b = blob) => { const h = clone(header); change(h); return encode(h, b); };
const steps0 = (h) => h.variants[0].steps;

test("a valid program parses to its header and its 4-aligned blob", () => {
  const start = Math.ceil((12 + new TextEncoder().encode(JSON.stringify(header)).length) / 4) * 4;
  assert.notEqual((12 + JSON.stringify(header).length) % 4, 0);
  for (const source of [valid, valid.buffer, new DataView(valid.buffer)]) {
    const parsed = parseProgram(source);
    assert.deepEqual(parsed.header, header);
    assert.ok(parsed.blob instanceof Uint8Array);
    assert.equal(parsed.blob.byteOffset, start);
    assert.deepEqual(parsed.blob, blob);
  }
  // A view into a larger buffer is read from its own offset.
  const larger = new Uint8Array(valid.length + 13);
  larger.set(valid, 7);
  assert.deepEqual(parseProgram(larger.subarray(7, 7 + valid.length)).blob, blob);
  // A file that ends inside the header's padding has an empty blob.
  const bare = encode({ ...clone(header), load: [], variants: [{ inputs: [], outputs: [], steps: [] }] });
  assert.equal(parseProgram(bare.subarray(0, 12 + new DataView(bare.buffer).getUint32(8, true))).blob.length, 0);
});

test("a file that is not a program, or is cut short, names what it found", () => {
  refused(() => parseProgram(Uint8Array.from([0x50, 0x4b, 3, 4, 0x14, 0, 0, 0, 8, 0, 0x22, 0x5c])),
    /not a kiln program: the file \(12 bytes\) starts with "PK\\x03\\x04\\x14\\x00\\x00\\x00\.\.\.", expected "KILNPROG"/);
  refused(() => parseProgram(new Uint8Array(0)), /the file \(0 bytes\) starts with "", expected "KILNPROG"/);
  refused(() => parseProgram(valid.subarray(0, 10)), /the file ends after 10 bytes, inside its 12-byte preamble/);
  const long = encode(JSON.stringify(header), blob);
  new DataView(long.buffer).setUint32(8, 812, true);
  refused(() => parseProgram(long.subarray(0, 312)), /header says 812 bytes, the file has 300 after its first 12$/);
  refused(() => parseProgram("KILNPROG"), /expected the program's bytes \(an ArrayBuffer or a typed array\), got "KILNPROG"/);
  refused(() => parseProgram(null), /got null/);
});

test("a header that is not UTF-8 JSON, or not this format or version, is refused", () => {
  refused(() => parseProgram(encode(Uint8Array.from([0x7b, 0x22, 0xc3, 0x28, 0x22, 0x7d]))), /the header is not valid UTF-8/);
  refused(() => parseProgram(encode('{"format": "kiln-program", "version": ')), /the header is not valid JSON \(/);
  refused(() => parseProgram(encode("[1, 2]")), /the header is \[1,2\], expected a JSON object/);
  refused(() => parseProgram(encode("null")), /the header is null, expected a JSON object/);
  refused(() => parseProgram(changed((h) => (h.format = "kiln-model"))), /format is "kiln-model", expected "kiln-program"/);
  refused(() => parseProgram(changed((h) => (h.version = 2))), /version 2 is not supported: this runner reads version 1/);
  refused(() => parseProgram(changed((h) => delete h.version)), /version undefined is not supported/);
  // Nesting too deep for JSON.stringify is described, not a RangeError.
  const deep = "[".repeat(100000) + "]".repeat(100000);
  refused(() => parseProgram(encode(`{"format": ${deep}}`)), /format is an array, expected "kiln-program"/);
  refused(() => parseProgram(encode(`{"format": "kiln-program", "version": 1, "kernels": [${deep}]}`)), /kernel 0 is an array, expected/);
});

test("kernels, buffers and tensors of the wrong form are refused", () => {
  refused(() => parseProgram(changed((h) => (h.kernels = {}))), /kernels is \{\}, expected an array/);
  refused(() => parseProgram(changed((h) => delete h.kernels[2].wgsl)), /kernel 2 is \{"label":"relu.wgsl MODE=test"\}, expected \{ label, wgsl \}/);
  refused(() => parseProgram(changed((h) => (h.buffers[1] = 6))), /buffer 1's size is 6, expected a multiple of 4 >= 4/);
  refused(() => parseProgram(changed((h) => (h.buffers[1] = 0))), /buffer 1's size is 0, expected a multiple of 4 >= 4/);
  refused(() => parseProgram(changed((h) => (h.buffers[3] = 12.5))), /buffer 3's size is 12.5/);
  refused(() => parseProgram(changed((h) => (h.buffers[3] = "48"))), /buffer 3's size is "48"/);
  refused(() => parseProgram(changed((h) => (h.variants[1].outputs[1].dtype = "f16"))),
    /variant 1's output 1 \(mask\) has dtype "f16", expected f32, i32, u32 or bool/);
  refused(() => parseProgram(changed((h) => (h.variants[1].inputs[0].dtype = "constructor"))), /has dtype "constructor"/);
  refused(() => parseProgram(changed((h) => (h.variants[0].inputs[0].shape = [1, -5]))),
    /a dimension of variant 0's input 0's shape is -5, expected an integer >= 0/);
  refused(() => parseProgram(changed((h) => delete h.variants[0].outputs)), /variant 0's outputs is undefined, expected an array/);
  refused(() => parseProgram(changed((h) => (h.variants = []))), /the program has no variants, expected at least one/);
  refused(() => parseProgram(changed((h) => (h.variants[1] = 3))), /variant 1 is 3, expected an object/);
});

test("steps of an unknown kind, the wrong length or with bad numbers are refused", () => {
  refused(() => parseProgram(changed((h) => (steps0(h)[1] = ["fill", 3, 0]))),
    /step 1 of variant 0 has unknown kind "fill", expected write, input, copy, dispatch or output/);
  refused(() => parseProgram(changed((h) => (h.load[1] = "write"))), /load step 1 is "write", expected an array starting with its kind/);
  refused(() => parseProgram(changed((h) => (steps0(h)[2] = ["toString", 0]))), /unknown kind "toString"/);
  refused(() => parseProgram(changed((h) => steps0(h)[1].pop())), /step 1 of variant 0 \("copy"\) has 5 elements, expected 6/);
  refused(() => parseProgram(changed((h) => (h.load[0][2] = 2))), /load step 0 \("write"\): blobOffset is 2, expected a multiple of 4 >= 0/);
  refused(() => parseProgram(changed((h) => (steps0(h)[2][2] = -1))), /step 2 of variant 0 \("input"\): slot is -1, expected an integer >= 0/);
  refused(() => parseProgram(changed((h) => (steps0(h)[9][1] = 0.5))), /step 9 of variant 0 \("output"\): index is 0.5, expected an integer/);
  refused(() => parseProgram(changed((h) => (steps0(h)[3][3] = 0))), /paramsBytes is 0, expected a multiple of 4 >= 4/);
  refused(() => parseProgram(changed((h) => (steps0(h)[3][4] = [3, "2"]))), /step 3 of variant 0 \("dispatch"\): a slot is "2"/);
  refused(() => parseProgram(changed((h) => (steps0(h)[3][5] = [1, 1]))), /workgroups is \[1,1\], expected \[x, y, z\]/);
  refused(() => parseProgram(changed((h) => (steps0(h)[3][5] = [1, -1, 1]))), /a workgroup count is -1/);
  refused(() => parseProgram(changed((h) => (steps0(h)[3][5] = null))), /workgroups is null, expected an array/);
});

test("steps naming slots, kernels, blob bytes, inputs or outputs that do not exist are refused", () => {
  refused(() => parseProgram(changed((h) => (steps0(h)[3][4] = [2, 40, 1, 4]))),
    /^Program\.load: step 3 of variant 0 \("dispatch"\) names slot 40, the program has 6 buffers$/);
  refused(() => parseProgram(changed((h) => (steps0(h)[5][1] = 4))), /step 5 of variant 0 \("dispatch"\): kernel 4 is out of range \(the program has 4 kernels\)/);
  refused(() => parseProgram(changed((h) => (h.load[0] = ["write", 0, 1024, 4096]))),
    new RegExp(`load step 0 \\("write"\\): blob range 1024\\+4096 is past the blob's end \\(${blob.length} bytes\\)`));
  refused(() => parseProgram(changed((h) => (steps0(h)[3][2] = blob.length - 8))), /\("dispatch"\): blob range \d+\+16 is past the blob's end/);
  refused(() => parseProgram(changed((h) => (h.load[1] = ["write", 1, 0, 16]))), /load step 1 \("write"\): bytes 0\.\.16 are past the end of slot 1 \(12 bytes\)/);
  refused(() => parseProgram(changed((h) => (steps0(h)[1] = ["copy", 3, 40, 4, 0, 12]))), /bytes 40\.\.52 are past the end of slot 3 \(48 bytes\)/);
  refused(() => parseProgram(changed((h) => (steps0(h)[1] = ["copy", 3, 0, 3, 0, 4]))), /step 1 of variant 0 \("copy"\) copies slot 3 onto itself/);
  refused(() => parseProgram(changed((h) => (steps0(h)[2] = ["input", 1, 2]))), /\("input"\): input 1 is out of range: variant 0 has 1 inputs/);
  refused(() => parseProgram(changed((h) => h.load.push(["input", 0, 2]))), /load step 2 \("input"\): input 0 is out of range: load has 0 inputs/);
  refused(() => parseProgram(changed((h) => (h.variants[1].inputs[0].shape = [8, IN]))), /step 2 of variant 1 \("input"\): bytes 0\.\.160 are past the end of slot 2 \(80 bytes\)/);
  refused(() => parseProgram(changed((h) => (steps0(h)[10] = ["output", 2, 4, 0, 12]))), /output 2 is out of range: variant 0 has 2 outputs/);
  refused(() => parseProgram(changed((h) => (steps0(h)[10][4] = 16))), /step 10 of variant 0 \("output"\): output 0 is 16 bytes, its shape needs 12/);
  refused(() => parseProgram(changed((h) => (h.variants[1].steps[10][3] = 4))), /bytes 4\.\.52 are past the end of slot 4 \(48 bytes\)/);
  refused(() => parseProgram(changed((h) => (steps0(h)[10] = ["output", 1, 5, 0, 4]))), /variant 0's output 0 is produced 0 times, expected once/);
  refused(() => parseProgram(changed((h) => steps0(h).push(["output", 1, 5, 0, 4]))), /variant 0's output 1 is produced 2 times, expected once/);
});

test("fuzz: truncated, corrupted and random files give a parse or an Error, never another exception", async () => {
  const seed = Number(process.env.KILN_FUZZ_SEED ?? 0x6b696c6e);
  console.log(`program fuzz seed ${seed} (KILN_FUZZ_SEED=${seed} repeats it)`);
  let n = 0;
  const ints = (count, max) => Array.from(rand(count, seed + n++), (v) => Math.min(max - 1, Math.floor(((v + 1) / 2) * max)));
  const outcomes = { ok: 0, error: 0 };
  const tried = (bytes, what) => {
    try {
      parseProgram(bytes);
      return ++outcomes.ok;
    } catch (e) {
      assert.equal(e.constructor, Error, `${what}: ${e.constructor.name}: ${e.message}`);
      assert.match(e.message, /^Program\.load: /, what);
      outcomes.error++;
    }
  };
  for (let end = 0; end < valid.length; end++) tried(valid.subarray(0, end), `cut at ${end}`);
  const [where, what] = [ints(1000, valid.length), ints(1000, 255)];
  for (let i = 0; i < 1000; i++) {
    const bytes = valid.slice();
    bytes[where[i]] = (bytes[where[i]] + 1 + what[i]) % 256; // never the byte that was there
    tried(bytes, `byte ${where[i]} set to ${bytes[where[i]]}`);
  }
  // Random bytes: alone, and after a preamble whose length fits, so that the header is decoded.
  for (const length of ints(500, 200)) {
    const bytes = Uint8Array.from(ints(length, 256));
    tried(bytes, "random bytes");
    tried(encode(bytes), "a random header");
  }
  // Random values in random places of the header: past JSON.parse, into the checks.
  const leaves = [];
  const walk = (x, path) => (x !== null && typeof x === "object" ? Object.keys(x).forEach((k) => walk(x[k], [...path, k])) : leaves.push(path));
  walk(header, []);
  const pool = [-4, -1, 0, 1, 2, 3, 4, 4.5, 5, 7, 12, 40, 1e9, 2 ** 53, 2 ** 60, "4", "input", "dispatch", null, true, [], {}, [1, 2, 3]];
  const [picks, values] = [ints(1000, leaves.length), ints(1000, pool.length)];
  const parsed = [];
  for (let i = 0; i < 1000; i++) {
    const h = clone(header);
    const path = leaves[picks[i]];
    path.slice(0, -1).reduce((o, k) => o[k], h)[path.at(-1)] = pool[values[i]];
    const what = `${path.join(".")} = ${JSON.stringify(pool[values[i]])}`;
    if (tried(encode(h, blob), what)) parsed.push([encode(h, blob), what]);
  }
  console.log(`fuzz: ${outcomes.ok} parsed, ${outcomes.error} refused`);
  assert.ok(outcomes.error > 2000);
  // What parses can be replayed: the mock device checks every range the runner hands it (kernels
  // that do nothing, since their params may now be any bytes).
  const noop = Object.fromEntries(Object.keys(KERNELS).map((k) => [k, () => {}]));
  let ran = 0;
  for (const [bytes, what] of parsed) {
    try {
      const program = await Program.load(bytes, { device: mockDevice(noop) });
      for (const { inputs } of program.variants) {
        await program.run(inputs.map((t) => ({ data: new (t.dtype === "f32" ? Float32Array : Uint8Array)(t.shape.reduce((a, b) => a * b, 1)), shape: t.shape })));
        ran++;
      }
    } catch (e) {
      assert.equal(e.constructor, Error, `${what}: ${e.stack}`);
      assert.match(e.message, /^Program\.(load|run): /, what);
    }
  }
  console.log(`fuzz: ${ran} runs of programs that parsed`);
  assert.ok(ran > 100);
});

// A GPU device whose kernels are JS functions (by their WGSL "source") and whose queue runs a
// command buffer's commands at submit, as a GPU would: a queue write that should have waited for
// earlier commands lands before them, and a copy into a mapped buffer is a validation error.
// What WebGPU would refuse for any program (ranges, alignment) fails an assertion instead: that
// is the runner's job, checked by the fuzz below too.
const KERNELS = {
  affine: ([b, I, O], x, w, bi, y) => {
    for (let r = 0; r < b; r++) for (let j = 0; j < O; j++) {
      y[r * O + j] = bi[j];
      for (let i = 0; i < I; i++) y[r * O + j] += x[r * I + i] * w[i * O + j];
    }
  },
  add: ([n], y, s) => { for (let i = 0; i < n; i++) y[i] += s[i]; },
  relu: ([n], y) => { for (let i = 0; i < n; i++) y[i] = Math.max(0, y[i]); },
  mask: ([b, O], y, m) => { for (let r = 0; r < b; r++) new Uint32Array(m.buffer)[r] = y[r * O] > 0 ? 1 : 0; },
};
const inRange = (b, offset, n) => assert.ok(offset % 4 === 0 && n % 4 === 0 && offset + n <= b.size, `${offset}+${n} in ${b.size}`);
function mockDevice(kernels = KERNELS) {
  const scopes = [], calls = { buffers: [], bindGroups: [] };
  const error = (message) => scopes.at(-1)?.push({ message }) ?? assert.fail(`uncaptured: ${message}`);
  const buffer = ({ size, usage }) => {
    const b = { size, usage, bytes: new Uint8Array(size), mapState: "unmapped", destroyed: false,
      destroy: () => (b.destroyed = true),
      mapAsync: async () => { b.mapState = "pending"; await new Promise((r) => setTimeout(r, 2)); b.mapState = "mapped"; },
      getMappedRange: () => (b.mapState === "mapped" ? b.bytes.buffer : assert.fail("not mapped")),
      unmap: () => (b.mapState = "unmapped") };
    calls.buffers.push(b);
    return b;
  };
  const run = (c) => {
    if (c[0] === "copy") {
      const [, src, so, dst, dof, n] = c;
      if (dst.mapState !== "unmapped") return error("copy into a mapped buffer");
      assert.notEqual(src, dst);
      inRange(src, so, n), inRange(dst, dof, n);
      dst.bytes.set(src.bytes.subarray(so, so + n), dof);
    } else {
      const [, kernel, group, [x, y, z]] = c;
      if (x * y * z === 0) return;
      const [p, ...slots] = group.entries.map(({ resource: { buffer, offset = 0, size } }) =>
        size ? new Uint32Array(buffer.bytes.buffer, offset, size / 4) : new Float32Array(buffer.bytes.buffer));
      kernels[kernel](p, ...slots);
    }
  };
  return {
    calls,
    limits: { minStorageBufferOffsetAlignment: 256 },
    pushErrorScope: () => scopes.push([]),
    popErrorScope: async () => scopes.pop()[0] ?? null,
    createShaderModule: ({ code }) => ({ code }),
    createComputePipelineAsync: async ({ compute: { module, entryPoint } }) => {
      assert.equal(entryPoint, "main");
      if (!KERNELS[module.code]) throw Object.assign(new Error("WGSL parse error"), { name: "GPUPipelineError" });
      return { code: module.code, getBindGroupLayout: (i) => ({ code: module.code, group: i }) };
    },
    createBuffer: buffer,
    createBindGroup: (desc) => {
      calls.bindGroups.push(desc);
      const n = KERNELS[desc.layout.code].length;
      if (desc.entries.length !== n) error(`${desc.entries.length} entries, the layout has ${n}`);
      const { buffer, offset, size } = desc.entries[0].resource;
      assert.ok(offset % 256 === 0 && size >= 4);
      inRange(buffer, offset, size);
      return desc;
    },
    createCommandEncoder: () => {
      const commands = [];
      return {
        beginComputePass: () => {
          let pipeline, group;
          return { setPipeline: (p) => (pipeline = p), setBindGroup: (i, g) => (group = g),
            dispatchWorkgroups: (...xyz) => commands.push(["dispatch", pipeline.code, group, xyz]), end() {} };
        },
        copyBufferToBuffer: (...args) => commands.push(["copy", ...args]),
        finish: () => commands,
      };
    },
    queue: {
      writeBuffer: (b, offset, data, from = 0, size) => {
        const bytes = data instanceof Uint8Array ? data : bytesOf(data);
        size ??= bytes.length - from;
        assert.ok(from + size <= bytes.length);
        inRange(b, offset, size);
        b.bytes.set(bytes.subarray(from, size === undefined ? undefined : from + size), offset);
      },
      submit: (buffers) => {
        if (calls.refuse) return error(calls.refuse); // a command buffer the device refuses runs nothing
        buffers.flat().forEach(run);
      },
    },
  };
}

test("on a mock device: load binds each dispatch's params once, aligned, and runs give the outputs", async () => {
  const device = mockDevice();
  const program = await Program.load(valid, { device });
  assert.deepEqual(program.variants, header.variants.map(({ inputs, outputs }) => ({ inputs, outputs })));
  const [wSlot, biasSlot] = device.calls.buffers;
  assert.deepEqual(new Float32Array(wSlot.bytes.buffer), w);
  assert.deepEqual(new Float32Array(biasSlot.bytes.buffer), bias);
  // A variant's kernels and bind groups are made at its first run: none yet.
  assert.equal(device.calls.bindGroups.length, 0);

  const x1 = rand(IN, 21, 2), x4 = rand(4 * IN, 26, 2);
  const [y, mask] = await program.run([{ data: x1, shape: [1, IN] }]);
  assert.deepEqual({ ...y, data: null }, { name: "y", dtype: "f32", shape: [1, OUT], data: null });
  close(y.data, expected(x1, 1).y);
  assert.ok(mask.data instanceof Uint8Array);
  assert.deepEqual(mask.data, expected(x1, 1).mask);
  // Three runs at once, one a bare array (matched by its length): queued, so that a variant's
  // staging buffers are mapped once at a time.
  const buffers = device.calls.buffers.length;
  const copy = x4.slice(), x4b = rand(4 * IN, 23, 2);
  const all = [program.run([x4]), program.run([x1]), program.run([{ data: x4b, shape: [4, IN] }])];
  x4.fill(0); // the run took its own copy
  const [[y4, mask4], [again], [y4b]] = await Promise.all(all);
  close(y4.data, expected(copy, 4).y);
  close(y4b.data, expected(x4b, 4).y);
  assert.deepEqual(mask4.data, expected(copy, 4).mask);
  assert.ok(mask4.data.some((v) => v === 1) && mask4.data.some((v) => v === 0), "a mask with both values");
  close(again.data, y.data);
  // One bind group per dispatch, made once, their params at multiples of 256 in one buffer.
  const groups = device.calls.bindGroups;
  assert.equal(groups.length, 10);
  const params = groups.map((g) => g.entries[0].resource);
  assert.ok(params.every((p) => p.buffer === params[0].buffer && p.offset % 256 === 0));
  assert.equal(new Set(params.map((p) => p.offset)).size, 10);
  const dispatches = header.variants.flatMap((v) => v.steps.filter((s) => s[0] === "dispatch"));
  dispatches.forEach((s, i) => assert.deepEqual(params[0].buffer.bytes.subarray(params[i].offset, params[i].offset + s[3]), blob.subarray(s[2], s[2] + s[3])));
  await program.run([x1]);
  assert.equal(device.calls.buffers.length, buffers + 2, "staging made once per output of variant 1, then reused");

  await assert.rejects(program.run([{ data: rand(2 * IN, 3), shape: [2, IN] }]), {
    message: `Program.run: no compiled variant takes inputs (Float32Array [2,${IN}]); this program has (f32 [1,${IN}]), (f32 [4,${IN}])` });
  await assert.rejects(program.run([new Int32Array(IN)]), { message: /no compiled variant takes inputs \(Int32Array of 5\)/ });
  await assert.rejects(program.run([{ data: x1, shape: [IN, 1] }]), { message: /takes inputs \(Float32Array \[5,1\]\)/ });
  await assert.rejects(program.run([{ data: x4, shape: [1, IN] }]), { message: /takes inputs \(Float32Array \[1,5\]\)/ });
  await assert.rejects(program.run([x1, x1]), { message: /takes inputs \(Float32Array of 5, Float32Array of 5\)/ });
  await assert.rejects(program.run(x1), { message: /^Program\.run: inputs is \{"0":.*, expected an array with one entry per model input/ });
  await assert.rejects(program.run([null]), { message: /takes inputs \(null of undefined\)/ });

  // A run the device refuses is an Error, and leaves the staging buffers unmapped for the next.
  device.calls.refuse = "the device refused it";
  await assert.rejects(program.run([x1]), { message: "Program.run: the GPU refused variant 0: the device refused it" });
  device.calls.refuse = null;
  close((await program.run([x1]))[0].data, y.data);

  program.destroy();
  assert.ok(device.calls.buffers.every((b) => b.destroyed));
  await assert.rejects(program.run([x1]), { message: "Program.run: this program was destroyed, or not made by Program.load" });
});

test("on a mock device: bool and i32 inputs and outputs, widened to u32 and back", async () => {
  const h = { format: "kiln-program", version: 1, kernels: [], buffers: [20, 12], load: [], variants: [{
    inputs: [{ name: "flags", dtype: "bool", shape: [5] }, { name: "ids", dtype: "i32", shape: [3] }],
    outputs: [{ name: "ids", dtype: "i32", shape: [3] }, { name: "flags", dtype: "bool", shape: [5] }],
    steps: [["input", 0, 0], ["input", 1, 1], ["output", 1, 0, 0, 20], ["output", 0, 1, 0, 12]] }] };
  const program = await Program.load(encode(h), { device: mockDevice() });
  const ids = Int32Array.from([-7, 123456, 2 ** 31 - 1]);
  for (const flags of [[true, false, false, true, true], Uint8Array.from([0, 1, 2, 0, 255])]) {
    const [outIds, outFlags] = await program.run([flags, ids]);
    assert.deepEqual(outIds, { name: "ids", dtype: "i32", shape: [3], data: ids });
    assert.deepEqual(outFlags.data, Uint8Array.from(flags, (b) => (b ? 1 : 0)));
  }
  await assert.rejects(program.run([[true], ids]), { message: /takes inputs \(Array of 1, Int32Array of 3\); this program has \(bool \[5\], i32 \[3\]\)/ });
});

test("on a mock device: a kernel that does not compile or bind is named with its label at its variant's first run", async () => {
  const x = rand(IN, 4);
  const broken = await Program.load(changed((h) => (h.kernels[2].wgsl = "no such kernel")), { device: mockDevice() });
  for (let i = 0; i < 2; i++) {
    await assert.rejects(broken.run([x]), { message: /^Program\.run: kernel 2 \(relu\.wgsl MODE=test\) did not compile: WGSL parse error$/ });
  }
  const unbound = await Program.load(changed((h) => (steps0(h)[3][4] = [2, 0, 1])), { device: mockDevice() });
  await assert.rejects(unbound.run([x]),
    { message: /^Program\.run: step 3 of variant 0: kernel 0 \(affine\.wgsl MODE=test\+*\): 4 entries, the layout has 5$/ });
});

test("Program.load without WebGPU says so, after fetching and checking the file", async () => {
  const noGpu = (e) => e.constructor === Error && /^Program\.load: this page has no WebGPU \(navigator\.gpu is missing or gave no adapter\)/.test(e.message);
  assert.equal(globalThis.navigator?.gpu, undefined);
  await assert.rejects(Program.load(valid), noGpu);
  await assert.rejects(Program.load(valid.buffer, {}), noGpu);
  // A malformed file is refused before any GPU call.
  await assert.rejects(Program.load(valid.subarray(0, 100)), { message: /^Program\.load: header says \d+ bytes, the file has 88 after its first 12$/ });
  const server = createServer((req, res) => (req.url === "/model.kilnprog" ? res.end(valid) : res.writeHead(404).end()));
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const base = `http://127.0.0.1:${server.address().port}`;
  try {
    await assert.rejects(Program.load(`${base}/model.kilnprog`), noGpu);
    await assert.rejects(Program.load(new URL("/model.kilnprog", base)), noGpu);
    await assert.rejects(Program.load(`${base}/missing.kilnprog`), { message: `Program.load: fetching ${base}/missing.kilnprog answered 404 Not Found, expected 200 OK` });
    const program = await Program.load(`${base}/model.kilnprog`, { device: mockDevice() });
    close((await program.run([rand(IN, 5)]))[0].data, expected(rand(IN, 5), 1).y);
  } finally {
    server.close();
  }
  await assert.rejects(Program.load("not a url"), { message: /^Program\.load: could not fetch not a url: / });
  await assert.rejects(Program.load(42), { message: /^Program\.load: expected the program's bytes .* got 42$/ });
});
