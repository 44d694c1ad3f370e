// MNIST test images for the web tests, decoded from the IDX files (the same search as the
// `kiln` command: $KILN_MNIST_DIR, else shared/data/mnist in the working directory or a parent).
import { existsSync, readFileSync } from "node:fs";
import { gunzipSync } from "node:zlib";
import { dirname, join, resolve } from "node:path";

export function mnistDir() {
  if (process.env.KILN_MNIST_DIR) return process.env.KILN_MNIST_DIR;
  for (let d = resolve(process.cwd()); ; d = dirname(d)) {
    const c = join(d, "shared", "data", "mnist");
    if (existsSync(c)) return c;
    if (dirname(d) === d) throw new Error("no shared/data/mnist found; set KILN_MNIST_DIR");
  }
}

function idx(path) {
  let b = readFileSync(path);
  if (path.endsWith(".gz")) b = gunzipSync(b);
  const rank = b[3];
  const dims = [];
  for (let i = 0; i < rank; i++) dims.push(b.readUInt32BE(4 + 4 * i));
  return { dims, data: b.subarray(4 + 4 * rank) };
}

/** The first `n` test images (Uint8 values, 784 each, flattened) and labels. */
export function testImages(n, offset = 0) {
  const dir = mnistDir();
  const im = idx(join(dir, "t10k-images-idx3-ubyte.gz"));
  const lb = idx(join(dir, "t10k-labels-idx1-ubyte.gz"));
  const images = Array.from(im.data.subarray(offset * 784, (offset + n) * 784));
  const labels = Array.from(lb.data.subarray(offset, offset + n));
  return { images, labels };
}
