// Generation speed in the page (not a test; figures for notes): tokens/s at batch 1, greedy, in
// headless Chromium on the text demo (www/text/) through TextModel.generate, per backend and
// model file. Models are served from www/text/models/ (copy extra ones there; www/ is a build
// output). Timed from the first token on, as the page shows it.
//
//   bash scripts/build-web.sh && node tests/bench/text_tokens.mjs [--tokens 200] [--backends cpu,webgpu] [MODEL.safetensors ...]
// (default model: shakespeare.safetensors, the demo's). Env: KILN_BIN, CHROMIUM as for tests/web/e2e-*.mjs.
//
// Measured on 2 cores shared with other builds (load ~10), headless Chromium (WebGPU is
// SwiftShader, on the CPU), the wasm of KILN_WEB_QUICK=1 scripts/build-web.sh, tokens/s:
//   demo model (4x128, context 128)   CPU 91.4 (200 tokens)   WebGPU 0.5 (20 tokens)
//   default 10.8M (6x384, context 256) CPU 13.1 (50 tokens)   WebGPU 0.1 (5 tokens)
// (the 10.8M file: kiln train text --max-steps 1 --batch-size 1 --eval-windows 1 --out
// www/text/models/default-10m.safetensors; speed does not depend on the weights). Natively on the
// CPU (release, kiln generate --temperature 0 --tokens 200): 923 and 57 tokens/s.
// Stop 48, TextModel yielding through a MessageChannel instead of setTimeout(0) (clamped to 4 ms
// once nested, which had capped the page at about 200 tokens/s): demo model CPU 516.3 tokens/s
// (200 tokens, load ~1; the same session's page loop measured 195-208 before, 494-1,512 after).
import { WWW, kilnBin, serve, launchChromium, openPage, webgpuAvailable } from "../web/e2e/harness.mjs";
import { parseArgs } from "node:util";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { tokens: { type: "string", default: "200" }, backends: { type: "string", default: "cpu,webgpu" } },
});
const tokens = Number(values.tokens);
const models = positionals.length ? positionals : ["shakespeare.safetensors"];
const server = await serve(kilnBin("text_tokens"), WWW);
const browser = await launchChromium();
try {
  const gpu = await webgpuAvailable(browser, server.url);
  for (const model of models) {
    for (const backend of values.backends.split(",")) {
      if (backend === "webgpu" && !gpu) {
        console.log(`${model} webgpu: no adapter in this browser`);
        continue;
      }
      const { page, close } = await openPage(browser, `${server.url}text/?backend=${backend}&model=models/${model}`);
      try {
        const r = await page.evaluate(async (n) => {
          const g = (k) => window.kilnText.generate("ROMEO:\n", { tokens: k, temperature: 0, seed: 0 });
          await g(4); // warm-up: kernels compiled, buffers pooled
          return g(n);
        }, tokens);
        console.log(`${model} ${backend} (${await page.textContent("#backend")}): ${r.tokensPerSecond.toFixed(1)} tokens/s over ${tokens} tokens`);
      } finally {
        await close();
      }
    }
  }
} finally {
  await browser.close();
  server.close();
}
