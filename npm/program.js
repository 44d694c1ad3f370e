// kiln-ml/program: replays a compiled program (.kilnprog, written by `kiln compile`) with WebGPU
// alone: a model's forward pass recorded for fixed input shapes as kernels, buffers and steps.
// Standalone on purpose (no imports, no WebAssembly): it is the whole page's runtime.

// GPUBufferUsage / GPUMapMode values, spelled out so that a device from elsewhere (Node's webgpu
// packages) needs no globals: MAP_READ 1, COPY_SRC 4, COPY_DST 8, STORAGE 0x80.
const SLOT = 0x8c, PARAMS = 0x88, STAGING = 9;
// Each step kind's fields after the kind; offsets and byte counts are multiples of 4.
const FIELDS = { write: ["slot", "blobOffset", "bytes"], input: ["index", "slot"],
  copy: ["src", "srcOffset", "dst", "dstOffset", "bytes"], output: ["index", "slot", "offset", "bytes"],
  dispatch: ["kernel", "paramsOffset", "paramsBytes", "slots", "workgroups"] };
const ARRAYS = { f32: Float32Array, i32: Int32Array, u32: Uint32Array, bool: Uint8Array };

const fail = (message) => { throw new Error(message); };
const bad = (message) => fail(`Program.load: ${message}`);
/** `x` for a message, cut short (JSON.stringify fails on values nested too deeply). */
const show = (x) => {
  let s = Array.isArray(x) ? "an array" : typeof x;
  try { s = JSON.stringify(x) ?? String(x); } catch {}
  return s.length > 40 ? `${s.slice(0, 40)}...` : s;
};
const has = (table, key) => typeof key === "string" && Object.hasOwn(table, key);
const numel = (shape) => shape.reduce((n, d) => n * d, 1);
/** `x` if it is an integer >= min and a multiple of `step`, else an Error naming `what`. */
const nat = (x, what, step = 1, min = 0) => Number.isSafeInteger(x) && x >= min && x % step === 0 ? x
  : bad(`${what} is ${show(x)}, expected ${step > 1 ? `a multiple of ${step}` : "an integer"} >= ${min}`);
const list = (x, what) => Array.isArray(x) ? x : bad(`${what} is ${show(x)}, expected an array`);

/**
 * Decodes and checks a compiled program's bytes without touching the GPU: every slot, kernel,
 * blob range and input/output that loading and running will use is checked here, so a malformed
 * file is an Error starting with "Program.load:". Returns the JSON header and the blob.
 * @example const { header, blob } = parseProgram(new Uint8Array(await file.arrayBuffer()));
 */
