// Checks the hand-written npm/index.d.ts against what the package really exports, so that a
// method added to web/src without index.d.ts (or declared in index.d.ts but not exported) fails.
//   node npm/check-types.mjs           check; exit 1 with one line per difference
//   node npm/check-types.mjs --write   first rewrite index.d.ts's generated block (Tensor's
//                                      no-argument elementwise ops) from the bindings, then check
//   --dts FILE                         use this wasm-bindgen declaration file (default: see below)
// Needs the built package (scripts/build-web.sh). What is compared:
//   - exports: every export of the wasm module (less the allow-list below) is re-exported by
//     npm/index.js, and index.d.ts declares exactly the values npm/index.js exports (npm/index.js
//     and the module are imported, so renames such as `memoryReport as memory` are seen as is);
//   - classes: for each class, the public members of wasm-bindgen's declaration and of
//     index.d.ts: static methods, methods, readonly and writable properties (getters), by name
//     and kind. Parameters and types are not compared (wasm-bindgen types most of them `any`);
//   - the generated block: it must be exactly what --write would write;
//   - the CPU-only modules (dist/kiln_web_cpu.js, dist/kiln_web_threads_cpu.js) export what their
//     WebGPU twins do, member for member; the text modules (dist/kiln_web_text.js and its
//     threaded build) export what their main module does and TextModel, whose members
//     index.d.ts declares.
//
// The declarations: build-web.sh runs wasm-bindgen with --no-typescript, so unless
// npm/dist/kiln_web.d.ts exists this script runs wasm-bindgen again on cargo's kiln_web.wasm, in
// a temporary folder: once as build-web.sh does (its kiln_web.js, with short import names and
// minified as a release build's is, must be npm/dist's byte for byte: the declarations then
// describe the module that was packed), once with TypeScript on.
//
// Parsing: a small scanner splits a .d.ts into statements (comments, strings and bracket nesting
// respected, so `options?: { low?: number; high?: number }` stays one member), keeping each
// statement's `/** */` comment; class bodies are split the same way, one member per statement.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { minifyGlue } from "../scripts/lib/minify-glue.mjs";
import { shortImports } from "../scripts/lib/short-imports.mjs";

const NPM = fileURLToPath(new URL(".", import.meta.url));
const ROOT = resolve(NPM, "..");
const HAND = join(NPM, "index.d.ts");
const DIST_JS = join(NPM, "dist", "kiln_web.js");
// The text-generation module: the main module with TextModel, which npm/index.js wraps.
const TEXT = "kiln_web_text";

// ---------------------------------------------------------------------------- allow-list
// wasm-bindgen output that is not part of kiln-ml's API. These never need declaring in
// index.d.ts; index.d.ts may still declare one the bindings have (it declares `free()`).
const ALLOWED_EXPORTS = {
  // npm/index.js's memory() sums it over the main module and the text module (its TextModels).
  memoryReport: "the module's memory report, which memory() wraps",
  // wasm-bindgen's async loader (`__wbg_init`); npm/index.js wraps it as its own init/default.
  default: "wasm-bindgen's loader",
  // The synchronous loader; kiln-ml offers only the async init().
  initSync: "wasm-bindgen's synchronous loader",
  // `#[wasm_bindgen(start)]` in web/src/lib.rs: wasm-bindgen runs it when the module is
  // instantiated; calling it again is useless.
  start: "the module's start function",
  // The types of the loaders' arguments and result (InitOutput: the raw wasm exports).
  InitInput: "a loader type",
  InitOutput: "a loader type",
  SyncInitInput: "a loader type",
};
// wasm-bindgen's own glue names, should one ever be exported at the top level.
const ALLOWED_EXPORT_PREFIXES = ["__wbg", "__wbindgen"];
// Members wasm-bindgen gives every exported class.
const ALLOWED_MEMBERS = {
  free: "frees the Rust value (index.d.ts declares it; dispose() is kiln's name for it)",
  "[Symbol.dispose]": "`using` support, the same as free()",
};
// Members of one class that are kiln's internals.
const ALLOWED_CLASS_MEMBERS = {
  // Read by Tensor::from_js (web/src/tensor.rs) to find the tensor behind a JS value.
  "Tensor.__kilnHandle": "internal handle",
};

