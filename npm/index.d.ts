// Type definitions for kiln-ml (hand-written; they describe the API of kiln's web/ crate), except
// the generated block in Tensor, which `node npm/check-types.mjs --write` writes. CI runs
// `node npm/check-types.mjs`: every declared member must be exported by the wasm module and
// the other way round.

/** Element types. Aliases such as "float32" and "int32" are accepted wherever a DType is. */
export type DType = "f32" | "f64" | "f16" | "i32" | "u32" | "bool";
export type DTypeLike = DType | "float32" | "float64" | "float16" | "int32" | "uint32";

/** The TypedArray `data()` returns for each dtype (f16 widens to Float32Array). */
export interface DataTypeMap {
  f32: Float32Array;
  f64: Float64Array;
  f16: Float32Array;
  i32: Int32Array;
  u32: Uint32Array;
  bool: Uint8Array;
}
export type TypedArray =
  | Float32Array
  | Float64Array
  | Int32Array
  | Uint32Array
  | Int16Array
  | Uint16Array
  | Int8Array
  | Uint8Array
  | Uint8ClampedArray;

/** Nested arrays of numbers (or booleans), as `array()` returns them. */
export type NestedArray = number | boolean | NestedArray[];

/** A tensor argument where a plain number is broadcast as a scalar of the tensor's dtype. */
export type TensorOrNumber = Tensor | number;

export type DeviceLike = Device | "cpu" | "webgpu";

export interface CreateOptions {
  /** Default: the TypedArray's own type, else "f32" ("bool" for arrays of booleans). */
  dtype?: DTypeLike;
  /** Default: the CPU. "webgpu" needs `await Device.webgpu()` (or `Device.auto()`) first. */
  device?: DeviceLike;
  /** With `device: "webgpu"`: kernel fusion on (default) or off, as for `Device.webgpu`. */
  fusion?: boolean;
}

/** Options of `Device.webgpu` and `Device.auto`. */
export interface WebGpuOptions {
  /**
   * Kernel fusion (default `true`): chains of elementwise ops run as one generated WGSL kernel
   * when their result is needed. `false`: one kernel per op. The two devices share the GPU but
   * not tensors: an op needs all its inputs on the same one.
   */
  fusion?: boolean;
}

/** `[h, w]`, or one number for both. */
export type Pair = number | [number, number];

export interface Conv2dOptions {
  stride?: Pair;
  padding?: Pair;
  dilation?: Pair;
  groups?: number;
}

export interface Pool2dOptions {
  kernel: Pair;
  /** Default: the kernel size. */
  stride?: Pair;
  padding?: Pair;
  dilation?: Pair;
  /** Average pooling only: count padded zeros in the divisor (default true, as PyTorch). */
  countIncludePad?: boolean;
}

/** `init`'s options. */
export interface InitOptions {
  /**
   * Threads for the CPU kernels on a cross-origin isolated page (default: the cores, at most 4);
   * 1 loads a single-threaded module. Ignored (1) where the page is not isolated and in Node.
   */
  threads?: number;
  /**
   * `false` loads a CPU-only build (`kiln_web_cpu_bg.wasm`, or `kiln_web_threads_cpu_bg.wasm`
   * with threads; about a third smaller: no WebGPU, so `Device.webgpu()` rejects and
   * `Device.auto()` is the CPU), `true` a module with WebGPU. Default: whether the page has
   * `navigator.gpu` (false in Node).
   */
  webgpu?: boolean;
  /**
   * `false` loads the WebGPU-only build (`kiln_web_gpu_bg.wasm`, single-threaded, about a
   * third smaller than the main module): no CPU kernels, so every op runs on WebGPU, which is
   * then the default device and `Device.auto()`'s choice (even on a software adapter); CPU
   * tensors only hold data (`Tensor.from`, `data()`, `.to(device)`), and an op on one is an
   * error. Not with `webgpu: false` nor `threads` > 1. Default: `true`.
   */
  cpu?: boolean;
}

