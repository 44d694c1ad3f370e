#!/usr/bin/env bash
# Training throughput through the Learner on the GPU machine (after tests/device/build.sh):
#   mnist: `kiln train mnist --device cuda --epochs 1` at batch 64 and 256, images/s of the epoch
#          line (alternating with an older kiln binary when OLD_KILN names one: before/after);
#   gpt:   tests/bench/gpt_vs_torch.py (tokens/s against PyTorch eager, same model, fp32).
# Usage (repository root): bash tests/device/train_bench.sh mnist|gpt [runs]
set -u -o pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
if [ ! -d "$root/devcarry/cuda" ] && [ -f "$root/devcarry/cuda.tar.xz" ]; then
  tar -C "$root/devcarry" -xJf "$root/devcarry/cuda.tar.xz"
fi
bin="$root/devcarry/cuda"
wheels="$(python3 -c 'import glob, site
print(":".join(sorted({d for s in site.getsitepackages() for d in glob.glob(s + "/nvidia/*/lib")})))' 2>/dev/null)"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:${wheels}:${LD_LIBRARY_PATH:-}"
work="$(mktemp -d)"
runs="${2:-3}"

# images/s of one epoch: the new binary logs `samples_per_sec`, an older one `images_per_sec`.
epoch_rate() {
  python3 -c 'import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if "step" not in d: print(d.get("samples_per_sec", d.get("images_per_sec")))' "$1" | tail -n 1
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
  gpt)
    python3 "$root/tests/bench/gpt_vs_torch.py" --kiln-bin "$bin/kiln" --data "$bin/shakespeare"
    ;;
  *)
    echo "usage: $0 mnist|gpt [runs]" >&2
    exit 2
    ;;
esac
