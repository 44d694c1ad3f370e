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
  $("backend").title = `${device.name} — ${reason}`;
  demo.backend = device.kind;
  for (const b of document.querySelectorAll("[data-choose]")) {
    b.setAttribute("aria-pressed", String(b.dataset.choose === device.kind));
  }
}

/**
 * Switches to a backend: "auto" (kiln picks the faster one for this model and says why in
 * `model.device.reason`), "webgpu" or "cpu". Loads the model there (once per backend) and checks
 * it with one prediction, which also warms the backend up.
 */
async function useDevice(kind) {
  let next = models.get(kind);
  if (!next) {
    const option = kind === "webgpu" ? await Device.webgpu() : kind;
    try {
      next = await Model.load(modelBytes, { device: option });
    } catch (e) {
      throw new Error(`the model file ${MODEL_URL} could not be loaded: ${e.message}`);
    }
    models.set(next.device.kind, next);
  }
  const nextDevice = next.device;
  const [prevDevice, prevModel] = [device, model];
  [device, model] = [nextDevice, next];
  try {
    await predict(new Uint8Array(784)); // proves the backend works
  } catch (e) {
    models.delete(nextDevice.kind);
    try {
      next.dispose();
    } catch {
      // a broken device may fail to free too; nothing more to do
    }
    [device, model] = [prevDevice, prevModel];
    if (kind === "auto" && nextDevice.kind === "webgpu") {
      console.warn(`kiln demo: WebGPU failed (${e.message}); using the CPU`);
      await useDevice("cpu");
      reason = `WebGPU failed here (${e.message}), so the CPU`;
      markBackend();
      return;
    }
    throw e;
  }
  reason = device.reason;
  markBackend();
}
let reason = "";