/**
 * Loads and instantiates kiln's WebAssembly module; call (and await) once before anything else.
 * On a cross-origin isolated page (COOP `same-origin`, COEP `require-corp`) it loads the threaded
 * build and starts its Web Workers; `Device.cpu().threads` says how many threads run. Elsewhere it
 * loads the main module. Either comes as a CPU-only build, loaded where `options.webgpu` is false
 * or there is no WebGPU. With a `source`, that is the main module (`kiln_web_bg.wasm`) unless
 * `options.threads` > 1 asks for the threaded one (`kiln_web_threads_bg.wasm`), each the CPU-only
 * build (`kiln_web_cpu_bg.wasm`, `kiln_web_threads_cpu_bg.wasm`) when `options.webgpu` is false.
 *
 * ```js
 * await init();                              // threads where the page allows them
 * await init(undefined, { threads: 1 });     // always single-threaded
 * await init(undefined, { webgpu: false });  // a CPU page: the smaller CPU-only module
 * await init(undefined, { cpu: false });     // a WebGPU page: the smaller WebGPU-only module
 * ```
 */
export function init(
  source?: string | URL | Response | BufferSource | WebAssembly.Module,
  options?: InitOptions,
): Promise<void>;
export default init;

/** The package version. */
export function version(): string;

/** Options of `convertOnnx` (and of `Model.load` for an ONNX file). */
export interface OnnxOptions {
  /**
   * The shape of the sample input the ONNX graph is traced on, batch axis first, e.g.
   * `[1, 3, 224, 224]`. Default: the model's declared input shape, every symbolic dimension 1.
   * The batch axis of the result stays free when the ONNX file leaves it symbolic.
   */
  inputShape?: ArrayLike<number>;
}

/**
 * Converts an ONNX file (one input, one output) into a kiln model file, resolving to its bytes,
 * which `Model.load` takes: convert once and cache them (e.g. in IndexedDB). The first call loads
 * the ONNX converter, a second WebAssembly module (`dist/kiln_web_onnx_bg.wasm`), which
 * `init()` does not load. The conversion itself runs synchronously on kiln's CPU backend.
 * Rejects with a `KilnError` naming what was wrong (not ONNX, an op kiln does not import, ...).
 */
export function convertOnnx(
  source: string | URL | Response | ArrayBuffer | ArrayBufferView,
  options?: OnnxOptions,
): Promise<Uint8Array>;

/**
 * Loads and instantiates the ONNX converter module (once; later calls return the same promise).
 * `convertOnnx` and `Model.load` of an ONNX file call it themselves; call it to load the module
 * ahead of time or from another place (`source` as for `init`).
 */
export function initOnnx(
  source?: string | URL | Response | BufferSource | WebAssembly.Module,
): Promise<void>;

/**
 * Loads and instantiates the text-generation module (once; later calls return the same
 * promise), a third WebAssembly module (`dist/kiln_web_text_bg.wasm`: the main module with
 * `TextModel`; where `init()` runs threads, its threaded build `kiln_web_threads_text_bg.wasm`
 * with workers of its own), which `init()` does not load. `TextModel.load` calls it itself; call it to load
 * the module ahead of time or from another place (`source` as for `init`).
 */
export function initText(
  source?: string | URL | Response | BufferSource | WebAssembly.Module,
): Promise<void>;

export interface DeviceMemory {
  /** Live tensors (a loaded model counts each weight). */
  tensors: number;
  /** Bytes their elements take. */
  bytes: number;
  /** What the backend itself holds (WebGPU buffers, reuse pool included), when it tracks it. */
  allocatedBytes?: number;
}
export interface MemoryReport extends DeviceMemory {
  devices: Partial<Record<"cpu" | "webgpu", DeviceMemory>>;
}
/**
 * Live tensors and bytes, in total and per device: the way to find leaks. Counts the weights of
 * `TextModel`s too (held by the text-generation module).
 */
export function memory(): MemoryReport;

