#!/usr/bin/env bash
# Builds the npm package kiln-ml (npm/) from web/ and assembles the draw-a-digit page in www/,
# installing what the build needs when it is missing: the wasm32 target, wasm-pack,
# wasm-bindgen-cli (the version web's wasm-bindgen is pinned to) and the npm tools in tests/web
# (binaryen's wasm-opt). scripts/test-web.sh runs the web tests on top of this.
#   scripts/build-web.sh           release build (wasm-opt -Oz), size check, npm pack, page in www/
#   KILN_WEB_DEV=1 scripts/build-web.sh        unoptimised, faster to build
#   KILN_WEB_CPU_ONLY=1 scripts/build-web.sh   without the WebGPU backend (smaller, faster to build)
#   KILN_WEB_OPT_LEVEL=z scripts/build-web.sh  rustc opt-level for the release .wasm (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
source scripts/lib/ensure.sh

step() { printf '\n--- %s\n' "$*"; }

step "toolchain"
ensure_rust_targets
ensure_cargo_bin wasm-pack 0.15.1 wasm-pack --locked
ensure_cargo_bin wasm-bindgen "$(sed -n 's/^wasm-bindgen = "=\([0-9.]*\)".*/\1/p' Cargo.toml)" wasm-bindgen-cli --locked
if [ ! -x tests/web/node_modules/.bin/wasm-opt ]; then
  (cd tests/web && npm ci --no-audit --no-fund)
fi
# npm's binaryen first on PATH: Debian's wasm-opt is too old for wasm-bindgen's output.
export PATH="$ROOT/tests/web/node_modules/.bin:$PATH"

step "wasm: web/ -> npm/dist"
profile=--release
[ -n "${KILN_WEB_DEV:-}" ] && profile=--dev
rm -rf npm/dist
cargo_args=()
[ -n "${KILN_WEB_CPU_ONLY:-}" ] && cargo_args+=(--no-default-features)
if [ -z "${KILN_WEB_DEV:-}" ]; then
  # Set here rather than in the workspace profile so native release builds stay as they are.
  # Measured (wasm-opt -Oz, gzip -9, WebGPU + CPU): opt-level z + fat LTO 293.5 KiB, MNIST CNN
  # prediction on the CPU path 5.7 ms; opt-level 3 + fat LTO with simd128 (.cargo/config.toml)
  # 385.4 KiB, 2.2 ms. The budget is 400 KiB; z stays available through KILN_WEB_OPT_LEVEL=z.
  export CARGO_PROFILE_RELEASE_OPT_LEVEL=${KILN_WEB_OPT_LEVEL:-3}
  export CARGO_PROFILE_RELEASE_LTO=fat
  export CARGO_PROFILE_RELEASE_CODEGEN_UNITS=1
  export CARGO_PROFILE_RELEASE_PANIC=abort
  # Dependencies (wgpu's web layer, serde, safetensors...) are built for size: they are not the
  # hot loops. kiln's own crates and matrixmultiply (the CPU backend's GEMM) keep the opt-level
  # above. Measured at 70576ed: 401.9 KiB gzipped with every crate at 3.
  if [ -z "${KILN_WEB_OPT_LEVEL:-}" ]; then
    cargo_args+=(--config 'profile.release.package."*".opt-level="z"'
      --config 'profile.release.package.matrixmultiply.opt-level=3')
  fi
fi
wasm-pack build web $profile --mode no-install --target web --no-pack \
  --out-dir ../npm/dist --out-name kiln_web -- "${cargo_args[@]}"
rm -f npm/dist/.gitignore npm/dist/*.d.ts npm/dist/kiln_web_bg.wasm.d.ts
wasm=npm/dist/kiln_web_bg.wasm
if [ -z "${KILN_WEB_DEV:-}" ]; then
  before=$(stat -c %s "$wasm")
  wasm-opt -Oz --strip-debug --strip-producers --enable-bulk-memory --enable-nontrapping-float-to-int \
    --enable-sign-ext --enable-mutable-globals --enable-reference-types --enable-multivalue \
    "$wasm" -o "$wasm.opt"
  mv "$wasm.opt" "$wasm"
  echo "wasm-opt -Oz: $before -> $(stat -c %s "$wasm") bytes"
  node npm/check-size.mjs
fi

step "npm pack"
rm -f npm/kiln-ml-*.tgz
(cd npm && npm pack --silent >/dev/null)
tarball=$(ls "$ROOT"/npm/kiln-ml-*.tgz)
echo "$tarball"

step "page: demos/mnist -> www/"
mkdir -p www/models www/vendor
cp demos/mnist/index.html demos/mnist/app.js demos/mnist/digit.js demos/mnist/style.css www/
rm -rf www/vendor/kiln-ml
mkdir -p www/vendor/kiln-ml
tar -xzf "$tarball" -C www/vendor/kiln-ml --strip-components=1
[ -f www/models/mnist.safetensors ] || echo "note: www/models/mnist.safetensors is missing; run: kiln train mnist --out www/models/mnist.safetensors --log www/models/mnist-train.jsonl"
echo "www/ is ready: serve it with 'kiln serve www'"
