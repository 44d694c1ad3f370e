#!/usr/bin/env bash
# Runs every kiln test on a fresh machine (Debian + rustup's stable Rust + node/npm + python3 + gcc),
# installing what is missing first. Used by `.ci/run` and quoted in the README.
#   scripts/test.sh                    everything
#   KILN_SKIP_WEB=1 scripts/test.sh    Rust only (no browser toolchain)
# GPU-only suites (CUDA, and wgpu when no Vulkan adapter exists) print a notice and skip.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
# Disk is printed at each stage: CI machines can be short of it.
stage() { printf '\n=== [%4ss] %s (disk free: %s)\n' "$(($(date +%s) - start))" "$*" "$(df -h --output=avail . | tail -1 | tr -d ' ')"; }
# Incremental caches only help repeated local builds; in CI they are gigabytes of dead weight.
if [ "${CI:-}" = true ]; then export CARGO_INCREMENTAL=0; fi

stage "toolchain"
source scripts/lib/ensure.sh
ensure_rust_targets
# lavapipe: Vulkan on the CPU, so the wgpu backend's conformance suite runs without a GPU.
ensure_apt mesa-vulkan-drivers libvulkan1

stage "format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
cargo clippy -p kiln --features cuda --all-targets -- -D warnings

stage "kiln-core without std: wasm32 and bare metal"
cargo build -p kiln-core --no-default-features --target wasm32-unknown-unknown
cargo build -p kiln-core --no-default-features --target thumbv7em-none-eabihf

stage "Rust tests: CPU oracle, autodiff, nn, model file, CLI, wgpu on lavapipe, translator"
cargo test --workspace
# The CUDA backend builds in CI (no GPU); its tests skip with a notice.
cargo test -p kiln --features cuda

if [ "${KILN_SKIP_WEB:-0}" = 1 ]; then
  stage "web tests skipped (KILN_SKIP_WEB=1)"
else
  stage "web: wasm build and size budget, Node, Vite, wasm-pack in headless Chromium, draw-a-digit"
  bash scripts/test-web.sh
fi

stage "all tests passed"
