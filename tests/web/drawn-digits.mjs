// Digits drawn as the demo page's end-to-end test draws them, without a browser: for each of the
// first N MNIST test images, the pen strokes of e2e/strokes.mjs (padStrokes, 280 px pad, 20 px
// pen) are rasterised on a 280x280 canvas as round-capped white lines on black (anti-aliased by
// 4x4 supersampling), turned into a 28x28 MNIST image by the demo's own digit.js, and written as
// an MNIST directory whose test set is the drawings (with links to the real training files):
//
//   node tests/web/drawn-digits.mjs [--count 1000] [--out target/drawn-mnist]
//   kiln eval model.safetensors --data target/drawn-mnist     # accuracy on drawn digits
import { existsSync, mkdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { inkFromRGBA, toMnist } from "../../demos/mnist/digit.js";
import { padStrokes } from "./e2e/strokes.mjs";
import { mnistDir, testImages } from "./mnist.mjs";

const PAD = 280;
const PEN = 20;
const SUB = 4; // samples per pixel along each axis

function args(argv) {
  const opts = { count: 1000, out: "target/drawn-mnist" };
  for (let i = 0; i < argv.length; i++) {
    const [key, inline] = argv[i].split("=", 2);
    const value = () => inline ?? argv[++i];
    if (key === "--count") opts.count = Number(value());
    else if (key === "--out") opts.out = value();
    else if (key === "--help" || key === "-h") {
      console.log("usage: node tests/web/drawn-digits.mjs [--count N (1000)] [--out DIR (target/drawn-mnist)]");
      process.exit(0);
    } else throw new Error(`unknown argument ${argv[i]}; expected --count N or --out DIR`);
  }
  if (!Number.isInteger(opts.count) || opts.count < 1 || opts.count > 10000) {
    throw new Error(`--count must be an integer in 1..10000, found ${opts.count}`);
  }
  return opts;
}

/**
 * Rasterises strokes (polylines in pad pixels) as round-capped, round-joined lines of width `pen`:
 * a sample is ink when it lies within pen/2 of a segment (a lone point is a dot). Returns the
 * pad's RGBA bytes, white ink on black, each pixel's grey level its covered fraction of samples.
 */
function rasterise(strokes, size = PAD, pen = PEN) {
  const n = size * SUB;
  const covered = new Uint8Array(n * n);
  const r = pen / 2;
  const r2 = r * r;
  for (const stroke of strokes) {
    const segments = stroke.length === 1 ? [[stroke[0], stroke[0]]] : stroke.slice(1).map((p, i) => [stroke[i], p]);
    for (const [[ax, ay], [bx, by]] of segments) {
      const [dx, dy] = [bx - ax, by - ay];
      const len2 = dx * dx + dy * dy;
      // Samples (at (i + 0.5) / SUB pad pixels) in the segment's bounding box grown by r.
      const lo = (v) => Math.max(0, Math.floor((v - r) * SUB));
      const hi = (v) => Math.min(n - 1, Math.ceil((v + r) * SUB));
      for (let sy = lo(Math.min(ay, by)); sy <= hi(Math.max(ay, by)); sy++) {
        const py = (sy + 0.5) / SUB;
        for (let sx = lo(Math.min(ax, bx)); sx <= hi(Math.max(ax, bx)); sx++) {
          if (covered[sy * n + sx]) continue;
          const px = (sx + 0.5) / SUB;
          const t = len2 > 0 ? Math.min(1, Math.max(0, ((px - ax) * dx + (py - ay) * dy) / len2)) : 0;
          const [ex, ey] = [px - ax - t * dx, py - ay - t * dy];
          if (ex * ex + ey * ey <= r2) covered[sy * n + sx] = 1;
        }
      }
    }
  }
  const rgba = new Uint8ClampedArray(size * size * 4);
  for (let y = 0; y < size; y++) {
    for (let x = 0; x < size; x++) {
      let c = 0;
      for (let j = 0; j < SUB; j++) for (let i = 0; i < SUB; i++) c += covered[(y * SUB + j) * n + x * SUB + i];
      const v = Math.round((255 * c) / (SUB * SUB));
      rgba.set([v, v, v, 255], (y * size + x) * 4);
    }
  }
  return rgba;
}

/** An IDX file: big-endian magic (type 0x08 = u8, rank) and dims, then the bytes. */
function idx(dims, bytes) {
  const head = Buffer.alloc(4 + 4 * dims.length);
  head.writeUInt32BE(0x0800 + dims.length, 0);
  dims.forEach((d, i) => head.writeUInt32BE(d, 4 + 4 * i));
  return Buffer.concat([head, Buffer.from(bytes)]);
}

const opts = args(process.argv.slice(2));
const { images, labels } = testImages(opts.count);
const count = labels.length;
const pixels = [];
const kept = [];
let blank = 0;
for (let k = 0; k < count; k++) {
  const image = images.slice(k * 784, (k + 1) * 784);
  const rgba = rasterise(padStrokes(image, { padSize: PAD, penWidth: PEN }));
  const digit = toMnist(inkFromRGBA(rgba, PAD, PAD), PAD, PAD);
  if (!digit) {
    blank++; // nothing traced (no pixel reached the stroke threshold)
    continue;
  }
  pixels.push(...digit);
  kept.push(labels[k]);
}

const out = resolve(opts.out);
mkdirSync(out, { recursive: true });
// kiln reads `<name>.gz` before `<name>`: clear both spellings of every file first.
for (const stem of ["t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", "train-images-idx3-ubyte", "train-labels-idx1-ubyte"]) {
  for (const name of [stem, `${stem}.gz`]) rmSync(join(out, name), { force: true });
}
writeFileSync(join(out, "t10k-images-idx3-ubyte"), idx([kept.length, 28, 28], pixels));
writeFileSync(join(out, "t10k-labels-idx1-ubyte"), idx([kept.length], kept));
const real = resolve(mnistDir());
for (const stem of ["train-images-idx3-ubyte", "train-labels-idx1-ubyte"]) {
  const name = [`${stem}.gz`, stem].find((f) => existsSync(join(real, f)));
  if (!name) throw new Error(`no ${stem}[.gz] in ${real}`);
  symlinkSync(join(real, name), join(out, name));
}
console.log(`wrote ${kept.length} drawn digits (of the first ${count} MNIST test images${blank ? `, ${blank} blank` : ""}) to ${out}`);
console.log(`accuracy on them: kiln eval MODEL --data ${opts.out}`);
