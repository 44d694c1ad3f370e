// The draw-a-digit page: draw on the pad, see kiln's prediction live.
import init, { Device, Tensor, Model, version } from "kiln-ml";
import { inkFromRGBA, toMnist, normalise } from "./digit.js";

const MODEL_URL = new URLSearchParams(location.search).get("model") ?? "models/mnist.safetensors";
const LOG_URL = "models/mnist-train.jsonl";
const $ = (id) => document.getElementById(id);
const pad = $("pad");
const ctx = pad.getContext("2d", { willReadFrequently: true });
const preview = $("preview").getContext("2d");

// What tests (and the curious) can read: window.kilnDemo.
const demo = (window.kilnDemo = {
  coldStartMs: null,
  lastMs: null,
  lastInput: null,
  lastLogits: null,
  lastProbs: null,
  predictions: 0,
  backend: null,
});

let device = null;
let model = null;
const models = new Map(); // kind -> Model, so switching back is instant
let modelBytes = null;
let busy = false;
let dirty = false;

function status(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

// ------------------------------------------------------------------ bars

const bars = [];
for (let d = 0; d < 10; d++) {
  const li = document.createElement("li");
  li.innerHTML = `<span>${d}</span><span class="track"><span class="fill"></span></span><span class="value" data-testid="prob-${d}">0.0000</span>`;
  $("bars").append(li);
  bars.push(li);
}

function show(probs, digit) {
  bars.forEach((li, d) => {
    const p = probs ? probs[d] : 0;
    li.querySelector(".fill").style.width = `${(p * 100).toFixed(1)}%`;
    const v = li.querySelector(".value");
    v.textContent = p.toFixed(4);
    v.dataset.value = String(p);
    li.classList.toggle("best", digit === d);
  });
  $("prediction").textContent = digit === null ? "–" : String(digit);
}

// ------------------------------------------------------------------ drawing

function clearPad() {
  ctx.fillStyle = "#000";
  ctx.fillRect(0, 0, pad.width, pad.height);
  preview.fillStyle = "#000";
  preview.fillRect(0, 0, 28, 28);
  demo.lastInput = null;
  show(null, null);
  $("prediction").dataset.state = "empty";
}

let last = null;
function point(e) {
  const r = pad.getBoundingClientRect();
  return [((e.clientX - r.left) * pad.width) / r.width, ((e.clientY - r.top) * pad.height) / r.height];
}
function stroke(from, to) {
  ctx.strokeStyle = "#fff";
  ctx.lineWidth = 20;
  ctx.lineCap = ctx.lineJoin = "round";
  ctx.beginPath();
  ctx.moveTo(...from);
  ctx.lineTo(...to);
  ctx.stroke();
}
pad.addEventListener("pointerdown", (e) => {
  e.preventDefault();
  pad.setPointerCapture(e.pointerId);
  last = point(e);
  stroke(last, last);
  schedule();
});
pad.addEventListener("pointermove", (e) => {
  if (!last) return;
  for (const ev of e.getCoalescedEvents?.() ?? [e]) {
    const p = point(ev);
    stroke(last, p);
    last = p;
  }
  schedule();
});
for (const type of ["pointerup", "pointercancel"]) {
  pad.addEventListener(type, () => {
    last = null;
    schedule();
  });
}
$("clear").addEventListener("click", clearPad);

// ------------------------------------------------------------------ prediction

function schedule() {
  dirty = true;
  if (!busy) requestAnimationFrame(predictNow);
}

async function predictNow() {
  if (busy || !model) return;
  dirty = false;
  const pixels = toMnist(inkFromRGBA(ctx.getImageData(0, 0, 280, 280).data, 280, 280), 280, 280);
  if (!pixels) {
    clearPad();
    return;
  }
  busy = true;
  try {
    const img = preview.createImageData(28, 28);
    pixels.forEach((v, i) => img.data.set([v, v, v, 255], i * 4));
    preview.putImageData(img, 0, 0);
    const r = await predict(pixels);
    demo.lastInput = pixels;
    show(r.probs, r.digit);
    $("prediction").dataset.state = "ready";
  } catch (e) {
    status(`Prediction failed: ${e.message}`, true);
    console.error(e);
  } finally {
    busy = false;
    if (dirty) requestAnimationFrame(predictNow);
  }
}

/** Runs the model on a 28x28 image (0..255): logits, probabilities, digit and time. */
async function predict(pixels) {
  const t0 = performance.now();
  const x = Tensor.from(normalise(pixels), [1, 1, 28, 28], { device });
  const logits = model.forward(x);
  const probs = logits.softmax(-1);
  try {
    const [l, p] = await Promise.all([logits.data(), probs.data()]);
    const ms = performance.now() - t0;
    // A backend that silently computes garbage (e.g. a GPU pipeline that failed to build) must not
    // show bars: softmax outputs are finite, in [0, 1], and sum to 1.
    const sum = p.reduce((s, v) => s + v, 0);
    if (p.length !== 10 || !p.every((v) => v >= 0 && v <= 1) || !(Math.abs(sum - 1) < 1e-3)) {
      throw new Error(`the ${device.kind} backend returned invalid probabilities (sum ${sum})`);
    }
    let digit = 0;
    for (let d = 1; d < 10; d++) if (p[d] > p[digit]) digit = d;
    Object.assign(demo, { lastLogits: Array.from(l), lastProbs: Array.from(p), lastMs: ms });
    demo.predictions++;
    $("time").textContent = `${ms.toFixed(2)} ms`;
    return { logits: l, probs: p, digit, ms };
  } finally {
    x.dispose();
    logits.dispose();
    probs.dispose();
  }
}
demo.predict = predict;
/** Resolves once no prediction is running or pending (for tests). */
demo.settled = async () => {
  while (busy || dirty) await new Promise((r) => setTimeout(r, 5));
};

// ------------------------------------------------------------------ backends

const backendLabel = () => (device.kind === "webgpu" ? "WebGPU" : "the CPU (WebAssembly)");

function markBackend() {
  $("backend").textContent = device.kind === "webgpu" ? "WebGPU" : "CPU";
  $("backend").title = `${device.name} — ${device.reason}`;
  demo.backend = device.kind;
  for (const b of document.querySelectorAll("[data-choose]")) {
    b.setAttribute("aria-pressed", String(b.dataset.choose === device.kind));
  }
}

/** Switches to a backend ("webgpu", "cpu" or "auto"), loading the model there and checking it with one prediction. */
async function useDevice(kind) {
  const next = kind === "webgpu" ? await Device.webgpu() : kind === "cpu" ? Device.cpu() : await Device.auto();
  if (!models.has(next.kind)) {
    try {
      models.set(next.kind, await Model.load(modelBytes, { device: next }));
    } catch (e) {
      throw new Error(`the model file ${MODEL_URL} could not be loaded: ${e.message}`);
    }
  }
  const [prevDevice, prevModel] = [device, model];
  [device, model] = [next, models.get(next.kind)];
  try {
    await predict(new Uint8Array(784)); // compiles the GPU pipelines; proves the backend works
  } catch (e) {
    try {
      models.get(next.kind)?.dispose();
    } catch {
      // a broken device may fail to free too; nothing more to do
    }
    models.delete(next.kind);
    [device, model] = [prevDevice, prevModel];
    if (kind === "auto" && next.kind === "webgpu") {
      console.warn(`kiln demo: WebGPU failed (${e.message}); using the CPU`);
      fallbackReason = `WebGPU failed (${e.message}), so this runs on the CPU`;
      return useDevice("cpu");
    }
    throw e;
  }
  if (kind === "auto" && next.kind === "webgpu") {
    // Live prediction needs speed: a software WebGPU adapter (e.g. SwiftShader) can be far slower
    // than the CPU backend. Time one warm prediction on each and keep the faster.
    const gpuMs = (await predict(new Uint8Array(784))).ms;
    if (gpuMs > SLOW_MS) {
      await useDevice("cpu");
      const cpuMs = (await predict(new Uint8Array(784))).ms;
      if (cpuMs < gpuMs) {
        fallbackReason = `WebGPU took ${gpuMs.toFixed(0)} ms per prediction here and the CPU ${cpuMs.toFixed(1)} ms, so this runs on the CPU (switch below)`;
        return;
      }
      [device, model] = [next, models.get(next.kind)];
    }
  }
  markBackend();
}
let fallbackReason = null;
const SLOW_MS = 30; // above this, `auto` compares WebGPU with the CPU

for (const b of document.querySelectorAll("[data-choose]")) {
  b.addEventListener("click", async () => {
    try {
      await useDevice(b.dataset.choose);
      status(`Running on ${backendLabel()}.`);
      schedule();
    } catch (e) {
      status(`Cannot switch to ${b.dataset.choose}: ${e.message}`, true);
    }
  });
}
if (!("gpu" in navigator)) {
  const b = document.querySelector('[data-choose="webgpu"]');
  b.disabled = true;
  b.title = "This browser has no WebGPU";
}

// ------------------------------------------------------------------ start

async function loadModelBytes() {
  // index.html starts the download early; fetch here when it did not (e.g. the page embedded elsewhere).
  const { response: res, error } = await (window.kilnModelFetch ??
    fetch(MODEL_URL).then((response) => ({ response }), (error) => ({ error })));
  if (error) throw new Error(`could not fetch ${MODEL_URL}: ${error.message}`);
  if (!res.ok) {
    throw new Error(
      `no model at ${MODEL_URL} (HTTP ${res.status}). Train one with: kiln train mnist --out www/models/mnist.safetensors --log www/models/mnist-train.jsonl`,
    );
  }
  return new Uint8Array(await res.arrayBuffer());
}

async function start() {
  clearPad();
  // The wasm module and the model file download in parallel.
  const [, bytes] = await Promise.all([init(), loadModelBytes()]);
  $("kiln-version").textContent = version();
  modelBytes = bytes;
  $("model-size").textContent = `${(modelBytes.length / 2 ** 20).toFixed(2)} MB`;
  $("model-size").dataset.bytes = String(modelBytes.length);
  const wanted = new URLSearchParams(location.search).get("backend") ?? "auto";
  await useDevice(wanted); // includes the first prediction, which warms the backend up
  demo.coldStartMs = performance.now();
  status(fallbackReason ? `Ready. ${fallbackReason}. Draw a digit.` : `Ready on ${backendLabel()}. Draw a digit.`);
  document.body.dataset.ready = "true";
}

start().catch((e) => {
  status(`kiln could not start: ${e.message}`, true);
  document.body.dataset.ready = "error";
  for (const b of document.querySelectorAll("button")) b.disabled = true;
  const params = new URLSearchParams(location.search);
  if (modelBytes && params.get("backend") !== "cpu") {
    // The model is fine but the chosen backend is not: offer the CPU.
    params.set("backend", "cpu");
    const a = Object.assign(document.createElement("a"), { href: `?${params}`, textContent: " Use the CPU instead." });
    $("status").append(a);
  }
});
drawTrainingLog();

// ------------------------------------------------------------------ how this was made

async function drawTrainingLog() {
  let epochs;
  try {
    const res = await fetch(LOG_URL);
    if (!res.ok) return;
    epochs = (await res.text())
      .split("\n")
      .filter((l) => l.trim())
      .map((l) => JSON.parse(l))
      .filter((e) => typeof e.train_loss === "number" && typeof e.test_acc === "number");
  } catch {
    return;
  }
  if (!epochs.length) return;
  const lastEpoch = epochs[epochs.length - 1];
  $("model-acc").textContent = `${(lastEpoch.test_acc * 100).toFixed(2)}%`;
  $("model-epochs").textContent = String(lastEpoch.epoch);
  $("train-command").textContent =
    `kiln train mnist --epochs ${lastEpoch.epoch} --out www/models/mnist.safetensors --log www/models/mnist-train.jsonl`;
  const secs = epochs.reduce((s, e) => s + (e.seconds ?? 0), 0);
  if (secs > 0) $("model-time").textContent = `${(secs / 60).toFixed(1)} min`;

  const [W, H, L, R, T, B] = [480, 200, 44, 44, 12, 28];
  const maxLoss = Math.max(...epochs.map((e) => e.train_loss)) * 1.1;
  const minAcc = Math.min(0.9, ...epochs.map((e) => e.test_acc));
  const n = epochs.length;
  const x = (i) => L + (n === 1 ? (W - L - R) / 2 : (i * (W - L - R)) / (n - 1));
  const yLoss = (v) => T + (1 - v / maxLoss) * (H - T - B);
  const yAcc = (v) => T + (1 - (v - minAcc) / (1 - minAcc)) * (H - T - B);
  const line = (f, key) => epochs.map((e, i) => `${x(i).toFixed(1)},${f(e[key]).toFixed(1)}`).join(" ");
  const dots = (f, key, color) =>
    epochs.map((e, i) => `<circle cx="${x(i)}" cy="${f(e[key])}" r="3" fill="${color}"/>`).join("");
  $("curve").innerHTML = `
    <line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="#98a2b3"/>
    <text x="${L - 6}" y="${T + 4}" font-size="10" text-anchor="end" fill="#1570ef">${maxLoss.toFixed(2)}</text>
    <text x="${L - 6}" y="${H - B}" font-size="10" text-anchor="end" fill="#1570ef">0</text>
    <text x="${W - R + 6}" y="${T + 4}" font-size="10" fill="#e8590c">100%</text>
    <text x="${W - R + 6}" y="${H - B}" font-size="10" fill="#e8590c">${(minAcc * 100).toFixed(0)}%</text>
    <text x="${(W / 2).toFixed(0)}" y="${H - 8}" font-size="11" text-anchor="middle" fill="#667085">epoch 1 – ${lastEpoch.epoch}</text>
    <polyline fill="none" stroke="#1570ef" stroke-width="2" points="${line(yLoss, "train_loss")}"/>
    <polyline fill="none" stroke="#e8590c" stroke-width="2" points="${line(yAcc, "test_acc")}"/>
    ${dots(yLoss, "train_loss", "#1570ef")}${dots(yAcc, "test_acc", "#e8590c")}`;
}