/** Where tensors live and ops run. */
export class Device {
  private constructor();
  /**
   * WebGPU on a hardware adapter, else the CPU; `reason` says why. The CPU when the browser has no
   * WebGPU, no adapter, or only a software fallback adapter (`adapter.info.isFallbackAdapter`, e.g.
   * SwiftShader), which is far slower than kiln's CPU backend; no GPU device is created then.
   * Never rejects. To pick the faster backend for a particular model, use
   * `Model.load(source, { device: "auto" })`. In the WebGPU-only module (`init` with
   * `cpu: false`) any adapter is taken, a fallback one too.
   */
  static auto(options?: WebGpuOptions): Promise<Device>;
  /**
   * The GPU through WebGPU; rejects with the reason when there is none.
   * `Device.webgpu({ fusion: false })`: without kernel fusion.
   */
  static webgpu(options?: WebGpuOptions): Promise<Device>;
  /** kiln's CPU backend (always available). */
  static cpu(): Device;
  readonly kind: "webgpu" | "cpu";
  /** Whether chains of elementwise ops run as one generated kernel (WebGPU, unless turned off). */
  readonly fusion: boolean;
  /** The backend's own name ("cpu", or the GPU adapter's description). */
  readonly name: string;
  /**
   * The threads kiln's CPU kernels spread over: the pool `init` started in the threaded build
   * (cross-origin isolated pages), else 1. The same on every device.
   */
  readonly threads: number;
  /**
   * Why this device was chosen, e.g. "requested explicitly", "the only WebGPU adapter is a
   * software fallback (google swiftshader), slower than kiln's CPU backend", or for
   * `model.device` after `device: "auto"`: "measured on this model: WebGPU 12.0 ms, CPU 5.9 ms per run".
   */
  readonly reason: string;
  toString(): string;
  /** Frees the JS handle (the device itself stays usable through other handles). */
  free(): void;
}

/**
 * An n-dimensional array on a device. Ops return new tensors; reads are async.
 * Call `dispose()` when done (a FinalizationRegistry frees forgotten tensors eventually).
 */
export class Tensor {
  private constructor();

  /** From a TypedArray, a (nested) array or a number. `shape` defaults to the nesting. */
  static from(data: TypedArray | NestedArray, shape?: number[] | null, options?: CreateOptions): Tensor;
  static zeros(shape: number[], options?: CreateOptions): Tensor;
  static ones(shape: number[], options?: CreateOptions): Tensor;
  static full(shape: number[], value: number, options?: CreateOptions): Tensor;
  /** `start, start + step, ...` up to but excluding `end`. */
  static arange(start: number, end: number, step?: number, options?: CreateOptions): Tensor;
  static eye(n: number, options?: CreateOptions): Tensor;
  /** Uniform in [low, high) (default [0, 1)), the same for the same seed on every device. */
  static randUniform(
    shape: number[],
    options?: CreateOptions & { low?: number; high?: number; seed?: number },
  ): Tensor;
  /** Normal (default mean 0, std 1), the same for the same seed on every device. */
  static randNormal(
    shape: number[],
    options?: CreateOptions & { mean?: number; std?: number; seed?: number },
  ): Tensor;
  /** Joins along an existing axis (default 0). */
  static concat(tensors: Tensor[], axis?: number): Tensor;
  /** Joins along a new axis (default 0). */
  static stack(tensors: Tensor[], axis?: number): Tensor;

  readonly shape: number[];
  readonly dtype: DType;
  readonly rank: number;
  /** Number of elements. */
  readonly size: number;
  readonly device: Device;
  /** True after `dispose()`. */
  readonly disposed: boolean;

  /** The values, row-major, as a TypedArray (see DataTypeMap). */
  data(): Promise<DataTypeMap[DType]>;
  /** The values as nested arrays (a number for rank 0). */
  array(): Promise<NestedArray>;
  /** A copy on another device. */
  to(device: DeviceLike): Promise<Tensor>;
  /** Frees the data now; later use throws; disposing twice is harmless. */
  dispose(): void;
  /** A second handle on the same data (dispose each). */
  clone(): Tensor;
  toString(): string;

