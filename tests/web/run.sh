#!/usr/bin/env bash
# Every web test, in order: build (scripts/build-web.sh), the Node test of the npm package, the
# fresh-Vite-project test of the packed tarball, wasm-pack's in-browser tests (CPU and WebGPU),
# and the draw-a-digit end-to-end test. Set KILN_BIN to the kiln binary for `kiln serve` and the
# logit comparison with `kiln predict` (default: target/release/kiln or target/debug/kiln).
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/build-web.sh
export PATH="$PWD/tests/web/node_modules/.bin:$PATH"

echo "--- node --test (npm package, CPU)"
node --test tests/web/node/

echo "--- fresh Vite project with the packed tarball"
node tests/web/vite/run.mjs

echo "--- wasm-pack test --headless --chrome (ops, model file, errors, leaks; CPU and WebGPU)"
(cd web && WASM_BINDGEN_TEST_TIMEOUT=${WASM_BINDGEN_TEST_TIMEOUT:-900} \
  wasm-pack test --headless --chrome --mode no-install --release)

echo "--- draw-a-digit end to end"
node tests/web/e2e-mnist.mjs