for (const b of document.querySelectorAll("[data-choose]")) {
  b.addEventListener("click", async () => {
    try {
      await useDevice(b.dataset.choose);
      status(`Running on ${backendLabel()}: ${reason}.`);
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
  const forced = new URLSearchParams(location.search).get("backend"); // ?backend=webgpu|cpu
  await useDevice(forced === "webgpu" || forced === "cpu" ? forced : "auto"); // includes the first prediction, which warms the backend up
  demo.coldStartMs = performance.now();
  status(`Ready on ${backendLabel()}: ${reason}. Draw a digit.`);
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

/**
 * The facts and the curve from the training log (format: kiln::learn::report): per-epoch lines
 * `{epoch, train_loss, train_acc, test_acc, ..., seconds}`, step lines `{step, epoch, loss, acc,
 * lr, ...}` (no `test_acc`) and, in newer logs, evaluation lines `{step, epoch, test_loss,
 * test_acc}` (no `lr`, no `train_loss`: read by neither filter). With step lines the curve is the loss per
 * logged step and the test accuracy as a point at each epoch's last step; without them, both per
 * epoch. The svg carries `data-epochs` and `data-steps` (lines drawn) for tests.
 */
async function drawTrainingLog() {
  let lines;
  try {
    const res = await fetch(LOG_URL);
    if (!res.ok) return;
    lines = (await res.text())
      .split("\n")
      .filter((l) => l.trim())
      .map((l) => JSON.parse(l));
  } catch {
    return;
  }
  const epochs = lines.filter((e) => typeof e.train_loss === "number" && typeof e.test_acc === "number");
  const steps = lines.filter((e) => typeof e.step === "number" && typeof e.loss === "number" && !("test_acc" in e));
  if (!epochs.length) return;
  const lastEpoch = epochs[epochs.length - 1];
  $("model-acc").textContent = `${(lastEpoch.test_acc * 100).toFixed(2)}%`;
  $("model-epochs").textContent = String(lastEpoch.epoch);
  $("train-command").textContent =
    `kiln train mnist --epochs ${lastEpoch.epoch} --out www/models/mnist.safetensors --log www/models/mnist-train.jsonl`;
  const secs = epochs.reduce((s, e) => s + (e.seconds ?? 0), 0);
  if (secs > 0) $("model-time").textContent = `${(secs / 60).toFixed(1)} min`;

  // Loss points [x, loss] and accuracy points [x, acc], x in steps or in epochs.
  let loss, acc, xMin, xMax, xLabel;
  if (steps.length) {
    const lastStep = new Map(); // epoch -> its last logged step
    for (const s of steps) lastStep.set(s.epoch, Math.max(lastStep.get(s.epoch) ?? 0, s.step));
    loss = steps.map((s) => [s.step, s.loss]);
    acc = epochs.filter((e) => lastStep.has(e.epoch)).map((e) => [lastStep.get(e.epoch), e.test_acc]);
    [xMin, xMax] = [0, Math.max(...steps.map((s) => s.step))];
    xLabel = `training step (${lastEpoch.epoch} epoch${lastEpoch.epoch === 1 ? "" : "s"})`;
  } else {
    loss = epochs.map((e) => [e.epoch, e.train_loss]);
    acc = epochs.map((e) => [e.epoch, e.test_acc]);
    [xMin, xMax] = [epochs[0].epoch, lastEpoch.epoch];
    xLabel = "epoch";
  }

  const [W, H, L, R, T, B] = [480, 200, 44, 44, 12, 28];
  const maxLoss = Math.max(...loss.map(([, v]) => v)) * 1.1;
  const minAcc = Math.min(0.9, ...acc.map(([, v]) => v));
  const x = (v) => L + (xMax === xMin ? (W - L - R) / 2 : ((v - xMin) * (W - L - R)) / (xMax - xMin));
  const yLoss = (v) => T + (1 - v / maxLoss) * (H - T - B);
  const yAcc = (v) => T + (1 - (v - minAcc) / (1 - minAcc)) * (H - T - B);
  const line = (pts, f) => pts.map(([a, v]) => `${x(a).toFixed(1)},${f(v).toFixed(1)}`).join(" ");
  const dots = (pts, f, color) =>
    pts.map(([a, v]) => `<circle cx="${x(a).toFixed(1)}" cy="${f(v).toFixed(1)}" r="3" fill="${color}"/>`).join("");
  const svg = $("curve");
  svg.dataset.epochs = String(epochs.length);
  svg.dataset.steps = String(steps.length);
  svg.setAttribute(
    "aria-label",
    steps.length ? "Training loss per logged step and test accuracy per epoch" : "Training loss and test accuracy per epoch",
  );
  svg.innerHTML = `
    <line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="#98a2b3"/>
    <text x="${L - 6}" y="${T + 4}" font-size="10" text-anchor="end" fill="#1570ef">${maxLoss.toFixed(2)}</text>
    <text x="${L - 6}" y="${H - B}" font-size="10" text-anchor="end" fill="#1570ef">0</text>
    <text x="${W - R + 6}" y="${T + 4}" font-size="10" fill="#e8590c">100%</text>
    <text x="${W - R + 6}" y="${H - B}" font-size="10" fill="#e8590c">${(minAcc * 100).toFixed(0)}%</text>
    <text x="${L}" y="${H - 8}" font-size="10" fill="#667085">${xMin}</text>
    <text x="${W - R}" y="${H - 8}" font-size="10" text-anchor="end" fill="#667085">${xMax}</text>
    <text x="${(W / 2).toFixed(0)}" y="${H - 8}" font-size="11" text-anchor="middle" fill="#667085">${xLabel}</text>
    <polyline fill="none" stroke="#1570ef" stroke-width="${steps.length ? 1.5 : 2}" points="${line(loss, yLoss)}"/>
    <polyline fill="none" stroke="#e8590c" stroke-width="2" points="${line(acc, yAcc)}"/>
    ${steps.length ? "" : dots(loss, yLoss, "#1570ef")}${dots(acc, yAcc, "#e8590c")}`;
}
