#!/usr/bin/env bash
# Compiles every translated kernel variant (tests/device/kernels/*.cu, written on the build
# machine by `KILN_CUDA_DUMP=tests/device/kernels cargo test -p kiln-kernels --test translate
# every_planned_variant`) with nvcc for sm_90, and reports the count that compile.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
dir="${1:-$here/kernels}"
arch="${CUDA_ARCH:-sm_90}"
out="$(mktemp -d)"
command -v nvcc >/dev/null || { echo "cuda_compile: nvcc not found (add /usr/local/cuda/bin to PATH)"; exit 2; }
ls "$dir"/*.cu >/dev/null 2>&1 || { echo "cuda_compile: no .cu files in $dir"; exit 2; }
nvcc --version | tail -n 1
ok=0; bad=0
for f in "$dir"/*.cu; do
  if nvcc -arch="$arch" -std=c++17 -c "$f" -o "$out/$(basename "$f" .cu).o" 2>"$out/err.txt"; then
    ok=$((ok + 1))
  else
    bad=$((bad + 1)); echo "FAILED: $(basename "$f")"; head -n 20 "$out/err.txt"
  fi
done
echo "cuda_compile: $ok compiled, $bad failed ($arch)"
rm -rf "$out"
[ "$bad" -eq 0 ]
