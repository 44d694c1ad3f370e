#!/usr/bin/env bash
# Trains candidates for the demo's committed model (demos/mnist/models) on the GPU machine and
# scores each on the MNIST test set and on digits drawn as the page draws them
# (tests/web/drawn-digits.mjs), so the committed model is chosen by both figures.
#   build machine: bash tests/device/train_demo_model.sh pack
#   GPU machine:   bash tests/device/train_demo_model.sh run     (carry devcarry/train)
# `run` writes each candidate's model and log to $OUT (or target/demo-candidates) and prints
# one line per candidate: test accuracy, drawn accuracy, seconds.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
carry="$root/devcarry/train"
case "${1:-}" in
  pack)
    cd "$root"
    cargo build --release -p kiln --features cuda --bin kiln
    rm -rf "$carry" && mkdir -p "$carry/mnist" "$carry/drawn"
    cp target/release/kiln "$carry/kiln" && strip "$carry/kiln"
    data="$(cd "$root/.." && pwd)/shared/data/mnist"
    cp "$data"/*-ubyte.gz "$carry/mnist/"
    node tests/web/drawn-digits.mjs --count 10000 --out "$carry/drawn"
    # The drawn set's training files are links to shared/; carried, they must be files.
    for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz; do
      rm -f "$carry/drawn/$f"; ln "$carry/mnist/$f" "$carry/drawn/$f" 2>/dev/null || cp "$carry/mnist/$f" "$carry/drawn/"
    done
    du -sh "$carry"
    ;;
  run)
    source "$(dirname "$0")/env.sh"
    device_libs
    out="${OUT:-$root/target/demo-candidates}"
    mkdir -p "$out"
    rm -f "$out/summary.txt"
    # name | epochs | augment  (candidates run side by side: the host prepares augmented batches)
    candidates=(
      "none-10|10|none"
      "digits-10|10|digits"
      "digits-20|20|digits"
      "strong-20|20|digits,elastic=34,rotate=15,scale=0.15,shear=12"
      "strong-30|30|digits,elastic=34,rotate=15,scale=0.15,shear=12"
    )
    for c in "${candidates[@]}"; do
      IFS='|' read -r name epochs augment <<<"$c"
      (
        t0=$(date +%s)
        "$carry/kiln" train mnist --device cuda --quiet --epochs "$epochs" --augment "$augment" \
          --data "$carry/mnist" --out "$out/$name.safetensors" --log "$out/$name.jsonl" \
          --checkpoint-dir "$out/$name.ckpt" >"$out/$name.txt" 2>&1
        secs=$(($(date +%s) - t0))
        test=$("$carry/kiln" eval "$out/$name.safetensors" --data "$carry/mnist" | tail -1)
        drawn=$("$carry/kiln" eval "$out/$name.safetensors" --data "$carry/drawn" | tail -1)
        echo "$name: epochs $epochs, augment $augment: test ${test#accuracy: }, drawn ${drawn#accuracy: }, ${secs}s"
      ) | tee -a "$out/summary.txt" &
    done
    wait
    rm -f "$out"/*.ckpt.safetensors
    ;;
  *) echo "usage: $0 pack | run" >&2; exit 2 ;;
esac