// The generated block: Tensor's no-argument elementwise ops. web/src/tensor.rs documents each
// `#[doc = concat!("Elementwise `", ..., "`.")]`, but wasm-bindgen 0.2.130 keeps only plain
// string literals of doc attributes, so today these methods reach the declarations with no doc
// comment at all. A method qualifies when it takes no argument, returns Tensor and its doc starts
// with DOC_PREFIX or it has none (every hand-written export in web/src has a `///` doc); one
// without a doc gets `Elementwise `name`.`, the doc tensor.rs means.
const BLOCK_CLASS = "Tensor";
const BLOCK_BEGIN = "// <generated: unary ops (node npm/check-types.mjs --write)>";
const BLOCK_END = "// </generated>";
const DOC_PREFIX = "Elementwise `";

// ---------------------------------------------------------------------------- parsing
// Splits declaration source into statements { text, raw, doc }: text without comments, raw the
// source from the statement's first token, doc the text of the last `/** */` before that token.
function statements(src) {
  const out = [];
  let text = "";
  let doc = null;
  let start = -1;
  let depth = 0;
  const flush = (end) => {
    if (text.trim()) out.push({ text: text.trim(), raw: src.slice(start, end), doc });
    text = "";
    doc = null;
    start = -1;
  };
  for (let i = 0; i < src.length; ) {
    const c = src[i];
    if (src.startsWith("//", i)) {
      const eol = src.indexOf("\n", i);
      i = eol < 0 ? src.length : eol;
      continue;
    }
    if (src.startsWith("/*", i)) {
      const close = src.indexOf("*/", i + 2);
      if (close < 0) throw new Error("unterminated comment");
      if (start < 0 && src.startsWith("/**", i)) doc = docText(src.slice(i + 3, close));
      i = close + 2;
      text += " ";
      continue;
    }
    if (start < 0 && !/\s/.test(c)) start = i;
    if (c === '"' || c === "'" || c === "`") {
      // A string (literal type): copied whole, whatever brackets or `;` it holds.
      let j = i + 1;
      while (j < src.length && src[j] !== c) j += src[j] === "\\" ? 2 : 1;
      text += src.slice(i, j + 1);
      i = j + 1;
      continue;
    }
    text += c;
    i++;
    if ("({[".includes(c)) depth++;
    else if (")}]".includes(c)) {
      if (--depth < 0) throw new Error(`unbalanced '${c}' near: ${text.trim().slice(-60)}`);
      // A class, interface, enum or namespace ends at its closing brace, with no `;`.
      const body = /^(export\s+)?(default\s+)?(declare\s+)?(abstract\s+)?(class|interface|enum|namespace)\b/;
      if (depth === 0 && c === "}" && body.test(text.trim())) flush(i);
    } else if (c === ";" && depth === 0) flush(i);
  }
  flush(src.length);
  return out;
}

// The text of a `/** */` comment body: lines without their leading `*`, joined by spaces.
function docText(body) {
  return body
    .split("\n")
    .map((l) => l.replace(/^\s*\*?\s?/, "").trim())
    .filter(Boolean)
    .join(" ");
}

// The public members of a class statement: Map "name" or "static name" -> member.
function classMembers(stmt) {
  const body = stmt.raw.slice(stmt.raw.indexOf("{") + 1, stmt.raw.lastIndexOf("}"));
  const members = new Map();
  for (const s of statements(body)) {
    // [access] [static] [readonly] [get|set] name[?] [<generics>] then `(` (a method) or `:`.
    const m = new RegExp(
      String.raw`^(?:(public|private|protected)\s+)?(static\s+)?(readonly\s+)?(?:(get|set)\s+(?=[\w$[]))?` +
        String.raw`([\w$]+|\[[^\]]*\])\??\s*(?:<[^(]*>)?\s*([(:])`,
    ).exec(s.text);
    if (!m) throw new Error(`cannot read this class member: ${s.text}`);
    const [, access, isStatic, readonly, accessor, name, open] = m;
    if (access === "private" || access === "protected") continue; // `private constructor();`
    let params = "";
    let returns = s.text.slice(m[0].length).replace(/;$/, "").trim();
    if (open === "(") {
      // The parameter list runs to its matching `)`; the return type follows `:`.
      let depth = 1;
      let j = m[0].length;
      for (; j < s.text.length && depth > 0; j++) {
        if ("({[".includes(s.text[j])) depth++;
        else if (")}]".includes(s.text[j])) depth--;
      }
      params = s.text.slice(m[0].length, j - 1).trim();
      returns = s.text.slice(j).replace(/^\s*:/, "").replace(/;$/, "").trim();
    }
    const key = (isStatic ? "static " : "") + name;
    const prev = members.get(key);
    const member = prev ?? { name, static: Boolean(isStatic), doc: s.doc, params, returns };
    if (open === "(" && !accessor) member.method = true;
    else {
      // `readonly x: T` or a getter alone is read-only; a setter or a plain `x: T` writable.
      member.property = true;
      member.readable ||= accessor !== "set";
      member.writable ||= accessor === "set" || (!accessor && !readonly);
    }
    members.set(key, member);
  }
  return members;
}

