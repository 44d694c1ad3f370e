#!/usr/bin/env bash
# Runs every kiln test on a fresh machine (Debian + rustup's stable Rust + node/npm + python3 + gcc),
# installing what is missing first. Used by `.ci/run` and quoted in the README.
#   scripts/test.sh                    everything
#   KILN_SKIP_WEB=1 scripts/test.sh    Rust only (no browser toolchain)
#   KILN_FRESH_INSTALLS=1 scripts/test.sh   (what .ci/run does) first installs every tool the
#                                      scripts install into throwaway places, as on a machine that
#                                      has none of them, and fails when one fails; the rest of the
#                                      run then uses those tools, so the proof costs no extra build
# GPU-only suites (CUDA, ROCm, and wgpu when no Vulkan adapter exists) print a notice and skip.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
# Disk is printed at each stage: CI machines can be short of it.
stage() { printf '\n=== [%4ss] %s (disk free: %s)\n' "$(($(date +%s) - start))" "$*" "$(df -h --output=avail . | tail -1 | tr -d ' ')"; }
# Incremental caches only help repeated local builds; in CI they are gigabytes of dead weight.
if [ "${CI:-}" = true ]; then export CARGO_INCREMENTAL=0; fi

if [ "${KILN_FRESH_INSTALLS:-0}" = 1 ]; then
  # Nothing installed earlier on this machine may stand in for an install: cargo tools go to an
  # empty root and npm downloads through an empty cache (the crates' sources may come from
  # cargo's download cache: they are the same files).
  fresh=$(mktemp -d "${TMPDIR:-/tmp}/kiln-fresh.XXXXXX")
  trap 'rm -rf "$fresh"' EXIT
  # The threaded wasm build's pinned nightly goes into an empty rustup home of its own.
  export KILN_TOOLS=$fresh/tools npm_config_cache=$fresh/npm-cache KILN_RUSTUP_HOME=$fresh/rustup
  rm -rf tests/web/node_modules
fi
stage "toolchain${KILN_FRESH_INSTALLS:+ (installs from nothing: KILN_TOOLS=${KILN_TOOLS:-})}"
source scripts/lib/ensure.sh
ensure_rust_targets
# lavapipe: Vulkan on the CPU, so the wgpu backend's conformance suite runs without a GPU.
ensure_apt mesa-vulkan-drivers libvulkan1
# hipcc (clang-15, ROCm 5.2's device libraries and HIP headers; about 70 MB, 25 s): every planned
# kernel is compiled as HIP for AMD GPUs (kernels/tests/hip_compile.rs), which must not skip here.
hip_started=$(date +%s)
ensure_apt --no-install-recommends hipcc
echo "hipcc: installed in $(($(date +%s) - hip_started)) s"
export KILN_REQUIRE_HIPCC=1
if [ "${KILN_FRESH_INSTALLS:-0}" = 1 ]; then
  check_apt_from_nothing mesa-vulkan-drivers libvulkan1 chromium chromium-driver
  check_apt_from_nothing --no-install-recommends hipcc
  ensure_wasm_bindgen
  ensure_npm_tools
  ensure_nightly
  echo "nightly: $(nightly_cargo --version) (RUSTUP_HOME=$KILN_RUSTUP_HOME)"
  for tool in wasm-bindgen wasm-bindgen-test-runner wasm-opt; do
    echo "$tool: $(command -v "$tool") ($("$tool" --version | head -1))"
  done
fi

stage "format and lints"
cargo fmt --all -- --check
# kiln-web's text feature (TextModel, the text module's) is off in every other build here.
cargo clippy --workspace --all-targets --features kiln-web/text -- -D warnings
# Both GPU backends and NCCL in one pass (the code without them was linted just above).
cargo clippy -p kiln --features cuda,rocm,nccl --all-targets -- -D warnings
# The web modules without one of kiln-web's default features: CPU only, WebGPU only (no CPU
# kernels); the page builds them without -D warnings.
cargo clippy -p kiln-web --target wasm32-unknown-unknown --no-default-features --features cpu -- -D warnings
cargo clippy -p kiln-web --target wasm32-unknown-unknown --no-default-features --features webgpu -- -D warnings

stage "kiln-core and kiln-onnx without std: wasm32 and bare metal"
# kiln-core alone also without its CPU kernels; kiln-onnx turns them on.
cargo build -p kiln-core --no-default-features --target wasm32-unknown-unknown
cargo build -p kiln-core --no-default-features --target thumbv7em-none-eabihf
cargo build -p kiln-onnx --no-default-features --target wasm32-unknown-unknown

stage "Rust tests: CPU oracle, autodiff, nn, model file, CLI, wgpu on lavapipe, translator, CUDA/HIP/NCCL without their GPUs"
# One build with the CUDA (and NCCL) and HIP backends in: without their GPUs their tests check
# the errors (and compile translated kernels with hipRTC), and the GPU tests skip with a notice.
# A second test build without them took 5 minutes of a cold CI; the code without the features
# (their "rebuild with `--features ...`" errors) was linted above.
cargo test --workspace --features kiln/cuda,kiln/rocm,kiln/nccl

if [ "${KILN_SKIP_WEB:-0}" = 1 ]; then
  stage "web tests skipped (KILN_SKIP_WEB=1)"
else
  stage "web: wasm build and size budget, Node, Vite, browser tests in headless Chromium, draw-a-digit"
  bash scripts/test-web.sh
fi

stage "all tests passed"
