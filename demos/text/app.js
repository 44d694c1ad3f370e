// The text demo: a GPT trained natively with `kiln train text` continues a prompt in this page,
// token by token (TextModel.generate's onToken), on the device the library picks.
import init, { Device, TextModel, version } from "kiln-ml";

const params = new URLSearchParams(location.search);
const MODEL_URL = params.get("model") ?? "models/shakespeare.safetensors";
const CURVE_URL = "models/shakespeare-curve.json";
const $ = (id) => document.getElementById(id);

// What tests (and the curious) can read and call: window.kilnText.
const demo = (window.kilnText = { backend: null, model: null, tokensPerSecond: null, generate: null });

function status(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

/** `?backend=cpu|webgpu` forces one; otherwise the library chooses ("auto"). */
async function deviceOption() {
  const forced = params.get("backend");
  if (forced === "webgpu") return { device: await Device.webgpu() };
  if (forced === "cpu") return { device: "cpu" };
  return { device: "auto" };
}

/**
 * Generates `tokens` tokens after `prompt`, appending each to the output as it comes; resolves
 * to the text, its pieces (one per token) and the speed. Timed from the first token on, so the
 * figure is the steady rate (the first token also runs the whole prompt through the model).
 */
async function generate(prompt, { tokens, temperature, seed }) {
  const out = $("output");
  out.textContent = "";
  out.append(Object.assign(document.createElement("span"), { className: "prompt", textContent: prompt }));
  const pieces = [];
  let first = 0;
  const text = await demo.model.generate(prompt, {
    tokens,
    temperature,
    seed,
    onToken: (piece) => {
      const now = performance.now();
      if (!pieces.length) first = now;
      pieces.push(piece);
      out.append(piece);
      out.scrollTop = out.scrollHeight;
      if (pieces.length > 1) {
        demo.tokensPerSecond = ((pieces.length - 1) * 1000) / (now - first);
        $("speed").textContent = `${demo.tokensPerSecond.toFixed(1)} tokens/s`;
      }
    },
  });
  return { text, pieces, tokensPerSecond: demo.tokensPerSecond };
}
demo.generate = generate;

$("generate").addEventListener("click", async () => {
  const button = $("generate");
  button.disabled = true;
  status("Generating…");
  try {
    await generate($("prompt").value, {
      tokens: Number($("tokens").value),
      temperature: Number($("temperature").value),
      seed: Number($("seed").value),
    });
    status(`Done on ${demo.backend === "webgpu" ? "WebGPU" : "the CPU"}.`);
  } catch (e) {
    status(`Generation failed: ${e.message}`, true);
  } finally {
    button.disabled = false;
  }
});

async function start() {
  const [, res] = await Promise.all([init(), fetch(MODEL_URL)]);
  if (!res.ok) throw new Error(`no model at ${MODEL_URL} (HTTP ${res.status}); see demos/text/README.md`);
  const bytes = new Uint8Array(await res.arrayBuffer());
  demo.model = await TextModel.load(bytes, await deviceOption());
  const device = demo.model.device;
  demo.backend = device.kind;
  $("backend").textContent = device.kind === "webgpu" ? "WebGPU" : "CPU";
  $("backend").title = `${device.name}: ${device.reason}`;
  $("model-facts").textContent = `${(bytes.length / 2 ** 20).toFixed(2)} MB, context ${demo.model.context}, kiln ${version()}`;
  $("generate").disabled = false;
  status(`Ready on ${device.kind === "webgpu" ? "WebGPU" : "the CPU"} (${device.reason}).`);
  document.body.dataset.ready = "true";
}

start().catch((e) => {
  status(`kiln could not start: ${e.message}`, true);
  document.body.dataset.ready = "error";
});
drawCurve();

/** The training and validation loss by step, from the compact curve next to the model. */
async function drawCurve() {
  let curve;
  try {
    const res = await fetch(CURVE_URL);
    if (!res.ok) return;
    curve = await res.json();
  } catch {
    return;
  }
  $("train-command").textContent = curve.command;
  const all = [...curve.train, ...curve.valid];
  const [W, H, L, R, T, B] = [480, 240, 40, 12, 12, 30];
  const xMax = Math.max(...all.map(([s]) => s));
  const yMax = Math.ceil(Math.max(...all.map(([, v]) => v)));
  const x = (s) => L + (s / xMax) * (W - L - R);
  const y = (v) => T + (1 - v / yMax) * (H - T - B);
  const line = (pts) => pts.map(([s, v]) => `${x(s).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
  const ticks = [...Array(yMax + 1).keys()]
    .map((v) => `<text x="${L - 6}" y="${y(v) + 4}" font-size="10" text-anchor="end" fill="#667085">${v}</text>
      <line x1="${L}" x2="${W - R}" y1="${y(v)}" y2="${y(v)}" stroke="#eaecf0"/>`)
    .join("");
  const svg = $("curve");
  svg.dataset.train = String(curve.train.length);
  svg.dataset.valid = String(curve.valid.length);
  svg.innerHTML = `${ticks}
    <text x="${L}" y="${H - 8}" font-size="10" fill="#667085">0</text>
    <text x="${W - R}" y="${H - 8}" font-size="10" text-anchor="end" fill="#667085">${xMax}</text>
    <text x="${(W / 2).toFixed(0)}" y="${H - 8}" font-size="11" text-anchor="middle" fill="#667085">training step</text>
    <polyline fill="none" stroke="#1570ef" stroke-width="1.5" points="${line(curve.train)}"/>
    <polyline fill="none" stroke="#e8590c" stroke-width="2" points="${line(curve.valid)}"/>
    ${curve.valid.map(([s, v]) => `<circle cx="${x(s).toFixed(1)}" cy="${y(v).toFixed(1)}" r="3" fill="#e8590c"/>`).join("")}`;
}
