// End-to-end test of the text demo (www/text/, demos/text): headless Chromium (playwright-core
// driving Debian's chromium) opens the page served by `kiln serve`, generates greedily from the
// committed model through the page (TextModel.generate, streamed to onToken) and checks that the
// text equals `kiln generate --temperature 0`'s token for token, on the CPU backend (TOKENS
// tokens after the prompt pass the context of 128, so the KV cache is rebuilt on the way) and on
// WebGPU (skipped when the browser has no adapter): its first WEBGPU_TOKENS only, as headless
// Chromium's WebGPU is SwiftShader, on the CPU, at about 1 token/s with this model on 2 cores. It also checks what the page
// shows (the text streamed into it, the device, tokens/s, the training curve) and that the
// default start lets the library choose the device. Prints the page's tokens/s per backend.
//
//   node tests/web/e2e-text.mjs      (after scripts/build-web.sh, with a kiln binary built)
// Env: KILN_BIN, CHROMIUM as for e2e-mnist.mjs; KILN_REQUIRE_WEBGPU=1 fails without an adapter.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { WWW, checker, fatal, kilnBin, serve, launchChromium, openPage, webgpuAvailable } from "./e2e/harness.mjs";

const MODEL = join(WWW, "text/models/shakespeare.safetensors");
const CURVE = join(WWW, "text/models/shakespeare-curve.json");
const PROMPT = "ROMEO:\nWhat light";
const TOKENS = 150;
const WEBGPU_TOKENS = 16;
const check = checker();

for (const path of [join(WWW, "text/index.html"), MODEL, CURVE]) {
  if (!existsSync(path)) fatal("e2e-text", `missing ${path}: run scripts/build-web.sh (it copies demos/text into www/text)`);
}
const KILN = kilnBin("e2e-text");
const native = execFileSync(KILN, ["generate", MODEL, "--prompt", PROMPT, "--tokens", String(TOKENS), "--temperature", "0"], { encoding: "utf8" });
// `kiln generate` prints the prompt, the generated text and a newline; a token is a character.
const want = [...native.slice(PROMPT.length, -1)];
check(want.length === TOKENS, `kiln generate wrote ${want.length} tokens (${TOKENS} asked)`);

async function run(browser, base, backend) {
  const { page, errors, close } = await openPage(browser, `${base}text/${backend ? `?backend=${backend}` : ""}`);
  try {
    const ready = await page.evaluate(() => document.body.dataset.ready);
    if (!check(ready === "true", `[${backend ?? "auto"}] page started: ${await page.textContent("#status")}`)) return null;
    const shown = await page.evaluate(() => ({ backend: window.kilnText.backend, label: document.getElementById("backend").textContent, title: document.getElementById("backend").title }));
    if (!backend) return shown;
    check(shown.backend === backend && shown.label === (backend === "cpu" ? "CPU" : "WebGPU"), `[${backend}] device shown: ${shown.label} (${shown.title})`);
    const n = backend === "webgpu" ? WEBGPU_TOKENS : TOKENS;
    const r = await page.evaluate(([p, n]) => window.kilnText.generate(p, { tokens: n, temperature: 0, seed: 0 }), [PROMPT, n]);
    const firstDiff = want.slice(0, n).findIndex((t, i) => r.pieces[i] !== t);
    check(r.pieces.length === n && firstDiff === -1 && r.text === want.slice(0, n).join(""),
      `[${backend}] greedy text equals kiln generate --temperature 0 token for token (${r.pieces.length} tokens${firstDiff >= 0 ? `; first difference at token ${firstDiff}: ${JSON.stringify(r.pieces[firstDiff])} vs ${JSON.stringify(want[firstDiff])}` : ""})`);
    const page_ = await page.evaluate(() => ({ output: document.getElementById("output").textContent, speed: document.getElementById("speed").textContent }));
    check(page_.output === PROMPT + r.text && /^[\d.]+ tokens\/s$/.test(page_.speed), `[${backend}] the page shows the prompt and the streamed text, and ${page_.speed}`);
    console.log(`[${backend}] ${r.tokensPerSecond.toFixed(1)} tokens/s (greedy, batch 1, ${n} tokens)`);
    check(errors.length === 0, `[${backend}] no console errors${errors.length ? ": " + errors.join(" | ") : ""}`);
    return r;
  } finally {
    await close();
  }
}

const server = await serve(KILN, WWW);
const browser = await launchChromium();
try {
  await run(browser, server.url, "cpu");
  if (await webgpuAvailable(browser, server.url)) await run(browser, server.url, "webgpu");
  else check(process.env.KILN_REQUIRE_WEBGPU !== "1", "[webgpu] this browser has no WebGPU adapter (skipped)");
  // The default start: the library's choice, with its reason; the curve of the committed log.
  const auto = await run(browser, server.url, null);
  check(auto && ["cpu", "webgpu"].includes(auto.backend) && auto.title.length > 0, `[auto] the library chose ${auto?.backend}: ${auto?.title}`);
  const curve = JSON.parse(readFileSync(CURVE, "utf8"));
  const { page, close } = await openPage(browser, `${server.url}text/?backend=cpu`);
  await page.waitForFunction(() => document.getElementById("curve").dataset.valid);
  const drawn = await page.evaluate(() => ({ ...document.getElementById("curve").dataset, command: document.getElementById("train-command").textContent }));
  check(Number(drawn.train) === curve.train.length && Number(drawn.valid) === curve.valid.length && drawn.command.startsWith("kiln train text "),
    `training curve: ${drawn.train} training and ${drawn.valid} validation points (file: ${curve.train.length}, ${curve.valid.length}), command "${drawn.command}"`);
  await close();
} finally {
  await browser.close();
  server.close();
}
console.log(check.failures ? `\n${check.failures} check(s) failed` : "\nall text e2e checks passed");
process.exit(check.failures ? 1 : 0);
