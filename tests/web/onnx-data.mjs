// ONNX test data for the web tests: where the conformance data is (the lookup of
// onnx/tests/common: $KILN_ONNX_SUITES, else shared/conformance in the working directory or a
// parent) and a minimal reader of the FLOAT and INT64 TensorProtos of its test_data_set_N folders.
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
 * The FLOAT (1) or INT64 (7) TensorProto in `bytes` as { dims, dataType, data }: data a
 * Float32Array or, for INT64, an array of Numbers (exact within +-2^53 from raw_data, and for
 * 0 to 2^53 from int64_data's varints). Reads dims (field 1),
 * data_type (2), float_data (4), int64_data (7) and raw_data (9), and skips every other field.
 */
export function tensorProto(bytes) {
  const b = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const dims = [];
  let floats = [];
  let ints = [];
  let raw = null;
  let dataType;
  // int64_data's varints hold two's complement: 2^64 - |v| for a negative v
  const signed = (v) => (v >= 2 ** 63 ? v - 2 ** 64 : v);
  for (let at = 0; at < b.length; ) {
    let key;
    [key, at] = varint(b, at);
    const [field, wire] = [Math.floor(key / 8), key & 7];
    if (wire === 0) {
      let v;
      [v, at] = varint(b, at);
      if (field === 1) dims.push(v);
      if (field === 2) dataType = v;
      if (field === 7) ints.push(signed(v));
    } else if (wire === 2) {
      let len;
      [len, at] = varint(b, at);
      const end = at + len;
      if (field === 1) for (let p = at; p < end; ) { let v; [v, p] = varint(b, p); dims.push(v); }
      if (field === 4) for (let p = at; p < end; p += 4) floats.push(view.getFloat32(p, true));
      if (field === 7) for (let p = at; p < end; ) { let v; [v, p] = varint(b, p); ints.push(signed(v)); }
      if (field === 9) raw = [at, end];
      at = end;
    } else if (wire === 5) {
      if (field === 4) floats.push(view.getFloat32(at, true));
      at += 4;
    } else if (wire === 1) at += 8;
    else throw new Error(`TensorProto: wire type ${wire} unexpected`);
  }
  if (dataType !== 1 && dataType !== 7) throw new Error(`TensorProto: data_type ${dataType}, expected FLOAT (1) or INT64 (7)`);
  if (raw) {
    const [from, to] = raw;
    if (dataType === 1) for (let p = from; p < to; p += 4) floats.push(view.getFloat32(p, true));
    else for (let p = from; p < to; p += 8) ints.push(Number(view.getBigInt64(p, true)));
  }
  const data = dataType === 1 ? Float32Array.from(floats) : ints;
  const count = dims.reduce((a, d) => a * d, 1);
  if (data.length !== count) throw new Error(`TensorProto: ${data.length} elements for dims [${dims}]`);
  return { dims, dataType, data };
}

/** The float32 TensorProto in `bytes` as { dims, data } (`tensorProto`, which must find FLOAT). */
export function floatTensor(bytes) {
  const t = tensorProto(bytes);
  if (t.dataType !== 1) throw new Error(`TensorProto: data_type ${t.dataType}, expected FLOAT (1)`);
  return { dims: t.dims, data: t.data };
}
