#!/usr/bin/env bash
# The main job in one command: train the MNIST CNN natively with kiln, build the npm package and
# the draw-a-digit page, and serve www/ on localhost, printing the URL.
#
#   scripts/demo.sh                       train on the CPU (EPOCHS below), build, serve on :8080
#   scripts/demo.sh --epochs 3            more epochs
#   scripts/demo.sh --augment none        train without data augmentation (default: digits)
#   scripts/demo.sh --device wgpu         train on another device (cpu, wgpu, cuda)
#   scripts/demo.sh --limit 2000          train on the first N training images only (a quick try)
#   scripts/demo.sh --skip-train          serve the committed model (demos/mnist/models), no training
#   scripts/demo.sh --skip-web            keep the npm package and page already built in www/
#   scripts/demo.sh --port 8000           serve elsewhere (0: any free port)
#   scripts/demo.sh --no-serve            train and build only
# Env: KILN_BIN=path/to/kiln uses that binary instead of building target/release/kiln.
#
# The web build (npm package and page, scripts/build-web.sh with KILN_WEB_QUICK=1: no wasm-opt,
# which is minutes of JavaScript for a page served from localhost) runs in the background while
# the model trains; its log is target/demo-web.log. The trained model and its log go to
# www/models/ (ignored by git: the committed model in demos/mnist/models stays as it is).
# Prerequisites (see README): rustup's stable Rust (installed here when cargo is missing),
# node/npm, gcc; the wasm tools are installed into target/tools on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

EPOCHS=2
AUGMENT=digits
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
    --augment) need_value "$@"; AUGMENT=$2; shift 2 ;;
    --port) need_value "$@"; PORT=$2; shift 2 ;;
    --limit) need_value "$@"; LIMIT=$2; shift 2 ;;
    --skip-train) TRAIN=; shift ;;
    --skip-web) WEB=; shift ;;
    --no-serve) SERVE=; shift ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo.sh: unknown option: $1 (see --help)" >&2; exit 2 ;;
  esac
done

start=$(date +%s)
stage() { printf '\n=== [%4ss] %s\n' "$(( $(date +%s) - start ))" "$*"; }

stage "toolchain"
for tool in node npm; do
  command -v "$tool" >/dev/null 2>&1 || { echo "demo.sh: $tool is missing; install Node.js 18 or newer (e.g. apt-get install nodejs npm)" >&2; exit 1; }
done
if ! command -v cargo >/dev/null 2>&1; then
  [ -x "$HOME/.cargo/bin/cargo" ] || curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
  export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cc >/dev/null 2>&1 || { echo "demo.sh: a C compiler (gcc) is needed to build kiln" >&2; exit 1; }
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
mkdir -p "$TARGET"
web_pid=
# A failed run takes its background build with it.
trap 'if [ -n "$web_pid" ]; then pkill -P "$web_pid"; kill "$web_pid"; fi 2>/dev/null' EXIT
if [ -n "$WEB" ]; then
  stage "web: npm package and page, in the background (log: $TARGET/demo-web.log)"
  KILN_WEB_QUICK=1 nice scripts/build-web.sh >"$TARGET/demo-web.log" 2>&1 &
  web_pid=$!
elif [ ! -f www/index.html ] || [ ! -f www/vendor/kiln-ml/index.js ]; then
  echo "demo.sh: --skip-web, but www/ has no built page; run without --skip-web" >&2
  exit 1
fi

if [ -n "${KILN_BIN:-}" ]; then
  KILN=$KILN_BIN
  [ -x "$KILN" ] || { echo "demo.sh: KILN_BIN=$KILN is not an executable" >&2; exit 1; }
  echo "using $KILN"
else
  features=()
  [ "$DEVICE" = cuda ] && features=(--features cuda)
  cargo build --release --locked -p kiln --bin kiln "${features[@]}"
  KILN="${CARGO_TARGET_DIR:-$ROOT/target}/release/kiln"
fi

# Trained into target/ and copied to www/models once the page is built (the page build puts the
# committed model there).
model=demos/mnist/models
if [ -n "$TRAIN" ]; then
  stage "train: kiln train mnist --device $DEVICE --epochs $EPOCHS --augment $AUGMENT${LIMIT:+ --limit $LIMIT}"
  model=$TARGET/demo-model
  mkdir -p "$model"
  rm -f "$model/mnist-train.jsonl"
  args=(train mnist --device "$DEVICE" --epochs "$EPOCHS" --augment "$AUGMENT"
        --out "$model/mnist.safetensors" --log "$model/mnist-train.jsonl"
        --checkpoint-dir "$model/mnist.ckpt")
  [ -n "$LIMIT" ] && args+=(--limit "$LIMIT")
  "$KILN" "${args[@]}"
  "$KILN" eval "$model/mnist.safetensors" | tail -1
fi

if [ -n "$web_pid" ]; then
  stage "web: waiting for the background build"
  status=0
  wait "$web_pid" || status=$?
  web_pid=
  if [ "$status" -ne 0 ]; then
    tail -30 "$TARGET/demo-web.log" >&2
    echo "demo.sh: the web build failed; its log is $TARGET/demo-web.log" >&2
    exit 1
  fi
  grep -E '^--- \[' "$TARGET/demo-web.log" | tail -1
fi
mkdir -p www/models
cp "$model/mnist.safetensors" "$model/mnist-train.jsonl" www/models/
echo "www/models: $model/mnist.safetensors"

if [ -n "$SERVE" ]; then
  stage "serve www/ (Ctrl-C to stop)"
  echo "open the URL below and draw a digit (the text demo is at /text/)"
  exec "$KILN" serve www --port "$PORT"
fi
stage "done: serve it with $KILN serve www"
