// What the Node tests share: seeded inputs and a tolerant comparison.
import assert from "node:assert/strict";

/** Deterministic uniform values in [-bound, bound) (mulberry32). */
export function rand(n, seed, bound = 1) {
  const out = new Float32Array(n);
  let a = seed >>> 0;
  for (let i = 0; i < n; i++) {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    out[i] = ((((t ^ (t >>> 14)) >>> 0) / 4294967296) * 2 - 1) * bound;
  }
  return out;
}

/** Elementwise `actual ≈ expected`, within `tol` relative to 1 + |expected|. */
export function close(actual, expected, tol = 1e-5) {
  assert.equal(actual.length, expected.length, "length");
  for (let i = 0; i < expected.length; i++) {
    const err = Math.abs(actual[i] - expected[i]);
    assert.ok(err <= tol * (1 + Math.abs(expected[i])), `element ${i}: ${actual[i]} vs ${expected[i]}`);
  }
}
