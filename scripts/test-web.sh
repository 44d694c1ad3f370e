#!/usr/bin/env bash
# kiln's whole web test stage, as CI runs it on a fresh Debian machine (rustup's stable Rust,
# node/npm, python3, gcc; root or sudo). Installs only what is missing, then:
#   1. scripts/build-web.sh: the npm package (cargo + wasm-bindgen --target web, wasm-opt -Oz,
#      size budget, npm pack) and the draw-a-digit page in www/
#      then node npm/check-types.mjs: npm/index.d.ts against what the wasm module exports
#   2. node --test tests/web/node/        the built package in Node (the CPU-only module)
#   3. node tests/web/vite/run.mjs        the packed tarball in a fresh Vite project, in Chromium
#   3b. node tests/web/threads.mjs        the module init() picks: the threaded build on a cross-
#                                         origin isolated page (more than 1 thread), the main
#                                         module elsewhere, the CPU-only one with webgpu: false;
#                                         same results as float64 loops and as the main module
#   4. cargo test --target wasm32 (wasm-bindgen-test-runner driving headless Chromium through
#      chromedriver): web/tests/browser.rs: ops on WebGPU and the CPU, model files, errors,
#      Device.auto, 10,000-run leak checks
#   5. node tests/web/e2e-mnist.mjs       the draw-a-digit page end to end (issue 6's test)
#   6. node tests/web/e2e-text.mjs        the text demo: greedy text in the page (CPU, WebGPU)
#                                         equals `kiln generate --temperature 0`'s (issue 17)
#   7. node tests/web/program.mjs         `kiln compile`'s MNIST program replayed by npm/program.js
#                                         alone (no wasm), against the CPU module, and mnist-8's
#                                         (imported from ONNX) against its stored outputs (issue 18)
#
#   scripts/test-web.sh
# Env: KILN_BIN            the kiln binary for steps 5 to 7 (default target/release/kiln, else
#                          target/debug/kiln, else a release build of it)
#      KILN_WEB_SKIP_E2E=1 stop after step 4 (no kiln binary or trained model needed)
#      WASM_BINDGEN_TEST_TIMEOUT  seconds per browser test (default 900)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
source scripts/lib/ensure.sh
start=$(date +%s)
stage() { printf '\n=== [%4ss] web: %s\n' "$(( $(date +%s) - start ))" "$*"; }

stage "toolchain (installing only what is missing)"
ensure_rust_targets
ensure_apt chromium chromium-driver
ensure_wasm_bindgen
ensure_npm_tools
export CHROMIUM=${CHROMIUM:-/usr/lib/chromium/chromium}

stage "build: scripts/build-web.sh"
scripts/build-web.sh

stage "types: node npm/check-types.mjs (npm/index.d.ts against what the wasm module exports)"
node npm/check-types.mjs

stage "node --test tests/web/node/ (the npm package in Node, CPU)"
node --test --test-reporter=spec tests/web/node/

stage "fresh Vite project with the packed tarball (headless Chromium)"
node tests/web/vite/run.mjs

stage "modules: the threaded, main and CPU-only builds in the page (tests/web/threads.mjs)"
node tests/web/threads.mjs

stage "browser tests: cargo test --target wasm32-unknown-unknown --test browser (headless Chromium)"
# wasm-bindgen-test-runner reads web/webdriver.json (Chromium's flags) from the working directory.
(cd web && CHROMEDRIVER=${CHROMEDRIVER:-$(command -v chromedriver)} \
  WASM_BINDGEN_TEST_TIMEOUT=${WASM_BINDGEN_TEST_TIMEOUT:-900} \
  CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner \
  cargo test --release --target wasm32-unknown-unknown --test browser)

if [ -n "${KILN_WEB_SKIP_E2E:-}" ]; then
  stage "done (e2e skipped: KILN_WEB_SKIP_E2E is set)"
  exit 0
fi

stage "draw-a-digit end to end (tests/web/e2e-mnist.mjs)"
if [ -z "${KILN_BIN:-}" ]; then
  target="${CARGO_TARGET_DIR:-$ROOT/target}"
  if [ -x "$target/release/kiln" ]; then KILN_BIN="$target/release/kiln"
  elif [ -x "$target/debug/kiln" ]; then KILN_BIN="$target/debug/kiln"
  else
    cargo build --release --locked -p kiln --bin kiln
    KILN_BIN="$target/release/kiln"
  fi
fi
export KILN_BIN
node tests/web/e2e-mnist.mjs

stage "text demo end to end (tests/web/e2e-text.mjs)"
node tests/web/e2e-text.mjs

stage "compiled programs in the page (tests/web/program.mjs)"
node tests/web/program.mjs

stage "all web tests passed"