  // elementwise
  add(other: TensorOrNumber): Tensor;
  sub(other: TensorOrNumber): Tensor;
  mul(other: TensorOrNumber): Tensor;
  div(other: TensorOrNumber): Tensor;
  pow(other: TensorOrNumber): Tensor;
  maximum(other: TensorOrNumber): Tensor;
  minimum(other: TensorOrNumber): Tensor;
  /** Comparisons return bool tensors. */
  eq(other: TensorOrNumber): Tensor;
  ne(other: TensorOrNumber): Tensor;
  lt(other: TensorOrNumber): Tensor;
  le(other: TensorOrNumber): Tensor;
  gt(other: TensorOrNumber): Tensor;
  ge(other: TensorOrNumber): Tensor;
  // <generated: unary ops (node npm/check-types.mjs --write)>
  /** Elementwise `abs`. */
  abs(): Tensor;
  /** Elementwise `ceil`. */
  ceil(): Tensor;
  /** Elementwise `cos`. */
  cos(): Tensor;
  /** Elementwise `erf`. */
  erf(): Tensor;
  /** Elementwise `exp`. */
  exp(): Tensor;
  /** Elementwise `floor`. */
  floor(): Tensor;
  /** Elementwise `gelu`. */
  gelu(): Tensor;
  /** Elementwise `gelu_tanh`. */
  gelu_tanh(): Tensor;
  /** Elementwise `log`. */
  log(): Tensor;
  /** Elementwise `neg`. */
  neg(): Tensor;
  /** Elementwise `recip`. */
  recip(): Tensor;
  /** Elementwise `relu`. */
  relu(): Tensor;
  /** Elementwise `round`. */
  round(): Tensor;
  /** Elementwise `rsqrt`. */
  rsqrt(): Tensor;
  /** Elementwise `sigmoid`. */
  sigmoid(): Tensor;
  /** Elementwise `sign`. */
  sign(): Tensor;
  /** Elementwise `silu`. */
  silu(): Tensor;
  /** Elementwise `sin`. */
  sin(): Tensor;
  /** Elementwise `sqrt`. */
  sqrt(): Tensor;
  /** Elementwise `tanh`. */
  tanh(): Tensor;
  // </generated>
  clamp(min: number, max: number): Tensor;
  /** With this bool tensor as the condition: `a` where true, else `b`. */
  where(a: TensorOrNumber, b: TensorOrNumber): Tensor;
  cast(dtype: DTypeLike): Tensor;

  // reductions (axes: one axis, several, or all when omitted; negative counts from the end)
  sum(axes?: number | number[] | null, keepdim?: boolean): Tensor;
  mean(axes?: number | number[] | null, keepdim?: boolean): Tensor;
  max(axes?: number | number[] | null, keepdim?: boolean): Tensor;
  min(axes?: number | number[] | null, keepdim?: boolean): Tensor;
  prod(axes?: number | number[] | null, keepdim?: boolean): Tensor;
  /** Variance with `correction` (default 1, unbiased). */
  var(axes?: number | number[] | null, correction?: number, keepdim?: boolean): Tensor;
  /** i32 indices; axis defaults to -1. */
  argmax(axis?: number, keepdim?: boolean): Tensor;
  argmin(axis?: number, keepdim?: boolean): Tensor;
  softmax(axis?: number): Tensor;
  logSoftmax(axis?: number): Tensor;
  cumsum(axis?: number): Tensor;

  /** Matrix product with NumPy semantics (batched, broadcast). */
  matmul(other: Tensor): Tensor;

  // views and data movement
  /** One dimension may be -1. */
  reshape(shape: number[]): Tensor;
  permute(dims: number[]): Tensor;
  /** Swaps two axes (default the last two). */
  transpose(a?: number, b?: number): Tensor;
  /** Per leading axis: `[start, end]`, `[start, end, step]` or null for the whole axis. */
  slice(ranges: Array<[number, number] | [number, number, number] | null>): Tensor;
  flatten(start?: number, end?: number): Tensor;
  squeeze(axis: number): Tensor;
  unsqueeze(axis: number): Tensor;
  expand(shape: number[]): Tensor;
  /** `[before, after]` per leading axis. */
  pad(pads: Array<[number, number]>, value?: number): Tensor;
  oneHot(classes: number, dtype?: DTypeLike): Tensor;
  indexSelect(axis: number, index: Tensor): Tensor;

