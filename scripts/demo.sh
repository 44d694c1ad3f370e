#!/usr/bin/env bash
# The main job in one command: train the MNIST CNN natively with kiln, build the npm package and
# the draw-a-digit page, and serve www/ on localhost, printing the URL.
#
#   scripts/demo.sh                       train on the CPU (2 epochs), build, serve on :8080
#   scripts/demo.sh --epochs 3            more epochs (the committed model: 3 epochs, 98.82%)
#   scripts/demo.sh --device wgpu         train on another device (cpu, wgpu, cuda)
#   scripts/demo.sh --limit 2000          train on the first N training images only (a quick try)
#   scripts/demo.sh --skip-train          keep www/models/mnist.safetensors as it is (the committed
#                                         model works before any training)
#   scripts/demo.sh --skip-web            keep the npm package and page already built in www/
#   scripts/demo.sh --port 8000           serve elsewhere (0: any free port)
#   scripts/demo.sh --no-serve            train and build only
# Env: KILN_BIN=path/to/kiln uses that binary instead of building target/release/kiln.
#
# Default: 2 epochs over the 60,000 training images (batch 64, Adam 1e-3, cosine schedule). The
# committed 3-epoch run (www/models/mnist-train.jsonl) took 155-178 s per epoch on this project's
# 2-core machine (336-387 images/s) and was at 98.79% test accuracy after its 2nd epoch.
# Prerequisites (see README): rustup's stable Rust (installed here when cargo is missing),
# node/npm, gcc; scripts/build-web.sh installs the wasm tools, npm tools and Chromium it needs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

EPOCHS=2
DEVICE=cpu
PORT=8080
LIMIT=
TRAIN=1
WEB=1
SERVE=1
need_value() { [ $# -ge 2 ] && [ -n "$2" ] || { echo "demo.sh: $1 needs a value (see --help)" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
  case "$1" in
    --epochs) need_value "$@"; EPOCHS=$2; shift 2 ;;
    --device) need_value "$@"; DEVICE=$2; shift 2 ;;
    --port) need_value "$@"; PORT=$2; shift 2 ;;
    --limit) need_value "$@"; LIMIT=$2; shift 2 ;;
    --skip-train) TRAIN=; shift ;;
    --skip-web) WEB=; shift ;;
    --no-serve) SERVE=; shift ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo.sh: unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
done

start=$(date +%s)
stage() { printf '\n=== [%4ss] %s\n' "$(( $(date +%s) - start ))" "$*"; }

stage "toolchain"
for tool in node npm; do
  command -v "$tool" >/dev/null 2>&1 || { echo "demo.sh: $tool is missing; install Node.js 18 or newer (e.g. apt-get install nodejs npm)" >&2; exit 1; }
done
if [ -n "${KILN_BIN:-}" ]; then
  KILN=$KILN_BIN
  [ -x "$KILN" ] || { echo "demo.sh: KILN_BIN=$KILN is not an executable" >&2; exit 1; }
  echo "using $KILN"
else
  if ! command -v cargo >/dev/null 2>&1; then
    [ -x "$HOME/.cargo/bin/cargo" ] || curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
  command -v cc >/dev/null 2>&1 || { echo "demo.sh: a C compiler (gcc) is needed to build kiln" >&2; exit 1; }
  features=()
  [ "$DEVICE" = cuda ] && features=(--features cuda)
  cargo build --release --locked -p kiln --bin kiln "${features[@]}"
  KILN="${CARGO_TARGET_DIR:-$ROOT/target}/release/kiln"
fi

mkdir -p www/models
if [ -n "$TRAIN" ]; then
  stage "train: kiln train mnist --device $DEVICE --epochs $EPOCHS${LIMIT:+ --limit $LIMIT}"
  args=(train mnist --device "$DEVICE" --epochs "$EPOCHS"
        --out www/models/mnist.safetensors --log www/models/mnist-train.jsonl
        --checkpoint "${CARGO_TARGET_DIR:-$ROOT/target}/mnist.ckpt.safetensors")
  [ -n "$LIMIT" ] && args+=(--limit "$LIMIT")
  "$KILN" "${args[@]}"
  "$KILN" eval www/models/mnist.safetensors | tail -1
elif [ ! -f www/models/mnist.safetensors ]; then
  echo "demo.sh: --skip-train, but www/models/mnist.safetensors does not exist; run without --skip-train" >&2
  exit 1
fi

if [ -n "$WEB" ]; then
  stage "web: npm package and page (scripts/build-web.sh)"
  scripts/build-web.sh
elif [ ! -f www/index.html ] || [ ! -f www/vendor/kiln-ml/index.js ]; then
  echo "demo.sh: --skip-web, but www/ has no built page; run without --skip-web" >&2
  exit 1
fi

if [ -n "$SERVE" ]; then
  stage "serve www/ (Ctrl-C to stop)"
  echo "open the URL below and draw a digit"
  exec "$KILN" serve www --port "$PORT"
fi
stage "done: serve it with $KILN serve www"
