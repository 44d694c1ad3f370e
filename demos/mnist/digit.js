// MNIST-exact preprocessing of a drawing: the ink's bounding box is scaled (keeping its aspect
// ratio, area-averaged so it is anti-aliased) to fit 20x20, then placed in a 28x28 frame so that
// its centre of mass sits at the centre, as LeCun et al. made the MNIST images.

/** Ink (0..255) of an RGBA canvas drawn white on black: the red channel. */
export function inkFromRGBA(rgba, width, height) {
  const ink = new Float64Array(width * height);
  for (let i = 0; i < ink.length; i++) ink[i] = rgba[i * 4];
  return ink;
}

/** The 28x28 MNIST image (values 0..255, rounded to integers) of a `width x height` ink image; null when blank. */
export function toMnist(ink, width, height) {
  let [x0, y0, x1, y1] = [width, height, -1, -1];
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      if (ink[y * width + x] > 0) {
        if (x < x0) x0 = x;
        if (x > x1) x1 = x;
        if (y < y0) y0 = y;
        if (y > y1) y1 = y;
      }
    }
  }
  if (x1 < 0) return null;
  const [bw, bh] = [x1 - x0 + 1, y1 - y0 + 1];
  const scale = 20 / Math.max(bw, bh);
  const [tw, th] = [Math.max(1, Math.round(bw * scale)), Math.max(1, Math.round(bh * scale))];
  const small = resizeArea(ink, width, x0, y0, bw, bh, tw, th);

  // Centre of mass of the scaled digit, moved to the frame's centre (14, 14).
  let [m, mx, my] = [0, 0, 0];
  for (let y = 0; y < th; y++) {
    for (let x = 0; x < tw; x++) {
      const v = small[y * tw + x];
      m += v;
      mx += v * (x + 0.5);
      my += v * (y + 0.5);
    }
  }
  const clampOffset = (o, size) => Math.min(28 - size, Math.max(0, o));
  const ox = clampOffset(Math.round(14 - mx / m), tw);
  const oy = clampOffset(Math.round(14 - my / m), th);
  const out = new Uint8Array(28 * 28);
  for (let y = 0; y < th; y++) {
    for (let x = 0; x < tw; x++) {
      out[(y + oy) * 28 + x + ox] = Math.min(255, Math.round(small[y * tw + x]));
    }
  }
  return out;
}

/** Area-averaging resize of the box (bx, by, bw, bh) of `src` (row length `stride`) to tw x th. */
function resizeArea(src, stride, bx, by, bw, bh, tw, th) {
  const [sx, sy] = [bw / tw, bh / th];
  const out = new Float64Array(tw * th);
  for (let oy = 0; oy < th; oy++) {
    const [y0, y1] = [oy * sy, (oy + 1) * sy];
    for (let ox = 0; ox < tw; ox++) {
      const [x0, x1] = [ox * sx, (ox + 1) * sx];
      let [sum, area] = [0, 0];
      for (let y = Math.floor(y0); y < Math.min(Math.ceil(y1), bh); y++) {
        const wy = Math.min(y1, y + 1) - Math.max(y0, y);
        for (let x = Math.floor(x0); x < Math.min(Math.ceil(x1), bw); x++) {
          const wx = Math.min(x1, x + 1) - Math.max(x0, x);
          sum += wx * wy * src[(by + y) * stride + bx + x];
          area += wx * wy;
        }
      }
      out[oy * tw + ox] = area > 0 ? sum / area : 0;
    }
  }
  return out;
}

/** Normalised model input, as kiln trained it: (x / 255 - 0.1307) / 0.3081. */
export function normalise(pixels) {
  const x = new Float32Array(pixels.length);
  for (let i = 0; i < x.length; i++) x[i] = (pixels[i] / 255 - 0.1307) / 0.3081;
  return x;
}