  // convolution and pooling (NCHW)
  /** Weight OIHW, optional bias of O. */
  conv2d(weight: Tensor, bias?: Tensor | null, options?: Conv2dOptions): Tensor;
  maxPool2d(options: Pool2dOptions): Tensor;
  avgPool2d(options: Pool2dOptions): Tensor;
  adaptiveAvgPool2d(output: Pair): Tensor;

  /** Frees the JS wrapper and its data (same as dispose). */
  free(): void;
}

/** A custom op's input or output as its rules see it. */
export interface OpMeta {
  dtype: DType;
  shape: number[];
}

/** A custom op's input as its `cpu` function sees it: the values in row-major order. */
export interface OpInput<D extends DType = DType> extends OpMeta {
  data: DataTypeMap[D];
}

/** A custom op's attributes: named numbers, stored with the op in a traced model. */
export type OpAttrs = Record<string, number>;

/**
 * A custom op for `registerOp`: a CPU reference and optionally a WGSL kernel for WebGPU. Every
 * callback error (a throw, a wrong result) becomes a KilnError naming the op. A JS op runs
 * forward only: the page has no autodiff yet, and a `backward` field is rejected.
 */
export interface OpSpec {
  /** The name `customOp` and model files use: letters, digits, `_`, `.`, `:`, `-`. */
  name: string;
  /**
   * The output's values for these inputs (a TypedArray or an array of the output's size, cast
   * to its dtype). Runs on the CPU device.
   */
  cpu(inputs: OpInput[], attrs: OpAttrs): TypedArray | number[];
  /**
   * Checks the inputs and returns the output's shape (the first input's dtype) or
   * `{ dtype, shape }`; throw to reject the inputs. Default: the first input's dtype and shape.
   */
  shape?(inputs: OpMeta[], attrs: OpAttrs): number[] | OpMeta;
  /**
   * The kernel that runs on WebGPU: one `@compute fn main`; binding 0 is
   * `var<storage, read> params: P` (the words `params` returns), bindings 1..n the inputs
   * (`var<storage, read>`), binding n+1 the output (`var<storage, read_write>`), all arrays of
   * f32, i32 or u32 (bool is a u32 0/1). `#include "common.wgsl"` (`group_index`) and
   * `#include "math.wgsl"` work. The browser compiles it on the op's first WebGPU run; a
   * rejected kernel fails that run with the browser's message. Without it the op is CPU-only.
   */
  wgsl?: string;
  /**
   * The words of the kernel's params header: a Uint32Array, Int32Array or Float32Array (its
   * bytes as they are, so f32 fields can be written through a Float32Array view) or an array of
   * integers. Default: `[number of output elements]`.
   */
  params?(inputs: OpMeta[], output: OpMeta, attrs: OpAttrs): Uint32Array | Int32Array | Float32Array | number[];
  /**
   * The kernel's `@workgroup_size` (1-D, default 64): the op runs one invocation per output
   * element in workgroups of this size, split into an x * y * z grid; the kernel finds its index
   * as `group_index(wid, nwg) * WG + lid.x` and returns past the end.
   */
  workgroupSize?: number;
  /** Not supported: JS ops have no gradient in the page yet (`registerOp` throws if given). */
  backward?: never;
}

/** Registers a custom op (replacing one of the same name); run it with `customOp`. */
export function registerOp(spec: OpSpec): void;

/** Removes a registered custom op; false if there was none. */
export function unregisterOp(name: string): boolean;

/** The names of the registered custom ops, sorted. */
export function registeredOps(): string[];
/**
 * The kernels fusion generated so far in this page (name `kiln.fused.<hash>` and WGSL), by name;
 * then the GEMM epilogues (`kiln.epilogue.<hash>`: the part appended to a matmul's or
 * convolution's kernel).
 */
