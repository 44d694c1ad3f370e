// scripts/lib/short-imports.mjs: the import section rewrite on hand-made modules (every import
// kind, limits with and without a maximum), malformed and truncated modules refused with an
// error (a seeded fuzz), and the built package's modules and glue carrying only short names.
//   node --test tests/web/node/
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { renameGlueImports, renameWasmImports, shortName, shortImports } from "../../../scripts/lib/short-imports.mjs";
import { rand } from "./helpers.mjs";

const bytes = (s) => [...new TextEncoder().encode(s)];
const str = (s) => [bytes(s).length, ...bytes(s)];
const leb = (n) => (n < 128 ? [n] : [(n & 0x7f) | 0x80, ...leb(n >> 7)]);
const section = (id, body) => [id, ...leb(body.length), ...body];

/** A module importing, from `mod`, `names` as functions () -> (), then a table, a memory and a global. */
function moduleWith(mod, names) {
  const types = section(1, [1, 0x60, 0, 0]);
  const imports = [names.length + 3];
  for (const n of names) imports.push(...str(mod), ...str(n), 0, 0);
  imports.push(...str(mod), ...str("table"), 1, 0x70, 0, 2); // funcref table, min 2
  imports.push(...str(mod), ...str("memory"), 2, 1, 1, 3); // memory, min 1, max 3
  imports.push(...str("other"), ...str("g"), 3, 0x7f, 0); // immutable i32 global
  return Uint8Array.from([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, ...types, ...section(2, imports)]);
}

test("short names are distinct identifiers, a..z then two letters", () => {
  const names = Array.from({ length: 2000 }, (_, i) => shortName(i));
  assert.equal(new Set(names).size, names.length);
  assert.deepEqual([names[0], names[25], names[26], names[27], names[701], names[702]], ["a", "z", "aa", "ab", "zz", "aaa"]);
  for (const n of names) assert.match(n, /^[a-z]+$/);
});

test("function imports from the glue's module are renamed in order, the rest kept", () => {
  const long = ["__wbg_Error_208446807d0d1e30", "__wbg_model_new", "__wbindgen_init_externref_table"];
  const wasm = moduleWith("./m_bg.js", long);
  const { wasm: out, names } = renameWasmImports(wasm, "./m_bg.js");
  assert.deepEqual([...names], [[long[0], "a"], [long[1], "b"], [long[2], "c"]]);
  const imports = WebAssembly.Module.imports(new WebAssembly.Module(out));
  assert.deepEqual(imports.map((i) => `${i.module} ${i.name} ${i.kind}`), [
    "./m_bg.js a function", "./m_bg.js b function", "./m_bg.js c function",
    "./m_bg.js table table", "./m_bg.js memory memory", "other g global",
  ]);
  // Another module's imports are left alone.
  assert.deepEqual(renameWasmImports(wasm, "./other_bg.js").wasm, wasm);
  // The glue's keys follow; a key missing or repeated is an error naming it.
  const glue = `const i={__proto__:null,${long.map((n) => `${n}:function(){}`).join(",")}};`;
  assert.equal(renameGlueImports(glue, names), "const i={__proto__:null,a:function(){},b:function(){},c:function(){}};");
  assert.throws(() => renameGlueImports(glue.replace(long[1], "x"), names), /__wbg_model_new is a key of the import object 0 times/);
  assert.throws(() => shortImports(wasm, glue + glue, "m"), /is a key of the import object 2 times/);
});

test("malformed modules are refused with an error, never read past their end (seeded fuzz)", () => {
  const wasm = moduleWith("./m_bg.js", ["f", "g", "h"]);
  assert.throws(() => renameWasmImports(Uint8Array.of(1, 2, 3, 4, 5, 6, 7, 8), "./m_bg.js"), /not a WebAssembly module/);
  // Cut anywhere in the import section, which follows the header (8 bytes) and the type section
  // (6): cut at a section's end, the rest would be a whole module.
  for (let n = 15; n < wasm.length; n++) {
    assert.throws(() => renameWasmImports(wasm.subarray(0, n), "./m_bg.js"), Error, `truncated to ${n} bytes`);
  }
  const noise = rand(4000, 7);
  for (let trial = 0; trial < 1000; trial++) {
    const bad = Uint8Array.from(wasm);
    const at = 8 + Math.floor(Math.abs(noise[trial]) * (wasm.length - 8));
    bad[at] = Math.floor(Math.abs(noise[trial + 1000]) * 256);
    try {
      const { wasm: out } = renameWasmImports(bad, "./m_bg.js");
      assert.ok(out instanceof Uint8Array);
    } catch (e) {
      assert.ok(e instanceof Error && /at byte \d+/.test(e.message), `trial ${trial}: ${e}`);
    }
  }
});

test("the built modules import their glue's functions under short names only", () => {
  const dist = new URL("../../../npm/dist/", import.meta.url);
  const modules = readdirSync(dist).filter((f) => f.endsWith("_bg.wasm")).map((f) => f.slice(0, -"_bg.wasm".length));
  assert.ok(modules.includes("kiln_web_gpu") && modules.includes("kiln_web_cpu"), modules.join());
  for (const name of modules) {
    const imports = WebAssembly.Module.imports(new WebAssembly.Module(readFileSync(new URL(`${name}_bg.wasm`, dist))));
    const own = imports.filter((i) => i.kind === "function" && i.module === `./${name}_bg.js`);
    assert.ok(own.length > 0 && own.every((i) => /^[a-z]{1,2}$/.test(i.name)), `${name}: ${own.slice(0, 3).map((i) => i.name)}`);
    assert.doesNotMatch(readFileSync(new URL(`${name}.js`, dist), "utf8"), /__wbg_\w+_[0-9a-f]{16}\s*:/, name);
  }
});
