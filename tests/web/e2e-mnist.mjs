// End-to-end test of the draw-a-digit page (issue 6): headless Chromium (playwright-core, Debian's
// chromium) opens the served www/, draws strokes traced from real MNIST *test* images on the pad,
// and checks the predictions, that the probabilities sum to 1, that no console error occurred,
// and that the page's logits equal `kiln predict --json` on the same 28x28 input (1e-4). It runs
// on WebGPU and again forced to the CPU, and prints cold start and per-prediction latency.
//
//   node tests/web/e2e-mnist.mjs            (after scripts/build-web.sh and a trained model)
// Env: KILN_BIN (the kiln binary: serves www/ and predicts; else target/{release,debug}/kiln,
//      else a Node static server and no logit comparison), KILN_E2E_DIGITS (default 40),
//      KILN_REQUIRE_WEBGPU=1 (fail instead of skipping when the browser has no WebGPU device).
import { chromium } from "playwright-core";
import { spawn, execFileSync } from "node:child_process";
import { createServer } from "node:http";
import { existsSync, mkdirSync, readFileSync, writeFileSync, statSync } from "node:fs";
import { deflateSync } from "node:zlib";
import { dirname, extname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { testImages } from "./mnist.mjs";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const WWW = join(ROOT, "www");
const OUT = join(ROOT, "tests/web/out");
const DIGITS = Number(process.env.KILN_E2E_DIGITS ?? 40);
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
mkdirSync(OUT, { recursive: true });

let failures = 0;
const check = (ok, what) => {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
  if (!ok) failures++;
};

function kilnBin() {
  if (process.env.KILN_BIN) return process.env.KILN_BIN;
  for (const p of ["target/release/kiln", "target/debug/kiln"]) if (existsSync(join(ROOT, p))) return join(ROOT, p);
  return null;
}

/** Serves www/ with `kiln serve` when the binary exists, else with a small Node server. */
async function serve() {
  const bin = kilnBin();
  if (bin) {
    const child = spawn(bin, ["serve", WWW, "--port", "0"], { stdio: ["ignore", "pipe", "inherit"] });
    const url = await new Promise((ok, fail) => {
      let buf = "";
      child.stdout.on("data", (d) => {
        buf += d;
        const m = buf.match(/at (http:\/\/\S+)/);
        if (m) ok(m[1].replace(/\/?$/, "/"));
      });
      child.on("exit", (c) => fail(new Error(`kiln serve exited with ${c}`)));
    });
    return { url, close: () => child.kill(), by: "kiln serve" };
  }
  const types = { ".html": "text/html", ".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css", ".wasm": "application/wasm", ".json": "application/json", ".jsonl": "application/jsonl", ".safetensors": "application/octet-stream", ".svg": "image/svg+xml" };
  const server = createServer((req, res) => {
    const path = join(WWW, decodeURIComponent(new URL(req.url, "http://x").pathname));
    const file = path.endsWith("/") ? join(path, "index.html") : path;
    if (!file.startsWith(WWW) || !existsSync(file) || !statSync(file).isFile()) {
      res.writeHead(404).end("not found");
      return;
    }
    res.writeHead(200, { "content-type": types[extname(file)] ?? "application/octet-stream" }).end(readFileSync(file));
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  return { url: `http://127.0.0.1:${server.address().port}/`, close: () => server.close(), by: "node static server" };
}

/** Mouse strokes for an MNIST image: one horizontal stroke per run of ink pixels in each row. */
function strokes(image) {
  const out = [];
  for (let y = 0; y < 28; y++) {
    for (let x = 0; x < 28; x++) {
      if (image[y * 28 + x] < 128) continue;
      const start = x;
      while (x + 1 < 28 && image[y * 28 + x + 1] >= 128) x++;
      out.push([[start + 0.5, y + 0.5], [x + 0.5, y + 0.5]]);
    }
  }
  return out;
}

/** An 8-bit grayscale PNG of a 28x28 image, for `kiln predict`. */
function png(pixels) {
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (buf) => {
    let c = 0xffffffff;
    for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
  const chunk = (type, data) => {
    const len = Buffer.alloc(4);
    len.writeUInt32BE(data.length);
    const td = Buffer.concat([Buffer.from(type), data]);
    const c = Buffer.alloc(4);
    c.writeUInt32BE(crc(td));
    return Buffer.concat([len, td, c]);
  };
  const ihdr = Buffer.alloc(13);
  ihdr.writeUInt32BE(28, 0);
  ihdr.writeUInt32BE(28, 4);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 0; // grayscale
  const raw = Buffer.alloc(28 * 29);
  for (let y = 0; y < 28; y++) for (let x = 0; x < 28; x++) raw[y * 29 + 1 + x] = pixels[y * 28 + x];
  return Buffer.concat([Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk("IHDR", ihdr), chunk("IDAT", deflateSync(raw)), chunk("IEND", Buffer.alloc(0))]);
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function runMode(browser, base, mode, digits) {
  const page = await browser.newPage({ viewport: { width: 1000, height: 900 } });
  const errors = [];
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  page.on("pageerror", (e) => errors.push(String(e)));
  const t0 = Date.now();
  await page.goto(`${base}?backend=${mode}`);
  await page.waitForFunction(() => document.body.dataset.ready, null, { timeout: 60_000 });
  const state = await page.evaluate(() => document.body.dataset.ready);
  if (state !== "true") {
    const why = await page.textContent("#status");
    await page.close();
    return { skipped: why };
  }
  const backend = await page.textContent('[data-testid="backend"]');
  const coldStartMs = await page.evaluate(() => window.kilnDemo.coldStartMs);
  console.log(`\n[${mode}] backend shown: ${backend}; cold start (navigation to first prediction): ${coldStartMs.toFixed(0)} ms (wall ${Date.now() - t0} ms)`);

  const pad = await page.getByTestId("pad").boundingBox();
  const { images, labels } = digits;
  let correct = 0;
  const latencies = [];
  const samples = [];
  for (let i = 0; i < labels.length; i++) {
    const img = images.slice(i * 784, (i + 1) * 784);
    await page.getByTestId("clear").click();
    for (const [[x0, y0], [x1, y1]] of strokes(img)) {
      const at = (x, y) => [pad.x + (x * pad.width) / 28, pad.y + (y * pad.height) / 28];
      await page.mouse.move(...at(x0, y0));
      await page.mouse.down();
      await page.mouse.move(...at(x1, y1), { steps: Math.max(1, Math.round(x1 - x0)) });
      await page.mouse.up();
    }
    await page.evaluate(() => window.kilnDemo.settled());
    const shown = Number(await page.textContent('[data-testid="prediction"]'));
    const probs = [];
    for (let d = 0; d < 10; d++) probs.push(Number(await page.getByTestId(`prob-${d}`).getAttribute("data-value")));
    const texts = await Promise.all([...Array(10).keys()].map((d) => page.textContent(`[data-testid="prob-${d}"]`)));
    const sum = probs.reduce((s, p) => s + p, 0);
    const textSum = texts.reduce((s, t) => s + Number(t), 0);
    if (Math.abs(sum - 1) > 1e-5 || Math.abs(textSum - 1) > 6e-4) check(false, `digit ${i}: probabilities sum to ${sum} (shown ${textSum})`);
    if (shown !== probs.indexOf(Math.max(...probs))) check(false, `digit ${i}: shown ${shown} is not the most probable`);
    if (shown === labels[i]) correct++;
    const demo = await page.evaluate(() => ({ ms: window.kilnDemo.lastMs, input: Array.from(window.kilnDemo.lastInput), logits: window.kilnDemo.lastLogits }));
    latencies.push(demo.ms);
    if (samples.length < 5) samples.push({ label: labels[i], ...demo });
  }
  const acc = correct / labels.length;
  check(acc >= 0.9, `[${mode}] accuracy on ${labels.length} drawn MNIST test digits: ${(acc * 100).toFixed(1)}% (>= 90%)`);

  // Latency of the prediction itself (tensor in, model, softmax, read back), warm, in the page.
  const bench = await page.evaluate(async (input) => {
    const x = new Uint8Array(input);
    const ts = [];
    for (let i = 0; i < 50; i++) ts.push((await window.kilnDemo.predict(x)).ms);
    return ts;
  }, samples[0].input);
  console.log(`[${mode}] per-prediction latency: median ${median(bench).toFixed(2)} ms, min ${Math.min(...bench).toFixed(2)} ms over 50 warm runs; while drawing: median ${median(latencies).toFixed(2)} ms`);

  await page.getByTestId("clear").click();
  check((await page.textContent('[data-testid="prediction"]')) === "–", `[${mode}] clear empties the prediction`);
  // Redraw the first digit for the screenshot.
  await page.screenshot({ path: join(OUT, `mnist-${mode}.png`), fullPage: true });
  check(errors.length === 0, `[${mode}] no console errors${errors.length ? ": " + errors.join(" | ") : ""}`);
  await page.close();
  return { samples, coldStartMs, medianMs: median(bench), acc };
}

function compareWithKilnPredict(samples) {
  const bin = kilnBin();
  const model = join(WWW, "models/mnist.safetensors");
  if (!bin) {
    console.log("skip logits vs kiln predict: no kiln binary (set KILN_BIN)");
    return;
  }
  let worst = 0;
  for (const [i, s] of samples.entries()) {
    const file = join(OUT, `input-${i}.png`);
    writeFileSync(file, png(s.input));
    const out = JSON.parse(execFileSync(bin, ["predict", model, file, "--json"], { encoding: "utf8" }));
    for (let d = 0; d < 10; d++) worst = Math.max(worst, Math.abs(out.logits[d] - s.logits[d]));
  }
  check(worst <= 1e-4, `page logits equal kiln predict --json on ${samples.length} inputs (max |diff| ${worst.toExponential(2)} <= 1e-4)`);
}

async function missingModel(browser, base) {
  const page = await browser.newPage();
  await page.goto(`${base}?model=models/does-not-exist.safetensors&backend=cpu`);
  await page.waitForFunction(() => document.body.dataset.ready);
  const text = await page.textContent("#status");
  check(/no model at/.test(text) && /kiln train mnist/.test(text), `missing model file gives a helpful message: "${text.slice(0, 90)}..."`);
  await page.goto(`${base}?model=app.js&backend=cpu`);
  await page.waitForFunction(() => document.body.dataset.ready);
  const text2 = await page.textContent("#status");
  check(/could not be loaded/.test(text2), `corrupt model file gives a readable message: "${text2.slice(0, 110)}..."`);
  await page.close();
}

const server = await serve();
console.log(`serving ${WWW} at ${server.url} (${server.by})`);
const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--enable-unsafe-webgpu", "--enable-features=Vulkan"],
});
try {
  const digits = testImages(DIGITS, 0);
  for (const mode of ["webgpu", "cpu"]) {
    const r = await runMode(browser, server.url, mode, digits);
    if (r.skipped) {
      const required = process.env.KILN_REQUIRE_WEBGPU === "1" || mode === "cpu";
      check(!required, `[${mode}] page did not start: ${r.skipped}`);
      if (!required) console.log(`skip [${mode}]: ${r.skipped}`);
      continue;
    }
    if (mode === "cpu") compareWithKilnPredict(r.samples);
  }
  await missingModel(browser, server.url);
} finally {
  await browser.close();
  server.close();
}
console.log(failures ? `\n${failures} check(s) failed` : "\nall e2e checks passed");
process.exit(failures ? 1 : 0);