function kindOf(member) {
  const what = member.method
    ? "method"
    : member.writable
      ? "property"
      : "readonly property";
  return (member.static ? "static " : "") + what;
}

// The top-level declarations of a .d.ts: classes (name -> members), and the kind of each value
// export ("class", "function", "value"; `export default` is named "default") and type export.
function declarations(src, file) {
  const classes = new Map();
  const values = new Map();
  const types = new Set();
  for (const s of statements(src)) {
    const t = s.text;
    let m;
    if ((m = /^export\s+(?:declare\s+)?(?:abstract\s+)?class\s+([\w$]+)/.exec(t))) {
      classes.set(m[1], classMembers(s));
      values.set(m[1], "class");
    } else if (/^export\s+default\b/.test(t)) values.set("default", "value");
    else if ((m = /^export\s+(?:declare\s+)?(?:async\s+)?function\s+([\w$]+)/.exec(t)))
      values.set(m[1], "function");
    else if ((m = /^export\s+(?:declare\s+)?(?:const|let|var|enum)\s+([\w$]+)/.exec(t)))
      values.set(m[1], "value");
    else if ((m = /^export\s+(?:declare\s+)?(?:type|interface)\s+([\w$]+)/.exec(t))) types.add(m[1]);
    else if ((m = /^export\s*\{([^}]*)\}/.exec(t))) {
      for (const part of m[1].split(",").filter((p) => p.trim())) {
        values.set(part.trim().split(/\s+as\s+/).pop(), "value");
      }
    } else if (/^export\b/.test(t)) {
      // Anything else (export =, export *, namespaces) would be silently unchecked: refuse.
      throw new Error(`${file}: cannot read this export: ${t.slice(0, 80)}`);
    }
  }
  return { classes, values, types };
}

// ---------------------------------------------------------------------------- inputs
function option(name) {
  const i = process.argv.indexOf(name);
  return i < 0 ? undefined : process.argv[i + 1];
}

function fail(message) {
  console.error(`check-types: ${message}`);
  process.exit(1);
}

const rel = (p) => relative(ROOT, p) || p;

// wasm-bindgen's declarations of the module `name` in npm/dist: { file, text }. Cargo's .wasm of
// the main module is kiln_web.wasm; build-web.sh keeps a copy of the text module's as
// kiln_web_text.wasm.
async function bindingsDts(name = "kiln_web") {
  const given = name === "kiln_web" ? option("--dts") : undefined;
  if (given) return { file: given, text: readFileSync(given, "utf8") };
  // build-web.sh empties npm/dist before wasm-bindgen writes it: a .d.ts there is from that run.
  const inDist = join(NPM, "dist", `${name}.d.ts`);
  if (existsSync(inDist)) return { file: rel(inDist), text: readFileSync(inDist, "utf8") };
  const distFile = join(NPM, "dist", `${name}.js`);
  if (!existsSync(distFile)) fail(`${rel(distFile)} is missing: build the package first (scripts/build-web.sh)`);

  const tools = process.env.KILN_TOOLS ? resolve(ROOT, process.env.KILN_TOOLS) : join(ROOT, "target", "tools");
  const bindgen = [join(tools, "bin", "wasm-bindgen")].find(existsSync) ?? "wasm-bindgen";
  const target = resolve(ROOT, process.env.CARGO_TARGET_DIR || "target");
  const wasms = ["release", "debug"]
    .map((profile) => join(target, "wasm32-unknown-unknown", profile, `${name}.wasm`))
    .filter(existsSync)
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  const distJs = readFileSync(distFile, "utf8");
  const tmp = mkdtempSync(join(tmpdir(), "kiln-check-types-"));
  const bindgenTo = (wasm, dir, ...flags) =>
    execFileSync(bindgen, ["--target", "web", ...flags, "--out-dir", dir, "--out-name", name, wasm], {
      stdio: ["ignore", "ignore", "inherit"],
    });
  let found;
  let error;
  try {
    for (const wasm of wasms) {
      bindgenTo(wasm, join(tmp, "js"), "--no-typescript");
      // build-web.sh shortens the import names (scripts/lib/short-imports.mjs), and a release
      // build minifies the glue (scripts/lib/minify-glue.mjs); a quick one does not.
      const fresh = (ext) => join(tmp, "js", `${name}${ext}`);
      const { js } = shortImports(readFileSync(fresh("_bg.wasm")), readFileSync(fresh(".js"), "utf8"), name);
      if (js !== distJs && (await minifyGlue(js)) !== distJs) continue;
      bindgenTo(wasm, join(tmp, "ts"));
      const text = readFileSync(join(tmp, "ts", `${name}.d.ts`), "utf8");
      found = { file: `wasm-bindgen's declarations of ${rel(wasm)}`, text };
      break;
    }
  } catch (e) {
    error = e;
  }
  rmSync(tmp, { recursive: true, force: true });
  if (error) {
    const why = error.code === "ENOENT" ? "not found" : `failed (${error.code ?? `exit ${error.status}`})`;
    fail(`${bindgen} ${why}; scripts/build-web.sh installs it into target/tools`);
  }
  if (found) return found;
  fail(
    `no ${name}.wasm under ${rel(target)}/wasm32-unknown-unknown/{release,debug} gives ${rel(distFile)}: ` +
      "npm/dist is stale or was built elsewhere; rebuild it (scripts/build-web.sh)",
  );
}

