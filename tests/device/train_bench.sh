#!/usr/bin/env bash
# Training throughput through the Learner on the GPU machine (after tests/device/build.sh):
#   mnist: `kiln train mnist --device cuda --epochs 1` at batch 64 and 256, images/s of the epoch
#          line (alternating with an older kiln binary when OLD_KILN names one: before/after);
#   gpt:   tests/bench/gpt_vs_torch.py (tokens/s against PyTorch eager, same model, fp32).
#   dist:  data-parallel scaling (2+ GPUs): `kiln train mnist --gpus G --epochs 3` at batch 64 and
#          256 per GPU, images/s of epochs 2 and 3 (epoch 1 compiles kernels) for 1 GPU, 2 GPUs
#          through NCCL, and two independent 1-GPU processes at once (what the host and GPUs give
#          without any communication); then PyTorch DDP (tests/bench/ddp_torch.py) on 1 and 2 GPUs.
# Usage (repository root): bash tests/device/train_bench.sh mnist|gpt|dist [runs]
set -u -o pipefail
source "$(dirname "$0")/env.sh"
device_bin
work="$(mktemp -d)"
runs="${2:-3}"

# images/s of each epoch line from epoch $2 on (default: the last): the new binary logs
# `samples_per_sec`, an older one `images_per_sec`.
epoch_rate() {
  python3 -c 'import json, sys
rates = [d.get("samples_per_sec", d.get("images_per_sec")) for d in map(json.loads, open(sys.argv[1]))
         if "step" not in d and "epoch" in d]
first = int(sys.argv[2]) - 1 if len(sys.argv) > 2 else len(rates) - 1
print(" ".join("%.0f" % r for r in rates[first:]) or "none")' "$@" 2>/dev/null || echo none
}

case "${1:-}" in
  mnist)
    for b in 64 256; do
      for r in $(seq "$runs"); do
        for which in new old; do
          exe="$bin/kiln"
          [ "$which" = old ] && exe="${OLD_KILN:-}"
          [ -x "$exe" ] || continue
          rm -f "$work/log.jsonl"
          (cd "$work" && "$exe" train mnist --device cuda --epochs 1 --batch-size "$b" --quiet \
            --data "$bin/mnist" --out "$work/m.safetensors" --log "$work/log.jsonl" >/dev/null 2>&1)
          echo "mnist b$b run $r $which: $(epoch_rate "$work/log.jsonl") images/s"
        done
      done
    done
    ;;
  dist)
    # cudarc opens libnccl.so; PyTorch's wheel ships only libnccl.so.2.
    nccl="$(python3 -c 'import glob, site
print(next(iter(glob.glob(s + "/nvidia/nccl/lib/libnccl.so.2")[0] for s in site.getsitepackages() if glob.glob(s + "/nvidia/nccl/lib/libnccl.so.2")), ""))')"
    [ -n "$nccl" ] && ln -sf "$nccl" "$work/libnccl.so" && export LD_LIBRARY_PATH="$work:$LD_LIBRARY_PATH"
    train() { # log gpus batch [env...]
      local log=$1 g=$2 b=$3; shift 3
      rm -f "$log"
      (cd "$work" && env "$@" "$bin/kiln" train mnist --device cuda --gpus "$g" --epochs 3 \
        --batch-size "$b" --quiet --data "$bin/mnist" --out "$log.safetensors" --log "$log" \
        >"$log.out" 2>&1) || { echo "failed: $(tail -n 3 "$log.out")"; }
    }
    for b in 64 256; do
      for r in $(seq "$runs"); do
        train "$work/one.jsonl" 1 "$b"
        train "$work/two.jsonl" 2 "$b"
        train "$work/a.jsonl" 1 "$b" CUDA_VISIBLE_DEVICES=0 & train "$work/b.jsonl" 1 "$b" CUDA_VISIBLE_DEVICES=1; wait
        echo "b$b run $r: 1 GPU $(epoch_rate "$work/one.jsonl" 2) | 2 GPUs $(epoch_rate "$work/two.jsonl" 2)" \
          "| 2 separate processes $(epoch_rate "$work/a.jsonl" 2) + $(epoch_rate "$work/b.jsonl" 2) images/s"
      done
    done
    for b in 64 256; do
      for g in 1 2; do
        echo "torch DDP $g GPU(s), b$b: $(cd "$work" && torchrun --standalone --nproc-per-node "$g" \
          "$root/tests/bench/ddp_torch.py" --batch-size "$b" --steps 300 --data "$bin/mnist" 2>&1 | tail -n 1)"
      done
    done
    ;;
  gpt)
    python3 "$root/tests/bench/gpt_vs_torch.py" --kiln-bin "$bin/kiln" --data "$bin/shakespeare"
    ;;
  *)
    echo "usage: $0 mnist|gpt|dist [runs]" >&2
    exit 2
    ;;
esac
