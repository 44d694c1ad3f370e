// Types for kiln-ml/program (npm/program.js): compiled programs replayed with WebGPU alone.
//
//   import { Program } from "kiln-ml/program";
//   const program = await Program.load("model.kilnprog"); // from `kiln compile model.safetensors --batch 1,64 -o model.kilnprog`
//   const [logits] = await program.run([{ data: pixels, shape: [1, 1, 28, 28] }]);

/** Element types of a program's inputs and outputs (each 4 bytes on the device; bool as a u32 0/1). */
export type ProgramDType = "f32" | "i32" | "u32" | "bool";

/** The TypedArray of each dtype, as `run` takes and returns them (bool: Uint8Array of 0/1). */
export interface ProgramDataTypeMap {
  f32: Float32Array;
  i32: Int32Array;
  u32: Uint32Array;
  bool: Uint8Array;
}

/** One input or output of a compiled variant. */
export interface ProgramTensorInfo {
  name: string;
  dtype: ProgramDType;
  shape: number[];
}

/** One compiled set of input shapes, and the outputs it gives. */
export interface ProgramVariant {
  inputs: ProgramTensorInfo[];
  outputs: ProgramTensorInfo[];
}

/** An output of `run`: a fresh array, the program's buffers are not shared. */
export interface ProgramOutput<D extends ProgramDType = ProgramDType> extends ProgramTensorInfo {
  dtype: D;
  data: ProgramDataTypeMap[D];
}

/**
 * An input of `run`: a TypedArray of its dtype (matched to a variant by its length), or the
 * data with its shape (matched by shape). bool takes a Uint8Array or an array of booleans.
 */
export type ProgramInput =
  | Float32Array
  | Int32Array
  | Uint32Array
  | Uint8Array
  | boolean[]
  | { data: Float32Array | Int32Array | Uint32Array | Uint8Array | boolean[]; shape: readonly number[] };

/** GPUDevice where the WebGPU types are known (TypeScript's DOM library or @webgpu/types), else object. */
type GPUDeviceType = typeof globalThis extends { GPUDevice: { prototype: infer D } } ? D : object;

export interface ProgramLoadOptions {
  /** The WebGPU device to run on; default: one from `navigator.gpu` with the adapter's limits. */
  device?: GPUDeviceType;
}

/**
 * A compiled kiln program on a WebGPU device: a model's forward recorded by `kiln compile` for
 * fixed input shapes, replayed without WebAssembly. Other input shapes, the CPU and ops outside
 * the recorded forward are not available.
 *
 * @example
 * import { Program } from "kiln-ml/program";
 * const program = await Program.load("model.kilnprog");
 * console.log(program.variants.map((v) => v.inputs[0].shape)); // [[1, 1, 28, 28], [64, 1, 28, 28]]
 * const [logits] = await program.run([{ data: pixels, shape: [1, 1, 28, 28] }]);
 * program.destroy();
 */
export class Program {
  private constructor();
  /**
   * Fetches (a URL) or reads (bytes) a program, checks all of it before any GPU call, then makes
   * its buffers and runs its load steps (each variant's kernels are compiled at its first run).
   * Rejects with an Error whose message starts with "Program.load:" for a malformed file, a failed
   * fetch, a page without WebGPU, or a buffer or load step the device refuses.
   */
  static load(source: string | URL | ArrayBuffer | ArrayBufferView, options?: ProgramLoadOptions): Promise<Program>;
  /** The compiled variants' inputs and outputs, in the program's order. */
  readonly variants: ProgramVariant[];
  /**
   * Runs the first variant that takes these inputs (one per model input) and resolves to its
   * outputs. Runs are queued: each starts when the previous one has finished; the inputs are
   * copied when `run` is called. Rejects with an Error starting with "Program.run:" when no
   * variant takes the inputs (the message lists the compiled shapes), when the device refuses one
   * of the variant's kernels (named by its label) or its work, or after `destroy()`.
   */
  run(inputs: ProgramInput[]): Promise<ProgramOutput[]>;
  /** Frees the program's GPU buffers; a later `run` rejects. */
  destroy(): void;
}

/** A program file's decoded parts, as `parseProgram` returns them. */
export interface ParsedProgram {
  /** The JSON header: format, version, kernels, buffers, load steps and variants with their steps. */
  header: {
    format: "kiln-program";
    version: 1;
    kernels: { label: string; wgsl: string }[];
    buffers: number[];
    load: unknown[][];
    variants: (ProgramVariant & { steps: unknown[][] })[];
  };
  /** The bytes after the header (weights and params), a view into the file's bytes. */
  blob: Uint8Array;
}

/**
 * Decodes and checks a program file without touching the GPU (as `Program.load` does first):
 * throws an Error starting with "Program.load:" that names what is wrong.
 *
 * @example
 * import { parseProgram } from "kiln-ml/program";
 * const { header } = parseProgram(await (await fetch("model.kilnprog")).arrayBuffer());
 * console.log(header.kernels.length, header.variants.length);
 */
export function parseProgram(bytes: ArrayBuffer | ArrayBufferView): ParsedProgram;