// ---------------------------------------------------------------------------- the generated block
// The methods the block declares, from the bindings' BLOCK_CLASS: [{ name, doc }] sorted by name.
function blockMethods(bindings) {
  const out = [];
  for (const m of bindings.classes.get(BLOCK_CLASS)?.values() ?? []) {
    if (m.static || !m.method || m.params !== "" || m.returns !== BLOCK_CLASS) continue;
    if (m.doc && !m.doc.startsWith(DOC_PREFIX)) continue;
    out.push({ name: m.name, doc: m.doc || `${DOC_PREFIX}${m.name}\`.` });
  }
  return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

// The block's place in index.d.ts: { lines, begin, end, indent } (line indexes of the markers).
function findBlock(text) {
  const lines = text.split("\n");
  const at = (marker) => lines.flatMap((l, i) => (l.trim() === marker ? [i] : []));
  const [begins, ends] = [at(BLOCK_BEGIN), at(BLOCK_END)];
  const cls = lines.findIndex((l) => new RegExp(`^export\\s+(declare\\s+)?class\\s+${BLOCK_CLASS}\\b`).test(l));
  const clsEnd = lines.findIndex((l, i) => i > cls && /^}/.test(l));
  if (begins.length !== 1 || ends.length !== 1 || !(cls < begins[0] && begins[0] < ends[0] && ends[0] < clsEnd)) {
    fail(`index.d.ts: expected one "${BLOCK_BEGIN}" ... "${BLOCK_END}" block inside class ${BLOCK_CLASS}`);
  }
  return { lines, begin: begins[0], end: ends[0], indent: lines[begins[0]].match(/^\s*/)[0] };
}

function blockLines(methods, indent) {
  return methods.flatMap((m) => [`${indent}/** ${m.doc} */`, `${indent}${m.name}(): ${BLOCK_CLASS};`]);
}

// ---------------------------------------------------------------------------- main
const dts = await bindingsDts();
let bindings;
try {
  bindings = declarations(dts.text, dts.file);
} catch (e) {
  fail(e.message);
}
let handText = readFileSync(HAND, "utf8");
const methods = blockMethods(bindings);

if (process.argv.includes("--write")) {
  const { lines, begin, end, indent } = findBlock(handText);
  const next = [...lines.slice(0, begin + 1), ...blockLines(methods, indent), ...lines.slice(end)].join("\n");
  if (next !== handText) writeFileSync(HAND, next);
  const how = next !== handText ? "rewritten" : "already up to date";
  console.log(`index.d.ts: generated block ${how} (${methods.length} ${BLOCK_CLASS} methods)`);
  handText = next;
}

const problems = [];
const block = findBlock(handText);
let hand;
let outside; // index.d.ts without the generated block: to find hand-written copies of its methods
try {
  hand = declarations(handText, "index.d.ts");
  const rest = [...block.lines.slice(0, block.begin), ...block.lines.slice(block.end + 1)];
  outside = declarations(rest.join("\n"), "index.d.ts");
} catch (e) {
  fail(e.message);
}