export function parseProgram(bytes) {
  if (ArrayBuffer.isView(bytes)) bytes = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  else if (bytes instanceof ArrayBuffer) bytes = new Uint8Array(bytes);
  else bad(`expected the program's bytes (an ArrayBuffer or a typed array), got ${show(bytes)}`);
  const magic = String.fromCharCode(...bytes.subarray(0, 8));
  if (magic !== "KILNPROG") {
    const start = magic.replace(/[^ !#-[\]-~]/g, (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`);
    const more = bytes.length > 8 ? "..." : "";
    bad(`not a kiln program: the file (${bytes.length} bytes) starts with "${start}${more}", expected "KILNPROG"`);
  }
  if (bytes.length < 12) bad(`the file ends after ${bytes.length} bytes, inside its 12-byte preamble`);
  const size = new DataView(bytes.buffer, bytes.byteOffset + 8, 4).getUint32(0, true);
  if (size > bytes.length - 12) bad(`header says ${size} bytes, the file has ${bytes.length - 12} after its first 12`);
  let text, h;
  try { text = new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(12, 12 + size)); }
  catch { bad("the header is not valid UTF-8"); }
  try { h = JSON.parse(text); } catch (e) { bad(`the header is not valid JSON (${e.message})`); }
  // The blob starts at the next multiple of 4 (a file ending inside the padding has none).
  const blob = bytes.subarray(Math.ceil((12 + size) / 4) * 4);

  if (h === null || typeof h !== "object" || Array.isArray(h)) bad(`the header is ${show(h)}, expected a JSON object`);
  if (h.format !== "kiln-program") bad(`format is ${show(h.format)}, expected "kiln-program"`);
  if (h.version !== 1) bad(`version ${show(h.version)} is not supported: this runner reads version 1`);
  list(h.kernels, "kernels").forEach((k, i) => typeof k?.label === "string" && typeof k.wgsl === "string"
    || bad(`kernel ${i} is ${show(k)}, expected { label, wgsl } with two strings`));
  const sizes = list(h.buffers, "buffers").map((n, i) => nat(n, `buffer ${i}'s size`, 4, 4));
  const tensors = (x, what) => list(x, `${what}s`).map((t, i) => {
    const at = `${what} ${i}`;
    if (typeof t?.name !== "string") bad(`${at} is ${show(t)}, expected { name, dtype, shape }`);
    if (!has(ARRAYS, t.dtype)) bad(`${at} (${t.name}) has dtype ${show(t.dtype)}, expected f32, i32, u32 or bool`);
    list(t.shape, `${at}'s shape`).forEach((d) => nat(d, `a dimension of ${at}'s shape`));
    return numel(t.shape) * 4;
  });
  // Checks one list of steps; `io` holds the variant's input and output byte counts (none at load).
  const steps = (x, where, io) => {
    const made = io.outputs.map(() => 0);
    list(x, `${where}'s steps`).forEach((s, i) => {
      const pre = where === "load" ? `load step ${i}` : `step ${i} of ${where}`;
      if (!Array.isArray(s)) bad(`${pre} is ${show(s)}, expected an array starting with its kind`);
      if (!has(FIELDS, s[0])) bad(`${pre} has unknown kind ${show(s[0])}, expected write, input, copy, dispatch or output`);
      const at = `${pre} (${show(s[0])})`, names = FIELDS[s[0]], f = {};
      if (s.length !== names.length + 1) bad(`${at} has ${s.length} elements, expected ${names.length + 1}`);
      names.forEach((n, j) => f[n] = n === "slots" || n === "workgroups" ? list(s[j + 1], `${at}: ${n}`)
        : nat(s[j + 1], `${at}: ${n}`, /ffset|ytes/.test(n) ? 4 : 1, n === "paramsBytes" ? 4 : 0));
      const slot = (x) => x < sizes.length ? sizes[x]
        : bad(`${at} names slot ${x}, the program has ${sizes.length} buffers`);
      const fits = (x, offset, n) => offset + n <= slot(x)
        || bad(`${at}: bytes ${offset}..${offset + n} are past the end of slot ${x} (${sizes[x]} bytes)`);
      const inBlob = (offset, n) => offset + n <= blob.length
        || bad(`${at}: blob range ${offset}+${n} is past the blob's end (${blob.length} bytes)`);
      const index = (all, what) => f.index < all.length ? all[f.index]
        : bad(`${at}: ${what} ${f.index} is out of range: ${where} has ${all.length} ${what}s`);
      if (s[0] === "write") inBlob(f.blobOffset, f.bytes), fits(f.slot, 0, f.bytes);
      if (s[0] === "input") fits(f.slot, 0, index(io.inputs, "input"));
      if (s[0] === "copy") fits(f.src, f.srcOffset, f.bytes), fits(f.dst, f.dstOffset, f.bytes);
      if (s[0] === "copy" && f.src === f.dst) bad(`${at} copies slot ${f.src} onto itself`);
      if (s[0] === "dispatch") {
        const kernels = h.kernels.length;
        if (f.kernel >= kernels) bad(`${at}: kernel ${f.kernel} is out of range (the program has ${kernels} kernels)`);
        inBlob(f.paramsOffset, f.paramsBytes);
        f.slots.forEach((x) => slot(nat(x, `${at}: a slot`)));
        if (f.workgroups.length !== 3) bad(`${at}: workgroups is ${show(f.workgroups)}, expected [x, y, z]`);
        f.workgroups.forEach((n) => nat(n, `${at}: a workgroup count`));
      }
      if (s[0] === "output") {
        const n = index(io.outputs, "output");
        if (f.bytes !== n) bad(`${at}: output ${f.index} is ${f.bytes} bytes, its shape needs ${n}`);
        fits(f.slot, f.offset, n), made[f.index]++;
      }
    });
    made.forEach((n, i) => n === 1 || bad(`${where}'s output ${i} is produced ${n} times, expected once`));
  };
  steps(h.load, "load", { inputs: [], outputs: [] });
  if (!list(h.variants, "variants").length) bad("the program has no variants, expected at least one");
  h.variants.forEach((v, i) => {
    const at = `variant ${i}`;
    if (v === null || typeof v !== "object") bad(`${at} is ${show(v)}, expected an object`);
    steps(v.steps, at, { inputs: tensors(v.inputs, `${at}'s input`), outputs: tensors(v.outputs, `${at}'s output`) });
  });
  return { header: h, blob };
}

/**
 * A compiled kiln program on a WebGPU device: `run` replays the recorded forward for the input
 * shapes it was compiled for. Made by `Program.load`.
 * @example
 * import { Program } from "kiln-ml/program";
 * const program = await Program.load("model.kilnprog");
 * const [logits] = await program.run([{ data: pixels, shape: [1, 1, 28, 28] }]);
 */
export class Program {
  #device; #header; #blob; #lists; #pipelines; #slots; #params; #offsets; #groups; #scopes = [];
  #staging = []; #last = Promise.resolve();
  /** The compiled input shapes: one entry per variant, `{ inputs, outputs }` of `{ name, dtype, shape }`. */
  variants;

  /**
   * Fetches (a URL) or reads (bytes) a program, checks it (`parseProgram`), makes its buffers and
   * runs its load steps (weights to the GPU). A variant's kernels are compiled at its first run.
   * `options.device`: a GPUDevice to use instead of one from `navigator.gpu`.
   */
  static async load(source, options) {
    if (typeof source === "string" || source instanceof URL) {
      let url = source, response;
      try {
        response = await fetch(url);
        source = response.ok && await response.arrayBuffer();
      } catch (e) { bad(`could not fetch ${url}: ${e.message}`); }
      if (!response.ok) bad(`fetching ${url} answered ${response.status} ${response.statusText}, expected 200 OK`);
    }
    const { header, blob } = parseProgram(source);
    let device = options?.device;
    if (!device) {
      const adapter = await globalThis.navigator?.gpu?.requestAdapter();
      if (!adapter) bad("this page has no WebGPU (navigator.gpu is missing or gave no adapter); programs run on WebGPU only");
      // The adapter's limits, as kiln's own WebGPU device asks for (large models' buffers).
      const requiredLimits = {};
      for (const k in adapter.limits) typeof adapter.limits[k] === "number" && (requiredLimits[k] = adapter.limits[k]);
      device = await adapter.requestDevice({ requiredLimits });
    }
    const program = new Program();
    await program.#setup(device, header, blob);
    return program;
  }

  async #setup(d, h, blob) {
    this.#device = d, this.#header = h, this.#blob = blob;
    this.variants = h.variants.map(({ inputs, outputs }) => JSON.parse(JSON.stringify({ inputs, outputs })));
    this.#lists = [h.load, ...h.variants.map((v) => v.steps)];
    this.#pipelines = [], this.#groups = [];
    this.#slots = h.buffers.map((size, i) => this.#scoped(`buffer ${i} (${size} bytes)`,
      () => d.createBuffer({ size, usage: SLOT })));
    // Every dispatch's params in one buffer, written once, each at an offset the device can bind.
    const align = d.limits.minStorageBufferOffsetAlignment;
    const padded = (s) => s[0] === "dispatch" ? Math.ceil(s[3] / align) * align : 0;
    const params = new Uint8Array(Math.max(4, this.#lists.flat().reduce((n, s) => n + padded(s), 0)));
    let end = 0;
    this.#offsets = this.#lists.map((steps) => steps.map((s) => {
      if (s[0] !== "dispatch") return 0;
      params.set(blob.subarray(s[2], s[2] + s[3]), end);
      return (end += padded(s)) - padded(s);
    }));
    this.#params = this.#scoped(`the params buffer (${params.length} bytes)`,
      () => d.createBuffer({ size: params.length, usage: PARAMS }));
    d.queue.writeBuffer(this.#params, 0, params);
    await this.#prepare(0, bad);
    this.#scoped("the load steps", () => this.#exec(h.load, this.#groups[0]));
    await this.#check(bad);
  }

  // Each GPU call that can fail validation gets its own error scope, so that its message names the
  // kernel or step; `#check` reads them together.
  #scoped(what, make) {
    const d = this.#device;
    d.pushErrorScope("validation");
    const made = make();
    this.#scopes.push(d.popErrorScope().then((e) => e && `${what}: ${e.message}`));
    return made;
  }

  async #check(refuse) {
    const error = (await Promise.all(this.#scopes.splice(0))).find(Boolean);
    if (error) this.destroy(), refuse(error);
  }

  // Starts compiling the kernels of list `l` that are not yet compiling.
  #compile(l) {
    const d = this.#device;
    for (const [kind, k] of this.#lists[l]) {
      if (kind !== "dispatch" || this.#pipelines[k]) continue;
      const { label, wgsl } = this.#header.kernels[k];
      const module = this.#scoped(`kernel ${k} (${label})`, () => d.createShaderModule({ label, code: wgsl }));
      this.#pipelines[k] = d.createComputePipelineAsync({ label, layout: "auto", compute: { module, entryPoint: "main" } })
        .catch((e) => ({ error: `kernel ${k} (${label}) did not compile: ${e.message}` }));
    }
  }

  // The pipelines and bind groups of list `l` (0: the load, 1 + v: variant v), made at its first
  // use: a page that runs one batch size compiles only that variant's kernels (SwiftShader took
  // 1.4 s to load MNIST for batch 1 alone, 3.5 s for batch 1 and 64 together).
  async #prepare(l, refuse) {
    if (this.#groups[l]) return;
    const d = this.#device, h = this.#header, steps = this.#lists[l];
    this.#compile(l);
    const pipelines = this.#pipelines = await Promise.all(this.#pipelines);
    await this.#check(refuse);
    for (const [kind, k] of steps) if (kind === "dispatch" && pipelines[k].error) refuse(pipelines[k].error);
    this.#groups[l] = steps.map((s, i) => {
      if (s[0] !== "dispatch") return null;
      const [, kernel, , size, slots] = s;
      const where = l ? `step ${i} of variant ${l - 1}` : `load step ${i}`;
      return this.#scoped(`${where}: kernel ${kernel} (${h.kernels[kernel].label})`, () => d.createBindGroup({
        layout: pipelines[kernel].getBindGroupLayout(0),
        entries: [{ binding: 0, resource: { buffer: this.#params, offset: this.#offsets[l][i], size } },
          ...slots.map((x, k) => ({ binding: k + 1, resource: { buffer: this.#slots[x] } }))],
      }));
    });
    await this.#check(refuse);
  }

  // Records `steps` into command encoders and submits them. Queue writes run before commands
  // not yet submitted, so what the encoder holds is submitted before each write.
  #exec(steps, groups, inputs, staging) {
    const d = this.#device, slots = this.#slots;
    let encoder = null, pass = null;
    // The encoder, outside any compute pass (the open one ends), made when first needed.
    const outside = () => { pass?.end(); pass = null; return encoder ??= d.createCommandEncoder(); };
    const submit = () => { if (encoder) d.queue.submit([outside().finish()]), encoder = null; };
    steps.forEach((s, i) => {
      if (s[0] === "dispatch") {
        pass ??= outside().beginComputePass();
        pass.setPipeline(this.#pipelines[s[1]]);
        pass.setBindGroup(0, groups[i]);
        pass.dispatchWorkgroups(...s[5]);
      } else if (s[0] === "copy") outside().copyBufferToBuffer(slots[s[1]], s[2], slots[s[3]], s[4], s[5]);
      else if (s[0] === "output") outside().copyBufferToBuffer(slots[s[2]], s[3], staging[s[1]], 0, s[4]);
      else if (s[0] === "write") submit(), d.queue.writeBuffer(slots[s[1]], 0, this.#blob, s[2], s[3]);
      else submit(), d.queue.writeBuffer(slots[s[2]], 0, inputs[s[1]]);
    });
    submit();
  }

  /**
   * Runs the first variant compiled for these inputs: one per model input, each a typed array
   * of its dtype (Float32Array, Int32Array, Uint32Array; Uint8Array or booleans for bool) or
   * `{ data, shape }`. Runs are queued one after another. Resolves to the outputs as
   * `{ name, dtype, shape, data }`.
   */
  async run(inputs) {
    const refuse = (message) => fail(`Program.run: ${message}`);
    const gone = () => this.#slots || refuse("this program was destroyed, or not made by Program.load");
    gone();
    if (!Array.isArray(inputs)) refuse(`inputs is ${show(inputs)}, expected an array with one entry per model input`);
    const given = Array.from(inputs, (x) => ({ data: x?.data ?? x, shape: x?.data && x.shape }));
    const fits = (t, { data, shape }) => (t.dtype === "bool" ? data instanceof Uint8Array || Array.isArray(data)
      : data instanceof ARRAYS[t.dtype]) && data.length === numel(t.shape)
      && (!shape || shape.length === t.shape.length && t.shape.every((n, i) => shape[i] === n));
    const variants = this.#header.variants;
    const v = variants.findIndex(({ inputs }) =>
      inputs.length === given.length && inputs.every((t, i) => fits(t, given[i])));
    if (v < 0) {
      const one = ({ data, shape }) => `${data?.constructor?.name ?? data} ${shape ? `[${shape}]` : `of ${data?.length}`}`;
      const all = variants.map((v) => `(${v.inputs.map((t) => `${t.dtype} [${t.shape}]`).join(", ")})`);
      refuse(`no compiled variant takes inputs (${given.map(one).join(", ")}); this program has ${all.join(", ")}`);
    }
    const { inputs: types, outputs } = variants[v];
    // Copied now: the caller may reuse its arrays while an earlier run is still going.
    const data = given.map(({ data }, i) =>
      types[i].dtype === "bool" ? Uint32Array.from(data, (b) => b ? 1 : 0) : data.slice());
    const turn = this.#last.then(async () => {
      gone();
      const d = this.#device;
      await this.#prepare(v + 1, refuse);
      const staging = this.#staging[v] ??= outputs.map(({ shape }) =>
        d.createBuffer({ size: Math.max(4, numel(shape) * 4), usage: STAGING }));
      d.pushErrorScope("validation");
      this.#exec(variants[v].steps, this.#groups[v + 1], data, staging);
      // The error scope and the mappings awaited together: one wait for the GPU, not two.
      const [error, mapped] = await Promise.allSettled([d.popErrorScope(), Promise.all(staging.map((b) => b.mapAsync(1)))]);
      if (error.value || mapped.reason) {
        // left mapped, the staging buffers would fail every later run
        staging.forEach((b) => b.mapState === "mapped" && b.unmap());
        refuse(error.value ? `the GPU refused variant ${v}: ${error.value.message}`
          : `reading the outputs failed: ${mapped.reason.message}`);
      }
      return outputs.map(({ name, dtype, shape }, i) => {
        const bytes = staging[i].getMappedRange().slice(0, numel(shape) * 4);
        staging[i].unmap();
        const out = dtype === "bool" ? Uint8Array.from(new Uint32Array(bytes)) : new ARRAYS[dtype](bytes);
        return { name, dtype, shape: [...shape], data: out };
      });
    });
    this.#last = turn.catch(() => {});
    return turn;
  }

  /** Frees the program's GPU buffers; `run` then throws. */
  destroy() {
    for (const b of [...this.#slots ?? [], this.#params, ...this.#staging.flat()]) b?.destroy();
    this.#slots = null;
  }
}