export function fusedKernels(): { name: string; wgsl: string }[];

/** Runs the registered custom op `name` on `inputs` (at least one) with `attrs`. */
export function customOp(name: string, inputs: Tensor[], attrs?: OpAttrs): Tensor;

export interface TensorInfo {
  name: string;
  /** null marks a free dimension (such as the batch). */
  shape: Array<number | null>;
  dtype: DType;
}

/**
 * A trained kiln model (the safetensors file `kiln train` writes: weights + graph), or an ONNX
 * model converted to one.
 */
export class Model {
  private constructor();
  /**
   * From a URL, a Response or bytes, onto `options.device` (default: the CPU).
   *
   * An ONNX file (told from a kiln file by its first bytes) is converted first, as by
   * `convertOnnx(source, options)` (`options.inputShape` applies); the ONNX converter module is
   * loaded then, on the first ONNX file only.
   *
   * `device: "auto"` picks the faster backend for this model: the CPU when `Device.auto()` says
   * so; otherwise the choice remembered in `localStorage` for this adapter and these model bytes,
   * else it loads the model on both, times a few runs on random inputs shaped by `inputs` (free
   * dimensions 1), keeps the faster and remembers it. `model.device.reason` says which and why.
   */
  static load(
    source: string | URL | Response | ArrayBuffer | ArrayBufferView,
    options?: { device?: DeviceLike | "auto"; fusion?: boolean } & OnnxOptions,
  ): Promise<Model>;
  readonly inputs: TensorInfo[];
  readonly outputs: TensorInfo[];
  /** The device holding the weights; `reason` says why it was chosen. */
  readonly device: Device;
  /** Inputs in `inputs` order (or by name); outputs in `outputs` order. Dispose them when done. */
  run(inputs: Tensor[] | Record<string, Tensor>): Tensor[];
  /** One input, the first output. */
  forward(input: Tensor): Tensor;
  /** Frees the weights now. */
  dispose(): void;
  free(): void;
}

/** Options of `TextModel.generate`. */
export interface GenerateOptions {
  /** Tokens (characters) to generate; default 100. */
  tokens?: number;
  /** Softmax temperature; default 0.8. 0 picks the most likely token (greedy: deterministic). */
  temperature?: number;
  /** Draw among the `topK` most likely tokens only. */
  topK?: number;
  /** Seed of the draws; default 0. */
  seed?: number;
  /** Called with each token's text as soon as it is chosen. */
  onToken?: (text: string) => void;
}

/**
 * A GPT model file from `kiln train text` (weights, shape and tokenizer in one file), generating
 * text through a KV cache (one position per token). Generation awaits each token's logits and
 * yields to the event loop between tokens, so the page stays responsive.
 *
 * Its code is a module of its own (`dist/kiln_web_text_bg.wasm`), loaded on the first
 * `TextModel.load` (`init()` need not have run): pages that do not generate text do not download
 * it. That module holds the weights and runs the model on its own CPU backend or WebGPU device,
 * so `device` is that module's `Device`: the same members, another class.
 */
export class TextModel {
  private constructor();
  /** From a URL, a Response or bytes, onto `options.device` (default: the CPU; `"auto"`: WebGPU on a hardware adapter, else the CPU). */
  static load(
    source: string | URL | Response | ArrayBuffer | ArrayBufferView,
    options?: { device?: DeviceLike | "auto"; fusion?: boolean },
  ): Promise<TextModel>;
  /** Continues `prompt`; resolves to the generated text (without the prompt). */
  generate(prompt: string, options?: GenerateOptions): Promise<string>;
  /** Tokens in the vocabulary. */
  readonly vocab: number;
  /** The longest sequence the model attends over. */
  readonly context: number;
  /** The device holding the weights. */
  readonly device: Device;
  /** Frees the weights (once a running `generate` ends). */
  dispose(): void;
  free(): void;
}
