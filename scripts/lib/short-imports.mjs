// Short names for the JavaScript functions a web module imports from its glue (issue 18, bytes).
// wasm-bindgen names each after the function and a 16-digit hash
// (`__wbg_createBuffer_9ec487f1ce102992`), and writes the name twice: in the .wasm's import
// section and as a key of the glue's import object. Random hex does not compress, so the
// WebGPU module's 210 names cost about 5 KiB of the gzipped page. Here each function import
// becomes a short name (`a`, `b`, ... `aa`, ...) in both, numbered in the import section's order:
// the names follow from the module alone, so npm/check-types.mjs repeats this on a fresh
// wasm-bindgen run and compares the glue byte for byte. scripts/build-web.sh runs it right after
// wasm-bindgen, before wasm-opt.
//   node scripts/lib/short-imports.mjs DIR/NAME...   rewrites DIR/NAME_bg.wasm and DIR/NAME.js
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const IMPORT_SECTION = 2;
const FUNC = 0;

/** The `i`-th short name: a..z, then two letters and on (base 26 with no leading zero). */
export function shortName(i) {
  let s = "";
  for (let n = i + 1; n > 0; n = Math.floor((n - 1) / 26)) s = String.fromCharCode(97 + ((n - 1) % 26)) + s;
  return s;
}

/** A byte reader over `bytes`, failing with `what` on malformed input rather than reading past it. */
function reader(bytes, what) {
  let pos = 0;
  const fail = (why) => {
    throw new Error(`${what}: ${why} at byte ${pos}`);
  };
  const byte = () => (pos < bytes.length ? bytes[pos++] : fail("unexpected end of the module"));
  const u32 = () => {
    let value = 0;
    for (let shift = 0; shift < 35; shift += 7) {
      const b = byte();
      value += (b & 0x7f) * 2 ** shift;
      if (b < 0x80) return value <= 0xffffffff ? value : fail("a 32-bit number out of range");
    }
    return fail("a LEB128 number longer than 5 bytes");
  };
  const skipLeb = () => {
    for (let n = 0; n < 10; n++) if (byte() < 0x80) return;
    fail("a LEB128 number longer than 10 bytes");
  };
  const bytesOf = (n) => (pos + n <= bytes.length ? bytes.subarray(pos, (pos += n)) : fail(`${n} bytes past the end`));
  const utf8 = new TextDecoder("utf-8", { fatal: true });
  /** A name: its bytes and its text. */
  const name = () => {
    const raw = bytesOf(u32());
    try {
      return [raw, utf8.decode(raw)];
    } catch {
      return fail("a name that is not UTF-8");
    }
  };
  return { byte, u32, skipLeb, bytesOf, name, fail, at: () => pos, done: () => pos === bytes.length };
}

function leb(n) {
  const out = [];
  do {
    let b = n & 0x7f;
    n = Math.floor(n / 128);
    if (n) b |= 0x80;
    out.push(b);
  } while (n);
  return out;
}

/** Skips an import's description after its kind byte (function, table, memory, global, tag). */
function skipDesc(r, kind) {
  const limits = () => {
    const flags = r.byte();
    if (flags > 7) r.fail(`unknown limits flags ${flags}`);
    r.skipLeb();
    if (flags & 1) r.skipLeb();
  };
  if (kind === 0) r.skipLeb(); // type index
  else if (kind === 1) (r.byte(), limits()); // reference type, limits
  else if (kind === 2) limits();
  else if (kind === 3) (r.byte(), r.byte()); // value type, mutability
  else if (kind === 4) (r.byte(), r.skipLeb()); // attribute, type index
  else r.fail(`unknown import kind ${kind}`);
}

/**
 * `wasm` (bytes) with every function import from `module` renamed to its short name, and that
 * mapping (old name -> new), in import order. Other sections are copied as they are.
 */
export function renameWasmImports(wasm, module, what = "module") {
  const r = reader(wasm, what);
  const header = r.bytesOf(8);
  if (header[0] !== 0 || header[1] !== 0x61 || header[2] !== 0x73 || header[3] !== 0x6d) r.fail("not a WebAssembly module");
  const out = [header];
  const names = new Map();
  while (!r.done()) {
    const id = r.byte();
    const size = r.u32();
    const payload = r.bytesOf(size);
    if (id !== IMPORT_SECTION) {
      out.push(Uint8Array.of(id, ...leb(size)), payload);
      continue;
    }
    const s = reader(payload, `${what}'s import section`);
    const parts = [];
    let count = s.u32();
    parts.push(leb(count));
    for (; count > 0; count--) {
      const [mod, modName] = s.name();
      let [field, fieldName] = s.name();
      const start = s.at();
      const kind = s.byte();
      skipDesc(s, kind);
      const desc = payload.subarray(start, s.at());
      if (kind === FUNC && modName === module) {
        const short = shortName(names.size);
        names.set(fieldName, short);
        field = new TextEncoder().encode(short);
      }
      parts.push(leb(mod.length), mod, leb(field.length), field, desc);
    }
    if (!s.done()) s.fail("bytes after the last import");
    const body = parts.map((p) => Uint8Array.from(p));
    const length = body.reduce((n, p) => n + p.length, 0);
    out.push(Uint8Array.of(id, ...leb(length)), ...body);
  }
  const result = new Uint8Array(out.reduce((n, p) => n + p.length, 0));
  out.reduce((at, p) => (result.set(p, at), at + p.length), 0);
  return { wasm: result, names };
}

/** `js` (wasm-bindgen's glue) with each import object key of `names` renamed; each must occur once. */
export function renameGlueImports(js, names, what = "glue") {
  for (const [old, short] of names) {
    const key = new RegExp(`(?<![\\w$])${old.replace(/\$/g, "\\$")}(?=\\s*:\\s*function\\b)`, "g");
    const found = js.match(key)?.length ?? 0;
    if (found !== 1) throw new Error(`${what}: the import ${old} is a key of the import object ${found} times, expected once`);
    js = js.replace(key, short);
  }
  return js;
}

/** Both files of a module: `wasm` (bytes) and its glue `js`, as wasm-bindgen wrote them for `name`. */
export function shortImports(wasm, js, name) {
  const module = `./${name}_bg.js`;
  const renamed = renameWasmImports(wasm, module, `${name}_bg.wasm`);
  const glue = renameGlueImports(js, renamed.names, `${name}.js`);
  // The module must still compile and import exactly what it did, under the new names.
  const before = WebAssembly.Module.imports(new WebAssembly.Module(wasm));
  const after = WebAssembly.Module.imports(new WebAssembly.Module(renamed.wasm));
  const same = before.length === after.length && before.every((b, i) => {
    const a = after[i];
    const want = b.kind === "function" && b.module === module ? renamed.names.get(b.name) : b.name;
    return a.module === b.module && a.kind === b.kind && a.name === want;
  });
  if (!same) throw new Error(`${name}_bg.wasm: the renamed module's imports do not match the original's`);
  return { wasm: renamed.wasm, js: glue };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  for (const base of process.argv.slice(2)) {
    const name = base.split("/").pop();
    const [wasmFile, jsFile] = [`${base}_bg.wasm`, `${base}.js`];
    const { wasm, js } = shortImports(readFileSync(wasmFile), readFileSync(jsFile, "utf8"), name);
    writeFileSync(wasmFile, wasm);
    writeFileSync(jsFile, js);
  }
}