// The generated block is what --write writes.
const actual = block.lines.slice(block.begin + 1, block.end);
const expected = blockLines(methods, block.indent);
if (actual.join("\n") !== expected.join("\n")) {
  const names = (ls) => new Set(ls.flatMap((l) => l.match(/^\s*([\w$]+)\s*\(/)?.[1] ?? []));
  const [have, want] = [names(actual), names(expected)];
  const missing = [...want].filter((n) => !have.has(n));
  const extra = [...have].filter((n) => !want.has(n));
  const what = [missing.length && `missing ${missing.join(", ")}`, extra.length && `extra ${extra.join(", ")}`];
  problems.push(
    `index.d.ts: the generated block of ${BLOCK_CLASS} differs from the bindings ` +
      `(${what.filter(Boolean).join("; ") || "doc comments or layout"}): run node npm/check-types.mjs --write`,
  );
}
for (const m of methods) {
  if (outside.classes.get(BLOCK_CLASS)?.has(m.name)) {
    problems.push(
      `index.d.ts: ${BLOCK_CLASS}.${m.name} is declared by hand as well as in the generated block: ` +
        "delete the hand-written one",
    );
  }
}

// Exports: the wasm module's, npm/index.js's (the package's entry point) and index.d.ts's.
const glue = await import(pathToFileURL(DIST_JS).href);
const entry = await import(pathToFileURL(join(NPM, "index.js")).href);
// index.js binds its exports to the module init() loads: the main one here.
await entry.init(undefined, { webgpu: true });
// The CPU-only builds have their WebGPU twins' APIs, name for name and member for member.
const apiOf = (g) =>
  Object.keys(g)
    .sort()
    .map((k) => {
      const v = g[k];
      if (typeof v !== "function" || !v.prototype) return k;
      const members = [...Object.getOwnPropertyNames(v), ...Object.getOwnPropertyNames(v.prototype).map((m) => `#${m}`)];
      return `${k}(${members.sort().join(" ")})`;
    });
for (const [name, of] of [["kiln_web_cpu", "kiln_web"], ["kiln_web_threads_cpu", "kiln_web_threads"]]) {
  const file = join(NPM, "dist", `${name}.js`);
  // The threaded builds are missing from a package built with KILN_WEB_THREADS=0.
  if (name.includes("threads") && !existsSync(file)) continue;
  const load = (n) => (n === "kiln_web" ? glue : import(pathToFileURL(join(NPM, "dist", `${n}.js`)).href));
  const [withGpu, cpuOnly] = [apiOf(await load(of)), apiOf(await load(name))];
  for (const x of withGpu.filter((k) => !cpuOnly.includes(k))) problems.push(`dist/${name}.js lacks ${of}'s ${x}`);
  for (const x of cpuOnly.filter((k) => !withGpu.includes(k))) problems.push(`dist/${name}.js has ${x}, which ${of} lacks`);
}
const wasmNameOf = new Map(); // an index.js export -> the wasm export it re-exports
for (const name of Object.keys(entry)) {
  const same = Object.keys(glue).find((g) => glue[g] === entry[name]);
  if (same !== undefined) wasmNameOf.set(name, same);
}
const allowed = (name) => name in ALLOWED_EXPORTS || ALLOWED_EXPORT_PREFIXES.some((p) => name.startsWith(p));
for (const [name, kind] of bindings.values) {
  if (!allowed(name) && ![...wasmNameOf.values()].includes(name)) {
    problems.push(`npm/index.js: ${kind} ${name} is exported by the wasm module but not re-exported`);
  }
}
for (const name of bindings.types) {
  if (!allowed(name) && !hand.types.has(name)) {
    problems.push(`index.d.ts: type ${name} is exported by the wasm module but not declared`);
  }
}
for (const name of Object.keys(entry)) {
  const kind = wasmNameOf.has(name) ? bindings.values.get(wasmNameOf.get(name)) : undefined;
  if (!hand.values.has(name)) {
    problems.push(`index.d.ts: ${kind ? `${kind} ` : ""}${name} is exported by npm/index.js but not declared`);
  } else if (kind === "class" || kind === "function") {
    // A wasm class must stay a class in index.d.ts, a function a function (`export default x;`
    // and `export { x }` say nothing of the kind: "value").
    if (hand.values.get(name) === "value" || hand.values.get(name) === kind) continue;
    problems.push(`index.d.ts: ${name} is a ${kind} in the bindings but declared as a ${hand.values.get(name)}`);
  }
}
for (const name of hand.values.keys()) {
  if (!(name in entry)) problems.push(`index.d.ts: ${name} is declared but not exported by npm/index.js`);
}

// Classes, member by member: index.d.ts's class `name` against the bindings' `ours`.
let classCount = 0;
let memberCount = 0;
function compareClass(name, ours, theirs) {
  const exempt = (m) => m.name in ALLOWED_MEMBERS || `${name}.${m.name}` in ALLOWED_CLASS_MEMBERS;
  classCount++;
  memberCount += [...ours.values()].filter((m) => !exempt(m)).length;
  const missing = [...ours].filter(([key, m]) => !theirs.has(key) && !exempt(m));
  const extra = [...theirs].filter(([key]) => !ours.has(key));
  const mismatch = (m, e) =>
    `index.d.ts: ${name}.${m.name} is a ${kindOf(m)} in the bindings but a ${kindOf(e)} in index.d.ts`;
  for (const [key, m] of ours) {
    if (theirs.has(key) && kindOf(theirs.get(key)) !== kindOf(m)) problems.push(mismatch(m, theirs.get(key)));
  }
  for (const [, m] of missing) {
    // The same name on the other side of `static` is one mistake, reported once.
    const twin = extra.findIndex(([, e]) => e.name === m.name);
    if (twin >= 0) {
      const [[, e]] = extra.splice(twin, 1);
      problems.push(mismatch(m, e));
    } else problems.push(`index.d.ts: ${name}.${m.name} is exported by the wasm module but not declared`);
  }
  for (const [, e] of extra) {
    problems.push(`index.d.ts: ${name}.${e.name} is declared but not exported by the wasm module`);
  }
}
for (const [name, wasmName] of wasmNameOf) {
  const [ours, theirs] = [bindings.classes.get(wasmName), hand.classes.get(name)];
  if (ours && theirs) compareClass(name, ours, theirs);
}
// The text module is the main module with TextModel: the same API plus that class, which
// npm/index.js's TextModel.load hands out (index.js's own TextModel only loads the module).
const textDts = await bindingsDts(TEXT);
let textBindings;
try {
  textBindings = declarations(textDts.text, textDts.file);
} catch (e) {
  fail(e.message);
}
const textGlue = await import(pathToFileURL(join(NPM, "dist", `${TEXT}.js`)).href);
const [mainApi, textApi] = [apiOf(glue), apiOf(textGlue).filter((k) => !k.startsWith("TextModel("))];
for (const x of mainApi.filter((k) => !textApi.includes(k))) problems.push(`dist/${TEXT}.js lacks kiln_web's ${x}`);
for (const x of textApi.filter((k) => !mainApi.includes(k))) problems.push(`dist/${TEXT}.js has ${x}, which kiln_web lacks`);
// Its threaded build likewise: the threaded main module's API and TextModel.
const threadsText = join(NPM, "dist", "kiln_web_threads_text.js");
if (existsSync(threadsText)) {
  const withText = apiOf(await import(pathToFileURL(threadsText).href));
  const plain = apiOf(await import(pathToFileURL(join(NPM, "dist", "kiln_web_threads.js")).href));
  const textModel = apiOf(textGlue).filter((k) => k.startsWith("TextModel("));
  for (const x of [...plain, ...textModel].filter((k) => !withText.includes(k))) problems.push(`dist/kiln_web_threads_text.js lacks ${x}`);
  for (const x of withText.filter((k) => !plain.includes(k) && !textModel.includes(k))) {
    problems.push(`dist/kiln_web_threads_text.js has ${x}, which kiln_web_threads and TextModel lack`);
  }
}
if (!textBindings.classes.has("TextModel") || !hand.classes.has("TextModel")) {
  problems.push(`TextModel must be a class of dist/${TEXT}.js and of index.d.ts`);
} else compareClass("TextModel", textBindings.classes.get("TextModel"), hand.classes.get("TextModel"));

if (problems.length) {
  for (const p of problems) console.error(p);
  const count = `${problems.length} problem${problems.length > 1 ? "s" : ""}`;
  console.error(`check-types: index.d.ts does not match the bindings (${count}; bindings: ${dts.file})`);
  process.exit(1);
}
const functions = [...hand.values.values()].filter((k) => k === "function").length;
console.log(
  `index.d.ts matches the bindings: ${classCount} classes, ${memberCount} members, ${functions} functions ` +
    `(${methods.length} in the generated block)`,
);
