#!/usr/bin/env bash
# The main job in one command: train the MNIST CNN natively with kiln, build the npm package and
# the draw-a-digit page, and serve www/ on localhost.
#
#   scripts/demo.sh                       train on the CPU (defaults below), build, serve
#   scripts/demo.sh --epochs 3            more epochs (98.82% measured)
#   scripts/demo.sh --device wgpu         train on another device
#   scripts/demo.sh --skip-train          keep www/models/mnist.safetensors as it is
#   scripts/demo.sh --port 8000           serve elsewhere
#   scripts/demo.sh --no-serve            train and build only
#
# Defaults: 2 epochs over the 60,000 training images (batch 64, Adam 1e-3): 98.79% test accuracy
# (seed 0), about 6 minutes on 2 free cores (~345 images/s measured with 2 threads).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

EPOCHS=2
DEVICE=cpu
PORT=8080
LIMIT=
TRAIN=1
SERVE=1
while [ $# -gt 0 ]; do
  case "$1" in
    --epochs) EPOCHS=$2; shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    --port) PORT=$2; shift 2 ;;
    --limit) LIMIT=$2; shift 2 ;;
    --skip-train) TRAIN=; shift ;;
    --no-serve) SERVE=; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
done

start=$(date +%s)
stage() { printf '\n=== [%4ss] %s\n' "$(( $(date +%s) - start ))" "$*"; }

stage "toolchain"
if ! command -v cargo >/dev/null 2>&1; then
  [ -x "$HOME/.cargo/bin/cargo" ] || curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  export PATH="$HOME/.cargo/bin:$PATH"
fi
features=()
[ "$DEVICE" = cuda ] && features=(--features cuda)
cargo build --release --locked -p kiln --bin kiln "${features[@]}"
KILN="${CARGO_TARGET_DIR:-$ROOT/target}/release/kiln"

mkdir -p www/models
if [ -n "$TRAIN" ]; then
  stage "train: kiln train mnist --device $DEVICE --epochs $EPOCHS"
  args=(train mnist --device "$DEVICE" --epochs "$EPOCHS"
        --out www/models/mnist.safetensors --log www/models/mnist-train.jsonl
        --checkpoint "${CARGO_TARGET_DIR:-$ROOT/target}/mnist.ckpt.safetensors")
  [ -n "$LIMIT" ] && args+=(--limit "$LIMIT")
  "$KILN" "${args[@]}"
  "$KILN" eval www/models/mnist.safetensors | tail -1
fi

stage "web: npm package and page"
scripts/build-web.sh

if [ -n "$SERVE" ]; then
  stage "serve www/ (Ctrl-C to stop)"
  exec "$KILN" serve www --port "$PORT"
fi
