// TextModel in Node (CPU backend): a GPT file written by the native `kiln train text` generates,
// greedily, the same text as the native `kiln generate`, token for token, streamed to onToken;
// its module (the text module, loaded by TextModel.load) counts in memory().
// Needs the native binary (`cargo build -p kiln`; or KILN_BIN) and shared/data/shakespeare.
//   node --test tests/web/node/
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import init, { TextModel, Tensor, memory } from "../../../npm/index.js";

await init();

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const KILN = process.env.KILN_BIN ?? join(ROOT, "target", "debug", "kiln");
const skip = !existsSync(KILN) && `no native kiln binary at ${KILN} (cargo build -p kiln, or set KILN_BIN)`;

test("TextModel generates what `kiln generate` does, token by token", { skip }, async () => {
  const dir = mkdtempSync(join(tmpdir(), "kiln-text-"));
  const file = join(dir, "gpt.safetensors");
  const kiln = (args) => execFileSync(KILN, args, { cwd: ROOT, encoding: "utf8" });
  kiln(["train", "text", "--context", "16", "--dim", "24", "--layers", "2", "--heads", "2",
    "--batch-size", "8", "--max-steps", "30", "--eval-every", "1000", "--quiet",
    "--out", file, "--checkpoint-dir", join(dir, "ckpt")]);
  // 60 tokens after a 6-character prompt overflow the context of 16: the cache is rebuilt too.
  const native = kiln(["generate", file, "--prompt", "KING:\n", "--tokens", "60", "--temperature", "0"]);

  // TextModel lives in the text module, loaded now; memory() counts its weights beside the main
  // module's tensors.
  const x = Tensor.from([1.5, -2, 3], null, null);
  const before = memory();
  const lm = await TextModel.load(readFileSync(file));
  assert.ok(lm instanceof TextModel);
  assert.ok(!(x instanceof TextModel));
  const loaded = memory();
  assert.ok(loaded.tensors > before.tensors + 4, `${JSON.stringify(loaded)} after ${JSON.stringify(before)}`);
  assert.ok(loaded.devices.cpu.bytes >= before.devices.cpu.bytes + 4 * 16 * 24);
  assert.equal(loaded.bytes, loaded.devices.cpu.bytes);
  assert.equal(lm.context, 16);
  assert.equal(lm.device.kind, "cpu");
  const pieces = [];
  const text = await lm.generate("KING:\n", { tokens: 60, temperature: 0, onToken: (t) => pieces.push(t) });
  assert.equal(`KING:\n${text}\n`, native);
  assert.equal(pieces.length, 60);
  assert.equal(pieces.join(""), text);

  // Sampling is seeded: the same seed gives the same text, and only vocabulary characters.
  const warm = (seed) => lm.generate("KING:\n", { tokens: 40, temperature: 1, topK: 5, seed });
  const a = await warm(3);
  assert.equal(a, await warm(3));
  assert.equal([...a].length, 40);

  await assert.rejects(lm.generate("\u2603"), /vocabulary/);
  await assert.rejects(lm.generate("KING", { tokens: -1 }), /options.tokens must be a whole number/);
  await assert.rejects(lm.generate("KING", { onToken: 3 }), /onToken must be a function/);
  lm.dispose();
  assert.deepEqual(memory(), before);
  x.dispose();
  await assert.rejects(lm.generate("KING"), /disposed/);
  await assert.rejects(TextModel.load(new Uint8Array([1, 2, 3])), /safetensors|header|format/i);
});
