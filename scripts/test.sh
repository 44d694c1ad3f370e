#!/usr/bin/env bash
# Runs every kiln test on a fresh machine (Debian + rustup's stable Rust + node/npm + python3 + gcc),
# installing what is missing first. Used by `.ci/run` and quoted in the README.
#   scripts/test.sh            everything
#   KILN_SKIP_WEB=1 scripts/test.sh   Rust only (no browser toolchain)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
start=$(date +%s)
stage() { printf '\n=== [%4ss] %s\n' "$(( $(date +%s) - start ))" "$*"; }

stage "toolchain"
source scripts/lib/ensure.sh
ensure_rust_targets
ensure_apt mesa-vulkan-drivers libvulkan1
export RUSTFLAGS="${RUSTFLAGS:-} -D warnings"

stage "format and lints"
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings

stage "kiln-core without std: wasm32 and bare metal"
cargo build -p kiln-core --no-default-features --target wasm32-unknown-unknown --locked
cargo build -p kiln-core --no-default-features --target thumbv7em-none-eabihf --locked

stage "Rust tests (CPU oracle, autodiff, nn, model file, wgpu on lavapipe, translator, CLI end to end)"
cargo test --workspace --locked

if [ -z "${KILN_SKIP_WEB:-}" ] && [ -x scripts/test-web.sh ]; then
  stage "web: wasm build, npm package, Node, browser and demo tests"
  scripts/test-web.sh
fi

stage "all tests passed"
