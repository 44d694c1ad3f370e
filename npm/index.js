// kiln-ml: the entry point. The API itself lives in the WebAssembly module (dist/, built by
// cargo and wasm-bindgen from kiln's web/ crate); this file only loads it the same way in browsers,
// bundlers (Vite, webpack) and Node.
import loadWasm from "./dist/kiln_web.js";

export { Device, Tensor, Model, TextModel, memoryReport as memory, version } from "./dist/kiln_web.js";

let ready;

/**
 * Loads and instantiates kiln's WebAssembly module (once; later calls return the same promise).
 * `source` may be a URL, a Response, bytes or a WebAssembly.Module; by default the .wasm file
 * next to this package is used.
 */
export function init(source) {
  ready ??= instantiate(source).catch((e) => {
    ready = undefined;
    throw e;
  });
  return ready;
}

async function instantiate(source) {
  if (source === undefined && typeof process !== "undefined" && process.versions?.node) {
    // Node cannot fetch file: URLs; read the module from disk. The name is in a variable so
    // that bundlers leave this Node-only import alone.
    const fsName = "node:fs/promises";
    const fs = await import(/* @vite-ignore */ /* webpackIgnore: true */ fsName);
    source = await fs.readFile(new URL("./dist/kiln_web_bg.wasm", import.meta.url));
  }
  await loadWasm(source === undefined ? undefined : { module_or_path: source });
}

export default init;
