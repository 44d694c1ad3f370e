// Pen strokes traced from a 28x28 MNIST image, for drawing it on the demo's pad as a person would:
// the ink is thresholded, thinned to a one-pixel skeleton (Zhang-Suen), and the skeleton is walked
// into polylines (from its end points first, then the closed loops that have none). Points are in
// MNIST pixel units (pixel centres at x + 0.5); scale them to the pad.

/** Binary ink mask of an image (values 0..255). */
export function threshold(image, level = 100) {
  return Uint8Array.from(image, (v) => (v >= level ? 1 : 0));
}

/** Zhang-Suen thinning of a 28x28 binary mask (returns a new mask). */
export function thin(mask, size = 28) {
  const m = Uint8Array.from(mask);
  const at = (x, y) => (x < 0 || y < 0 || x >= size || y >= size ? 0 : m[y * size + x]);
  for (let changed = true; changed; ) {
    changed = false;
    for (const pass of [0, 1]) {
      const remove = [];
      for (let y = 0; y < size; y++) {
        for (let x = 0; x < size; x++) {
          if (!m[y * size + x]) continue;
          // Neighbours P2..P9 clockwise from north.
          const p = [at(x, y - 1), at(x + 1, y - 1), at(x + 1, y), at(x + 1, y + 1), at(x, y + 1), at(x - 1, y + 1), at(x - 1, y), at(x - 1, y - 1)];
          const b = p.reduce((s, v) => s + v, 0);
          if (b < 2 || b > 6) continue;
          let a = 0;
          for (let i = 0; i < 8; i++) if (!p[i] && p[(i + 1) % 8]) a++;
          if (a !== 1) continue;
          const [p2, , p4, , p6, , p8] = p;
          if (pass === 0 ? p2 * p4 * p6 === 0 && p4 * p6 * p8 === 0 : p2 * p4 * p8 === 0 && p2 * p6 * p8 === 0) {
            remove.push(y * size + x);
          }
        }
      }
      for (const i of remove) m[i] = 0;
      if (remove.length) changed = true;
    }
  }
  return m;
}

const NEIGHBOURS = [
  [1, 0], [0, 1], [-1, 0], [0, -1], // 4-neighbours first: walks follow the line, not shortcuts
  [1, 1], [-1, 1], [-1, -1], [1, -1],
];

/** Polylines ([[x, y], ...], pixel centres) that cover every skeleton pixel. */
export function trace(skeleton, size = 28) {
  const on = (x, y) => x >= 0 && y >= 0 && x < size && y < size && skeleton[y * size + x] === 1;
  const seen = new Uint8Array(size * size);
  const degree = (x, y) => NEIGHBOURS.filter(([dx, dy]) => on(x + dx, y + dy)).length;
  const strokes = [];
  const walk = (x, y) => {
    const path = [[x, y]];
    seen[y * size + x] = 1;
    // Join onto ink already drawn (a branch leaving a junction starts at the junction).
    const joinFrom = NEIGHBOURS.map(([dx, dy]) => [x + dx, y + dy]).find(([u, v]) => on(u, v) && seen[v * size + u] && !(u === x && v === y));
    if (joinFrom && strokes.length) path.unshift(joinFrom);
    for (;;) {
      const [cx, cy] = path[path.length - 1];
      const next = NEIGHBOURS.map(([dx, dy]) => [cx + dx, cy + dy]).find(([u, v]) => on(u, v) && !seen[v * size + u]);
      if (!next) {
        // Close a loop or meet an earlier stroke when the walk ends next to drawn ink.
        const prev = path[path.length - 2];
        const meet = NEIGHBOURS.map(([dx, dy]) => [cx + dx, cy + dy]).find(
          ([u, v]) => on(u, v) && seen[v * size + u] && !(prev && prev[0] === u && prev[1] === v),
        );
        if (meet && path.length > 2) path.push(meet);
        break;
      }
      seen[next[1] * size + next[0]] = 1;
      path.push(next);
    }
    strokes.push(path);
  };
  // End points first (top to bottom, as people start at the top), then whatever is left (loops).
  for (const wantEnd of [true, false]) {
    for (let y = 0; y < size; y++) {
      for (let x = 0; x < size; x++) {
        if (on(x, y) && !seen[y * size + x] && (!wantEnd || degree(x, y) <= 1)) walk(x, y);
      }
    }
  }
  return strokes.map((s) => s.map(([x, y]) => [x + 0.5, y + 0.5]));
}

/** Strokes for an MNIST image (values 0..255, 784 of them). */
export function strokesOf(image) {
  return trace(thin(threshold(image)));
}

/**
 * The strokes of an image placed on a `padSize` pad drawn with a `penWidth` pen: scaled so the
 * pen is as thick, relative to the digit, as the image's own ink (ink area / skeleton length),
 * within [minScale, maxScale] pad pixels per image pixel, and centred on the pad.
 */
export function padStrokes(image, { padSize = 280, penWidth = 20, minScale = 7, maxScale = 12 } = {}) {
  const mask = threshold(image);
  const skeleton = thin(mask);
  const area = mask.reduce((s, v) => s + v, 0);
  const length = Math.max(1, skeleton.reduce((s, v) => s + v, 0));
  const thickness = Math.max(1, area / length); // image pixels
  const scale = Math.min(maxScale, Math.max(minScale, penWidth / thickness));
  const strokes = trace(skeleton);
  const xs = strokes.flat().map((p) => p[0]);
  const ys = strokes.flat().map((p) => p[1]);
  const [cx, cy] = [(Math.min(...xs) + Math.max(...xs)) / 2, (Math.min(...ys) + Math.max(...ys)) / 2];
  return strokes.map((s) => s.map(([x, y]) => [padSize / 2 + (x - cx) * scale, padSize / 2 + (y - cy) * scale]));
}
