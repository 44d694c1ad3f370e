// ONNX test data for the web tests: where the conformance data is (the lookup of
// onnx/tests/common: $KILN_ONNX_SUITES, else shared/conformance in the working directory or a
// parent) and a minimal reader of the float TensorProtos of its test_data_set_N folders.
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";

/** The ONNX conformance data: $KILN_ONNX_SUITES, else shared/conformance here or in a parent. */
export function suitesDir() {
  if (process.env.KILN_ONNX_SUITES) return process.env.KILN_ONNX_SUITES;
  for (let d = resolve(process.cwd()); ; d = dirname(d)) {
    const c = join(d, "shared", "conformance");
    if (existsSync(c)) return c;
    if (dirname(d) === d) return undefined;
  }
}

/** shared/conformance/models/mnist (the ONNX Model Zoo's MNIST classifiers), or undefined. */
export function mnistOnnxDir() {
  const suites = suitesDir();
  const dir = suites && join(suites, "models", "mnist");
  return dir && existsSync(dir) ? dir : undefined;
}

/** A protobuf varint at `at`: [value, next offset]. */
function varint(b, at) {
  let v = 0;
  for (let shift = 1; ; shift *= 128) {
    const c = b[at++];
    v += (c & 0x7f) * shift;
    if (c < 0x80) return [v, at];
  }
}

/**
 * The float32 TensorProto in `bytes` as { dims, data }: reads dims (field 1), data_type (2; must
 * be FLOAT, 1), float_data (4) and raw_data (9), and skips every other field.
 */
export function floatTensor(bytes) {
  const b = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const dims = [];
  let floats = [];
  let dataType;
  for (let at = 0; at < b.length; ) {
    let key;
    [key, at] = varint(b, at);
    const [field, wire] = [Math.floor(key / 8), key & 7];
    if (wire === 0) {
      let v;
      [v, at] = varint(b, at);
      if (field === 1) dims.push(v);
      if (field === 2) dataType = v;
    } else if (wire === 2) {
      let len;
      [len, at] = varint(b, at);
      const end = at + len;
      if (field === 1) for (let p = at; p < end; ) { let v; [v, p] = varint(b, p); dims.push(v); }
      if (field === 4 || field === 9) {
        floats = [];
        for (let p = at; p < end; p += 4) floats.push(view.getFloat32(p, true));
      }
      at = end;
    } else if (wire === 5) {
      if (field === 4) floats.push(view.getFloat32(at, true));
      at += 4;
    } else if (wire === 1) at += 8;
    else throw new Error(`TensorProto: wire type ${wire} unexpected`);
  }
  if (dataType !== 1) throw new Error(`TensorProto: data_type ${dataType}, expected FLOAT (1)`);
  const count = dims.reduce((a, d) => a * d, 1);
  if (floats.length !== count) throw new Error(`TensorProto: ${floats.length} elements for dims [${dims}]`);
  return { dims, data: Float32Array.from(floats) };
}
