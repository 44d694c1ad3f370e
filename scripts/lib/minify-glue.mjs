// Minifies wasm-bindgen's JavaScript glue (npm/dist/*.js) for release builds (issue 18, bytes):
// wasm-bindgen writes each export's Rust doc comment as JSDoc and indents for reading, which made
// the CPU page's glue 12.1 KiB of its ~292 KiB gzipped; minified it is about half that. The
// types and docs a user reads are npm/index.d.ts's, hand-written. Class names are kept
// (`constructor.name`, as in messages that name a value's type); exports and property names are
// never renamed by a minifier, only the glue's local names. Uses Vite's bundler rolldown (oxc's
// minifier) from tests/web/node_modules, which ensure_npm_tools installs.
// The package's own entry files (npm/index.js, thread.js) are minified the same way into the
// packed tarball only (scripts/build-web.sh, which says what it saves), the readable source
// staying in the repository.
//   node scripts/lib/minify-glue.mjs FILE...           minifies each glue FILE in place
//   node scripts/lib/minify-glue.mjs --entry FILE...   the same for entry files (minifyEntry)
// npm/check-types.mjs imports minifyGlue to compare npm/dist with a fresh wasm-bindgen run.
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const rolldown = new URL("../../tests/web/node_modules/rolldown/dist/utils-index.mjs", import.meta.url);

/** The minified text of `code` (`name` is for error messages); `compress: false` only strips and renames. */
export async function minifyGlue(code, name = "glue.js", { compress = true } = {}) {
  const { minifySync } = await import(rolldown.href);
  const keepNames = { function: false, class: true };
  const result = minifySync(name, code, {
    module: true,
    compress: compress && { keepNames },
    mangle: { keepNames },
    codegen: { removeWhitespace: true },
  });
  if (result.errors?.length) throw new Error(`minifying ${name}: ${result.errors.map((e) => e.message).join("; ")}`);
  return result.code;
}

// A dynamic import of a name (not a literal) and the comments before it, which tell bundlers to
// leave it alone (index.js's Node-only `node:fs/promises`).
const namedImport = /import\(\s*((?:\/\*[^*]*\*\/\s*)*)(?=[A-Za-z_$])/g;

/**
 * The minified text of an entry file of the package. No compression pass: it would inline
 * index.js's module name into its import(), where bundlers would try to resolve it. The
 * minifier drops comments, so each named import's bundler comments are put back, in order.
 */
export async function minifyEntry(code, name = "index.js") {
  const comments = [...code.matchAll(namedImport)].map((m) => m[1].trim());
  const out = await minifyGlue(code, name, { compress: false });
  let i = 0;
  const restored = out.replace(namedImport, () => `import(${comments[i++] ?? ""} `);
  if (i !== comments.length) {
    throw new Error(`minifying ${name}: ${comments.length} named dynamic imports in the source, ${i} minified`);
  }
  return restored;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const entry = process.argv[2] === "--entry";
  const minify = entry ? minifyEntry : minifyGlue;
  for (const file of process.argv.slice(entry ? 3 : 2)) {
    writeFileSync(file, await minify(readFileSync(file, "utf8"), file));
  }
}
