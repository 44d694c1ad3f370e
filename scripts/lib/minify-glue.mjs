// Minifies wasm-bindgen's JavaScript glue (npm/dist/*.js) for release builds (issue 18, bytes):
// wasm-bindgen writes each export's Rust doc comment as JSDoc and indents for reading, which made
// the CPU page's glue 12.1 KiB of its ~292 KiB gzipped; minified it is about half that. The
// types and docs a user reads are npm/index.d.ts's, hand-written. Class names are kept
// (`constructor.name`, as in messages that name a value's type); exports and property names are
// never renamed by a minifier, only the glue's local names. Uses Vite's bundler rolldown (oxc's
// minifier) from tests/web/node_modules, which ensure_npm_tools installs.
//   node scripts/lib/minify-glue.mjs FILE...   minifies each FILE in place
// npm/check-types.mjs imports minifyGlue to compare npm/dist with a fresh wasm-bindgen run.
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const rolldown = new URL("../../tests/web/node_modules/rolldown/dist/utils-index.mjs", import.meta.url);

/** The minified text of glue `code` (`name` is for error messages). */
export async function minifyGlue(code, name = "glue.js") {
  const { minifySync } = await import(rolldown.href);
  const keepNames = { function: false, class: true };
  const result = minifySync(name, code, {
    module: true,
    compress: { keepNames },
    mangle: { keepNames },
    codegen: { removeWhitespace: true },
  });
  if (result.errors?.length) throw new Error(`minifying ${name}: ${result.errors.map((e) => e.message).join("; ")}`);
  return result.code;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  for (const file of process.argv.slice(2)) writeFileSync(file, await minifyGlue(readFileSync(file, "utf8"), file));
}
